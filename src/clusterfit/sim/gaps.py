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

import numpy as np

MIN_GAP_S = 1e-6
MAX_GAP_S = 1e5
GAP_RATIO = 1.005  # bin width: consecutive edges differ by 0.5%
_LOG_RATIO = math.log(GAP_RATIO)
_BINS = int(math.ceil(math.log(MAX_GAP_S / MIN_GAP_S) / _LOG_RATIO))


#: upper edge of each bin (bin i holds gaps in [MIN_GAP_S x GAP_RATIO^i, MIN_GAP_S x GAP_RATIO^(i+1)))
_UPPER = [MIN_GAP_S * GAP_RATIO ** (i + 1) for i in range(_BINS)]


def _bin(gap_s: float) -> int:
    if gap_s <= MIN_GAP_S:
        return 0
    i = int(math.log(gap_s / MIN_GAP_S) / _LOG_RATIO)
    return i if i < _BINS else _BINS - 1


class TokenGaps:
    """Weighted histogram of inter-token gaps (seconds), with their exact weighted sum. The counts are a plain list:
    the simulator adds to them once per step or decode segment, where numpy's per-element overhead would dominate."""

    __slots__ = ("counts", "total_s", "weight")

    def __init__(self) -> None:
        self.counts = [0.0] * _BINS
        self.total_s = 0.0
        self.weight = 0.0

    def add(self, gap_s: float, weight: float) -> None:
        """``weight`` tokens each arrived ``gap_s`` after their sequence's previous one."""
        self.counts[_bin(gap_s)] += weight
        self.total_s += gap_s * weight
        self.weight += weight

    def add_linear(self, first_s: float, slope_s: float, n: int, weight: float) -> None:
        """``n`` gaps first_s + slope_s x j (j = 0 .. n-1; a decode segment on the simulator's linear step tables),
        each seen by ``weight`` tokens: one bin update when they all fall in one bin, as they usually do."""
        if n <= 0:
            return
        last = first_s + slope_s * (n - 1)
        lo = _bin(first_s)
        counts = self.counts
        if last < _UPPER[lo] or lo == _BINS - 1 or slope_s <= 0.0:
            counts[lo] += n * weight
        else:  # the gaps grow across a few bins: count the j that fall in each (gaps below an edge: j < its k)
            hi = _bin(last)
            done = 0
            for b in range(lo, hi):
                k = min(n, max(done, math.ceil((_UPPER[b] - first_s) / slope_s)))
                counts[b] += (k - done) * weight
                done = k
            counts[hi] += (n - done) * weight
        self.total_s += (n * first_s + slope_s * (n * (n - 1) // 2)) * weight
        self.weight += n * weight

    def add_many(self, gaps_s: np.ndarray, weight: float) -> None:
        """Every gap in ``gaps_s`` seen by ``weight`` tokens (a decode segment: one gap per step)."""
        if gaps_s.size == 0:
            return
        g = np.maximum(gaps_s, MIN_GAP_S)
        idx = np.minimum((np.log(g / MIN_GAP_S) / _LOG_RATIO).astype(np.int64), _BINS - 1)
        bins, n = np.unique(idx, return_counts=True)
        counts = self.counts
        for b, k in zip(bins.tolist(), n.tolist()):
            counts[b] += k * weight
        self.total_s += float(gaps_s.sum()) * weight
        self.weight += gaps_s.size * weight

    def merge(self, other: TokenGaps) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]
        self.total_s += other.total_s
        self.weight += other.weight

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the gaps, at its bin's geometric centre; None without gaps."""
        if self.weight <= 0.0:
            return None
        cum = np.cumsum(self.counts)
        i = int(np.searchsorted(cum, q * cum[-1], side="left"))
        return MIN_GAP_S * GAP_RATIO ** (min(i, _BINS - 1) + 0.5)

    def summary(self, percentiles: tuple[int, ...]) -> dict[str, float | None]:
        """pNN for each of ``percentiles`` and the mean, seconds (None without gaps)."""
        out: dict[str, float | None] = {f"p{p}": self.quantile(p / 100.0) for p in percentiles}
        out["mean"] = self.total_s / self.weight if self.weight > 0.0 else None
        return out
