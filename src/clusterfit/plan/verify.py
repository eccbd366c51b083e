"""Check a recommended plan with the cluster simulator (``clusterfit plan ... --verify``).

The simulator (clusterfit.sim) replays the planner's workload against the recommended replicas (serving
replicas only: the N+k spares stand by) and reports percentile TTFT/TPOT, goodput and whether the SLOs
hold. The simulator models aggregated replicas; a disaggregated recommendation is not simulated.
"""

from __future__ import annotations

from typing import Any

from .workload import SLO, Workload


def verify_plan(result: dict, model: str, workload: Workload, slo: SLO, engine: str = "vllm",
                simulation: Any = None, requests: int = 20_000, seed: int = 0) -> dict:
    """Simulate the recommended plan; returns the simulator's report plus ``holds_slo`` and what was run."""
    rec = result.get("recommended")
    if not rec:
        return {"simulated": False, "reason": "no plan meets the SLOs; nothing to verify"}
    if rec["mode"] != "aggregated":
        return {"simulated": False, "reason": "the simulator models aggregated replicas; re-plan with --no-disagg "
                                              "to verify an aggregated plan"}
    from ..sim.api import compile_replica, parse_simulation, simulate

    sm, system = compile_replica(model, rec["system"], tp=rec["tp"], pp=rec["pp"], ep=rec["ep"], dp=rec["dp"],
                                 precision=None if rec["precision"] == "checkpoint" else rec["precision"],
                                 kv_dtype=rec["kv_dtype"], engine=engine)
    base = dict(simulation) if isinstance(simulation, dict) else {}
    base["replicas"] = rec["serving_replicas"]
    base.setdefault("requests", requests)
    base.setdefault("seed", seed)
    sim = parse_simulation(base, "simulation (from --verify)")
    report, _ = simulate(sm, sim, workload, slo, gpus_per_node=system.gpus_per_node)
    report["simulated"] = True
    report["plan_predicted"] = {"ttft_s": rec["ttft_s"], "tpot_s": rec["tpot_s"]}
    return report
