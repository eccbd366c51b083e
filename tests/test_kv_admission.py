"""One KV-admission rule: perf's kv_limited_batch, the planner's batch bound and the simulator's peak admitted batch
under saturation agree exactly, for every engine policy ('full' for TensorRT-LLM, 'average' for vLLM / SGLang),
on dense, MoE, MLA and sliding-window models and on TP, PP and DP/EP layouts."""

from __future__ import annotations

import numpy as np
import pytest

from clusterfit.arch import load_model
from clusterfit.engines import get_engine
from clusterfit.hardware import load_hardware
from clusterfit.layout import Layout
from clusterfit.memory import kv_bytes_per_sequence
from clusterfit.perfmodel import compile_step
from clusterfit.perfmodel.serving import kv_limited_batch
from clusterfit.planning.capacity import aggregated_curve, kv_batch_bound
from clusterfit.planning.workload import SLO, Load, Workload
from clusterfit.precision import resolve_precision
from clusterfit.sim import SimulationConfig
from clusterfit.sim.cluster import Cluster
from clusterfit.sim.requests import Requests

#: (model, system, precision, layouts): a dense, an MoE, an MLA and a sliding-window model of the bundled catalog.
CASES = [
    ("meta-llama/Llama-3.1-8B", "h200", "bf16", [Layout(tp=1), Layout(tp=2), Layout(tp=4), Layout(pp=2)]),
    ("Qwen/Qwen3-30B-A3B", "h200", "bf16", [Layout(tp=1), Layout(tp=2), Layout(pp=2), Layout(dp=2, ep=2),
                                             Layout(dp=4, ep=4)]),
    ("deepseek-ai/DeepSeek-V3", "h200", "fp8", [Layout(tp=8), Layout(dp=8, ep=8)]),
    ("google/gemma-3-27b-it", "h200", "bf16", [Layout(tp=1), Layout(tp=2), Layout(tp=4)]),
]
ENGINES = ("vllm", "sglang", "trtllm")
#: Fixed lengths: the reserved context (512 + 4096 full, 512 + 2048 average) outgrows gemma-3's 1,024-token window.
ISL, OSL = 512, 4096
GRID = [(m, s, p, lay, e) for m, s, p, lays in CASES for lay in lays for e in ENGINES]


def _step(model: str, system: str, precision: str, layout: Layout, engine: str, budget: float):
    m = load_model(model)
    # a high batch cap, so that KV is what binds; a fixed KV budget per GPU keeps the runs small
    eng = get_engine(engine).with_settings(max_num_seqs=100_000)
    return compile_step(m, load_hardware().system(system), layout, resolve_precision(m, precision), eng,
                        kv_budget_bytes_per_gpu=budget)


def _sim_peak(sm, n: int) -> int:
    """Most requests the simulator admits at once when ``n`` fixed-length requests all arrive at t = 0."""
    reqs = Requests.build(np.zeros(n), np.full(n, ISL), np.full(n, OSL))
    cluster = Cluster(reqs, sm, SimulationConfig(replicas=1, seed=0))
    cluster.run()
    return max(r.peak_batch for r in cluster.replicas)


@pytest.mark.parametrize("model,system,precision,layout,engine", GRID,
                         ids=[f"{m.split('/')[1]}-{lay.label()}-{e}" for m, _s, _p, lay, e in GRID])
def test_perf_planner_and_simulator_admit_the_same_batch(model, system, precision, layout, engine):
    sm = _step(model, system, precision, layout, engine, budget=8e9)
    perf = float(kv_limited_batch(sm, ISL, OSL))
    assert 4 <= perf < 2000  # KV binds (not the cap), and the simulation stays small
    wl = Workload.simple(ISL, OSL, Load("requests_per_s", 1.0))
    planner = kv_batch_bound(sm, wl)
    curve = aggregated_curve(sm, wl, SLO(), np.array([perf, perf + 1.0]))
    assert list(curve.kv_ok) == [True, False]
    sim = _sim_peak(sm, int(perf) * 3 // 2 + 8)
    assert perf == planner == sim


def test_reservation_policy_by_hand():
    """Llama-3.1-8B bf16 TP1 with a 4 GB KV budget: 32 layers x 2 x 8 KV heads x 128 x 2 B = 131,072 B per token.
    TensorRT-LLM reserves 512 + 4096 tokens per request: floor(4e9 / (4608 x 131072)) = 6; vLLM / SGLang
    512 + 2048: floor(4e9 / (2560 x 131072)) = 11."""
    trt = _step("meta-llama/Llama-3.1-8B", "h200", "bf16", Layout(tp=1), "trtllm", budget=4e9)
    vll = _step("meta-llama/Llama-3.1-8B", "h200", "bf16", Layout(tp=1), "vllm", budget=4e9)
    assert trt.kv_bytes_per_token_per_gpu == 131_072
    assert float(kv_limited_batch(trt, ISL, OSL)) == 4e9 // (4608 * 131_072) == 6
    assert float(kv_limited_batch(vll, ISL, OSL)) == 4e9 // (2560 * 131_072) == 11


def test_sliding_window_reservation_matches_memory_model():
    """gemma-3-27b: the reservation of one request is the memory model's per-sequence KV at the reserved context
    (windowed layers capped at their window), not reserved tokens x full per-token bytes."""
    m = load_model("google/gemma-3-27b-it")
    sm = _step("google/gemma-3-27b-it", "h200", "bf16", Layout(tp=1), "trtllm", budget=4e9)
    expect = kv_bytes_per_sequence(m, resolve_precision(m, "bf16"), Layout(tp=1), ISL + OSL)
    assert float(sm.kv_reservation_bytes(ISL, OSL)) == pytest.approx(expect, rel=1e-12)
    assert expect < (ISL + OSL) * sm.kv_bytes_per_token_per_gpu * 0.5


def test_example_from_the_issue():
    """Llama-3.1-70B fp8 on 2x H100 TP2, isl 2048 / osl 2048, TensorRT-LLM: `clusterfit perf ... --max-throughput`
    admits 61 sequences; the planner's bound was 79 (isl + osl/2) before the shared rule, now 61 too. By hand: the
    KV budget is 0.9 x (85,154,945,914 device - 36,329,504,768 weights - 552,402,944 context - 165,675,008 cuBLAS -
    512 MiB NCCL - 1 GiB graphs - 8192 x 2 x (2 x 8192 + 28672) activations) = 41,182,697,658 bytes per GPU, and a
    sequence of 4096 tokens holds 4096 x 80 layers x 4 KV heads x 128 x 2 x 2 bytes = 671 MB: 61.4. (59 while the
    reserve held 4,096 x 128,256 / 2 fp32 sampler logits, which TensorRT-LLM's profiling run does not keep.)"""
    m = load_model("meta-llama/Llama-3.1-70B")
    sm = compile_step(m, load_hardware().system("h100"), Layout(tp=2), resolve_precision(m, "fp8"),
                      get_engine("trtllm"))
    wl = Workload.simple(2048, 2048, Load("requests_per_s", 1.0))
    assert float(kv_limited_batch(sm, 2048, 2048)) == kv_batch_bound(sm, wl) == 61


@pytest.mark.parametrize("model,system,precision,layout", [(m, s, p, lays[-1]) for m, s, p, lays in CASES],
                         ids=[m.split("/")[1] for m, _s, _p, _l in CASES])
def test_bulk_reservations_equal_the_per_request_rule(model, system, precision, layout):
    """The simulator evaluates the first-admission reservations once, vectorised over all requests
    (sim.ledger.Ledger); each must equal the scalar rule's value bit for bit."""
    from clusterfit.sim.ledger import Ledger

    rng = np.random.default_rng(3)
    n = 300
    reqs = Requests.build(np.zeros(n), rng.integers(1, 40_000, n), rng.integers(1, 9_000, n))
    for engine in ("vllm", "trtllm"):
        sm = _step(model, system, precision, layout, engine, budget=8e9)
        bulk = Ledger(reqs, sm).reservation_bytes
        one = [float(sm.kv_reservation_bytes(int(p), int(o))) for p, o in zip(reqs.input_tokens, reqs.output_tokens)]
        assert bulk == one
