"""`clusterfit fit`, `clusterfit models` and `clusterfit model`: memory fit and architecture analysis."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from .options import (CatalogOpt, DpOpt, EngineOpt, EpOpt, ExpertsPrecisionOpt, GpuMemoryUtilizationOpt, JsonOpt,
                      KvDtypeOpt, LongerContextOpt, MaxNumBatchedTokensOpt, NumSpeculativeTokensOpt, PpOpt,
                      PrecisionOpt, SpeculativeAcceptanceLengthOpt, SpeculativeAcceptanceOpt, SpeculativeDraftConfigOpt,
                      SpeculativeMethodOpt, TpOpt, given, speculative_kwargs)
from .output import emit

if TYPE_CHECKING:
    from rich.console import Console

    from ..schema import FitResult, SystemFit

GB = 1e9


def fit_command(
    model: Annotated[Optional[str], typer.Argument(help="HF id, alias (glm-5.3) or path to a config.json")] = None,
    params: Annotated[Optional[str], typer.Option("--params", help="Bare parameter count (744B, 1.6T): naive mode")] = None,
    system: Annotated[Optional[list[str]], typer.Option("--system", "-s", help="System id or GPU name (repeatable; default h100, h200, b200)")] = None,
    precision: PrecisionOpt = None,
    experts_precision: ExpertsPrecisionOpt = None,
    kv_dtype: KvDtypeOpt = None,
    nodes: Annotated[Optional[int], typer.Option(help="Nodes per replica (default: the fewest that fit)")] = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    ep: EpOpt = None,
    dp: DpOpt = None,
    context: Annotated[Optional[int], typer.Option(
        help="Tokens per sequence (prompt + output) for max sequences (default: 32768, or the model's "
             "max_position_embeddings if smaller)")] = None,
    engine: EngineOpt = "vllm",
    gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    block_size: Annotated[int, typer.Option(help="Paged-KV block size, tokens")] = 16,
    sessions: Annotated[Optional[int], typer.Option(
        help="Concurrent sessions of --context tokens to hold: says whether they fit and how many nodes they need")] = None,
    num_speculative_tokens: NumSpeculativeTokensOpt = None,
    speculative_method: SpeculativeMethodOpt = None,
    speculative_acceptance: SpeculativeAcceptanceOpt = None,
    speculative_acceptance_length: SpeculativeAcceptanceLengthOpt = None,
    speculative_draft_config: SpeculativeDraftConfigOpt = None,
    catalog: CatalogOpt = None,
    allow_longer_context: LongerContextOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Does MODEL fit on each system? Naive (params x bytes vs marketed GB) and realistic views side by side."""
    from .. import api

    result = api.fit(**given(model=model, params=params, systems=system, precision=precision,
                             experts_precision=experts_precision, kv_dtype=kv_dtype, nodes=nodes, tp=tp, pp=pp,
                             ep=ep, dp=dp, context=context, engine=engine,
                             gpu_memory_utilization=gpu_memory_utilization,
                             max_num_batched_tokens=max_num_batched_tokens, block_size=block_size, sessions=sessions,
                             catalog=catalog, allow_longer_context=allow_longer_context),
                     **speculative_kwargs(num_speculative_tokens, speculative_method, speculative_acceptance,
                                          speculative_acceptance_length, speculative_draft_config))
    emit(result, as_json, lambda c: render_fit(c, result))


def render_fit(console: Console, result: FitResult) -> None:
    """One column per system, one row per figure (naive first, then realistic)."""
    from rich.markup import escape
    from rich.table import Table

    from ..report.engine_names import fraction_label

    m = result.model
    title = f"{escape(m.name)}: {m.total_params / 1e9:,.1f}B parameters"
    if m.layers:
        title += (f", {m.active_params / 1e9:,.1f}B active, KV {m.kv_bytes_per_token or 0:,} B/token "
                  f"({m.kv_dtype})")
    # a GPU without a measured or reported device total: usable_memory_bytes falls back to the marketed figure
    # (hardware.Gpu.usable_memory_bytes)
    marketed = [r.device_bytes_per_gpu == r.gpu_memory_marketed_bytes for r in result.results]
    t = Table(title=title, caption=f"precision {result.precision}; engine {result.engine}; context "
              f"{result.context:,} tokens; GB = 1e9 bytes"
              + ("; \u2020 marketed (no device-reported total)" if any(marketed) else ""))
    t.add_column("")
    for r in result.results:
        t.add_column(r.system, justify="right")

    def row(label: str, fn: Any) -> None:
        t.add_row(label, *[fn(r) for r in result.results])

    def lay(r: SystemFit) -> str:
        x = r.layout
        return " ".join(f"{k.upper()}{v}" for k, v in (("tp", x.tp), ("pp", x.pp), ("ep", x.ep), ("dp", x.dp))
                        if k == "tp" or v > 1)

    row("[b]naive[/]: weights GB", lambda r: f"{r.naive.weight_bytes / GB:,.0f}")
    row("naive: node GB (marketed)", lambda r: f"{r.naive.node_bytes / GB:,.0f}")
    # naive.fits / left_bytes are against --nodes nodes (one by default), even where nodes_needed is more
    nodes = result.results[0].naive.nodes if result.results else 1
    on = "one node" if nodes == 1 else f"{nodes} nodes"
    row(f"naive: fits {on}", lambda r: "yes" if r.naive.fits else "no")
    row("naive: nodes needed", lambda r: str(r.naive.nodes_needed))
    row(f"naive: GB left for KV ({on})", lambda r: f"{r.naive.left_bytes / GB:,.0f}")
    row("[b]realistic[/]: nodes needed", lambda r: str(r.nodes_needed or ">64"))
    row("nodes, layout shown", lambda r: f"{r.nodes} ({lay(r)})")
    row("device GB/GPU (exposed)", lambda r: f"{r.device_bytes_per_gpu / GB:,.1f}"
        + ("\u2020" if r.device_bytes_per_gpu == r.gpu_memory_marketed_bytes else ""))
    row(fraction_label(result.engine), lambda r: f"{r.memory_fraction:g}")   # the engine's own setting name
    row("weights GB/GPU", lambda r: f"{r.weight_bytes_per_gpu / GB:,.1f}")
    row("runtime reserve GB/GPU", lambda r: f"{r.reserve_bytes_per_gpu.total / GB:,.2f}")
    row("KV budget GB/GPU", lambda r: f"{r.kv_budget_bytes_per_gpu / GB:,.1f}")
    row("KV tokens per replica", lambda r: f"{r.max_kv_tokens:,}")
    row(f"max sequences @ {result.context:,} tokens", lambda r: f"{r.max_sequences:,}")
    if any(r.sessions_fit for r in result.results):
        row("sessions wanted", lambda r: f"{r.sessions_fit.sessions:,}" if r.sessions_fit else "-")
        row("nodes to hold them", lambda r: (f"{r.sessions_fit.nodes} ({r.sessions_fit.replicas} x "
                                             f"{r.sessions_fit.nodes_per_replica})")
            if r.sessions_fit and r.sessions_fit.nodes else "-")
    if any(r.most_sessions for r in result.results):
        row("layout with most sessions", lambda r: (f"{r.most_sessions.label}: {r.most_sessions.max_sequences:,}"
                                                    if r.most_sessions else "(the shown one)"))
    row("fits", lambda r: "[green]yes[/]" if r.fits else "[red]no[/]")
    console.print(t)
    for r in result.results:
        if not r.fits:
            console.print(f"[red]{r.system}[/]: {escape(r.reason)}")
        if r.most_sessions:
            console.print(f"{r.system}: {r.most_sessions.explanation}")
        for note in r.notes:
            console.print(f"[dim]{r.system}: {escape(note)}[/]")
    for note in m.notes:
        console.print(f"[dim]note: {escape(note)}[/]")


def models_command(as_json: JsonOpt = False) -> None:
    """List the bundled model configs and their aliases."""
    from .. import api

    result = api.models()

    def render(c: Console) -> None:
        from rich.table import Table

        t = Table(title="Bundled models (parameters in billions)")
        for col in ("HF id", "aliases", "total B", "active B", "attention", "checkpoint"):
            t.add_column(col)
        for r in result.models:
            t.add_row(r.hf_id, ", ".join(r.aliases), f"{r.total_params / 1e9:,.1f}", f"{r.active_params / 1e9:,.1f}",
                      ", ".join(f"{k} x{v}" for k, v in r.attention_kinds.items()), ", ".join(r.checkpoint_formats))
        c.print(t)

    emit(result, as_json, render)


def model_command(
    model: Annotated[str, typer.Argument(help="HF id, alias or path to a config.json")],
    precision: Annotated[Optional[str], typer.Option(help="Weight precision (default: the checkpoint's)")] = None,
    kv_dtype: KvDtypeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Architecture analysis: parameters by component, layer kinds, attention kinds, KV bytes and FLOPs per token."""
    from .. import api

    m = api.model_info(model=model, precision=precision, kv_dtype=kv_dtype)

    def render(c: Console) -> None:
        from rich.markup import escape
        from rich.table import Table

        t = Table(title=f"{escape(m.name)} ({escape(str(m.model_type))}): {m.total_params / 1e9:,.2f}B total, "
                        f"{m.active_params / 1e9:,.2f}B active")
        t.add_column("component")
        t.add_column("parameters", justify="right")
        t.add_column("format")
        for comp, n in m.params_by_component.items():
            t.add_row(comp, f"{n:,}", (m.precision or {}).get(comp, ""))
        c.print(t)
        c.print(f"layers {m.layers}: attention {m.attention_kinds}, FFN {m.ffn_kinds}")
        mtp = m.params_by_component.get("mtp", 0)
        if mtp:   # listed above, outside the total: loaded only to draft with them
            c.print(f"mtp: {m.mtp_layers} MTP (next-token prediction) layer(s), {mtp / 1e9:,.2f}B parameters, are not "
                    "in the total: the checkpoint holds them, and an engine loads them only for "
                    "--speculative-method mtp")
        if m.kv_bytes_per_token is not None and m.flops_per_token is not None:
            c.print(f"KV cache {m.kv_bytes_per_token:,} bytes/token ({m.kv_dtype}, all layers, one copy); "
                    f"forward FLOPs/token {m.flops_per_token['context_0'] / 1e9:,.1f} GFLOP at context 0")
        for note in m.notes:
            c.print(f"[dim]note: {escape(note)}[/]")

    emit(m, as_json, render)
