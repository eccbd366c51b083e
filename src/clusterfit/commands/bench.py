"""The `clusterfit bench` command: load-test a live OpenAI-compatible endpoint (clusterfit.bench), show the metrics
of `vllm bench serve`, and optionally clusterfit's prediction for the same load beside them."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from .options import (CatalogOpt, DpOpt, EnforceEagerOpt, EpOpt, GpuMemoryUtilizationOpt, JsonOpt, KvDtypeOpt,
                      MaxNumBatchedTokensOpt, MaxNumSeqsOpt, PpOpt, PrecisionOpt, TpOpt, engine_settings, given)
from .output import check_outputs, emit
from ..errors import ParameterError

if TYPE_CHECKING:
    from rich.console import Console

    from ..bench import BenchResult, BenchSweep, RequestRecord
    from ..schema import Percentiles


def bench_command(
    url: Annotated[str, typer.Argument(help="The server's base URL, e.g. http://127.0.0.1:8000")],
    endpoint: Annotated[str, typer.Option(help="completions (/v1/completions) or chat (/v1/chat/completions)")]
    = "completions",
    model: Annotated[Optional[str], typer.Option(help="Served model name (default: the first of GET /v1/models)")]
    = None,
    rate: Annotated[Optional[str], typer.Option(
        help="Arrivals per second (open loop); a comma list (1,2,4) runs a sweep")] = None,
    concurrency: Annotated[Optional[str], typer.Option(
        help="Requests in flight: alone a closed loop, with --rate/--trace a cap; a comma list runs a sweep")] = None,
    arrival: Annotated[Optional[str], typer.Option(help="Arrival process: poisson, gamma, mmpp, diurnal")] = None,
    burstiness: Annotated[Optional[float], typer.Option(
        help="Gamma shape of the gaps (vLLM's --burstiness): 1 Poisson, < 1 burstier")] = None,
    trace: Annotated[Optional[str], typer.Option(
        help="Replay a CSV/JSONL trace's arrivals and lengths (the simulator's formats)")] = None,
    isl: Annotated[Optional[int], typer.Option(help="Prompt tokens per request (mean with --length-cv)")] = None,
    osl: Annotated[Optional[int], typer.Option(help="Output tokens per request, sent as max_tokens")] = None,
    length_cv: Annotated[float, typer.Option(help="CV of a lognormal around --isl/--osl (0: fixed)")] = 0.0,
    isl_values: Annotated[Optional[str], typer.Option(
        help="Empirical prompt lengths: 128,512,2048 (or 128:3,512:1 with weights)")] = None,
    osl_values: Annotated[Optional[str], typer.Option(help="Empirical output lengths, as --isl-values")] = None,
    requests: Annotated[Optional[int], typer.Option(help="Requests to send (default 100 without --duration)")]
    = None,
    duration: Annotated[Optional[float], typer.Option(help="Send no request after this many seconds")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds one request may take before it counts as a timeout")]
    = 600.0,
    seed: Annotated[int, typer.Option(help="Random seed of arrivals, lengths and prompt words")] = 0,
    ttft_ms: Annotated[Optional[float], typer.Option(help="TTFT SLO for goodput, ms")] = None,
    tpot_ms: Annotated[Optional[float], typer.Option(help="TPOT SLO for goodput, ms")] = None,
    ignore_eos: Annotated[bool, typer.Option(
        "--ignore-eos/--no-ignore-eos", help="Send ignore_eos so answers run to max_tokens (vLLM, SGLang)")] = True,
    compare: Annotated[Optional[str], typer.Option(
        help="Predict the same load for this model (HF id or alias) and show it beside the measurement")] = None,
    system: Annotated[Optional[str], typer.Option("--system", "-s", help="System the endpoint runs on (--compare)")]
    = None,
    gpus: Annotated[Optional[int], typer.Option(help="GPUs per replica (--compare; default: the fewest that fit)")]
    = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    ep: EpOpt = None,
    dp: DpOpt = None,
    precision: PrecisionOpt = None,
    kv_dtype: KvDtypeOpt = None,
    engine: Annotated[Optional[str], typer.Option(help="vllm, sglang, trtllm (--compare)")] = None,
    replicas: Annotated[Optional[int], typer.Option(help="Replicas behind the endpoint (--compare)")] = None,
    policy: Annotated[Optional[str], typer.Option(help="Load-balancing policy of the replicas (--compare)")] = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
    enforce_eager: EnforceEagerOpt = False,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
    csv: Annotated[Optional[Path], typer.Option(help="Write one row per request (CSV)")] = None,
) -> None:
    """Load-test an OpenAI-compatible endpoint: TTFT, TPOT, ITL, E2E, throughput, goodput, failures by reason."""
    from ..bench import BenchSweep, parse_config, run_bench, run_sweep, write_requests_csv
    from ..errors import ClusterfitError

    if csv is not None:
        check_outputs([("--csv", csv)], [("--trace", Path(trace))] if trace is not None else [])
    rates = _numbers(rate, "rate", float)
    levels = _numbers(concurrency, "concurrency", int)
    if len(rates) > 1 and len(levels) > 1:
        raise ParameterError("rate", "sweep one of --rate and --concurrency, not both")
    options = given(
        url=url, endpoint=endpoint, model=model, rate=rates[0] if rates else None,
        concurrency=levels[0] if levels else None, arrival=arrival, burstiness=burstiness, trace=trace, isl=isl,
        osl=osl, length_cv=length_cv, input_lengths=_empirical(isl_values, "isl_values"),
        output_lengths=_empirical(osl_values, "osl_values"), requests=requests, duration=duration, timeout=timeout,
        seed=seed, ttft_ms=ttft_ms, tpot_ms=tpot_ms, ignore_eos=ignore_eos, compare=compare, system=system,
        gpus=gpus, tp=tp, pp=pp, ep=ep, dp=dp, precision=precision, kv_dtype=kv_dtype, engine=engine,
        replicas=replicas, policy=policy, catalog=[str(p) for p in catalog] if catalog else None)
    options |= engine_settings(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, enforce_eager)
    try:
        cfg = parse_config(**options)
    except ParameterError as exc:
        if exc.parameter == "url":                     # the URL argument, not an option
            raise ClusterfitError(f"URL {exc.detail}") from None
        raise
    progress = _RichProgress() if not as_json and sys.stderr.isatty() else None
    result: BenchResult | BenchSweep
    try:
        if len(rates) > 1 or len(levels) > 1:
            param, values = ("rate", rates) if len(rates) > 1 else ("concurrency", levels)
            result = run_sweep(cfg, param, values, progress)  # type: ignore[arg-type]
        else:
            result = run_bench(cfg, progress)
    except KeyboardInterrupt:
        raise typer.Abort() from None
    if isinstance(result, BenchSweep):
        sweep = result
        if csv is not None:
            write_requests_csv([(f"{v:g}", r.records) for v, r in zip(sweep.values, sweep.runs)], csv)
        emit(sweep, as_json, lambda c: render_sweep(c, sweep))
    else:
        run = result
        if csv is not None:
            write_requests_csv([("", run.records)], csv)
        emit(run, as_json, lambda c: render_bench(c, run))


def _numbers(text: str | None, name: str, kind: type) -> list[Any]:
    """A number or a comma-separated list of numbers ('4', '1,2,4'); else a ParameterError naming ``name``."""
    if text is None:
        return []
    try:
        values = [kind(part) for part in text.split(",")]
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ParameterError(name, f"must be {what} or a comma-separated list of them (1,2,4), got {text!r}") \
            from None
    return values


def _empirical(text: str | None, name: str) -> dict[str, Any] | None:
    """``128,512`` or ``128:3,512:1`` as an empirical SampledLengthSpec mapping (the simulator's vocabulary)."""
    if text is None:
        return None
    values, weights = [], []
    try:
        for part in text.split(","):
            value, _, weight = part.partition(":")
            values.append(int(value))
            weights.append(float(weight) if weight else 1.0)
    except ValueError:
        raise ParameterError(name, f"must be token counts, each optionally :weight (128,512 or 128:3,512:1), "
                                   f"got {text!r}") from None
    if any(v < 1 for v in values) or any(not 0 <= w < math.inf for w in weights) or not 0 < sum(weights) < math.inf:
        raise ParameterError(name, f"needs token counts >= 1 and finite weights >= 0, not all 0; got {text!r}")
    return {"dist": "empirical", "values": values, "weights": weights}


class _RichProgress:
    """A rich progress bar on stderr: requests done (of the total when known), completed and failed."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("ok {task.fields[ok]} failed {task.fields[failed]}"),
                                  TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self._task: Any = None
        self._ok = self._failed = 0

    def started(self, total: int | None, description: str) -> None:
        self._ok = self._failed = 0
        self._progress.start()
        self._task = self._progress.add_task(description, total=total, ok=0, failed=0)

    def request_done(self, record: RequestRecord) -> None:
        if record.ok:
            self._ok += 1
        else:
            self._failed += 1
        self._progress.update(self._task, advance=1, ok=self._ok, failed=self._failed)

    def finished(self) -> None:
        self._progress.stop()
        if self._task is not None:
            self._progress.remove_task(self._task)
            self._task = None


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:,.1f}"


def _percentile_row(name: str, p: Percentiles) -> list[str]:
    return [name, _ms(p.mean), _ms(p.p50), _ms(p.p90), _ms(p.p99)]


def render_bench(console: Console, r: BenchResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"{escape(r.model)} at {escape(r.url)} ({r.endpoint}), {r.load.kind}: {_load_text(r)}")
    t.add_column("metric, ms")
    for c in ("mean", "median", "p90", "p99"):
        t.add_column(c, justify="right")
    for name, p in (("TTFT", r.ttft_s), ("TPOT", r.tpot_s), ("ITL", r.itl_s), ("E2E latency", r.e2e_s)):
        t.add_row(*_percentile_row(name, p))
    console.print(t)
    console.print(f"requests {r.requests:,}: completed {r.completed:,}, failed {r.failed:,}")
    for note in r.notes:
        console.print(f"note: {note}", highlight=False, markup=False)
    for f in r.failures:
        console.print(f"  {f.reason} x{f.count}: {f.example}", highlight=False, markup=False)
    thr = r.throughput
    console.print(f"duration {r.duration_s:,.2f} s; throughput {thr.requests_per_s:,.2f} req/s, "
                  f"{thr.output_tokens_per_s:,.0f} output tok/s, {thr.total_tokens_per_s:,.0f} total tok/s; "
                  f"peak concurrency {r.peak_concurrency}")
    if r.slo is not None and r.goodput is not None and r.goodput_rps is not None:
        slo = ", ".join(s for s in ((f"TTFT <= {r.slo.ttft_s * 1e3:g} ms" if r.slo.ttft_s else ""),
                                    (f"TPOT <= {r.slo.tpot_s * 1e3:g} ms" if r.slo.tpot_s else "")) if s)
        console.print(f"goodput {r.goodput:.1%} of requests ({r.goodput_rps:,.2f} req/s) within {slo}")
    if r.short_outputs:
        console.print(f"[yellow]{r.short_outputs:,} completed requests got fewer tokens than max_tokens: the server "
                      "stopped early (does it honour ignore_eos?)[/]")
    if r.usage_missing:
        console.print(f"{r.usage_missing:,} answers carried no usage: their output tokens are counted from chunks")
    if r.send_lag_s.p99 is not None:
        console.print(f"send lag behind the schedule: mean {_ms(r.send_lag_s.mean)} ms, p99 "
                      f"{_ms(r.send_lag_s.p99)} ms")
    if r.comparison is not None:
        render_comparison(console, r)


def render_comparison(console: Console, r: BenchResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    c = r.comparison
    assert c is not None
    t = Table(title=f"predicted by clusterfit {c.source}: {escape(c.model)} on {c.replicas} x {c.system} replica(s), "
                    f"{c.layout}")
    for col in ("metric", "measured", "predicted", "measured / predicted"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for row in c.rows:
        if row.unit == "s":
            name, m, p = f"{row.metric}, ms", _ms(row.measured), _ms(row.predicted)
        elif row.unit == "share of requests":
            name = row.metric
            m, p = (f"{x:.1%}" if x is not None else "-" for x in (row.measured, row.predicted))
        else:
            name = f"{row.metric}, {row.unit}"
            m, p = (f"{x:,.2f}" if x is not None else "-" for x in (row.measured, row.predicted))
        t.add_row(name, m, p, "-" if row.ratio is None else f"{row.ratio:.2f}")
    console.print(t)
    for note in c.notes:
        console.print(f"  {note}", highlight=False, markup=False)


def _load_text(r: BenchResult) -> str:
    ld = r.load
    if ld.kind == "trace":
        text = f"trace {ld.trace}"
    elif ld.kind == "rate":
        text = f"{ld.rate_rps:g} req/s {ld.arrival}"
    else:
        text = f"{ld.concurrency} in flight"
    if ld.kind != "concurrency" and ld.concurrency is not None:
        text += f", at most {ld.concurrency} in flight"
    if ld.input_lengths is not None:
        text += f"; prompt {ld.input_lengths}, output {ld.output_lengths} tokens"
    return text


def render_sweep(console: Console, s: BenchSweep) -> None:
    from rich.markup import escape
    from rich.table import Table

    first = s.runs[0]
    t = Table(title=f"{escape(first.model)} at {escape(first.url)} ({first.endpoint}): {s.parameter} sweep")
    cols = [s.parameter, "ok / failed", "req/s", "out tok/s", "TTFT mean ms", "TTFT p99 ms", "TPOT mean ms",
            "TPOT p99 ms", "E2E p99 ms"]
    compared = any(r.comparison is not None for r in s.runs)
    if compared:
        cols += ["TPOT mean predicted ms", "ratio"]
    for c in cols:
        t.add_column(c, justify="right")
    for value, r in zip(s.values, s.runs):
        row = [f"{value:g}", f"{r.completed} / {r.failed}", f"{r.throughput.requests_per_s:,.2f}",
               f"{r.throughput.output_tokens_per_s:,.0f}", _ms(r.ttft_s.mean), _ms(r.ttft_s.p99),
               _ms(r.tpot_s.mean), _ms(r.tpot_s.p99), _ms(r.e2e_s.p99)]
        if compared:
            tpot = next((x for x in r.comparison.rows if x.metric == "TPOT mean"), None) if r.comparison else None
            row += [_ms(tpot.predicted if tpot else None),
                    "-" if tpot is None or tpot.ratio is None else f"{tpot.ratio:.2f}"]
        t.add_row(*row)
    console.print(t)
    for value, r in zip(s.values, s.runs):
        for note in r.notes:
            console.print(f"  {s.parameter} {value:g}: note: {note}", highlight=False, markup=False)
        for f in r.failures:
            console.print(f"  {s.parameter} {value:g}: {f.reason} x{f.count}: {f.example}", highlight=False,
                          markup=False)
