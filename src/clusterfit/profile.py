"""Measured kernel profiles: what `clusterfit calibrate` writes and `perf` / `plan` / `simulate --profile` read.

A profile is one JSON document (schema below, ``Profile``):

    schema_version, kind       1, "clusterfit-kernel-profile"
    created                    ISO date (or date and time) of the measurement
    gpu                        the catalog GPU id the fit is relative to, the device name PyTorch reported, how many
                               GPUs took part (all-reduce), memory, compute capability
    software                   driver, CUDA, PyTorch, NCCL and clusterfit versions
    measurement                device (cuda; cpu only for a development dry run), timer, warm-ups, repeats
    timings                    the raw timings, seconds per kernel call (GEMMs, attention, MoE, copy, all-reduce)
    fit                        the fitted curve parameters, the same keys as catalog/kernels/h200-fit.json, plus
                               the datasheet figures the efficiencies are fractions of and the all-reduce link

``fit`` replaces the shipped H200-derived curves (perfmodel/kernels.py) for the profile's GPU only: families a
profile leaves out (fp8 GEMMs on a GPU without fp8, MoE without torch._grouped_mm, all-reduce on one GPU) keep the
shipped curve (``profile_curves``). A profile for another GPU than the one predicted is an error naming both
(``compose.build_replica``; ``plan`` errs when none of its systems has the profile's GPU).

Validation: the schema (field types, ``schema_version``, efficiencies in (0, 1] of the datasheet peak, launch costs
in [0, 1 ms], size constants in the fit's own bounds) on parsing; against the hardware catalog in force
(``check_profile``): the GPU id is a catalog GPU, the datasheet figures the fit used are the catalog's, no raw timing
is faster than the datasheet peak (FLOP/s of GEMMs, prefill attention and MoE; bytes/s of the copy and read
streams), the all-reduce bandwidth is within the catalog's scale-up line rate, and a CPU dry run is refused.
Every problem is a ``ParameterError`` on ``profile`` naming the field (``fit.gemm.bf16.eff_max``,
``timings.gemm[3].s``).

Over HTTP a profile travels inline (the request's ``profile`` field is this document, never a path): the server
reads no file a request names.
"""

import datetime as _dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from .errors import ParameterError
from .inputs import RefuseBool, read_document

if TYPE_CHECKING:
    from .hardware import Gpu, HardwareCatalog
    from .perfmodel.kernels import KernelCurves

PROFILE_SCHEMA_VERSION = 1
PROFILE_KIND = "clusterfit-kernel-profile"

#: Ranges of the fitted parameters: the bounds ``calibrate.fit`` fits within (one copy, used by both). Launch costs
#: above 1 ms or size constants beyond these are not a kernel's start-up or tile fill but a failed fit.
T0_MAX_S = 1e-3
GEMM_SIZE_MAX = 5e4          # m0, n0, k0 of a GEMM curve (elements of M, N, K)
PREFILL_W0_MAX = 1e6         # w0 of the prefill-attention curve (tokens)
MOE_M0_MAX = 1e5             # m0 of the MoE curve (tokens per active expert)
#: Bounds on raw rows: sizes a kernel probe can allocate, seconds one call can take, rows one profile holds.
MAX_DIM = 10_000_000
MAX_CALL_S = 3600.0
MAX_ROWS = 20_000


def _fraction(value: float) -> float:
    if not 0.0 < value <= 1.0:
        raise PydanticCustomError("efficiency", "must be a fraction of the datasheet peak, in (0, 1]")
    return value


def _fraction_or_zero(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise PydanticCustomError("efficiency", "must be a fraction of the datasheet peak, in [0, 1] (0: not measured)")
    return value


#: Fraction of a datasheet peak (FLOP/s or bytes/s): the model's efficiencies.
Efficiency = Annotated[float, AfterValidator(_fraction), Field(json_schema_extra={"exclusiveMinimum": 0, "maximum": 1})]
LaunchS = Annotated[float, Field(ge=0.0, le=T0_MAX_S, description="fixed cost of one isolated launch, s")]
CallS = Annotated[float, Field(gt=0.0, le=MAX_CALL_S, description="seconds per call (median)")]
Dim = Annotated[int, Field(ge=1, le=MAX_DIM)]
ByteCount = Annotated[int, Field(ge=1, le=10**15)]
Text = Annotated[str, Field(max_length=200)]


class _Doc(RefuseBool):
    """Base of every profile section: unknown keys are errors, numbers are finite (and not true / false),
    instances immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


# ================================================================================================ header
class ProfileGpu(_Doc):
    """The GPU measured: ``id`` is the hardware-catalog GPU whose datasheet the efficiencies are fractions of."""

    id: Annotated[str, Field(min_length=1, max_length=100)]
    device_name: Text = Field(description="the name PyTorch reported (torch.cuda.get_device_name)")
    count: int = Field(ge=1, le=1024, description="GPUs that took part (the all-reduce ran over all of them)")
    memory_bytes: int | None = Field(None, ge=2**30, le=10**13,
                                     description="torch total_memory of one GPU, bytes (1 GiB..10 TB)")
    compute_capability: Text | None = None
    sms: int | None = Field(None, ge=1, le=100_000)


class ProfileSoftware(_Doc):
    """Versions in force while measuring (None: not known, e.g. NCCL on one GPU or a CPU dry run)."""

    driver: Text | None = None
    cuda: Text | None = None
    torch: Text | None = None
    nccl: Text | None = None
    clusterfit: Text | None = None


class Measurement(_Doc):
    """How the timings were taken."""

    device: Literal["cuda", "cpu"] = Field(description="cuda; cpu only for a development dry run (refused by "
                                           "perf/plan/simulate)")
    quick: bool = Field(False, description="calibrate --quick: fewer shapes")
    timer: Text = "CUDA events"
    warmup: int = Field(5, ge=0, le=10_000)
    repeats: int = Field(30, ge=1, le=100_000)
    statistic: Text = "median"
    fp8_activation_quantisation: Text | None = Field(None, description="whether fp8 GEMM timings include quantising "
                                                     "the activations (calibrate: no, as engines fuse it)")


# =============================================================================================== timings
class GemmTiming(_Doc):
    """y[M,N] = x[M,K] @ W[N,K]^T in ``dtype`` (fp8: torch._scaled_mm with per-tensor scales).
    quant_bytes_per_elem: activation bytes per x element of unfused quantisation the time includes (0: none)."""

    dtype: Literal["bf16", "fp8"]
    m: Dim
    n: Dim
    k: Dim
    s: CallS
    quant_bytes_per_elem: float = Field(0.0, ge=0.0, le=64.0)


class DecodeAttentionTiming(_Doc):
    """One query token per sequence: b sequences of l cached tokens, hq query / hkv KV heads of dimension d (bf16)."""

    b: Dim
    l: Dim  # noqa: E741 - the probe's name for the cached length
    hq: Dim
    hkv: Dim
    d: Dim
    s: CallS


class PrefillAttentionTiming(_Doc):
    """Causal attention over t tokens, b sequences, hq query / hkv KV heads of dimension d (bf16)."""

    b: Dim
    t: Dim
    hq: Dim
    hkv: Dim
    d: Dim
    s: CallS


class MoeTiming(_Doc):
    """Routed-expert FFN (gate+up, SiLU, down; bf16) of ``routed_tokens`` token-expert pairs on ``active_experts``
    experts of width ``hidden`` and intermediate ``moe_inter``."""

    hidden: Dim
    moe_inter: Dim
    routed_tokens: Dim
    active_experts: Dim
    s: CallS
    method: Text = "torch._grouped_mm"


class CopyTiming(_Doc):
    """Device-to-device copy; bytes counts bytes read plus bytes written."""

    bytes_read_plus_written: ByteCount
    s: CallS


class ReadTiming(_Doc):
    """Read-only stream (a reduction over a large tensor)."""

    bytes: ByteCount
    s: CallS


class AllReduceTiming(_Doc):
    """One all-reduce of ``bytes`` per rank over ``gpus`` ranks (NCCL), seconds per call."""

    gpus: int = Field(ge=2, le=1024)
    bytes: ByteCount
    s: CallS


class Timings(_Doc):
    copy_: CopyTiming = Field(alias="copy")
    read: ReadTiming | None = None
    gemm: list[GemmTiming] = Field(min_length=1, max_length=MAX_ROWS)
    attention_decode: list[DecodeAttentionTiming] = Field(min_length=1, max_length=MAX_ROWS)
    attention_prefill: list[PrefillAttentionTiming] = Field(min_length=1, max_length=MAX_ROWS)
    moe: list[MoeTiming] = Field(default_factory=list, max_length=MAX_ROWS)
    allreduce: list[AllReduceTiming] = Field(default_factory=list, max_length=MAX_ROWS)

    model_config = ConfigDict(populate_by_name=True)


# =================================================================================================== fit
class GemmFit(_Doc):
    """kernels.GemmCurve: eff = eff_max / (1 + m0/M + n0/N + k0/K) of the datasheet peak; mem_eff of the bandwidth."""

    t0_s: LaunchS
    mem_eff: Efficiency
    eff_max: Efficiency
    m0: float = Field(ge=0.0, le=GEMM_SIZE_MAX)
    n0: float = Field(ge=0.0, le=GEMM_SIZE_MAX)
    k0: float = Field(ge=0.0, le=GEMM_SIZE_MAX)


class GemmFits(_Doc):
    bf16: GemmFit
    fp8: GemmFit | None = Field(None, description="absent: no fp8 tensor cores (the shipped fp8 curve stays)")


class AttnDecodeFit(_Doc):
    t0_s: LaunchS
    mem_eff: Efficiency


class AttnPrefillFit(_Doc):
    """eff = eff_max / (1 + w0 / (B*T)) of the bf16 peak."""

    t0_s: LaunchS
    eff_max: Efficiency
    w0: float = Field(ge=0.0, le=PREFILL_W0_MAX)


class MoeFit(_Doc):
    """eff = eff_max / (1 + m0 / tokens per active expert) of the bf16 peak; mem_eff of the bandwidth."""

    t0_s: LaunchS
    mem_eff: Efficiency
    eff_max: Efficiency
    m0: float = Field(ge=0.0, le=MOE_M0_MAX)


class CopyFit(_Doc):
    mem_eff: Efficiency
    read_mem_eff: Annotated[float, AfterValidator(_fraction_or_zero)] = Field(
        0.0, description="read-only stream, fraction of the bandwidth (0: not measured)")


class ProbeQuantFit(_Doc):
    """The H200 probe's unfused fp8 activation quantisation (fitted beside the fp8 curve, not part of it)."""

    fixed_s: LaunchS
    bytes_per_elem: dict[Annotated[str, Field(max_length=40)], Annotated[float, Field(ge=0.0, le=64.0)]] = Field(
        max_length=8)
    copy_eff: Efficiency
    what: Annotated[str, Field(max_length=1000)] = ""


class AllReduceFit(_Doc):
    """comm.all_reduce_s's link fitted on NCCL timings: achieved bandwidth per GPU per direction and per-hop latency."""

    gpus: int = Field(ge=2, le=1024, description="ranks of the measured all-reduce")
    bw_bytes_per_s: float = Field(gt=0.0, description="bytes/s per GPU per direction (at most the line rate)")
    hop_s: LaunchS
    custom_allreduce: bool = Field(description="fitted with the one-shot / two-shot kernels allowed (NVLink)")


class FitError(_Doc):
    rows: int = Field(ge=0)
    median_abs_err_pct: float = Field(ge=0.0)
    max_abs_err_pct: float = Field(ge=0.0)


class Datasheet(_Doc):
    """The catalog figures of ``gpu.id`` the efficiencies are fractions of (bytes/s, FLOP/s dense)."""

    mem_bw_bytes_per_s: float = Field(gt=0.0)
    peak_flops: dict[Literal["bf16", "fp8"], Annotated[float, Field(gt=0.0)]]
    scale_up_bw_bytes_per_s: float | None = Field(None, gt=0.0)


class Fit(_Doc):
    """The fitted curves (keys of catalog/kernels/h200-fit.json) and the datasheet they are relative to."""

    datasheet: Datasheet
    gemm: GemmFits
    attn_decode: AttnDecodeFit
    attn_prefill: AttnPrefillFit
    moe: MoeFit | None = Field(None, description="absent: not measured (the shipped MoE curve stays)")
    copy_: CopyFit = Field(alias="copy")
    allreduce: AllReduceFit | None = Field(None, description="absent: one GPU (comm's constants stay)")
    fp8_probe_quantisation: ProbeQuantFit | None = None
    report: dict[Annotated[str, Field(max_length=40)], FitError] = Field(default_factory=dict, max_length=16)

    model_config = ConfigDict(populate_by_name=True)


# =============================================================================================== profile
class Profile(_Doc):
    """A measured kernel profile (module docstring)."""

    schema_version: int = Field(description=f"profile schema version; this clusterfit reads {PROFILE_SCHEMA_VERSION}")
    kind: Literal["clusterfit-kernel-profile"]
    created: Annotated[str, Field(max_length=40, description="ISO 8601 date or date and time of the measurement")]
    gpu: ProfileGpu
    software: ProfileSoftware
    measurement: Measurement
    timings: Timings
    fit: Fit
    notes: list[Annotated[str, Field(max_length=2000)]] = Field(default_factory=list, max_length=50)

    @model_validator(mode="before")
    @classmethod
    def _version_first(cls, data: Any) -> Any:
        """Check the version before anything else: a newer profile's other fields may mean something else."""
        if isinstance(data, dict) and "schema_version" in data and data["schema_version"] != PROFILE_SCHEMA_VERSION:
            raise PydanticCustomError("schema_version", f"schema_version: this clusterfit reads profile schema version "
                                      f"{PROFILE_SCHEMA_VERSION}; the profile is version {{got}}: use the clusterfit "
                                      "that wrote it, or calibrate again", {"got": repr(data["schema_version"])})
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "Profile":
        try:
            day = _dt.date.fromisoformat(self.created[:10])
        except ValueError:
            raise PydanticCustomError("created", "created: must be an ISO 8601 date (YYYY-MM-DD...), got {got}",
                                      {"got": repr(self.created)}) from None
        if day > _dt.date.today() + _dt.timedelta(days=1):   # a day's grace for time zones
            raise PydanticCustomError("created", "created: {got} is in the future; a profile records when it was "
                                      "measured", {"got": repr(self.created)})
        t, f = self.timings, self.fit
        backing = (("fit.gemm.fp8", f.gemm.fp8, any(g.dtype == "fp8" for g in t.gemm), "timings.gemm (fp8 rows)"),
                   ("fit.moe", f.moe, bool(t.moe), "timings.moe"),
                   ("fit.allreduce", f.allreduce, bool(t.allreduce), "timings.allreduce"))
        for name, fitted, measured, rows in backing:
            if fitted is not None and not measured:
                raise PydanticCustomError("unbacked", f"{name}: fitted without any {rows}: a fit must come from "
                                          "measured rows")
        if f.allreduce is not None and f.allreduce.gpus > self.gpu.count:
            raise PydanticCustomError("allreduce", f"fit.allreduce.gpus: {f.allreduce.gpus} ranks, more than the "
                                      f"{self.gpu.count} GPUs of gpu.count")
        return self

    def summary(self) -> str:
        """One line: device, count, date and versions."""
        sw = self.software
        versions = ", ".join(f"{k} {v}" for k, v in (("torch", sw.torch), ("CUDA", sw.cuda), ("NCCL", sw.nccl),
                                                      ("driver", sw.driver)) if v)
        return (f"{self.gpu.device_name} x{self.gpu.count} ({self.gpu.id}), measured {self.created[:10]}"
                + (f", {versions}" if versions else ""))

    def families(self) -> list[str]:
        """The curve families this profile replaces."""
        f = self.fit
        out = ["gemm bf16"] + (["gemm fp8"] if f.gemm.fp8 else []) + ["attention decode", "attention prefill"]
        return out + (["moe"] if f.moe else []) + ["copy"] + (["all-reduce"] if f.allreduce else [])


# =========================================================================================== reading
def _where(loc: tuple[int | str, ...]) -> str:
    """('timings', 'gemm', 3, 's') -> 'timings.gemm[3].s' (``copy_`` is the key ``copy``)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part).rstrip("_")
    return out


#: Errors whose message already starts with the field it is about (the model validators of Profile).
_WHOLE_MESSAGES = frozenset({"schema_version", "unbacked", "allreduce", "created"})


def validation_message(exc: ValidationError) -> str:
    """The first problem of a profile as one line: the field, what is wrong, the value given."""
    err = exc.errors()[0]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] in _WHOLE_MESSAGES:
        return msg
    got = err.get("input")
    shown = "" if err["type"] == "missing" or isinstance(got, dict | list) else f" (got {got!r})"
    return f"{_where(tuple(err['loc'])) or '(top level)'}: {msg[:1].lower() + msg[1:]}{shown}"


def parse_profile(data: Any, origin: str = "profile") -> Profile:
    """Validate a parsed JSON document as a Profile; a problem is a ParameterError on ``profile`` naming the field."""
    if not isinstance(data, dict):
        raise ParameterError("profile", f"{origin}: a profile is a JSON object (clusterfit calibrate writes one), "
                             f"not a {type(data).__name__}")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ParameterError("profile", f"{origin}: {validation_message(exc)}") from None


def read_profile(path: str | Path) -> Profile:
    """Read and validate a profile file (what ``--profile FILE`` names; size-limited, JSON)."""
    return parse_profile(read_document(path, "profile", "json", "profile"), str(path))


# ======================================================================================= the catalog
def check_profile(profile: Profile, hardware: "HardwareCatalog") -> Profile:
    """``profile`` checked against the hardware catalog in force (module docstring); returned with ``gpu.id`` the
    catalog id (an alias is resolved). A problem is a ParameterError on ``profile`` naming the field."""
    from .errors import ClusterfitError

    def bad(field: str, why: str) -> ParameterError:
        return ParameterError("profile", f"{field}: {why}")

    if profile.measurement.device != "cuda":
        raise bad("measurement.device", f"{profile.measurement.device!r}: a dry run (clusterfit calibrate --device "
                  "cpu) times the CPU, which says nothing about a GPU; calibrate on the GPU")
    try:
        gpu = hardware.gpu(profile.gpu.id)
    except ClusterfitError as exc:
        raise bad("gpu.id", f"{exc} (the profile names the catalog GPU it was fitted against; pass the catalog that "
                  "has it with --catalog)") from None
    _check_datasheet(profile.fit.datasheet, gpu, bad)
    _check_rates(profile, gpu, bad)
    ar = profile.fit.allreduce
    if ar is not None and ar.bw_bytes_per_s > gpu.scale_up_bw_bytes_per_s * (1 + 1e-9):
        raise bad("fit.allreduce.bw_bytes_per_s", f"{ar.bw_bytes_per_s / 1e9:,.1f} GB/s is above {gpu.id}'s scale-up "
                  f"line rate of {gpu.scale_up_bw_bytes_per_s / 1e9:,.1f} GB/s per direction")
    if gpu.id != profile.gpu.id:
        profile = profile.model_copy(update={"gpu": profile.gpu.model_copy(update={"id": gpu.id})})
    return profile


def _check_datasheet(ds: Datasheet, gpu: "Gpu", bad: Any) -> None:
    """The efficiencies are fractions of the datasheet the fit used: it must be the catalog's for this GPU."""
    pairs = [("mem_bw_bytes_per_s", ds.mem_bw_bytes_per_s, gpu.mem_bw_bytes_per_s, 1e12, "TB/s")]
    pairs += [(f"peak_flops.{d}", v, gpu.peak_flops(d), 1e12, "TFLOP/s") for d, v in ds.peak_flops.items()]
    for name, used, catalog, scale, unit in pairs:
        if abs(used - catalog) > 1e-6 * catalog:
            raise bad(f"fit.datasheet.{name}", f"the efficiencies are fractions of {used / scale:,.4g} {unit}, but "
                      f"the hardware catalog in force gives {gpu.id} {catalog / scale:,.4g} {unit}; calibrate with "
                      "the same catalog")


def _check_rates(profile: Profile, gpu: "Gpu", bad: Any) -> None:
    """No raw timing may beat the datasheet: FLOP/s of compute kernels against the dense peak of their dtype, bytes/s
    of the large copy / read streams against the bandwidth (1% slack for the datasheet's rounding)."""
    t = profile.timings
    slack = 1.01
    rows: list[tuple[str, float, float, str]] = []   # field, achieved per s, limit per s, unit
    for i, g in enumerate(t.gemm):
        rows.append((f"timings.gemm[{i}].s", 2.0 * g.m * g.n * g.k / g.s, gpu.peak_flops(g.dtype), "FLOP/s"))
    bf16 = gpu.peak_flops("bf16")
    for i, a in enumerate(t.attention_prefill):
        rows.append((f"timings.attention_prefill[{i}].s", 2.0 * a.b * a.hq * a.t * a.t * a.d / a.s, bf16, "FLOP/s"))
    for i, e in enumerate(t.moe):
        rows.append((f"timings.moe[{i}].s", 6.0 * e.routed_tokens * e.hidden * e.moe_inter / e.s, bf16, "FLOP/s"))
    bw = gpu.mem_bw_bytes_per_s
    rows.append(("timings.copy.s", t.copy_.bytes_read_plus_written / t.copy_.s, bw, "bytes/s"))
    if t.read is not None:
        rows.append(("timings.read.s", t.read.bytes / t.read.s, bw, "bytes/s"))
    for field, rate, limit, unit in rows:
        if rate > limit * slack:
            scale, shown = (1e12, "TFLOP/s") if unit == "FLOP/s" else (1e12, "TB/s")
            raise bad(field, f"{rate / scale:,.4g} {shown} achieved, above {gpu.id}'s datasheet {limit / scale:,.4g} "
                      f"{shown}: the timing or the GPU is wrong")


# ======================================================================================= the curves
def fit_params(profile: Profile) -> dict[str, Any]:
    """The shipped H200 parameters (catalog/kernels/h200-fit.json) with every family the profile fitted replaced."""
    from .perfmodel.kernels import shipped_params

    base = shipped_params()
    f = profile.fit
    gemm = dict(base["gemm"])
    gemm["bf16"] = f.gemm.bf16.model_dump()
    if f.gemm.fp8 is not None:
        gemm["fp8"] = f.gemm.fp8.model_dump()
    return {"gemm": gemm, "attn_decode": f.attn_decode.model_dump(), "attn_prefill": f.attn_prefill.model_dump(),
            "moe": f.moe.model_dump() if f.moe is not None else base["moe"],
            "copy": f.copy_.model_dump(), "allreduce": f.allreduce.model_dump() if f.allreduce is not None else None}


def profile_curves(profile: Profile) -> "KernelCurves":
    """The performance model's curves for the profile's GPU (``fit_params`` through kernels.curves_from_params)."""
    from .perfmodel.kernels import curves_from_params

    return curves_from_params(fit_params(profile))
