"""The `clusterfit simulate` command: replicas behind a load balancer under traffic, failures and SLOs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from ..cli import app, emit
from ..errors import ClusterfitError
from .options import DpOpt, EpOpt, JsonOpt, KvDtypeOpt, PpOpt, PrecisionOpt, TpOpt


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:,.1f}"


@app.command("simulate")
def simulate_command(
    model: Annotated[Optional[str], typer.Argument(help="HF id or alias (or give --scenario)")] = None,
    scenario: Annotated[Optional[Path], typer.Option(help="Scenario file (YAML/TOML) with a simulation: section")] = None,
    system: Annotated[Optional[str], typer.Option("--system", "-s", help="System id or GPU name")] = None,
    gpus: Annotated[Optional[int], typer.Option(help="GPUs per replica (default: the fewest that fit)")] = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    ep: EpOpt = None,
    dp: DpOpt = None,
    precision: PrecisionOpt = None,
    kv_dtype: KvDtypeOpt = None,
    engine: Annotated[Optional[str], typer.Option(help="vllm, sglang, trtllm")] = None,
    isl: Annotated[Optional[int], typer.Option(help="Prompt tokens (mean of a lognormal with --length-cv)")] = None,
    osl: Annotated[Optional[int], typer.Option(help="Output tokens (mean of a lognormal with --length-cv)")] = None,
    length_cv: Annotated[float, typer.Option(help="Coefficient of variation of --isl/--osl (0: fixed)")] = 0.0,
    rate: Annotated[Optional[float], typer.Option(help="Arrival rate, requests/s")] = None,
    arrival: Annotated[Optional[str], typer.Option(help="poisson, gamma, mmpp, diurnal")] = None,
    trace: Annotated[Optional[str], typer.Option(help="CSV/JSONL trace (Azure, BurstGPT or generic columns)")] = None,
    replicas: Annotated[Optional[int], typer.Option(help="Replicas behind the load balancer")] = None,
    requests: Annotated[Optional[int], typer.Option(help="Requests to simulate")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed")] = None,
    policy: Annotated[Optional[str], typer.Option(
        help="round_robin, random, least_outstanding, least_kv, power_of_two, affinity")] = None,
    fail_at: Annotated[Optional[float], typer.Option(help="Lose a replica at this time, s")] = None,
    fail_replica: Annotated[int, typer.Option(help="Which replica --fail-at loses")] = 0,
    fail_node: Annotated[Optional[int], typer.Option(help="Lose this whole node at --fail-at instead")] = None,
    restart_after: Annotated[Optional[float], typer.Option(help="Seconds until the lost replica is back")] = None,
    ttft_ms: Annotated[Optional[float], typer.Option(help="TTFT SLO, ms")] = None,
    tpot_ms: Annotated[Optional[float], typer.Option(help="TPOT SLO, ms")] = None,
    as_json: JsonOpt = False,
    plot: Annotated[Optional[Path], typer.Option(help="Write latency CDF and time-series plots (PNG)")] = None,
    csv: Annotated[Optional[Path], typer.Option(help="Write the per-window time series (CSV)")] = None,
    requests_csv: Annotated[Optional[Path], typer.Option(help="Write one row per request (CSV)")] = None,
) -> None:
    """Simulate replicas of MODEL on SYSTEM behind a load balancer: latency percentiles, goodput, failures."""
    from ..sim.api import compile_replica, parse_simulation, simulate  # noqa: PLC0415
    from ..sim.metrics import write_requests_csv, write_windows_csv  # noqa: PLC0415

    scen = None
    workload = slo = None
    if scenario is not None:
        from ..plan.scenario import load_scenario  # noqa: PLC0415

        scen = load_scenario(scenario)
        workload, slo = scen.to_workload(), scen.to_slo()
        model = model or scen.model
        if system is None:
            systems = scen.systems or []
            if len(systems) != 1:
                raise ClusterfitError("the scenario lists " + (f"{len(systems)} systems" if systems else "no system")
                                      + "; choose one with --system")
            system = systems[0]
        precision = precision or scen.precisions()[0]
        kv_dtype = kv_dtype or scen.kv_dtypes()[0]
        engine = engine or scen.engine
    if model is None:
        raise ClusterfitError("give a MODEL or --scenario FILE")
    if system is None:
        raise ClusterfitError("give --system (for example hgx_h200)")
    sim = parse_simulation(scen.simulation if scen is not None else None,
                           f"scenario file {scenario}: simulation" if scenario else "simulation")
    upd: dict = {}
    for key, val in (("replicas", replicas), ("requests", requests), ("seed", seed), ("policy", policy),
                     ("trace", trace)):
        if val is not None:
            upd[key] = val
    if ttft_ms is not None:
        upd["slo_ttft_s"] = ttft_ms / 1e3
    if tpot_ms is not None:
        upd["slo_tpot_s"] = tpot_ms / 1e3
    for key, val in (("input", isl), ("output", osl)):
        if val is not None:
            upd[key] = ({"dist": "fixed", "value": val} if length_cv == 0
                        else {"dist": "lognormal", "mean": val, "cv": length_cv})
    if rate is not None or arrival is not None:
        upd["arrival"] = sim.arrival.model_dump() | ({"rate_rps": rate} if rate is not None else {}) \
            | ({"process": arrival} if arrival is not None else {})
    if fail_at is not None:
        upd["failures"] = [f.model_dump() for f in sim.failures] + [
            {"at_s": fail_at, "replica": None if fail_node is not None else fail_replica, "node": fail_node,
             "restart_s": restart_after}]
    sim = parse_simulation(sim.model_dump() | upd, "options")
    if plot is not None:
        from ..sim.plot import check_plot_path  # noqa: PLC0415

        check_plot_path(plot)
    step_model, sysm = compile_replica(model, system, gpus, tp, pp, ep, dp, precision, None, kv_dtype, engine or "vllm")
    report, run = simulate(step_model, sim, workload, slo, gpus_per_node=sysm.gpus_per_node)
    report = {"model": model, "system": sysm.id, **report}
    if csv is not None:
        write_windows_csv(report, csv)
    if requests_csv is not None:
        write_requests_csv(run, requests_csv)
    if plot is not None:
        from ..sim.plot import plot_simulation  # noqa: PLC0415

        plot_simulation(report, run, plot)
        report["plot"] = str(plot)

    def render(console: Console) -> None:
        t = Table(title=f"{report['model']} on {report['replicas']} x {report['gpus_per_replica']} GPU "
                        f"{report['system']} replicas, policy {report['policy']}")
        t.add_column("metric")
        for c in ("p50", "p90", "p99", "mean"):
            t.add_column(c, justify="right")
        for name, key in (("TTFT, ms", "ttft_s"), ("TPOT, ms", "tpot_s"), ("end-to-end, ms", "e2e_s")):
            t.add_row(name, *(_ms(report[key][c]) for c in ("p50", "p90", "p99", "mean")))
        console.print(t)
        thr = report["throughput"]
        console.print(f"requests {report['requests']:,}: completed {report['completed']:,}, rejected "
                      f"{report['rejected']:,}, failed {report['failed']:,} (retried {report['retried']:,}); "
                      f"preemptions {report['preemptions']:,}")
        console.print(f"throughput {thr['requests_per_s']:,.2f} req/s, {thr['output_tokens_per_s']:,.0f} output tok/s; "
                      f"goodput {report['goodput']:.1%}" + ("" if report["holds_slo"] is None else
                                                           f"; holds SLO: {'yes' if report['holds_slo'] else 'no'}"))
        console.print(f"queue mean {report['queue']['mean_waiting']:.1f} (max {report['queue']['max_waiting']:.0f}); "
                      f"KV utilisation mean {report['kv_utilisation']['mean']:.1%} (max "
                      f"{report['kv_utilisation']['max']:.1%}); simulated in {report['sim_wall_s']:.2f} s")
        for ev in report["events"]:
            console.print(f"  t={ev['t_s']:.1f} s: {ev['event']} (replica {ev['replica']})"
                          + (f", {ev['in_flight']} in flight retried/failed {ev['retried']}/{ev['failed']}"
                             if "in_flight" in ev else ""))
        if plot is not None:
            console.print(f"plot: {plot}")

    emit(report, as_json, render)
