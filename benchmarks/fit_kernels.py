"""Development-time fit of the kernel efficiency curves (clusterfit.perfmodel.kernels) on the H200 measurements.

    python benchmarks/fit_kernels.py        -> writes src/clusterfit/catalog/kernels/h200-fit.json and prints it

Inputs: ``catalog/kernels/h200-kernels.json`` (GEMMs, decode / prefill attention, copy bandwidth, measured with
shared/tools/gpu_probe*.py on one H200) and ``catalog/kernels/h200-memory-fp8-moe.json`` (per-token rowwise fp8
GEMMs, fused-MoE grouped GEMMs, read bandwidth). The fitting code is ``clusterfit.calibrate.fit`` (the same code
``clusterfit calibrate`` runs on a user's GPU): ``fit_h200`` turns the probe files into profile timings and fits
them against the H200 datasheet figures. scipy is a development dependency (and the ``calibrate`` extra's); the
package itself only reads the stored result (clusterfit.perfmodel.kernels.load_curves).

The probe's fp8 rows time torch._scaled_mm *with* its unfused dynamic quantisation of x; that cost is fitted as its
own term (``probe_quant_s``) and left out of the fp8 curve, because serving engines fuse the quantisation away
(see clusterfit/perfmodel/kernels.py).
"""

from __future__ import annotations

import json
from typing import Any

from clusterfit.calibrate.fit import (PROBE_QUANT_BYTES_PER_ELEM, fit_timings, probe_quant_s,  # noqa: F401 (re-exported)
                                      timings_from_probe_files)
from clusterfit.perfmodel.kernels import CATALOG_DIR, _read_catalog

#: The H200 the curves were measured on (datasheet figures of the same catalog, bytes/s and FLOP/s).
H200_BW_BYTES_PER_S = 4.8e12
H200_PEAK_FLOPS = {"bf16": 989e12, "fp8": 1979e12}


def _gemm_rows(kernels: dict, extra: dict) -> list[tuple[str, int, int, int, float, float]]:
    """(family, M, N, K, seconds, probe quantisation bytes per x element) of every measured GEMM."""
    return [(g.dtype, g.m, g.n, g.k, g.s, g.quant_bytes_per_elem)
            for g in timings_from_probe_files(kernels, extra).gemm]


def fit_h200(kernels: dict, extra: dict) -> dict[str, Any]:
    """Least-squares fit of every curve on the H200 measurements. Returns plain parameters (JSON-able)."""
    out = fit_timings(timings_from_probe_files(kernels, extra), H200_BW_BYTES_PER_S, H200_PEAK_FLOPS)
    out["_what"] = ("Least-squares fit (log time) of clusterfit.perfmodel.kernels curves on catalog/kernels/"
                    "h200-kernels.json and h200-memory-fp8-moe.json; produced by `python benchmarks/fit_kernels.py`. "
                    "report: median / max absolute error of the fitted curve per family, percent.")
    return out


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
