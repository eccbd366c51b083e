"""One engine iteration on a parallel layout: compile once, evaluate numpy arrays of batch shapes.

    iteration_s = sum over ops of max(flops / (peak * compute_eff), bytes / (bw * mem_eff))
                  + communication (not overlapped with compute; the engines we model serialise TP
                    all-reduces and EP all-to-alls with the layer they belong to)
                  + n_kernels * (graph_kernel_overhead_s if the step replays a CUDA graph else kernel_overhead_s)
                  + host, host = step_overhead_s + seq_overhead_s * running sequences / dp   (engine constants;
                    each attention-DP rank's host schedules its own sequences)
                    + attention_dp_seq_overhead_s * running sequences if dp > 1 (the replica-wide part)
                    (with async scheduling / an overlap scheduler only max(host - the GPU time above, 0) is exposed)
                  + n_kernels * eager_launch_s          (only without CUDA graphs: Engine.cuda_graphs False,
                                                          vLLM --enforce-eager; each kernel's CPU launch, in series)

``compile_step`` walks the layers once, deduplicates identical layers and keeps per-step coefficients
(GEMM shapes and their counts, attention bytes/FLOPs per attended token, MoE shapes, element-wise bytes
per token, message sizes) in named frozen dataclasses (``GemmGroup``, ``AttentionGroup``, ``LinearAttention``,
``MoEGroup``, ``CommPlan``); ``StepModel.step_s`` then costs whole numpy arrays of step shapes without a
Python loop over layers.

Pipeline parallelism: the batch is split into ``microbatches`` (default pp) that flow through the pp
stages. One iteration (every sequence advances once) then costs the whole model evaluated on a
microbatch of batch/microbatches, times max(microbatches, pp)/pp, plus the stage-to-stage sends; with
one microbatch (a single prefill) the stages run one after another.

KV admission (``StepModel.kv_admitted_sequences``) is the one rule perf, the planner and the simulator share:
each request reserves the KV of ``kv_reserved_context(prompt, output)`` tokens (the engine's ``kv_reservation``:
'full' = prompt + output, TensorRT-LLM's GUARANTEED_NO_EVICT; 'average' = prompt + output / 2, vLLM / SGLang
paged allocation on average) in the pool of one attention-DP rank, each rank a pool of ``kv_rank_budget_bytes``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from ..arch import FFN, Attention, ModelArch, model_memo
from ..engines import Engine
from ..hardware import Gpu, System
from ..layout import Layout
from ..memory import (draft_kv_bytes_per_token_per_gpu, drafter_weight_bytes_per_gpu, fit,
                      kv_bytes_per_token_per_gpu, recurrent_state_bytes_per_sequence, stage_layers,
                      weight_bytes_per_gpu)
from ..precision import Precision, WeightFormat
from . import comm, ops
from .kernels import GemmCurve, KernelCurves, gemm_time_s, load_curves

#: A number or a numpy array of numbers (every step-time method broadcasts).
Num = Union[float, npt.NDArray[np.float64]]
ArrayLike = npt.ArrayLike


def effective_compute_dtype(gpu: Gpu, dtype: str) -> str:
    """The tensor-core math a GEMM with ``dtype`` weights really runs in on ``gpu``.

    Only GPUs with fp4 tensor cores (Blackwell: a ``fp4`` entry in the catalog's dense peaks) run mxfp4 /
    nvfp4 weights in fp4 math. Hopper, Ada and Ampere have none: the engines dequantise fp4 weights in the
    GEMM's main loop and multiply in bf16 (W4A16: the Marlin / Machete / triton mxfp4 kernels), so both the
    peak FLOP/s and the efficiency curve are bf16's, while the bytes read stay 4-bit. (hardware.Gpu.peak_flops
    would fall back fp4 -> fp8, which no shipped fp4 kernel does on those GPUs.)
    """
    if dtype == "fp4" and not gpu.dense_flops.get("fp4"):
        return "bf16"
    return dtype


#: Highest fraction of the bf16 dense peak a weight-only MoE GEMM (W4A16: 4-bit weights, bf16 math) reaches on
#: Hopper and AMD GPUs (no fp4 tensor cores; compute capability 9.0 or not NVIDIA). The 4-bit weights are unpacked
#: and scaled on the CUDA cores in the GEMM main loop of the Triton matmul_ogs mxfp4 kernel (vLLM's backend on
#: compute capability 9.0, vllm/model_executor/layers/quantization/mxfp4.py get_mxfp4_backend; TensorRT-LLM moe
#: backend TRITON = W4A16_MXFP4), so at large M the kernel is bound by that dequantisation, not by the tensor cores:
#: triton-lang/triton PR #11361 reports the native Hopper mxfp4 x bf16 matmul losing to "weight cast + dense bf16
#: matmul" at large M. 0.20 (~200 dense TFLOP/s on H100/H200) is scanned, not a measured kernel figure:
#: benchmarks/scan_w4a16.py over the gpt-oss rows of these GPUs (TensorRT-LLM and vLLM, both development CSVs),
#: leaving each source page out in turn (results/scan-w4a16.json: both folds pick 0.20, held out 10.5% / +1.9% /
#: 29.1% over 86 rows); vLLM's constants were fitted with it.
WEIGHT_ONLY_MAX_EFF = 0.20

#: The same ceiling for vLLM's Marlin MoE kernel, which runs weight-only experts where the GPU lacks the tensor
#: cores of their format: mxfp4 below compute capability 9.0 (get_mxfp4_backend: ``get_device_capability()[0] < 9``
#: -> Marlin; A100, L40S), fp8 on GPUs without fp8 tensor cores (W8A16: quantization/fp8.py, "For GPUs that lack
#: FP8 hardware support, we can leverage the Marlin kernel for fast weight-only FP8 quantization", use_marlin = not
#: has_device_capability(89); A100), int4 GPTQ / AWQ everywhere. Marlin orders its dequantisation and
#: tensor-core instructions so that both pipelines stay busy (IST-DASLab/marlin README, "Techniques"), so its large-M
#: ceiling sits higher than the Triton kernel's: 0.30 of the dense bf16 peak (~94 TFLOP/s on an A100), scanned on the
#: A100 gpt-oss pages (benchmarks/scan_w4a16.py, results/scan-w4a16.json: 162 rows, 27 runs; in-sample 12.1% / -3.4%
#: / 42.8% at 0.30 against 21.1% / +4.5% / 62.7% at 0.20; leaving each page out, the other picks 0.30 / 0.25, held
#: out 16.0% / -1.8% / 42.1%). Under the 0.20 Triton ceiling vLLM's gpt-oss-20b on one A100 ran its prefill-heavy
#: rows up to 2x faster than predicted. The same rows fit vLLM's sink scale (engines.py, sink_attention_prefill_scale,
#: 0.4 for their attention); rescanned with it (results/scan-w4a16-sink-scale.json) 0.30 stays: in-sample 13.9% /
#: -0.2% / 34.7% (0.25: 13.2% / +4.5% / 48.0%, 0.35: 14.3% / -1.4% / 28.4%), each page left out picks 0.35 / 0.25
#: on the other (held out 16.4% / +1.2% / 41.5%).
WEIGHT_ONLY_MARLIN_MAX_EFF = 0.30

#: Rows of fill cost of a weight-only grouped GEMM (the ``m0`` of its efficiency eff_max / (1 + m0 / m)), in place
#: of the shipped fit's fp8 grouped-GEMM m0 (~185 rows per expert, measured on H200: catalog/kernels/h200-fit.json).
#: These kernels (Marlin MoE, Triton matmul_ogs mxfp4) tile M in 16-row steps of the mma.m16n8k16 instruction, and
#: the Marlin paper (Frantar et al. 2024, arXiv:2408.11743, abstract) measures them staying weight-streaming bound,
#: with close to the ideal 4x speedup over fp16, up to batch 16-32. With m0 = 16, eff_max from the shipped fit and
#: the Marlin cap (engine scales 1), the compute term of an A100 mxfp4 expert crosses its 4.25-bit weight streaming
#: at 21 rows (312 dense bf16 TFLOP/s, 2.039 TB/s x the MoE fit's 0.591; 14 rows under the 0.20 Triton cap, which A100
#: had before WEIGHT_ONLY_MARLIN_MAX_EFF); the fp8 m0 put the compute floor at 3.8x the weight-read time at any batch
#: (gpt-oss-120b on A100: decode at concurrency 4 predicted 30.7 ms per step against 11.7 ms measured, OSS2-1076).
WEIGHT_ONLY_M0 = 16.0


def weight_only_cap(gpu: Gpu, fmt: WeightFormat) -> float:
    """Cap on the compute efficiency of a MoE GEMM whose weights are dequantised in its main loop (weight-only:
    4-bit weights on a GPU without fp4 tensor cores, fp8 weights on one without fp8 tensor cores); inf otherwise.

    A cap, not a factor: at small M per expert the grouped GEMM is already far below it (tile fill, weight
    streaming), which is where the dequantisation hides behind the memory reads."""
    four_bit = fmt.bytes_per_param < 1.0 and effective_compute_dtype(gpu, fmt.compute_dtype) == "bf16"
    w8a16 = fmt.compute_dtype == "fp8" and not gpu.dense_flops.get("fp8")
    if four_bit or w8a16:
        return WEIGHT_ONLY_MARLIN_MAX_EFF if weight_only_kernel(gpu, fmt) == "marlin" else WEIGHT_ONLY_MAX_EFF
    return float("inf")


def weight_only_kernel(gpu: Gpu, fmt: WeightFormat) -> str:
    """The weight-only MoE kernel family the engines run: 'marlin' or 'triton' (matmul_ogs).

    mxfp4 experts follow vLLM's get_mxfp4_backend: Marlin on NVIDIA GPUs below compute capability 9.0, Triton on
    Hopper and ROCm (and on GPUs with no stated compute capability). int4 experts (GPTQ / AWQ / compressed-tensors
    W4A16) and fp8 experts on GPUs without fp8 tensor cores run vLLM's Marlin MoE on NVIDIA GPUs."""
    if gpu.vendor != "nvidia":
        return "triton"
    if fmt.name.startswith("int4") or fmt.compute_dtype == "fp8":
        return "marlin"
    cc = gpu.compute_capability
    return "marlin" if cc is not None and cc < 9.0 else "triton"


# ------------------------------------------------------------------------------------------ coefficients
@dataclass(frozen=True)
class GemmGroup:
    """Identical GEMMs of one step on one GPU: y[M, n] = x[M, k] @ W[n, k]^T, ``count`` of them.

    rows: 'tokens' (M = tokens on the attention rank) or 'logits' (M = sequences sampling this step).
    """

    name: str
    n: int
    k: int
    count: float
    rows: str
    w_bytes_per_elem: float
    peak_flops: float
    curve: GemmCurve


#: AttentionGroup.key(): (kv_window, compress, topk, decode_flops, decode_bytes, prefill_flops, index_flops,
#: index_bytes, prefill_window, chunked, sinks).
AttentionKey = tuple[int, int, int, float, float, float, float, float, int, bool, bool]


@dataclass(frozen=True)
class AttentionGroup:
    """Softmax-attention layers with identical per-key costs (``count`` layers of the whole model).

    kv_window: tokens of KV a layer keeps and a decode query reads (0: the whole context).
    prefill_window / chunked: the keys a prefill token attends (they differ from kv_window where the engine
    applies a chunk mask to context tokens only, ``Engine.chunked_attention_context_only``).
    compress: KV entries per token (DeepSeek-V4 compressed attention keeps one per ``compress`` tokens).
    topk: DSA top-k keys per query (0: all).
    decode_flops / decode_bytes: per attended key of one decoding query, on one TP rank.
    prefill_flops: per (query, key) pair of causal prefill.
    index_flops / index_bytes: DSA indexer per scored key (0 when the layer reuses another layer's top-k).
    sinks: the layers' softmax has attention sinks (their prefill runs at StepModel.sink_prefill_scale).
    """

    count: float
    kv_window: int
    compress: int
    topk: int
    decode_flops: float
    decode_bytes: float
    prefill_flops: float
    index_flops: float
    index_bytes: float
    prefill_window: int
    chunked: bool
    sinks: bool = False

    def key(self) -> AttentionKey:
        """Everything but ``count``: layers with the same key are one group."""
        return (self.kv_window, self.compress, self.topk, self.decode_flops, self.decode_bytes, self.prefill_flops,
                self.index_flops, self.index_bytes, self.prefill_window, self.chunked, self.sinks)


@dataclass(frozen=True)
class LinearAttention:
    """Linear-attention layers summed over the model: FLOPs per token and state bytes per decode sequence (read and
    written), those of delta-rule layers (Gated DeltaNet, KDA) apart: their decode kernel streams the state at
    DELTA_RULE_STATE_MEM_EFF of the datasheet bandwidth."""

    flops_per_token: float = 0.0
    state_bytes_per_seq: float = 0.0
    delta_state_bytes_per_seq: float = 0.0


#: Fraction of the datasheet HBM bandwidth at which a delta-rule decode step (vLLM / SGLang's Triton
#: fused_recurrent_gated_delta_rule_fwd: read each sequence's recurrent state, update it, write it back) moves its
#: state. vllm-project/vllm PR #31722 (merged 2026-01) times the kernel on one H200 at Qwen3-Next shapes (16 value heads
#: of 128 x 128 per rank at TP2, bf16 state): 420.2 us at batch 1,024 and 212.7 us at batch 512, i.e. 2 x 1,024 x 16 x
#: 128 x 128 x 2 B / 420.2 us = 2.56 TB/s = 0.53 of the datasheet 4.8 TB/s (decimal TB; 0.53 at 512, 0.52 at TP4,
#: 8 heads). Before that PR the same kernel ran at 0.33. Softmax attention's decode kernels stream at the measured
#: attn_decode_mem_eff (~0.99 on the H200).
DELTA_RULE_STATE_MEM_EFF = 0.53
#: Linear-attention kinds (attention.Attention.linear_kind) whose decode runs that delta-rule kernel.
DELTA_RULE_KINDS = ("gated_deltanet", "kda")


@dataclass(frozen=True)
class MoEGroup:
    """Identical routed-expert layers (``count`` of them) on one GPU of a layout.

    ep / moe_tp: expert-parallel ranks and the split of each expert; w_bytes_per_elem, peak_flops and
    compute_dtype: the experts' format; eff_cap: the weight-only cap on the compute efficiency (weight_only_cap); m0:
    the rows of fill cost of the grouped GEMM (the kernel fit's moe m0, WEIGHT_ONLY_M0 for weight-only kernels).
    """

    count: float
    ffn: FFN
    hidden: int
    ep: int
    moe_tp: int
    w_bytes_per_elem: float
    peak_flops: float
    compute_dtype: str
    eff_cap: float
    m0: float


@dataclass(frozen=True)
class CommPlan:
    """The collectives of one step on one GPU.

    allreduce_per_step: TP all-reduces (after attention, dense MLPs and MoE layers without attention DP);
    moe_per_step: MoE layers under attention DP + EP, each with the engine's ``moe_dp_comm`` collectives over
    ``moe_ranks`` ranks (all_to_all: ``moe_fanout`` top-k copies of each token, ``dispatch_bytes`` per
    element out and 2 back; allgather_reducescatter: every rank's tokens gathered at ``gather_bytes`` per
    element and reduce-scattered in bf16).
    """

    allreduce_per_step: float
    tp_link: comm.Link
    pp_link: comm.Link
    ep_link: comm.Link
    moe_per_step: float
    moe_ranks: int
    moe_fanout: int
    moe_dp_comm: str
    dispatch_bytes: float
    gather_bytes: float
    system: System


@dataclass(frozen=True)
class TrtllmBenchEstimate:
    """trtllm-bench's own KV estimate (tensorrt_llm/bench/build/tuning.py calc_engine_setting), in GiB: the cache
    memory of the whole world and its bytes per token (``Engine.batch_cap_rule`` 'trtllm_bench')."""

    cache_gib: float
    gib_per_token: float


# ------------------------------------------------------------------------------------------ breakdown
@dataclass(frozen=True)
class StepBreakdown:
    """Seconds of one step: in all, per op and per kind (compute_s / memory_s / communication_s / overhead_s).

    ``as_dict()`` is the JSON shape `clusterfit perf --json` prints: {"step_s", "by_op_s", "by_kind_s"}.
    """

    step_s: float
    by_op_s: dict[str, float]
    by_kind_s: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "by_op_s": dict(self.by_op_s), "by_kind_s": dict(self.by_kind_s)}


class _Parts:
    """Accumulates per-op and per-kind times while a step is costed (only when a breakdown is asked for)."""

    def __init__(self) -> None:
        self.ops: dict[str, Num] = {}
        self.kinds: dict[str, Num] = {}

    def add(self, op: str, kind: str, t: Num) -> None:
        self.ops[op] = self.ops.get(op, 0.0) + t
        self.kinds[kind] = self.kinds.get(kind, 0.0) + t


# ------------------------------------------------------------------------------------------ the model
#: Largest step-shape array StepModel._gemms_s costs with all GEMM groups in one set of numpy operations; bigger
#: arrays (the simulator's step tables) go group by group, whose temporaries stay in cache (measured on one core:
#: 512 points 75 us vectorised against 192 us per group, 2,048 points 497 us against 289 us).
_GEMM_TABLE_MAX_POINTS = 1024


@dataclass(frozen=True)
class StepModel:
    """Compiled per-step coefficients of (model, system, layout, precision, engine), complete when constructed.

    All ``*_s`` methods broadcast over numpy arrays. Token counts are for the whole replica.
    kv_capacity_tokens: replica-wide KV token slots (per-GPU budget / per-GPU bytes per token x dp).
    max_num_seqs: the engine's cap on running sequences for the replica (per attention-DP rank x dp).
    sink_prefill_scale: multiplier on the prefill-attention efficiency of the attention groups with sinks
    (Engine.sink_prefill_scale on this GPU).
    verify_tokens: speculative decoding (``with_verify``): draft tokens each decoding sequence verifies in every step,
    0 without.
    """

    name: str
    gpus: int
    tp: int
    pp: int
    ep: int
    dp: int
    engine: Engine
    bw_bytes_per_s: float
    kv_capacity_tokens: float
    max_num_seqs: int
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    curves: KernelCurves = field(repr=False)
    gemms: tuple[GemmGroup, ...] = field(default=(), repr=False)
    attention: tuple[AttentionGroup, ...] = field(default=(), repr=False)
    linear: LinearAttention = field(default=LinearAttention(), repr=False)
    moe: tuple[MoEGroup, ...] = field(default=(), repr=False)
    comm_plan: CommPlan | None = field(default=None, repr=False)
    elementwise_bytes_per_token: float = 0.0
    sampling_bytes_per_seq: float = 0.0
    n_kernels: float = 0.0
    attn_peak_flops: float = 0.0
    kv_layer_counts: tuple[float, ...] = ()  # per ``attention`` group, its layers on the binding stage's GPUs
    hidden: int = 0
    kv_state_bytes_per_seq: float = 0.0
    sink_prefill_scale: float = 1.0
    bench: TrtllmBenchEstimate | None = None
    verify_tokens: float = 0.0

    def with_verify(self, draft_tokens: float) -> StepModel:
        """This step model under speculative decoding: in every step, each decoding sequence also verifies
        ``draft_tokens`` draft tokens in the same forward pass (the target model's verify pass).

        The verify tokens go through the GEMMs and the experts as tokens and are sampled (k + 1 logits rows per
        sequence); their attention reads the sequence's KV cache once for its k + 1 queries, as a decode query does
        (SGLang's TARGET_VERIFY and vLLM's uniform-decode batches run the decode-shaped attention kernels on
        query length k + 1), so it costs the decode attention's bytes and k + 1 times its FLOPs. A step of verify
        passes alone replays a CUDA graph as a decode step does: SGLang captures its decode graphs in
        ForwardMode.TARGET_VERIFY with speculative_num_draft_tokens tokens per sequence
        (python/sglang/srt/model_executor/cuda_graph_runner.py, CudaGraphRunner.__init__: capture_forward_mode,
        num_tokens_per_bs), vLLM dispatches a batch whose every request has query length 1 + num_speculative_tokens
        to its full decode graphs (vllm/v1/cudagraph_dispatcher.py, uniform_decode_query_len) and TensorRT-LLM pads
        each request of a decode graph to max_draft_len + 1 tokens (tensorrt_llm/_torch/pyexecutor/
        cuda_graph_runner.py, DecodingCUDAGraphRunner); see _graph_replayed for the capture limit."""
        return replace(self, verify_tokens=float(draft_tokens))

    # ------------------------------------------------------------------------------------- evaluation
    @cached_property
    def _gemm_table(self) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
        """The GEMM groups as columns for _gemms_s's vectorised path: (rows are 'tokens', coefficients [10, G]:
        n, k, count, weight bytes, peak FLOP/s, streaming bandwidth, eff_max, m0, n0 / n, k0 / k), in ``gemms`` order.
        The M-independent terms are the Python expressions gemm_time_s / GemmCurve.compute_eff evaluate."""
        gs, bw = self.gemms, self.bw_bytes_per_s
        coef = np.array([[g.n, g.k, g.count, g.n * g.k * g.w_bytes_per_elem, g.peak_flops, bw * g.curve.mem_eff,
                          g.curve.eff_max, g.curve.m0, g.curve.n0 / g.n, g.curve.k0 / g.k] for g in gs],
                        dtype=float).reshape(len(gs), 10).T
        return np.array([g.rows == "tokens" for g in gs], dtype=bool), coef

    def _gemms_s(self, total: Num, m: Num, m_logits: Num, parts: _Parts | None) -> Num:
        """Add the dense GEMMs of one microbatch (``m`` tokens, ``m_logits`` sampled rows per attention rank)."""
        m_a, ml_a = np.asarray(m, dtype=float), np.asarray(m_logits, dtype=float)
        shape = np.broadcast_shapes(m_a.shape, ml_a.shape)
        if parts is None and self.gemms and math.prod(shape) <= _GEMM_TABLE_MAX_POINTS:
            # every group at once: the same IEEE operations, element by element and in the same order, as
            # gemm_time_s(..., with_t0=False) per group below, then added to ``total`` group by group in ``gemms``
            # order (bit-identical to the loop)
            tok, coef = self._gemm_table
            mg = np.empty((tok.size,) + shape)
            mg[tok] = m_a
            mg[~tok] = ml_a
            n, k, count, w_bytes, peak, bw, eff_max, m0, n0_n, k0_k = coef.reshape((10, tok.size) + (1,) * len(shape))
            flops = 2.0 * mg * n * k
            nbytes = w_bytes + mg * k * 2.0 + mg * n * 2.0
            eff = eff_max / (1.0 + m0 / np.maximum(mg, 1.0) + n0_n + k0_k)
            tg = np.where(mg > 0, count * (np.maximum(nbytes / bw, flops / (peak * eff)) + 0.0), 0.0)
            for row in tg:
                total = total + row
            return total
        for g in self.gemms:
            mm = m if g.rows == "tokens" else m_logits
            t = g.count * gemm_time_s(g.curve, mm, g.n, g.k, g.w_bytes_per_elem, 2.0, g.peak_flops,
                                      self.bw_bytes_per_s, with_t0=False)
            t = np.where(mm > 0, t, 0.0)
            total = total + t
            if parts is not None:
                is_mem = (g.n * g.k * g.w_bytes_per_elem / (self.bw_bytes_per_s * g.curve.mem_eff)
                          >= 2.0 * mm * g.n * g.k / (g.peak_flops * g.curve.compute_eff(mm, g.n, g.k)))
                parts.add(g.name, "memory_s" if np.all(is_mem) else "compute_s", t)
        return total

    def _attention_s(self, total: Num, prefill_tokens: Num, prefill_attended: Num, decode_seqs: Num,
                     decode_attended: Num, m: Num, parts: _Parts | None) -> Num:
        """Add softmax attention, the DSA indexer and linear attention (replica-wide counts of one microbatch)."""
        c, eng, dp = self.curves, self.engine, self.dp
        # streaming reads of per-sequence state; the paged KV cache (attention, DSA indexer keys) at attention_scale
        bw_state = self.bw_bytes_per_s * c.attn_decode_mem_eff * eng.memory_scale
        bw_attn = bw_state * eng.attention_scale
        d = decode_seqs / dp
        avg_ctx = np.where(decode_seqs > 0, decode_attended / np.maximum(decode_seqs, 1e-9), 0.0)
        p = prefill_tokens / dp
        q = 1.0 + self.verify_tokens  # queries per decoding sequence (with_verify): one KV read, q x the FLOPs
        avg_pre = np.where(prefill_tokens > 0, prefill_attended / np.maximum(prefill_tokens, 1e-9), 0.0)
        pre_eff = c.attn_prefill_eff_max * eng.compute_scale / (1.0 + c.attn_prefill_w0 / np.maximum(p, 1.0))
        dec_peak = self.attn_peak_flops * c.attn_prefill_eff_max * eng.compute_scale
        for a in self.attention:
            att_ctx = avg_ctx
            att_pre = avg_pre
            if a.kv_window:
                att_ctx = np.minimum(att_ctx, a.kv_window)
            if a.prefill_window:
                # min(mean, window) over-counts once the prompt outgrows the window (exact mean: w - w^2/2S for a
                # sliding window over a prompt of S, ~w/2 for chunked attention); the exact count was tried and
                # predicted the long-prompt rows worse (TensorRT-LLM v0.20 ran Llama-4's chunked layers as full
                # attention), so the upper bound stays.
                att_pre = np.minimum(att_pre, a.prefill_window)
            if a.compress > 1:
                att_ctx = att_ctx / a.compress
                att_pre = att_pre / a.compress
            full_ctx = att_ctx
            if a.topk:
                att_ctx = np.minimum(att_ctx, a.topk)
                att_pre = np.minimum(att_pre, a.topk)
            keys = d * att_ctx
            t_dec = np.maximum(a.count * a.decode_bytes * keys / bw_attn,
                               a.count * a.decode_flops * keys * q / dec_peak)
            eff = pre_eff * self.sink_prefill_scale if a.sinks else pre_eff
            t_pre = a.count * a.prefill_flops * p * att_pre / (self.attn_peak_flops * eff)
            total = total + t_dec
            total = total + t_pre
            if parts is not None:
                parts.add("attention_decode", "memory_s", t_dec)
                parts.add("attention_prefill", "compute_s", t_pre)
            if a.index_flops:
                # decode queries score every cached index key of their own sequence (a batched GEMV: read
                # the fp8 keys once); prefill tokens score their causal prefix at the prefill efficiency.
                t_idx = np.maximum(a.count * a.index_bytes * d * full_ctx / bw_attn,
                                   a.count * a.index_flops * d * full_ctx * q / dec_peak)
                t_idx = t_idx + a.count * a.index_flops * p * avg_pre / (self.attn_peak_flops * pre_eff)
                total = total + t_idx
                if parts is not None:
                    parts.add("dsa_indexer", "compute_s", t_idx)
        lin = self.linear
        lf, lb, ldb = lin.flops_per_token, lin.state_bytes_per_seq, lin.delta_state_bytes_per_seq
        if lf or lb or ldb:
            bw_delta = self.bw_bytes_per_s * DELTA_RULE_STATE_MEM_EFF * eng.memory_scale
            t_lin = np.maximum(lb * d / bw_state + ldb * d / bw_delta, lf * m / (self.attn_peak_flops * 0.3))
            total = total + t_lin
            if parts is not None:
                parts.add("linear_attention", "memory_s", t_lin)
        return total

    def _moe_s(self, total: Num, tokens: Num, busy: npt.NDArray[np.bool_] | bool, parts: _Parts | None) -> Num:
        """Add the routed experts: all tokens of the stage spread over the ep ranks, waiting for the busiest
        (``busy``: tokens > 0, where the experts run)."""
        c, eng = self.curves, self.engine
        for g in self.moe:
            flops, wbytes, abytes, pairs, active = ops.moe_flops_bytes(g.ffn, g.hidden, g.ep, g.moe_tp, tokens,
                                                                       g.w_bytes_per_elem)
            imb = ops.ep_max_load_factor(pairs, g.ep, eng.expert_load_cv)
            # the busiest rank also reads more expert weights than the mean rank while not every expert is touched
            busiest = ops.ep_busiest_rank_experts(active, g.ffn.num_experts / g.ep, g.ep)
            wbytes = wbytes * busiest / np.maximum(active, 1e-9)
            flops = flops * imb
            abytes = abytes * imb
            pairs = pairs * imb
            per_expert = pairs / np.maximum(busiest, 1e-9)
            width, inter = ops.moe_expert_shape(g.ffn, g.hidden)
            gc = c.gemm_curve(g.compute_dtype)
            # small expert matrices fill fewer tiles: the GEMM fit's n0/k0 terms on the expert's narrower side
            shape_pen = gc.n0 / max(inter / g.moe_tp, 1.0) + gc.k0 / max(width, 1.0)
            eff = c.moe_eff_max * eng.compute_scale / (1.0 + g.m0 / np.maximum(per_expert, 1e-9) + shape_pen)
            if g.compute_dtype == "fp4":
                # fp4 grouped GEMMs ramp with the tokens per expert as the curve does (the same 128-row MMA tiles
                # to fill), on the fp4 peak, but saturate lower: at most the engine's cap times the asymptote
                eff = np.minimum(eff, c.moe_eff_max * eng.compute_scale * eng.moe_fp4_efficiency_cap)
            eff = np.minimum(eff, g.eff_cap)
            t = g.count * np.maximum((wbytes + abytes) / (self.bw_bytes_per_s * c.moe_mem_eff * eng.memory_scale),
                                     flops / (g.peak_flops * eff))
            t = np.where(busy, t, 0.0)
            total = total + t
            if parts is not None:
                parts.add("moe_experts", "memory_s", t)
        return total

    def _comm_s(self, tokens: Num, m: Num) -> Num:
        """Collectives of one microbatch on one GPU (TP all-reduces, the MoE's attention-DP collectives)."""
        cm = self.comm_plan
        assert cm is not None
        act = m * self.hidden * 2.0
        t_comm = cm.allreduce_per_step * comm.all_reduce_s(act, self.tp, cm.tp_link)
        if not cm.moe_per_step:
            return t_comm
        if cm.moe_dp_comm == "allgather_reducescatter":
            # every rank all-gathers all ranks' tokens (quantised first for fp4 / fp8 experts) before the MoE and
            # reduce-scatters the bf16 partial outputs after it, so each rank moves the whole replica's
            # tokens x hidden, whatever top_k is (not only its top-k copies).
            gathered = tokens * self.hidden
            return t_comm + cm.moe_per_step * (
                comm.all_gather_s(gathered * cm.gather_bytes, cm.moe_ranks, cm.ep_link)
                + comm.reduce_scatter_s(gathered * 2.0, cm.moe_ranks, cm.ep_link))
        tok_per_gpu = m / self.tp
        sent = tok_per_gpu * cm.moe_fanout * self.hidden * (cm.dispatch_bytes + 2.0)
        return t_comm + cm.moe_per_step * comm.all_to_all_s(sent, cm.moe_ranks, cm.system)

    def _stage(self, tokens: Num, logits_rows: Num, prefill_tokens: Num, prefill_attended: Num, decode_seqs: Num,
               decode_attended: Num, parts: _Parts | None = None) -> Num:
        """Time of all layers (tp-sharded) on one GPU for these replica-wide counts (one microbatch)."""
        m = tokens / self.dp                       # tokens on one attention rank
        m_logits = logits_rows / self.dp
        busy = tokens > 0                          # a step with no token costs nothing on the GPU
        total: Num = self._gemms_s(0.0, m, m_logits, parts)
        total = self._attention_s(total, prefill_tokens, prefill_attended, decode_seqs, decode_attended, m, parts)
        total = self._moe_s(total, tokens, busy, parts)
        bw_copy = self.bw_bytes_per_s * self.curves.copy_mem_eff * self.engine.memory_scale
        t_elem = self.elementwise_bytes_per_token * m / bw_copy
        t_samp = self.sampling_bytes_per_seq * m_logits / bw_copy
        t_comm = np.where(busy, self._comm_s(tokens, m), 0.0)
        # inside a replayed CUDA graph (decode-only steps up to the engine's capture size) a kernel costs its
        # launch gap inside the graph; other steps (prefill / mixed chunks, batches past the capture size) pay
        # the engine's per-kernel cost of piecewise / eager execution (Engine.graph_kernel_overhead_s)
        per_kernel = np.where(self._graph_replayed(prefill_tokens, decode_seqs), self.engine.graph_kernel_s,
                              self.engine.kernel_overhead_s)
        t_kern = np.where(busy, self.n_kernels * per_kernel, 0.0)
        total = total + t_elem
        total = total + t_samp
        total = total + t_comm
        total = total + t_kern
        if parts is not None:
            parts.add("elementwise", "memory_s", t_elem)
            parts.add("sampling", "memory_s", t_samp)
            parts.add("communication", "communication_s", t_comm)
            parts.add("kernel_overhead", "overhead_s", t_kern)
        if not self.engine.cuda_graphs:
            # eager mode (vLLM --enforce-eager): the CPU launches every kernel of the step one by one; when the
            # kernels are shorter than their launches (decode) the GPU waits, so each launch adds in series
            t_launch = np.where(busy, self.n_kernels * self.engine.eager_launch_s, 0.0)
            total = total + t_launch
            if parts is not None:
                parts.add("kernel_launch_eager", "overhead_s", t_launch)
        return total

    def _graph_replayed(self, prefill_tokens: Num, decode_seqs: Num) -> npt.NDArray[np.bool_]:
        """Whether a step (one microbatch: replica-wide prefill tokens and decode sequences) replays a captured
        CUDA graph: decode only (verify passes included, with_verify), at most ``Engine.cuda_graph_max_bs`` per
        attention rank, graphs on. The limit counts sequences, or tokens (k + 1 per verifying sequence) where the
        engine's capture sizes do (``Engine.cuda_graph_counts_tokens``: vLLM)."""
        if not self.engine.cuda_graphs:
            return np.zeros(np.broadcast_shapes(np.shape(prefill_tokens), np.shape(decode_seqs)), dtype=bool)
        d = np.asarray(decode_seqs, dtype=float) / self.dp
        if self.engine.cuda_graph_counts_tokens:
            d = d * (1.0 + self.verify_tokens)
        return (np.asarray(prefill_tokens, dtype=float) <= 0) & (d <= self.engine.cuda_graph_max_bs)

    def _step(self, prefill_tokens: ArrayLike, prefill_attended: ArrayLike, decode_seqs: ArrayLike,
              decode_attended: ArrayLike, microbatches: int | None, parts: _Parts | None, host: bool = True) -> Num:
        P = np.asarray(prefill_tokens, dtype=float)
        Ap = np.asarray(prefill_attended, dtype=float)
        D = np.asarray(decode_seqs, dtype=float)
        Ad = np.asarray(decode_attended, dtype=float)
        mb = self.pp if microbatches is None else max(1, int(microbatches))
        running = _running_sequences(P, D)
        drafts = self.verify_tokens   # each decoding sequence's verify tokens (with_verify): tokens, sampled rows
        tokens, logits = (P + D, running) if not drafts else (P + D * (1.0 + drafts), running + D * drafts)
        if mb == 1:   # the counts as they are (x / 1 is x)
            t = self._stage(tokens, logits, P, Ap, D, Ad, parts)
        else:
            tokens, logits = tokens / mb, logits / mb
            t = self._stage(tokens, logits, P / mb, Ap / mb, D / mb, Ad / mb, parts)
        factor = max(mb, self.pp) / self.pp
        if factor != 1.0:
            t = t * factor
        if self.pp > 1:
            assert self.comm_plan is not None
            send = comm.send_recv_s(tokens * self.hidden * 2.0, self.comm_plan.pp_link)
            t_pp = (self.pp - 1) * send * factor
            # the sampled tokens' way back to the first stage, one hop per stage boundary (Engine.pp_hop_*), each
            # rank's host handling its own attention-DP rank's share of the micro-batch
            e = self.engine
            t_hop = (self.pp - 1) * (e.pp_hop_overhead_s + e.pp_hop_seq_overhead_s * logits / self.dp)
            t = t + t_pp + t_hop
            if parts is not None:
                parts.add("pipeline_send", "communication_s", t_pp)
                parts.add("pipeline_token_return", "overhead_s", t_hop)
        if not host:
            return t
        host_s = self._host_of(running)
        if self.engine.async_scheduling:
            # the host prepares step n+1 while the GPU runs step n (vLLM async scheduling, SGLang's overlap
            # scheduler, TensorRT-LLM's overlap scheduler): only the host time beyond the GPU's is exposed
            host_s = np.maximum(host_s - t, 0.0)
        t = t + host_s
        if parts is not None:
            parts.ops["engine_step_overhead"] = host_s
            parts.kinds["overhead_s"] = parts.kinds.get("overhead_s", 0.0) + host_s
            for k in list(parts.kinds):
                if k != "overhead_s":
                    parts.kinds[k] = parts.kinds[k] * factor
        return t

    def step_s(self, prefill_tokens: ArrayLike, prefill_attended: ArrayLike, decode_seqs: ArrayLike,
               decode_attended: ArrayLike, microbatches: int | None = None) -> Num:
        """Seconds of one engine iteration of the replica.

        prefill_tokens: new prompt tokens computed this step; prefill_attended: sum over them of keys each
        attends (a chunk of n tokens after c cached: n*c + n*(n+1)/2); decode_seqs: sequences producing one
        token; decode_attended: sum of their context lengths. Broadcasts over numpy arrays.
        """
        return self._step(prefill_tokens, prefill_attended, decode_seqs, decode_attended, microbatches, None)

    def gpu_step_s(self, prefill_tokens: ArrayLike, prefill_attended: ArrayLike, decode_seqs: ArrayLike,
                   decode_attended: ArrayLike) -> Num:
        """step_s without the engine's host time: the GPU's part of the step (the simulator's step tables hold
        this and add ``host_s`` exactly, since under async scheduling a step is max(GPU, host), not a sum)."""
        return self._step(prefill_tokens, prefill_attended, decode_seqs, decode_attended, None, None, host=False)

    @property
    def host_terms(self) -> tuple[float, float, bool]:
        """(seconds per step, seconds per running sequence of the replica, overlapped with the GPU): the law of
        ``host_s`` and of how a step combines it with the GPU time, for callers that cost scalar steps themselves
        (sim.StepTimer). The engine's per-sequence cost is shared by the attention-DP ranks: each rank's host
        schedules its own sequences in parallel with the others (vLLM runs an engine core per DP rank, SGLang a
        scheduler per DP-attention rank, TensorRT-LLM an executor per rank under attention DP; the PP token return
        above counts the same share), so a replica's running sequences cost seq_overhead_s / dp each; under
        attention DP each also costs attention_dp_seq_overhead_s, the replica-wide part (TensorRT-LLM gathers every
        rank's responses to rank 0 each step, Engine.attention_dp_seq_overhead_s)."""
        e = self.engine
        adp = e.attention_dp_seq_overhead_s if self.dp > 1 else 0.0
        return e.step_overhead_s, e.seq_overhead_s / self.dp + adp, e.async_scheduling

    def host_s(self, prefill_tokens: ArrayLike, decode_seqs: ArrayLike) -> Num:
        """Host seconds the engine spends preparing one step: per step, plus host_terms' cost per running sequence of
        the replica (seq_overhead_s / dp, and attention_dp_seq_overhead_s under attention DP; a prefilling request
        counts once). step_s adds it to the GPU time, or takes the larger under ``Engine.async_scheduling``."""
        return self._host_of(_running_sequences(prefill_tokens, decode_seqs))

    def _host_of(self, running: Num) -> Num:
        """host_terms' law for ``running`` sequences of the replica."""
        per_step, per_seq, _ = self.host_terms
        return per_step + per_seq * running

    def decode_step_s(self, batch: ArrayLike, context: ArrayLike) -> Num:
        """One decode iteration of ``batch`` sequences each with ``context`` cached tokens."""
        b = np.asarray(batch, dtype=float)
        return self.step_s(0.0, 0.0, b, b * np.asarray(context, dtype=float))

    def prefill_s(self, tokens: ArrayLike, cached: ArrayLike = 0) -> Num:
        """Prefill of one request of ``tokens`` new tokens after ``cached`` tokens, chunked by the engine's
        max_num_batched_tokens."""
        n = np.asarray(tokens, dtype=float)
        c = np.asarray(cached, dtype=float)
        chunk = float(self.engine.max_num_batched_tokens)
        n_chunks = np.maximum(np.ceil(n / chunk), 1.0)
        per = n / n_chunks
        # chunk i attends c + i*per cached tokens; sum over chunks of per*(c + i*per) + per*(per+1)/2
        attended = n * c + per * per * n_chunks * (n_chunks - 1) / 2.0 + n_chunks * per * (per + 1) / 2.0
        return n_chunks * self.step_s(per, attended / n_chunks, 0.0, 0.0, microbatches=1)

    def step_breakdown(self, prefill_tokens: ArrayLike, prefill_attended: ArrayLike, decode_seqs: ArrayLike,
                       decode_attended: ArrayLike) -> StepBreakdown:
        """Seconds per op and per kind of one step (means over the arrays given)."""
        parts = _Parts()
        total = self._step(prefill_tokens, prefill_attended, decode_seqs, decode_attended, None, parts)
        return StepBreakdown(float(np.asarray(total).mean()),
                             {k: float(np.asarray(v).mean()) for k, v in parts.ops.items()},
                             {k: float(np.asarray(v).mean()) for k, v in parts.kinds.items()})

    def breakdown(self, prefill_tokens: ArrayLike, prefill_attended: ArrayLike, decode_seqs: ArrayLike,
                  decode_attended: ArrayLike) -> dict[str, Any]:
        """``step_breakdown(...).as_dict()``: {"step_s", "by_op_s", "by_kind_s"} (the `perf --json` shape)."""
        return self.step_breakdown(prefill_tokens, prefill_attended, decode_seqs, decode_attended).as_dict()

    # ------------------------------------------------------------------------------------- KV cache
    def kv_bytes_per_sequence(self, context: ArrayLike) -> Num:
        """KV bytes one sequence of ``context`` tokens holds on one GPU (windows, compression, state): the layers
        of the pipeline stage that binds the cache (``attention`` counts the whole model's layers,
        ``kv_layer_counts`` that stage's; empty: no pipeline, the whole model's)."""
        ctx = np.asarray(context, dtype=float)
        total: Num = 0.0
        counts = self.kv_layer_counts or tuple(a.count for a in self.attention)
        for a, n in zip(self.attention, counts, strict=True):
            c = np.minimum(ctx, a.kv_window) if a.kv_window else ctx
            total = total + n * (a.decode_bytes * c / max(a.compress, 1) + a.index_bytes * c / max(a.compress, 1))
        return self.kv_state_bytes_per_seq + total

    @property
    def batched_tokens(self) -> float:
        """Tokens one engine step of the replica holds: the engine's max_num_batched_tokens on each attention-DP
        rank (each rank schedules its own requests)."""
        return float(self.engine.max_num_batched_tokens) * self.dp

    @property
    def kv_rank_budget_bytes(self) -> float:
        """KV bytes of one attention-DP rank's pool (each rank keeps its own sequences; one GPU's budget)."""
        return self.kv_capacity_tokens / max(self.dp, 1) * self.kv_bytes_per_token_per_gpu

    def max_sequences(self, context: ArrayLike) -> npt.NDArray[np.float64]:
        """Sequences of ``context`` tokens whose KV fits the replica (before the engine's batch cap).

        Each attention-DP rank keeps its own sequences in its own KV pool (one GPU's budget; under DP the
        per-token KV of a GQA layer is the full per-token KV, heads are not split across DP ranks), so the
        replica holds ``dp`` x the sequences of one rank (``kv_rank_budget_bytes``).
        """
        per = self.kv_bytes_per_sequence(context)
        return np.floor(self.kv_rank_budget_bytes / np.maximum(per, 1e-9)) * self.dp

    def kv_reserved_context(self, prompt: ArrayLike, output: ArrayLike) -> Num:
        """Tokens of KV one request reserves at admission under the engine's ``kv_reservation``: 'full'
        (TensorRT-LLM GUARANTEED_NO_EVICT: prompt + output) or 'average' (vLLM / SGLang allocate pages as tokens
        are generated, prompt + output / 2 on average over a request's life)."""
        p = np.asarray(prompt, float)
        o = np.asarray(output, float)
        return p + o if self.engine.kv_reservation == "full" else p + o / 2.0

    def kv_reservation_bytes(self, prompt: ArrayLike, output: ArrayLike) -> Num:
        """KV bytes (one GPU of the rank) a request reserves at admission: kv_bytes_per_sequence of its
        kv_reserved_context."""
        return self.kv_bytes_per_sequence(self.kv_reserved_context(prompt, output))

    def kv_admitted_sequences(self, prompt: ArrayLike, output: ArrayLike) -> npt.NDArray[np.float64]:
        """THE KV-admission rule: requests of ``prompt`` + ``output`` tokens the replica's KV cache admits at once
        (each attention-DP rank: floor(rank budget / reservation bytes); before the engine's batch cap).

        perf (serving.kv_limited_batch), the planner (plan.capacity.kv_batch_bound) and the simulator
        (sim.replica.Replica: reserves ``kv_reservation_bytes`` per request in a rank's pool) all use it.
        """
        return self.max_sequences(self.kv_reserved_context(prompt, output))

    def running_cap(self, seq_len: ArrayLike) -> Num:
        """Sequences the engine runs at once over the replica, before the KV cache's limit: bench_max_batch per
        attention-DP rank and pipeline micro-batch in flight (trtllm-bench divides its estimate by pp, tuning.py
        finetune_setting, and the PyTorch runtime keeps pp micro-batches of max_batch_size each in flight,
        Engine.max_num_seqs_per_microbatch), at most max_num_seqs."""
        return np.minimum(self.bench_max_batch(seq_len) * self.dp * self.engine.caps_in_flight(self.pp),
                          self.max_num_seqs)

    def bench_max_batch(self, seq_len: ArrayLike) -> Num:
        """Running-sequence cap per attention-DP rank when the user gives none (``Engine.batch_cap_rule``).

        'static': the engine's max_num_seqs. 'trtllm_bench': the max_batch_size trtllm-bench passes to the runtime
        (tuning.py calc_engine_setting + finetune_setting). The estimate takes the whole world's memory
        (n_gpus x device - checkpoint size) over 2 x layers x max(tp, HF num_key_value_heads) x head_size KV bytes
        per token (for MLA checkpoints HF's num_key_value_heads = num_heads and head_size = hidden / num_heads,
        far above the real latent), caps it at max_num_seqs / pp and rounds it up (64 minimum). Under attention DP
        the runtime applies max_batch_size to each rank (the value is returned per rank), and under PP to each of
        the pp micro-batches in flight (Engine.max_num_seqs_per_microbatch; serving.max_throughput_batch)."""
        if self.bench is None or not self.bench.gib_per_token:
            return float(self.engine.max_num_seqs)
        req = self.bench.cache_gib / (self.bench.gib_per_token * np.maximum(np.asarray(seq_len, float), 1.0))
        raw = np.minimum(req, float(self.engine.max_num_seqs)) / self.pp
        return np.where(raw < 256, np.maximum(64.0, 32.0 * np.ceil(raw / 32.0)),
                        np.where(raw < 1024, 128.0 * np.ceil(raw / 128.0), 256.0 * np.ceil(raw / 256.0)))


def _running_sequences(prefill_tokens: ArrayLike, decode_seqs: ArrayLike) -> Num:
    """Sequences a step's host work handles: the decoding ones, and a prefilling request as one."""
    return np.asarray(decode_seqs, dtype=float) + (np.asarray(prefill_tokens, dtype=float) > 0)


# ------------------------------------------------------------------------------------------ compile
@dataclass
class _LayerTally:
    """What one walk over the layers collects (before formats and links are attached)."""

    gemm_counts: dict[tuple[str, str, int, int, str], float] = field(default_factory=lambda: defaultdict(float))
    attn_counts: dict[AttentionKey, float] = field(
        default_factory=lambda: defaultdict(float))
    moe_counts: dict[FFN, float] = field(default_factory=lambda: defaultdict(float))
    lin_flops: float = 0.0
    lin_bytes: float = 0.0
    lin_delta_bytes: float = 0.0
    elem_bytes: float = 0.0
    n_kernels: float = 0.0
    allreduce_per_step: float = 0.0
    moe_dp_per_step: float = 0.0


def _attention_key(att: Attention, tp: int, kvb: float, eng: Engine) -> AttentionKey:
    """The AttentionGroup key (everything but the count) of one softmax-attention layer: the kind's attended keys
    and per-key costs (attention.py)."""
    dflops, dbytes = att.decode_cost(tp, kvb)
    iflops, ibytes = att.index_cost()  # 0 where the layer reuses another layer's top-k: no scoring
    return (att.decode_window(eng.chunked_attention_context_only), att.kv_compress_ratio or 1, att.index_topk or 0,
            dflops, dbytes, att.prefill_flops_per_pair(tp), iflops, ibytes, att.window or 0, bool(att.chunked),
            att.sinks)


def _walk_layers(model: ModelArch, tp: int, dp: int, ep: int, kvb: float, eng: Engine) -> _LayerTally:
    """Count each distinct GEMM, attention and MoE shape over the model's layers, plus per-step totals."""
    hidden = model.hidden
    tally = _LayerTally()
    per_att: dict[int, tuple[list[ops.Gemm], AttentionKey | None]] = {}  # equal layers share one Attention object
    # per (attention object, FFN): the layer's GEMMs as (tally key, count) and its element-wise bytes per token
    per_layer: dict[tuple[int, FFN], tuple[list[tuple[tuple[str, str, int, int, str], int]], float]] = {}
    for L in model.layers:
        att, ffn = L.attention, L.ffn
        cached = per_att.get(id(att))
        if cached is None:
            cached = per_att[id(att)] = (ops.attention_gemms(att, hidden, tp),
                                         _attention_key(att, tp, kvb, eng) if att.caches_kv else None)
        shape = per_layer.get((id(att), ffn))
        if shape is None:
            gl = list(cached[0])
            if not att.caches_kv:  # linear attention: projections from the parameter count
                gl += ops.linear_attention_gemms(att.params, hidden, tp)
            if att.index_n_heads and att.index_cached:
                gl += ops.indexer_gemms(att, hidden, att.indexer_params)
            gl += ops.dense_mlp_gemms(ffn, hidden, tp) if ffn.kind == "dense" else ops.moe_side_gemms(ffn, hidden, tp)
            shape = per_layer[(id(att), ffn)] = ([((g.name, g.component, g.n, g.k, g.rows), g.count) for g in gl],
                                                 ops.elementwise_bytes_per_token(hidden, ffn, tp))
        if not att.caches_kv:  # linear attention: a recurrent state
            f, b = att.state_cost(tp)
            tally.lin_flops += f
            if att.linear_kind in DELTA_RULE_KINDS:
                tally.lin_delta_bytes += b
            else:
                tally.lin_bytes += b
        if ffn.kind != "dense":
            tally.moe_counts[ffn] += 1
            tally.n_kernels += 4
            if dp > 1 and ep > 1:
                tally.moe_dp_per_step += 1
            elif tp > 1:
                tally.allreduce_per_step += 1
        if ffn.kind == "dense" and tp > 1:
            tally.allreduce_per_step += 1
        if tp > 1:
            tally.allreduce_per_step += 1  # after the attention output projection
        for key, count in shape[0]:
            tally.gemm_counts[key] += count
        tally.n_kernels += len(shape[0]) + 4  # + attention, 2 norms, activation / rotary
        if cached[1] is not None:
            tally.attn_counts[cached[1]] += 1
        tally.elem_bytes += shape[1]
    return tally


def _walk_layers_memo(model: ModelArch, tp: int, dp: int, ep: int, kvb: float, eng: Engine) -> _LayerTally:
    """``_walk_layers``, computed once per model and (tp, dp, ep, KV bytes, the engine's chunked-attention rule):
    the walk reads nothing else, and the layouts of one search repeat few of these (DeepSeek-V3's plan: 12 walks for
    182 compiles). The tally is shared: callers only read it."""
    key = ("step._walk_layers", tp, dp, ep, kvb, bool(eng.chunked_attention_context_only))
    memo = model_memo(model)
    tally = memo.get(key)
    if tally is None:
        tally = memo[key] = _walk_layers(model, tp, dp, ep, kvb, eng)
    return tally


def _stage_attention_counts(model: ModelArch, layout: Layout, stage: int, kvb: float, eng: Engine,
                            keys: tuple[AttentionKey, ...]) -> tuple[float, ...]:
    """Layers of each attention group (``keys``, the tally's order) on pipeline stage ``stage``'s GPUs (the memory
    model's stage_layers); once per model, layout, stage and engine rule."""
    memo = model_memo(model)
    mkey = ("step._stage_attention_counts", layout.tp, layout.pp, stage, kvb, bool(eng.chunked_attention_context_only),
            keys)
    if mkey not in memo:
        counts: dict[AttentionKey, int] = {}
        for L in stage_layers(model, layout, stage):
            if L.attention.caches_kv:
                k = _attention_key(L.attention, layout.tp, kvb, eng)
                counts[k] = counts.get(k, 0) + 1
        memo[mkey] = tuple(float(counts.get(k, 0)) for k in keys)
    return memo[mkey]


def _gemm_groups(tally: _LayerTally, model: ModelArch, gpu: Gpu, precision: Precision, tp: int, curves: KernelCurves,
                 eng: Engine) -> tuple[GemmGroup, ...]:
    """The dense GEMMs with their formats and the engine-scaled efficiency curves, then the LM head."""
    # weight streaming efficiency: the bf16 fit (torch's fp8 path at small M is dominated by its unfused
    # activation quantisation, which the engines fuse away), scaled by the engine.
    mem_eff = curves.gemm["bf16"].mem_eff * eng.memory_scale

    per_component: dict[str, tuple[float, float, GemmCurve]] = {}  # GEMMs of one component share format and curve

    def group(name: str, component: str, n: int, k: int, count: float, rows: str) -> GemmGroup:
        fmt = per_component.get(component)
        if fmt is None:
            f = precision.formats[component]
            cd = effective_compute_dtype(gpu, f.compute_dtype)
            c = curves.gemm_curve(cd)
            curve = GemmCurve(0.0, mem_eff, c.eff_max * eng.compute_scale, c.m0, c.n0, c.k0)
            fmt = per_component[component] = (f.bytes_per_param, gpu.peak_flops(cd), curve)
        return GemmGroup(name, n, k, count, rows, fmt[0], fmt[1], fmt[2])

    out = [group(name, comp, n, k, cnt, rows) for (name, comp, n, k, rows), cnt in tally.gemm_counts.items()]
    lm = ops.lm_head_gemm(model.vocab, model.hidden, tp)
    out.append(group("lm_head", "lm_head", lm.n, lm.k, 1.0, "logits"))
    return tuple(out)


def _comm_plan(model: ModelArch, system: System, tally: _LayerTally, tp: int, dp: int, ep: int, pp: int,
               experts: WeightFormat, eng: Engine, curves: KernelCurves) -> CommPlan:
    """Links and message shapes of the step's collectives (TP all-reduces inside the scale-up domain at a measured
    profile's all-reduce link where ``curves`` has one)."""
    ecd = effective_compute_dtype(system.gpu, experts.compute_dtype)
    up, out = comm.links_for(system)
    domain = system.scale_up_domain_gpus or 1
    first_moe = next((L.ffn for L in model.layers if L.ffn.kind == "moe"), None)
    ar_up = up if curves.allreduce is None else curves.allreduce.link(up)
    return CommPlan(
        allreduce_per_step=tally.allreduce_per_step, tp_link=ar_up if tp * dp <= domain else out,
        pp_link=up if tp * dp * pp <= domain else out, ep_link=up if tp * dp <= domain else out,
        moe_per_step=tally.moe_dp_per_step, moe_ranks=tp * dp, moe_fanout=min(first_moe.top_k, ep) if first_moe else 0,
        moe_dp_comm=eng.moe_dp_comm, dispatch_bytes=1.0 if ecd in ("fp8", "fp4") else 2.0,
        # bytes per gathered activation element: nvfp4 (4 bits + an fp8 scale per 16), mxfp8 for mxfp4 experts on
        # Blackwell (8 bits + e8m0 per 32), fp8, or bf16 where the experts run W4A16 / bf16
        gather_bytes=(0.5625 if ecd == "fp4" and experts.name == "nvfp4" else 1.03125 if ecd == "fp4"
                      else 1.0 if ecd == "fp8" else 2.0),
        system=system)


def _trtllm_bench_estimate(model: ModelArch, gpu: Gpu, precision: Precision, world: int, tp_dp: int,
                           eng: Engine) -> TrtllmBenchEstimate | None:
    """trtllm-bench's KV estimate (tuning.py calc_engine_setting) for ``Engine.batch_cap_rule`` 'trtllm_bench', when
    the user gives no max_num_seqs (a max_batch_size given is the cap itself, not trtllm-bench's estimate of it)."""
    if eng.batch_cap_rule != "trtllm_bench" or "max_num_seqs" in eng.user_set:
        return None
    att0 = next((L.attention for L in model.layers if L.attention.caches_kv), None)
    if att0 is None:
        return None
    kvh, hs = att0.trtllm_bench_kv_shape(model.hidden)
    gib = 1024.0 ** 3
    per_token = 2.0 * len(model.layers) * max(tp_dp, kvh) * hs * (1.0 if precision.kv_bytes_per_elem <= 1.0 else 2.0) / gib
    ckpt = sum(precision.bytes_for(c, n) for c, n in model.params.items()
               if c in precision.formats and c not in ("mtp", "vision"))
    cache = max(0.0, (gpu.usable_memory_bytes * world - ckpt) / gib) * eng.gpu_memory_utilization
    return TrtllmBenchEstimate(cache, per_token)


def compile_step(model: ModelArch, system: System, layout: Layout, precision: Precision, engine: Engine,
                 kv_budget_bytes_per_gpu: float | None = None, curves: KernelCurves | None = None) -> StepModel:
    """Compile the per-step coefficients of a model on one replica (``layout``) of ``system``.

    engine: a clusterfit.engines.Engine (get_engine(name[, path]), optionally .with_settings(...)); its GPU-family
    constants and its defaults for this device and layout are applied here (Engine.for_gpu, Engine.for_layout).
    kv_budget_bytes_per_gpu: the KV budget per GPU (default: the memory model's, memory.fit with this engine).
    curves: the kernel curves (default: the shipped H200 fit; a measured profile's for its GPU,
    compose.Catalog.curves).
    """
    gpu = system.gpu
    curves = load_curves() if curves is None else curves
    tp, pp = int(layout.tp), int(layout.pp)
    ep, dp = int(getattr(layout, "ep", 1) or 1), int(getattr(layout, "dp", 1) or 1)
    eng = engine.for_gpu(gpu.id).for_layout(gpu, tp, pp, dp)
    gpus = tp * dp * pp
    moe_tp = max(1, (tp * dp) // max(ep, 1))
    tally = _walk_layers_memo(model, tp, dp, ep, precision.kv_bytes_per_elem, eng)
    attn = tuple(AttentionGroup(cnt, *key) for key, cnt in tally.attn_counts.items())
    ef = precision.formats["routed_experts"]
    ecd = effective_compute_dtype(gpu, ef.compute_dtype)
    cap = weight_only_cap(gpu, ef)
    m0 = WEIGHT_ONLY_M0 if np.isfinite(cap) else curves.moe_m0
    moe = tuple(MoEGroup(cnt, ffn, model.hidden, max(ep, 1), moe_tp, ef.bytes_per_param, gpu.peak_flops(ecd), ecd,
                         cap, m0) for ffn, cnt in tally.moe_counts.items())
    # weights per GPU from the memory model (exact formats, replicated and uneven shards); KV per token from the
    # attention op coefficients (the memory model agrees: tests/test_perf_model.py)
    if kv_budget_bytes_per_gpu is None:  # the memory model with the engine's budgeting
        nodes = max(1, -(-gpus // system.gpus_per_node))
        mem = fit(model, system, precision, layout, nodes, eng)   # MTP weights when the engine loads them
        kv_budget_bytes_per_gpu = mem.kv_budget_bytes_per_gpu
        w_bytes = mem.weight_bytes_per_gpu  # the same weight_bytes_per_gpu(model, precision, layout, include_mtp)
        stage: int | None = mem.kv_stage
    else:
        w_bytes = weight_bytes_per_gpu(model, precision, layout, eng.loads_mtp_layers) + int(math.ceil(
            drafter_weight_bytes_per_gpu(eng, layout)))
        stage = None
    # the cache is the binding pipeline stage's (the memory model's kv_stage; under a budget given here the stage
    # with the most KV bytes per token): its own layers of each attention group
    if stage is None:
        stage = max(range(pp), key=lambda k: kv_bytes_per_token_per_gpu(model, precision, layout, k))
    kv_counts = (_stage_attention_counts(model, layout, stage, precision.kv_bytes_per_elem, eng, tuple(tally.attn_counts))
                 if pp > 1 else tuple(float(a.count) for a in attn))
    kv_tok = (sum(n * (a.decode_bytes + a.index_bytes) for a, n in zip(attn, kv_counts, strict=True))
              + draft_kv_bytes_per_token_per_gpu(model, precision, layout, eng.draft_method, eng.draft_head))
    state = recurrent_state_bytes_per_sequence(model, layout, stage)  # the memory model's, on one GPU
    kv_pool, state_slots = eng.split_state_pool(kv_budget_bytes_per_gpu, state)
    kv_tokens_per_rank = kv_pool / max(kv_tok, 1e-9)
    eng = eng.for_kv_pool(kv_tokens_per_rank, model.max_context, state_slots).for_linear_attention(state > 0)
    return StepModel(
        name=getattr(model, "name", "model"), gpus=gpus, tp=tp, pp=pp, ep=ep, dp=dp, engine=eng,
        bw_bytes_per_s=gpu.mem_bw_bytes_per_s,
        kv_capacity_tokens=kv_tokens_per_rank * dp,
        max_num_seqs=int(eng.max_num_seqs) * dp * eng.caps_in_flight(pp),
        weight_bytes_per_gpu=float(w_bytes),
        kv_bytes_per_token_per_gpu=float(kv_tok), curves=curves,
        gemms=_gemm_groups(tally, model, gpu, precision, tp, curves, eng), attention=attn,
        linear=LinearAttention(tally.lin_flops, tally.lin_bytes, tally.lin_delta_bytes), moe=moe,
        comm_plan=_comm_plan(model, system, tally, tp, dp, ep, pp, ef, eng, curves),
        elementwise_bytes_per_token=tally.elem_bytes,
        sampling_bytes_per_seq=ops.sampling_bytes_per_seq(model.vocab, tp), n_kernels=tally.n_kernels,
        attn_peak_flops=gpu.peak_flops("bf16"), kv_layer_counts=kv_counts, hidden=model.hidden,
        kv_state_bytes_per_seq=state if state_slots is None else 0.0,  # a separate state pool: not in the KV's
        sink_prefill_scale=eng.sink_prefill_scale(gpu),
        bench=_trtllm_bench_estimate(model, gpu, precision, gpus, tp * dp, eng))
