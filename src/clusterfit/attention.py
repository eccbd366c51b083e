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
``DeltaNetAttention``       layer_types 'linear_attention'         nothing per token: a constant recurrent state
                            (Qwen3-Next GDN), linear_attn_config   per sequence
                            kda_layers (Kimi Delta Attention)
``CompressedAttention``     ``compress_ratios`` (DeepSeek-V4)      one shared 512-wide KV vector per ``ratio``
                                                                   tokens (+ indexer key), plus the 128-token window
==========================  =====================================  ===============================================

Each kind owns: its parameter count per layer (``params``, ``indexer_params``, from the config), its TP rule
(``kv_heads_per_rank``, ``kv_split_ok``, ``replicated_params``), its KV bytes per token and per sequence on one TP
rank, the keys a query attends (``decode_window``, ``attended_keys``), and the per-key FLOPs/bytes the performance
model needs (``projections``, ``decode_cost``, ``prefill_flops_per_pair``, ``index_cost``, ``state_cost``).
TP rule in one line: softmax KV heads are split over TP, replicated when TP exceeds them; the MLA latent (and
DeepSeek-V4's shared KV vector) is replicated on every TP rank; linear-attention state is split by heads.

Pure functions of the config: this module imports nothing of clusterfit but the error type.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

AttnKind = Literal["mha", "gqa", "mqa", "mla", "linear"]

#: Bytes per element of linear-attention recurrent state (vLLM keeps Mamba/GDN state in the model dtype).
LINEAR_STATE_BYTES = 2.0
#: DeepSeek sparse-attention indexer keys: 128 fp8 values + one fp32 scale per token and layer (vLLM layout).
INDEXER_BYTES_PER_ELEM = 1.0
INDEXER_SCALE_BYTES = 4.0

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
        an own indexer (a layer sharing another layer's indexer reuses its top-k)."""
        if not (self.index_n_heads and self.index_cached):
            return 0.0, 0.0
        return 2.0 * self.index_n_heads * self.index_head_dim, float(self.index_head_dim)

    def state_cost(self, tp: int) -> tuple[float, float]:
        """(flops per token, state bytes read + written per decode step per sequence) of a recurrent state."""
        return 0.0, 0.0

    def trtllm_bench_kv_shape(self, hidden: int) -> tuple[int, int]:
        """(KV heads, head size) trtllm-bench's own KV estimate assumes for this layer (tuning.py)."""
        return self.num_kv_heads, self.head_dim


# ================================================================================================
# Softmax attention: full, sliding window, chunked
# ================================================================================================


@dataclass(frozen=True)
class SoftmaxAttention(Attention):
    """MHA / GQA / MQA over the whole context. TP: KV heads split over tp; when tp exceeds them each rank keeps
    one full KV head (and its K/V projection), so tp must divide the KV heads or be a multiple of them."""

    def kv_split_ok(self, tp: int) -> bool:
        kv = self.num_kv_heads
        return not (kv % tp and tp % kv)

    def replicated_params(self, hidden: int, tp: int) -> float:
        if self.num_kv_heads >= tp:
            return 0.0
        kv_proj = 2 * hidden * self.num_kv_heads * self.head_dim
        # each GPU keeps one full KV head: the KV projection is 1/num_kv per GPU instead of 1/tp
        return kv_proj * (1.0 / self.num_kv_heads - 1.0 / tp) * tp

    def kv_elems_per_token(self, tp: int | None = None) -> float:
        heads = self.num_kv_heads if tp is None else self.kv_heads_per_rank(tp)
        return 2.0 * heads * self.head_dim / self.kv_compress_ratio

    def flops_per_token(self, context: int) -> float:
        """2 x heads x (qk_dim + v_dim) x attended keys (QK^T and PV multiply-adds)."""
        return 2.0 * self.num_heads * (self.head_dim + self.v_head_dim) * self.attended_keys(context)

    def projections(self, hidden: int, tp: int) -> list[Projection]:
        hq = ceil_div(self.num_heads, tp)
        hkv = self.kv_heads_per_rank(tp)
        return [("qkv_proj", (hq + 2 * hkv) * self.head_dim, hidden), ("o_proj", hidden, hq * self.v_head_dim)]

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
    heads split over TP; no per-token KV. Projections are costed from the parameter count (perfmodel.ops)."""

    param_component: ClassVar[str] = "linear_attention"
    caches_kv: ClassVar[bool] = False

    def label(self) -> str:
        return f"linear ({self.linear_kind})"

    def kv_bytes_per_sequence(self, context: int, kv_bytes_per_elem: float, tp: int, block_size: int = 1,
                              chunked_full: bool = False) -> float:
        return self.linear_state_elems / tp * LINEAR_STATE_BYTES

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


def attention_for_layer(t: dict[str, Any], i: int, ltype: str, hidden: int, n_heads: int, n_kv: int,
                        model_type: str) -> Attention:
    """The token mixer of decoder layer ``i`` (``ltype``: its ``layer_types`` entry), recognised from the config:
    ``compress_ratios`` -> DeepSeek-V4 compressed attention; ``linear_attn_config.kda_layers`` -> Kimi Delta
    Attention; layer type 'linear_attention' -> Gated DeltaNet; ``kv_lora_rank`` -> MLA, with ``index_topk`` /
    ``index_n_heads`` -> MLA + DSA; otherwise softmax attention (sliding window / chunked per layer type)."""
    lin_cfg = t.get("linear_attn_config")
    if isinstance(t.get("compress_ratios"), list):
        return _compressed_attention(t, i, hidden, n_heads)
    if isinstance(lin_cfg, dict) and (i + 1) in set(lin_cfg.get("kda_layers", [])):
        return _kda_attention(lin_cfg, hidden)
    if ltype == "linear_attention":
        return _gdn_attention(t, hidden)
    if t.get("kv_lora_rank") is not None:
        return _mla_attention(t, i, hidden, n_heads)
    return _softmax_attention(t, ltype, hidden, n_heads, n_kv, model_type)


def _softmax_attention(t: dict[str, Any], ltype: str, hidden: int, n_heads: int, n_kv: int,
                       model_type: str) -> Attention:
    d = int(_cfg(t, "head_dim", default=hidden // n_heads))
    cls: type[SoftmaxAttention] = SoftmaxAttention
    window = None
    if ltype in ("sliding_attention",) and t.get("sliding_window"):
        cls, window = SlidingWindowAttention, int(t["sliding_window"])
    elif ltype == "chunked_attention" and t.get("attention_chunk_size"):
        cls, window = ChunkedAttention, int(t["attention_chunk_size"])
    elif ltype == "full_attention" and t.get("sliding_window") and model_type in ("mistral", "mixtral") \
            and t.get("use_sliding_window", True) and "layer_types" not in t:
        cls, window = SlidingWindowAttention, int(t["sliding_window"])
    kind = "mha" if n_kv == n_heads else ("mqa" if n_kv == 1 else "gqa")
    gated_q = model_type == "qwen3_next"  # gated attention: q_proj also produces the output gate
    p = hidden * n_heads * d * (2 if gated_q else 1) + 2 * hidden * n_kv * d + n_heads * d * hidden
    if t.get("attention_bias"):
        p += n_heads * d + 2 * n_kv * d
        if model_type in ("llama", "gpt_oss"):
            p += hidden  # o_proj bias
    if model_type in ("qwen3", "qwen3_moe", "qwen3_next") or t.get("use_qk_norm") or model_type.startswith("gemma3"):
        p += 2 * d  # q_norm, k_norm
    if model_type == "gpt_oss":
        p += n_heads  # attention sinks
    return cls(cast(AttnKind, kind), n_heads, n_kv, d, d, window=window, chunked=cls is ChunkedAttention, params=p)


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
                               indexer_params=p_idx)


def _gdn_attention(t: dict[str, Any], hidden: int) -> Attention:
    """Qwen3-Next Gated DeltaNet: state nv x dk x dv + the short convolutions' (kernel - 1) inputs."""
    nk, dk = int(t["linear_num_key_heads"]), int(t["linear_key_head_dim"])
    nv, dv = int(t["linear_num_value_heads"]), int(t["linear_value_head_dim"])
    conv = int(t.get("linear_conv_kernel_dim") or 4)
    state = nv * dk * dv + (2 * nk * dk + nv * dv) * (conv - 1)
    conv_dim = 2 * nk * dk + nv * dv
    p = (hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv + conv_dim * conv + 2 * nv + dv
         + nv * dv * hidden)
    return DeltaNetAttention("linear", nv, nv, dk, dv, linear_state_elems=state, linear_kind="gated_deltanet",
                             params=p)


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
