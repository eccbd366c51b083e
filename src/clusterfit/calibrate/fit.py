"""Fit the performance model's kernel curves (clusterfit.perfmodel.kernels) on measured timings.

One copy of the fitting code, used by ``clusterfit calibrate`` (the user's GPU) and by
``benchmarks/fit_kernels.py`` (the shipped H200 measurements -> catalog/kernels/h200-fit.json).

``fit_timings`` minimises the squared log error of each curve against every measured row of its family
(scipy.optimize.least_squares, trust-region reflective within the bounds below, which are the ranges
clusterfit.profile accepts): GEMMs per dtype, decode attention, causal prefill attention, MoE grouped GEMMs,
the copy / read streams, and the all-reduce link (``comm.all_reduce_s`` with a fitted bandwidth and per-hop
latency). Efficiencies are fractions of the datasheet figures passed in (the catalog GPU's), so they carry the
same meaning as the shipped H200 fit.

The H200 probe's fp8 rows time torch._scaled_mm *with* its unfused dynamic quantisation of x; rows that say so
(``quant_bytes_per_elem`` > 0) get that cost fitted as its own term (``probe_quant_s``) and left out of the fp8 curve,
because serving engines fuse the quantisation away (see clusterfit/perfmodel/kernels.py). ``clusterfit calibrate``
quantises x outside the timed region, so its rows carry no such term.

Needs scipy (the ``calibrate`` extra; a test dependency) and numpy; no torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..perfmodel import comm
from ..perfmodel.kernels import GemmCurve, gemm_time_s
from ..profile import GEMM_SIZE_MAX, MOE_M0_MAX, PREFILL_W0_MAX, T0_MAX_S, Timings

#: Bytes of activation traffic per x element of the H200 probe's unfused fp8 quantisation (shared/tools/gpu_probe*.py,
#: copied here), counted from its torch ops on x [M,K] bf16. Per-tensor (``quant_fp8``): abs (read 2, write 2), amax
#: (read 2), x / scale (read 2, write 2; a 0-dim fp32 scale keeps bf16), .to(fp8) (read 2, write 1) = 13. Per-token
#: rowwise (``gemm_rowwise``): abs (2 + 2), amax(dim=1) (2), x / s with s [M,1] fp32 (read 2, write 4: promotes to
#: fp32), .to(fp8) (read 4, write 1) = 17. The scalar / [M,1] ops are launch-bound and go into the fitted fixed cost.
PROBE_QUANT_BYTES_PER_ELEM = {"pertensor": 13.0, "rowwise": 17.0}

_US = 1e-6                     # seconds per microsecond: launch costs are fitted in us (well-scaled parameters)
_T0_MAX_US = T0_MAX_S / _US


def probe_quant_s(m: npt.ArrayLike, k: npt.ArrayLike, bytes_per_elem: npt.ArrayLike, fixed_s: float,
                  bw_bytes_per_s: float, copy_eff: float) -> Any:
    """Seconds the probe spends quantising x [M,K] to fp8 before torch._scaled_mm (unfused torch ops): a fixed
    launch-bound cost plus the activation traffic at the measured copy efficiency. Serving engines fuse this
    quantisation into the preceding norm / activation kernel, so the step model never adds it."""
    return fixed_s + np.asarray(bytes_per_elem) * np.asarray(m, float) * k / (bw_bytes_per_s * copy_eff)


def err_stats(log_resid: npt.ArrayLike) -> dict[str, Any]:
    """Median / max absolute error (percent) of fitted against measured times, from log residuals."""
    e = np.abs(np.expm1(np.asarray(log_resid))) * 100
    return {"rows": int(e.size), "median_abs_err_pct": round(float(np.median(e)), 2),
            "max_abs_err_pct": round(float(np.max(e)), 2)}


def timings_from_probe_files(kernels: dict[str, Any], extra: dict[str, Any]) -> Timings:
    """The shipped H200 probe files (catalog/kernels/h200-kernels.json, h200-memory-fp8-moe.json) as profile timings:
    every GEMM row (M padded as timed; fp8 rows with the probe's quantisation bytes), the native-GQA decode rows, the
    causal prefill rows, the MoE rows, copy and read bandwidth. Row order is the files' (the fit depends on it only
    through floating-point summation)."""
    k = kernels["kernels"]
    gemm = []
    for g in k["gemm"]:
        fam = "bf16" if g["dtype"] == "bf16" else "fp8"
        qb = PROBE_QUANT_BYTES_PER_ELEM["pertensor"] if g.get("includes_activation_quant") else 0.0
        gemm.append({"dtype": fam, "m": g.get("M_padded", g["M"]), "n": g["N"], "k": g["K"], "s": g["s"],
                     "quant_bytes_per_elem": qb})
    for g in extra.get("gemm_rowwise_fp8", []):
        gemm.append({"dtype": "fp8", "m": max(16, g["M"]), "n": g["N"], "k": g["K"], "s": g["s"],
                     "quant_bytes_per_elem": PROBE_QUANT_BYTES_PER_ELEM["rowwise"]})
    att = k["attention"]
    dec = [{"b": a["B"], "l": a["L"], "hq": a["hq"], "hkv": a["hkv"], "d": a["d"], "s": a["s"]} for a in att
           if a["kind"] == "decode" and a["how"] == "enable_gqa"]
    pre = [{"b": a["B"], "t": a["T"], "hq": a["hq"], "hkv": a["hkv"], "d": a["d"], "s": a["s"]} for a in att
           if a["kind"] == "prefill_causal"]
    moe = [{"hidden": e["hidden"], "moe_inter": e["moe_inter"], "routed_tokens": e["routed_tokens_local"],
            "active_experts": e["active_local_experts"], "s": e["s"], "method": e["method"]}
           for e in extra.get("moe", [])]
    read = extra.get("read_bandwidth") or None
    return Timings.model_validate({
        "copy": {"bytes_read_plus_written": k["copy"]["bytes_read_plus_written"], "s": k["copy"]["s"]},
        "read": {"bytes": read["bytes"], "s": read["s"]} if read else None,
        "gemm": gemm, "attention_decode": dec, "attention_prefill": pre, "moe": moe})


def _least_squares(resid: Any, x0: list[float], lo: list[float], hi: list[float]) -> Any:
    from scipy.optimize import least_squares

    return least_squares(resid, x0=x0, bounds=(lo, hi))


def _fit_gemm(t: Timings, fam: str, bw: float, peak: float, copy_eff: float, out: dict[str, Any]) -> None:
    """One GEMM dtype: (t0 us, mem_eff, eff_max, m0, n0, k0) [+ the probe's quantisation fixed cost, us]."""
    r = np.array([(g.m, g.n, g.k, g.s, g.quant_bytes_per_elem) for g in t.gemm if g.dtype == fam], dtype=float)
    m, n, k, s, qb = r.T
    wb = 2.0 if fam == "bf16" else 1.0
    quant = bool(np.any(qb > 0))

    def resid(p: npt.NDArray[np.float64]) -> Any:
        c = GemmCurve(p[0] * _US, p[1], p[2], p[3], p[4], p[5])
        pred = gemm_time_s(c, m, n, k, wb, 2.0, peak, bw)
        if quant:   # the probe's separate quantisation kernels (fixed cost p[6] us + traffic)
            pred = pred + np.where(qb > 0, probe_quant_s(m, k, qb, p[6] * _US, bw, copy_eff), 0.0)
        return np.log(pred / s)

    x0 = [15.0, 0.8, 0.8, 100.0, 500.0, 500.0] + ([20.0] if quant else [])
    lo = [0, 0.2, 0.1, 0, 0, 0] + ([0] if quant else [])
    hi = [200, 1.0, 1.0, GEMM_SIZE_MAX, GEMM_SIZE_MAX, GEMM_SIZE_MAX] + ([500] if quant else [])
    sol = _least_squares(resid, x0, lo, hi)
    p = sol.x
    out["gemm"][fam] = dict(t0_s=p[0] * _US, mem_eff=p[1], eff_max=p[2], m0=p[3], n0=p[4], k0=p[5])
    out["report"][f"gemm_{fam}"] = err_stats(sol.fun)
    if quant:
        out["fp8_probe_quantisation"] = dict(
            fixed_s=p[6] * _US, bytes_per_elem=dict(PROBE_QUANT_BYTES_PER_ELEM), copy_eff=copy_eff,
            what="fitted alongside the fp8 curve and NOT part of it: the probe's unfused activation "
                 "quantisation (calibrate.fit.probe_quant_s), which engines fuse away")


def _fit_allreduce(t: Timings, line_bw: float, custom: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """comm.all_reduce_s's link (bandwidth per GPU per direction, per-hop latency) on the measured all-reduces, with the
    algorithms the model allows on this link (``custom``: one-shot / two-shot beside the ring)."""
    r = np.array([(a.gpus, a.bytes, a.s) for a in t.allreduce], dtype=float)
    n, b, s = r.T
    gb = 1e9

    def resid(p: npt.NDArray[np.float64]) -> Any:
        link = comm.Link(p[0] * gb, p[1] * _US, custom)
        pred = np.concatenate([comm.all_reduce_s(b[n == g], int(g), link) for g in np.unique(n)])
        return np.log(pred / np.concatenate([s[n == g] for g in np.unique(n)]))

    top = line_bw / gb
    sol = _least_squares(resid, [0.5 * top, 10.0], [1e-3 * top, 0.0], [top, _T0_MAX_US])
    fit = dict(gpus=int(n.max()), bw_bytes_per_s=float(sol.x[0] * gb), hop_s=float(sol.x[1] * _US),
               custom_allreduce=custom)
    return fit, err_stats(sol.fun)


def fit_timings(t: Timings, bw_bytes_per_s: float, peak_flops: dict[str, float],
                scale_up_bw_bytes_per_s: float | None = None, custom_allreduce: bool = True) -> dict[str, Any]:
    """Least-squares fit of every curve the timings cover. Returns plain parameters (JSON-able) with the keys of
    catalog/kernels/h200-fit.json (plus ``allreduce`` when all-reduces were measured; ``moe`` and ``gemm.fp8`` only
    when measured).

    bw_bytes_per_s, peak_flops ({"bf16": ..., "fp8": ...}), scale_up_bw_bytes_per_s: the datasheet figures (the catalog
    GPU's) the efficiencies are fractions of. custom_allreduce: whether the model runs one-shot / two-shot
    all-reduces on this GPU's scale-up link (comm.links_for); the link is fitted with the same algorithms.
    """
    bw = bw_bytes_per_s
    out: dict[str, Any] = {"gemm": {}, "report": {}}
    copy_eff = t.copy_.bytes_read_plus_written / t.copy_.s / bw
    for fam in ("bf16", "fp8"):
        if any(g.dtype == fam for g in t.gemm):
            _fit_gemm(t, fam, bw, peak_flops[fam], copy_eff, out)

    dec = np.array([(a.b * a.l * 2 * a.hkv * a.d * 2.0, a.s) for a in t.attention_decode])

    def resid_dec(p: npt.NDArray[np.float64]) -> Any:
        return np.log((p[0] * _US + dec[:, 0] / (bw * p[1])) / dec[:, 1])

    sol = _least_squares(resid_dec, [20.0, 0.9], [0, 0.2], [500, 1.0])
    out["attn_decode"] = dict(t0_s=sol.x[0] * _US, mem_eff=sol.x[1])
    out["report"]["attn_decode"] = err_stats(sol.fun)

    pre = np.array([(a.b * a.t, 2.0 * a.b * a.hq * a.t ** 2 * a.d, a.s) for a in t.attention_prefill])

    def resid_pre(p: npt.NDArray[np.float64]) -> Any:
        eff = p[1] / (1.0 + p[2] / pre[:, 0])
        return np.log((p[0] * _US + pre[:, 1] / (peak_flops["bf16"] * eff)) / pre[:, 2])

    sol = _least_squares(resid_pre, [20.0, 0.7, 1000.0], [0, 0.1, 0], [500, 1.0, PREFILL_W0_MAX])
    out["attn_prefill"] = dict(t0_s=sol.x[0] * _US, eff_max=sol.x[1], w0=sol.x[2])
    out["report"]["attn_prefill"] = err_stats(sol.fun)

    if t.moe:
        moe = np.array([(e.active_experts * 3.0 * e.hidden * e.moe_inter * 2.0,
                         2.0 * e.routed_tokens * 3.0 * e.hidden * e.moe_inter,
                         e.routed_tokens / max(e.active_experts, 1), e.s) for e in t.moe])

        def resid_moe(p: npt.NDArray[np.float64]) -> Any:
            eff = p[2] / (1.0 + p[3] / moe[:, 2])
            tt = p[0] * _US + np.maximum(moe[:, 0] / (bw * p[1]), moe[:, 1] / (peak_flops["bf16"] * eff))
            return np.log(tt / moe[:, 3])

        sol = _least_squares(resid_moe, [30.0, 0.6, 0.6, 100.0], [0, 0.1, 0.05, 0], [500, 1.0, 1.0, MOE_M0_MAX])
        out["moe"] = dict(t0_s=sol.x[0] * _US, mem_eff=sol.x[1], eff_max=sol.x[2], m0=sol.x[3])
        out["report"]["moe"] = err_stats(sol.fun)

    out["copy"] = dict(mem_eff=copy_eff, read_mem_eff=t.read.bytes / t.read.s / bw if t.read is not None else 0.0)
    if t.allreduce:
        if scale_up_bw_bytes_per_s is None:
            raise ValueError("fit_timings: all-reduce rows need the scale-up line rate (scale_up_bw_bytes_per_s)")
        out["allreduce"], out["report"]["allreduce"] = _fit_allreduce(t, scale_up_bw_bytes_per_s, custom_allreduce)
    return out
