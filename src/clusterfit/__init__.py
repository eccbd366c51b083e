"""clusterfit: size, plan and simulate LLM serving clusters.

Data flows one way: catalogs -> specs -> physics (memory, time) -> plans -> simulation / reports.

The public API (loaded on first use, so ``import clusterfit`` stays light):

    import clusterfit as cf
    cf.fit(model="zai-org/GLM-5.3", precision="fp8", systems=["h200"], context=32768)    -> cf.FitResult
    cf.perf(model="llama-3.1-8b", system="h200", tp=1, isl=1024, osl=128, batch=1, context=1024)
    cf.plan(model="deepseek-v3", isl=4096, osl=1024, rate=5, ttft_ms=2000, tpot_ms=50, systems=["h200"])
    cf.simulate(model="llama-3.1-8b", system="h200", replicas=4, rate=20, requests=5000, isl=1000, osl=200)
    cf.deploy(model="llama-3.1-8b", isl=1000, osl=200, rate=2, tpot_ms=50, systems=["h200"], target="shell")

``clusterfit.deploy`` is the API function, although a subpackage of the same name holds its renderer: import that
as ``from clusterfit.deploy.render import ...`` (importing it leaves the package's ``deploy`` the function).
"""

from __future__ import annotations

import sys
import types
from typing import Any

__version__ = "0.1.0"

_API = ("fit", "perf", "plan", "simulate", "simulation_run", "deploy", "models", "model_info", "systems")
_SCHEMA = ("FitRequest", "FitResult", "PerfRequest", "PerfResult", "PlanRequest", "PlanResult", "SimulateRequest",
           "SimResult", "DeployRequest", "DeployResult", "ModelSummary", "ModelList", "HardwareList", "ParameterError")
__all__ = [*_API, *_SCHEMA, "ClusterfitError", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from . import api

        return getattr(api, name)
    if name in _SCHEMA:
        from . import schema

        return getattr(schema, name)
    if name == "ClusterfitError":
        from .errors import ClusterfitError

        return ClusterfitError
    raise AttributeError(f"module 'clusterfit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """This package's module type: importing a subpackage named like an API function (``clusterfit.deploy``) does
    not bind it over the function (the import system sets the submodule as an attribute of its parent; it stays in
    ``sys.modules``, where ``from clusterfit.deploy.render import ...`` finds it)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
