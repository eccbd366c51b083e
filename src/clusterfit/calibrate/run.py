"""`clusterfit calibrate`: check the environment, time the kernels, fit the curves, write the profile.

    calibrate(CalibrateRequest(out=Path("profile.json")), log=print) -> Profile (also written to ``out``)
    (clusterfit.api.calibrate(out=..., gpus=..., quick=...) is the same with keyword arguments)

Needs PyTorch and scipy (the ``calibrate`` extra) and, except for a development dry run (``device="cpu"``), a CUDA
GPU. Kernels are timed on GPU 0; the all-reduce runs over GPUs 0..gpus-1 (all visible GPUs by default), which must
be the same model. The device name PyTorch reports picks the catalog GPU whose datasheet the efficiencies are
fractions of (``gpu`` overrides it).
"""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..errors import ClusterfitError
from ..profile import PROFILE_KIND, PROFILE_SCHEMA_VERSION, Profile, Timings, check_profile
from ..schema import ParameterError, RequestSchema

if TYPE_CHECKING:
    from ..hardware import Gpu, HardwareCatalog

Log = Callable[[str], None]

#: Names GPUs report (torch.cuda.get_device_name, the same as nvidia-smi's name) that the catalog's ids and aliases
#: do not spell once the vendor prefix is dropped. H100 SXM5 reports "NVIDIA H100 80GB HBM3" (pytorch/pytorch PR
#: #194276, pytorch/test-infra PR #7631); the A100 PCIe and RTX PRO 6000 server names are as nvidia-smi prints them in
#: public cloud GPU-type lists (RunPod's GPU type ids).
DEVICE_NAMES = {"NVIDIA H100 80GB HBM3": "h100_sxm", "NVIDIA A100 80GB PCIe": "a100_pcie_80gb",
                "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx_pro_6000_blackwell_server"}
_VENDOR_PREFIXES = ("NVIDIA ", "AMD Instinct ", "AMD ")
CPU_DRY_RUN_NOTE = ("CPU dry run (clusterfit calibrate --device cpu): tiny shapes timed on the CPU to exercise the "
                    "calibration code; the numbers say nothing about a GPU and perf / plan / simulate refuse this profile")


class CalibrateRequest(RequestSchema):
    """What to calibrate. gpus: GPUs in the all-reduce (None: all visible; 1: none). gpu: the catalog GPU to fit
    against (None: from the device name). catalog: extra hardware catalog files. device: 'cuda', or 'cpu' for a dry
    run (fitted against ``gpu`` or h200_sxm, refused for predictions)."""

    out: Path = Field(Path("profile.json"), description="The profile file to write (JSON)")
    gpus: int | None = Field(None, ge=1, le=1024, description="GPUs in the all-reduce (default: all visible)")
    quick: bool = Field(False, description="Fewer shapes (about a quarter of the rows)")
    device: Literal["cuda", "cpu"] = Field("cuda", description="cuda; cpu: a development dry run")
    gpu: str | None = Field(None, description="The catalog GPU to fit against (default: from the device name)")
    catalog: list[Path] = Field(default_factory=list, description="Extra hardware catalog files")


def require_libraries() -> Any:
    """torch (returned) and scipy, or a ClusterfitError saying how to install them."""
    try:
        import torch
    except ImportError:
        raise ClusterfitError("clusterfit calibrate needs PyTorch: pip install 'clusterfit[calibrate]' (torch with "
                              "CUDA, and scipy for the fit)") from None
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise ClusterfitError("clusterfit calibrate needs scipy for the fit: pip install 'clusterfit[calibrate]'"
                              ) from None
    return torch


def cpu_workers() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else the machine's count): the most
    processes a dry run's all-reduce (``--device cpu --gpus N``, N gloo processes) spreads over, one per CPU, as a
    real one runs one process per GPU."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # no affinity masks (macOS, Windows)
        return os.cpu_count() or 1


def check_cpu_gpus(gpus: int | None) -> None:
    """Refuse, before torch is imported, a dry run's all-reduce over more processes than there are CPUs: each is a
    torch process started by spawn, so the run's time grew with --gpus, for numbers that mean nothing."""
    cpus = cpu_workers()
    if gpus is not None and gpus > cpus:
        raise ParameterError("gpus", f"{gpus:,} processes asked, but a CPU dry run (--device cpu) runs its "
                             f"all-reduce as one process per CPU and {cpus} {'is' if cpus == 1 else 'are'} visible; "
                             f"give --gpus {cpus} or fewer")


def catalog_gpu(device_name: str, hw: HardwareCatalog) -> Gpu:
    """The catalog GPU a device name means (DEVICE_NAMES, else the name without its vendor prefix as an id or alias)."""
    if device_name in DEVICE_NAMES:
        return hw.gpu(DEVICE_NAMES[device_name])
    short = next((device_name[len(p):] for p in _VENDOR_PREFIXES if device_name.startswith(p)), device_name)
    try:
        return hw.gpu(short)
    except ClusterfitError:
        raise ClusterfitError(f"the GPU reports itself as {device_name!r}, which names no catalog GPU: pass --gpu ID "
                              "(see `clusterfit hardware`), or add the GPU with --catalog") from None


def _driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi (None where it is missing)."""
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    line = res.stdout.strip().splitlines()[:1]
    return line[0].strip() if res.returncode == 0 and line else None


def _software(torch: Any, cuda: bool) -> dict[str, Any]:
    from .. import __version__

    nccl = None
    if cuda:
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)
        except (AttributeError, RuntimeError):
            nccl = None
    hip = getattr(torch.version, "hip", None)
    return {"driver": _driver_version() if cuda else None, "torch": str(torch.__version__), "nccl": nccl,
            "cuda": (f"HIP {hip}" if hip else torch.version.cuda) if cuda else None, "clusterfit": __version__}


def _custom_allreduce(gpu: Gpu, hw: HardwareCatalog) -> bool:
    """Whether the model runs one-shot / two-shot all-reduces on this GPU's scale-up link (comm.links_for of the
    GPU's default system; ring only without one)."""
    from ..perfmodel.comm import links_for

    sid = hw.default_system.get(gpu.id)
    return bool(sid is not None and links_for(hw.systems[sid])[0].custom_allreduce)


def calibrate(req: CalibrateRequest, log: Log) -> Profile:
    """Time, fit and write a profile to ``req.out``; returns it. Raises ClusterfitError for anything the user can fix."""
    from ..hardware import load_hardware
    from .allreduce import time_allreduce
    from .fit import fit_timings
    from .probe import DRY_RUN, FULL, QUICK, Probe

    cuda = req.device == "cuda"
    if not cuda:
        check_cpu_gpus(req.gpus)   # CUDA's GPUs are counted by torch, below
    torch = require_libraries()
    hw = load_hardware(list(req.catalog) or None)
    if cuda:
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise ClusterfitError(f"no CUDA GPU visible to PyTorch {torch.__version__} ({build}): calibrate times "
                                  "kernels on the GPU (--device cpu is a development dry run, meaningless for "
                                  "predictions)")
        visible = torch.cuda.device_count()
        n = visible if req.gpus is None else req.gpus
        if n > visible:
            raise ParameterError("gpus", f"{n:,} GPUs asked, {visible} visible to PyTorch")
        names = [torch.cuda.get_device_name(i) for i in range(n)]
        if len(set(names)) > 1:
            raise ParameterError("gpus", f"the GPUs differ ({', '.join(sorted(set(names)))}): calibrate one model at a "
                                 "time (CUDA_VISIBLE_DEVICES)")
        device_name = names[0]
        gpu = hw.gpu(req.gpu) if req.gpu else catalog_gpu(device_name, hw)
        props = torch.cuda.get_device_properties(0)
        gpu_doc = {"id": gpu.id, "device_name": device_name, "count": n, "memory_bytes": int(props.total_memory),
                   "compute_capability": f"{props.major}.{props.minor}", "sms": int(props.multi_processor_count)}
        shapes = QUICK if req.quick else FULL
    else:
        n = req.gpus or 1
        gpu = hw.gpu(req.gpu or "h200_sxm")
        gpu_doc = {"id": gpu.id, "device_name": "cpu (dry run)", "count": n}
        shapes = DRY_RUN
    log(f"calibrating {gpu_doc['device_name']} (fitted against {gpu.id}); kernels on "
        f"{'GPU 0' if cuda else 'the CPU'}" + (f", all-reduce over {n}" if n > 1 else ""))
    probe = Probe(torch, "cuda:0" if cuda else "cpu", shapes, log)
    copy_row, read_row = probe.streams()
    gemm = probe.gemms()
    dec, pre = probe.attention()
    moe = probe.moe()
    allreduce = time_allreduce(torch, n, shapes.allreduce_bytes, cuda) if n > 1 else []
    if allreduce:
        log("all-reduce over " + f"{n}: " + ", ".join(f"{r['bytes'] >> 10} KiB {r['s'] * 1e6:.0f} us"
                                                     for r in allreduce[::3]))
    timings = Timings.model_validate({"copy": copy_row, "read": read_row, "gemm": gemm, "attention_decode": dec,
                                      "attention_prefill": pre, "moe": moe, "allreduce": allreduce})
    peaks = {d: gpu.peak_flops(d) for d in ("bf16", "fp8") if any(g.dtype == d for g in timings.gemm) or d == "bf16"}
    log("fitting the curves")
    params = fit_timings(timings, gpu.mem_bw_bytes_per_s, peaks, gpu.scale_up_bw_bytes_per_s,
                         _custom_allreduce(gpu, hw))
    params["datasheet"] = {"mem_bw_bytes_per_s": gpu.mem_bw_bytes_per_s, "peak_flops": peaks,
                           "scale_up_bw_bytes_per_s": gpu.scale_up_bw_bytes_per_s}
    notes = list(probe.notes) + ([] if cuda else [CPU_DRY_RUN_NOTE])
    if cuda and req.gpu:
        notes.append(f"fitted against {gpu.id} as asked (--gpu); the device reports {device_name!r}")
    profile = Profile.model_validate({
        "schema_version": PROFILE_SCHEMA_VERSION, "kind": PROFILE_KIND,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu_doc, "software": _software(torch, cuda),
        "measurement": {"device": req.device, "quick": req.quick,
                        "timer": "CUDA events" if cuda else "host clock (time.perf_counter)",
                        "warmup": shapes.warmup, "repeats": shapes.repeats, "statistic": "median",
                        "fp8_activation_quantisation": "excluded: x quantised before the timed torch._scaled_mm"},
        "timings": timings.model_dump(by_alias=True), "fit": params, "notes": notes})
    req.out.write_text(profile.model_dump_json(by_alias=True, indent=1) + "\n")
    if cuda:  # the profile must load where it will be used: a timing above the datasheet means a wrong GPU id
        try:
            check_profile(profile, hw)
        except ClusterfitError as exc:
            raise ClusterfitError(f"wrote {req.out}, but it will not load: {exc}") from None
    return profile

