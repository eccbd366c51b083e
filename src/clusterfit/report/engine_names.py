"""The engines' own names for the settings clusterfit calls max_num_seqs, max_num_batched_tokens and the memory
fraction, so the tables print what a user sets on the engine.

Names: vLLM engine args (vllm/engine/arg_utils.py: gpu_memory_utilization, max_num_seqs, max_num_batched_tokens);
SGLang server args (python/sglang/srt/server_args.py: mem_fraction_static, max_running_requests,
chunked_prefill_size); TensorRT-LLM trtllm-serve 1.2 (catalog/deploy/trtllm-1.2-serve-flags.txt, the flags
``clusterfit deploy`` writes: --free_gpu_memory_fraction, --max_batch_size, --max_num_tokens).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


class EngineNames(NamedTuple):
    label: str          # the engine as its project spells it
    fraction: str       # memory fraction
    max_num_seqs: str   # running sequences per engine instance
    tokens: str         # tokens per step (prefill chunk budget)
    #: the two caps are the replica's, divided among the attention-DP ranks (SGLang server_args.py
    #: _handle_data_parallelism; deploy writes per-rank value x DP), not each rank's
    replica_wide: bool = False


ENGINE_NAMES: dict[str, EngineNames] = {
    "vllm": EngineNames("vLLM", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens"),
    "sglang": EngineNames("SGLang", "mem_fraction_static", "max_running_requests", "chunked_prefill_size", True),
    "trtllm": EngineNames("TensorRT-LLM", "free_gpu_memory_fraction", "max_batch_size", "max_num_tokens"),
}


class _Settings(Protocol):
    fraction: float
    mode: str
    max_num_seqs: int
    max_num_batched_tokens: int


def engine_names(engine: str) -> EngineNames:
    """The names of ``engine``; an engine clusterfit has no names for keeps clusterfit's own."""
    return ENGINE_NAMES.get(engine, EngineNames(engine, "memory fraction", "max_num_seqs", "max_num_batched_tokens"))


def fraction_label(engine: str) -> str:
    """'gpu_memory_utilization (vLLM)': the engine's name for its memory fraction."""
    n = engine_names(engine)
    return f"{n.fraction} ({n.label})"


def settings_text(engine: str, es: _Settings, dp: int = 1) -> str:
    """The engine settings in the engine's names, clusterfit's option beside a name that differs:
    'SGLang max_running_requests 3,574 (--max-num-seqs), chunked_prefill_size 8,192 (--max-num-batched-tokens),
    mem_fraction_static 0.906 (--gpu-memory-utilization; of device memory)'. The settings' sequences and
    tokens are per attention-DP rank: with ``dp`` > 1 they are said so, and SGLang's replica-wide caps are given
    as the engine takes them (x ``dp``) with the per-rank figure beside."""
    n = engine_names(engine)
    of = "of the memory free after weights" if es.mode == "free_fraction" else "of device memory"

    def named(name: str, per_rank: int, ours: str) -> str:
        said = [] if name == ours else [f"--{ours.replace('_', '-')}"]
        if dp > 1 and n.replica_wide:
            return f"{name} {per_rank * dp:,} ({'; '.join([f'{per_rank:,} per DP rank', *said])})"
        return f"{name} {per_rank:,}{' per DP rank' if dp > 1 else ''}" + (f" ({said[0]})" if said else "")

    fraction = f"{n.fraction} {es.fraction:g} (" + ("" if n.fraction == "gpu_memory_utilization" else
                                                   "--gpu-memory-utilization; ") + f"{of})"
    return (f"{n.label} {named(n.max_num_seqs, es.max_num_seqs, 'max_num_seqs')}, "
            f"{named(n.tokens, es.max_num_batched_tokens, 'max_num_batched_tokens')}, {fraction}")
