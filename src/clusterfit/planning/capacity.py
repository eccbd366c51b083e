"""Per-replica capacity within the SLO, from a compiled StepModel, vectorised over batch sizes.

Aggregated serving (one replica does prefill and decode, chunked prefill as vLLM/SGLang run it):

- Every engine step carries the decode batch ``B`` (one token each) plus prefill tokens from a budget of
  ``max_num_batched_tokens - B`` per step (vLLM counts decode tokens in ``max_num_batched_tokens``).
- A request's prompt runs in ``ceil(u / budget)`` chunk steps alongside the decode batch; what those
  steps cost beyond plain decode steps is spread over the batch's output tokens, so the mean
  TPOT(B) = d(B) + B * E[chunk steps - n d(B)] / E[output], d(B) = decode_step_s(B, mean context)
  (steps that carry a chunk are slower than the mean: the inter-token spikes users see). The replica
  then completes ``B / (E[output] * TPOT)`` requests/s (Little's law over the decode batch).
- Without mixed batches (SGLang unless --enable-mixed-chunk, Engine.mixed_batches) a prompt's chunks run in prefill
  steps of their own with the whole budget, and the decodes wait through them: e_i = own_i, the chunk steps' whole
  time (perfmodel.serving.cycle_s and the simulator run them so).
- TPOT percentile (the SLO judges TPOT at ``slo.tpot_percentile``, p90 by default, not the mean): a request
  decoding n = output - 1 tokens rides along the chunk steps of the prefills that arrive meanwhile, a Poisson
  number with mean m = B n / E[output] (the replica's request rate times its decode time), each adding
  e_i = own_i - n_i d(B) seconds (class i's chunk steps beyond plain decode steps). Its TPOT is
  d(B) + X / n with X compound Poisson: E[X / n] = B E[e] / E[output] (the mean above) and
  Var[X / n] = B E[e^2] / (E[output] n). Over the output-length distribution the variance is
  B E[e^2] E[1/n] / E[output]; the percentile is the normal approximation mean + z_q sd, except where at least the
  judged share of requests sees no chunk step at all (Poisson: P0 = E_n[exp(-B n / E[output])] >= q): their TPOT is
  the plain decode step d(B), and so is the percentile (tpot_spread). Batch-size fluctuations are ignored.
- Goodput: the share of requests meeting both targets, predicted as P(TTFT <= target) x P(TPOT <= target)
  (independent; the TTFT tail of queueing.ttft_cdf, the normal TPOT above); a batch is feasible only where
  it reaches ``slo.min_goodput`` (0.9 by default) as well as both percentiles.
- TTFT: the prefill budget is an M/G/1 server (see queueing.py). Request class i occupies it for
  ``u_i / budget * step_full_i`` seconds (its share of full prefill steps); its own prefill takes
  ``ceil(u_i / budget)`` steps of its chunk with the decode batch riding along. TTFT p-quantile =
  quantile of wait + own prefill over the request classes. An arrival that finds sequences running (probability
  1 - exp(-B)) first waits out the step running then, uniform over the mean step (queueing.py's step boundary);
  under async scheduling (engines.schedules_ahead) its own prefill also starts one decode step later.
- Light load (``Underload``): where the smallest batch misses the TTFT target at its own full rate (prefill-bound
  workloads saturate the prefill queue at every batch's full rate), it is also run below that rate: its capacity
  becomes the largest rate of the load grid within the target, and the planner reports TTFT and TPOT at the rate a
  replica serves when that is below the smallest batch's (the chunk steps then land on the decodes at that rate).
- KV: B <= ``kv_batch_bound``: the requests the KV cache admits under the engine's reservation policy
  (StepModel.kv_admitted_sequences at the mean prompt and output: prompt + output for TensorRT-LLM, which
  reserves the whole request; prompt + half the output for vLLM / SGLang, whose paged allocation holds what is in
  use) - the rule perf and the simulator use too - and B <= the engine's batch cap (max_num_seqs).

Speculative decoding (``drafting``, clusterfit.speculative.Drafting; as the simulator runs it): every step carrying
the decode batch verifies k draft tokens per sequence (k x B more tokens, taken from the step's budget, each
sequence's k + 1 queries reading its KV once: StepModel.with_verify) and costs 1 + k x the drafter's cost; each
sequence gains tokens_per_step tokens a step, so
TPOT(B) = d(B) / tokens_per_step + B * E[chunk steps - n d(B)] / E[output] with d(B) the speculative step.

Disaggregated serving splits this: a prefill replica is the same M/G/1 server with the whole token
budget and no decode batch, plus the KV transfer to the decode replica (per-GPU KV bytes over the link
crossed, not overlapped: conservative); a decode replica runs TPOT(B) = decode_step_s(B, context) (no chunk
steps: every percentile of TPOT is that step). The prefill pool's TTFT is judged at the larger of the TTFT
percentile and ``min_goodput`` (the only requests a disaggregated plan loses are late first tokens).

``plan --confidence`` (``margins``, clusterfit.intervals.StepMargins): every step time is multiplied by the upper
bound of its family's interval before the curve is built, so TTFT, TPOT and the SLO verdicts are judged at the
pessimistic bound and requests/s per replica (batch over TPOT) at the lower one; queueing follows from the slower
steps. Such a curve keeps the point-prediction curve of the same batch grid in ``point``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar, cast

import numpy as np

from ..engines import front_end_s, mixed_batches, schedules_ahead
from ..intervals import StepMargins
from ..perfmodel.ops import normal_cdf
from ..speculative import Drafting
from .layout_candidates import sorted_unique
from .queueing import mean_wait_s, ttft_cdf, ttft_quantile_s
from .workload import SLO, Workload

#: Batch sizes tried per replica: unique integers on a geometric grid from 1 to the engine cap.
BATCH_POINTS = 40
#: Arrival-rate points tried for a disaggregated prefill replica (fractions of its saturation rate).
PREFILL_LOAD_POINTS = 48


def batch_grid(max_batch: int, points: int = BATCH_POINTS, kv_bound: float | None = None) -> np.ndarray:
    """Unique integer batch sizes from 1 to ``max_batch`` on a geometric grid (float array), plus the largest batch
    the KV cache admits (``kv_bound``, floored) where it falls between two points: without it a KV-bound replica
    stopped at the point below (145 where the cache holds 165: 12% of its capacity lost; between two points of the
    40-point grid to 1,024 up to 1 - 1024^(-1/39) = 16%)."""
    grid = _batch_grid(max(1, max_batch), points).copy()
    if kv_bound is not None and 1 <= math.floor(kv_bound) < grid[-1]:
        grid = sorted_unique(np.append(grid, float(math.floor(kv_bound))))   # np.union1d(grid, [that])
    return grid


@lru_cache(maxsize=256)
def _batch_grid(top: float, points: int) -> np.ndarray:
    """batch_grid's array, once per (cap, points): a search asks for the same few caps hundreds of times."""
    return sorted_unique(np.round(np.geomspace(1, top, points)))


@lru_cache(maxsize=8)
def _load_fractions(points: int) -> np.ndarray:
    """Fractions of the saturation rate prefill_capacity tries (the same grid for every replica)."""
    return np.geomspace(1e-3, 0.995, points)


def kv_batch_bound(sm, wl: Workload) -> float:
    """Largest batch one replica runs for this workload: the KV admission rule shared with perf and the
    simulator (``sm.kv_admitted_sequences`` at the mean prompt and output lengths), capped by the engine's
    max_num_seqs."""
    kv = float(np.asarray(sm.kv_admitted_sequences(wl.isl_mean_tokens, wl.osl_mean_tokens)))
    return min(kv, float(sm.max_num_seqs))


def _class_prefill(wl: Workload) -> tuple[np.ndarray, np.ndarray]:
    """(uncached tokens u_i, keys attended per prefilled token a_i) per request class."""
    u = wl.uncached_tokens
    cached = wl.isl_tokens - u
    attended_total = u * cached + u * (u + 1) / 2.0
    return u, attended_total / u


def tpot_spread(batch: np.ndarray, decode_s: np.ndarray, extra_s: np.ndarray, extra_sq_s2: np.ndarray, wl: Workload,
                slo: SLO, first_window_s: np.ndarray | float | None = None,
                chunk_steps: np.ndarray | float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mean TPOT, its spread sd, TPOT at the SLO's percentile, P(TPOT <= target)) of a replica running ``batch``
    sequences (module docstring: compound-Poisson chunk steps over a request's n = output - 1 decode steps).

    ``decode_s``: a plain decode step per token; ``extra_s`` / ``extra_sq_s2``: E[e] and E[e^2] of a prefill's chunk
    steps beyond the decode steps they replace. The mean TPOT (per output token, what Little's law needs) spreads
    every prefill's extra over all tokens. A request's own TPOT depends on the chunk steps landing on its decode: the
    prefills that arrive while it runs, Poisson of mean m = rate x (its window), the rate batch / (E[output] x mean
    TPOT). The window is its n - 1 later decode steps and, before its first, the step whose arrivals its first decode
    step admits: the chunk step that finished its own prompt (``first_window_s``; a long step gathers more arrivals),
    or under async scheduling (``chunk_steps``: chunk steps per request x tokens per step) the step before that one,
    chosen earlier, a chunk step as often as steps carry chunks (batch x chunk_steps / E[output]), else a decode step.
    Without ``first_window_s`` the window is n mean steps (m = batch x n / E[output]). A request sees no chunk step
    with probability P0 = E[exp(-m)] and its TPOT is then the plain decode step, exactly: where P0 reaches the judged
    percentile, that percentile is ``decode_s`` (the normal approximation put it at mean + z sd: 2-token answers, n =
    1, on Llama-3.1-8B at 5 requests/s on an H200 were judged 37.1 ms where every simulated request took the 5.7 ms
    step), and P(TPOT <= target) is at least P0 where the decode step meets the target. Elsewhere the percentile is the
    normal approximation of the requests' TPOT, or, where a request meets few chunk steps (FEW_CHUNKS), the scaled
    Poisson (tpot_scaled_poisson): 2-token answers at 30 requests/s on that H200 were judged 37 ms by the normal
    approximation over n mean steps, where the simulated p90 request met two 1,000-token prefills (52 ms; now 51 ms)."""
    osl = wl.osl_mean_tokens
    n = np.maximum(wl.osl.tokens - 1.0, 1.0)
    b, d, e1, e2 = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (batch, decode_s, extra_s, extra_sq_s2)))
    mean = d + b * e1 / osl
    m, w, n = _chunks_met(b, d, mean, n, wl.osl.weights, osl, first_window_s, chunk_steps)
    req_mean = d + e1 * (w * m / n).sum(-1)
    sd = np.sqrt(e2 * (w * m / (n * n)).sum(-1))
    p_clean = (w * np.exp(-m)).sum(-1)
    judged = np.where(p_clean >= slo.tpot_percentile / 100.0, d, req_mean + slo.tpot_z * sd)
    p_ok = np.ones(b.shape)
    if slo.tpot_s is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            p_ok = normal_cdf((slo.tpot_s - req_mean) / sd)
        p_ok = np.maximum(p_ok, np.where(d <= slo.tpot_s, p_clean, 0.0))
    small = (e1 > 0) & (e2 > 0) & (m.max(axis=-1) * e1 * e1 / np.maximum(e2, 1e-300) <= FEW_CHUNKS)
    if small.any():
        judged, p_ok = np.array(judged, dtype=float), np.array(p_ok, dtype=float)
        q_s, ok_s = tpot_scaled_poisson(m[small], d[small], e1[small], e2[small], n, w[small],
                                        slo.tpot_percentile / 100.0, slo.tpot_s)
        judged[small] = q_s
        if slo.tpot_s is not None:
            p_ok[small] = ok_s
    return mean, sd, judged, p_ok


def _chunks_met(b: np.ndarray, d: np.ndarray, mu: np.ndarray, n: np.ndarray, weights: np.ndarray, osl: float,
                first_window_s: np.ndarray | float | None, chunk_steps: np.ndarray | float | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """tpot_spread's request classes: (m, weights, n), m and weights (..., classes) per batch, n (classes,): the
    output classes, each twice when the first window is a chunk step with probability below 1."""
    if first_window_s is None:
        return b[..., None] * n / osl, np.broadcast_to(weights, b.shape + n.shape), n
    rate_s = b / (osl * mu)                                      # requests/s, Little's law over the batch
    later = (n - 1.0) * mu[..., None]                            # the n - 1 decode steps after the first
    long = rate_s[..., None] * (later + np.broadcast_to(first_window_s, b.shape)[..., None])
    if chunk_steps is None:
        return long, np.broadcast_to(weights, b.shape + n.shape), n
    share = np.minimum(b * chunk_steps / osl, 1.0)[..., None]
    short = rate_s[..., None] * (later + d[..., None])
    return (np.concatenate([long, short], axis=-1), np.concatenate([weights * share, weights * (1.0 - share)], axis=-1),
            np.concatenate([n, n]))


#: Largest mean number of (scaled) chunk steps a request's decode meets for which tpot_spread takes the discrete
#: scaled-Poisson quantile instead of the normal approximation (from a mean of 10 the two 90th percentiles are within
#: one chunk step: 14 against 14.05; at 0.5, 1 against 1.41).
FEW_CHUNKS = 10.0
_KMAX = int(FEW_CHUNKS + 8.0 * FEW_CHUNKS ** 0.5) + 1
_K = np.arange(_KMAX, dtype=float)
_LOG_FACT = np.concatenate([[0.0], np.cumsum(np.log(_K[1:]))])   # log k! for k < _KMAX
#: tpot_scaled_poisson evaluates the mixture CDF at every step value while classes^2 x _KMAX stays under this
DIRECT_CELLS = 200_000


def tpot_scaled_poisson(m: np.ndarray, decode_s: np.ndarray, extra_s: np.ndarray, extra_sq_s2: np.ndarray,
                        n: np.ndarray, weights: np.ndarray, q: float, target_s: float | None,
                        direct: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(TPOT at quantile ``q``, P(TPOT <= target_s)) per row (1-D arrays; ``m`` and ``weights``: (rows, classes),
    the chunk steps a request of each class meets on average and the class's share) under the scaled-Poisson law:
    K ~ Poisson(m r) chunk steps of c seconds each beyond the decode steps, c = E[e^2] / E[e] and r = E[e]^2 /
    E[e^2], which keeps the compound Poisson's mean and variance exactly (exact when every prefill's extra is the
    same); TPOT = decode_s + c K / n, mixed over the output-length classes n with ``weights``. The quantile is the
    smallest such value whose mixture CDF reaches q: found among all of them (``direct``; by default while classes^2
    x steps <= DIRECT_CELLS) or by bisection (length histograms of many bins)."""
    k, log_fact = _K, _LOG_FACT
    c = extra_sq_s2 / extra_s
    m = m * (extra_s * extra_s / extra_sq_s2)[:, None]                                              # (R, J)
    with np.errstate(divide="ignore"):
        log_m = np.log(m)[:, :, None]
    pmf = np.exp(np.where(k > 0, k * log_m, 0.0) - m[:, :, None] - log_fact)                      # (R, J, K)
    cdf = np.minimum(np.cumsum(pmf, axis=2), 1.0)
    rows = np.arange(len(m))[:, None]
    classes = np.arange(n.size)

    def mixture_cdf(t: np.ndarray) -> np.ndarray:   # P(TPOT <= t) per row: class j meets at most (t - d) n_j / c steps
        room = np.floor(np.maximum(t - decode_s, -1.0)[:, None] * n[None, :] / c[:, None] + 1e-9)
        within = cdf[rows, classes[None, :], np.clip(room, 0, _KMAX - 1).astype(int)]
        return (np.where(room >= 0, within, 0.0) * weights).sum(-1)

    if direct if direct is not None else n.size * n.size * _KMAX <= DIRECT_CELLS:
        # the CDF is a step function of t, stepping at the values d + c k / n_j: evaluate it at every one (class j'
        # is at most there with floor(k n_j' / n_j) chunk steps) and take the first reaching q
        idx = np.minimum(np.floor(k[None, :, None] * n[None, None, :] / n[:, None, None] + 1e-9),
                         _KMAX - 1).astype(int)                                             # (J, K, J')
        mix = (cdf[:, classes[None, None, :], idx] * weights[:, None, None, :]).sum(-1)     # (R, J, K)
        cand = decode_s[:, None, None] + c[:, None, None] * k / n[:, None]
        quant = np.where(mix >= q - 1e-12, cand, np.inf).reshape(len(m), -1).min(axis=1)
    else:
        # many classes: bisect for the first step reaching q to 1e-6 of the range, then take the first value above
        # the bracket's low end
        lo, hi = decode_s - 1e-12, decode_s + c * (_KMAX - 1) / n.min()
        for _ in range(20):
            mid = 0.5 * (lo + hi)
            reached = mixture_cdf(mid) >= q - 1e-12
            lo, hi = np.where(reached, lo, mid), np.where(reached, mid, hi)
        past = (lo - decode_s)[:, None]
        steps = np.where(past < 0, 0.0, np.floor(past * n[None, :] / c[:, None] + 1e-9) + 1.0)
        quant = np.minimum(hi, (decode_s[:, None] + c[:, None] * steps / n[None, :]).min(axis=1))
    if target_s is None:
        return quant, np.ones(len(m))
    return quant, mixture_cdf(np.full(len(m), float(target_s)))


@dataclass
class AggregatedCurve:
    """Arrays over the batch grid (shape (nB,)) for one aggregated replica."""

    batch: np.ndarray
    tpot_s: np.ndarray            # mean TPOT (throughput, Little's law)
    rate_rps: np.ndarray          # requests/s the replica completes at this batch
    ttft_s: np.ndarray            # TTFT at the SLO percentile (inf when the prefill queue saturates)
    ttft_mean_s: np.ndarray       # own prefill + P-K mean wait (for Little's law with sessions)
    kv_ok: np.ndarray
    tpot_ok: np.ndarray           # TPOT at the SLO's percentile within the target
    ttft_ok: np.ndarray
    decode_only_s: np.ndarray     # TPOT of the same batch with no prefill in the step (a disaggregated decode replica)
    tpot_q_s: np.ndarray | None = None    # TPOT at the SLO's percentile (None: the mean)
    goodput: np.ndarray | None = None     # predicted share of requests within both targets
    goodput_ok: np.ndarray | None = None
    point: AggregatedCurve | None = None  # with margins: the same curve at the point prediction
    underload: Underload | None = None    # the smallest batch run below its full rate (Underload)

    @property
    def tpot_judged_s(self) -> np.ndarray:
        return self.tpot_s if self.tpot_q_s is None else self.tpot_q_s

    @property
    def feasible(self) -> np.ndarray:
        ok = self.kv_ok & self.tpot_ok & self.ttft_ok
        return ok if self.goodput_ok is None else ok & self.goodput_ok


@dataclass(frozen=True)
class Underload:
    """The grid's smallest batch ``b0`` run below its full rate ``rate0``: at ``lam`` < rate0 requests/s a replica
    keeps on average b0 x lam / rate0 sequences running (Little's law, the same time per request), so an arrival
    finds it busy with probability 1 - exp(-that), and its prefill queue is utilised lam x E[occupancy]. Where the
    workload is prefill-bound (short outputs) every batch of the grid saturates the prefill queue at its own full
    rate (rho -> 1, TTFT unbounded), yet a lighter load is served at once: the curve's first point then carries the
    largest rate whose TTFT is within the SLO (finite without one), and a plan reports TTFT at the rate it serves.
    """

    q: float
    b0: float
    rate0: float
    occupancy: np.ndarray   # (K,) seconds each request class holds the prefill budget
    weights: np.ndarray     # (K,)
    own: np.ndarray         # (K,) own prefill time, without the async-scheduling wait
    ahead_s: float          # the decode step an arrival also waits under async scheduling (0 without)
    step_s: float           # the mean engine step
    front_s: float          # the engine's front-end latency
    # tpot_spread's terms at b0: (plain decode step per output token in s, E[e] in s, E[e^2] in s^2, the chunk step
    # that finishes a prompt in s, chunk steps per request x tokens per step under async scheduling, else None), e
    # the time a prefill's chunk steps take beyond the decode steps they replace
    tpot_terms: tuple[float, float, float, float, float | None]
    workload: Workload      # what tpot_s judges (the curve's)
    slo: SLO

    def state(self, lam: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """(probability an arrival finds the replica busy, (n, K) own time to first token) at ``lam`` requests/s."""
        lam = np.atleast_1d(np.asarray(lam, dtype=float))
        busy = -np.expm1(-self.b0 * lam / self.rate0)
        return busy, self.own[None, :] + (busy * self.ahead_s)[:, None]

    def ttft_s(self, lam: np.ndarray | float) -> np.ndarray:
        """TTFT at the SLO's percentile for arrivals at ``lam`` requests/s (array)."""
        lam = np.atleast_1d(np.asarray(lam, dtype=float))
        busy, own = self.state(lam)
        occ = np.broadcast_to(self.occupancy, own.shape)
        return ttft_quantile_s(self.q, lam, occ, self.weights, own, np.full(lam.size, self.step_s), busy) + self.front_s

    def tpot_s(self, lam: float) -> tuple[float, float]:
        """(mean TPOT, TPOT at the SLO's percentile) at ``lam`` requests/s: the chunk steps landing on a request's
        decode come at the rate served, as from b0 x lam / rate0 running sequences (tpot_spread)."""
        wl, slo = self.workload, self.slo
        d, extra, extra_sq, last_chunk, chunk_steps = self.tpot_terms
        b = np.array([self.b0 * min(lam, self.rate0) / self.rate0])
        mean, _sd, judged, _p = tpot_spread(b, np.array([d]), np.array([extra]), np.array([extra_sq]), wl, slo,
                                            last_chunk, chunk_steps)
        return float(mean[0]), float(judged[0])

    def capacity(self, limit_s: float) -> float:
        """Largest rate on the load-fraction grid (as prefill_capacity's) whose TTFT is finite and within
        ``limit_s``; 0 when none is."""
        lam = self.rate0 * _load_fractions(PREFILL_LOAD_POINTS)
        t = self.ttft_s(lam)
        ok = np.isfinite(t) & (t <= limit_s)
        return float(lam[ok].max()) if ok.any() else 0.0


def aggregated_curve(sm, wl: Workload, slo: SLO, batch: np.ndarray, margins: StepMargins | None = None,
                     drafting: Drafting | None = None) -> AggregatedCurve:
    """Throughput and latency of one aggregated replica at each batch size (vectorised); with ``margins``, at the
    pessimistic bound (module docstring), the point curve in ``point``.

    ``drafting``: speculative decoding (clusterfit.speculative.Drafting), as the simulator runs it (sim.replica):
    every step that carries the decode batch also verifies its k draft tokens per sequence (StepModel.with_verify,
    taking k x B of the step's token budget) and costs 1 + k x the drafter's cost; each sequence then
    gains tokens_per_step tokens a step, so a pure decode step d(B) gives TPOT d(B) / tokens_per_step."""
    return finish_curves([pending_curve(sm, wl, slo, batch, margins, drafting)])[0]


@dataclass
class _AggregatedSteps:
    """The steps aggregated_curve times, in one vectorised call: [full-budget prefill step | own-chunk step | pure
    decode step] (each (nB, K), (nB, K), (nB,) flattened), all with B decodes and their draft tokens."""

    B: np.ndarray
    P: np.ndarray          # prefill tokens of each step (with the draft tokens verified)
    A: np.ndarray          # keys those tokens attend
    D: np.ndarray          # decoding sequences of each step
    keys: np.ndarray       # keys those decodes attend (D x the workload's mean decode context)
    budget: np.ndarray     # (nB,) prompt tokens a step with the decode batch has room for
    n_chunks: np.ndarray   # (nB, K) chunk steps of each request class's prompt
    u: np.ndarray          # (K,) uncached prompt tokens of each class
    mixed: bool            # engines.mixed_batches

    @classmethod
    def of(cls, sm, wl: Workload, batch: np.ndarray, drafting: Drafting | None) -> _AggregatedSteps:
        B = np.asarray(batch, dtype=float)
        ctx = wl.decode_context_mean_tokens
        u, a = _class_prefill(wl)
        chunk = float(sm.engine.max_num_batched_tokens)
        k = 0 if drafting is None else drafting.draft_tokens
        mixed = mixed_batches(sm)
        # a prefill step of an engine without mixed batches (SGLang) carries no decode: its whole budget is the
        # prompts'
        budget = np.maximum(chunk - B * (1 + k), 0.0) if mixed else np.full(B.shape, chunk)
        Bc, bud = B[:, None], np.maximum(budget, 1.0)[:, None]
        n_chunks = np.ceil(u / bud)
        own_tok = u / n_chunks
        nB, K = B.size, u.size
        ones = np.ones((nB, K))
        P = np.concatenate([(bud * ones).ravel(), (own_tok * ones).ravel(), np.zeros(nB)])
        A = np.concatenate([(bud * a * ones).ravel(), (own_tok * a * ones).ravel(), np.zeros(nB)])
        Dc = Bc * ones if mixed else 0.0 * ones   # the decodes riding the chunk steps (none without mixed batches)
        D = np.concatenate([Dc.ravel(), Dc.ravel(), B])
        return cls(B, P, A, D, D * ctx, budget, n_chunks, u, mixed)

    def pending(self, t: np.ndarray, sm, wl: Workload, slo: SLO, margins: StepMargins | None,
                drafting: Drafting | None, kv_bound: float | None) -> PendingCurve:
        """aggregated_curve from the step times ``t`` of these steps, up to the TTFT quantiles (finish_curves)."""
        kv = kv_batch_bound(sm, wl) if kv_bound is None else kv_bound
        per_step = 1.0
        if drafting is not None:
            t = t * drafting.step_factor
            per_step = drafting.tokens_per_step
        if margins is None:
            return PendingCurve(self.terms(t, sm, wl, slo, kv, per_step))
        return PendingCurve(self.terms(t * margins.step(self.P, self.D), sm, wl, slo, kv, per_step),
                            self.terms(t, sm, wl, slo, kv, per_step))

    def terms(self, t: np.ndarray, sm, wl: Workload, slo: SLO, kv_bound: float, per_step: float = 1.0) -> _CurveTerms:
        """aggregated_curve from the step times ``t`` of these steps ([full-budget prefill steps | own-chunk steps |
        pure decode steps], as P, A, D), up to its TTFT quantile; ``kv_bound``: kv_batch_bound(sm, wl);
        ``per_step``: tokens each decoding sequence gains per step."""
        B, budget, n_chunks, u, mixed = self.B, self.budget, self.n_chunks, self.u, self.mixed
        w, osl = wl.weights, wl.osl_mean_tokens
        nB, K = B.size, u.size
        bud = np.maximum(budget, 1.0)[:, None]
        step_full = t[:nB * K].reshape(nB, K)
        own = n_chunks * t[nB * K:2 * nB * K].reshape(nB, K)
        decode_only = t[2 * nB * K:]
        # steady state: each request's prefill adds (its chunk steps - the decode steps they replace) to the
        # decode batch's time; spread over the E[output] tokens of the B sequences, each gaining per_step tokens a
        # step:
        #   TPOT = d(B) / per_step + B * E[own_i - n_i d(B)] / E[output]   (mean TPOT; steps with a chunk are slower)
        # without mixed batches the decodes wait through the chunk steps: all their time is extra (perfmodel cycle_s)
        e = np.maximum(own - n_chunks * decode_only[:, None], 0.0) if mixed else own
        extra, extra_sq = e @ w, (e * e) @ w
        # TPOT spread (module docstring): compound-Poisson chunk steps over a request's n = output - 1 tokens
        # the step whose arrivals a request's first decode step admits (tpot_spread): the chunk step that finished
        # its own prompt, or under async scheduling the one before, a chunk step as often as steps carry chunks
        last_chunk = (own / n_chunks) @ w
        chunk_steps = (n_chunks @ w) * per_step if schedules_ahead(sm) else None
        tpot, _sd, tpot_q, p_tpot = tpot_spread(B, decode_only / per_step, extra, extra_sq, wl, slo, last_chunk,
                                                chunk_steps)
        rate = B / (osl * tpot)
        occupancy = u / bud * step_full
        q = slo.ttft_percentile / 100.0
        front = front_end_s(sm)
        # continuous batching below its cap is M/G/inf, so the sequences an arrival finds are Poisson of mean B and
        # the replica is busy with probability 1 - exp(-B); a busy replica admits the arrival at the end of the step
        # running then (queueing.py, step boundary; the mean step is tpot x per_step)
        busy = -np.expm1(-B)
        step = tpot * per_step
        ahead = schedules_ahead(sm)
        under = Underload(q, float(B[0]), float(rate[0]), occupancy[0], w, own[0].copy(),
                          float(decode_only[0]) if ahead else 0.0, float(step[0]), front,
                          (float(decode_only[0] / per_step), float(extra[0]), float(extra_sq[0]),
                           float(last_chunk[0]), None if chunk_steps is None else float(chunk_steps[0])), wl, slo)
        if ahead:
            # async scheduling: the arrival also waits for the step already chosen (engines.schedules_ahead)
            own = own + (busy * decode_only)[:, None]
        limit = slo.ttft_s if slo.ttft_s is not None else np.inf
        return _CurveTerms(B, budget, slo, limit, kv_bound, front, under, tpot, tpot_q, p_tpot, decode_only / per_step,
                           q, rate, occupancy, w, own, step, busy)


@dataclass
class _CurveTerms:
    """One aggregated curve (_AggregatedSteps.terms) up to its TTFT quantile, with that quantile's arguments:
    ttft_quantile_s(q, rate, occupancy, w, own, step, busy). finish_curves computes the quantiles of many layouts
    together, then ``curve`` the rest."""

    B: np.ndarray                 # running sequences per replica, one per batch of the grid
    budget: np.ndarray            # tokens: prefill budget of a step at each batch
    slo: SLO
    limit_s: float                # s: the SLO's TTFT target (inf without one)
    kv_bound: float               # sequences the KV cache admits (kv_batch_bound)
    front_s: float                # s: the engine's front-end latency (engines.front_end_s)
    under: Underload
    tpot: np.ndarray              # s: mean TPOT at each batch
    tpot_q: np.ndarray            # s: TPOT at the SLO's TPOT percentile
    p_tpot: np.ndarray            # share of requests within the TPOT target
    decode_only_s: np.ndarray     # s of pure decode step per output token
    q: float                      # the TTFT quantile (SLO percentile / 100)
    rate: np.ndarray              # requests/s one replica serves at each batch
    occupancy: np.ndarray         # share of a step each request class's prefill chunk fills
    w: np.ndarray                 # request-class weights (Workload.weights)
    own: np.ndarray               # s: each class's own prefill time at each batch
    step: np.ndarray              # s: mean engine step at each batch
    busy: np.ndarray              # probability an arrival finds the replica mid-step

    def served(self, ttft_q: np.ndarray) -> _Served:
        """TTFT at the SLO's percentile, given ttft_quantile_s's answer for these terms, with the rate, the
        probability of finding the replica busy and the own times at the rate each batch serves (Underload)."""
        budget, limit, front, under = self.budget, self.limit_s, self.front_s, self.under
        rate, own, busy = self.rate, self.own, self.busy
        ttft = ttft_q + front
        ttft = np.where(budget > 0, ttft, np.inf)
        if (budget[0] > 0 and not (np.isfinite(ttft[0]) and ttft[0] <= limit)
                and float(np.min(under.own)) + front < limit):
            lam0 = under.capacity(limit)
            if lam0 > 0:  # the smallest batch, run below its full rate, serves lam0 within the SLO (Underload)
                rate, busy, own = rate.copy(), busy.copy(), own.copy()
                (busy[0],), (own[0],) = under.state(lam0)
                rate[0], ttft[0] = lam0, float(under.ttft_s(lam0)[0])
        return _Served(ttft, rate, busy, own)

    def curve(self, served: _Served, wait_s: np.ndarray, p_ttft_raw: np.ndarray | None) -> AggregatedCurve:
        """The curve, given ``served`` and, at its rates, queueing.mean_wait_s (``wait_s``) and queueing.ttft_cdf at
        the TTFT target less the front end (``p_ttft_raw``; None without a TTFT target)."""
        B, budget, slo, front, w, step, nB = self.B, self.budget, self.slo, self.front_s, self.w, self.step, self.B.size
        ttft, rate, busy, own = served.ttft, served.rate, served.busy, served.own
        limit = self.limit_s
        ttft_mean = own @ w + busy * step / 2.0 + wait_s + front
        kv_ok = B <= self.kv_bound
        tpot_ok = self.tpot_q <= (slo.tpot_s if slo.tpot_s is not None else np.inf)
        ttft_ok = np.isfinite(ttft) & (ttft <= limit)
        p_ttft = np.where(budget > 0, p_ttft_raw, 0.0) if p_ttft_raw is not None else np.ones(nB)
        goodput = p_ttft * self.p_tpot
        goodput_ok = (goodput >= slo.min_goodput - 1e-12 if (slo.ttft_s is not None or slo.tpot_s is not None)
                      else np.ones(nB, bool))
        return AggregatedCurve(B, self.tpot, rate, ttft, ttft_mean, kv_ok, tpot_ok, ttft_ok, self.decode_only_s,
                               self.tpot_q, goodput, goodput_ok, underload=self.under)


@dataclass
class _Served:
    """A curve's TTFT at the SLO's percentile and the queue's state at the rate each batch serves (_CurveTerms)."""

    ttft: np.ndarray              # s
    rate: np.ndarray              # requests/s per replica
    busy: np.ndarray              # probability an arrival finds the replica mid-step
    own: np.ndarray               # s: each class's own prefill time


@dataclass
class PendingCurve:
    """An aggregated curve waiting for its TTFT quantiles (finish_curves): the terms at the point prediction, or with
    margins at the pessimistic bound (``terms``) and at the point (``point``)."""

    terms: _CurveTerms
    point: _CurveTerms | None = None

    @property
    def decode_only_s(self) -> np.ndarray:
        """The point curve's decode_only_s (what a disaggregated decode replica runs)."""
        return (self.point or self.terms).decode_only_s


def finish_curves(pending: list[PendingCurve]) -> list[AggregatedCurve]:
    """The aggregated curves of ``pending``. The TTFT quantiles of every curve with one request class (the same q)
    come from one ttft_quantile_s call over their batches laid end to end: with one class it works element by
    element (its matrix products have one column), so each curve's quantiles are those of a call of its own, at a
    fraction of the per-call overhead a search over hundreds of layouts paid. Curves with several classes (whose
    bisection sums over them) are computed one by one."""
    terms: list[_CurveTerms] = _flat_terms(pending)
    ttft = _ttft_quantiles([(c.q, c.rate, c.occupancy, c.w, c.own, c.step, c.busy) for c in terms])
    served = [c.served(t) for c, t in zip(terms, ttft)]
    waits, cdfs = _waits_and_cdfs(terms, served)
    return _regrouped(pending, [c.curve(s, wait, cdf) for c, s, wait, cdf in zip(terms, served, waits, cdfs)])


_Done = TypeVar("_Done", "AggregatedCurve", "PrefillCapacity")


def _flat_terms(pending: list[Any]) -> list[Any]:
    """The terms of ``pending`` (PendingCurve / PendingPrefill) in one list, each one's point terms after its own."""
    return [x for p in pending for x in ((p.terms,) if p.point is None else (p.terms, p.point))]


def _regrouped(pending: list[Any], done: list[_Done]) -> list[_Done]:
    """``done`` (one result per term of _flat_terms(pending)) grouped back: one per pending item, with its point."""
    it = iter(done)
    out = []
    for p in pending:
        first = next(it)
        if p.point is not None:
            first.point = next(it)
        out.append(first)
    return out


def _waits_and_cdfs(terms: list[_CurveTerms],
                    served: list[_Served]) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """queueing.mean_wait_s and queueing.ttft_cdf (at each curve's TTFT target less its front end; None without a
    target) at the rates the curves serve. One-class curves are computed together (_joined), as in _ttft_quantiles
    (both work element by element with one class: the target becomes an array of each batch's own); the others one
    by one."""
    pairs = list(zip(terms, served))

    def one_class(c: _CurveTerms) -> float | None:
        return float(c.w[0]) if c.w.size == 1 else None

    def wait_key(x: tuple[_CurveTerms, _Served]) -> float | None:
        return one_class(x[0])   # mean_wait_s takes no TTFT target: curves with and without one join

    def cdf_key(x: tuple[_CurveTerms, _Served]) -> float | None:
        return one_class(x[0]) if x[0].slo.ttft_s is not None else None

    def cdf_alone(x: tuple[_CurveTerms, _Served]) -> np.ndarray | None:
        c, s = x
        if c.slo.ttft_s is None:
            return None
        return ttft_cdf(c.slo.ttft_s - c.front_s, s.rate, c.occupancy, c.w, s.own, c.step, s.busy)

    def cdf_together(_: object, group: list[tuple[_CurveTerms, _Served]]) -> np.ndarray:
        cs, ss = [c for c, _ in group], [s for _, s in group]
        targets = []
        for c in cs:
            assert c.slo.ttft_s is not None   # the group's key
            targets.append(np.full((c.B.size, 1), c.slo.ttft_s - c.front_s))   # each batch's own, as an array
        return ttft_cdf(np.concatenate(targets), np.concatenate([s.rate for s in ss]),
                        np.concatenate([c.occupancy for c in cs]), cs[0].w, np.concatenate([s.own for s in ss]),
                        np.concatenate([c.step for c in cs]), np.concatenate([s.busy for s in ss]))

    waits = _joined(pairs, wait_key, lambda x: x[0].B.size,
                    lambda x: mean_wait_s(x[1].rate, x[0].occupancy, x[0].w),
                    lambda _, g: mean_wait_s(np.concatenate([s.rate for _, s in g]),
                                             np.concatenate([c.occupancy for c, _ in g]), g[0][0].w))
    return waits, _joined(pairs, cdf_key, lambda x: x[0].B.size, cdf_alone, cdf_together)


_Item = TypeVar("_Item")
_Alone = TypeVar("_Alone")


def _joined(items: list[_Item], key: Callable[[_Item], Hashable | None], size: Callable[[_Item], int],
            alone: Callable[[_Item], _Alone], together: Callable[[Any, list[_Item]], np.ndarray]) -> list[_Alone]:
    """One answer per item of ``items``, in order: ``alone(item)`` where ``key(item)`` is None; else the items sharing
    a key are computed in one ``together(key, group)`` call over their arrays laid end to end (in the items' order),
    whose answer is cut back into each item's part of ``size(item)`` elements."""
    out: dict[int, Any] = {}
    groups: dict[Hashable, list[int]] = {}
    for i, x in enumerate(items):
        k = key(x)
        if k is None:
            out[i] = alone(x)
        else:
            groups.setdefault(k, []).append(i)
    for k, idx in groups.items():
        joined = together(k, [items[i] for i in idx])
        for i, part in zip(idx, np.split(joined, np.cumsum([size(items[i]) for i in idx])[:-1])):
            out[i] = part
    return [out[i] for i in range(len(items))]   # every item answered: a KeyError, never a silent misalignment


_QuantileArgs = tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]


def _ttft_quantiles(args: list[_QuantileArgs]) -> list[np.ndarray]:
    """ttft_quantile_s(*a) for each ``a`` of ``args`` (q, arrivals (n,), service (n, K), weights (K,), own (n, K), step
    and busy (n,) or both None). Those with one request class, the same q and the same step-boundary use are computed
    in one call over their arrays laid end to end (_joined): with one class ttft_quantile_s works element by element
    (its matrix products have one column; _one_class_wait's Newton step is per element), so each answer is that of a
    call of its own, without the per-call overhead a search over hundreds of layouts paid. The others (whose
    bisection sums over the classes) are computed one by one."""
    def key(a: _QuantileArgs) -> tuple[float, float, bool] | None:
        q, _lam, _occ, w, _own, step, busy = a
        return (q, float(w[0]), step is None or busy is None) if w.size == 1 else None

    def together(k: tuple[float, float, bool], a: list[_QuantileArgs]) -> np.ndarray:
        step = busy = None
        if not k[2]:   # the key: every item of the group has its step and busy arrays
            step = np.concatenate([cast(np.ndarray, x[5]) for x in a])
            busy = np.concatenate([cast(np.ndarray, x[6]) for x in a])
        return ttft_quantile_s(k[0], np.concatenate([x[1] for x in a]), np.concatenate([x[2] for x in a]), a[0][3],
                               np.concatenate([x[4] for x in a]), step, busy)

    return _joined(args, key, lambda a: a[1].size, lambda a: ttft_quantile_s(*a), together)


@dataclass
class PrefillCapacity:
    """A disaggregated prefill replica: max requests/s within the TTFT SLO, and TTFT there."""

    rate_rps: float
    ttft_s: float
    kv_transfer_s: float
    points: int
    point: PrefillCapacity | None = None   # with margins: the same replica at the point prediction
    load_rps: np.ndarray | None = None     # the arrival rates tried (fractions of saturation), increasing
    load_ttft_s: np.ndarray | None = None  # TTFT at each of them

    def ttft_at(self, rate_rps: float) -> float:
        """TTFT of a replica serving ``rate_rps`` requests/s (at most its capacity): interpolated between the rates
        tried, the lowest one's below them."""
        if self.load_rps is None or self.load_ttft_s is None or self.rate_rps <= 0:
            return self.ttft_s
        return float(np.interp(min(rate_rps, self.rate_rps), self.load_rps, self.load_ttft_s))


def prefill_capacity(sm, wl: Workload, slo: SLO, kv_link, margins: StepMargins | None = None) -> PrefillCapacity:
    """Largest arrival rate at which a prefill-only replica keeps TTFT (+ KV transfer) within the SLO (with
    ``margins``: with every prefill step at its upper bound, the point answer in ``point``)."""
    return finish_prefills([pending_prefill(sm, wl, slo, kv_link, margins)])[0]


def pending_prefill(sm, wl: Workload, slo: SLO, kv_link, margins: StepMargins | None = None) -> PendingPrefill:
    """prefill_capacity up to its TTFT quantiles: finish_prefills finishes many together."""
    P, A, u, n_chunks, chunk = _prefill_steps(sm, wl)
    t = np.asarray(sm.step_s(P, A, 0.0, 0.0, microbatches=1))
    return _pending_prefill(t, sm, wl, slo, kv_link, margins, u, n_chunks, chunk)


def _prefill_steps(sm, wl: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """(prefill tokens, keys attended, u, n_chunks, chunk) of prefill_capacity's steps: [full-chunk step | own-chunk
    step], one per request class, with no decode; the same chunking as StepModel.prefill_s."""
    u, a = _class_prefill(wl)
    chunk = float(sm.engine.max_num_batched_tokens)
    n_chunks = np.maximum(np.ceil(u / chunk), 1.0)
    per = u / n_chunks
    cached = wl.isl_tokens - u
    attended = u * cached + per * per * n_chunks * (n_chunks - 1) / 2.0 + n_chunks * per * (per + 1) / 2.0
    return (np.concatenate([np.full(u.size, chunk), per]), np.concatenate([chunk * a, attended / n_chunks]), u,
            n_chunks, chunk)


def _pending_prefill(t: np.ndarray, sm, wl: Workload, slo: SLO, kv_link, margins: StepMargins | None,
                     u: np.ndarray, n_chunks: np.ndarray, chunk: float) -> PendingPrefill:
    """prefill_capacity from its step times ``t`` (point prediction), with ``margins`` at the bound, up to its TTFT
    quantiles (finish_prefills)."""
    if margins is None:
        return PendingPrefill(_prefill_terms(t, sm, wl, slo, kv_link, u, n_chunks, chunk))
    return PendingPrefill(_prefill_terms(t * margins.prefill, sm, wl, slo, kv_link, u, n_chunks, chunk),
                          _prefill_terms(t, sm, wl, slo, kv_link, u, n_chunks, chunk))


@dataclass
class _PrefillTerms:
    """A prefill replica (_prefill_terms) up to its TTFT quantiles over the load grid ``lam``, with their arguments:
    ttft_quantile_s(q, lam, occupancy, w, own)."""

    q: float
    lam: np.ndarray
    occupancy: np.ndarray   # (lam.size, K)
    w: np.ndarray
    own: np.ndarray         # (lam.size, K) s: own prefill + KV transfer
    front_s: float          # s: the engine's front-end latency (engines.front_end_s)
    limit_s: float          # s: the TTFT target (inf without one)
    holds: bool             # the replica holds the longest prompt's KV
    transfer_s: float       # mean KV transfer

    def capacity(self, ttft_q: np.ndarray) -> PrefillCapacity:
        """The replica's capacity, given ttft_quantile_s's answer for these terms."""
        lam, ttft = self.lam, ttft_q + self.front_s
        ok = ttft <= self.limit_s
        if not self.holds:
            ok[:] = False
        if not ok.any():
            return PrefillCapacity(0.0, float(ttft[0]), self.transfer_s, lam.size)
        i = int(np.flatnonzero(ok)[-1])
        return PrefillCapacity(float(lam[i]), float(ttft[i]), self.transfer_s, lam.size, load_rps=lam[:i + 1],
                               load_ttft_s=ttft[:i + 1])


@dataclass
class PendingPrefill:
    """A prefill capacity waiting for its TTFT quantiles (finish_prefills): at the point prediction, or with margins
    at the bound (``terms``) and at the point (``point``)."""

    terms: _PrefillTerms
    point: _PrefillTerms | None = None

    @property
    def points(self) -> int:
        """Arrival rates tried (PrefillCapacity.points)."""
        return self.terms.lam.size


def finish_prefills(pending: list[PendingPrefill]) -> list[PrefillCapacity]:
    """The prefill capacities of ``pending``, their TTFT quantiles computed together (_ttft_quantiles)."""
    terms: list[_PrefillTerms] = _flat_terms(pending)
    ttft = _ttft_quantiles([(c.q, c.lam, c.occupancy, c.w, c.own, None, None) for c in terms])
    return _regrouped(pending, [c.capacity(t) for c, t in zip(terms, ttft)])


def pending_curve(sm, wl: Workload, slo: SLO, batch: np.ndarray, margins: StepMargins | None = None,
                  drafting: Drafting | None = None, kv_bound: float | None = None) -> PendingCurve:
    """aggregated_curve up to its TTFT quantiles: finish_curves finishes many together. ``kv_bound``:
    ``kv_batch_bound(sm, wl)`` when the caller has it already (the search computes it for the grid)."""
    steps = _AggregatedSteps.of(sm, wl, batch, drafting)
    t = np.asarray(_verifying(sm, drafting).step_s(steps.P, steps.A, steps.D, steps.keys))
    return steps.pending(t, sm, wl, slo, margins, drafting, kv_bound)


def _verifying(sm, drafting: Drafting | None):
    """The step model whose decoding sequences verify ``drafting``'s draft tokens in every step
    (StepModel.with_verify), or ``sm`` without speculative decoding."""
    return sm if drafting is None else sm.with_verify(drafting.draft_tokens)


def pending_and_prefill(sm, wl: Workload, slo: SLO, batch: np.ndarray, kv_link, margins: StepMargins | None = None,
                        drafting: Drafting | None = None,
                        kv_bound: float | None = None) -> tuple[PendingCurve, PendingPrefill]:
    """``aggregated_curve(sm, wl, slo, batch, margins, drafting)`` and ``prefill_capacity(sm, wl, slo,
    kv_link, margins)`` of one compiled replica (a disaggregated search asks for both), pending (finish_curves,
    finish_prefills). Without pipeline parallelism both time their steps in one StepModel.step_s call (step_s works
    element by element, and a prefill step's microbatches=1 is then the default): the same step times, one call's
    overhead instead of two."""
    if sm.pp != 1:
        return (pending_curve(sm, wl, slo, batch, margins, drafting, kv_bound),
                pending_prefill(sm, wl, slo, kv_link, margins))
    P, A, u, n_chunks, chunk = _prefill_steps(sm, wl)
    steps = _AggregatedSteps.of(sm, wl, batch, drafting)
    n = steps.P.size
    zeros = np.zeros(P.size)
    t = np.asarray(_verifying(sm, drafting).step_s(np.concatenate([steps.P, P]), np.concatenate([steps.A, A]),
                                                   np.concatenate([steps.D, zeros]),
                                                   np.concatenate([steps.keys, zeros])))
    return (steps.pending(t[:n], sm, wl, slo, margins, drafting, kv_bound),
            _pending_prefill(t[n:], sm, wl, slo, kv_link, margins, u, n_chunks, chunk))


def _prefill_terms(t: np.ndarray, sm, wl: Workload, slo: SLO, kv_link, u: np.ndarray, n_chunks: np.ndarray,
                   chunk: float) -> _PrefillTerms:
    """prefill_capacity from its step times ``t``: [full-chunk steps | own-chunk steps], one per request class, up to
    its TTFT quantiles."""
    w = wl.weights
    step_full, own = t[:u.size], n_chunks * t[u.size:]
    occupancy = u / chunk * step_full
    kv_bytes = np.asarray(sm.kv_bytes_per_sequence(wl.isl_tokens), dtype=float)
    transfer = kv_link.hop_s + kv_bytes / kv_link.bw_bytes_per_s
    total_own = own + transfer
    sat = 1.0 / float(occupancy @ w)
    lam = sat * _load_fractions(PREFILL_LOAD_POINTS)
    q = max(slo.ttft_percentile / 100.0, min(slo.min_goodput, 0.999))
    limit = slo.ttft_s if slo.ttft_s is not None else np.inf
    # the replica must hold the longest prompt's KV (with the engine's 1% watermark and a block to spare)
    holds = not float(sm.kv_capacity_tokens) * 0.99 < float(np.max(wl.isl_tokens)) + 17
    return _PrefillTerms(q, lam, np.broadcast_to(occupancy, (lam.size, occupancy.size)), w,
                         np.broadcast_to(total_own, (lam.size, total_own.size)), front_end_s(sm), limit, holds,
                         float(transfer @ w))


@dataclass
class DecodeCurve:
    batch: np.ndarray
    tpot_s: np.ndarray
    rate_rps: np.ndarray
    kv_ok: np.ndarray
    tpot_ok: np.ndarray
    point: DecodeCurve | None = None      # with margins: the same curve at the point prediction

    @property
    def feasible(self) -> np.ndarray:
        return self.kv_ok & self.tpot_ok


def decode_curve(sm, wl: Workload, slo: SLO, batch: np.ndarray, decode_tpot_s: np.ndarray | None = None,
                 margins: StepMargins | None = None, drafting: Drafting | None = None,
                 kv_bound: float | None = None) -> DecodeCurve:
    """A disaggregated decode replica: TPOT and requests/s at each batch size.

    ``decode_tpot_s``: the TPOT of pure decode steps at the point prediction, computed already (the point
    aggregated curve's ``decode_only_s``); else ``sm.decode_step_s(batch, context)``, or with ``drafting`` the
    speculative step (perfmodel.serving.speculative_step_s) over its tokens per step. ``margins``: at the
    pessimistic bound, the point curve in ``point``. ``kv_bound``: ``kv_batch_bound(sm, wl)`` when the caller has it.
    """
    B = np.asarray(batch, dtype=float)
    ctx = wl.decode_context_mean_tokens
    if decode_tpot_s is not None:
        tpot = np.asarray(decode_tpot_s)
    elif drafting is None:
        tpot = np.asarray(sm.decode_step_s(B, ctx))
    else:
        from ..perfmodel.serving import speculative_step_s

        tpot = np.asarray(speculative_step_s(sm, B, ctx, drafting)) / drafting.tokens_per_step
    kv = kv_batch_bound(sm, wl) if kv_bound is None else kv_bound
    if margins is not None:
        bound = decode_curve(sm, wl, slo, B, tpot * margins.decode_step(B), kv_bound=kv)
        bound.point = decode_curve(sm, wl, slo, B, tpot, kv_bound=kv)
        return bound
    rate = B / (wl.osl_mean_tokens * tpot)
    kv_ok = B <= kv
    tpot_ok = tpot <= (slo.tpot_s if slo.tpot_s is not None else np.inf)
    return DecodeCurve(B, tpot, rate, kv_ok, tpot_ok)
