"""The simulator driven by a clock instead of a trace: requests are submitted as they arrive, the cluster is advanced
to "now", and each request's output tokens can be read at any instant (``clusterfit twin`` runs it in wall-clock
time behind an OpenAI-compatible server).

It is the batch simulator's own machinery, not a second model: :class:`OnlineCluster` is a
:class:`~clusterfit.sim.cluster.Cluster` (same balancer, routing, step timer, replica event handling) whose
replicas are :class:`~clusterfit.sim.replica.Replica` objects (same continuous batching, chunked prefill, KV
admission ledger, preemption). What it adds:

- a ledger that grows with each arrival and reuses the slots of finished requests (:class:`OnlineLedger`; memory is
  bounded by the requests in flight, not by the requests served);
- :meth:`OnlineCluster.advance` applies the replica events due by a time, exactly as the batch event loop does
  (a request submitted at ``t`` sees every step that ended at or before ``t``: the batch loop's tie rule), so the
  same arrivals give the same per-request times as :func:`~clusterfit.sim.cluster.run_simulation` with the same
  step-timer reach (tests/test_twin.py checks this request by request);
- token progress inside a decode segment: the replica plans many decode steps at once, and
  :meth:`OnlineReplica.produced_at` tells how far a segment has got at any instant (each step's end time is known);
- cancellation (:meth:`OnlineCluster.abort`, a client that went away), at a step boundary as engines do.

Times are seconds on the caller's clock (the twin: seconds since it started); lengths in tokens.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from ..errors import ClusterfitError
from .cluster import _REPLICA, Cluster
from .config import SimulationConfig
from .ledger import COMPLETED, FAILED, PENDING, Ledger
from .replica import Replica, kv_rule
from .stepmodel import StepCosts


class OnlineLedger(Ledger):
    """A :class:`~clusterfit.sim.ledger.Ledger` filled as requests arrive: :meth:`add` takes a free slot (a request
    id), :meth:`free` gives it back once nothing refers to the request any more.

    scheduled_s: when the request first got a prefill chunk into a step (the end of its queueing: vLLM's
    ``scheduled_ts``), seconds (nan before).
    """

    def __init__(self, rule: Any = None) -> None:  # the lists start empty: no super().__init__(requests)
        self.n = 0
        self.arrival_s = []
        self.input_tokens = []
        self.output_tokens = []
        self.prefix_key = []
        self.shared_tokens = []
        self.cached_tokens = []  # no prefix warm on every replica
        self.first_token_s = []
        self.finish_s = []
        self.status = []
        self.replica = []
        self.retries = []
        self.preemptions = []
        self.generated = []
        self.reservation_bytes = []  # stays empty without a KV-admission rule (the replica tests its truth)
        self.scheduled_s: list[float] = []
        self._rule = rule
        self._free: list[int] = []

    def add(self, arrival_s: float, input_tokens: int, output_tokens: int, prefix_key: int = -1) -> int:
        """Record a new request; return its id (a slot, possibly one a finished request held)."""
        if input_tokens < 1 or output_tokens < 1:
            raise ClusterfitError("input and output lengths must be >= 1 token")
        cost = 0.0
        if self._rule is not None:  # as Ledger: the rule evaluated on arrays, elementwise float64
            cost = float(np.asarray(self._rule.kv_reservation_bytes(np.asarray([input_tokens], np.int64),
                                                                     np.asarray([output_tokens], np.int64)),
                                    float).reshape(-1)[0])
        row: dict[str, Any] = {
            "arrival_s": float(arrival_s), "input_tokens": int(input_tokens), "output_tokens": int(output_tokens),
            "prefix_key": int(prefix_key), "shared_tokens": 0, "first_token_s": math.nan, "finish_s": math.nan,
            "status": PENDING, "replica": -1, "retries": 0, "preemptions": 0, "generated": 0,
            "scheduled_s": math.nan}
        if self._rule is not None:
            row["reservation_bytes"] = cost
        if self._free:
            req = self._free.pop()
            for name, value in row.items():
                getattr(self, name)[req] = value
            return req
        for name, value in row.items():
            getattr(self, name).append(value)
        self.n += 1
        return self.n - 1

    def free(self, req: int) -> None:
        """Give slot ``req`` back (its request is finished or gone and no replica holds it)."""
        self._free.append(req)

    @property
    def in_use(self) -> int:
        """Slots holding a request."""
        return self.n - len(self._free)


class OnlineReplica(Replica):
    """A replica whose progress can be read between its events (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.done: list[int] = []  # requests completed since the caller last took them (take_done)
        self.started: set[int] = set()  # prefilling requests that have had a chunk in a step since their admission
        # Steps applied ahead of the clock: a decode segment cut by an arrival or a cancellation jumps to the first
        # step boundary at or after that instant. (end s, G, steps) per such boundary, in time order.
        self.marks: list[tuple[float, float, int]] = []

    # --- hooks on the scheduler (the base class does the work) ------------------------------------------------
    def _complete(self, req: int, ctx: float, t: float) -> None:
        super()._complete(req, ctx, t)
        self.done.append(req)

    def _plan_mixed_step(self) -> float:
        end = super()._plan_mixed_step()
        scheduled = self.ledger.scheduled_s  # type: ignore[attr-defined]  # an OnlineLedger
        for entry in self.prefill[:len(self.step_chunks)]:  # the entries that got a chunk (FCFS, in order)
            req = entry[0]
            self.started.add(req)
            if scheduled[req] != scheduled[req]:  # nan: its first chunk (a preempted request keeps its time)
                scheduled[req] = self.clock
        return end

    def _finish_mixed_step(self, t: float) -> None:
        super()._finish_mixed_step(t)
        if len(self.started) > len(self.prefill):  # prefills that finished have joined the decode batch
            self.started &= {e[0] for e in self.prefill}

    def _preempt_last(self) -> None:
        req = next(reversed(self.running))  # the one the base class preempts: back to waiting
        self.started.discard(req)
        super()._preempt_last()

    def queues(self) -> tuple[int, int]:
        """(running, waiting) as vLLM's scheduler counts them: running = decoding + prefilling requests that have
        had a chunk; waiting = the queue + admitted requests whose prefill has not started."""
        in_prefill = {e[0] for e in self.prefill}
        self.started &= in_prefill
        return self.d + len(self.started), len(self.waiting) + len(in_prefill) - len(self.started)

    def cut_segment(self, now_s: float) -> bool:
        cut = super().cut_segment(now_s)
        if cut and self.clock > now_s:
            self.marks.append((self.clock, self.G, self.steps))
        return cut

    def take_done(self) -> list[int]:
        """Requests completed since the last call."""
        done, self.done = self.done, []
        return done

    # --- progress between events ----------------------------------------------------------------------------
    def _ahead(self, now_s: float) -> bool:
        """True while steps applied by a cut have not ended yet at ``now_s``."""
        if self.marks and now_s >= self.marks[-1][0]:
            self.marks.clear()
        return bool(self.marks)

    def _segment_steps_ended(self, now_s: float) -> int:
        """Steps of the running decode segment that have ended by ``now_s``: those whose end, computed as
        everywhere else (``seg_t0 + elapsed``), is at or before it."""
        t0, n = self.seg_t0, self.seg_n
        x = now_s - t0
        if self.seg_cum is not None:
            k = int(np.searchsorted(self.seg_cum, x, side="right"))
        else:
            k = 0 if x < self._seg_elapsed(1) else self._steps_until(x)
        k = min(k, n)
        while k < n and t0 + self._seg_elapsed(k + 1) <= now_s:  # the subtraction above may round either way
            k += 1
        while k > 0 and t0 + self._seg_elapsed(k) > now_s:
            k -= 1
        return k

    def produced_at(self, now_s: float) -> tuple[float, int]:
        """(tokens each running sequence has produced since the replica started, steps finished) as of ``now_s``.

        The state is that of the last applied step or segment start; inside a decode segment the steps ended by
        ``now_s`` are added; steps a cut applied ahead of time are taken back out until they end."""
        if self._ahead(now_s):
            first = self.marks[0]
            g, steps = first[1] - self.tokens_per_step, first[2] - 1
            for t, mg, ms in self.marks:
                if t > now_s:
                    break
                g, steps = mg, ms
            return g, steps
        if self.in_segment:
            k = self._segment_steps_ended(now_s)
            return self.G + k * self.tokens_per_step, self.steps + k
        return self.G, self.steps

    def last_step_end_s(self, now_s: float) -> float:
        """End of the latest step finished by ``now_s``, seconds (``now_s`` itself while a cut is ahead of it)."""
        if self._ahead(now_s):
            ended = [t for t, _, _ in self.marks if t <= now_s]
            return ended[-1] if ended else now_s
        if self.in_segment:
            k = self._segment_steps_ended(now_s)
            return self.seg_t0 + self._seg_elapsed(k) if k else self.seg_t0
        return self.clock

    def next_change_s(self, now_s: float) -> float:
        """When the next step ends after ``now_s`` (inf: idle), seconds."""
        if self._ahead(now_s):
            return next(t for t, _, _ in self.marks if t > now_s)
        if self.in_segment:
            k = self._segment_steps_ended(now_s)
            if k < self.seg_n:
                return self.seg_t0 + self._seg_elapsed(k + 1)
        return self.next_event_s

    def tokens(self, req: int, produced: float) -> int:
        """Output tokens request ``req`` (on this replica) has when each running sequence has produced ``produced``
        tokens since the replica started (:meth:`produced_at`)."""
        led = self.ledger
        if led.status[req] == COMPLETED:
            return led.output_tokens[req]
        run = self.running.get(req)
        if run is None:
            return led.generated[req]
        jg, jc, _fg = run
        n = int(jc - led.input_tokens[req] + (produced - jg) + 1e-9)
        last = led.output_tokens[req] - 1  # the last token completes the request (an event, then COMPLETED)
        return n if n < last else last

    # --- cancellation --------------------------------------------------------------------------------------
    def between_steps(self) -> bool:
        """True when no step is in flight (a request can be taken out without touching a step's batch)."""
        return self.next_event_s == math.inf

    def remove(self, req: int) -> bool:
        """Take ``req`` out: waiting (any time) or, between steps, prefilling or decoding; its KV reservation is
        released. False if it is not on this replica."""
        try:
            self.waiting.remove(req)
            return True
        except ValueError:
            pass
        if req in self.running:
            jg, jc, _fg = self.running.pop(req)
            self.S -= jc + (self.G - jg)
            self.d -= 1
            if self.d == 0:
                self.S = 0.0
            self._release(req)
            return True
        for i, entry in enumerate(self.prefill):
            if entry[0] == req:
                del self.prefill[i]
                self.prefill_reserved -= entry[3] + self.block
                self._release(req)
                return True
        return False


class OnlineCluster(Cluster):
    """The simulated cluster advanced by a clock (see the module docstring).

    max_context: the longest prompt + output a request may have, tokens (the step timer's tables reach that far;
    the batch simulator uses the longest request of its trace). ``config``'s replicas, policy, seed, replica spec
    and ``exact_steps`` apply; its workload fields are not used. Failures and autoscaling are batch-only.
    """

    replica_class = OnlineReplica
    replicas: list[OnlineReplica]  # type: ignore[assignment]  # built by replica_class
    ledger: OnlineLedger

    def __init__(self, step_model: StepCosts, config: SimulationConfig, max_context: int,
                 gpus_per_node: int | None = None) -> None:
        if config.failures or config.autoscale is not None:
            raise ClusterfitError("the online simulator runs a fixed set of replicas: failures and autoscaling "
                                  "are simulated by the batch simulator (clusterfit simulate)")
        if max_context < 1:
            raise ClusterfitError("max_context must be >= 1 token")
        self._setup(OnlineLedger(kv_rule(step_model)), step_model, config, int(max_context), gpus_per_node)
        self.too_big: list[bool] = []
        self.now_s = 0.0
        self._aborting: dict[int, set[int]] = {}  # replica -> requests to take out at its next step boundary

    # --- requests -------------------------------------------------------------------------------------------
    def fits(self, input_tokens: int, output_tokens: int) -> bool:
        """Whether a request of these lengths can ever be admitted (its whole context within a replica's KV below
        the watermark); the batch simulator rejects the others."""
        return input_tokens + output_tokens + self.config.replica.block_size <= self.admit_cap

    def submit(self, input_tokens: int, output_tokens: int, now_s: float, prefix_key: int = -1) -> int:
        """A request arrives at ``now_s`` (not before the last advance): route it; return its id. Its status is
        REJECTED if it can never fit or its replica's queue is full (``replica.max_queue``)."""
        self.advance(now_s)
        req = self.ledger.add(self.now_s, input_tokens, output_tokens, prefix_key)
        big = not self.fits(input_tokens, output_tokens)
        if req < len(self.too_big):
            self.too_big[req] = big
        else:
            self.too_big.append(big)
        self._route(req, self.now_s)
        return req

    def abort(self, req: int, now_s: float) -> None:
        """The client of ``req`` went away at ``now_s``: take the request out of its replica (waiting: now;
        prefilling or decoding: at the next step boundary, cutting a decode segment there) and free its slot.
        A request already completed, rejected or failed is only freed."""
        self.advance(now_s)
        led = self.ledger
        r = led.replica[req]
        if led.status[req] != PENDING or r < 0:
            self.release(req)
            return
        rep = self.replicas[r]
        if req in rep.waiting or rep.between_steps() or rep.cut_segment(self.now_s):
            self._take_out(rep, req)
            if rep.next_event_s == math.inf:
                self._schedule(rep)
            self.load[r] = rep.outstanding()
        else:
            self._aborting.setdefault(r, set()).add(req)

    def _take_out(self, rep: OnlineReplica, req: int) -> None:
        rep.remove(req)
        led = self.ledger
        if led.status[req] == PENDING:
            led.status[req] = FAILED
            led.finish_s[req] = self.now_s
        self.release(req)

    def release(self, req: int) -> None:
        """Forget a finished request (its id may be reused by the next arrival)."""
        self.ledger.free(req)

    # --- time -----------------------------------------------------------------------------------------------
    def advance(self, now_s: float) -> None:
        """Apply every replica event due at or before ``now_s`` in time order (the batch event loop's replica
        branch), then cancellations waiting for those step boundaries."""
        heap = self.heap
        replicas = self.replicas
        while heap and heap[0][0] <= now_s:
            t, _, kind, a, b = heapq.heappop(heap)
            rep = replicas[a]
            if kind != _REPLICA or b != rep.version:
                continue
            rep.finish_event()
            gone = self._aborting.pop(a, None)
            if gone:
                self.now_s = max(self.now_s, t)
                for req in gone:
                    rep.done = [r for r in rep.done if r != req]
                    self._take_out(rep, req)
            self._schedule(rep)
            self.load[a] = rep.outstanding()
        if now_s > self.now_s:
            self.now_s = now_s

    def next_change_s(self) -> float:
        """When the next step of any replica ends after the last advance (inf: all idle), seconds."""
        now = self.now_s
        return min((rep.next_change_s(now) for rep in self.replicas), default=math.inf)

    def tokens(self, req: int) -> int:
        """Output tokens request ``req`` has as of the last advance."""
        r = self.ledger.replica[req]
        if r < 0:
            return 0
        rep = self.replicas[r]
        return rep.tokens(req, rep.produced_at(self.now_s)[0])

    # --- state ----------------------------------------------------------------------------------------------
    def replica_state(self) -> list[dict[str, float]]:
        """Per replica: requests running and waiting (vLLM's counts, :meth:`OnlineReplica.queues`), KV in use as a
        share of the pool, preemptions so far."""
        out = []
        for rep in self.replicas:
            running, waiting = rep.queues()
            out.append({"running": running, "waiting": waiting, "kv_usage": rep.kv_used / rep.cap,
                        "preemptions": rep.preemptions})
        return out
