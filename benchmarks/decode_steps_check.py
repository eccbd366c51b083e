"""The performance model's decode step against whole decode steps measured on one H200 (issue 11).

Usage: python benchmarks/decode_steps_check.py [--out benchmarks/results/decode-steps-check.json]

Measurements: tests/data/measured/h200-decode-steps.json (PyTorch ops, CUDA graphs and eager),
h200-decode-steps-compiled.json (the same step built with torch.compile), h200-decode-steps-qwen3-32b.json and
h200-decode-steps-llama-8k.json (PyTorch ops: Qwen3-32B, and Llama-3.1-8B at context 8,192), all written by
benchmarks/probe_decode_steps.py on the device tool's H200 (their ``_run`` keys say how). The model side is
``StepModel.gpu_step_s`` (the GPU's part of the step, without the engine's host time, as the probe has none) and
``decode_step_s`` (what perf reports) of each engine for the same model on one H200 SXM (catalog system hgx_h200,
TP1, the catalog precision: bf16 for these models), one decode step of ``batch`` sequences of ``context`` tokens.

The probe's step leaves out rotary embeddings and sampling, which every engine runs, so a model that matches the
engines should sit at or somewhat above the measured step; the probe's MoE layer is unfused PyTorch (41 GPU
operations per layer with torch.compile off, against the one or two fused MoE kernels of vLLM / SGLang /
TensorRT-LLM), so its small-batch MoE steps are an upper bound, not an engine's figure.

Also written: each dense shape's batch-1 graph step beyond streaming its weights, per GPU operation the probe
counted (``graph_residual_per_kernel``): (measured step - the GEMM weight bytes the model streams / (4.8 TB/s x the
bf16 GEMM weight-streaming efficiency of tests/data/profiles/h200-calibrate-2026-12-04.json)) / kernels; and the
grouped expert GEMM's fp8-over-bf16 speed-up measured at each token count (one EP=8 rank of
DeepSeek-V3), against the 2x of the datasheet peaks that the model's MoE term assumes once compute-bound.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from clusterfit.compose import Catalog, build_replica

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "tests" / "data" / "measured"
PROFILE = ROOT / "tests" / "data" / "profiles" / "h200-calibrate-2026-12-04.json"
SYSTEM = "hgx_h200"
ENGINES = ("vllm", "sglang", "trtllm")
#: further plain-op measurements: Qwen3-32B at context 1024, Llama-3.1-8B at context 8192
PLAIN_MORE = ("h200-decode-steps-qwen3-32b.json", "h200-decode-steps-llama-8k.json")


def decode_rows(catalog: Catalog, doc: dict[str, Any], build: str) -> list[dict[str, Any]]:
    out = []
    models = sorted({r["model"] for r in doc["decode_steps"]})
    for model in models:
        rows = [r for r in doc["decode_steps"] if r["model"] == model and "graph_s" in r]
        b = np.array([r["batch"] for r in rows], dtype=float)
        ctx = np.array([r["context"] for r in rows], dtype=float)
        for eng in ENGINES:
            sm = build_replica(catalog, model, SYSTEM, gpus=1, tp=1, engine=eng).step
            gpu = np.asarray(sm.gpu_step_s(0.0, 0.0, b, b * ctx))
            full = np.asarray(sm.decode_step_s(b, ctx))
            for r, g, f in zip(rows, gpu, full):
                out.append({"build": build, "model": model, "engine": eng, "batch": r["batch"],
                            "context": r["context"], "measured_graph_s": r["graph_s"], "model_gpu_step_s": float(g),
                            "model_decode_step_s": float(f), "gpu_err_pct": 100.0 * (float(g) / r["graph_s"] - 1.0)})
    return out


def graph_residual_per_kernel(catalog: Catalog, doc: dict[str, Any], build: str, stream_bps: float) -> list[dict]:
    """Batch-1 rows of dense shapes whose GPU operations were counted: seconds per operation beyond streaming the
    weights (the model's GEMM weight bytes, lm_head included) at ``stream_bps`` bytes/s."""
    out = []
    for r in doc["decode_steps"]:
        if r["batch"] != 1 or "kernels" not in r or "graph_s" not in r:
            continue
        sm = build_replica(catalog, r["model"], SYSTEM, gpus=1, tp=1, engine="vllm").step
        if sm.moe:
            continue
        weights = sum(g.count * g.n * g.k * g.w_bytes_per_elem for g in sm.gemms)
        out.append({"build": build, "model": r["model"], "context": r["context"], "kernels": r["kernels"],
                    "weight_bytes": weights, "graph_s": r["graph_s"],
                    "residual_per_kernel_s": (r["graph_s"] - weights / stream_bps) / r["kernels"]})
    return out


def fp8_speedup(doc: dict[str, Any]) -> list[dict[str, Any]]:
    by = {(r["dtype"], r["tokens"]): 0.0 for r in doc.get("grouped_gemm", [])}
    for r in doc.get("grouped_gemm", []):
        by[(r["dtype"], r["tokens"])] += r["s"]  # gate_up + down of one layer
    return [{"tokens": t, "bf16_s": s, "fp8_s": by[("fp8_e4m3_rowwise", t)],
             "fp8_speedup": s / by[("fp8_e4m3_rowwise", t)]}
            for (dt, t), s in sorted(by.items()) if dt == "bf16" and ("fp8_e4m3_rowwise", t) in by]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "decode-steps-check.json"))
    args = ap.parse_args()
    catalog = Catalog.load()
    plain = json.loads((MEASURED / "h200-decode-steps.json").read_text())
    compiled = json.loads((MEASURED / "h200-decode-steps-compiled.json").read_text())
    builds = [(plain, "eager ops"), (compiled, "torch.compile")]
    builds += [(json.loads((MEASURED / name).read_text()), "eager ops") for name in PLAIN_MORE]
    rows = [r for doc, build in builds for r in decode_rows(catalog, doc, build)]
    fit = json.loads(PROFILE.read_text())["fit"]
    stream_bps = fit["datasheet"]["mem_bw_bytes_per_s"] * fit["gemm"]["bf16"]["mem_eff"]
    residual = [x for doc, build in builds for x in graph_residual_per_kernel(catalog, doc, build, stream_bps)]
    summary = {}
    for r in rows:
        summary.setdefault(f"{r['model']} @{r['context']} | {r['build']} | {r['engine']}", []).append(r["gpu_err_pct"])
    result = {"_what": __doc__.split("\n\n")[0], "system": SYSTEM, "rows": rows,
              "gpu_err_pct_range": {k: [round(min(v), 1), round(max(v), 1)] for k, v in summary.items()},
              "launch": compiled.get("launch"), "weight_stream_bytes_per_s": stream_bps,
              "graph_residual_per_kernel": residual, "grouped_fp8_speedup": fp8_speedup(plain)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'model @context | probe build | engine':64s} batch  measured  model GPU   err   perf step")
    for r in rows:
        print(f"{r['model'] + ' @' + str(r['context']) + ' | ' + r['build'] + ' | ' + r['engine']:64s} {r['batch']:5d} "
              f"{r['measured_graph_s'] * 1e3:8.3f}  {r['model_gpu_step_s'] * 1e3:8.3f} {r['gpu_err_pct']:+6.1f}% "
              f"{r['model_decode_step_s'] * 1e3:8.3f} ms")
    for x in residual:
        print(f"{x['model']} @{x['context']} {x['build']}: batch-1 graph {x['graph_s'] * 1e3:.3f} ms, "
              f"{x['weight_bytes'] / 1e9:.2f} GB of weights at {stream_bps / 1e12:.2f} TB/s, "
              f"{x['residual_per_kernel_s'] * 1e6:.2f} us per GPU operation beyond them ({x['kernels']})")
    for s in result["grouped_fp8_speedup"]:
        print(f"grouped GEMM T={s['tokens']:6d}: bf16 {s['bf16_s'] * 1e3:7.3f} ms, fp8 {s['fp8_s'] * 1e3:7.3f} ms, "
              f"fp8 speed-up {s['fp8_speedup']:.2f}x (datasheet peaks: 2x)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
