"""Attention kinds: what each kind of token mixer costs, caches and how it splits over tensor parallelism.

One class per kind, each recognised explicitly from config.json fields (``attention_for_layer``):

==========================  =====================================  ===============================================
class                       recognised by                          what it caches per token and layer
==========================  =====================================  ===============================================
``SoftmaxAttention``        default (MHA / GQA / MQA)              K and V of the KV heads (2 x kv_heads x head_dim)
``SlidingWindowAttention``  layer_types 'sliding_attention', or    the same, for the last ``window`` tokens only
                            Mistral/Mixtral ``sliding_window``
``ChunkedAttention``        layer_types 'chunked_attention' +      the same, for the tokens of the current chunk
                            ``attention_chunk_size`` (Llama-4)     (whole context where the engine masks prefill only)
``MLAttention``             ``kv_lora_rank`` (DeepSeek-V3, Kimi)   the latent + rope key (kv_lora_rank + rope dim)
``SparseMLAttention``       MLA + ``index_topk`` / index_n_heads   MLA latent + the lightning indexer's fp8 key
                            (DeepSeek-V3.2, GLM-5.x: DSA)          (+ fp32 scale); decode attends top-k keys
``BlockSparseAttention``    MiniMax-M3 ``sparse_attention_config``  K and V of the KV heads + one index key per token;
                            (MSA) on its sparse layers             decode attends the top-k blocks of 128 tokens
``DeltaNetAttention``       layer_types 'linear_attention'         nothing per token: a constant recurrent state
                            (Qwen3-Next / Qwen3.5 GDN),            per sequence (conv state + recurrent state)
                            linear_attn_config kda_layers (KDA)
``Mamba2Mixer``             ``hybrid_override_pattern`` 'M'        nothing per token: conv state + SSM state per
                            (nemotron_h)                           sequence
``CompressedAttention``     ``compress_ratios`` (DeepSeek-V4)      one shared 512-wide KV vector per ``ratio``
                                                                   tokens (+ indexer key), plus the 128-token window
==========================  =====================================  ===============================================

Each kind owns: its parameter count per layer (``params``, ``indexer_params``, from the config), its TP rule
(``kv_heads_per_rank``, ``kv_split_ok``, ``replicated_params``), its KV bytes per token and per sequence on one TP
rank, the keys a query attends (``decode_window``, ``attended_keys``), and the per-key FLOPs/bytes the performance
model needs (``projections``, ``decode_cost``, ``prefill_flops_per_pair``, ``index_cost``, ``state_cost``).
TP rule in one line: softmax KV heads are split over TP, replicated when TP exceeds them; the MLA latent (and
DeepSeek-V4's shared KV vector) is replicated on every TP rank; linear-attention and Mamba-2 state is split by
heads.

Pure functions of the config: this module imports nothing of clusterfit but the error type.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

AttnKind = Literal["mha", "gqa", "mqa", "mla", "linear"]

#: Bytes per element of linear-attention state when the config names no state dtype: vLLM keeps Mamba / GDN state
#: in the model dtype unless ``mamba_ssm_cache_dtype`` says otherwise (vllm/model_executor/layers/mamba/
#: mamba_utils.py ``MambaStateDtypeCalculator``: conv state = model dtype, temporal state = the SSM cache dtype,
#: 'auto' = the conv state's).
LINEAR_STATE_BYTES = 2.0
#: Bytes per element of the state dtypes a config.json may name (``mamba_ssm_dtype``, ``mamba_ssm_cache_dtype``).
STATE_DTYPE_BYTES = {"float32": 4.0, "fp32": 4.0, "bfloat16": 2.0, "bf16": 2.0, "float16": 2.0, "fp16": 2.0}
#: MiniMax-M3 (MSA) index keys: one bf16 vector per token and layer (vLLM MiniMaxM3IndexerCache, indexer_kv_dtype
#: default 'bf16'; docs.vllm.ai/en/latest/api/vllm/models/minimax_m3, read 2026-12).
MSA_INDEX_BYTES_PER_ELEM = 2.0
#: DeepSeek sparse-attention indexer keys: 128 fp8 values + one fp32 scale per token and layer (vLLM layout).
INDEXER_BYTES_PER_ELEM = 1.0
INDEXER_SCALE_BYTES = 4.0
#: Latent values per fp32 scale in FlashMLA's sparse fp8 KV record (SparseMLAttention.latent_bytes_per_token)
FLASHMLA_FP8_GROUP = 128

#: One projection GEMM of an attention layer on one TP rank: (name, n, k) of y[M, n] = x[M, k] @ W[n, k]^T.
Projection = tuple[str, int, int]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _blocks(tokens: int, block_size: int) -> int:
    """``tokens`` rounded up to whole paged blocks of ``block_size``."""
    return math.ceil(tokens / block_size) * block_size


@dataclass(frozen=True)
class Attention(ABC):
    """One layer's token mixer (the fields every kind shares; behaviour in the subclasses, one per kind).

    kind: mha / gqa / mqa (softmax attention with num_kv_heads == / < / == 1 num_heads), mla (latent), linear.
    head_dim: query/key head dim (for MLA: qk_nope + qk_rope); v_head_dim: value head dim.
    window: sliding window or chunk length in tokens (the layer keeps at most this many tokens of KV), or None.
    chunked: the window is a chunked-attention chunk (Llama-4 ``chunked_attention`` layers: a token attends only the
        tokens of its own ``window``-aligned chunk, on average fewer than a sliding window of the same length).
    MLA: kv_lora_rank (latent cached per token), qk_rope_head_dim (rope key cached per token), q_lora_rank.
    kv_compress_ratio: DeepSeek-V4 compressed attention keeps one KV entry per this many tokens (1 = none).
    linear_state_elems: per-sequence recurrent state of a linear-attention layer (elements, constant in length),
        conv state included.
    index_head_dim / index_n_heads / index_topk: DeepSeek sparse-attention indexer (cached keys per token when
        index_cached is True; layers that reuse another layer's indexer cache nothing).
    params / indexer_params: parameter count of this layer's mixer and of its own sparse-attention indexer.
    sinks: the layer adds a learned sink logit per head to its softmax (gpt-oss, MiMo-V2-Flash, DeepSeek-V4): a
        kernel must support sinks to run it (the engine's choice of attention backend, engines.Engine.sink_prefill_scale).
    """

    kind: AttnKind
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    window: int | None = None
    chunked: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    kv_compress_ratio: int = 1
    linear_state_elems: int = 0
    linear_kind: str | None = None
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    index_cached: bool = False
    params: int = 0
    indexer_params: int = 0
    sinks: bool = False

    #: The parameter component (arch.COMPONENTS) this kind's weights belong to.
    param_component: ClassVar[str] = "attention"
    #: Softmax-style attention over cached keys (False: a recurrent state, no per-token KV).
    caches_kv: ClassVar[bool] = True

    # ---- description ------------------------------------------------------------------------------------------
    def label(self) -> str:
        """How `clusterfit model` names the layer, e.g. 'gqa window 1024', 'mla + sparse indexer'."""
        label: str = self.kind
        if self.window:
            label += f" window {self.window}"
        if self.kv_compress_ratio > 1:
            label += f" compressed 1/{self.kv_compress_ratio}"
        if self.index_n_heads:
            label += " + sparse indexer"
        return label

    # ---- TP rule ----------------------------------------------------------------------------------------------
    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads one TP rank holds: split over tp, one full head per rank when tp exceeds them."""
        return max(1, ceil_div(self.num_kv_heads, tp))

    def kv_split_ok(self, tp: int) -> bool:
        """Whether ``tp`` ranks can share the KV heads evenly (split them, or replicate them evenly)."""
        return True

    def replicated_params(self, hidden: int, tp: int) -> float:
        """Parameters of this layer every TP rank holds in full (the rest is split 1/tp)."""
        return 0.0

    # ---- KV cache ---------------------------------------------------------------------------------------------
    def kv_elems_per_token(self, tp: int | None = None) -> float:
        """Cached elements per token on one TP rank (``tp=None``: one unsharded copy); no window cap."""
        return 0.0  # a recurrent state (see kv_bytes_per_sequence)

    def indexer_bytes_per_token(self) -> float:
        """Sparse-attention indexer key bytes cached per token (0 without an own indexer)."""
        return 0.0

    def kv_bytes_per_token(self, kv_bytes_per_elem: float, tp: int | None = None) -> float:
        """KV bytes per token on one TP rank (``tp=None``: one copy), indexer keys included; no window cap."""
        return self.kv_elems_per_token(tp) * kv_bytes_per_elem + self.indexer_bytes_per_token()

    def kv_tokens(self, context: int, chunked_full: bool = False) -> int:
        """Tokens of KV the layer keeps for a sequence of ``context`` tokens."""
        return context

    def kv_bytes_per_sequence(self, context: int, kv_bytes_per_elem: float, tp: int, block_size: int = 1,
                              chunked_full: bool = False) -> float:
        """KV bytes (or state bytes) one sequence of ``context`` tokens holds in this layer on one TP rank, each
        layer's tokens rounded up to whole paged blocks. ``chunked_full``: chunked layers keep the whole context."""
        return _blocks(self.kv_tokens(context, chunked_full), block_size) * self.kv_bytes_per_token(kv_bytes_per_elem, tp)

    # ---- attended keys ----------------------------------------------------------------------------------------
    def decode_window(self, chunked_context_only: bool = False) -> int:
        """Tokens of KV a decoding query reads (0: the whole context)."""
        return self.window or 0

    def attended_keys(self, context: int) -> float:
        """Keys one new token attends with ``context`` cached tokens."""
        return float(context)

    # ---- FLOPs and bytes --------------------------------------------------------------------------------------
    @abstractmethod
    def flops_per_token(self, context: int) -> float:
        """Attention score + value FLOPs of one new token attending ``context`` cached tokens (indexer included)."""

    @abstractmethod
    def projections(self, hidden: int, tp: int) -> list[Projection]:
        """Projection GEMMs of one layer on one TP rank (component 'attention'; [] where counted otherwise)."""

    @abstractmethod
    def decode_cost(self, tp: int, kv_bytes_per_elem: float) -> tuple[float, float]:
        """(flops, bytes) per cached key attended by one decoding query, on one TP rank."""

    def prefill_flops_per_pair(self, tp: int) -> float:
        """FLOPs per (query, key) pair of causal flash attention on one TP rank (MLA: non-absorbed, MHA form)."""
        return ceil_div(self.num_heads, tp) * (2.0 * self.head_dim + 2.0 * self.v_head_dim)

    def index_cost(self) -> tuple[float, float]:
        """(flops, bytes) of the sparse-attention indexer per cached key scored by one query (fp8 keys); 0 without
        an own indexer (a layer sharing another layer's indexer reuses its top-k). The bytes are the cached key's, as
        the memory model counts them: fp8 elements and one fp32 scale (_indexer_key_bytes before compression)."""
        if not (self.index_n_heads and self.index_cached):
            return 0.0, 0.0
        return (2.0 * self.index_n_heads * self.index_head_dim,
                self.index_head_dim * INDEXER_BYTES_PER_ELEM + INDEXER_SCALE_BYTES)

    def state_cost(self, tp: int) -> tuple[float, float]:
        """(flops per token, state bytes read + written per decode step per sequence) of a recurrent state."""
        return 0.0, 0.0

    def state_bytes_per_sequence(self, tp: int) -> float:
        """Recurrent-state bytes one sequence holds in this layer on one TP rank (0: the layer caches KV instead)."""
        return 0.0

    def trtllm_bench_kv_shape(self, hidden: int) -> tuple[int, int]:
        """(KV heads, head size) trtllm-bench's own KV estimate assumes for this layer (tuning.py)."""
        return self.num_kv_heads, self.head_dim


# ================================================================================================
# Softmax attention: full, sliding window, chunked
# ================================================================================================


@dataclass(frozen=True)
class SoftmaxAttention(Attention):
    """MHA / GQA / MQA over the whole context. TP: KV heads split over tp; when tp exceeds them each rank keeps
    one full KV head (and its K/V projection), so tp must divide the KV heads or be a multiple of them.

    Keys have ``head_dim`` and values ``v_head_dim`` elements per KV head (MiMo-V2-Flash: 192 and 128).
    ``k_is_v``: the checkpoint has no V projection, the key is reused as the value (Gemma 4 full-attention layers,
    ``attention_k_eq_v``); the engine still caches both (vLLM gemma4.py loads K into the K and V slots)."""

    k_is_v: bool = False

    def kv_split_ok(self, tp: int) -> bool:
        kv = self.num_kv_heads
        return not (kv % tp and tp % kv)

    def replicated_params(self, hidden: int, tp: int) -> float:
        if self.num_kv_heads >= tp:
            return 0.0
        v_dim = 0 if self.k_is_v else self.v_head_dim
        kv_proj = hidden * self.num_kv_heads * (self.head_dim + v_dim)
        # each GPU keeps one full KV head (vLLM QKVParallelLinear: tp / num_kv replicas of each): the KV
        # projection is kv_proj / num_kv per GPU, not kv_proj / tp. The memory model charges (total - r) / tp + r per
        # GPU, so the r that gives kv_proj / num_kv is kv_proj (1/num_kv - 1/tp) / (1 - 1/tp)
        return kv_proj * (1.0 / self.num_kv_heads - 1.0 / tp) * tp / (tp - 1)

    def kv_elems_per_token(self, tp: int | None = None) -> float:
        heads = self.num_kv_heads if tp is None else self.kv_heads_per_rank(tp)
        return heads * (self.head_dim + self.v_head_dim) / self.kv_compress_ratio

    def flops_per_token(self, context: int) -> float:
        """2 x heads x (qk_dim + v_dim) x attended keys (QK^T and PV multiply-adds)."""
        return 2.0 * self.num_heads * (self.head_dim + self.v_head_dim) * self.attended_keys(context)

    def projections(self, hidden: int, tp: int) -> list[Projection]:
        hq = ceil_div(self.num_heads, tp)
        hkv = self.kv_heads_per_rank(tp)
        v_dim = 0 if self.k_is_v else self.v_head_dim
        return [("qkv_proj", (hq + hkv) * self.head_dim + hkv * v_dim, hidden), ("o_proj", hidden, hq * self.v_head_dim)]

    def decode_cost(self, tp: int, kv_bytes_per_elem: float) -> tuple[float, float]:
        """K and V of the rank's KV heads are read; every query head does a dot product and a weighted sum."""
        hq = ceil_div(self.num_heads, tp)
        hkv = self.kv_heads_per_rank(tp)
        return (hq * (2.0 * self.head_dim + 2.0 * self.v_head_dim),
                hkv * (self.head_dim + self.v_head_dim) * kv_bytes_per_elem)


@dataclass(frozen=True)
class SlidingWindowAttention(SoftmaxAttention):
    """Softmax attention over the last ``window`` tokens: keeps and reads at most ``window`` tokens of KV."""

    def kv_tokens(self, context: int, chunked_full: bool = False) -> int:
        return min(context, self.window) if self.window else context

    def attended_keys(self, context: int) -> float:
        return min(float(context), float(self.window)) if self.window else float(context)


@dataclass(frozen=True)
class ChunkedAttention(SlidingWindowAttention):
    """Llama-4 chunked attention: a token attends the tokens of its own ``window``-aligned chunk. Engines that
    apply the chunk mask to context (prefill) tokens only keep and read the whole context when decoding."""

    def kv_tokens(self, context: int, chunked_full: bool = False) -> int:
        return context if chunked_full else super().kv_tokens(context)

    def decode_window(self, chunked_context_only: bool = False) -> int:
        return 0 if chunked_context_only else super().decode_window()


@dataclass(frozen=True)
class BlockSparseAttention(SoftmaxAttention):
    """MiniMax-M3 sparse attention (MSA): GQA whose K/V cache keeps the whole context, plus a lightning indexer.
    Each KV group has one index-query head (``index_n_heads`` = KV heads) scoring one shared index key per cached
    token (``index_head_dim`` wide, bf16 side cache); each query then attends the top ``index_topk`` keys
    (sparse_topk_blocks x sparse_block_size, the local block included). Source: vLLM MiniMaxM3SparseAttention /
    MiniMaxM3IndexerCache (docs.vllm.ai/en/latest/api/vllm/models/minimax_m3, read 2026-12): "a single key vector
    per token (num_kv_heads == 1)", index_q "the same head count as the KV heads"."""

    def indexer_bytes_per_token(self) -> float:
        return self.index_head_dim * MSA_INDEX_BYTES_PER_ELEM if self.index_cached else 0.0

    def attended_keys(self, context: int) -> float:
        return min(float(context), float(self.index_topk)) if self.index_topk else float(context)

    def flops_per_token(self, context: int) -> float:
        """The indexer scores every cached key (2 x index heads x index dim each), then softmax attention over
        the top-k keys."""
        return 2.0 * self.index_n_heads * self.index_head_dim * context + super().flops_per_token(context)

    def index_cost(self) -> tuple[float, float]:
        """(flops, bytes) per scored key: every index head dots the shared bf16 index key (all heads on one rank;
        under TP the index heads split with the KV groups, so this is the tp=1 cost, an upper bound)."""
        if not self.index_cached:
            return 0.0, 0.0
        return 2.0 * self.index_n_heads * self.index_head_dim, self.index_head_dim * MSA_INDEX_BYTES_PER_ELEM


# ================================================================================================
# Multi-head latent attention (DeepSeek-V3, Kimi-K2) and its DSA sparse variant (DeepSeek-V3.2, GLM-5.x)
# ================================================================================================


@dataclass(frozen=True)
class MLAttention(Attention):
    """MLA: caches the kv_lora_rank latent + the rope key per token, replicated on every TP rank (absorbed decode
    reads it once for all local heads). The low-rank down-projections q_a / kv_a are replicated on TP ranks."""

    def replicated_params(self, hidden: int, tp: int) -> float:
        q_down = (hidden * self.q_lora_rank + self.q_lora_rank) if self.q_lora_rank else 0
        kv_down = hidden * ((self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)) + (self.kv_lora_rank or 0)
        return float(q_down + kv_down)

    def kv_elems_per_token(self, tp: int | None = None) -> float:
        return float((self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0))

    def flops_per_token(self, context: int) -> float:
        """Absorbed form: per head the key is the latent + rope (kv_lora + rope) and the value the latent."""
        lat = (self.kv_lora_rank or 0) * 2 + (self.qk_rope_head_dim or 0)
        return 2.0 * self.num_heads * lat * self.attended_keys(context)

    def projections(self, hidden: int, tp: int) -> list[Projection]:
        """Decode form (absorbed): kv_b_proj [hq*(nope+v), kv_lora] is applied to the query (W_UK) and the output
        (W_UV); weights read once, FLOPs the same as projecting per token."""
        hq = ceil_div(self.num_heads, tp)
        rope = self.qk_rope_head_dim or 0
        nope = self.head_dim - rope
        kv_lora = self.kv_lora_rank or 0
        g: list[Projection] = []
        if self.q_lora_rank:
            g += [("q_a_proj", self.q_lora_rank, hidden), ("q_b_proj", hq * self.head_dim, self.q_lora_rank)]
        else:
            g.append(("q_proj", hq * self.head_dim, hidden))
        g += [("kv_a_proj", kv_lora + rope, hidden), ("kv_b_proj", hq * (nope + self.v_head_dim), kv_lora),
              ("o_proj", hidden, hq * self.v_head_dim)]
        return g

    def decode_cost(self, tp: int, kv_bytes_per_elem: float) -> tuple[float, float]:
        """The latent (kv_lora + rope) is read once for all local heads; each head does 2*(kv_lora+rope) +
        2*kv_lora FLOPs."""
        hq = ceil_div(self.num_heads, tp)
        kv_lora = self.kv_lora_rank or 0
        lat = kv_lora + (self.qk_rope_head_dim or 0)
        return hq * (2.0 * lat + 2.0 * kv_lora), lat * kv_bytes_per_elem

    def trtllm_bench_kv_shape(self, hidden: int) -> tuple[int, int]:
        return self.num_heads, hidden // max(self.num_heads, 1)


def _indexer_key_bytes(a: Attention) -> float:
    """Indexer key bytes per token of a layer with its own indexer (one per compressed entry)."""
    if not a.index_cached:
        return 0.0
    return (a.index_head_dim * INDEXER_BYTES_PER_ELEM + INDEXER_SCALE_BYTES) / a.kv_compress_ratio


@dataclass(frozen=True)
class SparseMLAttention(MLAttention):
    """MLA + DeepSeek sparse attention (DSA): a lightning indexer scores every cached key (its own fp8 key per token,
    cached where the layer owns an indexer; replicated on TP ranks) and the query attends only the top-k."""

    def indexer_bytes_per_token(self) -> float:
        return _indexer_key_bytes(self)

    def latent_bytes_per_token(self, kv_bytes_per_elem: float) -> float:
        """Bytes of one token's cached latent + rope key. An fp8 cache stores FlashMLA's sparse fp8 record: the
        kv_lora latent in fp8 with an fp32 scale per 128 values, the rope key in bf16 (512 + 16 + 128 = 656 bytes for
        DeepSeek-V3.2 / GLM-5: vLLM FlashMLASparseBackend.get_kv_cache_shape, 'fp8_ds_mla', 'custom storage format is
        656 bytes, see FlashMLA readme'; vLLM converts an fp8 cache of these models to it)."""
        lora, rope = self.kv_lora_rank or 0, self.qk_rope_head_dim or 0
        if kv_bytes_per_elem == 1.0:
            return lora + math.ceil(lora / FLASHMLA_FP8_GROUP) * 4.0 + rope * 2.0
        return (lora + rope) * kv_bytes_per_elem

    def kv_bytes_per_token(self, kv_bytes_per_elem: float, tp: int | None = None) -> float:
        return self.latent_bytes_per_token(kv_bytes_per_elem) + self.indexer_bytes_per_token()

    def decode_cost(self, tp: int, kv_bytes_per_elem: float) -> tuple[float, float]:
        flops, _ = super().decode_cost(tp, kv_bytes_per_elem)
        return flops, self.latent_bytes_per_token(kv_bytes_per_elem)

    def flops_per_token(self, context: int) -> float:
        idx = 0.0
        if self.index_topk and self.index_n_heads:
            idx = 2.0 * self.index_n_heads * self.index_head_dim * (context / self.kv_compress_ratio)
        return idx + super().flops_per_token(context)

    def attended_keys(self, context: int) -> float:
        n = float(context)
        return min(n, float(self.index_topk)) if self.index_topk and self.index_n_heads else n


# ================================================================================================
# Linear attention (Qwen3-Next Gated DeltaNet, Kimi Delta Attention)
# ================================================================================================


@dataclass(frozen=True)
class DeltaNetAttention(Attention):
    """Linear attention: a constant recurrent state per sequence (``linear_state_elems``, conv state included),
    heads split over TP; no per-token KV. Projections are costed from the parameter count (perfmodel.ops).

    ``conv_state_elems`` of the state are the short convolutions' inputs, kept in the model dtype; the rest is the
    recurrent state, kept in ``state_bytes_per_elem`` (the config's ``mamba_ssm_dtype``, else the model dtype:
    vLLM Qwen3_5ForConditionalGenerationConfig sets mamba_ssm_cache_dtype from it, mamba_utils.py)."""

    conv_state_elems: int = 0
    state_bytes_per_elem: float = LINEAR_STATE_BYTES

    param_component: ClassVar[str] = "linear_attention"
    caches_kv: ClassVar[bool] = False

    def label(self) -> str:
        return f"linear ({self.linear_kind})"

    def state_bytes_per_sequence(self, tp: int) -> float:
        """State bytes one sequence holds in this layer on one TP rank (heads split over tp)."""
        recurrent = self.linear_state_elems - self.conv_state_elems
        return (recurrent * self.state_bytes_per_elem + self.conv_state_elems * LINEAR_STATE_BYTES) / tp

    def kv_bytes_per_sequence(self, context: int, kv_bytes_per_elem: float, tp: int, block_size: int = 1,
                              chunked_full: bool = False) -> float:
        return self.state_bytes_per_sequence(tp)

    def flops_per_token(self, context: int) -> float:
        """A constant 4 x heads x dk x dv per token."""
        return 4.0 * self.num_heads * self.head_dim * self.v_head_dim

    def projections(self, hidden: int, tp: int) -> list[Projection]:
        return []

    def decode_cost(self, tp: int, kv_bytes_per_elem: float) -> tuple[float, float]:
        return 0.0, 0.0

    def prefill_flops_per_pair(self, tp: int) -> float:
        return 0.0

    def state_cost(self, tp: int) -> tuple[float, float]:
        """The state (kept in fp32 by the engines) is read and written once per decode step; the update costs
        ~4 FLOPs per state element per token (decay, outer product, read-out)."""
        if not self.linear_state_elems:
            return 0.0, 0.0
        elems = self.linear_state_elems / tp
        return 4.0 * elems, 2.0 * 4.0 * elems


@dataclass(frozen=True)
class Mamba2Mixer(DeltaNetAttention):
    """``blocks`` consecutive Mamba-2 (SSD) mixer blocks of a nemotron_h layer (vLLM MambaMixer2), each with per
    sequence a conv state of (conv_kernel - 1) x (intermediate + 2 x groups x d_state) in the model dtype and an SSM
    state of heads x head_dim x d_state in ``mamba_ssm_cache_dtype`` (float32 for nemotron_h: vLLM
    NemotronHForCausalLMConfig takes it from the HF config, default float32). Heads (``num_heads``, ``head_dim``),
    groups (``ssm_groups``) and the intermediate split over TP; one group is copied to every rank (vLLM
    MambaStateShapeCalculator.extra_groups_for_head_shards). ``v_head_dim`` holds d_state. ``params``, state,
    FLOPs and bytes are those of all ``blocks`` blocks (arch.py folds a Mamba block that has no MLP after it into
    the Mamba layer before it, see arch._nemotron_plan)."""

    ssm_groups: int = 1
    conv_kernel: int = 4
    blocks: int = 1

    def label(self) -> str:
        return "linear (mamba2)" if self.blocks == 1 else f"linear (mamba2 x{self.blocks})"

    def kv_split_ok(self, tp: int) -> bool:
        """vLLM MambaMixer2: TP must divide the groups, or the model has one group (replicated on every rank)."""
        return self.ssm_groups % tp == 0 or self.ssm_groups == 1

    def _conv_elems(self, tp: int) -> float:
        """Conv-state elements of one block on one TP rank."""
        groups = self.ssm_groups if self.ssm_groups % tp == 0 else tp
        inter = self.num_heads * self.head_dim
        return (self.conv_kernel - 1) * (inter + 2 * groups * self.v_head_dim) / tp

    def _ssm_elems(self, tp: int) -> float:
        """SSM-state elements of one block on one TP rank."""
        return self.num_heads * self.head_dim * self.v_head_dim / tp

    def state_bytes_per_sequence(self, tp: int) -> float:
        return self.blocks * (self._ssm_elems(tp) * self.state_bytes_per_elem
                              + self._conv_elems(tp) * LINEAR_STATE_BYTES)

    def _state_flops(self, tp: int) -> float:
        """Per SSM state element: decay, the B x (dt x) update and the C read-out (5 FLOPs); per conv channel
        2 x kernel FLOPs; all blocks, one TP rank."""
        per_channel = 2.0 * self.conv_kernel / (self.conv_kernel - 1)
        return self.blocks * (5.0 * self._ssm_elems(tp) + per_channel * self._conv_elems(tp))

    def flops_per_token(self, context: int) -> float:
        return self._state_flops(1)

    def state_cost(self, tp: int) -> tuple[float, float]:
        """(FLOPs per token, bytes read + written per decode step per sequence) on one TP rank: the state is read
        and written once per step, in its own dtypes (the same bytes the memory model holds)."""
        return self._state_flops(tp), 2.0 * self.state_bytes_per_sequence(tp)


# ================================================================================================
# DeepSeek-V4 compressed attention
# ================================================================================================


@dataclass(frozen=True)
class CompressedAttention(SlidingWindowAttention):
    """DeepSeek-V4: one shared KV vector of ``head_dim`` (keys = values) per ``kv_compress_ratio`` tokens, plus the
    last ``window`` tokens uncompressed; layers with ratio <= 4 own a sparse indexer whose query attends the top-k
    compressed entries. Ratio 1: the sliding window only. The shared vector is replicated on every TP rank; the
    perf model and the weight split treat the layer as MQA (one KV head)."""

    def kv_elems_per_token(self, tp: int | None = None) -> float:
        return float(self.head_dim) / self.kv_compress_ratio

    def indexer_bytes_per_token(self) -> float:
        return _indexer_key_bytes(self)

    def kv_bytes_per_sequence(self, context: int, kv_bytes_per_elem: float, tp: int, block_size: int = 1,
                              chunked_full: bool = False) -> float:
        """Compressed: context/ratio entries (+ their indexer keys) plus the window's uncompressed tokens."""
        r = self.kv_compress_ratio
        if r <= 1:
            return super().kv_bytes_per_sequence(context, kv_bytes_per_elem, tp, block_size, chunked_full)
        per_tok = self.kv_elems_per_token(tp) * kv_bytes_per_elem
        full = self.kv_elems_per_token(tp) * r * kv_bytes_per_elem
        entries = math.ceil(context / r)
        return (_blocks(entries, block_size) * (per_tok + self.indexer_bytes_per_token()) * r
                + _blocks(min(context, self.window or 0), block_size) * full)

    def attended_keys(self, context: int) -> float:
        r, w = self.kv_compress_ratio, self.window or 0
        n = super().attended_keys(context) if r == 1 else context / r + w
        return min(n, float(self.index_topk) + w) if self.index_topk and self.index_n_heads else n

    def flops_per_token(self, context: int) -> float:
        idx = 0.0
        if self.index_topk and self.index_n_heads:
            idx = 2.0 * self.index_n_heads * self.index_head_dim * (context / self.kv_compress_ratio)
        return idx + super().flops_per_token(context)


# ================================================================================================
# config.json -> the kind of each layer, with its parameter counts
# ================================================================================================


def _cfg(d: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


#: Layer types a config's ``layer_types`` may name (plus the internal ones arch.py derives from other fields:
#: 'minimax_sparse_attention' from MiniMax-M3's sparse_attention_freq, 'mamba' from nemotron_h's pattern).
LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention",
               "minimax_sparse_attention", "mamba")


def attention_for_layer(t: dict[str, Any], i: int, ltype: str, hidden: int, n_heads: int, n_kv: int,
                        model_type: str, blocks: int = 1) -> Attention:
    """The token mixer of decoder layer ``i`` (``ltype``: its ``layer_types`` entry), recognised from the config:
    ``compress_ratios`` -> DeepSeek-V4 compressed attention; ``linear_attn_config.kda_layers`` -> Kimi Delta
    Attention; layer type 'linear_attention' -> Gated DeltaNet; 'mamba' -> Mamba-2; 'minimax_sparse_attention' ->
    MiniMax-M3 block-sparse attention; ``kv_lora_rank`` -> MLA, with ``index_topk`` / ``index_n_heads`` -> MLA +
    DSA; otherwise softmax attention (sliding window / chunked per layer type, per-layer head shapes where the
    config gives them). ``blocks``: consecutive Mamba-2 blocks the layer holds. A layer type clusterfit does not
    know is refused ("unsupported architecture")."""
    from .errors import ClusterfitError

    if ltype not in LAYER_TYPES:
        raise ClusterfitError(f"unsupported architecture: layer type '{ltype}' (layer {i}) in layer_types; "
                              f"known: {', '.join(LAYER_TYPES[:4])}")
    lin_cfg = t.get("linear_attn_config")
    if isinstance(t.get("compress_ratios"), list):
        return _compressed_attention(t, i, hidden, n_heads)
    if isinstance(lin_cfg, dict) and (i + 1) in set(lin_cfg.get("kda_layers", [])):
        return _kda_attention(lin_cfg, hidden)
    if ltype == "linear_attention":
        return _gdn_attention(t, hidden)
    if ltype == "mamba":
        return _mamba2_mixer(t, hidden, blocks)
    if t.get("kv_lora_rank") is not None:
        return _mla_attention(t, i, hidden, n_heads)
    return _softmax_attention(t, ltype, hidden, n_heads, n_kv, model_type, i)


def _head_shapes(t: dict[str, Any], ltype: str, hidden: int, n_heads: int, n_kv: int,
                 model_type: str) -> tuple[int, int, int, int, int | None, bool]:
    """(query heads, KV heads, key head dim, value head dim, window, K reused as V) of one softmax layer.

    Per-layer shapes: Gemma 4 full-attention layers use ``global_head_dim`` and, with ``attention_k_eq_v``,
    ``num_global_key_value_heads`` and no V projection (vLLM gemma4.py Gemma4DecoderLayer); MiMo-V2-Flash sliding
    layers use the ``swa_*`` heads and dims and ``sliding_window_size`` (vLLM mimo_v2_flash.py)."""
    d = int(_cfg(t, "head_dim", default=hidden // n_heads))
    dv = int(_cfg(t, "v_head_dim", default=d))
    window = int(t["sliding_window"]) if t.get("sliding_window") else None
    k_is_v = False
    if model_type.startswith("gemma4") and ltype == "full_attention":
        d = dv = int(_cfg(t, "global_head_dim", default=d))
        if t.get("attention_k_eq_v"):
            n_kv, k_is_v = int(_cfg(t, "num_global_key_value_heads", default=n_kv)), True
    if model_type == "mimo_v2_flash" and ltype == "sliding_attention":
        n_heads = int(_cfg(t, "swa_num_attention_heads", default=n_heads))
        n_kv = int(_cfg(t, "swa_num_key_value_heads", default=n_kv))
        d = int(_cfg(t, "swa_head_dim", default=d))
        dv = int(_cfg(t, "swa_v_head_dim", default=d))
        window = int(_cfg(t, "sliding_window_size", "sliding_window"))
    return n_heads, n_kv, d, dv, window, k_is_v


def _qk_norm_params(t: dict[str, Any], model_type: str, n_heads: int, n_kv: int, d: int) -> int:
    """q_norm + k_norm weights: one head_dim vector each (per head), or over all heads (MiniMax-M2
    ``qk_norm_type: per_layer``: q_norm [heads x head_dim], k_norm [kv_heads x head_dim])."""
    on = (model_type.startswith(("qwen3", "gemma3", "gemma4", "step3p")) or bool(t.get("use_qk_norm")))
    if not on:
        return 0
    if t.get("qk_norm_type") == "per_layer":
        return (n_heads + n_kv) * d
    return 2 * d


#: Model types whose ``sliding_window`` applies to every layer (no ``layer_types``): Mistral / Mixtral v0.1 and
#: StarCoder2 (transformers modeling_starcoder2.py and vLLM's starcoder2.py pass config.sliding_window to every
#: layer's attention).
WINDOW_ON_EVERY_LAYER = ("mistral", "mixtral", "starcoder2")


def _softmax_attention(t: dict[str, Any], ltype: str, hidden: int, n_heads: int, n_kv: int,
                       model_type: str, i: int = 0) -> Attention:
    n_heads, n_kv, d, dv, window, k_is_v = _head_shapes(t, ltype, hidden, n_heads, n_kv, model_type)
    if min(n_heads, n_kv, d, dv) <= 0 or n_heads % n_kv:
        from .errors import ClusterfitError

        raise ClusterfitError(f"config: layer {i} has {n_heads} query heads and {n_kv} KV heads of {d}/{dv}: the "
                              "query heads must be a positive multiple of the KV heads")
    cls: type[SoftmaxAttention] = SoftmaxAttention
    if ltype == "sliding_attention" and window:
        cls = SlidingWindowAttention
    elif ltype == "chunked_attention" and t.get("attention_chunk_size"):
        cls, window = ChunkedAttention, int(t["attention_chunk_size"])
    elif ltype == "full_attention" and window and model_type in WINDOW_ON_EVERY_LAYER \
            and t.get("use_sliding_window", True) and "layer_types" not in t:
        cls = SlidingWindowAttention
    else:
        window = None
    kind = "mha" if n_kv == n_heads else ("mqa" if n_kv == 1 else "gqa")
    # gated attention: q_proj also produces the output gate (Qwen3-Next, Qwen3.5 attn_output_gate)
    gated_q = model_type == "qwen3_next" or t.get("attn_output_gate") is True
    p = hidden * n_heads * d * (2 if gated_q else 1) + hidden * n_kv * (d + (0 if k_is_v else dv)) \
        + n_heads * dv * hidden
    if t.get("attention_bias"):
        p += n_heads * d + n_kv * (d + (0 if k_is_v else dv))
        if model_type in ("llama", "gpt_oss", "falcon", "gpt_neox", "phi", "starcoder2", "nemotron"):
            p += hidden  # o_proj bias (the dense projection of Falcon, GPT-NeoX and Phi)
    p += _qk_norm_params(t, model_type, n_heads, n_kv, d)
    if t.get("use_head_wise_attn_gate"):
        p += hidden * n_heads  # Step-3.5 g_proj: one sigmoid gate per head
    sinks = model_type == "gpt_oss" or (model_type == "mimo_v2_flash" and bool(
        t.get("add_swa_attention_sink_bias") if cls is SlidingWindowAttention else t.get("add_full_attention_sink_bias")))
    if sinks:
        p += n_heads  # attention sinks: one learned logit per head
    if ltype == "minimax_sparse_attention":
        return _block_sparse_attention(t, i, hidden, n_heads, n_kv, d, p)
    return cls(cast(AttnKind, kind), n_heads, n_kv, d, dv, window=window, chunked=cls is ChunkedAttention, params=p,
               k_is_v=k_is_v, sinks=sinks)


def _block_sparse_attention(t: dict[str, Any], i: int, hidden: int, n_heads: int, n_kv: int, d: int,
                            p: int) -> Attention:
    """MiniMax-M3 MSA layer: the GQA layer's weights (``p``) plus the indexer: index_q [hidden x index heads x
    index dim], index_k [hidden x index dim] and their norms (vLLM MinimaxM3QKVParallelLinearWithIndexer fuses
    q, k, v, index_q, index_k in one GEMM; index_q_norm / index_k_norm one index-dim vector each)."""
    from .errors import ClusterfitError

    sc = t.get("sparse_attention_config")
    if not isinstance(sc, dict):
        raise ClusterfitError("config: sparse_attention_config must be an object")
    sizes: dict[str, int] = {}
    for key in ("sparse_num_index_heads", "sparse_index_dim", "sparse_topk_blocks", "sparse_block_size"):
        v = sc.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ClusterfitError(f"config: sparse_attention_config.{key} must be a positive integer, got {v!r}")
        sizes[key] = v
    heads, dim = sizes["sparse_num_index_heads"], sizes["sparse_index_dim"]
    blocks, block = sizes["sparse_topk_blocks"], sizes["sparse_block_size"]
    no_value = sc.get("sparse_disable_index_value")
    if isinstance(no_value, list):
        no_value = no_value[i] if i < len(no_value) else None
    if sc.get("sparse_score_type", "max") != "max" or no_value is not None and not no_value:
        raise ClusterfitError(f"unsupported architecture: MiniMax sparse attention with an index value projection "
                              f"(sparse_disable_index_value off, layer {i}) or a score type other than 'max'")
    p_idx = hidden * heads * dim + hidden * dim + 2 * dim
    kind = "mha" if n_kv == n_heads else ("mqa" if n_kv == 1 else "gqa")
    return BlockSparseAttention(cast(AttnKind, kind), n_heads, n_kv, d, d, index_n_heads=heads, index_head_dim=dim,
                                index_topk=blocks * block, index_cached=True, params=p, indexer_params=p_idx)


def _mla_attention(t: dict[str, Any], i: int, hidden: int, n_heads: int) -> Attention:
    q_lora = t.get("q_lora_rank")
    kv_lora = int(t["kv_lora_rank"])
    rope = int(_cfg(t, "qk_rope_head_dim", default=64))
    nope = int(_cfg(t, "qk_nope_head_dim", default=128))
    v = int(_cfg(t, "v_head_dim", default=nope))
    qk = nope + rope
    if q_lora:
        p = hidden * q_lora + q_lora + q_lora * n_heads * qk
    else:
        p = hidden * n_heads * qk
    p += hidden * (kv_lora + rope) + kv_lora + kv_lora * n_heads * (nope + v) + n_heads * v * hidden
    if t.get("mla_use_output_gate"):
        p += hidden * n_heads * v
    idx_heads = int(t.get("index_n_heads") or 0)
    idx_dim = int(t.get("index_head_dim") or 0)
    if not (idx_heads or t.get("index_topk")):
        return MLAttention("mla", n_heads, n_heads, qk, v, q_lora_rank=q_lora, kv_lora_rank=kv_lora,
                           qk_rope_head_dim=rope, params=p)
    types = t.get("indexer_types")
    own = bool(idx_heads) and not (isinstance(types, list) and i < len(types) and types[i] == "shared")
    # wq_b [q_lora -> heads*dim], wk [hidden -> dim], k_norm (LayerNorm w+b), weights_proj [hidden -> heads]
    p_idx = (q_lora or hidden) * idx_heads * idx_dim + hidden * idx_dim + 2 * idx_dim + hidden * idx_heads if own else 0
    return SparseMLAttention("mla", n_heads, n_heads, qk, v, q_lora_rank=q_lora, kv_lora_rank=kv_lora,
                             qk_rope_head_dim=rope, index_n_heads=idx_heads, index_head_dim=idx_dim,
                             index_topk=int(t.get("index_topk") or 0), index_cached=own, params=p,
                             indexer_params=p_idx)


def _compressed_attention(t: dict[str, Any], i: int, hidden: int, n_heads: int) -> Attention:
    """DeepSeek-V4: one shared 512-wide KV head, low-rank q, grouped low-rank output, KV compression per layer
    (``compress_ratios[i]``: 0 = none); layers with ratio <= 4 own a sparse indexer."""
    d = int(t["head_dim"])
    q_lora = int(t["q_lora_rank"])
    o_groups = int(t.get("o_groups") or 1)
    o_lora = int(t.get("o_lora_rank") or hidden)
    ratios = t.get("compress_ratios") or []
    ratio = int(ratios[i]) if i < len(ratios) else 0
    p = hidden * q_lora + q_lora + q_lora * n_heads * d + hidden * d + d
    p += n_heads * d * o_lora + o_groups * o_lora * hidden
    p += n_heads  # attention sinks
    p_idx = 0
    idx_heads = int(t.get("index_n_heads") or 0)
    idx_dim = int(t.get("index_head_dim") or 0)
    own_idx = 1 < ratio <= 4 and idx_heads > 0
    if ratio > 1:
        # compressor: KV and gate projections into the compressed entry + positional bias per ratio slot
        p += 2 * hidden * d + ratio * d
        if own_idx:
            p_idx = q_lora * idx_heads * idx_dim + hidden * idx_heads + 2 * hidden * idx_dim + ratio * idx_dim
    return CompressedAttention("mqa", n_heads, 1, d, d, window=int(t.get("sliding_window") or 0) or None,
                               q_lora_rank=q_lora, kv_compress_ratio=max(ratio, 1),
                               index_n_heads=idx_heads if 1 < ratio <= 4 else 0, index_head_dim=idx_dim,
                               index_topk=int(t.get("index_topk") or 0), index_cached=own_idx, params=p,
                               indexer_params=p_idx, sinks=True)


def _state_dtype_bytes(t: dict[str, Any], key: str, default: float = LINEAR_STATE_BYTES) -> float:
    """Bytes per recurrent-state element from the config's state dtype field ``key``, else ``default``."""
    from .errors import ClusterfitError

    name = t.get(key)
    if name is None:
        return default
    if str(name) not in STATE_DTYPE_BYTES:
        raise ClusterfitError(f"config: {key} {name!r} is not one of {', '.join(STATE_DTYPE_BYTES)}")
    return STATE_DTYPE_BYTES[str(name)]


def _gdn_attention(t: dict[str, Any], hidden: int) -> Attention:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): state nv x dk x dv + the short convolutions' (kernel - 1) inputs.
    Weights: in_proj_qkvz [hidden x (2 nk dk + 2 nv dv)], in_proj_ba [hidden x 2 nv], conv1d [conv_dim x kernel],
    dt_bias and A_log [nv], the gated norm [dv], out_proj [nv dv x hidden] (Qwen3.5 splits in_proj into qkv / z / b /
    a with the same shapes)."""
    nk, dk = int(t["linear_num_key_heads"]), int(t["linear_key_head_dim"])
    nv, dv = int(t["linear_num_value_heads"]), int(t["linear_value_head_dim"])
    conv = int(t.get("linear_conv_kernel_dim") or 4)
    conv_dim = 2 * nk * dk + nv * dv
    conv_state = conv_dim * (conv - 1)
    state = nv * dk * dv + conv_state
    p = (hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv + conv_dim * conv + 2 * nv + dv
         + nv * dv * hidden)
    return DeltaNetAttention("linear", nv, nv, dk, dv, linear_state_elems=state, linear_kind="gated_deltanet",
                             params=p, conv_state_elems=conv_state,
                             state_bytes_per_elem=_state_dtype_bytes(t, "mamba_ssm_dtype"))


def _mamba2_mixer(t: dict[str, Any], hidden: int, blocks: int = 1) -> Attention:
    """Mamba-2 mixer of a nemotron_h 'M' block (vLLM MambaMixer2 with intermediate = mamba_num_heads x
    mamba_head_dim): in_proj [hidden x (2 I + 2 G N + H)] (z, x, B, C, dt), conv1d [(I + 2 G N) x kernel] (+ bias
    with use_conv_bias), dt_bias / A / D [H], the gated RMSNorm [I], out_proj [I x hidden] (+ biases with
    use_bias)."""
    from .errors import ClusterfitError

    vals = {}
    for key in ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel"):
        v = t.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ClusterfitError(f"config: field '{key}' must be a positive integer for Mamba-2 layers, got {v!r}")
        vals[key] = v
    h, pdim, n, g, k = (vals["mamba_num_heads"], vals["mamba_head_dim"], vals["ssm_state_size"], vals["n_groups"],
                        vals["conv_kernel"])
    if h % g:
        raise ClusterfitError(f"config: mamba_num_heads ({h}) must be a multiple of n_groups ({g})")
    inter = h * pdim
    conv_dim = inter + 2 * g * n
    p = hidden * (2 * inter + 2 * g * n + h) + conv_dim * k + 3 * h + inter + inter * hidden
    if t.get("use_conv_bias", True):
        p += conv_dim
    if t.get("use_bias"):
        p += 2 * inter + 2 * g * n + h + hidden
    state = h * pdim * n + conv_dim * (k - 1)
    return Mamba2Mixer("linear", h, h, pdim, n, linear_state_elems=blocks * state, linear_kind="mamba2",
                       params=blocks * p, conv_state_elems=blocks * conv_dim * (k - 1), ssm_groups=g, conv_kernel=k,
                       blocks=blocks,
                       # absent: float32, vLLM NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE ("Only float32
                       # is known to have no accuracy issues by default")
                       state_bytes_per_elem=_state_dtype_bytes(t, "mamba_ssm_cache_dtype", 4.0))


def _kda_attention(lc: dict[str, Any], hidden: int) -> Attention:
    """Kimi Delta Attention (``linear_attn_config``): state h x d x d + the q/k/v convolutions' inputs."""
    h, d = int(lc["num_heads"]), int(lc["head_dim"])
    conv = int(lc.get("short_conv_kernel_size") or 4)
    state = h * d * d + 3 * h * d * (conv - 1)
    hd = h * d
    p = 3 * hidden * hd + 3 * hd * conv          # q, k, v projections and their short convolutions
    p += hidden * d + d * hd + hidden * h        # forget-gate low-rank (f_a, f_b) and beta
    p += hidden * hd if lc.get("use_full_rank_gate") else hidden * d + d * hd  # output gate
    p += h + hd + d + hd * hidden                # A_log, dt_bias, output norm, o_proj
    return DeltaNetAttention("linear", h, h, d, d, linear_state_elems=state, linear_kind="kda", params=p)
