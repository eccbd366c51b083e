"""Prediction intervals (clusterfit.intervals): quantiles and fallback levels of hand-made residual sets, the
interval keys of perf / plan / simulate JSON (CLI and HTTP API), the table format, and plan --confidence."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest

from clusterfit import intervals as iv
from clusterfit.engines import get_engine
from clusterfit.intervals import Family, IntervalTable, fit_table
from clusterfit.report.intervals import with_interval
from clusterfit.schema import Interval

ROOT = Path(__file__).resolve().parents[1]
F_DEC = Family("trtllm", "hopper", False, "decode")
F_THR = Family("trtllm", "hopper", False, "throughput")
F_B200 = Family("trtllm", "blackwell", True, "prefill")


# ------------------------------------------------------------------------------------ fitting, by hand
def test_quantiles_of_twenty_residuals_by_hand():
    # r = 0.00, 0.01, ..., 0.19 (n = 20). numpy's linear quantile at p sits at index p x (n - 1) = 19 p:
    # 5%: 0.95 -> 0.0095; 10%: 1.9 -> 0.019; 50%: 9.5 -> 0.095; 90%: 17.1 -> 0.171; 95%: 18.05 -> 0.1805
    table = fit_table((F_THR, i / 100) for i in range(20))
    assert table["trtllm|hopper|dense|throughput"] == {"n": 20, "q": [0.0095, 0.019, 0.095, 0.171, 0.1805]}
    # every coarser level holds the same 20 residuals
    for key in ("trtllm|hopper|dense|*", "trtllm|*|dense|*", "trtllm|*|*|*", "*|*|*|*"):
        assert table[key]["n"] == 20


def test_fallback_levels_by_hand():
    # 10 decode + 10 throughput residuals of trtllm / hopper / dense, 5 of trtllm / blackwell / moe (prefill),
    # 20 of vllm / hopper / dense (throughput)
    res = [(F_DEC, 0.1)] * 10 + [(F_THR, -0.1)] * 10 + [(F_B200, 0.5)] * 5 \
        + [(Family("vllm", "hopper", False, "throughput"), 0.3)] * 20
    table = IntervalTable({"families": fit_table(res)})
    # decode alone has 10 < 15: drop the regime -> trtllm|hopper|dense|* holds 20
    b = table.band(F_DEC)
    assert (b.level, b.key, b.n) == ("no_regime", "trtllm|hopper|dense|*", 20)
    # blackwell moe has 5 (and 5 without its regime): drop the GPU family -> trtllm|*|moe|* still 5: drop dense/MoE
    # -> trtllm|*|*|* holds 25
    b = table.band(F_B200)
    assert (b.level, b.key, b.n) == ("engine", "trtllm|*|*|*", 25)
    # an engine with no residuals: every engine, 45
    b = table.band(Family("sglang", "hopper", False, "decode"))
    assert (b.level, b.key, b.n) == ("all", "*|*|*|*", 45)
    # a family with its own 20
    b = table.band(Family("vllm", "hopper", False, "throughput"))
    assert (b.level, b.n, b.q) == ("family", 20, (0.3, 0.3, 0.3, 0.3, 0.3))


def test_time_and_rate_factors_are_asymmetric_and_contain_the_point():
    band = iv.Band("k", "family", 20, (-0.2, -0.1, 0.0, 0.2, 0.3))
    lo, hi = band.time_factors(80)                   # exp(q10), exp(q90)
    assert lo == pytest.approx(math.exp(-0.1)) and hi == pytest.approx(math.exp(0.2))
    lo, hi = band.rate_factors(80)                   # a rate is 1 / time: exp(-q90), exp(-q10)
    assert lo == pytest.approx(math.exp(-0.2)) and hi == pytest.approx(math.exp(0.1))
    assert band.time_factors(90) == pytest.approx((math.exp(-0.2), math.exp(0.3)))
    # a biased family (every quantile > 0: measured always slower) is widened to the point prediction
    biased = iv.Band("k", "family", 20, (0.1, 0.2, 0.3, 0.4, 0.5))
    assert biased.time_factors(80) == pytest.approx((1.0, math.exp(0.4)))
    assert biased.rate_factors(80) == pytest.approx((math.exp(-0.4), 1.0))


def test_conformal_widening_by_hand():
    # 9 scores 0.01 .. 0.09 at 80%: the ceil((9 + 1) x 0.8) = 8th smallest, 0.08; at 90%: ceil(9) = 9th, 0.09
    scores = [i / 100 for i in range(1, 10)]
    assert iv.conformal_widening(scores, 80) == 0.08
    assert iv.conformal_widening(scores, 90) == 0.09
    # 4 scores at 90%: ceil(5 x 0.9) = 5 > 4, the largest
    assert iv.conformal_widening([-0.1, 0.0, 0.2, 0.1], 90) == 0.2
    with pytest.raises(iv.ClusterfitError, match="no conformity scores"):
        iv.conformal_widening([float("nan")], 80)


def test_conformity_is_the_distance_outside_the_interval():
    band = iv.Band("k", "family", 20, (-0.2, -0.1, 0.0, 0.2, 0.3))      # 80%: [-0.1, 0.2] in log units
    assert iv.conformity(band, 0.5, 80) == pytest.approx(0.3)            # 0.3 above the top
    assert iv.conformity(band, -0.4, 80) == pytest.approx(0.3)           # 0.3 below the bottom
    assert iv.conformity(band, 0.0, 80) == pytest.approx(-0.1)           # inside, 0.1 from the lower end


def test_widening_moves_both_quantiles_out():
    # the decode regime's widening 0.05 at 80% and 0.1 at 90%: [-0.1 - 0.05, 0.2 + 0.05] and [-0.2 - 0.1, 0.3 + 0.1]
    q = [-0.2, -0.1, 0.0, 0.2, 0.3]
    table = IntervalTable({"families": {"*|*|*|*": {"n": 20, "q": q}},
                           "widening": {"80": {"decode": 0.05, "prefill": 0.4}, "90": {"decode": 0.1}}})
    band = table.band(F_DEC)
    assert band.time_factors(80) == pytest.approx((math.exp(-0.15), math.exp(0.25)))
    assert band.time_factors(90) == pytest.approx((math.exp(-0.3), math.exp(0.4)))
    # the prefill regime's own widening; a regime the table does not widen keeps its quantiles
    assert table.band(F_B200).time_factors(80) == pytest.approx((math.exp(-0.5), math.exp(0.6)))
    assert table.band(F_THR).time_factors(80) == pytest.approx((math.exp(-0.1), math.exp(0.2)))
    # a negative widening narrows, but the interval still holds the point prediction
    narrow = IntervalTable({"families": {"*|*|*|*": {"n": 20, "q": q}}, "widening": {"80": {"decode": -0.15}}})
    assert narrow.band(F_DEC).time_factors(80) == pytest.approx((1.0, math.exp(0.05)))
    with pytest.raises(iv.ClusterfitError, match="malformed"):
        IntervalTable({"families": {}, "widening": {"80": 0.05}})


def test_step_margins_pick_the_regime_of_each_step():
    m = iv.StepMargins(prefill=3.0, decode=2.0, throughput=1.5)
    got = m.step([8000.0, 0.0, 0.0, 10.0], [8.0, 4.0, 200.0, 64.0])
    # prefill tokens >= decode sequences: prefill; else by the decode batch (<= 32: decode)
    assert got.tolist() == [3.0, 2.0, 1.5, 1.5]


# ------------------------------------------------------------------- the rows of fit_intervals.py
@pytest.fixture(scope="module")
def fitmod():
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("fit_intervals", ROOT / "benchmarks" / "fit_intervals.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(metric, value, mode="max throughput (offline, all requests queued)"):
    return {"id": "T-1", "source_repo_or_site": "t", "source_path_or_title": "t", "source_date": "", "notes": "",
            "model": "Llama-3.1-8B", "gpu": "H200-SXM-141GB", "num_gpus": "1", "nodes": "1",
            "precision_weights": "bf16", "precision_kv": "", "tp": "1", "pp": "1", "ep": "", "dp": "",
            "engine": "TensorRT-LLM v0.14.0", "isl": "1024", "osl": "128", "concurrency_or_mode": mode,
            "metric": metric, "value": str(value), "unit": ""}


def test_residuals_are_in_the_time_direction(fitmod):
    # a TTFT measured 10 ms, predicted 8 ms: log(10 / 8); 100 tokens/s measured, 125 predicted: the time per token
    # was predicted 1/125, measured 1/100: log((1/100) / (1/125)) = log(125 / 100)
    assert fitmod.residual(_row("ttft_ms", 10), 8.0) == pytest.approx(math.log(10 / 8))
    assert fitmod.residual(_row("output_tokens_per_s_total", 100), 125.0) == pytest.approx(math.log(1.25))


def test_row_families(fitmod):
    fam = fitmod.row_family(_row("output_tokens_per_s_total", 1000), 1100.0)
    assert fam == Family("trtllm", "hopper", False, "throughput")
    assert fitmod.row_family(_row("ttft_ms", 20, "batch size 1"), 21.0).regime == "prefill"
    assert fitmod.row_family(_row("tokens_per_s_per_user", 200, "batch size 1"), 190.0).regime == "decode"
    assert fitmod.row_family(_row("output_tokens_per_s_total", 500, "static batch size 8"), 510.0).regime == "decode"
    assert fitmod.row_family(_row("output_tokens_per_s_total", 9e3, "static batch size 64"), 9e3).regime == "throughput"
    moe = dict(_row("output_tokens_per_s_total", 1000), model="Qwen3-30B-A3B", gpu="B200-SXM-180GB")
    assert fitmod.row_family(moe, 1000.0) == Family("trtllm", "blackwell", True, "throughput")
    # a TTFT of requests sent all at once waits for a backlog to drain: queued, not prefill
    assert fitmod.row_family(_row("ttft_ms", 900), 800.0).regime == "queued"
    assert fitmod.row_family(_row("ttft_ms_mean", 900, "ShareGPT, 1000 prompts, request rate inf (all at once)"),
                             800.0).regime == "queued"
    assert fitmod.row_family(_row("ttft_ms_p50", 90, "request rate 4/s (Poisson), 1000 prompts"), 80.0).regime \
        == "prefill"


def test_ttft_regime_by_hand():
    # queued from a mean wait of half the mean TTFT on: 0.5 s of 1.0 s waited -> queued; 0.4 s -> prefill
    assert iv.ttft_regime(0.5, 1.0) == "queued"
    assert iv.ttft_regime(0.4, 1.0) == "prefill"
    assert iv.ttft_regime(0.0, 0.0) == "prefill"


# ---------------------------------------------------------------------------------- the shipped table
def test_shipped_table_says_how_it_was_made():
    data = json.loads(iv.INTERVALS_JSON.read_text())
    assert data["command"].startswith("python benchmarks/fit_intervals.py")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", data["date"])
    assert re.fullmatch(r"[0-9a-f]{40}", data["model_commit"])
    assert data["quantiles"] == list(iv.QUANTILES)
    for key, e in data["families"].items():
        assert e["q"] == sorted(e["q"]), key
    assert data["families"]["*|*|*|*"]["n"] >= iv.MIN_RESIDUALS


# ------------------------------------------------------------------------------ perf / plan / simulate
def _check(obj: dict, key: str) -> None:
    got = obj[f"{key}_interval"]
    assert got["value"] == pytest.approx(obj[key])
    assert got["lo"] <= got["value"] <= got["hi"]


PERF_KEYS = ("ttft_s", "tpot_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "tokens_per_s_per_user",
             "decode_step_s", "prefill_s")


def test_perf_json_carries_intervals(run_json):
    out = run_json("perf", "llama-3.1-8b", "--system", "h200", "--tp", "1", "--isl", "1024", "--osl", "128",
                   "--max-throughput", "--engine", "trtllm")
    for key in PERF_KEYS:
        _check(out, key)
    assert set(out["intervals"]["by_regime"]) == {"prefill", "throughput"}
    assert out["intervals"]["confidence"] == 80
    # a rate and its time move in opposite directions: tokens/s per user = 1 / TPOT at both ends
    assert out["tokens_per_s_per_user_interval"]["hi"] == pytest.approx(1.0 / out["tpot_s_interval"]["lo"])
    assert out["tokens_per_s_per_user_interval"]["lo"] == pytest.approx(1.0 / out["tpot_s_interval"]["hi"])


PLAN = ("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--rate", "200", "--ttft-ms", "500", "--tpot-ms",
        "30", "--system", "h200", "--no-disagg")


def test_plan_json_carries_intervals(run_json):
    out = run_json(*PLAN)
    row = out["recommended"]
    for key in ("ttft_s", "tpot_s", "tokens_per_s_per_user", "full_load_requests_per_s",
                "full_load_output_tokens_per_s", "serving_replicas"):
        _check(row, key)
    for point in out["pareto"]["hgx_h200"]:
        _check(point, "tokens_per_s_per_user")
        _check(point, "output_tokens_per_s_per_gpu")
    assert "confidence" not in out and "sized_on" not in row


def test_capacity_mode_carries_intervals(run_json):
    out = run_json("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--ttft-ms", "500", "--tpot-ms", "30",
                   "--system", "h200", "--gpus", "2", "--no-disagg")
    for layout in out["capacity"]["layouts"]:
        for key in ("requests_per_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "tokens_per_s_per_user",
                    "ttft_s", "tpot_s"):
            _check(layout, key)


def test_simulate_json_carries_intervals(run_json):
    out = run_json("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "1000", "--osl", "250",
                   "--rate", "20", "--replicas", "2", "--requests", "500")
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for pct in ("p50", "p90", "p99", "mean"):
            got = out[f"{metric}_interval"][pct]
            assert got["value"] == pytest.approx(out[metric][pct])
            assert got["lo"] <= got["value"] <= got["hi"]
    assert "prefill" in out["intervals"]["by_regime"]          # 20 req/s on two H200s: served as they come


def test_an_overloaded_simulation_takes_the_queued_ttft_band(run_json):
    # 2,000 requests at 50 req/s on one H200 that serves ~27: the backlog's wait is most of every TTFT
    out = run_json("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "1000", "--osl", "200",
                   "--rate", "50", "--requests", "2000")
    wait = out["queue"]["mean_waiting"] / out["throughput"]["requests_per_s"]       # Little's law
    assert wait >= 0.5 * out["ttft_s"]["mean"]
    assert "queued" in out["intervals"]["by_regime"] and "prefill" not in out["intervals"]["by_regime"]
    band = iv.load_table().band(Family("vllm", "hopper", False, "queued"))
    mean = out["ttft_s_interval"]["mean"]
    assert mean["hi"] == pytest.approx(mean["value"] * band.time_factors()[1])


# -------------------------------------------------------------------------------------------- tables
def test_table_format():
    assert with_interval(0.0281, Interval(value=0.0281, lo=0.024, hi=0.033), 1e3, 1, "ms") == "28.1 ms (24-33)"
    assert with_interval(5366.6, Interval(value=5366.6, lo=4398.2, hi=6258.2), digits=0) == "5,367 (4,398-6,258)"
    assert with_interval(4.48, None, digits=2, unit="ms") == "4.48 ms"


def test_perf_table_shows_intervals(run_cli):
    code, out, _ = run_cli("perf", "llama-3.1-8b", "--system", "h200", "--tp", "1", "--isl", "1024", "--osl", "128",
                           "--batch", "1", "--context", "1024")
    assert code == 0
    assert re.search(r"TTFT\s+\S\s+\d+\.\d ms \(\d[\d.]*-\d[\d.]*\)", out), out
    assert re.search(r"TPOT\s+\S\s+\d+\.\d\d ms \(\d[\d.]*-\d[\d.]*\)", out), out
    assert "80% prediction interval" in out


# ---------------------------------------------------------------------------------- plan --confidence
def test_confidence_90_sizes_at_least_the_default_replicas(run_json):
    base = run_json(*PLAN)["recommended"]
    high = run_json(*PLAN, "--confidence", "90")
    row = high["recommended"]
    assert high["confidence"] == 90
    assert row["serving_replicas"] >= base["serving_replicas"]
    assert row["sized_on"]["confidence"] == 90
    assert row["sized_on"]["tpot_s"] >= row["tpot_s"]
    assert run_json(*PLAN, "--confidence", "50")["recommended"]["serving_replicas"] == base["serving_replicas"]


@pytest.fixture
def doubling_table(tmp_path, monkeypatch):
    """An interval table whose 90% upper bound doubles every step (q95 = log 2) and whose lower bound is the
    point (q5 = 0), for every engine, GPU and regime."""
    q = [0.0, 0.0, 0.0, round(math.log(2.0), 12), round(math.log(2.0), 12)]
    path = tmp_path / "intervals.json"
    path.write_text(json.dumps({"quantiles": list(iv.QUANTILES), "min_residuals": 15,
                                "families": {"*|*|*|*": {"n": 100, "q": q}}}))
    monkeypatch.setattr(iv, "INTERVALS_JSON", path)
    iv.load_table.cache_clear()
    yield
    iv.load_table.cache_clear()


def test_confidence_90_by_hand(run_json, doubling_table):
    # No latency target: only the KV cache bounds the batch. With every step twice as long, each batch's TPOT and
    # TTFT double (TTFT: the prefill server's load rate x service time is unchanged, its waits scale with the
    # service time; the engine's front-end latency, outside the steps, does not) and its requests/s halve, so the
    # same batch is best and the replicas are ceil(load / (capacity / 2)).
    args = ("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--rate", "300", "--system", "h200",
            "--no-disagg")
    base = run_json(*args)["recommended"]
    row = run_json(*args, "--confidence", "90")["recommended"]
    cap = row["full_load_requests_per_s"] / row["serving_replicas"]      # point requests/s per replica
    assert row["sized_on"]["requests_per_s_per_replica"] == pytest.approx(cap / 2)
    assert row["sized_on"]["tpot_s"] == pytest.approx(2 * row["tpot_s"])
    front = get_engine("vllm").request_latency_s
    assert row["sized_on"]["ttft_s"] == pytest.approx(2 * (row["ttft_s"] - front) + front)
    assert row["serving_replicas"] == math.ceil(300 / (cap / 2))
    assert row["serving_replicas"] >= base["serving_replicas"]


@pytest.mark.parametrize("value", ["95", "0", "abc"])
def test_bad_confidence_is_one_error_line(run_cli, value):
    code, out, err = run_cli(*PLAN, "--confidence", value)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "--confidence" in lines[0]


def test_confidence_is_refused_in_capacity_mode(run_cli):
    code, _, err = run_cli("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--system", "h200", "--gpus", "2",
                           "--confidence", "90")
    assert code == 2 and err.startswith("error: --confidence:") and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------- HTTP API
def test_http_api_returns_the_interval_keys():
    pytest.importorskip("fastapi", reason="the web extra is not installed")
    httpx = pytest.importorskip("httpx")
    from _webserver import running_server

    import clusterfit as cf

    body = {"model": "llama-3.1-8b", "system": "h200", "tp": 1, "isl": 1024, "osl": 128, "batch": 1, "context": 1024}
    with running_server() as url, httpx.Client(base_url=url, timeout=120) as client:
        got = client.post("/api/perf", json=body).json()
    want = cf.perf(**body).model_dump(mode="json")
    assert {k for k in got if k.endswith("_interval")} == {f"{k}_interval" for k in PERF_KEYS}
    assert got["ttft_s_interval"] == want["ttft_s_interval"]
