"""Model architecture from a Hugging Face config.json: layers, attention kinds, MoE, parameter and FLOP counts.

Everything here is a pure function of the config dict. Counts are exact element counts of the
checkpoint's tensors as the config defines them (weights, biases, norms), grouped by component so that
memory and performance models can give each group its own precision and sharding rule.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Literal

from .attention import Attention, attention_for_layer
from .errors import ClusterfitError


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
    expert_bias: bool = False


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
    #: Longest sequence (prompt + output) the model serves: config.json ``max_position_embeddings`` (None: not
    #: given, no check).
    max_context: int | None = None

    # ---- derived views -------------------------------------------------------------------------

    @property
    def total_params(self) -> int:
        """Parameters of the language model as model cards count them: everything but MTP layers and vision."""
        return sum(v for k, v in self.params.items() if k not in ("mtp", "vision"))

    @property
    def active_params(self) -> int:
        """Parameters touched per token: total minus the routed experts a token does not use (embeddings included)."""
        inactive = 0.0
        for layer in self.layers:
            f = layer.ffn
            if f.kind == "moe" and f.num_experts:
                inactive += _expert_params(self.hidden, f) * (f.num_experts - f.top_k)
        return int(round(self.total_params - inactive))

    @property
    def active_params_excl_embedding(self) -> int:
        """Active parameters without the input embedding (the convention of gpt-oss and Qwen model cards)."""
        return self.active_params - self.params.get("embedding", 0)

    @property
    def active_params_non_embedding(self) -> int:
        """Active parameters without the input embedding and the LM head (Qwen/GLM "non-embedding" convention)."""
        return self.active_params_excl_embedding - self.params.get("lm_head", 0)

    @property
    def is_moe(self) -> bool:
        return any(layer.ffn.kind == "moe" for layer in self.layers)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def attention_kinds(self) -> dict[str, int]:
        """Layer count per attention description, e.g. {'gqa': 80} or {'linear (gated_deltanet)': 36, 'gqa': 12}."""
        out: dict[str, int] = {}
        for layer in self.layers:
            label = layer.attention.label()
            out[label] = out.get(label, 0) + 1
        return out

    def ffn_kinds(self) -> dict[str, int]:
        """Layer count per FFN kind: 'dense', 'moe'."""
        out: dict[str, int] = {}
        for layer in self.layers:
            out[layer.ffn.kind] = out.get(layer.ffn.kind, 0) + 1
        return out


#: Per-model memo of derived figures (see model_memo): id(model) -> (weak reference, memo).
_MEMO: dict[int, tuple[weakref.ref[ModelArch], dict[Any, Any]]] = {}


def model_memo(model: ModelArch) -> dict[Any, Any]:
    """A dict that lives as long as ``model``, for figures that depend only on the model and a few hashable arguments
    (per-layer walks the performance and memory models repeat for every layout of a search). A ModelArch is frozen
    (its layers a tuple), so a figure computed once stays valid; callers key their entries by their own name and
    arguments and store exactly what the uncached code computes (results are bit-identical)."""
    key = id(model)
    entry = _MEMO.get(key)
    if entry is not None and entry[0]() is model:
        return entry[1]
    memo: dict[Any, Any] = {}

    def forget(_ref: weakref.ref[ModelArch]) -> None:  # runs when the model is freed, before its id can be reused
        _MEMO.pop(key, None)

    _MEMO[key] = (weakref.ref(model, forget), memo)
    return memo


# ================================================================================================
# Parameter counting (pure functions of the layer specs)
# ================================================================================================


def _mlp_params(hidden: int, intermediate: int, gated: bool = True, bias: bool = False) -> int:
    """Gated MLP: gate + up [hidden x I] and down [I x hidden]; non-gated: up + down."""
    n = (3 if gated else 2) * hidden * intermediate
    if bias:
        n += (2 * intermediate if gated else intermediate) + hidden
    return n


def _expert_params(hidden: int, f: FFN) -> int:
    """Parameters of one routed expert (in the latent width when the MoE is latent)."""
    width = f.latent_dim or hidden
    return _mlp_params(width, f.expert_intermediate, f.gated, f.expert_bias)


# ================================================================================================
# config.json -> ModelArch
# ================================================================================================


def _cfg(d: dict, *keys: str, default=None):
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


def _req(d: dict, key: str, name: str):
    if key not in d or d[key] is None:
        raise ClusterfitError(f"config for {name} is missing required field '{key}'")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ClusterfitError(f"config for {name}: field '{key}' must be a positive integer, got {v!r}")
    return v


#: torch dtypes a checkpoint's ``torch_dtype`` / ``dtype`` may name (the 16/32-bit ones a model is stored in).
TORCH_DTYPES = ("bfloat16", "float16", "float32", "half", "float", "bf16", "fp16", "fp32")


def _check_shapes(t: dict, name: str, n_heads: int, n_kv: int) -> None:
    """Architectural relations a real config holds: query heads a multiple of KV heads, positive sizes, a known
    dtype, a positive context length."""
    where = f"config for {name}"
    if n_heads % n_kv:
        raise ClusterfitError(f"{where}: num_attention_heads ({n_heads}) must be a multiple of num_key_value_heads "
                              f"({n_kv})")
    for key in ("head_dim", "sliding_window", "max_position_embeddings", "intermediate_size",
                "moe_intermediate_size", "n_routed_experts", "num_experts", "num_experts_per_tok"):
        v = t.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ClusterfitError(f"{where}: field '{key}' must be a positive integer, got {v!r}")
    dtype = _cfg(t, "torch_dtype", "dtype")
    if dtype is not None and str(dtype) not in TORCH_DTYPES:
        raise ClusterfitError(f"{where}: torch_dtype {dtype!r} is not one of {', '.join(TORCH_DTYPES[:3])}")


def _layer_types(t: dict, n: int) -> list[str]:
    lt = t.get("layer_types")
    if isinstance(lt, list) and len(lt) >= n:
        return [str(x) for x in lt[:n]]
    return ["full_attention"] * n


def parse_config(config: dict, name: str = "model", hf_id: str | None = None) -> ModelArch:
    """Build a ModelArch from a Hugging Face config.json dict.

    Multimodal configs: the language model is read from ``text_config``; the vision tower is counted
    from ``vision_config`` where its shape is given. Raises ClusterfitError for missing/invalid fields.
    """
    if not isinstance(config, dict):
        raise ClusterfitError(f"config for {name} is not a JSON object")
    text_config = config.get("text_config")
    t: dict = text_config if isinstance(text_config, dict) else config
    quant_cfg = config.get("quantization_config") or t.get("quantization_config")
    model_type = str(t.get("model_type") or config.get("model_type") or "")

    hidden = _req(t, "hidden_size", name)
    n_layers = _req(t, "num_hidden_layers", name)
    vocab = _req(t, "vocab_size", name)
    n_heads = _req(t, "num_attention_heads", name)
    n_kv = _cfg(t, "num_key_value_heads", default=n_heads)
    if not isinstance(n_kv, int) or n_kv <= 0 or n_kv > n_heads:
        raise ClusterfitError(f"config for {name}: num_key_value_heads must be in 1..num_attention_heads, got {n_kv!r}")
    _check_shapes(t, name, n_heads, n_kv)
    tie = bool(_cfg(t, "tie_word_embeddings", default=config.get("tie_word_embeddings", False)))

    params = dict.fromkeys(COMPONENTS, 0)
    notes: list[str] = []
    layers: list[Layer] = []
    attn_params: list[tuple[str, int]] = []
    ltypes = _layer_types(t, n_layers)

    # --- attention per layer (attention.py recognises the kind from the config) -------------------
    same: dict[Attention, Attention] = {}  # equal layers share one object (the perf model caches per object)
    for i in range(n_layers):
        att = attention_for_layer(t, i, ltypes[i], hidden, n_heads, n_kv, model_type)
        att = same.setdefault(att, att)
        params[att.param_component] += att.params
        params["indexer"] += att.indexer_params
        attn_params.append((att.param_component, att.params + att.indexer_params))
        ffn = _ffn_for_layer(t, i, n_layers, model_type, name)
        layers.append(Layer(att, ffn))

    # --- FFN params ------------------------------------------------------------------------------
    for layer in layers:
        for comp, n in _ffn_params(hidden, layer.ffn, model_type, t).items():
            params[comp] += n

    # --- norms, embeddings, head -----------------------------------------------------------------
    norms_per_layer = 4 if model_type.startswith("gemma") else 2
    hc = int(t.get("hc_mult") or 1)
    params["norms"] = n_layers * norms_per_layer * hidden + hidden
    if hc > 1:  # DeepSeek-V4 manifold-constrained hyper-connections: small mixing matrices per layer
        mix = 2 * hc + hc * hc  # pre, post and residual mixing coefficients, produced from the hc streams
        params["norms"] += n_layers * 2 * (hc * hidden * mix + mix)
        notes.append("hyper-connection (hc_mult) mixing weights counted as hc x hidden x (2 hc + hc^2) per sub-layer")
    params["embedding"] = vocab * hidden
    params["lm_head"] = 0 if tie else vocab * hidden

    # --- MTP / NextN layers ----------------------------------------------------------------------
    mtp = int(_cfg(t, "num_nextn_predict_layers", default=0) or 0)
    if mtp:
        last_moe = next((lyr for lyr in reversed(layers) if lyr.ffn.kind == "moe"), layers[-1])
        one = attn_params[-1][1] + sum(_ffn_params(hidden, last_moe.ffn, model_type, t).values())
        # NextN layer: a decoder layer + enorm, hnorm, eh_proj [hidden x 2*hidden], shared head norm
        params["mtp"] = mtp * (one + 2 * hidden * hidden + 3 * hidden + norms_per_layer * hidden)

    # --- vision tower ------------------------------------------------------------------------------
    vc = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else None
    if vc is not None:
        params["vision"] = _vision_params(vc, hidden)
        if params["vision"] == 0:
            notes.append("vision_config present but its shape is not given: vision tower not counted")

    notes += _unverified_shapes(model_type)

    return ModelArch(
        name=name, hidden=hidden, vocab=vocab, layers=tuple(layers), params=params, tie_embeddings=tie,
        mtp_layers=mtp, hf_id=hf_id, model_type=model_type,
        torch_dtype=str(_cfg(t, "torch_dtype", "dtype", default=config.get("torch_dtype") or config.get("dtype") or "bfloat16")),
        quantization=_quantization(quant_cfg, t, name), notes=tuple(notes),
        source=str(config.get("_source", "")), max_context=_cfg(t, "max_position_embeddings"),
    )


def _unverified_shapes(model_type: str) -> list[str]:
    """Notes for architectures whose parameter shapes follow the config fields without a published check."""
    if model_type == "kimi_linear":
        return ["Kimi Delta Attention and latent-MoE projection shapes follow the config fields; "
                "Moonshot's modeling code was not available to verify them (parameter count approximate)"]
    if model_type == "deepseek_v4":
        return ["DeepSeek-V4 compressor and grouped output projection shapes follow the config fields; "
                "no published breakdown to verify them (parameter count approximate)"]
    return []


def _ffn_params(hidden: int, f: FFN, model_type: str, t: dict) -> dict[str, int]:
    """Parameters of one layer's FFN by component (dense_mlp, or routed_experts / shared_experts / router)."""
    if f.kind == "dense":
        bias = bool(t.get("mlp_bias", False)) and model_type != "gpt_oss"
        return {"dense_mlp": _mlp_params(hidden, f.intermediate, f.gated, bias)}
    routed = _expert_params(hidden, f) * f.num_experts
    if f.latent_dim:  # latent MoE: down-projection into the latent, up-projection back, latent norm
        routed += 2 * hidden * f.latent_dim + f.latent_dim
    router = f.num_experts * hidden
    if model_type == "gpt_oss" or t.get("topk_method") == "noaux_tc":
        router += f.num_experts  # router bias / e_score_correction_bias
    if model_type == "qwen3_next" and f.num_shared:
        router += hidden  # shared_expert_gate [1 x hidden]
    return {"routed_experts": routed, "shared_experts": f.num_shared * _mlp_params(hidden, f.shared_intermediate, f.gated),
            "router": router}


def _ffn_for_layer(t: dict, i: int, n_layers: int, model_type: str, name: str) -> FFN:
    n_exp = int(_cfg(t, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0)
    inter = int(_cfg(t, "intermediate_size", default=0) or 0)
    if n_exp == 0:
        if inter <= 0:
            raise ClusterfitError(f"config for {name} is missing required field 'intermediate_size'")
        return FFN("dense", intermediate=inter)
    top_k = int(_cfg(t, "num_experts_per_tok", "num_experts_per_token", "experts_per_token", default=0) or 0)
    if top_k <= 0 or top_k > n_exp:
        raise ClusterfitError(f"config for {name}: num_experts_per_tok must be in 1..{n_exp}, got {top_k}")
    # which layers are MoE
    moe = True
    first_dense = int(_cfg(t, "first_k_dense_replace", default=0) or 0)
    mlp_types = t.get("mlp_layer_types")
    if isinstance(mlp_types, list) and i < len(mlp_types):
        moe = mlp_types[i] != "dense"
    elif i < first_dense:
        moe = False
    elif isinstance(t.get("moe_layers"), list):
        moe = i in set(t["moe_layers"])
    elif t.get("interleave_moe_layer_step"):
        moe = (i + 1) % int(t["interleave_moe_layer_step"]) == 0
    elif isinstance(t.get("mlp_only_layers"), list) and i in t["mlp_only_layers"]:
        moe = False
    if not moe:
        dense_i = int(_cfg(t, "intermediate_size_mlp", default=inter) or 0)
        if dense_i <= 0:
            raise ClusterfitError(f"config for {name} is missing required field 'intermediate_size'")
        return FFN("dense", intermediate=dense_i)
    if model_type in ("mixtral", "gpt_oss", "llama4_text"):
        expert_i = inter
    else:
        expert_i = int(_cfg(t, "moe_intermediate_size", default=0) or 0)
    if expert_i <= 0:
        raise ClusterfitError(f"config for {name} is missing required field 'moe_intermediate_size'")
    n_shared = int(_cfg(t, "n_shared_experts", "num_shared_experts", default=0) or 0)
    shared_i = expert_i
    sei = t.get("shared_expert_intermediate_size")
    if sei is not None:
        n_shared, shared_i = (1, int(sei)) if int(sei) > 0 else (0, 0)
    if model_type == "llama4_text":
        n_shared, shared_i = 1, inter
    latent = t.get("routed_expert_hidden_size")
    return FFN("moe", num_experts=n_exp, top_k=top_k, expert_intermediate=expert_i, num_shared=n_shared,
               shared_intermediate=shared_i, latent_dim=int(latent) if latent else None,
               expert_bias=model_type == "gpt_oss")


def _vision_params(vc: dict, text_hidden: int) -> int:
    """ViT tower + projector from vision_config (SigLIP / MoonViT style), 0 when the shape is not given."""
    h = _cfg(vc, "hidden_size", "vt_hidden_size")
    inter = _cfg(vc, "intermediate_size", "vt_intermediate_size")
    n = _cfg(vc, "num_hidden_layers", "vt_num_hidden_layers")
    if not (h and inter and n):
        return 0
    patch = int(vc.get("patch_size") or 14)
    per_layer = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h  # qkv+o (+bias), mlp (+bias), 2 layernorms
    p = n * per_layer + 3 * patch * patch * h + h
    image = vc.get("image_size")
    if image:
        p += (int(image) // patch) ** 2 * h  # learned position embeddings
    elif vc.get("init_pos_emb_height"):
        p += int(vc["init_pos_emb_height"]) * int(vc.get("init_pos_emb_width") or 1) * h
    merge = vc.get("merge_kernel_size") or [1, 1]
    mm_in = h * int(merge[0]) * int(merge[1])
    p += mm_in * mm_in + mm_in * text_hidden + 2 * mm_in  # projector: MLP after patch merge
    return p


# ================================================================================================
# Checkpoint quantization -> weight format name per component (see precision.py for the formats)
# ================================================================================================

_LINEAR_COMPONENTS = ("attention", "linear_attention", "indexer", "dense_mlp", "shared_experts", "routed_experts", "mtp")


def _quantization(q: dict | None, t: dict, name: str) -> dict[str, str]:
    """Weight format per component as the checkpoint stores it (names understood by precision.weight_format).

    fp8 (DeepSeek/GLM style, 128x128 block scales): every Linear of the decoder, embeddings/lm_head/norms/router
    in bf16. mxfp4 (gpt-oss): routed experts only. compressed-tensors: the config group's format on Linear layers
    minus the ``ignore`` list (Kimi: routed experts only). DeepSeek-V4 ``expert_dtype: fp4``: routed experts fp4.
    """
    base = "bf16" if str(_cfg(t, "torch_dtype", "dtype", default="bfloat16")) in ("bfloat16", "float32") else "fp16"
    out = dict.fromkeys(COMPONENTS, base)
    if not q:
        return out
    if not isinstance(q, dict):
        raise ClusterfitError(f"config for {name}: quantization_config must be an object")
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        block = q.get("weight_block_size")
        fmt = "fp8_block" if block else "fp8"
        for c in _LINEAR_COMPONENTS:
            out[c] = fmt
    elif method == "mxfp4":
        out["routed_experts"] = "mxfp4"
    elif method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        first: dict = next(iter(groups.values()), {})
        w = first.get("weights", {}) if groups else {}
        bits, typ, gs = w.get("num_bits"), w.get("type"), w.get("group_size")
        fmt_name = str(q.get("format", ""))
        if "mxfp4" in fmt_name or (bits == 4 and typ == "float" and gs == 32):
            fmt = "mxfp4"
        elif "nvfp4" in fmt_name or (bits == 4 and typ == "float" and gs == 16):
            fmt = "nvfp4"
        elif bits == 4:
            fmt = f"int4_g{gs}" if gs else "int4"
        elif bits == 8 and typ == "float":
            fmt = "fp8_channel"
        elif bits == 8:
            fmt = "int8"
        else:
            raise ClusterfitError(f"config for {name}: unsupported compressed-tensors weights {w!r}")
        ignore = " ".join(str(x) for x in q.get("ignore", []))
        skip = {"attention": "self_attn" in ignore, "shared_experts": "shared_experts" in ignore,
                "dense_mlp": "mlp\\\\.(gate" in ignore or "mlp\\.(gate" in ignore or "mlp." in ignore,
                "linear_attention": "self_attn" in ignore, "indexer": "self_attn" in ignore}
        for c in _LINEAR_COMPONENTS:
            if not skip.get(c, False):
                out[c] = fmt
        if "lm_head" not in ignore:
            out["lm_head"] = fmt
    elif method in ("awq", "gptq"):
        bits = int(q.get("bits", 4))
        gs = int(q.get("group_size", 128))
        for c in _LINEAR_COMPONENTS:
            out[c] = f"int{bits}_g{gs}" if bits == 4 else "int8"
    elif method in ("modelopt",) and "fp4" in str(q.get("quant_algo", "")).lower():
        for c in _LINEAR_COMPONENTS:
            out[c] = "nvfp4"
    else:
        raise ClusterfitError(f"config for {name}: unsupported quant_method '{method}' "
                              "(supported: fp8, mxfp4, compressed-tensors, awq, gptq, modelopt)")
    expert_dtype = t.get("expert_dtype")
    if expert_dtype == "fp4":
        out["routed_experts"] = "mxfp4"
    return out


# ================================================================================================
# FLOPs
# ================================================================================================


def attention_flops_per_token(model: ModelArch, context: int) -> float:
    """Attention score + value FLOPs for one new token attending ``context`` cached tokens (all layers).

    Each kind's rule is its ``Attention.flops_per_token`` (attention.py): softmax 2 x heads x (qk_dim + v_dim)
    x attended tokens (windows cap them); MLA absorbed 2 x heads x (2 kv_lora + rope) x attended tokens; linear
    attention a constant 4 x heads x dk x dv; compressed layers attend context / ratio entries (+ the window);
    sparse indexers cap the attended keys at index_topk but add the indexer's 2 x index_heads x index_dim x context.
    """
    total = 0.0
    for layer in model.layers:
        total += layer.attention.flops_per_token(context)
    return total


def flops_per_token(model: ModelArch, context: int = 0) -> float:
    """Forward FLOPs for one token: 2 x active matmul parameters (embedding lookup excluded, LM head included)
    plus attention over ``context`` cached tokens (see attention_flops_per_token)."""
    matmul = model.active_params - model.params.get("embedding", 0) - model.params.get("norms", 0)
    if model.tie_embeddings:
        matmul += model.params.get("embedding", 0)  # the tied head is still a matmul
    return 2.0 * matmul + attention_flops_per_token(model, context)


# ================================================================================================
# Catalog of bundled configs
# ================================================================================================


def bare_model(total_params: float, name: str | None = None) -> ModelArch:
    """A model known only by its parameter count (back-of-envelope mode): no layers, no KV cache estimate."""
    if not (total_params > 0) or total_params > 1e14:
        raise ClusterfitError(f"--params must be between 1 and 1e14 parameters, got {total_params:g}")
    params = dict.fromkeys(COMPONENTS, 0)
    params["dense_mlp"] = int(total_params)
    return ModelArch(name=name or f"{_fmt_params(total_params)} parameters", hidden=0, vocab=0, layers=(),
                     params=params, notes=("back-of-envelope: only the parameter count is known",))


def _fmt_params(n: float) -> str:
    return f"{n / 1e12:g}T" if n >= 1e12 else f"{n / 1e9:g}B"


def parse_param_count(text: str) -> float:
    """'744B' -> 744e9, '1.6T' -> 1.6e12, '70b' -> 70e9, '8e9' -> 8e9."""
    s = str(text).strip().upper().replace(",", "").replace("_", "")
    mult = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
    try:
        if s and s[-1] in mult:
            value = float(s[:-1]) * mult[s[-1]]
        else:
            value = float(s)
    except ValueError:
        raise ClusterfitError(f"cannot read parameter count '{text}' (examples: 744B, 1.6T, 70e9)") from None
    if not value > 0:
        raise ClusterfitError(f"parameter count must be positive, got '{text}'")
    return value


_MODEL_DIR = "catalog/models"


def _catalog_files() -> dict[str, str]:
    """HF id -> bundled file name, for every config under catalog/models (org__name.json)."""
    from importlib.resources import files

    out = {}
    for entry in files("clusterfit").joinpath(_MODEL_DIR).iterdir():
        if entry.name.endswith(".json") and "__" in entry.name:
            out[entry.name[:-5].replace("__", "/", 1)] = entry.name
    return out


def model_aliases() -> dict[str, str]:
    """Lower-case name -> HF id: the HF id itself, the name without org, and short forms
    (drop -Instruct / -it / -v0.1 / -Instruct-2407 suffixes; Llama-4 without the -17B-nE part)."""
    import re

    out: dict[str, str] = {}
    for hf_id in sorted(_catalog_files()):
        short = hf_id.split("/", 1)[1].lower()
        names = {hf_id.lower(), short}
        trimmed = re.sub(r"-(instruct(-\d+)?|it|v0\.1)$", "", short)
        names.add(trimmed)
        names.add(re.sub(r"-17b-\d+e(-instruct)?$", "", short))
        for n in names:
            out.setdefault(n, hf_id)
    return out


def list_models() -> list[str]:
    """HF ids of the bundled model configs, sorted."""
    return sorted(_catalog_files())


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a config.json from disk (clusterfit.inputs: size-limited UTF-8, one-line errors with the position)."""
    from .inputs import parse_document, read_text

    p = Path(path)
    data = parse_document(read_text(p, "model config"), str(p), "json")
    if not isinstance(data, dict):
        raise ClusterfitError(f"{p} must hold a JSON object (a Hugging Face config.json)")
    return data


_CACHE: dict[str, ModelArch] = {}


def load_model(name: str) -> ModelArch:
    """A model by HF id (``deepseek-ai/DeepSeek-V3``), short alias (``deepseek-v3``, case-insensitive) or a path to a
    config.json (or a folder holding one). Unknown names raise ClusterfitError listing close matches."""
    from .errors import unknown

    key = str(name).strip()
    if not key:
        raise ClusterfitError("model name is empty")
    if key in _CACHE:
        return _CACHE[key]
    p = Path(key)
    if key.endswith(".json") or p.is_dir() or (p.exists() and p.is_file()):
        if p.is_dir():
            p = p / "config.json"
        if not p.exists():
            raise ClusterfitError(f"config file not found: {p}")
        model = parse_config(read_config_file(p), name=p.parent.name if p.name == "config.json" else p.stem)
        _CACHE[key] = model
        return model
    aliases = model_aliases()
    hf_id = aliases.get(key.lower())
    if hf_id is None:
        raise unknown("model", key, sorted(set(aliases.values())) + sorted(aliases))
    model = load_bundled(hf_id)
    _CACHE[key] = model
    return model


def load_bundled(hf_id: str) -> ModelArch:
    """A bundled model by its HF id, read from package data only (never from a path a caller names)."""
    import json
    from importlib.resources import files

    if hf_id not in _CACHE:
        fname = _catalog_files()[hf_id]
        data = json.loads(files("clusterfit").joinpath(_MODEL_DIR, fname).read_text(encoding="utf-8"))
        _CACHE[hf_id] = parse_config(data, name=hf_id.split("/", 1)[1], hf_id=hf_id)
    return _CACHE[hf_id]


def register_model(key: str, model: ModelArch) -> None:
    """Make ``model`` loadable by ``load_model(key)`` (a model built in memory, e.g. from a config sent over HTTP)."""
    _CACHE[key] = model


def forget_model(key: str) -> None:
    """Drop what ``register_model(key, ...)`` added (nothing if absent)."""
    _CACHE.pop(key, None)


def is_loaded(key: str) -> bool:
    """Whether ``load_model(key)`` answers from memory."""
    return key in _CACHE
