"""Command-line options shared by several commands, defined once (same names, types and help everywhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

TpOpt = Annotated[Optional[int], typer.Option(help="Tensor parallel size")]
PpOpt = Annotated[Optional[int], typer.Option(help="Pipeline parallel size")]
EpOpt = Annotated[Optional[int], typer.Option(help="Expert parallel size (MoE)")]
DpOpt = Annotated[Optional[int], typer.Option(help="Attention data-parallel ranks inside the replica (DEP, MoE)")]
PrecisionOpt = Annotated[Optional[str], typer.Option(
    help="Weight precision: bf16, fp8, fp8_block, int8, int4, mxfp4, mxfp8, nvfp4 (default: the checkpoint's)")]
ExpertsPrecisionOpt = Annotated[Optional[str], typer.Option(help="Override the routed experts' precision")]
KvDtypeOpt = Annotated[Optional[str], typer.Option(help="KV-cache dtype: bf16, fp16, fp8, fp32")]
CatalogOpt = Annotated[Optional[list[Path]], typer.Option(
    "--catalog", metavar="FILE", help="Extra hardware catalog, YAML or TOML (repeatable; later files win)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON")]
LongerContextOpt = Annotated[bool, typer.Option(
    "--allow-longer-context", help="Allow prompt + output beyond the model's max_position_embeddings")]
EngineOpt = Annotated[str, typer.Option(help="Serving engine: vllm, sglang or trtllm")]
#: The question `plan` and `deploy` share: lengths, load, targets, systems, precisions, cost options.
IslOpt = Annotated[Optional[float], typer.Option("--isl", help="Prompt tokens per request (mean).")]
OslOpt = Annotated[Optional[float], typer.Option("--osl", help="Output tokens per request (mean).")]
RateOpt = Annotated[Optional[float], typer.Option("--rate", help="Target load, requests/s (whole cluster).")]
ConcurrencyOpt = Annotated[Optional[float], typer.Option("--concurrency", help="Target load, concurrent sessions.")]
TokensPerSOpt = Annotated[Optional[float], typer.Option(
    "--tokens-per-s", help="Target load, output tokens/s (whole cluster).")]
TtftMsOpt = Annotated[Optional[float], typer.Option("--ttft-ms", help=(
    "TTFT target, ms, at --ttft-percentile where the command takes one (deploy: at p90, as plan's default)."))]
TpotMsOpt = Annotated[Optional[float], typer.Option("--tpot-ms", help="TPOT target, ms per output token.")]
SystemsOpt = Annotated[Optional[list[str]], typer.Option(
    "--system", help="System id or GPU name; repeat. Default: all.")]
PrecisionsOpt = Annotated[Optional[list[str]], typer.Option(
    "--precision", help="Weight precision; repeat. Default: the checkpoint's.")]
KvDtypesOpt = Annotated[Optional[list[str]], typer.Option("--kv-dtype", help="KV-cache dtype; repeat.")]
ScenarioOpt = Annotated[Optional[Path], typer.Option(
    "--scenario", help="Scenario file (YAML or TOML); options override it.")]
FailoverOpt = Annotated[Optional[int], typer.Option("--failover", help="Spare failure units (N+k).")]
PriceOpt = Annotated[Optional[list[str]], typer.Option("--price", help="SYSTEM=$/GPU-hour override; repeat.")]
MaxNodesOpt = Annotated[Optional[int], typer.Option("--max-nodes", help="Most nodes per replica (default 4).")]
#: Engine settings with the engines' own names (engines.EngineSettings); perf, plan and simulate take them.
MaxNumSeqsOpt = Annotated[Optional[int], typer.Option(
    "--max-num-seqs", help="Running sequences per engine instance (per attention-DP rank): vLLM max_num_seqs, "
    "SGLang max_running_requests, TensorRT-LLM max_batch_size (per pipeline micro-batch: pp x max_batch_size "
    "run) (default: the engine's: vLLM 1024 on GPUs of 70 GiB "
    "or more that are not A100s, else 256; SGLang from its KV pool (2048-4096 unless the pool is small); "
    "TensorRT-LLM 4096)")]
MaxNumBatchedTokensOpt = Annotated[Optional[int], typer.Option(
    "--max-num-batched-tokens", help="Tokens per step, the prefill chunk budget: vLLM max_num_batched_tokens, "
    "SGLang chunked_prefill_size, TensorRT-LLM max_num_tokens (default: 8192; vLLM on A100s and GPUs under "
    "70 GiB: 2048; SGLang by GPU memory: 2048 under 35 GiB, 4096 under 60 GiB, 16384 over 160 GiB)")]
GpuMemoryUtilizationOpt = Annotated[Optional[float], typer.Option(
    "--gpu-memory-utilization", help="vLLM gpu_memory_utilization (0.9 assumed: vLLM's default up to the "
    "versions of the published runs, docs v0.6.4; 0.92 in vLLM 0.33, docs.vllm.ai cli/serve) and SGLang "
    "mem_fraction_static (by GPU memory and layout, e.g. 0.835 on one H100): fraction of the device's memory for "
    "weights + KV; TensorRT-LLM free_gpu_memory_fraction (0.9): fraction of the memory left free after "
    "weights, for KV")]
EnforceEagerOpt = Annotated[bool, typer.Option(
    "--enforce-eager", help="vLLM --enforce-eager: no CUDA graphs; each kernel pays a CPU launch (5 us, assumed)")]
AsyncSchedulingOpt = Annotated[Optional[bool], typer.Option(
    "--async-scheduling/--no-async-scheduling", help="Whether the host prepares the next step while the GPU runs "
    "this one (vLLM --async-scheduling, default since v0.12; SGLang's overlap scheduler, off with "
    "--disable-overlap-schedule) (default: on for vLLM and SGLang; TensorRT-LLM modelled without it)")]
SPECULATIVE_PANEL = "Speculative decoding"
NumSpeculativeTokensOpt = Annotated[Optional[int], typer.Option(
    help="Speculative decoding: draft tokens per step (vLLM num_speculative_tokens; SGLang --speculative-num-steps "
         "with topk 1)", rich_help_panel=SPECULATIVE_PANEL)]
SpeculativeMethodOpt = Annotated[Optional[str], typer.Option(
    help="Drafter: mtp, eagle, eagle3 or ngram (default mtp)", rich_help_panel=SPECULATIVE_PANEL)]
SpeculativeAcceptanceOpt = Annotated[Optional[float], typer.Option(
    help="Probability each draft token is accepted (default 0.7)", rich_help_panel=SPECULATIVE_PANEL)]
SpeculativeAcceptanceLengthOpt = Annotated[Optional[float], typer.Option(
    help="Mean tokens emitted per step, as the engine reports it (instead of --speculative-acceptance)",
    rich_help_panel=SPECULATIVE_PANEL)]
SpeculativeDraftConfigOpt = Annotated[Optional[Path], typer.Option(
    "--speculative-draft-config", metavar="FILE", help="The EAGLE / EAGLE-3 draft head's config.json: its weights "
    "and KV cache are counted (without it, not)", rich_help_panel=SPECULATIVE_PANEL)]
ProfileOpt = Annotated[Optional[Path], typer.Option(
    "--profile", metavar="FILE", help="Kernel profile from `clusterfit calibrate`: its measured curves replace the "
    "H200-derived ones for the GPU it was measured on")]


def engine_settings(max_num_seqs: int | None, max_num_batched_tokens: int | None,
                    gpu_memory_utilization: float | None, enforce_eager: bool,
                    async_scheduling: bool | None = None) -> dict[str, object]:
    """The engine-setting options the user gave, as API keyword arguments (a flag not given is left out, so that a
    scenario's engine_settings apply)."""
    return given(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                 gpu_memory_utilization=gpu_memory_utilization, enforce_eager=True if enforce_eager else None,
                 async_scheduling=async_scheduling)


def speculative_kwargs(num_speculative_tokens: int | None, speculative_method: str | None,
                       speculative_acceptance: float | None, speculative_acceptance_length: float | None,
                       speculative_draft_config: Path | None = None) -> dict[str, object]:
    """The speculative-decoding options the user gave, as API keyword arguments (schema.SpeculativeRequest); the
    draft head's config file is read here (the API takes its content)."""
    draft = None
    if speculative_draft_config is not None:
        from ..inputs import read_document

        draft = read_document(speculative_draft_config, "draft config", "json", "speculative_draft_config")
    return given(num_speculative_tokens=num_speculative_tokens, speculative_method=speculative_method,
                 speculative_acceptance=speculative_acceptance,
                 speculative_acceptance_length=speculative_acceptance_length, speculative_draft_config=draft)


def profile_kwargs(path: Path | None) -> dict[str, object]:
    """``--profile FILE`` as API keyword arguments: the file read and validated (the API takes the content)."""
    if path is None:
        return {}
    from ..profile import read_profile

    return {"profile": read_profile(path)}


def given(**options: object) -> dict[str, object]:
    """The options the user gave (not None), as API keyword arguments."""
    return {k: v for k, v in options.items() if v is not None}
