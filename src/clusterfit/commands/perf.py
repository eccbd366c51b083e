"""The `clusterfit perf` command: TTFT, TPOT and tokens/s of one replica under a load."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from ..arch import load_model
from ..cli import app, emit
from ..errors import ClusterfitError
from ..hardware import load_hardware
from ..layout import layout_from_options
from ..memory import smallest_layout
from ..precision import resolve_precision
from .options import CatalogOpt, DpOpt, EpOpt, ExpertsPrecisionOpt, KvDtypeOpt, PpOpt, PrecisionOpt, TpOpt


@app.command("perf")
def perf_command(
    model: Annotated[str, typer.Argument(help="HF id, alias or path to a config.json")],
    system: Annotated[str, typer.Option("--system", "-s", help="System id or GPU name (h200, dgx_b200, ...)")],
    isl: Annotated[int, typer.Option(help="Input (prompt) tokens per request")],
    osl: Annotated[int, typer.Option(help="Output tokens per request")],
    gpus: Annotated[Optional[int], typer.Option(help="GPUs of one replica (default: tp*dp*pp, or the fewest GPUs that fit with 32k KV tokens)")] = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    ep: EpOpt = None,
    dp: DpOpt = None,
    precision: PrecisionOpt = None,
    experts_precision: ExpertsPrecisionOpt = None,
    kv_dtype: KvDtypeOpt = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Closed-loop concurrent requests")] = None,
    max_throughput: Annotated[bool, typer.Option("--max-throughput", help="All requests queued (offline)")] = False,
    batch: Annotated[Optional[int], typer.Option(help="Decode batch size (with --context)")] = None,
    context: Annotated[Optional[int], typer.Option(help="Context length of the decode batch")] = None,
    engine: Annotated[str, typer.Option(help="vllm, sglang or trtllm")] = "vllm",
    catalog: CatalogOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Predict TTFT, TPOT and throughput of one replica of MODEL on SYSTEM."""
    from ..perf import predict

    if sum([concurrency is not None, batch is not None, max_throughput]) != 1:
        raise ClusterfitError("give exactly one of --concurrency, --max-throughput or --batch (with --context)")
    if context is not None and batch is None:
        raise ClusterfitError("--context needs --batch")
    m = load_model(model)
    sysm = load_hardware(catalog).system(system)
    prec = resolve_precision(m, precision, experts_precision, kv_dtype)
    layout = layout_from_options(m, sysm, gpus, tp, pp, ep, dp) or smallest_layout(m, sysm, prec, engine)
    out = predict(m, sysm, layout, prec, engine, isl, osl, concurrency=concurrency, batch=batch, context=context,
                  max_throughput=max_throughput)
    payload = {"model": m.name, "system": sysm.id, "engine": engine, "precision": prec.name, "kv_dtype": prec.kv_dtype,
               "layout": {"tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "dp": layout.dp}, "isl": isl, "osl": osl,
               **out}

    def render(console: Console) -> None:
        t = Table(title=f"{m.name} on {layout.gpus} x {sysm.gpu.id} ({layout.label()}, {engine}, {prec.name})")
        t.add_column("metric")
        t.add_column("value", justify="right")
        t.add_row("batch (running sequences)", f"{out['batch']:.0f}")
        t.add_row("TTFT", f"{out['ttft_s'] * 1e3:.1f} ms")
        t.add_row("TPOT", f"{out['tpot_s'] * 1e3:.2f} ms")
        t.add_row("tokens/s per user", f"{out['tokens_per_s_per_user']:.1f}")
        t.add_row("output tokens/s (replica)", f"{out['output_tokens_per_s']:.0f}")
        t.add_row("output tokens/s per GPU", f"{out['output_tokens_per_s_per_gpu']:.0f}")
        t.add_row("decode step", f"{out['decode_step_s'] * 1e3:.2f} ms")
        t.add_row("KV capacity (tokens)", f"{out['kv_capacity_tokens']:.0f}")
        console.print(t)
        b = Table(title="decode step breakdown")
        b.add_column("op")
        b.add_column("ms", justify="right")
        for k, v in sorted(out["breakdown"]["by_op_s"].items(), key=lambda kv: -kv[1]):
            if v > 0:
                b.add_row(k, f"{v * 1e3:.3f}")
        for k, v in out["breakdown"]["by_kind_s"].items():
            b.add_row(f"[bold]{k}[/]", f"{v * 1e3:.3f}")
        console.print(b)

    emit(payload, as_json, render)
