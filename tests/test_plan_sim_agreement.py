"""Plan and simulate tell the same story: every bundled example's recommendation holds its SLOs when the
simulator replays it (``plan --scenario F --verify``), judged at the percentiles the scenario asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterfit import api

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.*"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_plan_holds_in_simulation(path):
    result = api.plan(scenario=path, verify=True, verify_requests=3000)
    v = result.verify
    assert v is not None and v.simulated, v and v.reason
    assert v.verdict is not None and v.slo is not None
    print(f"{path.name}: {v.mode}, {v.requests} requests: {v.verdict.text}")
    assert v.verdict.ttft_percentile == v.slo.ttft_percentile
    assert v.verdict.tpot_percentile == v.slo.tpot_percentile == 90
    assert v.verdict.min_goodput == 0.9
    assert v.holds_slo, v.verdict.text
    # the plan's own percentiles meet the targets too, and each disagreement names a figure and a reason
    rec = result.recommended
    assert rec is not None and v.plan_predicted is not None
    assert v.plan_predicted.tpot_s == rec.tpot_s
    for d in v.disagreements or []:
        assert abs(d.ratio - 1) > 0.10 and d.why


def test_examples_are_all_there():
    assert len(EXAMPLES) == 4


def test_a_prefill_bound_light_load_plan_holds_in_simulation(run_json):
    """50,000-token prompts, one output token, 0.1 requests/s: at its own full rate every batch saturates the prefill
    queue, yet the load is a tenth of one TP1 replica's. Before capacity.Underload the planner found no aggregated
    plan and recommended a disaggregated one reporting TTFT 505,740 ms (the prefill pool's TTFT at its capacity);
    now one TP1 replica with TTFT p90 4.05 s, the simulator's 3.81 s on the same replica and load."""
    load = ("--isl", "50000", "--osl", "1", "--rate", "0.1")
    plan = run_json("plan", "openai/gpt-oss-20b", "--system", "h200_nvl_8x", *load)["recommended"]
    assert (plan["mode"], plan["layout"], plan["replicas"]) == ("aggregated", "TP1", 1)
    sim = run_json("simulate", "openai/gpt-oss-20b", "--system", "h200_nvl_8x", "--tp", "1", "--replicas", "1", *load,
                   "--requests", "3000", "--seed", "1")
    assert plan["ttft_s"] == pytest.approx(sim["ttft_s"]["p90"], rel=0.1)


@pytest.mark.parametrize("osl", [1, 2, 16])
def test_max_throughput_of_short_answers_matches_the_simulator(run_json, osl):
    """Llama-3.1-8B on one H200, 1,000-token prompts and 1-16 output tokens, all requests queued. vLLM's step holds
    8,192 tokens (max_num_batched_tokens), so about 8,192 / 1,000 prompts join each step and each leaves osl steps
    later: osl x 8.192 sequences run at once, however many fit the KV cache (893). Before serving.running_batch perf
    costed 893 sequences each waiting through the whole queue: TPOT 10,610 ms at osl 2 and 1,368 ms at osl 16,
    where the simulator (the same step model, scheduled step by step) gives 200 and 204 ms."""
    load = ("meta-llama/Llama-3.1-8B-Instruct", "--system", "h200", "--isl", "1000", "--osl", str(osl))
    perf = run_json("perf", *load, "--max-throughput")
    assert perf["batch"] == pytest.approx(osl * 8192 / 1000)
    assert perf["kv_limited_batch"] > 800
    sim = run_json("simulate", *load, "--rate", "1000", "--requests", "3000", "--seed", "1")
    assert perf["output_tokens_per_s"] == pytest.approx(sim["throughput"]["output_tokens_per_s"], rel=0.05)
    if osl > 1:
        assert perf["tpot_s"] == pytest.approx(sim["tpot_s"]["p50"], rel=0.1)
    else:
        assert any(n.startswith("osl 1:") for n in perf["notes"])


def test_closed_loop_above_the_prefill_bound_queues(run_json):
    """A closed loop of 500 clients with 2-token answers: about 16 run at once (the prefill budget, as above), the
    others wait for a slot, and perf says why and counts the wait in TTFT."""
    perf = run_json("perf", "meta-llama/Llama-3.1-8B-Instruct", "--system", "h200", "--isl", "1000", "--osl", "2",
                    "--concurrency", "500")
    assert perf["batch"] == pytest.approx(2 * 8192 / 1000)
    note = next(n for n in perf["notes"] if n.startswith("concurrency 500"))
    assert "max_num_batched_tokens" in note
    # Little's law: 500 / (requests per second) in the system, all but the request's own two steps waiting
    assert perf["ttft_s"] == pytest.approx(500 / (perf["output_tokens_per_s"] / 2), rel=0.05)


def test_one_output_token_shows_no_tpot(run_cli, run_json):
    """With osl 1 the table says there is no decode instead of a TPOT, and the plan's summary names no TPOT."""
    code, out, _ = run_cli("perf", "meta-llama/Llama-3.1-8B-Instruct", "--system", "h200", "--isl", "1000", "--osl",
                           "1", "--max-throughput")
    assert code == 0 and "one output token: no decode" in out and "tokens/s per user" not in out
    code, out, _ = run_cli("plan", "meta-llama/Llama-3.1-8B-Instruct", "--isl", "1000", "--osl", "1", "--rate", "20",
                           "--system", "h200")
    assert code == 0 and "runs batch" in out and "TPOT p90" not in out.split("Recommended:")[1]
    # the table's TPOT column says "-" (it showed the engine's 56.6 ms decode step as the plan's TPOT), and so does
    # the capacity table; --json marks the plan, and tpot_s / tokens_per_s_per_user are null (tests/test_plan_fuzz.py)
    assert "TPOT -: one output token per request" in out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("hgx_h200"))
    assert row.split()[-2:] == ["-", "slo"]
    code, out, _ = run_cli("plan", "meta-llama/Llama-3.1-8B-Instruct", "--isl", "1000", "--osl", "1", "--nodes", "1",
                           "--system", "h200")
    capacity = out.split("Best layout per system")[0]
    rows = [line for line in capacity.splitlines() if line.lstrip().startswith("hgx_h200")]
    assert code == 0 and len(rows) == 4 and all(line.split()[-1] == "-" for line in rows)
    assert "TPOT" not in out.split("Recommended:")[1].split("What binds")[0]
    plan = run_json("plan", "meta-llama/Llama-3.1-8B-Instruct", "--isl", "1000", "--osl", "1", "--rate", "20",
                    "--system", "h200")
    assert plan["one_output_token"] is True and plan["per_system"][0]["tpot_s"] is None
    plan = run_json("plan", "meta-llama/Llama-3.1-8B-Instruct", "--isl", "1000", "--osl", "2", "--rate", "20",
                    "--system", "h200")
    assert "one_output_token" not in plan


def test_sglang_max_throughput_holds_its_decodes_back_as_the_simulator_does(run_json):
    """SGLang runs a prompt's chunks in prefill steps of their own, holding every decode back (Engine.mixed_batches);
    perf's request cycle now costs them so. Llama-3.1-8B on one H200 at 1000/128, all queued: perf 3,381 output
    tokens/s when it mixed the chunks into decode steps, 3,189 now, the simulator 3,050 (+10.9% -> +4.6%)."""
    load = ("meta-llama/Llama-3.1-8B-Instruct", "--system", "h200", "--isl", "1000", "--osl", "128", "--engine",
            "sglang")
    perf = run_json("perf", *load, "--max-throughput")
    sim = run_json("simulate", *load, "--rate", "100000", "--requests", str(3 * int(perf["batch"])))
    assert perf["output_tokens_per_s"] == pytest.approx(sim["throughput"]["output_tokens_per_s"], rel=0.07)


def test_a_scenario_of_one_token_answers_with_a_tpot_target_is_refused(run_cli, tmp_path):
    """The TPOT target and the one-token answers may both come from a scenario: plan and simulate judge the merged
    question, and name osl (the target is not an option here)."""
    scen = tmp_path / "scoring.yaml"
    scen.write_text("model: meta-llama/Llama-3.1-8B\nsystems: [hgx_h200]\nworkload:\n  isl: 1000\n  osl: 1\n"
                    "  load: {requests_per_s: 5}\nslo: {ttft_ms: 500, tpot_ms: 50}\nsimulation: {requests: 100}\n")
    for args in (("plan",), ("simulate",), ("simulate", "--tp", "1")):   # with a layout simulate plans nothing
        code, out, err = run_cli(*args, "--scenario", str(scen))
        assert code == 2 and out == "" and err.startswith("error: --osl:") and "no request decodes" in err, (args, err)


def test_verify_without_latency_targets_judges_nothing(run_cli):
    """plan --verify with no TTFT / TPOT target: the simulation has nothing to judge (holds_slo None), and the text
    says so; it printed 'misses the SLOs' for every such plan."""
    code, out, _ = run_cli("plan", "meta-llama/Llama-3.1-8B-Instruct", "--isl", "1000", "--osl", "200", "--rate", "1",
                           "--system", "h200", "--verify", "--verify-requests", "300")
    line = next(x for x in out.splitlines() if x.startswith("Simulated"))
    assert code == 0 and "no latency SLO to judge" in line and "misses" not in line


def test_a_short_verification_does_not_blame_saturation(run_json):
    """500 simulated requests, all completed: the steady window's lower count is a short run's noise, and the
    disagreement said 'it is saturated or rejects requests'."""
    v = run_json("plan", "deepseek-v3", "--system", "h200", "--isl", "4000", "--osl", "500", "--rate", "5",
                 "--ttft-ms", "2000", "--tpot-ms", "50", "--failover", "1", "--verify", "--verify-requests", "500")["verify"]
    (d,) = [d for d in v["disagreements"] if d["metric"].startswith("throughput")]   # the seeded run's 0.89x
    assert d["ratio"] < 1 and d["why"].startswith("every request completed") and "saturated" not in d["why"], d


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_agent_example_holds_in_simulation_under_every_engine(engine):
    """examples/agent-sessions.yaml under SGLang recommends a disaggregated plan (2P2D on dgx_b200, decode TP1 DP8 EP8
    at batch 238, plan TPOT p90 36.1 ms). The simulator ran every KV hand-off on the decode replica as a prefill step
    of its own (SGLang mixes no prefill into decode steps), holding all 238 decodes back for a ~35 ms step about once
    per request: TPOT p90 43.1 ms > 40, goodput 0.215. SGLang's decode server builds a hand-off a 'prebuilt' batch with
    no forward pass and merges it into the running batch (python/sglang/srt/disaggregation/decode.py); now TPOT p90
    36.8 ms, goodput 1.0. vLLM and TensorRT-LLM mix the hand-off into the decode step already (unchanged)."""
    path = next(p for p in EXAMPLES if p.name == "agent-sessions.yaml")
    result = api.plan(scenario=path, engine=engine, verify=True, verify_requests=3000)
    v = result.verify
    assert v is not None and v.simulated and v.verdict is not None, v and v.reason
    assert v.holds_slo, (engine, v.verdict.text)
    rec = result.recommended
    assert rec is not None and rec.tpot_s is not None
    # a decode pool's TPOT is its decode step at the running batch (capacity.decode_curve); the simulated one is no
    # more than 10% above it (--verify's disagreement threshold; SGLang's was 1.20x). It may be lower: a short run's
    # decode batch runs below the plan's operating point (TensorRT-LLM's 8 decode replicas at 3,000 requests: 0.86x)
    if rec.mode == "disaggregated":
        assert v.verdict.tpot_s <= rec.tpot_s * 1.10, engine


@pytest.mark.parametrize("rate", ["5", "30"])
def test_two_token_answers_tpot_agrees_with_the_simulator(run_json, rate):
    """Llama-3.1-8B on one H200, 1,000-token prompts and 2-token answers: TPOT is one decode step per request, which
    a prefill reaches only if it is scheduled in that step. At 5 requests/s the plan judged it at its smallest
    batch's full rate (about 30 requests/s) with the normal approximation: TPOT p90 37.1 ms where every simulated
    request took the 5.7 ms decode step; now the chunk steps come at the rate served and a request sees none with
    probability above 0.9, so 5.7 ms. At 30 requests/s the plan says 56.7 ms and the simulator 52.0 ms (5.9 ms
    before the simulator's async scheduling kept an arrival out of the step already chosen)."""
    load = ("meta-llama/Llama-3.1-8B-Instruct", "--system", "h200", "--isl", "1000", "--osl", "2", "--rate", rate,
            "--ttft-ms", "2000")
    out = run_json("plan", *load, "--verify", "--verify-requests", "5000")
    rec, v = out["recommended"], out["verify"]
    assert rec["layout"] == "TP1" and rec["serving_replicas"] == 1
    assert rec["tpot_s"] == pytest.approx(v["tpot_s"]["p90"], rel=0.10)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_plan_holds_in_simulation_under_sglang(path):
    """SGLang runs a prefill batch as a step of its own that holds every decode back (Engine.mixed_batches; the
    simulator and perf's cycle_s model it). The planner's aggregated curve priced SGLang's chunks as vLLM's, riding
    a step with the decodes, only their excess over a decode step counted: examples/chat-lognormal.yaml recommended
    17 x TP1 on dgx_b200 at batch 41, TPOT p90 37.7 ms, simulated 41.3 ms with goodput 0.856 (misses). The whole
    prefill step now delays the decodes, and the step's budget is the prompts' alone: 9 x TP2 at batch 92, plan
    39.7 ms, simulated 35.9 ms, goodput 0.97 (5,000 requests, as here)."""
    result = api.plan(scenario=path, engine="sglang", verify=True, verify_requests=5000)
    v = result.verify
    assert v is not None and v.simulated and v.verdict is not None, v and v.reason
    assert v.holds_slo, (path.name, v.verdict.text)
