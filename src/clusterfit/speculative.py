"""Speculative decoding (MTP, EAGLE, draft models): what one decode step yields and what its drafter costs.

A speculative decode step of a sequence verifies ``k`` draft tokens (vLLM ``num_speculative_tokens``; SGLang
``--speculative-num-steps`` with ``--speculative-eagle-topk 1``, which verifies ``--speculative-num-draft-tokens`` =
k + 1 tokens: the last accepted one and k drafts) in one forward pass of the target model, after the drafter
proposed them one at a time. With each draft accepted with probability ``a`` independently of the others, the step
emits on average

    tokens_per_step(k, a) = (1 - a^(k+1)) / (1 - a)

tokens per sequence: the accepted prefix of the drafts plus the target's own token at the first rejection (or the
bonus token after k acceptances); Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative
Decoding" (ICML 2023, arXiv:2211.17192), eq. (1). Engines and posts report the same quantity as the "mean accept
length" / "acceptance length" (vLLM's spec-decode metrics: accepted tokens per draft + 1); ``acceptance_for_length``
inverts it.

The drafter of MTP / NextN (DeepSeek, GLM, Qwen3.5: the checkpoint's own multi-token-prediction layer) and of EAGLE /
EAGLE-3 (a trained draft head) is one decoder layer of the target's width followed by an LM head, run once per
draft token on the batch's sequences. ``draft_cost_fraction`` charges it as the share of the target's per-token
active parameters that one such pass reads: one decoder layer's active parameters plus the LM head's, over the
target's active parameters (decode is bound by those reads at the batch sizes speculative decoding is used at).
An EAGLE head whose config.json the user gives (``draft_head``) is charged its own parameters instead, and its
weights and KV cache are counted in memory (memory.drafter_weight_bytes_per_gpu, draft_kv_bytes_per_token_per_gpu).
The simulator (sim.config.SpeculativeSpec) multiplies a step by 1 + k x that fraction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal, get_args

from .errors import ClusterfitError, ParameterError

if TYPE_CHECKING:  # the request schemas import this module: no model code at their import
    from .arch import ModelArch

#: The drafters clusterfit prices (the vLLM ``method`` names; SGLang's ``--speculative-algorithm`` EAGLE / EAGLE3 /
#: NEXTN map to them): mtp, eagle and eagle3 as one decoder layer + LM head per draft token; ngram (prompt lookup)
#: drafts on the CPU.
SpeculativeMethod = Literal["mtp", "eagle", "eagle3", "ngram"]
METHODS: tuple[str, ...] = get_args(SpeculativeMethod)
ONE_LAYER_DRAFTERS = ("mtp", "eagle", "eagle3")
#: The drafters that are a trained EAGLE head (a config.json of their own describes them: draft_head).
HEAD_DRAFTERS = ("eagle", "eagle3")

#: Per-draft-token acceptance used when neither the user nor the source gives one: 0.7. Source: GLM-5.2's native MTP
#: layer at num_speculative_tokens 5 accepts a mean 2.9 tokens per step on GSM8K in vLLM
#: (huggingface.co/RedHatAI/GLM-5.2-speculator.dspark-preview, discussion #4), which is a = 0.69 in
#: tokens_per_step. It is optimistic for deep drafts on hard data and pessimistic for one draft token: DeepSeek-V3's
#: MTP accepts its second token 85-90% of the time (DeepSeek-V3 Technical Report, arXiv:2412.19437, section 5.4.3).
DEFAULT_ACCEPTANCE = 0.7

#: Most draft tokens per step a request or a scenario may ask for.
MAX_DRAFT_TOKENS = 16


def tokens_per_step(draft_tokens: int, acceptance: float) -> float:
    """Mean tokens one speculative step emits per sequence: 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a), summed by
    Horner's rule (1 + a (1 + a (...))), whose every operation rises with ``a``: the closed form loses that by an
    ulp near a = 1, which bisection over it (acceptance_for_length) relies on."""
    k, a = int(draft_tokens), float(acceptance)
    if k < 0 or not 0.0 <= a <= 1.0:
        raise ClusterfitError(f"speculative decoding: need draft tokens >= 0 and acceptance in [0, 1], got {k}, {a}")
    t = 1.0
    for _ in range(k):
        t = 1.0 + a * t
    return t


def acceptance_for_length(draft_tokens: int, accept_length: float) -> float:
    """The per-draft-token acceptance ``a`` whose tokens_per_step(k, a) equals ``accept_length`` (the mean tokens
    emitted per step, bonus token included: 1 <= length <= k + 1). Bisection; the function rises with ``a``."""
    k, t = int(draft_tokens), float(accept_length)
    if k < 1:
        raise ClusterfitError(f"speculative decoding: draft tokens must be >= 1, got {k}")
    if not 1.0 <= t <= k + 1:
        raise ClusterfitError(f"speculative decoding: an acceptance length of {t:g} tokens per step is outside 1.."
                              f"{k + 1} for {k} draft tokens")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if tokens_per_step(k, mid) < t:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def check_drafter(model: ModelArch, method: str) -> None:
    """Refuse a drafter ``model`` cannot run: an unknown method, or mtp (the default) for a checkpoint without MTP
    (NextN) layers, whose drafts would otherwise be priced from layers it does not have."""
    if method not in METHODS:
        raise ParameterError("speculative_method", f"'{method}' is unsupported; use one of {', '.join(METHODS)}")
    if method == "mtp" and not model.mtp_layers:
        raise ParameterError("speculative_method", f"mtp (the default) drafts with the checkpoint's own MTP (NextN) "
                             f"layers and {model.name} has none; choose eagle3 or eagle (a trained draft head) or "
                             "ngram (in a scenario: simulation.replica.speculative.method)")


def draft_cost_fraction(model: ModelArch, method: str, head: DraftHead | None = None) -> float:
    """Time of one draft token as a fraction of a target decode step (see the module docstring): for a one-layer
    drafter, (active parameters of one decoder layer + LM head) / active parameters of the target; an EAGLE head
    described by its config (``head``), its own parameters over the target's; 0 for n-gram lookup. The drafter must
    be one ``model`` can run (check_drafter)."""
    check_drafter(model, method)
    if method == "ngram":
        return 0.0
    if head is not None and method in HEAD_DRAFTERS:
        return float(head.read_params / max(model.active_params, 1))
    lm_head = model.params.get("lm_head", 0) or model.params.get("embedding", 0)  # a tied head reads the embedding
    body = model.active_params - model.params.get("embedding", 0) - model.params.get("lm_head", 0)
    per_layer = body / max(model.num_layers, 1)
    return float((per_layer + lm_head) / max(model.active_params, 1))


#: Most decoder layers a draft head may have (EAGLE heads have one; SpecForge's configs all set 1).
MAX_DRAFT_LAYERS = 8
#: Keys of a draft config that make its layer a mixture of experts, which draft_head does not size.
_MOE_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")


@dataclass(frozen=True)
class DraftHead:
    """An EAGLE / EAGLE-3 draft head as vLLM loads it beside the target (vllm/model_executor/models/llama_eagle.py
    and llama_eagle3.py; v1/spec_decode/eagle.py EagleProposer.load_model), from the head's config.json:

    - ``num_hidden_layers`` Llama decoder layers; EAGLE-3's first takes embedding and hidden state side by side, so
      its q/k/v projections read 2 x hidden_size inputs;
    - ``fc``: EAGLE-3 fuses three target hidden states, 3 x (target_hidden_size or hidden_size) -> hidden_size; EAGLE
      fuses the embedding with one, 2 x hidden_size -> hidden_size; no bias, replicated on every TP rank;
    - the LM head: EAGLE-3's own, draft_vocab_size rows (vocab_size where absent); EAGLE shares the target's;
    - the token embedding: shared with the target when its vocabulary is the target's, else the head's own.

    ``sharded_params`` split over the TP ranks (attention, MLP, LM head, own embedding), ``replicated_params`` sit on
    each (fc, norms); ``embedding_params``: the own embedding among the sharded (0 when shared), which a draft token
    looks up one row of rather than reads; ``kv_heads`` x ``head_dim`` per layer go to the KV cache
    (memory.draft_kv_bytes_per_token_per_gpu).
    """

    source: str
    layers: int
    kv_heads: int
    head_dim: int
    sharded_params: int
    replicated_params: int
    embedding_params: int = 0

    @property
    def read_params(self) -> int:
        """Parameters one draft token reads: all but the embedding table."""
        return self.sharded_params + self.replicated_params - self.embedding_params

    def weight_bytes_per_gpu(self, tp: int, bytes_per_param: float = 2.0) -> float:
        """Bytes of the head on one GPU of a TP group (16-bit weights: vLLM loads the head in the target's dtype)."""
        return (self.sharded_params / max(int(tp), 1) + self.replicated_params) * bytes_per_param

    def kv_bytes_per_token_per_gpu(self, tp: int, kv_bytes_per_elem: float) -> float:
        """KV bytes per token on one GPU: K and V of the head's KV heads split over TP (one per rank where TP
        exceeds them, as vLLM replicates them), every layer."""
        return self.layers * 2.0 * max(1, self.kv_heads // max(int(tp), 1)) * self.head_dim * kv_bytes_per_elem


def draft_head(config: object, target: ModelArch, method: str, source: str = "the draft config") -> DraftHead:
    """The DraftHead of ``method`` (eagle or eagle3) a draft checkpoint's config.json describes; refuses with a
    ParameterError naming ``speculative_draft_config`` what it cannot size: another drafter, a MoE head, a width
    that is not the target's, missing or non-positive sizes."""
    def bad(msg: str) -> ParameterError:
        return ParameterError("speculative_draft_config", f"{source}: {msg}")

    if method not in HEAD_DRAFTERS:
        raise bad(f"only eagle and eagle3 load a draft head; {method} drafts without one")
    if not isinstance(config, dict):
        raise bad("a config.json must be a JSON object")
    if any(config.get(k) for k in _MOE_KEYS):
        raise bad("a mixture-of-experts draft layer is not sized; give a dense (Llama-style) head")
    archs = config.get("architectures")
    named = [str(a) for a in archs if "eagle3" in str(a).lower()] if isinstance(archs, list) else []
    if method == "eagle" and (named or "draft_vocab_size" in config):
        # an EAGLE-3 head (its architectures name it; draft_vocab_size is EAGLE-3's own field) sized as EAGLE: the
        # two differ in weights (fused hidden states, a draft vocabulary) and in cost
        raise ParameterError("speculative_method", f"{source} describes an EAGLE-3 head "
                             f"({', '.join(named) or 'draft_vocab_size'}), but the method is eagle; give "
                             "--speculative-method eagle3")

    def size(key: str, default: int | None = None) -> int:
        v = config.get(key)
        v = default if v is None else v   # null in a config.json is absent
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise bad(f"'{key}' must be a positive integer, got {v!r}")
        return v

    h, heads = size("hidden_size"), size("num_attention_heads")
    kv, layers, inter = size("num_key_value_heads", heads), size("num_hidden_layers", 1), size("intermediate_size")
    if config.get("head_dim") is None and h % heads:
        raise bad(f"give 'head_dim': hidden_size {h:,} is not a multiple of num_attention_heads {heads:,}")
    hd, vocab = size("head_dim", h // heads), size("vocab_size")
    if layers > MAX_DRAFT_LAYERS:
        raise bad(f"'num_hidden_layers' {layers:,} is more than the {MAX_DRAFT_LAYERS} layers a draft head has")
    if h != target.hidden and "target_hidden_size" not in config:
        raise bad(f"hidden_size {h:,} is not {target.name}'s {target.hidden:,}: the head reads the target's hidden "
                  "states")
    target_h = size("target_hidden_size", h)
    bias = (heads + 2 * kv) * hd if config.get("attention_bias") else 0
    qkv = (heads + 2 * kv) * hd   # q/k/v outputs; EAGLE-3's first layer reads 2h inputs, every other layer h
    sharded = (layers * h + (h if method == "eagle3" else 0)) * qkv + layers * (bias + heads * hd * h + 3 * h * inter)
    replicated = layers * 2 * h + h + (3 * target_h * h if method == "eagle3" else 2 * h * h)  # norms, final, fc
    if method == "eagle3":
        sharded += size("draft_vocab_size", vocab) * h
        replicated += h  # the norm of the fused hidden state
    embedding = vocab * h if vocab != target.vocab else 0  # not the target's vocabulary: the head keeps its own
    return DraftHead(source, layers, kv, hd, sharded + embedding, replicated, embedding)


@dataclass(frozen=True)
class Drafting:
    """Speculative decoding as the step models take it: ``draft_tokens`` verified per step, each accepted with
    probability ``acceptance``, the drafter costing ``draft_cost`` of a decode step per draft token."""

    method: str
    draft_tokens: int
    acceptance: float
    draft_cost: float

    @property
    def tokens_per_step(self) -> float:
        return tokens_per_step(self.draft_tokens, self.acceptance)

    @property
    def step_factor(self) -> float:
        """A speculative step's time over its verify pass: 1 + k x draft cost (the simulator's draft factor)."""
        return 1.0 + self.draft_tokens * self.draft_cost

    def as_dict(self) -> dict[str, float | int | str]:
        """The JSON block perf and plan answer with: the fields and ``tokens_per_step``."""
        return {**asdict(self), "tokens_per_step": self.tokens_per_step}
