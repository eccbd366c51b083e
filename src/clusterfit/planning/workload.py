"""Workloads and SLOs: what the cluster must serve, and how fast.

A workload is reduced to a small set of weighted *request classes* (numpy arrays), which is what the
planner's vectorised capacity model consumes:

- ``isl_tokens``: prompt tokens each request attends to (its whole context at prefill);
- ``uncached_tokens``: prompt tokens that must actually be prefilled (the rest hit the prefix cache);
- ``weights``: probability of each class (sums to 1);
- ``osl_mean_tokens``: mean output tokens per request.

Lengths are given fixed, as a distribution by mean and percentiles (a lognormal fitted to them, then
discretised into equal-probability points), or as a histogram. Load is requests/s, output tokens/s or
concurrent sessions; agent sessions (a shared system prompt, a context that grows every turn) expand
into one request class per turn.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

import numpy as np

from ..errors import ClusterfitError
from ..schema import (MAX_CONCURRENCY, MAX_RATE_RPS, MAX_THINK_TIME_S, MAX_TOKENS, MAX_TOKENS_PER_S, MIN_LOAD,
                      MIN_RATE_GAP)

#: Number of equal-probability points a fitted length distribution is discretised into.
DIST_POINTS = 16
#: Most bins a length histogram may have (the planner evaluates every bin for every layout).
MAX_HISTOGRAM_BINS = 1_000

#: Standard-normal quantiles used to fit a lognormal to a percentile.
_Z = {50: 0.0, 75: 0.6744897501960817, 90: 1.2815515655446004, 95: 1.6448536269514722,
      99: 2.3263478740408408, 99.9: 3.090232306167813}


def _normal_ppf(q: np.ndarray) -> np.ndarray:
    """Standard-normal quantile function (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = [-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00]
    b = [-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01]
    c = [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00]
    d = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00]
    q = np.asarray(q, dtype=float)
    out = np.empty_like(q)
    lo, hi = q < 0.02425, q > 1 - 0.02425
    mid = ~(lo | hi)
    r = q[mid] - 0.5
    s = r * r
    out[mid] = ((((((a[0] * s + a[1]) * s + a[2]) * s + a[3]) * s + a[4]) * s + a[5]) * r
                / (((((b[0] * s + b[1]) * s + b[2]) * s + b[3]) * s + b[4]) * s + 1))
    for mask, sign, qq in ((lo, 1.0, q[lo]), (hi, -1.0, 1 - q[hi])):
        t = np.sqrt(-2 * np.log(qq))
        out[mask] = sign * ((((((c[0] * t + c[1]) * t + c[2]) * t + c[3]) * t + c[4]) * t + c[5])
                            / ((((d[0] * t + d[1]) * t + d[2]) * t + d[3]) * t + 1))
    return out


@lru_cache(maxsize=64)
def _standard_normal_quantile(percentile: float) -> float:
    """_normal_ppf at ``percentile`` / 100, once per percentile (SLO.tpot_z is read for every layout a plan
    evaluates)."""
    return float(_normal_ppf(np.array([percentile / 100.0]))[0])


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution as weighted points (tokens, probability).

    Build it with :meth:`fixed`, :meth:`from_percentiles` or :meth:`from_histogram`.
    """

    tokens: np.ndarray
    weights: np.ndarray
    description: str = ""

    @classmethod
    def fixed(cls, tokens: float, name: str = "length") -> LengthDist:
        """Every request has exactly ``tokens`` tokens (``name`` labels the value in errors, e.g. '--isl')."""
        _check_length(name, tokens)
        return cls(np.array([float(tokens)]), np.array([1.0]), f"{tokens:g} tokens")

    @classmethod
    def from_percentiles(cls, mean: float | None = None, percentiles: dict[float, float] | None = None,
                         points: int = DIST_POINTS) -> LengthDist:
        """A lognormal fitted to a mean and/or percentiles ({50: 900, 90: 3000, 99: 8000}), discretised.

        Fit: the median is p50 when given (else solved from the mean and the widest percentile); the
        log-spread sigma is the least-squares fit of ln(p_q / median) = sigma * z_q over the given
        percentiles (or, with the mean and p50 only, sigma = sqrt(2 ln(mean / p50))). The distribution is
        cut into ``points`` equal-probability slices represented by their mid quantiles; when a mean is
        given the points are rescaled so that the mean is exact.
        """
        pct = {float(k): float(v) for k, v in (percentiles or {}).items()}
        for q, v in pct.items():
            if q not in _Z:
                raise ClusterfitError(f"length percentile p{q:g} is not supported; use one of "
                                      f"{', '.join('p' + format(k, 'g') for k in _Z)}")
            _check_length(f"p{q:g}", v)
        if mean is not None:
            _check_length("mean", mean)
        if mean is None and not pct:
            raise ClusterfitError("a length distribution needs a mean, percentiles or both")
        vals = [pct[q] for q in sorted(pct)]
        if any(b < a for a, b in zip(vals, vals[1:])):
            raise ClusterfitError(f"length percentiles must not decrease: {pct}")
        tail = {q: v for q, v in pct.items() if q != 50}
        if 50 in pct:
            median = pct[50]
            if tail:
                z = np.array([_Z[q] for q in tail])
                sigma = float(np.dot(z, np.log(np.array(list(tail.values())) / median)) / np.dot(z, z))
            elif mean is not None:
                if mean < median:
                    raise ClusterfitError(f"length mean {mean:g} below the median p50={median:g}: a right-skewed "
                                          "(lognormal) length distribution needs mean >= p50; give a histogram")
                sigma = math.sqrt(2 * math.log(mean / median))
            else:
                sigma = 0.0
        elif tail and mean is not None:
            # mean = m * exp(s^2/2), p_q = m * exp(s z): solve s from ln(p_q/mean) = s z - s^2/2 (smaller root).
            q, v = max(tail.items())
            z_q, r = _Z[q], math.log(v / mean)
            disc = z_q * z_q - 2 * r
            if disc < 0:
                raise ClusterfitError(f"p{q:g}={v:g} is too far above the mean {mean:g} for a lognormal fit")
            sigma = z_q - math.sqrt(disc)
            median = mean / math.exp(sigma * sigma / 2)
        elif tail:
            raise ClusterfitError("give p50 or the mean together with the other length percentiles")
        else:
            assert mean is not None  # checked above: a mean, percentiles or both
            median, sigma = float(mean), 0.0
        if sigma < 0:
            raise ClusterfitError(f"length percentiles {pct} are not right-skewed enough to fit")
        qs = (np.arange(points) + 0.5) / points
        tokens = median * np.exp(sigma * _normal_ppf(qs)) if sigma > 0 else np.full(points, median)
        if mean is not None:
            tokens *= mean / tokens.mean()
        desc = ", ".join(([f"mean {mean:g}"] if mean is not None else [])
                         + [f"p{q:g} {v:g}" for q, v in sorted(pct.items())])
        if not tokens.max() <= MAX_TOKENS:
            raise ClusterfitError(f"the lognormal fitted to {desc} reaches {tokens.max():.3g} tokens in its tail, "
                                  f"beyond {MAX_TOKENS:,}: give percentiles closer together or a histogram")
        return cls(np.maximum(tokens, 1.0), np.full(points, 1.0 / points), f"lognormal fit ({desc})")

    @classmethod
    def from_histogram(cls, tokens: list[float], counts: list[float]) -> LengthDist:
        """A histogram: ``tokens`` (bin values) and their ``counts`` (or probabilities)."""
        t, c = np.asarray(tokens, dtype=float), np.asarray(counts, dtype=float)
        if t.ndim != 1 or t.shape != c.shape or t.size == 0:
            raise ClusterfitError("a length histogram needs equally long, non-empty 'tokens' and 'counts' lists")
        if t.size > MAX_HISTOGRAM_BINS:
            raise ClusterfitError(f"a length histogram has at most {MAX_HISTOGRAM_BINS:,} bins, got {t.size:,}: "
                                  "merge neighbouring bins")
        if not (np.isfinite(c).all() and ((t >= 1) & (t <= MAX_TOKENS)).all()) or (c < 0).any() or c.sum() <= 0:
            raise ClusterfitError(f"histogram tokens must be in 1..{MAX_TOKENS:,} and counts finite and >= 0 with a "
                                  "positive total")
        return cls(t, c / c.sum(), f"histogram of {t.size} bins")

    @cached_property
    def mean(self) -> float:
        """Mean length, tokens (once per distribution: the search reads it for every layout, through
        Workload.isl_mean_tokens and osl_mean_tokens)."""
        return float(np.dot(self.tokens, self.weights))

    def quantile(self, q: float) -> float:
        """The q-quantile (0 < q < 1) of the discrete distribution, tokens."""
        order = np.argsort(self.tokens)
        cum = np.cumsum(self.weights[order])
        return float(self.tokens[order][min(int(np.searchsorted(cum, q - 1e-12)), len(cum) - 1)])


def _check_positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ClusterfitError(f"{name} must be a positive number, got {value!r}")


def _check_length(name: str, value: float) -> None:
    """A token length (or a statistic of lengths): a request holds at least one token, at most MAX_TOKENS."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 1 <= value <= MAX_TOKENS):
        shown = f"{value:.6g}" if isinstance(value, float) else repr(value)
        raise ClusterfitError(f"{name} must be a number of tokens in 1..{MAX_TOKENS:,}, got {shown}")


LoadKind = Literal["requests_per_s", "output_tokens_per_s", "concurrent_sessions"]
#: The largest load of each kind (the command line's bounds on --rate, --tokens-per-s and --concurrency).
_LOAD_MAX = {"requests_per_s": MAX_RATE_RPS, "output_tokens_per_s": MAX_TOKENS_PER_S,
             "concurrent_sessions": MAX_CONCURRENCY}
_LOAD_UNIT = {"requests_per_s": "requests/s", "output_tokens_per_s": "output tokens/s",
              "concurrent_sessions": "concurrent sessions"}


def load_problem(kind: LoadKind, value: float) -> str | None:
    """Why ``value`` is no target load of ``kind`` a plan can be sized for (None: it is one), in words that do not
    name the field (callers do: the option, or the scenario's ``load (kind)``). A positive finite number up to
    _LOAD_MAX; concurrent sessions a whole number, at least one (0.5 was planned as half a client); a rate or a
    token rate at least schema.MIN_LOAD (1e-300 requests/s was planned and reported as such)."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        return f"must be a positive number, got {value!r}"
    if value > _LOAD_MAX[kind]:
        return f"must be at most {_LOAD_MAX[kind]:,.0f}, got {value:.6g}"
    if kind == "concurrent_sessions":
        if not (value >= 1 and float(value).is_integer()):
            return f"must be a whole number of concurrent sessions, at least 1, got {value:g}"
    elif value < MIN_LOAD:
        gap = f" ({MIN_RATE_GAP})" if kind == "requests_per_s" else ""
        return f"must be at least {MIN_LOAD:g} {_LOAD_UNIT[kind]}{gap} to plan for, got {value:g}"
    return None


@dataclass(frozen=True)
class Load:
    """Target load: ``value`` requests/s, output tokens/s (total, whole cluster) or concurrent sessions; every load
    (option, API keyword, scenario) is checked here (load_problem)."""

    kind: LoadKind
    value: float

    def __post_init__(self) -> None:
        if self.kind not in _LOAD_MAX:
            raise ClusterfitError(f"unknown load kind {self.kind!r}")
        problem = load_problem(self.kind, self.value)
        if problem is not None:
            raise ClusterfitError(f"load ({self.kind}) {problem}")

    def describe(self) -> str:
        return f"{self.value:g} {_LOAD_UNIT[self.kind]}"


#: Most turns an agent session may have.
MAX_TURNS = 100_000


@dataclass(frozen=True)
class AgentSessions:
    """Multi-turn agent sessions sharing a system prompt, each turn's context = previous context + new tokens.

    shared_prefix_tokens: system prompt / tool definitions common to every session (tokens).
    turns: turns per session; input_tokens_per_turn / output_tokens_per_turn: new tokens each turn.
    think_time_s: time between a response and the next turn (tool calls, user), seconds.
    """

    shared_prefix_tokens: int
    turns: int
    input_tokens_per_turn: int
    output_tokens_per_turn: int
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        if not (0 <= self.shared_prefix_tokens <= MAX_TOKENS and 0 <= self.think_time_s <= MAX_THINK_TIME_S):
            raise ClusterfitError(f"agent shared_prefix_tokens must be in 0..{MAX_TOKENS:,} and think_time_s in "
                                  f"0..{MAX_THINK_TIME_S:,.0f} s")
        for name in ("turns", "input_tokens_per_turn", "output_tokens_per_turn"):
            if getattr(self, name) < 1:
                raise ClusterfitError(f"agent {name} must be >= 1")
        if self.turns > MAX_TURNS:
            raise ClusterfitError(f"agent turns must be at most {MAX_TURNS:,}, got {self.turns:,}")
        last = self.shared_prefix_tokens + self.turns * (self.input_tokens_per_turn + self.output_tokens_per_turn)
        if last > MAX_TOKENS:
            raise ClusterfitError(f"agent sessions reach {last:,} tokens of context by their last turn, beyond "
                                  f"{MAX_TOKENS:,}")

    def context_tokens(self) -> np.ndarray:
        """Prompt tokens of each turn's request (turn k attends prefix + k full turns + its new input)."""
        k = np.arange(self.turns, dtype=float)
        per_turn = self.input_tokens_per_turn + self.output_tokens_per_turn
        return self.shared_prefix_tokens + k * per_turn + self.input_tokens_per_turn

    def reusable_tokens(self) -> np.ndarray:
        """Tokens of each turn's prompt already seen (shared prefix + earlier turns): cacheable."""
        return self.context_tokens() - self.input_tokens_per_turn


@dataclass(frozen=True)
class Workload:
    """What must be served.

    isl / osl: prompt and output length distributions (ignored for isl/osl when ``agent`` is set).
    load: the target load. prefix_cache_hit_rate: share of cacheable prompt tokens (for agents: the shared
    prefix and earlier turns; otherwise the whole prompt) found in the prefix cache, 0..1.
    """

    isl: LengthDist
    osl: LengthDist
    load: Load
    prefix_cache_hit_rate: float = 0.0
    agent: AgentSessions | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.prefix_cache_hit_rate <= 1.0:
            raise ClusterfitError(f"prefix_cache_hit_rate must be in [0, 1], got {self.prefix_cache_hit_rate}")

    @classmethod
    def simple(cls, isl: float, osl: float, load: Load, prefix_cache_hit_rate: float = 0.0) -> Workload:
        """Fixed prompt and output lengths."""
        return cls(LengthDist.fixed(isl, "--isl"), LengthDist.fixed(osl, "--osl"), load, prefix_cache_hit_rate)

    @classmethod
    def agentic(cls, agent: AgentSessions, load: Load, prefix_cache_hit_rate: float = 1.0) -> Workload:
        """Agent sessions: one request class per turn."""
        ctx = agent.context_tokens()
        isl = LengthDist(ctx, np.full(ctx.size, 1.0 / ctx.size), f"agent turns 1..{agent.turns}")
        return cls(isl, LengthDist.fixed(agent.output_tokens_per_turn), load, prefix_cache_hit_rate, agent)

    # ---- request classes (what the capacity model consumes) ----
    @property
    def isl_tokens(self) -> np.ndarray:
        """Prompt tokens attended per request class (tokens)."""
        return self.isl.tokens

    @property
    def uncached_tokens(self) -> np.ndarray:
        """Prompt tokens actually prefilled per request class, after prefix-cache hits (tokens, >= 1)."""
        if self.agent is not None:
            cacheable = self.agent.reusable_tokens()
        else:
            cacheable = self.isl.tokens
        return np.maximum(self.isl.tokens - self.prefix_cache_hit_rate * cacheable, 1.0)

    @property
    def weights(self) -> np.ndarray:
        return self.isl.weights

    @property
    def isl_mean_tokens(self) -> float:
        return self.isl.mean

    @property
    def osl_mean_tokens(self) -> float:
        return self.osl.mean

    @property
    def one_output_token(self) -> bool:
        """Every request asks for one output token (a mean of one: lengths are at least one token): it is sampled at
        the end of the prompt's prefill, so no request decodes and none has a TPOT."""
        return self.osl_mean_tokens <= 1.0

    @property
    def decode_context_mean_tokens(self) -> float:
        """Mean context a decoding sequence attends to: prompt + half the output (tokens)."""
        return self.isl_mean_tokens + self.osl_mean_tokens / 2

    @property
    def think_time_s(self) -> float:
        return self.agent.think_time_s if self.agent else 0.0

    def longest_request(self) -> tuple[float, float, bool]:
        """(longest prompt, longest output, whether every request has the same lengths): the longest request an
        engine serving this workload must hold (agent sessions: the last turn's context)."""
        fixed = self.agent is None and self.isl.tokens.size == 1 and self.osl.tokens.size == 1
        return float(self.isl_tokens.max()), float(self.osl.tokens.max()), fixed

    def describe(self) -> str:
        return f"{self.describe_lengths()}; load {self.load.describe()}"

    def describe_lengths(self) -> str:
        """describe() without the load: the lengths and the prefix-cache hit rate (capacity mode has no load)."""
        if self.agent:
            a = self.agent
            s = (f"agent sessions: {a.shared_prefix_tokens} shared prefix + {a.turns} turns of "
                 f"{a.input_tokens_per_turn} in / {a.output_tokens_per_turn} out")
        else:
            s = f"ISL {self.isl.description}, OSL {self.osl.description}"
        if self.prefix_cache_hit_rate:
            s += f", prefix-cache hit {self.prefix_cache_hit_rate:.0%}"
        return s


@dataclass(frozen=True)
class SLO:
    """Latency targets and how they are judged. None means unconstrained.

    ttft_s: time to first token at percentile ``ttft_percentile`` (90 or 99), seconds.
    tpot_s: time per output token after the first (a request's (finish - first token) / (output - 1)) at
        percentile ``tpot_percentile`` of requests (90 by default; 50 judges the median), seconds.
    min_goodput: the SLOs hold only if at least this share of requests meets both targets (default 0.9).
    """

    ttft_s: float | None = None
    tpot_s: float | None = None
    ttft_percentile: float = 90.0
    tpot_percentile: float = 90.0
    min_goodput: float = 0.9

    def __post_init__(self) -> None:
        if self.ttft_s is not None:
            _check_positive("TTFT target", self.ttft_s)
        if self.tpot_s is not None:
            _check_positive("TPOT target", self.tpot_s)
        if not 50 <= self.ttft_percentile < 100:
            raise ClusterfitError(f"TTFT percentile must be in [50, 100), got {self.ttft_percentile}")
        if not 50 <= self.tpot_percentile < 100:
            raise ClusterfitError(f"TPOT percentile must be in [50, 100), got {self.tpot_percentile}")
        if not 0 <= self.min_goodput <= 1:
            raise ClusterfitError(f"min_goodput must be in [0, 1], got {self.min_goodput}")

    @property
    def tpot_z(self) -> float:
        """Standard-normal quantile of ``tpot_percentile`` (the planner's TPOT spread, capacity.py)."""
        return _standard_normal_quantile(self.tpot_percentile)

    def describe(self) -> str:
        parts = []
        if self.ttft_s is not None:
            parts.append(f"TTFT p{self.ttft_percentile:g} <= {self.ttft_s * 1e3:g} ms")
        if self.tpot_s is not None:
            parts.append(f"TPOT p{self.tpot_percentile:g} <= {self.tpot_s * 1e3:g} ms "
                         f"({1 / self.tpot_s:.1f} tokens/s per user)")
        if parts:
            parts.append(f"goodput >= {self.min_goodput:g}")
        return ", ".join(parts) or "no latency SLO"


def unjudged_slo_term(ttft: bool, tpot: bool, given: Iterable[str]) -> tuple[str, str] | None:
    """The first SLO qualifier among ``given`` (tpot_percentile, ttft_percentile, min_goodput) whose target is
    absent, as (name, what it judges); None when each has one. ``ttft`` / ``tpot``: whether a TTFT / TPOT target is
    set. The one rule behind ``plan``'s options (question._check_judged) and a scenario's ``slo:`` section (it lives
    beside SLO so that a plan without a scenario file does not load the scenario module's pydantic models)."""
    judges = {"tpot_percentile": ("the TPOT target", tpot), "ttft_percentile": ("the TTFT target", ttft),
              "min_goodput": ("the latency targets", ttft or tpot)}   # in the order they are checked
    given = set(given)
    for name, (judged, present) in judges.items():
        if name in given and not present:
            return name, judged
    return None
