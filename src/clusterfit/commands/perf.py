"""The `clusterfit perf` command: TTFT, TPOT and tokens/s of one replica under a load."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from .options import (AsyncSchedulingOpt, CatalogOpt, DpOpt, EnforceEagerOpt, EngineOpt, EpOpt, ExpertsPrecisionOpt,
                      GpuMemoryUtilizationOpt, JsonOpt, KvDtypeOpt, LongerContextOpt, MaxNumBatchedTokensOpt,
                      MaxNumSeqsOpt, NumSpeculativeTokensOpt, PpOpt, PrecisionOpt, ProfileOpt,
                      SpeculativeAcceptanceLengthOpt, SpeculativeDraftConfigOpt, SpeculativeAcceptanceOpt, SpeculativeMethodOpt, TpOpt,
                      engine_settings, given, profile_kwargs, speculative_kwargs)
from .output import emit

if TYPE_CHECKING:
    from rich.console import Console

    from ..schema import PerfResult


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
    max_throughput: Annotated[bool, typer.Option("--max-throughput", help="All requests queued (offline): the replica saturated, running as many as the KV cache and the engine's caps admit, as max-throughput benchmarks measure (a smaller --concurrency can be faster where the saturated batch passes the CUDA-graph sizes)")] = False,
    batch: Annotated[Optional[int], typer.Option(help="Decode batch size (its context: --context, else isl + osl/2)")]
    = None,
    context: Annotated[Optional[int], typer.Option(help="Context length of the decode batch (with --batch; "
                                                        "default isl + osl/2)")] = None,
    engine: EngineOpt = "vllm",
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
    catalog: CatalogOpt = None,
    profile: ProfileOpt = None,
    allow_longer_context: LongerContextOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Predict TTFT, TPOT and throughput of one replica of MODEL on SYSTEM."""
    from .. import api

    result = api.perf(**given(model=model, system=system, isl=isl, osl=osl, gpus=gpus, tp=tp, pp=pp, ep=ep, dp=dp,
                              precision=precision, experts_precision=experts_precision, kv_dtype=kv_dtype,
                              concurrency=concurrency, max_throughput=max_throughput, batch=batch, context=context,
                              engine=engine, catalog=catalog, allow_longer_context=allow_longer_context),
                      **engine_settings(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, enforce_eager,
                                        async_scheduling),
                      **speculative_kwargs(num_speculative_tokens, speculative_method, speculative_acceptance,
                                           speculative_acceptance_length, speculative_draft_config),
                      **profile_kwargs(profile))
    emit(result, as_json, lambda c: render_perf(c, result))


def render_perf(console: Console, out: PerfResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..report.engine_names import settings_text
    from ..report.intervals import basis_note, with_interval

    lay = out.layout
    label = lay.as_layout().label()
    # the replica's GPUs of the system (a system id names a node: "1 x hgx_h200 GPUs" read as one 8-GPU node)
    t = Table(title=f"{escape(out.model)} on {out.gpus} GPU{'' if out.gpus == 1 else 's'} of {out.system} ({label}, "
                    f"{out.engine}, {out.precision})")
    es = out.engine_settings
    if es is not None:
        t.caption = (f"engine settings: {settings_text(out.engine, es, lay.dp)}"
                     + (", eager (no CUDA graphs)" if es.enforce_eager else "")
                     + (f"; set: {', '.join(es.given)}" if es.given else ""))
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("batch (running sequences)", f"{out.batch:.0f}")
    t.add_row("TTFT", with_interval(out.ttft_s, out.ttft_s_interval, 1e3, 1, "ms"))
    if out.osl > 1:
        t.add_row("TPOT", with_interval(out.tpot_s, out.tpot_s_interval, 1e3, 2, "ms"))
        t.add_row("tokens/s per user", with_interval(out.tokens_per_s_per_user, out.tokens_per_s_per_user_interval))
    else:  # the one output token comes from the prefill (the notes say so; --json keeps the step time)
        t.add_row("TPOT", "- (one output token: no decode)")
    t.add_row("output tokens/s (replica)", with_interval(out.output_tokens_per_s, out.output_tokens_per_s_interval,
                                                         digits=0))
    t.add_row("output tokens/s per GPU", with_interval(out.output_tokens_per_s_per_gpu,
                                                       out.output_tokens_per_s_per_gpu_interval, digits=0))
    sp = out.speculative
    t.add_row("decode step" if sp is None else "speculative step (verify + drafts)",
              with_interval(out.decode_step_s, out.decode_step_s_interval, 1e3, 2, "ms"))
    if sp is not None:
        t.add_row("tokens per step per sequence", f"{sp.tokens_per_step:.2f} ({sp.method}, {sp.draft_tokens} drafts, "
                                                  f"acceptance {sp.acceptance:.2f} per draft, each draft "
                                                  f"{sp.draft_cost:.1%} of a decode step)")
    t.add_row("prefill (one request alone)", with_interval(out.prefill_s, out.prefill_s_interval, 1e3, 1, "ms"))
    t.add_row("KV capacity per replica (tokens)", f"{out.kv_capacity_tokens:,.0f}")
    console.print(t)
    if out.intervals is not None:
        console.print(f"[dim]{basis_note(out.intervals)}[/]", soft_wrap=True)
    b = Table(title="decode step breakdown" + (" (one plain decode step)" if sp is not None else ""))
    b.add_column("op")
    b.add_column("ms", justify="right")
    for k, v in sorted(out.breakdown.by_op_s.items(), key=lambda kv: -kv[1]):
        if v > 0:
            b.add_row(k, f"{v * 1e3:.3f}")
    for k, v in out.breakdown.by_kind_s.items():
        b.add_row(f"[bold]{k.removesuffix('_s')}[/]", f"{v * 1e3:.3f}")   # the column is ms; --json keeps the keys
    console.print(b)
    for note in out.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
