"""Check a recommended plan with the cluster simulator (``clusterfit plan ... --verify``).

The simulator (clusterfit.sim) replays the planner's workload against the recommended replicas (serving
replicas only: the N+k spares stand by), using the very step models the search compiled for that layout, with
the planner's prefix-cache hit rate (``Requests.cached_tokens``), and judges the SLOs as the planner does: TTFT
and TPOT at the percentiles asked and the least goodput. An aggregated plan runs its replicas behind the load
balancer; a disaggregated plan runs its prefill pool feeding its decode pool over the planner's KV transfer
(``clusterfit.sim.disagg``). A load of concurrent sessions runs as a closed loop of that many clients on an
aggregated plan (sim.clients: the simulated rate then checks the rate the plan derived by Little's law), and open
loop at the plan's derived rate on a disaggregated one (whose pools the simulator runs one after the other).

Where the simulation and the plan differ by more than 10% on TTFT at the judged percentile, TPOT at the judged
percentile or throughput, ``disagreements`` says so, with the likeliest reason.

A plan of more replicas (in a pool) than one simulation runs (``schema.MAX_REPLICAS``) stands unverified: the
answer is a SkippedVerification saying why, not an error that would throw the plan away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..schema import (MAX_CLIENTS, Disagreement, PlanOption, SimulatedVerification, SkippedVerification,
                      Verification)
from ..sim.ledger import COMPLETED
from ..errors import counted
from ..sim.metrics import short_loop_note

if TYPE_CHECKING:
    from ..sim.config import SimulationConfig
    from .planner import PlanQuestion, _Sized

#: Relative difference beyond which a simulated figure is reported as disagreeing with the plan.
DISAGREE = 0.10
DEFAULT_REQUESTS = 20_000


def _simulation_section(question: PlanQuestion, requests: int | None, seed: int) -> dict:
    """The scenario's simulation section with the run's size and seed."""
    base: dict[str, Any] = dict(question.simulation) if isinstance(question.simulation, dict) else {}
    base["requests"] = requests or base.get("requests") or DEFAULT_REQUESTS
    base.setdefault("seed", seed)
    return base


def _plan_load(sim: SimulationConfig, question: PlanQuestion, rec: PlanOption,
               aggregated: bool) -> tuple[SimulationConfig, str | None]:
    """The run's arrivals, and a note where they are not the planned load. The scenario's section may give its own
    (a trace, a rate or a concurrency: simulated as given, and noted). Else a load of concurrent sessions is a closed
    loop of that many clients on an aggregated plan (sim.api.with_load; the section's think time or ramp, if any,
    noted); on a disaggregated one, with more clients than one simulation runs, or beside a section shaping an open
    loop's process, it is an open loop at the rate the plan derived from it by Little's law (sessions per second
    where the requests come in sessions), noted, with a warning when the run is too short to reach that load. Any
    other load is the section's as it is."""
    from ..sim.api import load_clients, mean_turns, session_spec, with_load

    wl, a = question.workload, sim.arrival
    sessions = session_spec(sim, wl)
    per = "sessions/s" if sessions is not None else "requests/s"
    own = ("a trace" if sim.trace else f"rate_rps {a.rate_rps:g} {per}" if a.rate_rps is not None
           else f"concurrency {counted(a.concurrency, 'client')}" if a.concurrency is not None else None)
    if own is not None:
        return with_load(sim, wl), (f"the scenario's simulation section gives its own arrivals ({own}): the check "
                                    "simulates those in place of the planned load")
    timing = a.closed_loop_timing()
    fields = " and ".join(f"{k} {getattr(a, k):g} s" for k in timing)
    if wl.load.kind != "concurrent_sessions":
        return with_load(sim, wl), None
    if aggregated and load_clients(sim, wl) is not None:
        return with_load(sim, wl), (f"the section's {fields} time the {counted(int(wl.load.value), 'client')}; the "
                                    "plan's rate assumes the workload's think time and a steady loop"
                                    if timing else None)
    turns = mean_turns(sessions)
    rate = rec.requests_per_s / turns
    open_loop = a.model_copy(update={"rate_rps": rate, "think_time_s": 0.0, "ramp_s": None})
    why = ("a disaggregated plan's pools are simulated one after the other" if not aggregated else
           f"{wl.load.value:,.0f} sessions are more clients than one simulation runs" if wl.load.value > MAX_CLIENTS
           else "the section shapes an open loop's arrival process")
    note = (f"{wl.load.value:,.0f} concurrent sessions simulated open loop at the rate the plan derived from them ("
            + (f"{rate:.4g} sessions/s, {rec.requests_per_s:.4g} requests/s" if sessions is not None
               else f"{rate:.4g} requests/s") + f"): {why}"
            + (f"; the section's {fields} {'is' if len(timing) == 1 else 'are'} a closed loop's, not used here"
               if timing else ""))
    if sessions is not None and sessions.think_time_s > 0:
        n = sim.requests or DEFAULT_REQUESTS   # _simulation_section always sets it
        window, span = n / turns / rate, (turns - 1) * sessions.think_time_s   # turns - 1 gaps (sim.requests)
        if window < span:
            note += (f"; the {n:,} requests make about {n / turns:,.0f} sessions arriving over {window:,.1f} s, "
                     f"shorter than a session's {span:,.0f} s of think time between its turns: the run never "
                     "reaches the planned load; give more requests (--verify-requests)")
    return sim.model_copy(update={"arrival": open_loop}), note


def _too_many_replicas(sized: _Sized, rec: PlanOption) -> str | None:
    """Why the plan cannot be simulated, when a pool of it has more replicas than one simulation runs."""
    from ..schema import MAX_REPLICAS

    pools = ([("serving", rec.serving_replicas)] if sized.mode == "aggregated" else
             [("prefill", sized.prefill_replicas), ("decode", sized.replicas)])
    for pool, replicas in pools:
        if replicas > MAX_REPLICAS:
            return (f"the plan's {replicas:,} {pool} replicas are more than the {MAX_REPLICAS:,} one simulation "
                    "runs; the plan stands unverified (simulate a share of it: fewer replicas at the same share "
                    "of the load)")
    return None


def verify_plan(sized: _Sized, rec: PlanOption, question: PlanQuestion, requests: int | None = None,
                seed: int = 0) -> Verification:
    """Simulate the recommended plan ``sized`` (shown as ``rec``): the simulator's report plus what was run, or
    why it cannot be simulated."""
    from ..arch import load_model
    from ..sim.api import build_requests, parse_simulation, session_think_s, slo_terms, with_draft_cost
    from ..sim.metrics import summarize

    too_many = _too_many_replicas(sized, rec)
    if too_many is not None:
        return SkippedVerification(reason=too_many)

    def parsed(section: object) -> SimulationConfig:  # a speculative section's draft cost follows from the model
        sim = parse_simulation(section, "simulation (from --verify)")
        if sim.replica.speculative is None:
            return sim
        head = question.catalog.draft_head if question.catalog is not None else None
        return with_draft_cost(sim, load_model(question.model), head)

    base = _simulation_section(question, requests, seed)
    slo = question.slo
    aggregated = sized.mode == "aggregated"
    base["replicas"] = rec.serving_replicas if aggregated else sized.prefill_replicas
    sim = parsed(base)
    if not aggregated and sim.arrival.concurrency is not None:
        return SkippedVerification(reason="the scenario's simulation.arrival.concurrency is a closed loop, which the "
                                   "simulator runs for aggregated serving only: this plan is disaggregated (give "
                                   "simulation.arrival.rate_rps to verify it, or plan with --no-disagg)")
    sim, note = _plan_load(sim, question, rec, aggregated)
    if aggregated:
        from ..sim.cluster import run_simulation

        reqs = build_requests(sim, question.workload)
        run = run_simulation(reqs, sized.main.step, sim, sized.system.gpus_per_node,
                             session_think_s=session_think_s(sim, question.workload))
        pools = None
    else:
        from ..perfmodel.comm import links_for
        from ..sim.disagg import run_disaggregated

        assert sized.prefill is not None and rec.prefill is not None
        pstep = sized.prefill.step
        up, out = links_for(sized.system)
        link = up if sized.system.scale_up_domain_gpus > sized.system.gpus_per_node else out

        def transfer(tokens: np.ndarray) -> np.ndarray:  # as planning.capacity.prefill_capacity
            return link.hop_s + np.asarray(pstep.kv_bytes_per_sequence(tokens), float) / link.bw_bytes_per_s

        reqs = build_requests(sim, question.workload)
        run = run_disaggregated(reqs, pstep, sized.main.step, sim, sized.prefill_replicas, sized.replicas, transfer,
                                sized.system.gpus_per_node)
        pools = run.extra["pools"]
    report = summarize(run, *slo_terms(sim, slo))
    predicted = {"ttft_s": rec.ttft_s, "tpot_s": rec.tpot_s, "ttft_percentile": slo.ttft_percentile,
                 "tpot_percentile": slo.tpot_percentile,
                 "tpot_mean_s": None if rec.tpot_s is None else sized.tpot_s,   # None: one output token, no TPOT
                 "requests_per_s": rec.requests_per_s}
    short = short_loop_note(report, "--verify-requests")
    note = "; ".join(n for n in (note, short) if n) or None
    return SimulatedVerification.model_validate({**report, "simulated": True, "mode": sized.mode, "pools": pools,
                                        "plan_predicted": predicted, "note": note,
                                        "disagreements": disagreements(report, predicted, run, question)})


def _steady_rps(run) -> float:
    """Requests/s completed over the second half of the arrival span (after the warm-up, before the drain)."""
    req = run.requests
    arr = req["arrival_s"]
    t0, t1 = float(arr[0]), float(arr[-1])
    mid = 0.5 * (t0 + t1)
    fin = req["finish_s"]
    done = (req["status"] == COMPLETED) & (fin >= mid) & (fin <= t1)
    return float(done.sum() / max(t1 - mid, 1e-9))


def disagreements(report: dict, predicted: dict, run, question: PlanQuestion) -> list[Disagreement]:
    """Figures where the simulation and the plan differ by more than 10%, each with the likeliest reason."""
    out = []
    v = report.get("verdict") or {}
    wl = question.workload
    arrivals = run.requests["arrival_s"]
    offered = (arrivals.size - 1) / max(float(arrivals[-1] - arrivals[0]), 1e-9)
    loop = report.get("closed_loop")
    hit = wl.prefix_cache_hit_rate
    figures = [("ttft_s", f"TTFT p{predicted['ttft_percentile']:g}", predicted["ttft_s"], v.get("ttft_s")),
               ("tpot_s", f"TPOT p{predicted['tpot_percentile']:g}", predicted["tpot_s"], v.get("tpot_s")),
               ("requests_per_s", "throughput, requests/s", predicted["requests_per_s"], _steady_rps(run))]
    if not v:  # no SLO: judge at the default percentiles
        figures[0] = ("ttft_s", "TTFT p90", predicted["ttft_s"], report["ttft_s"]["p90"])
        figures[1] = ("tpot_s", "TPOT p90", predicted["tpot_s"], report["tpot_s"]["p90"])
    for key, name, plan, sim in figures:
        if sim is None or plan is None or not plan > 0:
            continue
        ratio = float(sim) / float(plan)
        if abs(ratio - 1.0) <= DISAGREE:
            continue
        if key == "ttft_s":
            why = ("the simulated prefill queue is shorter than the M/G/1 model's exponential tail (the tail "
                   "approximation is conservative at moderate load, and a replica's prefill shares steps with decode)"
                   if ratio < 1 else
                   "the simulated queue is longer than the M/G/1 model predicts: bursts, uneven routing across "
                   "replicas or prefills waiting for KV admission")
        elif key == "tpot_s":
            why = ("fewer prefill chunks land on a request's decode steps than the compound-Poisson spread assumes "
                   "(the normal approximation is conservative), or the running batch is smaller than the plan's"
                   if ratio < 1 else
                   "steps carrying prefill chunks slow decoding more than the plan's spread, or the batch runs "
                   "larger than the plan's operating point (KV admission, queueing)")
        elif ratio < 1 and report.get("completed", 0) < report.get("requests", 0):
            why = (f"the cluster completes fewer requests than arrive ({offered:.3g}/s offered): it is saturated or "
                   "rejects requests")
        elif loop is not None:
            why = (f"a closed loop of {loop['clients']:,} clients completes clients / (time per request + think "
                   "time) requests/s: the simulated latencies set that rate, not an offered load")
        elif ratio < 1 and abs(offered / plan - 1) <= DISAGREE:
            # every request completed: the steady window of a short run counted fewer (it was blamed on saturation)
            why = (f"every request completed, but the run's steady window counted fewer per second than arrive "
                   f"({offered:.3g} requests/s offered) over {report.get('requests', 0):,} requests: a short run's "
                   "count is noisy; more --verify-requests narrow it")
        else:
            why = (f"the simulated arrival rate ({offered:.3g} requests/s) differs from the plan's load (sessions "
                   "replayed open loop, Poisson noise over a short run)")
        if hit and key != "requests_per_s":
            why += f"; the prefix-cache hit rate {hit:g} is simulated as a prefix warm on every replica"
        out.append(Disagreement(metric=name, plan=float(plan), simulated=float(sim), ratio=ratio, why=why))
    return out
