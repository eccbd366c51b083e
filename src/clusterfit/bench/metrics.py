"""Benchmark metrics from per-request records, with the definitions of ``vllm bench serve``
(vllm-project/vllm: vllm/benchmarks/serve.py ``calculate_metrics`` at commit 009e6d4a, and
vllm/benchmarks/lib/endpoint_request_func.py ``async_request_openai_completions`` at commit 02cfb534):

- TTFT: first streamed chunk carrying a choice - request sent.
- E2E latency: last chunk carrying a choice - request sent (the trailing usage chunk and ``[DONE]`` carry no token).
- TPOT: (E2E - TTFT) / (output tokens - 1), over completed requests with more than one output token.
- ITL: the gaps between successive chunks carrying a choice, pooled over all completed requests.
- Request / output / total token throughput: completed requests, their output tokens, and their input + output
  tokens per second of the run's duration (first send to last answer). Input tokens are the server's
  ``usage.prompt_tokens`` where given, else the prompt length asked for.
- Goodput: completed requests whose TTFT <= the TTFT SLO and whose TPOT <= the TPOT SLO (a one-token answer counts
  TPOT 0), per second (vLLM's ``request_goodput``); ``goodput`` is their share of all requests sent (the
  simulator's definition, sim/metrics.py).
- Percentiles: numpy's linear interpolation (``np.percentile``), as vLLM and the simulator use.

Failed requests (any reason) count in ``failed`` and ``failures`` and are left out of every latency and throughput
figure, as vLLM does. Output tokens: the server's ``usage.completion_tokens`` when streamed
(``stream_options.include_usage``), else the number of chunks with non-empty text (vLLM falls back to a tokenizer,
or to 1 without one; chunks can hold more than one token, so this undercounts where a server batches them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..sim.metrics import percentiles
from .result import RequestRecord


def request_arrays(records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """Per-request arrays (nan where undefined): ok, ttft_s, e2e_s, tpot_s, output and input tokens, sent_s,
    send lag (sent - scheduled)."""
    n = len(records)
    ok = np.fromiter((r.ok for r in records), bool, n)

    def floats(get: Any) -> np.ndarray:
        return np.fromiter((np.nan if (v := get(r)) is None else v for r in records), float, n)

    return {
        "ok": ok,
        "ttft_s": np.where(ok, floats(lambda r: r.ttft_s), np.nan),
        "e2e_s": np.where(ok, floats(lambda r: r.e2e_s), np.nan),
        "tpot_s": floats(lambda r: r.tpot_s),
        "output_tokens": np.where(ok, np.fromiter((r.output_tokens for r in records), float, n), 0.0),
        "input_tokens": np.where(ok, np.fromiter((r.counted_input_tokens for r in records), float, n), 0.0),
        "sent_s": floats(lambda r: r.sent_s),
        "send_lag_s": floats(lambda r: None if r.scheduled_s is None else r.sent_s - r.scheduled_s),
    }


def peak_concurrency(start_s: np.ndarray, end_s: np.ndarray) -> int:
    """Most intervals [start, end) open at once (vLLM's sweep line: an end before a start at the same time)."""
    if start_s.size == 0:
        return 0
    times = np.concatenate([start_s, end_s])
    deltas = np.concatenate([np.ones(start_s.size, int), -np.ones(end_s.size, int)])
    order = np.lexsort((deltas, times))
    return int(np.max(np.cumsum(deltas[order])))


def goodput_mask(a: dict[str, np.ndarray], slo_ttft_s: float | None, slo_tpot_s: float | None) -> np.ndarray:
    """Completed requests within every SLO given (vLLM: ``slo >= value``; TPOT of a one-token answer is 0)."""
    good = a["ok"].copy()
    if slo_ttft_s is not None:
        good &= a["ttft_s"] <= slo_ttft_s
    if slo_tpot_s is not None:
        good &= np.nan_to_num(a["tpot_s"], nan=0.0) <= slo_tpot_s
    return good


def summarize(records: Sequence[RequestRecord], duration_s: float, slo_ttft_s: float | None = None,
              slo_tpot_s: float | None = None) -> dict[str, Any]:
    """The measured part of a BenchResult: counts, failures, latency percentiles, throughput and goodput of
    ``records`` over a run of ``duration_s`` seconds."""
    a = request_arrays(records)
    ok = a["ok"]
    dur = max(duration_s, 1e-12)
    done = [r for r in records if r.ok]
    itl = np.concatenate([r.itl_s for r in done]) if done else np.zeros(0)
    out_tokens = float(a["output_tokens"].sum())
    in_tokens = float(a["input_tokens"].sum())
    has_slo = slo_ttft_s is not None or slo_tpot_s is not None
    good = goodput_mask(a, slo_ttft_s, slo_tpot_s)
    return {
        "requests": len(records),
        "completed": int(ok.sum()),
        "failed": int((~ok).sum()),
        "failures": failure_counts(records),
        "short_outputs": sum(1 for r in done if r.output_tokens < r.max_tokens),
        "usage_missing": sum(1 for r in done if not r.usage_reported),
        "duration_s": duration_s,
        "input_tokens": int(in_tokens),
        "output_tokens": int(out_tokens),
        "ttft_s": percentiles(a["ttft_s"]),
        "tpot_s": percentiles(a["tpot_s"]),
        "itl_s": percentiles(itl),
        "e2e_s": percentiles(a["e2e_s"]),
        "throughput": {"requests_per_s": float(ok.sum()) / dur, "output_tokens_per_s": out_tokens / dur,
                       "input_tokens_per_s": in_tokens / dur, "total_tokens_per_s": (in_tokens + out_tokens) / dur},
        "peak_concurrency": peak_concurrency(a["sent_s"][ok], a["sent_s"][ok] + a["e2e_s"][ok]),
        "send_lag_s": percentiles(a["send_lag_s"]),
        "slo": {"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s} if has_slo else None,
        "goodput": float(good.sum()) / len(records) if has_slo and records else None,
        "goodput_rps": float(good.sum()) / dur if has_slo else None,
    }


def failure_counts(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """Failed requests by reason, most frequent first, each with the first one's detail."""
    counts: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.error is None:
            continue
        row = counts.setdefault(r.error, {"reason": r.error, "count": 0, "http_status": r.http_status,
                                          "example": r.detail})
        row["count"] += 1
    return sorted(counts.values(), key=lambda row: (-row["count"], row["reason"]))
