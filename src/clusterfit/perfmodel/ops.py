"""FLOPs and bytes of every op of one engine step, on one GPU of a parallel layout.

Pure functions of the architecture (clusterfit.arch), the layout's split factors and the precision's
bytes per element. Nothing here knows about time: perfmodel/kernels.py turns (flops, bytes) into seconds.

Sharding rules (per GPU of a replica with tp, dp, ep, pp):
- attention: heads split over ``tp`` (KV heads replicated when tp > num_kv_heads; the MLA latent is
  replicated on every TP rank); a token lives on one of the ``dp`` attention ranks.
- dense MLP / shared experts: intermediate split over ``tp`` on the attention rank's tokens.
- routed experts: experts split over ``ep`` ranks, each expert's intermediate split over ``moe_tp = tp*dp/ep``;
  a GPU computes the (token, expert) pairs routed to its experts.
- LM head: vocabulary split over ``tp``.

A step's shape is described by token counts *per attention rank* (m) unless a name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arch import FFN, Attention


@dataclass(frozen=True)
class Gemm:
    """y[M, n] = x[M, k] @ W[n, k]^T repeated ``count`` times per step on one GPU.

    component: the parameter component whose format W uses (see clusterfit.arch.COMPONENTS).
    rows: which rows M the GEMM sees: 'tokens' (tokens on this attention rank) or 'logits' (sequences
    that sample this step).
    """

    name: str
    component: str
    n: int
    k: int
    count: int = 1
    rows: str = "tokens"

    def weight_elems(self) -> int:
        return self.n * self.k * self.count


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ------------------------------------------------------------------------------------ attention GEMMs
def attention_gemms(att: Attention, hidden: int, tp: int) -> list[Gemm]:
    """Projection GEMMs of one attention layer on one TP rank (decode form for MLA: absorbed)."""
    if att.kind == "linear":
        return []  # handled by linear_attention_gemms (parameter count based)
    hq = ceil_div(att.num_heads, tp)
    if att.kind == "mla":
        nope = att.head_dim - (att.qk_rope_head_dim or 0)
        rope = att.qk_rope_head_dim or 0
        g = []
        if att.q_lora_rank:
            g.append(Gemm("q_a_proj", "attention", att.q_lora_rank, hidden))
            g.append(Gemm("q_b_proj", "attention", hq * att.head_dim, att.q_lora_rank))
        else:
            g.append(Gemm("q_proj", "attention", hq * att.head_dim, hidden))
        kv_lora = att.kv_lora_rank or 0
        g.append(Gemm("kv_a_proj", "attention", kv_lora + rope, hidden))
        # kv_b_proj [hq*(nope+v), kv_lora]: applied to the query (W_UK) and the output (W_UV) in absorbed form;
        # weights read once, FLOPs the same as projecting per token.
        g.append(Gemm("kv_b_proj", "attention", hq * (nope + att.v_head_dim), kv_lora))
        g.append(Gemm("o_proj", "attention", hidden, hq * att.v_head_dim))
        return g
    hkv = max(1, ceil_div(att.num_kv_heads, tp))
    return [
        Gemm("qkv_proj", "attention", (hq + 2 * hkv) * att.head_dim, hidden),
        Gemm("o_proj", "attention", hidden, hq * att.v_head_dim),
    ]


def linear_attention_gemms(linear_params_per_layer: int, hidden: int, tp: int) -> list[Gemm]:
    """Projections of one linear-attention (Gated DeltaNet / KDA) layer, from its parameter count, split over tp."""
    if linear_params_per_layer <= 0:
        return []
    n = max(1, linear_params_per_layer // hidden // tp)
    return [Gemm("linear_attn_proj", "linear_attention", n, hidden)]


def indexer_gemms(att: Attention, hidden: int, indexer_params_per_layer: int) -> list[Gemm]:
    """DeepSeek sparse-attention lightning indexer projections (replicated on TP ranks)."""
    if not att.index_n_heads or indexer_params_per_layer <= 0:
        return []
    return [Gemm("indexer_proj", "indexer", max(1, indexer_params_per_layer // hidden), hidden)]


# ------------------------------------------------------------------------------ attention core (per token)
def decode_attention_per_token(att: Attention, tp: int, kv_bytes_per_elem: float) -> tuple[float, float]:
    """(flops, bytes) per cached token attended by one decoding query, on one TP rank.

    GQA/MHA: K and V of the rank's KV heads are read (bytes) and every query head does a dot product
    and a weighted sum (2*d + 2*dv FLOPs). MLA absorbed: the latent (kv_lora + rope) is read once for
    all local heads; each head does 2*(kv_lora+rope) + 2*kv_lora FLOPs. Linear attention: 0 (state op).
    """
    if att.kind == "linear":
        return 0.0, 0.0
    hq = ceil_div(att.num_heads, tp)
    if att.kind == "mla":
        kv_lora = att.kv_lora_rank or 0
        lat = kv_lora + (att.qk_rope_head_dim or 0)
        return hq * (2.0 * lat + 2.0 * kv_lora), lat * kv_bytes_per_elem
    hkv = max(1, ceil_div(att.num_kv_heads, tp))
    return hq * (2.0 * att.head_dim + 2.0 * att.v_head_dim), hkv * (att.head_dim + att.v_head_dim) * kv_bytes_per_elem


def prefill_attention_flops_per_pair(att: Attention, tp: int) -> float:
    """FLOPs per (query, key) pair of causal flash attention on one TP rank (MLA: non-absorbed, MHA form)."""
    if att.kind == "linear":
        return 0.0
    hq = ceil_div(att.num_heads, tp)
    return hq * (2.0 * att.head_dim + 2.0 * att.v_head_dim)


def prefill_kv_write_bytes_per_token(att: Attention, tp: int, kv_bytes_per_elem: float) -> float:
    """Bytes written to the KV cache per new token on one TP rank."""
    return decode_attention_per_token(att, tp, kv_bytes_per_elem)[1]


def linear_attention_state_per_seq(att: Attention, tp: int) -> tuple[float, float]:
    """(flops per token, state bytes read+written per decode step per sequence) of a linear-attention layer.

    The recurrent state (``linear_state_elems``, kept in fp32 by the engines) is read and written once per
    decode step; the update costs ~4 FLOPs per state element per token (decay, outer product, read-out).
    """
    if att.kind != "linear" or not att.linear_state_elems:
        return 0.0, 0.0
    elems = att.linear_state_elems / tp
    return 4.0 * elems, 2.0 * 4.0 * elems


def indexer_per_attended_token(att: Attention) -> tuple[float, float]:
    """(flops, bytes) of the DSA lightning indexer per cached token scored by one query (fp8 keys)."""
    if not att.index_n_heads:
        return 0.0, 0.0
    return 2.0 * att.index_n_heads * att.index_head_dim, float(att.index_head_dim)


# ------------------------------------------------------------------------------------------------- FFN
def dense_mlp_gemms(ffn: FFN, hidden: int, tp: int, component: str = "dense_mlp", name: str = "mlp",
                    intermediate: int | None = None) -> list[Gemm]:
    inter = ceil_div(intermediate if intermediate is not None else ffn.intermediate, tp)
    up = 2 * inter if ffn.gated else inter
    return [Gemm(f"{name}_gate_up", component, up, hidden), Gemm(f"{name}_down", component, hidden, inter)]


def expected_distinct_experts(num_experts: int, top_k: int, tokens):
    """E * (1 - (1 - k/E)^B): expected experts touched by B tokens under uniform top-k routing.

    Real routing is skewed (popular experts), which touches fewer distinct experts at small B; uniform is
    the pessimistic (more bytes) case for decode.
    """
    b = np.maximum(np.asarray(tokens, dtype=float), 0.0)
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** b)


def moe_expert_shape(ffn: FFN, hidden: int) -> tuple[int, int]:
    """(model width the experts see, expert intermediate)."""
    return (ffn.latent_dim or hidden), ffn.expert_intermediate


def moe_flops_bytes(ffn: FFN, hidden: int, ep: int, moe_tp: int, tokens, weight_bytes_per_elem: float,
                    act_bytes_per_elem: float = 2.0):
    """(flops, weight_bytes, act_bytes, routed_pairs, active_local_experts) of the routed experts on one GPU.

    tokens: all tokens entering the MoE layer of this replica stage (numpy-broadcasting).
    Pairs routed to this GPU: tokens * k / ep. Active local experts: expected distinct experts of the
    E/ep local ones, each read once (1/moe_tp of it).
    """
    width, inter = moe_expert_shape(ffn, hidden)
    mats = 3 if ffn.gated else 2
    t = np.asarray(tokens, dtype=float)
    pairs = t * ffn.top_k / ep
    local = ffn.num_experts / ep
    active = expected_distinct_experts(ffn.num_experts, ffn.top_k, t) / ep
    active = np.minimum(active, local)
    expert_elems = mats * width * inter / moe_tp
    flops = 2.0 * pairs * expert_elems
    wbytes = active * expert_elems * weight_bytes_per_elem
    abytes = pairs * (width * 2 + mats * inter / moe_tp) * act_bytes_per_elem
    return flops, wbytes, abytes, pairs, active


def ep_max_load_factor(mean_pairs_per_rank, ep: int, load_cv: float = 0.0):
    """Expected (most loaded EP rank's routed pairs) / (mean pairs per rank): the MoE layer waits for it.

    Each of the B*k routed (token, expert) pairs lands on one of ``ep`` ranks; with mean mu pairs per rank the
    count on a rank has variance mu (multinomial, uniform routing) plus (cv*mu)^2 from routing skew (popular
    experts; ``load_cv`` is the relative spread of a rank's load that skew adds, an engine constant). The
    expected maximum of ``ep`` such loads is, by the normal approximation, mu + sigma*sqrt(2 ln ep). Uniform
    routing alone gives a few percent at large batch; skew keeps a floor of 1 + cv*sqrt(2 ln ep).
    """
    mu = np.maximum(np.asarray(mean_pairs_per_rank, dtype=float), 1e-9)
    if ep <= 1:
        return np.ones_like(mu)
    sigma = np.sqrt(mu * (1.0 - 1.0 / ep) + (load_cv * mu) ** 2)
    return 1.0 + sigma * np.sqrt(2.0 * np.log(ep)) / mu


def moe_side_gemms(ffn: FFN, hidden: int, tp: int) -> list[Gemm]:
    """Router, shared experts and latent projections of one MoE layer on one attention rank."""
    g = [Gemm("router", "router", ffn.num_experts, hidden)]
    if ffn.num_shared and ffn.shared_intermediate:
        g += dense_mlp_gemms(ffn, hidden, tp, component="shared_experts", name="shared",
                             intermediate=ffn.num_shared * ffn.shared_intermediate)
    if ffn.latent_dim:
        g += [Gemm("moe_latent_down", "routed_experts", ffn.latent_dim, hidden),
              Gemm("moe_latent_up", "routed_experts", hidden, ffn.latent_dim)]
    return g


# ---------------------------------------------------------------------------------------- element-wise
def elementwise_bytes_per_token(hidden: int, ffn: FFN, tp: int, act_bytes_per_elem: float = 2.0) -> float:
    """Bytes moved per token per layer by norms, rotary, residual adds and the gated activation.

    Two RMSNorms (read + write hidden, plus residual read/write), rotary on q/k (~hidden), and the
    activation (read gate+up, write) on the local intermediate.
    """
    inter = (ffn.intermediate if ffn.kind == "dense" else ffn.num_shared * ffn.shared_intermediate) / tp
    return (8.0 * hidden + 2.0 * hidden + 3.0 * inter) * act_bytes_per_elem


def lm_head_gemm(vocab: int, hidden: int, tp: int) -> Gemm:
    return Gemm("lm_head", "lm_head", ceil_div(vocab, tp), hidden, rows="logits")


def sampling_bytes_per_seq(vocab: int, tp: int) -> float:
    """Logits read by softmax / top-p sampling per sampled sequence (fp32, gathered over tp)."""
    return 2.0 * 4.0 * vocab
