"""The search: every system x precision x KV dtype x valid layout x batch cap, aggregated and disaggregated.

For each (system, precision, KV dtype) the candidate layouts are enumerated as arrays (layout_candidates.py),
pruned by a weight-bytes lower bound (a replica whose GPUs cannot even hold the weights is skipped before
compiling), compiled once each (``perf.compile_step``), and evaluated over a whole batch grid at once
(capacity.py). A candidate's capacity is the largest load one replica carries within the SLO; the
replicas for the target load follow, plus the N+k failover spares, then nodes, GPUs and cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple


from ..errors import ClusterfitError
from .capacity import (AggregatedCurve, DecodeCurve, PendingCurve, PendingPrefill, PrefillCapacity, batch_grid,
                       decode_curve, finish_curves, finish_prefills, kv_batch_bound, pending_and_prefill, pending_curve)
from .layout_candidates import candidate_layouts
from .workload import SLO, Workload

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..arch import ModelArch
    from ..compose import Catalog
    from ..hardware import System
    from ..layout import Layout
    from ..perfmodel.step import StepModel
    from ..precision import Precision
    from ..engines import Engine
    from ..sim.config import SpeculativeSpec
    from ..speculative import Drafting


@dataclass
class Candidate:
    """One compiled replica layout on one system at one precision, with its curves."""

    system: System
    precision: Precision
    precision_name: str
    kv_dtype: str
    layout: tuple[int, int, int, int]           # tp, pp, ep, dp
    step: StepModel
    agg: AggregatedCurve
    decode: DecodeCurve | None = None
    prefill: PrefillCapacity | None = None
    drafting: Drafting | None = None            # speculative decoding the curves were priced with

    @property
    def gpus(self) -> int:
        tp, pp, _, dp = self.layout
        return tp * pp * dp

    @property
    def nodes(self) -> int:
        """Nodes one replica spans (1 when it fits inside a node)."""
        return max(1, math.ceil(self.gpus / self.system.gpus_per_node))

    def label(self) -> str:
        tp, pp, ep, dp = self.layout
        parts = [f"TP{tp}"] + ([f"DP{dp}"] if dp > 1 else []) + ([f"EP{ep}"] if ep > 1 else []) + \
            ([f"PP{pp}"] if pp > 1 else [])
        return " ".join(parts)


@dataclass
class SearchSpace:
    """What to search. ``precisions``/``kv_dtypes``: None entries mean the checkpoint's / engine's default."""

    systems: list[System]
    precisions: list[str | None]
    kv_dtypes: list[str | None]
    engine: str = "vllm"
    max_nodes_per_replica: int = 4
    disaggregated: bool = True
    max_batch: int | None = None
    engines_file: str | None = None       # catalog/engines.yaml unless given
    #: The catalogs in force; its ``engine`` applies the user's engine settings (max_num_seqs, ...). None: the
    #: built-in engines with their defaults (from ``engines_file``).
    catalog: Catalog | None = None
    #: Largest replica tried, as a multiple of the fewest GPUs that could hold the weights (at least one
    #: node). Bigger replicas only split the same work thinner; raise it for very tight TPOT targets.
    max_replica_factor: int = 4
    #: ``plan --confidence`` (percent): curves at the pessimistic bound of that interval (capacity.py); None or
    #: 50: the point prediction.
    confidence: int | None = None
    #: Speculative decoding on every replica (sim.config.SpeculativeSpec; its draft cost follows from the model
    #: when not given): the engine's defaults under it (Engine.for_speculative) and the curves' speculative steps.
    speculative: SpeculativeSpec | None = None


@dataclass
class SearchResult:
    candidates: list[Candidate]
    configurations_evaluated: int
    skipped: list[str] = field(default_factory=list)   # (system, precision): why nothing fits
    #: system id -> why the engine refuses it outright (another vendor's GPU, or no MoE kernel for the experts under
    #: any precision searched): plan_cluster makes it an error when every system the user named is refused
    refused: dict[str, str] = field(default_factory=dict)


def _runnable_precisions(model: ModelArch, precisions: Sequence[str | None], eng: Engine, system: System,
                         skipped: list[str]) -> tuple[list[str | None], str | None]:
    """The precisions whose routed experts ``eng`` runs on ``system``'s GPU (Engine.experts_refused), each refused
    one's reason appended to ``skipped``; and, when it refuses them all, the first reason (else None)."""
    from ..precision import experts_format, resolve_precision

    runnable, reasons = [], []
    for name in precisions:
        prec = resolve_precision(model, name)
        why = eng.experts_refused(experts_format(model, prec), system.gpu)
        if why is None:
            runnable.append(name)
        else:
            reasons.append(why)
            skipped.append(f"{system.id} {prec.name}: {why}")
    return runnable, (reasons[0] if reasons and not runnable else None)


def weights_lower_bound_gpus(model: ModelArch, system: System, precision: Precision, utilisation: float) -> int:
    """Fewest GPUs whose memory (x engine utilisation) could hold the weights: a pruning bound."""
    weight_bytes = sum(precision.bytes_for(c, n) for c, n in model.params.items() if c not in ("mtp", "vision"))
    usable = system.gpu.usable_memory_bytes * utilisation
    return max(1, math.ceil(weight_bytes / usable))


def max_replica_gpus(system: System, max_nodes: int) -> int:
    """Largest replica tried: ``max_nodes`` nodes, or as many GPUs inside a larger NVLink domain (NVL72)."""
    return max(max_nodes * system.gpus_per_node, min(system.scale_up_domain_gpus, max_nodes * 8))


class _Found(NamedTuple):
    """A layout the search compiled, with its aggregated curve (and, disaggregated, its prefill capacity) pending until
    every layout's is (capacity.finish_curves, finish_prefills)."""

    system: System
    precision: Precision
    layout: tuple[int, int, int, int]
    sm: StepModel
    decode: DecodeCurve | None
    prefill: PendingPrefill | None   # not None exactly when the search is disaggregated
    agg: PendingCurve


def search(model: ModelArch, space: SearchSpace, workload: Workload, slo: SLO) -> SearchResult:
    """Compile and evaluate every candidate; returns them with their capacity curves."""
    from ..compose import compile_replica
    from ..deadline import check as check_deadline
    from ..precision import resolve_precision
    from ..engines import get_engine
    from ..intervals import bands_for, step_margins
    from ..perfmodel.comm import links_for

    engine = get_engine(space.engine, space.engines_file)
    head = space.catalog.draft_head if space.catalog is not None else None
    drafting = space.speculative.for_model(model, head).drafting() if space.speculative is not None else None
    candidates: list[Candidate] = []
    pending: list[_Found] = []
    evaluated = 0
    skipped: list[str] = []
    refused: dict[str, str] = {}
    for system in space.systems:
        if not engine.runs_on(system.gpu):
            refused[system.id] = engine.not_on(system)
            skipped.append(refused[system.id])
            continue
        eng = (space.catalog.engine(space.engine, system) if space.catalog is not None
               else engine.for_gpu(system.gpu.id).for_device(system.gpu))
        curves = space.catalog.curves(system.gpu) if space.catalog is not None else None  # a profile's, for its GPU
        up, out = links_for(system)
        kv_link = up if system.scale_up_domain_gpus > system.gpus_per_node else out
        # the largest memory fraction any layout gets (SGLang's default shrinks as TP, PP and DP grow)
        largest_fraction = eng.for_layout(system.gpu, 1).gpu_memory_utilization
        margins = (step_margins(bands_for(eng.name, system.gpu.id, model), space.confidence)
                   if space.confidence not in (None, 50) else None)
        max_gpus = max_replica_gpus(system, space.max_nodes_per_replica)
        runnable, why = _runnable_precisions(model, space.precisions, eng, system, skipped)
        if why is not None:
            refused[system.id] = why
        for prec_name in runnable:
            for kv in space.kv_dtypes:
                prec = resolve_precision(model, prec_name, kv_dtype=kv)
                min_gpus = weights_lower_bound_gpus(model, system, prec, largest_fraction)
                top = min(max_gpus, max(system.gpus_per_node, space.max_replica_factor * min_gpus))
                layouts = candidate_layouts(model, system, top, min_gpus)
                found = 0
                for tp, pp, ep, dp in layouts.tolist():
                    check_deadline()   # an HTTP call's budget (clusterfit.deadline): stop, freeing its worker
                    lay = _layout(tp, pp, ep, dp)
                    try:
                        sm = compile_replica(model, system, prec, lay, eng if drafting is None else
                                             eng.for_speculative(dp, drafting.method), curves=curves).step
                    except ClusterfitError:
                        continue
                    if sm.kv_capacity_tokens <= 0:
                        continue
                    cap = sm.max_num_seqs if space.max_batch is None else min(sm.max_num_seqs, space.max_batch)
                    kv_bound = kv_batch_bound(sm, workload)   # once per layout: the grid and both curves use it
                    grid = batch_grid(cap, kv_bound=kv_bound)
                    evaluated += grid.size
                    prefill: PendingPrefill | None = None
                    decode = None
                    if space.disaggregated:   # both curves' steps timed together (pending_and_prefill)
                        agg, prefill = pending_and_prefill(sm, workload, slo, grid, kv_link, margins, drafting,
                                                           kv_bound)
                        decode = decode_curve(sm, workload, slo, grid, agg.decode_only_s, margins, kv_bound=kv_bound)
                        evaluated += grid.size + prefill.points
                    else:
                        agg = pending_curve(sm, workload, slo, grid, margins, drafting, kv_bound)
                    pending.append(_Found(system, prec, (tp, pp, ep, dp), sm, decode, prefill, agg))
                    found += 1
                if not found:
                    skipped.append(f"{system.id} {prec.name}: no layout up to {max_gpus} GPUs fits "
                                   f"(weights alone need >= {min_gpus} GPUs)")
    # every layout's aggregated curve and prefill capacity finished together (capacity.finish_curves and
    # finish_prefills: one TTFT-quantile call for all the one-class ones)
    finished = finish_curves([f.agg for f in pending])
    prefills: Sequence[PrefillCapacity | None] = (
        finish_prefills([f.prefill for f in pending if f.prefill is not None]) if space.disaggregated
        else [None] * len(pending))
    for f, curve, prefill_capacity in zip(pending, finished, prefills):
        candidates.append(Candidate(f.system, f.precision, f.precision.name, f.precision.kv_dtype, f.layout, f.sm,
                                    curve, f.decode, prefill_capacity, drafting=drafting))
    return SearchResult(candidates, evaluated, skipped, refused)


def _layout(tp: int, pp: int, ep: int, dp: int) -> Layout:
    from ..layout import Layout

    return Layout(tp=int(tp), pp=int(pp), ep=int(ep), dp=int(dp))
