"""Measured kernel profiles (`clusterfit calibrate`, `--profile`): the schema and its validation through the real
entry point, the curves a profile gives the performance model, and the calibration code (fit on synthetic timings;
the torch code paths as a CPU dry run where torch is installed).

Hand-derived figures use the shipped H200 fit (catalog/kernels/h200-fit.json), the H200 datasheet of the hardware
catalog (989 TFLOP/s dense bf16, NVLink 450 GB/s per direction), the engine constants of catalog/engines.yaml and
comm.py's documented all-reduce constants; Llama-3.1-8B's shapes are from its config.json (hidden 4096, 32 layers,
32 query / 8 KV heads of 128, intermediate 14336).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterfit.perfmodel.kernels import _read_catalog, load_curves

PROFILES = Path(__file__).resolve().parent / "data" / "profiles"
SHIPPED = PROFILES / "h200-shipped.json"
PERF = ("perf", "llama-3.1-8b", "--system", "h200", "--tp", "1")


def shipped_h200_profile() -> dict[str, Any]:
    """The test profile, built from the shipped H200 probe files and the shipped fit (tests/data/profiles holds it)."""
    from clusterfit.calibrate.fit import timings_from_probe_files
    from clusterfit.hardware import load_hardware

    g = load_hardware().gpu("h200_sxm")
    k, e = _read_catalog("h200-kernels.json"), _read_catalog("h200-memory-fp8-moe.json")
    fit = {key: v for key, v in _read_catalog("h200-fit.json").items() if key != "_what"}
    fit["datasheet"] = {"mem_bw_bytes_per_s": g.mem_bw_bytes_per_s,
                        "peak_flops": {"bf16": g.dense_flops["bf16"], "fp8": g.dense_flops["fp8"]},
                        "scale_up_bw_bytes_per_s": g.scale_up_bw_bytes_per_s}
    env = k["env"]
    return {
        "schema_version": 1, "kind": "clusterfit-kernel-profile", "created": "2026-11-29",
        "gpu": {"id": "h200_sxm", "device_name": env["name"], "count": 1, "memory_bytes": env["mem_bytes"],
                "compute_capability": env["cc"], "sms": env["sms"]},
        "software": {"driver": "580.159.04", "cuda": "13.0", "torch": env["torch"], "nccl": None, "clusterfit": None},
        "measurement": {"device": "cuda", "quick": False, "timer": "CUDA events", "warmup": 5, "repeats": 30,
                        "statistic": "median",
                        "fp8_activation_quantisation": "included: the probe quantised x with separate torch ops "
                        "(quant_bytes_per_elem); fitted apart as fit.fp8_probe_quantisation"},
        "timings": json.loads(timings_from_probe_files(k, e).model_dump_json(by_alias=True)),
        "fit": fit,
        "notes": ["Test profile (tests/data/profiles): the shipped H200 measurements (catalog/kernels/h200-kernels.json, "
                  "h200-memory-fp8-moe.json; one NVIDIA H200 SXM, 2026-11-29, shared/tools/gpu_probe*.py) as profile "
                  "timings, and the shipped fit (catalog/kernels/h200-fit.json) unchanged, so predictions with it equal "
                  "the defaults exactly. Made by tests/test_profile.py::shipped_h200_profile; not a calibrate run."],
    }


def _doc() -> dict[str, Any]:
    return json.loads(SHIPPED.read_text())


def _write(tmp_path: Path, doc: Any, name: str = "p.json") -> str:
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return str(f)


def _one_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


# ============================================================================================ the file
def test_the_test_profile_is_the_shipped_fit_and_measurements():
    assert _doc() == shipped_h200_profile()


def test_shipped_profile_gives_the_shipped_curves():
    from clusterfit.profile import parse_profile, profile_curves

    assert profile_curves(parse_profile(_doc())) == load_curves()


# ================================================================================ predictions it changes
def test_shipped_profile_reproduces_default_predictions_exactly(run_json):
    prof = ("--profile", str(SHIPPED))
    for args in (PERF + ("--isl", "2048", "--osl", "256", "--concurrency", "32"),
                 ("simulate", "llama-3.1-8b", "--system", "h200", "--replicas", "2", "--rate", "4", "--requests", "300",
                  "--isl", "512", "--osl", "128", "--seed", "1"),
                 ("plan", "llama-3.1-8b", "--system", "h200", "--system", "b200", "--rate", "5", "--isl", "1024",
                  "--osl", "256", "--ttft-ms", "2000", "--tpot-ms", "50", "--no-disagg")):
        base, with_profile = run_json(*args), run_json(*args, *prof)
        for d in (base, with_profile):
            d.pop("sim_wall_s", None)
            d.pop("notes", None)
        assert with_profile == base, args[0]


def _llama_prefill_gemm_s(tokens: int, engine_compute_scale: float) -> float:
    """Seconds of Llama-3.1-8B's GEMMs for one prefill chunk of ``tokens`` on one H200 at the shipped bf16 curve.

    Per layer the weights are N x K: q 4096x4096, k and v 1024x4096, o 4096x4096, gate and up 14336x4096, down
    4096x14336 -> 218,103,808 elements; 32 layers. FLOPs 2 x M x N x K at eff_max x compute_scale / (1 + m0/M)
    (n0 and k0 of the bf16 fit are ~1e-16: their terms are below 1e-19)."""
    c = _read_catalog("h200-fit.json")["gemm"]["bf16"]
    per_layer = 4096 * 4096 + 2 * 1024 * 4096 + 4096 * 4096 + 2 * 14336 * 4096 + 4096 * 14336
    assert per_layer == 218_103_808
    flops = 2.0 * tokens * 32 * per_layer
    return flops * (1.0 + c["m0"] / tokens) / (989e12 * c["eff_max"] * engine_compute_scale)


def test_half_the_gemm_efficiency_adds_the_gemm_time_once_more_to_a_compute_bound_prefill(run_json, tmp_path):
    """GEMMs of an 8192-token prefill are compute-bound (2.8e11 FLOP against 168 MB for the 4096 x 4096 weights at
    M = 8192: 0.37 ms of compute, 0.04 ms of memory), so halving eff_max doubles exactly their compute term and
    TTFT grows by the GEMM time at the default curve; attention, element-wise and overheads are unchanged."""
    from clusterfit.compose import Catalog

    doc = _doc()
    doc["fit"]["gemm"]["bf16"]["eff_max"] *= 0.5
    half = _write(tmp_path, doc)
    args = PERF + ("--isl", "8192", "--osl", "16", "--batch", "1", "--context", "8192")
    base, slow = run_json(*args), run_json(*args, "--profile", half)
    cs = Catalog.load().engine("vllm", Catalog.load().system("h200")).compute_scale
    expected = _llama_prefill_gemm_s(8192, cs)
    assert slow["ttft_s"] - base["ttft_s"] == pytest.approx(expected, rel=1e-6)
    assert 1.6 < slow["ttft_s"] / base["ttft_s"] < 2.0     # ~2x: the GEMMs are most of the prefill
    # decode at batch 1 is weight-streaming: the compute term halves but stays below the memory term
    assert slow["tpot_s"] == pytest.approx(base["tpot_s"], rel=1e-9)
    assert any("measured by clusterfit calibrate" in n for n in slow["notes"])


def test_measured_allreduce_replaces_the_nvlink_constants_for_tp_allreduces(run_json, tmp_path):
    """Llama-3.1-8B on TP2 all-reduces its activations twice per layer (attention output, MLP): 64 per decode step of
    batch 64 x 4096 hidden x 2 bytes = 524,288 bytes. On 2 ranks the one-shot kernel is the fastest of comm.py's
    three: hop + (n-1) x bytes / bw. Default link: 450 GB/s x NVLINK_EFF 0.8, 10 us per hop; measured: 300 GB/s, 20 us."""
    doc = _doc()
    doc["gpu"]["count"] = 8
    doc["timings"]["allreduce"] = [{"gpus": 8, "bytes": 8192, "s": 2.5e-5}, {"gpus": 8, "bytes": 1 << 26, "s": 4e-4}]
    doc["fit"]["allreduce"] = {"gpus": 8, "bw_bytes_per_s": 300e9, "hop_s": 20e-6, "custom_allreduce": True}
    args = ("perf", "llama-3.1-8b", "--system", "h200", "--tp", "2", "--isl", "1024", "--osl", "128", "--batch", "64",
            "--context", "2048")
    base, measured = run_json(*args), run_json(*args, "--profile", _write(tmp_path, doc))
    msg = 64 * 4096 * 2
    assert base["breakdown"]["by_op_s"]["communication"] == pytest.approx(64 * (10e-6 + msg / (450e9 * 0.8)), rel=1e-9)
    assert measured["breakdown"]["by_op_s"]["communication"] == pytest.approx(64 * (20e-6 + msg / 300e9), rel=1e-9)
    # the kernels are the shipped ones: nothing else in the step moves
    for op, t in base["breakdown"]["by_op_s"].items():
        if op not in ("communication", "engine_step_overhead"):
            assert measured["breakdown"]["by_op_s"][op] == pytest.approx(t, rel=1e-12), op


def test_profile_applies_to_its_gpu_only_in_a_plan(run_json, tmp_path):
    doc = _doc()
    doc["fit"]["gemm"]["bf16"]["eff_max"] *= 0.5
    args = ("plan", "llama-3.1-8b", "--system", "h200", "--system", "b200", "--rate", "5", "--isl", "4096",
            "--osl", "256", "--ttft-ms", "2000", "--tpot-ms", "50", "--no-disagg")
    base = {r["system"]: r for r in run_json(*args)["per_system"]}
    slow = {r["system"]: r for r in run_json(*args, "--profile", _write(tmp_path, doc))["per_system"]}
    assert slow["dgx_b200"] == base["dgx_b200"]
    assert slow["hgx_h200"]["ttft_s"] > base["hgx_h200"]["ttft_s"]


@pytest.mark.parametrize("args", [
    PERF[:3] + ("b200", "--isl", "1024", "--osl", "128", "--batch", "1"),
    ("simulate", "llama-3.1-8b", "--system", "b200", "--rate", "1", "--requests", "10", "--isl", "128", "--osl", "16"),
    ("plan", "llama-3.1-8b", "--system", "b200", "--system", "h100", "--rate", "1", "--isl", "128", "--osl", "16"),
])
def test_a_profile_for_another_gpu_is_an_error_naming_both(run_cli, args):
    line = _one_error(*run_cli(*args, "--profile", str(SHIPPED))[::2])
    assert "--profile" in line and "h200_sxm" in line and "b200" in line


def test_a_profile_over_the_python_and_http_api_is_the_document_not_a_path(tmp_path):
    import clusterfit as cf
    from clusterfit.schema import ParameterError

    doc = _doc()
    doc["fit"]["gemm"]["bf16"]["eff_max"] *= 0.5
    kw = dict(model="llama-3.1-8b", system="h200", tp=1, isl=8192, osl=16, batch=1, context=8192)
    assert cf.perf(**kw, profile=doc).ttft_s > cf.perf(**kw).ttft_s
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(doc))
    with pytest.raises(ParameterError) as exc:
        cf.perf(**kw, profile=str(secret))
    assert exc.value.parameter.startswith("profile") and "eff_max" not in str(exc.value)


def test_http_takes_an_inline_profile_and_reads_no_path(tmp_path):
    pytest.importorskip("fastapi", reason="the web extra is not installed")
    httpx = pytest.importorskip("httpx")
    from _webserver import running_server

    doc = _doc()
    doc["fit"]["gemm"]["bf16"]["eff_max"] *= 0.5
    body = {"model": "llama-3.1-8b", "system": "h200", "tp": 1, "isl": 8192, "osl": 16, "batch": 1, "context": 8192}
    with running_server() as url, httpx.Client(base_url=url, timeout=60) as client:
        base = client.post("/api/perf", json=body)
        slow = client.post("/api/perf", json={**body, "profile": doc})
        path = client.post("/api/perf", json={**body, "profile": str(SHIPPED)})
        other = client.post("/api/perf", json={**body, "system": "b200", "profile": doc})
    assert base.status_code == 200 and slow.status_code == 200, slow.text
    assert slow.json()["ttft_s"] > base.json()["ttft_s"]
    assert path.status_code == 422 and path.json()["parameter"].startswith("profile")
    assert "h200_sxm" not in path.text                      # the file was not read
    assert other.status_code == 422 and "b200" in other.json()["detail"] and "h200_sxm" in other.json()["detail"]


# ============================================================================================ validation
def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node: Any = doc
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


_DELETE = object()
#: H200 bf16 dense peak 989 TFLOP/s: the first GEMM row (M=1, N=6144, K=4096) in half the time that peak allows.
_TOO_FAST_GEMM_S = 2 * 1 * 6144 * 4096 / 989e12 / 2
BAD_FIELDS = [
    ("schema_version", 2, "schema_version"),
    ("kind", "something-else", "kind"),
    ("created", "yesterday", "created"),
    ("fit.gemm.bf16.eff_max", 1.2, "fit.gemm.bf16.eff_max"),
    ("fit.gemm.bf16.mem_eff", 0.0, "fit.gemm.bf16.mem_eff"),
    ("fit.attn_decode.mem_eff", 1.05, "fit.attn_decode.mem_eff"),
    ("fit.attn_prefill.eff_max", -0.1, "fit.attn_prefill.eff_max"),
    ("fit.moe.eff_max", 3.0, "fit.moe.eff_max"),
    ("fit.copy.mem_eff", 1.5, "fit.copy.mem_eff"),
    ("fit.gemm.fp8.t0_s", -1e-6, "fit.gemm.fp8.t0_s"),
    ("fit.attn_decode.t0_s", 0.5, "fit.attn_decode.t0_s"),
    ("fit.attn_prefill.w0", 1e9, "fit.attn_prefill.w0"),
    ("fit.gemm.bf16.m0", "many", "fit.gemm.bf16.m0"),
    ("fit.datasheet.peak_flops.bf16", 1000e12, "fit.datasheet.peak_flops.bf16"),
    ("fit.datasheet.mem_bw_bytes_per_s", 4.9e12, "fit.datasheet.mem_bw_bytes_per_s"),
    ("fit.gemm.bf16", _DELETE, "fit.gemm.bf16"),
    ("gpu.id", "h900", "gpu.id"),
    ("gpu.count", 0, "gpu.count"),
    ("measurement.device", "cpu", "measurement.device"),
    ("measurement.device", "tpu", "measurement.device"),
    ("timings.gemm.0.s", _TOO_FAST_GEMM_S, "timings.gemm[0].s"),
    ("timings.gemm.3.m", 0, "timings.gemm[3].m"),
    ("timings.gemm.5.dtype", "fp4", "timings.gemm[5].dtype"),
    ("timings.attention_prefill.2.s", 1e-6, "timings.attention_prefill[2].s"),
    ("timings.copy.s", 1e-4, "timings.copy.s"),
    ("timings.attention_decode", [], "timings.attention_decode"),
    ("timings.moe", [], "fit.moe"),
    ("surprise", 1, "surprise"),
    # the device must look like the catalog GPU it names, and the date be a past one (fuzzing pass, stop 36)
    ("created", "2999-01-01", "created"),
    ("gpu.memory_bytes", 1, "gpu.memory_bytes"),
    ("gpu.memory_bytes", 80 * 2**30, "gpu.memory_bytes"),       # an 80 GiB device called h200_sxm
    ("gpu.compute_capability", "8.0", "gpu.compute_capability"),
]


@pytest.mark.parametrize("field, value, named", BAD_FIELDS, ids=[f"{f}={v!r}"[:40] for f, v, _ in BAD_FIELDS])
def test_each_bad_field_is_one_error_naming_it(run_cli, tmp_path, field, value, named):
    doc = _doc()
    _set(doc, field, value if value is _DELETE else copy.deepcopy(value))
    line = _one_error(*run_cli(*PERF, "--isl", "128", "--osl", "16", "--batch", "1", "--profile",
                               _write(tmp_path, doc))[::2])
    assert line.startswith("error: --profile: ") and named in line, line


def _leaves(node: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every scalar in a JSON document (list indices as numbers), as ``_set`` takes them."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaves(v, f"{prefix}{k}.")]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _leaves(v, f"{prefix}{i}.")]
    return [prefix[:-1]]


_LEAVES = _leaves(_doc())
_VALUES = (st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.text(max_size=8)
           | st.floats(allow_nan=False, allow_infinity=False) | st.lists(st.integers(), max_size=2))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(_LEAVES), value=_VALUES)
def test_any_one_changed_value_loads_or_is_one_error(run_cli, tmp_path, where, value):
    """A valid profile with one value replaced by anything: a prediction, or one `error:` line; never a traceback."""
    doc = _doc()
    _set(doc, where, value)
    code, out, err = run_cli(*PERF, "--isl", "128", "--osl", "16", "--batch", "1", "--json", "--profile",
                             _write(tmp_path, doc))
    assert "Traceback" not in err and code in (0, 2), err
    if code == 2:
        _one_error(code, err)
    else:
        assert json.loads(out)["ttft_s"] > 0


def test_allreduce_faster_than_the_line_rate_is_refused(run_cli, tmp_path):
    doc = _doc()
    doc["gpu"]["count"] = 8
    doc["timings"]["allreduce"] = [{"gpus": 8, "bytes": 8192, "s": 2.5e-5}]
    doc["fit"]["allreduce"] = {"gpus": 8, "bw_bytes_per_s": 500e9, "hop_s": 1e-5, "custom_allreduce": True}
    line = _one_error(*run_cli(*PERF, "--isl", "128", "--osl", "16", "--batch", "1", "--profile",
                               _write(tmp_path, doc))[::2])
    assert "fit.allreduce.bw_bytes_per_s" in line and "450" in line


def test_true_is_not_a_gpu_count(run_cli, tmp_path):
    """gpu.count true was read as 1 (pydantic's lax mode); it names the field (inputs.RefuseBool)."""
    doc = _doc()
    doc["gpu"]["count"] = True
    line = _one_error(*run_cli(*PERF, "--isl", "128", "--osl", "16", "--batch", "1", "--profile",
                               _write(tmp_path, doc))[::2])
    assert "gpu.count: true / false only go to yes/no fields" in line


@pytest.mark.parametrize("content, said", [
    (b"[1, 2]", "JSON object"), (b"{\"schema_version\": 1,", "not valid JSON"), (b"\xff\xfe\x00", "UTF-8"),
    (b'{"x": NaN}', "NaN"),
])
def test_unreadable_profiles_are_one_error(run_cli, tmp_path, content, said):
    f = tmp_path / "p.json"
    f.write_bytes(content)
    line = _one_error(*run_cli(*PERF, "--isl", "128", "--osl", "16", "--batch", "1", "--profile", str(f))[::2])
    assert said in line and "--profile" in line


def test_missing_profile_file_is_one_error(run_cli, tmp_path):
    line = _one_error(*run_cli(*PERF, "--isl", "128", "--osl", "16", "--batch", "1", "--profile",
                               str(tmp_path / "nope.json"))[::2])
    assert "profile not found" in line


def test_a_gpu_alias_in_the_profile_is_the_catalog_gpu(run_json, tmp_path):
    doc = _doc()
    doc["gpu"]["id"] = "H200-SXM-141GB"
    out = run_json(*PERF, "--isl", "128", "--osl", "16", "--batch", "1", "--profile", _write(tmp_path, doc))
    assert out["ttft_s"] == run_json(*PERF, "--isl", "128", "--osl", "16", "--batch", "1")["ttft_s"]


# ======================================================================================== calibration code
@pytest.mark.parametrize("name, gpu", [
    ("NVIDIA H200", "h200_sxm"), ("NVIDIA H200 NVL", "h200_nvl"), ("NVIDIA H100 80GB HBM3", "h100_sxm"),
    ("NVIDIA H100 PCIe", "h100_pcie"), ("NVIDIA A100-SXM4-80GB", "a100_sxm_80gb"), ("NVIDIA B200", "b200"),
    ("NVIDIA L40S", "l40s"), ("AMD Instinct MI300X", "mi300x"),
])
def test_device_names_map_to_catalog_gpus(name, gpu):
    from clusterfit.calibrate.run import catalog_gpu
    from clusterfit.hardware import load_hardware

    assert catalog_gpu(name, load_hardware()).id == gpu


def test_an_unknown_device_name_asks_for_gpu():
    from clusterfit.calibrate.run import catalog_gpu
    from clusterfit.errors import ClusterfitError
    from clusterfit.hardware import load_hardware

    with pytest.raises(ClusterfitError, match="--gpu"):
        catalog_gpu("NVIDIA GeForce RTX 4090", load_hardware())


def _synthetic_timings() -> tuple[Any, dict[str, dict[str, float]]]:
    """Timings made by the model's own formulas from chosen parameters (the truth the fit must find again)."""
    from clusterfit.calibrate.probe import FULL
    from clusterfit.perfmodel import comm
    from clusterfit.perfmodel.kernels import GemmCurve, gemm_time_s
    from clusterfit.profile import Timings

    bw, peak = 4.8e12, {"bf16": 989e12, "fp8": 1979e12}
    truth = {"bf16": dict(t0_s=18e-6, mem_eff=0.8, eff_max=0.72, m0=40.0, n0=300.0, k0=150.0),
             "fp8": dict(t0_s=25e-6, mem_eff=0.6, eff_max=0.65, m0=70.0, n0=900.0, k0=50.0),
             "attn_decode": dict(t0_s=40e-6, mem_eff=0.9), "attn_prefill": dict(t0_s=30e-6, eff_max=0.6, w0=1500.0),
             "moe": dict(t0_s=50e-6, mem_eff=0.6, eff_max=0.7, m0=200.0),
             "allreduce": dict(bw_bytes_per_s=350e9, hop_s=12e-6)}
    gemm = []
    for dt, wb in (("bf16", 2.0), ("fp8", 1.0)):
        c = GemmCurve(**truth[dt])
        for k, n in FULL.gemm_kn:
            for m in FULL.gemm_m:
                gemm.append({"dtype": dt, "m": m, "n": n, "k": k,
                             "s": float(gemm_time_s(c, m, n, k, wb, 2.0, peak[dt], bw))})
    hq, hkv, d = FULL.heads
    ad, ap, mo = truth["attn_decode"], truth["attn_prefill"], truth["moe"]
    dec = [{"b": b, "l": length, "hq": hq, "hkv": hkv, "d": d,
            "s": ad["t0_s"] + b * length * 2 * hkv * d * 2.0 / (bw * ad["mem_eff"])} for b, length in FULL.decode]
    pre = [{"b": b, "t": t, "hq": hq, "hkv": hkv, "d": d,
            "s": ap["t0_s"] + 2.0 * b * hq * t * t * d / (peak["bf16"] * ap["eff_max"] / (1 + ap["w0"] / (b * t)))}
           for b, t in FULL.prefill]
    moe = []
    # weight-streaming rows (few tokens per expert) and compute-bound ones at 128, 512 and 2048 tokens per expert
    for hidden, inter, routed, active in ((7168, 2048, 1, 1), (7168, 2048, 33, 23), (7168, 2048, 520, 32),
                                          (7168, 2048, 4096, 32), (7168, 2048, 16384, 32), (7168, 2048, 65536, 32),
                                          (4096, 1536, 64, 16), (4096, 1536, 32768, 16)):
        flops, wbytes = 6.0 * routed * hidden * inter, active * 3.0 * hidden * inter * 2.0
        eff = mo["eff_max"] / (1 + mo["m0"] / (routed / active))
        moe.append({"hidden": hidden, "moe_inter": inter, "routed_tokens": routed, "active_experts": active,
                    "s": mo["t0_s"] + max(wbytes / (bw * mo["mem_eff"]), flops / (peak["bf16"] * eff))})
    link = comm.Link(truth["allreduce"]["bw_bytes_per_s"], truth["allreduce"]["hop_s"], True)
    ar = [{"gpus": 8, "bytes": b, "s": float(comm.all_reduce_s(b, 8, link))} for b in FULL.allreduce_bytes]
    t = Timings.model_validate({"copy": {"bytes_read_plus_written": 8 << 30, "s": (8 << 30) / (0.88 * bw)},
                                "read": {"bytes": 4 << 30, "s": (4 << 30) / (0.87 * bw)}, "gemm": gemm,
                                "attention_decode": dec, "attention_prefill": pre, "moe": moe, "allreduce": ar})
    return t, truth


def test_the_fit_finds_the_parameters_that_made_the_timings():
    pytest.importorskip("scipy")
    from clusterfit.calibrate.fit import fit_timings

    timings, truth = _synthetic_timings()
    p = fit_timings(timings, 4.8e12, {"bf16": 989e12, "fp8": 1979e12}, 450e9, custom_allreduce=True)
    for fam in ("bf16", "fp8"):
        for key, v in truth[fam].items():
            assert p["gemm"][fam][key] == pytest.approx(v, rel=2e-3), (fam, key)
    for fam in ("attn_decode", "attn_prefill", "moe"):
        for key, v in truth[fam].items():
            assert p[fam][key] == pytest.approx(v, rel=2e-3), (fam, key)
    assert p["allreduce"]["bw_bytes_per_s"] == pytest.approx(350e9, rel=2e-3)
    assert p["allreduce"]["hop_s"] == pytest.approx(12e-6, rel=2e-3)
    assert p["copy"] == pytest.approx({"mem_eff": 0.88, "read_mem_eff": 0.87})
    assert all(r["max_abs_err_pct"] < 0.5 for r in p["report"].values())


def test_refitting_the_shipped_measurements_reproduces_the_shipped_curves():
    """The one copy of the fitting code, on the profile's raw timings, predicts every measured row as the shipped fit
    does (to 0.1%: scipy releases differ in the last digits of a converged least-squares fit)."""
    pytest.importorskip("scipy")
    from clusterfit.calibrate.fit import fit_timings
    from clusterfit.perfmodel.kernels import GemmCurve, gemm_time_s
    from clusterfit.profile import parse_profile

    prof = parse_profile(_doc())
    p = fit_timings(prof.timings, 4.8e12, {"bf16": 989e12, "fp8": 1979e12})
    shipped = _read_catalog("h200-fit.json")
    for g in prof.timings.gemm:
        wb, peak = (2.0, 989e12) if g.dtype == "bf16" else (1.0, 1979e12)
        a = gemm_time_s(GemmCurve(**p["gemm"][g.dtype]), g.m, g.n, g.k, wb, 2.0, peak, 4.8e12)
        b = gemm_time_s(GemmCurve(**shipped["gemm"][g.dtype]), g.m, g.n, g.k, wb, 2.0, peak, 4.8e12)
        assert float(a) == pytest.approx(float(b), rel=1e-3)
    for fam in ("attn_decode", "attn_prefill", "moe", "copy"):
        for key, v in shipped[fam].items():
            assert p[fam][key] == pytest.approx(v, rel=1e-3), (fam, key)
    assert p["fp8_probe_quantisation"]["fixed_s"] == pytest.approx(shipped["fp8_probe_quantisation"]["fixed_s"],
                                                                   rel=1e-3)


def test_calibrate_without_torch_says_how_to_install_it(run_cli, monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_torch(name: str, *a: Any, **k: Any) -> Any:
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    line = _one_error(*run_cli("calibrate", "--out", str(tmp_path / "p.json"))[::2])
    assert "clusterfit[calibrate]" in line and not (tmp_path / "p.json").exists()


def test_calibrate_without_cuda_is_one_error(run_cli, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible")
    line = _one_error(*run_cli("calibrate", "--out", str(tmp_path / "p.json"))[::2])
    assert "no CUDA GPU" in line and "--device cpu" in line


def test_calibrate_refuses_a_bad_output_and_a_bad_device(run_cli, tmp_path):
    assert "does not exist" in _one_error(*run_cli("calibrate", "--out", str(tmp_path / "no" / "p.json"))[::2])
    assert "--device" in _one_error(*run_cli("calibrate", "--device", "tpu", "--out", str(tmp_path / "p.json"))[::2])


def test_cpu_dry_run_executes_the_calibration_code(run_cli, tmp_path):
    """With torch installed (the calibrate extra): the whole calibration on the CPU at tiny shapes, the all-reduce
    over 2 gloo processes (torch.multiprocessing spawn). The profile is valid and perf refuses it."""
    pytest.importorskip("torch")
    pytest.importorskip("scipy")
    from clusterfit.calibrate.probe import DRY_RUN
    from clusterfit.calibrate.run import cpu_workers
    from clusterfit.profile import read_profile

    if cpu_workers() < 2:
        pytest.skip("a dry run's all-reduce over 2 processes needs 2 CPUs (one process per CPU)")

    out = tmp_path / "dry.json"
    code, stdout, err = run_cli("calibrate", "--device", "cpu", "--gpus", "2", "--out", str(out), "--json")
    assert code == 0, err
    prof = read_profile(out)
    assert json.loads(stdout)["gpu"] == prof.gpu.model_dump(mode="json")
    t = prof.timings
    assert len(t.gemm) == len(DRY_RUN.gemm_kn) * len(DRY_RUN.gemm_m) and {g.dtype for g in t.gemm} == {"bf16"}
    assert len(t.attention_decode) == len(DRY_RUN.decode) and len(t.attention_prefill) == len(DRY_RUN.prefill)
    assert [a.bytes for a in t.allreduce] == list(DRY_RUN.allreduce_bytes) and {a.gpus for a in t.allreduce} == {2}
    assert prof.measurement.device == "cpu" and prof.fit.allreduce is not None and prof.fit.gemm.fp8 is None
    line = _one_error(*run_cli(*PERF, "--isl", "128", "--osl", "16", "--batch", "1", "--profile", str(out))[::2])
    assert "measurement.device" in line


def test_step_model_curves_default_is_the_shipped_fit():
    from clusterfit.compose import Catalog, build_replica

    rep = build_replica(Catalog.load(), "llama-3.1-8b", "h200", tp=1)
    assert rep.step.curves == load_curves()
    assert np.isfinite(rep.step.decode_step_s(8, 1024))
