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
