"""Capacity mode (issue 13): ``plan --nodes N`` / ``--gpus N`` with no load -> every layout that fits in the budget,
the load it carries within the SLOs (best first), its Pareto front; each row agrees with ``perf`` at its batch."""

import json

import pytest
from typer.testing import CliRunner

import clusterfit as cf
from clusterfit.cli import app
from clusterfit.errors import ClusterfitError
from clusterfit.planning.budget import replicas_that_fit

L70 = dict(model="meta-llama/Llama-3.1-70B", precisions=["fp8"], systems=["h200"], isl=1024, osl=1024,
           ttft_ms=2000, tpot_ms=30, engine="trtllm")


@pytest.fixture(scope="module")
def one_node():
    return cf.plan(nodes=1, **L70)


def test_capacity_rows_agree_with_perf_at_their_batch(one_node):
    cap = one_node.capacity
    assert cap is not None and cap.nodes == 1 and cap.budget_gpus == {"hgx_h200": 8}
    rows = [r for r in cap.layouts if r.mode == "aggregated"]
    assert {r.layout for r in rows} >= {"TP1", "TP2", "TP4", "TP8"}
    best_perf = 0.0
    for r in rows:
        p = cf.perf(model=L70["model"], precision="fp8", system="h200", tp=r.tp, isl=1024, osl=1024, engine="trtllm",
                    concurrency=int(r.batch))
        mean_tpot = 1.0 / r.tokens_per_s_per_user
        assert abs(p.tpot_s / mean_tpot - 1) < 0.10, (r.layout, p.tpot_s, mean_tpot)
        per_gpu = p.output_tokens_per_s_per_gpu * r.gpus_used / 8        # perf is per replica GPU
        assert abs(per_gpu / r.output_tokens_per_s_per_gpu - 1) < 0.10, (r.layout, per_gpu,
                                                                       r.output_tokens_per_s_per_gpu)
        if p.tpot_s <= 0.030:
            best_perf = max(best_perf, per_gpu)
    rec = one_node.recommended
    assert rec is not None and rec.requests_per_s == max(r.requests_per_s for r in cap.layouts)
    assert rec.output_tokens_per_s / 8 >= 0.9 * best_perf       # within 10% of the best perf finds for the node
    assert rec.tpot_s <= 0.030 and rec.ttft_s <= 2.0 and rec.rented_gpus == 8


def test_capacity_pareto_and_ranking(one_node):
    front = one_node.pareto["hgx_h200"]
    assert front and all(a.tokens_per_s_per_user < b.tokens_per_s_per_user for a, b in zip(front, front[1:]))
    assert all(a.output_tokens_per_s_per_gpu > b.output_tokens_per_s_per_gpu for a, b in zip(front, front[1:]))
    rps = [r.requests_per_s for r in one_node.capacity.layouts]
    assert rps == sorted(rps, reverse=True)
    assert "capacity of 1 node(s)" in one_node.workload


def test_gpu_budget_and_spares():
    res = cf.plan(gpus=4, failover=1, **{**L70, "engine": "vllm"})
    assert res.capacity.gpus == 4 and res.capacity.budget_gpus == {"hgx_h200": 4}
    for r in res.capacity.layouts:
        assert r.gpus_used <= 4 and r.serving_replicas >= 1
        assert r.spare_replicas >= 1
    assert res.recommended.rented_gpus == 4                 # h200 quote rents single GPUs


def test_replicas_packed_into_the_budget():
    assert replicas_that_fit(2, 8, 16) == 8
    assert replicas_that_fit(16, 8, 16) == 1 and replicas_that_fit(16, 8, 24) == 1
    assert replicas_that_fit(4, 8, 12) == 3 and replicas_that_fit(8, 8, 4) == 0


def test_bad_budget_input():
    with pytest.raises(ClusterfitError, match="not both"):
        cf.plan(nodes=1, gpus=8, **L70)
    with pytest.raises(ClusterfitError, match="drop rate"):
        cf.plan(nodes=1, rate=3, **L70)


def test_cli_capacity_json_and_table():
    args = ["plan", "meta-llama/Llama-3.1-8B", "--system", "h200", "--nodes", "1", "--isl", "1000", "--osl", "200",
            "--ttft-ms", "1000", "--tpot-ms", "40"]
    out = CliRunner().invoke(app, args + ["--json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["capacity"]["nodes"] == 1 and d["capacity"]["layouts"][0]["requests_per_s"] > 0
    assert d["recommended"]["requests_per_s"] == d["capacity"]["layouts"][0]["requests_per_s"]
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and "Load carried within the SLOs by 1 node(s)" in table.output


def test_pareto_front_packs_spares_under_the_systems_price(run_json):
    """The capacity front packed N+k spares as if every system were rented per node (price None) while the layouts
    used the system's quote: on 8 GPUs of an H200 rented per GPU, N+1 keeps 1 spare TP1 replica and 7 serve (the
    recommendation), but the front set a whole node of 8 spares aside, left no TP1 replica serving and dropped
    the recommended point. The recommended layout at its batch is a point of the front, at its output tokens/s
    over the 8 GPUs of the budget."""
    d = run_json("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--ttft-ms", "1000", "--tpot-ms", "40",
                 "--system", "h200", "--failover", "1", "--gpus", "8")
    rec = d["recommended"]
    assert (rec["layout"], rec["serving_replicas"], rec["spare_replicas"]) == ("TP1", 7, 1)
    on_front = [p for p in d["pareto"]["hgx_h200"]
                if p["mode"] == "aggregated" and p["layout"] == "TP1" and p["batch"] == rec["batch"]]
    assert len(on_front) == 1
    assert on_front[0]["output_tokens_per_s_per_gpu"] == pytest.approx(rec["output_tokens_per_s"] / 8, rel=1e-9)
