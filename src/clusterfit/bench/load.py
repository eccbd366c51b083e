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
    """Requests the run plans to send (None: as many as ``duration`` allows in a closed loop)."""
    if cfg.requests is not None:
        return cfg.requests
    if cfg.duration is None:
        return DEFAULT_REQUESTS
    if cfg.kind == "rate":
        assert cfg.rate is not None
        # twice the expected arrivals: enough for any process of mean rate `rate` to fill `duration`
        return min(MAX_BENCH_REQUESTS, math.ceil(2 * cfg.rate * cfg.duration) + 64)
    return None


def plan(cfg: BenchConfig) -> Iterator[Planned]:
    """The requests of the run, in send order (the runner stops at ``duration``)."""
    if cfg.kind == "concurrency":
        yield from _closed_loop(cfg)
        return
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
    for i, (t, n_in, n_out) in enumerate(zip(reqs.arrival_s.tolist(), reqs.input_tokens.tolist(),
                                             reqs.output_tokens.tolist())):
        yield Planned(i, t, n_in, n_out)


def _closed_loop(cfg: BenchConfig) -> Iterator[Planned]:
    """Lengths for a closed loop, drawn in blocks (a run bounded only by ``duration`` draws as it goes)."""
    from ..sim.requests import draw_lengths

    total = planned_count(cfg) or MAX_BENCH_REQUESTS
    rng = np.random.default_rng(cfg.seed)
    i = 0
    while i < total:
        m = min(4096, total - i)
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
