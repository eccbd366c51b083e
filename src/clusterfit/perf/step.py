"""One engine iteration on a parallel layout: compile once, evaluate numpy arrays of batch shapes.

    iteration_s = sum over ops of max(flops / (peak * compute_eff), bytes / (bw * mem_eff))
                  + communication (not overlapped with compute; the engines we model serialise TP
                    all-reduces and EP all-to-alls with the layer they belong to)
                  + n_kernels * kernel_overhead_s + step_overhead_s
                  + seq_overhead_s * running sequences                          (engine constants)

``compile_step`` walks the layers once, deduplicates identical layers and keeps per-step coefficients
(GEMM shapes and their counts, attention bytes/FLOPs per attended token, MoE shapes, element-wise bytes
per token, message sizes); ``StepModel.step_s`` then costs whole numpy arrays of step shapes without a
Python loop over layers.

Pipeline parallelism: the batch is split into ``microbatches`` (default pp) that flow through the pp
stages. One iteration (every sequence advances once) then costs the whole model evaluated on a
microbatch of batch/microbatches, times max(microbatches, pp)/pp, plus the stage-to-stage sends; with
one microbatch (a single prefill) the stages run one after another.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from . import comm, ops
from ..engines import Engine, get_engine
from ..memory import fit, weight_bytes_per_gpu
from .kernels import GemmCurve, KernelCurves, gemm_time_s, load_curves


def _fmt(precision, component):
    return precision.formats[component]


def effective_compute_dtype(gpu, dtype: str) -> str:
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


#: Highest fraction of the bf16 dense peak a W4A16 grouped GEMM reaches on GPUs without fp4 tensor cores.
#: The 4-bit weights are unpacked and scaled on the CUDA cores in the GEMM main loop (Triton matmul_ogs
#: mxfp4 on Hopper, TensorRT-LLM moe backend TRITON = W4A16_MXFP4), so at large M the kernel is bound by that
#: dequantisation, not by the tensor cores: triton-lang/triton PR #11361 reports the native Hopper mxfp4 x bf16
#: matmul losing to "weight cast + dense bf16 matmul" at large M. 0.30 (~300 TFLOP/s on H100/H200) is scanned
#: on the development CSV (0.2..0.5; only gpt-oss-on-Hopper rows use W4A16 there), not a measured kernel figure.
W4A16_MAX_EFF = 0.30


def w4a16_cap(gpu, fmt) -> float:
    """Cap on the compute efficiency of a MoE GEMM whose 4-bit weights are dequantised in its main loop (W4A16).

    A cap, not a factor: at small M per expert the grouped GEMM is already far below it (tile fill, weight
    streaming), which is where W4A16's dequantisation hides behind the memory reads."""
    if fmt.bytes_per_param < 1.0 and effective_compute_dtype(gpu, fmt.compute_dtype) == "bf16":
        return W4A16_MAX_EFF
    return float("inf")


@dataclass
class _GemmGroup:
    name: str
    n: int
    k: int
    count: float
    rows: str
    w_bytes_per_elem: float
    peak_flops: float
    curve: GemmCurve


@dataclass
class StepModel:
    """Compiled per-step coefficients of (model, system, layout, precision, engine).

    All ``*_s`` methods broadcast over numpy arrays. Token counts are for the whole replica.
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
    max_batch: int
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    _gemms: list = field(default_factory=list, repr=False)
    # (count, window, compress, topk, dec_flops, dec_bytes, pre_flops, idx_flops, idx_bytes, pre_window, chunked):
    # ``window`` caps the KV kept and the keys a decode query reads; ``pre_window`` / ``chunked`` the keys a prefill
    # token attends (they differ where the engine applies a chunk mask to context tokens only).
    _attn: list = field(default_factory=list, repr=False)
    _linear: tuple = (0.0, 0.0)  # (flops per token, state bytes per decode seq), summed over layers
    _moe: list = field(default_factory=list, repr=False)
    _elementwise_bytes_per_token: float = 0.0
    _sampling_bytes_per_seq: float = 0.0
    _n_kernels: float = 0.0
    _comm: dict = field(default_factory=dict, repr=False)
    _curves: KernelCurves | None = field(default=None, repr=False)
    _attn_peak_flops: float = 0.0
    _layers_per_gpu_frac: float = 1.0
    _hidden: int = 0
    _kv_state_bytes_per_seq: float = 0.0
    #: trtllm-bench's KV estimate (tensorrt_llm/bench/build/tuning.py calc_engine_setting), in GiB: cache memory of
    #: the whole world and bytes per token; 0 when the engine is not TensorRT-LLM.
    _bench_cache_gib: float = 0.0
    _bench_gib_per_token: float = 0.0

    # ------------------------------------------------------------------------------------- evaluation
    def _stage(self, tokens, logits_rows, prefill_tokens, prefill_attended, decode_seqs, decode_attended,
               parts: dict | None = None):
        """Time of all layers (tp-sharded) on one GPU for these replica-wide counts (one microbatch)."""
        c = self._curves
        dp = self.dp
        m = tokens / dp                       # tokens on one attention rank
        m_logits = logits_rows / dp
        total = 0.0

        def add(key, t, kind):
            nonlocal total
            total = total + t
            if parts is not None:
                parts.setdefault("ops", {})
                parts["ops"][key] = parts["ops"].get(key, 0.0) + t
                parts[kind] = parts.get(kind, 0.0) + t

        for g in self._gemms:
            mm = m if g.rows == "tokens" else m_logits
            t = g.count * gemm_time_s(g.curve, mm, g.n, g.k, g.w_bytes_per_elem, 2.0, g.peak_flops,
                                      self.bw_bytes_per_s, with_t0=False)
            t = np.where(mm > 0, t, 0.0)
            if parts is not None:
                is_mem = (g.n * g.k * g.w_bytes_per_elem / (self.bw_bytes_per_s * g.curve.mem_eff)
                          >= 2.0 * mm * g.n * g.k / (g.peak_flops * g.curve.compute_eff(mm, g.n, g.k)))
                add(g.name, t, "memory_s" if np.all(is_mem) else "compute_s")
            else:
                total = total + t

        # attention
        # streaming reads of per-sequence state; the paged KV cache (attention, DSA indexer keys) at attention_scale
        bw_state = self.bw_bytes_per_s * c.attn_decode_mem_eff * self.engine.memory_scale
        bw_attn = bw_state * self.engine.attention_scale
        d = decode_seqs / dp
        avg_ctx = np.where(decode_seqs > 0, decode_attended / np.maximum(decode_seqs, 1e-9), 0.0)
        p = prefill_tokens / dp
        avg_pre = np.where(prefill_tokens > 0, prefill_attended / np.maximum(prefill_tokens, 1e-9), 0.0)
        pre_eff = c.attn_prefill_eff_max * self.engine.compute_scale / (1.0 + c.attn_prefill_w0 / np.maximum(p, 1.0))
        for (count, window, compress, topk, dflops, dbytes, pflops, iflops, ibytes, pre_window, chunked) in self._attn:
            att_ctx = avg_ctx
            att_pre = avg_pre
            if window:
                att_ctx = np.minimum(att_ctx, window)
            if pre_window:
                # min(mean, window) over-counts once the prompt outgrows the window (exact mean: w - w^2/2S for a
                # sliding window over a prompt of S, ~w/2 for chunked attention); the exact count was tried and
                # predicted the long-prompt rows worse (TensorRT-LLM v0.20 ran Llama-4's chunked layers as full
                # attention), so the upper bound stays.
                att_pre = np.minimum(att_pre, pre_window)
            if compress > 1:
                att_ctx = att_ctx / compress
                att_pre = att_pre / compress
            full_ctx = att_ctx
            if topk:
                att_ctx = np.minimum(att_ctx, topk)
                att_pre = np.minimum(att_pre, topk)
            keys = d * att_ctx
            t_dec = np.maximum(count * dbytes * keys / bw_attn,
                               count * dflops * keys / (self._attn_peak_flops * c.attn_prefill_eff_max * self.engine.compute_scale))
            t_pre = count * pflops * p * att_pre / (self._attn_peak_flops * pre_eff)
            add("attention_decode", t_dec, "memory_s")
            add("attention_prefill", t_pre, "compute_s")
            if iflops:
                # decode queries score every cached index key of their own sequence (a batched GEMV: read
                # the fp8 keys once); prefill tokens score their causal prefix at the prefill efficiency.
                dec_peak = self._attn_peak_flops * c.attn_prefill_eff_max * self.engine.compute_scale
                t_idx = np.maximum(count * ibytes * d * full_ctx / bw_attn, count * iflops * d * full_ctx / dec_peak)
                t_idx = t_idx + count * iflops * p * avg_pre / (self._attn_peak_flops * pre_eff)
                add("dsa_indexer", t_idx, "compute_s")
        lf, lb = self._linear
        if lf or lb:
            t_lin = np.maximum(lb * d / bw_state, lf * m / (self._attn_peak_flops * 0.3))
            add("linear_attention", t_lin, "memory_s")

        # MoE routed experts: all tokens of the stage spread over ep ranks
        for (count, ffn, hidden, ep, moe_tp, wbpe, peak, dtype, cap) in self._moe:
            flops, wbytes, abytes, pairs, active = ops.moe_flops_bytes(ffn, hidden, ep, moe_tp, tokens, wbpe)
            imb = ops.ep_max_load_factor(pairs, ep, self.engine.expert_load_cv)
            flops = flops * imb
            abytes = abytes * imb
            pairs = pairs * imb
            per_expert = pairs / np.maximum(active, 1e-9)
            width, inter = ops.moe_expert_shape(ffn, hidden)
            gc = c.gemm_curve(dtype)
            # small expert matrices fill fewer tiles: the GEMM fit's n0/k0 terms on the expert's narrower side
            shape_pen = gc.n0 / max(inter / moe_tp, 1.0) + gc.k0 / max(width, 1.0)
            eff = c.moe_eff_max * self.engine.compute_scale / (1.0 + c.moe_m0 / np.maximum(per_expert, 1e-9) + shape_pen)
            eff = np.minimum(eff, cap)
            t = count * np.maximum((wbytes + abytes) / (self.bw_bytes_per_s * c.moe_mem_eff * self.engine.memory_scale),
                                   flops / (peak * eff))
            add("moe_experts", np.where(tokens > 0, t, 0.0), "memory_s")

        bw_copy = self.bw_bytes_per_s * c.copy_mem_eff * self.engine.memory_scale
        add("elementwise", self._elementwise_bytes_per_token * m / bw_copy, "memory_s")
        add("sampling", self._sampling_bytes_per_seq * m_logits / bw_copy, "memory_s")

        # communication
        cm = self._comm
        act = m * self._hidden * 2.0
        t_comm = cm["allreduce_per_step"] * comm.all_reduce_s(act, self.tp, cm["tp_link"])
        if cm["a2a_per_step"]:
            if self.engine.name == "trtllm":
                # TensorRT-LLM's MoE under attention DP (CUTLASS / TRITON backends, no wide-EP all-to-all):
                # every rank all-gathers all ranks' tokens (quantised first for fp4 / fp8 experts) before the
                # MoE and reduce-scatters the bf16 partial outputs after it, so each rank moves the whole
                # replica's tokens x hidden, whatever top_k is (not only its top-k copies).
                n = cm["a2a_ranks"]
                link = cm["ep_link"]
                gathered = tokens * self._hidden
                t_comm = t_comm + cm["a2a_per_step"] * (
                    comm.all_gather_s(gathered * cm["gather_bytes"], n, link)
                    + comm.reduce_scatter_s(gathered * 2.0, n, link))
            else:
                tok_per_gpu = m / self.tp
                sent = tok_per_gpu * cm["a2a_fanout"] * self._hidden * (cm["dispatch_bytes"] + 2.0)
                t_comm = t_comm + cm["a2a_per_step"] * comm.all_to_all_s(sent, cm["a2a_ranks"], cm["system"])
        add("communication", np.where(tokens > 0, t_comm, 0.0), "communication_s")
        add("kernel_overhead", np.where(tokens > 0, self._n_kernels * self.engine.kernel_overhead_s, 0.0), "overhead_s")
        return total

    def step_s(self, prefill_tokens, prefill_attended, decode_seqs, decode_attended, microbatches=None,
               parts: dict | None = None):
        """Seconds of one engine iteration of the replica.

        prefill_tokens: new prompt tokens computed this step; prefill_attended: sum over them of keys each
        attends (a chunk of n tokens after c cached: n*c + n*(n+1)/2); decode_seqs: sequences producing one
        token; decode_attended: sum of their context lengths. Broadcasts over numpy arrays.
        """
        P = np.asarray(prefill_tokens, dtype=float)
        Ap = np.asarray(prefill_attended, dtype=float)
        D = np.asarray(decode_seqs, dtype=float)
        Ad = np.asarray(decode_attended, dtype=float)
        mb = self.pp if microbatches is None else max(1, int(microbatches))
        tokens = (P + D) / mb
        logits = (D + (P > 0)) / mb
        t = self._stage(tokens, logits, P / mb, Ap / mb, D / mb, Ad / mb, parts)
        factor = max(mb, self.pp) / self.pp
        t = t * factor
        if self.pp > 1:
            send = comm.send_recv_s(tokens * self._hidden * 2.0, self._comm["pp_link"])
            t_pp = (self.pp - 1) * send * factor
            t = t + t_pp
            if parts is not None:
                parts["ops"]["pipeline_send"] = parts["ops"].get("pipeline_send", 0.0) + t_pp
                parts["communication_s"] = parts.get("communication_s", 0.0) + t_pp
        host_s = self.engine.step_overhead_s + self.engine.seq_overhead_s * (D + (P > 0))
        t = t + host_s
        if parts is not None:
            parts["ops"]["engine_step_overhead"] = host_s
            parts["overhead_s"] = parts.get("overhead_s", 0.0) + host_s
            for k in list(parts):
                if k != "ops":
                    parts[k] = parts[k] * (factor if k not in ("overhead_s",) else 1.0)
        return t

    def decode_step_s(self, batch, context):
        """One decode iteration of ``batch`` sequences each with ``context`` cached tokens."""
        b = np.asarray(batch, dtype=float)
        return self.step_s(0.0, 0.0, b, b * np.asarray(context, dtype=float))

    def prefill_s(self, tokens, cached=0):
        """Prefill of one request of ``tokens`` new tokens after ``cached`` tokens, chunked by max_num_tokens."""
        n = np.asarray(tokens, dtype=float)
        c = np.asarray(cached, dtype=float)
        chunk = float(self.engine.max_num_tokens)
        n_chunks = np.maximum(np.ceil(n / chunk), 1.0)
        per = n / n_chunks
        # chunk i attends c + i*per cached tokens; sum over chunks of per*(c + i*per) + per*(per+1)/2
        attended = n * c + per * per * n_chunks * (n_chunks - 1) / 2.0 + n_chunks * per * (per + 1) / 2.0
        return n_chunks * self.step_s(per, attended / n_chunks, 0.0, 0.0, microbatches=1)

    def breakdown(self, prefill_tokens, prefill_attended, decode_seqs, decode_attended) -> dict:
        """Seconds per op and per kind (compute_s / memory_s / communication_s / overhead_s) of one step."""
        parts: dict = {}
        total = self.step_s(prefill_tokens, prefill_attended, decode_seqs, decode_attended, parts=parts)
        ops_ = {k: float(np.asarray(v).mean()) for k, v in parts.pop("ops", {}).items()}
        kinds = {k: float(np.asarray(v).mean()) for k, v in parts.items()}
        return {"step_s": float(np.asarray(total).mean()), "by_op_s": ops_, "by_kind_s": kinds}

    def kv_bytes_per_sequence(self, context) -> float:
        """KV bytes one sequence of ``context`` tokens holds on one GPU (windows, compression, state): the layers
        of one pipeline stage (``_attn`` counts the whole model's layers; a stage holds 1/pp of them)."""
        ctx = np.asarray(context, dtype=float)
        total = 0.0
        for (count, window, compress, topk, dflops, dbytes, pflops, iflops, ibytes, _pw, _ch) in self._attn:
            c = np.minimum(ctx, window) if window else ctx
            total = total + count * (dbytes * c / max(compress, 1) + ibytes * c / max(compress, 1))
        return self._kv_state_bytes_per_seq + total * self._layers_per_gpu_frac

    def bench_max_batch(self, seq_len):
        """max_batch_size trtllm-bench passes to the runtime when none is given (tuning.py calc_engine_setting +
        finetune_setting), or the engine's static cap for other engines. The estimate takes the whole world's
        memory (n_gpus x device - checkpoint size) over 2 x layers x max(tp, HF num_key_value_heads) x head_size
        KV bytes per token (for MLA checkpoints HF's num_key_value_heads = num_heads and head_size =
        hidden / num_heads, far above the real latent), caps it at 4096 / pp and rounds it up (64 minimum).
        Under attention DP the runtime applies max_batch_size to each rank (the value is returned per rank)."""
        if not self._bench_gib_per_token:
            return float(self.engine.max_batch)
        req = self._bench_cache_gib / (self._bench_gib_per_token * np.maximum(np.asarray(seq_len, float), 1.0))
        raw = np.minimum(req, float(self.engine.max_batch)) / self.pp
        return np.where(raw < 256, np.maximum(64.0, 32.0 * np.ceil(raw / 32.0)),
                        np.where(raw < 1024, 128.0 * np.ceil(raw / 128.0), 256.0 * np.ceil(raw / 256.0)))

    def max_sequences(self, context):
        """Sequences of ``context`` tokens whose KV fits the replica (before the engine's batch cap).

        Each attention-DP rank keeps its own sequences in its own KV pool (one GPU's budget; under DP the
        per-token KV of a GQA layer is the full per-token KV, heads are not split across DP ranks), so the
        replica holds ``dp`` x the sequences of one rank. ``kv_capacity_tokens`` is replica-wide (already
        x dp), hence the per-rank budget is kv_capacity_tokens / dp tokens.
        """
        per = self.kv_bytes_per_sequence(context)
        budget_per_rank = self.kv_capacity_tokens / max(self.dp, 1) * self.kv_bytes_per_token_per_gpu
        return np.floor(budget_per_rank / np.maximum(per, 1e-9)) * self.dp


# ------------------------------------------------------------------------------------------ compile
def compile_step(model, system, layout, precision, engine="vllm", engines_path: str | None = None,
                 kv_budget_bytes_per_gpu: float | None = None) -> StepModel:
    """Compile the per-step coefficients of a model on one replica (``layout``) of ``system``.

    model: clusterfit.arch.ModelArch; system: clusterfit.hardware.System; layout: object with tp, pp, ep,
    dp; precision: clusterfit.precision.Precision; engine: name or clusterfit.engines.Engine.
    """
    eng = engine if isinstance(engine, Engine) else get_engine(engine, engines_path)
    gpu = system.gpu
    eng = eng.for_gpu(gpu.id)
    curves = load_curves()
    tp, pp = int(layout.tp), int(layout.pp)
    ep, dp = int(getattr(layout, "ep", 1) or 1), int(getattr(layout, "dp", 1) or 1)
    gpus = tp * dp * pp
    moe_tp = max(1, (tp * dp) // max(ep, 1))
    hidden = model.hidden
    bw = gpu.mem_bw_bytes_per_s
    frac = 1.0 / pp  # layers per GPU as a fraction of all layers (for weights / KV per GPU)

    # weight streaming efficiency: the bf16 fit (torch's fp8 path at small M is dominated by its unfused
    # activation quantisation, which the engines fuse away), scaled by the engine.
    mem_eff = curves.gemm["bf16"].mem_eff * eng.memory_scale

    def curve_for(dtype):
        c = curves.gemm_curve(dtype)
        return GemmCurve(0.0, mem_eff, c.eff_max * eng.compute_scale, c.m0, c.n0, c.k0)

    gemm_counts: dict = defaultdict(float)
    attn_counts: dict = defaultdict(float)
    moe_counts: dict = defaultdict(float)
    lin_flops = lin_bytes = 0.0
    elem_bytes = 0.0
    n_kernels = 0.0
    n_linear = sum(1 for L in model.layers if L.attention.kind == "linear")
    lin_params = model.params.get("linear_attention", 0) / max(n_linear, 1)
    n_idx = sum(1 for L in model.layers if L.attention.index_n_heads and L.attention.index_cached) or \
        sum(1 for L in model.layers if L.attention.index_n_heads)
    idx_params = model.params.get("indexer", 0) / max(n_idx, 1)
    allreduce_per_step = 0.0
    a2a_per_step = 0.0
    kv_state = 0.0
    kvb = precision.kv_bytes_per_elem

    for L in model.layers:
        att, ffn = L.attention, L.ffn
        gl = ops.attention_gemms(att, hidden, tp)
        if att.kind == "linear":
            gl += ops.linear_attention_gemms(int(lin_params), hidden, tp)
            f, b = ops.linear_attention_state_per_seq(att, tp)
            lin_flops += f
            lin_bytes += b
            kv_state += b / 2.0
        if att.index_n_heads and att.index_cached:
            gl += ops.indexer_gemms(att, hidden, int(idx_params))
        if ffn.kind == "dense":
            gl += ops.dense_mlp_gemms(ffn, hidden, tp)
        else:
            gl += ops.moe_side_gemms(ffn, hidden, tp)
            moe_counts[ffn] += 1
            n_kernels += 4
            if dp > 1 and ep > 1:
                a2a_per_step += 1
            elif tp > 1:
                allreduce_per_step += 1
        if ffn.kind == "dense" and tp > 1:
            allreduce_per_step += 1
        if tp > 1:
            allreduce_per_step += 1  # after the attention output projection
        for g in gl:
            gemm_counts[(g.name, g.component, g.n, g.k, g.rows)] += g.count
        n_kernels += len(gl) + 4  # + attention, 2 norms, activation / rotary
        if att.kind != "linear":
            dflops, dbytes = ops.decode_attention_per_token(att, tp, kvb)
            pflops = ops.prefill_attention_flops_per_pair(att, tp)
            iflops, ibytes = ops.indexer_per_attended_token(att) if att.index_n_heads else (0.0, 0.0)
            if not att.index_cached:  # a layer sharing another layer's indexer reuses its top-k: no scoring
                iflops, ibytes = 0.0, 0.0
            kv_window = att.window or 0
            if att.chunked and eng.chunked_attention_context_only:
                kv_window = 0  # generation attends (and the cache keeps) the whole context; only prefill is chunked
            attn_counts[(kv_window, att.kv_compress_ratio or 1, att.index_topk or 0,
                         dflops, dbytes, pflops, iflops, ibytes, att.window or 0, bool(att.chunked))] += 1
        elem_bytes += ops.elementwise_bytes_per_token(hidden, ffn, tp)

    gemms = []
    for (name, comp, n, k, rows), cnt in gemm_counts.items():
        f = _fmt(precision, comp)
        cd = effective_compute_dtype(gpu, f.compute_dtype)
        gemms.append(_GemmGroup(name, n, k, cnt, rows, f.bytes_per_param, gpu.peak_flops(cd), curve_for(cd)))
    lm = ops.lm_head_gemm(model.vocab, hidden, tp)
    f = _fmt(precision, "lm_head")
    cd = effective_compute_dtype(gpu, f.compute_dtype)
    gemms.append(_GemmGroup("lm_head", lm.n, lm.k, 1.0, "logits", f.bytes_per_param,
                            gpu.peak_flops(cd), curve_for(cd)))
    attn = [(cnt, *key) for key, cnt in attn_counts.items()]
    ef = _fmt(precision, "routed_experts")
    ecd = effective_compute_dtype(gpu, ef.compute_dtype)
    moe = [(cnt, ffn, hidden, max(ep, 1), moe_tp, ef.bytes_per_param, gpu.peak_flops(ecd), ecd, w4a16_cap(gpu, ef))
           for ffn, cnt in moe_counts.items()]

    # communication setup
    up, out = comm.links_for(system)
    domain = system.scale_up_domain_gpus or 1
    tp_link = up if tp * dp <= domain else out
    pp_link = up if gpus <= domain else out
    first_moe = next((L.ffn for L in model.layers if L.ffn.kind == "moe"), None)
    fanout = min(first_moe.top_k, ep) if first_moe else 0
    act_dtype_fp8 = ecd in ("fp8", "fp4")
    comm_cfg = dict(allreduce_per_step=allreduce_per_step, tp_link=tp_link, pp_link=pp_link,
                    a2a_per_step=a2a_per_step, a2a_ranks=tp * dp, a2a_fanout=fanout,
                    dispatch_bytes=1.0 if act_dtype_fp8 else 2.0, system=system,
                    ep_link=up if tp * dp <= domain else out,
                    # bytes per gathered activation element: nvfp4 (4 bits + an fp8 scale per 16), mxfp8 for mxfp4 experts
                    # on Blackwell (8 bits + e8m0 per 32), fp8, or bf16 where the experts run W4A16 / bf16
                    gather_bytes=(0.5625 if ecd == "fp4" and ef.name == "nvfp4" else 1.03125 if ecd == "fp4"
                                  else 1.0 if ecd == "fp8" else 2.0))

    # weights per GPU from the memory model (exact formats, replicated and uneven shards); KV per token from the
    # attention op coefficients (the memory model agrees: tests/test_perf_model.py)
    w_bytes = weight_bytes_per_gpu(model, precision, layout)
    kv_tok = sum(cnt * (dbytes + ibytes) for (cnt, _w, _c, _t, _df, dbytes, _pf, _if, ibytes, _pw, _ch) in attn) * frac

    sm = StepModel(
        name=getattr(model, "name", "model"), gpus=gpus, tp=tp, pp=pp, ep=ep, dp=dp, engine=eng,
        bw_bytes_per_s=bw, kv_capacity_tokens=0.0, max_batch=int(eng.max_batch) * dp,
        weight_bytes_per_gpu=float(w_bytes), kv_bytes_per_token_per_gpu=float(kv_tok),
        _gemms=gemms, _attn=attn, _linear=(lin_flops, lin_bytes), _moe=moe,
        _elementwise_bytes_per_token=elem_bytes, _sampling_bytes_per_seq=ops.sampling_bytes_per_seq(model.vocab, tp),
        _n_kernels=n_kernels, _comm=comm_cfg, _curves=curves, _attn_peak_flops=gpu.peak_flops("bf16"),
        _layers_per_gpu_frac=frac, _hidden=hidden, _kv_state_bytes_per_seq=kv_state * frac,
    )
    if eng.name == "trtllm":
        att0 = next((L.attention for L in model.layers if L.attention.kind != "linear"), None)
        if att0 is not None:
            kvh, hs = ((att0.num_heads, hidden // max(att0.num_heads, 1)) if att0.kind == "mla"
                       else (att0.num_kv_heads, att0.head_dim))
            gib = 1024.0 ** 3
            world = tp * dp * pp
            sm._bench_gib_per_token = (2.0 * len(model.layers) * max(tp * dp, kvh) * hs *
                                       (1.0 if kvb <= 1.0 else 2.0) / gib)
            ckpt = sum(precision.bytes_for(c, n) for c, n in model.params.items()
                       if c in precision.formats and c not in ("mtp", "vision"))
            sm._bench_cache_gib = max(0.0, (gpu.usable_memory_bytes * world - ckpt) / gib) * eng.gpu_memory_utilization
    if kv_budget_bytes_per_gpu is None:  # the memory model with the engine's budgeting
        nodes = max(1, -(-gpus // system.gpus_per_node))
        kv_budget_bytes_per_gpu = fit(model, system, precision, layout, nodes, engine=eng.name).kv_budget_bytes_per_gpu
    sm.kv_capacity_tokens = max(0.0, kv_budget_bytes_per_gpu) / max(kv_tok, 1e-9) * dp
    return sm

