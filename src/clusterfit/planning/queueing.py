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

All arrays broadcast: ``service_s`` has the request-class axis last; ``arrival_per_s`` matches the
leading axes.
"""

from __future__ import annotations

import numpy as np

_BISECT_STEPS = 40


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


def ttft_quantile_s(q: float, arrival_per_s: np.ndarray, service_s: np.ndarray,
                    weights: np.ndarray, own_s: np.ndarray | None = None) -> np.ndarray:
    """The q-quantile (0 < q < 1) of wait + own time, seconds; inf where the server is saturated.

    arrival_per_s: shape (...), requests/s reaching one server.
    service_s: shape (..., K), time each of K request classes occupies the server (drives the wait), s.
    weights: shape (K,), class probabilities summing to 1.
    own_s: shape (..., K), the request's own time from reaching the head of the queue to its first
        token (defaults to ``service_s``; differs when prefills share steps, see capacity.py), s.
    """
    w, own, rho, wbar, saturated = _load_terms(arrival_per_s, service_s, weights, own_s)
    rho_c = np.where(saturated | (rho <= 0), 0.5, rho)
    decay = np.where(saturated | (rho <= 0) | ~(wbar > 0), np.inf, rho_c / np.where(wbar > 0, wbar, 1.0))
    tail = 1.0 - q
    with np.errstate(divide="ignore", invalid="ignore"):
        wq = np.where(np.isinf(decay), 0.0, np.log(np.maximum(rho_c / tail, 1.0)) / decay)
    if w.size == 1:  # one request class: the quantile is closed-form
        return np.where(saturated, np.inf, own[..., 0] + wq)
    lo = np.zeros(np.broadcast(own.max(axis=-1), wq).shape)
    hi = own.max(axis=-1) + wq + 1e-12
    dcol, rcol = decay[..., None], rho_c[..., None]
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        x = mid[..., None] - own
        with np.errstate(over="ignore", invalid="ignore"):
            pw = np.where(x < 0, 1.0, np.where(np.isinf(dcol), 0.0, rcol * np.exp(-dcol * np.maximum(x, 0.0))))
        over = pw @ w > tail
        lo = np.where(over, mid, lo)
        hi = np.where(over, hi, mid)
    return np.where(saturated, np.inf, hi)


def ttft_cdf(x_s: float, arrival_per_s: np.ndarray, service_s: np.ndarray, weights: np.ndarray,
             own_s: np.ndarray | None = None) -> np.ndarray:
    """P(TTFT <= x_s) under the same model as :func:`ttft_quantile_s` (0 where the server is saturated):
    sum over classes of w_i (1 - P(W > x_s - own_i)), P(W > y) = 1 for y < 0 and rho exp(-rho y / W) after."""
    w, own, rho, wbar, saturated = _load_terms(arrival_per_s, service_s, weights, own_s)
    ok_w = ~saturated & (rho > 0) & (wbar > 0)
    decay = np.where(ok_w, np.where(rho > 0, rho, 1.0) / np.where(wbar > 0, wbar, 1.0), np.inf)
    rho_c = np.where(ok_w, rho, 0.0)
    y = x_s - own
    with np.errstate(over="ignore", invalid="ignore"):
        pw = np.where(y < 0, 1.0, np.where(np.isinf(decay[..., None]), 0.0,
                                            rho_c[..., None] * np.exp(-decay[..., None] * np.maximum(y, 0.0))))
    return np.where(saturated, 0.0, (1.0 - pw) @ w)
