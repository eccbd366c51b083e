"""Memory fit: weights per GPU, runtime reserve, KV-cache budget, max sequences, nodes needed.

Pure functions of (model, precision, layout, system, engine). The engine is a clusterfit.engines.Engine (its
memory fields: memory_mode, gpu_memory_utilization, activations_in_fraction, max_num_batched_tokens, max_num_seqs,
cuda_graph_bytes, nccl_bytes, chunked_attention_context_only); apply user overrides with Engine.with_settings. Byte counts are exact for weights and
KV cache given the formats in precision.py; the runtime reserve mixes measured figures (CUDA context and
cuBLAS start-up on an H200) with documented engine defaults and estimates, each named in ``Reserve``.

Sharding rules (what one GPU of a layout holds):
  attention, linear attention: 1/tp of the heads (KV projections replicated when tp > KV heads; MLA's
    low-rank down-projections q_a / kv_a are replicated, the rest split);
  dense MLP, shared experts: 1/tp;  routed experts: ceil(E/ep) experts, each 1/moe_tp;
  embedding, LM head: vocab-parallel 1/tp (first / last pipeline stage);
  router, norms, sparse-attention indexer: replicated;  layers: split over pipeline stages as vLLM and SGLang split
  them (pipeline_stages); each stage's GPUs hold its own layers' weights and KV, and the stage whose GPUs hold the
  fewest sequences of the context binds the replica's cache (the engines give every stage one block count).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .arch import Layer, ModelArch, layer_component_params, max_experts, model_memo
from .attention import INDEXER_BYTES_PER_ELEM, INDEXER_SCALE_BYTES, LINEAR_STATE_BYTES  # noqa: F401 (re-exported)
from .engines import Engine
from .errors import ClusterfitError, ParameterError
from .hardware import System
from .layout import BLOCK_SPLIT_ENGINES, Layout, block_split_problem, default_layout, validate_layout
from .precision import Precision, naive_bytes_per_param
from .speculative import HEAD_DRAFTERS

if TYPE_CHECKING:
    from .speculative import DraftHead

#: Measured on an H200 (shared/reference/measured/h200-memory-fp8-moe.json, torch.cuda.mem_get_info):
#: total 150,109,880,320 B; free after CUDA context creation 149,557,477,376 B.
CUDA_CONTEXT_BYTES = 150_109_880_320 - 149_557_477_376  # 552,402,944 B
#: Same file: free after the first bf16 matmul 149,289,041,920 B, of which PyTorch itself reserved 102,760,448 B
#: for the test tensors; the rest is cuBLAS/runtime start-up outside PyTorch's allocator.
CUBLAS_BYTES = 149_557_477_376 - 149_289_041_920 - 102_760_448  # 165,675,008 B


# ================================================================================================
# Weights
# ================================================================================================


def pipeline_stages(num_layers: int, pp: int) -> tuple[range, ...]:
    """The decoder layers each of ``pp`` pipeline stages holds, as vLLM places them (vllm/distributed/utils.py
    get_pp_indices; SGLang's python/sglang/srt/distributed/utils.py get_pp_indices is the same rule): num_layers // pp
    each, and the remainder one more each on the stages before the last, from the second-to-last backwards
    (DeepSeek-V3's 61 layers over PP2: 31 + 30; 22 layers over PP4: 5, 6, 6, 5)."""
    base, extra = divmod(num_layers, pp)
    sizes = [base] * pp
    for i in range(2, extra + 2):
        sizes[-i] += 1
    starts = [sum(sizes[:k]) for k in range(pp)]
    return tuple(range(a, a + n) for a, n in zip(starts, sizes, strict=True))


def _stage_shares(model: ModelArch, pp: int) -> tuple[dict[str, float], ...]:
    """Each pipeline stage's share of every per-layer component (its layers' parameters over all layers'), and of
    the layers themselves under "layers" (for the norms); once per (model, pp)."""
    memo = model_memo(model)
    key = ("memory._stage_shares", pp)
    if key not in memo:
        per_layer = layer_component_params(model)
        totals: dict[str, float] = {}
        for d in per_layer:
            for c, n in d.items():
                totals[c] = totals.get(c, 0.0) + n
        shares = []
        for stage in pipeline_stages(model.num_layers, pp):
            own = {"layers": len(stage) / model.num_layers}
            for c, total in totals.items():
                own[c] = sum(per_layer[i].get(c, 0) for i in stage) / total if total else 0.0
            shares.append(own)
        memo[key] = tuple(shares)
    return memo[key]


def weight_bytes_per_gpu(model: ModelArch, precision: Precision, layout: Layout, include_mtp: bool = False,
                         stage: int | None = None) -> int:
    """Bytes of weights on one GPU of pipeline stage ``stage`` of ``layout`` (exact for the formats in
    ``precision``); None: the most loaded stage's. The first stage holds the embedding (and a vision tower), the
    last the LM head (a copy of the embedding when tied) and the MTP layers."""
    if stage is None:
        return max(weight_bytes_per_gpu(model, precision, layout, include_mtp, s) for s in range(layout.pp))
    p = model.params
    if not model.layers:
        total = sum(precision.bytes_for(c, n) for c, n in p.items())
        return int(math.ceil(total / layout.gpus))
    tp, pp = layout.tp, layout.pp
    share = _stage_shares(model, pp)[stage]
    first, last = stage == 0, stage == pp - 1

    b = 0.0
    # attention: split across tp, with replicated pieces (each layer's kind's TP rule, summed over the model)
    attn_total = p["attention"] + p["linear_attention"]
    if attn_total:
        rep = _replicated_attention_params(model, tp)
        sharded = attn_total - rep if rep < attn_total else 0.0
        per_gpu = sharded / tp + rep
        # split into the two components by their share, for their own formats
        part = p["attention"] / attn_total
        b += (share.get("attention", 0.0) * precision.bytes_for("attention", per_gpu * part)
              + share.get("linear_attention", 0.0) * precision.bytes_for("linear_attention", per_gpu * (1 - part)))
    b += share.get("indexer", 0.0) * precision.bytes_for("indexer", p["indexer"])
    b += share.get("dense_mlp", 0.0) * precision.bytes_for("dense_mlp", p["dense_mlp"]) / tp
    b += share.get("shared_experts", 0.0) * precision.bytes_for("shared_experts", p["shared_experts"]) / tp
    if p["routed_experts"]:
        n_exp = max_experts(model)
        per_rank = math.ceil(n_exp / layout.ep) / n_exp
        b += (share.get("routed_experts", 0.0) * precision.bytes_for("routed_experts", p["routed_experts"]) * per_rank
              / layout.moe_tp)
    b += share.get("router", 0.0) * precision.bytes_for("router", p["router"])
    b += share["layers"] * precision.bytes_for("norms", p["norms"])
    embedding = precision.bytes_for("embedding", p["embedding"])
    if first:
        b += (embedding + precision.bytes_for("vision", p["vision"])) / tp
    if last:
        b += (precision.bytes_for("lm_head", p["lm_head"]) or (embedding if pp > 1 else 0.0)) / tp
        if include_mtp:
            b += precision.bytes_for("mtp", p["mtp"]) / tp
    return int(math.ceil(b))


def _replicated_attention_params(model: ModelArch, tp: int) -> float:
    """Attention parameters every TP rank holds whole, summed over the layers (each kind's TP rule, attention.py);
    once per (model, tp)."""
    memo = model_memo(model)
    key = ("memory._replicated_attention_params", tp)
    if key not in memo:
        rep = 0.0
        for layer in model.layers:
            rep += layer.attention.replicated_params(model.hidden, tp)
        memo[key] = rep
    return memo[key]


# ================================================================================================
# KV cache
# ================================================================================================


def kv_bytes_per_token(model: ModelArch, precision: Precision) -> float:
    """KV bytes per token of the whole model, one copy (no TP sharding), before any window cap.

    Llama-3.1-70B bf16: 80 layers x 2 (K,V) x 8 heads x 128 x 2 B = 327,680.
    DeepSeek-V3 bf16 (MLA latent + rope key): 61 x (512 + 64) x 2 B = 70,272.
    """
    memo = model_memo(model)
    key = ("memory.kv_bytes_per_token", precision.kv_bytes_per_elem)
    if key not in memo:
        total = 0.0
        for layer in model.layers:
            total += layer.attention.kv_bytes_per_token(precision.kv_bytes_per_elem)
        memo[key] = total
    return memo[key]


def stage_layers(model: ModelArch, layout: Layout, stage: int) -> Sequence[Layer]:
    """The decoder layers pipeline stage ``stage`` of ``layout`` holds (pipeline_stages)."""
    r = pipeline_stages(model.num_layers, layout.pp)[stage]
    return model.layers[r.start:r.stop]


def _stage_sum(model: ModelArch, layout: Layout, stage: int | None, key: tuple[object, ...],
               per_layer: Callable[[Layer], float]) -> float:
    """``per_layer`` summed over the layers of pipeline stage ``stage`` (None: the largest such sum over the stages),
    once per model, ``key`` (what per_layer depends on besides the layer), layout tp / pp and stage."""
    memo = model_memo(model)

    def one(k: int) -> float:
        full = (*key, layout.tp, layout.pp, k)
        if full not in memo:
            memo[full] = float(sum(per_layer(layer) for layer in stage_layers(model, layout, k)))
        return memo[full]

    return one(stage) if stage is not None else max(one(k) for k in range(layout.pp))


def kv_bytes_per_token_per_gpu(model: ModelArch, precision: Precision, layout: Layout,
                               stage: int | None = None) -> float:
    """KV bytes per token on one GPU of pipeline stage ``stage`` (None: the largest stage's). KV heads split by tp,
    replicated when tp exceeds them; MLA latents replicated on every TP rank. No window cap."""
    kvb = precision.kv_bytes_per_elem
    return _stage_sum(model, layout, stage, ("memory.kv_bytes_per_token_per_gpu", kvb),
                      lambda layer: layer.attention.kv_bytes_per_token(kvb, layout.tp))


def draft_kv_layers(model: ModelArch, method: str | None, head: DraftHead | None = None) -> int:
    """Attention layers the drafter adds to the KV cache under speculative decoding: engines allocate the draft
    model's attention layers in the target's KV cache, one slot per token (vLLM v1/spec_decode/eagle.py
    EagleProposer.load_model collects draft_attn_layer_names for the KV cache spec). mtp: the checkpoint's MTP
    (NextN) layers; eagle / eagle3: the head's one decoder layer (the EAGLE papers' head; SpecForge's configs all
    set num_hidden_layers 1), or the layers of the head the user described (``head``); ngram or none: 0."""
    if head is not None and method in HEAD_DRAFTERS:
        return int(head.layers)
    if method == "mtp":
        return int(model.mtp_layers)
    return 1 if method in HEAD_DRAFTERS else 0


def _draft_layer(model: ModelArch) -> Layer | None:
    """The layer a drafter's attention layer is sized as: the model's first full (unwindowed) KV-caching layer. An
    MTP layer repeats the model's full-attention layer; an EAGLE head's config is not the target's, but SpecForge's
    Llama-family heads keep the target's KV heads and head size (configs/llama3-70B-ealge3.json,
    qwen3-235B-A22B-eagle3.json). Its DeepSeek-V3 head caches 8 KV heads of 128 where the target caches a 576-wide
    latent, 3.6x this layer's bytes (configs/deepseek-v3-671b-eagle3.json): a known undercount of one layer."""
    caching = [L for L in model.layers if L.attention.caches_kv]
    return next((L for L in caching if not L.attention.window), caching[0] if caching else None)


def draft_kv_bytes_per_token_per_gpu(model: ModelArch, precision: Precision, layout: Layout,
                                     method: str | None, head: DraftHead | None = None) -> float:
    """KV bytes per token per GPU of the drafter's attention layers (draft_kv_layers), on the stage that holds them
    (the last; the fit adds them to the largest stage, an upper bound under PP). An EAGLE head described by its
    config (``head``, speculative.DraftHead) counts its own layers and KV heads."""
    if head is not None and method in HEAD_DRAFTERS:
        return head.kv_bytes_per_token_per_gpu(layout.tp, precision.kv_bytes_per_elem)
    n = draft_kv_layers(model, method)
    layer = _draft_layer(model) if n else None   # no layer scan without a drafter (every compile of a plan search)
    return 0.0 if layer is None else n * layer.attention.kv_bytes_per_token(precision.kv_bytes_per_elem, layout.tp)


def uncounted_head_note(method: str) -> str:
    """What fit and perf say of an EAGLE / EAGLE-3 drafter given without its config.json: its weights are unknown."""
    return f"the {method} draft head's weights are not counted (give its config.json: --speculative-draft-config)"


def drafter_weight_bytes_per_gpu(engine: Engine, layout: Layout) -> float:
    """Bytes per GPU of an EAGLE head the user described (Engine.draft_head) when the engine drafts with it (eagle /
    eagle3); 0 otherwise. MTP layers are the checkpoint's own (weight_bytes_per_gpu include_mtp)."""
    head = engine.draft_head
    return 0.0 if head is None or engine.draft_method not in HEAD_DRAFTERS else head.weight_bytes_per_gpu(
        layout.tp)


def recurrent_state_bytes_per_sequence(model: ModelArch, layout: Layout, stage: int | None = None) -> float:
    """Recurrent-state bytes one sequence holds on one GPU of pipeline stage ``stage`` (None: the largest stage's):
    the linear-attention / Mamba layers' constant state (heads split by tp, in the config's state dtype; the part of
    ``kv_bytes_per_sequence`` that does not grow with the context). 0 for a model without such layers."""
    return _stage_sum(model, layout, stage, ("memory.recurrent_state_bytes_per_sequence",),
                      lambda layer: layer.attention.state_bytes_per_sequence(layout.tp))


def kv_bytes_per_sequence(model: ModelArch, precision: Precision, layout: Layout, context: int,
                          block_size: int = 1, chunked_full: bool = False, stage: int | None = None) -> float:
    """KV bytes one sequence of ``context`` tokens needs on one GPU of pipeline stage ``stage`` (None: the largest
    stage's).

    Windows cap a layer at ``window`` tokens; compressed layers keep context/ratio entries plus the window;
    linear-attention layers keep a constant recurrent state (heads split by tp). ``block_size`` rounds each
    layer's tokens up to whole paged blocks (vLLM default 16). ``chunked_full``: chunked-attention layers keep
    the whole context (TensorRT-LLM, which applies the chunk mask to context tokens only).
    """
    if context < 0:
        raise ClusterfitError(f"context must be >= 0 tokens, got {context}")
    if block_size < 1:
        raise ClusterfitError(f"block size must be >= 1 token, got {block_size}")
    kvb = precision.kv_bytes_per_elem
    return _stage_sum(model, layout, stage, ("memory.kv_bytes_per_sequence", kvb, context, block_size, chunked_full),
                      lambda layer: layer.attention.kv_bytes_per_sequence(context, kvb, layout.tp, block_size,
                                                                          chunked_full))


# ================================================================================================
# Runtime reserve and the fit
# ================================================================================================


def activation_bytes_per_gpu(model: ModelArch, layout: Layout, engine: Engine) -> int:
    """Peak activation workspace of one forward pass of ``engine.max_num_batched_tokens`` tokens, per GPU (estimate).

    Live at the peak: the residual stream and a normed copy (2 x hidden), the widest projection output of a layer
    on this GPU (fused QKV, gate+up of the dense MLP, or the MoE's top_k x (gate+up+down) intermediate cache of
    the fused-MoE kernel), in 16-bit; plus fp32 logits for max_num_seqs sampled rows over the vocab shard when the
    engine's profiling run samples that many (``Engine.reserves_sampler_logits``).
    """
    if not model.layers:
        return 0
    T = engine.max_num_batched_tokens
    widest = _widest_activation(model, layout)
    per_token = 2 * model.hidden + widest
    logits = engine.max_num_seqs * model.vocab / layout.tp * 4 if engine.reserves_sampler_logits else 0.0
    return int(T * per_token * 2 + logits)


def _widest_activation(model: ModelArch, layout: Layout) -> float:
    """The widest per-token projection output of a layer on one GPU of ``layout`` (activation_bytes_per_gpu);
    once per (model, tp, moe_tp)."""
    memo = model_memo(model)
    key = ("memory._widest_activation", layout.tp, layout.moe_tp)
    if key in memo:
        return memo[key]
    widest = 0.0
    for layer in model.layers:
        a, f = layer.attention, layer.ffn
        qkv = (a.num_heads * a.head_dim + 2 * max(1, a.num_kv_heads // layout.tp) * a.head_dim * layout.tp) / layout.tp
        widest = max(widest, qkv)
        if f.kind == "dense":
            widest = max(widest, 2 * f.intermediate / layout.tp)
        else:
            widest = max(widest, f.top_k * (3 * f.expert_intermediate / layout.moe_tp) + f.top_k * model.hidden,
                          2 * f.num_shared * f.shared_intermediate / layout.tp)
    memo[key] = widest
    return widest


@dataclass(frozen=True)
class Reserve:
    """Runtime memory per GPU that is neither weights nor KV cache, bytes (which figure is measured is noted)."""

    cuda_context: int          # measured on an H200
    cublas: int                # measured on an H200
    nccl: int                  # estimate; 0 on one GPU
    cuda_graphs: int           # estimate
    activations: int           # estimate, see activation_bytes_per_gpu

    @property
    def total(self) -> int:
        return self.cuda_context + self.cublas + self.nccl + self.cuda_graphs + self.activations

    def as_dict(self) -> dict[str, int]:
        return {"cuda_context": self.cuda_context, "cublas": self.cublas, "nccl": self.nccl,
                "cuda_graphs": self.cuda_graphs, "activations": self.activations, "total": self.total}


def runtime_reserve(model: ModelArch, layout: Layout, engine: Engine) -> Reserve:
    """Reserve per GPU for ``engine`` running ``layout``."""
    return Reserve(CUDA_CONTEXT_BYTES, CUBLAS_BYTES, engine.nccl_bytes if layout.gpus > 1 else 0,
                   engine.cuda_graph_bytes, activation_bytes_per_gpu(model, layout, engine))


def kv_budget_bytes_per_gpu(device_bytes: int, weights: int, reserve: Reserve, engine: Engine) -> int:
    """KV-cache bytes per GPU the engine allocates (may be negative: does not fit).

    vLLM: fraction x device - weights - activations - context/cuBLAS/NCCL (graphs live in the 1-fraction headroom).
    SGLang: fraction x device - weights (activations, graphs and runtime live in the headroom).
    TensorRT-LLM: fraction x (device - weights - all of the reserve).
    """
    fraction = engine.gpu_memory_utilization
    if engine.memory_mode == "free_fraction":
        return int(fraction * (device_bytes - weights - reserve.total))
    if engine.activations_in_fraction:
        budget = fraction * device_bytes - weights - reserve.activations - reserve.cuda_context \
            - reserve.cublas - reserve.nccl
        headroom = (1 - fraction) * device_bytes
        if reserve.cuda_graphs > headroom:
            budget -= reserve.cuda_graphs - headroom
        return int(budget)
    budget = fraction * device_bytes - weights
    headroom = (1 - fraction) * device_bytes
    if reserve.total > headroom:
        budget -= reserve.total - headroom
    return int(budget)


@dataclass(frozen=True)
class Naive:
    """The spreadsheet view: parameters x bytes per parameter against marketed node memory."""

    bytes_per_param: float
    weight_bytes: int
    node_bytes: int
    fits: bool
    nodes_needed: int
    left_bytes: int
    nodes: int = 1   # the nodes ``fits`` and ``left_bytes`` are against

    def as_dict(self) -> dict:
        return {"bytes_per_param": self.bytes_per_param, "weight_bytes": self.weight_bytes,
                "node_bytes": self.node_bytes, "fits": self.fits, "nodes_needed": self.nodes_needed,
                "left_bytes": self.left_bytes, "nodes": self.nodes}


def naive_fit(total_params: float, precision_name: str, system: System, nodes: int = 1) -> Naive:
    """Back-of-envelope fit: ``total_params`` x (2|1|0.5) bytes against marketed GB x gpus_per_node x nodes."""
    bpp = naive_bytes_per_param(precision_name)
    weights = int(round(total_params * bpp))
    node = system.node_memory_bytes
    need = max(1, math.ceil(weights / node))
    return Naive(bpp, weights, node, weights <= node * nodes, need, node * nodes - weights, nodes)


@dataclass(frozen=True)
class ReplicaMemoryFit:
    """The realistic fit of one replica of ``layout`` on ``nodes`` nodes of ``system`` (bytes, per GPU unless named)."""

    system: str
    nodes: int
    gpus: int
    layout: Layout
    engine: str
    context: int
    device_bytes: int
    weight_bytes_per_gpu: int
    weight_bytes_total: int
    reserve: Reserve
    kv_budget_bytes_per_gpu: int
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    kv_bytes_per_sequence_per_gpu: float
    max_kv_tokens: int
    max_sequences: int
    fits: bool
    reason: str
    nodes_needed: int | None = None
    naive: Naive | None = None
    notes: tuple[str, ...] = field(default=())
    memory_fraction: float | None = None  # the engine's fraction on this GPU and layout (Engine.for_layout)
    kv_stage: int = 0  # the pipeline stage that holds the fewest sequences (its budget and KV bytes are shown)

    def as_dict(self) -> dict:
        d = {
            "system": self.system, "nodes": self.nodes, "gpus": self.gpus,
            "layout": {"tp": self.layout.tp, "pp": self.layout.pp, "ep": self.layout.ep, "dp": self.layout.dp},
            "engine": self.engine, "context": self.context, "fits": self.fits, "reason": self.reason,
            "nodes_needed": self.nodes_needed, "device_bytes_per_gpu": self.device_bytes,
            "weight_bytes": self.weight_bytes_total, "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
            "reserve_bytes_per_gpu": self.reserve.as_dict(), "kv_budget_bytes_per_gpu": self.kv_budget_bytes_per_gpu,
            "kv_budget_bytes": max(0, self.kv_budget_bytes_per_gpu) * self.layout.gpus,   # the replica's GPUs
            "kv_bytes_per_token": int(round(self.kv_bytes_per_token)),
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_bytes_per_sequence_per_gpu": self.kv_bytes_per_sequence_per_gpu,
            "max_kv_tokens": self.max_kv_tokens, "max_sequences": self.max_sequences,
            "naive": self.naive.as_dict() if self.naive else None, "notes": list(self.notes),
            "memory_fraction": self.memory_fraction,
        }
        return d


@dataclass(frozen=True)
class _StageCache:
    """One pipeline stage's GPUs: weights, KV budget and what it holds (fit's figures, per GPU; tokens and
    sequences per replica)."""

    stage: int
    weights: int
    budget: int
    kv_pool: float
    state_slots: int | None
    seq_cap: int | None
    per_tok_gpu: float
    per_seq: float
    max_tokens: int
    max_seqs: int


def _stage_cache(model: ModelArch, precision: Precision, lay: Layout, eng: Engine, stage: int, device: int,
                 reserve: Reserve, head: float, draft: float, context: int, block_size: int) -> _StageCache:
    """The KV cache of pipeline stage ``stage``'s GPUs. The drafter's head and attention layers are counted on every
    stage (an upper bound under PP: engines place them on the last). An engine that keeps recurrent states in a
    pool of their own (SGLang) splits the budget: the KV pool holds the tokens, the state pool caps the running
    sequences (Engine.split_state_pool)."""
    w = weight_bytes_per_gpu(model, precision, lay, eng.loads_mtp_layers, stage) + int(math.ceil(head))
    budget = kv_budget_bytes_per_gpu(device, w, reserve, eng)
    per_tok_gpu = kv_bytes_per_token_per_gpu(model, precision, lay, stage) + draft
    per_seq = (kv_bytes_per_sequence(model, precision, lay, context, block_size, eng.chunked_attention_context_only,
                                     stage) + draft * math.ceil(context / block_size) * block_size)
    state = recurrent_state_bytes_per_sequence(model, lay, stage)
    kv_pool, state_slots = eng.split_state_pool(budget, state)
    seq_cap = None
    if state_slots is not None:
        per_seq -= state
        seq_cap = eng.state_pool_running_cap(state_slots)
    max_tokens = max_seqs = 0
    if budget > 0:
        max_tokens = int(kv_pool // per_tok_gpu) * lay.dp if per_tok_gpu > 0 else 0
        per_rank = int(kv_pool // per_seq) if per_seq > 0 else 0
        max_seqs = (per_rank if seq_cap is None else min(per_rank, seq_cap)) * lay.dp
        if per_tok_gpu == 0:
            max_tokens = max_seqs * context
    return _StageCache(stage, w, budget, kv_pool, state_slots, seq_cap, per_tok_gpu, per_seq, max_tokens, max_seqs)


def fit(model: ModelArch, system: System, precision: Precision, layout: Layout | None, nodes: int, engine: Engine,
        context: int = 32768, block_size: int = 16) -> ReplicaMemoryFit:
    """Fit one replica on ``nodes`` nodes of ``system``: weights, reserve, KV budget, max sequences at ``context``.

    ``engine``: the serving engine (clusterfit.engines.get_engine(name), with Engine.with_settings overrides; under
    speculative decoding Engine.for_speculative, whose drafter's weights and KV layers are counted).
    ``layout`` defaults to default_layout over all GPUs of the nodes (TP inside a node, PP across nodes).
    max_kv_tokens counts token slots per replica (per-GPU budget / per-GPU bytes per token x dp groups).
    """
    if nodes < 1 or nodes > 4096:
        raise ClusterfitError(f"nodes must be in 1..4096, got {nodes}")
    if context < 1 or context > 100_000_000:
        raise ClusterfitError(f"context must be in 1..100,000,000 tokens, got {context}")
    gpus = nodes * system.gpus_per_node
    lay = layout or default_layout(model, system, gpus)
    eng = engine.for_layout(system.gpu, lay.tp, lay.pp, lay.dp)  # the engine's defaults for this GPU and layout
    include_mtp = eng.loads_mtp_layers   # mtp drafting loads the checkpoint's MTP layers
    validate_layout(model, lay)
    cut = block_split_problem(model, precision, lay) if eng.name in BLOCK_SPLIT_ENGINES else None
    if cut is not None:
        raise ParameterError(cut.parameter, f"impossible layout {lay.label()} for {model.name} under {eng.name}: "
                             f"{cut.text}")
    if lay.gpus > gpus:
        raise ClusterfitError(f"layout {lay.label()} needs {lay.gpus} GPUs but {nodes} node(s) of {system.id} "
                              f"have {gpus}")
    device = system.gpu.usable_memory_bytes
    head = drafter_weight_bytes_per_gpu(eng, lay)
    w_total = _weight_bytes_total(model, precision, include_mtp) + (  # one copy of the head, as on one GPU
        int(math.ceil(eng.draft_head.weight_bytes_per_gpu(1))) if head else 0)
    reserve = runtime_reserve(model, lay, eng)
    notes: list[str] = []
    if eng.layout_resolved is not None:
        def mine(name: str) -> str:
            return " (yours)" if name in eng.user_set else ""

        notes.append(f"{eng.name}'s settings on this GPU and layout: memory fraction {eng.gpu_memory_utilization:g}"
                     f"{mine('gpu_memory_utilization')}, {eng.max_num_batched_tokens} batched tokens per step per "
                     f"attention-DP rank{mine('max_num_batched_tokens')}, CUDA graphs up to batch "
                     f"{eng.cuda_graph_max_bs} (its defaults by GPU memory and TP where you set none)")
    if not model.layers:
        w = weight_bytes_per_gpu(model, precision, lay, include_mtp) + int(math.ceil(head))
        budget = kv_budget_bytes_per_gpu(device, w, reserve, eng)
        fits = budget > 0
        return ReplicaMemoryFit(system.id, nodes, gpus, lay, eng.name, context, device, w, w_total, reserve, budget, 0.0,
                         0.0, 0.0, 0, 0, fits, "weights fit (no architecture: KV cache unknown)" if fits else
                         "weights and runtime reserve exceed the engine's memory budget", notes=tuple(notes),
                         memory_fraction=eng.gpu_memory_utilization)
    per_tok = kv_bytes_per_token(model, precision)
    draft = draft_kv_bytes_per_token_per_gpu(model, precision, lay, eng.draft_method, eng.draft_head)
    if head:
        notes.append(f"the {eng.draft_method} draft head ({eng.draft_head.source}): {head / 1e9:.2f} GB per GPU")
    elif eng.draft_method in HEAD_DRAFTERS:
        notes.append(uncounted_head_note(eng.draft_method))
    if draft:
        layers = draft_kv_layers(model, eng.draft_method, eng.draft_head)
        notes.append(f"the {eng.draft_method} drafter's {layers} attention layer(s) keep KV in the same cache: "
                     f"+{draft:,.0f} bytes per token per GPU")
    stages = [_stage_cache(model, precision, lay, eng, k, device, reserve, head, draft, context, block_size)
              for k in range(lay.pp)]
    # the stage that holds the fewest sequences of the context binds, fewer tokens breaking a tie. Every stage gets
    # one block count (vLLM v1 kv_cache_utils: the workers' KV cache configs are unified to the smallest num_blocks);
    # where stages mix layer kinds (sliding windows, compressed KV) the stage with the fewest tokens can hold more
    # sequences than another, and the fewest sequences is the bound a replica keeps. The weights shown are the most
    # loaded GPU's
    sc = min(stages, key=lambda c: (c.max_seqs, c.max_tokens))
    w, budget, kv_pool, state_slots, seq_cap = (max(c.weights for c in stages), sc.budget, sc.kv_pool,
                                                sc.state_slots, sc.seq_cap)
    per_tok_gpu, per_seq, max_tokens, max_seqs = sc.per_tok_gpu, sc.per_seq, sc.max_tokens, sc.max_seqs
    groups = lay.dp
    if lay.pp > 1 and len({(c.weights, c.per_tok_gpu, c.per_seq) for c in stages}) > 1:
        r = pipeline_stages(model.num_layers, lay.pp)[sc.stage]
        fewest = ("KV tokens" if sc.max_tokens <= min(c.max_tokens for c in stages)
                  else f"sequences of {context:,} tokens")
        notes.append(f"pipeline stage {sc.stage + 1} of {lay.pp} (layers {r.start}-{r.stop - 1}) holds the fewest "
                     f"{fewest}: its {sc.weights / 1e9:.1f} GB of weights and {per_tok_gpu:,.0f} bytes per token per "
                     f"GPU set the KV budget and max sequences shown; weights GB/GPU is the most loaded stage's")
    if state_slots is not None and budget > 0:
        notes.append(f"{eng.name} keeps the recurrent states in a pool of their own (mamba_full_memory_ratio "
                     f"{eng.mamba_full_memory_ratio:g}): {state_slots:,} states and {kv_pool / 1e9:.2f} GB of KV per "
                     f"GPU, at most {seq_cap:,} running sequences per attention-DP rank")
    if budget > 0:
        running = int(eng.max_num_seqs) * groups * eng.caps_in_flight(lay.pp)   # the engine's cap, as perf's
        if max_seqs > running:
            notes.append(f"the KV cache holds {max_seqs:,} sequences of {context:,} tokens, but {eng.name} runs at "
                         f"most {running:,} at once (max_num_seqs {int(eng.max_num_seqs):,} per rank): max sequences "
                         "shows that cap (the engine's max_num_seqs setting raises it: perf --max-num-seqs)")
            max_seqs = running
    fits = max_seqs >= 1
    if budget <= 0 and eng.gpu_memory_utilization <= 0:
        reason = (f"{eng.name}'s default memory fraction on this GPU and layout is {eng.gpu_memory_utilization:g}: "
                  "the reserve it keeps for activations and CUDA graphs exceeds the device; give "
                  "--gpu-memory-utilization")
    elif budget <= 0:
        reason = (f"weights {sc.weights / 1e9:.1f} GB + reserve {reserve.total / 1e9:.1f} GB per GPU exceed the "
                  f"{eng.name} budget of {eng.gpu_memory_utilization:.2f} x {device / 1e9:.1f} GB")
    elif not fits and seq_cap == 0:
        reason = (f"{eng.name}'s recurrent-state pool holds {state_slots} states per GPU, fewer than the "
                  f"{eng.mamba_states_per_running_request} one running request needs")
    elif not fits:
        reason = f"KV budget {budget / 1e9:.2f} GB per GPU holds no sequence of {context} tokens"
    else:
        reason = f"{max_seqs} sequences of {context} tokens"
    return ReplicaMemoryFit(system.id, nodes, gpus, lay, eng.name, context, device, w, w_total, reserve, budget, per_tok,
                     per_tok_gpu, per_seq, max_tokens, max_seqs, fits, reason, notes=tuple(notes),
                     memory_fraction=eng.gpu_memory_utilization, kv_stage=sc.stage)


def _weight_bytes_total(model: ModelArch, precision: Precision, include_mtp: bool) -> int:
    skip = () if include_mtp else ("mtp",)
    return int(round(sum(precision.bytes_for(c, n) for c, n in model.params.items() if c not in skip)))


def nodes_needed(model: ModelArch, system: System, precision: Precision, engine: Engine,
                 context: int = 32768, block_size: int = 16, max_nodes: int = 64) -> int | None:
    """Smallest node count whose default layout holds the weights and at least one sequence of ``context``."""
    for n in range(1, max_nodes + 1):
        try:
            r = fit(model, system, precision, None, n, engine, context, block_size)
        except ClusterfitError:
            continue
        if r.fits:
            return n
    return None


def smallest_layout(model: ModelArch, system: System, precision: Precision, engine: Engine,
                    min_kv_tokens: int = 32768, max_nodes: int = 8) -> Layout:
    """The default layout over the fewest GPUs (1, 2, 4, ... inside a node, then 1, 2, 3, ... up to ``max_nodes``
    whole nodes, as fit's nodes_needed counts them) that holds the weights and leaves at least ``min_kv_tokens`` KV
    token slots per replica: how a replica is sized when the user gives no layout. Raises ClusterfitError when even
    ``max_nodes`` nodes are not enough."""
    per_node = system.gpus_per_node
    sizes = [2 ** i for i in range(per_node.bit_length()) if 2 ** i < per_node]
    for g in sizes + [n * per_node for n in range(1, max_nodes + 1)]:
        try:
            lay = default_layout(model, system, g)
            r = fit(model, system, precision, lay, math.ceil(g / per_node), engine, context=1)
        except ClusterfitError:
            r = None
        if r is not None and r.kv_budget_bytes_per_gpu > 0 and (r.max_kv_tokens >= min_kv_tokens or not model.layers):
            return lay
    raise ClusterfitError(f"{model.name} at {precision.name} does not fit with {min_kv_tokens:,} KV tokens on up to "
                          f"{max_nodes} nodes of {system.id}")
