"""Request bodies of the HTTP API: the API's own request models, minus what would let a request name a server
file, plus an inline config.json.

Each body subclasses the request model of ``clusterfit.schema`` (same fields, defaults and bounds) and:

- refuses the fields that name server paths: ``catalog`` must be empty, ``scenario`` and ``trace`` null;
- takes ``model`` as a bundled name or alias only (checked by ``custom_model.bundled_model`` before any work), or,
  with ``config`` (the content of a Hugging Face config.json), as the display name of that model;
- bounds the work one call can ask for: at most ``MAX_SIM_REQUESTS`` simulated requests;
- takes numbers as JSON numbers only (``inputs.NumbersAsNumbers``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from ..inputs import NumbersAsNumbers
from ..schema import DeployRequest, FitRequest, PerfRequest, PlanRequest, Schema, SimulateRequest

#: Most requests one HTTP call may simulate (``simulate.requests``, ``plan.verify_requests``).
MAX_SIM_REQUESTS = 200_000



def _config() -> Any:
    return Field(None, description="The content of a Hugging Face config.json, to size a model that is not "
                 "bundled (`model` is then its display name). The server reads no file a request names.")


def _no_catalog() -> Any:
    return Field(default_factory=list, max_length=0,
                 description="Not accepted over HTTP (it names server files): must be empty")


def _no_file() -> Any:
    return Field(None, description="Not accepted over HTTP (it names a server file): must be null")


class FitBody(FitRequest, NumbersAsNumbers):
    """``clusterfit fit`` over HTTP (see FitRequest); ``model`` is a bundled name, or give ``config``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "zai-org/GLM-5.3", "precision": "fp8", "systems": ["h100", "h200", "b200"], "context": 32768}]})

    config: dict[str, Any] | None = _config()
    catalog: list[Path] = _no_catalog()


class PerfBody(PerfRequest, NumbersAsNumbers):
    """``clusterfit perf`` over HTTP (see PerfRequest); ``model`` is a bundled name, or give ``config``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "llama-3.1-8b", "system": "h200", "tp": 1, "isl": 1024, "osl": 128, "batch": 1, "context": 1024}]})

    model: str | None = Field(  # type: ignore[assignment]   # optional here: a config may come instead
        None, description="A bundled model name or alias (required unless `config` is given: then the config's "
        "display name)")
    config: dict[str, Any] | None = _config()
    catalog: list[Path] = _no_catalog()


class PlanBody(PlanRequest, NumbersAsNumbers):
    """``clusterfit plan`` over HTTP (see PlanRequest); ``model`` is a bundled name, or give ``config``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "zai-org/GLM-5.3", "isl": 4096, "osl": 1024, "rate": 5, "ttft_ms": 2000, "tpot_ms": 50, "systems": ["h200", "b200"]}]})

    config: dict[str, Any] | None = _config()
    catalog: list[Path] = _no_catalog()
    scenario: None = _no_file()
    verify_requests: int | None = Field(None, ge=100, le=MAX_SIM_REQUESTS,
                                        description="Requests `verify` simulates, at least 100 (default 20,000)")


class DeployBody(DeployRequest, NumbersAsNumbers):
    """``clusterfit deploy`` over HTTP (see DeployRequest): answers the files' text; nothing is written on the
    server (no ``out``, no ``plan_file``)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "zai-org/GLM-5.3", "precisions": ["fp8"], "isl": 8192, "osl": 1024, "rate": 2, "ttft_ms": 3000, "tpot_ms": 60, "systems": ["h200"], "engine": "vllm", "target": "kubernetes"}]})

    config: dict[str, Any] | None = _config()
    catalog: list[Path] = _no_catalog()
    scenario: None = _no_file()
    plan_file: None = _no_file()
    out: None = _no_file()


class SimulateBody(SimulateRequest, NumbersAsNumbers):
    """``clusterfit simulate`` over HTTP (see SimulateRequest); ``model`` is a bundled name, or give ``config``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "llama-3.1-8b", "system": "h200", "replicas": 2, "rate": 10, "requests": 2000, "isl": 1000, "osl": 200}]})

    config: dict[str, Any] | None = _config()
    catalog: list[Path] = _no_catalog()
    scenario: None = _no_file()
    trace: None = _no_file()
    requests: int | None = Field(None, ge=1, le=MAX_SIM_REQUESTS, description="Requests to simulate (default 10,000)")


class ErrorBody(Schema):
    """An error: the message the command line prints (after ``error:``), and the parameter it names, if any."""

    detail: str
    parameter: str | None = None
