"""Development-time fit of the kernel efficiency curves (clusterfit.perfmodel.kernels) on the H200 measurements.

    python benchmarks/fit_kernels.py        -> writes src/clusterfit/catalog/kernels/h200-fit.json and prints it

Inputs: ``catalog/kernels/h200-kernels.json`` (GEMMs, decode / prefill attention, copy bandwidth, measured with
shared/tools/gpu_probe*.py on one H200) and ``catalog/kernels/h200-memory-fp8-moe.json`` (per-token rowwise fp8
GEMMs, fused-MoE grouped GEMMs, read bandwidth). ``fit_h200(kernels, extra)`` minimises the squared log error of
the model against every measured row (scipy.optimize.least_squares, a development dependency); the package only
reads the stored result (clusterfit.perfmodel.kernels.load_curves), so scipy is never needed at run time.

The probe's fp8 rows time torch._scaled_mm *with* its unfused dynamic quantisation of x; that cost is fitted as its
own term (``probe_quant_s``) and left out of the fp8 curve, because serving engines fuse the quantisation away
(see clusterfit/perfmodel/kernels.py).
"""

from __future__ import annotations

import json

import numpy as np

from clusterfit.perfmodel.kernels import CATALOG_DIR, GemmCurve, _read_catalog, gemm_time_s

#: The H200 the curves were measured on (datasheet figures of the same catalog, bytes/s and FLOP/s).
H200_BW_BYTES_PER_S = 4.8e12
H200_PEAK_FLOPS = {"bf16": 989e12, "fp8": 1979e12}

#: Bytes of activation traffic per x element of the probe's unfused fp8 quantisation (shared/tools/gpu_probe*.py),
#: counted from its torch ops on x [M,K] bf16. Per-tensor (``quant_fp8``): abs (read 2, write 2), amax (read 2),
#: x / scale (read 2, write 2; a 0-dim fp32 scale keeps bf16), .to(fp8) (read 2, write 1) = 13. Per-token rowwise
#: (``gemm_rowwise``): abs (2 + 2), amax(dim=1) (2), x / s with s [M,1] fp32 (read 2, write 4: promotes to fp32),
#: .to(fp8) (read 4, write 1) = 17. The scalar / [M,1] ops are launch-bound and go into the fitted fixed cost.
PROBE_QUANT_BYTES_PER_ELEM = {"pertensor": 13.0, "rowwise": 17.0}


def _gemm_rows(kernels: dict, extra: dict):
    """(family, M, N, K, seconds, probe quantisation bytes per x element) of every measured GEMM."""
    rows = []
    for g in kernels["kernels"]["gemm"]:
        fam = "bf16" if g["dtype"] == "bf16" else "fp8"
        qb = PROBE_QUANT_BYTES_PER_ELEM["pertensor"] if g.get("includes_activation_quant") else 0.0
        rows.append((fam, g.get("M_padded", g["M"]), g["N"], g["K"], g["s"], qb))
    for g in extra.get("gemm_rowwise_fp8", []):
        rows.append(("fp8", max(16, g["M"]), g["N"], g["K"], g["s"], PROBE_QUANT_BYTES_PER_ELEM["rowwise"]))
    return rows


def probe_quant_s(m, k, bytes_per_elem, fixed_s, bw_bytes_per_s, copy_eff):
    """Seconds the probe spends quantising x [M,K] to fp8 before torch._scaled_mm (unfused torch ops): a fixed
    launch-bound cost plus the activation traffic at the measured copy efficiency. Serving engines fuse this
    quantisation into the preceding norm / activation kernel, so the step model never adds it."""
    return fixed_s + bytes_per_elem * np.asarray(m, float) * k / (bw_bytes_per_s * copy_eff)


def fit_h200(kernels: dict, extra: dict) -> dict:
    """Least-squares fit of every curve on the H200 measurements. Returns plain parameters (JSON-able).

    Needs scipy (a development dependency); the package itself only reads the stored result.
    """
    from scipy.optimize import least_squares

    bw = H200_BW_BYTES_PER_S
    out: dict = {"gemm": {}, "report": {}}
    rows = _gemm_rows(kernels, extra)
    copy_eff = kernels["kernels"]["copy"]["bytes_per_s"] / bw
    for fam in ("bf16", "fp8"):
        r = np.array([x[1:] for x in rows if x[0] == fam], dtype=float)
        m, n, k, t, qb = r.T
        wb = 2.0 if fam == "bf16" else 1.0
        peak = H200_PEAK_FLOPS[fam]
        quant = bool(np.any(qb > 0))

        def resid(p, m=m, n=n, k=k, t=t, wb=wb, peak=peak, qb=qb, quant=quant):
            c = GemmCurve(p[0] * 1e-6, p[1], p[2], p[3], p[4], p[5])
            pred = gemm_time_s(c, m, n, k, wb, 2.0, peak, bw)
            if quant:   # the probe's separate quantisation kernels (fixed cost p[6] us + traffic)
                pred = pred + np.where(qb > 0, probe_quant_s(m, k, qb, p[6] * 1e-6, bw, copy_eff), 0.0)
            return np.log(pred / t)

        x0 = [15.0, 0.8, 0.8, 100.0, 500.0, 500.0] + ([20.0] if quant else [])
        lo = [0, 0.2, 0.1, 0, 0, 0] + ([0] if quant else [])
        hi = [200, 1.0, 1.0, 5e4, 5e4, 5e4] + ([500] if quant else [])
        sol = least_squares(resid, x0=x0, bounds=(lo, hi))
        p = sol.x
        out["gemm"][fam] = dict(t0_s=p[0] * 1e-6, mem_eff=p[1], eff_max=p[2], m0=p[3], n0=p[4], k0=p[5])
        out["report"][f"gemm_{fam}"] = _err_stats(sol.fun)
        if quant:
            out["fp8_probe_quantisation"] = dict(
                fixed_s=p[6] * 1e-6, bytes_per_elem=dict(PROBE_QUANT_BYTES_PER_ELEM), copy_eff=copy_eff,
                what="fitted alongside the fp8 curve and NOT part of it: the probe's unfused activation "
                     "quantisation (kernels.probe_quant_s), which engines fuse away")

    att = kernels["kernels"]["attention"]
    dec = np.array([(a["B"] * a["L"] * 2 * a["hkv"] * a["d"] * 2.0, a["s"]) for a in att
                    if a["kind"] == "decode" and a["how"] == "enable_gqa"])

    def resid_dec(p):
        return np.log((p[0] * 1e-6 + dec[:, 0] / (bw * p[1])) / dec[:, 1])

    sol = least_squares(resid_dec, x0=[20.0, 0.9], bounds=([0, 0.2], [500, 1.2]))
    out["attn_decode"] = dict(t0_s=sol.x[0] * 1e-6, mem_eff=sol.x[1])
    out["report"]["attn_decode"] = _err_stats(sol.fun)

    pre = np.array([(a["B"] * a["T"], 2.0 * a["B"] * a["hq"] * a["T"] ** 2 * a["d"], a["s"]) for a in att
                    if a["kind"] == "prefill_causal"])

    def resid_pre(p):
        eff = p[1] / (1.0 + p[2] / pre[:, 0])
        return np.log((p[0] * 1e-6 + pre[:, 1] / (H200_PEAK_FLOPS["bf16"] * eff)) / pre[:, 2])

    sol = least_squares(resid_pre, x0=[20.0, 0.7, 1000.0], bounds=([0, 0.1, 0], [500, 1.0, 1e6]))
    out["attn_prefill"] = dict(t0_s=sol.x[0] * 1e-6, eff_max=sol.x[1], w0=sol.x[2])
    out["report"]["attn_prefill"] = _err_stats(sol.fun)

    moe = []
    for e in extra.get("moe", []):
        n_act = e["active_local_experts"]
        w_bytes = n_act * 3.0 * e["hidden"] * e["moe_inter"] * 2.0
        flops = 2.0 * e["routed_tokens_local"] * 3.0 * e["hidden"] * e["moe_inter"]
        moe.append((w_bytes, flops, e["routed_tokens_local"] / max(n_act, 1), e["s"]))
    moe = np.array(moe)

    def resid_moe(p):
        eff = p[2] / (1.0 + p[3] / moe[:, 2])
        t = p[0] * 1e-6 + np.maximum(moe[:, 0] / (bw * p[1]), moe[:, 1] / (H200_PEAK_FLOPS["bf16"] * eff))
        return np.log(t / moe[:, 3])

    sol = least_squares(resid_moe, x0=[30.0, 0.6, 0.6, 100.0], bounds=([0, 0.1, 0.05, 0], [500, 1.0, 1.0, 1e5]))
    out["moe"] = dict(t0_s=sol.x[0] * 1e-6, mem_eff=sol.x[1], eff_max=sol.x[2], m0=sol.x[3])
    out["report"]["moe"] = _err_stats(sol.fun)

    out["copy"] = dict(mem_eff=kernels["kernels"]["copy"]["bytes_per_s"] / bw,
                       read_mem_eff=extra.get("read_bandwidth", {}).get("bytes_per_s", 0.0) / bw)
    out["_what"] = ("Least-squares fit (log time) of clusterfit.perfmodel.kernels curves on catalog/kernels/"
                    "h200-kernels.json and h200-memory-fp8-moe.json; produced by `python benchmarks/fit_kernels.py`. "
                    "report: median / max absolute error of the fitted curve per family, percent.")
    return out


def _err_stats(log_resid) -> dict:
    e = np.abs(np.expm1(np.asarray(log_resid))) * 100
    return {"rows": int(e.size), "median_abs_err_pct": round(float(np.median(e)), 2),
            "max_abs_err_pct": round(float(np.max(e)), 2)}




def measured_h200() -> tuple[dict, dict]:
    """The raw H200 measurements shipped with the package."""
    return _read_catalog("h200-kernels.json"), _read_catalog("h200-memory-fp8-moe.json")


def main() -> None:  # pragma: no cover - a script
    params = fit_h200(*measured_h200())
    path = CATALOG_DIR / "kernels" / "h200-fit.json"
    path.write_text(json.dumps(params, indent=1) + "\n")
    print(json.dumps(params, indent=1))


if __name__ == "__main__":  # pragma: no cover
    main()
