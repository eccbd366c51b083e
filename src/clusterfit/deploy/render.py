"""Render a plan's recommended (or chosen) configuration as launch commands and manifests.

Pinned engine versions and images (the flag lists in ``catalog/deploy/`` come from the same versions):
vLLM 0.33.0 (``vllm serve``), SGLang 0.5.23 (``python3 -m sglang.launch_server``), TensorRT-LLM 1.2
(``trtllm-serve``, single-node replicas only). Every size the plan assumed is passed explicitly: the layout, the
maximum model length, the KV dtype, the memory fraction, the running-sequence cap and the tokens per step.

Multi-node replicas start without Ray: each node runs the engine with its node rank (``NODE_RANK``) and the first
node's address (``LEADER_ADDR``), set by the target (LeaderWorkerSet ``LWS_*`` variables, ``$SLURM_NODEID`` read
inside the ``srun`` task, or the user for ``shell``). Worker nodes run headless (vLLM).
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import ClusterfitError, ParameterError
from ..speculative import HEAD_DRAFTERS

ENGINE_VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23", "trtllm": "1.2"}
IMAGES = {"vllm": "vllm/vllm-openai:v0.33.0", "sglang": "lmsysorg/sglang:v0.5.23",
          "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:1.2.0"}
FLAG_FILES = {"vllm": "vllm-0.33.0-engine-flags.txt", "sglang": "sglang-0.5.23-server-flags.txt",
              "trtllm": "trtllm-1.2-serve-flags.txt"}
PORT = 8000
#: the port argument of a launch that reads the port from the shell variable PORT (a single-node launch.sh, each
#: Slurm array task); _shell_line keeps it for the shell to expand
PORT_VAR = "${PORT}"
#: the variable that gives a process its GPUs, per vendor: CUDA's CUDA_VISIBLE_DEVICES; HIP's HIP_VISIBLE_DEVICES on
#: AMD GPUs (ROCm docs, rocm.docs.amd.com/projects/HIP/en/latest/reference/env_variables.html, "GPU isolation
#: variables": HIP_VISIBLE_DEVICES, "Device indices exposed to HIP applications"; ROCR_VISIBLE_DEVICES filters
#: below HIP, for every ROCm runtime)
VISIBLE_DEVICES = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "HIP_VISIBLE_DEVICES"}
#: the Kubernetes device-plugin resource per GPU vendor: NVIDIA's k8s-device-plugin `nvidia.com/gpu`, AMD's
#: ROCm/k8s-device-plugin `amd.com/gpu` (instinct.docs.amd.com/projects/k8s-device-plugin: "Exposes AMD GPUs as
#: amd.com/gpu resources"); Slurm schedules both as GRES `gpu` (gres.conf AutoDetect=nvml / rsmi)
GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
#: images for AMD GPUs: vLLM's official ROCm image, vllm/vllm-openai-rocm, tagged by release like vllm/vllm-openai
#: (vllm docs/getting_started/installation/gpu/rocm.inc.md, "pre-built images"); none is pinned for SGLang's or
#: TensorRT-LLM's (SGLang's ROCm tags name a ROCm version and GPU family; TensorRT-LLM runs on NVIDIA GPUs only)
ROCM_IMAGES = {"vllm": "vllm/vllm-openai-rocm:v0.33.0"}
TRTLLM_CONFIG = "extra-llm-api-config.yaml"


@functools.lru_cache(maxsize=None)
def flag_list(engine: str) -> frozenset[str]:
    """Every option the pinned engine version accepts (names and aliases), from ``catalog/deploy/``."""
    text = importlib.resources.files("clusterfit.catalog").joinpath("deploy").joinpath(FLAG_FILES[engine]).read_text("utf-8")
    out: set[str] = set()
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        out.update(w for w in line.split() if w.startswith("-"))
    return frozenset(out)


#: What a checkpoint (a Hugging Face id or a directory) and a served model name may hold.
SAFE_NAME = r"/?[A-Za-z0-9_][A-Za-z0-9_./-]*"


@dataclass(frozen=True)
class DeploySpec:
    """What the files must reproduce: one replica's layout and engine settings, and how many replicas."""

    model_id: str
    served_name: str
    engine: str
    tp: int
    pp: int
    ep: int
    dp: int
    nodes_per_replica: int
    gpus_per_replica: int
    gpus_per_node: int
    replicas: int
    max_model_len: int
    memory_fraction: float
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_dtype: str
    quantization: str | None = None
    enforce_eager: bool = False
    summary: list[str] = field(default_factory=list)    # README lines: load, SLOs, predictions, cost
    #: speculative decoding the plan sized for: the drafter (clusterfit.speculative.SpeculativeMethod), draft tokens
    #: per step, and the draft checkpoint EAGLE / EAGLE-3 need (None: no speculative decoding)
    speculative_method: str | None = None
    num_speculative_tokens: int = 0
    draft_model: str | None = None
    #: the model's own context (max_position_embeddings; None: unknown): a max_model_len beyond it needs the engine's
    #: override (engine_env)
    model_context: int | None = None
    #: the system (its catalog id) and its accelerators' vendor (hardware.Gpu.vendor: nvidia, amd, intel, google)
    system: str = ""
    vendor: str = "nvidia"

    def __post_init__(self) -> None:
        # the checkpoint and the served name go into shell commands, YAML and Slurm scripts as plain words (the shell
        # launcher double-quotes an argument holding `$` so that ${PORT} expands: a name must not hold one)
        for what, value in (("checkpoint", self.model_id), ("served model name", self.served_name)):
            if not re.fullmatch(SAFE_NAME, value):
                raise ParameterError("model", f"the {what} {value!r} must match {SAFE_NAME} to be written into "
                                     "launch commands and manifests")

    @property
    def gpus_on_node(self) -> int:
        return min(self.gpus_per_replica, self.gpus_per_node)

    @property
    def name(self) -> str:
        """A DNS-1035 label for Kubernetes objects and Slurm job names."""
        s = re.sub(r"[^a-z0-9-]+", "-", self.served_name.lower()).strip("-")
        s = re.sub(r"^[^a-z]+", "", s) or "model"
        return s[:40].rstrip("-")


@dataclass(frozen=True)
class GeneratedFile:
    path: str
    role: str
    text: str
    executable: bool = False


def _kv(engine: str, kv_dtype: str) -> str:
    fp8 = kv_dtype.lower().startswith("fp8")
    if engine == "sglang":
        return "fp8_e4m3" if fp8 else "auto"
    return "fp8" if fp8 else "auto"


#: SGLang's --speculative-algorithm per drafter: MTP (NextN) layers run as EAGLE, EAGLE-3 heads as EAGLE3 (SGLang
#: docs, advanced_features/speculative_decoding: "--speculative-algorithm EAGLE3", "Model is MTP-enabled: use MTP via
#: speculative decoding"; python/sglang/srt/server_args.py treats NEXTN as EAGLE)
SGLANG_ALGORITHMS = {"mtp": "EAGLE", "eagle": "EAGLE", "eagle3": "EAGLE3"}
#: vLLM's n-gram window (docs/features/speculative_decoding/n_gram.md example: prompt_lookup_max 4)
NGRAM_LOOKUP_MAX = 4


def speculative_args(spec: DeploySpec) -> list[str]:
    """The engine's speculative-decoding arguments for the plan's drafter (none without one). vLLM: one
    ``--speculative-config`` JSON (docs/features/speculative_decoding: ``{"method": "mtp", "num_speculative_tokens":
    1}``; EAGLE-3 with the draft checkpoint as ``model``; n-gram with ``prompt_lookup_max``). SGLang: chain drafts,
    ``--speculative-eagle-topk 1`` and ``--speculative-num-draft-tokens`` = steps + 1 (the chain's tokens and the
    bonus token), the draft checkpoint as ``--speculative-draft-model-path``. Errors say what the engine needs."""
    import json

    m, k = spec.speculative_method, spec.num_speculative_tokens
    if m is None:
        if spec.draft_model:
            raise ParameterError("speculative_draft_model", "the plan has no speculative decoding (plan with "
                                 "--num-speculative-tokens, or drop the draft model)")
        return []
    if m in HEAD_DRAFTERS and not spec.draft_model:
        raise ParameterError("speculative_draft_model", f"{m} drafts with a separate draft checkpoint; give its "
                             "Hugging Face id (the EAGLE head trained for this model)")
    if m not in HEAD_DRAFTERS and spec.draft_model:
        raise ParameterError("speculative_draft_model", f"{m} drafts without a separate checkpoint; drop it")
    if spec.engine == "vllm":
        cfg: dict[str, object] = {"method": m, "num_speculative_tokens": k}
        if spec.draft_model:
            cfg["model"] = spec.draft_model
        if m == "ngram":
            cfg["prompt_lookup_max"] = NGRAM_LOOKUP_MAX
        return ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    if spec.engine == "sglang":
        if m not in SGLANG_ALGORITHMS:
            raise ParameterError("speculative_method", f"clusterfit writes SGLang's speculative flags for "
                                 f"{', '.join(SGLANG_ALGORITHMS)}, not {m}")
        out = ["--speculative-algorithm", SGLANG_ALGORITHMS[m], "--speculative-num-steps", str(k),
               "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(k + 1)]
        return out + (["--speculative-draft-model-path", spec.draft_model] if spec.draft_model else [])
    raise ParameterError("engine", f"{spec.engine}: clusterfit writes speculative decoding for vllm and sglang; "
                         "TensorRT-LLM takes it in its LLM API options (speculative_config), not generated here")


def engine_command(spec: DeploySpec, port: str = str(PORT)) -> list[str]:
    """The engine's argv for one node of a replica, serving on ``port`` (a number, or PORT_VAR for the shell's
    ``${PORT}``). Multi-node replicas use the shell variables ``NODE_RANK`` and ``LEADER_ADDR``; vLLM worker nodes
    add ``"${HEADLESS[@]}"`` (``--headless`` when NODE_RANK > 0)."""
    s, multi = spec, spec.nodes_per_replica > 1
    if s.engine == "vllm":
        cmd = ["vllm", "serve", s.model_id, "--served-model-name", s.served_name, "--host", "0.0.0.0",
               "--port", port, "--tensor-parallel-size", str(s.tp), "--pipeline-parallel-size", str(s.pp),
               "--data-parallel-size", str(s.dp)]
        if s.ep > 1:
            cmd.append("--enable-expert-parallel")
        cmd += ["--max-model-len", str(s.max_model_len), "--gpu-memory-utilization", f"{s.memory_fraction:g}",
                "--max-num-seqs", str(s.max_num_seqs), "--max-num-batched-tokens", str(s.max_num_batched_tokens),
                "--kv-cache-dtype", _kv("vllm", s.kv_dtype)]
        if s.quantization:
            cmd += ["--quantization", s.quantization]
        if s.enforce_eager:
            cmd.append("--enforce-eager")
        cmd += speculative_args(s)
        if multi:
            rank_gpus, node = s.tp * s.pp, s.gpus_per_node
            if s.dp > 1 and rank_gpus <= node and node % rank_gpus == 0:
                # whole DP ranks on each node: DP ranks per node, the first node's address (docs/serving/
                # data_parallel_deployment.md, "Internal Load Balancing")
                local = node // rank_gpus
                cmd += ["--data-parallel-size-local", str(local), "--data-parallel-start-rank",
                        f"$((NODE_RANK * {local}))", "--data-parallel-address", "${LEADER_ADDR}",
                        "--data-parallel-rpc-port", "13345"]
            elif s.dp == 1 or rank_gpus % node == 0:
                # TP/PP across nodes, or DP ranks that each span whole nodes: the multiprocessing executor's
                # --nnodes/--node-rank launch, from which vLLM infers each node's DP rank and local DP size
                # (vllm/engine/arg_utils.py create_engine_config, `if self.nnodes > 1`; a rank spans
                # ParallelConfig.nnodes_within_dp nodes; vllm-project/vllm PR 23691)
                cmd += ["--nnodes", str(s.nodes_per_replica), "--node-rank", "${NODE_RANK}",
                        "--master-addr", "${LEADER_ADDR}", "--master-port", "29500"]
            else:
                raise ClusterfitError(
                    f"engine vllm: a DP rank of TP{s.tp} x PP{s.pp} = {rank_gpus} GPUs neither fits whole on a "
                    f"{node}-GPU node nor spans whole nodes, so vLLM cannot place the {s.dp} DP ranks of "
                    f"{s.nodes_per_replica} nodes; plan a layout whose TP x PP divides {node} or is a multiple of it")
            cmd.append('"${HEADLESS[@]}"')
        return cmd
    if s.engine == "sglang":
        cmd = ["python3", "-m", "sglang.launch_server", "--model-path", s.model_id, "--served-model-name",
               s.served_name, "--host", "0.0.0.0", "--port", port, "--tp-size", str(s.tp * s.dp),
               "--pp-size", str(s.pp)]
        if s.dp > 1:
            cmd += ["--dp-size", str(s.dp), "--attn-dp-size", str(s.dp)]
        if s.ep > 1:
            cmd += ["--ep-size", str(s.ep)]
        cmd += ["--context-length", str(s.max_model_len), "--mem-fraction-static", f"{s.memory_fraction:g}",
                "--max-running-requests", str(s.max_num_seqs * s.dp),
                # SGLang divides --chunked-prefill-size among the attention-DP ranks (server_args.py
                # _handle_data_parallelism); max_num_batched_tokens is per rank
                "--chunked-prefill-size", str(s.max_num_batched_tokens * s.dp), "--kv-cache-dtype",
                _kv("sglang", s.kv_dtype)]
        if s.quantization:
            cmd += ["--quantization", s.quantization]
        if s.enforce_eager:
            cmd.append("--disable-cuda-graph")
        cmd += speculative_args(s)
        if multi:
            cmd += ["--nnodes", str(s.nodes_per_replica), "--node-rank", "${NODE_RANK}",
                    "--dist-init-addr", "${LEADER_ADDR}:20000"]
        return cmd
    if s.engine == "trtllm":
        speculative_args(s)  # refuses a plan with drafts: not generated for TensorRT-LLM
        if multi:
            raise ClusterfitError(
                f"engine trtllm: a {s.nodes_per_replica}-node replica needs an MPI launch (trtllm-llmapi-launch) "
                "that clusterfit does not generate; plan and deploy with --engine vllm or sglang (a saved plan: "
                "plan again with it and deploy that plan), or plan a single-node layout (--system with a larger "
                "node)")
        return ["trtllm-serve", s.model_id, "--host", "0.0.0.0", "--port", port, "--backend", "pytorch",
                "--tp_size", str(s.tp * s.dp), "--pp_size", str(s.pp), "--ep_size", str(s.ep),
                "--max_batch_size", str(s.max_num_seqs), "--max_num_tokens", str(s.max_num_batched_tokens),
                "--max_seq_len", str(s.max_model_len), "--free_gpu_memory_fraction", f"{s.memory_fraction:g}",
                "--config", TRTLLM_CONFIG]
    raise ClusterfitError(f"engine {s.engine!r}: deployment files exist for vllm, sglang and trtllm")


def _check_flags(spec: DeploySpec, cmd: list[str]) -> None:
    known = flag_list(spec.engine)
    bad = [a for a in cmd if a.startswith("--") and a not in known]
    if bad:  # a layout the engine has no flag for
        raise ClusterfitError(f"engine {spec.engine} {ENGINE_VERSIONS[spec.engine]} has no flag {bad[0]}")


def _shell_line(cmd: list[str]) -> str:
    """The argv as one shell line: literal words quoted, the ``$``-expansions kept for the shell."""
    return " ".join(a if a.startswith('"') else f'"{a}"' if "$" in a else shlex.quote(a) for a in cmd)


def _trtllm_yaml(spec: DeploySpec) -> str:
    doc: dict = {"enable_attention_dp": spec.dp > 1,
                 "kv_cache_config": {"dtype": _kv("trtllm", spec.kv_dtype),
                                     "free_gpu_memory_fraction": spec.memory_fraction}}
    if spec.enforce_eager:
        doc["cuda_graph_config"] = None
    return "# TensorRT-LLM 1.2 LLM API options for trtllm-serve --config (written by clusterfit deploy)\n" + \
        yaml.safe_dump(doc, sort_keys=False)


#: the variable each engine reads before it accepts a max model length beyond the model's max_position_embeddings:
#: vLLM vllm/envs.py VLLM_ALLOW_LONG_MAX_MODEL_LEN ("1" or "true"; else ModelConfig refuses the length), SGLang
#: python/sglang/srt/environ.py SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN (EnvBool, read by configs/model_config.py)
LONG_CONTEXT_ENV = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"}
_ENV_SOURCE = {"vllm": "vllm/envs.py", "sglang": "sglang/srt/environ.py"}


def engine_env(spec: DeploySpec) -> list[tuple[str, str, str]]:
    """Environment variables the engine needs for this spec: (name, value, why). A max model length beyond the
    model's context (deploy --allow-longer-context) sets the engine's override; TensorRT-LLM's is not known here."""
    if spec.model_context is None or spec.max_model_len <= spec.model_context:
        return []
    if spec.engine not in LONG_CONTEXT_ENV:
        raise ParameterError("max_model_len", f"{spec.max_model_len:,} tokens is beyond the model's context of "
                             f"{spec.model_context:,}: clusterfit writes the override for vllm and sglang only "
                             f"(not {spec.engine}); deploy with --engine vllm or sglang, or a length within the context")
    why = (f"max model length {spec.max_model_len:,} is beyond the model's {spec.model_context:,} "
           f"(max_position_embeddings; --allow-longer-context): {spec.engine} refuses it without this "
           f"({_ENV_SOURCE[spec.engine]}); positions past the model's own need its RoPE scaling")
    return [(LONG_CONTEXT_ENV[spec.engine], "1", why)]


def _env_prelude(spec: DeploySpec) -> str:
    """The engine's environment variables as commented shell exports (engine_env)."""
    return "".join(f"# {why}\nexport {name}={value}\n" for name, value, why in engine_env(spec))


def _node_prelude(spec: DeploySpec) -> str:
    if spec.nodes_per_replica == 1:
        return ""
    return ('HEADLESS=()\nif [ "${NODE_RANK}" -gt 0 ]; then HEADLESS=(--headless); fi\n'
            if spec.engine == "vllm" else "")


# ------------------------------------------------------------------------------------------ targets
def _visible(spec: DeploySpec) -> str:
    return VISIBLE_DEVICES.get(spec.vendor, "the vendor's visible-devices variable")


def _shell(spec: DeploySpec) -> list[GeneratedFile]:
    multi = spec.nodes_per_replica > 1
    # a single-node launch.sh serves on ${PORT} (default PORT); a multi-node one on PORT itself
    cmd = engine_command(spec, str(PORT) if multi else PORT_VAR)
    _check_flags(spec, cmd)
    lines = ["#!/usr/bin/env bash",
             f"# {spec.engine} {ENGINE_VERSIONS[spec.engine]}: one replica of {spec.served_name} "
             f"({spec.gpus_per_replica} GPUs over {spec.nodes_per_replica} node(s)); the plan runs {spec.replicas}.",
             "set -euo pipefail"]
    env = _env_prelude(spec)
    if env:
        lines.append(env.rstrip("\n"))
    if multi:
        lines += ["# Run on every node of the replica: NODE_RANK=0..%d, LEADER_ADDR=the address of node 0."
                  % (spec.nodes_per_replica - 1),
                  ': "${NODE_RANK:?set NODE_RANK (0 on the first node)}"',
                  ': "${LEADER_ADDR:?set LEADER_ADDR (the first node address)}"']
        node = _node_prelude(spec)
        if node:
            lines.append(node.rstrip("\n"))
    else:
        if spec.gpus_per_node // spec.gpus_per_replica > 1:
            lines.append(f"# Several replicas share a node: give each its GPUs ({_visible(spec)}) and a PORT.")
        else:
            lines.append("# One replica per node (all its GPUs); PORT sets the port.")
        lines.append(f'PORT="${{PORT:-{PORT}}}"')
    lines.append("exec " + _shell_line(cmd))
    files = [GeneratedFile("launch.sh", "engine command (one node of one replica)", "\n".join(lines) + "\n", True)]
    if spec.engine == "trtllm":
        files.append(GeneratedFile(TRTLLM_CONFIG, "engine config (trtllm-serve --config)", _trtllm_yaml(spec)))
    return files


def _labels(spec: DeploySpec) -> dict:
    return {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/managed-by": "clusterfit"}


def _target_for_vendor(spec: DeploySpec, target: str) -> None:
    """Refuse what clusterfit cannot write for the system's accelerators (TensorRT-LLM off NVIDIA GPUs is refused
    when planning): Kubernetes and Slurm for TPUs and Gaudi (no device-plugin resource or image pinned here; `--gpus-per-node` asks Slurm for
    GPUs), Kubernetes for SGLang on AMD GPUs (no ROCm image pinned)."""
    where = f"{spec.system or 'this system'} ({spec.vendor} accelerators)"
    if spec.vendor not in GPU_RESOURCES and target in ("kubernetes", "slurm"):
        raise ParameterError("target", f"{target}: clusterfit writes no {target} files for {where}: it knows no "
                             f"device resource or image for them; it writes the engine's shell command only "
                             "(--target shell, run with the vendor's build of the engine)")
    if target == "kubernetes" and spec.vendor == "amd" and spec.engine not in ROCM_IMAGES:
        raise ParameterError("target", f"kubernetes: clusterfit pins no {spec.engine} image for {where} (vLLM's is "
                             f"{ROCM_IMAGES['vllm']}); deploy with --engine vllm, or --target shell or slurm")


def _pod_spec(spec: DeploySpec, cmd_text: str) -> dict:
    gpus, resource = spec.gpus_on_node, GPU_RESOURCES[spec.vendor]
    container: dict = {
        "name": spec.engine,
        "image": ROCM_IMAGES[spec.engine] if spec.vendor == "amd" else IMAGES[spec.engine],
        "command": ["/bin/bash", "-c"],
        "args": [cmd_text],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": [{"name": "HF_HOME", "value": "/models"},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token",
                                                                     "optional": True}}}],
        "resources": {"limits": {resource: str(gpus)}, "requests": {resource: str(gpus)}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "model-cache", "mountPath": "/models"}],
    }
    volumes: list[dict] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}},
                           {"name": "model-cache", "emptyDir": {}}]
    if spec.engine == "trtllm":
        container["volumeMounts"].append({"name": "engine-config", "mountPath": "/config"})
        volumes.append({"name": "engine-config", "configMap": {"name": f"{spec.name}-engine-config"}})
    return {"containers": [container], "volumes": volumes, "terminationGracePeriodSeconds": 60}


def _probes(container: dict) -> None:
    http = {"path": "/health", "port": PORT}
    container["startupProbe"] = {"httpGet": dict(http), "periodSeconds": 10, "failureThreshold": 180}
    container["readinessProbe"] = {"httpGet": dict(http), "periodSeconds": 10, "failureThreshold": 3}
    container["livenessProbe"] = {"httpGet": dict(http), "periodSeconds": 20, "failureThreshold": 6}


def _dump(*docs: dict) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, width=1_000_000) for d in docs)


def _kubernetes(spec: DeploySpec) -> list[GeneratedFile]:
    cmd = engine_command(spec)
    _check_flags(spec, cmd)
    labels = _labels(spec)
    line = _shell_line(cmd)
    if spec.engine == "trtllm":
        line = line.replace(f"--config {TRTLLM_CONFIG}", f"--config /config/{TRTLLM_CONFIG}")
    prelude = _env_prelude(spec)
    files: list[GeneratedFile] = []
    service: dict = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": spec.name, "labels": labels},
               "spec": {"type": "ClusterIP", "selector": dict(labels),
                        "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}]}}
    if spec.nodes_per_replica == 1:
        pod = _pod_spec(spec, prelude + ("exec " + line if prelude else line))
        _probes(pod["containers"][0])
        workload = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": spec.name, "labels": labels},
                    "spec": {"replicas": spec.replicas, "selector": {"matchLabels": dict(labels)},
                             "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}}
        files.append(GeneratedFile("deployment.yaml", "kubernetes Deployment (one pod per replica)", _dump(workload)))
    else:
        env = ('NODE_RANK="${LWS_WORKER_INDEX}"; LEADER_ADDR="${LWS_LEADER_ADDRESS}"\n'
               f'[ "${{LWS_GROUP_SIZE}}" = "{spec.nodes_per_replica}" ] || '
               '{ echo "LWS_GROUP_SIZE=${LWS_GROUP_SIZE}, expected ' f'{spec.nodes_per_replica}" >&2; exit 1; }}\n')
        text = env + prelude + _node_prelude(spec) + "exec " + line
        leader = _pod_spec(spec, text)
        _probes(leader["containers"][0])
        worker = _pod_spec(spec, text)
        workload = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": spec.name, "labels": labels},
            "spec": {"replicas": spec.replicas, "startupPolicy": "LeaderCreated",
                     "leaderWorkerTemplate": {
                         "size": spec.nodes_per_replica, "restartPolicy": "RecreateGroupOnPodRestart",
                         "leaderTemplate": {"metadata": {"labels": {**labels, "role": "leader"}}, "spec": leader},
                         "workerTemplate": {"metadata": {"labels": {**labels, "role": "worker"}}, "spec": worker}}}}
        service["spec"]["selector"] = {**labels, "role": "leader"}
        files.append(GeneratedFile("leaderworkerset.yaml", f"kubernetes LeaderWorkerSet ({spec.nodes_per_replica} "
                                   "pods, one per node, per replica)", _dump(workload)))
    files.append(GeneratedFile("service.yaml", "kubernetes Service (in front of every replica)", _dump(service)))
    if spec.engine == "trtllm":
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{spec.name}-engine-config",
                                                                   "labels": labels},
              "data": {TRTLLM_CONFIG: _trtllm_yaml(spec)}}
        files.append(GeneratedFile("configmap.yaml", "kubernetes ConfigMap (trtllm-serve --config)", _dump(cm)))
    return files


def _slurm(spec: DeploySpec) -> list[GeneratedFile]:
    # array tasks of replicas smaller than a node may share one (Slurm packs their GPUs): each task serves on a port
    # of its own, PORT + its array index, which it prints first in its output file
    cmd = engine_command(spec, PORT_VAR)
    _check_flags(spec, cmd)
    n = spec.nodes_per_replica
    body = _env_prelude(spec) + _node_prelude(spec) + "exec " + _shell_line(cmd)
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={spec.name}",
             f"#SBATCH --array=0-{spec.replicas - 1}",
             f"#SBATCH --nodes={n}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --gpus-per-node={spec.gpus_on_node}",
             "#SBATCH --output=%x-%A_%a.out",
             f"# {spec.engine} {ENGINE_VERSIONS[spec.engine]}: one array task per replica ({spec.replicas} replicas), "
             f"{n} node(s) and {spec.gpus_per_replica} GPUs each.",
             "set -euo pipefail",
             'LEADER_ADDR="$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)"',
             "# replicas smaller than a node may share one: each array task serves on its own port",
             f'PORT="$(({PORT} + SLURM_ARRAY_TASK_ID))"',
             "export LEADER_ADDR PORT",
             f"# the endpoint: the first line of each task's output file ({spec.name}-JOBID_TASKID.out)",
             'echo "replica ${SLURM_ARRAY_TASK_ID}: http://${LEADER_ADDR}:${PORT}"',
             "# one task per node; the node rank is read inside the task (single quotes), not here",
             "srun --ntasks-per-node=1 bash -c " + shlex.quote('NODE_RANK="${SLURM_NODEID}"\n' + body)]
    if spec.engine == "trtllm":
        lines.insert(-1, f'cd "${{SLURM_SUBMIT_DIR}}"  # {TRTLLM_CONFIG} lies beside this script')
    files = [GeneratedFile("replica.sbatch", "slurm batch script (job array: one task per replica)",
                           "\n".join(lines) + "\n", True)]
    if spec.engine == "trtllm":
        files.append(GeneratedFile(TRTLLM_CONFIG, "engine config (trtllm-serve --config)", _trtllm_yaml(spec)))
    return files


def _apply(spec: DeploySpec, target: str) -> str:
    """The README's 'Apply:' line for ``target``."""
    if target == "shell":
        return (f"Run `./launch.sh` on each node of each replica (see its header for NODE_RANK / LEADER_ADDR, "
                f"{_visible(spec)} and PORT).")
    if target == "kubernetes":
        return ("`kubectl apply -f .` (a LeaderWorkerSet needs the LWS controller, "
                "https://github.com/kubernetes-sigs/lws; an `hf-token` secret with key `token` is optional).")
    return (f"`sbatch replica.sbatch` (one array task per replica, serving on port {PORT} + its array index; "
            "each task's output file begins with its address: put a load balancer in front of them).")


def _settings_text(spec: DeploySpec) -> str:
    """The README's engine settings by the flags engine_command writes, with their values there: '`--max-model-len
    131072` tokens, `--gpu-memory-utilization 0.9`, `--max-num-seqs 1024` running sequences per DP rank, ...'.
    SGLang's two caps are the replica's (engine_command writes the per-rank value x DP), so the per-rank figure
    follows them."""
    s = spec
    if s.engine == "sglang":
        rank = f", {s.max_num_seqs} per DP rank" if s.dp > 1 else ""
        tokens = f"{s.max_num_batched_tokens} tokens per step" + (" per DP rank" if s.dp > 1 else "")
        return (f"`--context-length {s.max_model_len}` tokens, `--mem-fraction-static {s.memory_fraction:g}`, "
                f"`--max-running-requests {s.max_num_seqs * s.dp}` running sequences{rank}, "
                f"`--chunked-prefill-size {s.max_num_batched_tokens * s.dp}` ({tokens})")
    per_rank = " per DP rank" if s.dp > 1 else ""
    if s.engine == "trtllm":
        return (f"`--max_seq_len {s.max_model_len}` tokens, `--free_gpu_memory_fraction {s.memory_fraction:g}` (of "
                f"the memory free after weights), `--max_batch_size {s.max_num_seqs}` running sequences{per_rank}, "
                f"`--max_num_tokens {s.max_num_batched_tokens}` ({s.max_num_batched_tokens} tokens per step"
                f"{per_rank})")
    return (f"`--max-model-len {s.max_model_len}` tokens, `--gpu-memory-utilization {s.memory_fraction:g}`, "
            f"`--max-num-seqs {s.max_num_seqs}` running sequences{per_rank}, `--max-num-batched-tokens "
            f"{s.max_num_batched_tokens}` ({s.max_num_batched_tokens} tokens per step{per_rank})")


def render(spec: DeploySpec, target: str) -> list[GeneratedFile]:
    """The files for ``target`` (shell, kubernetes, slurm) plus a README.md."""
    makers = {"shell": _shell, "kubernetes": _kubernetes, "slurm": _slurm}
    if target not in makers:
        raise ClusterfitError(f"--target {target!r}: choose shell, kubernetes or slurm")
    _target_for_vendor(spec, target)
    files = makers[target](spec)
    readme = [f"# {spec.served_name} on {spec.engine} {ENGINE_VERSIONS[spec.engine]} ({target})", "",
              "Written by `clusterfit deploy`.", "", *[f"- {x}" for x in spec.summary], "",
              f"Layout per replica: TP{spec.tp} PP{spec.pp} DP{spec.dp} EP{spec.ep}, {spec.gpus_per_replica} GPUs over "
              f"{spec.nodes_per_replica} node(s); {spec.replicas} replica(s).",
              f"Engine settings the plan assumed (all passed explicitly): {_settings_text(spec)}, KV cache "
              f"{spec.kv_dtype}" + (", eager mode" if spec.enforce_eager else "") + ".", "",
              *[f"Environment: `{name}={value}` ({why})." for name, value, why in engine_env(spec)],
              "Apply: " + _apply(spec, target), "", "| file | role |", "|---|---|",
              *[f"| `{f.path}` | {f.role} |" for f in files]]
    files.append(GeneratedFile("README.md", "what was planned and how to apply it", "\n".join(readme) + "\n"))
    return files


def write(files: list[GeneratedFile], out: Path, inputs: list[Path] | None = None) -> list[Path]:
    """Write ``files`` into ``out`` through a temporary directory beside it: ``out`` must not exist or be an empty
    directory, and no input file may lie inside it. Nothing is left half-written on error."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ClusterfitError(f"--out {out}: is a file, not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise ClusterfitError(f"--out {out}: directory is not empty (clusterfit deploy never overwrites files)")
    for p in inputs or []:
        if Path(p).resolve().parent == out.resolve() or out.resolve() in Path(p).resolve().parents:
            raise ClusterfitError(f"--out {out}: holds the input {p}; choose another directory")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise ClusterfitError(f"--out {out}: parent directory {parent} does not exist")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".clusterfit-deploy-", dir=parent))
    except OSError as exc:
        raise ClusterfitError(f"--out {out}: cannot write in {parent} ({exc.strerror or exc})") from None
    try:
        for f in files:
            p = tmp / f.path
            p.write_text(f.text, encoding="utf-8")
            if f.executable:
                p.chmod(0o755)
        if out.is_dir():
            out.rmdir()
        os.replace(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ClusterfitError(f"--out {out}: cannot write the files ({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [out / f.path for f in files]
