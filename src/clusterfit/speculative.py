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
The simulator (sim.config.SpeculativeSpec) multiplies a step by 1 + k x that fraction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal, get_args

from .errors import ClusterfitError

if TYPE_CHECKING:  # the request schemas import this module: no model code at their import
    from .arch import ModelArch

#: The drafters clusterfit prices (the vLLM ``method`` names; SGLang's ``--speculative-algorithm`` EAGLE / EAGLE3 /
#: NEXTN map to them): mtp, eagle and eagle3 as one decoder layer + LM head per draft token; ngram (prompt lookup)
#: drafts on the CPU.
SpeculativeMethod = Literal["mtp", "eagle", "eagle3", "ngram"]
METHODS: tuple[str, ...] = get_args(SpeculativeMethod)
ONE_LAYER_DRAFTERS = ("mtp", "eagle", "eagle3")

#: Per-draft-token acceptance used when neither the user nor the source gives one: 0.7. Source: GLM-5.2's native MTP
#: layer at num_speculative_tokens 5 accepts a mean 2.9 tokens per step on GSM8K in vLLM
#: (huggingface.co/RedHatAI/GLM-5.2-speculator.dspark-preview, discussion #4), which is a = 0.69 in
#: tokens_per_step. It is optimistic for deep drafts on hard data and pessimistic for one draft token: DeepSeek-V3's
#: MTP accepts its second token 85-90% of the time (DeepSeek-V3 Technical Report, arXiv:2412.19437, section 5.4.3).
DEFAULT_ACCEPTANCE = 0.7

#: Most draft tokens per step a request or a scenario may ask for.
MAX_DRAFT_TOKENS = 16


def tokens_per_step(draft_tokens: int, acceptance: float) -> float:
    """Mean tokens one speculative step emits per sequence: (1 - a^(k+1)) / (1 - a) (k + 1 at a = 1)."""
    k, a = int(draft_tokens), float(acceptance)
    if k < 0 or not 0.0 <= a <= 1.0:
        raise ClusterfitError(f"speculative decoding: need draft tokens >= 0 and acceptance in [0, 1], got {k}, {a}")
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


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
    from .schema import ParameterError   # schema imports this module

    if method not in METHODS:
        raise ParameterError("speculative_method", f"'{method}' is unsupported; use one of {', '.join(METHODS)}")
    if method == "mtp" and not model.mtp_layers:
        raise ParameterError("speculative_method", f"mtp (the default) drafts with the checkpoint's own MTP (NextN) "
                             f"layers and {model.name} has none; choose eagle3 or eagle (a trained draft head) or "
                             "ngram (in a scenario: simulation.replica.speculative.method)")


def draft_cost_fraction(model: ModelArch, method: str) -> float:
    """Time of one draft token as a fraction of a target decode step (see the module docstring): for a one-layer
    drafter, (active parameters of one decoder layer + LM head) / active parameters of the target; 0 for n-gram
    lookup. The drafter must be one ``model`` can run (check_drafter)."""
    check_drafter(model, method)
    if method == "ngram":
        return 0.0
    head = model.params.get("lm_head", 0) or model.params.get("embedding", 0)  # a tied head reads the embedding
    body = model.active_params - model.params.get("embedding", 0) - model.params.get("lm_head", 0)
    per_layer = body / max(model.num_layers, 1)
    return float((per_layer + head) / max(model.active_params, 1))


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
