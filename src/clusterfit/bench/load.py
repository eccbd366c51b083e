"""The requests a run sends, from the simulator's workload generators (no generator of its own).

- ``rate``: ``clusterfit.sim.build_requests`` with the same arrival process, lengths and seed as
  ``clusterfit simulate --rate R --requests N --isl ... --seed S``: the same arrivals and lengths, request for request.
- ``trace``: ``clusterfit.sim.load_trace`` (Azure, BurstGPT or generic CSV/JSONL columns, or a shipped sample).
- ``concurrency`` alone (closed loop): lengths drawn with ``clusterfit.sim.requests.draw_lengths``; no arrivals.

Prompt text: filler words sized to the prompt tokens asked for (``filler_prompt``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..sim.config import SampledLengthSpec
from .config import DEFAULT_REQUESTS, MAX_BENCH_REQUESTS, BenchConfig

#: Filler words: common three-letter English words. Each is sent with a leading space, so one word is 4
#: characters, which BPE tokenizers (GPT, Llama 3) mostly encode as one token (" the", " cat"); the assumption is
#: 4 characters per token, the rule of thumb for English text (OpenAI help center, "What are tokens and how to count
#: them?": one token is about 4 characters). The server's own count comes back in ``usage.prompt_tokens``.
WORDS = ("the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was", "one", "our",
         "out", "day", "get", "has", "him", "his", "how", "man", "new", "now", "old", "see", "two", "way", "who",
         "boy", "did", "its", "let", "put", "say", "she", "too", "use", "cat", "dog", "sun", "red", "big", "run",
         "sit", "top", "hot", "cup", "box", "car", "bus", "sky", "sea", "map", "pen", "egg", "arm", "leg", "eye",
         "ear", "key", "bed", "art")
CHARS_PER_TOKEN = 4
_SPACED = np.array([" " + w for w in WORDS])


def filler_prompt(tokens: int, index: int, seed: int = 0) -> str:
    """``tokens`` filler words (4 x ``tokens`` characters), drawn for request ``index`` of run ``seed``: distinct
    prompts, so that a prefix cache serves at most the first few tokens of one request from another."""
    rng = np.random.default_rng([seed, index])
    return "".join(_SPACED[rng.integers(0, len(WORDS), tokens)].tolist())


@dataclass(frozen=True)
class Planned:
    """A request to send: index, planned send time (s after the start; None in a closed loop), prompt tokens and
    output tokens (``max_tokens``)."""

    index: int
    arrival_s: float | None
    input_tokens: int
    output_tokens: int


def planned_count(cfg: BenchConfig) -> int | None:
    """Requests to draw: ``requests``, else enough arrivals to fill ``duration`` (None in a closed loop bounded by
    ``duration`` alone: drawn as it goes), else DEFAULT_REQUESTS; a trace is read whole unless ``requests``."""
    if cfg.requests is not None:
        return cfg.requests
    if cfg.kind == "trace":
        return None
    if cfg.duration is None:
        return DEFAULT_REQUESTS
    if cfg.kind == "rate":
        assert cfg.rate is not None
        # twice the expected arrivals: enough for any process of mean rate `rate` to fill `duration`
        return min(MAX_BENCH_REQUESTS, math.ceil(2 * cfg.rate * cfg.duration) + 64)
    return None


@dataclass(frozen=True)
class Plan:
    """The requests of a run in send order, and how many there are (None: as many as ``duration`` allows); notes:
    what the run will do otherwise than asked, in words (a trace shorter than ``requests``)."""

    total: int | None
    requests: Iterator[Planned]
    notes: tuple[str, ...] = ()


def plan(cfg: BenchConfig) -> Plan:
    """The requests of the run: open-loop arrivals (a trace's, or the simulator's process) before ``duration``, or
    a closed loop's lengths."""
    if cfg.kind == "concurrency":
        total = planned_count(cfg)
        return Plan(total, _closed_loop(cfg, total))
    from ..sim.api import build_requests
    from ..sim.config import ArrivalSpec, SimulationConfig
    from ..sim.trace_files import load_trace

    if cfg.trace is not None:
        reqs = load_trace(cfg.trace, limit=cfg.requests or MAX_BENCH_REQUESTS)
    else:
        arrival = ArrivalSpec(process=cfg.arrival_process, rate_rps=cfg.rate,
                              **({"cv": cfg.arrival_cv} if cfg.arrival_cv is not None else {}))
        sim = SimulationConfig(requests=planned_count(cfg), seed=cfg.seed, arrival=arrival, input=cfg.input_spec,
                               output=cfg.output_spec)
        reqs = build_requests(sim)
    n = len(reqs) if cfg.duration is None else int(np.searchsorted(reqs.arrival_s, cfg.duration, side="left"))
    rows = zip(range(n), reqs.arrival_s[:n].tolist(), reqs.input_tokens[:n].tolist(), reqs.output_tokens[:n].tolist())
    notes: tuple[str, ...] = ()
    if cfg.trace is not None and cfg.requests is not None and len(reqs) < cfg.requests:
        notes = (f"the trace {cfg.trace} holds {len(reqs):,} request{'s' if len(reqs) != 1 else ''}: "
                 f"{'all' if len(reqs) > 1 else 'it'} replayed, not the {cfg.requests:,} --requests asked for",)
    return Plan(n, (Planned(i, t, n_in, n_out) for i, t, n_in, n_out in rows), notes)


def _closed_loop(cfg: BenchConfig, total: int | None) -> Iterator[Planned]:
    """Lengths for a closed loop, drawn in blocks (a run bounded only by ``duration`` draws as it goes)."""
    from ..sim.requests import draw_lengths

    limit = MAX_BENCH_REQUESTS if total is None else total
    rng = np.random.default_rng(cfg.seed)
    i = 0
    while i < limit:
        m = min(4096, limit - i)
        ins, outs = draw_lengths(cfg.input_spec, m, rng), draw_lengths(cfg.output_spec, m, rng)
        for n_in, n_out in zip(ins.tolist(), outs.tolist()):
            yield Planned(i, None, n_in, n_out)
            i += 1


def describe_lengths(spec: SampledLengthSpec) -> str:
    """A length spec in words ('fixed 512', 'lognormal mean 512 cv 0.5', 'empirical 128..2048 (3 values)')."""
    if spec.dist == "fixed":
        return f"fixed {spec.value}"
    if spec.dist == "lognormal":
        return f"lognormal mean {spec.mean:g} cv {spec.cv:g}"
    values = spec.values or []
    return f"empirical {min(values)}..{max(values)} ({len(values)} values)"
