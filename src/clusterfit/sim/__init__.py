"""Cluster simulator: workloads and traces, replicas (continuous batching, chunked prefill, paged KV,
preemption, prefix cache, speculative decoding), load balancer, failures and autoscaling, metrics.

Public API:
    simulate(step_model, SimulationConfig, workload=None, slo=None) -> (report dict, SimRun)
    build_requests(SimulationConfig, workload=None) -> Requests
    load_trace(path) -> Requests;  generate(n, arrival, input, output, rng, sessions=None) -> Requests
    run_request(clusterfit.schema.SimulateRequest) -> (report dict, SimRun)   (what `clusterfit simulate` runs)
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import build_requests, parse_simulation, run_request, simulate
    from .cluster import SimRun, run_simulation
    from .config import (POLICIES, ArrivalSpec, AutoscaleSpec, FailureSpec, SampledLengthSpec, ReplicaSpec,
                         SessionSpec, SimulationConfig, SpeculativeSpec)
    from .metrics import summarize
    from .requests import Requests, generate
    from .stepmodel import StepCosts, StepTimer
    from .trace_files import load_trace, sample_traces

#: public name -> the submodule that defines it. Imported on first use (PEP 562), so that a caller that needs one
#: submodule (the planner reads sim.config's SpeculativeSpec) does not load the whole simulator with it.
_EXPORTS = {
    **dict.fromkeys(("build_requests", "parse_simulation", "run_request", "simulate"), "api"),
    **dict.fromkeys(("SimRun", "run_simulation"), "cluster"),
    **dict.fromkeys(("POLICIES", "ArrivalSpec", "AutoscaleSpec", "FailureSpec", "SampledLengthSpec", "ReplicaSpec",
                     "SessionSpec", "SimulationConfig", "SpeculativeSpec"), "config"),
    "summarize": "metrics",
    **dict.fromkeys(("StepCosts", "StepTimer"), "stepmodel"),
    **dict.fromkeys(("load_trace", "sample_traces"), "trace_files"),
    **dict.fromkeys(("Requests", "generate"), "requests"),
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = list(_EXPORTS)
