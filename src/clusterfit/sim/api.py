"""The simulator's Python API: build the workload and the step model, run, report.

    from clusterfit.sim import simulate, SimulationConfig
    report, run = simulate(step_model, SimulationConfig(replicas=8, requests=50_000,
                                                        arrival={"rate_rps": 40}, input={"dist": "fixed", "value": 1000},
                                                        output={"dist": "fixed", "value": 200}))

``report`` is the JSON shape `clusterfit simulate --json` prints.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import ValidationError

from ..arch import load_model
from ..errors import ClusterfitError, counted, no_decode_tpot
from ..schema import ParameterError, SimulateRequest
from .cluster import FailureTargetError, SimRun, check_failures, run_simulation
from .config import ARRIVAL_PROCESSES, MAX_CLIENTS, ArrivalSpec, SampledLengthSpec, SessionSpec, SimulationConfig, \
    check_policy
from .metrics import short_loop_note, summarize
from .stepmodel import StepCosts
from .trace_files import load_trace
from .requests import Requests, generate

DEFAULT_REQUESTS = 10_000


def parse_simulation(data: Any, source: str = "simulation") -> SimulationConfig:
    """Validate a ``simulation:`` mapping (None: defaults); errors name the field."""
    if data is None:
        return SimulationConfig()
    if isinstance(data, SimulationConfig):
        return data
    if not isinstance(data, dict):
        raise ClusterfitError(f"{source}: must be a mapping")
    try:
        return SimulationConfig.model_validate(data)
    except ValidationError as exc:
        msgs = [f"{'.'.join(str(p) for p in e['loc']) or '(section)'}: {e['msg']}" for e in exc.errors()]
        raise ClusterfitError(f"{source}: " + "; ".join(msgs)) from None


def _dist_spec(dist) -> SampledLengthSpec:
    """A planner LengthDist (weighted points) as an empirical SampledLengthSpec."""
    tokens = np.maximum(np.rint(np.asarray(dist.tokens, float)), 1).astype(int).tolist()
    weights = np.asarray(dist.weights, float).tolist()
    if len(tokens) == 1:
        return SampledLengthSpec(dist="fixed", value=tokens[0])
    return SampledLengthSpec(dist="empirical", values=tokens, weights=weights)


def _run_notes(section: dict[str, Any] | None, req: SimulateRequest, sim: SimulationConfig, workload) -> list[str]:
    """What the run takes from elsewhere than the scenario's workload: the scenario's simulation section (None:
    no scenario; _section_overrides), a trace whose arrival times a closed loop does not use."""
    notes = (_section_overrides(section, req, session_spec(sim, workload) is not None) if section is not None
             else [])
    clients = sim.arrival.concurrency
    if sim.trace and clients is not None:
        notes.append(f"the trace's arrival times are not used: a closed loop of {counted(clients, 'client')} "
                     "sends its requests in their order, each as one ends")
    return notes


def _section_overrides(section: dict[str, Any], req: SimulateRequest, sessions: bool) -> list[str]:
    """A note when a scenario's ``simulation:`` section replaces part of its ``workload:`` (documented, but a rate of
    50/s beside a workload of 5/s in one file is easy to miss): plan sizes for the workload, this run for the section.
    A part the request's options replace in turn is not the section's in this run, and is not named (--arrival
    keeps the section's rate). ``sessions``: the requests come in sessions (a rate then counts sessions)."""
    arrival = section.get("arrival")
    keys = []
    if isinstance(arrival, dict) and req.rate is None and req.concurrency is None:
        if isinstance(arrival.get("rate_rps"), int | float):
            keys.append(f"arrival.rate_rps ({arrival['rate_rps']:g} {'sessions' if sessions else 'requests'}/s)")
        clients = arrival.get("concurrency")
        if isinstance(clients, int) and req.arrival is None:
            keys.append(f"arrival.concurrency ({counted(clients, 'client')})")
    replaced = {"input": req.isl, "output": req.osl, "trace": req.trace}
    keys += [k for k in ("input", "output", "sessions", "trace") if section.get(k) is not None
             and replaced.get(k) is None]
    if not keys:
        return []
    return [f"the scenario's simulation section sets {', '.join('simulation.' + k for k in keys)}: this run uses "
            "them in place of the workload's load and lengths, which `plan` sizes for"]


def build_requests(sim: SimulationConfig, workload=None) -> Requests:
    """The requests to simulate: a trace, or generated from the simulation section and the scenario's
    workload (``clusterfit.planning.workload.Workload``; the simulation section's fields win). Lengths or a rate
    that neither gives are ParameterErrors naming the request's option (isl, osl, rate), which sets them."""
    if sim.trace:
        return load_trace(sim.trace, limit=sim.requests)
    n = sim.requests or DEFAULT_REQUESTS
    rng = np.random.default_rng(sim.seed)
    sessions, inp, out = _sessions_and_lengths(sim, workload)
    if inp is None:
        if workload is None:
            raise ParameterError("isl", "no input lengths: give isl (tokens per prompt), a scenario workload, or "
                                 "simulation.input")
        inp = _dist_spec(workload.isl)
    if out is None:
        if workload is None:
            raise ParameterError("osl", "no output lengths: give osl (tokens per answer), a scenario workload, or "
                                 "simulation.output")
        out = _dist_spec(workload.osl)
    arrival = sim.arrival
    if arrival.rate_rps is None and arrival.concurrency is None:
        arrival = arrival.model_copy(update={"rate_rps": _rate_from_load(workload, out, sessions, arrival)})
    reqs = generate(n, arrival, inp, out, rng, sessions)
    hit = float(getattr(workload, "prefix_cache_hit_rate", 0.0) or 0.0)
    if hit > 0 and sim.replica.prefix_cache:
        reqs = reqs.with_cached_share(hit, _cacheable(reqs, sessions))
    return reqs


def _sessions_and_lengths(sim: SimulationConfig, workload) -> tuple[SessionSpec | None, SampledLengthSpec | None,
                                                                    SampledLengthSpec | None]:
    """The sessions and the input / output lengths the simulation section gives, else the scenario's agent
    workload's (None: the workload's own lengths, or none)."""
    sessions = sim.sessions
    agent = getattr(workload, "agent", None)
    inp, out = sim.input, sim.output
    if sessions is None and agent is not None and inp is None:
        sessions = SessionSpec(turns=agent.turns, shared_prefix_tokens=agent.shared_prefix_tokens,
                               think_time_s=agent.think_time_s,
                               new_tokens=SampledLengthSpec(dist="fixed", value=agent.input_tokens_per_turn))
        inp = SampledLengthSpec(dist="fixed", value=agent.input_tokens_per_turn)
        out = out or SampledLengthSpec(dist="fixed", value=agent.output_tokens_per_turn)
    return sessions, inp, out


def session_think_s(sim: SimulationConfig, workload=None) -> float:
    """A closed loop's wait between a session's answer and its next turn: the sessions' think time (the simulation
    section's, else the agent workload's); a trace's sessions wait the arrival section's think_time_s."""
    sessions = session_spec(sim, workload)
    return sessions.think_time_s if sessions is not None else sim.arrival.think_time_s


def gives_arrivals(sim: SimulationConfig) -> bool:
    """Whether the simulation gives arrivals of its own: a trace, a rate, a concurrency or an open loop's process."""
    a = sim.arrival
    return bool(sim.trace) or a.rate_rps is not None or a.concurrency is not None or bool(a.open_loop_shape())


def load_clients(sim: SimulationConfig, workload=None) -> int | None:
    """The clients of the closed loop a scenario's load of concurrent sessions makes, where the simulation gives no
    arrivals of its own (gives_arrivals) and one simulation runs that many clients (schema.MAX_CLIENTS); None
    otherwise (a load of concurrent sessions then needs a rate: _rate_from_load)."""
    load = getattr(workload, "load", None)
    if load is None or load.kind != "concurrent_sessions" or gives_arrivals(sim) or load.value > MAX_CLIENTS:
        return None
    return int(load.value)


def with_load(sim: SimulationConfig, workload=None, where: str | None = None) -> SimulationConfig:
    """``sim`` with the scenario's load of concurrent sessions as a closed loop (load_clients); a closed loop's
    timing (think_time_s, ramp_s) in a run that stays open loop is a ClusterfitError naming the field, after
    ``where`` (e.g. the scenario file) when given."""
    clients = load_clients(sim, workload)
    if clients is not None:
        return sim.model_copy(update={"arrival": sim.arrival.model_copy(update={"concurrency": clients})})
    timing = sim.arrival.closed_loop_timing() if sim.arrival.concurrency is None else []
    if timing:
        raise ClusterfitError(f"{where + ': ' if where else ''}simulation.arrival.{timing[0]}: times a closed loop's "
                              "clients, but this run is an open loop (give simulation.arrival.concurrency, or a load "
                              "of concurrent sessions)")
    return sim


def session_spec(sim: SimulationConfig, workload=None) -> SessionSpec | None:
    """The sessions the simulation's requests come in (the section's, else the agent workload's; None: independent
    requests, and a trace's own)."""
    return None if sim.trace else _sessions_and_lengths(sim, workload)[0]


def mean_turns(sessions: SessionSpec | None) -> float:
    """Requests per session: the fixed turns, or their mean (1 without sessions)."""
    return 1.0 if sessions is None else float(sessions.turns or sessions.turns_mean)


def _cacheable(reqs: Requests, sessions: SessionSpec | None) -> np.ndarray | None:
    """Prompt tokens the planner's ``prefix_cache_hit_rate`` applies to (workload.Workload.uncached_tokens): the
    whole prompt of independent requests; for sessions the shared prefix (first turns) or the context of the
    earlier turns (later turns), as the planner's agent model counts them."""
    if sessions is None:
        return None
    return np.where(reqs.shared_tokens > 0, reqs.shared_tokens,
                    np.minimum(sessions.shared_prefix_tokens, reqs.input_tokens))


def _rate_from_load(workload, out: SampledLengthSpec, sessions: SessionSpec | None, arrival: ArrivalSpec) -> float:
    """Arrival rate (requests/s, or sessions/s with sessions) from the scenario's target load; a load of concurrent
    sessions that did not become a closed loop (with_load) has none, and the error says why."""
    load = getattr(workload, "load", None)
    per = "sessions/s" if sessions is not None else "requests/s"   # the rate starts sessions (requests.generate)
    if load is None:
        raise ParameterError("rate", f"no arrival rate: give rate ({per}), a scenario load, or "
                             "simulation.arrival.rate_rps")
    if load.kind == "requests_per_s":
        rps = load.value
    elif load.kind == "output_tokens_per_s":
        rps = load.value / workload.osl.mean
    elif load.value > MAX_CLIENTS:
        raise ParameterError("rate", f"{load.value:,.0f} concurrent sessions are more clients than one simulation "
                             f"runs ({MAX_CLIENTS:,}): give a rate ({per}) to simulate them open loop")
    else:
        shape = arrival.open_loop_shape()
        raise ParameterError("rate", "a load of concurrent sessions runs as a closed loop of that many clients"
                             + (f", but the arrival process is an open loop's ({', '.join(shape)}): give its rate "
                                f"({per})" if shape else ": give simulation.arrival.concurrency (a closed loop) "
                                f"or a rate ({per})"))
    return rps / mean_turns(sessions)


def simulate(step_model: StepCosts, sim: SimulationConfig, workload=None, slo=None,
             gpus_per_node: int | None = None, requests: Requests | None = None) -> tuple[dict, SimRun]:
    """Run one simulation; return (report dict, raw run). A closed loop is ``sim.arrival.concurrency`` (with_load
    makes one of a scenario's load of concurrent sessions).

    slo: an object with ``ttft_s``, ``tpot_s`` and optionally ``ttft_percentile``, ``tpot_percentile`` and
    ``min_goodput`` (the planner's SLO); the simulation section's ``slo_*`` fields override it (slo_terms).
    """
    reqs = requests if requests is not None else build_requests(sim, workload)
    run = run_simulation(reqs, step_model, sim, gpus_per_node, session_think_s=session_think_s(sim, workload))
    report = summarize(run, *slo_terms(sim, slo))
    return report, run


def with_draft_cost(sim: SimulationConfig, model: Any, head: Any = None) -> SimulationConfig:
    """``sim`` with its speculative decoding's draft cost derived from ``model`` (a ModelArch) and the user's EAGLE
    head (``head``) where the section does not state it (SpeculativeSpec.for_model); unchanged without speculative
    decoding."""
    spec = sim.replica.speculative
    if spec is None:
        return sim
    replica = sim.replica.model_copy(update={"speculative": spec.for_model(model, head)})
    return sim.model_copy(update={"replica": replica})


def slo_terms(sim: SimulationConfig, slo=None) -> tuple[float | None, float | None, float, float, float]:
    """(TTFT target, TPOT target, TTFT percentile, TPOT percentile, least goodput) judged: the simulation
    section's ``slo_*`` fields over the scenario's SLO over the defaults (p90, p90, 0.9)."""
    def pick(own, name, default):
        if own is not None:
            return own
        v = getattr(slo, name, None)
        return default if v is None else v

    return (pick(sim.slo_ttft_s, "ttft_s", None), pick(sim.slo_tpot_s, "tpot_s", None),
            float(pick(sim.slo_ttft_percentile, "ttft_percentile", 90.0)),
            float(pick(sim.slo_tpot_percentile, "tpot_percentile", 90.0)),
            float(pick(sim.slo_min_goodput, "min_goodput", 0.9)))


def run_request(req: SimulateRequest) -> tuple[dict[str, Any], SimRun]:
    """Run ``clusterfit simulate`` for a request: merge the scenario file (if any) with the request's options
    (options win), compile the replica through the composition root, simulate. Returns (report, run)."""
    from ..compose import Catalog, build_replica

    scen = None
    workload = slo = None
    model, system, precision, kv_dtype, engine = req.model, req.system, req.precision, req.kv_dtype, req.engine
    options = req.engine_settings()
    settings = options
    notes: list[str] = []
    if req.scenario is not None:
        from ..planning.scenario import check_agent_lengths, load_scenario

        scen = load_scenario(req.scenario)
        check_agent_lengths(scen, req.scenario, req.isl, req.osl)
        workload, slo = scen.to_workload(), scen.to_slo()
        model = model or scen.model
        if system is None:
            systems = scen.systems or []
            if len(systems) != 1:
                raise ParameterError("system", "the scenario lists " + (f"{len(systems)} systems" if systems else
                                                                        "no system") + "; choose one")
            system = systems[0]
        for name, given_value, listed in (("precision", precision, scen.precisions()),
                                          ("kv_dtype", kv_dtype, scen.kv_dtypes())):
            if given_value is None and len(listed) > 1:
                notes.append(f"the scenario lists {name} {', '.join(map(str, listed))}: simulated the first, "
                             f"{listed[0]} (choose with --{name.replace('_', '-')})")
        precision = precision or scen.precisions()[0]
        kv_dtype = kv_dtype or scen.kv_dtypes()[0]
        engine = engine or scen.engine
        settings = options.over(scen.engine_settings.to_settings())
    if model is None:
        raise ParameterError("model", "give a MODEL or --scenario FILE")
    if system is None:
        raise ParameterError("system", "give a system (for example hgx_h200)")
    from ..planning.question import without_replica_keys

    sim = _merge_options(req, parse_simulation(
        without_replica_keys(scen.simulation, options.given()) if scen is not None else None,
        f"scenario file {req.scenario}: simulation" if scen else "simulation"), workload)
    sim = with_load(sim, workload, f"scenario file {req.scenario}" if scen is not None else None)
    layout: dict[str, Any] = {"gpus": req.gpus, "tp": req.tp, "pp": req.pp, "ep": req.ep, "dp": req.dp}
    if scen is not None and all(v is None for v in layout.values()):
        layout, replicas = _planned_layout(req, model, system, precision, kv_dtype, engine)
        if replicas is not None and req.replicas is None and "replicas" not in (scen.simulation or {}):
            if sim.autoscale is not None:   # the planned count, within the autoscaler's bounds
                replicas = min(max(replicas, sim.autoscale.min_replicas), sim.autoscale.max_replicas)
            sim = sim.model_copy(update={"replicas": replicas})
    _check_judged(req, *slo_terms(sim, slo)[:2], one_token=_one_token_answers(sim, workload))
    notes.extend(_run_notes(scen.simulation or {} if scen is not None else None, req, sim, workload))
    spec = sim.replica.speculative
    head = (req.draft_head(load_model(model), spec.method if spec is not None else None)
            if req.speculative_draft_config is not None else None)
    rep = build_replica(Catalog.load(req.catalog, settings=settings if settings.given() else None,
                                     profile=req.profile, draft_head=head), model, system,
                        precision=precision, kv_dtype=kv_dtype,
                        engine=engine or "vllm",
                        speculative=spec.method if spec is not None else None,
                        **layout)
    sim = with_draft_cost(sim, rep.model, rep.engine.draft_head)
    try:  # before the requests are built or read: a wrong replica or node is known now
        check_failures(sim, int(getattr(rep.step, "gpus", 1) or 1), rep.system.gpus_per_node)
    except FailureTargetError as exc:
        raise _failure_source(req, sim, exc) from None
    report, run = simulate(rep.step, sim, workload, slo, gpus_per_node=rep.system.gpus_per_node)
    short = short_loop_note(report)
    if short is not None:
        notes.append(short)
    lay = rep.layout
    drafted = sim.replica.speculative
    return {"model": model, "system": rep.system.id, "engine": rep.engine.name, "precision": rep.precision.name,
            "kv_dtype": rep.precision.kv_dtype, "layout": {"tp": lay.tp, "pp": lay.pp, "ep": lay.ep, "dp": lay.dp},
            **report, "notes": notes,
            "speculative": drafted.drafting().as_dict() if drafted is not None else None}, run


def _failure_source(req: SimulateRequest, sim: SimulationConfig, exc: FailureTargetError) -> ClusterfitError:
    """``exc`` naming where its failure came from: the options' failure (--fail-at with --fail-replica or
    --fail-node, _merge_options appends it last) as a ParameterError, a scenario's as its file and field."""
    if req.fail_at is not None and exc.index == len(sim.failures) - 1:
        return ParameterError("fail_node" if exc.field == "node" else "fail_replica", exc.detail)
    if req.scenario is not None:
        return ClusterfitError(f"scenario file {req.scenario}: {exc}")
    return exc


def _planned_layout(req: SimulateRequest, model: str, system: str, precision: str | None, kv_dtype: str | None,
                    engine: str | None) -> tuple[dict[str, Any], int | None]:
    """The layout (tp, pp, ep, dp) and serving replicas `plan --scenario` recommends on ``system`` for aggregated
    serving, so that ``simulate --scenario`` simulates the plan's replicas; the fewest GPUs that fit (and the
    simulation section's replicas) when no aggregated plan meets the scenario's SLOs."""
    from ..planning.planner import plan_cluster
    from ..planning.question import build_question
    from ..schema import PlanRequest, SpeculativeRequest

    preq = PlanRequest(scenario=req.scenario, systems=[system], precisions=[precision] if precision else None,
                       kv_dtypes=[kv_dtype] if kv_dtype else None, engine=engine, no_disagg=True, model=model,
                       catalog=req.catalog, profile=req.profile, max_num_seqs=req.max_num_seqs,
                       max_num_batched_tokens=req.max_num_batched_tokens,
                       gpu_memory_utilization=req.gpu_memory_utilization, enforce_eager=req.enforce_eager,
                       **{name: getattr(req, name) for name in SpeculativeRequest.model_fields})
    rec = plan_cluster(build_question(preq)).recommended
    if rec is None:
        return {}, None
    return {"tp": rec.tp, "pp": rec.pp, "ep": rec.ep, "dp": rec.dp}, rec.serving_replicas


def _one_token_answers(sim: SimulationConfig, workload: Any) -> bool:
    """Whether every request asks for one output token (no request decodes): the options' or the simulation
    section's output lengths, else the scenario's workload; a trace's lengths are not looked at."""
    out = sim.output
    if out is not None:
        return out.dist == "fixed" and out.value == 1
    return sim.trace is None and workload is not None and workload.one_output_token


def _check_judged(req: SimulateRequest, ttft_s: float | None, tpot_s: float | None, one_token: bool = False) -> None:
    """A percentile or a least goodput judges a target: without one (option or scenario) it would be ignored; so
    would a TPOT target where every request's one output token comes from its prefill (``one_token``)."""
    if tpot_s is not None and one_token:
        raise no_decode_tpot("tpot_ms" if req.tpot_ms is not None else "osl")
    for name, target, flag in (("ttft_percentile", ttft_s, "--ttft-ms"), ("tpot_percentile", tpot_s, "--tpot-ms"),
                               ("min_goodput", ttft_s if ttft_s is not None else tpot_s, "--ttft-ms or --tpot-ms")):
        if getattr(req, name) is not None and target is None:
            raise ParameterError(name, f"judges a latency target; give {flag} (or the scenario's slo)")


def _check_failure_options(req: SimulateRequest) -> None:
    """What a failure is, where and how long, means nothing without when (--fail-at); a replica and a node at once
    would be two failures."""
    given = [n for n in ("fail_replica", "fail_node", "restart_after") if n in req.model_fields_set]
    if req.fail_at is None and given:
        raise ParameterError(given[0], "describes a failure: give its time, --fail-at SECONDS")
    if "fail_replica" in given and "fail_node" in given:
        raise ParameterError("fail_node", "a failure takes one replica (--fail-replica) or one node (--fail-node), "
                             "not both")


def _merged_arrival(req: SimulateRequest, sim: SimulationConfig, workload=None) -> dict[str, Any] | None:
    """The arrival section the options give (None: the section's as it is). --rate / --arrival make an open loop
    and --concurrency a closed one, replacing the other kind of the section's; --think-time-s and --ramp-s time a
    closed loop: --concurrency's, the section's, or the one the scenario's concurrent sessions make (load_clients:
    where neither the section nor --trace gives arrivals)."""
    closed = req.concurrency is not None
    if closed and req.rate is not None:
        raise ParameterError("concurrency", "give --rate (an open loop) or --concurrency (a closed loop), not both")
    if closed and req.arrival is not None:
        raise ParameterError("arrival", "shapes open-loop arrivals; a closed loop (--concurrency) sends a request as "
                             "one ends")
    section = sim.arrival
    opens = req.rate is not None or req.arrival is not None
    timing = {k: v for k, v in (("think_time_s", req.think_time_s), ("ramp_s", req.ramp_s)) if v is not None}
    section_closed = section.concurrency is not None or (req.trace is None and load_clients(sim, workload) is not None)
    if timing and not closed and (opens or not section_closed):
        raise ParameterError(next(iter(timing)), "times a closed loop's clients: " + (
            "--rate / --arrival make this run an open loop" if opens else "give --concurrency"
            + (" (the scenario's simulation runs an open loop)" if req.scenario is not None else "")))
    if closed:
        return {"concurrency": req.concurrency, "think_time_s": section.think_time_s, "ramp_s": section.ramp_s} \
            | timing
    if not opens:
        return None if not timing else section.model_dump() | timing
    # an open loop: the section's shape, without its closed loop's clients
    return section.model_dump() | {"concurrency": None, "think_time_s": 0.0, "ramp_s": None} \
        | ({"rate_rps": req.rate} if req.rate is not None else {}) \
        | ({"process": req.arrival} if req.arrival is not None else {})


def _merge_options(req: SimulateRequest, sim: SimulationConfig, workload=None) -> SimulationConfig:
    """The scenario's simulation section with the request's options applied on top. A trace brings its own
    arrivals and lengths: rate, arrival, isl, osl and length_cv cannot be given with it. ``workload``: the scenario's
    (its load of concurrent sessions makes a closed loop that --think-time-s / --ramp-s may time)."""
    if req.trace is not None or sim.trace is not None:
        clash = [n for n, v in (("rate", req.rate), ("arrival", req.arrival), ("isl", req.isl), ("osl", req.osl))
                 if v is not None] + (["length_cv"] if req.length_cv else [])
        if clash:
            raise ParameterError(clash[0], "a trace gives the arrivals and lengths; drop "
                                 + ", ".join(f"--{c.replace('_', '-')}" for c in clash) + " or the trace")
    if req.policy is not None:
        check_policy(req.policy)
    if req.arrival is not None and req.arrival not in ARRIVAL_PROCESSES:
        raise ParameterError("arrival", f"unknown arrival process {req.arrival!r}; choose one of "
                             f"{', '.join(ARRIVAL_PROCESSES)}")
    arrival = _merged_arrival(req, sim, workload)
    upd: dict[str, Any] = {}
    for key, val in (("replicas", req.replicas), ("requests", req.requests), ("seed", req.seed),
                     ("policy", req.policy), ("trace", req.trace)):
        if val is not None:
            upd[key] = val
    if req.ttft_ms is not None:
        upd["slo_ttft_s"] = req.ttft_ms / 1e3
    if req.tpot_ms is not None:
        upd["slo_tpot_s"] = req.tpot_ms / 1e3
    judged = {"slo_ttft_percentile": req.ttft_percentile, "slo_tpot_percentile": req.tpot_percentile,
              "slo_min_goodput": req.min_goodput}
    upd.update({k: v for k, v in judged.items() if v is not None})
    for key, val in (("input", req.isl), ("output", req.osl)):
        if val is not None:
            upd[key] = ({"dist": "fixed", "value": val} if req.length_cv == 0
                        else {"dist": "lognormal", "mean": val, "cv": req.length_cv})
    if arrival is not None:
        upd["arrival"] = arrival
    spec = req.speculative_fields(sim.replica.speculative.model_dump() if sim.replica.speculative else None)
    if spec is not None:
        upd["replica"] = sim.replica.model_dump() | {"speculative": spec}
    _check_failure_options(req)
    scale = sim.autoscale
    if req.replicas is not None and scale is not None and not scale.min_replicas <= req.replicas <= scale.max_replicas:
        # the section's own rule (SimulationConfig._replicas_within_bounds), named after the option that broke it
        raise ParameterError("replicas", f"{req.replicas} is outside the simulation's autoscale bounds "
                             f"[min_replicas, max_replicas] = [{scale.min_replicas}, {scale.max_replicas}]")
    if req.fail_at is not None:
        upd["failures"] = [f.model_dump() for f in sim.failures] + [
            {"at_s": req.fail_at, "replica": None if req.fail_node is not None else req.fail_replica,
             "node": req.fail_node, "restart_s": req.restart_after}]
    if not upd:
        return sim
    return parse_simulation(sim.model_dump() | upd, "options")
