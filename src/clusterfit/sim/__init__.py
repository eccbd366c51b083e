"""Cluster simulator: workloads and traces, replicas (continuous batching, chunked prefill, paged KV,
preemption, prefix cache, speculative decoding), load balancer, failures and autoscaling, metrics.

Public API:
    simulate(step_model, SimulationConfig, workload=None, slo=None) -> (report dict, SimRun)
    build_requests(SimulationConfig, workload=None) -> Requests
    load_trace(path) -> Requests;  generate(n, arrival, input, output, rng, sessions=None) -> Requests
    run_request(clusterfit.schema.SimulateRequest) -> (report dict, SimRun)   (what `clusterfit simulate` runs)
"""

from .api import build_requests, parse_simulation, run_request, simulate
from .cluster import SimRun, run_simulation
from .config import (POLICIES, ArrivalSpec, AutoscaleSpec, FailureSpec, SampledLengthSpec, ReplicaSpec, SessionSpec,
                     SimulationConfig, SpeculativeSpec)
from .metrics import summarize
from .stepmodel import StepCosts, StepTimer
from .trace_files import load_trace, sample_traces
from .requests import Requests, generate

__all__ = [
    "POLICIES", "ArrivalSpec", "AutoscaleSpec", "FailureSpec", "SampledLengthSpec", "ReplicaSpec", "Requests",
    "SessionSpec", "SimRun", "SimulationConfig", "SpeculativeSpec", "StepCosts", "StepTimer", "build_requests",
    "run_request", "generate", "load_trace", "parse_simulation", "run_simulation", "sample_traces",
    "simulate", "summarize",
]
