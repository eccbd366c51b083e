"""The performance model against what this repository's probes measured on one NVIDIA H200 SXM (issue 11).

- tests/data/measured/h200-decode-steps-compiled.json: whole decode steps of Llama-3.1-8B's shape (bf16, random
  weights, context 1024), built with torch.compile and replayed as CUDA graphs, batch 1 to 512
  (benchmarks/probe_decode_steps.py; tests/data/measured/SOURCE.md).
- h200-decode-steps.json, h200-decode-steps-qwen3-32b.json, h200-decode-steps-llama-8k.json: the same steps built
  from plain PyTorch operators, for three dense shapes and contexts.
- tests/data/profiles/h200-calibrate-2026-12-04.json: the profile `clusterfit calibrate` wrote on the same kind of
  machine (its first run on a GPU).

The probe's step runs no rotary embedding and no sampling, which every engine runs, so an engine's GPU step is at
least as long as the measured one; benchmarks/decode_steps_check.py prints the whole comparison.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from clusterfit.compose import Catalog, build_replica

DATA = Path(__file__).resolve().parent / "data"
COMPILED = DATA / "measured" / "h200-decode-steps-compiled.json"
REAL_PROFILE = DATA / "profiles" / "h200-calibrate-2026-12-04.json"
LLAMA = "meta-llama/Llama-3.1-8B"


@lru_cache(maxsize=None)
def _vllm_step(model: str):
    """The step model every test here compares: ``model`` under vLLM on one H200 SXM (hgx_h200, TP1)."""
    return build_replica(Catalog.load(), model, "hgx_h200", gpus=1, tp=1, engine="vllm").step


def _measured_llama_steps() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = [r for r in json.loads(COMPILED.read_text())["decode_steps"] if r["model"] == LLAMA]
    return (np.array([r["batch"] for r in rows], dtype=float), np.array([r["context"] for r in rows], dtype=float),
            np.array([r["graph_s"] for r in rows]))


def test_the_measured_steps_cover_batch_1_to_512_at_context_1024():
    b, ctx, t = _measured_llama_steps()
    assert b.tolist() == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512] and set(ctx.tolist()) == {1024.0}
    # the band: its weight-streaming floor, 3.35 ms, is all 16.06 GB (1e9 bytes) of bf16 parameters at 4.8 TB/s
    # (the embedding table too; the step itself streams 15.01 GB: benchmarks/decode_steps_check.py)
    assert 3.35e-3 < t[0] < 6.0e-3
    assert np.all(np.diff(t) > 0)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_every_engines_batch_1_decode_of_llama_8b_is_between_the_measured_step_and_6_ms(engine):
    """Issue 11's band under every engine: Llama-3.1-8B bf16 on one H200 at batch 1 and context 1024 decodes between
    the measured CUDA-graph step (4.86 ms) and 6.0 ms. vLLM and SGLang are fitted with the H200's floor on the memory
    scale (fit_oss_engines.py); TensorRT-LLM's fit put it at 6.04 ms until its in-graph kernel cost was bounded at
    3.5 us, the most a GPU operation added to the measured graphs (accuracy.GLOBAL_PARAMS): 5.77 ms."""
    measured = _measured_llama_steps()[2][0]
    step = build_replica(Catalog.load(), LLAMA, "hgx_h200", gpus=1, tp=1, engine=engine).step
    assert measured <= float(step.decode_step_s(1, 1024)) <= 6.0e-3


def test_vllm_gpu_decode_step_of_llama_8b_is_at_least_the_measured_graph_step_and_at_most_1_2x():
    """Measured (benchmarks/decode_steps_check.py): the model is -1.3% (batch 128) to +9.2% (batch 1) from the
    measured step; below it by more than timing noise (2%) would be a model faster than the bare GPU."""
    b, ctx, measured = _measured_llama_steps()
    sm = _vllm_step(LLAMA)
    ratio = np.asarray(sm.gpu_step_s(0.0, 0.0, b, b * ctx)) / measured
    assert np.all(ratio >= 0.98), ratio
    assert np.all(ratio <= 1.2), ratio
    # what perf reports at batch 1 adds no host time under async scheduling; it stays inside the band
    step_1 = float(sm.decode_step_s(1, 1024))
    assert measured[0] <= step_1 <= 6.0e-3


@pytest.mark.parametrize("name, model, context, rows", [
    ("h200-decode-steps.json", LLAMA, 1024, 10),
    ("h200-decode-steps-qwen3-32b.json", "Qwen/Qwen3-32B", 1024, 8),
    ("h200-decode-steps-llama-8k.json", LLAMA, 8192, 7)])
def test_vllm_gpu_decode_step_within_10_percent_of_the_measured_plain_op_graph_steps(name, model, context, rows):
    """Three dense shapes built from plain PyTorch operators and replayed as CUDA graphs (Llama-3.1-8B at contexts
    1,024 and 8,192, Qwen3-32B at 1,024; batch 1 up to what the memory held): the model's vLLM GPU step is -5.2% to
    +5.0% from them (benchmarks/decode_steps_check.py). Qwen3-32B and the 8k context were measured after the model's
    constants were set, so nothing was fitted on them. Plain operators launch more kernels than an engine's fused step
    (515 a Llama step against 419 built with torch.compile, whose step ran 1.4% to 8.7% faster: 0.913-0.986x), so the
    model may sit below them by that much."""
    doc = json.loads((DATA / "measured" / name).read_text())
    steps = [r for r in doc["decode_steps"] if r["model"] == model and r["context"] == context and "graph_s" in r]
    assert len(steps) == rows
    b = np.array([r["batch"] for r in steps], dtype=float)
    sm = _vllm_step(model)
    ratio = np.asarray(sm.gpu_step_s(0.0, 0.0, b, b * context)) / np.array([r["graph_s"] for r in steps])
    assert np.all((ratio >= 0.91) & (ratio <= 1.10)), ratio


def test_a_profile_calibrate_wrote_on_an_h200_refits_to_itself():
    """The profile's fit is what the fitting code makes of the profile's own timings (to 0.1%: scipy releases
    differ in the last digits of a converged least-squares fit), for every curve it holds."""
    pytest.importorskip("scipy")
    from clusterfit.calibrate.fit import fit_timings
    from clusterfit.profile import parse_profile

    doc = json.loads(REAL_PROFILE.read_text())
    prof = parse_profile(doc)
    ds = prof.fit.datasheet
    p = fit_timings(prof.timings, ds.mem_bw_bytes_per_s, dict(ds.peak_flops), ds.scale_up_bw_bytes_per_s)
    stored = doc["fit"]
    for fam in ("attn_decode", "attn_prefill", "moe", "copy"):
        for key, v in stored[fam].items():
            assert p[fam][key] == pytest.approx(v, rel=1e-3, abs=1e-9), (fam, key)
    for dtype in ("bf16", "fp8"):
        for key, v in stored["gemm"][dtype].items():
            assert p["gemm"][dtype][key] == pytest.approx(v, rel=1e-3, abs=1e-6), (dtype, key)


def test_the_real_h200_profile_moves_predictions_by_less_than_a_tenth(run_json):
    """Two measurements of the same GPU model a week apart (the shipped probe files of 2026-11-29 and this calibrate
    run) agree: Llama-3.1-8B's batch-1 decode step moves by 3.4% (5.304 -> 5.124 ms)."""
    args = ("perf", LLAMA, "--system", "hgx_h200", "--gpus", "1", "--batch", "1", "--isl", "1024", "--osl", "128")
    base = run_json(*args)["decode_step_s"]
    measured = run_json(*args, "--profile", str(REAL_PROFILE))["decode_step_s"]
    assert measured != base
    assert measured == pytest.approx(base, rel=0.1)


def _eager_shapes() -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Per measured dense shape, batches 2 and up: (model GPU step without graphs and without launches, over the
    model's graph step; measured eager / graph step; the model's kernels)."""
    import dataclasses

    out = []
    for name in ("h200-decode-steps.json", "h200-decode-steps-qwen3-32b.json", "h200-decode-steps-llama-8k.json"):
        doc = json.loads((DATA / "measured" / name).read_text())
        for model in sorted({r["model"] for r in doc["decode_steps"] if "A3B" not in r["model"]}):
            rows = [r for r in doc["decode_steps"] if r["model"] == model and "graph_s" in r and r["batch"] >= 2]
            b = np.array([r["batch"] for r in rows], dtype=float)
            ctx = b * np.array([r["context"] for r in rows], dtype=float)
            sm = _vllm_step(model)
            bare = dataclasses.replace(sm, engine=dataclasses.replace(sm.engine, cuda_graphs=False, eager_launch_s=0.0))
            graph = np.asarray(sm.gpu_step_s(0.0, 0.0, b, ctx))
            out.append((np.asarray(bare.gpu_step_s(0.0, 0.0, b, ctx)) / graph,
                        np.array([r["eager_s"] / r["graph_s"] for r in rows]), sm.n_kernels / graph))
    return out


def test_the_eager_launch_law_is_the_one_the_measured_eager_steps_pick():
    """engines.EAGER_LAUNCH_S: launches added to the GPU's step at 3 us a kernel. Over the three measured shapes that
    additive law fits best at 3 us (grid of 1 us; 5 us while a replayed kernel cost 5 us); leaving one shape out in
    turn, the refitted additive law predicts the held-out shape's eager / graph ratios better than a max(GPU step,
    kernels x launch) law refitted the same way (mean |error| 0.122 against 0.131; 0.146 before)."""
    from clusterfit.engines import EAGER_LAUNCH_S

    shapes = _eager_shapes()
    assert len(shapes) == 3
    grid = np.arange(1, 80) * 1e-6

    def errors(law) -> np.ndarray:  # (shape, grid) mean |model - measured| of the ratios
        return np.array([[np.abs(law(bare, per_kernel, x) - meas).mean() for x in grid]
                         for bare, meas, per_kernel in shapes])

    additive = errors(lambda bare, per_kernel, x: bare + per_kernel * x)
    longer = errors(lambda bare, per_kernel, x: np.maximum(bare, per_kernel * x))
    assert grid[np.argmin(additive.mean(axis=0))] == pytest.approx(EAGER_LAUNCH_S)

    def held_out(err: np.ndarray) -> float:
        return float(np.mean([err[i, np.argmin(np.delete(err, i, axis=0).mean(axis=0))] for i in range(len(err))]))

    assert held_out(additive) == pytest.approx(0.122, abs=0.001)
    assert held_out(longer) == pytest.approx(0.131, abs=0.001)
