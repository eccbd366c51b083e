"""The twin's engine: the simulated cluster (``clusterfit.sim.online``) run in wall-clock time on an asyncio loop.

One callback, re-armed for the next simulated step end, advances the cluster to "now" and hands each request's new
tokens to its HTTP stream; arrivals and cancellations advance it too. Nothing runs per request besides the HTTP
handler itself: hundreds of concurrent streams cost one wake-up per simulated step plus one write per stream that
got tokens. When the loop is late (a busy host), the simulated times stay exact and the tokens arrive late, several
per chunk; ``clusterfit_twin_token_delivery_lag_seconds`` says how late.

Clock: seconds since :meth:`Twin.start` (``time.monotonic()``: uvloop's ``loop.time()`` only moves in whole
milliseconds, once per loop iteration). Callbacks are timers, whose resolution is the event loop's (1 ms with
epoll and libuv): a token is handed over up to about a millisecond after its simulated emission. A request's arrival is the instant its handler
submits it; every time the twin reports (records, metrics) is on that clock.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..errors import ClusterfitError
from ..sim.ledger import REJECTED
from ..sim.online import OnlineCluster
from .config import TwinSetup
from .metrics import TwinMetrics


class TwinUnavailable(ClusterfitError):
    """The twin cannot take a request now (too many in flight, the replica queue is full, or it is stopping)."""


@dataclass(eq=False)
class Stream:
    """One simulated request as its HTTP response follows it (tokens; seconds on the twin's clock).

    ``produced``: output tokens the simulated cluster has emitted; ``sent``: tokens the HTTP layer has taken.
    ``waker`` is set when tokens arrive (``wake_on_tokens``) and when the request ends (``done`` or ``aborted``).
    """

    index: int
    prompt_tokens: int
    max_tokens: int
    waker: asyncio.Event
    wake_on_tokens: bool
    arrival_s: float
    req: int = -1
    replica: int = -1
    produced: int = 0
    sent: int = 0
    first_token_s: float = math.nan
    last_token_s: float = math.nan
    done: bool = False
    aborted: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Twin:
    """A simulated cluster serving requests in wall-clock time (see the module docstring)."""

    def __init__(self, setup: TwinSetup) -> None:
        self.setup = setup
        rep = setup.replica
        self.cluster = OnlineCluster(rep.step, setup.sim, setup.max_model_len, gpus_per_node=rep.system.gpus_per_node)
        self.metrics = TwinMetrics(setup.served_names[0], setup.sim.replicas, setup.max_model_len,
                                   self.cluster.replica_state)
        self.records: deque[dict[str, Any]] = deque(maxlen=setup.request.history)
        self._streams: dict[int, Stream] = {}  # cluster request id -> stream
        self._last_steps = [-1] * setup.sim.replicas
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0 = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_s = math.inf  # when the armed callback is due, twin clock
        self._seq = 0  # records served so far (each record's "seq")
        self.stopping = False  # stopped: no stepping, no requests
        self.draining = False  # shutting down: no new requests
        self.failure: str | None = None  # why the simulation stopped, if it did

    # --- life ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the clock on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._t0 = time.monotonic()
        self.stopping = self.draining = False

    def drain(self, grace_s: float) -> None:
        """Shutting down: refuse new requests now; in ``grace_s`` seconds end those still in flight (:meth:`stop`).
        Call on the twin's loop."""
        self.draining = True
        if self._loop is not None:
            self._loop.call_later(grace_s, self.stop)
        else:
            self.stop()

    def stop(self) -> None:
        """Stop stepping; every request still in flight ends (its stream closes with an error event)."""
        self.stopping = self.draining = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for s in list(self._streams.values()):
            self.abort(s)

    def now(self) -> float:
        """Seconds since start on the twin's clock."""
        if self._loop is None:
            raise ClusterfitError("the twin has not started (Twin.start runs inside the server's event loop)")
        return time.monotonic() - self._t0

    @property
    def started(self) -> bool:
        return self._loop is not None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the twin runs on (once started)."""
        if self._loop is None:
            raise ClusterfitError("the twin has not started (Twin.start runs inside the server's event loop)")
        return self._loop

    @property
    def in_flight(self) -> int:
        """Simulated requests not finished yet."""
        return len(self._streams)

    # --- requests --------------------------------------------------------------------------------------------
    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether one request of these lengths fits a replica's KV cache at all."""
        return self.cluster.fits(prompt_tokens, max_tokens)

    def submit(self, jobs: list[tuple[int, int]], waker: asyncio.Event, wake_on_tokens: bool) -> list[Stream]:
        """Requests arrive now: ``jobs`` is (prompt tokens, output tokens) per choice. All or none are taken:
        :class:`TwinUnavailable` when the twin is stopping or they would pass ``max_outstanding``."""
        if self.draining:
            raise TwinUnavailable(self.failure or "the twin is shutting down")
        limit = self.setup.request.max_outstanding
        if len(self._streams) + len(jobs) > limit:
            raise TwinUnavailable(f"the twin has {len(self._streams):,} requests in flight (max_outstanding "
                                  f"{limit:,}); try again later")
        now = self.now()
        cl = self.cluster
        out: list[Stream] = []
        for i, (prompt, output) in enumerate(jobs):
            s = Stream(i, prompt, output, waker, wake_on_tokens, now)
            s.req = cl.submit(prompt, output, now)
            if cl.ledger.status[s.req] == REJECTED:
                cl.release(s.req)
                for t in out:
                    self.abort(t)
                raise TwinUnavailable("the replica's queue is full")
            s.replica = cl.ledger.replica[s.req]
            self._streams[s.req] = s
            out.append(s)
        self._publish(now)
        self._arm()
        return out

    def abort(self, s: Stream) -> None:
        """The client of ``s`` went away (or the twin stops): take its request out of the simulation."""
        if s.done or s.aborted:
            return
        s.aborted = True
        self._streams.pop(s.req, None)
        if self._loop is not None:
            led = self.cluster.ledger
            s.extra["scheduled_s"] = led.scheduled_s[s.req]   # read before the slot is freed (nan: never scheduled)
            s.extra["preemptions"] = led.preemptions[s.req]
            now = self.now()
            self.cluster.abort(s.req, now)
            self._record(s, "aborted", now)
            self._arm()
        s.waker.set()

    # --- stepping --------------------------------------------------------------------------------------------
    def sync(self) -> None:
        """Advance the simulation to now and hand out the tokens produced (also done by the step callback)."""
        if self._loop is None or self.stopping:
            return
        now = self.now()
        self.cluster.advance(now)
        self._publish(now)
        self._arm()

    def _tick(self) -> None:
        self._timer = None
        try:
            self.sync()
        except Exception as exc:  # a bug in the simulation must not leave every stream hanging
            self.failure = f"the simulation stopped: {type(exc).__name__}: {exc}"
            self.stop()
            raise

    def _arm(self) -> None:
        """Call back at the next simulated step end (keep an earlier call already armed)."""
        t = self.cluster.next_change_s()
        if t == math.inf or self._loop is None or self.stopping:
            return
        if self._timer is not None:
            if self._timer_s <= t:
                return
            self._timer.cancel()
        self._timer_s = t
        self._timer = self._loop.call_later(max(0.0, t - self.now()), self._tick)

    def _publish(self, now: float) -> None:
        """Hand each stream the tokens its request has by ``now``; finish the completed ones."""
        cl = self.cluster
        led = cl.ledger
        streams = self._streams
        for r, rep in enumerate(cl.replicas):
            done = rep.take_done()
            produced, steps = rep.produced_at(now)
            if steps == self._last_steps[r] and not done:
                continue
            self._last_steps[r] = steps
            stamp = rep.last_step_end_s(now)
            for req in rep.running:
                s = streams.get(req)
                if s is not None:
                    n = rep.tokens(req, produced)
                    if n > s.produced:
                        self._emit(s, n, stamp, r)
            for req in done:
                s = streams.pop(req, None)
                if s is None:  # cancelled at this step boundary
                    continue
                self._emit(s, s.max_tokens, led.finish_s[req], r)
                self._finish(s, r)
                cl.release(req)

    def _emit(self, s: Stream, n: int, stamp_s: float, r: int) -> None:
        """Stream ``s`` has ``n`` tokens, the newest emitted at ``stamp_s``: metrics, then wake its response."""
        m = self.metrics
        k = n - s.produced
        m.generation_tokens[r].inc(k)
        if s.produced == 0:
            first = self.cluster.ledger.first_token_s[s.req]
            s.first_token_s = s.last_token_s = first
            m.ttft[r].observe(first - s.arrival_s)
            m.prompt_tokens[r].inc(s.prompt_tokens)
            k -= 1
        if k > 0:
            gap = (stamp_s - s.last_token_s) / k
            itl = m.itl[r]
            for _ in range(k):
                itl.observe(gap)
        s.last_token_s = stamp_s
        s.produced = n
        if s.wake_on_tokens:
            s.waker.set()

    def _finish(self, s: Stream, r: int) -> None:
        led = self.cluster.ledger
        req = s.req
        m = self.metrics
        scheduled = led.scheduled_s[req]
        finish = led.finish_s[req]
        m.e2e[r].observe(finish - s.arrival_s)
        m.queue[r].observe(scheduled - s.arrival_s)
        m.prefill[r].observe(s.first_token_s - scheduled)
        m.decode[r].observe(finish - s.first_token_s)
        m.inference[r].observe(finish - scheduled)
        if s.max_tokens > 1:
            m.tpot[r].observe((finish - s.first_token_s) / (s.max_tokens - 1))
        m.prompt_len[r].observe(s.prompt_tokens)
        m.generation_len[r].observe(s.max_tokens)
        m.max_tokens[r].observe(s.max_tokens)
        m.success[r].inc()
        s.extra["preemptions"] = led.preemptions[req]
        s.extra["scheduled_s"] = scheduled
        self._record(s, "completed", finish)
        s.done = True
        s.waker.set()

    def _record(self, s: Stream, status: str, end_s: float) -> None:
        self._seq += 1
        self.records.append({
            "seq": self._seq, "status": status, "replica": s.replica, "prompt_tokens": s.prompt_tokens,
            "max_tokens": s.max_tokens, "output_tokens": s.produced, "arrival_s": s.arrival_s,
            "scheduled_s": s.extra.get("scheduled_s", math.nan), "first_token_s": s.first_token_s,
            "finish_s": end_s, "preemptions": s.extra.get("preemptions", 0)})

    def delivered(self, s: Stream) -> int:
        """The HTTP layer takes the tokens produced so far; returns how many are new (and observes the lag)."""
        k = s.produced - s.sent
        if k > 0:
            s.sent = s.produced
            if self._loop is not None:
                self.metrics.lag.observe(max(0.0, self.now() - s.last_token_s))
        return k

    # --- views -----------------------------------------------------------------------------------------------
    def finished(self, after: int = 0) -> list[dict[str, Any]]:
        """Records of finished requests with ``seq`` > ``after`` (the last ``history`` kept), oldest first. Times in
        seconds on the twin's clock; nan where a phase never happened (an aborted request's first token)."""
        return [r for r in self.records if r["seq"] > after]
