"""The planner: from a question (model, workload, SLO, systems, prices) to a costed recommendation.

``plan(request)`` runs the search, sizes every candidate for the target load (replicas + N+k spares,
nodes, GPUs), picks the cheapest plan per system and overall, explains what binds, draws the Pareto
frontier (output tokens/s per GPU against tokens/s per user) per system, and compares the cost with a
per-token endpoint. It returns a ``clusterfit.schema.PlanResult``: ``model_dump(mode="json")`` is what the CLI's
``--json`` prints. ``plan_cluster(..., verify=True)`` also simulates the recommendation (``verify.verify_plan``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..errors import ClusterfitError, ParameterError
from ..schema import (ClosestMiss, EndpointComparison, LongestRequest, ParetoPoint, PerMtok, PlanOption, PlanResult, PrefillPool,
                      ReplicaPlacement, ServingEngineSettings, SkippedVerification)
from .cost import (HOURS_PER_MONTH, EndpointPrice, GpuHourPrice, Pool, break_even_rps, catalog_prices, no_public_price_notes,
                   resolve_price, usd_per_mtok, verdict)
from ..perfmodel.serving import decode_breakdown
from .capacity import AggregatedCurve
from ..intervals import FigureBands, bands_for, decode_regime
from .pareto import pareto_front
from .search import Candidate, SearchResult, SearchSpace, search
from .workload import SLO, Workload

if TYPE_CHECKING:
    from ..arch import ModelArch
    from ..compose import Catalog
    from ..hardware import System
    from ..sim.config import SpeculativeSpec


@dataclass
class PlanQuestion:
    """A planning question, resolved from a ``schema.PlanRequest`` (``question.build_question``). Loads, lengths
    and SLOs live in ``workload`` and ``slo``; ``catalog`` holds the hardware catalogs in force."""

    model: str
    workload: Workload
    slo: SLO
    systems: list[str] | None = None
    precisions: list[str | None] = field(default_factory=lambda: [None])
    kv_dtypes: list[str | None] = field(default_factory=lambda: [None])
    engine: str = "vllm"
    failover: int = 0
    prices: dict[str, float] = field(default_factory=dict)
    endpoint: EndpointPrice | None = None
    max_nodes_per_replica: int = 4
    disaggregated: bool = True
    max_batch: int | None = None
    hours_per_month: float = HOURS_PER_MONTH
    simulation: object = None          # the scenario's opaque ``simulation:`` section (for --verify)
    catalog: Catalog | None = None     # None: the built-in catalogs
    budget_nodes: int | None = None    # capacity mode: nodes of each system (no load; see plan_capacity)
    budget_gpus: int | None = None     # capacity mode: GPUs of each system
    confidence: int | None = None      # size on this interval's pessimistic bound (percent; None/50: the point)
    speculative: SpeculativeSpec | None = None   # speculative decoding on every replica (None: none)

    @property
    def capacity_mode(self) -> bool:
        return self.budget_nodes is not None or self.budget_gpus is not None


# ------------------------------------------------------------------------------------------ sizing
def _need(wl: Workload) -> float:
    """Target load in the unit capacities are measured in: requests/s, or sessions for session loads."""
    if wl.load.kind == "requests_per_s":
        return wl.load.value
    if wl.load.kind == "output_tokens_per_s":
        return wl.load.value / wl.osl_mean_tokens
    return wl.load.value


def _load_capacity(wl: Workload, rate, tpot, ttft_mean):
    """What one replica carries in the load's unit: requests/s, or concurrent sessions (Little's law)."""
    if wl.load.kind == "concurrent_sessions":
        return rate * (wl.osl_mean_tokens * tpot + ttft_mean + wl.think_time_s)
    return rate


def node_is_failure_unit(gpus_per_replica: int, gpus_per_node: int, price) -> bool:
    """Whether a pool's failure unit is a node: always unless the quote rents single GPUs (a 1-GPU instance or a
    per-GPU quote: each rented GPU fails alone) and the replica is smaller than a node."""
    return not (price is not None and getattr(price, "rent_unit", "node") == "gpu" and gpus_per_replica < gpus_per_node)


def spare_replicas(k: int, replicas: int, gpus_per_replica: int, gpus_per_node: int, price) -> int:
    """Spare replicas of a pool for N+k failover: the pool survives the loss of k failure units.

    - Replicas of a node or more, or a per-GPU quote (failure unit = what one replica rents): k spare replicas.
    - Replicas packed several to a node (whole nodes rented): a node loss takes up to min(replicas per node,
      serving replicas) replicas at once, so k nodes' worth of spares, each group on a node of its own
      (``spare_nodes``): N+1 with 1-GPU replicas 8 to a node means 8 spares on one more node, not 1 spare beside
      the replicas it should cover.
    """
    if k <= 0:
        return 0
    if gpus_per_replica >= gpus_per_node or not node_is_failure_unit(gpus_per_replica, gpus_per_node, price):
        return k
    return k * min(gpus_per_node // gpus_per_replica, max(replicas, 1))


def replicas_that_fit(gpus_per_replica: int, node: int, budget: int) -> int:
    """Replicas of ``gpus_per_replica`` GPUs packed into ``budget`` GPUs on nodes of ``node`` GPUs (a replica
    never straddles nodes unless it is larger than one, and then takes whole nodes)."""
    full, rem = divmod(budget, node)
    if gpus_per_replica <= node:
        return full * (node // gpus_per_replica) + rem // gpus_per_replica
    return full // math.ceil(gpus_per_replica / node)


def packed_with_spares(gpus: int, k: int, gpus_per_replica: int, gpus_per_node: int, price) -> tuple[int, int, int]:
    """(replicas that fit in ``gpus`` GPUs, spares N+k sets aside among them, serving replicas left, >= 0): the one
    packing rule of a budget (capacity mode) and of the rented GPUs (headroom).

    The replicas fill the GPUs as replicas_that_fit packs them; N+k must survive the loss of any k failure units, so
    the serving replicas are those left after the k fullest units go: spare_replicas(k, fit), i.e. k replicas, or,
    with replicas packed several to a node on whole nodes, k nodes' worth (min(replicas per node, fit) each). A budget
    that is not whole nodes ends in a part-filled node, which holds serving replicas too: 12 GPUs of 8-GPU nodes
    hold 6 TP2 replicas (4 + 2); a node loss takes at most 4, so 2 serve."""
    fit = replicas_that_fit(gpus_per_replica, gpus_per_node, gpus)
    spares = spare_replicas(k, fit, gpus_per_replica, gpus_per_node, price) if fit else 0
    return fit, spares, max(fit - spares, 0)


def smallest_serving_budget(k: int, gpus_per_replica: int, gpus_per_node: int, price, step: int = 1) -> int:
    """Fewest GPUs, a multiple of ``step`` (1, or a node for a budget of nodes), in which packed_with_spares keeps a
    replica serving beside the N+k spares: room for k nodes' worth of replicas and one more, with replicas packed
    several to a node on whole nodes; otherwise for k + 1 replicas (replicas_that_fit's packing: full nodes, then the
    last replicas' GPUs)."""
    g, node = gpus_per_replica, gpus_per_node
    if g > node:
        return -(-(k + 1) * math.ceil(g / node) * node // step) * step
    per = node // g
    m = k * per + 1 if g < node and node_is_failure_unit(g, node, price) else k + 1
    gpus = (m - 1) // per * node + ((m - 1) % per + 1) * g
    return -(-gpus // step) * step


def pool_nodes(replicas: int, spares: int, gpus_per_replica: int, gpus_per_node: int, price) -> int:
    """Nodes a pool of ``replicas`` serving replicas and ``spares`` spares occupies: spares of a pool whose
    failure unit is a node sit on nodes of their own (see spare_replicas); otherwise all are packed together."""
    if spares and gpus_per_replica < gpus_per_node and node_is_failure_unit(gpus_per_replica, gpus_per_node, price):
        per = gpus_per_node // gpus_per_replica
        group = min(per, max(replicas, 1))
        return _nodes(replicas, gpus_per_replica, gpus_per_node) + math.ceil(spares / group)
    return _nodes(replicas + spares, gpus_per_replica, gpus_per_node)


def _nodes(replicas: int, gpus_per_replica: int, gpus_per_node: int) -> int:
    """Nodes rented: small replicas share nodes, large ones take whole nodes each."""
    if gpus_per_replica <= gpus_per_node:
        return math.ceil(replicas * gpus_per_replica / gpus_per_node)
    return replicas * math.ceil(gpus_per_replica / gpus_per_node)


@dataclass
class _Sized:
    """A candidate sized for the target load (aggregated: one pool; disaggregated: two)."""

    mode: Literal["aggregated", "disaggregated"]
    system: System
    precision: str
    kv_dtype: str
    main: Candidate                    # aggregated replica, or the decode replica
    prefill: Candidate | None
    batch: float                       # operating batch per (decode) replica
    best_batch: float                  # batch at full capacity
    capacity: float                    # load units per replica at full capacity
    replicas: int                      # serving replicas (decode pool), spares excluded
    prefill_replicas: int
    spares: int
    tpot_s: float
    ttft_s: float
    rate_rps: float                    # requests/s the plan serves at the target load
    full_rate_rps: float               # requests/s with every serving replica at capacity
    nodes: int
    gpus: int
    price: GpuHourPrice | None
    binding: str = ""
    why: str = ""
    breakdown: dict = field(default_factory=dict)
    tpot_judged_s: float | None = None  # TPOT at the SLO's percentile (tpot_s is the mean); None: the mean
    tie_break: str = ""                # which rule chose this plan over an equally priced one ("" if none)
    budget_rented_gpus: int | None = None  # capacity mode: the GPUs of the budget (paid for whether used or not)
    prefill_spares: int | None = None  # spare prefill replicas (None: ``spares``, as many as the decode pool)
    #: ``--confidence``: (TTFT s, TPOT s at the judged percentile, requests/s per (decode) replica) at the bound the
    #: plan was sized on; the other figures are point predictions at the same operating batch
    bound: tuple[float, float, float] | None = None
    point_capacity: float = 0.0        # load units one (decode) replica carries at the point prediction
    failover: int = 0                  # N+k: the failure units the plan survives (spare_replicas)

    @property
    def prefill_pool_spares(self) -> int:
        return self.spares if self.prefill_spares is None else self.prefill_spares

    @property
    def rent_unit(self) -> str:
        """"gpu" when the price quote rents single GPUs and every replica is smaller than a node, else "node"."""
        sizes = [self.main.gpus] + ([self.prefill.gpus] if self.prefill is not None else [])
        per_gpu = self.price is not None and self.price.rent_unit == "gpu"
        return "gpu" if per_gpu and all(g < self.system.gpus_per_node for g in sizes) else "node"

    @property
    def rented_gpus(self) -> int:
        """GPUs paid for: those the replicas use when single GPUs are rented, else whole nodes (capacity mode:
        the budget)."""
        if self.budget_rented_gpus is not None:
            return self.budget_rented_gpus
        return self.gpus if self.rent_unit == "gpu" else self.nodes * self.system.gpus_per_node

    @property
    def cost_per_hour(self) -> float | None:
        return None if self.price is None else self.rented_gpus * self.price.usd_per_gpu_hour

    @property
    def headroom_rps(self) -> float:
        """Requests/s the rented GPUs carry within the SLOs with every idle rented GPU also running a replica, less
        the spares the failover rule sets aside for that many serving replicas (spare_replicas: on whole nodes
        with replicas packed several to a node, k nodes' worth; aggregated; disaggregated: the serving pools at
        full capacity)."""
        if self.mode != "aggregated":
            return self.full_rate_rps
        per_replica = self.full_rate_rps / max(self.replicas, 1)
        serving = packed_with_spares(self.rented_gpus, self.failover, self.main.gpus, self.system.gpus_per_node,
                                     self.price)[2]
        return per_replica * max(serving, self.replicas)

    def sort_key(self) -> tuple:
        """Cheapest first; cost ties go to fewer nodes per replica, then more headroom, then lower TPOT."""
        cost = self.cost_per_hour
        return (round(cost, 6) if cost is not None else math.inf, self.rented_gpus if cost is None else 0,
                self.main.nodes, -round(self.headroom_rps, 9), self.tpot_s)


def _point_capacity(units: np.ndarray, feasible: np.ndarray) -> float:
    """Load units one replica carries at its best feasible batch (0 when none is feasible)."""
    return float(np.max(units[feasible])) if feasible.any() else 0.0


def _operating_batch(feasible: np.ndarray, units: np.ndarray, need: float, replicas: int) -> int:
    """Index of the smallest feasible batch that carries one replica's share of ``need``. The tolerance is relative:
    ``replicas`` was rounded up from need / the best capacity, whose own batch can then fall an ulp short of
    need / replicas at large loads (100,000 requests/s over 41 replicas: an IndexError)."""
    return int(np.flatnonzero(feasible & (units >= need / replicas * (1.0 - 1e-9)))[0])


def _served_ttft_s(curve: AggregatedCurve, rate_rps: float) -> float:
    """TTFT of the curve's smallest batch at ``rate_rps`` requests/s per replica (at most its own rate)."""
    if curve.underload is None:
        return float(curve.ttft_s[0])
    return float(curve.underload.ttft_s(min(rate_rps, float(curve.rate_rps[0])))[0])


def _served_tpot_s(curve: AggregatedCurve, rate_rps: float) -> tuple[float, float]:
    """(mean TPOT, TPOT at the judged percentile) of the curve's smallest batch at ``rate_rps`` requests/s per replica
    (at most its own rate): fewer prefills land on the decodes of a replica run below its full rate."""
    if curve.underload is None:
        return float(curve.tpot_s[0]), float(curve.tpot_judged_s[0])
    return curve.underload.tpot_s(rate_rps)


def _size_aggregated(c: Candidate, wl: Workload, need: float, k: int, price) -> _Sized | None:
    """Replicas of ``c`` for the load. With ``--confidence`` the curve is at the pessimistic bound (sizing,
    feasibility); the figures reported are the point curve's at the same operating batch."""
    a = c.agg
    pt = a.point or a
    cap_units = _load_capacity(wl, a.rate_rps, a.tpot_s, a.ttft_mean_s)
    ok = a.feasible
    if not ok.any():
        return None
    caps = np.where(ok, cap_units, -np.inf)
    best = int(np.argmax(caps))
    n = max(1, math.ceil(need / caps[best] - 1e-9))
    op = _operating_batch(ok, cap_units, need, n)
    if wl.load.kind == "concurrent_sessions":  # Little's law: sessions / (time per turn incl. think time)
        served_rps = need / (wl.osl_mean_tokens * pt.tpot_s[op] + pt.ttft_mean_s[op] + wl.think_time_s)
    else:
        served_rps = need
    failover = k
    k = spare_replicas(k, n, c.gpus, c.system.gpus_per_node, price)
    total = n + k
    nodes = pool_nodes(n, k, c.gpus, c.system.gpus_per_node, price)
    ttft_pt, ttft_bound = float(pt.ttft_s[op]), float(a.ttft_s[op])
    tpot_pt, tpot_judged, tpot_bound = float(pt.tpot_s[op]), float(pt.tpot_judged_s[op]), float(a.tpot_judged_s[op])
    if op == 0:  # the smallest batch carries each replica's share: TTFT and TPOT at the rate it serves (Underload)
        ttft_pt, ttft_bound = _served_ttft_s(pt, served_rps / n), _served_ttft_s(a, served_rps / n)
        (tpot_pt, tpot_judged), tpot_bound = _served_tpot_s(pt, served_rps / n), _served_tpot_s(a, served_rps / n)[1]
    bound = None if a.point is None else (ttft_bound, tpot_bound, float(a.rate_rps[best]))
    point_cap = _point_capacity(_load_capacity(wl, pt.rate_rps, pt.tpot_s, pt.ttft_mean_s), pt.feasible)
    return _Sized("aggregated", c.system, c.precision_name, c.kv_dtype, c, None, float(a.batch[op]),
                  float(a.batch[best]), float(caps[best]), n, 0, k, tpot_pt, ttft_pt,
                  float(served_rps), float(n * pt.rate_rps[best]), nodes, total * c.gpus, price,
                  tpot_judged_s=tpot_judged, bound=bound, point_capacity=point_cap,
                  failover=failover)


def _size_disaggregated(prefills: list[Candidate], decodes: list[Candidate], wl: Workload, need: float, k: int,
                        price) -> _Sized | None:
    node = decodes[0].system.gpus_per_node if decodes else 8
    best_d = None
    for c in decodes:
        d = c.decode
        if d is None:
            continue
        ok = d.feasible
        if not ok.any():
            continue
        ttft_guess = 0.0
        units = _load_capacity(wl, d.rate_rps, d.tpot_s, ttft_guess)
        caps = np.where(ok, units, -np.inf)
        b = int(np.argmax(caps))
        n = max(1, math.ceil(need / caps[b] - 1e-9))
        kd = spare_replicas(k, n, c.gpus, node, price)
        nodes = pool_nodes(n, kd, c.gpus, node, price)
        if best_d is None or nodes < best_d[0] or (nodes == best_d[0] and c.gpus * (n + kd) < best_d[4]):
            op = _operating_batch(ok, units, need, n)
            best_d = (nodes, c, n, b, c.gpus * (n + kd), op, float(caps[b]), kd)
    if best_d is None:
        return None
    d_nodes, dc, n_d, b, _, op, cap, k_d = best_d
    d = dc.decode
    assert d is not None
    dp_ = d.point or d
    tpot = float(d.tpot_s[op])
    best_p = None
    for c in prefills:
        p = c.prefill
        if p is None or p.rate_rps <= 0:
            continue
        if wl.load.kind == "concurrent_sessions":
            lam = need / (wl.osl_mean_tokens * tpot + p.ttft_s + wl.think_time_s)
        else:
            lam = need
        n = max(1, math.ceil(lam / p.rate_rps - 1e-9))
        kp = spare_replicas(k, n, c.gpus, node, price)
        nodes = pool_nodes(n, kp, c.gpus, node, price)
        if best_p is None or nodes < best_p[0] or (nodes == best_p[0] and c.gpus * (n + kp) < best_p[3]):
            best_p = (nodes, c, n, c.gpus * (n + kp), lam, kp)
    if best_p is None:
        return None
    p_nodes, pc, n_p, p_gpus, lam, k_p = best_p
    assert pc.prefill is not None
    pp_ = pc.prefill.point or pc.prefill
    full = min(n_d * float(dp_.rate_rps[b]), n_p * pp_.rate_rps)
    per_prefill = lam / n_p   # TTFT at the rate each prefill replica serves, not at its capacity
    bound = None if d.point is None else (pc.prefill.ttft_at(per_prefill), tpot, float(d.rate_rps[b]))
    point_cap = _point_capacity(_load_capacity(wl, dp_.rate_rps, dp_.tpot_s, 0.0), dp_.feasible)
    return _Sized("disaggregated", dc.system, dc.precision_name, dc.kv_dtype, dc, pc, float(d.batch[op]),
                  float(d.batch[b]), cap, n_d, n_p, k_d, float(dp_.tpot_s[op]), pp_.ttft_at(per_prefill), float(lam),
                  full, p_nodes + d_nodes, (n_d + k_d) * dc.gpus + (n_p + k_p) * pc.gpus, price,
                  prefill_spares=k_p, bound=bound, point_capacity=point_cap)


# ---------------------------------------------------------------------------------------- binding
#: Step-time kinds (perf breakdown) in plain words; "overhead" = engine step and kernel-launch overhead.
_KIND_WORD = {"memory_s": "bandwidth", "compute_s": "compute", "communication_s": "network", "overhead_s": "overhead"}


def _step_breakdown(s: _Sized, wl: Workload) -> dict:
    """Seconds per kind of one decode step of the plan's replica at its full-capacity batch (a speculative step
    under speculative decoding: serving.decode_breakdown)."""
    return decode_breakdown(s.main.step, s.best_batch, wl.decode_context_mean_tokens, s.main.drafting)


def _explain(s: _Sized, wl: Workload, slo: SLO) -> None:
    """Fill ``binding`` (one word) and ``why`` (a sentence) for a sized plan, at its full-capacity batch."""
    br = _step_breakdown(s, wl)
    kinds = br["by_kind_s"]
    step = br["step_s"]
    s.breakdown = {"step_s": step, **{k: v for k, v in kinds.items()}}
    dominant = max(kinds, key=lambda k: kinds[k]) if kinds else "memory_s"
    share = kinds.get(dominant, 0.0) / step if step else 0.0
    comm = kinds.get("communication_s", 0.0)
    sm = s.main.step
    internode = s.main.gpus > s.system.scale_up_domain_gpus
    curve = s.main.agg if s.mode == "aggregated" else s.main.decode
    assert curve is not None
    B = curve.batch
    i = int(np.flatnonzero(B == s.best_batch)[0])
    nxt = i + 1 if i + 1 < B.size else None
    ctx = float(np.asarray(sm.kv_reserved_context(wl.isl_mean_tokens, wl.osl_mean_tokens)))
    kv_seqs = float(np.asarray(sm.kv_admitted_sequences(wl.isl_mean_tokens, wl.osl_mean_tokens)))
    step_word = (f"{_KIND_WORD[dominant]}-bound at batch {s.best_batch:.0f} ({share:.0%} of the {step * 1e3:.1f} ms "
                 "step)")
    if nxt is None:
        s.binding = "engine"
        s.why = f"the engine's batch cap ({sm.max_num_seqs}) is reached; the step there is {step_word}"
    elif not curve.kv_ok[nxt]:
        if B[nxt] > kv_seqs:
            s.binding = "memory"
            s.why = (f"KV cache: the replica holds {kv_seqs:.0f} sequences reserving {ctx:.0f} tokens each, so the "
                     f"batch stops at {s.best_batch:.0f}")
        else:
            s.binding = "engine"
            s.why = f"the engine's batch cap ({sm.max_num_seqs}) is reached; the step there is {step_word}"
    elif not curve.tpot_ok[nxt]:
        s.binding = _KIND_WORD[dominant] if dominant != "overhead_s" else "slo"
        assert slo.tpot_s is not None  # only a TPOT target stops the batch on TPOT
        tpot_here = float(curve.tpot_s[i])
        drafting = s.main.drafting
        per_token = step / drafting.tokens_per_step if drafting is not None else step
        prefill_share = (f" + {(tpot_here - per_token) * 1e3:.1f} ms of prefill chunks per token"
                         if s.mode == "aggregated" and tpot_here > per_token * 1.01 else "")
        decode = ("the decode step" if drafting is None else
                  f"the speculative step over its {drafting.tokens_per_step:.2f} tokens per sequence")
        s.why = (f"TPOT p{slo.tpot_percentile:g} target {slo.tpot_s * 1e3:g} ms is met up to batch "
                 f"{s.best_batch:.0f} (mean TPOT = {decode}{prefill_share}); the "
                 f"{'decode' if drafting is None else 'speculative'} step is {step_word}")
    elif isinstance(curve, AggregatedCurve) and curve.goodput_ok is not None and not curve.goodput_ok[nxt]:
        s.binding = "slo"
        assert curve.goodput is not None
        s.why = (f"goodput: at batch {B[nxt]:.0f} the predicted share of requests within both targets "
                 f"({float(curve.goodput[nxt]):.1%}) falls below {slo.min_goodput:g}; the decode step is {step_word}")
    else:
        s.binding = "compute" if dominant == "compute_s" else "slo"
        target = (f"TTFT p{slo.ttft_percentile:g} target {slo.ttft_s * 1e3:g} ms" if slo.ttft_s is not None
                  else "prefill capacity (the prefill queue saturates)")
        s.why = f"{target}: prefill queueing caps the batch at {s.best_batch:.0f}; the decode step is {step_word}"
    if comm > 0.15 * step:
        where = "between nodes (network)" if internode else "over NVLink"
        s.why += f"; communication {where} takes {comm * 1e3:.1f} ms per step ({comm / step:.0%})"
        if internode and s.binding not in ("memory", "engine"):
            s.binding = "network" if comm >= kinds.get(dominant, 0) * 0.5 else s.binding


# ------------------------------------------------------------------------------------------ results
def _bands(c: Candidate, model: ModelArch) -> FigureBands:
    """The interval bands of a candidate's engine, GPU family and model (clusterfit.intervals)."""
    return bands_for(c.step.engine.name, c.system.gpu.id, model)


def _interval_fields(s: _Sized, wl: Workload, bands: FigureBands, need: float | None) -> dict:
    """The ``*_interval`` keys of a plan row: TTFT (prefill regime), TPOT and tokens/s per user (the regime of the
    operating batch), full-load capacity (the regime of the full-capacity batch), and the serving replicas the
    load needs with the point capacity per replica at its interval (``need`` None: capacity mode, no replica
    count derives from a prediction); with ``--confidence``, ``sized_on``: the bound figures the plan was sized on."""
    dec, full = decode_regime(s.batch), decode_regime(s.best_batch)
    tpot = s.tpot_s if s.tpot_judged_s is None else s.tpot_judged_s
    out = {"ttft_s_interval": bands.time(s.ttft_s, "prefill"), "tpot_s_interval": bands.time(tpot, dec),
           "tokens_per_s_per_user_interval": bands.rate(1.0 / s.tpot_s, dec),
           "full_load_requests_per_s_interval": bands.rate(s.full_rate_rps, full),
           "full_load_output_tokens_per_s_interval": bands.rate(s.full_rate_rps * wl.osl_mean_tokens, full),
           "intervals": bands.basis(["prefill", dec, full])}
    if need is not None and s.point_capacity > 0:
        # replicas = ceil(need / capacity per replica); capacity is a rate, so its interval scales the replicas
        # by the time factors (a slower step: fewer requests/s per replica, more replicas)
        exact = need / s.point_capacity
        lo_f, hi_f = bands.band(full).time_factors()
        n = s.replicas
        out["serving_replicas_interval"] = {"value": n, "lo": min(n, max(1, math.ceil(exact * lo_f - 1e-9))),
                                            "hi": max(n, math.ceil(exact * hi_f - 1e-9))}
    if s.bound is not None:
        out["sized_on"] = {"confidence": 0, "ttft_s": s.bound[0], "tpot_s": s.bound[1],
                           "requests_per_s_per_replica": s.bound[2]}
    if wl.one_output_token:   # no request decodes: no TPOT, no tokens/s per user (see _row)
        del out["tpot_s_interval"], out["tokens_per_s_per_user_interval"]
        if "sized_on" in out:
            out["sized_on"]["tpot_s"] = None
    return out


def _row(s: _Sized, wl: Workload, hours: float, model: ModelArch | None = None, need: float | None = None,
         confidence: int | None = None) -> PlanOption:
    """One plan row; with ``model``, its ``*_interval`` figures (``need``: the load, for the replica interval)."""
    c = s.main
    intervals = _interval_fields(s, wl, _bands(c, model), need) if model is not None else {}
    if "sized_on" in intervals:
        intervals["sized_on"]["confidence"] = confidence
    tp, pp, ep, dp = c.layout
    cost = s.cost_per_hour
    out_tps = s.rate_rps * wl.osl_mean_tokens
    in_tps = s.rate_rps * wl.isl_mean_tokens
    full_out = s.full_rate_rps * wl.osl_mean_tokens
    prefill = None
    xpyd = None
    if s.prefill is not None and s.prefill.prefill is not None:
        p, cap = s.prefill, s.prefill.prefill
        ptp, ppp, pep, pdp = p.layout
        prefill = PrefillPool(layout=p.label(), tp=ptp, pp=ppp, ep=pep, dp=pdp, gpus_per_replica=p.gpus,
                              replicas=s.prefill_replicas + s.prefill_pool_spares,
                              requests_per_s_per_replica=cap.rate_rps, kv_transfer_s=cap.kv_transfer_s)
        xpyd = f"{s.prefill_replicas + s.prefill_pool_spares}P{s.replicas + s.spares}D"
    return PlanOption(
        system=s.system.id, gpu=s.system.gpu.id, mode=s.mode, precision=s.precision,
        kv_dtype=s.kv_dtype, layout=c.label(), tp=tp, pp=pp, ep=ep, dp=dp,
        nodes_per_replica=c.nodes, gpus_per_replica=c.gpus, replicas=s.replicas + s.spares,
        serving_replicas=s.replicas, spare_replicas=s.spares, nodes=s.nodes,
        total_gpus=s.gpus, rented_gpus=s.rented_gpus, rent_unit=s.rent_unit,
        idle_gpus=max(s.rented_gpus - s.gpus, 0) if s.rent_unit == "node" else 0,
        headroom_requests_per_s=s.headroom_rps, tie_break=s.tie_break or None,
        placement=_placement(s),
        batch=s.batch, max_batch_within_slo=s.best_batch,
        price_per_gpu_hour=None if s.price is None else s.price.usd_per_gpu_hour,
        price_source=no_public_price_notes().get(s.system.gpu.id) if s.price is None else s.price.describe(),
        cost_per_hour=cost, cost_per_month=None if cost is None else cost * hours,
        cost_per_mtok_out=None if cost is None else usd_per_mtok(cost, out_tps),
        cost_per_mtok_in=None if cost is None else usd_per_mtok(cost, in_tps),
        cost_per_mtok_out_full_load=None if cost is None else usd_per_mtok(cost, full_out),
        cost_per_mtok_in_full_load=None if cost is None else usd_per_mtok(cost, s.full_rate_rps * wl.isl_mean_tokens),
        ttft_s=s.ttft_s,   # one output token: no request decodes, no TPOT
        tpot_s=None if wl.one_output_token else s.tpot_s if s.tpot_judged_s is None else s.tpot_judged_s,
        tokens_per_s_per_user=None if wl.one_output_token else 1.0 / s.tpot_s,
        requests_per_s=s.rate_rps, output_tokens_per_s=out_tps,
        output_tokens_per_s_per_gpu=out_tps / s.gpus,
        full_load_requests_per_s=s.full_rate_rps, full_load_output_tokens_per_s=full_out,
        internode_replica=c.gpus > s.system.scale_up_domain_gpus,
        step_breakdown_s=s.breakdown, binding=s.binding, why=s.why,
        speed_calibrated=speed_calibrated(s.system), prefill=prefill, xPyD=xpyd, **intervals)


def _pareto(cands: list[Candidate], wl: Workload, model: ModelArch | None = None) -> list[ParetoPoint]:
    """Tokens/s per user against output tokens/s per GPU at the point prediction (with ``model``: each with its
    interval, in the regime of its batch)."""
    xs, ys, meta = [], [], []
    osl = wl.osl_mean_tokens
    for c in cands:
        a = c.agg.point or c.agg
        m = a.kv_ok & a.ttft_ok
        xs.append(1.0 / a.tpot_s[m])
        ys.append(a.rate_rps[m] * osl / c.gpus)
        meta += [("aggregated", c, b) for b in a.batch[m]]
    pre = [c.gpus / p.rate_rps for c in cands if (p := _point_prefill(c)) is not None and p.rate_rps > 0]
    if pre:
        gp = min(pre)  # prefill GPU-seconds per request/s, best prefill layout
        for c in cands:
            if c.decode is None:
                continue
            d = c.decode.point or c.decode
            m = d.kv_ok
            xs.append(1.0 / d.tpot_s[m])
            ys.append(osl / (c.gpus / d.rate_rps[m] + gp))
            meta += [("disaggregated", c, b) for b in d.batch[m]]
    if not xs:
        return []
    x, y = np.concatenate(xs), np.concatenate(ys)
    factors: dict = {}
    return [_pareto_point(float(x[i]), float(y[i]), meta[i][0], meta[i][1], float(meta[i][2]), model, factors)
            for i in pareto_front(x, y)]


def _point_prefill(c: Candidate):
    """A candidate's prefill capacity at the point prediction (None: not evaluated)."""
    return None if c.prefill is None else c.prefill.point or c.prefill


def _pareto_point(per_user: float, per_gpu: float, mode: str, c: Candidate, batch: float,
                  model: ModelArch | None, factors: dict | None = None) -> ParetoPoint:
    """A Pareto point; with ``model``, its two rates with their intervals in the regime of its batch (``factors``:
    a cache of rate factors by (engine, GPU, regime), shared by the points of one front)."""
    iv = {}
    if model is not None:
        regime = decode_regime(batch)
        key = (c.step.engine.name, c.system.gpu.id, regime)
        cache = {} if factors is None else factors
        if key not in cache:
            cache[key] = _bands(c, model).band(regime).rate_factors()
        lo, hi = cache[key]
        iv = {"tokens_per_s_per_user_interval": {"value": per_user, "lo": per_user * lo, "hi": per_user * hi},
              "output_tokens_per_s_per_gpu_interval": {"value": per_gpu, "lo": per_gpu * lo, "hi": per_gpu * hi}}
    return ParetoPoint(tokens_per_s_per_user=per_user, output_tokens_per_s_per_gpu=per_gpu, mode=mode,
                       layout=c.label(), batch=batch, **iv)


def _closest(cands: list[Candidate], slo: SLO, model: ModelArch | None = None) -> ClosestMiss | None:
    """The candidate that misses the SLO by the smallest factor, and what binds there (with ``model`` and at the
    point prediction: TTFT and TPOT with their intervals; under ``--confidence`` the figures are the bound's)."""
    best = None
    for c in cands:
        a = c.agg
        if a is None:
            continue
        r_tpot = a.tpot_judged_s / slo.tpot_s if slo.tpot_s else np.zeros_like(a.tpot_s)
        r_ttft = a.ttft_s / slo.ttft_s if slo.ttft_s else np.zeros_like(a.ttft_s)
        worst = np.where(a.kv_ok, np.maximum(r_tpot, r_ttft), np.inf)
        i = int(np.argmin(worst))
        if best is None or worst[i] < best[0]:
            best = (float(worst[i]), c, i, float(r_tpot[i]), float(r_ttft[i]))
    if best is None or not math.isfinite(best[0]):
        return None
    _, c, i, rt, rf = best
    a = c.agg
    assert a is not None
    br = c.step.breakdown(0.0, 0.0, a.batch[i], a.batch[i] * 1.0)
    kinds = br["by_kind_s"]
    dominant = max(kinds, key=lambda k: kinds[k])
    missed = []
    if rt > 1 and slo.tpot_s is not None:
        missed.append(f"TPOT p{slo.tpot_percentile:g} {a.tpot_judged_s[i] * 1e3:.1f} ms vs target "
                      f"{slo.tpot_s * 1e3:g} ms ({rt:.2f}x)")
    if rf > 1 and slo.ttft_s is not None:
        missed.append(f"TTFT p{slo.ttft_percentile:g} {a.ttft_s[i] * 1e3:.0f} ms vs target "
                      f"{slo.ttft_s * 1e3:g} ms ({rf:.2f}x)")
    binding = "slo" if not missed else ("compute" if rf >= rt else _KIND_WORD[dominant])
    tp, pp, ep, dp = c.layout
    iv = {}
    if model is not None and a.point is None:
        bands = _bands(c, model)
        iv = {"ttft_s_interval": bands.time(float(a.ttft_s[i]), "prefill"),
              "tpot_s_interval": bands.time(float(a.tpot_judged_s[i]), decode_regime(float(a.batch[i])))}
    return ClosestMiss(
        system=c.system.id, precision=c.precision_name, layout=c.label(), tp=tp, pp=pp, ep=ep, dp=dp,
        gpus_per_replica=c.gpus, batch=float(a.batch[i]), tpot_s=float(a.tpot_judged_s[i]), ttft_s=float(a.ttft_s[i]),
        missed=missed, binding=binding,
        why=(f"even at batch {a.batch[i]:.0f} the best configuration misses: " + "; ".join(missed)
             + f". Its decode step is {_KIND_WORD[dominant]}-bound "
             f"({kinds[dominant] / br['step_s']:.0%} of {br['step_s'] * 1e3:.1f} ms at batch 1)."), **iv)


# ------------------------------------------------------------------------------------------- plan
def resolve_systems(names: list[str] | None, catalog: Catalog | None = None) -> list[System]:
    """The systems named (catalog ids or GPU names, through compose.Catalog.distinct_systems: an unknown name or one
    system named twice is refused), or every system of the catalog."""
    from ..compose import Catalog

    catalog = catalog or Catalog.load()
    return catalog.distinct_systems(names) if names else list(catalog.hardware.systems.values())


QUEUEING_MODEL = ("M/G/1 per replica prefill (Pollaczek-Khinchine mean wait, exponential tail "
                  "P(W>x)=rho*exp(-rho*x/W)); TTFT percentile of wait + own prefill, plus the engine's "
                  "front-end latency")


def _best_per_system(req: PlanQuestion, result: SearchResult, need: float) -> list[_Sized]:
    """The cheapest sized plan of each system (aggregated or disaggregated), cheapest first, explained."""
    prices = catalog_prices()
    wl = req.workload
    by_group: dict[tuple[str, str, str], list[Candidate]] = {}
    for c in result.candidates:
        by_group.setdefault((c.system.id, c.precision_name, c.kv_dtype), []).append(c)
    best: dict[str, _Sized] = {}
    alts: dict[str, list[_Sized]] = {}
    for (sys_id, _, _), cands in by_group.items():
        system = cands[0].system
        price = resolve_price(sys_id, system.gpu.id, req.prices, prices)
        options = [s for s in (_size_aggregated(c, wl, need, req.failover, price) for c in cands) if s]
        if req.disaggregated:
            d = _size_disaggregated(cands, cands, wl, need, req.failover, price)
            if d is not None:
                options.append(d)
        if not options:
            continue
        top = min(options, key=_Sized.sort_key)
        if sys_id not in best or top.sort_key() < best[sys_id].sort_key():
            best[sys_id] = top
        alts.setdefault(sys_id, []).extend(options)
    for sys_id, s in best.items():
        _explain(s, wl, req.slo)
        s.tie_break = _tie_break(s, alts[sys_id])
        if s.tie_break:
            s.why += f"; {s.tie_break}"
    return sorted(best.values(), key=_Sized.sort_key)


def _plan_words(o: _Sized) -> str:
    """A sized plan in a few words: '6 x TP1', or 'disaggregated 9P6D (prefill TP8, decode TP1 DP8 EP8)'."""
    if o.prefill is None:
        return f"{o.replicas + o.spares} x {o.main.label()}"
    return (f"disaggregated {o.prefill_replicas + o.prefill_pool_spares}P{o.replicas + o.spares}D (prefill "
            f"{o.prefill.label()}, decode {o.main.label()})")


def _tie_break(s: _Sized, options: list[_Sized]) -> str:
    """Which rule chose ``s`` over the next plan of equal cost (none: "")."""
    key = s.sort_key()
    tied = sorted((o for o in options if o is not s and o.sort_key()[:2] == key[:2]), key=_Sized.sort_key)
    if not tied or s.cost_per_hour is None:
        return ""
    o = tied[0]
    other = _plan_words(o)
    if o.main.nodes != s.main.nodes:
        return (f"cost tie with {other} ({o.main.nodes} nodes per replica): chose {s.main.nodes} node(s) per replica, "
                "which survives a node loss with the other replicas serving and keeps each replica off the "
                "inter-node network")
    if abs(o.headroom_rps - s.headroom_rps) > 1e-9 * max(s.headroom_rps, 1.0):
        return (f"cost tie with {other}: chose the one with more headroom ({s.headroom_rps:.3g} against "
                f"{o.headroom_rps:.3g} requests/s on the rented GPUs within the SLOs)")
    if o.tpot_s != s.tpot_s:
        return f"cost tie with {other}: chose the lower TPOT ({s.tpot_s * 1e3:.1f} against {o.tpot_s * 1e3:.1f} ms)"
    return ""


def _placement(s: _Sized) -> list[ReplicaPlacement]:
    """Which replica runs on which node and GPUs: each pool packed in order (replicas smaller than a node share
    nodes, larger ones take whole nodes); the prefill pool first, then the serving (decode) pool, spares last, on
    nodes of their own when a node is the failure unit (spare_replicas)."""
    node = s.system.gpus_per_node
    pools: list[tuple[str, int, int, int]] = []        # (role, gpus per replica, serving, spares)
    if s.prefill is not None:
        pools.append(("prefill", s.prefill.gpus, s.prefill_replicas, s.prefill_pool_spares))
    pools.append(("decode" if s.prefill is not None else "serving", s.main.gpus, s.replicas, s.spares))
    out: list[ReplicaPlacement] = []
    first_node = 0
    for role, g, n, k in pools:
        per_node = max(node // g, 1) if g <= node else 0
        own = k and g < node and node_is_failure_unit(g, node, s.price)   # spares on nodes of their own
        group = min(per_node, max(n, 1)) if own else 0
        for i in range(n + k):
            if per_node and own and i >= n:
                j = i - n
                nodes = [first_node + -(-n // per_node) + j // group]
                start = (j % group) * g
                gpus = list(range(start, start + g))
            elif per_node:
                nodes = [first_node + i // per_node]
                start = (i % per_node) * g
                gpus = list(range(start, start + g))
            else:
                span = -(-g // node)
                nodes = [first_node + i * span + j for j in range(span)]
                gpus = list(range(node))
            out.append(ReplicaPlacement(replica=len(out), role=role if i < n else "spare " + role,
                                        nodes=nodes, gpus=gpus))
        first_node = max(x for r in out for x in r.nodes) + 1 if out else 0
    return out


def plan_cluster(req: PlanQuestion, verify: bool = False, verify_requests: int | None = None) -> PlanResult:
    """Answer a planning question (see the module docstring); ``verify`` simulates the recommendation."""
    from ..arch import load_model

    if req.failover < 0:
        raise ClusterfitError(f"failover must be >= 0, got {req.failover}")
    model = load_model(req.model)
    systems = resolve_systems(req.systems, req.catalog)
    space = SearchSpace(systems, req.precisions, req.kv_dtypes, req.engine, req.max_nodes_per_replica,
                        req.disaggregated, req.max_batch, engines_file=req.catalog.engines_file if req.catalog else None,
                        catalog=req.catalog, confidence=req.confidence, speculative=req.speculative)
    wl, slo = req.workload, req.slo
    result = search(model, space, wl, slo)
    if req.systems and len(result.refused) == len(systems):
        # systems the user named, every one refused by the engine (another vendor's GPU, no MoE kernel for the
        # experts): an error, as perf and fit say
        raise ParameterError("engine", result.refused[systems[0].id])
    if req.capacity_mode:
        from .budget import plan_capacity

        return plan_capacity(req, model, result)
    need = _need(wl)
    ranked = _best_per_system(req, result, need)
    sized_on = req.confidence if req.confidence not in (None, 50) else None
    rows = [_row(s, wl, req.hours_per_month, model, need, sized_on) for s in ranked]
    pareto = {}
    for sys_id in dict.fromkeys(c.system.id for c in result.candidates):
        pareto[sys_id] = _pareto([c for c in result.candidates if c.system.id == sys_id], wl, model)
    out = PlanResult(model=model.name, workload=wl.describe(), slo=slo.describe(), failover=req.failover,
                     engine=req.engine, feasible=bool(rows), recommended=None, per_system=rows, pareto=pareto,
                     configurations_evaluated=result.configurations_evaluated,
                     candidates_compiled=len(result.candidates), not_fitting=result.skipped,
                     queueing_model=QUEUEING_MODEL, confidence=req.confidence, hours_per_month=req.hours_per_month,
                     one_output_token=wl.one_output_token or None,
                     speculative=_speculative_block(req.speculative, model,
                                                    req.catalog.draft_head if req.catalog is not None else None))
    out.no_plan = _no_plan(result, {r.system for r in rows}, slo, model, sized_on)
    out.longest_request = longest_request(wl)
    priced = [r for r in rows if r.cost_per_hour is not None]
    if rows:
        top = priced[0] if priced else rows[0]
        rec = top.model_copy(update={"explanation": _recommendation_text(top, priced or rows, wl, slo, bool(priced),
                                                                         req.hours_per_month)})
        out.recommended = rec
        # the settings the recommended replica was compiled with (its GPU's, layout's and KV pool's defaults under
        # the user's settings)
        settings = req.catalog.settings if req.catalog is not None else None
        out.engine_settings = ServingEngineSettings.of(ranked[rows.index(top)].main.step.engine,
                                                       settings.given() if settings is not None else [])
        if req.endpoint is not None and rec.cost_per_hour is not None:
            out.endpoint = _endpoint(rec, ranked[0], req, wl)  # priced plans sort first
        if verify:
            from .verify import verify_plan

            out.verify = verify_plan(ranked[rows.index(top)], rec, req, verify_requests)
    else:
        out.closest = _closest(result.candidates, slo, model)
        out.explanation = _infeasible_text(out.closest, slo, wl, result)
        if verify:
            out.verify = SkippedVerification(reason="no plan meets the SLOs; nothing to verify")
    return out


def _speculative_block(spec: SpeculativeSpec | None, model: ModelArch, head: object = None) -> dict | None:
    """The plan's speculative decoding as its JSON shows it (perf's block: speculative.Drafting.as_dict, the draft
    cost the model and the user's EAGLE head give)."""
    return None if spec is None else spec.for_model(model, head).drafting().as_dict()


def speed_calibrated(system: System) -> bool:
    """Whether published measurements on this kind of accelerator calibrate the performance model.

    The kernel efficiencies are fitted on an NVIDIA H200 and the engine constants on NVIDIA GPUs (A100, L40S,
    Hopper, Blackwell, RTX PRO); AMD, Intel and Google accelerators are extrapolated from their datasheets only.
    """
    return getattr(system.gpu, "vendor", "nvidia") == "nvidia"


def _recommendation_text(rec: PlanOption, rows: list[PlanOption], wl: Workload, slo: SLO, priced: bool,
                         hours_per_month: float) -> str:
    """The recommendation's text; ``hours_per_month``: the hours cost_per_month is billed for (PlanQuestion's)."""
    spare = f" including {rec.spare_replicas} spare" if rec.spare_replicas else ""
    if rec.prefill is not None:
        p = rec.prefill
        text = (f"disaggregated {rec.xPyD} on {rec.system} ({rec.precision}): {p.replicas} prefill "
                f"replica(s) {p.layout} ({p.gpus_per_replica} GPUs) and {rec.replicas} decode replica(s) "
                f"{rec.layout} ({rec.gpus_per_replica} GPUs){spare + ' per pool' if spare else ''}: {rec.nodes} "
                f"node(s), {rec.total_gpus} GPUs")
    else:
        text = (f"{rec.replicas} x {rec.system} replica(s){spare} ({rec.precision}, {rec.layout}, "
                f"{rec.gpus_per_replica} GPUs over {rec.nodes_per_replica} node(s) each): {rec.nodes} "
                f"node(s), {rec.total_gpus} GPUs")
    if rec.cost_per_hour is not None:
        month = rec.cost_per_month or 0.0
        hours = f" of {hours_per_month:,.0f} h" if month > 0 else ""
        text += (f", ${rec.cost_per_hour:,.2f}/h (${month:,.0f}/month{hours}), "
                 f"${rec.cost_per_mtok_out or 0.0:.2f} per million output tokens at the target load")
    tpot = f"TPOT p{slo.tpot_percentile:g} {rec.tpot_s * 1e3:.1f} ms and " if rec.tpot_s is not None else ""
    text += (f". At {wl.load.describe()} each {'decode ' if rec.prefill else ''}replica runs batch {rec.batch:.0f} "
             f"with {tpot}TTFT p{slo.ttft_percentile:g} {rec.ttft_s * 1e3:.0f} ms. "
             f"What binds: {rec.binding} - {rec.why}.")
    if rec.sized_on is not None:
        b = rec.sized_on
        text += (f" Sized on the {b.confidence}% interval's pessimistic bound: TTFT {b.ttft_s * 1e3:.0f} ms, "
                 + ("" if b.tpot_s is None else f"TPOT {b.tpot_s * 1e3:.1f} ms, ")
                 + f"{b.requests_per_s_per_replica:.3g} requests/s per "
                 f"{'decode ' if rec.prefill else ''}replica (the figures above are point predictions).")
    if len(rows) > 1 and priced and rows[1].cost_per_hour and rec.cost_per_hour:
        r2 = rows[1]
        text += (f" Next best: {r2.system} at ${r2.cost_per_hour:,.2f}/h "
                 f"({(r2.cost_per_hour or 0.0) / rec.cost_per_hour - 1:+.0%}).")
    if not priced:
        text += " No catalog price for these systems: ranked by GPUs; pass --price SYSTEM=$/GPU-hour."
    if not rec.speed_calibrated:
        text += (f" Caution: {rec.system}'s speed is extrapolated from its datasheet with efficiencies fitted on "
                 "NVIDIA GPUs; no published measurement of this accelerator calibrated it (restrict the search "
                 "with --system to compare calibrated systems only).")
    return text


def longest_request(wl: Workload) -> LongestRequest:
    """The workload's longest request, as a plan records it (deploy checks --max-model-len against it)."""
    prompt, output, fixed = wl.longest_request()
    return LongestRequest(prompt_tokens=prompt, output_tokens=output, fixed=fixed)


def _no_plan(result: SearchResult, planned: set[str], slo: SLO, model: ModelArch, sized_on: int | None) -> list[str]:
    """Per system searched whose layouts fit but none meets the SLOs: why, with its closest miss (the table would
    otherwise leave it out without a word); ``sized_on``: the --confidence bound the figures are at."""
    bound = f" (at the {sized_on}% pessimistic bound)" if sized_on is not None else ""
    out = []
    for sys_id in dict.fromkeys(c.system.id for c in result.candidates):
        if sys_id in planned:
            continue
        closest = _closest([c for c in result.candidates if c.system.id == sys_id], slo, model)
        if closest is None:
            out.append(f"{sys_id}: no layout holds a request of this workload in its KV cache")
        elif closest.missed:
            out.append(f"{sys_id}: no layout meets the targets; closest {closest.precision} {closest.layout} at batch "
                       f"{closest.batch:.0f}: {'; '.join(closest.missed)}{bound}")
        else:
            out.append(f"{sys_id}: no layout carries the load within the targets (goodput or capacity); closest "
                       f"{closest.precision} {closest.layout}")
    return out


def _infeasible_text(closest: ClosestMiss | None, slo: SLO, wl: Workload, result: SearchResult) -> str:
    if closest is None:
        reasons = "; ".join(result.skipped) or "no candidate fits in memory"
        return f"No configuration can serve this model: {reasons}."
    return (f"No configuration meets {slo.describe()}. Closest: {closest.system} {closest.precision} "
            f"{closest.layout} - {closest.why} What binds: {closest.binding}.")


def _endpoint(rec: PlanOption, sized: _Sized, req: PlanQuestion, wl: Workload) -> EndpointComparison:
    ep = req.endpoint
    assert ep is not None and rec.cost_per_hour is not None and sized.price is not None
    cluster = rec.cost_per_hour
    endpoint_cost = ep.cost_per_hour(rec.requests_per_s, wl.isl_mean_tokens, wl.osl_mean_tokens)
    per_req = ep.usd_per_request(wl.isl_mean_tokens, wl.osl_mean_tokens)
    pools = [Pool(_rps_per_replica(sized), sized.main.gpus * sized.price.usd_per_gpu_hour, sized.spares)]
    if sized.prefill is not None and sized.prefill.prefill is not None:
        pools.append(Pool(sized.prefill.prefill.rate_rps, sized.prefill.gpus * sized.price.usd_per_gpu_hour,
                          sized.prefill_pool_spares))
    be = break_even_rps(pools, per_req)
    v = verdict(cluster, endpoint_cost)
    scale = cluster / endpoint_cost if endpoint_cost > 0 else math.inf
    return EndpointComparison(
        input_per_mtok=ep.input_per_mtok, output_per_mtok=ep.output_per_mtok,
        endpoint_cost_per_hour=endpoint_cost, cluster_cost_per_hour=cluster,
        verdict=v, break_even_requests_per_s=be,
        break_even_output_tokens_per_s=None if be is None else be * wl.osl_mean_tokens,
        cluster_equivalent_per_mtok=PerMtok(input=ep.input_per_mtok * scale, output=ep.output_per_mtok * scale),
        explanation=(
            f"At {rec.requests_per_s:.3g} requests/s the endpoint would cost ${endpoint_cost:,.2f}/h against "
            f"${cluster:,.2f}/h for the cluster: {'rent the cluster' if v == 'cluster' else 'use the endpoint'}. "
            + (f"The cluster (sized for the load, N+{req.failover}) breaks even from {be:.3g} requests/s "
               f"({be * wl.osl_mean_tokens:,.0f} output tokens/s)." if be is not None else
               "Even fully loaded, the cluster costs more per token than the endpoint: no break-even.")))


def _rps_per_replica(s: _Sized) -> float:
    """Requests/s one (decode) replica completes at its full-capacity batch."""
    curve = s.main.agg if s.mode == "aggregated" else s.main.decode
    assert curve is not None
    i = int(np.flatnonzero(curve.batch == s.best_batch)[0])
    return float(curve.rate_rps[i])
