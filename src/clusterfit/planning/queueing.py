"""Percentile time to first token from a queueing approximation (vectorised).

Model (documented in the README): each replica's prefill is one FCFS server fed by Poisson arrivals
(M/G/1). Service times come from the performance model, one per request class (prompt length), with
class probabilities ``weights``.

- Mean wait: Pollaczek-Khinchine, ``W = lambda E[S^2] / (2 (1 - rho))`` with ``rho = lambda E[S]``.
- Wait tail: ``P(W > x) = rho exp(-rho x / W)``. This is exact for M/M/1 and, for general service, keeps
  P-K's mean and the exact probability of waiting at all (rho); it is the usual exponential
  (Kingman-style) tail approximation, good for p90/p99 at moderate-to-high load.
- TTFT = wait + the request's own service time; its percentile is the quantile of that mixture over
  request classes, solved by bisection (no "sum of percentiles" shortcut).
- Step boundary: an engine admits arrivals between steps, so an arrival that finds the replica busy (probability
  ``busy``) first waits out the step running then, R ~ Uniform(0, ``step_s``); R is added to the wait as an
  independent term: P(W + R > x) = (1/s) int_{x-s}^{x} P(W > y) dy, in closed form for the exponential tail.

All arrays broadcast: ``service_s`` has the request-class axis last; ``arrival_per_s`` matches the
leading axes.
"""

from __future__ import annotations

import numpy as np

_BISECT_STEPS = 40
_STEP_BISECT_STEPS = 17   # over one step: to 1e-5 of it
_NEWTON_STEPS = 8


def utilisation(arrival_per_s: np.ndarray, service_s: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """rho = arrival rate x mean service time (dimensionless)."""
    return np.asarray(arrival_per_s) * (service_s @ weights)


def mean_wait_s(arrival_per_s: np.ndarray, service_s: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Pollaczek-Khinchine mean queueing wait, seconds (inf where rho >= 1)."""
    lam = np.asarray(arrival_per_s, dtype=float)
    rho = lam * (service_s @ weights)
    es2 = (service_s * service_s) @ weights
    with np.errstate(divide="ignore", invalid="ignore"):
        w = lam * es2 / (2.0 * (1.0 - rho))
    return np.where(rho < 1.0, w, np.inf)


def _load_terms(arrival_per_s: np.ndarray, service_s: np.ndarray, weights: np.ndarray,
                own_s: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(weights, own time, utilisation rho, mean wait, saturated) of one server, as arrays."""
    lam = np.asarray(arrival_per_s, dtype=float)
    s = np.asarray(service_s, dtype=float)
    w = np.asarray(weights, dtype=float)
    own = s if own_s is None else np.asarray(own_s, dtype=float)
    rho = lam * (s @ w)
    return w, own, rho, mean_wait_s(lam, s, w), ~(rho < 1.0)


def _exceed(y: np.ndarray, rho: np.ndarray, decay: np.ndarray, step_s: np.ndarray | None,
            busy: np.ndarray | None) -> np.ndarray:
    """P(W + R > y) (module docstring): W the wait, P(W > v) = 1 for v < 0 and rho exp(-decay v) after (0 after
    where decay is inf: no wait); R = 0, or Uniform(0, step_s) with probability ``busy``. ``rho``, ``decay``,
    ``step_s`` and ``busy`` broadcast against ``y``."""
    d, r, mean_w = _wait_tail(rho, decay)
    e_y = np.exp(-d * np.maximum(y, 0.0))
    g = np.where(y < 0, 1.0, r * e_y)
    if step_s is None or busy is None:
        return g
    s = np.maximum(step_s, 1e-12)
    a = y - s
    below = np.maximum(np.minimum(np.minimum(y, 0.0) - a, s), 0.0)      # the part of [y - s, y] below 0
    return (1.0 - busy) * g + busy * (below + mean_w * (np.exp(-d * np.maximum(a, 0.0)) - e_y)) / s


def _wait_tail(rho: np.ndarray, decay: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The wait tail's (decay, rho, rho / decay), all 0 where no request waits (decay inf)."""
    queued = np.isfinite(decay)
    d = np.where(queued, decay, 0.0)
    r = np.where(queued, rho, 0.0)
    return d, r, np.where(queued, r / np.where(queued, d, 1.0), 0.0)


def _one_class_wait(tail: float, d: np.ndarray, r: np.ndarray, mean_w: np.ndarray, s: np.ndarray,
                    b: np.ndarray) -> np.ndarray:
    """The x with P(W + R > x) = tail for one request class (module docstring; d the wait tail's decay, 0 where no
    request waits, r = rho, mean_w = r / d, s the step, b the probability of finding one). Beyond x = s the
    probability is C exp(-d x) with C = (1 - b) r + b mean_w (exp(d s) - 1) / s, solved in closed form; with no
    wait it is b (s - x) / s on [0, s]; a waiting class whose quantile falls inside the step is solved there by
    Newton's method."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        c = (1.0 - b) * r + b * mean_w * np.expm1(d * s) / s
        beyond = np.log(np.maximum(c / tail, 1.0)) / np.where(d > 0, d, 1.0)
        x = np.where(d > 0, beyond, np.where(b > tail, s * (1.0 - tail / np.where(b > 0, b, 1.0)), 0.0))
        inside = (d > 0) & (c * np.exp(-d * s) <= tail)
    if inside.any():
        # on [0, s]: f(x) = (1 - b) r e^(-dx) + b (s - x + mean_w (1 - e^(-dx))) / s - tail falls strictly
        # (f' = -(1 - b) r d e^(-dx) - b (1 - r e^(-dx)) / s < 0): Newton's method kept inside a shrinking bracket
        di, ri, mi, si, bi = d[inside], r[inside], mean_w[inside], s[inside], b[inside]
        lo, hi = np.zeros_like(si), si.copy()
        xi = 0.5 * si
        # the loop's invariants, each the same floating-point product the expressions below spell out
        neg_d, wait_e, slope_e = -di, (1.0 - bi) * ri, -(1.0 - bi) * ri * di
        for _ in range(_NEWTON_STEPS):
            e = np.exp(neg_d * xi)                                            # exp(-d x)
            f = wait_e * e + bi * (si - xi + mi * (1.0 - e)) / si - tail      # (1 - b) r e + b (s - x + m (1 - e)) / s
            above = f > 0
            lo = np.where(above, xi, lo)
            hi = np.where(above, hi, xi)
            step = xi - f / (slope_e * e - bi * (1.0 - ri * e) / si)        # f' = -(1 - b) r d e - b (1 - r e) / s
            xi = np.where((step > lo) & (step < hi), step, 0.5 * (lo + hi))
        x = x.copy()
        x[inside] = xi
    return x


def ttft_quantile_s(q: float, arrival_per_s: np.ndarray, service_s: np.ndarray,
                    weights: np.ndarray, own_s: np.ndarray | None = None, step_s: np.ndarray | None = None,
                    busy: np.ndarray | None = None) -> np.ndarray:
    """The q-quantile (0 < q < 1) of wait + own time, seconds; inf where the server is saturated.

    arrival_per_s: shape (...), requests/s reaching one server.
    service_s: shape (..., K), time each of K request classes occupies the server (drives the wait), s.
    weights: shape (K,), class probabilities summing to 1.
    own_s: shape (..., K), the request's own time from reaching the head of the queue to its first
        token (defaults to ``service_s``; differs when prefills share steps, see capacity.py), s.
    step_s, busy: shape (...), the engine step an arrival finds running and the probability it finds one (the
        module docstring's step boundary); None: no such wait. The quantile then lies between the one without it
        and that plus ``step_s``, which the bisection narrows to 1e-5 of the step.
    """
    w, own, rho, wbar, saturated = _load_terms(arrival_per_s, service_s, weights, own_s)
    rho_c = np.where(saturated | (rho <= 0), 0.5, rho)
    decay = np.where(saturated | (rho <= 0) | ~(wbar > 0), np.inf, rho_c / np.where(wbar > 0, wbar, 1.0))
    tail = 1.0 - q
    with np.errstate(divide="ignore", invalid="ignore"):
        wq = np.where(np.isinf(decay), 0.0, np.log(np.maximum(rho_c / tail, 1.0)) / decay)
    dcol, rcol = decay[..., None], rho_c[..., None]
    if w.size == 1:  # one request class: the quantile without the step boundary is closed-form
        base = own[..., 0] + wq
    else:
        lo = np.zeros(np.broadcast(own.max(axis=-1), wq).shape)
        hi = own.max(axis=-1) + wq + 1e-12
        for _ in range(_BISECT_STEPS):
            mid = 0.5 * (lo + hi)
            over = _exceed(mid[..., None] - own, rcol, dcol, None, None) @ w > tail
            lo = np.where(over, mid, lo)
            hi = np.where(over, hi, mid)
        base = hi
    if step_s is None or busy is None:
        return np.where(saturated, np.inf, base)
    span = np.broadcast_to(np.asarray(step_s, dtype=float), base.shape)
    b = np.broadcast_to(np.asarray(busy, dtype=float), base.shape)
    if w.size == 1:
        d, r, mean_w = _wait_tail(rho_c, decay)
        return np.where(saturated, np.inf,
                        own[..., 0] + _one_class_wait(tail, d, r, mean_w, np.maximum(span, 1e-12), b))
    lo, hi = base, base + span + 1e-12
    scol, bcol = span[..., None], b[..., None]
    for _ in range(_STEP_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        over = _exceed(mid[..., None] - own, rcol, dcol, scol, bcol) @ w > tail
        lo = np.where(over, mid, lo)
        hi = np.where(over, hi, mid)
    return np.where(saturated, np.inf, hi)


def ttft_cdf(x_s: float | np.ndarray, arrival_per_s: np.ndarray, service_s: np.ndarray, weights: np.ndarray,
             own_s: np.ndarray | None = None, step_s: np.ndarray | None = None,
             busy: np.ndarray | None = None) -> np.ndarray:
    """P(TTFT <= x_s) under the same model as :func:`ttft_quantile_s` (0 where the server is saturated):
    sum over classes of w_i (1 - P(W + R > x_s - own_i)), P(W > y) = 1 for y < 0 and rho exp(-rho y / W) after.
    ``x_s``: one time, or one per arrival rate (shape (..., 1), broadcast against ``own_s``)."""
    w, own, rho, wbar, saturated = _load_terms(arrival_per_s, service_s, weights, own_s)
    ok_w = ~saturated & (rho > 0) & (wbar > 0)
    decay = np.where(ok_w, np.where(rho > 0, rho, 1.0) / np.where(wbar > 0, wbar, 1.0), np.inf)
    rho_c = np.where(ok_w, rho, 0.0)
    pw = _exceed(x_s - own, rho_c[..., None], decay[..., None],
                 None if step_s is None else np.asarray(step_s, dtype=float)[..., None],
                 None if busy is None else np.asarray(busy, dtype=float)[..., None])
    return np.where(saturated, 0.0, (1.0 - pw) @ w)
