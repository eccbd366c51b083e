"""The planner end to end on catalog models: monotonicity, impossible SLOs, the GLM-5.3 node question, CLI."""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterfit.planning.cost import EndpointPrice
from clusterfit.planning.planner import PlanQuestion as PlanRequest
from clusterfit.planning.planner import plan_cluster


def plan(question: PlanRequest) -> dict:
    """The plan's JSON shape (what `clusterfit plan --json` prints)."""
    return plan_cluster(question).model_dump(mode="json")
from clusterfit.planning.workload import SLO, Load, Workload

MODEL = "Qwen/Qwen3-8B"


def _plan(rate=20.0, ttft=2.0, tpot=0.05, systems=("dgx_h100",), kind="requests_per_s", **kw):
    wl = Workload.simple(2000, 400, Load(kind, rate))
    return plan(PlanRequest(MODEL, wl, SLO(ttft, tpot), systems=list(systems), **kw))


@settings(max_examples=8, deadline=None)
@given(factor=st.floats(1.0, 4.0), rate=st.floats(5.0, 200.0))
def test_tighter_slo_never_cheaper(factor, rate):
    loose = _plan(rate=rate)
    tight = _plan(rate=rate, ttft=2.0 / factor, tpot=0.05 / factor)
    if tight["feasible"]:
        assert tight["recommended"]["cost_per_hour"] >= loose["recommended"]["cost_per_hour"] - 1e-9


@settings(max_examples=8, deadline=None)
@given(rate=st.floats(1.0, 300.0), more=st.floats(1.0, 5.0))
def test_more_load_never_fewer_replicas(rate, more):
    a = _plan(rate=rate, disaggregated=False)["recommended"]
    b = _plan(rate=rate * more, disaggregated=False)["recommended"]
    if a["layout"] == b["layout"]:
        assert b["replicas"] >= a["replicas"]
    assert b["total_gpus"] >= a["total_gpus"] or b["cost_per_hour"] >= a["cost_per_hour"] - 1e-9


@settings(max_examples=10, deadline=None)
@given(p_in=st.floats(0.01, 5.0), p_out=st.floats(0.01, 20.0), up=st.floats(1.0, 10.0))
def test_higher_endpoint_price_never_favours_endpoint(p_in, p_out, up):
    base = _plan(rate=30.0, endpoint=EndpointPrice(p_in, p_out))["endpoint"]
    dear = _plan(rate=30.0, endpoint=EndpointPrice(p_in * up, p_out * up))["endpoint"]
    if base["verdict"] == "cluster":
        assert dear["verdict"] == "cluster"
    if base["break_even_requests_per_s"] is not None:
        assert dear["break_even_requests_per_s"] <= base["break_even_requests_per_s"] + 1e-9


def test_load_kinds_agree():
    # 20 req/s of 400 output tokens is 8000 output tokens/s: same plan.
    a = _plan(rate=20.0)["recommended"]
    b = _plan(rate=8000.0, kind="output_tokens_per_s")["recommended"]
    assert (a["total_gpus"], a["layout"]) == (b["total_gpus"], b["layout"])


def test_impossible_slo_names_closest_and_binding():
    r = _plan(tpot=0.0002, ttft=0.001)
    assert r["feasible"] is False and r["recommended"] is None
    closest = r["closest"]
    assert closest["system"] == "dgx_h100" and closest["missed"]
    assert closest["binding"] in ("bandwidth", "compute", "network", "memory", "overhead", "slo")
    assert "No configuration meets" in r["explanation"] and "Closest" in r["explanation"]


def test_failover_adds_replicas():
    a = _plan(rate=50.0, disaggregated=False)["recommended"]
    b = _plan(rate=50.0, disaggregated=False, failover=2)["recommended"]
    assert b["spare_replicas"] == 2 and b["serving_replicas"] == a["serving_replicas"]


def test_glm53_fp8_node_question():
    wl = Workload.simple(4000, 500, Load("requests_per_s", 5))
    r = plan(PlanRequest("zai-org/GLM-5.3", wl, SLO(2.0, 0.05), systems=["hgx_h200", "dgx_b200", "dgx_h100"],
                         precisions=["fp8"], failover=1))
    rows = {row["system"]: row for row in r["per_system"]}
    assert set(rows) == {"hgx_h200", "dgx_b200", "dgx_h100"}
    assert rows["hgx_h200"]["nodes_per_replica"] == 1 and rows["dgx_b200"]["nodes_per_replica"] == 1
    h100 = rows["dgx_h100"]
    assert h100["nodes_per_replica"] == 2 and h100["internode_replica"] is True
    assert h100["step_breakdown_s"]["communication_s"] > 0
    for row in rows.values():
        assert row["tpot_s"] <= 0.05 and row["ttft_s"] <= 2.0
        assert row["cost_per_hour"] > 0 and row["cost_per_mtok_out"] > 0


def test_cli_json_shape(tmp_path):
    out = subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", "plan", MODEL, "--isl", "2000", "--osl", "400",
                          "--rate", "20", "--ttft-ms", "2000", "--tpot-ms", "50", "--system", "h100", "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    keys = {"system", "precision", "tp", "pp", "ep", "dp", "nodes_per_replica", "gpus_per_replica", "replicas",
            "total_gpus", "cost_per_hour", "cost_per_mtok_out", "ttft_s", "tpot_s", "binding"}
    assert keys <= set(data["per_system"][0]) and keys <= set(data["recommended"])
    assert data["configurations_evaluated"] > 0


def test_cli_errors():
    bad = subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", "plan", MODEL, "--isl", "100", "--osl", "10"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "target load" in bad.stderr
    bad = subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", "plan", MODEL, "--isl", "100", "--osl", "10",
                          "--rate", "1", "--endpoint-price", "in=x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "endpoint-price" in bad.stderr


@pytest.mark.parametrize("extra, message", [
    (("--verify-requests", "500"), "--verify-requests: sizes the simulation --verify runs; give --verify too"),
    (("--tpot-percentile", "99"), "--tpot-percentile: judges the TPOT target; give --tpot-ms"),
    (("--min-goodput", "0.5"), "--min-goodput: judges the latency targets; give --ttft-ms or --tpot-ms"),
])
def test_options_that_would_be_ignored_are_refused(run_cli, extra, message):
    """Each ran before with the option silently ignored (no target to judge, no simulation to size)."""
    code, out, err = run_cli("plan", MODEL, "--isl", "100", "--osl", "10", "--rate", "1", "--system", "h200", *extra)
    assert code == 2 and message in " ".join(err.split()), err


def test_a_load_that_fills_whole_replicas_exactly_is_sized(run_cli):
    """100,000 one-token requests/s over Qwen3-0.6B replicas capped at 16 running sequences: the replica count is
    rounded up from load / capacity, and the capacity of the best batch then fell an ulp short of load / replicas,
    an IndexError before (found by random calls of api.plan)."""
    code, out, err = run_cli("plan", "Qwen/Qwen3-0.6B", "--isl", "100", "--osl", "1", "--system", "gh200_144gb_1x",
                             "--engine", "sglang", "--tokens-per-s", "100000", "--max-num-seqs", "16", "--json")
    assert code == 0, err
    rec = json.loads(out)["recommended"]
    assert rec["batch"] == 16 and rec["serving_replicas"] >= 1


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "front.png"
    r = subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", "plan", MODEL, "--isl", "2000", "--osl", "400",
                        "--rate", "20", "--tpot-ms", "50", "--system", "h100", "--system", "h200",
                        "--plot", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 1000
    assert f"plot: {out}" in r.stdout   # says where the plot went, as simulate does


def test_scenario_cli_agent_sessions_and_overrides(tmp_path):
    sc = tmp_path / "agents.yaml"
    sc.write_text(
        "model: Qwen/Qwen3-8B\nsystems: [h100_nvl_8x]\n"
        "workload:\n  agent: {shared_prefix_tokens: 4000, turns: 6, input_tokens_per_turn: 300,\n"
        "          output_tokens_per_turn: 300, think_time_s: 3}\n  load: {concurrent_sessions: 200}\n"
        "slo: {ttft_ms: 2000, tpot_ms: 40}\ncost: {failover: 1, prices: {h100_nvl_8x: 3.0}}\n"
        "simulation: {requests: 100}\n")
    out = subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", "plan", "--scenario",
                          str(sc), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)["recommended"]
    g = rec["gpus_per_replica"]   # N+1 on whole nodes: a node's worth of spares (planner.spare_replicas); the
    assert rec["price_per_gpu_hour"] == 3.0 and rec["rent_unit"] == "node"   # catalog does not price h100_nvl_8x
    assert rec["spare_replicas"] == (min(8 // g, rec["serving_replicas"]) if g < 8 else 1)
    assert "agent sessions" in json.loads(out.stdout)["workload"]
    more = subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", "plan", "--scenario",
                           str(sc), "--concurrency", "2000", "--json"], capture_output=True, text=True)
    assert json.loads(more.stdout)["recommended"]["total_gpus"] >= rec["total_gpus"]


def test_long_tailed_lengths_cost_more_than_their_mean():
    from clusterfit.planning.workload import LengthDist

    fixed = Workload.simple(2000, 400, Load("requests_per_s", 40))
    tailed = Workload(LengthDist.from_percentiles(2000, {50: 1000, 99: 16000}), LengthDist.fixed(400),
                      Load("requests_per_s", 40))
    slo = SLO(0.8, 0.05, 99.0)
    a = plan(PlanRequest(MODEL, fixed, slo, systems=["dgx_h100"], disaggregated=False))
    b = plan(PlanRequest(MODEL, tailed, slo, systems=["dgx_h100"], disaggregated=False))
    if b["feasible"]:
        assert b["recommended"]["cost_per_hour"] >= a["recommended"]["cost_per_hour"]


def test_verify_simulates_the_recommended_plan():
    out = subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", "plan", MODEL, "--isl", "1000",
                          "--osl", "200", "--rate", "5", "--ttft-ms", "2000", "--tpot-ms", "50", "--system", "h100",
                          "--no-disagg", "--verify", "--verify-requests", "300", "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout)["verify"]
    assert v["simulated"] is True and v["requests"] == 300
    assert v["completed"] + v["rejected"] + v["failed"] == 300


def test_a_system_without_a_plan_says_why(run_cli):
    """A system whose layouts fit but none meets the SLOs is named with its closest miss (the table left it out
    without a word): 8x L40S over PCIe cannot decode Llama-3.1-8B at 4 ms per token at any TP (8.3 ms at TP8, batch
    1), an H200 can (TP4)."""
    code, out, err = run_cli("plan", "llama-3.1-8b", "--system", "h200", "--system", "l40s", "--isl", "500", "--osl",
                             "100", "--rate", "1", "--tpot-ms", "4", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert [r["system"] for r in res["per_system"]] == ["hgx_h200"]
    assert len(res["no_plan"]) == 1 and res["no_plan"][0].startswith("l40s_8x: no layout meets the targets; closest")
    assert "vs target 4 ms" in res["no_plan"][0]
    code, out, err = run_cli("plan", "llama-3.1-8b", "--system", "h200", "--system", "l40s", "--isl", "500", "--osl",
                             "100", "--rate", "1", "--tpot-ms", "4")
    assert code == 0 and "No plan on l40s_8x: no layout meets the targets" in " ".join(out.split()), err


def test_capacity_mode_says_when_nothing_fits_the_budget(run_cli):
    """Llama-3.1-70B in bf16 (141 GB of weights) cannot fit one 80 GB H100: the answer says the budget is too small
    (it said no layout 'meets' the SLOs, as if one fitted)."""
    code, out, err = run_cli("plan", "llama-3.1-70b", "--system", "h100", "--isl", "1000", "--osl", "200",
                             "--ttft-ms", "1000", "--tpot-ms", "50", "--gpus", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["explanation"].startswith("No layout of Llama-3.1-70B fits in 1 GPU(s): the smallest that "
                                                     "holds it needs 2 GPUs")


def test_a_kv_bound_replica_runs_the_batch_its_cache_admits(run_json):
    """Llama-3.1-70B on 2 H200s at 2048 + 512 tokens: the KV cache admits 165 sequences (perf --max-throughput's
    batch), within the 60 ms TPOT target; the plan's batch grid jumped from 145 to 173 and stopped at 145."""
    admitted = run_json("perf", "llama-3.1-70b", "--system", "h200", "--tp", "2", "--isl", "2048", "--osl", "512",
                        "--max-throughput")["batch"]
    plan = run_json("plan", "llama-3.1-70b", "--isl", "2048", "--osl", "512", "--rate", "4", "--ttft-ms", "2000",
                    "--tpot-ms", "60", "--system", "h200")
    row = plan["per_system"][0]
    assert row["layout"] == "TP2" and row["max_batch_within_slo"] == admitted == 165


def test_the_replicas_column_separates_spares(run_cli):
    """With --failover 1 the column read '4 (3-5)+1' for 3 serving replicas and 1 spare (4 in all): it now gives
    the serving count, its interval, then the spares."""
    from rich.console import Console

    from clusterfit.commands.plan import render
    from clusterfit.schema import PlanResult

    code, out, err = run_cli("plan", "llama-3.1-70b", "--system", "h200", "--isl", "2000", "--osl", "300", "--rate",
                             "10", "--ttft-ms", "1500", "--tpot-ms", "40", "--failover", "1", "--no-disagg", "--json")
    assert code == 0, err
    result = PlanResult.model_validate(json.loads(out))
    row = result.per_system[0]
    iv = row.serving_replicas_interval
    assert row.spare_replicas == 1 and iv is not None
    console = Console(width=200, record=True)
    render(result, console)
    assert f" {row.replicas - 1} ({iv.lo:.0f}-{iv.hi:.0f}) + 1 spare " in console.export_text()


def test_why_names_the_batch_its_step_figures_are_at(run_json):
    """The explanation gives the operating batch's TPOT and the binding batch's decode step: the step it quotes
    (step_breakdown_s) is at max_batch_within_slo, and it says so; perf at that batch has the same step."""
    out = run_json("plan", "llama-3.1-8b", "--system", "h200", "--isl", "1024", "--osl", "256", "--rate", "20",
                   "--ttft-ms", "500", "--tpot-ms", "30")
    r = out["recommended"]
    top = r["max_batch_within_slo"]
    assert r["batch"] < top
    assert f"-bound at batch {top:.0f} (" in r["why"]
    assert f"of the {r['step_breakdown_s']['step_s'] * 1e3:.1f} ms step" in r["why"]
    perf = run_json("perf", "llama-3.1-8b", "--system", "h200", "--tp", "1", "--isl", "1024", "--osl", "256",
                    "--batch", str(int(top)), "--context", str(1024 + 256 // 2))
    assert perf["breakdown"]["step_s"] == pytest.approx(r["step_breakdown_s"]["step_s"], rel=1e-12)


def test_a_cost_tie_with_a_disaggregated_plan_names_it(run_json):
    """examples/chat-lognormal.yaml: dgx_b200's 15 x TP1 tied in cost with a disaggregated plan of 15 GPUs; the why
    named it '6 x TP1' (its decode pool alone), which at $3.75 per GPU-hour is not a tie. The same scenario at 9
    requests/s has dgx_h100's 10 GPUs tie with a disaggregated plan of TP2 pools (at its own load no plan ties since
    the in-graph kernel cost was bounded at 3.5 us)."""
    import re

    out = run_json("plan", "--scenario", "examples/chat-lognormal.yaml", "--rate", "9")
    h100 = next(r for r in out["per_system"] if r["system"] == "dgx_h100")
    assert h100["mode"] == "aggregated" and h100["total_gpus"] == 10
    m = re.search(r"cost tie with disaggregated (\d+)P(\d+)D \(prefill TP(\d+), decode TP(\d+)\)", h100["why"])
    assert m is not None, h100["why"]
    prefill, decode, tp_p, tp_d = map(int, m.groups())
    assert prefill * tp_p + decode * tp_d == h100["total_gpus"]     # the whole disaggregated plan, both pools


def test_scenario_percentiles_take_what_the_command_line_takes(tmp_path, run_cli):
    """A scenario's slo.ttft_percentile took only 50, 90, 95 or 99 while --ttft-percentile takes any 50 <= p < 100
    (the README says so for both): 97 was refused in the file and accepted on the command line."""
    text = Path("examples/chat-lognormal.yaml").read_text()
    assert "ttft_percentile: 99" in text
    f = tmp_path / "p97.yaml"
    f.write_text(text.replace("ttft_percentile: 99", "ttft_percentile: 97"))
    code, out, err = run_cli("plan", "--scenario", str(f), "--json")
    assert code == 0, err
    assert json.loads(out)["slo"].startswith("TTFT p97 <= 1500 ms")
    f.write_text(text.replace("ttft_percentile: 99", "ttft_percentile: 100"))
    code, _, err = run_cli("plan", "--scenario", str(f))
    assert code == 2 and "slo.ttft_percentile" in err and "less than 100" in err
