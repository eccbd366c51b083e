"""The `clusterfit plan` command: parse options (or a scenario file), call the API's plan, render."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from .options import (
    AsyncSchedulingOpt,
    CatalogOpt,
    ConcurrencyOpt,
    EnforceEagerOpt,
    FailoverOpt,
    GpuMemoryUtilizationOpt,
    IslOpt,
    KvDtypesOpt,
    LongerContextOpt,
    MaxNodesOpt,
    MaxNumBatchedTokensOpt,
    MaxNumSeqsOpt,
    NumSpeculativeTokensOpt,
    OslOpt,
    PrecisionsOpt,
    PriceOpt,
    ProfileOpt,
    RateOpt,
    ScenarioOpt,
    SpeculativeAcceptanceLengthOpt, SpeculativeDraftConfigOpt,
    SpeculativeAcceptanceOpt,
    SpeculativeMethodOpt,
    SystemsOpt,
    TokensPerSOpt,
    TpotMsOpt,
    TtftMsOpt,
    engine_settings,
    given,
    profile_kwargs,
    speculative_kwargs,
)
from .output import check_outputs, emit

if TYPE_CHECKING:
    from rich.console import Console

    from ..schema import PlanResult


def plan_command(
    model: Optional[str] = typer.Argument(None, help="Model id or alias (or give it in --scenario)."),
    isl: IslOpt = None,
    osl: OslOpt = None,
    rate: RateOpt = None,
    concurrency: ConcurrencyOpt = None,
    tokens_per_s: TokensPerSOpt = None,
    ttft_ms: TtftMsOpt = None,
    ttft_percentile: Optional[float] = typer.Option(None, "--ttft-percentile",
                                                    help="TTFT percentile judged, 50 <= p < 100 (default 90; "
                                                    "e.g. 50, 95, 99)."),
    tpot_ms: TpotMsOpt = None,
    tpot_percentile: Optional[float] = typer.Option(None, "--tpot-percentile",
                                                    help="TPOT percentile judged, 50 <= p < 100 (default 90; "
                                                    "e.g. 50, 95, 99)."),
    min_goodput: Optional[float] = typer.Option(None, "--min-goodput",
                                                help="Least share of requests within both SLOs (default 0.9)."),
    system: SystemsOpt = None,
    precision: PrecisionsOpt = None,
    kv_dtype: KvDtypesOpt = None,
    engine: Optional[str] = typer.Option(None, "--engine", help="vllm, sglang or trtllm."),
    max_num_seqs: MaxNumSeqsOpt = None,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
    enforce_eager: EnforceEagerOpt = False,
    async_scheduling: AsyncSchedulingOpt = None,
    num_speculative_tokens: NumSpeculativeTokensOpt = None,
    speculative_method: SpeculativeMethodOpt = None,
    speculative_acceptance: SpeculativeAcceptanceOpt = None,
    speculative_acceptance_length: SpeculativeAcceptanceLengthOpt = None,
    speculative_draft_config: SpeculativeDraftConfigOpt = None,
    prefix_cache_hit: Optional[float] = typer.Option(None, "--prefix-cache-hit", help="Prefix-cache hit rate 0..1."),
    scenario: ScenarioOpt = None,
    failover: FailoverOpt = None,
    price: PriceOpt = None,
    endpoint_price: Optional[str] = typer.Option(None, "--endpoint-price", help="Per-token endpoint, e.g. in=0.6,out=2.2 ($/Mtok)."),
    max_nodes: MaxNodesOpt = None,
    nodes: Optional[int] = typer.Option(None, "--nodes", help="Capacity mode (no load): the load N nodes of each "
                                        "system carry within the SLOs, best layout first."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Capacity mode (no load): a budget of N GPUs per system."),
    no_disagg: bool = typer.Option(False, "--no-disagg", help="Aggregated serving only."),
    confidence: Optional[int] = typer.Option(
        None, "--confidence", help="Size on the pessimistic bound of this prediction interval: 50 (the point "
        "prediction, default), 80 or 90 (latency SLOs at its upper bound, throughput per replica at its lower)."),
    verify: bool = typer.Option(False, "--verify", help="Simulate the recommended plan and report if it holds."),
    verify_requests: Optional[int] = typer.Option(
        None, "--verify-requests", help="Requests simulated by --verify, at least 100 (default: the scenario's, else "
        "20,000)."),
    catalog: CatalogOpt = None,
    profile: ProfileOpt = None,
    allow_longer_context: LongerContextOpt = False,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write each system's Pareto front to a PNG."),
) -> None:
    """Plan a serving cluster: cheapest systems, layouts and replicas meeting TTFT/TPOT targets, with cost."""
    from .. import api

    if plot is not None:
        from ..sim.plot import check_plot_path

        check_outputs([("--plot", plot)], [("--scenario", scenario)] if scenario is not None else [])
        check_plot_path(plot)
    result = api.plan(**given(
        model=model, isl=isl, osl=osl, rate=rate, concurrency=concurrency, tokens_per_s=tokens_per_s,
        ttft_ms=ttft_ms, ttft_percentile=ttft_percentile, tpot_ms=tpot_ms, tpot_percentile=tpot_percentile,
        min_goodput=min_goodput, systems=system, precisions=precision,
        kv_dtypes=kv_dtype, engine=engine, prefix_cache_hit=prefix_cache_hit, scenario=scenario, failover=failover,
        prices=price, endpoint_price=endpoint_price, max_nodes=max_nodes, nodes=nodes, gpus=gpus,
        no_disagg=no_disagg, verify=verify, verify_requests=verify_requests, catalog=catalog, allow_longer_context=allow_longer_context,
        confidence=confidence),
        **engine_settings(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, enforce_eager,
                                        async_scheduling),
        **speculative_kwargs(num_speculative_tokens, speculative_method, speculative_acceptance,
                             speculative_acceptance_length, speculative_draft_config),
        **profile_kwargs(profile))
    if plot is not None:
        from ..planning.plot import plot_pareto

        plot_pareto(result, plot)
        result.plot = str(plot)
    emit(result, as_json, lambda console: render(result, console))


#: What the tables show for TPOT and tokens/s per user when every request has one output token (no decode).
NO_DECODE = "-"


def _money(v: float | None, note: str | None = None) -> str:
    """$ amount; "n/a" when there is no price but a note says why (no public price), else "-"."""
    if v is not None:
        return f"${v:,.2f}"
    return "n/a" if note else "-"


def _render_capacity(result: PlanResult, console: Console) -> None:
    """Capacity mode: every layout that fits in the budget and the load it carries within the SLOs."""
    from ..report.intervals import with_interval
    from ..report.tables import fitted_table

    cap = result.capacity
    assert cap is not None
    # batch: per (decode) replica (--max-num-seqs is per attention-DP rank); req/s and out tok/s: the serving
    # replicas of the budget together
    cols = [("system", "system", True), ("layout", "layout", True), ("replicas", "replicas", False),
            ("batch", "batch/\nreplica", False), ("rps", "req/s\nall replicas", False),
            ("tps", "out tok/s\nall replicas", False),
            ("gpu", "tok/s\nper GPU", False), ("user", "tok/s\nper user", False), ("ttft", "TTFT\nms", False),
            ("tpot", "TPOT\nms", False)]
    rows = [{"system": r.system, "layout": r.layout + (f"; prefill {r.prefill_layout} {r.xPyD}" if r.xPyD else ""),
             "replicas": f"{r.serving_replicas}" + (f"+{r.spare_replicas}" if r.spare_replicas else ""),
             "batch": f"{r.batch:.0f}", "rps": with_interval(r.requests_per_s, r.requests_per_s_interval, digits=2),
             "tps": f"{r.output_tokens_per_s:,.0f}",
             "gpu": with_interval(r.output_tokens_per_s_per_gpu, r.output_tokens_per_s_per_gpu_interval, digits=0),
             "user": NO_DECODE if r.tokens_per_s_per_user is None else f"{r.tokens_per_s_per_user:.1f}",
             "ttft": with_interval(r.ttft_s, r.ttft_s_interval, 1e3, 0),
             "tpot": NO_DECODE if r.tpot_s is None else with_interval(r.tpot_s, r.tpot_s_interval, 1e3, 1)}
            for r in cap.layouts[:15]]
    what = f"{cap.nodes} node(s)" if cap.nodes is not None else f"{cap.gpus} GPU(s)"
    if rows:
        table, skipped = fitted_table(f"Load carried within the SLOs by {what} (per GPU: of the budget)", cols, rows,
                                      ["ttft", "batch", "tps", "user"], console.width)
        console.print(table)
        if len(cap.layouts) > 15:
            console.print(f"[dim]{len(cap.layouts) - 15} more layouts in --json (capacity.layouts).[/]")
        if skipped:
            console.print(f"[dim]Left out for width: {', '.join(skipped)} (see --json).[/]")


def render(result: PlanResult, console: Console) -> None:
    """Rich view: the recommendation, the per-system table, the endpoint comparison."""
    from ..report.intervals import NOTE, with_interval
    from rich.markup import escape

    from ..report.tables import fitted_table

    console.print(f"[bold]{escape(result.model)}[/]  {result.workload}  |  {result.slo}"
                  + (f"  |  N+{result.failover}" if result.failover else ""))
    sp = result.speculative
    if sp is not None:
        console.print(f"Speculative decoding ({sp.method}): {sp.draft_tokens} draft tokens per step, acceptance "
                      f"{sp.acceptance:.2f}, {sp.tokens_per_step:.2f} tokens per step per sequence; drafter "
                      f"{sp.draft_cost:.1%} of a decode step per draft token")
    if not result.feasible:
        console.print(f"[bold red]No plan meets the targets.[/] {result.explanation}")
    cols = [("system", "system", True), ("precision", "prec", True), ("layout", "layout", True),
            ("nodes", "nodes/\nreplica", False), ("replicas", "replicas", False), ("gpus", "GPUs", False),
            ("cost", "$/h, all\nreplicas", False), ("mtok", "$/Mtok\nout", False), ("ttft", "TTFT\nms", False),
            ("tpot", "TPOT\nms", False), ("comm", "comm\nms/step", False), ("binds", "binds", True)]
    rows = []
    for r in result.per_system:
        layout = r.layout + (f"; prefill {r.prefill.layout} {r.xPyD}" if r.prefill else "")
        comm = r.step_breakdown_s.get("communication_s", 0.0) * 1e3
        # serving replicas (their interval), then the spares: "2 (1-2)+1" read as three replicas where the plan has
        # two, one of them a spare
        spare = r.spare_replicas or 0
        replicas = str(r.replicas - spare)
        if r.serving_replicas_interval is not None:
            iv = r.serving_replicas_interval
            replicas += f" ({iv.lo:.0f}-{iv.hi:.0f})"
        replicas += f" + {spare} spare" if spare else ""
        rows.append({"system": r.system, "precision": r.precision, "layout": layout,
                     "nodes": str(r.nodes_per_replica), "replicas": replicas,
                     "gpus": str(r.total_gpus), "cost": _money(r.cost_per_hour, r.price_source),
                     "mtok": _money(r.cost_per_mtok_out, r.price_source),
                     "ttft": with_interval(r.ttft_s, r.ttft_s_interval, 1e3, 0),
                     "tpot": NO_DECODE if r.tpot_s is None else with_interval(r.tpot_s, r.tpot_s_interval,
                                                                              1e3, 1),
                     "comm": f"{comm:.1f}" + (" net" if r.internode_replica else ""), "binds": r.binding})
    title = "Best plan per system (cheapest first)"
    if result.capacity is not None:
        title = "Best layout per system (most load first)"
        _render_capacity(result, console)
    if rows:
        table, skipped = fitted_table(title, cols, rows,
                                      ["precision", "mtok", "nodes", "comm", "replicas"], console.width)
        console.print(table)
        if skipped:
            console.print(f"[dim]Left out for width: {', '.join(skipped)} (see --json).[/]")
        if result.one_output_token:
            console.print(f"[dim]TPOT {NO_DECODE}: one output token per request, sampled at the end of the prefill, so "
                          "no request decodes (tpot_s and tokens_per_s_per_user are null in --json).[/]",
                          soft_wrap=True)
        if any(r.ttft_s_interval is not None for r in result.per_system):
            console.print(f"[dim]{NOTE}; replicas (lo-hi): serving replicas at the ends of the capacity interval"
                          + (f"; sized at the {result.confidence}% pessimistic bound (sized_on in --json)"
                             if result.confidence not in (None, 50) else "") + ".[/]", soft_wrap=True)
        hours = result.hours_per_month
        if hours is not None and any(r.cost_per_hour and r.cost_per_month is not None for r in result.per_system):
            console.print(f"[dim]$/h: all replicas together (every GPU rented); $/month = $/h x {hours:,.4g} h.[/]",
                          soft_wrap=True)
        unpriced = [r for r in result.per_system if r.cost_per_hour is None and r.price_source]
        if unpriced:
            console.print("[dim]n/a: no public on-demand price found for "
                          + ", ".join(f"{r.system} ({r.gpu})" for r in unpriced)
                          + "; pass --price SYSTEM=$/GPU-hour (searched sources: price_source in --json).[/]",
                          soft_wrap=True)
    for line in result.no_plan:
        console.print(f"[dim]No plan on {line}.[/]", soft_wrap=True)
    if result.not_fitting:
        console.print(f"[dim]Does not fit: {'; '.join(result.not_fitting)}.[/]", soft_wrap=True)
    if result.recommended is not None:
        console.print(f"[bold green]Recommended:[/] {result.recommended.explanation}", soft_wrap=True)
    if result.endpoint is not None:
        console.print(f"[bold]Endpoint:[/] {result.endpoint.explanation}", soft_wrap=True)
    v = result.verify
    if v is not None:
        if v.simulated:
            pools = "" if v.mode != "disaggregated" or not v.pools else (
                f" ({v.pools.get('prefill_replicas')} prefill + {v.pools.get('decode_replicas')} decode)")
            judged = (f"{v.verdict.text}: " if v.verdict is not None else
                      f"TTFT p90 {(v.ttft_s.p90 or 0.0) * 1e3:.0f} ms; TPOT p90 {(v.tpot_s.p90 or 0.0) * 1e3:.1f} ms; "
                      f"goodput {v.goodput or 0.0:.1%}: ")
            console.print(f"[bold]Simulated[/] {v.requests:,} requests on {v.replicas} replica(s){pools}: {judged}"
                          + ("no latency SLO to judge" if v.holds_slo is None else
                             "[green]holds the SLOs[/]" if v.holds_slo else "[red]misses the SLOs[/]"), soft_wrap=True)
            if v.note is not None:
                console.print(f"[yellow]Note:[/] {escape(v.note)}", soft_wrap=True)
            for d in v.disagreements:
                console.print(f"[yellow]Plan and simulation disagree[/] on {d.metric}: plan {d.plan:.4g}, simulated "
                              f"{d.simulated:.4g} ({d.ratio:.2f}x): {d.why}", soft_wrap=True)
        else:
            console.print(f"[bold]Not simulated:[/] {v.reason}")
    es = result.engine_settings
    if es is not None and es.given:
        from ..report.engine_names import settings_text

        dp = result.recommended.dp if result.recommended is not None else 1
        console.print(f"[dim]Engine settings: {settings_text(result.engine, es, dp)}"
                      + (", eager (no CUDA graphs)" if es.enforce_eager else "") + f"; set: {', '.join(es.given)}.[/]")
    console.print(f"[dim]{result.configurations_evaluated:,} configurations evaluated "
                  f"({result.candidates_compiled} replica layouts compiled). TTFT: {result.queueing_model}.[/]")
    if result.plot is not None:   # as simulate says where its plot went
        console.print(f"plot: {escape(result.plot)}", soft_wrap=True)
