"""A closed loop of clients: each sends its next request when its last one ends (``ArrivalSpec.concurrency``).

This is how benchmark clients hold a concurrency (``vllm bench serve --max-concurrency``, ``sglang.bench_serving
--max-concurrency``, ``genai-perf --concurrency``) and how a fixed number of users or agents load a service: the
arrival rate is not given but follows from how fast the replicas answer (Little's law: clients = throughput x
(time in the system + think time)).

The requests are drawn as for an open loop (sim.requests.generate: lengths, sessions) and sent in order. Client k
sends its first at k x ``ramp_s`` / ``clients`` (all at t = 0 with ramp_s 0, as a benchmark client does; clients
that start together and draw equal lengths stay in step, a convoy whose prompts queue together every round). When a
request ends (completed, rejected, or failed after its retries) its client sends the next one ``reply_s + think``
seconds later: ``reply_s``, the engine's front-end latency, brings the last token to the client (the simulator adds
it to every finish, sim.cluster.with_front_end); ``think`` is ``session_think_s`` before the next turn of the same
session (a prefix key >= 0: a session's turns go out one after another, each after the previous answer) and
``think_s`` before a new request or session. A failed or rejected turn does not end its session: the client goes on
with the next turn.

The cluster numbers requests in the order they are sent (sim.ledger), so its arrival times stay sorted:
``issue(slot, t)`` copies the next due request's fields into ledger slot ``slot``.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from .ledger import Ledger


def next_turns(prefix_key: np.ndarray) -> np.ndarray:
    """For each request, the index of the next request of its session (the next one with its prefix key >= 0), -1
    for the last turn and for requests without a session."""
    key = np.asarray(prefix_key, np.int64)
    nxt = np.full(key.size, -1, np.int64)
    order = np.lexsort((np.arange(key.size), key))   # by key, then by position
    k = key[order]
    same = (k[1:] == k[:-1]) & (k[:-1] >= 0)
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


class ClosedLoop:
    """The clients of a closed loop over the ledger's requests, in their order (see the module docstring); times
    in seconds. ``asked`` clients are asked for; as many run as there are sessions (lone requests count as one) to
    start (``clients``)."""

    def __init__(self, ledger: Ledger, too_big: list[bool], asked: int, think_s: float, session_think_s: float,
                 reply_s: float) -> None:
        self.ledger = ledger
        self.too_big = too_big
        self.think_s, self.session_think_s, self.reply_s = float(think_s), float(session_think_s), float(reply_s)
        self.ramp_s = self.cycle_s = 0.0
        nxt = next_turns(np.asarray(ledger.prefix_key, np.int64))
        self.next_turn: list[int] = nxt.tolist()
        self.sessions = bool(np.any(nxt >= 0))   # some request has a next turn
        has_previous = np.zeros(nxt.size, bool)
        has_previous[nxt[nxt >= 0]] = True
        self.firsts = deque(np.flatnonzero(~has_previous).tolist())   # session starts (and lone requests), in order
        self.starts = len(self.firsts)
        self.asked = int(asked)
        self.clients = min(self.asked, self.starts)
        # (ledger list, its values in the requests' own order) for each field issue() copies (the ledger's lists are
        # overwritten slot by slot); an empty field (no cached tokens, no KV rule) is left out once, here
        self.copies = [(getattr(ledger, name), list(getattr(ledger, name))) for name in
                       ("input_tokens", "output_tokens", "prefix_key", "shared_tokens", "cached_tokens",
                        "reservation_bytes") if getattr(ledger, name)]
        self.too_big_src = list(too_big)
        self.source: list[int] = [-1] * ledger.n   # ledger slot -> index in ``requests``
        self.pending: list[tuple[float, int, int]] = []   # (send time, order, request index)
        self.order = 0

    @property
    def wait_s(self) -> float:
        """A client's usual wait between an answer's last engine step and its next request: the front end's, and
        the think time before a session's next turn (sessions) or before a new request."""
        return self.reply_s + (self.session_think_s if self.sessions else self.think_s)

    def start(self, ramp_s: float, cycle_s: float) -> None:
        """Client k sends its first request at k x ``ramp_s`` / clients; ``cycle_s``: about how long a client takes
        per request (sim.cluster's estimate, for span_estimate_s)."""
        self.ramp_s, self.cycle_s = float(ramp_s), float(cycle_s)
        for k in range(self.clients):
            self._send(k * self.ramp_s / self.clients, self.firsts.popleft())

    def _send(self, t: float, src: int) -> None:
        self.order += 1
        heapq.heappush(self.pending, (t, self.order, src))

    def next_send_s(self) -> float:
        """When the next request is sent (inf: none is due until a request ends)."""
        return self.pending[0][0] if self.pending else float("inf")

    def issue(self, slot: int, t: float) -> None:
        """Send the next due request at ``t`` as ledger slot ``slot``."""
        _, _, src = heapq.heappop(self.pending)
        self.ledger.arrival_s[slot] = t
        for dst, values in self.copies:
            dst[slot] = values[src]
        self.too_big[slot] = self.too_big_src[src]
        self.source[slot] = src

    def done(self, slot: int, t: float) -> None:
        """Ledger slot ``slot`` ended at ``t`` (engine time): its client sends its next request."""
        nxt = self.next_turn[self.source[slot]]
        if nxt >= 0:
            self._send(t + self.reply_s + self.session_think_s, nxt)
        elif self.firsts:
            self._send(t + self.reply_s + self.think_s, self.firsts.popleft())

    def describe(self) -> dict[str, float | int | None]:
        """The loop as the report shows it (schema.ClosedLoopOut)."""
        return {"clients": self.clients, "clients_asked": self.asked, "sessions": self.starts,
                "think_time_s": self.think_s,
                "session_think_time_s": self.session_think_s if self.sessions else None, "ramp_s": self.ramp_s}

    def span_estimate_s(self) -> float:
        """About how long the run lasts: the ramp, then each client's share of the requests, each taking
        ``cycle_s`` (its time in the system and its client's think time); for the sampling interval before the run
        shows it."""
        return self.ramp_s + self.cycle_s * max(1.0, self.ledger.n / self.clients)
