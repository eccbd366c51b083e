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

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..arch import FFN
from ..attention import Attention, ceil_div


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


# ------------------------------------------------------------------------------------ attention GEMMs
def attention_gemms(att: Attention, hidden: int, tp: int) -> list[Gemm]:
    """Projection GEMMs of one attention layer on one TP rank (the kind's ``projections``; MLA in absorbed form;
    linear attention: none here, see linear_attention_gemms)."""
    return [Gemm(name, "attention", n, k) for name, n, k in att.projections(hidden, tp)]


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


_ERF = np.frompyfunc(math.erf, 1, 1)


def normal_cdf(z: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Standard-normal CDF, elementwise (a zero spread gives z = +-inf or nan: 1, 0, and 1 for nan)."""
    zz = np.nan_to_num(np.asarray(z, dtype=float), nan=40.0, posinf=40.0, neginf=-40.0)
    return 0.5 * (1.0 + _ERF(zz / math.sqrt(2.0)).astype(float))


@functools.lru_cache(maxsize=64)
def expected_max_std_normal(n: int) -> float:
    """E[max of ``n`` independent standard normal variables]: the integral of x * n * phi(x) * Phi(x)^(n-1) over x,
    by the trapezoid rule on [-12, 12] (0 for n = 1; 0.5642 for n = 2, 1.0294 for 4, 1.4236 for 8, 1.7660 for 16:
    the order-statistics tables, e.g. Harter 1961, Biometrika 48, 151-165)."""
    if n <= 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 2401)   # the trapezoid rule on a Gaussian integrand: exact to 1e-15 at this step
    pdf = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    return float(np.trapezoid(x * n * pdf * normal_cdf(x) ** (n - 1), x))


def ep_busiest_rank_experts(mean_active, local: float, ep: int):
    """Expected distinct local experts the busiest of ``ep`` expert-parallel ranks runs, given the mean rank's
    ``mean_active`` of its ``local`` = E/ep experts (moe_flops_bytes' ``active``).

    Under uniform top-k routing each local expert is touched with probability p = mean_active / local, so a rank's
    count has variance ~local*p*(1-p); the layer waits for the rank that touched the most, whose expected count is
    mean_active + sqrt(local*p*(1-p)) * E[max of ep standard normals], at most local. It is the weight-streaming
    counterpart of ep_max_load_factor: a rank reads each touched expert once, so at small batches the busiest rank
    reads ~2.4x the mean (DeepSeek-V3 at EP8, one token: 8 of 256 experts over 8 ranks, 1.0 touched per rank on
    average, 2.40 on the busiest; a Monte Carlo draw gives 2.55, tests/test_perf_model.py); with every local expert
    touched (large batches) it is ``local`` on every rank."""
    m = np.asarray(mean_active, dtype=float)
    if ep <= 1:
        return m
    p = np.clip(m / local, 0.0, 1.0)
    return np.minimum(local, m + np.sqrt(local * p * (1.0 - p)) * expected_max_std_normal(ep))


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
