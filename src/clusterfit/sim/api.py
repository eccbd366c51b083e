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

from ..errors import ClusterfitError
from .cluster import SimRun, run_simulation
from .config import SampledLengthSpec, SessionSpec, SimulationConfig
from .metrics import summarize
from .stepmodel import StepModel
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


def build_requests(sim: SimulationConfig, workload=None) -> Requests:
    """The requests to simulate: a trace, or generated from the simulation section and the scenario's
    workload (``clusterfit.plan.workload.Workload``; the simulation section's fields win)."""
    if sim.trace:
        return load_trace(sim.trace, limit=sim.requests)
    n = sim.requests or DEFAULT_REQUESTS
    rng = np.random.default_rng(sim.seed)
    sessions = sim.sessions
    agent = getattr(workload, "agent", None)
    inp, out = sim.input, sim.output
    if sessions is None and agent is not None and inp is None:
        sessions = SessionSpec(turns=agent.turns, shared_prefix_tokens=agent.shared_prefix_tokens,
                               think_time_s=agent.think_time_s,
                               new_tokens=SampledLengthSpec(dist="fixed", value=agent.input_tokens_per_turn))
        inp = SampledLengthSpec(dist="fixed", value=agent.input_tokens_per_turn)
        out = out or SampledLengthSpec(dist="fixed", value=agent.output_tokens_per_turn)
    if inp is None:
        if workload is None:
            raise ClusterfitError("no input lengths: give simulation.input, a scenario workload, or --isl")
        inp = _dist_spec(workload.isl)
    if out is None:
        if workload is None:
            raise ClusterfitError("no output lengths: give simulation.output, a scenario workload, or --osl")
        out = _dist_spec(workload.osl)
    arrival = sim.arrival
    if arrival.rate_rps is None:
        arrival = arrival.model_copy(update={"rate_rps": _rate_from_load(workload, out, sessions)})
    return generate(n, arrival, inp, out, rng, sessions)


def _rate_from_load(workload, out: SampledLengthSpec, sessions: SessionSpec | None) -> float:
    """Arrival rate (requests/s, or sessions/s with sessions) from the scenario's target load."""
    load = getattr(workload, "load", None)
    if load is None:
        raise ClusterfitError("no arrival rate: give simulation.arrival.rate_rps, a scenario load, or --rate")
    if load.kind == "requests_per_s":
        rps = load.value
    elif load.kind == "output_tokens_per_s":
        rps = load.value / workload.osl.mean
    else:
        raise ClusterfitError("a load of concurrent sessions is a closed loop; the simulator replays open-loop "
                              "arrivals: give simulation.arrival.rate_rps (requests or sessions per second)")
    if sessions is not None:
        turns = sessions.turns or sessions.turns_mean
        return rps / turns
    return rps


def simulate(step_model: StepModel, sim: SimulationConfig, workload=None, slo=None,
             gpus_per_node: int | None = None, requests: Requests | None = None) -> tuple[dict, SimRun]:
    """Run one simulation; return (report dict, raw run).

    slo: an object with ``ttft_s``, ``tpot_s`` and optionally ``ttft_percentile`` (the planner's SLO);
    ``sim.slo_ttft_s`` / ``sim.slo_tpot_s`` override it.
    """
    reqs = requests if requests is not None else build_requests(sim, workload)
    run = run_simulation(reqs, step_model, sim, gpus_per_node)
    ttft = sim.slo_ttft_s if sim.slo_ttft_s is not None else getattr(slo, "ttft_s", None)
    tpot = sim.slo_tpot_s if sim.slo_tpot_s is not None else getattr(slo, "tpot_s", None)
    pct = float(getattr(slo, "ttft_percentile", 90.0) or 90.0)
    report = summarize(run, ttft, tpot, pct)
    return report, run


def compile_replica(model: str, system: str, gpus: int | None = None, tp: int | None = None, pp: int | None = None,
                    ep: int | None = None, dp: int | None = None, precision: str | None = None,
                    experts_precision: str | None = None, kv_dtype: str | None = None, engine: str = "vllm",
                    min_kv_tokens: int = 32768):
    """The performance model's step model for one replica, and the system.

    Layout: the parallel sizes given; else ``default_layout`` over ``gpus``; else memory.smallest_layout (the
    fewest GPUs, 1, 2, 4, ... up to 8 nodes, whose default layout leaves ``min_kv_tokens`` KV token slots).
    """
    from ..arch import load_model  # noqa: PLC0415
    from ..hardware import load_hardware  # noqa: PLC0415
    from ..layout import layout_from_options  # noqa: PLC0415
    from ..memory import smallest_layout  # noqa: PLC0415
    from ..perf import compile_step  # noqa: PLC0415
    from ..precision import resolve_precision  # noqa: PLC0415

    m = load_model(model)
    sysm = load_hardware().system(system)
    prec = resolve_precision(m, precision, experts_precision, kv_dtype)
    layout = layout_from_options(m, sysm, gpus, tp, pp, ep, dp) or smallest_layout(m, sysm, prec, engine,
                                                                                    min_kv_tokens)
    sm = compile_step(m, sysm, layout, prec, engine)
    if sm.kv_capacity_tokens < 1:
        raise ClusterfitError(f"{m.name} does not fit on {sm.gpus} x {sysm.gpu.id} with layout {layout.label()} "
                              f"and precision {prec.name}: no memory left for the KV cache")
    return sm, sysm
