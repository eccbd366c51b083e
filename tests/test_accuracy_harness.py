"""benchmarks/accuracy.py on a few hand-made rows: request-rate rows go through the simulator, the summary
keeps its keys, a light-load mean TTFT equals the performance model's prefill time, and the calibration refits
the TensorRT-LLM constants to rows it is given."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from clusterfit.errors import ClusterfitError
from clusterfit.perfmodel.serving import max_throughput_batch

COLUMNS = ("id,source_repo_or_site,source_path_or_title,source_date,model,total_params_b,active_params_b,gpu,"
           "num_gpus,nodes,precision_weights,precision_kv,tp,pp,ep,dp,engine,isl,osl,concurrency_or_mode,metric,"
           "value,unit,notes").split(",")
ENGINE = "TensorRT-LLM v0.14.0 via Triton tensorrtllm_backend"


def _benchmark_module(script: str, name: str):
    """A script of benchmarks/ loaded as a module."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / script
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def acc():
    return _benchmark_module("accuracy.py", "accuracy_harness")


def _row(i, mode, metric, value, unit, isl=467, osl=16, notes="Online serving table (with 500 requests)"):
    return {"id": f"TEST-{i:04d}", "source_repo_or_site": "test", "source_path_or_title": "test", "source_date": "",
            "model": "Llama-3.1-8B", "total_params_b": "8", "active_params_b": "8", "gpu": "H200-SXM-141GB",
            "num_gpus": "1", "nodes": "1", "precision_weights": "bf16", "precision_kv": "", "tp": "1", "pp": "1",
            "ep": "", "dp": "", "engine": ENGINE, "isl": str(isl), "osl": str(osl), "concurrency_or_mode": mode,
            "metric": metric, "value": str(value), "unit": unit, "notes": notes}


ROWS = [
    # light load: 40 requests 20 s apart on average never overlap
    _row(1, "online serving, request rate 0.05 QPS", "ttft_ms_mean", 20, "ms",
         notes="Online serving table ('generated ... with 40 requests and BF16 precision')"),
    _row(2, "online serving, request rate 4 QPS", "output_tokens_per_s_total", 63, "tokens/s"),
    _row(3, "online serving, request rate INF (all at once)", "itl_ms_mean", 190, "ms"),
    _row(4, "online serving, request rate 4 QPS", "e2e_latency_s_mean", 1.0, "s"),
    _row(5, "online serving, request rate INF (all at once)", "output_tokens_per_s_total", 1291, "tokens/s"),
]


@pytest.fixture(scope="module")
def evaluated(acc, tmp_path_factory):
    path = tmp_path_factory.mktemp("acc") / "rows.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(ROWS)
    return acc.evaluate(str(path))


def test_request_rate_rows_predicted_or_skipped_with_reasons(acc, evaluated):
    rows, results, skipped = evaluated
    assert len(rows) == len(ROWS)
    got = {r["id"]: p for r, p, *_ in results}
    assert set(got) == {"TEST-0001", "TEST-0002", "TEST-0003", "TEST-0004", "TEST-0005"}
    assert skipped == {}
    assert [acc.is_simulated(r) for r in ROWS] == [True, True, True, True, False]
    assert acc.online_requests(ROWS[0]) == 40 and acc.online_requests(ROWS[1]) == 500
    # below saturation every offered output token comes out: QPS x OSL, less the ramp-up/drain of the run
    assert got["TEST-0002"] == pytest.approx(4 * 16, rel=0.1)
    # 500 requests at once: decode steps carry hundreds of sequences and interleave prefill chunks
    assert got["TEST-0003"] > 3 * float(acc.step_for("Llama-3.1-8B", "H200-SXM-141GB", "bf16", "", "trtllm",
                                                     1, 1, 1, 1).decode_step_s(1, 467)) * 1e3


def test_light_load_ttft_is_the_prefill_time(acc, evaluated):
    _, results, _ = evaluated
    pred = next(p for r, p, *_ in results if r["id"] == "TEST-0001")
    sm = acc.step_for("Llama-3.1-8B", "H200-SXM-141GB", "bf16", "", "trtllm", 1, 1, 1, 1)
    assert pred == pytest.approx(float(sm.prefill_s(467)) * 1e3, rel=0.03)


def test_summary_keys(acc, evaluated):
    out = acc.report(*evaluated)
    for key in ("rows", "predicted", "skipped", "median_ape", "mean_ape", "median_signed_error", "p90_ape",
                "throughput_rows", "online_serving", "by_metric", "by_gpu", "by_model", "skipped_reasons"):
        assert key in out
    assert out["predicted"] == 5 and out["skipped"] == 0
    # the closed-form throughput rows only: the QPS-INF throughput row, not the simulated QPS-4 one
    assert out["throughput_rows"]["n"] == 1
    assert out["online_serving"]["all"]["n"] == 4
    assert set(out["online_serving"]["by_metric"]) == {"ttft_ms_mean", "itl_ms_mean", "output_tokens_per_s_total",
                                                       "e2e_latency_s_mean"}
    # rows 2 and 4 (4 QPS, the same notes) are one run of the table, 3 and 5 (INF) another, row 1 a third
    assert out["headline"]["runs"] == 3 and out["coverage"]["runs"] == 3
    assert set(out["online_serving"]["by_metric"]["ttft_ms_mean"]) == {"n", "median_ape", "mean_ape",
                                                                       "median_signed_error", "p90_ape"}


def _tput_row(i, model, isl, osl, tp, precision):
    r = _row(i, "max throughput (offline, all requests queued at once)", "output_tokens_per_s_total", 1.0,
             "tokens/s", isl=isl, osl=osl, notes="synthetic")
    r.update(model=model, num_gpus=str(tp), tp=str(tp), precision_weights=precision,
             engine="TensorRT-LLM (trtllm-bench, PyTorch backend)")
    return r


def test_calibration_recovers_a_uniform_slowdown(acc, tmp_path):
    """Rows measured 10% slower than the shipped constants predict: the fit must absorb it (every row starts 10%
    off; the median must end under 3%), with no constant leaving its physical bounds."""
    rows = [_tput_row(i, m, isl, osl, tp, p) for i, (m, isl, osl, tp, p) in enumerate([
        ("Llama-3.1-8B", 128, 2048, 1, "fp8"), ("Llama-3.1-8B", 2048, 128, 1, "fp8"),
        ("Llama-3.1-8B", 1000, 1000, 1, "bf16"), ("Llama-3.3-70B", 128, 4096, 2, "fp8"),
        ("Llama-3.3-70B", 5000, 500, 4, "fp8"), ("Llama-3.3-70B", 1000, 1000, 8, "fp8"),
        ("Mixtral-8x7B", 128, 2048, 2, "fp8"), ("Mixtral-8x7B", 2048, 2048, 8, "fp8")])]
    for r in rows:
        r["value"] = str(acc.predict_row(r) / 1.1)
    cfg = acc.calibrate("", rows=rows)
    fitted = cfg["engines"]["trtllm"]
    for name, (_x0, lo, hi, unit) in acc.GLOBAL_PARAMS.items():
        assert lo * unit - 1e-12 <= fitted[name] <= hi * unit + 1e-12
    try:
        acc.use_engines(cfg, str(tmp_path / "engines.yaml"))
        errs = [abs(acc.predict_row(r) / float(r["value"]) - 1) for r in rows]
    finally:
        acc.use_engines(None)
    assert sorted(errs)[len(errs) // 2] < 0.03


# ------------------------------------------------------------------ settings a row states in words
@pytest.mark.parametrize("notes, mode, engine, adp, size", [
    ("DEP8 = attention data-parallel 8 + MoE expert-parallel 8 (enable_attention_dp)", "", "TensorRT-LLM", True, 8),
    ("MoE command uses --ep and enable_attention_dp (EP size not given in table)", "", "TensorRT-LLM", True, None),
    ("llm_options: enable_attention_dp: true", "", "TensorRT-LLM", True, None),
    ("extra options attention_dp on", "", "TensorRT-LLM", True, None),
    ("column 'H200 ADP4 (FP8)'", "", "TensorRT-LLM", True, 4),
    ("parallelism from closed/NVIDIA/configs: TP8 EP8 attention-DP instances", "", "TensorRT-LLM", True, None),
    ("4 nodes (4x8xH100, EP32); DP attention", "", "SGLang", True, None),
    ("--tp-size 8 --enable-dp-attention --dp-size 8", "", "SGLang", True, 8),
    ("all utilizing DP and EP", "prefill: 4 instances x 2 GB200 (DP+EP)", "vLLM (P/D disaggregated, DP+EP)", True, None),
    ("", "decode: 1 instance x 8 GB200 (DP8+EP8)", "vLLM", True, 8),
    ("vllm serve ... -ep -tp 1 -dp 4", "", "vLLM V1 (wide-EP: DP attention + EP)", True, 4),
    ("enable_attention_dp: false", "", "TensorRT-LLM", False, None),
    ("run without attention DP", "", "TensorRT-LLM", False, None),
    ("TP8; synthetic uniform ISL/OSL", "", "TensorRT-LLM", False, None),
])
def test_attention_dp_wordings(acc, notes, mode, engine, adp, size):
    st = acc.row_settings({"notes": notes, "concurrency_or_mode": mode, "engine": engine})
    assert st.attention_dp is adp
    assert st.adp_size == size


@pytest.mark.parametrize("notes, mode, expect", [
    ("--tp 8 --ep 8, enable_attention_dp, max_batch_size 896, max_num_tokens 2048, concurrency 7168",
     "concurrency 7168 (max throughput)", dict(max_num_seqs=896, max_num_batched_tokens=2048, concurrency=7168)),
    ("kv_cache_free_gpu_mem_fraction 0.95 in most cases", "max throughput", dict(gpu_memory_utilization=0.95)),
    ("vllm serve m --max-model-len=32768 --max-num-batched-tokens=49152 --max-num-seqs=768", "",
     dict(max_num_batched_tokens=49152, max_num_seqs=768)),
    ("--max-num-seqs 512 --max-cudagraph-capture-size 256", "", dict(max_num_seqs=512)),
    ("--tp-size 8 --mem-fraction-static 0.85 --chunked-prefill-size 131072", "",
     dict(gpu_memory_utilization=0.85, max_num_batched_tokens=131072)),
    ("--max_model_len 4096 (gpu_memory_utilization default 0.9)", "", dict(gpu_memory_utilization=0.9)),
    ("vllm serve ... --gpu-memory-utilization 0.92", "", dict(gpu_memory_utilization=0.92)),
    ("--max-running-requests 256", "", dict(max_num_seqs=256)),
    ("ShareGPT 100 prompts, vllm bench serve --max-concurrency 4", "ShareGPT 100 prompts, max concurrency 4",
     dict(concurrency=4)),
    ("", "batch size 1 (max concurrency 1)", dict(concurrency=1)),
    ("", "max concurrency 1024, 2048 prompts", dict(concurrency=1024)),
    ("request rate 8/s; observed max concurrency 90", "request rate 8/s constant (guidellm)", {}),
    ("", "mixed context (ISL 2k, OSL 1k), concurrency sweep peak", {}),
])
def test_engine_settings_wordings(acc, notes, mode, expect):
    st = acc.row_settings({"notes": notes, "concurrency_or_mode": mode, "engine": ""})
    for name in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "concurrency"):
        assert getattr(st, name) == expect.get(name), name


def _moe_row(notes, tp="8", ep="", dp="", num_gpus="8", model="Qwen3-235B-A22B", engine="TensorRT-LLM (PyTorch)",
             source_date="post-v1.0"):
    r = _tput_row(99, model, 1000, 1000, 8, "fp8")
    r.update(notes=notes, tp=tp, ep=ep, dp=dp, num_gpus=num_gpus, engine=engine, source_date=source_date)
    return r


def test_attention_dp_sets_the_layout(acc):
    # stated in the notes only: attention DP over the tp ranks, experts over them (tp 1 per rank)
    r = _moe_row("column 'H200 TP8'; llm_options enable_attention_dp: true")
    assert acc.layout_for(r, r["model"], "trtllm") == ((1, 1, 8, 8), 1)
    # the same row without the wording stays plain TP
    r = _moe_row("column 'H200 TP8'")
    assert acc.layout_for(r, r["model"], "trtllm") == ((8, 1, 1, 1), 1)
    # a stated size smaller than the GPU count: attention TP within each DP rank
    r = _moe_row("attention DP 4 ... DP4", ep="8")
    assert acc.layout_for(r, r["model"], "trtllm") == ((2, 1, 8, 4), 1)
    # SGLang's --enable-dp-attention without --dp-size keeps its default dp_size 1 (plain TP attention)
    r = _moe_row("--tp-size 8 --enable-dp-attention", engine="SGLang v0.5.3")
    assert acc.layout_for(r, r["model"], "sglang") == ((8, 1, 1, 1), 1)
    # DP+EP columns without a TP column: one attention-DP rank per expert-parallel GPU, instances over the rest
    r = _moe_row("4 prefill instances (each with 2 GPUs), all utilizing DP and EP", tp="", ep="2", dp="2",
                 engine="vLLM")
    assert acc.layout_for(r, r["model"], "vllm") == ((1, 1, 2, 2), 4)
    # EP over all of a replica's GPUs with neither TP nor DP column (SGLang's large-scale EP on 32 H200s): attention
    # can only be data-parallel (TP1 x EP32 is no layout)
    r = _moe_row("large-scale EP, DeepEP", tp="", ep="32", dp="", num_gpus="32", engine="SGLang")
    assert acc.layout_for(r, r["model"], "sglang") == ((1, 1, 32, 32), 1)
    # a dense model under attention DP: independent replicas
    r = _moe_row("enable_attention_dp: true", model="Llama-3.1-8B", tp="1", dp="8")
    assert acc.layout_for(r, r["model"], "trtllm") == ((1, 1, 1, 1), 8)


def test_stated_engine_settings_reach_the_prediction(acc):
    base = _tput_row(98, "Llama-3.1-8B", 1000, 1000, 1, "fp8")
    capped = dict(base, notes="max_batch_size 16, max_num_tokens 2048")
    conc = dict(base, concurrency_or_mode="concurrency 16 (max throughput)")
    sm = acc.step_for("Llama-3.1-8B", "H200-SXM-141GB", "fp8", "", "trtllm", 1, 1, 1, 1, (None, 2048, 16))
    assert sm.engine.max_num_batched_tokens == 2048 and sm.max_num_seqs == 16
    # max_batch_size is the cap itself (not trtllm-bench's estimate, which rounds up to 64 at least)
    assert float(max_throughput_batch(sm, 1000, 1000)) == 16
    free = acc.predict_row(base)
    assert acc.predict_row(capped) < free / 4       # 16 sequences against trtllm-bench's hundreds
    assert acc.predict_row(conc) == pytest.approx(acc.predict_row(dict(base, notes="max_batch_size 16")), rel=0.02)
    # a stated KV fraction below the tables' 0.95 leaves less KV cache
    low = acc.step_for("Llama-3.1-8B", "H200-SXM-141GB", "fp8", "", "trtllm", 1, 1, 1, 1, (0.5, None, None))
    high = acc.step_for("Llama-3.1-8B", "H200-SXM-141GB", "fp8", "", "trtllm", 1, 1, 1, 1)
    assert low.kv_capacity_tokens < 0.6 * high.kv_capacity_tokens
    # vLLM: gpu_memory_utilization goes to the engine
    v = acc.step_for("Llama-3.1-8B", "H200-SXM-141GB", "bf16", "", "vllm", 1, 1, 1, 1, (0.5, None, 64))
    assert v.engine.gpu_memory_utilization == 0.5 and v.max_num_seqs == 64


# ------------------------------------------------------------------------------ grouped cross-validation
def test_table_and_family_keys(acc):
    base = {"source_repo_or_site": "NVIDIA/TensorRT-LLM", "source_path_or_title": "perf-overview.md @ abc",
            "source_date": "v1.0"}
    assert acc.section_of({"notes": "TRT-LLM v1.0 (...); table 'Llama-4-Scout', column 'H200 TP4 (FP8)'"}) \
        == "Llama-4-Scout"
    assert acc.section_of({"notes": "v0.14.0 throughput table ('token throughput'); model 'LLaMA v3 70B', TP 1"}) \
        == "LLaMA v3 70B"
    assert acc.section_of({"notes": "'Llama-70B on H200 up to 6.7x A100' table: GPUs 1"}) \
        == "Llama-70B on H200 up to 6.7x A100"
    assert acc.section_of({"notes": "section 'B200 max-throughput': --tp 8"}) == "B200 max-throughput"
    assert acc.section_of({"notes": "Online serving table ('generated using version 0.14.0')"}) == ""
    a = dict(base, notes="table 'Llama-4-Scout', column 'H200 TP4 (FP8)'")
    b = dict(base, notes="table 'Llama-4-Scout', column 'B200 TP1 (FP4)'")
    c = dict(base, notes="table 'Llama-3.3-70B', column 'B200 TP1 (FP4)'")
    d = dict(a, source_date="v0.20")
    assert acc.table_of(a) == acc.table_of(b) != acc.table_of(c)   # one table, whatever the column
    assert acc.table_of(a) != acc.table_of(d)                        # another software version: another table
    assert acc.doc_version_of(a) == acc.doc_version_of(c)
    fams = {m: acc.model_family(m) for m in ("Llama-3-70B", "Llama-3.3-70B", "Llama-3.1-405B", "Llama-4-Scout",
                                             "DeepSeek-R1-0528", "DeepSeek-V3/R1", "Qwen3-8B", "Qwen3-235B-A22B",
                                             "Mixtral-8x7B", "Mistral-7B", "gpt-oss-20b", "Llama-2-70B")}
    assert fams["Llama-3-70B"] == fams["Llama-3.3-70B"] == fams["Llama-3.1-405B"] == "llama-3.x"
    assert fams["DeepSeek-R1-0528"] == fams["DeepSeek-V3/R1"] and fams["Qwen3-8B"] == fams["Qwen3-235B-A22B"]
    assert len({fams[m] for m in ("Llama-4-Scout", "Mixtral-8x7B", "Mistral-7B", "gpt-oss-20b", "Llama-2-70B",
                                  "Llama-3-70B")}) == 6
    assert acc.hw_family("H100-SXM-80GB") == "hopper" and acc.hw_family("GB200") == "grace_blackwell"


def test_grouped_cv_holds_whole_tables_out(acc, tmp_path):
    """Two tables of the same configurations, one measured exactly as the shipped constants predict and one 10%
    slower: held out, the slow table is predicted from the exact one alone (about +10%); fitted on both, the
    constants meet in between. Every row of a table is predicted by the refit that did not see it."""
    cfgs = [("Llama-3.1-8B", 128, 2048, 1, "fp8"), ("Llama-3.1-8B", 2048, 128, 1, "fp8"),
            ("Llama-3.3-70B", 128, 4096, 2, "fp8"), ("Llama-3.3-70B", 5000, 500, 4, "fp8"),
            ("Mixtral-8x7B", 128, 2048, 2, "fp8"), ("Llama-3.1-8B", 1000, 1000, 1, "bf16")]
    rows = []
    for t, slow in (("A", 1.0), ("B", 1.1)):
        for i, c in enumerate(cfgs):
            r = _tput_row(len(rows), *c)
            r.update(notes=f"table '{t}'", source_date="v1.0")
            r["value"] = str(acc.predict_row(r) / slow)
            rows.append(r)
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    out = acc.grouped_cv(str(path), groupings=("table",), workers=1)
    g = out["table"]
    assert g["groups"] == 2 and g["groups_refit"] == 2 and g["folds"] == 2
    assert g["held_out"]["all"]["n"] == len(rows)
    slow_key = next(k for k in g["per_group"] if k.endswith("| B"))
    held, fitted = g["per_group"][slow_key]["median_signed_error"], \
        g["per_group"][slow_key]["fitted_on_all_median_signed_error"]
    assert held > 7.0                       # learnt from table A only: B's rows come out ~10% fast
    assert fitted < held - 2.0              # fitted on both tables, B pulls the constants its way
    # merged folds: never a table split across folds
    merged = acc.grouped_cv(str(path), groupings=("table",), max_folds=1, workers=1)["table"]
    assert merged["folds"] == 1 and merged["held_out"]["all"]["n"] == len(rows)


# ------------------------------------------------ issue 12 point 1: names, serving commands, metrics, skip report
@pytest.mark.parametrize("name, hf_id", [
    ("Qwen3-32B", "Qwen/Qwen3-32B"), ("qwen3-32b", "Qwen/Qwen3-32B"), ("GLM-4.6", "zai-org/GLM-4.6"),
    ("zai-org/GLM-4.6-FP8", "zai-org/GLM-4.6"), ("Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen/Qwen3-235B-A22B"),
    ("Llama-3.1-405B-Instruct", "meta-llama/Llama-3.1-405B"), ("Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
    ("DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1"), ("Llama-3-70B", "meta-llama/Llama-3.1-70B"),
    # rules on the catalog's side: a bundled id's -Instruct suffix, its MoE active-parameter suffix when unique
    ("Kimi-K2", "moonshotai/Kimi-K2-Instruct"), ("Qwen3-Coder-480B", "Qwen/Qwen3-Coder-480B-A35B-Instruct"),
    ("Qwen3-235B", "Qwen/Qwen3-235B-A22B"), ("Imaginary-Model-7B", None),
])
def test_model_names_resolve_through_aliases_and_variant_suffixes(acc, name, hf_id):
    assert acc.resolve_model(name) == hf_id


@pytest.mark.parametrize("name", ["GLM-4.5-Air", "Qwen3.5-397B-A17B", "Qwen3-14B-AWQ", "Qwen3.5-9B"])
def test_a_different_network_never_maps_to_its_namesake(acc, name):
    """Air is a smaller GLM-4.5, 3.5 a new Qwen generation: bundled or not, a name resolves to a catalog id of its
    own network (its name less a quantisation suffix) or to nothing, never to GLM-4.5 or a Qwen3 model."""
    got = acc.resolve_model(name)
    assert got is None or got.split("/")[-1].lower().startswith(name.lower().removesuffix("-awq"))


def _oss_row(i, notes, engine="vLLM v0.11.0", **kw):
    r = _row(i, "max concurrency 1, 100 prompts", "tpot_ms_mean", 10, "ms", isl=1024, osl=256, notes=notes)
    r.update(engine=engine, tp="", pp="", ep="", dp="", num_gpus="8", model="Qwen3-30B-A3B")
    r.update(kw)
    return r


def test_serving_command_flags(acc):
    v = _oss_row(1, "serving command/flags: vllm serve Qwen/Qwen3-30B-A3B -tp 4 -dp 2 --enable-expert-parallel "
                    "--max-num-seqs 256 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.85 "
                    "--kv-cache-dtype fp8 --quantization fp8; client: --max-concurrency 1 --num-prompts 100")
    assert acc.serving_command(v) == {"tp": 4, "dp": 2, "max_num_seqs": 256, "max_num_batched_tokens": 8192,
                                      "gpu_memory_utilization": 0.85, "kv_cache_dtype": "fp8",
                                      "quantization": "fp8", "enable_expert_parallel": True}
    w = acc.with_command(v, "vllm")
    # vLLM's expert-parallel group spans TP x DP
    assert (w["tp"], w["pp"], w["dp"], w["ep"]) == ("4", "", "2", "8")
    assert w["precision_kv"].startswith("fp8") and w["precision_weights"] == "bf16"   # the column wins
    s = _oss_row(2, "server: python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp-size 8 --dp 4 "
                    "--ep 8 --enable-dp-attention --mem-fraction-static 0.8 --chunked-prefill-size 4096 "
                    "--max-running-requests 128; client sglang.bench_serving", engine="SGLang v0.5.3")
    cmd = acc.serving_command(s)
    assert cmd == {"tp": 8, "dp": 4, "ep": 8, "gpu_memory_utilization": 0.8, "max_num_batched_tokens": 4096,
                   "max_num_seqs": 128, "enable_dp_attention": True}
    st = acc.row_settings(s)
    # SGLang 0.5 states no overlap setting (None): the engine's default, overlap on
    assert st.attention_dp and st.adp_size == 4 and st.engine_settings() == (0.8, 4096, 128, None, None, None)
    # vLLM V0 multi-step scheduling as the engine column states it: ten decode steps per scheduler call
    v0 = _oss_row(3, "client vllm benchmark_serving", engine="vLLM v0.6.0 --num-scheduler-steps 10")
    assert acc.row_settings(v0).num_scheduler_steps == 10 and acc.row_settings(s).num_scheduler_steps is None
    # the columns as stated win; other engines' rows are left alone
    assert acc.with_command(dict(s, tp="2"), "sglang")["tp"] == "2"
    assert acc.with_command(s, "trtllm") is s
    assert acc.serving_command(_oss_row(3, "no command here")) == {}


def test_latency_and_total_token_metrics(acc):
    """A closed loop of one request at a time with fixed lengths (vllm bench serve --ignore-eos, range ratio 0):
    every request runs alone, so TTFT is the prefill of its 1024 tokens plus the engine's front-end latency
    (request_latency_s), E2E that plus 255 batch-1 decode steps, and the throughputs are tokens / E2E (hand-derived
    from the step model's costs). vLLM v0.11.0 predates async scheduling by default, so the host's step time adds to
    every step (settings' fourth entry False)."""
    notes = ("vllm serve Qwen/Qwen3-8B -tp 1; vllm bench serve --dataset-name random --random-input-len 1024 "
             "--random-output-len 256 --ignore-eos --max-concurrency 1 --num-prompts 20")
    base = _oss_row(1, notes, model="Qwen3-8B", num_gpus="1", concurrency_or_mode="max concurrency 1, 20 prompts")
    sm = acc.step_for("Qwen3-8B", "H200-SXM-141GB", "bf16", "", "vllm", 1, 1, 1, 1, (None, None, None, False))
    prefill = float(sm.prefill_s(1024)) + sm.engine.request_latency_s
    decode = sum(float(sm.decode_step_s(1, 1024 + k)) for k in range(1, 256))
    e2e = prefill + decode
    got = {m: acc.predict_row(dict(base, metric=m)) for m in acc.RUN_METRICS}
    assert got["ttft_ms_mean"] == pytest.approx(prefill * 1e3, rel=0.03)
    assert got["ttft_ms_p50"] == pytest.approx(prefill * 1e3, rel=0.03)
    assert got["e2e_latency_ms_mean"] == pytest.approx(e2e * 1e3, rel=0.03)
    assert got["e2e_latency_s_mean"] == pytest.approx(e2e, rel=0.03)
    assert got["tpot_ms_mean"] == pytest.approx(decode / 255 * 1e3, rel=0.03)
    # fixed lengths: the token-weighted mean ITL is the mean TPOT
    assert got["itl_ms_mean"] == pytest.approx(got["tpot_ms_mean"])
    assert got["output_tokens_per_s_total"] == pytest.approx(256 / e2e, rel=0.03)
    assert got["total_tokens_per_s_total"] == pytest.approx((1024 + 256) / e2e, rel=0.03)
    assert got["input_tokens_per_s_total"] == pytest.approx(1024 / e2e, rel=0.03)
    assert got["request_throughput_per_s"] == pytest.approx(1 / e2e, rel=0.03)
    assert got["output_tokens_per_s_per_gpu"] == pytest.approx(got["output_tokens_per_s_total"])   # one GPU


def test_guidellm_tpot_counts_the_first_token(acc):
    """guidellm's time_per_output_token_ms is (last token - request start) / output tokens, the TTFT included
    (vllm-project/guidellm GenerativeRequestStats): with one request at a time (a constant rate of one per 100 s)
    of fixed lengths it is E2E / 256, where vllm bench serve's TPOT would be (E2E - TTFT) / 255."""
    notes = ("serving command/flags: --max-model-len=32768; dataset: guidellm random prompt_tokens=1024 "
             "output_tokens=256, seed 42")
    row = _oss_row(1, notes, engine="vLLM v0.17.1", model="Qwen3-8B", num_gpus="1", tp="1",
                   concurrency_or_mode="request rate 0.01/s constant (guidellm), 4 requests")
    assert acc.run_spec(row).client == "guidellm"
    sm = acc.step_for("Qwen3-8B", "H200-SXM-141GB", "bf16", "", "vllm", 1, 1, 1, 1)
    ttft = float(sm.prefill_s(1024)) + sm.engine.request_latency_s
    e2e = ttft + sum(float(sm.decode_step_s(1, 1024 + k)) for k in range(1, 256))
    assert acc.predict_row(dict(row, metric="e2e_latency_s_mean")) == pytest.approx(e2e, rel=0.03)
    tpot = acc.predict_row(dict(row, metric="tpot_ms_mean"))
    assert tpot == pytest.approx(e2e / 256 * 1e3, rel=1e-3)
    assert tpot / ((e2e - ttft) / 255 * 1e3) > 1.02   # the TTFT (~3% of E2E here) counted in


def test_closed_loop_send_times(acc):
    """Two slots on one replica, five requests queued at t=0 finishing at 3, 1, 4, 6, 5 s: requests 0 and 1 are
    sent at 0, request 2 when the first finishes (1 s), 3 at the second finish (3 s), 4 at the third (4 s)."""
    import numpy as np

    send = acc.closed_loop_sends(np.array([3.0, 1.0, 4.0, 6.0, 5.0]), np.zeros(5, int), 2)
    assert send.tolist() == [0.0, 0.0, 1.0, 3.0, 4.0]
    # per replica: replica 1 holds requests 1 and 3 (one slot each): 3 is sent when 1 finishes
    send = acc.closed_loop_sends(np.array([3.0, 1.0, 4.0, 6.0]), np.array([0, 1, 0, 1]), 1)
    assert send.tolist() == [0.0, 0.0, 3.0, 1.0]
    # a rate run capped at two in flight: requests arriving every 0.5 s go out at their arrival until both slots are
    # taken, then when a slot frees (request 3 arrives at 1.5 s but waits for the second finish at 3 s)
    arrival = np.array([0.0, 0.5, 1.0, 1.5, 2.0])
    finish = np.array([3.0, 1.0, 4.0, 6.0, 5.0])
    assert acc.client_sends(arrival, finish, np.zeros(5, int), 2).tolist() == [0.0, 0.5, 1.0, 3.0, 4.0]
    assert acc.client_sends(arrival, finish, np.zeros(5, int), None).tolist() == arrival.tolist()


def test_skip_report_states_every_reason(acc, tmp_path):
    rows = [_oss_row(1, "vllm serve x -tp 1 --ignore-eos", model="Qwen3-8B", num_gpus="1"),
            _oss_row(2, "x", model="Imaginary-Model-7B"),
            _oss_row(3, "x", gpu="H100 (80GB; SXM/PCIe not stated)", model="Qwen3-8B", num_gpus="1"),
            _oss_row(4, "random, range ratio not given (lengths not fixed)", isl="", osl="")]
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    out = acc.report(*acc.evaluate(str(path)))
    assert out["predicted"] == 1 and set(out["by_engine"]) == {"vllm"}
    reasons = out["coverage"]["skipped_by_reason"]
    assert sum(reasons.values()) == 3 and out["coverage"]["rows"] == 4
    assert "model Imaginary-Model-7B not in the catalog" in reasons
    assert any(k.startswith("GPU variant not stated") for k in reasons)
    assert "no isl/osl" in reasons
    cov = out["coverage"]
    assert cov["by_engine"]["vllm"]["rows"] == 4 and cov["by_engine"]["vllm"]["predicted"] == 1
    # the H100 whose variant the source does not state is no catalog GPU: 3 rows remain, one of them predicted
    assert (cov["gpu_in_catalog"]["rows"], cov["gpu_in_catalog"]["predicted"]) == (3, 1)
    assert sum(cov["gpu_in_catalog"]["skipped_by_reason"].values()) == 2


# ------------------------------------------------ issue 12 point 1: published runs replayed (tests/data/oss2_rows.csv)
OSS2_ROWS = Path(__file__).resolve().parent / "data" / "oss2_rows.csv"


@pytest.fixture(scope="module")
def oss2():
    return {r["id"]: r for r in csv.DictReader(open(OSS2_ROWS, newline=""))}


def test_runs_are_result_blocks(acc, oss2):
    """A run = one result block of one page: GPUStack's 'result block at line N', DataCrunch's JSONL line, else the
    source file x configuration (the SGLang v0.3 README table prints TTFT, TPOT, ITL and E2E of one configuration)."""
    key = acc.published_rows.run_key
    assert len({key(oss2[f"OSS2-{i:04d}"]) for i in range(1186, 1192)}) == 1
    assert key(oss2["OSS2-1186"]).endswith("|block 88") and key(oss2["OSS2-1210"]).endswith("|block 267")
    assert len({key(oss2[f"OSS2-{i:04d}"]) for i in range(238, 243)}) == 1
    assert key(oss2["OSS2-0238"]).endswith("sglang/outputs/llama_3_3_70b_offline_output.jsonl line 1")
    assert key(oss2["OSS2-0273"]).endswith("sglang/outputs/llama_3_3_70b_online_output.jsonl line 1")
    assert len({key(oss2[f"OSS2-{i:04d}"]) for i in range(38, 42)}) == 1      # 4/s: one run, four metrics
    assert key(oss2["OSS2-0046"]) != key(oss2["OSS2-0038"])                    # 8/s: another run
    assert key(oss2["OSS2-0009"]) != key(oss2["OSS2-0010"])                    # with / without MTP


def test_run_weighted_summary_by_hand(acc):
    """Run A reports three rows all 10% off, runs B and C one row each, 40% and 50% off. Row-weighted the median is
    10%; run-weighted each run weighs 1 (A's rows 1/3 each): cumulative weight 1 at 10%, 2 at 40% -> median 40%."""
    rows = [{"source_repo_or_site": "s", "source_path_or_title": "p", "notes": f"result block at line {b}"}
            for b in (1, 1, 1, 2, 3)]
    w = acc.published_rows.run_weights(rows)
    assert w == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1, 1])
    got = acc.published_rows.weighted_summary([10, 10, 10, -40, 50], w)
    assert got["median_ape"] == 40 and got["runs"] == 3 and got["n"] == 5
    assert got["mean_ape"] == pytest.approx((10 + 40 + 50) / 3, abs=0.01)
    assert got["median_signed_error"] == 10      # signed: -40 (weight 1), 10 (1), 50 (1) -> the middle one
    assert acc.summarise([10, 10, 10, 40, 50])["median_ape"] == 10


def test_metric_groups(acc):
    g = acc.published_rows.metric_group
    assert [g(m) for m in ("output_tokens_per_s_total", "request_throughput_per_s", "total_tokens_per_s_per_gpu",
                           "ttft_ms_p50", "ttft_s", "tpot_ms", "itl_ms_p50", "tokens_per_s_per_user",
                           "decode_tokens_per_s_batch1", "e2e_latency_s_mean")] == [
        "throughput", "throughput", "throughput", "ttft", "ttft", "tpot_itl", "tpot_itl", "tpot_itl", "tpot_itl",
        "e2e"]


def test_load_regimes_as_the_sources_word_them(acc):
    lr = acc.published_rows.load_regime
    modes = ("ShareGPT, 1000 prompts, request rate inf (all at once)",
             "request rate 1000/s constant (guidellm; effectively all at once), 1000 requests",
             "request rate 8/s (Poisson), ShareGPT, 2400 prompts", "request rate 4 QPS", "max concurrency 4, ShareGPT",
             "concurrency 1", "batch size 1", "prefill instance under load (P/D disaggregated)")
    assert [lr({"concurrency_or_mode": m}) for m in modes] == [
        "all_at_once", "all_at_once", "request_rate", "request_rate", "closed_loop", "closed_loop", "closed_loop",
        "other"]


def test_length_rules_of_the_clients(acc):
    """vllm bench serve (vllm/benchmarks/datasets.py): uniform [floor(L(1-r)), ceil(L(1+r))]; legacy
    benchmark_serving.py: [int(L r), L]; sglang.bench_serving: [max(int(L r), 1), L]."""
    rule = acc.published_rows._random_rule
    assert (rule("vllm", False, 8192, 0.8, "input", "").low, rule("vllm", False, 8192, 0.8, "input", "").high) == (
        1638, 14746)                                             # floor(1638.4), ceil(14745.6)
    assert (rule("vllm", True, 8192, 0.8, "input", "").low, rule("vllm", True, 8192, 0.8, "input", "").high) == (
        6553, 8192)
    s = rule("sglang", False, 1024, 0.5, "input", "")
    assert (s.dist, s.low, s.high, s.mean) == ("uniform", 512, 1024, 768.0)
    assert rule("vllm", False, 1000, 0.0, "input", "").dist == "fixed"


def test_load_and_lengths_read_from_rows(acc, oss2):
    spec = acc.published_rows.run_spec
    # DataCrunch SGLang, random 1024/1024, range ratio 0: uniform [1, 1024] (mean 512.5; the notes measured 508.4 /
    # 514.9 over the 3,000 requests), all 3,000 at t=0
    s = spec(oss2["OSS2-0238"])
    assert (s.client, s.arrival, s.requests) == ("sglang", "burst", 3000)
    assert (s.input.dist, s.input.low, s.input.high, s.output.low, s.output.high) == ("uniform", 1, 1024, 1, 1024)
    s = spec(oss2["OSS2-0273"])
    assert (s.arrival, s.rate, s.requests) == ("poisson", 1.0, 300)
    # MI300X DeepSeek-V3: max concurrency 1, no prompt count: sglang.bench_serving's default 1,000
    s = spec(oss2["OSS2-0009"])
    assert (s.arrival, s.concurrency, s.requests, s.input.high) == ("closed", 1, 1000, 1024)
    # SGLang v0.3 README: ShareGPT without measured lengths -> the published sglang.bench_serving ShareGPT means
    s = spec(oss2["OSS2-0038"])
    assert (s.dataset, s.arrival, s.rate, s.requests) == ("sharegpt", "poisson", 4.0, 1200)
    assert (s.input.mean, s.output.mean, s.input.low, s.input.high, s.max_total) == (224.1, 191.5, 4, 1024, 2048)
    # GPUStack vLLM: ShareGPT 1,000 prompts all at once, measured 215.3 / 194.0
    s = spec(oss2["OSS2-1186"])
    assert (s.client, s.arrival, s.requests, s.input.mean, s.output.mean) == ("vllm", "burst", 1000, 215.3, 194.0)
    assert (s.input.dist, s.output.dist) == ("lognormal", "lognormal")
    # the length family a fit file records (fit_oss_engines.py --sharegpt-shape) applies inside the block only
    with acc.published_rows.sharegpt_shape("exponential"):
        assert spec(oss2["OSS2-1186"]).output.dist == "exponential"
    assert spec(oss2["OSS2-1186"]).output.dist == "lognormal"
    with pytest.raises(ValueError, match="choose from lognormal, exponential"):
        with acc.published_rows.sharegpt_shape("gamma"):
            pass
    s = spec(oss2["OSS2-1072"])
    assert (s.arrival, s.concurrency, s.requests, s.input.mean) == ("closed", 4, 100, 229.5)
    # random 32000/100 without --ignore-eos: input as measured (32000.0), outputs stopped early at 95.3 on average
    s = spec(oss2["OSS2-1138"])
    assert (s.input.dist, s.input.mean, s.output.dist, s.output.mean) == ("fixed", 32000, "fixed", 95)
    # 4000/200 measured 3995.9 / 199.6: the outputs ran to their length
    s = spec(oss2["OSS2-1288"])
    assert (s.input.mean, s.output.mean) == (3996, 200)
    # Nemotron recipe: totals 2,097,155 in / 2,097,152 out over 2,048 prompts, --ignore-eos, 1,024 in flight
    s = spec(oss2["OSS2-0192"])
    assert (s.arrival, s.concurrency, s.requests, s.input.mean, s.output.mean) == ("closed", 1024, 2048, 1024, 1024)
    # guidellm constant 8/s: evenly spaced, ShareGPT measured 342.1 / 281.4
    s = spec(oss2["OSS2-1894"])
    assert (s.client, s.arrival, s.rate, s.requests, s.input.mean) == ("guidellm", "constant", 8.0, 1000, 342.1)
    # guidellm holds at most 512 requests in flight (its max_concurrency default); the 31 the page observed at 8/s
    # is a measurement, not a cap
    assert s.concurrency == 512
    # 1000/s for 1,000 requests: the client sends 512 at once and the rest as they finish
    s = spec(oss2["OSS2-2048"])
    assert (s.arrival, s.rate, s.concurrency, s.input.mean, s.output.mean) == ("constant", 1000.0, 512, 1034, 128)
    assert "at most 512 in flight" in s.describe()
    # a stated client cap beside a rate (vllm bench serve --request-rate with --max-concurrency)
    arrival = acc.published_rows.arrival_of
    assert arrival({"concurrency_or_mode": "request rate 8/s, max concurrency 64"}) == ("poisson", 8.0, 64)
    assert arrival({"concurrency_or_mode": "request rate inf, max concurrency 64"}) == ("closed", None, 64)
    assert arrival({"concurrency_or_mode": "request rate 8/s constant; observed max concurrency 31"}) == (
        "constant", 8.0, None)
    # a batch-1 row is no replayed run (the closed-form performance model predicts it)
    assert spec(oss2["OSS2-0163"]) is None


def test_sharegpt_draws_keep_the_measured_mean(acc):
    import numpy as np

    ln = acc.published_rows.LengthSpec("lognormal", 215.3, 4, 1024, 1.0, "")
    x = ln.draw(200_000, np.random.default_rng(1))
    assert x.min() >= 4 and x.max() <= 1024
    assert x.mean() == pytest.approx(215.3, rel=0.01)
    u = acc.published_rows.LengthSpec.uniform(1, 1024, "")
    assert u.draw(200_000, np.random.default_rng(1)).mean() == pytest.approx(512.5, rel=0.01)
    # exponential: the same clipped mean; unclipped (bounds far away), P(x < mean / 20) = 1 - e^-0.05 = 4.88%, a
    # log-normal of CV 1 puts Phi((ln 0.05 + ln 2 / 2) / sqrt(ln 2)) = 0.07% there
    ex = acc.published_rows.LengthSpec("exponential", 215.3, 4, 1024, 1.0, "")
    y = ex.draw(200_000, np.random.default_rng(1))
    assert y.min() >= 4 and y.max() <= 1024
    assert y.mean() == pytest.approx(215.3, rel=0.01)
    wide = acc.published_rows.LengthSpec("exponential", 20_000.0, 1, 10**9, 1.0, "")
    z = wide.draw(200_000, np.random.default_rng(2))
    assert np.mean(z < 1000) == pytest.approx(1 - np.exp(-0.05), abs=0.002)
    assert np.mean(x < 215.3 / 20) < 0.002


def test_speculative_rows_are_marked(acc, oss2):
    assert acc.is_speculative(oss2["OSS2-0010"], "sglang")       # 'SPECULATIVE DECODING' in the notes
    assert not acc.is_speculative(oss2["OSS2-0009"], "sglang")
    assert not acc.is_speculative(oss2["OSS2-0163"], "vllm")     # its notes say 'no speculative decoding'


def test_speculative_settings_are_read_from_the_row(acc, oss2):
    """Draft count and drafter from the server command (vLLM --speculative-config, SGLang --speculative-*), else the
    engine column; the acceptance length when the source states one; tree drafts and unstated counts skip."""
    from clusterfit.speculative import DEFAULT_ACCEPTANCE

    mtp = acc.speculative_for(oss2["OSS2-0010"], "sglang", "DeepSeek-V3")   # 'NEXTN/MTP ... (steps 2, topk 1, ...)'
    assert (mtp.method, mtp.draft_tokens, mtp.alpha) == ("mtp", 2, DEFAULT_ACCEPTANCE) and mtp.draft_cost > 0
    v = _oss_row(1, 'serving command/flags: vllm serve Qwen/Qwen3.5-35B-A3B --speculative-config={"method":"mtp",'
                    '"num_speculative_tokens":3} -tp 8; SPECULATIVE DECODING enabled (see flags)')
    assert (acc.speculative_for(v, "vllm", "Qwen3.5-35B-A3B").method,
            acc.speculative_for(v, "vllm", "Qwen3.5-35B-A3B").draft_tokens) == ("mtp", 3)
    with pytest.raises(ClusterfitError, match="has none"):   # Qwen3-30B-A3B's checkpoint has no MTP layers
        acc.speculative_for(v, "vllm", "Qwen3-30B-A3B")
    s = _oss_row(2, "serving command/flags: python3 -m sglang.launch_server --model-path m --speculative-algorithm "
                    "EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4; "
                    "TPOT with EAGLE (accept length ~3.52)", engine="SGLang v0.5.8")
    e = acc.speculative_for(s, "sglang", "Qwen3-30B-A3B")
    assert (e.method, e.draft_tokens, e.acceptance_length) == ("eagle3", 3, 3.52)
    tree = dict(s, notes=s["notes"].replace("topk 1", "topk 4"))
    with pytest.raises(acc.Skip, match="tree drafts"):
        acc.speculative_for(tree, "sglang", "Qwen3-30B-A3B")
    with pytest.raises(acc.Skip, match="number of draft tokens"):
        acc.speculative_for(_oss_row(3, "EAGLE speculative decoding (accept length ~3.52)"), "sglang", "Qwen3-30B-A3B")
    with pytest.raises(acc.Skip, match="method dspark is not modelled"):
        acc.speculative_for(_oss_row(4, "DSpark speculative decoding, num_speculative_tokens 7"), "vllm",
                            "Qwen3-30B-A3B")


def test_sglang_speculative_rows_run_with_its_speculative_defaults(acc):
    """SGLang resets max_running_requests to 48 (per attention-DP rank: 48 // dp) and turns the overlap scheduler off
    under EAGLE-family speculative decoding (Engine.for_speculative); the row's own --max-running-requests wins."""
    sm = acc.step_for("DeepSeek-R1-0528", "H200-SXM-141GB", "fp8", "", "sglang", 8, 1, 8, 1, speculative="mtp")
    assert sm.max_num_seqs == 48 and not sm.engine.async_scheduling
    own = acc.step_for("DeepSeek-R1-0528", "H200-SXM-141GB", "fp8", "", "sglang", 8, 1, 8, 1,
                       (None, None, 128, None, None, None), "mtp")
    assert own.max_num_seqs == 128
    graphs = acc.step_for("Llama-3.1-8B", "H200-SXM-141GB", "bf16", "", "sglang", 1, 1, 1, 1,
                          (None, None, None, None, None, 2))
    assert graphs.engine.cuda_graph_max_bs == 2      # the row's --cuda-graph-max-bs, not the memory tier's 256
    # server flags written beside the engine's name are read too
    row = _oss_row(5, "no flags here", engine="SGLang (main), --attention-backend fa3 + EAGLE3 speculative decoding, "
                                              "--mem-fraction-static 0.8 --cuda-graph-max-bs 2")
    st = acc.row_settings(row)
    assert (st.gpu_memory_utilization, st.cuda_graph_max_bs) == (0.8, 2)


def test_oss2_excerpt_end_to_end(acc, oss2, tmp_path):
    # the rows of models whose bundling is in progress elsewhere (Nemotron-3, Qwen3.5) are left out here
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(next(iter(oss2.values()))))
        w.writeheader()
        w.writerows(r for i, r in oss2.items() if i not in ("OSS2-0192", "OSS2-1894"))
    rows, results, skipped = acc.evaluate(str(path))
    out = acc.report(rows, results, skipped)
    got = {r["id"] for r, *_ in results}
    # the MTP run (NEXTN, steps 2, topk 1) is replayed with speculative decoding (speculative_for)
    assert "OSS2-0010" in got and not any("speculative" in reason for reason in skipped)
    # every row of a bundled model on a catalog GPU is predicted
    bundled = {"OSS2-0009", "OSS2-0038", "OSS2-0039", "OSS2-0040", "OSS2-0041", "OSS2-0046", "OSS2-0163",
               *(f"OSS2-{i:04d}" for i in (*range(238, 243), *range(273, 278), *range(1072, 1078),
                                           *range(1186, 1192))), "OSS2-1138", "OSS2-1210"}
    assert bundled <= got
    assert out["headline"]["runs"] == len({acc.published_rows.run_key(r) for r, *_ in results})
    assert set(out["by_engine_metric_group"]["sglang"]) == {"throughput", "ttft", "tpot_itl", "e2e"}
    # the same cells by load regime: each regime's runs add up to the metric group's
    for g, regimes in out["by_engine_metric_load"]["sglang"].items():
        assert sum(v["n"] for v in regimes.values()) == out["by_engine_metric_group"]["sglang"][g]["rows"]["n"]
    assert out["coverage"]["by_engine"]["sglang"]["runs"] == 6
    # all-at-once: every request waits for the prompts ahead of it, so the mean TTFT exceeds one prefill
    pred = {r["id"]: p for r, p, *_ in results}
    assert pred["OSS2-1188"] > pred["OSS2-1189"] * 0.5 and pred["OSS2-1187"] > pred["OSS2-1186"]


def test_vllm_speculative_rows_before_v0_14_ran_synchronously():
    """benchmarks/engine_versions.py: vLLM enabled async scheduling by default from v0.12 (#27614), with speculative
    decoding only from v0.14.0 (#31998) and never for CPU n-gram drafting; a row's --async-scheduling stays."""
    av = _benchmark_module("engine_versions.py", "engine_versions_harness").async_scheduling_of
    spec = '--speculative-config {"method": "mtp", "num_speculative_tokens": 1}'
    assert av("vllm", "vLLM v0.13.0", spec) is False
    assert av("vllm", "vLLM v0.14.0", spec) is True
    assert av("vllm", "vLLM v0.13.0", "") is True
    assert av("vllm", "vLLM v0.17.1", spec.replace("mtp", "ngram")) is False
    assert av("vllm", "vLLM v0.13.0 --async-scheduling", spec) is True
    assert av("vllm", "vLLM", spec) is None   # no version: the engine's own rule (Engine.for_speculative)


# ------------------------------------------------------------------ benchmarks/fit_oss_engines.py (vLLM / SGLang fit)
@pytest.fixture(scope="module")
def fit_oss():
    return _benchmark_module("fit_oss_engines.py", "fit_oss_engines")


def test_source_pages_are_dealt_into_folds_by_run_count(fit_oss):
    """Pages A, B, C, D with 5, 3, 2 and 1 runs (two metrics per run: rows of one run count once), largest first,
    each to the fold with fewer runs so far: A -> 0 (runs per fold 5/0), B -> 1 (5/3), C -> 1 (5/5), D -> 0 on the
    tie, the lower fold (6/5)."""
    rows = []
    for page, runs in (("A", 5), ("B", 3), ("C", 2), ("D", 1)):
        for k in range(runs):
            for metric in ("ttft_ms_mean", "tpot_ms_mean"):
                rows.append({**_row(len(rows), "max concurrency 1", metric, 1, "ms", isl=100 + k),
                             "source_path_or_title": page})
    folds = fit_oss.page_folds(rows, 2)
    assert folds == {"test|A": 0, "test|B": 1, "test|C": 1, "test|D": 0}


def test_leave_one_page_out_gives_every_page_its_own_fold(fit_oss):
    """--folds pages (the default): one fold per source page, pages in name order; a fold count of 1 is refused."""
    import argparse

    rows = [{**_row(i, "max concurrency 1", "ttft_ms_mean", 1, "ms"), "source_path_or_title": page}
            for i, page in enumerate(("B", "A", "C", "A"))]
    assert fit_oss.page_folds(rows, "pages") == {"test|A": 0, "test|B": 1, "test|C": 2}
    assert fit_oss.folds_arg("pages") == "pages" and fit_oss.folds_arg("3") == 3 and fit_oss.folds_arg("0") == 0
    for bad in ("1", "-2", "two"):
        with pytest.raises(argparse.ArgumentTypeError):
            fit_oss.folds_arg(bad)


def test_the_evaluator_predicts_each_row_once_per_candidate(fit_oss, tmp_path):
    """A fold's rows are a subset of the rows already predicted under the same constants: they come from the memo
    (no new evaluation) with the values a fresh prediction gives; new constants or new rows are predicted."""
    rows = [{**_row(i, "max concurrency 1", "tpot_ms_mean", 5.0, "ms", isl=1024, osl=128), "engine": "vLLM v0.11.0"}
            for i in range(3)]
    ev = fit_oss.Evaluator("vllm", str(tmp_path))
    first = ev.log_errors({"step_overhead_s": 0.002}, rows[:2])
    assert ev.calls == 1 and first[0] == first[1]   # two identical rows, one prediction each
    again = ev.log_errors({"step_overhead_s": 0.002}, rows[1:2])
    assert ev.calls == 1 and again[0] == first[1]
    ev.log_errors({"step_overhead_s": 0.002}, rows)   # the third row is new: one more evaluation
    other = ev.log_errors({"step_overhead_s": 0.004}, rows[:1])
    assert ev.calls == 3 and other[0] > first[0]      # a larger per-step floor predicts a longer TPOT
    fresh = fit_oss.Evaluator("vllm", str(tmp_path)).log_errors({"step_overhead_s": 0.002}, rows[1:2])
    assert fresh[0] == first[1]


def test_the_fit_loss_is_run_weighted_soft_l1(fit_oss, acc):
    """soft-L1 with f = F_SCALE: 2 f^2 (sqrt(1 + (z/f)^2) - 1); z = 0 costs 0, and a run of two rows at z = f weighs
    as much as one row at z = f alone."""
    import numpy as np

    f = acc.F_SCALE
    one = 2 * f * f * (np.sqrt(2.0) - 1.0)
    assert fit_oss.loss(np.array([0.0]), np.array([1.0])) == 0.0
    assert fit_oss.loss(np.array([f, f, 0.0]), np.array([0.5, 0.5, 1.0])) == pytest.approx(one / 2)
    assert fit_oss.loss(np.array([f]), np.array([1.0])) == pytest.approx(one)


def test_the_front_end_latency_is_fitted_on_the_rows_that_pin_it(fit_oss, monkeypatch):
    """request_latency_s is chosen on TTFT / E2E rows of runs not sent all at once, the other constants on every
    row. A stand-in evaluator (log error linear in the constants, so the optimum is known by hand): the light-load
    TTFT row is right at 10 ms, the all-at-once TTFT row (weighing 4 runs' worth, as a page of saturated runs
    would) at 50 ms; the throughput row is right at a 2 ms step floor and does not depend on the front end."""
    import numpy as np

    rows = [_row(1, "request rate 4 QPS", "ttft_ms_mean", 50, "ms"),
            *(_row(2 + k, f"request rate inf (all at once), run {k}", "ttft_ms_mean", 900, "ms") for k in range(4)),
            _row(9, "max concurrency 64", "output_tokens_per_s_total", 5000, "tokens/s")]
    assert [fit_oss.informs_front_end(r) for r in rows] == [True, False, False, False, False, False]

    class Linear:
        calls = 0

        def log_errors(self, params, rows_):
            rl, step = params["request_latency_s"], params["step_overhead_s"]
            return np.array([10 * (rl - 0.010) if fit_oss.informs_front_end(r)
                             else 10 * (rl - 0.050) if r["metric"] == "ttft_ms_mean" else 100 * (step - 0.002)
                             for r in rows_])

    grid = {"step_overhead_s": fit_oss.GRID["step_overhead_s"], "request_latency_s": fit_oss.GRID["request_latency_s"]}
    start = {"step_overhead_s": 0.004, "request_latency_s": 0.02}
    got = fit_oss.fit(Linear(), rows, start, grid, log=lambda s: None)
    assert got["params"] == {"step_overhead_s": 0.002, "request_latency_s": 0.010}
    # fitted on every row, the four all-at-once runs win and set it to 50 ms
    monkeypatch.setattr(fit_oss, "FIT_ROWS", {})
    assert fit_oss.fit(Linear(), rows, start, grid, log=lambda s: None)["params"]["request_latency_s"] == 0.050


def test_calibrate_rewrites_values_in_place_keeping_the_files_comments(acc):
    """--calibrate writes the fitted constants into catalog/engines.yaml line by line: comments in the body (sources
    of engine defaults) and the layout stay, a changed value is rewritten on its own line, and a GPU family fitted
    for the first time is appended under its engine (a whole-file YAML dump dropped the body's comments)."""
    import yaml

    text = ("# header\nengines:\n  trtllm:\n    # why this default\n    memory_scale: 0.9  # inline\n"
            "    vendors: [nvidia]\n    by_gpu_family:\n      hopper:\n        compute_scale: 1.0\n"
            "  vllm:\n    memory_scale: 0.9\n")
    new = yaml.safe_load(text)
    new["engines"]["trtllm"]["memory_scale"] = 0.85
    new["engines"]["trtllm"]["by_gpu_family"]["blackwell"] = {"compute_scale": 0.75}
    out = acc.patch_yaml_values(text, new)
    assert yaml.safe_load(out) == new
    assert "# header" in out and "    # why this default" in out and "vendors: [nvidia]" in out
    assert "    memory_scale: 0.85\n" in out and "  vllm:\n    memory_scale: 0.9\n" in out
    assert "      blackwell:\n        compute_scale: 0.75\n" in out


def test_version_spread_predicts_each_release_by_the_others():
    """benchmarks/version_spread.py: one configuration measured by three releases (100, 125, 80 tokens/s) and one
    measured once (left out), plus another engine's row of the same configuration (left out). Each value predicted
    by each other value: |error| 25, 20, 20, 36, 25, 56.25% (median 25%); by the geometric mean of the three, 100:
    0, 20, 25% (median 20%, signed median 0)."""
    vs = _benchmark_module("version_spread.py", "version_spread")
    mode, metric = "max throughput (offline, all requests queued at once)", "output_tokens_per_s_total"
    rows = [dict(_row(k, mode, metric, v, "tokens/s", isl=128, osl=128), source_date=d)
            for k, (v, d) in enumerate([(100, "v0.14"), (125, "v0.17"), (80, "v1.0")])]
    rows.append(dict(_row(3, mode, metric, 90, "tokens/s", isl=128, osl=2048), source_date="v0.14"))
    rows.append(dict(_row(4, mode, metric, 300, "tokens/s", isl=128, osl=128), source_date="v0.20",
                     engine="vLLM v0.11.0"))
    groups = vs.version_groups(rows, "trtllm")
    assert len(groups) == 1 and len(next(iter(groups.values()))) == 3
    out = vs.spread(groups)
    assert out["configurations"] == 1 and out["rows"] == 3
    assert out["other_version"]["n"] == 6 and out["other_version"]["median_ape"] == pytest.approx(25.0)
    assert out["other_version"]["p90_ape"] == pytest.approx(46.125, abs=0.01)   # between 36 and 56.25
    assert out["geometric_mean"]["median_ape"] == pytest.approx(20.0)
    assert out["geometric_mean"]["median_signed_error"] == pytest.approx(0.0, abs=1e-9)


def test_per_family_fit_refuses_a_family_of_one_page(tmp_path, capsys):
    """benchmarks/fit_oss_family.py: rows map to engines.gpu_family (hopper where it names none), and a family whose
    calibrating rows come from one source page cannot be held out page by page: one error line, exit 2."""
    fam = _benchmark_module("fit_oss_family.py", "fit_oss_family")
    assert [fam.family_of({"gpu": g}) for g in ("A100-SXM4-80GB", "H200-SXM-141GB", "B200-SXM-180GB")] == \
        ["a100", "hopper", "blackwell"]
    path = tmp_path / "rows.csv"
    rows = [{**_row(i, "max concurrency 1", "tpot_ms_mean", 9.0, "ms", isl=1024, osl=128), "engine": "vLLM v0.11.0",
             "gpu": "A100-SXM4-80GB"} for i in range(2)]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    assert fam.main([str(path), "--engine", "vllm", "--family", "a100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --family: a100 has 1 vllm source page(s) with calibrating rows; leaving one out needs two"]
