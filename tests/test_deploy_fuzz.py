"""clusterfit deploy: defects a third fuzzing pass found, each through the CLI (clusterfit.cli:main) or cf.deploy.

Engine facts the tests rely on are cited where they are used (vLLM and SGLang sources and docs)."""

import shlex

import pytest
import yaml

import clusterfit as cf
from clusterfit.deploy.render import DeploySpec, engine_command


def _refused(run_cli, *args, says=()):
    """A usage error: one `error:` line, exit 2, naming what it says; nothing written to --out."""
    code, _, err = run_cli("deploy", *args)
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    flat = " ".join(err.split())
    for s in says:
        assert s in flat, flat
    return flat


def _argv(line):
    """The engine argv of a launch line (after `exec`), shell words split."""
    return shlex.split(line.split("exec ", 1)[1])


def _opt(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


# ---------------------------------------------------------------------------------------------------- H1
def _vllm_node_ranks(argv, nodes):
    """vLLM's own inference of each node's DP rank and local DP size from --nnodes/--node-rank
    (vllm/engine/arg_utils.py create_engine_config: local_world_size = dp x pp x tp // nnodes, data_parallel_rank =
    node_rank x local_world_size // (pp x tp), data_parallel_size_local = max(local_world_size // (pp x tp), 1);
    ParallelConfig.nnodes_within_dp = nnodes // (dp // dp_local))."""
    tp, pp, dp = (int(_opt(argv, f)) for f in ("--tensor-parallel-size", "--pipeline-parallel-size",
                                               "--data-parallel-size"))
    world, within = dp * pp * tp, pp * tp
    assert world % nodes == 0
    local_world = world // nodes
    local = max(local_world // within, 1)
    return [(r * local_world) // within for r in range(nodes)], local, nodes // (dp // local)


def test_vllm_dp_ranks_spanning_nodes_launch_with_nnodes(run_cli, tmp_path):
    """qwen3-235b on one-GPU GH200 nodes planned TP1 DP2 EP2 PP2 over 4 nodes: each DP rank (PP2) spans 2 nodes, and
    the launch line said --data-parallel-size-local 0 (gpus_on_node // (tp x pp) = 1 // 2), which starts no engine.
    vLLM places such ranks from --nnodes/--node-rank (the multiprocessing executor's multi-node launch)."""
    out = tmp_path / "gh1"
    code, _, err = run_cli("deploy", "qwen3-235b", "--system", "gh200_144gb_1x", "--isl", "4096", "--osl", "512",
                           "--rate", "0.5", "--tpot-ms", "80", "--max-nodes", "8", "--engine", "vllm", "--target",
                           "kubernetes", "--out", str(out))
    assert code == 0, err
    lws = yaml.safe_load((out / "leaderworkerset.yaml").read_text())
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["size"] == 4
    text = tmpl["leaderTemplate"]["spec"]["containers"][0]["args"][0]
    argv = _argv(next(x for x in text.splitlines() if "exec " in x))
    assert "--data-parallel-size-local" not in argv and "--data-parallel-start-rank" not in argv
    assert (_opt(argv, "--nnodes"), _opt(argv, "--node-rank"), _opt(argv, "--master-addr")) == \
        ("4", "${NODE_RANK}", "${LEADER_ADDR}")
    ranks, local, within = _vllm_node_ranks(argv, 4)
    assert ranks == [0, 0, 1, 1] and local == 1 and within == 2   # two DP ranks of two nodes each
    assert tmpl["workerTemplate"]["spec"]["containers"][0]["args"][0] == text


def test_a_dp_rank_that_does_not_tile_nodes_is_refused():
    """TP12 on 8-GPU nodes: a DP rank takes one and a half nodes, which no vLLM launch places."""
    spec = DeploySpec("m/x", "x", "vllm", tp=12, pp=1, ep=1, dp=2, nodes_per_replica=3, gpus_per_replica=24,
                      gpus_per_node=8, replicas=1, max_model_len=4096, memory_fraction=0.9, max_num_seqs=64,
                      max_num_batched_tokens=8192, kv_dtype="bf16")
    with pytest.raises(cf.ClusterfitError, match="TP12 x PP1 = 12 GPUs neither fits whole on a 8-GPU node"):
        engine_command(spec)


# ---------------------------------------------------------------------------------------------------- M2
def _run_sbatch(script, tmp_path, task):
    """Run a generated batch script for array task ``task`` with scontrol, srun and vllm stubbed: srun runs its
    command once (one node), vllm prints its argv. Returns stdout."""
    import os
    import subprocess

    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name, body in (("scontrol", 'echo node-a\n'),
                       ("srun", 'while [ "$1" != bash ]; do shift; done\nSLURM_NODEID=0 exec "$@"\n'),
                       ("vllm", 'echo "vllm $*"\n')):
        (stubs / name).write_text("#!/bin/bash\n" + body)
        (stubs / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "SLURM_ARRAY_TASK_ID": str(task),
           "SLURM_JOB_NODELIST": "node-a"}
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True).stdout


def test_slurm_array_tasks_sharing_a_node_serve_on_their_own_ports(run_cli, tmp_path):
    """llama-3.1-8b on H200 plans 1-GPU replicas: Slurm may pack several array tasks onto one node, and each
    served on the hard-coded port 8000. Each task now serves on 8000 + its array index and prints that endpoint."""
    out = tmp_path / "d"
    code, _, err = run_cli("deploy", "llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--rate",
                           "100", "--tpot-ms", "20", "--target", "slurm", "--out", str(out))
    assert code == 0, err
    script = out / "replica.sbatch"
    assert "#SBATCH --gpus-per-node=1" in script.read_text()
    seen = {}
    for task in (0, 1, 3):
        lines = _run_sbatch(script, tmp_path, task).splitlines()
        assert lines[0] == f"replica {task}: http://node-a:{8000 + task}", lines
        argv = lines[1].split()
        seen[task] = _opt(argv, "--port")
    assert seen == {0: "8000", 1: "8001", 3: "8003"}
    assert "8000 + its array index" in (out / "README.md").read_text()


# ------------------------------------------------------------------------------------------------- H2, H3
def _launch_opt(out, name):
    return _opt(_argv(next(x for x in (out / "launch.sh").read_text().splitlines() if "exec " in x)), name)


def test_default_max_model_len_holds_the_planned_request(run_cli, tmp_path):
    """qwen3.5-9b (262,144-token context) planned for 200,000 + 1,000-token requests was deployed with
    --max-model-len 131072 (the default's 131,072 cap), shorter than every request."""
    out = tmp_path / "h2"
    code, _, err = run_cli("deploy", "qwen3.5-9b", "--system", "h200", "--isl", "200000", "--osl", "1000", "--rate",
                           "0.1", "--out", str(out))
    assert code == 0, err
    assert 201_000 <= int(_launch_opt(out, "--max-model-len")) <= 262_144


def test_default_max_model_len_fits_one_dp_ranks_kv_cache(run_cli, tmp_path):
    """llama-3.1-70b fp8 on one H100 (TP1) holds ~4,674 KV tokens (clusterfit perf), but was deployed with
    --max-model-len 131072, which vLLM refuses (one max-length sequence must fit the KV cache). The default is now
    capped at what one DP rank holds, not below the planned request; a longer one given is refused with the figure."""
    args = ["llama-3.1-70b", "--precision", "fp8", "--system", "h100", "--isl", "500", "--osl", "100", "--rate", "0.2",
            "--tpot-ms", "200"]
    out = tmp_path / "h3"
    code, _, err = run_cli("deploy", *args, "--out", str(out))
    assert code == 0, err
    kv = cf.perf(model="llama-3.1-70b", precision="fp8", system="h100", isl=500, osl=100, tp=1,
                 concurrency=1).kv_capacity_tokens
    assert 4_000 < kv < 5_000
    assert 600 <= int(_launch_opt(out, "--max-model-len")) <= kv
    _refused(run_cli, *args, "--max-model-len", "8192", "--out", str(tmp_path / "never"),
             says=("error: --max-model-len: 8,192 tokens", "holds at most 4,6", "give at most"))
    assert not (tmp_path / "never").exists()
    code, _, err = run_cli("deploy", *args, "--max-model-len", "4096", "--out", str(tmp_path / "ok"))
    assert code == 0 and _launch_opt(tmp_path / "ok", "--max-model-len") == "4096", err


# ---------------------------------------------------------------------------------------------------- M3
def _run_launch(script, tmp_path, env_name):
    """Run a generated launch.sh with the engine stubbed to print the value of ``env_name`` and its argv."""
    import os
    import subprocess

    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name in ("vllm", "python3"):
        (stubs / name).write_text(f'#!/bin/bash\necho "{env_name}=${{{env_name}:-unset}}"\necho "$*"\n')
        (stubs / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != env_name}
    env["PATH"] = f"{stubs}:{os.environ['PATH']}"
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True).stdout


LONG = ["llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--rate", "1", "--max-model-len",
        "200000", "--allow-longer-context"]


def test_a_max_model_len_beyond_the_models_context_sets_the_engines_override(run_cli, tmp_path):
    """--max-model-len 200,000 for Llama-3.1-8B (131,072 positions) with --allow-longer-context was written bare;
    vLLM refuses it without VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (vllm/envs.py), SGLang without
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (sglang/srt/environ.py). TensorRT-LLM's is not known: refused."""
    for engine, name in (("vllm", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"),
                         ("sglang", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")):
        out = tmp_path / engine
        code, _, err = run_cli("deploy", *LONG, "--engine", engine, "--out", str(out))
        assert code == 0, err
        printed = _run_launch(out / "launch.sh", tmp_path, name).splitlines()
        assert printed[0] == f"{name}=1" and "200000" in printed[1].split(), printed
        text = (out / "launch.sh").read_text()
        assert text.index("# max model length 200,000 is beyond the model's 131,072") < text.index(f"export {name}=1")
        assert f"`{name}=1`" in (out / "README.md").read_text()
        k8s = tmp_path / f"{engine}-k8s"
        code, _, err = run_cli("deploy", *LONG, "--engine", engine, "--target", "kubernetes", "--out", str(k8s))
        assert code == 0, err
        args = yaml.safe_load((k8s / "deployment.yaml").read_text())["spec"]["template"]["spec"]["containers"][0]
        assert f"export {name}=1\nexec " in args["args"][0]
        code, _, err = run_cli("deploy", *LONG, "--engine", engine, "--target", "slurm", "--out",
                               str(tmp_path / f"{engine}-slurm"))
        assert code == 0 and f"export {name}=1" in (tmp_path / f"{engine}-slurm" / "replica.sbatch").read_text()
    # within the model's context nothing is set
    code, _, err = run_cli("deploy", *LONG[:-3], "--out", str(tmp_path / "plain"))
    assert code == 0 and "ALLOW" not in (tmp_path / "plain" / "launch.sh").read_text(), err
    _refused(run_cli, *LONG, "--engine", "trtllm", "--out", str(tmp_path / "never"),
             says=("error: --max-model-len:", "not trtllm"))


def test_a_saved_plan_beyond_the_models_context_needs_allow_longer_context(run_cli, tmp_path):
    """A plan made with --allow-longer-context deploys its requests' length only when deploy is told so too."""
    code, out, err = run_cli("plan", "llama-3.1-8b", "--system", "h200", "--isl", "150000", "--osl", "1000", "--rate",
                             "0.05", "--allow-longer-context", "--no-disagg", "--json")
    assert code == 0, err
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    _refused(run_cli, "--plan", str(plan), "--out", str(tmp_path / "never"),
             says=("error: --plan:", "151,000", "--allow-longer-context"))
    code, _, err = run_cli("deploy", "--plan", str(plan), "--allow-longer-context", "--out", str(tmp_path / "ok"))
    assert code == 0, err
    assert _launch_opt(tmp_path / "ok", "--max-model-len") == "151000"
    assert "export VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in (tmp_path / "ok" / "launch.sh").read_text()


# ---------------------------------------------------------------------------------------------------- M1
@pytest.mark.parametrize("model, stored", [("gpt-oss-20b", "mxfp4"), ("kimi-k2.5", "int4_g32")])
def test_fp8_is_refused_for_a_checkpoint_stored_in_another_quantized_format(run_cli, tmp_path, model, stored):
    """--precision fp8 on MXFP4 / INT4 checkpoints wrote --quantization fp8, which vLLM refuses when the
    checkpoint's quantization_config says otherwise (ModelConfig._verify_quantization); bf16 was already refused
    for fp8_block checkpoints the same way (api._check_deployable_precision)."""
    _refused(run_cli, model, "--precision", "fp8", "--system", "h200", "--isl", "1000", "--osl", "200", "--rate",
             "0.5", "--out", str(tmp_path / "never"),
             says=("error: --precision: fp8:", f"stores {stored} weights", "refuses a --quantization fp8",
                   "at precision checkpoint"))
    assert not (tmp_path / "never").exists()


def test_an_mxfp4_checkpoint_deploys_as_stored(run_cli, tmp_path):
    out = tmp_path / "oss"
    code, _, err = run_cli("deploy", "gpt-oss-20b", "--system", "h200", "--isl", "1000", "--osl", "200", "--rate",
                           "0.5", "--out", str(out))
    assert code == 0 and "--quantization" not in (out / "launch.sh").read_text(), err


# ---------------------------------------------------------------------------------------------------- M4
def test_kubernetes_is_refused_for_a_local_checkpoint(tmp_path):
    """cf.deploy(model='DIR/config.json', target='kubernetes') wrote pods serving DIR, a path on this machine that
    the pods cannot see; shell and slurm (nodes that hold DIR) still serve it."""
    import shutil
    from pathlib import Path

    ckpt = tmp_path / "qwen8"
    ckpt.mkdir()
    shutil.copy(Path(cf.__file__).parent / "catalog" / "models" / "Qwen__Qwen3-8B.json", ckpt / "config.json")
    ask = dict(model=str(ckpt / "config.json"), systems=["h200"], isl=1024, osl=128, rate=5)
    with pytest.raises(cf.ParameterError) as e:
        cf.deploy(**ask, target="kubernetes", out=tmp_path / "never")
    assert e.value.parameter == "target" and "give the model's Hugging Face id" in str(e.value)
    assert not (tmp_path / "never").exists()
    for target in ("shell", "slurm"):
        files = {f.path: f.text for f in cf.deploy(**ask, target=target).files}
        assert str(ckpt.resolve()) in "".join(files.values())


# ---------------------------------------------------------------------------------------------------- L1
def test_fp32_kv_is_refused(run_cli, tmp_path):
    """--kv-dtype fp32 plans were deployed with --kv-cache-dtype auto (a 16-bit cache, not the one planned): no
    engine has an fp32 KV cache (vLLM vllm/config/cache.py CacheDType: auto, bfloat16, fp8 variants)."""
    ask = ["llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--rate", "1"]
    _refused(run_cli, *ask, "--kv-dtype", "fp32", "--out", str(tmp_path / "never"),
             says=("error: --kv-dtype: fp32:", "--kv-dtype bf16 or fp8"))
    code, out, err = run_cli("plan", *ask, "--kv-dtype", "fp32", "--no-disagg", "--json")
    assert code == 0, err
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    _refused(run_cli, "--plan", str(plan), "--out", str(tmp_path / "never"),
             says=("error: --plan:", "kv_dtype is 'fp32'"))
    assert not (tmp_path / "never").exists()


# ---------------------------------------------------------------------------------------------------- H4
AMD_ASK = ["llama-3.1-8b", "--isl", "1000", "--osl", "200", "--rate", "1"]


def test_amd_gpus_get_amd_resources_and_vllms_rocm_image(run_cli, tmp_path):
    """mi300x_platform got `nvidia.com/gpu` and the CUDA image vllm/vllm-openai. AMD's device plugin exposes
    `amd.com/gpu` (ROCm/k8s-device-plugin) and vLLM publishes vllm/vllm-openai-rocm (docs, installation/gpu/
    rocm.inc.md); SGLang has no pinned ROCm image here, so its Kubernetes files are refused."""
    out = tmp_path / "mi300x"
    code, _, err = run_cli("deploy", *AMD_ASK, "--system", "mi300x_platform", "--target", "kubernetes", "--out",
                           str(out))
    assert code == 0, err
    text = (out / "deployment.yaml").read_text()
    pod = yaml.safe_load(text)["spec"]["template"]["spec"]["containers"][0]
    assert pod["image"] == "vllm/vllm-openai-rocm:v0.33.0"
    assert pod["resources"]["limits"] == {"amd.com/gpu": "1"} and "nvidia" not in text
    kv = pytest.importorskip("kubernetes_validate")
    kv.validate(yaml.safe_load(text), "1.30.0", strict=True)
    code, _, err = run_cli("deploy", *AMD_ASK, "--system", "mi300x_platform", "--target", "slurm", "--out",
                           str(tmp_path / "slurm"))
    assert code == 0 and "#SBATCH --gpus-per-node=1" in (tmp_path / "slurm" / "replica.sbatch").read_text(), err
    _refused(run_cli, *AMD_ASK, "--system", "mi300x_platform", "--engine", "sglang", "--target", "kubernetes",
             "--out", str(tmp_path / "never"), says=("error: --target: kubernetes:", "no sglang image"))


def test_amd_shell_files_name_hips_visible_devices_variable(run_cli, tmp_path):
    """launch.sh on AMD GPUs named HIP_VISIBLE_DEVICES but its README said CUDA_VISIBLE_DEVICES: both name HIP's
    variable now (ROCm docs, HIP reference env_variables.html, "GPU isolation variables"); NVIDIA keeps CUDA's."""
    for system, variable, other in (("mi300x_platform", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
                                    ("h200", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")):
        out = tmp_path / system
        code, _, err = run_cli("deploy", *AMD_ASK, "--system", system, "--out", str(out))
        assert code == 0, err
        for name in ("launch.sh", "README.md"):
            text = (out / name).read_text()
            assert variable in text and other not in text, (system, name, text)


@pytest.mark.parametrize("system", ["tpu_v6e_host", "gaudi3_8x"])
def test_tpus_and_gaudi_get_a_shell_command_only(run_cli, tmp_path, system):
    """TPU and Gaudi systems got `nvidia.com/gpu`, a CUDA image and Slurm `--gpus-per-node`: clusterfit knows no
    resource or image for them, so it writes the engine's shell command and refuses the other targets."""
    for target in ("kubernetes", "slurm"):
        _refused(run_cli, *AMD_ASK, "--system", system, "--target", target, "--out", str(tmp_path / "never"),
                 says=(f"error: --target: {target}:", system, "shell command only"))
    assert not (tmp_path / "never").exists()
    code, _, err = run_cli("deploy", *AMD_ASK, "--system", system, "--out", str(tmp_path / "sh"))
    assert code == 0 and "CUDA_VISIBLE_DEVICES" not in (tmp_path / "sh" / "launch.sh").read_text(), err


# ---------------------------------------------------------------------------------------------------- L6
def test_the_readmes_deploy_example_says_what_it_writes():
    """The README said the GLM-5.3 H100 example writes '1 replica of TP1 DP16 EP16'; the same command writes 2. Its
    H200 plan (two single-node replicas at TPOT <= 60 ms) is checked the same way."""
    from pathlib import Path

    from test_deploy import GLM

    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    how = dict(engine="vllm", target="kubernetes")
    h100, h200 = (cf.deploy(**GLM, **how, systems=[s]).plan for s in ("h100", "h200"))
    assert (f"`leaderworkerset.yaml` ({h100.replicas} replicas of {h100.layout}, each over "
            f"{h100.nodes_per_replica} H100 nodes, size {h100.nodes_per_replica})") in readme
    assert h200.nodes_per_replica == 1
    assert (f"with `--system h200` it writes `deployment.yaml` ({h200.replicas} replicas of {h200.layout}, "
            f"{h200.gpus_per_replica} GPUs each, predicted at a TPOT p90 of {h200.tpot_s * 1e3:.1f} ms)") in readme
