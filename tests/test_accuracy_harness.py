"""benchmarks/accuracy.py on a few hand-made rows: request-rate rows go through the simulator, the summary
keeps its keys, a light-load mean TTFT equals the performance model's prefill time, and the calibration refits
the TensorRT-LLM constants to rows it is given."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

COLUMNS = ("id,source_repo_or_site,source_path_or_title,source_date,model,total_params_b,active_params_b,gpu,"
           "num_gpus,nodes,precision_weights,precision_kv,tp,pp,ep,dp,engine,isl,osl,concurrency_or_mode,metric,"
           "value,unit,notes").split(",")
ENGINE = "TensorRT-LLM v0.14.0 via Triton tensorrtllm_backend"


@pytest.fixture(scope="module")
def acc():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "accuracy.py"
    spec = importlib.util.spec_from_file_location("accuracy_harness", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    assert set(got) == {"TEST-0001", "TEST-0002", "TEST-0003", "TEST-0005"}
    assert skipped == {"metric e2e_latency_s_mean of request-rate rows is not predicted": 1}
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
    assert out["predicted"] == 4 and out["skipped"] == 1
    # the closed-form throughput rows only: the QPS-INF throughput row, not the simulated QPS-4 one
    assert out["throughput_rows"]["n"] == 1
    assert out["online_serving"]["all"]["n"] == 3
    assert set(out["online_serving"]["by_metric"]) == {"ttft_ms_mean", "itl_ms_mean", "output_tokens_per_s_total"}
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
    assert float(acc.max_throughput_batch(sm, 1000, 1000)) == 16
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
    # a different network never maps to its namesake: Air is a smaller GLM-4.5, 3.5 a new Qwen generation
    ("GLM-4.5-Air", None), ("Qwen3.5-397B-A17B", None), ("Qwen3-14B-AWQ", None),
])
def test_model_names_resolve_through_aliases_and_variant_suffixes(acc, name, hf_id):
    assert acc.resolve_model(name) == hf_id


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
    assert st.attention_dp and st.adp_size == 4 and st.engine_settings() == (0.8, 4096, 128)
    # the columns as stated win; other engines' rows are left alone
    assert acc.with_command(dict(s, tp="2"), "sglang")["tp"] == "2"
    assert acc.with_command(s, "trtllm") is s
    assert acc.serving_command(_oss_row(3, "no command here")) == {}


def test_latency_and_total_token_metrics(acc):
    base = _oss_row(1, "vllm serve Qwen/Qwen3-8B -tp 1", model="Qwen3-8B", num_gpus="1")
    sm = acc.step_for("Qwen3-8B", "H200-SXM-141GB", "bf16", "", "vllm", 1, 1, 1, 1)
    tpot = acc.predict_row(base)
    assert tpot == pytest.approx(float(acc.cycle_s(sm, 1.0, 1024, 256)) / 256 * 1e3)
    assert acc.predict_row(dict(base, metric="tpot_ms_p50")) == tpot
    ttft = acc.predict_row(dict(base, metric="ttft_ms_p50"))
    assert ttft == pytest.approx(acc.first_token_s(sm, 1024, 0.0, 1024 + 128) * 1e3)
    out = acc.predict_row(dict(base, metric="output_tokens_per_s_total"))
    assert acc.predict_row(dict(base, metric="total_tokens_per_s_total")) == pytest.approx(out * (1024 + 256) / 256)
    # request-rate rows: medians and totals from the same simulated run
    rr = dict(base, concurrency_or_mode="request rate inf (all at once), 50 prompts", notes="vllm serve x -tp 1 "
              "(with 50 requests)", isl="512", osl="64")
    got = {m: acc.predict_row(dict(rr, metric=m)) for m in ("ttft_ms_mean", "ttft_ms_p50", "tpot_ms_mean",
                                                           "tpot_ms_p50", "itl_ms_mean")}
    assert all(v > 0 for v in got.values()) and got["tpot_ms_mean"] == got["itl_ms_mean"]


def test_skip_report_states_every_reason(acc, tmp_path):
    rows = [_oss_row(1, "vllm serve x -tp 1", model="Qwen3-8B", num_gpus="1"),
            _oss_row(2, "x", model="GLM-4.5-Air"),
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
    assert "model GLM-4.5-Air not in the catalog" in reasons
    assert any(k.startswith("GPU variant not stated") for k in reasons)
    assert any(k.startswith("no isl/osl: random lengths") for k in reasons)
