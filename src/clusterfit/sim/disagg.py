"""Disaggregated serving: a prefill pool feeding a decode pool over a KV transfer.

The model, kept simple on purpose (and what the planner assumes, planning/capacity.py):

1. **Prefill pool**: ``prefill_replicas`` replicas of the prefill layout behind the load balancer, each a normal
   simulated replica (chunked prefill under its token budget, KV admission, FCFS) serving every request as a
   one-token answer: the request's prefill ends with its first token.
2. **KV transfer**: the request's KV then crosses to the decode pool in ``kv_transfer_s(prompt tokens)`` seconds
   (the planner's hop latency + KV bytes / link bandwidth, not overlapped with the prefill). Transfers do not
   contend with each other.
3. **Decode pool**: ``decode_replicas`` replicas of the decode layout. The request arrives there when its KV has
   landed, with its whole prompt and first token in KV already (``Requests.cached_tokens``: only the first token's
   own KV entry is computed, one token attending the prompt, in a step alongside the running batch, under SGLang
   too: its decode server merges a hand-off into the running batch with no prefill step, ``Replica.kv_handoff``) and
   ``output - 1`` tokens still to generate.

TTFT is counted to the end of the KV transfer (as the planner counts it: the first token is handed over with
the KV); TPOT is (finish - that time) / (output - 1). The two pools run one after the other: the decode pool
never pushes back on the prefill pool (a full decode pool queues requests instead of stalling prefill), and
failures and autoscaling are not modelled here (an error).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..engines import front_end_s
from ..errors import ClusterfitError
from .cluster import SimRun, run_end_s, run_simulation, with_front_end
from .config import SimulationConfig
from .ledger import COMPLETED, PENDING
from .requests import Requests
from .stepmodel import StepCosts


def run_disaggregated(requests: Requests, prefill_model: StepCosts, decode_model: StepCosts,
                      config: SimulationConfig, prefill_replicas: int, decode_replicas: int,
                      kv_transfer_s: Callable[[np.ndarray], np.ndarray],
                      gpus_per_node: int | None = None) -> SimRun:
    """Simulate ``requests`` on a prefill pool feeding a decode pool (module docstring); one merged SimRun whose
    replicas are the prefill pool's (0 .. P-1) then the decode pool's (P .. P+D-1)."""
    if config.failures or config.autoscale is not None:
        raise ClusterfitError("failures and autoscaling are not simulated for disaggregated pools")
    if config.arrival.concurrency is not None:
        raise ClusterfitError("a closed loop (arrival.concurrency) is not simulated for disaggregated pools: give "
                              "an arrival rate")
    wall0 = time.perf_counter()
    n = len(requests)
    # 1. prefill pool: every request as a one-token answer
    pre_reqs = Requests(requests.arrival_s, requests.input_tokens, np.ones(n, np.int64), requests.prefix_key,
                        requests.shared_tokens, requests.cached_tokens)
    pcfg = config.model_copy(update={"replicas": prefill_replicas})
    run_p = run_simulation(pre_reqs, prefill_model, pcfg, gpus_per_node, front_end=False)
    rp = run_p.requests
    first = rp["first_token_s"]
    done_p = rp["status"] == COMPLETED
    transfer = np.asarray(kv_transfer_s(requests.input_tokens), float) * np.ones(n)
    handed = first + transfer  # the first token reaches the user with the KV on the decode side
    # 2. decode pool: requests with more than one output token, arriving when their KV has landed
    go = np.flatnonzero(done_p & (requests.output_tokens > 1))
    status = rp["status"].astype(np.int8).copy()
    finish = np.where(done_p, handed, rp["finish_s"])
    replica = rp["replica"].copy()
    retries, preempt = rp["retries"].copy(), rp["preemptions"].copy()
    runs = [run_p]
    run_d = None
    if go.size:
        order = np.argsort(handed[go], kind="stable")
        idx = go[order]
        isl = requests.input_tokens[idx]
        dec = Requests(handed[idx], isl + 1, requests.output_tokens[idx] - 1, np.full(idx.size, -1, np.int64),
                       np.zeros(idx.size, np.int64), isl.copy())
        dcfg = config.model_copy(update={"replicas": decode_replicas})
        run_d = run_simulation(dec, decode_model, dcfg, gpus_per_node, front_end=False, kv_handoff=True)
        rd = run_d.requests
        status[idx] = rd["status"]
        finish[idx] = rd["finish_s"]
        replica[idx] = np.where(rd["replica"] >= 0, rd["replica"] + prefill_replicas, -1)
        retries[idx] += rd["retries"]
        preempt[idx] += rd["preemptions"]
        runs.append(run_d)
    if np.any(status == PENDING):
        raise ClusterfitError("internal error: a request neither completed, rejected nor failed")
    merged = {**rp, "output_tokens": requests.output_tokens.copy(), "first_token_s": np.where(done_p, handed, np.nan),
              "finish_s": finish, "status": status, "replica": replica, "retries": retries, "preemptions": preempt}
    g_p, g_d = run_p.gpus_per_replica, (run_d.gpus_per_replica if run_d is not None else run_p.gpus_per_replica)
    gpu_s = run_p.replica_seconds * g_p + (run_d.replica_seconds * g_d if run_d is not None else 0.0)
    replicas = [dict(r) for r in run_p.replicas]
    events = list(run_p.events)
    if run_d is not None:
        replicas += [{**r, "replica": r["replica"] + prefill_replicas} for r in run_d.replicas]
        events += [{**e, "replica": e["replica"] + prefill_replicas} for e in run_d.events]
    samples = sorted((s for r in runs for s in r.samples), key=lambda s: s.t_s)
    run = SimRun(
        requests=merged, replicas=replicas, samples=samples, events=events,
        replica_seconds=gpu_s / g_d, gpus_per_replica=g_d, end_s=run_end_s(merged),
        sim_wall_s=time.perf_counter() - wall0,
        config=config.model_copy(update={"replicas": prefill_replicas + decode_replicas}),
        token_gaps=run_d.token_gaps if run_d is not None else run_p.token_gaps,
        extra={**run_p.extra, "window_s": max(r.extra["window_s"] for r in runs),
               "pools": {"prefill_replicas": prefill_replicas, "decode_replicas": decode_replicas,
                         "prefill_gpus_per_replica": g_p, "decode_gpus_per_replica": g_d,
                         "kv_transfer_mean_s": float(np.mean(transfer)),
                         "prefill_ttft_p90_s": float(np.nanpercentile(first - rp["arrival_s"], 90))
                         if done_p.any() else None}})
    # the clients' view: the request's way through the front end once, at its first token and at its finish
    return with_front_end(run, front_end_s(prefill_model))
