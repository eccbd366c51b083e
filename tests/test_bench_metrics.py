"""clusterfit bench's metrics on hand-made request timings: every expected value below is worked out by hand from
the definitions of `vllm bench serve` (vllm/benchmarks/serve.py calculate_metrics): TPOT = (E2E - TTFT) /
(output tokens - 1), ITL pooled over requests, throughput per second of the run, goodput with `slo >= value` and a
one-token answer's TPOT counted 0, percentiles by linear interpolation (np.percentile), failures left out."""

from __future__ import annotations

import numpy as np
import pytest

from clusterfit.bench.metrics import peak_concurrency, summarize
from clusterfit.bench.result import RequestRecord


def _records() -> list[RequestRecord]:
    r0 = RequestRecord(0, 0.0, 0.0, 100, 5, prompt_tokens=100, output_tokens=5, usage_reported=True, ttft_s=0.1,
                       e2e_s=0.5, itl_s=np.array([0.1, 0.1, 0.1, 0.1]), chunks=5)
    # no usage: the prompt counts as asked (200); 5 tokens came of the 8 asked for (a short output)
    r1 = RequestRecord(1, 0.05, 0.1, 200, 8, output_tokens=5, usage_reported=False, ttft_s=0.2, e2e_s=1.0,
                       itl_s=np.array([0.2, 0.2, 0.2, 0.2]), chunks=5)
    r2 = RequestRecord(2, 0.5, 0.5, 50, 1, prompt_tokens=50, output_tokens=1, usage_reported=True, ttft_s=0.25,
                       e2e_s=0.25, chunks=1)
    r3 = RequestRecord(3, 0.5, 0.5, 70, 4, error="timeout", detail="no complete answer within 1.5 s", e2e_s=1.5)
    return [r0, r1, r2, r3]


def test_counts_latencies_and_throughput_by_hand():
    m = summarize(_records(), duration_s=2.0)
    assert (m["requests"], m["completed"], m["failed"]) == (4, 3, 1)
    assert m["failures"] == [{"reason": "timeout", "count": 1, "http_status": None,
                              "example": "no complete answer within 1.5 s"}]
    # TTFT of the completed: 0.1, 0.2, 0.25 -> mean 0.18333; p90 at rank 1.8: 0.2 + 0.8 x 0.05 = 0.24
    assert m["ttft_s"]["mean"] == pytest.approx(0.55 / 3)
    assert m["ttft_s"]["p50"] == pytest.approx(0.2)
    assert m["ttft_s"]["p90"] == pytest.approx(0.24)
    assert m["ttft_s"]["p99"] == pytest.approx(0.249)
    # TPOT: (0.5 - 0.1) / 4 = 0.1 and (1.0 - 0.2) / 4 = 0.2; the one-token answer has none
    assert m["tpot_s"]["mean"] == pytest.approx(0.15)
    assert m["tpot_s"]["p90"] == pytest.approx(0.19)
    # ITL pooled: four gaps of 0.1 and four of 0.2
    assert m["itl_s"]["mean"] == pytest.approx(0.15)
    assert m["itl_s"]["p50"] == pytest.approx(0.15)
    # E2E 0.5, 1.0, 0.25 (the timeout's 1.5 s is left out)
    assert m["e2e_s"]["mean"] == pytest.approx(1.75 / 3)
    assert m["e2e_s"]["p50"] == pytest.approx(0.5)
    # 3 completed over 2 s; output 5 + 5 + 1 = 11 tokens; input 100 (usage) + 200 (as asked) + 50 = 350 tokens
    t = m["throughput"]
    assert t["requests_per_s"] == pytest.approx(1.5)
    assert t["output_tokens_per_s"] == pytest.approx(5.5)
    assert t["input_tokens_per_s"] == pytest.approx(175.0)
    assert t["total_tokens_per_s"] == pytest.approx(180.5)
    assert (m["input_tokens"], m["output_tokens"]) == (350, 11)
    assert (m["short_outputs"], m["usage_missing"]) == (1, 1)
    # send lag: 0, 0.05, 0, 0 s
    assert m["send_lag_s"]["mean"] == pytest.approx(0.0125)
    assert m["slo"] is None and m["goodput"] is None and m["goodput_rps"] is None


def test_goodput_by_hand():
    # TTFT <= 250 ms and TPOT <= 150 ms: r0 (100 ms, 100 ms) good; r1 (TPOT 200 ms) not; r2 (TTFT 250 ms, one token:
    # TPOT 0) good; r3 failed -> 2 good of 4 requests, 2 per 2 s
    m = summarize(_records(), duration_s=2.0, slo_ttft_s=0.25, slo_tpot_s=0.15)
    assert m["goodput"] == pytest.approx(0.5)
    assert m["goodput_rps"] == pytest.approx(1.0)
    assert m["slo"] == {"ttft_s": 0.25, "tpot_s": 0.15}
    # TTFT alone at 150 ms: only r0
    assert summarize(_records(), 2.0, slo_ttft_s=0.15)["goodput"] == pytest.approx(0.25)


def test_peak_concurrency_ends_before_starts_at_the_same_time():
    # [0, 0.5), [0.1, 1.1), [0.5, 0.75): at 0.5 one ends as one starts -> at most 2 at once
    assert peak_concurrency(np.array([0.0, 0.1, 0.5]), np.array([0.5, 1.1, 0.75])) == 2
    assert summarize(_records(), 2.0)["peak_concurrency"] == 2
    assert peak_concurrency(np.array([0.0, 0.0, 0.0]), np.array([1.0, 1.0, 1.0])) == 3
    assert peak_concurrency(np.zeros(0), np.zeros(0)) == 0


def test_all_failed_has_no_latency():
    recs = [RequestRecord(0, 0.0, 0.0, 10, 4, error="http_500", http_status=500, detail="HTTP 500: boom"),
            RequestRecord(1, 0.1, 0.1, 10, 4, error="connect", detail="Connection refused"),
            RequestRecord(2, 0.2, 0.2, 10, 4, error="http_500", http_status=500, detail="HTTP 500: again")]
    m = summarize(recs, 1.0, slo_ttft_s=1.0)
    assert m["completed"] == 0
    assert m["ttft_s"] == {"p50": None, "p90": None, "p99": None, "mean": None}
    assert m["failures"][0] == {"reason": "http_500", "count": 2, "http_status": 500, "example": "HTTP 500: boom"}
    assert m["failures"][1]["reason"] == "connect"
    assert m["goodput"] == 0.0 and m["throughput"]["requests_per_s"] == 0.0


def test_tpot_of_a_record():
    r = RequestRecord(0, None, 0.0, 10, 11, output_tokens=11, ttft_s=0.5, e2e_s=1.5)
    assert r.tpot_s == pytest.approx(0.1)            # (1.5 - 0.5) / 10
    assert RequestRecord(0, None, 0.0, 10, 1, output_tokens=1, ttft_s=0.5, e2e_s=0.5).tpot_s is None
