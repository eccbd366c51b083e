"""What a benchmark run measured: one record per request (``RequestRecord``) and the run's result
(``BenchResult``, pydantic: ``model_dump(mode="json")`` is what ``clusterfit bench --json`` prints).

Units are in the names: ``*_s`` seconds (the rich view prints ms), ``*_per_s`` per second for the whole endpoint.
Latency percentiles use the simulator's ``Percentiles`` (p50 is the median) so that measured and predicted
figures share one shape.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, PrivateAttr

from ..schema import Percentiles, Schema

#: Why a request failed: ``connect`` (no connection), ``timeout`` (over --timeout), ``http_<status>`` (status >= 400),
#: ``malformed`` (not an OpenAI SSE stream), ``dropped`` (the stream ended before ``data: [DONE]``),
#: ``stream_error`` (the server sent an error object in the stream), ``client_error`` (any other HTTP-level failure
#: the client raised: an unsupported redirect, a proxy error).
FAILURE_REASONS = ("connect", "timeout", "http_<status>", "malformed", "dropped", "stream_error", "client_error")


@dataclass
class RequestRecord:
    """One request as the client saw it.

    index: its place in the run. scheduled_s: planned send time, s after the run's start (None in a closed loop);
    sent_s: when it was sent. input_tokens / max_tokens: the prompt tokens asked for (filler text) and the output
    tokens asked for. prompt_tokens: the server's count (usage), None when not reported. output_tokens: the
    server's ``usage.completion_tokens``, else the number of chunks with non-empty text. ttft_s: first chunk
    carrying a choice - sent; e2e_s: last such chunk - sent (for a failure: time until it failed); itl_s: gaps
    between successive such chunks. error: the failure reason (None: completed), detail: what the client saw.
    """

    index: int
    scheduled_s: float | None
    sent_s: float
    input_tokens: int
    max_tokens: int
    prompt_tokens: int | None = None
    output_tokens: int = 0
    usage_reported: bool = False
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    chunks: int = 0
    finish_reason: str | None = None
    error: str | None = None
    detail: str = ""
    http_status: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1) for a completed request of more than one token (vLLM's TPOT)."""
        if not self.ok or self.output_tokens <= 1 or self.ttft_s is None or self.e2e_s is None:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def counted_input_tokens(self) -> int:
        """Prompt tokens as the server counted them when it said, else as asked for (vLLM's total_input)."""
        return self.prompt_tokens if self.prompt_tokens is not None else self.input_tokens


class BenchLoad(Schema):
    """The load that was asked for."""

    kind: Literal["rate", "concurrency", "trace"]
    rate_rps: float | None
    arrival: str | None
    burstiness: float | None
    concurrency: int | None
    trace: str | None
    input_lengths: str | None
    output_lengths: str | None
    requests_limit: int | None
    duration_limit_s: float | None
    timeout_s: float
    seed: int
    ignore_eos: bool


class FailureCount(Schema):
    """Requests that failed for one reason, with the first one's detail."""

    reason: str
    count: int
    http_status: int | None
    example: str


class BenchThroughput(Schema):
    """Completed requests and their tokens per second of the run's duration (vLLM's request, output and total token
    throughput; input tokens as the server counted them where it said)."""

    requests_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    total_tokens_per_s: float


class BenchSlo(Schema):
    ttft_s: float | None
    tpot_s: float | None


class ComparedMetric(Schema):
    """One figure measured and predicted; ratio = measured / predicted (None when either is missing or 0)."""

    metric: str
    unit: str
    measured: float | None
    predicted: float | None
    ratio: float | None


class Comparison(Schema):
    """clusterfit's prediction for the load the run sent (``simulate`` of the same requests: at their send times, or
    from a closed loop of the run's concurrency), beside the measurement."""

    source: Literal["simulate"] = Field(description="what predicted it: the cluster simulator (bench.compare); kept "
                                        "in the JSON since closed loops were 'perf' before")
    model: str
    system: str
    replicas: int
    gpus_per_replica: int
    layout: str
    rows: list[ComparedMetric]
    notes: list[str]


class BenchResult(Schema):
    """One benchmark run: counts, failures by reason, latency percentiles, throughput, goodput, and the prediction
    beside it when asked. The per-request records are ``result.records`` (not in the JSON; ``--csv`` writes them)."""

    _omit_if_none = frozenset({"comparison"})
    _records: list[RequestRecord] = PrivateAttr(default_factory=list)
    url: str
    endpoint: str
    model: str
    started_at: str
    load: BenchLoad
    requests: int
    completed: int
    failed: int
    failures: list[FailureCount]
    short_outputs: int
    usage_missing: int
    duration_s: float
    input_tokens: int
    output_tokens: int
    ttft_s: Percentiles
    tpot_s: Percentiles
    itl_s: Percentiles
    e2e_s: Percentiles
    throughput: BenchThroughput
    peak_concurrency: int
    send_lag_s: Percentiles
    slo: BenchSlo | None
    goodput: float | None
    goodput_rps: float | None
    comparison: Comparison | None = None
    notes: list[str] = Field(default_factory=list, description="What the run did otherwise than asked, in words "
                             "(a trace shorter than --requests)")

    @property
    def records(self) -> list[RequestRecord]:
        """The run's requests, in the order they were planned."""
        return self._records


class BenchSweep(Schema):
    """Runs one after another at each value of ``parameter`` (``rate`` requests/s or ``concurrency``)."""

    parameter: Literal["rate", "concurrency"]
    values: list[float]
    runs: list[BenchResult]


#: Columns of the per-request CSV. ``arrival_s`` / ``input_tokens`` / ``output_tokens`` are the simulator's trace
#: columns (sim/trace_files.py), so the file replays with ``clusterfit simulate --trace`` or ``bench --trace``: the
#: send time and the lengths asked for. ``prompt_tokens`` / ``completion_tokens`` are what the server counted.
CSV_COLUMNS = ("run", "index", "arrival_s", "scheduled_s", "input_tokens", "output_tokens", "prompt_tokens",
               "completion_tokens", "ttft_s", "tpot_s", "e2e_s", "itl_mean_s", "chunks", "finish_reason", "status",
               "reason", "http_status", "detail")


def _cell(x: float | int | str | None) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.6f}"
    return str(x)


def write_requests_csv(runs: list[tuple[str, list[RequestRecord]]], path: Path) -> None:
    """One row per request of each (run label, records) pair (label: '' for a single run, the load of a sweep)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for label, records in runs:
            for r in records:
                itl = float(r.itl_s.mean()) if r.itl_s.size else None
                w.writerow([_cell(v) for v in (
                    label, r.index, r.sent_s, r.scheduled_s, r.input_tokens, r.max_tokens, r.prompt_tokens,
                    r.output_tokens if r.ok else None, r.ttft_s, r.tpot_s, r.e2e_s, itl, r.chunks, r.finish_reason,
                    "ok" if r.ok else "failed", r.error, r.http_status, r.detail)])
