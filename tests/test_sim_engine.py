"""Simulator engine: conservation, queueing theory, failures, determinism, scheduler features."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sim_helpers import ConstantStep, RooflineStep

from clusterfit.errors import ClusterfitError
from clusterfit.sim import (POLICIES, ArrivalSpec, Requests, SampledLengthSpec, SimulationConfig, generate,
                            run_simulation, simulate, summarize)
from clusterfit.sim.cluster import replicas_on_node
from clusterfit.sim.ledger import COMPLETED, FAILED, REJECTED


def _requests(n, rate, isl, osl, seed=0, sessions=None, process="poisson"):
    rng = np.random.default_rng(seed)
    return generate(n, ArrivalSpec(process=process, rate_rps=rate), isl, osl, rng, sessions)


def _check_conservation(run, n):
    st_ = run.requests["status"]
    assert st_.size == n
    assert set(np.unique(st_).tolist()) <= {COMPLETED, REJECTED, FAILED}
    done = st_ == COMPLETED
    a, f, e = run.requests["arrival_s"], run.requests["first_token_s"], run.requests["finish_s"]
    assert np.all(f[done] >= a[done] - 1e-9)
    assert np.all(e[done] >= f[done] - 1e-9)
    rep = summarize(run)
    assert rep["completed"] + rep["rejected"] + rep["failed"] == n


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 150),
    replicas=st.integers(1, 4),
    policy=st.sampled_from(POLICIES),
    rate=st.floats(0.5, 200.0),
    kv=st.sampled_from([3_000, 20_000, 200_000]),
    max_num_seqs=st.integers(1, 32),
    sessions=st.booleans(),
    spec=st.booleans(),
    fail=st.one_of(st.none(), st.tuples(st.floats(0.0, 5.0), st.integers(0, 3),
                                         st.one_of(st.none(), st.floats(0.0, 3.0)))),
    max_queue=st.one_of(st.none(), st.integers(1, 5)),
    autoscale=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_every_request_is_accounted_for(n, replicas, policy, rate, kv, max_num_seqs, sessions, spec, fail, max_queue,
                                        autoscale, seed):
    """Conservation: every request completes or is counted rejected or failed, whatever happens."""
    from clusterfit.sim.config import SessionSpec

    sess = SessionSpec(turns_mean=3, think_time_s=0.2, new_tokens=SampledLengthSpec(dist="lognormal", mean=100)) \
        if sessions else None
    reqs = _requests(n, rate, SampledLengthSpec(dist="lognormal", mean=600, cv=1.5, max=6000),
                     SampledLengthSpec(dist="lognormal", mean=80, cv=1.0, max=2000), seed, sess)
    cfg = {"replicas": replicas, "policy": policy, "seed": seed, "max_retries": 1,
           "replica": {"max_queue": max_queue, "max_num_batched_tokens": 512,
                       "speculative": {"draft_tokens": 2, "acceptance": 0.6, "draft_cost": 0.05} if spec else None}}
    if fail is not None:
        cfg["failures"] = [{"at_s": fail[0], "replica": fail[1] % replicas, "restart_s": fail[2]}]
    if autoscale:
        cfg["autoscale"] = {"interval_s": 0.5, "up_outstanding": 4, "down_outstanding": 1, "max_replicas": 6,
                            "startup_s": 1.0}
    run = run_simulation(reqs, RooflineStep(kv_capacity_tokens=kv, max_num_seqs=max_num_seqs), SimulationConfig(**cfg))
    _check_conservation(run, n)


def test_md1_mean_wait():
    """One server, batch 1, constant service, Poisson arrivals: mean wait = rho D / (2 (1 - rho))."""
    step = 0.01
    out_tokens = 4  # service = 1 prefill step + 3 decode steps
    D = out_tokens * step
    rho = 0.6
    n = 120_000
    reqs = _requests(n, rho / D, SampledLengthSpec(value=100), SampledLengthSpec(value=out_tokens), seed=3)
    run = run_simulation(reqs, ConstantStep(step, max_num_seqs=1), SimulationConfig(replicas=1, seed=3))
    _check_conservation(run, n)
    e2e = run.requests["finish_s"] - run.requests["arrival_s"]
    assert np.allclose(np.min(e2e), D)
    wait = float(np.mean(e2e)) - D
    theory = rho * D / (2 * (1 - rho))
    assert wait == pytest.approx(theory, rel=0.05)


def test_deterministic_for_a_seed():
    reqs = _requests(3000, 80, SampledLengthSpec(dist="lognormal", mean=800),
                     SampledLengthSpec(dist="lognormal", mean=150), 7)
    cfg = SimulationConfig(replicas=4, policy="power_of_two", seed=11,
                           failures=[{"at_s": 10.0, "replica": 1, "restart_s": 5.0}])
    a = run_simulation(reqs, RooflineStep(), cfg)
    b = run_simulation(reqs, RooflineStep(), cfg)
    for key in ("first_token_s", "finish_s", "status", "replica", "retries", "preemptions"):
        assert np.array_equal(a.requests[key], b.requests[key], equal_nan=True), key
    c = run_simulation(reqs, RooflineStep(), cfg.model_copy(update={"seed": 12}))
    assert not np.array_equal(a.requests["replica"], c.requests["replica"])


def test_failure_spike_and_recovery():
    """1 of 8 replicas lost at t = 60 s: TTFT spikes right after, recovers, nothing lost uncounted."""
    n = 24_000
    reqs = _requests(n, 120.0, SampledLengthSpec(dist="lognormal", mean=1000, cv=0.5),
                     SampledLengthSpec(dist="lognormal", mean=200, cv=0.5), seed=5)
    cfg = SimulationConfig(replicas=8, seed=5, window_s=10.0, failures=[{"at_s": 60.0, "replica": 3}])
    report, run = simulate(RooflineStep(kv_capacity_tokens=400_000, max_num_seqs=128), cfg, requests=reqs)
    _check_conservation(run, n)
    assert report["failed"] == 0 and report["rejected"] == 0
    lost = [e for e in report["events"] if e["event"] == "replica_lost"]
    assert len(lost) == 1 and lost[0]["in_flight"] > 0 and lost[0]["retried"] == lost[0]["in_flight"]
    assert report["retried"] == lost[0]["in_flight"]
    assert np.all(run.requests["replica"][run.requests["retries"] > 0] != 3)
    win = {round(w["t_s"]): w for w in report["windows"]}
    before = np.median([win[t]["ttft_p99_s"] for t in range(10, 60, 10)])
    spike = win[50]["ttft_p99_s"]  # arrivals in [50, 60) include the requests caught by the failure
    assert spike > 3 * before
    after = np.median([win[t]["ttft_p99_s"] for t in range(100, 190, 10)])
    assert after < 1.5 * before
    assert win[40]["live_replicas"] == 8 and win[70]["live_replicas"] == 7
    assert not math.isnan(report["ttft_s"]["p99"])


def test_node_failure_takes_its_replicas():
    assert replicas_on_node(0, 8, 4, 8) == [0, 1]
    assert replicas_on_node(1, 4, 16, 8) == [0]
    reqs = _requests(2000, 40, SampledLengthSpec(value=500), SampledLengthSpec(value=50))
    cfg = SimulationConfig(replicas=4, gpus_per_node=8, failures=[{"at_s": 5.0, "node": 1, "restart_s": 10}])
    step = RooflineStep()
    step.gpus = 4
    report, run = simulate(step, cfg, requests=reqs)
    lost = sorted(e["replica"] for e in report["events"] if e["event"] == "replica_lost")
    assert lost == [2, 3]
    assert report["completed"] == 2000
    with pytest.raises(ClusterfitError, match="node 5"):
        simulate(step, SimulationConfig(replicas=4, gpus_per_node=8, failures=[{"at_s": 1.0, "node": 5}]),
                 requests=reqs)


def test_lost_replica_without_restart_and_no_other_fails_requests():
    reqs = _requests(500, 20, SampledLengthSpec(value=500), SampledLengthSpec(value=100))
    cfg = SimulationConfig(replicas=1, failures=[{"at_s": 5.0, "replica": 0}])
    report, run = simulate(RooflineStep(), cfg, requests=reqs)
    assert report["failed"] > 0
    assert report["completed"] + report["failed"] == 500
    assert np.all(run.requests["arrival_s"][run.requests["status"] == COMPLETED] < 5.0)


def test_kv_exhaustion_preempts_and_rejects_what_never_fits():
    reqs = _requests(400, 50, SampledLengthSpec(value=1500), SampledLengthSpec(value=600), seed=2)
    big = Requests.build(np.array([0.0]), [9000], [2000])
    report, run = simulate(RooflineStep(kv_capacity_tokens=12_000, max_num_seqs=64), SimulationConfig(), requests=reqs)
    assert report["preemptions"] > 0 and report["completed"] == 400
    report2, _ = simulate(RooflineStep(kv_capacity_tokens=10_000), SimulationConfig(), requests=big)
    assert report2["rejected"] == 1 and report2["completed"] == 0


def test_max_queue_rejects():
    reqs = _requests(2000, 500, SampledLengthSpec(value=2000), SampledLengthSpec(value=200))
    report, _ = simulate(RooflineStep(max_num_seqs=4), SimulationConfig(replica={"max_queue": 8}), requests=reqs)
    assert report["rejected"] > 0 and report["completed"] + report["rejected"] == 2000


def test_prefix_cache_and_affinity_cut_ttft_for_sessions():
    from clusterfit.sim.config import SessionSpec

    sess = SessionSpec(turns=8, think_time_s=20.0, new_tokens=SampledLengthSpec(value=200))
    reqs = _requests(4000, 2.0, SampledLengthSpec(value=4000), SampledLengthSpec(value=100), seed=4, sessions=sess)
    step = RooflineStep(kv_capacity_tokens=2_000_000, max_num_seqs=64)
    aff, _ = simulate(step, SimulationConfig(replicas=4, policy="affinity"), requests=reqs)
    rr, _ = simulate(step, SimulationConfig(replicas=4, policy="round_robin"), requests=reqs)
    off, _ = simulate(step, SimulationConfig(replicas=4, policy="affinity", replica={"prefix_cache": False}),
                      requests=reqs)
    assert aff["ttft_s"]["mean"] < 0.5 * off["ttft_s"]["mean"]
    assert aff["ttft_s"]["mean"] < rr["ttft_s"]["mean"]


def test_speculative_decoding_raises_tokens_per_step():
    reqs = _requests(300, 1.0, SampledLengthSpec(value=500), SampledLengthSpec(value=400))
    step = RooflineStep()
    base, _ = simulate(step, SimulationConfig(), requests=reqs)
    spec, _ = simulate(step, SimulationConfig(replica={"speculative": {"draft_tokens": 3, "acceptance": 0.8,
                                                                       "draft_cost": 0.0}}), requests=reqs)
    tokens_per_step = (1 - 0.8**4) / (1 - 0.8)
    ratio = base["tpot_s"]["p50"] / spec["tpot_s"]["p50"]
    assert 0.85 * tokens_per_step < ratio <= tokens_per_step * 1.01


def test_speculative_decoding_needs_a_verifying_step_model():
    """Under speculative decoding the step timer is built on step_model.with_verify(k) (sim.stepmodel.StepCosts); a
    step model without it is refused with the setting named, not priced another way."""

    class NoVerify(ConstantStep):
        with_verify = None

    reqs = _requests(5, 1.0, SampledLengthSpec(value=50), SampledLengthSpec(value=20))
    cfg = SimulationConfig(replica={"speculative": {"draft_tokens": 2, "acceptance": 0.6, "draft_cost": 0.05}})
    with pytest.raises(ClusterfitError, match="simulation.replica.speculative: the step model has no with_verify"):
        run_simulation(reqs, NoVerify(0.01), cfg)


def test_autoscaling_adds_replicas_under_load():
    reqs = _requests(6000, 100, SampledLengthSpec(value=1000), SampledLengthSpec(value=200))
    cfg = SimulationConfig(replicas=1, autoscale={"interval_s": 2, "up_outstanding": 20, "down_outstanding": 1,
                                                  "max_replicas": 6, "startup_s": 5})
    report, _ = simulate(RooflineStep(max_num_seqs=64), cfg, requests=reqs)
    ups = [e for e in report["events"] if e["event"] == "scale_up_ready"]
    assert 1 <= len(ups) <= 5
    assert report["completed"] == 6000


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_spreads_load(policy):
    reqs = _requests(4000, 100, SampledLengthSpec(dist="lognormal", mean=800),
                     SampledLengthSpec(dist="lognormal", mean=150))
    report, _ = simulate(RooflineStep(), SimulationConfig(replicas=4, policy=policy), requests=reqs)
    counts = [r["completed"] for r in report["per_replica"]]
    assert sum(counts) == 4000
    assert min(counts) > 0.1 * 1000  # affinity without sessions falls back to least outstanding


def test_unknown_failure_replica_is_an_error():
    reqs = _requests(10, 1, SampledLengthSpec(value=10), SampledLengthSpec(value=10))
    with pytest.raises(ClusterfitError, match="replica 9"):
        simulate(RooflineStep(), SimulationConfig(replicas=2, failures=[{"at_s": 1, "replica": 9}]), requests=reqs)


def test_a_lost_node_costs_a_request_at_most_one_retry():
    """A node's replicas were lost one event after another: requests retried off replica 8 were routed to replicas
    9-15, lost at the same instant, and bounced past max_retries (failed 2, retries up to 4, of 16 replicas with 8
    healthy). The node now goes down whole before any request is routed again."""
    import clusterfit as cf

    res = cf.simulate(model="llama-3.1-8b", system="hgx_h200", isl=1000, osl=200, rate=100, replicas=16,
                      requests=3000, fail_at=10, fail_node=1)
    retries = cf.simulation_run(res).requests["retries"]
    assert res.failed == 0 and res.completed == 3000
    assert res.retried == int((retries > 0).sum()) > 0 and int(retries.max()) == 1
    lost = [e.model_dump() for e in res.events if e.event == "replica_lost"]
    assert [e["replica"] for e in lost] == list(range(8, 16)) and all(e["cause"] == "node 1" for e in lost)
    assert sum(e["retried"] for e in lost) == res.retried


def test_failures_due_at_one_instant_all_land_before_retries():
    """Two replicas named separately, lost at the same time: none of their requests is routed onto the other."""
    reqs = _requests(600, 30, SampledLengthSpec(value=500), SampledLengthSpec(value=100))
    cfg = SimulationConfig(replicas=3, failures=[{"at_s": 5.0, "replica": 0}, {"at_s": 5.0, "replica": 1}])
    report, run = simulate(RooflineStep(), cfg, requests=reqs)
    assert report["failed"] == 0 and report["completed"] == 600
    assert int(run.requests["retries"].max()) == 1
    assert set(run.requests["replica"][run.requests["retries"] > 0].tolist()) == {2}
