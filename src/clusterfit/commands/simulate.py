"""The `clusterfit simulate` command: replicas behind a load balancer under traffic, failures and SLOs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from .options import (AsyncSchedulingOpt, CatalogOpt, DpOpt, EnforceEagerOpt, EpOpt, GpuMemoryUtilizationOpt,
                      JsonOpt, KvDtypeOpt, LongerContextOpt, MaxNumBatchedTokensOpt, MaxNumSeqsOpt,
                      NumSpeculativeTokensOpt, PpOpt, PrecisionOpt, ProfileOpt, SpeculativeAcceptanceLengthOpt, SpeculativeDraftConfigOpt,
                      SpeculativeAcceptanceOpt, SpeculativeMethodOpt, TpOpt, engine_settings, given, profile_kwargs,
                      speculative_kwargs)
from .output import check_outputs, emit

if TYPE_CHECKING:
    from rich.console import Console

    from ..schema import SimResult


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:,.1f}"


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
    max_num_seqs: MaxNumSeqsOpt = None,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
    enforce_eager: EnforceEagerOpt = False,
    async_scheduling: AsyncSchedulingOpt = None,
    isl: Annotated[Optional[int], typer.Option(help="Prompt tokens (mean of a lognormal with --length-cv)")] = None,
    osl: Annotated[Optional[int], typer.Option(help="Output tokens (mean of a lognormal with --length-cv)")] = None,
    length_cv: Annotated[float, typer.Option(help="Coefficient of variation of --isl/--osl (0: fixed)")] = 0.0,
    rate: Annotated[Optional[float], typer.Option(
        help="Arrival rate, requests/s (sessions/s for multi-turn sessions): an open loop")] = None,
    arrival: Annotated[Optional[str], typer.Option(help="poisson, gamma, mmpp, diurnal")] = None,
    concurrency: Annotated[Optional[int], typer.Option(
        help="A closed loop instead of --rate: this many clients, each sending its next request when its last one "
             "ends (as vllm bench serve --max-concurrency)")] = None,
    think_time_s: Annotated[Optional[float], typer.Option(
        help="With --concurrency: a client's wait between an answer and its next request, s (default 0)")] = None,
    ramp_s: Annotated[Optional[float], typer.Option(
        help="With --concurrency: spread the clients' first requests over this many seconds (0: all at once, as a "
             "benchmark client; default: about one request's time in the system plus the think time)")] = None,
    trace: Annotated[Optional[str], typer.Option(help="CSV/JSONL trace (Azure, BurstGPT or generic columns)")] = None,
    replicas: Annotated[Optional[int], typer.Option(help="Replicas behind the load balancer")] = None,
    requests: Annotated[Optional[int], typer.Option(help="Requests to simulate")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed")] = None,
    policy: Annotated[Optional[str], typer.Option(
        help="round_robin, random, least_outstanding, least_kv, power_of_two, affinity")] = None,
    fail_at: Annotated[Optional[float], typer.Option(help="Lose a replica at this time, s")] = None,
    fail_replica: Annotated[Optional[int], typer.Option(help="Which replica --fail-at loses (default: 0)")] = None,
    fail_node: Annotated[Optional[int], typer.Option(help="Lose this whole node at --fail-at instead")] = None,
    restart_after: Annotated[Optional[float], typer.Option(help="Seconds until the lost replica is back")] = None,
    ttft_ms: Annotated[Optional[float], typer.Option(help="TTFT SLO, ms")] = None,
    tpot_ms: Annotated[Optional[float], typer.Option(help="TPOT SLO, ms")] = None,
    ttft_percentile: Annotated[Optional[float], typer.Option(help="TTFT percentile judged (default 90)")] = None,
    tpot_percentile: Annotated[Optional[float], typer.Option(help="TPOT percentile judged (default 90)")] = None,
    min_goodput: Annotated[Optional[float], typer.Option(
        help="Least share of requests within both SLOs (default 0.9)")] = None,
    num_speculative_tokens: NumSpeculativeTokensOpt = None,
    speculative_method: SpeculativeMethodOpt = None,
    speculative_acceptance: SpeculativeAcceptanceOpt = None,
    speculative_acceptance_length: SpeculativeAcceptanceLengthOpt = None,
    speculative_draft_config: SpeculativeDraftConfigOpt = None,
    catalog: CatalogOpt = None,
    profile: ProfileOpt = None,
    allow_longer_context: LongerContextOpt = False,
    as_json: JsonOpt = False,
    plot: Annotated[Optional[Path], typer.Option(help="Write latency CDF and time-series plots (PNG)")] = None,
    csv: Annotated[Optional[Path], typer.Option(help="Write the per-window time series (CSV)")] = None,
    requests_csv: Annotated[Optional[Path], typer.Option(help="Write one row per request (CSV)")] = None,
) -> None:
    """Simulate replicas of MODEL on SYSTEM behind a load balancer: latency percentiles, goodput, failures."""
    from .. import api

    check_outputs([(f, p) for f, p in (("--plot", plot), ("--csv", csv), ("--requests-csv", requests_csv))
                   if p is not None],
                  [(f, Path(p)) for f, p in (("--scenario", scenario), ("--trace", trace)) if p is not None])
    if plot is not None:
        from ..sim.plot import check_plot_path

        check_plot_path(plot)
    report = api.simulate(**given(
        model=model, scenario=scenario, system=system, gpus=gpus, tp=tp, pp=pp, ep=ep, dp=dp, precision=precision,
        kv_dtype=kv_dtype, engine=engine, isl=isl, osl=osl, length_cv=length_cv, rate=rate, arrival=arrival,
        concurrency=concurrency, think_time_s=think_time_s, ramp_s=ramp_s, trace=trace, replicas=replicas,
        requests=requests, seed=seed, policy=policy, fail_at=fail_at, fail_replica=fail_replica, fail_node=fail_node,
        restart_after=restart_after, ttft_ms=ttft_ms, tpot_ms=tpot_ms, ttft_percentile=ttft_percentile,
        tpot_percentile=tpot_percentile, min_goodput=min_goodput,
        catalog=catalog, allow_longer_context=allow_longer_context),
        **speculative_kwargs(num_speculative_tokens, speculative_method, speculative_acceptance,
                             speculative_acceptance_length, speculative_draft_config),
        **engine_settings(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, enforce_eager,
                                        async_scheduling),
        **profile_kwargs(profile))
    run = api.simulation_run(report)
    if csv is not None:
        from ..sim.metrics import write_windows_csv

        write_windows_csv(report.model_dump(), csv)
    if requests_csv is not None:
        from ..sim.metrics import write_requests_csv

        write_requests_csv(run, requests_csv)
    if plot is not None:
        from ..sim.plot import plot_simulation

        plot_simulation(report.model_dump(), run, plot)
        report.plot = str(plot)

    emit(report, as_json, lambda c: render_simulation(c, report))


def render_simulation(console: Console, report: SimResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..report.intervals import basis_note, with_interval

    label = report.layout.as_layout().label()
    t = Table(title=f"{escape(report.model)} on {report.replicas} x {report.gpus_per_replica} GPU "
                    f"{report.system} replicas ({label}, {report.engine}, {report.precision}, KV {report.kv_dtype}), "
                    f"policy {report.policy}")
    t.add_column("metric")
    for c in ("p50", "p90", "p99", "mean"):
        t.add_column(c, justify="right")
    for name, pct, iv in (("TTFT, ms", report.ttft_s, report.ttft_s_interval),
                          ("TPOT, ms", report.tpot_s, report.tpot_s_interval),
                          ("ITL (token gaps), ms", report.itl_s, None),
                          ("end-to-end, ms", report.e2e_s, report.e2e_s_interval)):
        cells = []
        for key in ("p50", "p90", "p99", "mean"):
            v = getattr(pct, key)
            cells.append(_ms(v) if v is None else with_interval(v, getattr(iv, key) if iv else None, 1e3, 1))
        t.add_row(name, *cells)
    console.print(t)
    sp = report.speculative
    if sp is not None:
        console.print(f"Speculative decoding ({sp.method}): {sp.draft_tokens} draft tokens per step, acceptance "
                      f"{sp.acceptance:.2f}, {sp.tokens_per_step:.2f} tokens per step per sequence; drafter "
                      f"{sp.draft_cost:.1%} of a decode step per draft token", soft_wrap=True)
    for note in report.notes:
        console.print(f"[dim]{escape(note)}[/]", soft_wrap=True)
    if report.intervals is not None:
        console.print(f"[dim]{basis_note(report.intervals)}[/]", soft_wrap=True)
    thr = report.throughput
    console.print(f"requests {report.requests:,}: completed {report.completed:,}, rejected "
                  f"{report.rejected:,}, failed {report.failed:,} (retried {report.retried:,}); "
                  f"preemptions {report.preemptions:,}")
    if report.rejected_too_long and report.kv_admit_tokens is not None:
        console.print(f"[yellow]{report.rejected_too_long:,} rejected requests need more KV cache than a replica "
                      f"admits ({report.kv_admit_tokens:,.0f} tokens): give each replica more GPUs or memory "
                      "(--gpus, --gpu-memory-utilization) or shorter requests[/]")
    loop = report.closed_loop
    if loop is not None:
        from ..sim.metrics import closed_loop_words

        console.print(f"closed loop: {closed_loop_words(loop.clients, loop.ramp_s)}"
                      + (f" ({loop.think_time_s:g} s later)" if loop.think_time_s else "")
                      + (f"; a session's next turn {loop.session_think_time_s:g} s after its answer"
                         if loop.session_think_time_s is not None else ""), soft_wrap=True)
    console.print(f"throughput (all replicas) {thr.requests_per_s:,.2f} req/s, {thr.output_tokens_per_s:,.0f} output "
                  f"tok/s; goodput {report.goodput:.1%}")
    if report.verdict is not None:
        console.print(f"SLO: {report.verdict.text}: {'holds' if report.holds_slo else 'misses'}")
    # sim/cluster.py samples the requests waiting summed over the live replicas and their KV use averaged over them
    console.print(f"requests waiting (all replicas) mean {report.queue.mean_waiting:.1f} (max "
                  f"{report.queue.max_waiting:.0f}); KV utilisation (mean of the replicas) mean "
                  f"{report.kv_utilisation.mean:.1%} (max {report.kv_utilisation.max:.1%}); simulated in "
                  f"{report.sim_wall_s:.2f} s")
    for ev in report.events:
        console.print(f"  t={ev.t_s:.1f} s: {ev.event} (replica {ev.replica})"
                      + (f", {ev.in_flight} in flight retried/failed {ev.retried}/{ev.failed}"
                         if ev.in_flight is not None else ""))
    for ev in report.not_exercised:
        note = ev.note or f"{ev.event} (replica {ev.replica}) at t={ev.t_s:.1f} s: not exercised"
        console.print(f"[yellow]  {escape(note[:1].upper() + note[1:])}[/]", soft_wrap=True)
    if report.plot is not None:
        console.print(f"plot: {escape(report.plot)}")
