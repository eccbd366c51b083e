"""Speed of the performance model: predict every row of a published CSV, and evaluate a StepModel on arrays.

    python benchmarks/perf_speed.py [CSV]   -> prints rates, writes benchmarks/results/perf_speed.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy  # noqa: E402

from clusterfit.arch import load_model  # noqa: E402
from clusterfit.engines import get_engine  # noqa: E402
from clusterfit.hardware import load_hardware  # noqa: E402
from clusterfit.layout import Layout  # noqa: E402
from clusterfit.perfmodel import compile_step  # noqa: E402
from clusterfit.precision import resolve_precision  # noqa: E402


def main() -> None:
    # default: the development CSV in shared/ beside the repository root
    default = Path(__file__).resolve().parents[2] / "shared" / "reference" / "published" / "measured-dev.csv"
    csv_path = sys.argv[1] if len(sys.argv) > 1 else str(default)
    t0 = time.perf_counter()
    rows, results, skipped = accuracy.evaluate(csv_path, simulated=False)
    dt_rows = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim_rows, sim_results, _ = accuracy.evaluate(csv_path, simulated=True)
    dt_sim = time.perf_counter() - t0
    m = load_model("deepseek-ai/DeepSeek-V3")
    s = load_hardware().system("h200")
    p = resolve_precision(m)
    t0 = time.perf_counter()
    n_compile = 50
    eng = get_engine("trtllm")
    for _ in range(n_compile):
        sm = compile_step(m, s, Layout(tp=8, ep=8), p, eng)
    dt_compile = (time.perf_counter() - t0) / n_compile
    b = np.arange(1, 100_001, dtype=float)
    t0 = time.perf_counter()
    sm.decode_step_s(b, 2048.0)
    dt_eval = time.perf_counter() - t0
    out = {"csv_rows": len(rows) + len(sim_rows),
           "perf_model_rows": len(rows), "perf_model_predicted": len(results), "perf_model_seconds": round(dt_rows, 3),
           "perf_model_rows_per_s": round(len(rows) / dt_rows, 1),
           "simulated_rows": len(sim_rows), "simulated_predicted": len(sim_results), "simulated_seconds": round(dt_sim, 3),
           "compile_step_s_deepseek_v3": dt_compile,
           "decode_steps_per_s_vectorised": round(len(b) / dt_eval)}
    print(json.dumps(out, indent=1))
    Path(__file__).resolve().parent.joinpath("results", "perf_speed.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
