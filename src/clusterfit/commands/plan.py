"""The `clusterfit plan` command: parse options (or a scenario file), call clusterfit.plan, render."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from ..cli import app, emit
from ..errors import ClusterfitError
from ..plan.cost import HOURS_PER_MONTH, EndpointPrice, parse_price_overrides
from ..plan.planner import PlanRequest, plan
from ..plan.workload import SLO, LengthDist, Load, Workload
from ..report.tables import fitted_table


@app.command("plan")
def plan_command(
    model: Optional[str] = typer.Argument(None, help="Model id or alias (or give it in --scenario)."),
    isl: Optional[float] = typer.Option(None, "--isl", help="Prompt tokens per request (mean)."),
    osl: Optional[float] = typer.Option(None, "--osl", help="Output tokens per request (mean)."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Target load, requests/s (whole cluster)."),
    concurrency: Optional[float] = typer.Option(None, "--concurrency", help="Target load, concurrent sessions."),
    tokens_per_s: Optional[float] = typer.Option(None, "--tokens-per-s", help="Target load, output tokens/s (total)."),
    ttft_ms: Optional[float] = typer.Option(None, "--ttft-ms", help="TTFT target at --ttft-percentile, ms."),
    ttft_percentile: float = typer.Option(90.0, "--ttft-percentile", help="TTFT percentile: 90 or 99."),
    tpot_ms: Optional[float] = typer.Option(None, "--tpot-ms", help="TPOT target, ms per output token."),
    system: Optional[list[str]] = typer.Option(None, "--system", help="System id or GPU name; repeat. Default: all."),
    precision: Optional[list[str]] = typer.Option(None, "--precision", help="Weight precision; repeat. Default: checkpoint."),
    kv_dtype: Optional[list[str]] = typer.Option(None, "--kv-dtype", help="KV-cache dtype; repeat."),
    engine: Optional[str] = typer.Option(None, "--engine", help="vllm, sglang or trtllm."),
    prefix_cache_hit: Optional[float] = typer.Option(None, "--prefix-cache-hit", help="Prefix-cache hit rate 0..1."),
    scenario: Optional[Path] = typer.Option(None, "--scenario", help="Scenario file (YAML or TOML); options override it."),
    failover: Optional[int] = typer.Option(None, "--failover", help="Spare replicas (N+k)."),
    price: Optional[list[str]] = typer.Option(None, "--price", help="SYSTEM=$/GPU-hour override; repeat."),
    endpoint_price: Optional[str] = typer.Option(None, "--endpoint-price", help="Per-token endpoint, e.g. in=0.6,out=2.2 ($/Mtok)."),
    max_nodes: Optional[int] = typer.Option(None, "--max-nodes", help="Most nodes per replica (default 4)."),
    no_disagg: bool = typer.Option(False, "--no-disagg", help="Aggregated serving only."),
    verify: bool = typer.Option(False, "--verify", help="Simulate the recommended plan and report if it holds."),
    verify_requests: int = typer.Option(20_000, "--verify-requests", help="Requests simulated by --verify."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write each system's Pareto front to a PNG."),
) -> None:
    """Plan a serving cluster: cheapest systems, layouts and replicas meeting TTFT/TPOT targets, with cost."""
    req = build_request(model, isl, osl, rate, concurrency, tokens_per_s, ttft_ms, ttft_percentile, tpot_ms, system,
                        precision, kv_dtype, engine, prefix_cache_hit, scenario, failover, price, endpoint_price,
                        max_nodes, no_disagg)
    result = plan(req)
    if verify:
        from ..plan.verify import verify_plan

        if verify_requests < 1:
            raise ClusterfitError(f"--verify-requests must be >= 1, got {verify_requests}")
        result["verify"] = verify_plan(result, req.model, req.workload, req.slo, req.engine, req.simulation,
                                       verify_requests)
    if plot is not None:
        from ..plan.plot import plot_pareto

        plot_pareto(result, plot)
        result["plot"] = str(plot)
    emit(result, as_json, lambda console: render(result, console))


def build_request(model, isl, osl, rate, concurrency, tokens_per_s, ttft_ms, ttft_percentile, tpot_ms, system,
                  precision, kv_dtype, engine, prefix_cache_hit, scenario, failover, price, endpoint_price,
                  max_nodes, no_disagg) -> PlanRequest:
    """Merge a scenario file (if any) with command-line options; options win."""
    loads = [(k, v) for k, v in (("requests_per_s", rate), ("concurrent_sessions", concurrency),
                                 ("output_tokens_per_s", tokens_per_s)) if v is not None]
    if len(loads) > 1:
        raise ClusterfitError("give only one of --rate, --concurrency, --tokens-per-s")
    prices: dict[str, float] = {}
    endpoint = None
    simulation = None
    hours = HOURS_PER_MONTH
    if scenario is not None:
        from ..plan.scenario import load_scenario

        sc = load_scenario(scenario)
        simulation = sc.simulation
        wl = sc.to_workload()
        slo = sc.to_slo()
        model = model or sc.model
        system = system or sc.systems
        precision = precision or [p for p in sc.precisions() if p is not None] or None
        kv_dtype = kv_dtype or [k for k in sc.kv_dtypes() if k is not None] or None
        engine = engine or sc.engine
        failover = sc.cost.failover if failover is None else failover
        prices = dict(sc.cost.prices)
        hours = sc.cost.hours_per_month
        if sc.cost.endpoint is not None:
            endpoint = EndpointPrice(sc.cost.endpoint.input_per_mtok, sc.cost.endpoint.output_per_mtok)
        max_nodes = max_nodes or sc.search.max_nodes_per_replica
        no_disagg = no_disagg or not sc.search.disaggregated
        isl_d = LengthDist.fixed(isl, "--isl") if isl is not None else wl.isl
        osl_d = LengthDist.fixed(osl, "--osl") if osl is not None else wl.osl
        load = Load(*loads[0]) if loads else wl.load
        hit = wl.prefix_cache_hit_rate if prefix_cache_hit is None else prefix_cache_hit
        if wl.agent is not None and isl is None and osl is None:
            wl = Workload(wl.isl, wl.osl, load, hit, wl.agent)
        else:
            wl = Workload(isl_d, osl_d, load, hit)
        if ttft_ms is not None or tpot_ms is not None:
            slo = SLO(ttft_ms / 1e3 if ttft_ms is not None else slo.ttft_s,
                      tpot_ms / 1e3 if tpot_ms is not None else slo.tpot_s, ttft_percentile)
    else:
        if model is None:
            raise ClusterfitError("give a MODEL (or --scenario FILE)")
        if isl is None or osl is None:
            raise ClusterfitError("give --isl and --osl (tokens), or --scenario FILE")
        if not loads:
            raise ClusterfitError("give the target load: --rate (requests/s), --concurrency or --tokens-per-s")
        wl = Workload.simple(isl, osl, Load(*loads[0]), prefix_cache_hit or 0.0)
        slo = SLO(ttft_ms / 1e3 if ttft_ms is not None else None, tpot_ms / 1e3 if tpot_ms is not None else None,
                  ttft_percentile)
    if model is None:
        raise ClusterfitError("give a MODEL (or 'model:' in the scenario)")
    prices.update(parse_price_overrides(price))
    if endpoint_price is not None:
        endpoint = EndpointPrice.parse(endpoint_price)
    if max_nodes is not None and max_nodes < 1:
        raise ClusterfitError(f"--max-nodes must be >= 1, got {max_nodes}")
    return PlanRequest(model, wl, slo, systems=system or None, precisions=list(precision or [None]),
                       kv_dtypes=list(kv_dtype or [None]), engine=engine or "vllm", failover=failover or 0,
                       prices=prices, endpoint=endpoint, max_nodes_per_replica=max_nodes or 4,
                       disaggregated=not no_disagg, hours_per_month=hours, simulation=simulation)


def _money(v) -> str:
    return "-" if v is None else f"${v:,.2f}"


def render(result: dict, console: Console) -> None:
    """Rich view: the recommendation, the per-system table, the endpoint comparison."""
    console.print(f"[bold]{result['model']}[/]  {result['workload']}  |  {result['slo']}"
                  + (f"  |  N+{result['failover']}" if result["failover"] else ""))
    if not result["feasible"]:
        console.print(f"[bold red]No plan meets the targets.[/] {result['explanation']}")
    cols = [("system", "system", True), ("precision", "prec", True), ("layout", "layout", True),
            ("nodes", "nodes/\nreplica", False), ("replicas", "replicas", False), ("gpus", "GPUs", False),
            ("cost", "$/h", False), ("mtok", "$/Mtok\nout", False), ("ttft", "TTFT\nms", False),
            ("tpot", "TPOT\nms", False), ("comm", "comm\nms/step", False), ("binds", "binds", True)]
    rows = []
    for r in result["per_system"]:
        layout = r["layout"] + (f"; prefill {r['prefill']['layout']} {r['xPyD']}" if r.get("prefill") else "")
        comm = r["step_breakdown_s"].get("communication_s", 0.0) * 1e3
        rows.append({"system": r["system"], "precision": r["precision"], "layout": layout,
                     "nodes": str(r["nodes_per_replica"]), "replicas": str(r["replicas"]),
                     "gpus": str(r["total_gpus"]), "cost": _money(r["cost_per_hour"]),
                     "mtok": _money(r["cost_per_mtok_out"]), "ttft": f"{r['ttft_s'] * 1e3:.0f}",
                     "tpot": f"{r['tpot_s'] * 1e3:.1f}",
                     "comm": f"{comm:.1f}" + (" net" if r["internode_replica"] else ""), "binds": r["binding"]})
    if rows:
        table, skipped = fitted_table("Best plan per system (cheapest first)", cols, rows,
                                      ["precision", "mtok", "nodes", "comm", "replicas"], console.width)
        console.print(table)
        if skipped:
            console.print(f"[dim]Left out for width: {', '.join(skipped)} (see --json).[/]")
    if result.get("recommended"):
        console.print(f"[bold green]Recommended:[/] {result['recommended']['explanation']}", soft_wrap=True)
    if result.get("endpoint"):
        console.print(f"[bold]Endpoint:[/] {result['endpoint']['explanation']}", soft_wrap=True)
    v = result.get("verify")
    if v:
        if v.get("simulated"):
            console.print(f"[bold]Simulated[/] {v['requests']:,} requests on {v['replicas']} replica(s): TTFT p90 "
                          f"{v['ttft_s']['p90'] * 1e3:.0f} ms, p99 {v['ttft_s']['p99'] * 1e3:.0f} ms; TPOT p90 "
                          f"{v['tpot_s']['p90'] * 1e3:.1f} ms; goodput {v['goodput']:.1%}: "
                          + ("[green]holds the SLOs[/]" if v.get("holds_slo") else "[red]misses the SLOs[/]"))
        else:
            console.print(f"[bold]Not simulated:[/] {v['reason']}")
    console.print(f"[dim]{result['configurations_evaluated']:,} configurations evaluated "
                  f"({result['candidates_compiled']} replica layouts compiled). TTFT: {result['queueing_model']}.[/]")
