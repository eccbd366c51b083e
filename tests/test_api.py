"""The public Python API: the four calls as documented, their JSON equal to the CLI's, errors naming the
parameter, usage errors through the real entry point, and the shape of the code (no cycles, light start-up)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import clusterfit as cf
from clusterfit.errors import ClusterfitError
from clusterfit.schema import ParameterError, PerfRequest

SRC = Path(__file__).resolve().parents[1] / "src" / "clusterfit"


def _cli_json(run_cli, *args: str) -> dict:
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_fit_as_documented_matches_cli(run_cli):
    r = cf.fit(model="zai-org/GLM-5.3", precision="fp8", systems=["h200"], context=32768)
    assert isinstance(r, cf.FitResult)
    assert [x.system for x in r.results] == ["hgx_h200"] and r.results[0].fits
    # GLM-5.3 fp8 on 8x H200 TP8: 94.7 GB of weights per GPU (README table, measured by the memory model tests)
    assert r.results[0].weight_bytes_per_gpu / 1e9 == pytest.approx(94.7, abs=0.05)
    assert r.model_dump(mode="json") == _cli_json(run_cli, "fit", "zai-org/GLM-5.3", "--precision", "fp8",
                                                   "--system", "h200", "--context", "32768")


def test_perf_as_documented_matches_cli(run_cli):
    r = cf.perf(model="llama-3.1-8b", system="h200", tp=1, isl=1024, osl=128, batch=1, context=1024)
    assert isinstance(r, cf.PerfResult)
    assert r.batch == 1.0 and r.gpus == 1 and r.tokens_per_s_per_user == pytest.approx(1.0 / r.tpot_s)
    # the request-model form gives the same answer
    assert cf.perf(PerfRequest(model="llama-3.1-8b", system="h200", tp=1, isl=1024, osl=128, batch=1,
                               context=1024)) == r
    assert r.model_dump(mode="json") == _cli_json(run_cli, "perf", "llama-3.1-8b", "--system", "h200", "--tp", "1",
                                                  "--isl", "1024", "--osl", "128", "--batch", "1", "--context", "1024")


def test_plan_as_documented_matches_cli(run_cli):
    r = cf.plan(model="deepseek-v3", isl=4096, osl=1024, rate=5, ttft_ms=2000, tpot_ms=50, systems=["h200"])
    assert isinstance(r, cf.PlanResult) and r.feasible and r.recommended is not None
    assert r.recommended.system == "hgx_h200" and r.recommended.tpot_s <= 0.050
    assert r.model_dump(mode="json") == _cli_json(run_cli, "plan", "deepseek-v3", "--isl", "4096", "--osl", "1024",
                                                  "--rate", "5", "--ttft-ms", "2000", "--tpot-ms", "50",
                                                  "--system", "h200")


def test_simulate_as_documented_matches_cli(run_cli):
    r = cf.simulate(model="llama-3.1-8b", system="h200", replicas=4, rate=20, requests=5000, isl=1000, osl=200)
    assert isinstance(r, cf.SimResult)
    assert r.requests == 5000 and r.completed + r.rejected + r.failed == 5000 and r.replicas == 4
    cli = _cli_json(run_cli, "simulate", "llama-3.1-8b", "--system", "h200", "--replicas", "4", "--rate", "20",
                    "--requests", "5000", "--isl", "1000", "--osl", "200")
    api = r.model_dump(mode="json")
    assert api.pop("sim_wall_s") > 0 and cli.pop("sim_wall_s") > 0  # wall-clock time of each run
    assert api == cli


@pytest.mark.parametrize("call, parameter", [
    (lambda: cf.perf(model="llama-3.1-8b", system="h200", isl=100, osl=10, batch=1, tp=0), "tp"),
    (lambda: cf.perf(model="llama-3.1-8b", system="h200", isl=-5, osl=10, batch=1), "isl"),
    (lambda: cf.fit(model="llama-3.1-8b", context=0), "context"),
    (lambda: cf.fit(model="llama-3.1-8b", gpu_memory_utilization=1.5), "gpu_memory_utilization"),
    (lambda: cf.plan(model="llama-3.1-8b", isl=100, osl=10, rate=-1), "rate"),
    (lambda: cf.plan(model="llama-3.1-8b", isl=100, osl=10, rate=1, bogus=3), "bogus"),
    (lambda: cf.simulate(model="llama-3.1-8b", system="h200", isl=100, osl=10, rate=1, fail_at=-1), "fail_at"),
])
def test_errors_name_the_parameter(call, parameter):
    with pytest.raises(ParameterError) as exc:
        call()
    assert exc.value.parameter == parameter and str(exc.value).startswith(f"{parameter}: ")


def test_request_and_keywords_not_both():
    with pytest.raises(ClusterfitError, match="not both"):
        cf.perf(PerfRequest(model="m", system="s", isl=1, osl=1, batch=1), tp=2)


@pytest.mark.parametrize("args, says", [
    (["perf", "meta-llama/Llama-3.1-8B", "--isl", "10"], "--system"),          # missing option
    (["plan", "x", "--bogus"], "--bogus"),                                       # unknown option
    (["perf", "llama-3.1-8b", "--system", "h200", "--isl", "ten", "--osl", "1", "--batch", "1"], "--isl"),  # bad type
    (["perf", "llama-3.1-8b", "--system", "h200", "--isl", "10", "--osl", "1", "--batch", "1", "--tp", "0"],
     "--tp"),  # out of range, named as the flag
    (["fit", "llama-3.1-8b", "--max-num-batched-tokens", "0"], "--max-num-batched-tokens"),
    (["simulate", "llama-3.1-8b", "--system", "h200", "--isl", "10", "--osl", "5", "--rate", "1",
      "--requests", "10", "--csv", "/nonexistent-dir/x.csv"], "does not exist"),  # checked before simulating
    # one output token: no request decodes, a TPOT target has nothing to judge (it had sized TP2 for a TPOT of 35 ms)
    (["plan", "llama-3.1-8b", "--isl", "1000", "--osl", "1", "--rate", "20", "--tpot-ms", "50", "--system", "h200"],
     "--tpot-ms"),
    (["simulate", "llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "1", "--rate", "5", "--requests", "100",
      "--tpot-ms", "50"], "--tpot-ms"),  # it had reported "TPOT p90 - <= 50 ... holds"
    # found by a fuzzing pass: a traceback (OSError: file name too long), an internal error, an overflow, a NaN
    # probability, and values run as given (a rate of inf, a failure at t=inf, a 1e-320 ms TPOT target)
    (["perf", "a" * 5000, "--system", "h200", "--isl", "10", "--osl", "5", "--batch", "1"], "unknown model"),
    (["simulate", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--rate", "5", "--requests", "50",
      "--fail-at", "10", "--restart-after", "inf"], "--restart-after: must be a number in 0..10,000,000"),
    (["simulate", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--rate", "inf"],
     "--rate: must be a number in 1e-06..1,000,000"),
    (["simulate", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--rate", "5",
      "--fail-at", "1e308"], "--fail-at"),
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--tpot-ms", "1e-320", "--system", "h200"],
     "--tpot-ms: must be a number in 0.001..10,000,000"),
    (["plan", "llama-3.1-8b", "--isl", "0.5", "--osl", "10", "--rate", "1", "--system", "h200"],
     "--isl must be a number of tokens in 1..100,000,000, got 0.5"),
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1e-320", "--system", "h200", "--verify"],
     "--rate: must be at least 1e-06 requests/s (one request every ~12 days) to plan for"),
    (["bench", "http://127.0.0.1:9", "--isl", "100", "--osl", "10", "--rate", "50", "--burstiness", "1e-320"],
     "--burstiness: must be a number in 0.01..1,000,000"),
    (["bench", "http://127.0.0.1:9", "--isl-values", "128:nan", "--osl", "10", "--rate", "50"],
     "finite weights >= 0"),
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--system", "h200", "--ttft-percentile",
      "99"], "--ttft-percentile: judges the TTFT target"),   # was ignored
    (["fit", "--params", "0.5", "--precision", "fp8", "--system", "h200"], "between 1 and 1e14"),  # '0.0B'
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--system", "h200", "--endpoint-price",
      "in=1,in=2,out=3"], "gives in= twice"),   # the second in= won
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--system", "h200", "--price",
      "hgx_h200=1e308"], "a price in (0, 1,000]"),
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--system", "mi300x_platform", "--engine",
      "trtllm"], "--engine: trtllm runs on NVIDIA GPUs only"),   # exit 0 with 'No plan meets the targets'
    # an empty name was read as the default, a repeated system searched twice (a second fuzzing pass)
    (["perf", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--batch", "1", "--kv-dtype", ""],
     "--kv-dtype: string should have at least 1 character"),
    (["simulate", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--rate", "1", "--engine", ""],
     "--engine: string should have at least 1 character"),
    (["fit", "llama-3.1-8b", "--system", "h200", "--system", "H200"], "--system: 'H200' is given twice"),
    # bench checks its own options before contacting the endpoint (these said 'cannot connect to ...')
    (["bench", "http://127.0.0.1:9", "--trace", "/nonexistent", "--requests", "3"], "trace file not found"),
    (["bench", "http://127.0.0.1:9", "--isl", "10", "--osl", "5", "--rate", "1", "--compare", "llama-3.1-8b",
      "--system", "h200", "--tp", "3"], "TP=3 does not divide"),
    # an option that takes one value, given twice: the parser kept the last one (perf ran on h100)
    (["perf", "llama-3.1-8b", "-s", "h200", "--system", "h100", "--isl", "10", "--osl", "10", "--batch", "1"],
     "--system: given with -s; it takes one value"),
    (["deploy", "llama-3.1-8b", "--engine", "vllm", "--engine=sglang"], "--engine: given twice"),
    # perf's load options: the error names one that was given (it named --concurrency whatever was given)
    (["perf", "llama-3.1-8b", "--system", "h200", "--isl", "10", "--osl", "5", "--batch", "8", "--max-throughput"],
     "--max-throughput: give exactly one of concurrency, max throughput or batch (its context optional); got batch "
     "and max throughput"),
    (["perf", "llama-3.1-8b", "--system", "h200", "--isl", "10", "--osl", "5", "--context", "40"],
     "--context: is the context of a --batch of decoding sequences; give --batch too"),
    (["perf", "llama-3.1-8b", "--system", "h200", "--isl", "10", "--osl", "5", "--batch", "1", "--experts-precision",
      "fp8"], "--experts-precision: Llama-3.1-8B has no routed experts"),
    # a free endpoint (both prices 0) made every comparison 'use the endpoint: $0.00/h'
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--system", "h200", "--endpoint-price",
      "in=0,out=0"], "--endpoint-price: endpoint prices are both 0"),
    # an impossible layout names the size at fault (it named no option)
    (["perf", "llama-3.1-8b", "--system", "h200", "--tp", "1", "--dp", "2", "--batch", "8", "--isl", "1024", "--osl",
      "256"], "--dp: impossible layout TP1 DP2 for Llama-3.1-8B: attention DP=2 needs an MoE model"),
    # a verdict from one simulated request said 'holds the SLOs' beside a 0.00x throughput 'disagreement'
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--system", "h200", "--verify",
      "--verify-requests", "1"], "--verify-requests: must be an integer in 100..2,000,000, got 1"),
    # two loads named no option
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--concurrency", "4", "--system", "h200"],
     "--concurrency: give only one of rate, concurrency, tokens_per_s (rate is given too)"),
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--system", "h200", "--endpoint-price",
      "x"], "--endpoint-price: expects in=$/Mtok,out=$/Mtok (e.g. in=0.6,out=2.2), got 'x'"),
    # a simulation without output lengths named no option
    (["simulate", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--rate", "1"],
     "--osl: no output lengths: give osl (tokens per answer), a scenario workload, or simulation.output"),
])
def test_usage_errors_are_one_line_exit_2(run_cli, args, says):
    code, out, err = run_cli(*args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], err


def test_a_plan_too_large_to_simulate_stands_unverified(run_cli):
    """--verify on a plan of more replicas than one simulation runs (4,096) failed the whole plan ('simulation
    (from --verify): replicas: Input should be less than or equal to 4096'); the plan stands, the verification
    says why it did not run."""
    args = ["llama-3.1-8b", "--isl", "30000", "--osl", "10", "--rate", "30000", "--system", "h200", "--no-disagg",
            "--verify"]
    code, out, err = run_cli("plan", *args, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["recommended"]["replicas"] > 4096
    assert result["verify"] == {"simulated": False, "reason": (
        f"the plan's {result['recommended']['serving_replicas']:,} serving replicas are more than the 4,096 one "
        "simulation runs; the plan stands unverified (simulate a share of it: fewer replicas at the same share of "
        "the load)")}
    code, out, err = run_cli("plan", *args)
    assert code == 0 and "Not simulated: the plan's" in " ".join(out.split()), err


def test_usage_error_through_the_installed_entry_point():
    """The console script (clusterfit.cli:main) in a fresh interpreter: no traceback, whatever typer vendors."""
    proc = subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", "perf",
                           "meta-llama/Llama-3.1-8B", "--isl", "10"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error:") and "--system" in proc.stderr


def _imports(path: Path) -> set[str]:
    """Absolute module names ``path`` imports (relative imports resolved inside clusterfit)."""
    tree = ast.parse(path.read_text())
    pkg = ["clusterfit", *path.relative_to(SRC).parent.parts]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = pkg[: len(pkg) - node.level + 1] if node.level else []
            mod = ".".join([*base, node.module] if node.module else base)
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def test_commands_never_import_the_cli():
    for path in (SRC / "commands").glob("*.py"):
        assert "clusterfit.cli" not in _imports(path), path.name


def test_cli_start_up_loads_no_physics():
    """`import clusterfit.cli` loads typer (and, in some typer releases, rich): numpy, pydantic, yaml and the
    physics load when a command runs."""
    code = ("import sys, clusterfit.cli; heavy = [m for m in ('numpy', 'pydantic', 'yaml', "
            "'clusterfit.api', 'clusterfit.perfmodel', 'clusterfit.arch') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_plan_loads_only_what_it_uses():
    """A plan without a scenario file, speculative options or --verify loads neither the scenario module nor the
    simulator's config (their pydantic models cost start-up time), nor numpy.ma (which numpy 2's np.unique imports
    on first use)."""
    unused = ("clusterfit.planning.scenario", "clusterfit.sim.config", "numpy.ma")
    code = ("import sys, clusterfit as cf; cf.plan(model='llama-3.1-8b', isl=1000, osl=200, rate=2, ttft_ms=2000, "
            f"tpot_ms=50, systems=['h200']); print([m for m in {unused!r} if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_no_long_functions_in_the_physics():
    """No function over 80 lines in perfmodel/, planning/, sim/ unless its docstring says why ("long because")."""
    long = []
    for folder in ("perfmodel", "planning", "sim"):
        for path in (SRC / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > 80 and "long because" not in (ast.get_docstring(node) or ""):
                        long.append(f"{folder}/{path.name}:{node.name} ({lines} lines)")
    assert not long


def test_fit_sessions_says_they_do_not_fit_and_how_many_nodes(run_cli):
    """Qwen3-235B fp8 on one 8x H100 node holds 28 sessions of 32k tokens (27 while the K/V projections of its 4 KV
    heads, replicated over TP8, were charged 7 times over); 64 need more nodes, and the node count it names does
    hold them (checked with the memory model at that size)."""
    code, out, err = run_cli("fit", "qwen3-235b-a22b", "--precision", "fp8", "--system", "h100", "--context",
                             "32768", "--sessions", "64", "--json")
    assert code == 0, err
    row = json.loads(out)["results"][0]
    sf = row["sessions_fit"]
    assert row["fits"] is False and sf["fit_on_shown_replica"] is False
    assert sf["held_by_shown_replica"] == row["max_sequences"] == 28 and row["nodes"] == 1
    assert "do not fit" in sf["explanation"] and f"takes {sf['nodes']} node(s)" in sf["explanation"]
    bigger = cf.fit(model="qwen3-235b-a22b", precision="fp8", systems=["h100"], context=32768,
                    nodes=sf["nodes_per_replica"]).results[0]
    assert sf["replicas"] * bigger.max_sequences >= 64
    assert (sf["replicas"] - 1) * bigger.max_sequences < 64
    smaller = cf.fit(model="qwen3-235b-a22b", precision="fp8", systems=["h100"], context=32768,
                     nodes=max(1, sf["nodes"] - 1)).results[0]
    assert smaller.max_sequences < 64          # one node fewer in one replica does not hold them
    code, out, _ = run_cli("fit", "qwen3-235b-a22b", "--precision", "fp8", "--system", "h100", "--context",
                           "32768", "--sessions", "20", "--json")
    assert json.loads(out)["results"][0]["fits"] is True


def test_api_names_stay_functions_when_every_module_is_loaded():
    """No subpackage or module shadows an API function (importing clusterfit.X binds X on the package)."""
    import importlib
    import pkgutil
    import types

    for info in pkgutil.walk_packages(cf.__path__, "clusterfit."):
        importlib.import_module(info.name)
    for name in ("fit", "perf", "plan", "simulate", "simulation_run", "deploy", "models", "model_info", "systems"):
        obj = getattr(cf, name)
        assert callable(obj) and not isinstance(obj, types.ModuleType), name


def test_deploy_is_exported():
    """cf.deploy is clusterfit.api.deploy (the deploy subpackage, once imported, does not hide it), listed in
    __all__ and dir(), and the deploy subpackage still imports by its dotted name."""
    import clusterfit.api
    import clusterfit.deploy.render  # noqa: F401   # binds no module over the function
    from clusterfit.deploy.render import render  # noqa: F401

    assert cf.deploy is clusterfit.api.deploy
    assert {"deploy", "DeployRequest", "DeployResult"} <= set(cf.__all__) and "deploy" in dir(cf)
    assert cf.DeployRequest is clusterfit.api.DeployRequest
    assert all(getattr(cf, name) is not None for name in cf.__all__)   # every name in __all__ resolves


def test_fit_default_context_stays_within_the_model(run_cli):
    """GPT-J-6B's config.json says max_position_embeddings 2048: fit's default context (32,768) is cut to it, while
    an explicit longer --context stays an error."""
    assert _cli_json(run_cli, "fit", "gpt-j-6b", "--system", "h200")["context"] == 2048
    assert _cli_json(run_cli, "fit", "llama-3.1-8b", "--system", "h200")["context"] == 32768
    code, _, err = run_cli("fit", "gpt-j-6b", "--system", "h200", "--context", "4096")
    assert code == 2 and "beyond gpt-j-6b's context of 2,048" in " ".join(err.split()), err


def test_fit_default_layout_of_a_moe_with_few_experts(run_cli, tmp_path):
    """A MoE with 3 experts on 8 GPUs: the default layout puts the experts on the largest divisor of TP that divides
    the expert count (1 here: every expert split by TP), not EP8, which the layout check refuses."""
    cfg = json.loads(Path(cf.__file__).parent.joinpath("catalog", "models", "Qwen__Qwen3-30B-A3B.json").read_text())
    cfg["num_experts"], cfg["num_experts_per_tok"] = 3, 2
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    out = _cli_json(run_cli, "fit", str(f), "--system", "h200")["results"][0]
    assert out["layout"] == {"tp": 8, "pp": 1, "ep": 1, "dp": 1} and out["fits"] and out["nodes_needed"] == 1


@pytest.mark.parametrize("args, says", [
    (["--isl", "10", "--osl", "10", "--batch", "5000", "--context", "100"],
     "--batch: 5000 sequences are more than the engine runs at once (max_num_seqs 1,024 over this replica, the "
     "engine's default on this GPU)"),
    (["--isl", "100", "--osl", "10", "--batch", "4", "--context", "50"],
     "--context: 50 tokens is less than the prompt (isl 100)"),
])
def test_perf_batch_and_context_the_engine_cannot_run(run_cli, args, says):
    """vLLM's max_num_seqs on an H200 is 1,024 (engines.yaml; smaller below 70 GiB, small_device): a decode
    batch above it is refused as one above a --max-num-seqs given is; a context shorter than the prompt is no
    decoding sequence's."""
    code, out, err = run_cli("perf", "llama-3.1-8b", "--system", "h200", *args)
    assert code == 2 and out == "" and says in " ".join(err.split()), err


def test_perf_says_when_the_gpu_lacks_the_weights_math(run_cli):
    """NVFP4 weights on an H100 (no fp4 tensor cores, hardware catalog) are modelled with bf16 math (the step model's
    effective_compute_dtype: the engines' W4A16 kernels) and perf says so; on a B200 (fp4 tensor cores) there is
    nothing to say. The note said fp8 math, which the model does not price."""
    args = ("perf", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--batch", "4", "--precision", "nvfp4")
    notes = _cli_json(run_cli, *args, "--system", "h100")["notes"]
    assert [n for n in notes if n.startswith("nvfp4 on h100_sxm: the GPU has no fp4 tensor cores; modelled as nvfp4 "
                                             "weights read from memory with bf16 math")]
    assert not [n for n in _cli_json(run_cli, *args, "--system", "b200")["notes"] if "tensor cores" in n]


def test_perf_concurrency_above_the_running_batch_queues_and_says_so():
    """Llama-3.1-70B fp8 on 2x H100 TP2 under TensorRT-LLM admits 61 requests of 2048+2048 tokens (derived by hand
    in tests/test_kv_admission.py); 200 clients: the other 139 wait (200/61 - 1) request cycles of osl x TPOT."""
    kw = dict(model="llama-3.1-70b", system="h100", tp=2, precision="fp8", isl=2048, osl=2048, engine="trtllm")
    at_cap = cf.perf(concurrency=61, **kw)
    over = cf.perf(concurrency=200, **kw)
    assert over.batch == at_cap.batch == 61 and at_cap.notes == []
    assert over.tpot_s == at_cap.tpot_s
    wait = (200 / 61 - 1) * 2048 * at_cap.tpot_s
    assert over.ttft_s == pytest.approx(at_cap.ttft_s + wait, rel=1e-12)
    assert "139 wait for a slot" in over.notes[0] and "KV cache" in over.notes[0]


def test_perf_batch_that_does_not_fit_is_an_error(run_cli):
    code, out, err = run_cli("perf", "llama-3.1-70b", "--system", "h100", "--tp", "2", "--precision", "fp8",
                             "--isl", "2048", "--osl", "2048", "--batch", "500", "--context", "4096")
    assert code == 2 and err.startswith("error: --batch: 500 sequences at context 4,096 do not fit")


@pytest.mark.parametrize("args, says", [
    (["--trace", "src/clusterfit/sim/traces/azure_conv_sample.csv", "--rate", "5"], "--rate: a trace gives"),
    (["--isl", "10", "--osl", "5", "--rate", "1", "--seed", "-1"], "--seed: must be an integer in 0..4,294,967,295"),
    (["--isl", "10", "--osl", "5", "--rate", "1", "--requests", "100000000"], "--requests: must be an integer in 1..5,000,000"),
    (["--isl", "10", "--osl", "5", "--rate", "1", "--replicas", "10000000"], "--replicas: must be an integer in 1..4,096"),
])
def test_simulate_bounds_and_clashes(run_cli, args, says):
    code, out, err = run_cli("simulate", "llama-3.1-8b", "--system", "h200", *args)
    assert code == 2 and out == "" and says in " ".join(err.split()), err


def test_autoscale_bounds_are_ordered():
    from clusterfit.sim.api import parse_simulation

    with pytest.raises(ClusterfitError, match="min_replicas .8. exceeds max_replicas .2."):
        parse_simulation({"autoscale": {"min_replicas": 8, "max_replicas": 2}})


@pytest.mark.parametrize("args, says", [
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--price", "hgx_h9000=3"],
     "--price: unknown system 'hgx_h9000'"),
    (["plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1e30"], "--rate: must be a number > 0"),
    (["fit", "llama-3.1-8b", "--experts-precision", "fp8"], "has no routed experts"),
])
def test_nonsense_is_refused(run_cli, args, says):
    code, out, err = run_cli(*args)
    assert code == 2 and out == "" and says in " ".join(err.split()), err


@pytest.mark.parametrize("args, says", [
    # Qwen3-8B's config.json: max_position_embeddings 40960
    (["perf", "qwen3-8b", "--system", "h200", "--isl", "200000", "--osl", "10", "--batch", "1"],
     "--isl: the sequence (isl + osl, or context) is 200,010 tokens, beyond Qwen3-8B's context of 40,960"),
    (["plan", "qwen3-8b", "--isl", "50000", "--osl", "100", "--rate", "1"], "beyond Qwen3-8B's context of 40,960"),
    (["simulate", "qwen3-8b", "--system", "h200", "--isl", "50000", "--osl", "100", "--rate", "1"],
     "beyond Qwen3-8B's context of 40,960"),
    (["fit", "phi-4", "--context", "20000"], "--context: context is 20,000 tokens, beyond phi-4's context of 16,384"),
])
def test_prompts_beyond_the_model_context_are_refused(run_cli, args, says):
    code, out, err = run_cli(*args)
    assert code == 2 and says in " ".join(err.split()), err
    code, out, err = run_cli(*args, "--allow-longer-context", "--json")
    assert code == 0, err


@pytest.mark.parametrize("change, says", [
    ({"num_attention_heads": 96, "num_key_value_heads": 5}, "must be a multiple of num_key_value_heads (5)"),
    ({"head_dim": -128}, "field 'head_dim' must be a positive integer, got -128"),
    ({"sliding_window": -4096}, "field 'sliding_window' must be a positive integer"),
    ({"torch_dtype": "float13"}, "torch_dtype 'float13' is not one of"),
])
def test_config_relations_are_checked(run_cli, tmp_path, change, says):
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 128256,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "torch_dtype": "bfloat16", "max_position_embeddings": 131072} | change
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    code, out, err = run_cli("model", str(f))
    assert code == 2 and says in " ".join(err.split()), err


@pytest.mark.parametrize("make, parameter, says", [
    (lambda: cf.FitRequest(model=5), "model", "input should be a valid string, got 5"),
    (lambda: cf.PlanRequest(model="llama-3.1-8b", rate=-1), "rate", "must be a number > 0"),
    (lambda: cf.SimulateRequest(model="llama-3.1-8b", system="h200", replicas="a"), "replicas",
     "must be an integer, got 'a'"),
    (lambda: cf.PerfRequest(model="llama-3.1-8b", system="h200", isl=1, osl=1, foo=1), "foo",
     "is not a parameter of PerfRequest"),
    (lambda: cf.FitRequest(model="llama-3.1-8b", sessions=True), "sessions", "true / false only"),
])
def test_request_models_built_directly_raise_parameter_error(make, parameter, says):
    """A request model constructed with a bad value raises the ParameterError parse_request gives (not pydantic's
    ValidationError); model_validate, model_copy and the HTTP bodies still work."""
    with pytest.raises(ParameterError) as info:
        make()
    assert info.value.parameter == parameter and f"{parameter}: " in str(info.value) and says in str(info.value)


def test_request_models_built_directly_match_parse_request():
    from clusterfit.schema import PlanRequest, parse_request

    with pytest.raises(ParameterError) as direct:
        PlanRequest(model="llama-3.1-8b", ttft_ms=0)
    with pytest.raises(ParameterError) as parsed:
        parse_request(PlanRequest, {"model": "llama-3.1-8b", "ttft_ms": 0})
    assert str(direct.value) == str(parsed.value)
    req = PlanRequest(model="llama-3.1-8b", rate=1)
    assert req.model_copy(update={"rate": 2}).rate == 2 and PlanRequest.model_validate({"rate": 3}).rate == 3
    from clusterfit.web.bodies import PlanBody

    with pytest.raises(ParameterError, match="catalog"):
        PlanBody(model="llama-3.1-8b", catalog=["x.yaml"])


def test_file_paths_take_a_pathlib_path(tmp_path):
    """model (a config.json) and trace take a pathlib.Path as scenario does; the answer is the string's."""
    config = Path(cf.__file__).parent / "catalog" / "models" / "meta-llama__Llama-3.1-8B.json"
    assert cf.FitRequest(model=config).model == str(config)
    assert cf.fit(model=config, systems=["h200"]) == cf.fit(model=str(config), systems=["h200"])
    assert cf.model_info(config).total_params == cf.model_info("llama-3.1-8b").total_params
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,100,10\n0.5,200,20\n1,50,5\n")
    by_path = cf.simulate(model="llama-3.1-8b", system="h200", trace=trace, replicas=1, seed=1)
    by_text = cf.simulate(model="llama-3.1-8b", system="h200", trace=str(trace), replicas=1, seed=1)
    assert by_path.requests == by_text.requests == 3 and by_path.ttft_s == by_text.ttft_s
    with pytest.raises(ParameterError, match="^trace: "):
        cf.simulate(model="llama-3.1-8b", system="h200", trace=5)


@pytest.mark.parametrize("call, parameter, says", [
    (lambda: cf.model_info("llama-3.1-8b", precision=8), "precision", "input should be a valid string, got 8"),
    (lambda: cf.model_info("llama-3.1-8b", kv_dtype=["fp8"]), "kv_dtype", "input should be a valid string"),
    (lambda: cf.model_info("llama-3.1-8b", foo=1), "foo", "is not a parameter of ModelInfoRequest"),
    (lambda: cf.model_info(), "model", "is required"),
    (lambda: cf.model_info(None), "model", "input should be a valid string, got None"),
    (lambda: cf.model_info("llama-3.1-8b", "fp8", "fp8", 4), "model_info", "1 more positional argument given (4)"),
    (lambda: cf.systems([None]), "catalog.0", "got None"),
    (lambda: cf.systems(5), "catalog", "input should be a valid list, got 5"),
    (lambda: cf.systems(foo=1), "foo", "is not a parameter of SystemsRequest"),
    (lambda: cf.systems([], 2), "systems", "systems() takes catalog"),
    (lambda: cf.models(1), "models", "models() takes no arguments"),
    (lambda: cf.models(x=1), "x", "is not a parameter of models()"),
])
def test_listing_functions_check_their_arguments(call, parameter, says):
    """model_info, systems and models raise a ParameterError naming a bad argument (they raised AttributeError or
    TypeError, and systems read a string as one-letter paths)."""
    with pytest.raises(ParameterError) as info:
        call()
    assert info.value.parameter == parameter and str(info.value).startswith(f"{parameter}: ")
    assert says in str(info.value)


def test_systems_takes_one_catalog_file_as_str_or_path(tmp_path):
    """A single str or Path is one catalog file (a list of it), not a sequence of one-letter paths; so for every
    request's catalog."""
    f = tmp_path / "mine.yaml"
    f.write_text("systems:\n  h200_16x:\n    name: two HGX H200 joined\n    gpu: H200-SXM-141GB\n"
                 "    gpus_per_node: 8\n    scale_up_domain_gpus: 16\n    nic_gbps_per_gpu: 400\n")
    for given in (f, str(f), [f], [str(f)]):
        assert "h200_16x" in [s.id for s in cf.systems(given).systems], given
    assert "h200_16x" not in [s.id for s in cf.systems().systems]
    assert cf.FitRequest(model="llama-3.1-8b", catalog=f).catalog == [f]
    with pytest.raises(ClusterfitError, match="hardware catalog not found: x.yaml"):
        cf.systems("x.yaml")
    with pytest.raises(ClusterfitError, match="hardware catalog not found: x.yaml"):
        cf.systems(Path("x.yaml"))
