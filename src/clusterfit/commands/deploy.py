"""The `clusterfit deploy` command: plan (or read --plan), then write launch commands / manifests to --out."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from .options import (
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
    SPECULATIVE_PANEL,
    NumSpeculativeTokensOpt,
    OslOpt,
    PrecisionsOpt,
    PriceOpt,
    RateOpt,
    ScenarioOpt,
    SpeculativeAcceptanceLengthOpt, SpeculativeDraftConfigOpt,
    SpeculativeAcceptanceOpt,
    SpeculativeMethodOpt,
    TokensPerSOpt,
    TpotMsOpt,
    TtftMsOpt,
    engine_settings,
    given,
    speculative_kwargs,
)
from .output import emit

if TYPE_CHECKING:
    from rich.console import Console

    from ..schema import DeployResult


def deploy_command(
    model: Optional[str] = typer.Argument(None, help="Model id or alias (or give --plan or --scenario)."),
    out: Path = typer.Option(..., "--out", help="Directory to create (must not exist, or be empty)."),
    target: str = typer.Option("shell", "--target", help="shell, kubernetes or slurm."),
    engine: Optional[str] = typer.Option(None, "--engine", help="vllm (0.33), sglang (0.5.23) or trtllm (1.2) "
                                         "(default: vllm, or the engine of the --plan file)."),
    plan_file: Optional[Path] = typer.Option(None, "--plan", help="A `clusterfit plan --json` output to deploy."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len",
                                                help="Engine max model length (default: the model's, at most 131072)."),
    isl: IslOpt = None,
    osl: OslOpt = None,
    rate: RateOpt = None,
    concurrency: ConcurrencyOpt = None,
    tokens_per_s: TokensPerSOpt = None,
    ttft_ms: TtftMsOpt = None,
    tpot_ms: TpotMsOpt = None,
    system: Optional[list[str]] = typer.Option(None, "--system", help="System id or GPU name; repeat (with --plan: "
                                               "deploy that system's row)."),
    precision: PrecisionsOpt = None,
    kv_dtype: KvDtypesOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
    enforce_eager: EnforceEagerOpt = False,
    num_speculative_tokens: NumSpeculativeTokensOpt = None,
    speculative_method: SpeculativeMethodOpt = None,
    speculative_acceptance: SpeculativeAcceptanceOpt = None,
    speculative_acceptance_length: SpeculativeAcceptanceLengthOpt = None,
    speculative_draft_config: SpeculativeDraftConfigOpt = None,
    speculative_draft_model: Optional[str] = typer.Option(
        None, "--speculative-draft-model", help="EAGLE / EAGLE-3: the draft checkpoint's Hugging Face id, written "
        "into the engine's speculative flags.", rich_help_panel=SPECULATIVE_PANEL),
    scenario: ScenarioOpt = None,
    failover: FailoverOpt = None,
    price: PriceOpt = None,
    max_nodes: MaxNodesOpt = None,
    catalog: CatalogOpt = None,
    allow_longer_context: LongerContextOpt = False,
    as_json: bool = typer.Option(False, "--json", help="Print JSON (the files written, with their roles)."),
) -> None:
    """Write the engine command, Kubernetes manifests or a Slurm script for a plan (aggregated replicas)."""
    from .. import api

    result = api.deploy(**given(
        model=model, out=out, target=target, engine=engine, plan_file=plan_file, max_model_len=max_model_len,
        isl=isl, osl=osl, rate=rate, concurrency=concurrency, tokens_per_s=tokens_per_s, ttft_ms=ttft_ms,
        tpot_ms=tpot_ms, systems=system, precisions=precision, kv_dtypes=kv_dtype, scenario=scenario,
        failover=failover, prices=price, max_nodes=max_nodes, catalog=catalog,
        allow_longer_context=allow_longer_context, speculative_draft_model=speculative_draft_model),
        **engine_settings(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, enforce_eager),
        **speculative_kwargs(num_speculative_tokens, speculative_method, speculative_acceptance,
                             speculative_acceptance_length, speculative_draft_config))
    emit(result, as_json, lambda console: render(result, console))


def render(result: DeployResult, console: Console) -> None:
    from rich.markup import escape

    p = result.plan
    console.print(f"{result.engine} {result.engine_version}, {result.target}: {p.replicas} x {p.layout} on "
                  f"{p.system} ({p.nodes_per_replica} node(s) per replica)")
    for f in result.files:
        console.print(f"wrote {escape(str(Path(result.out or '.') / f.path))}  ({f.role})")
