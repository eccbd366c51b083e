"""Check a recommended plan with the cluster simulator (``clusterfit plan ... --verify``).

The simulator (clusterfit.sim) replays the planner's workload against the recommended replicas (serving
replicas only: the N+k spares stand by), using the very step model the search compiled for that layout, and
reports percentile TTFT/TPOT, goodput and whether the SLOs hold. The simulator models aggregated replicas; a
disaggregated recommendation is not simulated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..schema import PlanOption, Verification

if TYPE_CHECKING:
    from .planner import PlanQuestion, _Sized


def verify_plan(sized: _Sized, rec: PlanOption, question: PlanQuestion, requests: int = 20_000,
                seed: int = 0) -> Verification:
    """Simulate the recommended plan ``sized`` (shown as ``rec``): the simulator's report plus what was run."""
    if sized.mode != "aggregated":
        return Verification(simulated=False, reason="the simulator models aggregated replicas; re-plan with "
                                                    "--no-disagg to verify an aggregated plan")
    from ..sim.api import parse_simulation, simulate

    base = dict(question.simulation) if isinstance(question.simulation, dict) else {}
    base["replicas"] = rec.serving_replicas
    base.setdefault("requests", requests)
    base.setdefault("seed", seed)
    sim = parse_simulation(base, "simulation (from --verify)")
    report, _ = simulate(sized.main.step, sim, question.workload, question.slo,
                         gpus_per_node=sized.system.gpus_per_node)
    return Verification.model_validate({**report, "simulated": True,
                                        "plan_predicted": {"ttft_s": rec.ttft_s, "tpot_s": rec.tpot_s}})
