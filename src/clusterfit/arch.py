"""Model architecture from a Hugging Face config.json: layers, attention kinds, MoE, parameter and FLOP counts.

Everything here is a pure function of the config dict. Counts are exact element counts of the
checkpoint's tensors as the config defines them (weights, biases, norms), grouped by component so that
memory and performance models can give each group its own precision and sharding rule.
"""

from __future__ import annotations

import copy
import math
import weakref
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Literal

from .attention import Attention, attention_for_layer
from .errors import ClusterfitError, brief


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
    ``num_shared`` shared experts of ``shared_intermediate`` each (an always-on dense MLP beside the experts, as in
    Gemma 4, counts as one shared expert: same weights, same FLOPs per token). ``latent_dim``: routed experts work
    in a projected latent space of this width (Kimi-K3, Nemotron-3 Super latent MoE), else None.
    ``gated``: gate + up + down (SwiGLU / GeGLU); False: up + down (nemotron_h squared ReLU, GPT-J / Falcon GELU).
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
    #: The bundled or fetched config's Hugging Face id (a checkpoint variant's architecture: its base's id).
    hf_id: str | None = None
    #: The checkpoint an engine serves under this name: hf_id itself, or for a variant name (load_model: suffixes
    #: stripped to a bundled base) the name when it is an org/name id; None when no Hub id is known (a variant
    #: named without its org, a local config).
    checkpoint_id: str | None = None
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


class ConfigObject(dict[str, Any]):
    """A JSON object of a config.json as ``parse_config_text`` reads it: its NaN / Infinity / -Infinity values held
    as null, and ``non_finite`` names each such key with its error. Reading such a key (``[key]`` or ``get``: every
    helper of parse_config reads through one of them) raises that error, so 'hidden_size: NaN' is 'not a finite
    number', never a field left out; a key clusterfit never reads (nemotron_h ``time_step_limit``) loads as null.
    Setting a key (parse_config's own defaults) clears its error."""

    non_finite: dict[str, str] = {}   # per object, set by parse_config_text; never mutated (replaced on a set)

    def _refuse_non_finite(self, key: object) -> None:
        problem = self.non_finite.get(key) if isinstance(key, str) else None
        if problem is not None:
            raise ClusterfitError(problem)

    def __getitem__(self, key: str) -> Any:
        self._refuse_non_finite(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._refuse_non_finite(key)
        return super().get(key, default)

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self.non_finite:   # a copy (__copy__) shares the dict: replace it, never edit it in place
            self.non_finite = {k: v for k, v in self.non_finite.items() if k != key}
        super().__setitem__(key, value)

    def __copy__(self) -> ConfigObject:
        """A shallow copy with the same errors (copy.copy's default would set each key, clearing them)."""
        out = ConfigObject(self)
        out.non_finite = self.non_finite
        return out


def _cfg(d: dict, *keys: str, default=None):
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


def _req(d: dict, key: str, name: str):
    if key not in d or d[key] is None:
        raise ClusterfitError(f"config for {name} is missing required field '{key}'")
    v = d[key]
    _check_size(v, f"config for {name}: field '{key}'")
    return v


def _check_size(v: object, what: str) -> None:
    """A config's size field: a positive integer, at most MAX_SHAPE."""
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ClusterfitError(f"{what} must be a positive integer, got {v!r}")
    if v > MAX_SHAPE:
        raise ClusterfitError(f"{what} must be a positive integer (at most {MAX_SHAPE:,}), got {v!r}")


#: Most decoder layers a config may declare (the deepest bundled model has 126; a larger number is a typo or an
#: attempt to make the per-layer walk run out of memory).
MAX_LAYERS = 10_000
#: Largest size a config may give (hidden, heads, head_dim, intermediate, vocabulary, experts, context...): the
#: largest real ones are a 262,144-token vocabulary and 10M-token contexts; 1e18 counted '1,999,688,999,999,999B
#: parameters'.
MAX_SHAPE = 100_000_000

#: torch dtypes a checkpoint's ``torch_dtype`` / ``dtype`` may name (the 16/32-bit ones a model is stored in).
TORCH_DTYPES = ("bfloat16", "float16", "float32", "half", "float", "bf16", "fp16", "fp32")


def _check_shapes(t: dict, name: str, hidden: int, n_heads: int, n_kv: int) -> None:
    """Architectural relations a real config holds: query heads a multiple of KV heads, hidden_size a multiple of
    the heads where the head width is hidden_size / num_attention_heads (no head_dim given; MLA sets its own head
    widths), positive sizes, a known dtype, a positive context length."""
    where = f"config for {name}"
    if n_heads % n_kv:
        raise ClusterfitError(f"{where}: num_attention_heads ({n_heads}) must be a multiple of num_key_value_heads "
                              f"({n_kv})")
    if hidden % n_heads and t.get("head_dim") is None and t.get("kv_lora_rank") is None:
        raise ClusterfitError(f"{where}: hidden_size ({hidden}) must be a multiple of num_attention_heads "
                              f"({n_heads}) when the config gives no head_dim")
    for key in ("head_dim", "sliding_window", "max_position_embeddings", "intermediate_size",
                "moe_intermediate_size", "n_routed_experts", "num_experts", "num_local_experts", "num_experts_per_tok",
                "top_k_experts",
                "v_head_dim", "global_head_dim", "num_global_key_value_heads", "swa_num_attention_heads",
                "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim", "sliding_window_size",
                "dense_intermediate_size", "moe_latent_size", "moe_shared_expert_intermediate_size",
                "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim"):
        v = t.get(key)
        if v is not None:
            _check_size(v, f"{where}: field '{key}'")
    dtype = _cfg(t, "torch_dtype", "dtype")
    if dtype is not None and str(dtype) not in TORCH_DTYPES:
        raise ClusterfitError(f"{where}: torch_dtype {brief(dtype)} is not one of {', '.join(TORCH_DTYPES[:3])}")


#: Yes/no fields parse_config and attention.py read from the (text) config: JSON true / false only (a string
#: "false" would read as true). null is "not given", as for every field.
BOOL_FIELDS = ("tie_word_embeddings", "is_encoder_decoder", "attention_bias", "mlp_bias", "use_bias", "bias",
               "new_decoder_architecture", "multi_query", "enable_moe_block", "use_mtp", "use_routing_bias",
               "use_moe_router_bias", "attention_k_eq_v", "use_sliding_window", "attn_output_gate",
               "use_head_wise_attn_gate", "add_swa_attention_sink_bias", "add_full_attention_sink_bias", "use_qk_norm",
               "mla_use_output_gate", "use_conv_bias")
#: The ones read from the top level of a multimodal config too (the rest are read from its text_config).
TOP_LEVEL_BOOL_FIELDS = ("tie_word_embeddings", "is_encoder_decoder")


def _check_field_types(config: dict, t: dict, name: str) -> None:
    """Field types the counts rely on: yes/no fields (BOOL_FIELDS) JSON booleans, ``model_type`` a string,
    ``architectures`` a list of strings, ``rope_scaling`` an object (or null) whose ``factor``, where given, is a
    finite number > 0; in the top-level config and in ``text_config``. A field that is absent or null is not
    checked (real configs omit most of them)."""
    where = f"config for {name}"
    sections: list[tuple[str, dict, tuple[str, ...]]] = [("", config, BOOL_FIELDS)]
    if t is not config:
        sections = [("", config, TOP_LEVEL_BOOL_FIELDS), ("text_config.", t, BOOL_FIELDS)]
    for prefix, d, flags in sections:
        for key in flags:
            v = d.get(key)
            if v is not None and not isinstance(v, bool):
                raise ClusterfitError(f"{where}: field '{prefix}{key}' must be true or false, got {brief(v)}")
        v = d.get("model_type")
        if v is not None and not isinstance(v, str):
            raise ClusterfitError(f"{where}: field '{prefix}model_type' must be a string, got {brief(v)}")
        v = d.get("architectures")
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise ClusterfitError(f"{where}: field '{prefix}architectures' must be a list of strings, got {brief(v)}")
        rope = d.get("rope_scaling")
        if rope is not None:
            if not isinstance(rope, dict):
                raise ClusterfitError(f"{where}: field '{prefix}rope_scaling' must be an object or null, "
                                      f"got {brief(rope)}")
            f = rope.get("factor")
            if f is not None and (isinstance(f, bool) or not isinstance(f, int | float) or not math.isfinite(f)
                                  or f <= 0):
                raise ClusterfitError(f"{where}: field '{prefix}rope_scaling.factor' must be a finite number > 0, "
                                      f"got {brief(f)}")
    sc = t.get("sparse_attention_config")
    if isinstance(sc, dict):
        v = sc.get("use_sparse_attention")
        if v is not None and not isinstance(v, bool):
            raise ClusterfitError(f"{where}: field 'sparse_attention_config.use_sparse_attention' must be true or "
                                  f"false, got {brief(v)}")
        v = sc.get("sparse_disable_index_value")   # one flag, or one per layer (MiniMax-M3 writes 0 / 1)

        def flag(x: object) -> bool:
            return isinstance(x, bool) or isinstance(x, int) and x in (0, 1)

        if v is not None and not (flag(v) or isinstance(v, list) and all(flag(x) for x in v)):
            raise ClusterfitError(f"{where}: field 'sparse_attention_config.sparse_disable_index_value' must be true / "
                                  f"false (or 0 / 1), or a list of them, got {brief(v)}")


def _flag_list(t: dict, key: str, n: int, name: str) -> list[int] | None:
    """A per-layer list of 0/1 flags (``hybrid_layer_pattern``, ``moe_layer_freq``), or None when absent / not a
    list; a list of the wrong length or with other values is refused."""
    v = t.get(key)
    if not isinstance(v, list):
        return None
    if len(v) < n or any(isinstance(x, bool) or x not in (0, 1) for x in v[:n]):
        raise ClusterfitError(f"config for {name}: {key} must list 0 or 1 for each of the {n} layers")
    return [int(x) for x in v[:n]]


def _layer_types(t: dict, n: int, name: str) -> list[str]:
    """Each layer's token-mixer type: ``layer_types``; MiMo-V2-Flash ``hybrid_layer_pattern`` (1 = sliding window,
    vLLM mimo_v2_flash.py is_compressed_softmax_layer); MiniMax-M3 ``sparse_attention_config.sparse_attention_freq``
    (1 = block-sparse attention); default full attention."""
    lt = t.get("layer_types")
    if isinstance(lt, list) and len(lt) < n:
        raise ClusterfitError(f"config for {name}: layer_types lists {len(lt)} layers but num_hidden_layers is {n}")
    if isinstance(lt, list):
        if not all(isinstance(x, str) for x in lt[:n]):
            raise ClusterfitError(f"config for {name}: layer_types must be a list of strings")
        return list(lt[:n])
    hybrid = _flag_list(t, "hybrid_layer_pattern", n, name)
    if hybrid is not None:
        return ["sliding_attention" if x else "full_attention" for x in hybrid]
    sc = t.get("sparse_attention_config")
    if isinstance(sc, dict) and sc.get("use_sparse_attention"):
        sparse = _flag_list(sc, "sparse_attention_freq", n, name)
        if sparse is None:
            raise ClusterfitError(f"config for {name}: sparse_attention_config.sparse_attention_freq must list the "
                                  "sparse layers")
        return ["minimax_sparse_attention" if x else "full_attention" for x in sparse]
    return ["full_attention"] * n


#: nemotron_h ``hybrid_override_pattern`` characters (vLLM nemotron_h.py ALL_DECODER_LAYER_TYPES): mixers and FFNs.
NEMOTRON_MIXERS = {"M": "mamba", "*": "full_attention"}
NEMOTRON_FFNS = {"-": "dense", "E": "moe"}


def _nemotron_plan(t: dict, name: str) -> list[tuple[str, int, str]]:
    """nemotron_h blocks grouped into layers of (mixer type, mixer blocks, FFN kind): each mixer block ('M'
    Mamba-2, '*' attention) with the FFN block ('-' MLP, 'E' MoE) that follows it. A Mamba block with no FFN block
    after it (the 'M' before each '*' in Nemotron-3: "...EM*E...") joins the Mamba layer before it: that layer's
    mixer holds 2 blocks (Mamba2Mixer.blocks), so parameters, state, FLOPs and bytes stay exact; only the count of
    TP all-reduces the performance model charges is one lower per joined block (each block ends in one; the
    perf model charges one per mixer and one per FFN). Each block has its own norm (vLLM NemotronH*DecoderLayer)."""
    pattern = t.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ClusterfitError(f"config for {name}: hybrid_override_pattern must be a non-empty string")
    bad = sorted(set(pattern) - set(NEMOTRON_MIXERS) - set(NEMOTRON_FFNS))
    if bad:
        raise ClusterfitError(f"unsupported architecture: nemotron_h block type(s) {', '.join(map(repr, bad))} in "
                              "hybrid_override_pattern (known: M Mamba-2, * attention, - MLP, E MoE)")
    plan: list[tuple[str, int, str]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        nxt = pattern[i + 1] if i + 1 < len(pattern) else ""
        if c in NEMOTRON_MIXERS and nxt in NEMOTRON_FFNS:
            plan.append((NEMOTRON_MIXERS[c], 1, NEMOTRON_FFNS[nxt]))
            i += 2
        elif c == "M" and plan and plan[-1][0] == "mamba":
            plan[-1] = ("mamba", plan[-1][1] + 1, plan[-1][2])
            i += 1
        else:
            what = "an FFN block that follows no mixer" if c in NEMOTRON_FFNS else "a mixer block with no FFN after it"
            raise ClusterfitError(f"unsupported architecture: nemotron_h {what} ('{c}' at position {i} of "
                                  f"hybrid_override_pattern) ({name})")
    return plan


def _refuse_unsupported(config: dict, t: dict, model_type: str, name: str) -> None:
    """Architectures whose shapes clusterfit cannot count or cost correctly: refused with
    "unsupported architecture: <what>" rather than modelled wrongly."""
    def no(what: str) -> ClusterfitError:
        return ClusterfitError(f"unsupported architecture: {what} ({name})")

    if config.get("is_encoder_decoder") or t.get("is_encoder_decoder"):
        raise no("an encoder-decoder model; clusterfit models decoder-only LLMs")
    mamba_keys = [k for k in ("ssm_state_size", "mamba_d_state", "mamba_expand", "layers_block_type",
                              "attn_layer_indices") if k in t]
    if mamba_keys and model_type != "nemotron_h":
        raise no(f"state-space (Mamba) layers outside nemotron_h (config fields {', '.join(mamba_keys)})")
    if model_type.startswith("gemma4"):
        if int(t.get("hidden_size_per_layer_input") or 0) > 0:
            raise no("Gemma 4 per-layer embeddings (hidden_size_per_layer_input > 0)")
        if int(t.get("num_kv_shared_layers") or 0) > 0:
            raise no("Gemma 4 KV-cache sharing between layers (num_kv_shared_layers > 0)")
    step_keys = [k for k in ("moe_num_experts", "num_attention_groups", "attention_other_setting") if k in t]
    if step_keys:
        raise no(f"Step-3.5 style config fields {', '.join(step_keys)} (per-layer head counts clusterfit does not "
                 "read); pass a config with the standard field names")
    if model_type == "nemotron_h" and isinstance(t.get("block_configs"), list):
        raise no("heterogeneous nemotron_h blocks (block_configs)")


#: Architectures of the GPT-2 lineage: LayerNorms with weight and bias, a two-matrix GELU MLP (fc in, fc out; 4 x
#: hidden unless the config says otherwise), biases as each modelling file has them (``_standard_fields``); attention
#: and MLP in parallel from one input or one after the other (no cost difference: the same GEMMs run).
#: model_type -> LayerNorms per block (transformers modeling_*.py: GPT-J ln_1, Falcon input_layernorm or, under
#: new_decoder_architecture, ln_attn + ln_mlp, GPT-NeoX, StarCoder2 and Nemotron (its LayerNorm1P) input_ +
#: post_attention_layernorm, Phi input_layernorm). Nemotron's MLP is up / down with squared ReLU.
LAYERNORM_MODELS = {"gptj": 1, "falcon": 1, "gpt_neox": 2, "phi": 1, "starcoder2": 2, "nemotron": 2}
#: Their configs' field names -> the ones parse_config reads (transformers' own aliases: GPTJConfig.attribute_map;
#: the RW-era Falcon configs' n_layer / n_head / n_head_kv, FalconConfig's num_kv_heads and ffn_hidden_size).
_FIELD_ALIASES = {
    "gptj": {"hidden_size": "n_embd", "num_hidden_layers": "n_layer", "num_attention_heads": "n_head",
             "max_position_embeddings": "n_positions", "intermediate_size": "n_inner"},
    "falcon": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "num_kv_heads": "n_head_kv",
               "intermediate_size": "ffn_hidden_size"},
}


def _standard_fields(t: dict, model_type: str) -> dict:
    """A LAYERNORM_MODELS config in the field names and bias flags the rest of parse_config reads (other configs
    unchanged).

    GPT-J (transformers modeling_gptj.py): q/k/v/out projections without bias, fc_in / fc_out with bias, an lm_head
    with bias (counted in parse_config). GPT-NeoX (modeling_gpt_neox.py): query_key_value and dense with bias when
    ``attention_bias`` (default true), dense_h_to_4h / dense_4h_to_h with bias, embed_out without. Phi
    (modeling_phi.py, phi-1 / 1.5 / 2): q/k/v/dense, fc1 / fc2 and the lm_head all with bias. StarCoder2
    (modeling_starcoder2.py): every Linear with bias when ``use_bias`` (default true). Nemotron (modeling_nemotron.py):
    the config's ``attention_bias`` (o_proj too) and ``mlp_bias``, as read for every model. Falcon
    (modeling_falcon.py): ``new_decoder_architecture`` uses ``num_kv_heads`` KV heads, else ``multi_query`` (default
    true) one, else one per query head; every Linear has a bias when ``bias`` is true (default false)."""
    if model_type not in LAYERNORM_MODELS:
        return t
    t = copy.copy(t)   # a ConfigObject stays one
    for std, alias in _FIELD_ALIASES.get(model_type, {}).items():
        if t.get(std) is None and t.get(alias) is not None:
            t[std] = t[alias]
    hidden = t.get("hidden_size")
    if t.get("intermediate_size") is None and isinstance(hidden, int) and not isinstance(hidden, bool):
        t["intermediate_size"] = 4 * hidden
    if model_type == "gptj":
        t["mlp_bias"] = True
    elif model_type == "gpt_neox":
        t["attention_bias"], t["mlp_bias"] = bool(t.get("attention_bias", True)), True
    elif model_type == "phi":
        t["attention_bias"] = t["mlp_bias"] = True
    elif model_type == "starcoder2":
        t["attention_bias"] = t["mlp_bias"] = bool(t.get("use_bias", True))
    elif model_type == "falcon":
        if t.get("new_decoder_architecture"):
            t["num_key_value_heads"] = t.get("num_kv_heads")
        elif t.get("multi_query", True):
            t["num_key_value_heads"] = 1
        t["attention_bias"] = t["mlp_bias"] = bool(t.get("bias", False))
    return t


def parse_config(config: dict, name: str = "model", hf_id: str | None = None) -> ModelArch:
    """Build a ModelArch from a Hugging Face config.json dict.

    Multimodal configs: the language model is read from ``text_config``; the vision tower is counted
    from ``vision_config`` where its shape is given. Raises ClusterfitError for missing/invalid fields.
    """
    if not isinstance(config, dict):
        raise ClusterfitError(f"config for {name} is not a JSON object")
    text_config = config.get("text_config")
    t: dict = text_config if isinstance(text_config, dict) else config
    _check_field_types(config, t, name)
    quant_cfg = config.get("quantization_config") or t.get("quantization_config")
    model_type = str(t.get("model_type") or config.get("model_type") or "")
    _refuse_unsupported(config, t, model_type, name)
    t = _standard_fields(t, model_type)

    hidden = _req(t, "hidden_size", name)
    n_blocks = _req(t, "num_hidden_layers", name)
    if n_blocks > MAX_LAYERS:
        raise ClusterfitError(f"config for {name}: num_hidden_layers {n_blocks:,} is more than {MAX_LAYERS:,}")
    vocab = _req(t, "vocab_size", name)
    n_heads = _req(t, "num_attention_heads", name)
    n_kv = _cfg(t, "num_key_value_heads", default=n_heads)
    if isinstance(n_kv, bool) or not isinstance(n_kv, int) or n_kv <= 0 or n_kv > n_heads:
        raise ClusterfitError(f"config for {name}: num_key_value_heads must be in 1..num_attention_heads, got {n_kv!r}")
    _check_shapes(t, name, hidden, n_heads, n_kv)
    # transformers' PretrainedConfig ties by default; Falcon's configs rely on it (FalconForCausalLM ties lm_head)
    tie_default = model_type == "falcon"
    tie = bool(_cfg(t, "tie_word_embeddings", default=config.get("tie_word_embeddings", tie_default)))

    params = dict.fromkeys(COMPONENTS, 0)
    notes: list[str] = []
    layers: list[Layer] = []
    attn_params: list[tuple[str, int]] = []
    # each layer's (mixer type, mixer blocks, FFN kind); FFN kind "" = the config's MoE / dense rule for the layer
    if model_type == "nemotron_h":
        plan = _nemotron_plan(t, name)
        if len(t["hybrid_override_pattern"]) != n_blocks:
            raise ClusterfitError(f"config for {name}: hybrid_override_pattern has {len(t['hybrid_override_pattern'])}"
                                  f" blocks, num_hidden_layers says {n_blocks}")
    else:
        plan = [(lt, 1, "") for lt in _layer_types(t, n_blocks, name)]
    n_layers = len(plan)

    # --- attention per layer (attention.py recognises the kind from the config) -------------------
    same: dict[Attention, Attention] = {}  # equal layers share one object (the perf model caches per object)
    for i, (ltype, blocks, ffn_kind) in enumerate(plan):
        att = attention_for_layer(t, i, ltype, hidden, n_heads, n_kv, model_type, blocks)
        att = same.setdefault(att, att)
        params[att.param_component] += att.params
        params["indexer"] += att.indexer_params
        attn_params.append((att.param_component, att.params + att.indexer_params))
        ffn = _nemotron_ffn(t, ffn_kind, name) if ffn_kind else _ffn_for_layer(t, i, n_layers, model_type, name)
        layers.append(Layer(att, ffn))

    # --- FFN params ------------------------------------------------------------------------------
    for layer in layers:
        for comp, n in _ffn_params(hidden, layer.ffn, model_type, t).items():
            params[comp] += n

    # --- norms, embeddings, head -----------------------------------------------------------------
    norms_per_layer = 4 if model_type.startswith("gemma") else 2
    if model_type.startswith("gemma4") and t.get("enable_moe_block"):
        # + post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2 and the per-layer layer_scalar (gemma4.py)
        params["norms"] = n_layers * (7 * hidden + 1) + hidden
    elif model_type == "nemotron_h":
        params["norms"] = n_blocks * hidden + hidden  # one RMSNorm per block + norm_f
    elif model_type in LAYERNORM_MODELS:
        # LayerNorms with weight and bias: per block as LAYERNORM_MODELS says (two under Falcon's
        # new_decoder_architecture, ln_attn and ln_mlp), and the final one
        per_layer = 2 if t.get("new_decoder_architecture") else LAYERNORM_MODELS[model_type]
        params["norms"] = (n_layers * per_layer + 1) * 2 * hidden
    else:
        params["norms"] = n_layers * norms_per_layer * hidden + hidden
    hc = int(t.get("hc_mult") or 1)
    if hc > 1:  # DeepSeek-V4 manifold-constrained hyper-connections: small mixing matrices per layer
        mix = 2 * hc + hc * hc  # pre, post and residual mixing coefficients, produced from the hc streams
        params["norms"] += n_layers * 2 * (hc * hidden * mix + mix)
        notes.append("hyper-connection (hc_mult) mixing weights counted as hc x hidden x (2 hc + hc^2) per sub-layer")
    params["embedding"] = vocab * hidden
    params["lm_head"] = (0 if tie else vocab * hidden) + (vocab if model_type in ("gptj", "phi") else 0)  # a bias

    # --- MTP / NextN layers ----------------------------------------------------------------------
    # num_nextn_predict_layers (DeepSeek, GLM, Step, Nemotron-3 Super), mtp_num_hidden_layers (Qwen3.5),
    # num_mtp_modules when use_mtp (MiniMax-M2.5)
    mtp = int(_cfg(t, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0) or 0)
    if not mtp and t.get("use_mtp"):
        mtp = int(_cfg(t, "num_mtp_modules", default=0) or 0)
    if mtp:
        last_moe = next((lyr for lyr in reversed(layers) if lyr.ffn.kind == "moe"), layers[-1])
        mtp_attn = attn_params[-1][1]
        if model_type == "nemotron_h":  # its MTP layer is an attention + MoE pair (mtp_hybrid_override_pattern "*E")
            mtp_attn = next((a.params for a in (lyr.attention for lyr in layers) if a.caches_kv), mtp_attn)
        one = mtp_attn + sum(_ffn_params(hidden, last_moe.ffn, model_type, t).values())
        # NextN layer: a decoder layer + enorm, hnorm, eh_proj [hidden x 2*hidden], shared head norm
        params["mtp"] = mtp * (one + 2 * hidden * hidden + 3 * hidden + norms_per_layer * hidden)

    # --- vision tower ------------------------------------------------------------------------------
    vc = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else None
    if vc is not None:
        params["vision"] = _vision_params(vc, hidden)
        if params["vision"] == 0:
            notes.append("vision_config present but its shape is not given: vision tower not counted")

    notes += _unverified_shapes(model_type) + _unchecked_type(model_type, str(config.get("model_type") or ""))

    return ModelArch(
        name=name, hidden=hidden, vocab=vocab, layers=tuple(layers), params=params, tie_embeddings=tie,
        mtp_layers=mtp, hf_id=hf_id, checkpoint_id=hf_id, model_type=model_type,
        torch_dtype=str(_cfg(t, "torch_dtype", "dtype", default=config.get("torch_dtype") or config.get("dtype") or "bfloat16")),
        quantization=_quantization(quant_cfg, t, name), notes=tuple(notes),
        source=str(config.get("_source", "")), max_context=_cfg(t, "max_position_embeddings"),
    )


#: The model types whose layer shapes clusterfit's counts were checked on: those of the bundled configs
#: (catalog/models, top level and text_config; tests/test_arch.py keeps this in step with them) and those
#: parse_config reads with their own field names or norms (LAYERNORM_MODELS, _FIELD_ALIASES). Any other model type is
#: counted from the config's standard fields like these are, with a note saying so (the audit found an unknown
#: model_type counted as a standard decoder without a word).
CHECKED_MODEL_TYPES = frozenset({
    "llama", "llama4", "llama4_text", "mistral", "mixtral", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5",
    "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "deepseek_v3", "deepseek_v32", "deepseek_v4", "glm4_moe",
    "glm_moe_dsa", "gpt_oss", "gemma3", "gemma3_text", "gemma4", "gemma4_text", "kimi_k2", "kimi_k25", "kimi_k3",
    "kimi_linear", "minimax_m2", "minimax_m3", "mimo_v2_flash", "step3p7", "nemotron_h", "phi3",
    *LAYERNORM_MODELS, *_FIELD_ALIASES})


def _unchecked_type(*model_types: str) -> list[str]:
    """A note when none of the config's model types (top level, text_config) is in CHECKED_MODEL_TYPES, or when it
    gives none: either way the count rests on the standard fields alone."""
    given = [m for m in model_types if m]
    if any(m in CHECKED_MODEL_TYPES for m in given):
        return []
    what = f"model_type {brief(given[0])} is not one clusterfit's counts were checked on" if given else \
        "the config gives no model_type"
    return [f"{what}: counted as a standard decoder from the config's fields (attention and an MLP or MoE per "
            "layer); check the parameter count against the checkpoint's"]


def _unverified_shapes(model_type: str) -> list[str]:
    """Notes for architectures whose parameter shapes follow the config fields without a published check."""
    if model_type == "kimi_linear":
        return ["Kimi Delta Attention and latent-MoE projection shapes follow the config fields; "
                "Moonshot's modeling code was not available to verify them (parameter count approximate)"]
    if model_type == "deepseek_v4":
        return ["DeepSeek-V4 compressor and grouped output projection shapes follow the config fields; "
                "no published breakdown to verify them (parameter count approximate)"]
    return []


def max_experts(model: ModelArch) -> int:
    """Routed experts of the model's widest MoE layer (0 for a dense model); once per model."""
    memo = model_memo(model)
    key = ("arch.max_experts",)
    if key not in memo:
        memo[key] = max((layer.ffn.num_experts for layer in model.layers), default=0)
    return memo[key]


def layer_component_params(model: ModelArch) -> tuple[dict[str, int], ...]:
    """Each decoder layer's parameters by component (its mixer under the attention kind's component, its indexer,
    its FFN's), once per model. Biases that depend on config keys the model no longer carries are left out, so these
    are weights for sharing a component's total across layers (pipeline stages), not a second total."""
    memo = model_memo(model)
    key = ("arch.layer_component_params",)
    if key not in memo:
        out = []
        for layer in model.layers:
            att = layer.attention
            d = {att.param_component: att.params, "indexer": att.indexer_params}
            d.update(_ffn_params(model.hidden, layer.ffn, model.model_type, {}))
            out.append(d)
        memo[key] = tuple(out)
    return memo[key]


def _ffn_params(hidden: int, f: FFN, model_type: str, t: dict) -> dict[str, int]:
    """Parameters of one layer's FFN by component (dense_mlp, or routed_experts / shared_experts / router)."""
    if f.kind == "dense":
        bias = bool(t.get("mlp_bias", False)) and model_type != "gpt_oss"
        return {"dense_mlp": _mlp_params(hidden, f.intermediate, f.gated, bias)}
    routed = _expert_params(hidden, f) * f.num_experts
    if f.latent_dim:  # latent MoE: down-projection into the latent, up-projection back
        routed += 2 * hidden * f.latent_dim
        if model_type == "kimi_linear":
            routed += f.latent_dim  # Kimi-K3's latent norm
        elif t.get("mlp_bias"):
            routed += f.latent_dim + hidden  # nemotron_h fc1/fc2_latent_proj biases (bias=mlp_bias)
    router = f.num_experts * hidden
    # router bias / e_score_correction_bias: gpt-oss, DeepSeek-style noaux_tc, nemotron_h (NemotronHMoE),
    # MiniMax use_routing_bias, Step use_moe_router_bias
    if (model_type in ("gpt_oss", "nemotron_h") or t.get("topk_method") == "noaux_tc" or t.get("use_routing_bias")
            or t.get("use_moe_router_bias")):
        router += f.num_experts
    if model_type.startswith("qwen3") and f.num_shared and "shared_expert_intermediate_size" in t:
        router += hidden  # shared_expert_gate [1 x hidden] (Qwen3-Next, Qwen3.5)
    if model_type.startswith("gemma4"):
        router += hidden + f.num_experts  # Gemma4Router.scale [hidden] and Gemma4MoE.per_expert_scale [E]
    return {"routed_experts": routed, "shared_experts": f.num_shared * _mlp_params(hidden, f.shared_intermediate, f.gated),
            "router": router}


def _nemotron_ffn(t: dict, kind: str, name: str) -> FFN:
    """The FFN block of a nemotron_h layer: '-' a squared-ReLU MLP of ``intermediate_size``, 'E' an MoE of
    non-gated squared-ReLU experts (``moe_intermediate_size``) with ``n_shared_experts`` shared experts of
    ``moe_shared_expert_intermediate_size``, latent when ``moe_latent_size`` is set (vLLM nemotron_h.py NemotronHMoE:
    routed experts in the latent width, fc1/fc2_latent_proj around them)."""
    gated = str(t.get("mlp_hidden_act", "relu2")) not in ("relu2", "relu")
    if kind == "dense":
        inter = t.get("intermediate_size")
        if isinstance(inter, list):  # per-MLP-layer sizes are only used by heterogeneous (puzzle) checkpoints
            raise ClusterfitError(f"unsupported architecture: per-layer intermediate_size lists in nemotron_h ({name})")
        return FFN("dense", intermediate=_req(t, "intermediate_size", name), gated=gated)
    n_exp = _req(t, "n_routed_experts", name)
    top_k = _req(t, "num_experts_per_tok", name)
    if top_k > n_exp:
        raise ClusterfitError(f"config for {name}: num_experts_per_tok must be in 1..{n_exp}, got {top_k}")
    n_shared = int(_cfg(t, "n_shared_experts", default=0) or 0)
    shared_i = int(_cfg(t, "moe_shared_expert_intermediate_size", default=0) or 0) if n_shared else 0
    latent = t.get("moe_latent_size")
    return FFN("moe", num_experts=n_exp, top_k=top_k, expert_intermediate=_req(t, "moe_intermediate_size", name),
               num_shared=1 if n_shared and shared_i else 0, shared_intermediate=n_shared * shared_i,
               latent_dim=int(latent) if latent else None, gated=gated)


def _ffn_for_layer(t: dict, i: int, n_layers: int, model_type: str, name: str) -> FFN:
    n_exp = int(_cfg(t, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0)
    inter = int(_cfg(t, "intermediate_size", default=0) or 0)
    if n_exp == 0:
        if inter <= 0:
            raise ClusterfitError(f"config for {name} is missing required field 'intermediate_size'")
        return FFN("dense", intermediate=inter, gated=model_type not in LAYERNORM_MODELS)
    top_k = int(_cfg(t, "num_experts_per_tok", "num_experts_per_token", "experts_per_token", "top_k_experts",
                     default=0) or 0)
    if top_k <= 0 or top_k > n_exp:
        raise ClusterfitError(f"config for {name}: num_experts_per_tok must be in 1..{n_exp}, got {top_k}")
    # which layers are MoE
    moe = True
    first_dense = int(_cfg(t, "first_k_dense_replace", default=0) or 0)
    mlp_types = t.get("mlp_layer_types")
    moe_flags = _flag_list(t, "moe_layer_freq", n_layers, name)  # MiMo-V2-Flash, MiniMax-M3: 1 = MoE layer
    if isinstance(mlp_types, list) and i < len(mlp_types):
        moe = mlp_types[i] != "dense"
    elif moe_flags is not None:
        moe = bool(moe_flags[i])
    elif i < first_dense:
        moe = False
    elif isinstance(t.get("moe_layers"), list):
        moe = i in set(t["moe_layers"])
    elif t.get("interleave_moe_layer_step"):
        moe = (i + 1) % int(t["interleave_moe_layer_step"]) == 0
    elif isinstance(t.get("mlp_only_layers"), list) and i in t["mlp_only_layers"]:
        moe = False
    if not moe:
        # dense layers of an MoE model: intermediate_size_mlp (Llama 4), dense_intermediate_size (MiniMax-M3)
        dense_i = int(_cfg(t, "intermediate_size_mlp", "dense_intermediate_size", default=inter) or 0)
        if dense_i <= 0:
            raise ClusterfitError(f"config for {name} is missing required field 'intermediate_size'")
        return FFN("dense", intermediate=dense_i)
    if model_type in ("mixtral", "gpt_oss", "llama4_text", "minimax_m2"):
        expert_i = inter  # these configs give the expert width as intermediate_size
    else:
        expert_i = int(_cfg(t, "moe_intermediate_size", default=0) or 0)
    if expert_i <= 0:
        raise ClusterfitError(f"config for {name} is missing required field 'moe_intermediate_size'")
    n_shared = int(_cfg(t, "n_shared_experts", "num_shared_experts", default=0) or 0)
    shared_i = expert_i
    # the shared expert's width: Qwen2/3-MoE shared_expert_intermediate_size (one expert), MiniMax
    # shared_intermediate_size, Step share_expert_dim
    sei = _cfg(t, "shared_expert_intermediate_size", "shared_intermediate_size", "share_expert_dim")
    if sei is not None:
        if isinstance(sei, bool) or not isinstance(sei, int) or sei < 0:
            raise ClusterfitError(f"config for {name}: the shared expert width must be a non-negative integer, "
                                  f"got {sei!r}")
        if "shared_expert_intermediate_size" in t:
            n_shared, shared_i = (1, sei) if sei > 0 else (0, 0)
        else:
            n_shared, shared_i = (max(n_shared, 1), sei) if sei > 0 else (0, 0)
    if model_type == "llama4_text":
        n_shared, shared_i = 1, inter
    if model_type.startswith("gemma4") and t.get("enable_moe_block"):
        # Gemma 4: every layer runs its dense MLP (intermediate_size) beside the routed experts, on every token
        # (vLLM gemma4.py Gemma4DecoderLayer: "MLP runs unconditionally"): one always-on shared expert
        n_shared, shared_i = 1, inter
    latent = t.get("routed_expert_hidden_size")
    return FFN("moe", num_experts=n_exp, top_k=top_k, expert_intermediate=expert_i, num_shared=n_shared,
               shared_intermediate=shared_i, latent_dim=int(latent) if latent else None,
               expert_bias=model_type == "gpt_oss")


def _qwen_vl_vision_params(vc: dict, text_hidden: int) -> int:
    """Qwen3-VL / Qwen3.5 vision tower (vision_config ``depth``; transformers Qwen3VLVisionModel): per block two
    LayerNorms, fused qkv and proj with biases, a two-matrix MLP with biases; a Conv3d patch embedding
    (in_channels x temporal_patch_size x patch^2 x hidden + bias), learned position embeddings
    (num_position_embeddings x hidden), and the patch merger: LayerNorm, fc1 [h m^2 x h m^2], fc2 [h m^2 x out]
    (m = spatial_merge_size), with biases. Deepstack mergers (deepstack_visual_indexes) add one merger each."""
    h, inter, depth = vc.get("hidden_size"), vc.get("intermediate_size"), vc.get("depth")
    if not (isinstance(h, int) and isinstance(inter, int) and isinstance(depth, int)) or min(h, inter, depth) <= 0:
        return 0
    block = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h)
    patch, temporal = int(vc.get("patch_size") or 16), int(vc.get("temporal_patch_size") or 1)
    p = depth * block + int(vc.get("in_channels") or 3) * temporal * patch * patch * h + h
    p += int(vc.get("num_position_embeddings") or 0) * h
    m = int(vc.get("spatial_merge_size") or 1)
    out = int(vc.get("out_hidden_size") or text_hidden)
    merged = h * m * m
    merger = 2 * h + merged * merged + merged + merged * out + out
    deepstack = vc.get("deepstack_visual_indexes")
    p += merger * (1 + (len(deepstack) if isinstance(deepstack, list) else 0))
    return p


def _vision_params(vc: dict, text_hidden: int) -> int:
    """ViT tower + projector from vision_config (SigLIP / MoonViT style; Qwen-VL style when it gives ``depth``),
    0 when the shape is not given."""
    if "depth" in vc:
        return _qwen_vl_vision_params(vc, text_hidden)
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
        bits = _cfg(q, "bits", default=4)
        if isinstance(bits, bool) or not isinstance(bits, int) or bits not in (4, 8):
            raise ClusterfitError(f"config for {name}: quantization_config.bits must be 4 or 8 (the {method} widths "
                                  f"clusterfit sizes), got {brief(bits)}")
        gs = _cfg(q, "group_size", default=128)
        if isinstance(gs, bool) or not isinstance(gs, int) or not (0 < gs <= MAX_SHAPE or gs == -1 and bits == 8):
            raise ClusterfitError(f"config for {name}: quantization_config.group_size must be a positive integer "
                                  f"(at most {MAX_SHAPE:,}; -1, per-channel, only with 8 bits), got {brief(gs)}")
        for c in _LINEAR_COMPONENTS:
            out[c] = f"int4_g{gs}" if bits == 4 else "int8"
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
    if not 1 <= total_params <= 1e14:
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
    """Lower-case name -> HF id: the HF id itself, the name without org, and short forms: drop -Instruct / -it /
    -v0.1 / -Instruct-2407 suffixes; Llama-4 without the -17B-nE part; a checkpoint-precision suffix of the id
    (NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 -> nvidia-nemotron-3-nano-30b-a3b); the org repeated at the start of the
    name (nemotron-3-nano-30b-a3b); the active-size part of an MoE name (qwen3.5-397b for Qwen3.5-397B-A17B)."""
    import re

    out: dict[str, str] = {}
    for hf_id in sorted(_catalog_files()):
        org, short = (x.lower() for x in hf_id.split("/", 1))
        names = {hf_id.lower(), short}
        trimmed = re.sub(r"-(instruct(-\d+)?|it|v0\.1)$", "", short)
        names.add(trimmed)
        names.add(re.sub(r"-17b-\d+e(-instruct)?$", "", short))
        bare = re.sub(rf"-(?:{'|'.join(map(re.escape, PRECISION_SUFFIXES))})$", "", short)
        names.add(bare)
        if bare.startswith(org + "-"):
            names.add(bare[len(org) + 1:])
        names.add(re.sub(r"-a\d+(?:\.\d+)?b$", "", bare))
        for n in names:
            out.setdefault(n, hf_id)
    return out


# ================================================================================================
# Name resolution: bundled ids, aliases, checkpoint-variant suffixes
# ================================================================================================

#: Checkpoint suffixes that name the weights' precision -> the precision name (precision.py) they stand for.
#: A quantised copy has its base model's architecture; its precision is the suffix's (e.g. Qwen/Qwen3-32B-FP8,
#: RedHatAI/...-FP8-dynamic, nvidia/...-NVFP4, Qwen/...-AWQ = 4-bit groups of 128, ...-GPTQ-Int4/-Int8).
PRECISION_SUFFIXES = {
    "fp8": "fp8", "fp8-dynamic": "fp8", "fp8-kv": "fp8", "fp8-block": "fp8_block", "bf16": "bf16", "fp16": "fp16",
    "nvfp4": "nvfp4", "mxfp4": "mxfp4", "awq": "int4", "gptq-int4": "int4", "gptq": "int4", "int4": "int4",
    "w4a16": "int4", "gptq-int8": "int8", "int8": "int8", "w8a8": "int8",
}
#: Suffixes that name a post-training revision of the same network (same config shapes): instruction / reasoning
#: tuned, chat, base, Hugging Face format, dated releases (-2507, -0528, -2512). Suffixes that change the network
#: (-Air, -Flash, -Coder, -Next, -Nano, -Lite, -Mini, a size, a version such as 3.5) are not in this list and are
#: never stripped: GLM-4.5-Air never becomes GLM-4.5.
REVISION_SUFFIXES = ("instruct", "thinking", "chat", "base", "hf", "it")
_DATE_SUFFIX = r"\d{4}"


@dataclass(frozen=True)
class ModelRef:
    """What a model name resolves to: the bundled HF id whose config describes its architecture, the checkpoint
    precision its name states (a precision name of precision.py, None when the name states none), and the
    suffixes stripped on the way (lower case, outermost first)."""

    hf_id: str
    precision: str | None = None
    stripped: tuple[str, ...] = ()


def _strip_suffix(name: str) -> tuple[str, str] | None:
    """(shorter name, stripped suffix) for one trailing variant suffix of ``name``, or None."""
    import re

    low = name.lower()
    for suffix in sorted(PRECISION_SUFFIXES, key=len, reverse=True):
        if low.endswith("-" + suffix) and len(low) > len(suffix) + 1:
            return name[: -len(suffix) - 1], suffix
    m = re.search(rf"-(?:{'|'.join(REVISION_SUFFIXES)}|{_DATE_SUFFIX})$", low)
    if m and m.start() > 0:
        return name[: m.start()], low[m.start() + 1:]
    return None


def resolve_model_ref(name: str) -> ModelRef | None:
    """The bundled model ``name`` stands for, or None.

    Rule, in order, case-insensitive: (1) a bundled HF id or alias (``model_aliases``); (2) the part after the
    org (``RedHatAI/Llama-3.1-8B-Instruct`` -> ``Llama-3.1-8B-Instruct``); (3) the name with checkpoint-variant
    suffixes stripped one at a time from the end, each shorter name tried by (1) and (2): precision suffixes
    (PRECISION_SUFFIXES: -FP8, -BF16, -NVFP4, -AWQ, -GPTQ-Int4, ...) and revision suffixes (REVISION_SUFFIXES:
    -Instruct, -Thinking, -Chat, -Base, -hf, -it, and dates such as -2507 / -0528). A suffix maps to the same
    architecture because a quantised copy or an instruction / reasoning / dated revision of a base model keeps its
    config shapes (Qwen3-235B-A22B-Instruct-2507 and Qwen3-235B-A22B: 94 layers, 128 experts of 1536, 64/4
    heads); only names built that way resolve, so a different network (GLM-4.5-Air, Qwen3-Coder) never maps to
    its family's base. The outermost precision suffix is the checkpoint's precision (``ModelRef.precision``).
    Caveat: a revision may extend the context (max_position_embeddings) of the bundled base."""
    aliases = model_aliases()
    cand = str(name).strip()
    stripped: list[str] = []
    while cand:
        for key in (cand.lower(), cand.split("/", 1)[-1].lower()):
            if key in aliases:
                precision = next((PRECISION_SUFFIXES[s] for s in stripped if s in PRECISION_SUFFIXES), None)
                return ModelRef(aliases[key], precision, tuple(stripped))
        step = _strip_suffix(cand)
        if step is None:
            return None
        cand, suffix = step
        stripped.append(suffix)
    return None


def resolve_model_id(name: str) -> str | None:
    """The bundled HF id ``name`` stands for (``resolve_model_ref``'s rule), or None when it names no bundled
    architecture. E.g. 'Qwen3-235B-A22B-Instruct-2507' -> 'Qwen/Qwen3-235B-A22B', 'deepseek-r1-0528' ->
    'deepseek-ai/DeepSeek-R1', 'RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic' -> 'meta-llama/Llama-3.3-70B-Instruct'."""
    ref = resolve_model_ref(name)
    return ref.hf_id if ref else None


def checkpoint_precision(name: str) -> str | None:
    """The weight precision a model name's suffix states ('Qwen3-32B-FP8' -> 'fp8', '...-AWQ' -> 'int4',
    '...-NVFP4' -> 'nvfp4'), or None; precision names as precision.py spells them."""
    cand, found = str(name).strip(), None
    while (step := _strip_suffix(cand)) is not None:
        cand, suffix = step
        if suffix in PRECISION_SUFFIXES and found is None:
            found = PRECISION_SUFFIXES[suffix]
    return found


def _family(fmt: str) -> str:
    return "int4" if fmt.startswith("int4") else fmt.split("_", 1)[0]


def with_checkpoint_precision(model: ModelArch, precision: str, label: str) -> ModelArch:
    """``model`` stored in ``precision``: the quantisable components (precision.QUANTISABLE) in that format, as a
    ``--precision`` would set them; unchanged when the config's own quantization is of that family already (the
    config knows the layout better than a name). ``label`` names where the precision comes from (for the notes)."""
    from dataclasses import replace

    from .precision import QUANTISABLE, weight_format

    fmt = weight_format(precision, model.hidden or 4096).name
    current = {model.quantization.get(c, "bf16") for c in QUANTISABLE if model.params.get(c)}
    if current and all(_family(f) == _family(fmt) for f in current):
        return model
    quant = dict(model.quantization) or dict.fromkeys(COMPONENTS, "bf16")
    for c in QUANTISABLE:
        quant[c] = fmt
    if fmt in ("bf16", "fp16"):
        quant = dict.fromkeys(COMPONENTS, fmt)
    note = f"checkpoint precision {fmt} from {label} (linear layers; embeddings, norms and router 16-bit)"
    return replace(model, quantization=quant, notes=model.notes + (note,))


def list_models() -> list[str]:
    """HF ids of the bundled model configs, sorted."""
    return sorted(_catalog_files())


class _Constant:
    """NaN / Infinity / -Infinity as ``parse_config_text`` parses them, until it reads them as null."""

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal


def parse_config_text(text: str, origin: str) -> dict[str, Any]:
    """A config.json's text as a dict: JSON, nesting and non-finite numbers checked as clusterfit.inputs does, except
    that the JSON constants Infinity / -Infinity / NaN read as null: Hugging Face writes float('inf') that way and
    real configs carry it in fields clusterfit does not read (nemotron_h ``time_step_limit: [0.0, Infinity]``). Its
    objects are ConfigObjects: a field clusterfit reads that held one is refused as a non-finite number."""
    import json

    from .inputs import check_depth, nested_too_deep, parse_problem, unique_keys

    def object_of(pairs: list[tuple[str, Any]]) -> ConfigObject:
        fields = unique_keys(pairs)
        out = ConfigObject({k: None if isinstance(v, _Constant) else v for k, v in fields.items()})
        out.non_finite = {k: f"{origin}: {k}: {float(v.literal)} is not a finite number"
                          for k, v in fields.items() if isinstance(v, _Constant)}
        return out

    try:
        data = json.loads(text, parse_constant=_Constant, object_pairs_hook=object_of)
    except RecursionError:
        raise nested_too_deep(origin) from None
    except json.JSONDecodeError as exc:
        raise ClusterfitError(f"{origin}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
                              ) from None
    except ValueError as exc:   # unique_keys: a key given twice; an integer of more digits than int() reads
        raise ClusterfitError(f"{origin}: not valid JSON: {parse_problem(exc)}") from None
    check_depth(data, origin)
    _constants_in_lists_as_null(data)
    if not isinstance(data, dict):
        raise ClusterfitError(f"{origin} must hold a JSON object (a Hugging Face config.json)")
    return data


def _constants_in_lists_as_null(data: Any) -> None:
    """Read the NaN / Infinity a list holds (``_Constant``: objects read theirs as they are made) as null, in place
    (iteratively: nesting is checked, but not deep enough to recurse on)."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            node[:] = [None if isinstance(v, _Constant) else v for v in node]
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a config.json from disk (clusterfit.inputs: size-limited UTF-8; parse_config_text: one-line errors with
    the position)."""
    from .inputs import read_text

    p = Path(path)
    return parse_config_text(read_text(p, "model config"), f"model config {p}")


def checked_parse(config: dict[str, Any], name: str, hf_id: str | None = None) -> ModelArch:
    """``parse_config`` for a config from outside the package (a file, the Hub, the HTTP API's inline config): a
    malformed value it does not check by name (a string where a number belongs, a list too short) is a
    ClusterfitError, not a crash. Nesting, size and non-finite numbers anywhere in it are checked as
    clusterfit.inputs.check_depth does: a config parsed by another JSON reader (an HTTP body) may hold NaN /
    Infinity where parse_config_text would have read null."""
    from .inputs import check_depth

    check_depth(config, f"config for {name}")
    try:
        return parse_config(config, name=name, hf_id=hf_id)
    except ClusterfitError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError, OverflowError) as exc:
        raise ClusterfitError(f"config for {name}: malformed config.json ({type(exc).__name__}: {exc})") from None


_CACHE: dict[str, ModelArch] = {}


def _is_local(p: Path) -> bool:
    """Whether ``p`` is a folder or a file here; a name the file system cannot hold (too long, a NUL) is neither."""
    try:
        return p.is_dir() or p.is_file()
    except (OSError, ValueError):
        return False


def _exists(p: Path) -> bool:
    """Whether anything is at ``p`` (a file, a folder, a FIFO, a device); a name the file system cannot hold is not."""
    try:
        return p.exists()
    except (OSError, ValueError):
        return False


def load_variant(key: str, ref: ModelRef) -> ModelArch:
    """The bundled model ``key`` resolves to (``resolve_model_ref``): its base's architecture, in the precision its
    suffix states, named and served (``checkpoint_id``) as the variant. Reads package data only (the HTTP API
    resolves names with it, never looking for a file of that name)."""
    model = load_bundled(ref.hf_id)
    if ref.precision is not None:
        suffix = next(s for s in ref.stripped if s in PRECISION_SUFFIXES)
        model = with_checkpoint_precision(model, ref.precision, f"the name suffix -{suffix}")
    if ref.stripped:
        from dataclasses import replace

        from .hub import is_repo_id

        # the checkpoint is the variant the name names, not the bundled base whose shapes it shares: its id when
        # the name is one (org/name), else unknown (deploy then asks for it)
        note = (f"'{key}' read as {ref.hf_id}'s architecture (suffixes "
                f"{', '.join('-' + s for s in ref.stripped)} name a checkpoint variant of the same network)")
        model = replace(model, name=key.split("/", 1)[-1], checkpoint_id=key if is_repo_id(key) else None,
                        notes=model.notes + (note,))
    return model


def load_model(name: str) -> ModelArch:
    """A model by name, case-insensitive: a path to a config.json (or a folder holding one); a bundled HF id or
    alias, or a checkpoint variant of one (``resolve_model_ref``: 'Qwen3-32B-FP8' is Qwen/Qwen3-32B's architecture
    stored in fp8, ``with_checkpoint_precision``); else a Hugging Face id (org/name) whose config.json is fetched
    from the Hub (``clusterfit.hub``: cached, offline-aware). Unknown names raise ClusterfitError listing close
    matches."""
    from .errors import unknown

    key = str(name).strip()
    if not key:
        raise ClusterfitError("model name is empty")
    if key in _CACHE:
        return _CACHE[key]
    p = Path(key)
    if key.endswith(".json") or _is_local(p):
        if _is_local(p) and not p.is_file():
            p = p / "config.json"
        if not _exists(p):   # a FIFO or a device exists: read_config_file says what it is
            raise ClusterfitError(f"config file not found: {p}")
        model = checked_parse(read_config_file(p), name=p.parent.name if p.name == "config.json" else p.stem)
        _CACHE[key] = model
        return model
    ref = resolve_model_ref(key)
    if ref is not None:
        model = _CACHE[key] = load_variant(key, ref)
        return model
    from . import hub

    if hub.is_repo_id(key):
        model = checked_parse(hub.fetch_config(key), name=key.split("/", 1)[1], hf_id=key)
        _CACHE[key] = model
        return model
    aliases = model_aliases()
    shown = key if len(key) <= 200 else key[:200] + "..."
    exc = unknown("model", shown, sorted(set(aliases.values())) + sorted(aliases))
    raise ClusterfitError(f"{exc} A model that is not bundled can be named by its Hugging Face id (org/name: its "
                          "config.json is fetched from the Hub) or by the path of its config.json.")


def load_bundled(hf_id: str) -> ModelArch:
    """A bundled model by its HF id, read from package data only (never from a path a caller names). A bundled id
    with a precision suffix whose config carries no quantization_config (nvidia/...-FP8) is stored in that
    precision (``with_checkpoint_precision``)."""
    from importlib.resources import files

    if hf_id not in _CACHE:
        fname = _catalog_files()[hf_id]
        data = parse_config_text(files("clusterfit").joinpath(_MODEL_DIR, fname).read_text(encoding="utf-8"), fname)
        model = parse_config(data, name=hf_id.split("/", 1)[1], hf_id=hf_id)
        text_config = data.get("text_config")
        text: dict[str, Any] = text_config if isinstance(text_config, dict) else data
        precision = checkpoint_precision(hf_id)
        if precision is not None and not (data.get("quantization_config") or text.get("quantization_config")):
            model = with_checkpoint_precision(model, precision, f"the checkpoint name {hf_id}")
        _CACHE[hf_id] = model
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
