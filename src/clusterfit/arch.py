"""Model architecture from a Hugging Face config.json: layers, attention kinds, MoE, parameter and FLOP counts.

Everything here is a pure function of the config dict. Counts are exact element counts of the
checkpoint's tensors as the config defines them (weights, biases, norms), grouped by component so that
memory and performance models can give each group its own precision and sharding rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

AttnKind = Literal["mha", "gqa", "mqa", "mla", "linear"]

#: Parameter components. Sharding rule per component lives in memory.py.
COMPONENTS = (
    "embedding",        # input token embedding [vocab, hidden]
    "lm_head",          # output projection [vocab, hidden] (0 when tied to the embedding)
    "attention",        # q/k/v/o projections (or MLA down/up projections), their biases, q/k norms, sinks, gates
    "linear_attention", # Gated DeltaNet / KDA projections, convolutions, gates
    "indexer",          # DeepSeek sparse-attention lightning indexer (wq, wk, head weights)
    "dense_mlp",        # dense FFN layers (gate/up/down)
    "shared_experts",   # MoE shared experts
    "routed_experts",   # MoE routed experts (all of them)
    "router",           # MoE gate [n_experts, hidden] (+ bias / correction bias)
    "norms",            # layer norms, final norm, hyper-connection mixers
    "mtp",              # multi-token-prediction (NextN) layers: not in the published totals, loaded only for speculative decoding
    "vision",           # vision tower + projector (multimodal checkpoints)
)


@dataclass(frozen=True)
class Attention:
    """One layer's token mixer.

    kind: mha / gqa / mqa (softmax attention with num_kv_heads == / < / == 1 num_heads), mla (latent), linear.
    head_dim: query/key head dim (for MLA: qk_nope + qk_rope); v_head_dim: value head dim.
    window: sliding window or chunk length in tokens (the layer keeps at most this many tokens of KV), or None.
    MLA: kv_lora_rank (latent cached per token), qk_rope_head_dim (rope key cached per token), q_lora_rank.
    kv_compress_ratio: DeepSeek-V4 compressed attention keeps one KV entry per this many tokens (1 = none).
    linear_state_elems: per-sequence recurrent state of a linear-attention layer (elements, constant in length),
        conv state included.
    index_head_dim / index_n_heads / index_topk: DeepSeek sparse-attention indexer (cached keys per token when
        index_cached is True; layers that reuse another layer's indexer cache nothing).
    """

    kind: AttnKind
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    window: int | None = None
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


@dataclass(frozen=True)
class FFN:
    """One layer's feed-forward block.

    dense: ``intermediate`` wide gated MLP (3 matrices of hidden x intermediate; 2 for non-gated).
    moe: ``num_experts`` routed experts of ``expert_intermediate`` each, ``top_k`` per token, plus
    ``num_shared`` shared experts of ``shared_intermediate`` each. ``latent_dim``: routed experts work in a
    projected latent space of this width (Kimi-K3 latent MoE), else None.
    """

    kind: Literal["dense", "moe"]
    intermediate: int = 0
    num_experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    num_shared: int = 0
    shared_intermediate: int = 0
    latent_dim: int | None = None
    gated: bool = True


@dataclass(frozen=True)
class Layer:
    attention: Attention
    ffn: FFN


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only LLM.

    params: element counts per component (see COMPONENTS); total_params excludes 'mtp' and 'vision'.
    layers: one entry per decoder layer, in order (MTP layers not included).
    quantization: the checkpoint's weight format per component, from quantization_config (see precision.py).
    """

    name: str
    hidden: int
    vocab: int
    layers: tuple[Layer, ...]
    params: dict[str, int]
    tie_embeddings: bool = False
    mtp_layers: int = 0
    hf_id: str | None = None
    model_type: str = ""
    torch_dtype: str = "bfloat16"
    quantization: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    source: str = ""
