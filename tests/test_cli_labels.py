"""The labels of the CLI's tables say the unit and the scope of each figure (a units/naming audit: per replica or
all replicas, one GPU of a system or the whole node, the engines' own setting names). Each test runs the real entry
point and checks the label beside the figure --json gives."""

from __future__ import annotations

import re

import pytest

PERF = ("perf", "llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--max-throughput")


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    """A terminal wide enough that rich wraps no label or caption."""
    monkeypatch.setenv("COLUMNS", "250")


def _row(out: str, label: str) -> str:
    """The value cell of the table row labelled ``label``."""
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if cells and cells[0] == label:
            return cells[-1]
    raise AssertionError(f"no row {label!r} in\n{out}")


def test_perf_title_counts_gpus_of_the_system_and_kv_capacity_is_per_replica(run_cli, run_json):
    """'on 1 x hgx_h200 GPUs' read as one 8-GPU node; the replica is 1 GPU (2 for the 70B at TP2) of it. The KV
    capacity is the replica's, with thousands separators; the breakdown's kinds are in the ms column without the
    JSON keys' _s."""
    code, out, _ = run_cli(*PERF)
    assert code == 0
    assert "Llama-3.1-8B on 1 GPU of hgx_h200 (TP1, vllm" in out and " x hgx_h200 GPUs" not in out
    kv = run_json(*PERF)["kv_capacity_tokens"]
    assert _row(out, "KV capacity per replica (tokens)") == f"{int(kv):,}"
    for kind in ("compute", "memory", "communication", "overhead"):
        _row(out, kind)
        assert f" {kind}_s " not in out
    code, out, _ = run_cli("perf", "llama-3.1-70b", "--system", "h200", "--tp", "2", "--isl", "1000", "--osl", "200",
                           "--concurrency", "8")
    assert code == 0 and "Llama-3.1-70B on 2 GPUs of hgx_h200 (TP2, vllm" in out


def _flat(out: str) -> str:
    """The output with its line wrapping (a table caption wraps at the table's width) undone."""
    return " ".join(out.split())


@pytest.mark.parametrize("engine, seqs, tokens, fraction", [
    ("vllm", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization"),
    ("sglang", "max_running_requests", "chunked_prefill_size", "mem_fraction_static"),
    ("trtllm", "max_batch_size", "max_num_tokens", "free_gpu_memory_fraction")])
def test_perf_and_fit_name_the_engines_own_settings(run_cli, run_json, engine, seqs, tokens, fraction):
    """'max_num_seqs 4096, max_num_batched_tokens 8192, memory fraction 0.9 (free_fraction)' under TensorRT-LLM
    named settings it does not have: each engine's own names (vllm/engine/arg_utils.py, sglang server_args.py,
    the trtllm-serve flags deploy writes), clusterfit's option beside a name that differs."""
    es = run_json(*PERF, "--engine", engine)["engine_settings"]
    code, out, _ = run_cli(*PERF, "--engine", engine)
    assert code == 0
    flat = _flat(out)
    if engine == "vllm":
        assert (f"vLLM max_num_seqs {es['max_num_seqs']:,}, max_num_batched_tokens {es['max_num_batched_tokens']:,}, "
                f"gpu_memory_utilization {es['fraction']:g} (of device memory)") in flat
    else:
        of = "of the memory free after weights" if engine == "trtllm" else "of device memory"
        assert (f"{seqs} {es['max_num_seqs']:,} (--max-num-seqs), {tokens} {es['max_num_batched_tokens']:,} "
                f"(--max-num-batched-tokens), {fraction} {es['fraction']:g} (--gpu-memory-utilization; {of})") in flat
    assert "memory fraction" not in flat and "total_fraction" not in flat
    fit = run_json("fit", "llama-3.1-8b", "--system", "h200", "--engine", engine)["results"][0]
    code, out, _ = run_cli("fit", "llama-3.1-8b", "--system", "h200", "--engine", engine)
    assert code == 0 and "engine memory fraction" not in out
    label = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}[engine]
    assert _row(out, f"{fraction} ({label})") == f"{fit['memory_fraction']:g}"


def test_sglang_caps_are_the_replicas_under_attention_dp(run_cli, run_json):
    """SGLang divides max_running_requests and chunked_prefill_size among the attention-DP ranks (deploy writes the
    per-rank settings x DP): at DP2 the caption gives SGLang's figure, twice the per-rank one it names beside."""
    args = ("perf", "qwen3-30b-a3b", "--system", "h200", "--gpus", "2", "--tp", "1", "--dp", "2", "--ep", "2",
            "--isl", "1000", "--osl", "200", "--max-throughput", "--engine", "sglang")
    es = run_json(*args)["engine_settings"]
    code, out, _ = run_cli(*args)
    seqs, tokens = es["max_num_seqs"], es["max_num_batched_tokens"]
    assert code == 0
    assert (f"max_running_requests {2 * seqs:,} ({seqs:,} per DP rank; --max-num-seqs), chunked_prefill_size "
            f"{2 * tokens:,} ({tokens:,} per DP rank; --max-num-batched-tokens)") in _flat(out)


def test_plan_names_the_engines_settings(run_cli, run_json):
    """plan printed 'Engine settings (sglang): max_num_seqs 64, ..., memory fraction 0.906 (total_fraction)'."""
    args = ("plan", "llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--rate", "20",
            "--engine", "sglang", "--max-num-seqs", "64")
    plan = run_json(*args)
    assert plan["recommended"]["dp"] == 1
    code, out, _ = run_cli(*args)
    assert code == 0
    assert (f"Engine settings: SGLang max_running_requests 64 (--max-num-seqs), chunked_prefill_size "
            f"{plan['engine_settings']['max_num_batched_tokens']:,} (--max-num-batched-tokens), mem_fraction_static "
            f"{plan['engine_settings']['fraction']:g} (--gpu-memory-utilization; of device memory)") in _flat(out)


def _header(out: str, first: str) -> tuple[str, str]:
    """The two header lines of the table whose first header line holds ``first``."""
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if first in line)
    return lines[i], lines[i + 1]


def test_plan_cost_is_all_replicas_and_a_month_is_730_hours(run_cli, run_json):
    """'$/h' is the whole plan's (every replica's GPUs); the recommendation's $/month is 730 h of it
    (planning/cost.py HOURS_PER_MONTH: 365 x 24 / 12 = 730)."""
    args = ("plan", "llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--rate", "20")
    rec = run_json(*args)["recommended"]
    assert rec["cost_per_month"] == pytest.approx(rec["cost_per_hour"] * 365 * 24 / 12)
    code, out, _ = run_cli(*args)
    assert code == 0
    top, bottom = _header(out, "$/h, all")
    assert "replicas" in bottom[top.index("$/h, all"):]
    assert "$/h: all replicas together (every GPU rented); $/month = $/h x 730 h." in _flat(out)
    # the recommendation's sentence says the month's hours beside its $/month
    assert f"(${rec['cost_per_month']:,.0f}/month of 730 h)" in _flat(out)


def test_plan_reports_the_scenarios_hours_per_month(run_cli, run_json, tmp_path):
    """A scenario's cost.hours_per_month (512.5 here) is the plan's: --json carries it (hours_per_month), the
    recommendation's $/month is $/h x 512.5, and the footnote prints it (it was worked back out of a priced row's
    cost_per_month / cost_per_hour)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: llama-3.1-8b\nsystems: [h200]\nworkload:\n  isl: 1000\n  osl: 200\n"
                        "  load: {requests_per_s: 20}\ncost: {hours_per_month: 512.5}\n")
    plan = run_json("plan", "--scenario", str(scenario))
    assert plan["hours_per_month"] == 512.5
    rec = plan["recommended"]
    assert rec["cost_per_month"] == pytest.approx(rec["cost_per_hour"] * 512.5)
    code, out, _ = run_cli("plan", "--scenario", str(scenario))
    assert code == 0
    assert "$/h: all replicas together (every GPU rented); $/month = $/h x 512.5 h." in _flat(out)


def test_plan_capacity_columns_say_per_replica_and_all_replicas(run_cli, run_json):
    """Capacity mode: the batch is each (decode) replica's, req/s and out tok/s the budget's serving replicas'."""
    args = ("plan", "llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--gpus", "8",
            "--tpot-ms", "50")
    best = run_json(*args)["capacity"]["layouts"][0]
    assert best["output_tokens_per_s"] == pytest.approx(best["requests_per_s"] * 200)   # all serving replicas
    code, out, _ = run_cli(*args)
    assert code == 0
    top, bottom = _header(out, "batch/")
    assert "out tok/s" in top and re.search(r"replica\s+all replicas\s+all replicas", bottom)
    row = next(line for line in out.splitlines() if line.split()[:2] == ["hgx_h200", best["layout"]])
    assert f" {best['batch']:.0f} " in row and f" {best['output_tokens_per_s']:,.0f} " in row


def test_simulate_summary_says_all_replicas(run_cli, run_json):
    """'throughput 19.62 req/s, 3,923 output tok/s' and 'queue mean 0.1 (max 2)' did not say whose: the cluster's
    completions, and the requests waiting summed over the replicas (sim/cluster.py's samples)."""
    args = ("simulate", "llama-3.1-8b", "--system", "h200", "--tp", "1", "--replicas", "2", "--isl", "1000", "--osl",
            "200", "--rate", "20", "--requests", "500")
    sim = run_json(*args)
    code, out, _ = run_cli(*args)
    assert code == 0
    thr, q = sim["throughput"], sim["queue"]
    assert (f"throughput (all replicas) {thr['requests_per_s']:,.2f} req/s, {thr['output_tokens_per_s']:,.0f} output "
            "tok/s") in out
    assert f"requests waiting (all replicas) mean {q['mean_waiting']:.1f} (max {q['max_waiting']:.0f})" in out
    assert "KV utilisation (mean of the replicas)" in out and "queue mean" not in out


def test_hardware_memory_column_is_marketed_memory_and_marks_gib_conversions(run_cli):
    """'HBM GB marketed' named HBM for the L40S's and RTX PRO's GDDR, and TPU7x's 206 reads as a GB figure where
    Google states 192 GiB (192 x 2^30 / 1e9 = 206.16 GB; MI325X: 256 GiB = 274.88 GB)."""
    code, out, _ = run_cli("hardware")
    assert code == 0
    top, bottom = _header(out, "memory GB")
    assert "marketed" in bottom and "HBM" not in top + bottom
    cells = {line.split()[0].rstrip("*"): line.split() for line in out.splitlines() if line.split()}
    assert cells["tpu7x_vm"][4] == "206\u2020" and cells["mi325x_platform"][4] == "275\u2020"
    assert cells["hgx_h200"][4] == "141" and cells["l40s_8x"][4] == "48"
    flat = _flat(out)
    assert "\u2020 marketed in GiB, converted to GB: mi325x 256 GiB, tpu7x_ironwood 192 GiB." in flat
    assert "memory: HBM, or GDDR (L40S, RTX PRO)" in flat


def test_hardware_json_names_the_scale_up_bandwidth_for_every_link(run_json):
    """nvlink_gbs_per_gpu_per_dir also held PCIe (L40S: 32 GB/s per direction, PCIe Gen4 x16), Infinity Fabric
    and ICI bandwidth; the table called it scale-up, and so does the key now."""
    rows = {r["id"]: r for r in run_json("hardware")["systems"]}
    assert all("nvlink_gbs_per_gpu_per_dir" not in r for r in rows.values())
    assert rows["l40s_8x"]["scale_up_gbs_per_gpu_per_dir"] == 32 and "PCIe" in rows["l40s_8x"]["scale_up_link"]
    assert rows["dgx_h100"]["scale_up_gbs_per_gpu_per_dir"] == 450   # NVLink 4: 900 GB/s bidirectional / 2


def test_fit_labels_say_tokens_one_node_and_marketed_device_memory(run_cli):
    """'max sequences @ 32,768' gave no unit; 'naive: GB left for KV' is one node's even where two are needed
    (Llama-3.1-405B in BF16: 405.9e9 x 2 B = 812 GB against 8 x 80 GB = 640 GB: -172); a GPU with no device-reported
    total shows its marketed memory as the 'exposed' figure (GH200 144 GB), now marked so."""
    code, out, _ = run_cli("fit", "llama-3.1-405b", "--system", "h100")
    assert code == 0
    assert _row(out, "naive: GB left for KV (one node)") == "-172" and _row(out, "naive: nodes needed") == "2"
    _row(out, "max sequences @ 32,768 tokens")
    code, out, _ = run_cli("fit", "llama-3.1-405b", "--system", "h100", "--nodes", "2")
    assert code == 0 and _row(out, "naive: GB left for KV (2 nodes)") == "468"          # 1,280 - 812
    # the fit row is against the same 2 nodes: 812 GB <= 1,280 GB ('fits one node: yes' before, beside -172 GB)
    assert _row(out, "naive: fits 2 nodes") == "yes"
    code, out, _ = run_cli("fit", "llama-3.1-8b", "--system", "gh200_144gb_1x", "--system", "h200")
    assert code == 0
    line = next(line for line in out.splitlines() if "device GB/GPU (exposed)" in line)
    assert line.split()[-4:-1] == ["144.0\u2020", "│", "150.1"]   # H200: torch total_memory, measured
    assert "\u2020 marketed (no device-reported total)" in _flat(out)


@pytest.mark.parametrize("engine, length_flag", [("vllm", "--max-model-len"), ("sglang", "--context-length"),
                                                 ("trtllm", "--max_seq_len")])
def test_deploy_readme_names_the_flags_it_wrote(run_cli, tmp_path, engine, length_flag):
    """The README said 'max model length 131072, memory fraction 0.9, max running sequences 1024 per DP rank, 8192
    batched tokens per step': it names each setting by the flag the launch script passes, with the same value, and
    the length in tokens (131,072: Llama-3.1-8B's max_position_embeddings)."""
    out = tmp_path / "d"
    code, _, err = run_cli("deploy", "llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--rate",
                           "20", "--engine", engine, "--out", str(out))
    assert code == 0, err
    readme = (out / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("Engine settings the plan assumed"))
    assert f"`{length_flag} 131072` tokens" in line and "max model length" not in line
    flags = re.findall(r"`(--[\w-]+) ([\d.]+)`", line)
    assert len(flags) == 4
    launch = " ".join((out / "launch.sh").read_text().replace('"', "").split())
    for flag, value in flags:
        assert f"{flag} {value}" in launch, (flag, value)


def test_every_command_describes_gpu_memory_utilization_alike():
    """--gpu-memory-utilization means each engine's own memory setting (vLLM gpu_memory_utilization, SGLang
    mem_fraction_static, TensorRT-LLM free_gpu_memory_fraction) wherever it is taken: fit, which has --engine too,
    says the same as perf, plan, deploy and bench (one option, commands/options.GpuMemoryUtilizationOpt)."""
    import typer

    from clusterfit.cli import app

    group = typer.main.get_command(app)
    helps = {name: p.help for name, cmd in group.commands.items()  # type: ignore[attr-defined]
             for p in cmd.params if "--gpu-memory-utilization" in getattr(p, "opts", [])}
    assert {"fit", "perf", "plan", "deploy", "bench"} <= set(helps)
    assert len(set(helps.values())) == 1, helps
    assert "mem_fraction_static" in helps["fit"] and "free_gpu_memory_fraction" in helps["fit"]


def test_every_command_describes_max_num_batched_tokens_alike():
    """--max-num-batched-tokens is the engines' per-step token budget (vLLM max_num_batched_tokens, SGLang
    chunked_prefill_size, TensorRT-LLM max_num_tokens) wherever it is taken: fit's own option said only "Tokens per
    forward pass (activation workspace)"; it is now the one option, commands/options.MaxNumBatchedTokensOpt."""
    import typer

    from clusterfit.cli import app

    group = typer.main.get_command(app)
    helps = {name: p.help for name, cmd in group.commands.items()  # type: ignore[attr-defined]
             for p in cmd.params if "--max-num-batched-tokens" in getattr(p, "opts", [])}
    assert {"fit", "perf", "plan"} <= set(helps)
    assert len(set(helps.values())) == 1, helps
    assert "chunked_prefill_size" in helps["fit"] and "max_num_tokens" in helps["fit"]


@pytest.mark.parametrize("command, default", [
    ("perf", "(default: 8192; vLLM on A100s and GPUs under 70 GiB: 2048"),   # --max-num-batched-tokens
    ("perf", "(default: on for vLLM and SGLang"),                            # --async-scheduling
    ("fit", "(default: 32768, or the model's max_position_embeddings if smaller)"),
    ("deploy", "(default: vllm, or the engine of the --plan file)"),
    ("simulate", "Which replica --fail-at loses (default: 0)"),
    ("hardware", 'Print {"systems": (a list of rows)} as JSON.'),   # showed 'Print {"systems": } as JSON.'
])
def test_help_shows_the_defaults_it_states(run_cli, command, default):
    """Help texts wrote their defaults as '[default: ...]', which rich took for a markup tag and dropped: --help
    showed no default for --max-num-batched-tokens, --async-scheduling, fit --context, deploy --engine or
    --fail-replica."""
    code, out, _ = run_cli(command, "--help")
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())
    assert code == 0 and default in text, text
