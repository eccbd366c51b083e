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
