"""The simulator against the performance model: light-load agreement and step-table accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from clusterfit.perfmodel import predict
from clusterfit.compose import Catalog, build_replica
from clusterfit.sim import (ArrivalSpec, SampledLengthSpec, SimulationConfig, StepTimer, generate,
                            simulate)

CASES = [
    ("meta-llama/Llama-3.1-8B", "hgx_h200", 1, 1000, 200),
    ("Qwen/Qwen3-30B-A3B", "hgx_h200", 1, 3000, 300),
    ("meta-llama/Llama-3.1-70B", "hgx_h200", 4, 12000, 150),  # prompt longer than the token budget: 2 chunks
]


@pytest.mark.parametrize("model, system, gpus, isl, osl", CASES)
def test_single_replica_light_load_matches_perf_model(model, system, gpus, isl, osl):
    """One replica, requests far apart: TTFT is the perf model's prefill time plus the engine's front-end latency
    (request_latency_s) and TPOT its decode step at the mean context (isl + osl/2), within 2%."""
    sm = build_replica(Catalog.load(), model, system, gpus=gpus).step
    ref = predict(None, None, None, None, isl=isl, osl=osl, batch=1, context=isl + osl / 2, step_model=sm)
    reqs = generate(60, ArrivalSpec(rate_rps=0.02), SampledLengthSpec(value=isl), SampledLengthSpec(value=osl),
                    np.random.default_rng(0))
    report, _ = simulate(sm, SimulationConfig(replicas=1), requests=reqs)
    assert report["completed"] == 60
    # perf's ttft_s adds one decode step after the prefill; the simulator emits the first token at the
    # end of the step that finishes the prompt, which is perf's prefill_s.
    assert report["ttft_s"]["p50"] == pytest.approx(ref["prefill_s"] + sm.engine.request_latency_s, rel=0.02)
    assert report["tpot_s"]["p50"] == pytest.approx(ref["tpot_s"], rel=0.02)


def test_step_tables_match_the_model():
    """Interpolated step times stay within 1% of the model over random mixed steps."""
    sm = build_replica(Catalog.load(), "Qwen/Qwen3-30B-A3B", "hgx_h200", gpus=1).step
    timer = StepTimer(sm, 8192, sm.max_num_seqs, 40_000)
    rng = np.random.default_rng(1)
    err = []
    for _ in range(500):
        p = int(rng.integers(0, 8000))
        d = int(rng.integers(0 if p else 1, sm.max_num_seqs))
        pa, da = p * rng.uniform(0, 30_000), d * rng.uniform(1, 30_000)
        err.append(timer.step_s(p, pa, d, da) / float(sm.step_s(p, pa, d, da)) - 1)
    assert np.max(np.abs(err)) < 0.01
    a, b, n = timer.decode_linear(37, 37 * 5000.0)
    exact = timer.decode_steps_s(37, 37 * 5000.0, min(n, 50))
    assert np.allclose(a + b * np.arange(exact.size), exact, rtol=1e-12)


def test_step_tables_keep_the_host_time_apart():
    """Under async scheduling a step is max(GPU, host), which no additive table follows: the tables hold the GPU
    time and the host time (per step + per running sequence) is added at each lookup. A decode batch of 500 on
    Qwen3-1.7B (one H200, 1,000-token contexts) is host-bound with vLLM's constants (1 ms + 500 x 40 us = 21 ms
    against ~18 ms on the GPU): the tabled steps equal the model, flat at the host time."""
    sm = build_replica(Catalog.load(), "Qwen/Qwen3-1.7B", "hgx_h200", gpus=1).step
    timer = StepTimer(sm, 8192, sm.max_num_seqs, 40_000)
    host = float(sm.host_s(0, 500))
    assert host == pytest.approx(sm.engine.step_overhead_s + 500 * sm.engine.seq_overhead_s)
    assert float(sm.gpu_step_s(0, 0, 500, 500 * 1040.0)) < host  # host-bound here
    steps = timer.decode_steps_s(500, 500 * 1000.0, 40)
    ctx = 500 * 1000.0 + 500 * np.arange(40)
    assert np.allclose(steps, sm.step_s(0, 0, 500, ctx), rtol=1e-9)
    assert np.allclose(steps, host)
    a, b, n = timer.decode_linear(500, 500 * 1000.0)
    assert (a, b) == (pytest.approx(host), 0.0) and n >= 1
    # synchronous scheduling (vLLM before async scheduling): the host time adds
    from clusterfit.arch import load_model
    from clusterfit.engines import get_engine
    from clusterfit.hardware import load_hardware
    from clusterfit.layout import Layout
    from clusterfit.perfmodel import compile_step
    from clusterfit.precision import resolve_precision

    m = load_model("Qwen/Qwen3-1.7B")
    sync = compile_step(m, load_hardware().system("h200"), Layout(tp=1), resolve_precision(m),
                        get_engine("vllm").with_settings(async_scheduling=False))
    t = StepTimer(sync, 8192, sync.max_num_seqs, 40_000)
    gpu = float(sync.gpu_step_s(0, 0, 500, 500 * 1000.0))
    assert t.step_s(0, 0, 500, 500 * 1000.0) == pytest.approx(gpu + host, rel=1e-9)


def test_exact_steps_agree_with_tables():
    sm = build_replica(Catalog.load(), "meta-llama/Llama-3.1-8B", "hgx_h200", gpus=1).step
    reqs = generate(400, ArrivalSpec(rate_rps=8), SampledLengthSpec(dist="lognormal", mean=1500),
                    SampledLengthSpec(dist="lognormal", mean=200), np.random.default_rng(2))
    fast, _ = simulate(sm, SimulationConfig(), requests=reqs)
    exact, _ = simulate(sm, SimulationConfig(exact_steps=True), requests=reqs)
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert fast[key]["mean"] == pytest.approx(exact[key]["mean"], rel=0.01), key
