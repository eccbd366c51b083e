"""Serving metrics from a compiled StepModel: TTFT, TPOT, tokens/s per GPU and per user.

Request-life accounting (continuous / in-flight batching, chunked prefill), used for a closed loop of
``concurrency`` clients and for max-throughput mode:

    B requests run together. Over one "generation" of osl decode iterations every running request emits
    osl tokens and, in steady state, B new prompts of isl tokens are prefilled in chunks of the engine's
    max_num_batched_tokens, mixed into the decode iterations. So

    cycle_s = osl * decode_step_s(B, isl + osl/2)
              + (B * isl / chunk) * [step_s(chunk prefill + B decodes) - decode_step_s(B)]   (prefill's marginal cost)
    (an engine without mixed batches, SGLang, runs each chunk in a prefill step of its own that holds the decodes:
     + (B * isl / chunk) * step_s(chunk prefill alone))
    output tokens/s = B * osl / cycle_s;   TPOT = cycle_s / osl;
    TTFT = the chunked prefill steps of the prompt, each shared with the other B-1 sequences' decodes
    (first_token_s; the first token is sampled at the end of the step that completes the prompt).

Max-throughput mode (trtllm-bench throughput, MLPerf Offline: all requests queued): B grows until KV memory
(StepModel.kv_admitted_sequences, the admission rule the planner and the simulator share: per request isl+osl
tokens reserved by TensorRT-LLM, isl+osl/2 on average for vLLM/SGLang paged allocation) or the engine's batch
cap stops it, and at most until the cycle's osl steps each carry a full prefill chunk (prefill_bound_batch): past
that the prompts, not the sequences, limit the engine, and more requests only queue (running_batch).

Static batching (TensorRT-LLM v0.9 gptSessionBenchmark): B prompts are prefilled together, then osl decode
iterations at contexts isl..isl+osl: ``static_batch`` below.
"""

from __future__ import annotations

import math

from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from ..arch import ModelArch
from ..engines import Engine, front_end_s, schedules_ahead
from ..errors import ClusterfitError, ParameterError
from ..hardware import System
from ..layout import Layout
from ..precision import Precision
from ..speculative import Drafting
from .step import ArrayLike, Num, StepModel, compile_step


def kv_limited_batch(sm: StepModel, isl: ArrayLike, osl: ArrayLike) -> npt.NDArray[np.float64]:
    """Sequences the KV cache admits at once under the engine's reservation policy
    (StepModel.kv_admitted_sequences, shared with the planner and the simulator)."""
    return sm.kv_admitted_sequences(isl, osl)


def max_throughput_batch(sm: StepModel, isl: ArrayLike, osl: ArrayLike) -> Num:
    """KV-limited batch, capped by the engine's batch limit per attention-DP rank (TensorRT-LLM: the max_batch_size
    trtllm-bench derives from its own KV estimate, StepModel.bench_max_batch)."""
    cap = sm.running_cap(np.asarray(isl, float) + np.asarray(osl, float))
    return np.maximum(np.minimum(kv_limited_batch(sm, isl, osl), cap), 0.0)


def prefill_bound_batch(sm: StepModel, isl: ArrayLike, decode_steps: ArrayLike) -> Num:
    """Running sequences above which the engine cannot keep every sequence decoding: the batch B at which the
    prompts of B requests, B x isl tokens per cycle, fill the prefill budget of every one of the cycle's
    ``decode_steps`` steps (StepModel.batched_tokens, cycle_s's chunk). Past it more requests
    only queue for the budget: each step admits about max_num_batched_tokens / isl new prompts, whose sequences
    leave after ``decode_steps`` steps, so about decode_steps x max_num_batched_tokens / isl run at once however
    many wait (the simulator's steady state, sim.replica). cycle_s, which spreads B x isl prompt tokens over
    ``decode_steps`` steps, holds up to this batch only."""
    return np.maximum(np.asarray(decode_steps, float) * sm.batched_tokens / np.maximum(np.asarray(isl, float), 1.0),
                      1.0)


def running_batch(sm: StepModel, isl: ArrayLike, osl: ArrayLike, tokens_per_step: float = 1.0) -> Num:
    """Sequences a saturated replica runs at once: the KV-limited batch under the engine's cap
    (max_throughput_batch), and at most prefill_bound_batch for requests decoding osl / tokens_per_step steps."""
    if not sm.engine.mixed_batches:  # prefill steps of their own: the prompts do not crowd out the decodes
        return max_throughput_batch(sm, isl, osl)
    return np.minimum(max_throughput_batch(sm, isl, osl),
                      prefill_bound_batch(sm, isl, np.asarray(osl, float) / tokens_per_step))


def engine_cap_words(sm: StepModel, seq_len: float) -> str:
    """StepModel.running_cap in words: TensorRT-LLM's max_batch_size by trtllm-bench's rule, or max_num_seqs."""
    per = float(sm.bench_max_batch(seq_len))   # per attention-DP rank and micro-batch; max_num_seqs is the replica's
    if float(sm.running_cap(seq_len)) < sm.max_num_seqs:
        where = "attention-DP rank" if sm.dp > 1 else "replica"
        return (f"TensorRT-LLM's max_batch_size by trtllm-bench's rule, {per:,.0f} per {where}"
                f"{' and pipeline micro-batch' if sm.pp > 1 else ''} (--max-num-seqs sets it)")
    return f"the engine's max_num_seqs ({sm.max_num_seqs:,})"


def running_limit(sm: StepModel, isl: float, osl: float, tokens_per_step: float = 1.0) -> str:
    """What stops the running batch of a saturated replica (running_batch) from growing, in words: the KV cache, the
    engine's batch cap (TensorRT-LLM: the max_batch_size trtllm-bench derives; else max_num_seqs) or the prompts
    the engine prefills (prefill_bound_batch)."""
    b = float(running_batch(sm, isl, osl, tokens_per_step))
    if float(kv_limited_batch(sm, isl, osl)) <= b:
        return "the KV cache"
    if float(max_throughput_batch(sm, isl, osl)) <= b:
        return engine_cap_words(sm, isl + osl)
    return f"the prompts the engine prefills, {sm.batched_tokens:,.0f} tokens a step (max_num_batched_tokens)"


def _refuse_too_long(sm: StepModel, isl: int, osl: int) -> NoReturn:
    """The error for a request whose tokens the KV cache of one attention-DP rank cannot hold."""
    rank = " per attention-DP rank" if sm.dp > 1 else ""
    raise ParameterError("isl", f"a request of {isl:,} + {osl:,} tokens needs more KV cache than this layout admits "
                         f"({sm.kv_capacity_tokens / max(sm.dp, 1):,.0f} tokens{rank}); give it more GPUs (--gpus, "
                         "--tp), more memory (--gpu-memory-utilization), fp8 KV (--kv-dtype fp8) or shorter requests")


def cycle_s(sm: StepModel, batch: ArrayLike, isl: ArrayLike, osl: ArrayLike) -> Num:
    """Seconds for ``batch`` concurrent requests to each prefill ``isl`` and decode ``osl`` tokens."""
    b = np.asarray(batch, float)
    i = np.asarray(isl, float)
    o = np.asarray(osl, float)
    ctx = i + o / 2.0
    dec = sm.decode_step_s(b, ctx)
    chunk = np.minimum(sm.batched_tokens, np.maximum(b * i, 1.0))
    n_chunks = b * i / chunk
    if not sm.engine.mixed_batches:  # SGLang: a prefill step holds every decode back (Engine.mixed_batches)
        return o * dec + n_chunks * sm.step_s(chunk, chunk * (i + 1.0) / 2.0, 0.0, 0.0)
    mixed = sm.step_s(chunk, chunk * (i + 1.0) / 2.0, b, b * ctx)
    return o * dec + n_chunks * np.maximum(mixed - dec, 0.0)


def first_token_s(sm: StepModel, isl: float, others: float, context: float) -> float:
    """Seconds from admission to the first output token of one request of ``isl`` prompt tokens.

    The prompt is prefilled in chunks, each sharing its engine step with the ``others`` running sequences'
    decode tokens (continuous batching with chunked prefill); the first token is sampled at the end of the
    step that completes the prompt (as vLLM, SGLang and TensorRT-LLM do, and as the simulator counts it).
    Decode tokens use part of the step's token budget: a chunk holds max_num_batched_tokens - others tokens, but at
    least 1/8 of the budget. With no other sequence this is ``prefill_s(isl)``. Queueing before admission
    is not included.
    """
    budget = float(sm.engine.max_num_batched_tokens)
    others = float(others)
    chunk = max(budget - others, budget / 8.0) if others > 0 else budget
    n_chunks = max(np.ceil(isl / chunk), 1.0)
    per = isl / n_chunks
    i = np.arange(n_chunks)
    attended = per * (i * per) + per * (per + 1.0) / 2.0
    steps = sm.step_s(np.full_like(i, per, dtype=float), attended, others, others * float(context))
    return float(np.sum(steps))


def static_batch_s(sm: StepModel, batch: ArrayLike, isl: ArrayLike, osl: ArrayLike) -> Num:
    """Seconds of one static batch: B prompts prefilled together, then osl decode iterations."""
    b = np.asarray(batch, float)
    i = np.asarray(isl, float)
    pre = sm.step_s(b * i, b * i * (i + 1.0) / 2.0, 0.0, 0.0)
    return pre + np.asarray(osl, float) * sm.decode_step_s(b, i + np.asarray(osl, float) / 2.0)


def decode_breakdown(sm: StepModel, batch: float, context: float, drafting: Drafting | None) -> dict[str, Any]:
    """Seconds of one decode step of ``batch`` sequences at ``context`` by op and by kind (StepModel.breakdown);
    under speculative decoding the speculative step (speculative_step_s): the verify pass's ops, each scaled by
    1 + k x the drafter's cost, as the step is, so ``step_s`` is the step and the parts add up to it."""
    if drafting is None:
        return sm.breakdown(0.0, 0.0, batch, batch * context)
    bd = sm.with_verify(drafting.draft_tokens).step_breakdown(0.0, 0.0, batch, batch * context)
    f = drafting.step_factor
    return {"step_s": bd.step_s * f, "by_op_s": {k: v * f for k, v in bd.by_op_s.items()},
            "by_kind_s": {k: v * f for k, v in bd.by_kind_s.items()}}


def speculative_step_s(sm: StepModel, batch: ArrayLike, context: ArrayLike, drafting: Drafting) -> Num:
    """One speculative decode step of ``batch`` sequences at ``context``: the verify pass (each sequence's own decode
    token and its k draft tokens, StepModel.with_verify) times 1 + k x the drafter's cost
    (clusterfit.speculative.Drafting; the simulator charges the same, sim.replica)."""
    return sm.with_verify(drafting.draft_tokens).decode_step_s(batch, context) * drafting.step_factor


def predict(model: ModelArch | None, system: System | None, layout: Layout | None, precision: Precision | None,
            engine: Engine | None = None, isl: int = 1024, osl: int = 1024, concurrency: float | None = None,
            batch: float | None = None, context: float | None = None, max_throughput: bool = False,
            step_model: StepModel | None = None, drafting: Drafting | None = None) -> dict[str, Any]:
    """Serving metrics of one replica. Exactly one load: concurrency, batch (+context), or max_throughput.

    Either ``step_model`` (compiled already) or model, system, layout, precision and ``engine`` (a
    clusterfit.engines.Engine: get_engine(name)) to compile one. ``drafting``: speculative decoding (each decode step
    is speculative_step_s and emits ``drafting.tokens_per_step`` tokens per sequence; prefill is unchanged)."""
    modes = sum([concurrency is not None, batch is not None, bool(max_throughput)])
    if modes != 1:
        raise ClusterfitError("give exactly one of --concurrency, --batch (with --context) or --max-throughput")
    if isl < 1 or osl < 1:
        raise ClusterfitError(f"--isl and --osl must be >= 1 (got {isl}, {osl})")
    if step_model is not None:
        sm = step_model
    elif model is None or system is None or layout is None or precision is None or engine is None:
        raise ClusterfitError("predict needs a step_model, or model, system, layout, precision and engine")
    else:
        sm = compile_step(model, system, layout, precision, engine)
    b: float
    if sm.kv_capacity_tokens <= 0:
        where = f"{sm.gpus} x {system.gpu.id}" if system is not None else f"{sm.gpus} GPUs"
        raise ClusterfitError(f"{getattr(model, 'name', sm.name)} does not fit on {where} with this layout and "
                              f"precision (no memory left for the KV cache)")
    cap = float(max_throughput_batch(sm, isl, osl))
    if cap < 1:
        _refuse_too_long(sm, isl, osl)
    per_step = 1.0 if drafting is None else drafting.tokens_per_step
    if batch is not None:
        if batch < 1:
            raise ClusterfitError(f"--batch must be >= 1, got {batch}")
        ctx = float(context if context is not None else isl + osl / 2)
        b = float(batch)
        step = float(sm.decode_step_s(b, ctx) if drafting is None else speculative_step_s(sm, b, ctx, drafting))
        tpot = step / per_step
        out_tps = b * per_step / step
        ttft = first_token_s(sm, isl, b - 1.0, ctx)
    else:
        running = float(running_batch(sm, isl, osl, per_step))
        if concurrency is not None:
            if concurrency < 1:
                raise ClusterfitError(f"--concurrency must be >= 1, got {concurrency}")
            b = float(min(concurrency, running))
        else:
            b = running
        ctx = isl + osl / 2
        cyc = float(cycle_s(sm, b, isl, osl))
        step = float(sm.decode_step_s(b, ctx))
        if drafting is not None:  # osl / tokens_per_step speculative steps in place of osl decode steps
            spec = float(speculative_step_s(sm, b, ctx, drafting))
            cyc += osl / per_step * spec - osl * step
            step = spec
        tpot = cyc / osl
        out_tps = b * osl / cyc
        ttft = first_token_s(sm, isl, b - 1.0, ctx)
    if b > 1 and schedules_ahead(sm):  # async scheduling: the step already chosen runs first (engines.schedules_ahead)
        ttft += float(sm.decode_step_s(b - 1.0, ctx) if drafting is None
                      else speculative_step_s(sm, b - 1.0, ctx, drafting))
    ttft += front_end_s(sm)  # the request's way through the engine's front end (Engine.request_latency_s)
    bd = decode_breakdown(sm, b, ctx, drafting)
    return {
        "ttft_s": ttft,
        "tpot_s": tpot,
        "output_tokens_per_s": out_tps,
        "output_tokens_per_s_per_gpu": out_tps / sm.gpus,
        "tokens_per_s_per_user": 1.0 / tpot,
        "batch": b,
        "kv_limited_batch": cap,
        "decode_step_s": step,
        "speculative": None if drafting is None else drafting.as_dict(),
        "prefill_s": float(sm.prefill_s(isl)),
        "gpus": sm.gpus,
        # whole token slots per attention-DP rank, as fit counts them (memory.fit's max_kv_tokens)
        "kv_capacity_tokens": float(math.floor(sm.kv_capacity_tokens / max(sm.dp, 1) + 1e-9) * max(sm.dp, 1)),
        "weight_bytes_per_gpu": float(sm.weight_bytes_per_gpu),
        "breakdown": bd,
    }
