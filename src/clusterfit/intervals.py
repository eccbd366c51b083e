"""Prediction intervals: how far measured figures have fallen from the model's predictions, by family.

Every predicted figure of ``perf``, ``plan`` and ``simulate`` carries an 80% interval ``{"value", "lo", "hi"}``
(``schema.Interval``) read off ``catalog/intervals.json``. That table is fitted by ``benchmarks/fit_intervals.py``
from grouped cross-validation: each published measurement of the development CSVs is predicted with engine
constants calibrated without its source table (leave one table out), and its residual is kept.

Residuals are in the *time* direction: ``r = log(measured time / predicted time)``; a rate figure (tokens/s) is
the inverse of a time, so its residual is ``log(predicted rate / measured rate)``. One residual set thus serves
both kinds of figure: a time ``T`` lies in ``[T e^q_lo, T e^q_hi]`` and a rate ``R`` in ``[R e^-q_hi, R e^-q_lo]``
with ``q_lo, q_hi`` the empirical quantiles of ``r`` (10th and 90th for 80%, 5th and 95th for 90%; numpy's
default linear interpolation, no normal assumption), so intervals are asymmetric in general. An interval always
contains the point prediction: where both quantiles lie on one side of 0 (a biased family), the interval is widened
to the point (``lo <= value <= hi``), which keeps or raises its coverage.

A family is engine x GPU family (``engines.gpu_family``; GPUs without their own constants, Hopper among them, are
"hopper") x dense/MoE x regime:

- ``prefill``: TTFT and prefill time / prefill throughput, requests served as they come;
- ``decode``: decode figures (TPOT, ITL, decode step, tokens/s) at a batch of at most ``DECODE_BATCH_MAX``
  sequences per replica: weight streaming and per-step host and launch costs dominate;
- ``throughput``: the same figures at larger batches (max-throughput runs): GEMM efficiency, attention over the KV
  cache and per-sequence host work dominate;
- ``queued``: TTFT of a run whose requests mostly wait for admission (all sent at once, request rate inf, or a
  simulated run whose mean wait in the queue is at least ``QUEUED_WAIT_SHARE`` of its mean TTFT): the time to drain
  a backlog, which the engine's admission order and the client's pacing decide as much as the step times. Its
  residuals are several times wider than a light-load TTFT's, so they get their own family instead of widening
  every TTFT interval (``perf``'s and ``plan``'s TTFTs are light-load figures: ``prefill``).

A family with fewer than ``MIN_RESIDUALS`` residuals falls back, in this order: drop the regime, then the GPU
family, then dense/MoE (the engine's own residuals), then every engine; the level used is reported with the
figures (``schema.IntervalBasis``).

Quantiles of a family's past residuals under-cover a new source table: a table's rows share its offset (one
model, GPU and software version), so a family's residuals hold fewer independent draws than rows, and the families
that fall back are the unusual ones. The table therefore carries a conformal widening per confidence level and
regime (``widening``, log units), added below the lower and above the upper quantile of every band of that regime:
conformalized quantile regression (Romano, Patterson and Candes, "Conformalized Quantile Regression", NeurIPS 2019)
with grouped calibration. ``conformal_widening`` computes it from held-out conformity scores, each residual scored
against a table fitted without its own CV fold: the (1 - alpha)(1 + 1/n) empirical quantile of
``max(q_lo - r, r - q_hi)`` over the regime's residuals of every engine and GPU. One constant per level and regime:
a TTFT carries the front end and chunking of its run, a backlog's TTFT the admission order, a light-load step its
host costs, a max-throughput run none of these, so the regimes miss by different amounts (one constant for all
left prefill figures under-covered).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .engines import gpu_family
from .errors import ClusterfitError

INTERVALS_JSON = Path(__file__).resolve().parent / "catalog" / "intervals.json"

#: Regimes of a predicted figure (see the module docstring).
REGIMES = ("prefill", "decode", "throughput", "queued")
Regime = Literal["prefill", "decode", "throughput", "queued"]
#: Largest batch (running sequences per replica) of the ``decode`` regime. A choice, not a fit: at up to 32
#: sequences a dense decode step on an H200 still streams its weights (bf16 GEMMs reach ~2-4 TFLOP/s at M=1 and
#: turn compute-bound only at M of a few hundred; ../shared/notes/architecture.md), so the step is weights + host
#: costs, the regime the light-load rows of the development CSVs measure.
DECODE_BATCH_MAX = 32
#: Share of a run's mean TTFT that its mean queue wait must reach for the TTFT to be in the ``queued`` regime. A
#: choice, not a fit: from there on the wait, not the prefill, is most of the figure.
QUEUED_WAIT_SHARE = 0.5
#: Fewest residuals a family needs before its own quantiles are used (else it falls back a level).
MIN_RESIDUALS = 15
#: Quantiles fitted and stored (5th/95th for the 90% interval, 10th/90th for 80%, the median for reference).
QUANTILES = (0.05, 0.10, 0.50, 0.90, 0.95)
#: Interval confidence (percent) -> (lower, upper) quantile of the residuals.
CONFIDENCE_QUANTILES = {80: (0.10, 0.90), 90: (0.05, 0.95)}
#: Levels tried, most specific first: (name, which parts of the family are kept).
LEVELS = ("family", "no_regime", "engine_kind", "engine", "all")
#: The interval every figure carries (percent).
DEFAULT_CONFIDENCE = 80
#: ``plan --confidence``: 50 sizes on the point prediction (today's plan), 80 / 90 on the upper bound of that
#: interval for latencies and the lower bound for throughput.
PLAN_CONFIDENCES = (50, 80, 90)


@dataclass(frozen=True)
class Family:
    """The residual family of a predicted figure."""

    engine: str
    gpu_family: str
    moe: bool
    regime: str

    def keys(self) -> list[tuple[str, str]]:
        """(level, table key) from the family itself down to every engine (LEVELS order)."""
        kind = "moe" if self.moe else "dense"
        e, g, r = self.engine, self.gpu_family, self.regime
        return [("family", f"{e}|{g}|{kind}|{r}"), ("no_regime", f"{e}|{g}|{kind}|*"),
                ("engine_kind", f"{e}|*|{kind}|*"), ("engine", f"{e}|*|*|*"), ("all", "*|*|*|*")]


def hw_family(gpu_id: str) -> str:
    """The GPU family label of a GPU id or name: engines.gpu_family, "hopper" for GPUs without their own."""
    return gpu_family(gpu_id) or "hopper"


def decode_regime(batch: float) -> str:
    """``decode`` at up to DECODE_BATCH_MAX running sequences per replica, else ``throughput``."""
    return "decode" if batch <= DECODE_BATCH_MAX else "throughput"


def ttft_regime(mean_wait_s: float, mean_ttft_s: float) -> str:
    """``queued`` when the mean wait in the queue is at least QUEUED_WAIT_SHARE of the mean TTFT, else
    ``prefill``."""
    return "queued" if mean_ttft_s > 0 and mean_wait_s >= QUEUED_WAIT_SHARE * mean_ttft_s else "prefill"


def is_moe(model: Any) -> bool:
    """Whether a ModelArch has a mixture-of-experts FFN in any layer."""
    return any(layer.ffn.kind == "moe" for layer in model.layers)


# ------------------------------------------------------------------------------------------- fitting
def quantiles(residuals: Iterable[float]) -> list[float]:
    """QUANTILES of ``residuals`` (numpy.quantile, linear interpolation)."""
    r = np.asarray(list(residuals), dtype=float)
    if r.size == 0:
        raise ClusterfitError("no residuals to take quantiles of")
    return [float(x) for x in np.quantile(r, QUANTILES)]


def fit_table(residuals: Iterable[tuple[Family, float]], digits: int = 4) -> dict[str, dict[str, Any]]:
    """The table entries of a set of residuals: for every key of every level that holds at least one residual,
    ``{"n": count, "q": QUANTILES of its residuals}`` (rounded to ``digits``). Which entries a lookup may use
    (n >= MIN_RESIDUALS) is decided by ``IntervalTable.band``."""
    groups: dict[str, list[float]] = {}
    for fam, r in residuals:
        if not math.isfinite(r):
            continue
        for _, key in fam.keys():
            groups.setdefault(key, []).append(float(r))
    return {k: {"n": len(v), "q": [round(x, digits) for x in quantiles(v)]} for k, v in sorted(groups.items())}


def conformity(band: Band, r: float, confidence: int) -> float:
    """How far residual ``r`` lies outside ``band``'s interval of ``confidence`` (the interval figures carry, widened
    to the point prediction; negative: inside, by that much from the nearer end)."""
    lo, hi = band.time_factors(confidence)
    return max(math.log(lo) - r, r - math.log(hi))


def conformal_widening(scores: Iterable[float], confidence: int) -> float:
    """The widening that makes ``confidence`` percent of held-out conformity ``scores`` fall inside: their
    ceil((n + 1) c) / n empirical quantile (CQR's finite-sample level), the largest score where that exceeds 1."""
    s = np.sort(np.asarray([x for x in scores if math.isfinite(x)], dtype=float))
    if s.size == 0:
        raise ClusterfitError("no conformity scores to fit a widening on")
    k = math.ceil((s.size + 1) * confidence / 100.0)
    return float(s[min(k, s.size) - 1])


# ------------------------------------------------------------------------------------------- lookup
@dataclass(frozen=True)
class Band:
    """The residual quantiles one figure's interval comes from, and where in the fallback they were found."""

    key: str
    level: str
    n: int
    q: tuple[float, ...]          # QUANTILES order
    #: Conformal widening (log units) of the band's regime by confidence level, from the table (none: 0).
    widening: tuple[tuple[int, float], ...] = ()

    def quantile_pair(self, confidence: int) -> tuple[float, float]:
        """The (lower, upper) residual quantiles of ``confidence``, each moved out by the table's widening."""
        if confidence not in CONFIDENCE_QUANTILES:
            raise ClusterfitError(f"confidence must be one of {', '.join(map(str, CONFIDENCE_QUANTILES))}, "
                                  f"got {confidence}")
        lo_q, hi_q = CONFIDENCE_QUANTILES[confidence]
        w = dict(self.widening).get(confidence, 0.0)
        return self.q[QUANTILES.index(lo_q)] - w, self.q[QUANTILES.index(hi_q)] + w

    def time_factors(self, confidence: int = DEFAULT_CONFIDENCE) -> tuple[float, float]:
        """(lo, hi) multipliers of a predicted time, widened to contain 1 (the point prediction)."""
        lo, hi = self.quantile_pair(confidence)
        return min(1.0, math.exp(lo)), max(1.0, math.exp(hi))

    def rate_factors(self, confidence: int = DEFAULT_CONFIDENCE) -> tuple[float, float]:
        """(lo, hi) multipliers of a predicted rate (the inverse of a time), widened to contain 1."""
        t_lo, t_hi = self.time_factors(confidence)
        return 1.0 / t_hi, 1.0 / t_lo


class IntervalTable:
    """The fitted table (catalog/intervals.json): entries by key, and what produced them."""

    def __init__(self, data: dict[str, Any]) -> None:
        try:
            self.families: dict[str, dict[str, Any]] = dict(data["families"])
            self.min_residuals = int(data.get("min_residuals", MIN_RESIDUALS))
            stored = tuple(float(x) for x in data.get("quantiles", QUANTILES))
            by_regime: dict[str, list[tuple[int, float]]] = {}
            for conf, per_regime in data.get("widening", {}).items():
                for regime, w in per_regime.items():
                    by_regime.setdefault(str(regime), []).append((int(conf), float(w)))
            self.widening = {r: tuple(sorted(v)) for r, v in by_regime.items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ClusterfitError(f"interval table: malformed ({exc})") from None
        if stored != QUANTILES:
            raise ClusterfitError(f"interval table: quantiles {stored} differ from {QUANTILES}; refit it with "
                                  "benchmarks/fit_intervals.py")
        self.meta = {k: v for k, v in data.items() if k != "families"}

    def band(self, family: Family) -> Band:
        """The quantiles of the most specific level with at least ``min_residuals`` residuals."""
        for level, key in family.keys():
            e = self.families.get(key)
            if e is not None and int(e["n"]) >= self.min_residuals:
                return Band(key, level, int(e["n"]), tuple(float(x) for x in e["q"]),
                            self.widening.get(family.regime, ()))
        raise ClusterfitError(f"interval table: no level of {family} holds {self.min_residuals} residuals")

    def describe(self) -> str:
        """Where the table comes from, in one line (shown with every result)."""
        m = self.meta
        return (f"catalog/intervals.json: grouped-CV residuals, fitted {m.get('date', '?')} on model commit "
                f"{str(m.get('model_commit', '?'))[:12]}")


@lru_cache(maxsize=4)
def load_table(path: str | None = None) -> IntervalTable:
    """The interval table shipped in catalog/intervals.json (or the one at ``path``)."""
    p = Path(path) if path else INTERVALS_JSON
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ClusterfitError(f"interval table {p}: {exc}") from None
    return IntervalTable(data)


# --------------------------------------------------------------------------------------- application
@dataclass(frozen=True)
class FigureBands:
    """The bands of one configuration (engine x GPU family x dense/MoE): one per regime, looked up once."""

    engine: str
    gpu_family: str
    moe: bool
    table: IntervalTable

    def band(self, regime: str) -> Band:
        return self.table.band(Family(self.engine, self.gpu_family, self.moe, regime))

    def time(self, value: float, regime: str, confidence: int = DEFAULT_CONFIDENCE) -> dict[str, float]:
        """``{"value", "lo", "hi"}`` of a predicted time (seconds or any time unit)."""
        lo, hi = self.band(regime).time_factors(confidence)
        return {"value": value, "lo": value * lo, "hi": value * hi}

    def rate(self, value: float, regime: str, confidence: int = DEFAULT_CONFIDENCE) -> dict[str, float]:
        """``{"value", "lo", "hi"}`` of a predicted rate (tokens/s, requests/s)."""
        lo, hi = self.band(regime).rate_factors(confidence)
        return {"value": value, "lo": value * lo, "hi": value * hi}

    def basis(self, regimes: Iterable[str]) -> dict[str, Any]:
        """``schema.IntervalsUsed`` fields: the confidence, the table and the band of each regime used."""
        out = {}
        for r in dict.fromkeys(regimes):
            b = self.band(r)
            out[r] = {"key": b.key, "level": b.level, "n": b.n}
        return {"confidence": DEFAULT_CONFIDENCE, "table": self.table.describe(), "by_regime": out}


def bands_for(engine: str, gpu_id: str, model: Any, table: IntervalTable | None = None) -> FigureBands:
    """The bands of ``model`` (a ModelArch) served by ``engine`` on GPU ``gpu_id``."""
    return FigureBands(engine, hw_family(gpu_id), is_moe(model), table or load_table())


@dataclass(frozen=True)
class StepMargins:
    """Multipliers of predicted step times at a confidence level's upper bound (``plan --confidence``): the
    pessimistic step the planner sizes on. A step that carries at least as many prefill tokens as decode
    sequences takes the ``prefill`` factor, else the decode or throughput factor by its decode batch."""

    prefill: float
    decode: float
    throughput: float

    def step(self, prefill_tokens: Any, decode_batch: Any) -> np.ndarray:
        p = np.asarray(prefill_tokens, dtype=float)
        d = np.asarray(decode_batch, dtype=float)
        dec = np.where(d <= DECODE_BATCH_MAX, self.decode, self.throughput)
        return np.where((p > 0) & (p >= d), self.prefill, dec)

    def decode_step(self, decode_batch: Any) -> np.ndarray:
        return self.step(0.0, decode_batch)


def step_margins(bands: FigureBands, confidence: int | None) -> StepMargins | None:
    """The upper-bound time factors of ``confidence`` (None or 50: the point prediction, no margins)."""
    if confidence is None or confidence == 50:
        return None
    f = {r: bands.band(r).time_factors(confidence)[1] for r in REGIMES}
    return StepMargins(f["prefill"], f["decode"], f["throughput"])
