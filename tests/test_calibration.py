"""Calibration inputs and outputs: the fp8 probe's unfused quantisation is fitted apart from the GEMM curve the
engines use, GPU families map to the right constants, and the shipped engine constants stay physical."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from clusterfit.engines import gpu_family, load_engines
from clusterfit.hardware import load_hardware
from clusterfit.perfmodel.kernels import _read_catalog, gemm_time_s, load_curves


def _fit_kernels():
    """benchmarks/fit_kernels.py (the development-time kernel fit), loaded from its path."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fit_kernels.py"
    spec = importlib.util.spec_from_file_location("fit_kernels", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_fk = _fit_kernels()
H200_BW_BYTES_PER_S, H200_PEAK_FLOPS = _fk.H200_BW_BYTES_PER_S, _fk.H200_PEAK_FLOPS
PROBE_QUANT_BYTES_PER_ELEM, _gemm_rows = _fk.PROBE_QUANT_BYTES_PER_ELEM, _fk._gemm_rows
measured_h200, probe_quant_s = _fk.measured_h200, _fk.probe_quant_s


def test_probe_quant_bytes_counted_by_hand():
    # per-tensor: abs r2+w2, amax r2, x/scale r2+w2, to(fp8) r2+w1; rowwise: abs 4, amax 2, x/s r2+w4, to(fp8) r4+w1
    assert PROBE_QUANT_BYTES_PER_ELEM == {"pertensor": 2 + 2 + 2 + 2 + 2 + 2 + 1, "rowwise": 4 + 2 + 6 + 5}
    # 4096 x 8192 bf16 activations, per tensor: 13 B/elem at the copy efficiency, plus the fixed cost
    t = probe_quant_s(4096, 8192, 13.0, 50e-6, 4.8e12, 0.88)
    assert t == pytest.approx(50e-6 + 13 * 4096 * 8192 / (4.8e12 * 0.88))


def test_fp8_curve_plus_probe_quantisation_reproduces_the_measured_fp8_gemms():
    """The engines' fp8 GEMM (the curve alone) is what the step model uses; with the probe's quantisation added
    back it must reproduce the measured torch._scaled_mm timings."""
    c = load_curves().gemm["fp8"]
    q = _read_catalog("h200-fit.json")["fp8_probe_quantisation"]
    rows = [r for r in _gemm_rows(*measured_h200()) if r[0] == "fp8"]
    m, n, k, t, qb = (np.array(x, dtype=float) for x in zip(*[r[1:] for r in rows]))
    curve = gemm_time_s(c, m, n, k, 1.0, 2.0, H200_PEAK_FLOPS["fp8"], H200_BW_BYTES_PER_S)
    full = curve + probe_quant_s(m, k, qb, q["fixed_s"], H200_BW_BYTES_PER_S, q["copy_eff"])
    err = np.abs(full / t - 1)
    assert np.median(err) < 0.10
    assert len(rows) == 157 and np.all(qb > 0)            # every fp8 row of the probe quantised x itself
    assert np.median(curve / t) < 0.85                    # the fused-quantisation GEMM is visibly faster


@pytest.mark.parametrize("gpu, family", [
    ("GB200", "grace_blackwell"), ("gb300_nvl72_gpu", "grace_blackwell"), ("B200-SXM-180GB", "blackwell"),
    ("b300", "blackwell"), ("A100-PCIE-80GB", "a100_pcie"), ("a100_sxm_80gb", "a100"), ("L40S", "l40s"),
    ("RTX-PRO-6000-Blackwell-Server", "rtx_pro"), ("h100_sxm", None), ("GH200-96GB", None), ("H200-SXM-141GB", None),
])
def test_gpu_families(gpu, family):
    assert gpu_family(gpu) == family


def test_calibrated_constants_are_physical():
    """No fitted family lets a modelled kernel stream faster than the datasheet bandwidth or compute faster than
    the datasheet peak; host and kernel overheads are non-negative and below 100 us."""
    c = load_curves()
    fastest_stream = max(c.attn_decode_mem_eff, c.copy_mem_eff, c.moe_mem_eff, c.gemm["bf16"].mem_eff)
    best_gemm = max(g.eff_max for g in c.gemm.values())
    hw = load_hardware()
    for engine in load_engines().values():
        for gpu_id in hw.gpus:
            e = engine.for_gpu(gpu_id)
            assert fastest_stream * e.memory_scale <= 1.0 + 1e-9, (engine.name, gpu_id)
            assert best_gemm * e.compute_scale <= 1.0, (engine.name, gpu_id)
            assert 0.0 <= e.kernel_overhead_s < 1e-4 and 0.0 <= e.seq_overhead_s < 1e-4
            assert 0.0 < e.step_overhead_s < 0.02


# ------------------------------------------------------------------------------ calibrate's usage errors (fuzzing)
def _one_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def no_torch(monkeypatch):
    """Importing torch fails (the calibrate extra absent): what is refused without it is refused before it."""
    import builtins

    real_import = builtins.__import__

    def refuse(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", refuse)


def test_a_cpu_dry_run_refuses_more_processes_than_cpus_at_once(run_cli, tmp_path, no_torch):
    """Found by a fuzzing pass: `calibrate --device cpu --gpus 1000` started 1,000 gloo processes (the run's time
    grew with --gpus). A CPU dry run's all-reduce runs one process per CPU: more than the CPUs visible is one
    --gpus error naming how many are, raised before torch is imported (so the same without the extra)."""
    from clusterfit.calibrate.run import cpu_workers

    cpus = cpu_workers()
    out = tmp_path / "p.json"
    for gpus in (cpus + 1, 1000 + cpus):
        line = _one_error(*run_cli("calibrate", "--device", "cpu", "--quick", "--gpus", str(gpus), "--out",
                                   str(out))[::2])
        assert line.startswith("error: --gpus:") and f"{cpus} {'is' if cpus == 1 else 'are'} visible" in line, line
    assert not out.exists()
    # as many as there are CPUs passes this check: the next thing asked for is torch itself
    line = _one_error(*run_cli("calibrate", "--device", "cpu", "--gpus", str(cpus), "--out", str(out))[::2])
    assert "clusterfit[calibrate]" in line


def test_the_api_refuses_the_same_dry_run(tmp_path):
    from clusterfit import api
    from clusterfit.calibrate.run import cpu_workers
    from clusterfit.errors import ParameterError

    with pytest.raises(ParameterError) as e:
        api.calibrate(device="cpu", gpus=cpu_workers() + 1, out=tmp_path / "never.json")
    assert e.value.parameter == "gpus" and not (tmp_path / "never.json").exists()


def test_cuda_gpus_are_counted_by_torch_so_without_it_the_install_hint_comes_first(run_cli, tmp_path, no_torch):
    line = _one_error(*run_cli("calibrate", "--gpus", "1000", "--out", str(tmp_path / "p.json"))[::2])
    assert "clusterfit[calibrate]" in line


@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_out_says_it_is_empty(run_cli, out):
    """Found by a fuzzing pass: --out '' was read as the current folder ("output . is a directory")."""
    line = _one_error(*run_cli("calibrate", "--device", "cpu", "--out", out)[::2])
    assert line.startswith("error: --out:") and "empty" in line and "directory" not in line
