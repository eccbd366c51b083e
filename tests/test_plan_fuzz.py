"""Defects a fuzzing pass found in plan and deploy: price overrides, attention-DP chunk sizes, headroom and capacity
mode under failover, one-token outputs."""

from __future__ import annotations

from pathlib import Path

import clusterfit as cf

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

LLAMA_20 = ("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--rate", "20", "--ttft-ms", "1000",
            "--tpot-ms", "40", "--system", "h200", "--system", "h100")


def test_price_override_keeps_the_catalog_rent_unit(run_json):
    """--price hgx_h200=2.25 (the catalog's own per-GPU price) switched hgx_h200 to whole nodes: TP2 on a rented
    8-GPU node at $18.00/h, and dgx_h100 recommended; without it, TP1 on 1 GPU at $2.25/h."""
    plain = run_json(*LLAMA_20)
    priced = run_json(*LLAMA_20, "--price", "hgx_h200=2.25")
    for d in (plain, priced):
        rec = d["recommended"]
        assert rec["system"] == "hgx_h200" and rec["rent_unit"] == "gpu", rec
        assert rec["layout"] == "TP1" and rec["rented_gpus"] == 1 and rec["cost_per_hour"] == 2.25
    assert "user override" in priced["recommended"]["price_source"]
    # a price by GPU id or a scenario's cost.prices takes the same way
    by_gpu = run_json(*LLAMA_20, "--price", "h200_sxm=2.0")["recommended"]
    assert by_gpu["system"] == "hgx_h200" and by_gpu["rent_unit"] == "gpu" and by_gpu["cost_per_hour"] == 2.0


def test_price_override_without_a_catalog_quote_rents_whole_nodes(run_json):
    rec = run_json("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--rate", "20", "--ttft-ms", "1000",
                   "--tpot-ms", "40", "--system", "h200_nvl_8x", "--price", "h200_nvl_8x=3.0")["recommended"]
    assert rec["rent_unit"] == "node" and rec["rented_gpus"] == 8 * rec["nodes"]
    assert "whole nodes" in rec["price_source"]


def test_scenario_price_at_the_catalog_value_changes_nothing(tmp_path, run_json):
    """examples/chat-lognormal.yaml prices dgx_h100 at its catalog $2.49: that made dgx_h100 whole-node rented
    (12 x TP4, 48 GPUs, $119.52/h) against 40 GPUs at $99.60/h without the line."""
    src = EXAMPLES / "chat-lognormal.yaml"
    text = src.read_text()
    assert "prices: {dgx_h100: 2.49}" in text
    bare = tmp_path / "chat.yaml"
    bare.write_text(text.replace("  prices: {dgx_h100: 2.49}\n", ""))
    rows = [{r["system"]: (r["layout"], r["mode"], r["replicas"], r["rented_gpus"], r["rent_unit"],
                           round(r["cost_per_hour"], 6)) for r in run_json("plan", "--scenario", str(f))["per_system"]}
            for f in (src, bare)]
    assert rows[0] == rows[1]
    assert rows[0]["dgx_h100"][4] == "gpu"


QWEN_DP = ("qwen3-30b", "--isl", "2000", "--osl", "500", "--rate", "10", "--ttft-ms", "2000", "--tpot-ms", "35",
           "--system", "h200")


def _flag(files: list[dict], name: str) -> int:
    """The value of ``--name N`` / ``name: N`` in the generated launch files (one value across them)."""
    import re

    found = {int(m) for f in files if f["path"] != "README.md"
             for m in re.findall(rf"{name}[\s:=]+(\d+)", f["text"])}
    assert len(found) == 1, (name, found)
    return found.pop()


def _per_step(files: list[dict]) -> int:
    import re

    readme = next(f["text"] for f in files if f["path"] == "README.md")
    return int(re.search(r"\((\d+) tokens per step", readme).group(1))


def test_sglang_deploy_writes_the_planned_chunk_under_attention_dp(tmp_path, run_json):
    """SGLang divides --chunked-prefill-size among the attention-DP ranks. With --max-num-batched-tokens 8192 the
    plan (TP1 DP2 EP2) assumed 4096 per rank, but deploy took the plan's per-rank 4096 as the user's setting and
    divided it again: --chunked-prefill-size 4096 and '2048 batched tokens per step' (and memory fraction 0.928
    against the plan's 0.894); deploy --plan did the same."""
    for given in ([], ["--max-num-batched-tokens", "8192"]):
        args = (*QWEN_DP, "--engine", "sglang", *given)
        plan = run_json("plan", *args)
        rec, es = plan["recommended"], plan["engine_settings"]
        assert rec["layout"] == "TP1 DP2 EP2" and es["max_num_batched_tokens"] == 4096
        saved = tmp_path / f"plan{len(given)}.json"
        saved.write_text(__import__("json").dumps(plan))
        for files in (run_json("deploy", *args, "--out", str(tmp_path / f"a{len(given)}"))["files"],
                      run_json("deploy", "--plan", str(saved), "--out", str(tmp_path / f"b{len(given)}"))["files"]):
            assert _flag(files, "--chunked-prefill-size") == 4096 * 2
            assert _per_step(files) == 4096
            assert _flag(files, "--attn-dp-size") == 2
            launch = "".join(f["text"] for f in files if f["path"] != "README.md")
            assert f"--mem-fraction-static {es['fraction']:g}" in launch


def test_sglang_capacity_plan_deploys_its_chunk(tmp_path, run_json):
    """A capacity-mode plan reported the engine before its layout (max_num_batched_tokens 8192, fraction 0.88,
    max_num_seqs 1024); it reports the recommended replica's, as a load plan does, so deploy --plan writes it."""
    plan = run_json("plan", *QWEN_DP[:5], *QWEN_DP[7:], "--nodes", "1", "--engine", "sglang",
                    "--max-num-batched-tokens", "8192")
    rec, es = plan["recommended"], plan["engine_settings"]
    # the replica's 8192-token chunk is split among its attention-DP ranks (DP4 since the host's per-sequence cost is
    # shared by the ranks, c916715; DP2 before)
    per_rank = 8192 // rec["dp"]
    assert rec["dp"] > 1 and es["max_num_batched_tokens"] == per_rank and es["given"] == ["max_num_batched_tokens"]
    saved = tmp_path / "cap.json"
    saved.write_text(__import__("json").dumps(plan))
    files = run_json("deploy", "--plan", str(saved), "--out", str(tmp_path / "d"))["files"]
    assert _flag(files, "--chunked-prefill-size") == 8192 and _per_step(files) == per_rank
    assert f"--mem-fraction-static {es['fraction']:g}" in "".join(f["text"] for f in files)


def test_vllm_and_trtllm_deploy_the_planned_tokens_per_step(tmp_path, run_json):
    """vLLM's --max-num-batched-tokens and TensorRT-LLM's max_num_tokens are per attention-DP rank: written as
    planned."""
    for engine, flag in (("vllm", "--max-num-batched-tokens"), ("trtllm", "--max_num_tokens")):
        args = (*QWEN_DP, "--engine", engine, "--max-num-batched-tokens", "8192", "--no-disagg")
        plan = run_json("plan", *args)
        assert plan["recommended"]["dp"] == 2 and plan["engine_settings"]["max_num_batched_tokens"] == 8192
        files = run_json("deploy", *args[:-1], "--out", str(tmp_path / engine))["files"]
        assert _flag(files, flag) == 8192 and _per_step(files) == 8192


def test_headroom_keeps_the_failover_rule_on_node_rented_systems():
    """mi300x rented per node, N+1: 2 x TP2 (1 + 1) on 2 nodes, 16 GPUs. Headroom counted 7 replicas serving (16 / 2
    less 1 spare, 519.09 requests/s), but with every rented GPU serving a node loss takes its 4 replicas at once, so
    4 of the 8 are spares (296.6). Per-GPU renting (hgx_h200) keeps 1 spare, as before."""
    base = dict(model="llama-3.1-8b", isl=1000, osl=200, rate=20, ttft_ms=1000, tpot_ms=40)
    r = cf.plan(systems=["mi300x"], failover=1, **base).recommended
    assert r is not None and r.rent_unit == "node" and r.layout == "TP2" and r.rented_gpus == 16
    per_replica = r.full_load_requests_per_s / r.serving_replicas
    assert abs(r.headroom_requests_per_s - 4 * per_replica) < 1e-6 * per_replica, r.headroom_requests_per_s
    without = cf.plan(systems=["mi300x"], failover=0, **base).recommended   # one node, no spares: 4 serving
    assert without is not None and without.rented_gpus == 8
    assert abs(without.headroom_requests_per_s - 4 * per_replica) < 1e-6 * per_replica
    gpu = cf.plan(systems=["h200"], failover=1, **base).recommended        # 1 + 1 rented GPUs: 1 serving
    assert gpu is not None and gpu.rent_unit == "gpu" and gpu.rented_gpus == 2
    assert gpu.headroom_requests_per_s == gpu.full_load_requests_per_s


CAP = ("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--ttft-ms", "1000", "--tpot-ms", "40")


def test_capacity_mode_says_when_spares_leave_no_replica_serving(run_cli, run_json):
    """One mi300x node with --failover 1 said 'No layout that fits in 1 node(s) meets TTFT ... with N+1 spares' with
    no_plan empty, though every layout meets the SLOs: the node is the failure unit, so one node cannot hold a spare.
    The answer names the failure unit and the smallest budget that keeps a replica serving, which then plans."""
    d = run_json(*CAP, "--system", "mi300x", "--failover", "1", "--nodes", "1")
    assert not d["feasible"] and d["recommended"] is None
    assert "meets TTFT" not in d["explanation"] and "failure unit" in d["explanation"]
    assert "smallest budget that keeps a replica serving is 2 node(s)" in d["explanation"]
    assert len(d["no_plan"]) == 1 and d["no_plan"][0].startswith("mi300x_platform: ")
    assert "rented per node" in d["no_plan"][0]
    code, out, err = run_cli(*CAP, "--system", "mi300x", "--failover", "1", "--nodes", "1")
    assert code == 0 and "smallest budget that keeps a replica serving is 2 node(s)" in " ".join(out.split())
    two = run_json(*CAP, "--system", "mi300x", "--failover", "1", "--nodes", "2")["recommended"]
    assert two["serving_replicas"] >= 1 and two["spare_replicas"] >= 1
    # per-GPU renting: the failure unit is the replica's GPUs; 1 GPU holds no spare, 2 do
    d = run_json(*CAP, "--system", "h200", "--failover", "1", "--gpus", "1")
    assert not d["feasible"] and "smallest budget that keeps a replica serving is 2 GPU(s)" in d["explanation"]
    assert "rented per GPU" in d["no_plan"][0]
    assert run_json(*CAP, "--system", "h200", "--failover", "1", "--gpus", "2")["recommended"]["serving_replicas"] == 1


def test_capacity_mode_lists_each_system_without_a_plan(run_json):
    """A system left out of the capacity answer is listed in no_plan with its reason (it was always empty)."""
    d = run_json(*CAP, "--system", "mi300x", "--system", "h200", "--failover", "1", "--nodes", "1")
    assert d["feasible"] and [r["system"] for r in d["per_system"]] == ["hgx_h200"]
    assert [line.split(":")[0] for line in d["no_plan"]] == ["mi300x_platform"]
    d = run_json("plan", "llama-3.1-70b", "--isl", "1000", "--osl", "200", "--ttft-ms", "1000", "--tpot-ms", "40",
                 "--system", "h200", "--gpus", "1")
    assert d["no_plan"] == ["hgx_h200: no layout that meets the targets fits in 1 GPU(s); the smallest, TP2, needs "
                            "2 GPUs"]


ONE_TOKEN = ("plan", "qwen3-8b", "--isl", "8000", "--osl", "1", "--ttft-ms", "2000", "--system", "h200")


def test_one_output_token_reports_no_tpot(tmp_path, run_cli, run_json):
    """With --osl 1 no request decodes (a --tpot-ms is refused), yet rows reported tpot_s 0.518 s and
    tokens_per_s_per_user 4.34: the mean TPOT model's prefill spread over one output token. They are null now, with
    their intervals, in load and capacity mode, in --verify's plan_predicted, and the deploy summary says no TPOT."""
    d = run_json(*ONE_TOKEN, "--rate", "3")
    assert d["one_output_token"] is True
    for r in d["per_system"] + [d["recommended"]]:
        assert r["tpot_s"] is None and r["tokens_per_s_per_user"] is None
        assert "tpot_s_interval" not in r and "tokens_per_s_per_user_interval" not in r
        assert r["ttft_s"] > 0
    assert "TPOT" not in d["recommended"]["explanation"]
    code, out, err = run_cli(*ONE_TOKEN, "--rate", "3")
    assert code == 0 and "null in --json" in " ".join(out.split()) and "decode step" not in out.split("TPOT -")[1][:200]
    bound = run_json(*ONE_TOKEN, "--rate", "3", "--confidence", "90")["recommended"]["sized_on"]
    assert bound["tpot_s"] is None and bound["ttft_s"] > 0
    cap = run_json(*ONE_TOKEN, "--nodes", "1")
    assert cap["recommended"]["tpot_s"] is None and cap["recommended"]["tokens_per_s_per_user"] is None
    assert all(x["tpot_s"] is None and x["tokens_per_s_per_user"] is None and "tpot_s_interval" not in x
               for x in cap["capacity"]["layouts"])
    v = run_json(*ONE_TOKEN, "--rate", "3", "--verify", "--verify-requests", "200")["verify"]
    assert v["plan_predicted"]["tpot_s"] is None and v["plan_predicted"]["tpot_mean_s"] is None
    assert all(x["metric"].split()[0] != "TPOT" for x in v["disagreements"])
    saved = tmp_path / "plan.json"
    saved.write_text(__import__("json").dumps(d))
    files = run_json("deploy", "--plan", str(saved), "--out", str(tmp_path / "d"))["files"]
    readme = next(f["text"] for f in files if f["path"] == "README.md")
    assert "one output token: no TPOT" in readme
    # a plan with outputs still reports both
    r = run_json("plan", "qwen3-8b", "--isl", "8000", "--osl", "2", "--rate", "3", "--ttft-ms", "2000", "--system",
                 "h200")["recommended"]
    assert r["tpot_s"] > 0 and r["tokens_per_s_per_user"] > 0
