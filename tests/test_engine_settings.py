"""Engine settings as inputs: --max-num-seqs, --max-num-batched-tokens, --gpu-memory-utilization and --enforce-eager
through the real CLI entry point of perf, plan and simulate (and the scenario's engine_settings: section), with
the numbers that change checked against values computed by hand."""

from __future__ import annotations

import json

import pytest

from clusterfit.engines import get_engine

MODEL = "llama-3.1-8b"
#: Llama-3.1-8B's KV bytes per token (bf16), by hand: 32 layers x 2 (K and V) x 8 KV heads x 128 head dim x 2 bytes.
KV_BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 2          # 131,072
#: The bytes an H200 exposes to PyTorch (measured; README "Memory fit").
H200_DEVICE_BYTES = 150_109_880_320
#: Kernels of one Llama-3.1-8B step in the step model, by hand: per layer 4 GEMMs (QKV, O, gate+up, down) + attention,
#: 2 norms and the activation / rotary = 8, over 32 layers.
N_KERNELS = 32 * (4 + 4)                            # 256
EAGER_LAUNCH_S = 3e-6                               # engines.EAGER_LAUNCH_S (measured on an H200, cited there)


def _perf(run_json, *extra: str) -> dict:
    return run_json("perf", MODEL, "--system", "h200", "--tp", "1", "--isl", "1024", "--osl", "128", *extra)


# ------------------------------------------------------------------------------------------------ perf
def test_max_num_seqs_caps_the_max_throughput_batch(run_json):
    base = _perf(run_json, "--max-throughput")
    capped = _perf(run_json, "--max-throughput", "--max-num-seqs", "8")
    # vLLM's default on an H200 (>= 70 GiB, not an A100) is max_num_seqs 1024 (EngineArgs.get_batch_defaults); the KV
    # cache binds first: (0.9 x 150,109,880,320 B - weights - reserve) / 131,072 B per token over 1,024 + 128 / 2
    # reserved tokens per sequence
    assert base["engine_settings"]["max_num_seqs"] == 1024
    assert base["batch"] == base["kv_limited_batch"] < 1024
    on_a100 = run_json("perf", MODEL, "--system", "a100_sxm_80gb", "--tp", "1", "--isl", "1024", "--osl", "128",
                       "--max-throughput")
    assert on_a100["batch"] == 256                   # vLLM's default max_num_seqs on an A100 binds
    assert capped["batch"] == 8
    assert capped["engine_settings"]["max_num_seqs"] == 8
    assert capped["engine_settings"]["given"] == ["max_num_seqs"]
    assert base["engine_settings"]["given"] == []
    # 8 sequences decode faster per token than 256 and carry less
    assert capped["tpot_s"] < base["tpot_s"]
    assert capped["output_tokens_per_s"] < base["output_tokens_per_s"]


def test_max_num_seqs_binds_a_concurrency_above_it(run_json):
    out = _perf(run_json, "--concurrency", "32", "--max-num-seqs", "8")
    assert out["batch"] == 8
    assert any("max_num_seqs (8)" in n for n in out["notes"])


def test_tensorrt_llm_batch_cap_is_named_and_binds_batch_until_max_num_seqs_is_given(run_cli, run_json):
    """TensorRT-LLM runs at most the max_batch_size trtllm-bench derives (tuning.py: at least 64) when the user gives
    none. DeepSeek-V3 on one H200 node at 4096 + 1024 tokens: 64 run, and the note named "the prompts the engine
    prefills" (its bound is 1024 x 8192 / 4096 = 2,048 here). --batch above the cap was costed anyway; a
    --max-num-seqs given is the cap itself (trtllm-bench takes a given max_batch_size as is)."""
    base = ("perf", "deepseek-v3", "--system", "h200", "--tp", "8", "--ep", "8", "--engine", "trtllm")
    out = run_json(*base, "--isl", "4096", "--osl", "1024", "--concurrency", "2000")
    assert out["batch"] == 64
    assert any("TensorRT-LLM's max_batch_size by trtllm-bench's rule, 64 per replica" in n for n in out["notes"])
    assert not any("prompts the engine prefills" in n for n in out["notes"])
    code, _, err = run_cli(*base, "--isl", "7168", "--osl", "1024", "--batch", "80", "--context", "8192")
    assert code == 2 and err.startswith("error: --batch: 80 sequences are more than the engine runs at once "
                                        "(TensorRT-LLM's max_batch_size by trtllm-bench's rule, 64"), err
    given = run_json(*base, "--isl", "7168", "--osl", "1024", "--batch", "80", "--context", "8192",
                     "--max-num-seqs", "100")
    assert given["batch"] == 80


def test_gpu_memory_utilization_lowers_kv_capacity_by_the_hand_computed_amount(run_json):
    fit = run_json("fit", MODEL, "--system", "h200", "--tp", "1")["results"][0]
    assert fit["device_bytes_per_gpu"] == H200_DEVICE_BYTES
    assert fit["kv_bytes_per_token_per_gpu"] == KV_BYTES_PER_TOKEN
    base = _perf(run_json, "--batch", "1", "--context", "1024")
    low = _perf(run_json, "--batch", "1", "--context", "1024", "--gpu-memory-utilization", "0.5")
    # vLLM: KV = fraction x device - weights - activations - runtime, so 0.9 -> 0.5 takes 0.4 x device bytes
    # away: 0.4 x 150,109,880,320 / 131,072 = 458,098.9 tokens
    drop = 0.4 * H200_DEVICE_BYTES / KV_BYTES_PER_TOKEN
    assert drop == pytest.approx(458_098.9, abs=0.1)
    assert base["kv_capacity_tokens"] - low["kv_capacity_tokens"] == pytest.approx(drop, rel=1e-9)
    assert low["engine_settings"]["fraction"] == 0.5
    assert low["engine_settings"]["mode"] == "total_fraction"
    # fit with the same option agrees with perf on the KV that is left (same option name, same meaning)
    fit_low = run_json("fit", MODEL, "--system", "h200", "--tp", "1", "--gpu-memory-utilization", "0.5")["results"][0]
    assert fit_low["max_kv_tokens"] == pytest.approx(low["kv_capacity_tokens"], abs=1.0)


def test_gpu_memory_utilization_is_a_free_fraction_under_trtllm(run_json):
    # TensorRT-LLM: KV = fraction x (device - weights - reserve): halving the fraction halves the KV cache
    full = _perf(run_json, "--batch", "1", "--context", "1024", "--engine", "trtllm")
    half = _perf(run_json, "--batch", "1", "--context", "1024", "--engine", "trtllm",
                 "--gpu-memory-utilization", "0.45")
    assert full["engine_settings"]["mode"] == "free_fraction"
    # budgets are whole bytes, capacities whole token slots (floored, as fit counts them): within one slot of half
    assert half["kv_capacity_tokens"] == pytest.approx(full["kv_capacity_tokens"] / 2, abs=1.0)


def test_enforce_eager_adds_one_cpu_launch_per_kernel_to_the_decode_step(run_json):
    base = _perf(run_json, "--batch", "1", "--context", "1024")
    eager = _perf(run_json, "--batch", "1", "--context", "1024", "--enforce-eager")
    launches = N_KERNELS * EAGER_LAUNCH_S                # 256 x 3 us = 0.768 ms
    assert launches == pytest.approx(0.768e-3)
    # without a graph to replay, each kernel also costs kernel_overhead_s instead of graph_kernel_overhead_s
    eng = get_engine("vllm")
    added = launches + N_KERNELS * (eng.kernel_overhead_s - eng.graph_kernel_s)
    assert eager["decode_step_s"] - base["decode_step_s"] == pytest.approx(added, rel=1e-9)
    assert eager["breakdown"]["by_op_s"]["kernel_launch_eager"] == pytest.approx(launches, rel=1e-12)
    assert "kernel_launch_eager" not in base["breakdown"]["by_op_s"]
    assert eager["engine_settings"]["enforce_eager"] is True
    assert base["engine_settings"]["enforce_eager"] is False


def test_max_num_batched_tokens_chunks_the_prefill(run_json):
    whole = _perf(run_json, "--batch", "1", "--context", "1024")
    # vLLM wants at least max_num_seqs tokens per step (test_vllm_refuses_fewer_batched_tokens_than_running_sequences)
    chunked = _perf(run_json, "--batch", "1", "--context", "1024", "--max-num-batched-tokens", "512",
                    "--max-num-seqs", "256")
    assert chunked["engine_settings"]["max_num_batched_tokens"] == 512
    # 1,024 prompt tokens in chunks of 512 take two steps instead of one: at least one more step's per-kernel cost
    # (256 kernels x kernel_overhead_s; prefill steps run outside CUDA graphs; the host's step overhead overlaps the
    # GPU under vLLM's async scheduling) and one more pass over the layers
    eng = get_engine("vllm")
    assert chunked["prefill_s"] - whole["prefill_s"] >= N_KERNELS * eng.kernel_overhead_s
    assert chunked["decode_step_s"] == whole["decode_step_s"]


# ------------------------------------------------------------------------------------------------ plan
def _plan(run_json, *extra: str) -> dict:
    return run_json("plan", MODEL, "--isl", "1000", "--osl", "200", "--rate", "2", "--ttft-ms", "2000",
                    "--tpot-ms", "100", "--system", "h200", "--no-disagg", *extra)


def test_plan_searches_with_the_engine_settings(run_json):
    base = _plan(run_json)
    capped = _plan(run_json, "--max-num-seqs", "4", "--enforce-eager")
    assert capped["engine_settings"]["max_num_seqs"] == 4
    assert capped["engine_settings"]["enforce_eager"] is True
    assert sorted(capped["engine_settings"]["given"]) == ["enforce_eager", "max_num_seqs"]
    assert base["engine_settings"]["given"] == []
    for row in capped["per_system"]:
        assert row["batch"] <= 4 * row["dp"]            # max_num_seqs is per attention-DP rank
        assert row["max_batch_within_slo"] <= 4 * row["dp"]
    for points in capped["pareto"].values():
        assert all(p["batch"] <= 4 * 8 for p in points)
    # fewer sequences per replica and slower steps: the plan cannot get cheaper
    assert capped["recommended"]["total_gpus"] >= base["recommended"]["total_gpus"]


def test_scenario_engine_settings_and_options_over_them(run_json, tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(f"model: {MODEL}\nsystems: [hgx_h200]\nengine: vllm\n"
                  "engine_settings: {max_num_seqs: 16, gpu_memory_utilization: 0.8, enforce_eager: true}\n"
                  "workload: {isl: 1000, osl: 200, load: {requests_per_s: 2}}\n"
                  "slo: {ttft_ms: 2000, tpot_ms: 100}\nsearch: {disaggregated: false}\n", encoding="utf-8")
    out = run_json("plan", "--scenario", str(sc))
    es = out["engine_settings"]
    assert (es["max_num_seqs"], es["fraction"], es["enforce_eager"]) == (16, 0.8, True)
    over = run_json("plan", "--scenario", str(sc), "--max-num-seqs", "32")["engine_settings"]
    assert (over["max_num_seqs"], over["fraction"], over["enforce_eager"]) == (32, 0.8, True)


# -------------------------------------------------------------------------------------------- simulate
def test_simulate_max_num_seqs_one_runs_each_request_alone(run_json):
    """With --max-num-seqs 1 a replica decodes one request at a time: its TPOT is perf's batch-1 decode step at the
    mean decode context (1,000 prompt + ~25 tokens)."""
    sim = run_json("simulate", MODEL, "--system", "hgx_h200", "--tp", "1", "--isl", "1000", "--osl", "50",
                   "--rate", "2", "--requests", "200", "--max-num-seqs", "1")
    perf = run_json("perf", MODEL, "--system", "h200", "--tp", "1", "--isl", "1000", "--osl", "50", "--batch", "1",
                    "--context", "1025")
    assert sim["completed"] == 200
    assert sim["tpot_s"]["p50"] == pytest.approx(perf["decode_step_s"], rel=0.01)
    free = run_json("simulate", MODEL, "--system", "hgx_h200", "--tp", "1", "--isl", "1000", "--osl", "50",
                    "--rate", "2", "--requests", "200")
    assert sim["queue"]["mean_waiting"] > free["queue"]["mean_waiting"]


def test_simulate_enforce_eager_slows_the_decode_step_by_the_launches(run_json):
    args = ("simulate", MODEL, "--system", "hgx_h200", "--tp", "1", "--isl", "1000", "--osl", "50", "--rate", "1",
            "--requests", "100", "--max-num-seqs", "1")
    eager = run_json(*args, "--enforce-eager")
    base = run_json(*args)
    eng = get_engine("vllm")
    added = N_KERNELS * (EAGER_LAUNCH_S + eng.kernel_overhead_s - eng.graph_kernel_s)   # launches, no graph replay
    assert eager["tpot_s"]["p50"] - base["tpot_s"]["p50"] == pytest.approx(added, rel=0.02)


def test_simulate_precedence_option_then_replica_key_then_engine_settings(run_json, tmp_path):
    """simulation.replica.max_num_seqs (replica-wide) wins over the scenario's engine_settings; an option wins
    over both. Observed through TPOT: one running sequence decodes at perf's batch-1 step."""
    sc = tmp_path / "s.yaml"
    sc.write_text(f"model: {MODEL}\nsystems: [hgx_h200]\nengine_settings: {{max_num_seqs: 64}}\n"
                  "workload: {isl: 1000, osl: 50, load: {requests_per_s: 8}}\n"
                  "simulation: {requests: 300, replica: {max_num_seqs: 1}}\n", encoding="utf-8")
    one = run_json("simulate", "--scenario", str(sc), "--tp", "1")
    many = run_json("simulate", "--scenario", str(sc), "--tp", "1", "--max-num-seqs", "64")
    perf = run_json("perf", MODEL, "--system", "h200", "--tp", "1", "--isl", "1000", "--osl", "50", "--batch", "1",
                    "--context", "1025")
    assert one["tpot_s"]["p50"] == pytest.approx(perf["decode_step_s"], rel=0.01)   # the replica key: 1 at a time
    assert many["queue"]["mean_waiting"] < one["queue"]["mean_waiting"]             # the option: 64 at a time
    assert many["tpot_s"]["p90"] > one["tpot_s"]["p90"]


def test_options_replace_the_scenarios_replica_keys():
    from clusterfit.planning.question import without_replica_keys

    sim = {"replicas": 2, "replica": {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "block_size": 16}}
    assert without_replica_keys(sim, ["max_num_seqs"]) == {
        "replicas": 2, "replica": {"max_num_batched_tokens": 4096, "block_size": 16}}
    assert without_replica_keys(sim, ["gpu_memory_utilization", "enforce_eager"]) is sim
    assert without_replica_keys(None, ["max_num_seqs"]) is None


# ------------------------------------------------------------------------------------------- bad values
PERF = ("perf", MODEL, "--system", "h200", "--tp", "1", "--isl", "1024", "--osl", "128", "--batch", "1",
        "--context", "1024")
PLAN = ("plan", MODEL, "--isl", "1000", "--osl", "200", "--rate", "2", "--system", "h200")
SIM = ("simulate", MODEL, "--system", "hgx_h200", "--isl", "1000", "--osl", "50", "--rate", "1", "--requests", "10")


@pytest.mark.parametrize("command", [PERF, PLAN, SIM], ids=["perf", "plan", "simulate"])
@pytest.mark.parametrize("option, value, allowed", [
    ("--max-num-seqs", "0", "1..1,048,576"),
    ("--max-num-seqs", "2000000", "1..1,048,576"),
    ("--max-num-batched-tokens", "0", "1..1,048,576"),
    ("--gpu-memory-utilization", "0.01", "0.05..1.0"),
    ("--gpu-memory-utilization", "1.5", "0.05..1.0"),
])
def test_out_of_range_settings_are_one_error_line(run_cli, command, option, value, allowed):
    code, out, err = run_cli(*command, option, value)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert option in lines[0] and value in lines[0] and allowed in lines[0]


def test_a_non_integer_max_num_seqs_is_an_error(run_cli):
    code, _, err = run_cli(*PERF, "--max-num-seqs", "eight")
    assert code == 2 and err.strip().startswith("error:") and "--max-num-seqs" in err


def test_bad_scenario_engine_settings_name_the_field(run_cli, tmp_path):
    sc = tmp_path / "bad.yaml"
    sc.write_text(json.dumps({"model": MODEL, "engine_settings": {"max_num_seqs": 0},
                              "workload": {"isl": 100, "osl": 10, "load": {"requests_per_s": 1}}}), encoding="utf-8")
    code, _, err = run_cli("plan", "--scenario", str(sc))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "engine_settings.max_num_seqs" in lines[0]
    sc.write_text(json.dumps({"model": MODEL, "engine_settings": {"max_batch": 8},
                              "workload": {"isl": 100, "osl": 10, "load": {"requests_per_s": 1}}}), encoding="utf-8")
    code, _, err = run_cli("plan", "--scenario", str(sc))
    assert code == 2 and "engine_settings.max_batch: unknown field" in err


def test_api_keywords_mirror_the_options():
    import clusterfit as cf
    from clusterfit.schema import ParameterError

    out = cf.perf(model=MODEL, system="h200", tp=1, isl=1024, osl=128, max_throughput=True, max_num_seqs=8,
                  enforce_eager=True)
    assert out.batch == 8 and out.engine_settings is not None and out.engine_settings.enforce_eager
    with pytest.raises(ParameterError) as exc:
        cf.perf(model=MODEL, system="h200", tp=1, isl=1024, osl=128, max_throughput=True, gpu_memory_utilization=2)
    assert exc.value.parameter == "gpu_memory_utilization"


# ------------------------------------------------------------------------ SGLang's defaults by GPU memory and TP
#: python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings, by hand: reserved MiB = 512 + 1.5 x
#: max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs + 1024 x tp_size x pp / 8 (+ 3 x and, above 300,
#: 1.5 x cuda_graph_max_bs x dp under attention DP), at least 10 GiB above 60 GiB; fraction = (MiB - reserved) / MiB
#: rounded to 3 decimals. Device MiB: the bytes PyTorch sees (hardware.yaml) / 2**20.
H200_MIB = H200_DEVICE_BYTES / 2**20                # 143,155.9
SGLANG_CASES = [
    # system, tp, dp, chunked_prefill_size (per rank), cuda_graph_max_bs, fraction
    # one H200: 8192 / 256; reserved 512 + 12,288 + 512 + 128 = 13,440 -> (143,155.9 - 13,440) / 143,155.9 = 0.906
    ("h200", 1, 1, 8192, 256, 0.906),
    # TP8: graphs to 512; reserved 512 + 12,288 + 1,024 + 1,024 = 14,848 -> 0.896
    ("h200", 8, 1, 8192, 512, 0.896),
    # DP8 attention (--tp-size 8 --dp-size 8): + 512 x 8 x 3 + 512 x 8 x 1.5 = 33,280 -> 0.768; 8192 / 8 per rank
    ("h200", 1, 8, 1024, 512, 0.768),
    # one H100 (81,210.1 MiB): 13,440 reserved -> 0.835
    ("h100", 1, 1, 8192, 256, 0.835),
    # a B200 (182,574.6 MiB, above 160 GiB): 16384 / 512; 512 + 24,576 + 1,024 + 128 = 26,240 -> 0.856
    ("b200", 1, 1, 16384, 512, 0.856),
    # an L40S (45,870.9 MiB, below 60 GiB: no 10 GiB floor): 4096 / 32; 512 + 6,144 + 64 + 128 = 6,848 -> 0.851
    ("l40s", 1, 1, 4096, 32, 0.851),
]


@pytest.mark.parametrize("system, tp, dp, chunk, graphs, fraction", SGLANG_CASES)
def test_sglang_defaults_follow_the_gpu_memory_and_tp(system, tp, dp, chunk, graphs, fraction):
    from clusterfit.compose import Catalog

    catalog = Catalog.load()
    sysm = catalog.system(system)
    eng = catalog.engine("sglang", sysm).for_layout(sysm.gpu, tp, 1, dp)
    assert (eng.max_num_batched_tokens, eng.cuda_graph_max_bs, eng.gpu_memory_utilization) == (chunk, graphs, fraction)
    assert eng.for_layout(sysm.gpu, tp, 1, dp) is eng                        # resolved once
    # another layout is resolved from the engine before: the same GPUs without attention DP get the whole chunk
    assert eng.for_layout(sysm.gpu, tp * dp, 1, 1).max_num_batched_tokens == chunk * dp


def test_sglang_user_settings_win_over_its_defaults():
    from clusterfit.compose import Catalog

    catalog = Catalog.load()
    sysm = catalog.system("h200")
    eng = catalog.engine("sglang", sysm).with_settings(gpu_memory_utilization=0.8, max_num_batched_tokens=4096)
    one = eng.for_layout(sysm.gpu, 8, 1, 1)
    assert (one.gpu_memory_utilization, one.max_num_batched_tokens, one.cuda_graph_max_bs) == (0.8, 4096, 512)
    # SGLang divides the chunk it is given among attention-DP ranks too
    assert eng.for_layout(sysm.gpu, 1, 1, 8).max_num_batched_tokens == 512
    # only the chunk given: the fraction's reserve uses it (512 + 1.5 x 4096 + 1,024 + 1,024 = 8,704, under the
    # 10 GiB floor -> (143,155.9 - 10,240) / 143,155.9 = 0.928)
    chunk_only = catalog.engine("sglang", sysm).with_settings(max_num_batched_tokens=4096)
    assert chunk_only.for_layout(sysm.gpu, 8, 1, 1).gpu_memory_utilization == 0.928
    # vLLM has no such defaults: the same engine back
    vllm = catalog.engine("vllm", sysm)
    assert vllm.for_layout(sysm.gpu, 8, 1, 1) is vllm


def test_sglang_fit_uses_the_fraction_of_its_layout(run_json):
    one = run_json("fit", MODEL, "--system", "h200", "--tp", "1", "--engine", "sglang")["results"][0]
    eight = run_json("fit", MODEL, "--system", "h200", "--tp", "8", "--engine", "sglang")["results"][0]
    assert (one["memory_fraction"], eight["memory_fraction"]) == (0.906, 0.896)
    # SGLang: KV = fraction x device - weights while the runtime reserve fits in the rest (memory.kv_budget_bytes_per_gpu)
    for r, f in ((one, 0.906), (eight, 0.896)):
        assert r["kv_budget_bytes_per_gpu"] == int(f * H200_DEVICE_BYTES - r["weight_bytes_per_gpu"])
        assert any("memory fraction" in n and "sglang" in n for n in r["notes"])
    given = run_json("fit", MODEL, "--system", "h200", "--tp", "8", "--engine", "sglang",
                     "--gpu-memory-utilization", "0.8")["results"][0]
    assert given["memory_fraction"] == 0.8
    assert run_json("fit", MODEL, "--system", "h200", "--tp", "8")["results"][0]["memory_fraction"] == 0.9  # vLLM


def test_sglang_perf_reports_its_defaults_on_the_layout(run_json):
    out = run_json("perf", MODEL, "--system", "b200", "--tp", "1", "--engine", "sglang", "--isl", "1024",
                   "--osl", "128", "--max-throughput")
    es = out["engine_settings"]
    assert (es["fraction"], es["max_num_batched_tokens"], es["given"]) == (0.856, 16384, [])


def test_plan_reports_the_settings_of_the_recommended_replica(run_json):
    args = ("plan", MODEL, "--rate", "5", "--isl", "1024", "--osl", "256", "--system")
    sglang = run_json(*args, "h200", "--engine", "sglang")
    rec = sglang["recommended"]
    assert (rec["system"], rec["tp"], rec["dp"]) == ("hgx_h200", 1, 1)
    assert sglang["engine_settings"]["fraction"] == 0.906          # SGLang's default on one H200 (hand value above)
    assert rec["precision"] == "checkpoint" and sglang["engine_settings"]["max_num_seqs"] == 3574  # its pool's cap
    # vLLM on an A100: its smaller-device defaults (EngineArgs.get_batch_defaults), not the H100-class 1024 / 8192
    vllm = run_json(*args, "a100_sxm_80gb")
    assert (vllm["engine_settings"]["max_num_seqs"], vllm["engine_settings"]["max_num_batched_tokens"]) == (256, 2048)


@pytest.mark.parametrize("kv_tokens, context_len, cap", [
    (915_062, 131_072, 3574),      # int(915,062 / 131,072 x 512) = 3,574 < 915,062 // 2
    (100_000, 131_072, 2048),      # int(390.6) -> the pool's floor 2,048
    (3_000, 4_096, 1500),          # half the KV tokens binds: 3,000 // 2
    (10_000_000, 8_192, 4096),     # 625,000 -> the pool's ceiling 4,096
    (5_000, None, 2048),           # context unknown: the floor
])
def test_sglang_max_running_requests_by_hand(kv_tokens, context_len, cap):
    from clusterfit.engines import sglang_max_running_requests

    assert sglang_max_running_requests(kv_tokens, context_len) == cap


def test_sglang_running_cap_follows_its_kv_pool(run_json):
    """SGLang's max_running_requests default (scheduler.py, model_runner.py): Llama-3.1-8B on one H200 holds
    0.906 x 150,109,880,320 B - weights = 119,939,029,073 B of KV / 131,072 B per token = 915,062 tokens, so the cap
    is int(915,062 / 131,072 x 512) = 3,574 (not 1,024); what the user sets wins."""
    fit = run_json("fit", MODEL, "--system", "h200", "--tp", "1", "--engine", "sglang")["results"][0]
    assert (fit["kv_budget_bytes_per_gpu"], fit["max_kv_tokens"]) == (119_939_029_073, 915_062)
    base = ("perf", MODEL, "--system", "h200", "--tp", "1", "--engine", "sglang", "--isl", "128", "--osl", "128",
            "--max-throughput")
    out = run_json(*base)
    assert out["engine_settings"]["max_num_seqs"] == 3574 and out["batch"] == 3574
    given = run_json(*base, "--max-num-seqs", "512")
    assert given["engine_settings"]["max_num_seqs"] == 512 and given["batch"] == 512


def test_sglang_defaults_that_leave_no_memory_say_so(run_json):
    """DeepSeek-V3 at DP32 attention on H100s: SGLang's default reserve is 512 + 1.5 x 8192 + 2 x 512 + 1024 x 32 / 8
    + 512 x 32 x 4.5 = 91,648 MiB, above the device's 81,210 MiB, so its default fraction is
    round((81,210.1 - 91,648) / 81,210.1, 3) = -0.129: nothing fits until the user gives a fraction."""
    args = ("fit", "deepseek-ai/DeepSeek-V3", "--engine", "sglang", "--system", "h100", "--tp", "1", "--dp", "32",
            "--ep", "32")
    r = run_json(*args)["results"][0]
    assert (r["fits"], r["memory_fraction"]) == (False, -0.129)
    assert "default memory fraction" in r["reason"] and "--gpu-memory-utilization" in r["reason"]
    given = run_json(*args, "--gpu-memory-utilization", "0.85")["results"][0]
    assert given["fits"] and given["memory_fraction"] == 0.85
    assert any("0.85 (yours)" in n for n in given["notes"])


def test_num_scheduler_steps_is_a_setting_with_a_range():
    """vLLM V0's --num-scheduler-steps (Engine.num_scheduler_steps, 1 = every step, the V1 behaviour): with_settings
    takes 1..1,024 and names the flag otherwise; the catalog's engines default to 1."""
    from clusterfit.compose import Catalog
    from clusterfit.errors import ClusterfitError

    catalog = Catalog.load()
    vllm = catalog.engine("vllm", catalog.system("h200"))
    assert vllm.num_scheduler_steps == 1
    assert vllm.with_settings(num_scheduler_steps=10).num_scheduler_steps == 10
    for bad in (0, 1025, 2.5):
        with pytest.raises(ClusterfitError, match=r"num_scheduler_steps \(--num-scheduler-steps\) must be an integer "
                                                  r"in 1\.\.1,024"):
            vllm.with_settings(num_scheduler_steps=bad)


def test_sglang_runs_hybrid_linear_attention_models_without_overlap(run_json):
    """SGLang turns its overlap scheduler off for models with linear-attention / Mamba layers (its default
    MambaRadixCache strategy, no_buffer: sgl-project/sglang docs/basic_usage/qwen3.md), so the compiled step of
    Qwen3.5-9B (Gated DeltaNet layers) runs synchronously under SGLang; --async-scheduling given wins; a model
    without such layers, or vLLM, keeps the overlap."""
    from clusterfit.compose import Catalog, build_replica

    args = ("perf", "--system", "h100", "--tp", "1", "--isl", "1024", "--osl", "128", "--max-throughput")
    hybrid = run_json(*args[:1], "Qwen/Qwen3.5-9B", *args[1:], "--engine", "sglang")["engine_settings"]
    assert hybrid["async_scheduling"] is False and hybrid["given"] == []
    given = run_json(*args[:1], "Qwen/Qwen3.5-9B", *args[1:], "--engine", "sglang", "--async-scheduling")
    assert given["engine_settings"]["async_scheduling"] is True
    assert run_json(*args[:1], MODEL, *args[1:], "--engine", "sglang")["engine_settings"]["async_scheduling"] is True
    catalog = Catalog.load()
    assert build_replica(catalog, "Qwen/Qwen3.5-9B", "h100", tp=1).step.engine.async_scheduling is True  # vLLM
    # synchronous, a decode step is its GPU time plus the host's (0.5 ms + 64 x 80 us at the shipped constants),
    # not the larger of the two
    sync = build_replica(catalog, "Qwen/Qwen3.5-9B", "h100", tp=1, engine="sglang").step
    gpu, host = float(sync.gpu_step_s(0, 0, 64, 64 * 600)), float(sync.host_s(0, 64))
    assert host == pytest.approx(sync.engine.step_overhead_s + 64 * sync.engine.seq_overhead_s)
    assert float(sync.decode_step_s(64, 600)) == pytest.approx(gpu + host, rel=1e-9)


def test_tensorrt_llm_is_refused_on_other_vendors_and_left_out_of_their_plans(run_cli, run_json):
    """TensorRT-LLM runs on NVIDIA GPUs only (nvidia.github.io/TensorRT-LLM/supported-hardware.html): perf, fit and
    simulate on an AMD or Google system name --engine; plan leaves those systems out and says why."""
    base = ("meta-llama/Llama-3.1-8B", "--engine", "trtllm")
    for args in (("perf", *base, "--system", "mi300x", "--isl", "1024", "--osl", "128", "--concurrency", "8"),
                 ("fit", *base, "--system", "tpu_v6e_host"),
                 ("simulate", *base, "--system", "mi300x", "--isl", "1024", "--osl", "128", "--rate", "1")):
        code, out, err = run_cli(*args)
        assert code == 2 and err.startswith("error: --engine: trtllm runs on NVIDIA GPUs only") and \
            "Traceback" not in err, (args, err)
    plan = run_json("plan", *base, "--isl", "1024", "--osl", "128", "--rate", "5", "--system", "mi300x",
                    "--system", "hgx_h200")
    assert [o["system"] for o in plan["per_system"]] == ["hgx_h200"]
    assert any("not on mi300x_platform's AMD" in n for n in plan["not_fitting"]), plan["not_fitting"]
    assert run_json("perf", "meta-llama/Llama-3.1-8B", "--system", "mi300x", "--isl", "1024", "--osl", "128",
                    "--concurrency", "8")["tpot_s"] > 0      # vLLM (the default) runs on ROCm


def test_tensorrt_llm_refuses_mxfp4_experts_before_hopper_and_sglang_is_noted(run_cli, run_json):
    """TensorRT-LLM's W4A16 MXFP4 MoE runs on SM90 and Blackwell only ("WFP4A16 MoE is unsupported on SM80",
    tensorrt_llm/_torch/modules/fused_moe/quantization.py; GPUStack's gpt-oss-20b A100 page): gpt-oss in its mxfp4
    checkpoint under trtllm on an A100 (compute capability 8.0) is an error naming --engine in perf, fit, simulate
    and a plan of that system alone; a plan over A100 and H100 leaves the A100 out and says why. In bf16 the same
    engine runs it there. SGLang runs it before Hopper on a path it logs as unoptimised: perf notes that, on an
    A100 only."""
    base = ("openai/gpt-oss-20b", "--engine", "trtllm")
    refusal = "error: --engine: trtllm has no MoE kernel for mxfp4 experts on a100_sxm_80gb (compute capability 8.0"
    load = ("--isl", "1000", "--osl", "200")
    for args in (("perf", *base, "--system", "dgx_a100", *load, "--concurrency", "8"),
                 ("fit", *base, "--system", "dgx_a100"),
                 ("simulate", *base, "--system", "dgx_a100", *load, "--rate", "1"),
                 ("plan", *base, "--system", "dgx_a100", *load, "--rate", "5")):
        code, out, err = run_cli(*args)
        assert code == 2 and err.startswith(refusal) and "Traceback" not in err, (args, err)
    plan = run_json("plan", *base, *load, "--rate", "5", "--system", "dgx_a100", "--system", "dgx_h100")
    assert [o["system"] for o in plan["per_system"]] == ["dgx_h100"]
    assert any(n.startswith("dgx_a100 checkpoint: trtllm has no MoE kernel for mxfp4") for n in plan["not_fitting"])
    assert run_json("perf", *base, "--system", "dgx_a100", *load, "--concurrency", "8", "--precision",
                    "bf16")["tpot_s"] > 0
    assert run_json("perf", *base, "--system", "dgx_h100", *load, "--concurrency", "8")["tpot_s"] > 0

    def unoptimised(engine: str, system: str) -> list[str]:
        out = run_json("perf", "openai/gpt-oss-20b", "--engine", engine, "--system", system, *load,
                       "--concurrency", "8")
        return [n for n in out["notes"] if "not fully optimised" in n]

    assert len(unoptimised("sglang", "dgx_a100")) == 1
    assert unoptimised("sglang", "dgx_h100") == [] and unoptimised("vllm", "dgx_a100") == []


def test_vllm_refuses_fewer_batched_tokens_than_running_sequences(run_cli, run_json):
    """vLLM will not start with max_num_batched_tokens < max_num_seqs (vllm/config/scheduler.py
    SchedulerConfig._verify_args); its max_num_seqs default is 1024 on an H200 and 256 on an L40S."""
    base = ("meta-llama/Llama-3.1-8B", "--max-num-batched-tokens", "512")
    for args in (("perf", *base, "--system", "h200", "--isl", "1024", "--osl", "128", "--concurrency", "8"),
                 ("fit", *base, "--system", "h200"),
                 ("plan", *base, "--system", "h200", "--isl", "1024", "--osl", "128", "--rate", "5")):
        code, out, err = run_cli(*args)
        assert code == 2 and err.startswith("error: --max-num-batched-tokens:") and "(1,024 here)" in err, (args, err)
    ok = ("perf", *base, "--isl", "1024", "--osl", "128", "--concurrency", "8")
    assert run_json(*ok, "--system", "h200", "--max-num-seqs", "256")["tpot_s"] > 0
    assert run_json(*ok, "--system", "l40s_8x")["tpot_s"] > 0
    assert run_json(*ok, "--system", "h200", "--engine", "sglang")["tpot_s"] > 0   # SGLang has no such rule


@pytest.mark.parametrize("system", ["l40s_8x", "dgx_a100", "hgx_h200"])
def test_fit_budgets_memory_with_the_engines_defaults_on_that_gpu(run_json, system):
    """fit and perf hold the same KV cache: vLLM's 256 / 2048 defaults on an L40S or A100 (a smaller activation
    workspace and sampler reserve than 1024 / 8192) apply to fit as to perf."""
    fit = run_json("fit", "meta-llama/Llama-3.1-8B", "--system", system, "--tp", "1")["results"][0]
    perf = run_json("perf", "meta-llama/Llama-3.1-8B", "--system", system, "--tp", "1", "--isl", "1024", "--osl",
                    "128", "--max-throughput")
    assert fit["max_kv_tokens"] == int(perf["kv_capacity_tokens"])
    assert fit["max_num_batched_tokens"] == perf["engine_settings"]["max_num_batched_tokens"] == \
        (8192 if system == "hgx_h200" else 2048)


def test_a_decode_batch_above_the_max_num_seqs_given_is_refused(run_cli, run_json):
    """--batch B asks for the step at B running sequences; with --max-num-seqs below B the engine never runs them
    (perf answered for B anyway). At the cap it answers."""
    code, out, err = run_cli("perf", MODEL, "--system", "h200", "--isl", "10", "--osl", "10", "--batch", "4",
                             "--context", "100", "--max-num-seqs", "2")
    assert code == 2 and err.startswith("error: --batch: 4 sequences are more than the engine runs at once "
                                        "(max_num_seqs 2 over this replica)"), err
    assert _perf(run_json, "--batch", "2", "--context", "1100", "--max-num-seqs", "2")["batch"] == 2


def test_fit_rows_show_the_batched_tokens_their_budget_used(run_json):
    """Each fit row's max_num_batched_tokens is the engine's on that GPU and layout, as its budget (and its note)
    used: SGLang's chunked_prefill_size follows the GPU's memory (16384 on a B200, 8192 on an A100, 4096 on an L40S);
    the rows showed the 8192 of SGLang before a layout is chosen."""
    out = run_json("fit", MODEL, "--system", "b200", "--system", "a100", "--system", "l40s", "--tp", "1",
                   "--engine", "sglang")
    shown = {r["system"]: r["max_num_batched_tokens"] for r in out["results"]}
    assert shown == {"dgx_b200": 16384, "dgx_a100": 8192, "l40s_8x": 4096}
    for r in out["results"]:
        assert any(f"{r['max_num_batched_tokens']} batched tokens per step" in n for n in r["notes"])
