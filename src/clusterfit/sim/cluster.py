"""The cluster: replicas behind a load balancer, driven by one event heap.

Events are replica step/segment ends, failures, restarts, autoscaling ticks and replica start-ups;
arrivals are merged in from the sorted request table (a closed loop's from its clients, sim.clients, which send a
request when one ends). At equal times replica events go first, so a request arriving exactly when a step ends
joins the next step. Everything random comes from one
``numpy.random.Generator`` seeded by the config: a seed gives the same result every time.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..engines import front_end_s
from ..deadline import check as check_deadline
from ..errors import ClusterfitError, counted
from .balancer import Balancer
from .clients import ClosedLoop
from .config import SimulationConfig
from .gaps import TokenGaps
from .ledger import COMPLETED, FAILED, PENDING, REJECTED, Ledger
from .replica import Replica, kv_rule
from .stepmodel import StepCosts, StepTimer
from .requests import Requests

_REPLICA, _FAIL, _RESTART, _TICK, _READY = 0, 1, 2, 3, 4
#: The replicas lost at each instant failures are due: (replica, node + 1 or 0, restart delay s or None) each.
FailureGroups = list[list[tuple[int, int, float | None]]]
SAMPLES_PER_WINDOW = 10  # queue / KV / live-replica samples per metrics window


@dataclass
class Sample:
    """Cluster state at one sampling instant (time in seconds, counts in requests)."""

    t_s: float
    waiting: int
    running: int
    kv_utilisation: float
    live_replicas: int


@dataclass
class DecodeProgress:
    """How far each replica's decoding had got at the sampling instants: ``tokens[k, r]``, the output tokens each
    decoding sequence of replica ``r`` had produced by ``t_s[k]`` since the run began (its ``Replica.G``, carried
    over restarts; inside a planned decode segment, interpolated in time). Every sequence in a replica's decode
    batch gains one token per step (speculative: the expected tokens), so a request's tokens follow this curve from
    its first token to its last. ``shift_s``: client-side times are these plus the front-end latency."""

    t_s: np.ndarray
    tokens: np.ndarray
    shift_s: float = 0.0


@dataclass
class SimRun:
    """Raw outcome of one simulation: the per-request ledger and the state the metrics need."""

    requests: dict[str, np.ndarray]
    replicas: list[dict[str, Any]]
    samples: list[Sample]
    events: list[dict[str, Any]]
    replica_seconds: float
    gpus_per_replica: int
    end_s: float
    sim_wall_s: float
    config: SimulationConfig
    extra: dict[str, Any] = field(default_factory=dict)
    token_gaps: TokenGaps = field(default_factory=TokenGaps)  # inter-token gaps of every replica (sim/gaps.py)
    #: Failures and restarts due after every request had finished: not run (a replica lost at t = 100,000 s of a
    #: 70 s run would lose nothing and stretch the run, and its GPU-hours, to that time), each with a ``note``.
    not_exercised: list[dict[str, Any]] = field(default_factory=list)
    #: Decode progress per replica over time (windows' output tokens follow it); None: not recorded (disaggregated)
    decode_progress: DecodeProgress | None = None


def replicas_on_node(node: int, replicas: int, gpus_per_replica: int, gpus_per_node: int) -> list[int]:
    """Replicas that use a GPU of ``node`` when replicas are packed onto nodes in order."""
    out = []
    for r in range(replicas):
        first = (r * gpus_per_replica) // gpus_per_node
        last = ((r + 1) * gpus_per_replica - 1) // gpus_per_node
        if first <= node <= last:
            out.append(r)
    return out


def node_gpus(config: SimulationConfig, gpus_per_replica: int, gpus_per_node: int | None = None) -> int:
    """GPUs per node the replicas are packed onto: the simulation section's, else the system's, else 8 (or one
    replica's GPUs where a replica is larger)."""
    return int(config.gpus_per_node or gpus_per_node or max(8, gpus_per_replica))


class FailureTargetError(ClusterfitError):
    """A failure (``config.failures[index]``) names a replica or node (``field``) the cluster does not have;
    ``detail`` says what there is. sim.api.run_request names the option or scenario field it came from."""

    def __init__(self, index: int, field: str, detail: str) -> None:
        super().__init__(f"simulation.failures.{index}.{field}: {detail}")
        self.index, self.field, self.detail = index, field, detail


def check_failures(config: SimulationConfig, gpus_per_replica: int, gpus_per_node: int | None = None) -> None:
    """Every failure names a replica or node the run has (FailureTargetError otherwise): replicas are numbered
    0..replicas-1, nodes 0.. over the nodes they are packed onto (replicas_on_node)."""
    per_node = node_gpus(config, gpus_per_replica, gpus_per_node)
    n = config.replicas
    for k, f in enumerate(config.failures):
        if f.replica is not None and f.replica >= n:
            raise FailureTargetError(k, "replica", f"replica {f.replica} does not exist: there "
                                     + ("is 1 replica, replica 0" if n == 1 else f"are {n} replicas, 0 to {n - 1}"))
        if f.node is not None and not replicas_on_node(f.node, n, gpus_per_replica, per_node):
            nodes = -(-n * gpus_per_replica // per_node)
            raise FailureTargetError(k, "node", f"node {f.node} does not exist: {counted(n, 'replica')} of "
                                     f"{counted(gpus_per_replica, 'GPU')} use "
                                     + ("1 node (node 0)" if nodes == 1 else f"{nodes} nodes (0 to {nodes - 1})")
                                     + f" of {per_node} GPUs")


def _engine_batched_tokens(step_model: StepCosts) -> int:
    """Tokens per step the step model's engine schedules, over its attention-DP ranks (0 without an engine)."""
    engine = getattr(step_model, "engine", None)
    return int(getattr(engine, "max_num_batched_tokens", 0) * int(getattr(step_model, "dp", 1) or 1))


class Cluster:
    """A simulated cluster for one workload; call :meth:`run` once."""

    #: The replica type the cluster builds (sim.online's cluster builds a subclass that reports its progress).
    replica_class: type[Replica] = Replica
    #: a disaggregated decode pool: every request arrives with its prompt KV built (Replica.kv_handoff)
    kv_handoff: bool = False
    #: the clients of a closed loop (config.arrival.concurrency), None for open-loop arrivals
    clients: ClosedLoop | None = None

    def __init__(self, requests: Requests, step_model: StepCosts, config: SimulationConfig,
                 gpus_per_node: int | None = None, kv_handoff: bool = False, reply_s: float = 0.0,
                 session_think_s: float = 0.0) -> None:
        """``reply_s`` (the engine's front-end latency) and ``session_think_s`` (between a session's turns) time a
        closed loop's clients (sim.clients.ClosedLoop); an open loop does not use them."""
        if len(requests) == 0:
            raise ClusterfitError("no requests to simulate")
        self.kv_handoff = kv_handoff
        self._setup(Ledger(requests, kv_rule(step_model)), step_model, config,
                    int(np.max(requests.input_tokens + requests.output_tokens)), gpus_per_node)
        self.too_big = ((requests.input_tokens + requests.output_tokens + config.replica.block_size)
                        > self.admit_cap).tolist()
        arrival = config.arrival
        if arrival.concurrency is not None:
            self.clients = clients = ClosedLoop(self.ledger, self.too_big, arrival.concurrency, arrival.think_time_s,
                                                session_think_s, reply_s)
            cycle = self._closed_cycle_s(clients.clients, clients.wait_s)
            clients.start(arrival.ramp_s if arrival.ramp_s is not None else cycle, cycle)
            for rep in self.replicas:   # replicas made later (autoscaling) get it in _new_replica
                rep.on_done = clients.done

    def _setup(self, ledger: Ledger, step_model: StepCosts, config: SimulationConfig, max_ctx: int,
               gpus_per_node: int | None) -> None:
        """Everything but the requests: engine limits, step timer, balancer, replicas, event heap. ``max_ctx``: the
        longest context a request can reach, tokens (the step timer's tables reach that far)."""
        self.config = config
        self.ledger = ledger
        rspec = config.replica
        self.max_num_seqs = int(rspec.max_num_seqs or step_model.max_num_seqs)
        kv = int(step_model.kv_capacity_tokens)
        if kv <= rspec.block_size:
            raise ClusterfitError(f"the replica has {kv} KV token slots: nothing fits (check the memory fit)")
        if self.max_num_seqs < 1:
            raise ClusterfitError("max_num_seqs must be >= 1")
        self.kv_capacity = kv
        self.max_num_batched_tokens = int(rspec.max_num_batched_tokens or _engine_batched_tokens(step_model) or 8192)
        # under speculative decoding every decoding sequence verifies its drafts in each step (StepModel.with_verify)
        sp = rspec.speculative
        stepper = step_model
        if sp is not None:
            verifying = getattr(step_model, "with_verify", None)
            if verifying is None:
                raise ClusterfitError("simulation.replica.speculative: the step model has no with_verify (the verify "
                                      "pass of speculative decoding); simulate clusterfit's StepModel "
                                      "(clusterfit.simulate)")
            stepper = verifying(sp.draft_tokens)
        self.timer = StepTimer(stepper, self.max_num_batched_tokens, self.max_num_seqs, max_ctx,
                               exact=config.exact_steps)
        self.gpus_per_replica = int(getattr(step_model, "gpus", 1) or 1)
        self.gpus_per_node = node_gpus(config, self.gpus_per_replica, gpus_per_node)
        self.balancer = Balancer(config.policy, np.random.default_rng([config.seed, 1]))
        self.replicas: list[Replica] = []
        self.load: list[float] = []
        self.g_offset: list[float] = []  # per replica: decode progress (Replica.G) before its last reset
        self.up_since: list[float] = []
        self.replica_seconds = 0.0
        for _ in range(config.replicas):
            self._new_replica(0.0, ready=True)
        self.balancer.rebuild(self.replicas)
        self.admit_cap = kv * (1 - rspec.watermark)  # KV tokens a replica admits into (requests beyond: rejected)
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.hold: deque[int] = deque()
        self.samples: list[Sample] = []
        self.progress: list[list[float]] = []  # per sample: each replica's decode progress (DecodeProgress)
        self.events: list[dict[str, Any]] = []
        self.not_exercised: list[dict[str, Any]] = []
        self.pending_starts = 0

    # --- replicas -------------------------------------------------------------------------------
    def _new_replica(self, now_s: float, ready: bool) -> Replica:
        rep = self.replica_class(len(self.replicas), self.timer, self.ledger, self.kv_capacity, self.config.replica,
                                 self.max_num_seqs, self.max_num_batched_tokens)
        rep.alive = ready
        rep.kv_handoff = self.kv_handoff
        rep.clock = now_s
        if self.clients is not None:
            rep.on_done = self.clients.done
        self.replicas.append(rep)
        self.g_offset.append(0.0)
        self.load.append(0.0 if ready else math.inf)
        self.up_since.append(now_s)  # GPUs are paid for from the moment they are requested
        return rep

    def _push(self, t: float, kind: int, a: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, 0))

    def _schedule(self, rep: Replica) -> None:
        t = rep.plan()
        if t != math.inf:
            self.seq += 1
            heapq.heappush(self.heap, (t, self.seq, _REPLICA, rep.index, rep.version))

    def _stop(self, rep: Replica, now_s: float) -> None:
        """Take a replica out of service (failure or drained); its GPU time stops counting."""
        if rep.alive and not math.isnan(self.up_since[rep.index]):
            self.replica_seconds += now_s - self.up_since[rep.index]
        self.up_since[rep.index] = math.nan
        rep.alive = False
        self.load[rep.index] = math.inf

    # --- routing --------------------------------------------------------------------------------
    def _route(self, req: int, now_s: float) -> None:
        led = self.ledger
        if self.too_big[req]:
            led.status[req] = REJECTED
            self._ended(req, now_s)
            return
        r = self.balancer.choose(led.prefix_key[req], self.load, self.replicas)
        if r < 0:
            self.hold.append(req)
            return
        rep = self.replicas[r]
        if rep.max_queue is not None and len(rep.waiting) >= rep.max_queue:
            led.status[req] = REJECTED
            self._ended(req, now_s)
            return
        led.replica[req] = r
        rep.enqueue(req, now_s)
        self.load[r] += 1
        if rep.next_event_s == math.inf:
            self._schedule(rep)

    def _ended(self, req: int, now_s: float) -> None:
        """A request was rejected or failed: a closed loop's client goes on (completions: Replica.on_done)."""
        if self.clients is not None:
            self.clients.done(req, now_s)

    def _drain_hold(self, now_s: float) -> None:
        hold, self.hold = self.hold, deque()
        for req in hold:
            self._route(req, now_s)

    # --- failures and scaling -------------------------------------------------------------------
    def _fail(self, hits: list[tuple[int, int, float | None]], now_s: float) -> None:
        """Failures due at ``now_s``: ``hits`` holds (replica, node + 1 or 0 for a replica's own failure, restart
        delay s or None) for every replica lost at that instant. All of them go down before any of their requests
        is routed again: a request retried off one replica of a lost node never lands on another replica of it."""
        down: list[tuple[int, int, float | None, list[int]]] = []
        for index, node1, restart_s in hits:
            rep = self.replicas[index]
            if not rep.alive:
                continue
            down.append((index, node1, restart_s, rep.in_flight()))
            self.g_offset[index] += rep.G
            self._stop(rep, now_s)
            rep.reset(now_s)
        if not down:
            return
        self.balancer.rebuild(self.replicas)
        led = self.ledger
        for index, node1, restart_s, lost in down:
            retried = failed = 0
            for req in lost:
                led.retries[req] += 1
                led.first_token_s[req] = math.nan
                led.generated[req] = 0
                if led.retries[req] > self.config.max_retries:
                    led.status[req] = FAILED
                    led.finish_s[req] = now_s
                    self._ended(req, now_s)
                    failed += 1
                else:
                    self._route(req, now_s)
                    retried += 1
            self.events.append({"t_s": now_s, "event": "replica_lost", "replica": index,
                                "cause": "replica" if node1 == 0 else f"node {node1 - 1}",
                                "in_flight": len(lost), "retried": retried, "failed": failed})
            if restart_s is not None:
                self._push(now_s + restart_s, _RESTART, index)

    def _restart(self, index: int, now_s: float, event: str = "replica_restarted") -> None:
        rep = self.replicas[index]
        if rep.alive:
            return
        rep.reset(now_s)
        rep.alive = True
        rep.accepting = True
        self.load[index] = 0.0
        self.up_since[index] = now_s if math.isnan(self.up_since[index]) else self.up_since[index]
        self.balancer.rebuild(self.replicas)
        self.events.append({"t_s": now_s, "event": event, "replica": index})
        self._drain_hold(now_s)

    def _tick(self, now_s: float, arrivals_left: bool) -> None:
        """Autoscaling: add a replica or drain one by the mean outstanding requests; tick again while work is left."""
        spec = self.config.autoscale
        if spec is None:  # ticks are scheduled only with autoscaling
            return
        live = [r for r in self.replicas if r.alive and r.accepting]
        busy = sum(r.outstanding() for r in self.replicas if r.alive)
        mean = (sum(r.outstanding() for r in live) / len(live)) if live else math.inf
        count = len(live) + self.pending_starts
        if mean > spec.up_outstanding and count < spec.max_replicas:
            rep = self._new_replica(now_s, ready=False)
            self.pending_starts += 1
            self._push(now_s + spec.startup_s, _READY, rep.index)
            self.events.append({"t_s": now_s, "event": "scale_up", "replica": rep.index,
                                "mean_outstanding": mean})
        elif mean < spec.down_outstanding and count > spec.min_replicas and len(live) > 1:
            rep = min(live, key=lambda r: r.outstanding())
            rep.accepting = False
            self.load[rep.index] = math.inf
            self.balancer.rebuild(self.replicas)
            self.events.append({"t_s": now_s, "event": "scale_down", "replica": rep.index,
                                "mean_outstanding": mean})
            if rep.outstanding() == 0:
                self._stop(rep, now_s)
        if arrivals_left or busy or self.hold:
            self._push(now_s + spec.interval_s, _TICK)

    # --- main loop ------------------------------------------------------------------------------
    def run(self) -> SimRun:
        """Simulate until every request is completed, rejected or failed."""
        wall0 = time.perf_counter()
        failures = self._schedule_failures()
        arrivals = self.ledger.arrival_s
        if self.config.autoscale is not None:
            self._push((arrivals[0] if self.clients is None else 0.0) + self.config.autoscale.interval_s, _TICK)
        span = max(arrivals[-1] - arrivals[0], 1e-9) if self.clients is None else self.clients.span_estimate_s()
        window_s = self.config.window_s or nice_window(max(span, 1.0))
        end_s = self._event_loop(window_s, failures)
        self._close(end_s)
        return self._result(window_s, wall0)

    def _closed_cycle_s(self, clients: int, wait_s: float) -> float:
        """About how long a closed loop's client takes per request (its arrivals are not known before): the mean
        request's tokens that no cache serves prefilled in max_num_batched_tokens chunks, then decoded in a batch of
        the clients' share of a replica (at most max_num_seqs, and what the KV cache holds) whose steps also carry
        the other clients' prompts; a share above that batch waits its turn (share / batch services); plus
        ``wait_s`` (front end and think time: ClosedLoop.wait_s)."""
        led = self.ledger
        n = led.n
        isl, osl = sum(led.input_tokens) / n, sum(led.output_tokens) / n
        served = (sum(max(c, s) for c, s in zip(led.cached_tokens, led.shared_tokens)) if led.cached_tokens
                  else sum(led.shared_tokens))
        new = max(1.0, isl - served / n)   # prompt tokens no cache serves
        share = clients / self.config.replicas
        # the KV-admission rule perf and the planner share (StepModel.kv_admitted_sequences), else its capacity
        admitted = getattr(self.timer.model, "kv_admitted_sequences", None)
        fits = float(admitted(isl, osl)) if admitted is not None else self.admit_cap / (isl + osl)
        batch = max(1, int(min(self.max_num_seqs, share, fits)))
        chunk = min(new, self.max_num_batched_tokens)
        prefill = math.ceil(new / chunk) * self.timer.step_s(chunk, chunk * (isl + 1) / 2, 0, 0.0)
        mixed = min(batch * new / osl, self.max_num_batched_tokens)
        service = prefill + osl * self.timer.step_s(mixed, mixed * (isl + 1) / 2, batch, batch * (isl + osl / 2))
        return float(service * max(1.0, share / batch) + wait_s)

    def _schedule_failures(self) -> FailureGroups:
        """Push one failure event per instant at which failures are due (``a``: its index in the returned list),
        and return, per instant, the replicas lost then: (replica, node + 1 or 0, restart delay s or None), every
        replica of a lost node included. A replica named twice at one instant keeps its first failure's restart."""
        cfg = self.config
        check_failures(cfg, self.gpus_per_replica, self.gpus_per_node)
        groups: FailureGroups = []
        at: dict[float, int] = {}
        for f in cfg.failures:
            if f.replica is not None:
                hit = [(f.replica, 0)]
            else:
                assert f.node is not None  # FailureSpec names exactly one of replica / node
                hit = [(r, f.node + 1) for r in
                       replicas_on_node(f.node, cfg.replicas, self.gpus_per_replica, self.gpus_per_node)]
            if f.at_s not in at:
                at[f.at_s] = len(groups)
                groups.append([])
                self._push(f.at_s, _FAIL, at[f.at_s])
            group = groups[at[f.at_s]]
            seen = {r for r, _, _ in group}
            group.extend((r, node1, f.restart_s) for r, node1 in hit if r not in seen)
        return groups

    def _event_loop(self, window_s: float, failures: FailureGroups) -> float:
        """Pop events and merge in arrivals in time order until both run out, sampling the cluster
        ``SAMPLES_PER_WINDOW`` times a window; return the time of the last one, seconds.

        The hot path (replica events, arrivals) stays inline with its lookups in locals."""
        arrivals = self.ledger.arrival_s
        n = self.ledger.n
        clients = self.clients
        every = window_s / SAMPLES_PER_WINDOW
        start = arrivals[0] if clients is None else 0.0   # a closed loop's clients start at 0
        next_sample = start
        heap = self.heap
        replicas = self.replicas
        load = self.load
        route = self._route
        heappop, heappush, inf = heapq.heappop, heapq.heappush, math.inf
        i = 0
        t = start
        events = 0
        while True:
            events += 1
            if not events & 4095:
                check_deadline()  # the HTTP API's per-call budget (clusterfit.deadline); nothing elsewhere
            if clients is None:
                ta = arrivals[i] if i < n else inf
            else:  # the next request a client sends (slot i of the ledger, filled as it is sent)
                ta = clients.next_send_s()
            if heap and heap[0][0] <= ta:
                t0 = t
                t, _, kind, a, b = heappop(heap)
                if kind == _REPLICA:
                    rep = replicas[a]
                    if b != rep.version:
                        continue
                    rep.finish_event()
                    tn = rep.plan()  # _schedule, inline
                    if tn != inf:
                        self.seq += 1
                        heappush(heap, (tn, self.seq, _REPLICA, a, rep.version))
                    if rep.accepting:
                        load[a] = len(rep.waiting) + len(rep.prefill) + rep.d  # rep.outstanding()
                    elif rep.alive and rep.outstanding() == 0:
                        self._stop(rep, t)
                elif i >= n and self._idle():
                    # the run ended with the work, not at a failure, restart or autoscaling step nobody met: a
                    # failure or restart is listed as not exercised; a tick (rescheduled while work was left) or a
                    # scale-up start is dropped, its GPUs paid for up to the end (_close)
                    if kind == _FAIL or kind == _RESTART:
                        self._not_exercised(kind, a, t, t0, failures)
                    t = t0
                    continue
                else:
                    self._control_event(kind, a, t, i < n, failures)
            elif ta != inf:
                t = ta
                if clients is not None:
                    clients.issue(i, t)
                route(i, t)
                i += 1
            elif clients is not None and self.hold:
                self._fail_held(t)   # no replica will take them: their clients go on (and those fail in turn)
            else:
                break
            if t >= next_sample:
                self._sample(t)
                next_sample = t + every if t > next_sample + every else next_sample + every
        return t

    def _control_event(self, kind: int, a: int, now_s: float, arrivals_left: bool,
                       failures: FailureGroups) -> None:
        """Failures (``a`` the index of the instant's group), restart, scale-up start or autoscaling tick."""
        if kind == _FAIL:
            self._fail(failures[a], now_s)
        elif kind == _RESTART:
            self._restart(a, now_s)
        elif kind == _READY:
            self.pending_starts -= 1
            self._restart(a, now_s, "scale_up_ready")
        else:
            self._tick(now_s, arrivals_left)

    def _idle(self) -> bool:
        """Whether no request is left to serve: none held for a replica, none on a live one."""
        return not self.hold and not any(r.alive and r.outstanding() for r in self.replicas)

    def _not_exercised(self, kind: int, a: int, at_s: float, done_s: float, failures: FailureGroups) -> None:
        """Record the failures (``a``: the index of the instant's group) or the restart of replica ``a`` due at
        ``at_s``, after the last request finished at ``done_s``: they are not run. One that would do nothing (a lost
        replica lost again, a live one restarted) is not recorded, as _fail and _restart record nothing then."""
        hits = failures[a] if kind == _FAIL else [(a, 0, None)]
        what = "failure" if kind == _FAIL else "restart"
        for index, node1, _ in hits:
            if self.replicas[index].alive != (kind == _FAIL):
                continue
            ev: dict[str, Any] = {"t_s": at_s, "event": "replica_lost" if kind == _FAIL else "replica_restarted",
                                  "replica": index}
            if kind == _FAIL:
                ev["cause"] = "replica" if node1 == 0 else f"node {node1 - 1}"
            ev["note"] = (f"the {what} of replica {index} at t={at_s:,.1f} s falls after the last request finished "
                          f"(t={done_s:,.1f} s): not exercised")
            self.not_exercised.append(ev)

    def _fail_held(self, now_s: float) -> None:
        """A closed loop's requests held for a replica when nothing is left to bring one back (the last replica lost
        for good) fail now, so their clients send the rest, as an open loop's held requests fail at its end."""
        led = self.ledger
        hold, self.hold = self.hold, deque()
        for req in hold:
            led.status[req] = FAILED
            led.finish_s[req] = now_s
            self._ended(req, now_s)

    def _close(self, end_s: float) -> None:
        """Last sample; requests still held fail (no replica ever came back); replicas stop paying."""
        self._sample(end_s)
        self._fail_held(end_s)
        led = self.ledger
        for rep in self.replicas:
            if rep.alive:
                self._stop(rep, end_s)
            elif not math.isnan(self.up_since[rep.index]):  # a scale-up still starting: paid for since asked for
                self.replica_seconds += end_s - self.up_since[rep.index]
                self.up_since[rep.index] = math.nan
        pending = sum(1 for s in led.status if s == PENDING)
        if pending:
            raise ClusterfitError(f"internal error: {pending} requests neither completed, rejected nor failed")

    def _result(self, window_s: float, wall0: float) -> SimRun:
        """The run's outcome; it ends at the last arrival or the last finish, whichever is later."""
        requests = self.ledger.arrays()
        too_long = int(np.count_nonzero(np.asarray(self.too_big, bool) & (requests["status"] == REJECTED)))
        gaps = TokenGaps()
        for r in self.replicas:
            gaps.merge(r.gaps)
        return SimRun(
            requests=requests,
            replicas=[{"replica": r.index, "completed": r.completed, "preemptions": r.preemptions,
                       "busy_s": r.busy_s, "steps": r.steps, "output_tokens": r.tokens_out,
                       "mean_waiting": r.waiting_sum / max(r.samples, 1),
                       "mean_kv_utilisation": r.kv_util_sum / max(r.samples, 1)} for r in self.replicas],
            samples=self.samples,
            events=self.events,
            replica_seconds=self.replica_seconds,
            gpus_per_replica=self.gpus_per_replica,
            end_s=run_end_s(requests),
            sim_wall_s=time.perf_counter() - wall0,
            config=self.config,
            extra={"window_s": window_s, "kv_capacity_tokens": self.kv_capacity, "max_num_seqs": self.max_num_seqs,
                   "max_num_batched_tokens": self.max_num_batched_tokens, "rejected_too_long": too_long,
                   "kv_admit_tokens": self.admit_cap,
                   **({} if self.clients is None else {"closed_loop": self.clients.describe()})},
            token_gaps=gaps,
            not_exercised=self.not_exercised,
            decode_progress=self._decode_progress(),
        )

    def _decode_progress(self) -> DecodeProgress:
        n = len(self.replicas)
        tokens = np.zeros((len(self.progress), n))
        for k, row in enumerate(self.progress):  # replicas added by autoscaling: 0 before they existed
            tokens[k, :len(row)] = row
        return DecodeProgress(np.array([s.t_s for s in self.samples], float), tokens)

    def _sample(self, t: float) -> None:
        waiting = running = 0
        util = 0.0
        live = 0
        progress = []
        for rep, off in zip(self.replicas, self.g_offset):
            g = rep.G + off
            if rep.in_segment and rep.next_event_s > t > rep.seg_t0:  # steps planned, not yet applied
                g += rep.seg_n * rep.tokens_per_step * (t - rep.seg_t0) / (rep.next_event_s - rep.seg_t0)
            progress.append(g)
            if not rep.alive:
                continue
            live += 1
            w = len(rep.waiting)
            u = rep.kv_used / rep.cap
            waiting += w
            running += len(rep.prefill) + rep.d
            util += u
            rep.samples += 1
            rep.waiting_sum += w
            rep.kv_util_sum += u
        self.samples.append(Sample(t, waiting, running, util / live if live else 0.0, live))
        self.progress.append(progress)


def nice_window(span_s: float) -> float:
    """A window length giving about 60 windows over ``span_s``, rounded to 1-2-5 x 10^k seconds."""
    raw = span_s / 60
    exp = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * 10**exp >= raw:
            return float(m * 10**exp)
    return float(10 ** (exp + 1))


def run_end_s(requests: dict[str, np.ndarray]) -> float:
    """A run ends at its last arrival or its last finish, whichever is later."""
    finish = requests["finish_s"][np.isfinite(requests["finish_s"])]
    last = float(requests["arrival_s"][-1])
    return max(last, float(finish.max())) if finish.size else last


def with_front_end(run: SimRun, front_s: float) -> SimRun:
    """``run`` as the clients see it: every request's first token and (completed) finish ``front_s`` later, the
    engine's front-end latency (engines.Engine.request_latency_s), outside its steps. Applied once to a run's
    outcome, after the engine-side simulation (so a disaggregated run's internal KV hand-off does not carry it)."""
    if not front_s:
        return run
    req = dict(run.requests)
    req["first_token_s"] = req["first_token_s"] + front_s
    req["finish_s"] = np.where(req["status"] == COMPLETED, req["finish_s"] + front_s, req["finish_s"])
    progress = run.decode_progress
    if progress is not None:
        progress = replace(progress, shift_s=progress.shift_s + front_s)
    return replace(run, requests=req, end_s=max(run.end_s, run_end_s(req)), decode_progress=progress)


def run_simulation(requests: Requests, step_model: StepCosts, config: SimulationConfig,
                   gpus_per_node: int | None = None, front_end: bool = True, kv_handoff: bool = False,
                   session_think_s: float = 0.0) -> SimRun:
    """Simulate ``requests`` on ``config.replicas`` replicas whose steps take ``step_model`` times; ``front_end``:
    add the engine's front-end latency to every request's first token and finish (with_front_end); ``kv_handoff``:
    the replicas are a disaggregated decode pool (sim.disagg), whose requests arrive with their prompt KV built.
    A closed loop (``config.arrival.concurrency``) sends ``requests`` in order as earlier ones end, a session's
    next turn ``session_think_s`` after its previous answer reached the client (sim.clients)."""
    reply_s = front_end_s(step_model) if front_end else 0.0
    run = Cluster(requests, step_model, config, gpus_per_node, kv_handoff, reply_s, session_think_s).run()
    return with_front_end(run, reply_s) if front_end else run
