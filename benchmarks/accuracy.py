"""Predict every row of a published-measurements CSV and report the error.

    python benchmarks/accuracy.py ../shared/reference/published/measured-dev.csv [--json] [--rows]
    python benchmarks/accuracy.py CSV --calibrate   # refit the TensorRT-LLM constants into catalog/engines.yaml
    python benchmarks/accuracy.py CSV --cv [--json] # 2-fold held-out error of that calibration

CSV format: shared/reference/published/measured-dev.csv (see its README). Mapping rules (documented, the
same for every row):
- model (resolve_model / catalog_names): asked of the model catalog itself (clusterfit.arch.list_models,
  model_aliases), so new bundles are found without editing this file: HF ids and aliases, case-insensitive, with or
  without the org; a bundled name without a leading repeat of its org and without its quantisation / revision
  suffix (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 -> Nemotron-3-Nano-30B-A3B); the row's name with
  quantised-checkpoint (-FP8, -AWQ, -NVFP4, ...) and revision (-Instruct, -2507, -Thinking, -0528) suffixes
  stripped one at a time (a variant has its base's shapes; its precision is the row's, or its checkpoint name's
  when the row states none); a MoE name without its active-parameter suffix when one bundle has it. Names that
  change the network (-Air, -Flash, -Coder, Qwen3.5) are never mapped to a namesake. Llama-3-70B uses
  Llama-3.1-70B's shapes; Llama-2 / Mistral-7B are given inline below (public HF configs).
- GPU: a parenthetical after a normalised name is dropped; 'SXM/PCIe not stated' is skipped, not guessed.
- vLLM / SGLang serving command in the notes (serving_command / with_command): fills blank tp/pp/dp/ep columns
  (--tensor-parallel-size/-tp/--tp-size, --pipeline-parallel-size, --data-parallel-size/--dp,
  --enable-expert-parallel = TP x DP, SGLang --ep), an fp8 --kv-cache-dtype, --quantization; engine settings
  (--max-num-seqs / --max-running-requests, --max-num-batched-tokens / --chunked-prefill-size,
  --gpu-memory-utilization / --mem-fraction-static, --enable-dp-attention) are read by row_settings.
- vLLM / SGLang benchmark runs (published_rows.run_spec: a request count sent at a rate, all at once, or by a
  client holding N in flight): replayed through the simulator with the client's length rules (vllm bench serve /
  sglang.bench_serving random range ratio, ShareGPT log-normal at the measured mean, guidellm constant rate; see
  published_rows), the run's request count, seeds pooled to >= 1,500 requests; every metric of RUN_METRICS read off
  the simulated requests as the client computes it (simulate_run). Batch-1 / per-user rows, sweep peaks and
  prefill instances keep the closed-form performance model below. Closed-form closed-loop rows of other engines:
  ttft/tpot = the performance model's mean TTFT (first_token_s) and TPOT (cycle_s / osl).
- GPU: the hardware catalog's aliases -> its standard system (hgx_h200, dgx_b200, gb200_nvl72, ...).
- precision_weights: fp16/bf16 -> 16-bit, fp8* -> fp8 (block-wise DeepSeek native -> the checkpoint),
  fp4/nvfp4* -> nvfp4, mxfp4 -> mxfp4; "nvfp4 MoE ..." -> checkpoint with nvfp4 experts.
  precision_kv empty -> fp8 KV for fp8/fp4 weights on TensorRT-LLM, else 16-bit.
- layout: tp/pp/ep/dp as given. tp=ep=dp=N (TensorRT-LLM DEP) -> attention-DP N with EP N (tp 1). A dp
  without ep is N replicas. Missing layout -> the smallest TP (power of two, inside one node, pp 1) whose
  weights leave room for KV, replicas over the remaining GPUs.
- engine: the engine column's family (TensorRT-LLM / vLLM / SGLang).
- load: 'max throughput' / 'request rate INF' / 'concurrency N (max throughput)' -> max-throughput mode;
  'static batch size N' -> static batching; 'batch 1' / decode_tokens_per_s_batch1 / tokens_per_s_per_user
  -> batch-1 decode; 'batch size 1' ttft_ms -> prefill time; prefill-only rows -> prefill throughput.
- TensorRT-LLM online serving 'request rate Q QPS' rows -> the simulator (clusterfit.sim) on the row's replicas
  (one where the row's GPUs hold one), Poisson arrivals at Q, fixed ISL/OSL, the notes' 'with N requests' per run
  (else 1,000), runs with seeds 0, 1, ... pooled to >= 1,500 requests, cached per configuration: ttft_ms_mean =
  mean TTFT, itl_ms_mean = mean TPOT, e2e latency, output tokens/s = completed output tokens / makespan. 'request
  rate INF': all N requests at t=0 (one run) for the latency metrics; its throughput rows keep the max-throughput
  prediction above. Reported (with the replayed vLLM / SGLang runs) under `online_serving`; `throughput_rows`
  leaves them out.
- Statistics: row-weighted summaries as before, and run-weighted ones (`headline`, `run_weighted`,
  `by_engine_metric_group`, and `by_engine_metric_load`: the same split by load regime, published_rows.load_regime:
  request rate, all at once, closed loop): a run (published_rows.run_key: one result block of one page) weighs 1
  however many metrics it reports. `coverage`: predicted / rows by skip reason, per engine and for the rows whose
  GPU is in the catalog.
- Skipped (with the reason): MLPerf rows (the README gives no input-length average for their datasets;
  Server/Interactive are SLO-bound), metrics a load regime does not define, speculative decoding (MTP / EAGLE),
  disaggregated decode-only rows, engines other than TensorRT-LLM / vLLM / SGLang, models/GPUs missing from the
  catalogs, layouts that do not fit.
Percent errors are (predicted - measured) / measured x 100.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the row reader beside this script
from engine_versions import async_scheduling_of  # noqa: E402
import published_rows  # noqa: E402
from published_rows import (RunSpec, Skip, all_at_once, by_metric_and_load, metric_group, read_rows,  # noqa: E402
                            run_key, run_spec, run_weights, weighted_summary)

from clusterfit.arch import load_model, parse_config
from clusterfit.errors import ClusterfitError
from clusterfit.hardware import load_hardware
from clusterfit.layout import Layout
from clusterfit.memory import fit
from clusterfit.compose import Catalog, compile_replica
from clusterfit.engines import front_end_s, gpu_family
from clusterfit.perfmodel.serving import cycle_s, first_token_s, running_batch, static_batch_s
from clusterfit.precision import resolve_precision

#: Names the catalog rules below cannot derive: Llama-3-70B has Llama-3.1-70B's shapes (the 3.1 release changed only
#: the rope scaling and context); "DeepSeek-V3/R1" is the collection's name for tables of both (same architecture).
NAME_OVERRIDES = {"Llama-3-70B": "meta-llama/Llama-3.1-70B", "DeepSeek-V3/R1": "deepseek-ai/DeepSeek-V3"}

#: Architectures not in the model catalog: public Hugging Face config.json fields (meta-llama/Llama-2-*-hf,
#: mistralai/Mistral-7B-v0.1).
INLINE_CONFIGS = {
    "Llama-2-70B": dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                        num_attention_heads=64, num_key_value_heads=8, vocab_size=32000, torch_dtype="float16"),
    "Llama-2-13B": dict(model_type="llama", hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                        num_attention_heads=40, num_key_value_heads=40, vocab_size=32000, torch_dtype="float16"),
    "Llama-2-7B": dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, torch_dtype="float16"),
    "Mistral-7B": dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, torch_dtype="bfloat16"),
}

#: Prefill-throughput metrics (predicted from one full prefill chunk per attention-DP rank).
PREFILL_METRICS = ("input_tokens_per_s_per_gpu", "input_tokens_per_s_per_node", "total_tokens_per_s_per_gpu")
THROUGHPUT_METRICS = ("output_tokens_per_s_total", "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_node",
                      "mlperf_offline_tokens_per_s", "input_tokens_per_s_per_gpu", "input_tokens_per_s_per_node",
                      "total_tokens_per_s_per_gpu", "total_tokens_per_s_total")
#: Closed-loop latency metrics (a client holding N requests in flight, fixed lengths): the performance model's mean
#: TTFT (first_token_s with the other N-1 sequences decoding) and mean TPOT (cycle_s / osl). With fixed lengths
#: and a steady closed loop every request sees the same batch, so the p50 is predicted by the mean.
CLOSED_LOOP_LATENCY = {"ttft_ms_mean": "ttft", "ttft_ms_p50": "ttft", "ttft_ms": "ttft", "tpot_ms_mean": "tpot",
                       "tpot_ms_p50": "tpot", "tpot_ms": "tpot"}


#: Checkpoint suffixes that name a quantised copy (-FP8, -FP8-KV, -AWQ, -GPTQ-Int4, -NVFP4, -MXFP4, -MXFP8, -BF16,
#: -INT4/8, -W4A16, -FP8-Dynamic) or a post-training revision (-Instruct, -Instruct-2507, -Thinking-2507, -Chat,
#: -Base, -hf, a -MMDD / -YYMM date such as -0528 / -2512) of the same network. They are stripped one at a time
#: from the end of the name; names that change the network (-Air, -Flash, -Coder, -Next, -Nano, a size, a new
#: version number such as 3.5) are never stripped, so e.g. GLM-4.5-Air never becomes GLM-4.5.
_VARIANT_SUFFIX = re.compile(r"-(?:fp8(?:-dynamic|-kv)?|awq|gptq(?:-int[48])?|nvfp4|mxfp[48]|bf16|fp16|int[48]|"
                             r"w4a16|w8a8|instruct|thinking|chat|base|hf|\d{4})$", re.I)


_ACTIVE_SUFFIX = re.compile(r"-a\d+(?:\.\d+)?b$", re.I)


def _strip_variants(name: str) -> list[str]:
    """``name`` and what is left after each _VARIANT_SUFFIX suffix is stripped, one at a time."""
    out = [name]
    while True:
        shorter = _VARIANT_SUFFIX.sub("", out[-1])
        if shorter == out[-1] or not shorter:
            return out
        out.append(shorter)


@lru_cache(maxsize=1)
def catalog_names() -> dict[str, str]:
    """Lower-case name -> bundled HF id, built from the model catalog itself (clusterfit.arch.list_models and
    model_aliases), so that a newly bundled config is found without editing this harness. Keys, first come first
    kept: the catalog's own aliases (HF id, name without org, its -Instruct / -it short forms); each bundled name
    without a leading repeat of its org (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 -> Nemotron-3-Nano-30B-A3B-BF16)
    and with its _VARIANT_SUFFIX suffixes stripped (-> Nemotron-3-Nano-30B-A3B: a -BF16 / -FP8 upload of a network
    has its shapes); and, where only one bundled model has it, the name without its MoE active-parameter suffix
    (Qwen3.5-397B -> Qwen3.5-397B-A17B)."""
    from clusterfit.arch import list_models, model_aliases

    names = dict(model_aliases())
    for hf_id in list_models():
        org, short = hf_id.split("/", 1) if "/" in hf_id else ("", hf_id)
        if org and short.lower().startswith(org.lower() + "-"):
            short = short[len(org) + 1:]
        for cand in _strip_variants(short):
            names.setdefault(cand.lower(), hf_id)
    active: dict[str, set[str]] = {}
    for key, hf_id in list(names.items()):
        bare = _ACTIVE_SUFFIX.sub("", key)
        if bare != key:
            active.setdefault(bare, set()).add(hf_id)
    for bare, ids in active.items():
        if len(ids) == 1:
            names.setdefault(bare, next(iter(ids)))
    return names


def resolve_model(name: str) -> str | None:
    """The catalog model a row's model name stands for (None: not bundled). Rule, in order: NAME_OVERRIDES (two
    names of the first collection); then the name, with or without its org, and each shorter name left by stripping
    _VARIANT_SUFFIX suffixes one at a time, looked up case-insensitively in catalog_names(). A variant is mapped to
    a bundled architecture only through those suffixes: a quantised checkpoint or an instruction / reasoning / dated
    revision of the same base has the same config shapes (Qwen3-235B-A22B-Instruct-2507 and Qwen3-235B-A22B: 94
    layers, 128 experts of 1536, 64/4 heads; only the rope context differs), and its precision comes from the row
    (precision_strings), never from the name alone."""
    if name in NAME_OVERRIDES:
        return NAME_OVERRIDES[name]
    from clusterfit import arch

    resolver = getattr(arch, "resolve_model_id", None)   # the catalog's own resolver, where this version has one
    hit = resolver(name) if resolver is not None else None
    if hit:
        return hit
    names = catalog_names()
    for cand in _strip_variants(name.strip()):
        for key in (cand.lower(), cand.split("/", 1)[-1].lower()):
            if key in names:
                return names[key]
    return None


@lru_cache(maxsize=None)
def model_for(name: str):
    if name in INLINE_CONFIGS:
        return parse_config(INLINE_CONFIGS[name], name=name)
    hf_id = resolve_model(name)
    if hf_id is None:
        raise Skip(f"model {name} not in the catalog")
    return load_model(hf_id)


@lru_cache(maxsize=1)
def system_catalog():
    """The built-in hardware catalog (loaded once)."""
    return load_hardware()


@lru_cache(maxsize=None)
def system_for(gpu: str):
    """The catalog system of a row's GPU. A parenthetical the collection adds to a normalised name ('B300-SXM-288GB
    (inferred: ...)') is dropped; a name whose variant the source does not state ('H100 (80GB; SXM/PCIe not
    stated)': SXM 3.35 TB/s or PCIe 2.0 TB/s) is skipped rather than guessed."""
    if "sxm/pcie not stated" in gpu.lower():
        raise Skip("GPU variant not stated by the source (H100 SXM 3.35 TB/s or PCIe 2.0 TB/s)")
    name = gpu.split(" (", 1)[0].strip()
    for cand in dict.fromkeys((name, gpu)):
        try:
            return system_catalog().system(cand)
        except ClusterfitError:
            pass
    raise Skip(f"GPU {name} not in the hardware catalog")


def engine_for(text: str) -> str:
    """The engine family of an engine column: sglang, vllm (vLLM-Ascend included), trtllm (TensorRT-LLM, trtllm-*,
    Triton's tensorrtllm backend), else other (Ollama, TGI, MindIE: not modelled)."""
    t = text.lower()
    if "sglang" in t:
        return "sglang"
    if "vllm" in t:
        return "vllm"
    if "tensorrt" in t or "trt" in t:
        return "trtllm"
    return "other"


def precision_for(model, weights: str, kv: str, engine: str):
    w = weights.lower()
    experts = None
    if "moe" in w and "nvfp4" in w:
        prec, experts = None, "nvfp4"
    elif "moe" in w and "mxfp4" in w:
        prec, experts = None, "mxfp4"
    elif "mxfp4" in w:
        prec = "mxfp4"
    elif "mxfp8" in w:
        prec = "mxfp8"
    elif "fp4" in w:
        prec = "nvfp4"
    elif "block" in w:
        prec = None
    elif w.startswith("fp8"):
        prec = "fp8"
    elif w.startswith("fp16"):
        prec = "fp16"
    elif w.startswith("bf16"):
        prec = "bf16"
    elif "awq" in w or w.startswith(("int4", "w4a16")):
        prec = "int4"      # AWQ / GPTQ 4-bit checkpoints: 4-bit weights in groups of 128 (precision.py)
    elif w.startswith(("int8", "w8a8")):
        prec = "int8"
    elif engine != "trtllm" and (not w or w.startswith("as shipped")):
        prec = None   # vLLM / SGLang serve the checkpoint as published when the row names no other precision
    else:
        raise Skip(f"precision '{weights}'")
    if kv:
        kvd = "fp8" if kv.startswith("fp8") else "bf16"
    else:
        kvd = "fp8" if engine == "trtllm" and ("fp8" in w or "fp4" in w) else None
    return resolve_precision(model, prec, experts, kvd)


def precision_strings(row) -> tuple[str, str]:
    """(weights, kv) precision text of a row, with what its notes say about the checkpoint applied.

    A row whose notes say the checkpoint has MXFP4 MoE weights (gpt-oss: the tables label Hopper 'FP8' and
    Blackwell 'FP4' but run the same MXFP4-expert checkpoint) runs MXFP4 experts with the rest of the model
    in its 16-bit dtype; on GPUs without fp4 tensor cores those experts are W4A16 (perf.step). KV: a note
    'kv fp8 on Blackwell / auto on Hopper' gives fp8 KV on GPUs with fp4 tensor cores, else the model dtype.
    """
    weights, kv = row["precision_weights"], row["precision_kv"]
    n = row["notes"].lower()
    if "mxfp4 moe weights" in n:
        weights = "mxfp4 moe (checkpoint)"
        if not kv and "auto on hopper" in n:
            kv = "fp8" if system_for(row["gpu"]).gpu.dense_flops.get("fp4") else "bf16"
    return weights, kv


def _int(x, default=None):
    try:
        return int(float(x))
    except (TypeError, ValueError):
        return default


# ----------------------------------------------------------------------------- what a row states
#: Wordings of attention data parallelism in the rows (notes, load, engine columns) of the published CSVs:
#: TensorRT-LLM `enable_attention_dp` (`enable_attention_dp: true`, `attention_dp`), its tables' `DEPn` columns
#: ("attention data-parallel n + MoE expert-parallel n"), MLPerf configs' "attention-DP", SGLang
#: `--enable-dp-attention` and its blogs' "DP attention", vLLM's "DP+EP" / "DP8+EP8" / "DP attention + EP" /
#: "utilizing DP and EP", and the abbreviation ADP. A negation ("without attention DP",
#: `enable_attention_dp: false`) turns it off.
_ADP_ON = re.compile(r"enable[_-]attention[_-]dp|\battention[ _-]?dp\b|attention data[ -]?parallel|"
                     r"--enable-dp-attention|\bdp[ -]attention\b|data[ -]parallel attention|\bADP\d*\b|"
                     r"\bDEP\d+\b|\bDEP\b|\bDP\d*\s*\+\s*EP\d*\b|\bDP and EP\b", re.I)
_ADP_OFF = re.compile(r"(?:enable[_-]attention[_-]dp|attention[ _-]?dp)\s*[:=]\s*(?:false|0)\b|"
                      r"\b(?:no|without|disabled?)\s+(?:attention[ _-]?dp|dp[ -]attention)\b", re.I)
#: An attention-DP size stated with the wording: DEP8, DP8 (+EP8), ADP4, --dp-size 8 / --dp 8 / -dp 4.
_ADP_SIZE = re.compile(r"\b(?:DEP|ADP|DP)(\d+)\b|(?:--dp-size|--data-parallel-size|--dp|-dp)[\s=]+(\d+)", re.I)
#: Engine settings as the rows write them -> Engine.with_settings names.
_SETTING_PATTERNS = {
    "max_num_seqs": re.compile(r"(?:max[_-]batch[_-]size|max[_-]num[_-]seqs|max[_-]running[_-]requests)"
                               r"\s*[:=]?\s*(\d[\d,]*)", re.I),
    "max_num_batched_tokens": re.compile(r"(?:max[_-]num[_-]tokens|max[_-]num[_-]batched[_-]tokens|"
                                         r"chunked[_-]prefill[_-]size)\s*[:=]?\s*(\d[\d,]*)", re.I),
    "gpu_memory_utilization": re.compile(r"(?:kv_cache_free_gpu_mem_fraction|free_gpu_memory_fraction|"
                                         r"gpu[_-]memory[_-]utili[sz]ation|mem[_-]fraction[_-]static)"
                                         r"(?:\s+default)?\s*[:=]?\s*(0?\.\d+|1\.0*)\b", re.I),
}
#: A load regime's client concurrency: 'concurrency 7168 (max throughput)', 'max concurrency 32, ...',
#: 'batch size 1 (max concurrency 1)' in the load column, or the benchmark's `--max-concurrency N` in the notes.
_CONC_MODE = re.compile(r"(?:^|\bmax(?:imum)? )concurrency\s+(\d[\d,]*)", re.I)
_CONC_NOTES = re.compile(r"--max-concurrency[\s=]+(\d[\d,]*)", re.I)
#: The largest decode batch the engine captures in CUDA graphs (SGLang --cuda-graph-max-bs, vLLM
#: --max-cudagraph-capture-size), from the notes or the engine column: Engine.cuda_graph_max_bs.
_GRAPH_BS = re.compile(r"(?:--cuda-graph-max-bs|--max-cudagraph-capture-size)[\s=]+(\d+)")
#: vLLM V0 multi-step scheduling as the engine column or the notes state it ('vLLM v0.6.0 --num-scheduler-steps 10')
_SCHED_STEPS = re.compile(r"--num[_-]scheduler[_-]steps[\s=]+(\d+)", re.I)


class RowSettings(NamedTuple):
    """What a row states beyond its columns (None / False: not stated). ``attention_dp``: the row runs attention
    data-parallel (with ``adp_size`` ranks when a number is given with the wording); the engine settings map onto
    Engine.with_settings (TensorRT-LLM max_batch_size / max_num_tokens / kv_cache_free_gpu_mem_fraction, vLLM
    max_num_seqs / max_num_batched_tokens / gpu_memory_utilization, SGLang max_running_requests /
    chunked_prefill_size / mem_fraction_static, vLLM V0 num_scheduler_steps); ``concurrency``: the client's cap on
    requests in flight."""

    attention_dp: bool = False
    adp_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    concurrency: int | None = None
    async_scheduling: bool | None = None
    num_scheduler_steps: int | None = None
    cuda_graph_max_bs: int | None = None

    def engine_settings(self) -> tuple:
        """(gpu_memory_utilization, max_num_batched_tokens, max_num_seqs, async_scheduling, num_scheduler_steps,
        cuda_graph_max_bs): the hashable key step_for takes."""
        return (self.gpu_memory_utilization, self.max_num_batched_tokens, self.max_num_seqs, self.async_scheduling,
                self.num_scheduler_steps, self.cuda_graph_max_bs)


#: The engine settings of a row that states none (step_for's default).
NO_SETTINGS = RowSettings().engine_settings()


def row_settings(row) -> RowSettings:
    """Parse the settings a row states in words (see _ADP_ON, _SETTING_PATTERNS, _CONC_MODE)."""
    text = " ; ".join(row.get(k, "") or "" for k in ("notes", "concurrency_or_mode", "engine"))
    adp = bool(_ADP_ON.search(text)) and not _ADP_OFF.search(text)
    size = None
    if adp:
        sizes = [int(a or b) for a, b in _ADP_SIZE.findall(text)]
        size = max(sizes) if sizes else None
    found: dict = {}
    for name, pat in _SETTING_PATTERNS.items():
        # the notes, else the engine column (some pages put the server flags beside the engine's name)
        m = pat.search(row.get("notes", "") or "") or pat.search(row.get("engine", "") or "")
        if m:
            found[name] = float(m.group(1)) if name == "gpu_memory_utilization" else int(m.group(1).replace(",", ""))
    m = _CONC_MODE.search(row.get("concurrency_or_mode", "") or "") or _CONC_NOTES.search(row.get("notes", "") or "")
    conc = int(m.group(1).replace(",", "")) if m else None
    asy = async_scheduling_of(engine_for(row.get("engine", "") or ""), row.get("engine", "") or "",
                              row.get("notes", "") or "")
    m = _SCHED_STEPS.search(text)
    steps = int(m.group(1)) if m else None
    m = _GRAPH_BS.search(text)
    return RowSettings(attention_dp=adp, adp_size=size, concurrency=conc, async_scheduling=asy,
                       num_scheduler_steps=steps, cuda_graph_max_bs=int(m.group(1)) if m else None, **found)


# ------------------------------------------------------------------------ the row's serving command
#: Where a row's notes give the server command: 'vllm serve ...', 'python -m sglang.launch_server ...',
#: 'sglang serve ...', else the flags after 'serving command/flags:' or 'server:'. The command runs to the next ';'.
_CMD_START = (re.compile(r"\bvllm serve\b|\bsglang\.launch_server\b|\bsglang serve\b"),
              re.compile(r"serving command/flags:|\bserver:"))
#: Flags read from the command (vLLM | SGLang spellings); value flags take the next token.
_CMD_FLAGS = {
    "tp": r"(?:--tensor-parallel-size|--tp-size|--tp|(?<![\w-])-tp)[\s=]+(\d+)",
    "pp": r"(?:--pipeline-parallel-size|--pp-size|--pp|(?<![\w-])-pp)[\s=]+(\d+)",
    "dp": r"(?:--data-parallel-size|--dp-size|--dp|(?<![\w-])-dp)[\s=]+(\d+)",
    "ep": r"(?:--expert-parallel-size|--ep-size|--ep)[\s=]+(\d+)",
    "max_num_seqs": r"(?:--max-num-seqs|--max-running-requests)[\s=]+(\d+)",
    "max_num_batched_tokens": r"(?:--max-num-batched-tokens|--chunked-prefill-size)[\s=]+(\d+)",
    "gpu_memory_utilization": r"(?:--gpu-memory-utilization|--mem-fraction-static)[\s=]+([\d.]+)",
    "kv_cache_dtype": r"--kv-cache-dtype[\s=]+([\w.]+)",
    "quantization": r"(?:--quantization|(?<![\w-])-q)[\s=]+([\w.]+)",
}
_CMD_SWITCHES = {"enable_expert_parallel": r"--enable-expert-parallel\b|(?<![\w-])-ep(?![\w-])",
                 "enable_dp_attention": r"--enable-dp-attention\b"}


def serving_command(row) -> dict:
    """The server flags a row's notes state (see _CMD_START, _CMD_FLAGS, _CMD_SWITCHES): {} when the notes give no
    command. Values are ints, floats (gpu_memory_utilization) or strings (kv_cache_dtype, quantization); switches
    are True when present. Only the server command is read (a client's --max-concurrency, --num-prompts are not)."""
    notes = row.get("notes", "") or ""
    m = _CMD_START[0].search(notes) or _CMD_START[1].search(notes)
    if not m:
        return {}
    cmd = notes[m.start():].split(";", 1)[0]
    out: dict = {}
    for name, pat in _CMD_FLAGS.items():
        f = re.search(pat, cmd)
        if f:
            v = f.group(1)
            out[name] = float(v) if name == "gpu_memory_utilization" else v if not v.isdigit() else int(v)
    for name, pat in _CMD_SWITCHES.items():
        if re.search(pat, cmd):
            out[name] = True
    return out


def with_command(row, engine: str) -> dict:
    """A vLLM / SGLang row with the blanks of its columns filled from its serving command (the columns, as the
    collection states them, win where given): tp / pp / dp from the parallel sizes; ep from SGLang's --ep, or from
    vLLM's --enable-expert-parallel (vLLM's expert-parallel group spans the TP x DP ranks); precision_kv from
    --kv-cache-dtype fp8*; precision_weights from --quantization when the column names none. Engine settings
    (max seqs, batched tokens, memory fraction, DP attention) are read by row_settings from the same notes.
    Other engines' rows are returned unchanged."""
    if engine not in ("vllm", "sglang"):
        return row
    cmd = serving_command(row)
    r = dict(row)
    for k in ("tp", "pp", "dp"):
        if not r.get(k) and k in cmd:
            r[k] = str(cmd[k])
    if not r.get("ep"):
        if "ep" in cmd:
            r["ep"] = str(cmd["ep"])
        elif cmd.get("enable_expert_parallel"):
            r["ep"] = str((_int(r.get("tp")) or 1) * (_int(r.get("dp")) or 1))
    kvd = str(cmd.get("kv_cache_dtype", "")).lower()
    if not r.get("precision_kv") and kvd.startswith("fp8"):
        r["precision_kv"] = f"fp8 (--kv-cache-dtype {kvd})"
    q = str(cmd.get("quantization", "")).lower()
    if q and (not r.get("precision_weights") or r["precision_weights"].lower().startswith("as shipped")):
        r["precision_weights"] = q
    ckpt = checkpoint_precision(r)
    if ckpt and (not r.get("precision_weights") or r["precision_weights"].lower().startswith("as shipped")):
        r["precision_weights"] = f"{ckpt} (checkpoint name)"
    return r


#: A checkpoint's weight format from its name: a quantised upload says so in a suffix (-FP8, -FP8-Dynamic, -NVFP4,
#: -MXFP4; Qwen/Qwen3-235B-A22B-Instruct-2507-FP8, nvidia/DeepSeek-R1-NVFP4).
_CKPT_FORMAT = re.compile(r"-(fp8|nvfp4|mxfp4)(?:-dynamic|-kv)?(?![\w.])", re.I)
_CKPT_NAME = re.compile(r"(?:\bvllm serve|--model-path|--model)[\s=]+([\w./-]+)")


def checkpoint_precision(row) -> str | None:
    """The weight format the served checkpoint's name states (fp8, nvfp4, mxfp4), from the serving command's model
    path (`vllm serve X`, `--model-path X`, `--model X`) or the model column; None when no name states one."""
    names = [m.group(1) for m in _CKPT_NAME.finditer(row.get("notes", "") or "")] + [row.get("model", "") or ""]
    for name in names:
        m = _CKPT_FORMAT.search(name)
        if m:
            return m.group(1).lower()
    return None


@lru_cache(maxsize=None)
def step_for(model_name, gpu, weights, kv, engine, tp, pp, ep, dp, settings=NO_SETTINGS, speculative=None):
    """The compiled step model of a row; ``settings``: (gpu_memory_utilization, max_num_batched_tokens,
    max_num_seqs, async_scheduling, num_scheduler_steps, cuda_graph_max_bs) the row states
    (RowSettings.engine_settings; NO_SETTINGS: none), None for the
    engine's default (the engine's defaults on the row's GPU: Catalog.engine with the system, Engine.for_device);
    ``speculative``: the drafter's method when the run had speculative decoding on (the engine's defaults under it,
    Engine.for_speculative; mtp loads the checkpoint's MTP layers)."""
    model = model_for(model_name)
    system = system_for(gpu)
    prec = precision_for(model, weights, kv, engine)
    layout = Layout(tp=tp, pp=pp, ep=ep, dp=dp)
    budget = None
    # a shorter tuple leaves the settings after it unstated
    mem, mnt, mns, asy, steps, graph_bs = tuple(settings) + NO_SETTINGS[len(settings):]
    eng = Catalog(system_catalog(), engines_file=ENGINES_PATH).engine(engine, system)
    eng = eng.with_settings(max_num_batched_tokens=mnt, max_num_seqs=mns, async_scheduling=asy,
                            num_scheduler_steps=steps, cuda_graph_max_bs=graph_bs)
    if speculative is not None:
        eng = eng.for_speculative(dp or 1, speculative)
    if engine == "trtllm":
        # the TensorRT-LLM performance tables run trtllm-bench with kv_cache_free_gpu_mem_fraction 0.95 (unless
        # the row states its own fraction)
        nodes = max(1, -(-layout.gpus // system.gpus_per_node))
        budget = fit(model, system, prec, layout, nodes, eng.with_settings(gpu_memory_utilization=mem or 0.95),
                     context=1).kv_budget_bytes_per_gpu
    elif mem is not None:
        eng = eng.with_settings(gpu_memory_utilization=mem)
    return compile_replica(model, system, prec, layout, eng, kv_budget_bytes_per_gpu=budget).step


ENGINES_PATH = None  # catalog/engines.yaml unless calibrating


#: Calibrated constants and their bounds: name -> (start, lower, upper, unit). Global constants are fitted on the rows
#: of GPUs outside every family (Hopper), then each family refits its own subset on its own rows. The bounds are
#: physical: memory_scale <= 1 keeps every streaming kernel at or below the fastest one measured on the H200 (decode
#: attention at 98.6% of the datasheet bandwidth), compute_scale <= 1.3 keeps the GEMM asymptote under the datasheet
#: peak (0.752 x 1.3 = 0.98), graph_kernel_overhead_s <= 3.5 us: a minimal kernel measured 1.02 us inside a CUDA graph
#: on an H200, and dense batch-1 decode graphs at most 3.5 us per GPU operation beyond streaming their weights at the
#: H200's measured GEMV bandwidth, 3.98 TB/s (2.6-3.5 us over four shapes and builds: benchmarks/decode_steps_check.py,
#: tests/data/measured); the model streams slower than that, so this is an upper bound on what a replayed kernel adds
#: (catalog/engines.yaml has the grouped-CV figures before and after the bound, first at 5 us, then at 3.5 us). The
#: host's time per step per running sequence (seq_overhead_s) is global only: each family's rows come from one
#: TensorRT-LLM runtime (the PyTorch backend on Blackwell, GB200 and RTX PRO 6000, TensorRT engines on A100 and L40S),
#: so a family's own value took up its tables' software versions (GB200 23.6 us, B200 10.5 us, Hopper 4.0 us;
#: catalog/engines.yaml has the grouped-CV figures).
GLOBAL_PARAMS = {"step_overhead_s": (1.0, 0.1, 20.0, 1e-3), "compute_scale": (1.0, 0.3, 1.3, 1.0),
                 "memory_scale": (0.9, 0.3, 1.0, 1.0), "seq_overhead_s": (1.0, 0.0, 20.0, 1e-6),
                 "kernel_overhead_s": (2.0, 0.0, 30.0, 1e-6), "attention_scale": (0.9, 0.3, 1.0, 1.0),
                 "graph_kernel_overhead_s": (1.0, 0.0, 3.5, 1e-6)}
#: A family's own attention_scale as well was measured and not shipped (2026-12-06): held out by table all rows 8.39% /
#: -0.60% / 26.16% -> 8.52% / -0.63% / 26.15%, by family 8.56% / -1.24% / 25.73% -> 8.82% / -1.59% / 25.64%
#: (benchmarks/results/accuracy-cv-attention-scale-per-family.json).
FAMILY_PARAMS = {"compute_scale": (1.0, 0.2, 1.3, 1.0), "memory_scale": (0.9, 0.2, 1.0, 1.0),
                 "kernel_overhead_s": (16.0, 0.0, 50.0, 1e-6)}
#: TensorRT-LLM's PP executor loop passes the sampled tokens back along a host send / recv chain, one hop per stage
#: boundary (Engine.pp_hop_overhead_s / pp_hop_seq_overhead_s): one engine-wide pair fitted on the rows with pp > 1
#: (on any GPU) once the families are fitted, and those families then refitted with it.
PP_PARAMS = {"pp_hop_overhead_s": (8.0, 0.0, 50.0, 1e-3), "pp_hop_seq_overhead_s": (10.0, 0.0, 200.0, 1e-6)}
#: The global (Hopper) fit, and each GPU family with at least ADP_MIN_ROWS rows run under attention DP, also fit the
#: host's replica-wide cost per running sequence there (Engine.attention_dp_seq_overhead_s: TensorRT-LLM gathers every
#: rank's responses to rank 0 each step); a family with fewer such rows takes the global value. Grouped CV of the
#: TensorRT-LLM throughput rows by model x GPU family, a family fitting it from 1 such row: 8.63% / -1.49% / 25.80%;
#: from 10 (Grace-Blackwell's 7 then take the global value): 8.51% / -1.88% / 25.65%.
ADP_PARAMS = {"attention_dp_seq_overhead_s": (1.0, 0.0, 60.0, 1e-6)}
ADP_MIN_ROWS = 10
#: GPU families with fp4 tensor cores (Blackwell) also fit the efficiency at which grouped fp4 MoE GEMMs saturate, as
#: a fraction of the bf16 grouped-GEMM curve's asymptote fitted on the H200 (Engine.moe_fp4_efficiency_cap, at most 1).
FP4_FAMILY_PARAMS = {"moe_fp4_efficiency_cap": (0.5, 0.05, 1.0, 1.0)}


#: GPU families whose fp4 tensor cores are another family's, which take its fitted moe_fp4_efficiency_cap rather than
#: fit their own: a GB200 / GB300 superchip's GPU is the B200 / B300 die (catalog/hardware.yaml: the same fp4 dense
#: peak per GPU class and compute capability 10.x), running the same fp4 MoE kernels; what differs (the Grace host,
#: clocks at the superchip's power) is left to the family's own FAMILY_PARAMS.
FP4_CAP_FROM = {"grace_blackwell": "blackwell"}


#: Engines that take the TensorRT-LLM fit's moe_fp4_efficiency_cap, rounded to two decimals (--calibrate writes it
#: into their by_gpu_family): on Blackwell they run the same FlashInfer TensorRT-LLM / CUTLASS fp4 MoE kernels and
#: have too few fp4 MoE rows of their own to fit it.
FP4_SHARED_WITH = ("vllm", "sglang")


def has_fp4_math(gpu: str) -> bool:
    """Whether the row's GPU runs fp4 weights in fp4 tensor-core math (perfmodel.step.effective_compute_dtype)."""
    from clusterfit.perfmodel.step import effective_compute_dtype

    try:
        return effective_compute_dtype(system_for(gpu).gpu, "fp4") == "fp4"
    except Skip:
        return False


#: Robust loss on the log error: soft-L1 is quadratic up to f_scale (log 1.25 ~ 0.22, i.e. inside the 25% band)
#: and linear beyond, so the tables' version-to-version disagreements (up to 2x for one configuration,
#: shared/reference/published/README.md) pull the constants less than a squared loss would while the tail still
#: counts (a Cauchy loss with f_scale 0.1 all but ignores the tail: median 7.5% but p90 25.5% on the same recipe).
LOSS, F_SCALE = "soft_l1", 0.25


def calibration_rows(path: str, engine: str = "trtllm") -> list[dict]:
    """The closed-form throughput rows of one engine that the calibration fits."""
    return [r for r in read_rows(path) if r["metric"] in THROUGHPUT_METRICS
            and engine_for(r["engine"]) == engine and not is_simulated(r)]


def pipeline_stages(row) -> int:
    """The row's pipeline-parallel size (its pp column; 1 when empty)."""
    return _int(row["pp"], 1) or 1


def use_engines(cfg: dict | None, path: str | None = None) -> None:
    """Predict with the engines catalog ``cfg`` (written to ``path``), or with the shipped one when cfg is None."""
    import yaml

    from clusterfit.engines import load_engines

    global ENGINES_PATH
    if cfg is not None:
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
    ENGINES_PATH = path if cfg is not None else None
    step_for.cache_clear()
    simulate_online.cache_clear()
    load_engines.cache_clear()


def calibrate(path: str, engine: str = "trtllm", rows: list[dict] | None = None) -> dict:
    """Fit the engine's constants on the throughput rows of a CSV (or on ``rows``): GLOBAL_PARAMS on the rows of
    GPUs outside every family, then FAMILY_PARAMS for each GPU family (clusterfit.engines.GPU_FAMILIES) with at
    least 10 rows, never per row, model or source. Returns the whole engines catalog with the fitted values."""
    import os
    import tempfile

    import yaml
    from scipy.optimize import least_squares

    from clusterfit.engines import ENGINES_YAML, GPU_FAMILIES

    base = yaml.safe_load(ENGINES_YAML.read_text())
    rows = calibration_rows(path, engine) if rows is None else rows
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = os.path.join(tmp, "engines.yaml")

        def resid_for(subset):
            use_engines(base, cfg_path)
            out = []
            for r in subset:
                try:
                    out.append(np.log(predict_row(r) / float(r["value"])))
                except (Skip, ClusterfitError):
                    pass
            return np.array(out) if out else np.zeros(1)

        def fit(target: dict, params: dict, subset: list[dict], start: dict) -> None:
            names = list(params)

            def resid(p):
                target.update({n: float(v) * params[n][3] for n, v in zip(names, p)})
                return resid_for(subset)

            x0 = [min(max(start.get(n, params[n][0] * params[n][3]) / params[n][3], params[n][1]), params[n][2])
                  for n in names]
            sol = least_squares(resid, x0=x0, bounds=([params[n][1] for n in names], [params[n][2] for n in names]),
                                loss=LOSS, f_scale=F_SCALE, diff_step=0.05)
            resid(sol.x)

        e = base["engines"][engine]
        e["by_gpu_family"] = {}
        pp_rows = [r for r in rows if pipeline_stages(r) > 1] if "pp_hop_overhead_s" in e else []
        if pp_rows:
            e.update({n: v[0] * v[3] for n, v in PP_PARAMS.items()})
        def adp_params(sub: list[dict], least: int) -> dict:
            return (ADP_PARAMS if "attention_dp_seq_overhead_s" in e
                    and sum(runs_attention_dp(r, engine) for r in sub) >= least else {})

        hopper = [r for r in rows if gpu_family(r["gpu"]) is None]
        global_adp = adp_params(hopper, 1)
        if not global_adp and "attention_dp_seq_overhead_s" in e:
            e["attention_dp_seq_overhead_s"] = 0.0   # no global fit of it: a held-out fold's value is not kept
        fit(e, {**GLOBAL_PARAMS, **global_adp}, hopper, {})

        def fit_family(fam: str, sub: list[dict]) -> None:
            e["by_gpu_family"][fam] = {}
            fp4 = any(has_fp4_math(r["gpu"]) for r in sub)
            source = e["by_gpu_family"].get(FP4_CAP_FROM.get(fam, ""), {}).get("moe_fp4_efficiency_cap")
            if fp4 and source is not None:
                e["by_gpu_family"][fam]["moe_fp4_efficiency_cap"] = source
                fp4 = False
            fit(e["by_gpu_family"][fam],
                {**FAMILY_PARAMS, **adp_params(sub, ADP_MIN_ROWS), **(FP4_FAMILY_PARAMS if fp4 else {})}, sub, e)
            cap = e["by_gpu_family"][fam].get("moe_fp4_efficiency_cap") if fp4 else None
            if cap is not None:
                # a cap no row's expert GEMMs reach is the fit's starting value, not a fitted one: no cap (1)
                fitted = resid_for(sub)
                e["by_gpu_family"][fam]["moe_fp4_efficiency_cap"] = 1.0
                if not np.array_equal(resid_for(sub), fitted):
                    e["by_gpu_family"][fam]["moe_fp4_efficiency_cap"] = cap

        families = {fam: [r for r in rows if gpu_family(r["gpu"]) == fam]
                    for fam in dict.fromkeys(f for _, f in GPU_FAMILIES)}
        # a family that takes another's fp4 cap is fitted after it
        families = {fam: sub for fam, sub in sorted(families.items(), key=lambda kv: kv[0] in FP4_CAP_FROM)
                    if len(sub) >= 10}
        for fam, sub in families.items():
            fit_family(fam, sub)
        if pp_rows:
            fit(e, PP_PARAMS, pp_rows, e)
            pp_families = {gpu_family(r["gpu"]) for r in pp_rows}
            for fam in families:   # in the order above: a family taking another's fp4 cap after it
                if fam in pp_families:
                    fit_family(fam, families[fam])
            fit(e, PP_PARAMS, pp_rows, e)
        for fam in families:
            scale = e["by_gpu_family"][fam].get("moe_fp4_efficiency_cap")
            for other in FP4_SHARED_WITH if scale is not None and engine == "trtllm" else ():
                base["engines"][other].setdefault("by_gpu_family", {}).setdefault(fam, {})[
                    "moe_fp4_efficiency_cap"] = round(scale, 2)
        use_engines(None)
    return base


def patch_yaml_values(text: str, new: dict) -> str:
    """``text`` (a YAML file of nested mappings) with each scalar that ``new`` changes rewritten on its own line, so
    the file's comments, order and layout stay; a key ``new`` adds (a GPU family fitted for the first time) is
    appended under its parent mapping. Lines are matched by their key path (indentation), never by value."""
    import yaml

    old = yaml.safe_load(text)
    lines = text.splitlines()
    stack: list[tuple[int, str]] = []
    where: dict[tuple[str, ...], int] = {}
    for i, line in enumerate(lines):
        m = re.match(r"^( *)([A-Za-z0-9_.\-]+):(.*)$", line)
        if not m or line.lstrip().startswith("#"):
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(2)))
        where[tuple(k for _, k in stack)] = i

    def walk(o: object, n: object, path: tuple[str, ...]) -> None:
        if isinstance(n, dict):
            for k, v in n.items():
                if isinstance(o, dict) and k in o:
                    walk(o[k], v, path + (k,))
                else:  # a new key: append it, dumped, after its parent's last line
                    parent = where.get(path)
                    if parent is None:
                        raise ValueError(f"cannot place new key {'.'.join(path + (k,))}")
                    indent = (len(lines[parent]) - len(lines[parent].lstrip()) + 2) if path else 0
                    block = yaml.safe_dump({k: v}, sort_keys=False).splitlines()
                    end = max(i for p, i in where.items() if p[:len(path)] == path)
                    lines[end + 1:end + 1] = [" " * indent + b for b in block]
                    for p, i in list(where.items()):
                        if i > end:
                            where[p] = i + len(block)
        elif n != o:
            i = where[path]
            key = path[-1]
            head = lines[i][:lines[i].index(key + ":") + len(key) + 1]
            lines[i] = f"{head} {yaml.safe_dump(n, default_flow_style=True).splitlines()[0]}"

    walk(old, new, ())
    out = "\n".join(lines) + "\n"
    if yaml.safe_load(out) != new:
        raise ValueError("patching the YAML did not reproduce the calibrated values")
    return out


def cross_validate(path: str, engine: str = "trtllm", folds: int = 2, seed: str = "clusterfit") -> dict:
    """Out-of-sample accuracy of the calibration: the engine's throughput rows are split into ``folds`` parts by
    a hash of their id; each part is predicted with constants fitted on the others. Returns the pooled summary
    of the held-out errors and one summary per fold."""
    import hashlib
    import os
    import tempfile

    rows = calibration_rows(path, engine)
    part = {r["id"]: int(hashlib.sha256((seed + r["id"]).encode()).hexdigest(), 16) % folds for r in rows}
    pooled, per_fold = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(folds):
            use_engines(calibrate(path, engine, [r for r in rows if part[r["id"]] != k]),
                        os.path.join(tmp, "engines.yaml"))
            errs = []
            for r in rows:
                if part[r["id"]] != k:
                    continue
                try:
                    errs.append((predict_row(r) - float(r["value"])) / float(r["value"]) * 100.0)
                except (Skip, ClusterfitError):
                    pass
            per_fold.append(summarise(errs))
            pooled += errs
        use_engines(None)
    return {"folds": folds, "held_out": summarise(pooled), "per_fold": per_fold}


# ------------------------------------------------------------------------ grouped cross-validation
#: A table's section as the notes name it: "table 'Llama-3.3-70B'" (v0.20 / v1.0 / post-v1.0 perf overviews, the
#: v0.9 'Peak Throughput' tables 'H100 GPUs (FP8)'), "'Llama-70B on H200 up to 6.7x A100' table" (blogs),
#: "section '...'" (guides, GPUStack), "model 'LLaMA v3.1 70B'" (the v0.14 / v0.17 throughput grids, whose rows
#: are blocks of one model each). The first pattern that matches wins; no match: the whole file is one section.
_SECTION_PATTERNS = (re.compile(r"\btable '([^']+)'"), re.compile(r"'([^']+)' table\b"),
                     re.compile(r"\bsection '([^']+)'"), re.compile(r"\bmodel '([^']+)'"))
#: Model families (first substring of the lower-cased model name that matches): one architecture lineage each, so
#: a held-out family has no sibling of the same shapes in the fit (Llama-3, 3.1 and 3.3 share an architecture).
MODEL_FAMILIES = (("deepseek", "deepseek-v3/r1"), ("llama-4", "llama-4"), ("llama-3", "llama-3.x"),
                  ("llama-2", "llama-2"), ("mixtral", "mixtral"), ("mistral", "mistral"), ("qwen3", "qwen3"),
                  ("gpt-oss", "gpt-oss"), ("falcon", "falcon"), ("gpt-j", "gpt-j"))


def section_of(row) -> str:
    for pat in _SECTION_PATTERNS:
        m = pat.search(row["notes"])
        if m:
            return m.group(1)
    return ""


def table_of(row) -> str:
    """A source table: source file (source_repo_or_site + source_path_or_title, which carries the commit or the
    fork read) x section (section_of) x software version (source_date, which names the release)."""
    return " | ".join((row["source_repo_or_site"], row["source_path_or_title"], row["source_date"], section_of(row)))


def doc_version_of(row) -> str:
    """A whole source file at one version (every section of a perf-overview release together)."""
    return " | ".join((row["source_repo_or_site"], row["source_path_or_title"], row["source_date"]))


def model_family(name: str) -> str:
    n = name.lower()
    return next((fam for key, fam in MODEL_FAMILIES if key in n), n)


def hw_family(gpu: str) -> str:
    """The GPU family whose constants a row uses (clusterfit.engines.gpu_family; the global constants: hopper)."""
    return gpu_family(gpu) or "hopper"


def family_of(row) -> str:
    return f"{model_family(row['model'])} x {hw_family(row['gpu'])}"


GROUPINGS = {
    "table": (table_of, "leave one source table out: source_repo_or_site x source_path_or_title x source_date x "
                        "the section the notes name (table '...', '...' table, section '...', model '...')"),
    "family": (family_of, "leave one (model family x GPU family) out: MODEL_FAMILIES x engines.gpu_family "
                          "(hopper where it has none)"),
    "doc_version": (doc_version_of, "leave one source file at one version out (all its sections): "
                                    "source_repo_or_site x source_path_or_title x source_date"),
}


def _predict_fold(path: str, engine: str, cfg: dict | None, train: list[dict] | None,
                  held_out: list[dict]) -> list[tuple[str, float | None, str]]:
    """Fit the calibration on ``train`` (or use ``cfg``) and predict ``held_out``: (id, error %, skip reason)."""
    import os
    import tempfile

    if cfg is None:
        cfg = calibrate(path, engine, train)
    out: list[tuple[str, float | None, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        use_engines(cfg, os.path.join(tmp, "engines.yaml"))
        for r in held_out:
            try:
                pred, meas = predict_row(r), float(r["value"])
                if not np.isfinite(pred) or pred <= 0:
                    raise Skip("non-positive prediction")
                out.append((r["id"], (pred - meas) / meas * 100.0, ""))
            except (Skip, ClusterfitError) as e:
                out.append((r["id"], None, str(e)[:80]))
        use_engines(None)
    return out


def _breakdown(rows_by_id: dict, errs: dict[str, float], engine: str) -> dict:
    """Summaries of held-out errors: all, throughput rows, the calibrated engine's throughput rows, and by engine,
    metric, model family, GPU family and GPU."""
    ids = list(errs)
    rs = [rows_by_id[i] for i in ids]

    def by(key) -> dict:
        g: dict = {}
        for r, i in zip(rs, ids):
            g.setdefault(key(r), []).append(errs[i])
        return {k: summarise(v) for k, v in sorted(g.items())}

    thr = [errs[i] for i, r in zip(ids, rs) if r["metric"] in THROUGHPUT_METRICS and not is_simulated(r)]
    cal = [errs[i] for i, r in zip(ids, rs) if r["metric"] in THROUGHPUT_METRICS and not is_simulated(r)
           and engine_for(r["engine"]) == engine]
    return {"all": summarise(list(errs.values())) if errs else {}, "throughput_rows": summarise(thr) if thr else {},
            f"{engine}_throughput_rows": summarise(cal) if cal else {},
            "by_engine": by(lambda r: engine_for(r["engine"])), "by_metric": by(lambda r: r["metric"]),
            "by_model_family": by(lambda r: model_family(r["model"])), "by_gpu_family": by(lambda r: hw_family(r["gpu"])),
            "by_gpu": by(lambda r: r["gpu"])}


def grouped_cv(path: str, groupings: tuple[str, ...] = ("table", "family"), engine: str = "trtllm",
               max_folds: int | None = None, workers: int = 1, keep_rows: bool = False) -> dict:
    """Grouped cross-validation of the calibration. For each grouping (GROUPINGS), every group that holds
    calibration rows is held out in turn: the recipe (calibrate: global + per GPU family constants) is refitted
    on the calibration rows of all other groups, and every row of the held-out group is predicted with it (every
    metric the harness predicts; rows of other engines use their uncalibrated constants, so for them held-out and
    fitted are the same). Groups without calibration rows are predicted with the fit on all rows (the same
    training set a refit would see). ``max_folds``: merge groups into at most this many folds (whole groups,
    balanced by calibration rows, in a fixed hash order) when a refit per group is too slow. ``workers``: refits
    run in that many processes (fork). Returns, per grouping, the pooled held-out summaries (_breakdown), per
    group, and the fitted-on-all figures of the same rows. ``keep_rows``: also each held-out row's error % and
    refit fold (None: predicted with the fit on all rows) under ``held_out_rows`` (benchmarks/fit_intervals.py)."""
    import hashlib
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    rows = read_rows(path)
    rows_by_id = {r["id"]: r for r in rows}
    cal = calibration_rows(path, engine)
    cal_ids = {r["id"] for r in cal}
    t0 = time.perf_counter()
    full = calibrate(path, engine, cal)
    fit_s = time.perf_counter() - t0
    fitted = {i: e for i, e, _ in _predict_fold(path, engine, full, None, rows) if e is not None}
    out: dict = {"engine": engine, "calibration_rows": len(cal), "one_fit_s": round(fit_s, 1),
                 "fitted_on_all": _breakdown(rows_by_id, fitted, engine)}
    for name in groupings:
        key, definition = GROUPINGS[name]
        t0 = time.perf_counter()
        groups: dict[str, list[dict]] = {}
        for r in rows:
            groups.setdefault(key(r), []).append(r)
        # groups whose calibration rows the harness predicts (MLPerf rows are calibration-metric rows it skips)
        refit = sorted((g for g, rs in groups.items() if any(r["id"] in cal_ids and r["id"] in fitted for r in rs)),
                       key=lambda g: hashlib.sha256(g.encode()).hexdigest())
        n_cal = {g: sum(r["id"] in cal_ids and r["id"] in fitted for r in groups[g]) for g in refit}
        if max_folds and len(refit) > max_folds:
            folds: list[list[str]] = [[] for _ in range(max_folds)]
            load = [0] * max_folds
            for g in sorted(refit, key=lambda g: -n_cal[g]):   # stable: ties keep the hash order
                k = load.index(min(load))
                folds[k].append(g)
                load[k] += n_cal[g]
        else:
            folds = [[g] for g in refit]
        tasks = [(path, engine, None, [r for r in cal if key(r) not in fold], [r for g in fold for r in groups[g]])
                 for fold in folds]
        print(f"grouped cv, {name}: {len(folds)} refits over {len(refit)} groups ...", file=sys.stderr, flush=True)
        if workers > 1:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as ex:
                results = list(ex.map(_predict_fold, *zip(*tasks)))
        else:
            results = [_predict_fold(*t) for t in tasks]
        errs: dict[str, float] = {}
        skipped: dict[str, int] = {}
        fold_of: dict[str, int] = {}
        for k, res in enumerate(results):
            for i, e, why in res:
                if e is None:
                    skipped[why] = skipped.get(why, 0) + 1
                else:
                    errs[i] = e
                    fold_of[i] = k
        for g in groups:
            if g not in n_cal:
                errs.update({r["id"]: fitted[r["id"]] for r in groups[g] if r["id"] in fitted})
        per_group = {}
        for g, rs in groups.items():
            e = [errs[r["id"]] for r in rs if r["id"] in errs]
            if e:
                per_group[g] = dict(summarise(e), refit=g in n_cal,
                                    fitted_on_all_median_signed_error=round(float(np.median(
                                        [fitted[r["id"]] for r in rs if r["id"] in fitted])), 2))
        out[name] = {"definition": definition, "groups": len(per_group), "groups_refit": len(refit),
                     "folds": len(folds), "seconds": round(time.perf_counter() - t0, 1),
                     "held_out": _breakdown(rows_by_id, errs, engine),
                     "skipped_in_held_out_folds": dict(sorted(skipped.items(), key=lambda kv: -kv[1])),
                     "per_group": dict(sorted(per_group.items(), key=lambda kv: -kv[1]["median_ape"]))}
        if keep_rows:
            out[name]["held_out_rows"] = {i: [e, fold_of.get(i)] for i, e in errs.items()}
    return out


def row_layout(row, engine: str):
    """(row with its serving command read, its RowSettings, (tp, pp, ep, dp), replicas): the layout the harness runs
    ``row`` on (predict_row, runs_attention_dp)."""
    row = with_command(row, engine)
    st = row_settings(row)
    layout, replicas = layout_for(row, row["model"], engine, st)
    return row, st, layout, replicas


def runs_attention_dp(row, engine: str) -> bool:
    """Whether the harness runs ``row`` with attention data parallelism (dp > 1 in layout_for)."""
    try:
        return row_layout(row, engine)[2][3] > 1
    except (Skip, ClusterfitError):
        return False


def adp_ranks(row, st: RowSettings, engine: str, ranks: int) -> int:
    """Attention-DP ranks of a replica whose ``ranks`` GPUs (per pipeline stage) the row says run attention DP:
    the dp column, else the size stated with the wording (DEP8, DP8, --dp-size 8), else TensorRT-LLM's
    enable_attention_dp runs one rank per GPU (tp ranks) and SGLang's --enable-dp-attention uses its --dp-size,
    which defaults to 1 (plain TP attention); vLLM's DP+EP without a size: one rank per GPU."""
    d = _int(row["dp"]) or st.adp_size
    if d is None:
        d = 1 if engine == "sglang" else ranks
    return d if d >= 1 and ranks % d == 0 else ranks


def layout_for(row, model_name, engine, st: RowSettings | None = None):
    st = row_settings(row) if st is None else st
    n = _int(row["num_gpus"], 1)
    tp, pp, ep, dp = (_int(row[k]) for k in ("tp", "pp", "ep", "dp"))
    if tp is not None and ep and dp and tp == ep == dp and tp > 1:
        return (1, pp or 1, ep, dp), n // (ep * (pp or 1))   # DEP: attention DP + EP
    is_moe = any(L.ffn.kind == "moe" for L in model_for(model_name).layers)
    wide_ep = ep and ep > 1 and dp is None and n == ep * (pp or 1)
    if tp is None and ep and is_moe and ((dp and ep == dp and dp > 1) or wide_ep):
        # DP+EP with no TP column (vLLM / SGLang wide-EP): one attention-DP rank per expert-parallel GPU; with no DP
        # column either, EP over all of a replica's GPUs leaves attention nothing but DP (TP1 x EPn is no layout)
        return (1, pp or 1, ep, ep), max(1, n // (ep * (pp or 1)))
    v1_moe_command = row["source_date"].startswith("v1.0") and "TensorRT-LLM" in row["engine"]
    if tp and tp > 1 and not (dp and dp > tp) and is_moe and (st.attention_dp or v1_moe_command):
        # the row says attention DP (enable_attention_dp, DEPn, DP attention, --enable-dp-attention, ...): the
        # engine runs attention data-parallel over the tp ranks with the MoE expert-parallel over them, whatever
        # --ep the table omits. The v1.0 performance overview runs every MoE model with `--ep` and
        # `enable_attention_dp: true` in its llm_options (its "TPn" column label names the GPU count;
        # shared/reference/published/README.md, and the same section of the later developer-guide perf-overview)
        d = adp_ranks(row, st, engine, tp) if st.attention_dp else tp
        if d > 1:
            return (tp // d, pp or 1, ep or tp, d), max(1, n // (tp * (pp or 1)))
    if tp is None and pp is None:
        sysm = system_for(row["gpu"])
        t = 1
        while t <= min(n, sysm.gpus_per_node):
            try:
                sm = step_for(model_name, row["gpu"], row["precision_weights"], row["precision_kv"], engine, t, 1,
                              1, 1)
                if sm.kv_capacity_tokens > 0 and sm.max_sequences(2048) >= 8:
                    return (t, 1, 1, 1), n // t
            except ClusterfitError:
                pass
            t *= 2
        raise Skip("no TP inside one node fits")
    tp = tp or 1
    pp = pp or 1
    ep = ep or 1
    is_moe = any(L.ffn.kind == "moe" for L in model_for(model_name).layers)
    if dp and dp > 1 and not (is_moe and ep > 1):
        return (tp, pp, ep, 1), n // (tp * pp)     # dp = independent replicas
    dp = dp or 1
    return (tp, pp, ep, dp), max(1, n // (tp * pp * dp))


def is_speculative(row, engine: str) -> bool:
    """Rows measured with speculative decoding. TensorRT-LLM rows (measured-dev.csv): 'mtp' in the load column or
    'speculative' in the notes unless the load says 'no speculative'. vLLM / SGLang rows (measured-oss2, whose README
    marks them): 'SPECULATIVE DECODING' in the notes, '+ MTP' / '+ EAGLE...' in the engine column, or MTP in the
    load column (a note saying 'no speculative decoding' is not a mark)."""
    mode = row["concurrency_or_mode"].lower()
    if engine == "trtllm":
        return "mtp" in mode or "speculative" in row["notes"].lower() and "no speculative" not in mode
    return ("SPECULATIVE DECODING" in row["notes"] or "mtp" in mode
            or bool(re.search(r"\+\s*(?:mtp|eagle|dspark|speculative)", row["engine"], re.I)))


#: SGLang --speculative-algorithm / vLLM speculative_config "method" -> the drafter clusterfit prices
#: (clusterfit.speculative): SGLang runs a checkpoint's MTP / NextN layer under the EAGLE algorithm too.
SPEC_METHODS = {"mtp": "mtp", "nextn": "mtp", "deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp", "eagle": "eagle",
                "eagle3": "eagle3", "ngram": "ngram"}


def speculative_for(row, engine: str, model_name: str):
    """The speculative decoding a vLLM / SGLang row ran (sim.config.SpeculativeSpec, draft cost from the model), read
    from its serving command (vLLM --speculative-config JSON; SGLang --speculative-algorithm / -num-steps /
    -eagle-topk), else from the notes and engine column ('steps 2, topk 1, 3 draft tokens', 'num_speculative_tokens
    7'); its acceptance from 'accept length ~3.52' when the source states one (else the default of
    clusterfit.speculative). Skip: tree drafting (topk > 1), a drafter clusterfit does not price, no draft count."""
    from clusterfit.sim.config import SpeculativeSpec

    text = " ".join((row["engine"], row["notes"]))
    method = k = None
    m = re.search(r"--speculative[-_]config[= ]'?(\{[^}]*\})", text)
    if m:
        try:
            cfg = json.loads(m.group(1))
        except json.JSONDecodeError:
            cfg = {}
        method, k = str(cfg.get("method", "")).lower(), cfg.get("num_speculative_tokens")
    else:
        m = re.search(r"--speculative-algorithm[= ](\w+)", text)
        if m:
            method = m.group(1).lower()
        else:
            m = re.search(r"(NEXTN/MTP|EAGLE3|EAGLE|MTP|DSpark|n-?gram)\b", text, re.I)
            method = m.group(1).lower().replace("nextn/mtp", "mtp").replace("-", "") if m else None
        m = re.search(r"--speculative-num-steps[= ](\d+)|\bsteps (\d+)|num_speculative_tokens[= :]*(\d+)"
                      r"|\((\d+) draft tokens\)", text)
        k = next((int(g) for g in m.groups() if g), None) if m else None
        t = re.search(r"--speculative-eagle-topk[= ](\d+)|\btopk (\d+)", text)
        if t and int(next(g for g in t.groups() if g)) > 1:
            raise Skip("speculative decoding with tree drafts (topk > 1) is not modelled")
    if method not in SPEC_METHODS:
        raise Skip(f"speculative decoding method {method or '(not stated)'} is not modelled")
    if not k:
        raise Skip("speculative decoding: the source does not state the number of draft tokens")
    m = re.search(r"accept(?:ance)? length ~?\s*([\d.]+)", text, re.I)
    spec = SpeculativeSpec(method=SPEC_METHODS[method], draft_tokens=int(k),
                           acceptance_length=float(m.group(1)) if m else None)
    return spec.for_model(model_for(model_name))


def predict_row(row) -> float:
    mode = row["concurrency_or_mode"].lower()
    metric = row["metric"]
    engine = engine_for(row["engine"])
    if engine == "other":
        raise Skip(f"engine {row['engine']} is not modelled")
    if row["id"].startswith("MLPERF"):
        raise Skip("MLPerf dataset rows: the README gives no input-length average (Server/Interactive are SLO-bound)")
    if "decode-only" in mode or "decode, multi-node" in mode or "decode:" in mode or "simulated" in mode:
        raise Skip("disaggregated decode-only / simulated rows")
    # a vLLM / SGLang benchmark run (a request count at a rate, all at once or in a closed loop): replayed through
    # the simulator with its client's length distribution (published_rows.run_spec)
    spec = run_spec(row) if engine != "trtllm" and metric in RUN_METRICS else None
    draft = None
    if is_speculative(row, engine):
        if spec is None:
            raise Skip("speculative decoding: predicted only for vLLM / SGLang runs replayed through the simulator")
        draft = speculative_for(row, engine, row["model"])
    isl, osl = _int(row["isl"]), _int(row["osl"])
    if spec is None:
        if "sharegpt" in mode or "concurrency sweep" in mode:
            raise Skip("dataset-length or sweep-peak rows without fixed lengths")
        if isl and not osl and metric in PREFILL_METRICS and "prefill-only" in mode:
            osl = 1   # a prefill-only run states no output length; its prefill throughput needs none
        if not isl or not osl:
            raise Skip("no isl/osl")
    model_name = row["model"]
    model_for(model_name)
    row, st, (tp, pp, ep, dp), replicas = row_layout(row, engine)
    weights, kv = precision_strings(row)
    sm = step_for(model_name, row["gpu"], weights, kv, engine, tp, pp, ep, dp, st.engine_settings(),
                  draft.method if draft is not None else None)
    if sm.kv_capacity_tokens <= 0:
        raise Skip("layout does not fit in memory (no KV left)")
    n = _int(row["num_gpus"], sm.gpus * replicas)
    replicas = max(1, n // sm.gpus)
    if spec is not None:
        return predict_run(row, spec, model_name, weights, kv, engine, (tp, pp, ep, dp), replicas,
                           st.engine_settings(), draft)
    assert isl is not None and osl is not None
    if is_simulated(row):
        return predict_online(row, model_name, weights, kv, engine, (tp, pp, ep, dp), replicas, isl, osl,
                              st.engine_settings())
    if metric in ("ttft_ms",) and "batch size 1" in mode:
        return first_token_s(sm, isl, 0, isl) * 1e3   # alone: the prefill steps, first token sampled at the end
    if metric in ("tokens_per_s_per_user", "decode_tokens_per_s_batch1"):
        return 1.0 / float(sm.decode_step_s(1, isl + osl / 2))
    if metric in PREFILL_METRICS and "prefill" in mode:
        chunk = sm.batched_tokens
        t = float(sm.step_s(chunk, chunk * (isl + 1) / 2, 0, 0))
        per_gpu = chunk / t / sm.gpus
        return per_gpu * (8 if metric.endswith("per_node") else 1)
    if metric in CLOSED_LOOP_LATENCY and st.concurrency is not None and not all_at_once(mode):
        b = float(running_batch(sm, isl, osl))
        if b < 1:
            raise Skip("KV cache holds no request")
        b = min(b, max(1.0, st.concurrency / replicas))
        if CLOSED_LOOP_LATENCY[metric] == "ttft":
            return first_token_s(sm, isl, b - 1.0, isl + osl / 2) * 1e3
        return float(cycle_s(sm, b, isl, osl)) / osl * 1e3
    if metric == "throughput_tokens_per_s_total":
        raise Skip("metric throughput_tokens_per_s_total: the source does not say whether it counts input tokens")
    if metric not in THROUGHPUT_METRICS:
        raise Skip(f"metric {metric} in this load regime is not predicted")
    m = re.search(r"static batch size (\d+)", mode)
    if m:
        b = float(m.group(1))
        b_rep = b / replicas if "out_tps=output_seqlen*batch_size/total_latency/tp" not in row["notes"] else b
        total = replicas * b_rep * osl / float(static_batch_s(sm, b_rep, isl, osl))
    elif all_at_once(mode) or st.concurrency is not None:
        b = float(running_batch(sm, isl, osl))
        if b < 1:
            raise Skip("KV cache holds no request")
        if st.concurrency is not None:
            # the client keeps at most `concurrency` requests in flight, spread over the replicas
            b = min(b, max(1.0, st.concurrency / replicas))
        total = replicas * b * osl / float(cycle_s(sm, b, isl, osl))
    else:
        raise Skip(f"load regime '{row['concurrency_or_mode']}'")
    if metric == "output_tokens_per_s_per_gpu":
        return total / n
    if metric == "output_tokens_per_s_per_node":
        return total / n * 8
    if metric == "total_tokens_per_s_total":
        return total * (isl + osl) / osl   # vllm bench's 'Total Token throughput': input + output tokens
    if metric == "total_tokens_per_s_per_gpu":
        return total * (isl + osl) / osl / n   # InferenceMAX tput_per_gpu: total tokens / GPUs
    if metric in ("input_tokens_per_s_per_gpu", "input_tokens_per_s_per_node"):
        return total * isl / osl / n * (8 if metric.endswith("per_node") else 1)
    return total


#: Online-serving (open-loop request-rate) rows the simulator predicts, metric -> what is read off the run.
#: ttft_ms_p50 / tpot_ms_p50: the median over the requests of one run (the mean of the runs' medians when a
#: configuration is pooled over seeds); tpot_ms_mean = itl_ms_mean = the mean TPOT; total_tokens_per_s_total =
#: output tokens/s x (isl + osl) / osl.
ONLINE_METRICS = ("ttft_ms_mean", "itl_ms_mean", "output_tokens_per_s_total", "ttft_ms_p50", "tpot_ms_mean",
                  "tpot_ms_p50", "total_tokens_per_s_total", "e2e_latency_s_mean", "e2e_latency_ms_mean",
                  "e2e_latency_ms_p50")
#: Requests simulated per configuration at a finite QPS: the source's run length (its notes' 'with N requests',
#: else ONLINE_DEFAULT_REQUESTS) repeated with seeds 0, 1, ... until at least this many requests are pooled.
ONLINE_TARGET_REQUESTS = 1500
ONLINE_DEFAULT_REQUESTS = 1000


def online_qps(row) -> float | None:
    """The offered request rate of a 'request rate Q QPS' row (inf for 'request rate INF'); None otherwise."""
    m = re.search(r"request rate\s+(inf|[\d.]+)", row["concurrency_or_mode"].lower())
    if not m:
        return None
    return float("inf") if m.group(1) == "inf" else float(m.group(1))


def is_simulated(row) -> bool:
    """Rows predicted with the simulator. vLLM / SGLang rows: every benchmark run published_rows.run_spec reads (a
    request count sent at a rate, all at once or in a closed loop) for the metrics of RUN_METRICS. TensorRT-LLM rows
    (unchanged): every finite-QPS row and the latency rows at QPS INF; their QPS-INF throughput rows keep the
    closed-form max-throughput prediction (they were predicted, and calibrated on, that way before the simulator
    was used), so `throughput_rows` and `calibrate` see the TensorRT-LLM rows and predictions they saw before."""
    if engine_for(row["engine"]) != "trtllm":
        if row["metric"] not in RUN_METRICS:
            return False
        try:
            return run_spec(row) is not None
        except Skip:
            return False
    q = online_qps(row)
    if q is None:
        return False
    return np.isfinite(q) or row["metric"] not in THROUGHPUT_METRICS


def online_requests(row) -> int:
    """The number of requests the source ran ('with 500 requests' in the notes), else the default."""
    m = re.search(r"with\s+([\d,]+)\s+requests", row["notes"].lower())
    return int(m.group(1).replace(",", "")) if m else ONLINE_DEFAULT_REQUESTS


@lru_cache(maxsize=None)
def simulate_online(model_name, gpu, weights, kv, engine, layout, replicas, isl, osl, qps, n, reps,
                    settings=NO_SETTINGS) -> dict:
    """Simulate ``reps`` runs of ``n`` requests of fixed ISL/OSL (Poisson arrivals at ``qps``, seed = run
    index; qps inf: all at t=0) on ``replicas`` replicas of ``layout``; pooled mean TTFT (ms), mean TPOT (ms)
    and completed output tokens / makespan (first arrival to last completion, summed over runs)."""
    from clusterfit.sim import SimulationConfig, simulate
    from clusterfit.sim.requests import Requests

    sm = step_for(model_name, gpu, weights, kv, engine, *layout, settings)
    ttft, tpot, ttft50, tpot50, e2e, e2e50, tokens, span = [], [], [], [], [], [], 0.0, 0.0
    for seed in range(reps):
        rng = np.random.default_rng(seed)
        arrival = np.zeros(n) if not np.isfinite(qps) else np.cumsum(rng.exponential(1.0 / qps, n))
        reqs = Requests.build(arrival, np.full(n, isl), np.full(n, osl))
        rep, _ = simulate(sm, SimulationConfig(replicas=replicas, seed=seed), requests=reqs)
        if rep["completed"] < n:
            raise Skip("simulated requests rejected or failed")
        ttft.append(rep["ttft_s"]["mean"])
        tpot.append(rep["tpot_s"]["mean"] if osl > 1 else np.nan)
        ttft50.append(rep["ttft_s"]["p50"])
        tpot50.append(rep["tpot_s"]["p50"] if osl > 1 else np.nan)
        e2e.append(rep["e2e_s"]["mean"])
        e2e50.append(rep["e2e_s"]["p50"])
        tokens += rep["throughput"]["output_tokens_per_s"] * rep["duration_s"]
        span += rep["duration_s"]
    return {"ttft_ms_mean": float(np.mean(ttft)) * 1e3, "itl_ms_mean": float(np.mean(tpot)) * 1e3,
            "output_tokens_per_s_total": tokens / span, "ttft_ms_p50": float(np.mean(ttft50)) * 1e3,
            "tpot_ms_mean": float(np.mean(tpot)) * 1e3, "tpot_ms_p50": float(np.mean(tpot50)) * 1e3,
            "total_tokens_per_s_total": tokens / span * (isl + osl) / osl,
            "e2e_latency_s_mean": float(np.mean(e2e)), "e2e_latency_ms_mean": float(np.mean(e2e)) * 1e3,
            "e2e_latency_ms_p50": float(np.mean(e2e50)) * 1e3}


def predict_online(row, model_name, weights, kv, engine, layout, replicas, isl, osl,
                   settings=NO_SETTINGS) -> float:
    """A request-rate row: the simulator on the row's replicas (one, where the row's GPUs hold one replica),
    Poisson arrivals at the row's QPS (INF: all requests at t=0), the row's fixed ISL/OSL, the source's
    request count; ttft_ms_mean = mean TTFT, itl_ms_mean = mean TPOT, output tokens/s = completed output
    tokens / makespan."""
    metric = row["metric"]
    if metric not in ONLINE_METRICS:
        raise Skip(f"metric {metric} of request-rate rows is not predicted")
    if metric in ("itl_ms_mean", "tpot_ms_mean", "tpot_ms_p50") and osl < 2:
        raise Skip("ITL of one-token answers is undefined")
    qps = online_qps(row)
    n = online_requests(row)
    reps = 1 if not np.isfinite(qps) else max(1, -(-ONLINE_TARGET_REQUESTS // n))
    return simulate_online(model_name, row["gpu"], weights, kv, engine, layout, replicas, isl, osl, qps, n,
                           reps, settings)[metric]


#: Metrics of a replayed vLLM / SGLang run -> (statistic of the simulated requests, scale). Definitions as the clients
#: print them (vllm bench serve, sglang.bench_serving, guidellm): throughput = tokens (or requests) completed / the
#: run's duration (first send to last completion); TTFT = first token - send; TPOT = (latency - TTFT) / (output
#: tokens - 1) per request with more than one output token (guidellm: latency / output tokens, the TTFT included);
#: ITL mean = the mean gap between consecutive tokens over all requests = sum(latency - TTFT) / sum(output tokens -
#: 1); E2E = last token - send. Approximations: the median ITL (the simulator does not keep every gap) is predicted
#: by the median TPOT; 'tpot_ms' / 'ttft_ms' / 'ttft_s' rows whose statistic the source does not state are
#: predicted by the mean.
RUN_METRICS = {
    "output_tokens_per_s_total": ("output_tps", 1.0), "total_tokens_per_s_total": ("total_tps", 1.0),
    "input_tokens_per_s_total": ("input_tps", 1.0), "request_throughput_per_s": ("request_rps", 1.0),
    "output_tokens_per_s_per_gpu": ("output_tps_per_gpu", 1.0), "total_tokens_per_s_per_gpu": ("total_tps_per_gpu", 1.0),
    "ttft_ms_mean": ("ttft_mean", 1e3), "ttft_ms_p50": ("ttft_p50", 1e3), "ttft_ms": ("ttft_mean", 1e3),
    "ttft_s": ("ttft_mean", 1.0), "tpot_ms_mean": ("tpot_mean", 1e3), "tpot_ms_p50": ("tpot_p50", 1e3),
    "tpot_ms": ("tpot_mean", 1e3), "itl_ms_mean": ("itl_mean", 1e3), "itl_ms_p50": ("itl_p50", 1e3),
    "e2e_latency_ms_mean": ("e2e_mean", 1e3), "e2e_latency_ms_p50": ("e2e_p50", 1e3),
    "e2e_latency_s_mean": ("e2e_mean", 1.0)}
#: Requests simulated per run: the run's own count, repeated with seeds 0, 1, ... (fresh length draws and Poisson
#: gaps) until at least this many are pooled; a run of fixed lengths and deterministic arrivals is simulated once.
RUN_TARGET_REQUESTS = 1500
_RUN_CACHE: dict = {}


def closed_loop_sends(finish_s: np.ndarray, replica: np.ndarray, slots: int) -> np.ndarray:
    """Send times of a closed-loop client replayed as every request queued at t=0 on replicas that run at most
    ``slots`` at once each: on each replica, in queue (index) order, the first ``slots`` requests start at 0 and the
    k-th next one when the k-th of that replica's requests finishes (the client sends a new request as one ends)."""
    send = np.zeros(finish_s.size)
    for r in np.unique(replica):
        idx = np.flatnonzero(replica == r)
        if idx.size > slots:
            send[idx[slots:]] = np.sort(finish_s[idx])[: idx.size - slots]
    return send


def client_sends(arrival_s: np.ndarray, finish_s: np.ndarray, replica: np.ndarray, slots: int | None) -> np.ndarray:
    """When the client sends each request: at its arrival, or, with ``slots`` requests in flight per replica at most
    (a closed loop, or a rate run with a concurrency cap), when closed_loop_sends frees a slot for it if later."""
    if slots is None:
        return arrival_s
    return np.maximum(arrival_s, closed_loop_sends(finish_s, replica, slots))


def simulate_run(sm, spec: RunSpec, replicas: int, draft=None) -> dict:
    """Replay ``spec`` (published_rows.RunSpec) on ``replicas`` replicas of the step model ``sm``: the run's request
    count with lengths drawn from its LengthSpecs (seed = repetition index), arrivals all at t=0, Poisson or evenly
    spaced at the rate, or a closed loop; a client concurrency (closed loop, or a cap beside a rate) caps each
    replica at its share of it and sends a request at its arrival or closed_loop_sends' slot time, the later;
    pooled over repetitions (RUN_TARGET_REQUESTS): throughputs as tokens / total duration, latencies as the mean of
    the runs' means / medians; ``draft``: the run's speculative decoding (sim.config.SpeculativeSpec). Cached per
    (step model, spec, replicas, draft)."""
    key = (id(sm), spec, replicas, draft)
    hit = _RUN_CACHE.get(key)
    if hit is not None and hit[0] is sm:
        return hit[1]
    from clusterfit.sim import SimulationConfig, simulate
    from clusterfit.sim.config import ReplicaSpec
    from clusterfit.sim.requests import Requests

    n = spec.requests
    reps = max(1, -(-RUN_TARGET_REQUESTS // n)) if spec.random else 1
    stats: dict[str, list[float]] = {}
    tokens_in = tokens_out = done = span = 0.0
    gpus = sm.gpus * replicas
    for seed in range(reps):
        rng = np.random.default_rng(seed)
        inp = spec.input.draw(n, rng)
        out = spec.output.draw(n, rng)
        if spec.max_total is not None:
            out = np.maximum(np.minimum(out, spec.max_total - inp), 1)
        if spec.arrival == "poisson":
            arrival = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / spec.rate, n - 1))])
        elif spec.arrival == "constant":
            arrival = np.arange(n) / spec.rate
        else:
            arrival = np.zeros(n)
        slots = None
        cap = None
        if spec.concurrency:
            slots = max(1, -(-spec.concurrency // replicas))
            cap = min(int(sm.max_num_seqs), slots)
        cfg = SimulationConfig(replicas=replicas, seed=seed, replica=ReplicaSpec(max_num_seqs=cap, speculative=draft))
        rep, run = simulate(sm, cfg, requests=Requests.build(arrival, inp, out))
        if rep["completed"] < n:
            raise Skip("simulated requests rejected or failed (a request longer than the KV cache)")
        req = run.requests
        first, finish, o, i = req["first_token_s"], req["finish_s"], req["output_tokens"], req["input_tokens"]
        # a closed loop's client sends the next request when the engine finishes one; the front end's latency
        # (in the simulator's first token and finish) then adds to each request's TTFT and E2E, not to the slot
        send = client_sends(req["arrival_s"], finish - front_end_s(sm), req["replica"], slots)
        ttft, e2e = first - send, finish - send
        multi = o > 1
        if spec.client == "guidellm":
            # guidellm's time_per_output_token_ms counts the first token too: (last token - request start) / output
            # tokens (vllm-project/guidellm, GenerativeRequestStats.time_per_output_token_ms: "Includes time for
            # first token and all subsequent tokens")
            tpot = e2e[o >= 1] / o[o >= 1]
        else:
            tpot = (finish[multi] - first[multi]) / (o[multi] - 1)
        for name, v in (("ttft_mean", ttft.mean()), ("ttft_p50", np.median(ttft)), ("e2e_mean", e2e.mean()),
                        ("e2e_p50", np.median(e2e)),
                        ("tpot_mean", tpot.mean() if tpot.size else np.nan),
                        ("tpot_p50", np.median(tpot) if tpot.size else np.nan),
                        ("itl_mean", (finish[multi] - first[multi]).sum() / (o[multi] - 1).sum()
                         if tpot.size else np.nan),
                        ("itl_p50", run.token_gaps.quantile(0.5) if tpot.size else np.nan)):
            stats.setdefault(name, []).append(float(v))
        tokens_in += float(i.sum())
        tokens_out += float(o.sum())
        done += n
        span += float(finish.max() - send.min())
    res = {k: float(np.mean(v)) for k, v in stats.items()}
    res.update(output_tps=tokens_out / span, input_tps=tokens_in / span, total_tps=(tokens_in + tokens_out) / span,
               request_rps=done / span, output_tps_per_gpu=tokens_out / span / gpus,
               total_tps_per_gpu=(tokens_in + tokens_out) / span / gpus)
    if len(_RUN_CACHE) > 4096:
        _RUN_CACHE.clear()
    _RUN_CACHE[key] = (sm, res)
    return res


def predict_run(row, spec: RunSpec, model_name, weights, kv, engine, layout, replicas,
                settings=NO_SETTINGS, draft=None) -> float:
    """A vLLM / SGLang benchmark run's metric (RUN_METRICS) from its replay (simulate_run), with the run's
    speculative decoding ``draft`` (speculative_for) if it had one."""
    metric = row["metric"]
    stat, scale = RUN_METRICS[metric]
    if stat.startswith(("tpot", "itl")) and spec.output.mean < 2:
        raise Skip("ITL of one-token answers is undefined")
    sm = step_for(model_name, row["gpu"], weights, kv, engine, *layout, settings,
                  draft.method if draft is not None else None)
    if stat.startswith("itl"):
        # vLLM V0 multi-step scheduling streams each scheduler call's N tokens as one chunk: the client's gaps are
        # N decode steps long (the source's ITL ~ 10 x TPOT at --num-scheduler-steps 10)
        scale *= sm.engine.num_scheduler_steps
    return simulate_run(sm, spec, replicas, draft)[stat] * scale


def summarise(errs: list[float]) -> dict:
    a = np.abs(errs)
    return {"n": len(errs), "median_ape": round(float(np.median(a)), 2), "mean_ape": round(float(np.mean(a)), 2),
            "median_signed_error": round(float(np.median(errs)), 2), "p90_ape": round(float(np.percentile(a, 90)), 2)}


def evaluate(path: str, simulated: bool | None = None):
    """Predict every row of the CSV; ``simulated`` True/False keeps only the rows that go through the
    simulator / the closed-form performance model (None: all rows)."""
    rows = read_rows(path)
    if simulated is not None:
        rows = [r for r in rows if is_simulated(r) == simulated]
    results, skipped = [], SkipCounts()
    for r in rows:
        try:
            pred = predict_row(r)
            meas = float(r["value"])
            if not np.isfinite(pred) or pred <= 0:
                raise Skip("non-positive prediction")
            results.append((r, pred, meas, (pred - meas) / meas * 100.0))
        except Skip as e:
            skipped.add(r, str(e))
        except ClusterfitError as e:
            skipped.add(r, f"clusterfit error: {str(e)[:80]}")
    return rows, results, skipped


class SkipCounts(dict):
    """Skip reason -> rows skipped for it (a dict, as before), and ``rows``: (row, reason) of each skipped row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[dict, str]] = []

    def add(self, row: dict, reason: str) -> None:
        self[reason] = self.get(reason, 0) + 1
        self.rows.append((row, reason))


def gpu_in_catalog(row) -> bool:
    """Whether the row's GPU maps onto a hardware-catalog system (system_for)."""
    try:
        system_for(row["gpu"])
        return True
    except Skip:
        return False


def _coverage(rows: list[dict], results, skipped) -> dict:
    """predicted / rows with the skip reasons, for all rows, per engine, and for the rows whose GPU is in the
    catalog; runs (published_rows.run_key) with at least one predicted row, of all runs."""
    pred_ids = {r["id"] for r, *_ in results}
    per_row = getattr(skipped, "rows", [])

    def cov(subset: list[dict]) -> dict:
        ids = {r["id"] for r in subset}
        reasons: dict[str, int] = {}
        for r, why in per_row:
            if r["id"] in ids:
                reasons[why] = reasons.get(why, 0) + 1
        n_pred = sum(1 for r in subset if r["id"] in pred_ids)
        runs = {run_key(r) for r in subset}
        return {"rows": len(subset), "predicted": n_pred,
                "fraction": round(n_pred / len(subset), 4) if subset else 0.0,
                "runs": len(runs), "runs_predicted": len({run_key(r) for r in subset if r["id"] in pred_ids}),
                "skipped_by_reason": dict(sorted(reasons.items(), key=lambda kv: -kv[1]))}

    out = cov(rows)
    out["skipped_by_reason"] = dict(sorted(skipped.items(), key=lambda kv: -kv[1]))
    engines: dict[str, list[dict]] = {}
    for r in rows:
        engines.setdefault(engine_for(r["engine"]), []).append(r)
    out["by_engine"] = {k: cov(v) for k, v in sorted(engines.items())}
    out["gpu_in_catalog"] = cov([r for r in rows if gpu_in_catalog(r)])
    out["gpu_in_catalog"]["definition"] = "rows whose GPU maps onto a hardware-catalog system (system_for)"
    return out


def report(rows, results, skipped) -> dict:
    errs = [e for *_, e in results]
    out = {"rows": len(rows), "predicted": len(results), "skipped": sum(skipped.values())}
    out.update({k: v for k, v in summarise(errs).items() if k != "n"} if errs else {})
    # throughput_rows: the closed-form throughput rows only (the definition before the simulated rows existed)
    thr = [e for r, *_, e in results if r["metric"] in THROUGHPUT_METRICS and not is_simulated(r)]
    out["throughput_rows"] = summarise(thr) if thr else {}
    online: dict = {}
    for r, *_, e in results:
        if is_simulated(r):
            online.setdefault(r["metric"], []).append(e)
    out["online_serving"] = ({"all": summarise([e for v in online.values() for e in v]),
                              "by_metric": {k: summarise(v) for k, v in sorted(online.items())}} if online else {})
    for key, col in (("by_metric", "metric"), ("by_gpu", "gpu"), ("by_model", "model")):
        groups: dict = {}
        for r, *_, e in results:
            groups.setdefault(r[col], []).append(e)
        out[key] = {k: summarise(v) for k, v in sorted(groups.items())}
    out["skipped_reasons"] = dict(sorted(skipped.items(), key=lambda kv: -kv[1]))
    engines: dict = {}
    for r, *_, e in results:
        engines.setdefault(engine_for(r["engine"]), []).append(e)
    out["by_engine"] = {k: summarise(v) for k, v in sorted(engines.items())}
    out["coverage"] = _coverage(rows, results, skipped)
    # a run (published_rows.run_key: one result block of one page) weighs 1 however many metrics it reports
    out["headline"] = dict(run_weighted(results), definition=(
        "run-weighted: each predicted row weighs 1 / (predicted rows of its run), so every run counts once; "
        "median / p90 are lower weighted quantiles of |error| %, bias the weighted median signed error %"))
    by_eng: dict = {}
    for item in results:
        by_eng.setdefault(engine_for(item[0]["engine"]), []).append(item)
    out["run_weighted"] = {"all": run_weighted(results),
                           "by_engine": {k: run_weighted(v) for k, v in sorted(by_eng.items())},
                           "by_metric_group": {k: run_weighted(v) for k, v in sorted(_by_group(results).items())}}
    out["by_engine_metric_group"] = {
        eng: {g: {"rows": summarise([e for *_, e in v]), "runs": run_weighted(v)}
              for g, v in sorted(_by_group(items).items())} for eng, items in sorted(by_eng.items())}
    out["by_engine_metric_load"] = {
        eng: by_metric_and_load([x[0] for x in items], {x[0]["id"]: x[3] for x in items})
        for eng, items in sorted(by_eng.items())}
    out["worst_rows"] = [
        {"id": r["id"], "engine": engine_for(r["engine"]), "model": r["model"], "gpu": r["gpu"],
         "load": r["concurrency_or_mode"], "metric": r["metric"], "predicted": round(p, 4), "measured": m,
         "error_pct": round(e, 1), "run": run_key(r)}
        for r, p, m, e in sorted(results, key=lambda x: -abs(x[3]))[:WORST_ROWS]]
    return out


#: Rows listed under `worst_rows` in the report.
WORST_ROWS = 20


def run_weighted(results) -> dict:
    """published_rows.weighted_summary of ``results`` with run weights computed within them ({} when empty)."""
    if not results:
        return {}
    return weighted_summary([e for *_, e in results], run_weights([r for r, *_ in results]))


def _by_group(results) -> dict:
    """``results`` split by metric group (published_rows.metric_group: throughput, ttft, tpot_itl, e2e)."""
    out: dict = {}
    for item in results:
        out.setdefault(metric_group(item[0]["metric"]), []).append(item)
    return out


def print_cv(out: dict) -> None:
    """The --cv result as text: per grouping, the pooled held-out figures and their breakdowns."""
    line = "  {:<40} n={:<4} median {:>6}%  bias {:>+7}%  p90 {:>6}%"

    def show(label, v):
        if v:
            print(line.format(label[:40], v["n"], v["median_ape"], v["median_signed_error"], v["p90_ape"]))

    fit_all = out["fitted_on_all"]
    print(f"calibration rows ({out['engine']}): {out['calibration_rows']}; one fit {out['one_fit_s']} s")
    show("fitted on all, every predicted row", fit_all["all"])
    show("fitted on all, throughput rows", fit_all["throughput_rows"])
    for name in GROUPINGS:
        if name not in out:
            continue
        g = out[name]
        ho = g["held_out"]
        print(f"\n{name}: {g['definition']}\n  {g['groups']} groups, {g['groups_refit']} with calibration rows, "
              f"{g['folds']} refits, {g['seconds']} s")
        show("held out, every predicted row", ho["all"])
        show("held out, throughput rows", ho["throughput_rows"])
        for key in ("by_engine", "by_metric", "by_model_family", "by_gpu_family"):
            print(f" {key}:")
            for k, v in ho[key].items():
                show(k, v)
        print(" worst groups (median APE, n >= 3):")
        worst = [(k, v) for k, v in g["per_group"].items() if v["n"] >= 3][:8]
        for k, v in worst:
            show(k[-40:], v)
    h = out.get("hash_split_2fold")
    if h:
        print(f"\nfootnote, 2-fold hash split of the {out['engine']} throughput rows: {h['held_out']}")
    print(f"time: {out.get('seconds')}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--worst", type=int, default=10, help="print the N worst rows")
    ap.add_argument("--rows", action="store_true", help="print every predicted row")
    ap.add_argument("--calibrate", action="store_true",
                    help="fit the TensorRT-LLM constants on this CSV and write them to catalog/engines.yaml")
    ap.add_argument("--cv", action="store_true",
                    help="grouped cross-validation of the calibration (leave one source table out, leave one model "
                         "family x GPU family out, leave one source file version out), with the 2-fold hash split "
                         "as a footnote figure")
    ap.add_argument("--cv-groupings", default="table,family,doc_version",
                    help=f"comma-separated groupings for --cv, of: {', '.join(GROUPINGS)}")
    ap.add_argument("--max-folds", type=int, default=None,
                    help="--cv: merge whole groups into at most this many folds (default: one refit per group)")
    ap.add_argument("--workers", type=int, default=2, help="--cv: refits run in this many processes")
    ap.add_argument("--out", help="--cv: also write the JSON result to this file")
    ap.add_argument("--sharegpt-cv", type=float, default=None,
                    help="coefficient of variation of the assumed log-normal ShareGPT lengths (default "
                         f"{published_rows.SHAREGPT_CV:g}); to measure how much the ShareGPT rows depend on it")
    ap.add_argument("--sharegpt-shape", choices=published_rows.SHAREGPT_SHAPES, default=None,
                    help=f"family of the assumed ShareGPT lengths (default {published_rows.SHAREGPT_SHAPE})")
    a = ap.parse_args(argv)
    if a.sharegpt_shape is not None:
        published_rows.SHAREGPT_SHAPE = a.sharegpt_shape
    if a.sharegpt_cv is not None:
        if not a.sharegpt_cv >= 0:
            print("error: --sharegpt-cv must be >= 0", file=sys.stderr)
            return 2
        published_rows.SHAREGPT_CV = a.sharegpt_cv
    if a.cv:
        t0 = time.perf_counter()
        out = grouped_cv(a.csv, tuple(g for g in a.cv_groupings.split(",") if g), max_folds=a.max_folds,
                         workers=a.workers)
        t1 = time.perf_counter()
        out["hash_split_2fold"] = cross_validate(a.csv)
        out["hash_split_2fold"]["note"] = ("footnote only: rows of one table land on both sides of a hash split, so "
                                           "it measures interpolation inside tables, not a new table or family")
        out["seconds"] = {"grouped": round(t1 - t0, 1), "hash_split": round(time.perf_counter() - t1, 1),
                          "workers": a.workers}
        text = json.dumps(out, indent=1) + "\n"
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
        if a.json:
            sys.stdout.write(text)
            return 0
        print_cv(out)
        return 0
    if a.calibrate:
        import yaml

        from clusterfit.engines import ENGINES_YAML

        cfg = calibrate(a.csv)
        text = ENGINES_YAML.read_text()
        ENGINES_YAML.write_text(patch_yaml_values(text, cfg))
        print(yaml.safe_dump(cfg["engines"]["trtllm"], sort_keys=False))
        return 0
    t0 = time.perf_counter()
    rows, results, skipped = evaluate(a.csv)
    dt = time.perf_counter() - t0
    out = report(rows, results, skipped)
    out["seconds"] = round(dt, 3)
    if a.json:
        from fit_intervals import interval_coverage  # benchmarks/fit_intervals.py: the shipped 80% intervals

        out["interval_coverage"] = interval_coverage(results)
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
        return 0
    fmt = "{:<12} {:<16} {:<15} {:>3} {:<10} {:>6}/{:<6} {:<28} {:>11} {:>11} {:>7}"
    print(fmt.format("id", "model", "gpu", "n", "tp/pp/ep/dp", "isl", "osl", "metric", "predicted", "measured", "err%"))
    worst = sorted(results, key=lambda x: -abs(x[3]))
    show = results if a.rows else worst[: a.worst]
    for r, p, m, e in show:
        lay = "/".join(r[k] or "-" for k in ("tp", "pp", "ep", "dp"))
        print(fmt.format(r["id"], r["model"][:16], r["gpu"][:15], r["num_gpus"], lay, r["isl"], r["osl"],
                         r["metric"][:28], f"{p:.4g}", f"{m:.4g}", f"{e:+.1f}"))
    print(f"\nrows {out['rows']}  predicted {out['predicted']}  skipped {out['skipped']}  ({dt:.2f} s)")
    cov = out["coverage"]
    gic = cov["gpu_in_catalog"]
    print(f"coverage: {cov['predicted']}/{cov['rows']} rows ({cov['runs_predicted']}/{cov['runs']} runs); rows whose "
          f"GPU is in the catalog: {gic['predicted']}/{gic['rows']} ({gic['fraction'] * 100:.1f}%)")
    for eng, c in cov["by_engine"].items():
        print(f"  {eng:<8} {c['predicted']}/{c['rows']} rows, {c['runs_predicted']}/{c['runs']} runs")
    h = out["headline"]
    if h.get("n"):
        print(f"headline (run-weighted, {h['runs']:g} runs): median APE {h['median_ape']}%  bias "
              f"{h['median_signed_error']}%  p90 {h['p90_ape']}%")
    print(f"all predicted (row-weighted): median APE {out.get('median_ape')}%  mean APE {out.get('mean_ape')}%  "
          f"bias {out.get('median_signed_error')}%  p90 {out.get('p90_ape')}%")
    print("\nengine x metric group (run-weighted | row-weighted):")
    for eng, groups in out["by_engine_metric_group"].items():
        for g, v in groups.items():
            w, r = v["runs"], v["rows"]
            print(f"  {eng:<7} {g:<10} runs={w['runs']:<6g} rows={r['n']:<4} median {w['median_ape']:>6}%  bias "
                  f"{w['median_signed_error']:>+7}%  p90 {w['p90_ape']:>7}% | median {r['median_ape']:>6}%  bias "
                  f"{r['median_signed_error']:>+7}%")
    print("\nengine x metric group x load regime (run-weighted; the TTFT / TPOT targets are on request-rate rows):")
    for eng, groups in out["by_engine_metric_load"].items():
        for g, regimes in groups.items():
            for reg, w in regimes.items():
                print(f"  {eng:<7} {g:<10} {reg:<13} runs={w['runs']:<6g} rows={w['n']:<4} median "
                      f"{w['median_ape']:>6}%  bias {w['median_signed_error']:>+7}%  p90 {w['p90_ape']:>7}%")
    print(f"throughput rows: {out['throughput_rows']}")
    if out["online_serving"]:
        print("\nonline serving (request-rate rows, simulated):")
        for k, v in out["online_serving"]["by_metric"].items():
            print(f"  {k:<34} n={v['n']:<4} median {v['median_ape']:>6}%  bias {v['median_signed_error']:>+7}%  p90 {v['p90_ape']:>6}%")
    for key in ("by_engine", "by_metric", "by_gpu", "by_model"):
        print(f"\n{key}:")
        for k, v in out[key].items():
            print(f"  {k:<34} n={v['n']:<4} median {v['median_ape']:>6}%  bias {v['median_signed_error']:>+7}%  p90 {v['p90_ape']:>6}%")
    print(f"\nskipped ({out['skipped']} of {out['rows']} rows; the first reason that applies, in predict_row's order):")
    for k, v in out["skipped_reasons"].items():
        print(f"  {v:>4}  {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
