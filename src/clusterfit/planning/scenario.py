"""Scenario files (YAML or TOML): one workload description shared by `plan`, `simulate` and the web app.

Example (see ``examples/*.yaml``)::

    model: zai-org/GLM-5.3
    systems: [hgx_h200, dgx_b200, dgx_h100]   # optional; default: every catalog system
    precision: fp8                            # or a list; default: the checkpoint's own format
    kv_dtype: fp8                             # optional (or a list)
    engine: vllm
    engine_settings:                # optional; the engines' own flags (command-line options win over these)
      max_num_seqs: 256             # vLLM max_num_seqs / SGLang max_running_requests / TensorRT-LLM max_batch_size
      max_num_batched_tokens: 8192  # vLLM / SGLang chunked_prefill_size / TensorRT-LLM max_num_tokens
      gpu_memory_utilization: 0.9   # vLLM / SGLang mem_fraction_static / TensorRT-LLM free_gpu_memory_fraction
      enforce_eager: false          # vLLM --enforce-eager: no CUDA graphs
    workload:
      isl: 4000                     # tokens; or {mean: 2000, p50: 1200, p90: 4500} or {tokens: [...], counts: [...]}
      osl: {mean: 500, p90: 1200}
      load: {requests_per_s: 10}    # or {output_tokens_per_s: 5000} or {concurrent_sessions: 200}
      prefix_cache_hit_rate: 0.0
      agent: {shared_prefix_tokens: 8000, turns: 10, input_tokens_per_turn: 400,
              output_tokens_per_turn: 600, think_time_s: 5}   # optional; replaces isl/osl
    slo: {ttft_ms: 2000, ttft_percentile: 90, tpot_ms: 50}   # or tokens_per_s_per_user: 20
                                    # tpot_percentile: 90 (default), min_goodput: 0.9 (default)
    cost:
      prices: {hgx_h200: 3.5}       # $/GPU-hour overrides
      endpoint: {input_per_mtok: 0.6, output_per_mtok: 2.2}   # $/million tokens
      failover: 1                   # N+k spare replicas
    search: {max_nodes_per_replica: 4, disaggregated: true}
    simulation: {...}               # owned by `clusterfit simulate` (plan --verify runs it; plan validates it)

Validation is strict: unknown keys and bad values are errors naming the field (``workload.load``).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_validator

from ..engines import EngineSettings
from ..schema import EngineName
from ..errors import ClusterfitError, ParameterError
from ..inputs import RefuseBool
from ..hardware import MAX_USD_PER_GPU_HOUR
from .workload import SLO, AgentSessions, LengthDist, Load, Workload, unjudged_slo_term


class _StrictFrozen(RefuseBool):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LengthStatsSpec(_StrictFrozen):
    """A length distribution: mean and/or percentiles, or a histogram (tokens + counts)."""

    mean: float | None = Field(default=None, gt=0)
    p50: float | None = Field(default=None, gt=0)
    p75: float | None = Field(default=None, gt=0)
    p90: float | None = Field(default=None, gt=0)
    p95: float | None = Field(default=None, gt=0)
    p99: float | None = Field(default=None, gt=0)
    tokens: list[float] | None = None
    counts: list[float] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> LengthStatsSpec:
        hist = self.tokens is not None or self.counts is not None
        pct = any(v is not None for v in (self.mean, self.p50, self.p75, self.p90, self.p95, self.p99))
        if hist and pct:
            raise ValueError("give either a histogram (tokens + counts) or mean/percentiles, not both")
        if hist and (self.tokens is None or self.counts is None):
            raise ValueError("a histogram needs both 'tokens' and 'counts'")
        if not hist and not pct:
            raise ValueError("give a number, mean/percentiles (mean, p50, p75, p90, p95, p99) or tokens + counts")
        return self

    def to_dist(self) -> LengthDist:
        if self.tokens is not None:
            return LengthDist.from_histogram(self.tokens, self.counts or [])
        pct: dict[float, float] = {q: v for q, v in ((50, self.p50), (75, self.p75), (90, self.p90), (95, self.p95),
                                                     (99, self.p99)) if v is not None}
        if not pct and self.mean is not None:
            return LengthDist.fixed(self.mean)
        return LengthDist.from_percentiles(self.mean, pct)


class LoadSpec(_StrictFrozen):
    """Exactly one of: requests/s, output tokens/s (whole cluster), concurrent sessions."""

    requests_per_s: float | None = Field(default=None, gt=0)
    output_tokens_per_s: float | None = Field(default=None, gt=0)
    concurrent_sessions: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _exactly_one(self) -> LoadSpec:
        given = [k for k, v in self.model_dump().items() if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of requests_per_s, output_tokens_per_s, concurrent_sessions"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self

    def to_load(self) -> Load:
        if self.requests_per_s is not None:
            return Load("requests_per_s", self.requests_per_s)
        if self.output_tokens_per_s is not None:
            return Load("output_tokens_per_s", self.output_tokens_per_s)
        assert self.concurrent_sessions is not None  # _exactly_one: one of the three is given
        return Load("concurrent_sessions", self.concurrent_sessions)


class AgentSpec(_StrictFrozen):
    shared_prefix_tokens: int = Field(ge=0)
    turns: int = Field(ge=1)
    input_tokens_per_turn: int = Field(ge=1)
    output_tokens_per_turn: int = Field(ge=1)
    think_time_s: float = Field(default=0.0, ge=0)


class WorkloadSpec(_StrictFrozen):
    isl: float | LengthStatsSpec | None = None
    osl: float | LengthStatsSpec | None = None
    load: LoadSpec
    prefix_cache_hit_rate: float | None = Field(default=None, ge=0, le=1)
    agent: AgentSpec | None = None

    @model_validator(mode="after")
    def _lengths(self) -> WorkloadSpec:
        if self.agent is None and (self.isl is None or self.osl is None):
            raise ValueError("give 'isl' and 'osl' (or an 'agent' section)")
        if self.agent is not None and (self.isl is not None or self.osl is not None):
            raise ValueError("an 'agent' section defines the lengths; remove 'isl' and 'osl'")
        for name in ("isl", "osl"):
            v = getattr(self, name)
            if isinstance(v, (int, float)) and v <= 0:
                raise ValueError(f"{name} must be > 0 tokens")
        return self

    def to_workload(self) -> Workload:
        load = self.load.to_load()
        if self.agent is not None:
            hit = 1.0 if self.prefix_cache_hit_rate is None else self.prefix_cache_hit_rate
            return Workload.agentic(AgentSessions(**self.agent.model_dump()), load, hit)
        isl, osl = (_dist(f"workload.{n}", v) for n, v in (("isl", self.isl), ("osl", self.osl)))
        return Workload(isl, osl, load, self.prefix_cache_hit_rate or 0.0)


def _dist(field: str, v: float | LengthStatsSpec | None) -> LengthDist:
    if v is None:  # WorkloadSpec._lengths requires isl and osl without an agent section
        raise ClusterfitError(f"{field}: missing")
    try:
        if isinstance(v, LengthStatsSpec):
            return v.to_dist()
        return LengthDist.fixed(float(v))
    except ClusterfitError as exc:
        raise ClusterfitError(f"{field}: {exc}") from None


class SLOSpec(_StrictFrozen):
    ttft_ms: float | None = Field(default=None, gt=0)
    ttft_percentile: float = Field(default=90, ge=50, lt=100)   # as the command line's --ttft-percentile
    tpot_ms: float | None = Field(default=None, gt=0)
    tokens_per_s_per_user: float | None = Field(default=None, gt=0)
    tpot_percentile: float = Field(default=90, ge=50, lt=100)
    min_goodput: float = Field(default=0.9, ge=0, le=1)

    @model_validator(mode="after")
    def _one_tpot(self) -> SLOSpec:
        if self.tpot_ms is not None and self.tokens_per_s_per_user is not None:
            raise ValueError("give tpot_ms or tokens_per_s_per_user, not both")
        return self

    def to_slo(self) -> SLO:
        tpot = self.tpot_ms / 1e3 if self.tpot_ms is not None else (
            1.0 / self.tokens_per_s_per_user if self.tokens_per_s_per_user else None)
        return SLO(self.ttft_ms / 1e3 if self.ttft_ms is not None else None, tpot, float(self.ttft_percentile),
                   float(self.tpot_percentile), float(self.min_goodput))

    def check_judged(self) -> None:
        """A percentile or a least goodput written without the target it judges would be ignored (the command
        line refuses the same, ``unjudged_slo_term``)."""
        tpot = self.tpot_ms is not None or self.tokens_per_s_per_user is not None
        term = unjudged_slo_term(self.ttft_ms is not None, tpot, self.model_fields_set)
        if term is not None:
            name, judged = term
            give = {"ttft_percentile": "slo.ttft_ms", "tpot_percentile": "slo.tpot_ms (or tokens_per_s_per_user)",
                    "min_goodput": "slo.ttft_ms or slo.tpot_ms"}[name]
            raise ClusterfitError(f"slo.{name}: judges {judged}, which this slo does not set; give {give}, or "
                                  f"remove {name}")


def check_agent_lengths(sc: Scenario, path: object, isl: float | None, osl: float | None) -> None:
    """--isl / --osl over a scenario with an agent section would replace its turns, which define the lengths (the
    scenario itself refuses isl and osl beside one): a ParameterError naming the option. ``plan`` and ``simulate``
    both check it."""
    given = [n for n, v in (("isl", isl), ("osl", osl)) if v is not None]
    if sc.workload.agent is not None and given:
        raise ParameterError(given[0], f"scenario file {path} has an agent section (workload.agent), whose turns "
                             "define the lengths; drop " + " and ".join(f"--{n}" for n in given)
                             + ", or run without the scenario")


class EndpointSpec(_StrictFrozen):
    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class CostSpec(_StrictFrozen):
    prices: dict[str, float] = Field(default_factory=dict)
    endpoint: EndpointSpec | None = None
    failover: int = Field(default=0, ge=0, le=1000)
    hours_per_month: float = Field(default=730.0, gt=0, le=744)

    @model_validator(mode="before")
    @classmethod
    def _prices(cls, data: Any) -> Any:
        """$/GPU-hour in (0, MAX_USD_PER_GPU_HOUR], as --price takes them (true was read as $1)."""
        value = data.get("prices") if isinstance(data, dict) else None
        if isinstance(value, dict):
            bad = [str(k) for k, v in value.items() if isinstance(v, bool) or not isinstance(v, int | float)
                   or not 0 < v <= MAX_USD_PER_GPU_HOUR]
            if bad:
                raise ValueError(f"prices must be numbers in (0, {MAX_USD_PER_GPU_HOUR:,.0f}] $/GPU-hour (bad: "
                                 f"{', '.join(bad)})")
        return data


class SearchSpec(_StrictFrozen):
    max_nodes_per_replica: int = Field(default=4, ge=1, le=64)
    disaggregated: bool = True
    max_batch: int | None = Field(default=None, ge=1)


class EngineSettingsSpec(_StrictFrozen):
    """The ``engine_settings:`` section: settings passed to the engine, with its own names (ranges as the
    command-line options; ``engines.EngineSettings`` says what each means per engine)."""

    max_num_seqs: int | None = Field(default=None, ge=1, le=1_048_576)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=1_048_576)
    gpu_memory_utilization: float | None = Field(default=None, ge=0.05, le=1.0)
    enforce_eager: bool | None = None

    def to_settings(self) -> EngineSettings:
        return EngineSettings(self.max_num_seqs, self.max_num_batched_tokens, self.gpu_memory_utilization,
                              self.enforce_eager)


class Scenario(_StrictFrozen):
    """A validated scenario file."""

    model: str
    systems: list[str] | None = Field(default=None, min_length=1)   # omitted, not empty, for every system
    precision: str | list[str] | None = None
    kv_dtype: str | list[str] | None = None
    engine: EngineName = "vllm"
    engine_settings: EngineSettingsSpec = Field(default_factory=EngineSettingsSpec)
    workload: WorkloadSpec
    slo: SLOSpec = Field(default_factory=SLOSpec)
    cost: CostSpec = Field(default_factory=CostSpec)
    search: SearchSpec = Field(default_factory=SearchSpec)
    simulation: Any = None
    name: str | None = None
    description: str | None = None

    def precisions(self) -> list[str | None]:
        return _as_list(self.precision)

    def kv_dtypes(self) -> list[str | None]:
        return _as_list(self.kv_dtype)

    def to_workload(self) -> Workload:
        return self.workload.to_workload()

    def to_slo(self) -> SLO:
        return self.slo.to_slo()


def _as_list(v: str | list[str] | None) -> list[str | None]:
    if v is None:
        return [None]
    return [v] if isinstance(v, str) else list(v)


def parse_scenario(data: Any, source: str = "scenario") -> Scenario:
    """Validate a scenario already parsed into Python objects; errors name the field."""
    if not isinstance(data, dict):
        raise ClusterfitError(f"{source}: a scenario must be a mapping with at least 'model' and 'workload'")
    try:
        scenario = Scenario.model_validate(data)
        scenario.to_workload()  # distribution fits and value checks
        scenario.to_slo()
        scenario.slo.check_judged()
    except ValidationError as exc:
        raise ClusterfitError(f"{source}: " + _format_errors(exc)) from None
    except ClusterfitError as exc:
        raise ClusterfitError(f"{source}: {exc}") from None
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read a YAML (.yaml/.yml) or TOML (.toml) scenario file and validate it strictly."""
    from ..inputs import parse_document, read_text

    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml", ""):
        raise ParameterError("scenario", f"scenario file {p}: use .yaml, .yml or .toml")
    try:
        text = read_text(p, "scenario file")
    except ClusterfitError as exc:   # the file itself (missing, not a file, too large): the option that named it
        raise ParameterError("scenario", str(exc)) from None
    data = parse_document(text, f"scenario file {p}", "toml" if suffix == ".toml" else "yaml")
    return parse_scenario(data, f"scenario file {p}")


def _format_errors(exc: ValidationError) -> str:
    errors = exc.errors()

    def other_branch(err: Any) -> bool:
        """A `number | mapping` field reports one error per branch: drop the branch the input was not meant for."""
        if err["type"] in ("float_type", "float_parsing") and isinstance(err.get("input"), dict):
            return True
        return err["type"] in ("model_type", "dict_type") and not isinstance(err.get("input"), dict) \
            and any(e["loc"][:-1] == err["loc"][:-1] and e is not err for e in errors)

    # when every error is such a branch (a mapping where only a number goes), report them all
    kept = [e for e in errors if not other_branch(e)] or errors
    out = []
    for err in kept:
        loc = ".".join(str(x) for x in err["loc"] if not (isinstance(x, str) and x in _UNION_TAGS))
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        out.append(f"{loc or '(top level)'}: {msg}")
    return "; ".join(dict.fromkeys(out))   # the branches of a union can repeat a line


_UNION_TAGS = {"float", "LengthStatsSpec", "str", "list[str]", "function-after[_one_form(), LengthStatsSpec]",
               "function-after[_positive_prices(), CostSpec]"}
