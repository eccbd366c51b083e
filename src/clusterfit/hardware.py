"""Accelerators and systems (nodes, racks) as typed specs.

Units are in the field names: bytes, bytes/s (decimal), FLOP/s (dense, no 2:4 sparsity).
The values come from ``catalog/hardware.yaml``; every value there names its source.
"""

from __future__ import annotations

import functools
import importlib.resources
import pathlib
import re
import tomllib
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import yaml
from pydantic import ConfigDict, Field, StringConstraints, ValidationError, model_validator

from .errors import ClusterfitError, brief, close_matches, unknown
from .inputs import RefuseBool

GB = 10**9
GiB = 2**30
MiB = 2**20


@dataclass(frozen=True)
class Gpu:
    """One accelerator.

    memory_bytes: marketed capacity in bytes (141 GB -> 141e9; where the vendor states GiB, GiB x 2^30).
    visible_memory_bytes: what the device exposes to the framework (torch total_memory), where known;
        otherwise None and ``usable_memory_bytes`` falls back to the marketed figure.
    mem_bw_bytes_per_s: peak HBM/GDDR bandwidth (datasheet), bytes/s.
    dense_flops: dense tensor-core peak per dtype in FLOP/s ("bf16", "fp16", "fp8", "fp4", "int8").
    scale_up_bw_bytes_per_s: NVLink/xGMI/ICI bandwidth per GPU per direction, bytes/s
        (PCIe per direction for PCIe cards without a bridge).
    """

    id: str
    name: str
    memory_bytes: int
    mem_bw_bytes_per_s: float
    dense_flops: dict[str, float]
    scale_up_bw_bytes_per_s: float
    visible_memory_bytes: int | None = None
    pcie_gen: int | None = None
    tdp_w: float | None = None
    vendor: str = "nvidia"
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    # Added with the catalog loader (all optional):
    visible_memory_derived: bool = False  # True: visible bytes derived from nvidia-smi MiB by the H200 ratio
    scale_up_link: str | None = None  # e.g. "NVLink 4 (18 links) through NVSwitch", "PCIe Gen4 x16"
    nvlink_bridge_bw_bytes_per_s: float | None = None  # PCIe cards: NVLink bridge per direction, bytes/s
    nvlink_bridge_gpus: int | None = None  # PCIe cards: how many cards one bridge joins
    sparse_flops: dict[str, float] = field(default_factory=dict, compare=False, hash=False)  # documentation only
    unverified: tuple[str, ...] = ()  # catalog fields not confirmed in the consulted sources
    compute_capability: float | None = None  # NVIDIA CUDA compute capability (8.0 A100, 9.0 Hopper); None elsewhere

    @property
    def usable_memory_bytes(self) -> int:
        """Bytes the device exposes (measured/reported) or, if unknown, the marketed bytes."""
        return self.visible_memory_bytes or self.memory_bytes

    def math_dtype(self, dtype: str) -> str:
        """The dtype whose tensor cores run math of ``dtype`` on this GPU: itself, or the next wider one it has.

        fp4 -> fp8 -> bf16 (a GPU without fp4 runs fp4 weights through fp8 or bf16 math).
        """
        order = {"fp4": ["fp4", "fp8", "bf16"], "fp8": ["fp8", "bf16"], "int8": ["int8", "fp8", "bf16"],
                 "int4": ["int8", "fp8", "bf16"], "fp16": ["fp16", "bf16"], "bf16": ["bf16", "fp16"]}
        for d in order.get(dtype, [dtype]):
            if self.dense_flops.get(d):
                return d
        raise ClusterfitError(f"GPU {self.id} has no dense {dtype} (or wider) peak in the catalog")

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype (math_dtype: itself or the next wider one the GPU has)."""
        return self.dense_flops[self.math_dtype(dtype)]


@dataclass(frozen=True)
class System:
    """A node (or rack) of identical GPUs.

    gpus_per_node: GPUs in one node/tray (the unit a user rents: 8 for HGX/DGX, 4 for an NVL72 tray).
    scale_up_domain_gpus: GPUs joined by NVLink/NVSwitch (8 for HGX/DGX, 72 for NVL72).
    nic_gbps_per_gpu: scale-out (InfiniBand/RoCE) line rate per GPU, Gb/s (decimal bits).
    """

    id: str
    name: str
    gpu: Gpu
    gpus_per_node: int
    scale_up_domain_gpus: int
    nic_gbps_per_gpu: float
    nics_per_node: int | None = None
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    # Added with the catalog loader (all optional):
    scale_up_link: str | None = None  # what joins the scale-up domain, in words
    network: str | None = None  # the scale-out NICs, in words
    default_for_gpu: bool = False  # the node a bare GPU name (`h100`) means
    unverified: tuple[str, ...] = ()  # catalog fields not confirmed in the consulted sources

    @property
    def net_bw_bytes_per_s(self) -> float:
        """Scale-out bandwidth per GPU per direction, bytes/s (400 Gb/s -> 50e9)."""
        return gbps_to_bytes_per_s(self.nic_gbps_per_gpu)

    @property
    def node_memory_bytes(self) -> int:
        """Marketed memory of one node, bytes."""
        return self.gpu.memory_bytes * self.gpus_per_node


# --------------------------------------------------------------------------------------------------
# Catalog loading: YAML/TOML files -> validated entries (pydantic) -> Gpu / System / CloudPriceQuote records.
# --------------------------------------------------------------------------------------------------

# PyTorch sees slightly less memory than nvidia-smi reports. Measured on one H200 SXM
# (shared/reference/measured/h200-kernels.json env): torch total_memory 150,109,880,320 bytes against
# nvidia-smi 143,771 MiB = 150,754,820,096 bytes, i.e. 0.4278% less. Used to derive visible bytes for GPUs
# where only the nvidia-smi figure is known (an extrapolation from one GPU, stated in their source notes).
H200_TORCH_VISIBLE_BYTES = 150_109_880_320
H200_NVIDIA_SMI_MIB = 143_771
TORCH_PER_NVIDIA_SMI = H200_TORCH_VISIBLE_BYTES / (H200_NVIDIA_SMI_MIB * MiB)

MAX_MEMORY_BYTES_PER_GPU = 10 * 10**12  # 10 TB: anything above is a unit mistake
MAX_MEM_BW_TBS = 100.0  # TB/s per GPU
MAX_TFLOPS = 1_000_000.0  # dense TFLOP/s per GPU (1 EFLOP/s)
MAX_LINK_GBS = 100_000.0  # GB/s per GPU, bidirectional
MAX_NIC_GBPS = 100_000.0  # Gb/s per GPU
#: Floors below any accelerator or link that serves a model (a T4 streams 0.32 TB/s and runs 65 dense fp16 TFLOP/s;
#: PCIe 1.0 x1 moves 0.5 GB/s): a smaller value is a unit mistake, and it made perf print TTFTs of 1e301 ms.
MIN_MEM_BW_TBS = 0.01  # TB/s per GPU
MIN_TFLOPS = 0.1  # dense TFLOP/s per GPU
MIN_LINK_GBS = 0.1  # GB/s per GPU, bidirectional
MIN_NIC_GBPS = 0.1  # Gb/s per GPU
MAX_TDP_W = 10_000.0
#: Highest price a catalog lists or a user passes, $ per GPU-hour (plan --price, a scenario's cost.prices).
MAX_USD_PER_GPU_HOUR = 1000.0
MAX_DOMAIN_GPUS = 1_000_000

_ID_PATTERN = r"^[a-z0-9][a-z0-9_]*$"


def normalize_name(name: str) -> str:
    """Lookup key for ids and aliases: lower case; runs of '-', ' ', '.' and '_' become one '_'."""
    return re.sub(r"[-_\s.]+", "_", name.strip().lower())


def derive_visible_bytes(nvidia_smi_mib: float) -> int:
    """Bytes PyTorch would see, from nvidia-smi's memory.total in MiB, by the measured H200 ratio."""
    return int(round(nvidia_smi_mib * MiB * TORCH_PER_NVIDIA_SMI))


class _Entry(RefuseBool):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuEntry(_Entry):
    """One accelerator as written in a catalog file (units in the key names, see catalog/hardware.yaml)."""

    name: str = Field(min_length=1)
    vendor: str = "nvidia"
    aliases: list[str] = Field(default_factory=list)
    memory_gb: float | None = Field(default=None, gt=0, description="marketed capacity, decimal GB")
    memory_gib: float | None = Field(default=None, gt=0, description="marketed capacity where stated in GiB")
    visible_memory_bytes: int | None = Field(default=None, gt=0)
    visible_memory_mib_nvidia_smi: float | None = Field(default=None, gt=0)
    mem_bw_tbs: float = Field(ge=MIN_MEM_BW_TBS, le=MAX_MEM_BW_TBS)
    bf16_tflops_dense: float = Field(ge=MIN_TFLOPS, le=MAX_TFLOPS)
    fp16_tflops_dense: float | None = Field(default=None, ge=MIN_TFLOPS, le=MAX_TFLOPS)
    fp8_tflops_dense: float | None = Field(default=None, ge=MIN_TFLOPS, le=MAX_TFLOPS)
    fp4_tflops_dense: float | None = Field(default=None, ge=MIN_TFLOPS, le=MAX_TFLOPS)
    int8_tops_dense: float | None = Field(default=None, ge=MIN_TFLOPS, le=MAX_TFLOPS)
    bf16_tflops_sparse: float | None = Field(default=None, ge=2 * MIN_TFLOPS, le=2 * MAX_TFLOPS)
    fp8_tflops_sparse: float | None = Field(default=None, ge=2 * MIN_TFLOPS, le=2 * MAX_TFLOPS)
    fp4_tflops_sparse: float | None = Field(default=None, ge=2 * MIN_TFLOPS, le=2 * MAX_TFLOPS)
    scale_up: str | None = None
    scale_up_bw_gbs_bidir: float = Field(ge=MIN_LINK_GBS, le=MAX_LINK_GBS)
    nvlink_bridge_gbs_bidir: float | None = Field(default=None, ge=MIN_LINK_GBS, le=MAX_LINK_GBS)
    nvlink_bridge_gpus: int | None = Field(default=None, ge=2)
    pcie_gen: int | None = Field(default=None, ge=1, le=8)
    tdp_w: float | None = Field(default=None, gt=0, le=MAX_TDP_W)
    compute_capability: float | None = Field(default=None, ge=1.0, le=20.0,
                                             description="NVIDIA CUDA compute capability, e.g. 9.0")
    unverified: list[str] = Field(default_factory=list)
    src: dict[str, str] = Field(default_factory=dict)
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> GpuEntry:
        if (self.memory_gb is None) == (self.memory_gib is None):
            raise ValueError("give exactly one of memory_gb (decimal GB) or memory_gib")
        if self.memory_bytes > MAX_MEMORY_BYTES_PER_GPU:
            raise ValueError(f"memory {self.memory_bytes / 1e12:g} TB per GPU is absurd (limit 10 TB); check units")
        if self.visible_memory_bytes is not None and self.visible_memory_bytes > MAX_MEMORY_BYTES_PER_GPU:
            raise ValueError("visible_memory_bytes above 10 TB per GPU is absurd; check units")
        if self.visible_memory_mib_nvidia_smi is not None and \
                self.visible_memory_mib_nvidia_smi * MiB > MAX_MEMORY_BYTES_PER_GPU:
            raise ValueError("visible_memory_mib_nvidia_smi above 10 TB per GPU is absurd; check units (MiB)")
        for key in self.unverified:
            if key not in type(self).model_fields or key in ("unverified", "src", "aliases", "notes"):
                raise ValueError(f"unverified lists unknown field '{key}'")
        return self

    @property
    def memory_bytes(self) -> int:
        """Marketed capacity in bytes (GB x 1e9, or GiB x 2^30)."""
        if self.memory_gb is not None:
            return int(round(self.memory_gb * GB))
        return int(round((self.memory_gib or 0) * GiB))


class SystemEntry(_Entry):
    """One node/rack type as written in a catalog file."""

    name: str = Field(min_length=1)
    gpu: str = Field(min_length=1, description="GPU id or alias")
    default_for_gpu: bool = False
    aliases: list[str] = Field(default_factory=list)
    gpus_per_node: int = Field(ge=1, le=1024)
    scale_up_domain_gpus: int = Field(ge=1, le=MAX_DOMAIN_GPUS)
    scale_up: str | None = None
    nic_gbps_per_gpu: float = Field(ge=MIN_NIC_GBPS, le=MAX_NIC_GBPS)
    #: informational (the scale-out bandwidth the model uses is nic_gbps_per_gpu); at least 1: a node without a NIC
    #: would contradict its nic_gbps_per_gpu
    nics_per_node: int | None = Field(default=None, ge=1, le=1024)
    network: str | None = None
    unverified: list[str] = Field(default_factory=list)
    src: dict[str, str] = Field(default_factory=dict)
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> SystemEntry:
        if self.scale_up_domain_gpus < self.gpus_per_node:
            raise ValueError(
                f"scale_up_domain_gpus ({self.scale_up_domain_gpus}) is smaller than gpus_per_node "
                f"({self.gpus_per_node}); a node's GPUs are always in one scale-up domain (PCIe at least)")
        for key in self.unverified:
            if key not in type(self).model_fields or key in ("unverified", "src", "aliases", "notes"):
                raise ValueError(f"unverified lists unknown field '{key}'")
        return self


class PriceEntry(_Entry):
    """One indicative cloud price as written in a catalog file."""

    provider: str = Field(min_length=1)
    instance: str = Field(min_length=1)
    gpu: str | None = None
    gpus_per_instance: int | None = Field(default=None, ge=1)
    rent_unit: Literal["gpu", "node"] | None = None   # None: per GPU when gpus_per_instance is 1, else whole nodes
    usd_per_gpu_hour: float = Field(gt=0, le=MAX_USD_PER_GPU_HOUR)
    usd_per_instance_hour: float | None = Field(default=None, gt=0)
    kind: str = Field(min_length=1)
    date: str | None = None
    source: str = Field(min_length=1)


class CatalogFile(_Entry):
    """The top level of a hardware catalog file (built-in or user)."""

    schema_version: int = 1
    gpus: dict[Annotated[str, StringConstraints(pattern=_ID_PATTERN)], GpuEntry] = Field(default_factory=dict)
    systems: dict[Annotated[str, StringConstraints(pattern=_ID_PATTERN)], SystemEntry] = Field(
        default_factory=dict)
    prices: list[PriceEntry] = Field(default_factory=list)


@dataclass(frozen=True)
class CloudPriceQuote:
    """An indicative cloud price: US dollars per GPU-hour (and per instance-hour where stated)."""

    provider: str
    instance: str
    gpu_id: str | None
    usd_per_gpu_hour: float
    kind: str
    date: str | None
    source: str
    gpus_per_instance: int | None = None
    usd_per_instance_hour: float | None = None
    rent_unit: str = "node"            # "gpu": the provider rents single GPUs at this price; "node": whole nodes


@dataclass(frozen=True)
class HardwareCatalog:
    """GPUs and systems by id, with case-insensitive lookup by id, alias or (for systems) bare GPU name."""

    gpus: dict[str, Gpu]
    systems: dict[str, System]
    prices: tuple[CloudPriceQuote, ...] = ()
    gpu_aliases: dict[str, str] = field(default_factory=dict, repr=False)  # normalized name -> gpu id
    system_aliases: dict[str, str] = field(default_factory=dict, repr=False)  # normalized name -> system id
    default_system: dict[str, str] = field(default_factory=dict, repr=False)  # gpu id -> system id
    files: tuple[str, ...] = ()

    def gpu(self, name: str) -> Gpu:
        """The GPU called ``name`` (id or alias, any case); a system name gives that system's GPU."""
        key = normalize_name(name)
        if key in self.gpu_aliases:
            return self.gpus[self.gpu_aliases[key]]
        if key in self.system_aliases:
            return self.systems[self.system_aliases[key]].gpu
        raise unknown("gpu", name, self._names(self.gpus))

    def system(self, name: str) -> System:
        """The system called ``name`` (id or alias, any case); a bare GPU name gives its standard node."""
        key = normalize_name(name)
        if key in self.system_aliases:
            return self.systems[self.system_aliases[key]]
        if key in self.gpu_aliases:
            gpu_id = self.gpu_aliases[key]
            if gpu_id in self.default_system:
                return self.systems[self.default_system[gpu_id]]
            raise ClusterfitError(f"GPU '{name}' ({gpu_id}) has no system in the catalog; add one with --catalog")
        raise unknown("system", name, self._names(self.systems) + self._names(self.gpus))

    @staticmethod
    def _names(items: dict[str, Gpu] | dict[str, System]) -> list[str]:
        names: list[str] = []
        for item_id, item in items.items():
            names.append(item_id)
            names.extend(item.aliases)
        return names


BUILTIN_CATALOG = "hardware.yaml"


def load_hardware(extra: list[pathlib.Path] | None = None) -> HardwareCatalog:
    """The built-in hardware catalog, plus user catalog files (YAML or TOML) that add or override entries.

    Entries in later files replace entries with the same id (whole entries, not field by field).
    The built-in catalog alone is parsed once and cached. Raises ClusterfitError naming the file,
    entry and field for any invalid value.
    """
    if not extra:
        return _builtin_catalog()
    sources = [(f"clusterfit/catalog/{BUILTIN_CATALOG}", _builtin_file())]
    sources += [(str(p), _parse_file(pathlib.Path(p))) for p in extra]
    return _build(sources)


def load_prices(extra: list[pathlib.Path] | None = None) -> list[CloudPriceQuote]:
    """Indicative cloud prices (US$ per GPU-hour) from the built-in catalog and any user catalogs."""
    return list(load_hardware(extra).prices)


@functools.lru_cache(maxsize=1)
def _builtin_file() -> CatalogFile:
    text = importlib.resources.files("clusterfit.catalog").joinpath(BUILTIN_CATALOG).read_text("utf-8")
    return _validate(_parse_text(text, f"clusterfit/catalog/{BUILTIN_CATALOG}", toml=False),
                     f"clusterfit/catalog/{BUILTIN_CATALOG}")


@functools.lru_cache(maxsize=1)
def _builtin_catalog() -> HardwareCatalog:
    return _build([(f"clusterfit/catalog/{BUILTIN_CATALOG}", _builtin_file())])


def _parse_file(path: pathlib.Path) -> CatalogFile:
    """Read and validate one user catalog file; TOML if it ends in .toml, else YAML."""
    from .inputs import read_text

    text = read_text(path, "hardware catalog")
    raw = _parse_text(text, f"hardware catalog {path}", toml=path.suffix.lower() == ".toml")
    return _validate(raw, str(path))


def _parse_text(text: str, origin: str, toml: bool) -> Any:
    from .inputs import parse_document

    return parse_document(text, origin, "toml" if toml else "yaml")


def _validate(raw: Any, origin: str) -> CatalogFile:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ClusterfitError(f"{origin}: a hardware catalog must be a mapping with 'gpus', 'systems' "
                              f"and/or 'prices', not {type(raw).__name__}")
    try:
        return CatalogFile.model_validate(raw)
    except ValidationError as exc:
        raise ClusterfitError(_catalog_errors_message(exc, origin)) from None


def _catalog_errors_message(exc: ValidationError, origin: str) -> str:
    """One line: 'invalid hardware catalog: file: gpus.h100_sxm.memory_gb: Input should be greater than 0 (got -80)',
    further problems after '; ' (an error is one line: the CLI prints it after 'error:')."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]).replace(".[key]", " (id)")
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or err["type"] == "missing" else f" (got {brief(got)})"
        parts.append(f"{loc or '(top level)'}: {msg}{shown}")
    return f"invalid hardware catalog: {origin}: " + "; ".join(parts)


def _build(sources: list[tuple[str, CatalogFile]]) -> HardwareCatalog:
    """Merge validated files in order (later ids replace earlier ones), resolve references, build records."""
    gpu_entries: dict[str, tuple[str, GpuEntry]] = {}
    system_entries: dict[str, tuple[str, SystemEntry]] = {}
    prices: list[tuple[str, PriceEntry]] = []
    for origin, cat in sources:
        gpu_entries.update({gid: (origin, e) for gid, e in cat.gpus.items()})
        system_entries.update({sid: (origin, e) for sid, e in cat.systems.items()})
        prices.extend((origin, p) for p in cat.prices)

    gpus = {gid: _gpu_record(gid, e) for gid, (_, e) in gpu_entries.items()}
    gpu_aliases = _alias_map({gid: (o, e.aliases) for gid, (o, e) in gpu_entries.items()}, "gpus", sources)

    systems: dict[str, System] = {}
    rank = {origin: i for i, (origin, _) in enumerate(sources)}
    explicit_default: dict[str, tuple[int, str]] = {}  # gpu id -> (file rank, system id)
    first_system: dict[str, str] = {}  # gpu id -> first system using it
    for sid, (origin, e) in system_entries.items():
        gpu_id = gpu_aliases.get(normalize_name(e.gpu))
        if gpu_id is None:
            hits = close_matches(e.gpu, list(gpus) + [a for g in gpus.values() for a in g.aliases])
            hint = f" Did you mean: {', '.join(hits)}?" if hits else ""
            raise ClusterfitError(f"invalid hardware catalog: {origin}: systems.{sid}.gpu: unknown gpu "
                                  f"'{e.gpu}'.{hint}")
        systems[sid] = _system_record(sid, e, gpus[gpu_id])
        first_system.setdefault(gpu_id, sid)
        if e.default_for_gpu:
            previous = explicit_default.get(gpu_id)
            if previous is not None and previous[0] == rank[origin]:
                raise ClusterfitError(f"invalid hardware catalog: {origin}: systems.{sid}.default_for_gpu: "
                                      f"'{previous[1]}' is already the default system for {gpu_id}")
            if previous is None or rank[origin] > previous[0]:
                explicit_default[gpu_id] = (rank[origin], sid)
    default_system = {g: explicit_default[g][1] if g in explicit_default else s for g, s in first_system.items()}
    system_aliases = _alias_map({sid: (o, e.aliases) for sid, (o, e) in system_entries.items()}, "systems",
                                sources)

    price_records = []
    for origin, p in prices:
        gpu_id = None
        if p.gpu is not None:
            gpu_id = gpu_aliases.get(normalize_name(p.gpu))
            if gpu_id is None:
                raise ClusterfitError(f"invalid hardware catalog: {origin}: prices ({p.provider} {p.instance}).gpu: "
                                      f"unknown gpu '{p.gpu}'")
        price_records.append(CloudPriceQuote(provider=p.provider, instance=p.instance, gpu_id=gpu_id,
                                   usd_per_gpu_hour=p.usd_per_gpu_hour, kind=p.kind, date=p.date,
                                   source=p.source, gpus_per_instance=p.gpus_per_instance,
                                   usd_per_instance_hour=p.usd_per_instance_hour,
                                   rent_unit=p.rent_unit or ("gpu" if p.gpus_per_instance == 1 else "node")))

    return HardwareCatalog(gpus=gpus, systems=systems, prices=tuple(price_records), gpu_aliases=gpu_aliases,
                           system_aliases=system_aliases, default_system=default_system,
                           files=tuple(o for o, _ in sources))


def _alias_map(items: dict[str, tuple[str, list[str]]], section: str,
               sources: list[tuple[str, CatalogFile]]) -> dict[str, str]:
    """normalized id/alias -> id. Ids always win over aliases; a clash inside one file is an error,
    a clash with an earlier file is resolved in favour of the later file."""
    rank = {origin: i for i, (origin, _) in enumerate(sources)}
    out: dict[str, str] = {normalize_name(i): i for i in items}
    owner_rank: dict[str, int] = {}
    for item_id, (origin, aliases) in sorted(items.items(), key=lambda kv: rank[kv[1][0]]):
        for alias in aliases:
            key = normalize_name(alias)
            if not key:
                raise ClusterfitError(f"invalid hardware catalog: {origin}: {section}.{item_id}.aliases: empty alias")
            current = out.get(key)
            if current is None or current == item_id:
                out[key] = item_id
                owner_rank[key] = rank[origin]
                continue
            if normalize_name(current) == key:  # the alias is another entry's id
                raise ClusterfitError(f"invalid hardware catalog: {origin}: {section}.{item_id}.aliases: "
                                      f"'{alias}' is the id of {section}.{current}")
            if owner_rank.get(key) == rank[origin]:
                raise ClusterfitError(f"invalid hardware catalog: {origin}: {section}.{item_id}.aliases: "
                                      f"'{alias}' is also an alias of {section}.{current}")
            out[key] = item_id
            owner_rank[key] = rank[origin]
    return out


def _gpu_record(gpu_id: str, e: GpuEntry) -> Gpu:
    """A catalog entry as a Gpu: bytes, bytes/s per direction, FLOP/s dense."""
    visible = e.visible_memory_bytes
    if visible is None and e.visible_memory_mib_nvidia_smi is not None:
        visible = derive_visible_bytes(e.visible_memory_mib_nvidia_smi)
    dense = {"bf16": e.bf16_tflops_dense, "fp16": e.fp16_tflops_dense or e.bf16_tflops_dense,
             "fp8": e.fp8_tflops_dense, "fp4": e.fp4_tflops_dense, "int8": e.int8_tops_dense}
    return Gpu(
        id=gpu_id,
        name=e.name,
        memory_bytes=e.memory_bytes,
        mem_bw_bytes_per_s=e.mem_bw_tbs * 1e12,
        dense_flops={k: v * 1e12 for k, v in dense.items() if v},
        scale_up_bw_bytes_per_s=bidir_gbs_to_bytes_per_s_per_dir(e.scale_up_bw_gbs_bidir),
        visible_memory_bytes=visible,
        pcie_gen=e.pcie_gen,
        tdp_w=e.tdp_w,
        vendor=e.vendor,
        aliases=tuple(e.aliases),
        sources=dict(e.src),
        visible_memory_derived=e.visible_memory_bytes is None and visible is not None,
        scale_up_link=e.scale_up,
        nvlink_bridge_bw_bytes_per_s=(bidir_gbs_to_bytes_per_s_per_dir(e.nvlink_bridge_gbs_bidir)
                                      if e.nvlink_bridge_gbs_bidir else None),
        nvlink_bridge_gpus=e.nvlink_bridge_gpus,
        sparse_flops={k: v * 1e12 for k, v in {"bf16": e.bf16_tflops_sparse, "fp8": e.fp8_tflops_sparse,
                                               "fp4": e.fp4_tflops_sparse}.items() if v},
        unverified=tuple(e.unverified),
        compute_capability=e.compute_capability,
    )


def _system_record(system_id: str, e: SystemEntry, gpu: Gpu) -> System:
    return System(
        id=system_id,
        name=e.name,
        gpu=gpu,
        gpus_per_node=e.gpus_per_node,
        scale_up_domain_gpus=e.scale_up_domain_gpus,
        nic_gbps_per_gpu=e.nic_gbps_per_gpu,
        nics_per_node=e.nics_per_node,
        aliases=tuple(e.aliases),
        sources=dict(e.src),
        scale_up_link=e.scale_up,
        network=e.network,
        default_for_gpu=e.default_for_gpu,
        unverified=tuple(e.unverified),
    )


def bidir_gbs_to_bytes_per_s_per_dir(gbs_bidir: float) -> float:
    """Bidirectional GB/s (both directions summed, decimal) -> bytes/s in one direction (900 -> 450e9)."""
    return gbs_bidir * 1e9 / 2


def gbps_to_bytes_per_s(gbps: float) -> float:
    """Line rate in decimal Gb/s -> bytes/s (400 Gb/s -> 50e9)."""
    return gbps * 1e9 / 8
