"""Candidate parallel layouts of one replica, enumerated as numpy arrays.

Per pipeline stage of S GPUs (S a power of two inside the scale-up domain, or a multiple of a node for
wide expert parallelism), the variants the engines actually run:

- dense models: TP=S;
- MoE models: TP=S (experts tensor-split), TP=S with EP=S, and attention data parallelism DP=S with
  EP=S (TensorRT-LLM "DEP", SGLang DP-attention), which may span nodes (wide EP over the network).

Stages are stacked with PP (1, 2, 4, ...) across nodes when one stage fills a node. A replica either
fits inside one node (its GPU count divides the node) or takes whole nodes. TP never leaves the
scale-up (NVLink) domain. The head-divisibility rules come from clusterfit.layout.layout_problem.
"""

from __future__ import annotations

import numpy as np

from ..arch import ModelArch
from ..hardware import System
from ..layout import Layout, layout_problem


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique(a) of a 1-D array without NaN (its sorted distinct values), without np.unique: numpy 2's
    np.unique imports numpy.ma on its first call (~10 ms of a plan's start-up)."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a


def _unique_rows(rows: np.ndarray) -> np.ndarray:
    """np.unique(rows, axis=0) of an integer 2-D array (its distinct rows in lexicographic order), without np.unique
    (sorted_unique)."""
    if not len(rows):
        return rows
    rows = rows[np.lexsort(rows.T[::-1])]
    return rows[np.concatenate(([True], (rows[1:] != rows[:-1]).any(axis=1)))]


def _pow2_upto(n: int) -> np.ndarray:
    return 2 ** np.arange(int(np.floor(np.log2(max(n, 1)))) + 1)


_TP_CACHE: dict[tuple[int, int], frozenset[int]] = {}


def _valid_tp(model: ModelArch, max_tp: int) -> frozenset[int]:
    """Power-of-two TP sizes up to ``max_tp`` that the model's heads allow (cached per model object)."""
    key = (id(model), max_tp)
    if key not in _TP_CACHE:
        _TP_CACHE[key] = frozenset(int(tp) for tp in _pow2_upto(max_tp)
                                   if layout_problem(model, Layout(tp=int(tp))) is None)
    return _TP_CACHE[key]


def candidate_layouts(model: ModelArch, system: System, max_gpus: int, min_gpus: int = 1) -> np.ndarray:
    """Rows (tp, pp, ep, dp) of layouts with min_gpus <= tp*dp*pp <= max_gpus, valid for model and system."""
    node, domain = system.gpus_per_node, max(system.scale_up_domain_gpus, 1)
    moe = model.is_moe
    n_experts = max((L.ffn.num_experts for L in model.layers), default=0)
    valid_tp = _valid_tp(model, min(domain, max_gpus))
    stage = sorted_unique(np.concatenate([_pow2_upto(min(domain, max_gpus)),
                                          node * _pow2_upto(max(1, max_gpus // node))]))
    pp = _pow2_upto(max(1, max_gpus))
    S, P = (a.ravel() for a in np.meshgrid(stage, pp, indexing="ij"))
    rows = []
    # variant 0: TP=S (EP=1); 1: TP=S, EP=S; 2: DP=S, EP=S (tp=1)
    for variant in ((0, 1, 2) if moe else (0,)):
        tp = np.where(variant == 2, 1, S)
        dp = np.where(variant == 2, S, 1)
        ep = np.where(variant == 0, 1, S)
        rows.append(np.stack([tp, P, ep, dp], axis=1))
    cand = np.concatenate(rows)
    tp, pp_, ep, dp = cand.T
    gpus = tp * dp * pp_
    ok = (gpus <= max_gpus) & (gpus >= min_gpus)
    ok &= (tp <= domain) & np.isin(tp, list(valid_tp) or [0])
    ok &= (node % np.minimum(gpus, node) == 0) & ((gpus <= node) | (gpus % node == 0))
    ok &= (pp_ == 1) | (tp * dp >= min(node, domain))          # PP only once a stage fills a node
    ok &= (pp_ <= model.num_layers)
    if moe:
        ok &= ep <= n_experts
        ok &= ~((tp * dp == 1) & (ep > 1))
    cand = _unique_rows(cand[ok])
    # DP=1 and EP=1 duplicate TP-only rows when S=1
    return cand
