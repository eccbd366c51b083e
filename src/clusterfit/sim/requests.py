"""Requests to simulate: arrival processes, length distributions, multi-turn sessions.

A workload is a :class:`Requests` table of numpy arrays sorted by arrival time. Generators are pure
functions of a config and a ``numpy.random.Generator`` (deterministic for a seed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import ClusterfitError, ParameterError
from ..schema import MIN_LOAD, MIN_RATE_GAP
from .config import ArrivalSpec, SampledLengthSpec, SessionSpec


@dataclass(frozen=True)
class Requests:
    """Requests sorted by arrival.

    arrival_s: arrival time, seconds from the start. input_tokens / output_tokens: prompt and answer
    lengths, tokens (>= 1). prefix_key: cache / affinity key (a session id; -1 for none).
    shared_tokens: leading prompt tokens equal to the previous context of the same prefix key, which
    a prefix cache can serve (0 for none).
    cached_tokens: leading prompt tokens served from a prefix cache that is warm on every replica whatever the
    session (a system prompt shared across sessions: the planner's ``prefix_cache_hit_rate``); 0 for none. A
    replica prefills ``input - max(cached, its own session-cache hit)`` tokens; the cached tokens still count in
    the request's KV (each request holds its whole context: conservative where real engines share the blocks).
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_key: np.ndarray
    shared_tokens: np.ndarray
    cached_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    @classmethod
    def build(cls, arrival_s: npt.ArrayLike, input_tokens: npt.ArrayLike, output_tokens: npt.ArrayLike,
              prefix_key: npt.ArrayLike | None = None, shared_tokens: npt.ArrayLike | None = None,
              cached_tokens: npt.ArrayLike | None = None) -> Requests:
        """Validate, sort by arrival (stable) and return a Requests table."""
        a = np.asarray(arrival_s, dtype=float)
        n = a.size
        i = np.asarray(input_tokens, dtype=np.int64).reshape(n)
        o = np.asarray(output_tokens, dtype=np.int64).reshape(n)
        k = np.full(n, -1, np.int64) if prefix_key is None else np.asarray(prefix_key, np.int64).reshape(n)
        s = np.zeros(n, np.int64) if shared_tokens is None else np.asarray(shared_tokens, np.int64).reshape(n)
        if n and (np.any(~np.isfinite(a)) or np.any(a < 0)):
            raise ClusterfitError("arrival times must be finite and >= 0")
        if n and (np.any(i < 1) or np.any(o < 1)):
            raise ClusterfitError("input and output lengths must be >= 1 token")
        s = np.clip(s, 0, i - 1) if n else s
        order = np.argsort(a, kind="stable")
        c = None
        if cached_tokens is not None:
            c = np.clip(np.asarray(cached_tokens, np.int64).reshape(n), 0, np.maximum(i - 1, 0))[order]
        return cls(a[order], i[order], o[order], k[order], s[order], c)

    def with_cached_share(self, hit_rate: float, cacheable: np.ndarray | None = None) -> Requests:
        """These requests with ``round(hit_rate x cacheable)`` prompt tokens served from a prefix cache warm on
        every replica (``cacheable``: tokens per request that could be cached, default the whole prompt)."""
        base = self.input_tokens if cacheable is None else np.asarray(cacheable, np.int64)
        cached = np.clip(np.rint(hit_rate * base).astype(np.int64), 0, np.maximum(self.input_tokens - 1, 0))
        return Requests(self.arrival_s, self.input_tokens, self.output_tokens, self.prefix_key, self.shared_tokens,
                        cached)

    @property
    def duration_s(self) -> float:
        """Time from the first to the last arrival, seconds."""
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0


def draw_lengths(spec: SampledLengthSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token lengths from ``spec`` (int64, clipped to [min, max])."""
    if spec.dist == "fixed":
        assert spec.value is not None  # SampledLengthSpec's validator requires it
        x = np.full(n, spec.value, dtype=float)
    elif spec.dist == "lognormal":
        assert spec.mean is not None  # SampledLengthSpec's validator requires it
        sigma2 = np.log1p(spec.cv**2)
        mu = np.log(spec.mean) - sigma2 / 2
        x = rng.lognormal(mu, np.sqrt(sigma2), n)
    else:
        values = np.asarray(spec.values, dtype=float)
        p = None if spec.weights is None else np.asarray(spec.weights, float) / np.sum(spec.weights)
        x = rng.choice(values, size=n, p=p)
    x = np.maximum(np.rint(x), spec.min)
    if spec.max is not None:
        x = np.minimum(x, spec.max)
    return x.astype(np.int64)


def check_rate(rate: float, live: bool = False) -> None:
    """An arrival rate of at least MIN_LOAD requests/s (schema.MIN_RATE_GAP). Every arrival process goes
    through it (slower gaps overflow the simulator's clock), and so does bench's --rate before its run (``live``:
    the message speaks of the load sent to an endpoint, not of a simulation; bench draws its send times with the
    same arrival processes)."""
    if not rate >= MIN_LOAD:
        why = (f"({MIN_RATE_GAP}) for a load test" if live else
               f"to simulate ({MIN_RATE_GAP}: slower gaps overflow the simulator's clock)")
        raise ParameterError("rate", f"must be at least {MIN_LOAD:g} requests/s {why}, got {rate:g}")


def arrival_times(spec: ArrivalSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` increasing arrival times, seconds from 0, from the process in ``spec``."""
    if spec.rate_rps is None:
        raise ClusterfitError("the arrival process needs `rate_rps` (requests per second)")
    lam = spec.rate_rps
    check_rate(lam)
    if spec.process == "poisson":
        gaps = rng.exponential(1.0 / lam, n)
    elif spec.process == "gamma":
        shape = 1.0 / spec.cv**2
        gaps = rng.gamma(shape, 1.0 / (lam * shape), n)
    elif spec.process == "mmpp":
        return _mmpp(spec, lam, n, rng)
    else:
        return _diurnal(spec, lam, n, rng)
    t = np.cumsum(gaps)
    return t - t[0] if n else t


def _mmpp(spec: ArrivalSpec, lam: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Two-state Markov-modulated Poisson arrivals with long-run mean rate ``lam``, requests/s.

    The run starts with an arrival at t = 0 in the state an arrival finds the process in over the long run: the
    burst with probability ``burst_fraction x burst_factor`` (the burst's share of the arrivals, not of the time),
    else the base state. This is the interval-stationary MMPP (Fischer and Meier-Hellstern, "The Markov-modulated
    Poisson process (MMPP) cookbook", 1993): the gaps between requests are a stationary sequence averaging
    ``1 / lam`` whatever ``n``. Starting always in the base state made short runs slow (rate 8, 200 requests: 6.1
    requests/s over 4,000 seeds); starting in the time-stationary state (the burst with probability
    ``burst_fraction``) still gave 6.5, as a run measured from its first arrival to its n-th is not a fixed span.
    A single short run stays mostly in one state (mean dwell ``dwell_s`` in the burst, ``dwell_s x (1 - f) / f`` in
    the base state), so its own rate varies widely around ``lam``."""
    f, b = spec.burst_fraction, spec.burst_factor
    if f * b >= 1:
        raise ClusterfitError("mmpp: burst_fraction x burst_factor must be < 1 (the base rate would be <= 0)")
    lam_hi = b * lam
    lam_lo = lam * (1 - f * b) / (1 - f)
    dwell_hi = spec.dwell_s
    dwell_lo = dwell_hi * (1 - f) / f
    hi = bool(rng.random() < f * b)   # the state the first arrival sees; its dwell left is exponential too
    out: list[np.ndarray] = [np.zeros(1)]
    got, t = 1, 0.0
    while got < n:
        dwell = rng.exponential(dwell_hi if hi else dwell_lo)
        rate = lam_hi if hi else lam_lo
        k = rng.poisson(rate * dwell)
        if k:
            out.append(t + np.sort(rng.uniform(0.0, dwell, k)))
            got += k
        t += dwell
        hi = not hi
    return np.concatenate(out)[:n]


def _diurnal(spec: ArrivalSpec, lam: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Sinusoidal-rate Poisson arrivals (mean rate ``lam``, requests/s) by thinning a process at the peak rate."""
    peak = lam * (1 + spec.amplitude)
    out: list[np.ndarray] = []
    got, t0 = 0, 0.0
    while got < n:
        m = max(1024, int(1.2 * (n - got) * (1 + spec.amplitude)))
        t = t0 + np.cumsum(rng.exponential(1.0 / peak, m))
        rate = lam * (1 + spec.amplitude * np.sin(2 * np.pi * t / spec.period_s))
        keep = t[rng.uniform(0, peak, m) < rate]
        out.append(keep)
        got += keep.size
        t0 = t[-1]
    times = np.concatenate(out)[:n]
    return times - times[0]


def generate(n: int, arrival: ArrivalSpec, input_spec: SampledLengthSpec, output_spec: SampledLengthSpec,
             rng: np.random.Generator, sessions: SessionSpec | None = None) -> Requests:
    """``n`` requests: independent ones, or multi-turn sessions when ``sessions`` is given. A closed loop's
    (``arrival.concurrency``) all arrive at 0: its clients send them in order as earlier ones end (sim.clients)."""
    if n < 1:
        raise ClusterfitError("the workload needs at least one request")
    if sessions is None:
        return Requests.build(_starts(arrival, n, rng), draw_lengths(input_spec, n, rng),
                              draw_lengths(output_spec, n, rng))
    return _sessions(n, arrival, input_spec, output_spec, sessions, rng)


def _starts(arrival: ArrivalSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """When ``n`` requests or sessions start: the arrival process's times, or 0 for a closed loop's."""
    return np.zeros(n) if arrival.concurrency is not None else arrival_times(arrival, n, rng)


def _sessions(n: int, arrival: ArrivalSpec, input_spec: SampledLengthSpec, output_spec: SampledLengthSpec,
              spec: SessionSpec, rng: np.random.Generator) -> Requests:
    """Agent sessions: first prompt from ``input_spec``, later turns extend the previous context."""
    p = 1.0 / (spec.turns or spec.turns_mean)
    n_sessions_guess = int(n * p * 1.5) + 16

    def draw(m: int) -> np.ndarray:
        return np.full(m, spec.turns) if spec.turns else rng.geometric(p, m)

    turns = draw(n_sessions_guess)
    while turns.sum() < n:
        turns = np.concatenate([turns, draw(n_sessions_guess)])
    cum = np.cumsum(turns)
    n_sessions = int(np.searchsorted(cum, n) + 1)
    turns = turns[:n_sessions].copy()
    turns[-1] -= int(cum[n_sessions - 1] - n)
    starts = _starts(arrival, n_sessions, rng)
    session = np.repeat(np.arange(n_sessions), turns)
    first = np.concatenate([[0], np.cumsum(turns)[:-1]])
    turn_index = np.arange(n) - np.repeat(first, turns)
    arrivals = np.repeat(starts, turns) + turn_index * spec.think_time_s
    out_tokens = draw_lengths(output_spec, n, rng)
    new_tokens = draw_lengths(spec.new_tokens, n, rng)
    first_prompt = draw_lengths(input_spec, n_sessions, rng) + spec.shared_prefix_tokens
    # context before each turn's new tokens: previous prompt + previous answer, accumulated per session
    new_tokens[first] = first_prompt
    grow = new_tokens + out_tokens
    csum = np.cumsum(grow)
    session_base = np.repeat(csum[first] - grow[first], turns)
    shared = csum - grow - session_base  # context accumulated before this turn
    input_tokens = shared + new_tokens
    return Requests.build(arrivals, input_tokens, out_tokens, session, shared)
