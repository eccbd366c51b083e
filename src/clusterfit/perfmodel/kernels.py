"""Kernel efficiency curves, fitted on kernels measured on one H200 and carried to other GPUs.

Every kernel time is a roofline with shape-dependent efficiencies plus a fixed start-up cost:

    t_s = t0_s + max(bytes / (bw_bytes_per_s * mem_eff), flops / (peak_flops * compute_eff(shape)))

- ``mem_eff``: fraction of the datasheet bandwidth a streaming kernel reaches (one number per kernel family).
- ``compute_eff``: a saturating function of the problem size. For GEMMs (y[M,N] = x[M,K] @ W[N,K]^T)
  ``eff_max / (1 + m0/M + n0/N + k0/K)``: small M, N or K leave tensor cores idle (tile fill, waves, the
  K-loop prologue). For causal prefill attention ``eff_max / (1 + w0/(B*T))``; for MoE grouped GEMMs
  ``eff_max / (1 + m0/m)`` with m the tokens routed to one active expert.
- ``t0_s``: what a single isolated launch cost in the probe. Inside an engine step (CUDA graphs) this is NOT paid
  per kernel; the step model uses the engine's per-kernel overhead instead. The fit JSON keeps every family's t0_s
  and error report; the curves carry the GEMM and decode-attention t0_s (the tests subtract them from measured
  kernels).
- The probe's fp8 rows time torch._scaled_mm *with* its unfused dynamic quantisation of x (separate abs / amax /
  scale / cast kernels, ``PROBE_QUANT_BYTES_PER_ELEM``). That cost is fitted as its own term
  (``probe_quant_s``: a fixed launch-bound part plus the activation traffic) and left out of the fp8 curve,
  because serving engines fuse the quantisation into the preceding norm or activation kernel. Fitting it into
  the curve instead inflated the fp8 size penalty (n0 3,817 against 995) and made the engine calibration
  compensate with a compute scale above 1, which then over-sped every 16-bit GEMM.

Fit: ``clusterfit.calibrate.fit.fit_timings`` minimises the squared log error of the model against every measured
row (scipy.optimize.least_squares). ``benchmarks/fit_kernels.py`` runs it on the shipped H200 probe files and writes
``catalog/kernels/h200-fit.json``, which is what the package reads (no scipy at run time); ``clusterfit calibrate``
runs it on the user's own GPU and writes a profile whose curves replace these for that GPU (clusterfit.profile).

Carrying to other GPUs (the rule): efficiencies are fractions of the GPU's own datasheet peak FLOP/s and
bandwidth, so they transfer unchanged; the size constants (m0, n0, k0, w0) transfer unchanged too.
Limits: this assumes the other GPU's kernels reach the same fraction of peak as Hopper's did (Blackwell
fp4 GEMMs, Ampere without fp8, and PCIe cards at lower clocks can differ by 10-30%); the engine's
``compute_scale`` and ``memory_scale`` (catalog/engines.yaml, fitted on published results) absorb the
average difference, not per-GPU quirks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from . import comm

Num = Union[float, npt.NDArray[np.float64]]

CATALOG_DIR = Path(__file__).resolve().parent.parent / "catalog"

@dataclass(frozen=True)
class GemmCurve:
    """Roofline efficiency of a dense GEMM for one compute dtype (fractions of datasheet peaks)."""

    t0_s: float
    mem_eff: float
    eff_max: float
    m0: float
    n0: float
    k0: float

    def compute_eff(self, m: npt.ArrayLike, n: float, k: float) -> Num:
        mm = np.maximum(m, 1.0)
        return self.eff_max / (1.0 + self.m0 / mm + self.n0 / n + self.k0 / k)


@dataclass(frozen=True)
class AllReduceCurve:
    """A measured all-reduce (``clusterfit calibrate`` on several GPUs): the achieved bandwidth per GPU per direction
    (bytes/s) and the per-hop latency (s) of ``comm.all_reduce_s``, fitted on NCCL timings of that GPU's scale-up
    link. It replaces the catalog line rate x ``comm.NVLINK_EFF`` and ``comm.NVLINK_HOP_S`` for TP all-reduces."""

    bw_bytes_per_s: float
    hop_s: float

    def link(self, line: comm.Link) -> comm.Link:
        """The scale-up ``line`` link with the measured bandwidth and latency (same algorithms allowed)."""
        return comm.Link(self.bw_bytes_per_s, self.hop_s, line.custom_allreduce)


@dataclass(frozen=True)
class KernelCurves:
    """All fitted curves. ``gemm`` is keyed by compute dtype family: 'bf16' and 'fp8' (also used for fp4/int8).

    allreduce: None for the shipped curves (the TP all-reduce uses comm's documented constants); a measured
    profile's all-reduce otherwise (clusterfit.profile)."""

    gemm: dict[str, GemmCurve]
    attn_decode_t0_s: float
    attn_decode_mem_eff: float
    attn_prefill_eff_max: float
    attn_prefill_w0: float
    moe_mem_eff: float
    moe_eff_max: float
    moe_m0: float
    copy_mem_eff: float
    allreduce: AllReduceCurve | None = None

    def gemm_curve(self, compute_dtype: str) -> GemmCurve:
        return self.gemm["bf16" if compute_dtype in ("bf16", "fp16", "fp32") else "fp8"]


# ----------------------------------------------------------------------------------------------- models
def gemm_time_s(c: GemmCurve, m: npt.ArrayLike, n: float, k: float, weight_bytes_per_elem: float,
                act_bytes_per_elem: float, peak_flops: float, bw_bytes_per_s: float, with_t0: bool = True) -> Num:
    """Time of y[M,N] = x[M,K] @ W[N,K]^T (numpy-broadcasting; n and k may be arrays too)."""
    mm = np.asarray(m, dtype=float)
    flops = 2.0 * mm * n * k
    nbytes = n * k * weight_bytes_per_elem + mm * k * act_bytes_per_elem + mm * n * 2.0
    t = np.maximum(nbytes / (bw_bytes_per_s * c.mem_eff), flops / (peak_flops * c.compute_eff(mm, n, k)))
    return t + (c.t0_s if with_t0 else 0.0)


def _read_catalog(name: str) -> dict[str, Any]:
    return json.loads((CATALOG_DIR / "kernels" / name).read_text())


def curves_from_params(p: dict[str, Any]) -> KernelCurves:
    """KernelCurves from the fitted parameters (the JSON benchmarks/fit_kernels.py writes, or a profile's ``fit``
    section: clusterfit.calibrate.fit writes both)."""
    ar = p.get("allreduce")
    return KernelCurves(
        gemm={k: GemmCurve(**v) for k, v in p["gemm"].items()},
        attn_decode_t0_s=p["attn_decode"]["t0_s"], attn_decode_mem_eff=p["attn_decode"]["mem_eff"],
        attn_prefill_eff_max=p["attn_prefill"]["eff_max"],
        attn_prefill_w0=p["attn_prefill"]["w0"],
        moe_mem_eff=p["moe"]["mem_eff"], moe_eff_max=p["moe"]["eff_max"],
        moe_m0=p["moe"]["m0"], copy_mem_eff=p["copy"]["mem_eff"],
        allreduce=None if ar is None else AllReduceCurve(ar["bw_bytes_per_s"], ar["hop_s"]))


@lru_cache(maxsize=1)
def shipped_params() -> dict[str, Any]:
    """The fitted H200 parameters shipped with the package (catalog/kernels/h200-fit.json). Callers must not modify
    the returned dict (it is cached); a measured profile overlays its own families on a copy."""
    return _read_catalog("h200-fit.json")


@lru_cache(maxsize=1)
def load_curves() -> KernelCurves:
    """The fitted H200 curves shipped with the package (catalog/kernels/h200-fit.json); a measured profile replaces
    them for the GPU it was measured on (clusterfit.profile.profile_curves, compose.Catalog.curves)."""
    return curves_from_params(shipped_params())
