"""`clusterfit fit`, `clusterfit models` and `clusterfit model`: memory fit and architecture analysis."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from ..arch import ModelArch, bare_model, flops_per_token, list_models, load_model, model_aliases, parse_param_count
from ..cli import app, emit
from ..errors import ClusterfitError
from ..hardware import load_hardware
from ..layout import layout_from_options
from ..memory import engine_memory, fit, kv_bytes_per_token, naive_fit, nodes_needed
from ..precision import resolve_precision
from .options import CatalogOpt, DpOpt, EpOpt, ExpertsPrecisionOpt, JsonOpt, KvDtypeOpt, PpOpt, PrecisionOpt, TpOpt

DEFAULT_SYSTEMS = ["h100", "h200", "b200"]
GB = 1e9


def model_summary(model: ModelArch, precision=None) -> dict:
    """Architecture facts of ``model`` as a JSON-ready dict (parameter counts are element counts)."""
    out = {
        "name": model.name, "hf_id": model.hf_id, "model_type": model.model_type,
        "total_params": model.total_params, "active_params": model.active_params,
        "active_params_excl_embedding": model.active_params_excl_embedding,
        "params_by_component": {k: v for k, v in model.params.items() if v},
        "layers": model.num_layers, "hidden": model.hidden, "vocab": model.vocab,
        "attention_kinds": model.attention_kinds(), "ffn_kinds": model.ffn_kinds(),
        "mtp_layers": model.mtp_layers, "notes": list(model.notes),
    }
    if model.layers:
        out["flops_per_token"] = {"context_0": flops_per_token(model, 0), "context_32768": flops_per_token(model, 32768)}
        moe = [lyr.ffn for lyr in model.layers if lyr.ffn.kind == "moe"]
        if moe:
            f = moe[0]
            out["moe"] = {"experts": f.num_experts, "top_k": f.top_k, "expert_intermediate": f.expert_intermediate,
                          "shared_experts": f.num_shared, "moe_layers": len(moe)}
    if precision is not None:
        out["precision"] = {c: f.name for c, f in precision.formats.items() if model.params.get(c)}
        out["kv_dtype"] = precision.kv_dtype
        if model.layers:
            out["kv_bytes_per_token"] = int(round(kv_bytes_per_token(model, precision)))
    return out


def _dominant_format(model: ModelArch, precision) -> str:
    comp = max(model.params, key=lambda c: model.params[c] if c not in ("mtp", "vision") else -1)
    return precision.formats[comp].name


@app.command("fit")
def fit_command(
    model: Annotated[Optional[str], typer.Argument(help="HF id, alias (glm-5.3) or path to a config.json")] = None,
    params: Annotated[Optional[str], typer.Option("--params", help="Bare parameter count (744B, 1.6T): naive mode")] = None,
    system: Annotated[Optional[list[str]], typer.Option("--system", "-s", help="System id or GPU name (repeatable)")] = None,
    precision: PrecisionOpt = None,
    experts_precision: ExpertsPrecisionOpt = None,
    kv_dtype: KvDtypeOpt = None,
    nodes: Annotated[Optional[int], typer.Option(help="Nodes per replica (default: the fewest that fit)")] = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    ep: EpOpt = None,
    dp: DpOpt = None,
    context: Annotated[int, typer.Option(help="Tokens per sequence (prompt + output) for max sequences")] = 32768,
    engine: Annotated[str, typer.Option(help="Memory budgeting of: vllm, sglang, trtllm")] = "vllm",
    gpu_memory_utilization: Annotated[Optional[float], typer.Option(help="Engine memory fraction (vLLM default 0.9)")] = None,
    max_batched_tokens: Annotated[Optional[int], typer.Option(help="Tokens per forward pass (activation workspace)")] = None,
    block_size: Annotated[int, typer.Option(help="Paged-KV block size, tokens")] = 16,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Does MODEL fit on each system? Naive (params x bytes vs marketed GB) and realistic views side by side."""
    payload = run_fit(model, params, system or DEFAULT_SYSTEMS, precision, experts_precision, kv_dtype, nodes,
                      tp, pp, ep, dp, context, engine, gpu_memory_utilization, max_batched_tokens, block_size, catalog)
    emit(payload, as_json, lambda c: render_fit(c, payload))


def run_fit(model_name, params, systems, precision, experts_precision, kv_dtype, nodes, tp, pp, ep, dp, context,
            engine, gpu_memory_utilization, max_batched_tokens, block_size, catalog) -> dict:
    """The fit answer as a dict (the JSON shape of `clusterfit fit --json`)."""
    if (model_name is None) == (params is None):
        raise ClusterfitError("give a MODEL or --params (e.g. `clusterfit fit glm-5.3` or `--params 744B --precision fp8`)")
    if params is not None and precision is None:
        raise ClusterfitError("--params needs --precision (bf16, fp8, int4, ...)")
    if nodes is not None and not 1 <= nodes <= 4096:
        raise ClusterfitError(f"--nodes must be in 1..4096, got {nodes}")
    model = bare_model(parse_param_count(params)) if params is not None else load_model(model_name)
    prec = resolve_precision(model, precision, experts_precision, kv_dtype)
    eng = engine_memory(engine, gpu_memory_utilization, max_batched_tokens)
    hw = load_hardware(catalog)
    naive_prec = precision or _dominant_format(model, prec)
    results = []
    for name in systems:
        s = hw.system(name)
        layout = layout_from_options(model, s, None, tp, pp, ep, dp)
        need = nodes_needed(model, s, prec, eng, context, block_size)
        n = nodes or (layout and -(-layout.gpus // s.gpus_per_node)) or need or 1
        r = fit(model, s, prec, layout, n, eng, context, block_size)
        naive = naive_fit(model.total_params, naive_prec, s, nodes or 1)
        row = r.as_dict()
        row.update({"nodes_needed": need, "system_name": s.name, "gpu": s.gpu.id, "gpus_per_node": s.gpus_per_node,
                    "naive": naive.as_dict(),
                    "gpu_memory_marketed_bytes": s.gpu.memory_bytes})
        results.append(row)
    return {"model": model_summary(model, prec), "precision": prec.name, "engine": eng.name,
            "engine_settings": {"fraction": eng.fraction, "mode": eng.mode, "max_batched_tokens": eng.max_batched_tokens,
                                "source": eng.source},
            "context": context, "results": results}


def render_fit(console: Console, payload: dict) -> None:
    """One column per system, one row per figure (naive first, then realistic)."""
    m = payload["model"]
    title = f"{m['name']}: {m['total_params'] / 1e9:,.1f}B parameters"
    if m.get("layers"):
        title += f", {m['active_params'] / 1e9:,.1f}B active, KV {m.get('kv_bytes_per_token', 0):,} B/token ({m.get('kv_dtype')})"
    t = Table(title=title, caption=f"precision {payload['precision']}; engine {payload['engine']} (memory fraction "
              f"{payload['engine_settings']['fraction']}); context {payload['context']:,} tokens; GB = 1e9 bytes")
    t.add_column("")
    for r in payload["results"]:
        t.add_column(r["system"], justify="right")

    def row(label, fn):
        t.add_row(label, *[fn(r) for r in payload["results"]])

    def lay(r):
        x = r["layout"]
        return " ".join(f"{k.upper()}{x[k]}" for k in ("tp", "pp", "ep", "dp") if k == "tp" or x[k] > 1)

    row("[b]naive[/]: weights GB", lambda r: f"{r['naive']['weight_bytes'] / GB:,.0f}")
    row("naive: node GB (marketed)", lambda r: f"{r['naive']['node_bytes'] / GB:,.0f}")
    row("naive: fits one node", lambda r: "yes" if r["naive"]["fits"] else "no")
    row("naive: nodes needed", lambda r: str(r["naive"]["nodes_needed"]))
    row("naive: GB left for KV", lambda r: f"{r['naive']['left_bytes'] / GB:,.0f}")
    row("[b]realistic[/]: nodes needed", lambda r: str(r["nodes_needed"] or ">64"))
    row("nodes, layout shown", lambda r: f"{r['nodes']} ({lay(r)})")
    row("device GB/GPU (exposed)", lambda r: f"{r['device_bytes_per_gpu'] / GB:,.1f}")
    row("weights GB/GPU", lambda r: f"{r['weight_bytes_per_gpu'] / GB:,.1f}")
    row("runtime reserve GB/GPU", lambda r: f"{r['reserve_bytes_per_gpu']['total'] / GB:,.2f}")
    row("KV budget GB/GPU", lambda r: f"{r['kv_budget_bytes_per_gpu'] / GB:,.1f}")
    row("KV tokens per replica", lambda r: f"{r['max_kv_tokens']:,}")
    row(f"max sequences @ {payload['context']:,}", lambda r: f"{r['max_sequences']:,}")
    row("fits", lambda r: "[green]yes[/]" if r["fits"] else "[red]no[/]")
    console.print(t)
    for r in payload["results"]:
        if not r["fits"]:
            console.print(f"[red]{r['system']}[/]: {r['reason']}")
    for note in m.get("notes", []):
        console.print(f"[dim]note: {note}[/]")


@app.command("models")
def models_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False) -> None:
    """List the bundled model configs and their aliases."""
    aliases = model_aliases()
    rows = []
    for hf_id in list_models():
        m = load_model(hf_id)
        rows.append({"hf_id": hf_id, "aliases": sorted(a for a, h in aliases.items() if h == hf_id and a != hf_id.lower()),
                     "total_params": m.total_params, "active_params": m.active_params,
                     "attention_kinds": m.attention_kinds(), "checkpoint_formats": sorted(set(m.quantization.values()))})

    def render(c: Console) -> None:
        t = Table(title="Bundled models (parameters in billions)")
        for col in ("HF id", "aliases", "total B", "active B", "attention", "checkpoint"):
            t.add_column(col)
        for r in rows:
            t.add_row(r["hf_id"], ", ".join(r["aliases"]), f"{r['total_params'] / 1e9:,.1f}",
                      f"{r['active_params'] / 1e9:,.1f}", ", ".join(f"{k} x{v}" for k, v in r["attention_kinds"].items()),
                      ", ".join(r["checkpoint_formats"]))
        c.print(t)

    emit({"models": rows}, as_json, render)


@app.command("model")
def model_command(
    model: Annotated[str, typer.Argument(help="HF id, alias or path to a config.json")],
    precision: Annotated[Optional[str], typer.Option(help="Weight precision (default: the checkpoint's)")] = None,
    kv_dtype: Annotated[Optional[str], typer.Option(help="KV-cache dtype")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Architecture analysis: parameters by component, layer kinds, attention kinds, KV bytes and FLOPs per token."""
    m = load_model(model)
    prec = resolve_precision(m, precision, None, kv_dtype)
    payload = model_summary(m, prec)

    def render(c: Console) -> None:
        t = Table(title=f"{m.name} ({m.model_type}): {m.total_params / 1e9:,.2f}B total, {m.active_params / 1e9:,.2f}B active")
        t.add_column("component")
        t.add_column("parameters", justify="right")
        t.add_column("format")
        for comp, n in payload["params_by_component"].items():
            t.add_row(comp, f"{n:,}", payload["precision"].get(comp, ""))
        c.print(t)
        c.print(f"layers {m.num_layers}: attention {m.attention_kinds()}, FFN {m.ffn_kinds()}")
        c.print(f"KV cache {payload['kv_bytes_per_token']:,} bytes/token ({prec.kv_dtype}, all layers, one copy); "
                f"forward FLOPs/token {payload['flops_per_token']['context_0'] / 1e9:,.1f} GFLOP at context 0")
        for note in m.notes:
            c.print(f"[dim]note: {note}[/]")

    emit(payload, as_json, render)
