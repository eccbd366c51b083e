"""Parallel layouts of one model replica and their validity rules.

A replica spans ``tp * dp * pp`` GPUs:
  tp: tensor parallelism of attention (heads split; KV heads replicated when tp exceeds them) and dense MLPs;
  dp: attention data parallelism inside the replica (TensorRT-LLM "DEP", SGLang "DP attention"): dp groups of
      tp GPUs each run attention for their own sequences; only meaningful for MoE models;
  ep: expert parallelism of the MoE layers over the tp*dp GPUs of a stage (experts split over ep ranks,
      each expert tensor-split over moe_tp = tp*dp/ep ranks);
  pp: pipeline stages (consecutive layers; embedding on the first stage, LM head on the last).
Replicas (independent copies behind a load balancer) are not part of a layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from .arch import ModelArch, max_experts, model_memo
from .errors import ClusterfitError, ParameterError

if TYPE_CHECKING:
    from .precision import Precision
    from .hardware import System

MAX_PARALLEL = 4096


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1

    @property
    def gpus(self) -> int:
        """GPUs in one replica."""
        return self.tp * self.dp * self.pp

    @property
    def gpus_per_stage(self) -> int:
        return self.tp * self.dp

    @property
    def moe_tp(self) -> int:
        """Tensor-parallel degree of each expert (tp*dp/ep)."""
        return max(1, self.gpus_per_stage // self.ep)

    def label(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.dp > 1:
            parts.append(f"DP{self.dp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        return " ".join(parts)


def _check_sizes(layout: Layout) -> None:
    """Every parallel size is an integer in 1..MAX_PARALLEL."""
    for name in ("tp", "pp", "ep", "dp"):
        v = getattr(layout, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1 or v > MAX_PARALLEL:
            raise ClusterfitError(f"{name} must be an integer between 1 and {MAX_PARALLEL}, got {v!r}")


class LayoutProblem(NamedTuple):
    """Why a layout cannot run a model: the size at fault (``tp``, ``pp``, ``ep`` or ``dp``: the parameter an error
    names) and a sentence."""

    parameter: str
    text: str


def layout_problem(model: ModelArch, layout: Layout) -> LayoutProblem | None:
    """Why ``layout`` cannot run ``model``, or None when it can."""
    _check_sizes(layout)
    if not model.layers:  # back-of-envelope model: weights split evenly, nothing else to check
        return None
    memo = model_memo(model)   # the walk over the layers depends on tp only (the planner asks for every layout)
    key = ("layout._tp_problem", layout.tp)
    if key not in memo:
        memo[key] = _tp_problem(model, layout.tp)
    if memo[key] is not None:
        return memo[key]
    if layout.pp > model.num_layers:
        return LayoutProblem("pp", f"PP={layout.pp} exceeds the {model.num_layers} layers")
    if not model.is_moe:
        if layout.ep > 1:
            return LayoutProblem("ep", f"EP={layout.ep} needs an MoE model; {model.name} is dense")
        if layout.dp > 1:
            return LayoutProblem("dp", f"attention DP={layout.dp} needs an MoE model; for a dense model use replicas "
                                 "instead")
        return None
    if layout.gpus_per_stage % layout.ep:
        return LayoutProblem("ep", f"EP={layout.ep} must divide tp*dp={layout.gpus_per_stage} (experts live on the "
                             "GPUs of a stage)")
    n_exp = max_experts(model)
    if layout.ep > n_exp:
        return LayoutProblem("ep", f"EP={layout.ep} exceeds the {n_exp} experts")
    return None


def _tp_problem(model: ModelArch, tp: int) -> LayoutProblem | None:
    """The first layer whose heads TP=``tp`` cannot split, or None."""
    for i, layer in enumerate(model.layers):
        a = layer.attention
        if a.num_heads % tp:
            return LayoutProblem("tp", f"TP={tp} does not divide the {a.num_heads} attention heads of layer {i} "
                                 f"(valid TP sizes: {', '.join(map(str, valid_tp_sizes(model, 64)))})")
        kv = a.num_kv_heads
        if not a.kv_split_ok(tp):  # the kind's TP rule (attention.py): softmax KV heads split or replicated evenly
            return LayoutProblem("tp", f"TP={tp} does not divide the {kv} KV heads of layer {i}, and the heads "
                                 f"cannot be replicated evenly (TP must divide {kv} or be a multiple of it)")
    return None


def validate_layout(model: ModelArch, layout: Layout, system: System | None = None) -> None:
    """Raise a ParameterError naming the size at fault (tp, pp, ep or dp) when ``layout`` cannot run ``model`` (on
    ``system``, if given)."""
    problem = layout_problem(model, layout)
    if problem is not None:
        raise ParameterError(problem.parameter, f"impossible layout {layout.label()} for {model.name}: {problem.text}")


#: The fp8 weight block of DeepSeek-style checkpoints (quantization_config weight_block_size [128, 128]).
FP8_WEIGHT_BLOCK = 128
#: Engines that refuse a TP split cutting an fp8 weight block (vLLM model_executor/layers/quantization/fp8.py: the
#: linear and fused-MoE create_weights raise "... is not divisible by weight quantization block_n = 128"; SGLang's
#: fp8.py keeps the same checks).
BLOCK_SPLIT_ENGINES = ("vllm", "sglang")


def block_split_problem(model: ModelArch, precision: Precision, layout: Layout) -> LayoutProblem | None:
    """Why a TP split cuts the 128-wide fp8 weight blocks of ``precision`` (None when it does not): each rank's share
    of a dense or shared MLP (intermediate / tp) and of a routed expert (expert intermediate / moe_tp) must be whole
    blocks. MiniMax-M2.5's 1536-wide experts over TP8 without EP leave 192 per rank. Once per model, the three
    components' formats, tp and moe_tp (the planner asks for every layout it compiles)."""
    blocked = tuple(c for c in ("dense_mlp", "shared_experts", "routed_experts")
                    if c in precision.formats and precision.formats[c].name == "fp8_block")
    if not blocked:
        return None
    memo = model_memo(model)
    key = ("layout.block_split_problem", blocked, layout.tp, layout.moe_tp)
    if key not in memo:
        memo[key] = _first_block_split(model, blocked, layout.tp, layout.moe_tp)
    return memo[key]


def _first_block_split(model: ModelArch, blocked: tuple[str, ...], tp: int, moe_tp: int) -> LayoutProblem | None:
    for i, layer in enumerate(model.layers):
        f = layer.ffn
        for component, width, ranks, name in (
                ("dense_mlp", f.intermediate if f.kind == "dense" else 0, tp, "--tp"),
                ("shared_experts", f.shared_intermediate if f.num_shared else 0, tp, "--tp"),
                ("routed_experts", f.expert_intermediate if f.kind == "moe" else 0, moe_tp, "--ep")):
            if width and component in blocked and (width % ranks or (width // ranks) % FP8_WEIGHT_BLOCK):
                fix = ("use a smaller --tp" if name == "--tp" else
                       "give --ep, so that each expert splits over fewer ranks")
                return LayoutProblem(name.lstrip("-"), (
                    f"its {component.replace('_', ' ')} of layer {i} are {width} wide; split over {ranks} ranks that "
                    f"is {width / ranks:g} per rank, not whole {FP8_WEIGHT_BLOCK}-wide fp8 weight blocks, which the "
                    f"engine refuses to load ({fix})"))
    return None


def valid_tp_sizes(model: ModelArch, max_tp: int) -> list[int]:
    """TP sizes 1..max_tp (powers of two and divisors) that satisfy the head rules."""
    out = []
    for tp in range(1, max_tp + 1):
        if all(layer.attention.num_heads % tp == 0 for layer in model.layers) and \
                layout_problem(model, Layout(tp=tp)) is None:
            out.append(tp)
    return out


def default_layout(model: ModelArch, system: System | None, gpus: int) -> Layout:
    """The default layout for ``gpus`` GPUs: TP inside the scale-up domain (node), PP across it.

    tp = the largest valid TP that divides ``gpus`` and fits in one NVLink domain (at most gpus_per_node
    unless the domain spans nodes, as on NVL72); pp = gpus / tp. MoE models spread their experts over
    the tp GPUs of each stage (ep = tp), or over the largest divisor of tp that divides the expert count when
    there are fewer experts than GPUs (ep = 1: every expert split by TP).
    """
    if gpus < 1:
        raise ClusterfitError(f"a replica needs at least one GPU, got {gpus}")
    cap = min(gpus, system.scale_up_domain_gpus if system is not None else gpus)
    if system is not None and system.scale_up_domain_gpus == system.gpus_per_node:
        cap = min(cap, system.gpus_per_node)
    if not model.layers:
        return Layout(tp=cap if gpus % cap == 0 else 1, pp=gpus // cap if gpus % cap == 0 else gpus)
    for tp in sorted(valid_tp_sizes(model, cap), reverse=True):
        if gpus % tp == 0 and gpus // tp <= model.num_layers:
            ep = 1
            if model.is_moe:
                n_exp = max_experts(model)
                ep = max(d for d in range(1, tp + 1) if tp % d == 0 and n_exp % d == 0)
            return Layout(tp=tp, pp=gpus // tp, ep=ep)
    raise ClusterfitError(f"no valid layout of {model.name} on {gpus} GPUs")


def layout_from_options(model: ModelArch, system: System | None, gpus: int | None = None, tp: int | None = None,
                        pp: int | None = None, ep: int | None = None, dp: int | None = None) -> Layout | None:
    """The layout a user asked for on the command line or in the API.

    Explicit sizes (any of tp/pp/ep/dp; the others default to 1) are validated and checked against ``gpus``;
    otherwise ``gpus`` alone gives default_layout over that many GPUs; with neither, None (the caller picks).
    """
    if gpus is not None and not 1 <= gpus <= MAX_PARALLEL:
        raise ClusterfitError(f"--gpus must be in 1..{MAX_PARALLEL}, got {gpus}")
    if all(v is None for v in (tp, pp, ep, dp)):
        return default_layout(model, system, gpus) if gpus is not None else None
    layout = Layout(tp=tp or 1, pp=pp or 1, ep=ep or 1, dp=dp or 1)
    if gpus is not None and gpus != layout.gpus:
        raise ClusterfitError(f"--gpus {gpus} disagrees with the layout {layout.label()} ({layout.gpus} GPUs)")
    validate_layout(model, layout, system)
    return layout
