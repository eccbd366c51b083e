"""The composition root: names in, a compiled replica out.

Every front end (``fit``, ``perf``, ``plan``, ``simulate``, the accuracy harness, later the HTTP API and the
deployment files) turns "model name + system + precision + layout + engine (+ catalog files)" into domain
objects here and nowhere else:

    catalog = Catalog.load(hardware=[Path("my-hw.yaml")])
    replica = build_replica(catalog, "llama-3.1-8b", "h200", precision="fp8", tp=2, engine="vllm")
    replica.step.decode_step_s(32, 4096)

The data flows one way: catalogs -> specs (model, system, precision, layout, engine) -> the memory and step models.

Engine settings (``--max-num-seqs``, ``--max-num-batched-tokens``, ``--gpu-memory-utilization``, ``--enforce-eager``;
``engines.EngineSettings``) travel with the catalog (``Catalog.load(..., settings=...)``) and are applied to the
Engine in ``Catalog.engine``, the one place every front end (perf, the planner's search, the simulator) gets its
engine from. A measured kernel profile (``--profile``, clusterfit.profile) travels the same way
(``Catalog.load(..., profile=...)``): ``Catalog.curves`` gives its curves for the GPU it was measured on and the
shipped H200-derived curves for every other GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .arch import ModelArch, load_model
from .errors import ParameterError
from .precision import experts_format, resolve_precision

if TYPE_CHECKING:
    from .engines import Engine, EngineSettings
    from .hardware import Gpu, HardwareCatalog, System
    from .layout import Layout
    from .perfmodel.kernels import KernelCurves
    from .perfmodel.step import StepModel
    from .precision import Precision
    from .profile import Profile
    from .speculative import DraftHead

#: KV token slots the default (smallest) layout must leave when no layout is given.
DEFAULT_MIN_KV_TOKENS = 32768
#: How far a profile's device memory (bytes) may be from the catalog GPU's usable memory (bytes), as a fraction.
PROFILE_MEMORY_TOLERANCE = 0.25


@dataclass(frozen=True)
class Catalog:
    """The catalogs in force: the built-in hardware catalog plus user files, the engines file, the user's
    engine settings (None: the engines' defaults) and a measured kernel profile (None: the shipped curves)."""

    hardware: HardwareCatalog
    engines_file: str | None = None
    settings: EngineSettings | None = None
    profile: Profile | None = None
    draft_head: DraftHead | None = None

    @classmethod
    def load(cls, hardware: list[Path] | tuple[Path, ...] | None = None, engines_file: str | None = None,
             settings: EngineSettings | None = None, profile: Profile | None = None,
             draft_head: DraftHead | None = None) -> Catalog:
        """The catalogs; ``profile`` is checked against the hardware catalog (profile.check_profile)."""
        from .hardware import load_hardware

        hw = load_hardware(list(hardware or ()) or None)
        if profile is not None:
            from .profile import check_profile

            profile = check_profile(profile, hw)
        return cls(hw, engines_file, settings, profile, draft_head)

    def curves(self, gpu: Gpu) -> KernelCurves:
        """The kernel curves for ``gpu``: the profile's where it was measured on that GPU, else the shipped ones."""
        from .perfmodel.kernels import load_curves

        if self.profile is not None and self.profile.gpu.id == gpu.id:
            from .profile import profile_curves

            return profile_curves(self.profile)
        return load_curves()

    def check_profile_gpu(self, systems: list[System]) -> None:
        """A profile must be for the GPU of at least one of ``systems`` (those predicted), and its device must look
        like that GPU (memory within PROFILE_MEMORY_TOLERANCE of the catalog's usable memory, both in bytes; the
        same compute capability): else an error naming both."""
        if self.profile is None:
            return
        pg = self.profile.gpu
        match = next((s.gpu for s in systems if s.gpu.id == pg.id), None)
        if match is not None:
            tol, usable = PROFILE_MEMORY_TOLERANCE, match.usable_memory_bytes
            if pg.memory_bytes is not None and not 1 - tol <= pg.memory_bytes / usable <= 1 + tol:
                which = (f"as the device reports it; {match.memory_bytes / 1e9:g} GB marketed"
                         if match.visible_memory_bytes else "marketed")
                raise ParameterError("profile", f"gpu.memory_bytes {pg.memory_bytes:,} bytes "
                                     f"({pg.memory_bytes / 1e9:.1f} GB) is not {pg.id}'s memory: the hardware catalog "
                                     f"has {usable:,} bytes ({usable / 1e9:.1f} GB, {which}), and a profile's must be "
                                     f"within {tol:.0%} of it: the profile was measured on another device")
            cc = match.compute_capability
            if pg.compute_capability is not None and cc is not None and pg.compute_capability != f"{cc:.1f}":
                raise ParameterError("profile", f"gpu.compute_capability {pg.compute_capability} is not {pg.id}'s "
                                     f"({cc:.1f} in the hardware catalog): the profile was measured on another device")
            return
        have = ", ".join(dict.fromkeys(f"{s.id} ({s.gpu.id})" for s in systems))
        raise ParameterError("profile", f"the profile was measured on {self.profile.gpu.id} "
                             f"({self.profile.gpu.device_name}), but the prediction is for {have}: calibrate on "
                             "that GPU, or drop the profile")

    def system(self, name: str) -> System:
        return self.hardware.system(name)

    def distinct_systems(self, names: list[str], parameter: str = "systems") -> list[System]:
        """The systems ``names`` name, in order. Two names of one system (an alias, a GPU name and its system:
        'h200' and 'hgx_h200') are refused as the same name twice is (schema.DistinctNames, before names are
        resolved): the system would be searched and shown twice. The error names ``parameter``."""
        out: list[System] = []
        first: dict[str, str] = {}   # system id -> the name that gave it
        for name in names:
            system = self.system(name)
            if system.id in first:
                raise ParameterError(parameter, f"{system.id} is given twice (as {first[system.id]!r} and {name!r})")
            first[system.id] = name
            out.append(system)
        return out

    def engine(self, name: str, system: System | None = None) -> Engine:
        """Engine ``name`` with the constants of ``system``'s GPU family applied (when a system is given), then the
        user's settings (``settings``; by_gpu_family holds fitted constants only, never these settings)."""
        from .engines import get_engine

        eng = get_engine(name, self.engines_file)
        if system is not None:
            eng.check_runs_on(system)
        eng = eng.for_gpu(system.gpu.id).for_device(system.gpu) if system is not None else eng
        eng = self.settings.apply(eng) if self.settings is not None else eng
        if self.draft_head is not None:
            eng = eng.with_draft_head(self.draft_head)
        if system is not None:
            eng.check_settings()   # with the GPU's defaults in place
        return eng


@dataclass(frozen=True)
class CompiledReplica:
    """One compiled replica: what it runs, where, how it is split, under which engine, and its step model."""

    model: ModelArch
    system: System
    precision: Precision
    layout: Layout
    engine: Engine
    step: StepModel

    @property
    def gpus(self) -> int:
        return self.layout.gpus


def choose_layout(model: ModelArch, system: System, precision: Precision, engine: Engine, gpus: int | None = None,
                  tp: int | None = None, pp: int | None = None, ep: int | None = None, dp: int | None = None,
                  min_kv_tokens: int = DEFAULT_MIN_KV_TOKENS) -> Layout:
    """The layout given by the parallel sizes; else the default layout over ``gpus``; else the smallest layout
    (the fewest GPUs, 1, 2, 4, ... up to 8 nodes) that leaves ``min_kv_tokens`` KV token slots."""
    from .layout import layout_from_options
    from .memory import smallest_layout

    return layout_from_options(model, system, gpus, tp, pp, ep, dp) or smallest_layout(
        model, system, precision, engine, min_kv_tokens)


def compile_replica(model: ModelArch, system: System, precision: Precision, layout: Layout, engine: Engine,
                    kv_budget_bytes_per_gpu: int | None = None, curves: KernelCurves | None = None) -> CompiledReplica:
    """Compile the step model of a resolved (model, system, precision, layout, engine); ``curves``: the kernel
    curves (None: the shipped ones; ``Catalog.curves`` gives a profile's)."""
    from .perfmodel import compile_step

    step = compile_step(model, system, layout, precision, engine, kv_budget_bytes_per_gpu=kv_budget_bytes_per_gpu,
                        curves=curves)
    # compile_step resolves the engine for the GPU, the layout and its KV pool: the replica runs that engine
    return CompiledReplica(model, system, precision, layout, step.engine, step)


def build_replica(catalog: Catalog, model: str | ModelArch, system: str | System, *, precision: str | None = None,
                  experts_precision: str | None = None, kv_dtype: str | None = None, gpus: int | None = None,
                  tp: int | None = None, pp: int | None = None, ep: int | None = None, dp: int | None = None,
                  engine: str = "vllm", min_kv_tokens: int = DEFAULT_MIN_KV_TOKENS,
                  require_kv: bool = True, speculative: str | None = None) -> CompiledReplica:
    """Names in, compiled replica out (see the module docstring). ``require_kv``: a layout that leaves no memory
    for the KV cache is an error naming the layout and precision. ``speculative``: the drafter's method when the
    engine runs speculative decoding (its defaults under it, Engine.for_speculative, on the chosen layout's
    attention-DP ranks; mtp loads the checkpoint's MTP layers)."""
    from .errors import ClusterfitError

    m = load_model(model) if isinstance(model, str) else model
    sysm = catalog.system(system) if isinstance(system, str) else system
    catalog.check_profile_gpu([sysm])
    prec = resolve_precision(m, precision, experts_precision, kv_dtype)
    eng = catalog.engine(engine, sysm)
    eng.check_experts(experts_format(m, prec), sysm.gpu)
    layout = choose_layout(m, sysm, prec, eng, gpus, tp, pp, ep, dp, min_kv_tokens)
    if speculative is not None:
        eng = eng.for_speculative(layout.dp, speculative)
    rep = compile_replica(m, sysm, prec, layout, eng, curves=catalog.curves(sysm.gpu))
    if require_kv and rep.step.kv_capacity_tokens < 1:
        raise ClusterfitError(f"{m.name} does not fit on {layout.gpus} x {sysm.gpu.id} with layout {layout.label()} "
                              f"and precision {prec.name}: no memory left for the KV cache")
    return rep
