"""The reality loop on loopback: ``clusterfit bench`` measures a ``clusterfit twin`` at three loads (light, near
saturation, overload), and what it measures agrees with what the twin simulated for the same arrivals, and with the
batch simulator's prediction for them.

The twin serves Llama-3.1-8B on one H200 (bf16): an 8192-token prompt is one prefill step of ~0.2 s (the engine's
8192-token step budget), so about five such requests per second saturate the replica. Long prompts keep the HTTP
stack's few milliseconds small beside the latencies compared. Figures follow ``vllm bench serve``'s definitions
(clusterfit.bench.metrics): TTFT = first chunk - send; TPOT = (E2E - TTFT) / (output tokens - 1); request
throughput = completed / (first send to last answer).
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

MODEL = "meta-llama/Llama-3.1-8B"
ISL, OSL = 8192, 32
#: (name, requests/s, requests): ~20% of the replica's capacity, ~85%, ~2x (a queue builds). The light load sends 16:
#: with 8, its TTFT p90 was the 7.3th of 8 values, so one request a busy 2-core host stalled decided it (a CI run on
#: this machine: 0.357 s measured against 0.315 s simulated, outside the 10%; the test passed alone three times).
LOADS = (("light", 1.5, 16), ("near saturation", 4.0, 24), ("overload", 10.0, 30))


@pytest.fixture(scope="module")
def loop():
    """Each load benchmarked in turn against one twin; per load the BenchResult and the twin's records of the
    requests it sent (the bench's 1-token preflight request left out), then the twin's /metrics text."""
    from clusterfit.bench import run_bench
    from clusterfit.twin import running_twin

    runs = {}
    with running_twin(model=MODEL, system="h200") as t:
        seq = 0
        for name, rate, n in LOADS:
            result = run_bench(url=t.url, model=MODEL, rate=rate, requests=n, isl=ISL, osl=OSL, seed=1)
            recs = httpx.get(t.url + "/twin/requests", params={"after": seq}, trust_env=False).json()["requests"]
            seq = max(r["seq"] for r in recs)
            runs[name] = (result, sorted((r for r in recs if r["max_tokens"] == OSL), key=lambda r: r["arrival_s"]))
        metrics = httpx.get(t.url + "/metrics", trust_env=False).text
    return runs, metrics


def _simulated(result, recs) -> dict[str, float]:
    """The twin's simulated figures for the requests of ``result``, with bench's definitions, as the client sees
    them: a request's TTFT runs from its send, not from its arrival at the twin. The two differ by the inbound
    transport (HTTP and the twin's handler: a few ms, but tens of ms when a busy 2-core host stalls one request; that
    once moved the light load's TTFT p90 of 8 requests by 25%). The client's clock is put on the twin's by the
    smallest send-to-arrival gap; requests pair up in send and arrival order."""
    a = np.array([r["arrival_s"] for r in recs])
    first = np.array([r["first_token_s"] for r in recs])
    finish = np.array([r["finish_s"] for r in recs])
    sent = np.sort([r.sent_s for r in result.records])
    bridge = float(np.min(a - sent))  # the run's origin on the twin's clock, plus the smallest transport
    ttft = first - (sent + bridge)
    return {"ttft_mean": float(ttft.mean()), "ttft_p90": float(np.percentile(ttft, 90)),
            "tpot_mean": float(np.mean((finish - first) / (OSL - 1))),
            "requests_per_s": len(recs) / float(finish.max() - bridge),
            "transport_median_s": float(np.median(a - sent - bridge))}


@pytest.mark.parametrize("name", [n for n, _, _ in LOADS])
def test_bench_measures_what_the_twin_simulated(loop, name):
    runs, _ = loop
    result, recs = runs[name]
    n = dict((k, c) for k, _, c in LOADS)[name]
    assert result.completed == n and result.failed == 0 and len(recs) == n
    assert result.output_tokens == n * OSL and all(r["status"] == "completed" for r in recs)
    sim = _simulated(result, recs)
    assert sim["transport_median_s"] < 0.02  # seconds: the HTTP stack stays small beside a ~0.2 s prefill
    assert result.ttft_s.mean == pytest.approx(sim["ttft_mean"], rel=0.10)
    assert result.ttft_s.p90 == pytest.approx(sim["ttft_p90"], rel=0.10)
    # 10%, or 2 ms per token where that is more: light-load TPOT is ~12 ms, and one CI run on a busy 2-core host
    # missed it by 10.03% (its chunks reached the client late); at the heavier loads (75-103 ms) 10% governs
    assert result.tpot_s.mean == pytest.approx(sim["tpot_mean"], rel=0.10, abs=2e-3)
    assert result.throughput.requests_per_s == pytest.approx(sim["requests_per_s"], rel=0.10)


def test_overload_shows_the_queueing_the_simulator_predicts(loop):
    """The batch simulator, given the arrivals the twin saw, predicts the overload's TTFT (bench measures it within
    10%); the queue (arrival to first prefill chunk) builds: the last third waits far longer than the first, and
    far longer than at light load; /metrics reports the same queue times."""
    from prometheus_client.parser import text_string_to_metric_families

    from clusterfit.compose import Catalog, build_replica
    from clusterfit.sim import Requests, SimulationConfig, run_simulation

    runs, metrics = loop
    step = build_replica(Catalog.load(), MODEL, "h200").step
    result, recs = runs["overload"]
    reqs = Requests.build([r["arrival_s"] for r in recs], [r["prompt_tokens"] for r in recs],
                          [r["max_tokens"] for r in recs])
    predicted = run_simulation(reqs, step, SimulationConfig(replicas=1)).requests
    ttft = predicted["first_token_s"] - predicted["arrival_s"]
    assert result.ttft_s.p90 == pytest.approx(float(np.percentile(ttft, 90)), rel=0.10)
    assert result.ttft_s.mean == pytest.approx(float(ttft.mean()), rel=0.10)

    def queue(recs) -> np.ndarray:
        return np.array([r["scheduled_s"] - r["arrival_s"] for r in recs])

    q = queue(recs)
    third = len(q) // 3
    assert q[-third:].mean() > 3 * q[:third].mean() and q[-third:].mean() > 1.0  # seconds
    assert queue(runs["light"][1]).mean() < 0.1 * q.mean()
    # the prefill of 8192 tokens bounds the service rate: measured throughput below the offered 10 requests/s
    assert result.throughput.requests_per_s < 0.6 * 10.0
    fams = {f.name: f for f in text_string_to_metric_families(metrics)}
    total = sum(s.value for s in fams["vllm:request_queue_time_seconds"].samples
                if s.name.endswith("_sum"))
    everything = np.concatenate([queue(recs) for _, recs in runs.values()])
    assert total >= everything.sum() - 1e-9  # the preflight requests queue too (for ~0 s)
    assert total == pytest.approx(everything.sum(), rel=1e-3)


def test_a_closed_loop_bench_matches_the_simulators_closed_loop():
    """bench --concurrency 8 (40 requests of 4096 / 64 tokens, each client sending its next request as its last one
    ends) against the twin, beside bench --compare's prediction: the simulator's closed loop of 8 clients replaying
    the same requests (sim.clients, ramp 0). Each request's time in the system and the throughput agree: measured /
    predicted E2E mean 0.997-1.000 and request throughput 0.997-1.001 over ten runs here. The split between TTFT and
    TPOT does not, and varies from run to run (TTFT mean 0.77-0.96, TPOT mean 1.03-1.17): the replay's 8 clients,
    started together with equal lengths, stay in step and queue their prompts together every round, where the HTTP
    client's few milliseconds of jitter let the twin's requests drift apart and prefill between decode steps."""
    from clusterfit.bench import run_bench
    from clusterfit.twin import running_twin

    with running_twin(model=MODEL, system="h200") as t:
        result = run_bench(url=t.url, model=MODEL, concurrency=8, requests=40, isl=4096, osl=64, seed=1,
                           compare=MODEL, system="h200")
    assert result.completed == 40 and result.comparison is not None
    rows = {r.metric: r for r in result.comparison.rows}
    assert any("closed loop of 8 clients" in n for n in result.comparison.notes)
    assert rows["E2E latency mean"].ratio == pytest.approx(1.0, abs=0.10)
    assert rows["request throughput"].ratio == pytest.approx(1.0, abs=0.10)
