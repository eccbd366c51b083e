"""Pareto frontier of throughput per GPU against speed per user (both maximised)."""

from __future__ import annotations

import numpy as np


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points not dominated when maximising both ``x`` and ``y``, sorted by x ascending.

    A point is dominated if another has x >= and y >= with at least one strict. NaN/inf points are
    ignored. Typical use: x = output tokens/s per user, y = output tokens/s per GPU.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    if ok.size == 0:
        return ok
    # x descending, ties broken by y descending: a point survives if its y beats every point before it.
    order = ok[np.lexsort((-y[ok], -x[ok]))]
    ys = y[order]
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(ys)[:-1]))
    keep = order[ys > best_before]
    return keep[::-1]
