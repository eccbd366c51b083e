"""Simulator speed: requests simulated per second of wall time, on one core.

    python benchmarks/sim_speed.py [--requests 1000000] [--replicas 64] [--rate-per-replica 10] [--json]

Workload: Llama-3.1-8B on one H200 per replica (the performance model's step times), Poisson arrivals,
lognormal prompts (mean 1,000 tokens, cv 1) and outputs (mean 250, cv 1), least-outstanding routing.
Target (issue 5): 1,000,000 requests over 64 replicas in <= 30 s. Writes benchmarks/results/sim_speed.json.
Workload generation and the step-time tables are timed separately from the event loop.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from clusterfit.compose import Catalog, build_replica
from clusterfit.sim import ArrivalSpec, SampledLengthSpec, SimulationConfig, generate, run_simulation
from clusterfit.sim.metrics import summarize

RESULTS = Path(__file__).parent / "results" / "sim_speed.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--rate-per-replica", type=float, default=10.0, help="requests/s per replica")
    ap.add_argument("--policy", default="least_outstanding")
    ap.add_argument("--model", default="meta-llama/Llama-3.1-8B")
    ap.add_argument("--system", default="hgx_h200")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--no-write", action="store_true", help="do not write benchmarks/results/sim_speed.json")
    args = ap.parse_args()

    t0 = time.perf_counter()
    rep = build_replica(Catalog.load(), args.model, args.system, gpus=1)
    sm, system = rep.step, rep.system
    cfg = SimulationConfig(replicas=args.replicas, requests=args.requests, seed=args.seed, policy=args.policy,
                           arrival=ArrivalSpec(rate_rps=args.rate_per_replica * args.replicas))
    reqs = generate(args.requests, cfg.arrival, SampledLengthSpec(dist="lognormal", mean=1000, cv=1.0, max=16000),
                    SampledLengthSpec(dist="lognormal", mean=250, cv=1.0, max=4000), np.random.default_rng(args.seed))
    t_setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    run = run_simulation(reqs, sm, cfg, system.gpus_per_node)
    t_run = time.perf_counter() - t1
    report = summarize(run)
    t_total = time.perf_counter() - t0
    out = {
        "requests": args.requests,
        "replicas": args.replicas,
        "policy": args.policy,
        "model": args.model,
        "system": args.system,
        "rate_rps": args.rate_per_replica * args.replicas,
        "simulated_s": report["duration_s"],
        "completed": report["completed"],
        "ttft_p99_s": report["ttft_s"]["p99"],
        "tpot_p50_s": report["tpot_s"]["p50"],
        "mean_kv_utilisation": report["kv_utilisation"]["mean"],
        "setup_s": round(t_setup, 3),
        "sim_wall_s": round(t_run, 3),
        "total_wall_s": round(t_total, 3),
        "requests_per_s": round(args.requests / t_run, 1),
        "target_met": t_total <= 30.0 if args.requests >= 1_000_000 and args.replicas >= 64 else None,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cores_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{args.requests:,} requests over {args.replicas} replicas ({out['simulated_s']:,.0f} s simulated): "
              f"event loop {t_run:.2f} s, total {t_total:.2f} s -> {out['requests_per_s']:,.0f} requests/s "
              f"(setup {t_setup:.2f} s; TTFT p99 {out['ttft_p99_s'] * 1e3:.0f} ms, TPOT p50 "
              f"{out['tpot_p50_s'] * 1e3:.1f} ms, KV {out['mean_kv_utilisation']:.0%})")


if __name__ == "__main__":
    main()
