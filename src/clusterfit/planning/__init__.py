"""Planning: workloads and SLOs, the search over systems x precisions x layouts x batch, cost, Pareto.

Public API::

    from clusterfit.planning import PlanQuestion, plan_cluster, load_scenario, Workload, Load, SLO, LengthDist
    result = plan_cluster(PlanQuestion("zai-org/GLM-5.3", Workload.simple(4000, 500, Load("requests_per_s", 5)),
                                       SLO(ttft_s=2.0, tpot_s=0.05), systems=["h200", "b200", "h100"],
                                       precisions=["fp8"]))

``result`` is a ``clusterfit.schema.PlanResult`` (``clusterfit.planning(...)`` builds the question from keyword
arguments or a scenario file). Modules: workload (lengths, loads, agent
sessions, SLOs), scenario (YAML/TOML files), layout_candidates (TP/PP/EP/DP), capacity (per-replica
throughput and latency over a batch grid), queueing (percentile TTFT), search, cost, pareto, planner,
verify (simulate the recommendation), plot.
"""

from typing import TYPE_CHECKING, Any

from .planner import PlanQuestion, plan_cluster
from .workload import SLO, AgentSessions, LengthDist, Load, Workload

if TYPE_CHECKING:
    from .scenario import Scenario, load_scenario


def __getattr__(name: str) -> Any:
    """The scenario module's names, loaded on first use (PEP 562): a plan without a scenario file does not build
    its pydantic models."""
    if name in ("Scenario", "load_scenario"):
        from . import scenario

        return getattr(scenario, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["PlanQuestion", "plan_cluster", "Scenario", "load_scenario", "SLO", "AgentSessions", "LengthDist", "Load",
           "Workload"]
