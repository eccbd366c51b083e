"""From a ``schema.PlanRequest`` (command-line options, API keywords, a scenario file) to a ``PlanQuestion``.

A scenario file gives the defaults; every option given in the request wins over it. Engine settings (options over
the scenario's ``engine_settings:``) ride on the question's catalog (``compose.Catalog.settings``), so the search
compiles every candidate with them; an option also replaces the scenario's ``simulation.replica`` key of the same
name for ``--verify``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..arch import load_model
from ..compose import Catalog
from ..errors import ClusterfitError, no_decode_tpot
from ..schema import ParameterError, PlanRequest
from .cost import EndpointPrice, PriceOverrides, canonical_prices, merged_prices, parse_price_overrides
from .planner import PlanQuestion
from .workload import SLO, LengthDist, Load, LoadKind, Workload, load_problem, unjudged_slo_term

if TYPE_CHECKING:  # loaded where used: a plan without a scenario file or speculative options needs neither
    from ..sim.config import SpeculativeSpec
    from .scenario import Scenario


def _load(req: PlanRequest) -> Load | None:
    """The load the request gives; more than one is an error naming the second one given."""
    kinds: tuple[tuple[str, LoadKind, float | None], ...] = (
        ("rate", "requests_per_s", req.rate), ("concurrency", "concurrent_sessions", req.concurrency),
        ("tokens_per_s", "output_tokens_per_s", req.tokens_per_s))
    given = [(name, kind, v) for name, kind, v in kinds if v is not None]
    if len(given) > 1:
        raise ParameterError(given[1][0], f"give only one of rate, concurrency, tokens_per_s ({given[0][0]} is "
                             "given too)")
    if not given:
        return None
    name, kind, value = given[0]
    problem = load_problem(kind, value)   # Load checks it too: here the option is named
    if problem is not None:
        raise ParameterError(name, problem)
    return Load(kind, value)


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1e3


def build_question(req: PlanRequest) -> PlanQuestion:
    """Merge the scenario file (if any) with the request's options; options win."""
    load = _load(req)
    if req.nodes is not None and req.gpus is not None:
        raise ParameterError("gpus", "give the budget as nodes or as gpus, not both")
    capacity = req.nodes is not None or req.gpus is not None
    if capacity and load is not None:
        raise ParameterError("nodes" if req.nodes is not None else "gpus",
                             "capacity mode (nodes/gpus) answers the load the budget carries: drop rate, "
                             "concurrency and tokens_per_s")
    if capacity:
        load = Load("requests_per_s", 1.0)   # placeholder: capacity curves do not depend on the load
    settings = req.engine_settings()
    catalog = Catalog.load(req.catalog, settings=settings if settings.given() else None, profile=req.profile)
    q = PlanQuestion(model="", workload=None, slo=SLO(None, None, req.ttft_percentile),  # type: ignore[arg-type]
                     catalog=catalog)
    model, systems, precisions, kv_dtypes = req.model, req.systems, req.precisions, req.kv_dtypes
    engine, failover, max_nodes, disagg = req.engine, req.failover, req.max_nodes, not req.no_disagg
    scenario_prices = PriceOverrides()
    if req.scenario is not None:
        from .scenario import load_scenario

        sc = load_scenario(req.scenario)
        _check_scenario_clashes(req, sc, capacity)
        merged = settings.over(sc.engine_settings.to_settings())
        q.catalog = replace(catalog, settings=merged if merged.given() else None)
        wl = sc.to_workload()
        slo = sc.to_slo()
        model = model or sc.model
        systems = systems or sc.systems
        precisions = precisions or [p for p in sc.precisions() if p is not None] or None
        kv_dtypes = kv_dtypes or [k for k in sc.kv_dtypes() if k is not None] or None
        engine = engine or sc.engine
        failover = sc.cost.failover if failover is None else failover
        scenario_prices = canonical_prices(
            [(k, v, f"{k}={v:g}") for k, v in sc.cost.prices.items()], catalog.hardware,
            lambda key, problem: ClusterfitError(f"scenario file {req.scenario}: cost.prices.{key}: {problem}"),
            "the scenario's cost.prices")
        q.hours_per_month = sc.cost.hours_per_month
        if sc.cost.endpoint is not None:
            q.endpoint = EndpointPrice(sc.cost.endpoint.input_per_mtok, sc.cost.endpoint.output_per_mtok)
        max_nodes = max_nodes or sc.search.max_nodes_per_replica
        disagg = disagg and sc.search.disaggregated
        q.workload = _scenario_workload(req, wl, load)
        q.simulation = _checked_simulation(sc.simulation, req, q.workload, settings.given())
        q.slo = slo
        if req.ttft_ms is not None or req.tpot_ms is not None:
            # the scenario's TTFT percentile stands unless --ttft-percentile is given (its default, 90, is no choice)
            pct = req.ttft_percentile if "ttft_percentile" in req.model_fields_set else slo.ttft_percentile
            q.slo = SLO(_ms(req.ttft_ms) if req.ttft_ms is not None else slo.ttft_s,
                        _ms(req.tpot_ms) if req.tpot_ms is not None else slo.tpot_s, pct,
                        slo.tpot_percentile, slo.min_goodput)
    else:
        if model is None:
            raise ParameterError("model", "give a MODEL (or --scenario FILE)")
        if req.isl is None or req.osl is None:
            raise ParameterError("isl" if req.isl is None else "osl", "give isl and osl (tokens), or a scenario file")
        if load is None:
            raise ParameterError("rate", "give the target load: rate (requests/s), concurrency or tokens_per_s")
        q.workload = Workload.simple(req.isl, req.osl, load, req.prefix_cache_hit or 0.0)
        q.slo = SLO(_ms(req.ttft_ms), _ms(req.tpot_ms), req.ttft_percentile)
    if req.tpot_percentile is not None or req.min_goodput is not None:  # options win over the scenario's slo
        q.slo = replace(q.slo, **({"tpot_percentile": req.tpot_percentile} if req.tpot_percentile is not None
                                  else {}), **({"min_goodput": req.min_goodput} if req.min_goodput is not None else {}))
    if model is None:
        raise ParameterError("model", "give a model (or 'model:' in the scenario)")
    q.model = model
    q.prices = merged_prices(scenario_prices, parse_price_overrides(req.prices, catalog.hardware), catalog.hardware)
    if req.endpoint_price is not None:
        q.endpoint = EndpointPrice.parse(req.endpoint_price)
    q.systems = _checked_systems(req, systems, catalog)
    q.precisions = list(precisions) if precisions else [None]
    q.kv_dtypes = list(kv_dtypes) if kv_dtypes else [None]
    q.engine, q.failover, q.max_nodes_per_replica = engine or "vllm", failover or 0, max_nodes or 4
    q.disaggregated, q.budget_nodes, q.budget_gpus = disagg, req.nodes, req.gpus
    q.confidence = _confidence(req, capacity)
    q.speculative, q.simulation = _speculative(req, q.simulation)
    q.catalog = _with_draft_head(req, q)
    _check_judged(req, q)
    return q


def _checked_systems(req: PlanRequest, names: list[str] | None, catalog: Catalog) -> list[str] | None:
    """The systems to plan on, as named, checked once where the question is built (compose.Catalog.distinct_systems:
    an unknown name, one system named twice); a scenario's names are refused naming its file (no --system was
    given)."""
    if not names:
        return None
    try:
        catalog.distinct_systems(names)
    except ClusterfitError as exc:
        if req.systems:
            raise
        detail = exc.detail if isinstance(exc, ParameterError) else str(exc)
        raise ParameterError("scenario", f"scenario file {req.scenario}: systems: {detail}") from None
    return list(names)


def _scenario_workload(req: PlanRequest, wl: Workload, load: Load | None) -> Workload:
    """The scenario's workload with the request's lengths, load and prefix-cache hit rate over it (lengths are
    refused beside an agent section: _check_scenario_clashes)."""
    hit = wl.prefix_cache_hit_rate if req.prefix_cache_hit is None else req.prefix_cache_hit
    if wl.agent is not None:
        return Workload(wl.isl, wl.osl, load or wl.load, hit, wl.agent)
    isl = LengthDist.fixed(req.isl, "isl") if req.isl is not None else wl.isl
    osl = LengthDist.fixed(req.osl, "osl") if req.osl is not None else wl.osl
    return Workload(isl, osl, load or wl.load, hit)


def _check_scenario_clashes(req: PlanRequest, sc: Scenario, capacity: bool) -> None:
    """Options that would silently throw away a part of the scenario rather than override a value of it: --isl /
    --osl over an agent section (whose turns define the lengths; the scenario itself refuses isl and osl beside
    one), and a capacity budget (nodes / gpus) over the scenario's load (capacity mode answers the load; on the
    command line a load and a budget are refused together)."""
    from .scenario import check_agent_lengths

    check_agent_lengths(sc, req.scenario, req.isl, req.osl)
    if capacity:
        raise ParameterError("nodes" if req.nodes is not None else "gpus",
                             f"capacity mode (nodes/gpus) answers the load the budget carries, and scenario file "
                             f"{req.scenario} gives one (workload.load); drop the budget, or give the model, lengths "
                             "and SLOs as options")


def _check_judged(req: PlanRequest, q: PlanQuestion) -> None:
    """Options that qualify something absent would be ignored: a TPOT percentile or a least goodput without the
    target it judges (option or scenario), a count of verification requests without --verify; a TPOT target where
    no request decodes (one output token each: it is sampled at the end of the prefill)."""
    if q.slo.tpot_s is not None and q.workload.one_output_token:
        raise no_decode_tpot("tpot_ms" if req.tpot_ms is not None else "osl")
    given = [n for n in ("tpot_percentile", "min_goodput") if getattr(req, n) is not None]
    given += ["ttft_percentile"] if "ttft_percentile" in req.model_fields_set else []
    term = unjudged_slo_term(q.slo.ttft_s is not None, q.slo.tpot_s is not None, given)
    if term is not None:
        name, judged = term
        give = {"tpot_percentile": "--tpot-ms", "ttft_percentile": "--ttft-ms",
                "min_goodput": "--ttft-ms or --tpot-ms"}[name]
        raise ParameterError(name, f"judges {judged}; give {give} (or the scenario's slo)")
    if req.verify_requests is not None and not req.verify:
        raise ParameterError("verify_requests", "sizes the simulation --verify runs; give --verify too")


def _with_draft_head(req: PlanRequest, q: PlanQuestion) -> Catalog | None:
    """The question's catalog carrying the EAGLE head ``speculative_draft_config`` describes (schema.draft_head)."""
    if req.speculative_draft_config is None or q.catalog is None:
        return q.catalog
    head = req.draft_head(load_model(q.model), q.speculative.method if q.speculative is not None else None)
    return replace(q.catalog, draft_head=head)


def _speculative(req: PlanRequest, simulation: object) -> tuple[SpeculativeSpec | None, object]:
    """The plan's speculative decoding: the request's options over the scenario's ``simulation.replica.speculative``
    (either alone will do); the simulation section ``--verify`` runs then carries the same spec."""
    replica = simulation.get("replica") if isinstance(simulation, dict) else None
    raw = replica.get("speculative") if isinstance(replica, dict) else None
    scenario = None
    if raw is not None:
        from ..sim.api import parse_simulation

        scenario = parse_simulation({"replica": {"speculative": raw}}, "scenario file: simulation").replica.speculative
    spec = req.speculative_spec(scenario)
    if spec is None:
        return None, simulation
    section = dict(simulation) if isinstance(simulation, dict) else {}
    section["replica"] = {**(replica if isinstance(replica, dict) else {}),
                          "speculative": spec.model_dump(exclude_none=True)}
    return spec, section


def _confidence(req: PlanRequest, capacity: bool) -> int | None:
    """``--confidence``: refused in capacity mode, which sizes no replicas (it answers the load a budget carries,
    with that load's interval)."""
    if capacity and req.confidence not in (None, 50):
        raise ParameterError("confidence", "sizes replicas for a load; capacity mode (nodes/gpus) answers the load a "
                             "fixed budget carries, with its interval (requests_per_s_interval): drop it")
    return req.confidence


def _checked_simulation(simulation: object, req: PlanRequest, workload: Workload, options: list[str]) -> object:
    """A scenario's ``simulation:`` section, validated as ``clusterfit simulate`` reads it (plan --verify runs it; a
    typo in it is an error, not a section passed through unread): its fields; with --verify (``workload``: the load
    planned, options included), also a closed loop's timing only where the run is one (its own concurrency, or that
    load's concurrent sessions: sim.api.with_load), before the search rather than after it. Returned without the
    replica keys the engine-setting ``options`` replace (without_replica_keys)."""
    if simulation is not None:
        from ..sim.api import parse_simulation, with_load

        sim = parse_simulation(simulation, f"scenario file {req.scenario}: simulation")
        if req.verify:
            with_load(sim, workload, f"scenario file {req.scenario}")
    return without_replica_keys(simulation, options)


def without_replica_keys(simulation: object, names: list[str]) -> object:
    """A scenario's raw ``simulation:`` section without the ``replica`` keys an option replaces (``max_num_seqs``,
    ``max_num_batched_tokens`` given as options win over the scenario's per-replica values)."""
    drop = [n for n in names if n in ("max_num_seqs", "max_num_batched_tokens")]
    if not drop or not isinstance(simulation, dict) or not isinstance(simulation.get("replica"), dict):
        return simulation
    replica = {k: v for k, v in simulation["replica"].items() if k not in drop}
    return {**simulation, "replica": replica}
