"""Inter-token latency: the gaps between consecutive streamed tokens of every request, as a serving benchmark
client measures them (vLLM's and SGLang's bench_serving pool every request's chunk-to-chunk gaps into one list and
report its mean and median as ITL; guidellm likewise).

A replica emits one token per running sequence at the end of every step that advances the decodes, so each such
step contributes one gap per decoding sequence: the time since that sequence's previous token, which is the step's
own duration plus any steps in between that did not advance the decodes (SGLang's prefill-only steps). The gaps are
kept as a weighted histogram on a geometric grid (GAP_RATIO wide bins from MIN_GAP_S to MAX_GAP_S): percentiles
are read to within half a bin (0.25%), the mean is exact.
"""

from __future__ import annotations

import math
from array import array

import numpy as np

MIN_GAP_S = 1e-6
MAX_GAP_S = 1e5
GAP_RATIO = 1.005  # bin width: consecutive edges differ by 0.5%
_LOG_RATIO = math.log(GAP_RATIO)
_INV_LOG_RATIO = 1.0 / _LOG_RATIO
_LOG_MIN = math.log(MIN_GAP_S)
_BINS = int(math.ceil(math.log(MAX_GAP_S / MIN_GAP_S) / _LOG_RATIO))


#: upper edge of each bin (bin i holds gaps in [MIN_GAP_S x GAP_RATIO^i, MIN_GAP_S x GAP_RATIO^(i+1)); the last bin
#: is open-ended)
_UPPER = [MIN_GAP_S * GAP_RATIO ** (i + 1) for i in range(_BINS - 1)] + [math.inf]
_UPPER_NP = np.array(_UPPER)


def _bins(gaps_s: np.ndarray) -> np.ndarray:
    """The bin of each gap (_bin, vectorised)."""
    i = (np.log(np.maximum(gaps_s, MIN_GAP_S)) - _LOG_MIN) * _INV_LOG_RATIO
    return np.minimum(i, _BINS - 1).astype(np.int64)


def _bin(gap_s: float, _log=math.log) -> int:
    if gap_s <= MIN_GAP_S:
        return 0
    i = int((_log(gap_s) - _LOG_MIN) * _INV_LOG_RATIO)
    return i if i < _BINS else _BINS - 1


class TokenGaps:
    """Weighted histogram of inter-token gaps (seconds), with their exact weighted sum.

    The simulator adds to it once per step or decode segment, so adding only appends to flat buffers; they are
    binned with numpy every FLUSH_EVERY additions and before any read (quantile, summary, merge, counts)."""

    FLUSH_EVERY = 4096

    __slots__ = ("_counts", "_total_s", "_weight", "_single", "_linear")

    def __init__(self) -> None:
        self._counts = np.zeros(_BINS)
        self._total_s = 0.0
        self._weight = 0.0
        self._single = array("d")  # gap, weight, gap, weight, ...
        self._linear = array("d")  # first, slope, n, weight, ...

    def add(self, gap_s: float, weight: float) -> None:
        """``weight`` tokens each arrived ``gap_s`` after their sequence's previous one."""
        buf = self._single
        buf.append(gap_s)
        buf.append(weight)
        if len(buf) >= 2 * self.FLUSH_EVERY:
            self._flush()

    def add_linear(self, first_s: float, slope_s: float, n: int, weight: float) -> None:
        """``n`` gaps first_s + slope_s x j (j = 0 .. n-1; a decode segment on the simulator's linear step tables),
        each seen by ``weight`` tokens."""
        if n <= 0:
            return
        buf = self._linear
        buf.append(first_s)
        buf.append(slope_s)
        buf.append(n)
        buf.append(weight)
        if len(buf) >= 4 * self.FLUSH_EVERY:
            self._flush()

    def add_many(self, gaps_s: np.ndarray, weight: float) -> None:
        """Every gap in ``gaps_s`` seen by ``weight`` tokens (a decode segment on the exact step model)."""
        if gaps_s.size == 0:
            return
        self._bin_into(np.asarray(gaps_s, float), np.full(gaps_s.size, float(weight)))

    def _bin_into(self, gaps: np.ndarray, weights: np.ndarray) -> None:
        self._counts += np.bincount(_bins(gaps), weights=weights, minlength=_BINS)
        self._total_s += float(gaps @ weights)
        self._weight += float(weights.sum())

    def _flush(self) -> None:
        if self._single:
            a = np.frombuffer(self._single, dtype=float).reshape(-1, 2)
            self._bin_into(a[:, 0], a[:, 1])
            self._single = array("d")
        if self._linear:
            a = np.frombuffer(self._linear, dtype=float).reshape(-1, 4)
            self._linear = array("d")
            first, slope, n, w = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
            last = first + slope * (n - 1.0)
            lo = _bins(first)
            one = (last < _UPPER_NP[lo]) | (slope <= 0.0)
            self._counts += np.bincount(lo[one], weights=(n * w)[one], minlength=_BINS)
            for f, sl, k, wt, b in zip(first[~one], slope[~one], n[~one], w[~one], lo[~one]):
                self._spread(float(f), float(sl), int(k), float(wt), int(b))  # a segment across a few bins
            self._total_s += float(((n * first + slope * (n * (n - 1.0) / 2.0)) * w).sum())
            self._weight += float((n * w).sum())

    def _spread(self, first_s: float, slope_s: float, n: int, weight: float, lo: int) -> None:
        """Count the gaps first_s + slope_s x j of one segment per bin (gaps below an edge: j < its k)."""
        hi = _bin(first_s + slope_s * (n - 1))
        counts = self._counts
        done = 0
        for b in range(lo, hi):
            k = min(n, max(done, math.ceil((_UPPER[b] - first_s) / slope_s)))
            counts[b] += (k - done) * weight
            done = k
        counts[hi] += (n - done) * weight

    @property
    def total_s(self) -> float:
        """Sum of all gaps, each times its weight (seconds)."""
        self._flush()
        return self._total_s

    @property
    def weight(self) -> float:
        """Number of gaps (token weights summed)."""
        self._flush()
        return self._weight

    @property
    def counts(self) -> np.ndarray:
        """Weighted gap count per bin."""
        self._flush()
        return self._counts

    def merge(self, other: TokenGaps) -> None:
        self._flush()
        other._flush()
        self._counts += other._counts
        self._total_s += other._total_s
        self._weight += other._weight

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the gaps, at its bin's geometric centre; None without gaps."""
        self._flush()
        if self._weight <= 0.0:
            return None
        cum = np.cumsum(self._counts)
        i = int(np.searchsorted(cum, q * cum[-1], side="left"))
        return MIN_GAP_S * GAP_RATIO ** (min(i, _BINS - 1) + 0.5)

    def summary(self, percentiles: tuple[int, ...]) -> dict[str, float | None]:
        """pNN for each of ``percentiles`` and the mean, seconds (None without gaps)."""
        self._flush()
        out: dict[str, float | None] = {f"p{p}": self.quantile(p / 100.0) for p in percentiles}
        out["mean"] = self._total_s / self._weight if self._weight > 0.0 else None
        return out
