"""How far the planner's TTFT / TPOT percentiles sit from the simulator's on the plans it recommends.

    python benchmarks/plan_vs_sim.py [--requests 20000] [--out FILE]

Plans seven questions (aggregated replicas, ``plan --no-disagg --verify``: the recommended plan is then simulated
with the same replicas, engine and traffic) and reports, per question, the planner's TTFT and TPOT at the SLO
percentile (p90) against the simulated p90, and the relative gap (plan / simulation - 1). The simulator replays
the engine step by step (admission at step boundaries, chunked prefill, async scheduling), the planner's closed
forms approximate it (planning/capacity.py, planning/queueing.py). Writes benchmarks/results/plan_vs_sim.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

QUESTIONS = (
    dict(model="meta-llama/Llama-3.1-8B", isl=1024, osl=256, rate=40, tpot_ms=8),
    dict(model="meta-llama/Llama-3.1-8B", isl=4096, osl=512, rate=10, tpot_ms=20),
    dict(model="meta-llama/Llama-3.1-8B", isl=512, osl=512, rate=5, tpot_ms=30),
    dict(model="Qwen/Qwen3-32B", isl=2048, osl=256, rate=8, tpot_ms=25),
    dict(model="meta-llama/Llama-3.1-8B", isl=1024, osl=256, rate=40, tpot_ms=8, engine="sglang"),
    dict(model="meta-llama/Llama-3.1-8B", isl=1024, osl=256, rate=40, tpot_ms=8, engine="trtllm"),
    dict(model="deepseek-ai/DeepSeek-V3", isl=2048, osl=512, rate=2, tpot_ms=60),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000, help="requests each verification simulates")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "plan_vs_sim.json"))
    args = ap.parse_args()
    import clusterfit as cf

    rows = []
    t0 = time.perf_counter()
    for q in QUESTIONS:
        res = cf.plan(**q, systems=["hgx_h200"], no_disagg=True, verify=True, verify_requests=args.requests)
        r, v = res.recommended, res.verify
        if r is None or v is None:
            sys.exit(f"no verified plan for {q}")
        row = {"question": q, "plan": f"{r.replicas} x {r.layout} on {r.system}", "batch": r.batch,
               "plan_ttft_p90_ms": r.ttft_s * 1e3, "sim_ttft_p90_ms": v.ttft_s.p90 * 1e3,
               "plan_tpot_p90_ms": r.tpot_s * 1e3, "sim_tpot_p90_ms": v.tpot_s.p90 * 1e3}
        row["ttft_gap"] = row["plan_ttft_p90_ms"] / row["sim_ttft_p90_ms"] - 1.0
        row["tpot_gap"] = row["plan_tpot_p90_ms"] / row["sim_tpot_p90_ms"] - 1.0
        rows.append(row)
        print(f"{q['model']:26s} {q.get('engine', 'vllm'):7s} {q['isl']:>5}/{q['osl']:<4} {q['rate']:>3} req/s  "
              f"{row['plan']:24s} TTFT p90 plan {row['plan_ttft_p90_ms']:7.1f} sim {row['sim_ttft_p90_ms']:7.1f} ms "
              f"({row['ttft_gap']:+.1%})  TPOT p90 plan {row['plan_tpot_p90_ms']:6.2f} sim "
              f"{row['sim_tpot_p90_ms']:6.2f} ms ({row['tpot_gap']:+.1%})")
    summary = {name: {"mean_abs_gap": statistics.fmean(abs(r[name]) for r in rows),
                      "min_gap": min(r[name] for r in rows), "max_gap": max(r[name] for r in rows)}
               for name in ("ttft_gap", "tpot_gap")}
    print(f"TTFT gap mean |{summary['ttft_gap']['mean_abs_gap']:.1%}|, TPOT gap mean "
          f"|{summary['tpot_gap']['mean_abs_gap']:.1%}|")
    out = {"command": "python benchmarks/plan_vs_sim.py" + (f" --requests {args.requests}"
                                                             if args.requests != 20_000 else ""),
           "requests": args.requests, "rows": rows, "summary": summary,
           "seconds": round(time.perf_counter() - t0, 1)}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
