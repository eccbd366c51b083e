"""Typed requests and results of the public API (``clusterfit.api``).

Requests mirror the command-line options: same names (``--kv-dtype`` is ``kv_dtype``; a repeatable option takes
the plural, ``--system`` is ``systems``), same defaults, same validation. A scenario file and the HTTP API parse
into them. Results are what ``--json`` prints: ``result.model_dump(mode="json")`` is the CLI's JSON object.

Units are in the field names: ``*_s`` seconds, ``*_bytes`` bytes (GB = 1e9, GiB = 2**30 where a label says so),
``*_per_gpu`` per GPU, ``*_per_s`` per second for the whole replica or cluster unless ``_per_user``/``_per_gpu``.
"""

# No ``from __future__ import annotations`` here: pydantic would compile and evaluate every field's annotation
# string when a model class is created (~12 ms of every command's start-up for these models). The few quoted
# annotations are in method signatures: types of modules a schema import does not load (below), and
# ServingEngineSettings.of's return, which names the class being defined.

from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol, get_args

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, SerializerFunctionWrapHandler,
                      ValidationError, field_validator, model_serializer)
from pydantic_core import PydanticCustomError

from .engines import GPU_MEMORY_UTILIZATION_RANGE, MAX_NUM_BATCHED_TOKENS_RANGE, MAX_NUM_SEQS_RANGE
from .errors import ClusterfitError, ParameterError, brief  # ParameterError: re-exported (schema.ParameterError)
from .inputs import RefuseBool
from .profile import Profile
from .speculative import HEAD_DRAFTERS, MAX_DRAFT_TOKENS, DraftHead, SpeculativeMethod, draft_head

if TYPE_CHECKING:  # imported where they are used: a schema import loads no simulator, architecture or layout code
    from .arch import ModelArch
    from .layout import Layout
    from .sim.config import SpeculativeSpec

#: Upper bounds on sizes a request may ask for (the work they cause grows with them).
MAX_GPUS = 4096
MAX_TOKENS = 100_000_000
MAX_BATCH = 1_000_000
#: Upper bounds on a target load (whole cluster): requests/s, concurrent sessions, output tokens/s.
MAX_RATE_RPS = 1e6
MAX_CONCURRENCY = 1e8
MAX_TOKENS_PER_S = 1e9
#: The smallest target rate: requests/s (one request per ~12 days: slower gaps overflow the simulator's clock) or
#: output tokens/s (planning.workload.load_problem; concurrent sessions are a whole number, at least 1).
MIN_LOAD = 1e-6
#: The gap between requests at MIN_LOAD requests/s, in words (1 / 1e-6 s = 11.6 days).
MIN_RATE_GAP = f"one request every ~{1 / MIN_LOAD / 86_400:.0f} days"
#: Bounds on a latency target, ms (1 us .. ~2.8 hours), and the longest simulated time, s (~116 days).
MIN_LATENCY_MS = 1e-3
MAX_LATENCY_MS = 1e7
MAX_SIM_TIME_S = 1e7
#: The longest think time between an agent session's turns (a day), s: a scenario's agent and a simulation's
#: sessions.
MAX_THINK_TIME_S = 86_400.0
#: Bounds on the work one simulation may ask for: 1M requests over 64 replicas take ~20-30 s on one core
#: (benchmarks/sim_speed.py) and ~100 bytes of arrays per request, so 5M requests stay within minutes and
#: about a GB; 4,096 replicas is 32,768 GPUs of 8-GPU nodes. A closed loop has at most as many clients.
MAX_REQUESTS = 5_000_000
MAX_REPLICAS = 4096
MAX_CLIENTS = MAX_REQUESTS


def _distinct(names: list[str] | None) -> list[str] | None:
    """A list of names without repeats (any case): a repeated system or precision would be searched and shown
    twice."""
    seen: set[str] = set()
    for name in names or []:
        key = name.strip().lower()
        if key in seen:
            raise PydanticCustomError("repeated", "{name} is given twice", {"name": repr(name)})
        seen.add(key)
    return names


def _engine_name(name: str) -> str:
    """An engine name as the engines catalog keys it: lower case, an alias (tensorrt-llm, trt) by its engine's name,
    so results say "vllm" however the request spelled it (an unknown name is refused where the engine is looked up,
    listing close matches)."""
    from .engines import ALIASES

    key = name.strip().lower()
    return ALIASES.get(key, key)


#: An engine name, normalised (_engine_name).
EngineName = Annotated[str, Field(min_length=1), AfterValidator(_engine_name)]

#: Names each given at most once (any case): system ids or GPU names, precisions, KV dtypes.
DistinctNames = Annotated[list[str], AfterValidator(_distinct)]


class Schema(BaseModel):
    """Base of every request and result: unknown fields are errors; ``_omit_if_none`` keys are left out of the
    JSON when they have no value (as the CLI has always printed them)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), defer_build=True)
    _omit_if_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self._omit_if_none:
            if data.get(key, 0) is None:
                del data[key]
        return data


def parse_request(cls: type[Schema], data: dict[str, Any]) -> Any:
    """Validate ``data`` into ``cls``; the first problem becomes a ParameterError naming the parameter, its value
    and what is allowed."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise parameter_error(cls, exc) from None


def parameter_error(cls: type[BaseModel], exc: ValidationError) -> ParameterError:
    """The ParameterError of ``exc``'s first problem validating ``cls``: it names the parameter, its value and what
    is allowed."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    name = ".".join(loc) or cls.__name__
    return ParameterError(name, _describe(cls, loc[0] if loc else "", err))


def _bounds(cls: type[BaseModel], field: str) -> str:
    """The allowed range of a numeric field as text ("1..4096", ">= 0", "> 0")."""
    info = cls.model_fields.get(field)
    lo = hi = ""
    for m in info.metadata if info is not None else []:
        for attr, sign in (("ge", ""), ("gt", ">")):
            if getattr(m, attr, None) is not None:
                lo = f"{sign}{getattr(m, attr):,}" if sign else f"{getattr(m, attr):,}"
        for attr, sign in (("le", ""), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                hi = f"{sign}{getattr(m, attr):,}" if sign else f"{getattr(m, attr):,}"
    if lo and hi and not lo.startswith(">") and not hi.startswith("<"):
        return f"in {lo}..{hi}"
    parts = [f">= {lo}" if lo and not lo.startswith(">") else f"> {lo[1:]}" if lo else "",
             f"<= {hi}" if hi and not hi.startswith("<") else f"< {hi[1:]}" if hi else ""]
    return " and ".join(p for p in parts if p)


def _describe(cls: type[BaseModel], field: str, err: Any) -> str:
    kind, got = err["type"], err.get("input")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return f"is not a parameter of {cls.__name__} (known: {', '.join(cls.model_fields)})"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than") and _bounds(cls, field):
        ann = cls.model_fields[field].annotation if field in cls.model_fields else None
        what = "an integer" if ann is int or int in get_args(ann) else "a number"
        return f"must be {what} {_bounds(cls, field)}, got {brief(got)}"
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return f"must be an integer, got {brief(got)}"
    if kind in ("float_parsing", "float_type", "finite_number"):
        return f"must be a finite number, got {brief(got)}"
    if kind == "string_pattern_mismatch":
        return f"must match {err.get('ctx', {}).get('pattern', '')}, got {brief(got)}"
    msg = str(err["msg"])
    return f"{msg[:1].lower()}{msg[1:]}, got {brief(got)}"   # pydantic's sentence, its quoted values as they are


# ============================================================================================== requests
#: The ``profile`` field of perf, plan and simulate requests: the document itself, never a path (the HTTP API reads
#: no file a request names; the command line reads ``--profile FILE`` and passes its content).
_PROFILE_HELP = ("A measured kernel profile (the JSON `clusterfit calibrate` writes, inline): its fitted curves replace "
                 "the shipped H200-derived ones for the GPU it was measured on (clusterfit.profile)")


class RequestSchema(Schema, RefuseBool):
    """Base of the request models: true / false only where a field is a flag (inputs.RefuseBool). Constructed
    directly (``FitRequest(model=...)``), a bad value raises the ParameterError ``parse_request`` gives, not
    pydantic's ValidationError (``model_validate``, which FastAPI uses for bodies, still raises ValidationError).

    A file path is taken as a str or a ``pathlib.Path`` alike: ``model`` (a config.json), ``trace``, and, as
    everywhere, ``scenario`` / ``catalog`` entries. ``catalog`` (a list of files) also takes one file as a str or
    Path: a list of that one file (a str is not read as a sequence of one-letter paths)."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise parameter_error(type(self), exc) from None

    # pydantic takes this for its own __init__: validation (model_validate, FastAPI's bodies) does not call it, so
    # it keeps raising ValidationError there (a custom __init__ would be called, its error wrapped as a value error)
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @field_validator("model", "trace", mode="before", check_fields=False)
    @classmethod
    def _path_as_text(cls, value: Any) -> Any:
        """A path given as a pathlib.Path, as its text (the fields also take names: model ids, aliases)."""
        return str(value) if isinstance(value, PurePath) else value

    @field_validator("catalog", mode="before", check_fields=False)
    @classmethod
    def _one_catalog_file(cls, value: Any) -> Any:
        """One catalog file given alone: the list of it."""
        return [value] if isinstance(value, str | PurePath) else value


class LayoutRequest(RequestSchema):
    """Parallel sizes of one replica; None: chosen by the tool."""

    tp: int | None = Field(None, ge=1, le=MAX_GPUS, description="Tensor parallel size")
    pp: int | None = Field(None, ge=1, le=MAX_GPUS, description="Pipeline parallel size")
    ep: int | None = Field(None, ge=1, le=MAX_GPUS, description="Expert parallel size (MoE)")
    dp: int | None = Field(None, ge=1, le=MAX_GPUS, description="Attention data-parallel ranks (DEP, MoE)")


#: The engine settings' bounds (``engines.Engine.with_settings``' ranges) and meaning, shared by the requests and the
#: settings a plan runs with. The optional forms carry the bounds and description on the whole ``X | None`` so the
#: JSON schema keeps the description on the property (inside the union it would move onto the number's branch).
_BATCHED_TOKENS = Field(ge=MAX_NUM_BATCHED_TOKENS_RANGE[0], le=MAX_NUM_BATCHED_TOKENS_RANGE[1], description=(
    "Tokens per step (prefill chunk budget): vLLM max_num_batched_tokens, SGLang chunked_prefill_size, "
    "TensorRT-LLM max_num_tokens"))
MaxNumBatchedTokens = Annotated[int, _BATCHED_TOKENS]
MaxNumBatchedTokensOrNone = Annotated[int | None, _BATCHED_TOKENS]
GpuMemoryUtilizationOrNone = Annotated[float | None, Field(
    ge=GPU_MEMORY_UTILIZATION_RANGE[0], le=GPU_MEMORY_UTILIZATION_RANGE[1], description=(
        "vLLM gpu_memory_utilization / SGLang mem_fraction_static (fraction of device memory for weights + KV); "
        "TensorRT-LLM free_gpu_memory_fraction (fraction of the memory left free after weights, for KV)"))]


class EngineSettingsRequest(RequestSchema):
    """Settings passed to the serving engine, with the engines' own names (None: the scenario's, else the engine's
    default from catalog/engines.yaml). Ranges as ``engines.Engine.with_settings``."""

    max_num_seqs: int | None = Field(None, ge=MAX_NUM_SEQS_RANGE[0], le=MAX_NUM_SEQS_RANGE[1], description=(
        "Running sequences per engine instance (per attention-DP rank): vLLM max_num_seqs, SGLang "
        "max_running_requests, TensorRT-LLM max_batch_size (per pipeline micro-batch: pp x max_batch_size run)"))
    max_num_batched_tokens: MaxNumBatchedTokensOrNone = None
    gpu_memory_utilization: GpuMemoryUtilizationOrNone = None
    enforce_eager: bool | None = Field(None, description=(
        "vLLM --enforce-eager: no CUDA graphs, every kernel pays a CPU launch (None: the scenario's, else False)"))
    async_scheduling: bool | None = Field(None, description=(
        "vLLM --async-scheduling / --no-async-scheduling (SGLang: False is --disable-overlap-schedule): the host "
        "prepares the next step while the GPU runs this one (None: the scenario's, else the engine's default)"))

    def engine_settings(self) -> Any:
        """These fields as an ``engines.EngineSettings``."""
        from .engines import EngineSettings as Settings

        return Settings(self.max_num_seqs, self.max_num_batched_tokens, self.gpu_memory_utilization,
                        self.enforce_eager, self.async_scheduling)


class SpeculativeRequest(RequestSchema):
    """Speculative decoding options (clusterfit.speculative; sim.config.SpeculativeSpec), vLLM's names where it has
    them. None of them given: no speculative decoding."""

    num_speculative_tokens: int | None = Field(None, ge=1, le=MAX_DRAFT_TOKENS, description=(
        "Speculative decoding: draft tokens per step (vLLM num_speculative_tokens; SGLang --speculative-num-steps "
        "with --speculative-eagle-topk 1); turns it on"))
    speculative_method: SpeculativeMethod | None = Field(None, description=(
        "The drafter: mtp, eagle, eagle3 (one decoder layer + LM head per draft token) or ngram (default mtp)"))
    speculative_acceptance: float | None = Field(None, ge=0.0, lt=1.0, description=(
        "Probability that each draft token is accepted (default 0.7, clusterfit.speculative.DEFAULT_ACCEPTANCE)"))
    speculative_acceptance_length: float | None = Field(None, ge=1.0, le=MAX_DRAFT_TOKENS + 1.0, description=(
        "Mean tokens a step emits per sequence, as engines report it (instead of --speculative-acceptance)"))
    speculative_draft_config: dict[str, Any] | None = Field(None, description=(
        "The content of the EAGLE / EAGLE-3 draft head's config.json: its weights and KV cache are then counted "
        "(clusterfit.speculative.draft_head); without it they are not"))

    def draft_head(self, model: "ModelArch", method: str | None) -> DraftHead | None:
        """The draft head ``speculative_draft_config`` describes for ``method`` (the spec's drafter, after a
        scenario's), None without one; the config needs an EAGLE drafter (ParameterError)."""
        if self.speculative_draft_config is None:
            return None
        if method not in HEAD_DRAFTERS:
            raise ParameterError("speculative_draft_config", "a draft head is loaded by --speculative-method eagle or "
                                 f"eagle3 only, not with {method or 'speculative decoding off'}")
        return draft_head(self.speculative_draft_config, model, method, "the draft head's config.json")

    def speculative_fields(self, base: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The sim.config.SpeculativeSpec fields these options give, on top of ``base`` (a spec's fields, e.g. a
        scenario's; None: none), or None when no option is given. An acceptance option replaces the base's
        acceptance length, and the other way round. Errors name the option."""
        given = {k: v for k, v in (("draft_tokens", self.num_speculative_tokens), ("method", self.speculative_method),
                                   ("acceptance", self.speculative_acceptance),
                                   ("acceptance_length", self.speculative_acceptance_length)) if v is not None}
        if not given:
            return None
        if base is None and "draft_tokens" not in given:
            raise ParameterError("num_speculative_tokens", "give the draft tokens per step to turn speculative "
                                                           "decoding on (the other speculative options need it)")
        if "acceptance" in given and "acceptance_length" in given:
            raise ParameterError("speculative_acceptance_length", "give --speculative-acceptance or "
                                                                  "--speculative-acceptance-length, not both")
        out = dict(base or {})
        if "acceptance" in given:
            out["acceptance_length"] = None
        if "acceptance_length" in given:
            out["acceptance"] = None
        out |= given
        k, length = out["draft_tokens"], out.get("acceptance_length")
        if length is not None and length > k + 1:
            raise ParameterError("speculative_acceptance_length", f"{length:g} tokens per step is more than the "
                                                                  f"{k} draft tokens + 1 a step can emit")
        return out

    def speculative_spec(self, base: "SpeculativeSpec | None" = None) -> "SpeculativeSpec | None":
        """``speculative_fields`` over ``base`` (a sim.config.SpeculativeSpec, e.g. a scenario's) as a
        SpeculativeSpec: the base itself when no option is given, None when neither gives speculative decoding."""
        fields = self.speculative_fields(base.model_dump() if base is not None else None)
        if fields is None:   # no option given: sim.config (and its pydantic models) stays unloaded
            return base
        from .sim.config import SpeculativeSpec

        return SpeculativeSpec.model_validate(fields)


class FitRequest(LayoutRequest, SpeculativeRequest):
    model: str | None = Field(None, description="HF id, alias or path to a config.json")
    params: str | None = Field(None, description="Bare parameter count (744B, 1.6T): naive mode")
    systems: DistinctNames = Field(default_factory=lambda: ["h100", "h200", "b200"], min_length=1, max_length=64)
    precision: str | None = None
    experts_precision: str | None = None
    kv_dtype: str | None = Field(None, min_length=1)
    nodes: int | None = Field(None, ge=1, le=MAX_GPUS, description="Nodes per replica (default: the fewest that fit)")
    context: int = Field(32768, ge=1, le=MAX_TOKENS, description="Tokens per sequence (prompt + output); when not "
                         "given, 32,768 or the model's max_position_embeddings if that is smaller")
    engine: EngineName = "vllm"
    gpu_memory_utilization: GpuMemoryUtilizationOrNone = None
    max_num_batched_tokens: MaxNumBatchedTokensOrNone = None
    block_size: int = Field(16, ge=1, le=4096, description="Paged-KV block size, tokens")
    allow_longer_context: bool = Field(False, description="Allow prompt + output beyond the model's "
                                       "max_position_embeddings (e.g. with RoPE scaling the config does not declare)")
    sessions: int | None = Field(None, ge=1, le=10_000_000,
                                 description="Concurrent sessions of `context` tokens the deployment must hold")
    catalog: list[Path] = Field(default_factory=list, description="Extra hardware catalog files (YAML or TOML)")


class PerfRequest(LayoutRequest, EngineSettingsRequest, SpeculativeRequest):
    model: str
    system: str
    isl: int = Field(ge=1, le=MAX_TOKENS, description="Input (prompt) tokens per request")
    osl: int = Field(ge=1, le=MAX_TOKENS, description="Output tokens per request")
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS)
    precision: str | None = None
    experts_precision: str | None = None
    kv_dtype: str | None = Field(None, min_length=1)
    concurrency: int | None = Field(None, ge=1, le=MAX_BATCH, description="Closed-loop concurrent requests")
    max_throughput: bool = False
    batch: int | None = Field(None, ge=1, le=MAX_BATCH, description="Decode batch size (with context)")
    context: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Context length of the decode batch")
    allow_longer_context: bool = Field(False, description="Allow prompt + output beyond the model's "
                                       "max_position_embeddings (e.g. with RoPE scaling the config does not declare)")
    engine: EngineName = "vllm"
    catalog: list[Path] = Field(default_factory=list)
    profile: Profile | None = Field(None, description=_PROFILE_HELP)


class PlanRequest(EngineSettingsRequest, SpeculativeRequest):
    model: str | None = None
    isl: float | None = Field(None, gt=0, le=MAX_TOKENS, description="Prompt tokens per request (mean)")
    osl: float | None = Field(None, gt=0, le=MAX_TOKENS, description="Output tokens per request (mean)")
    rate: float | None = Field(None, gt=0, le=MAX_RATE_RPS, description="Target load, requests/s (whole cluster; "
                                "at least MIN_LOAD: planning.workload.load_problem)")
    concurrency: float | None = Field(None, gt=0, le=MAX_CONCURRENCY, description="Target load, concurrent "
                                      "sessions (a whole number, at least 1: planning.workload.load_problem)")
    tokens_per_s: float | None = Field(None, gt=0, le=MAX_TOKENS_PER_S, description="Target load, output "
                                       "tokens/s (whole cluster; at least MIN_LOAD: planning.workload.load_problem)")
    ttft_ms: float | None = Field(None, ge=MIN_LATENCY_MS, le=MAX_LATENCY_MS,
                                  description="TTFT target at ttft_percentile, ms")
    ttft_percentile: float = Field(90.0, ge=50.0, lt=100.0, description="TTFT percentile, e.g. 90 or 99")
    tpot_ms: float | None = Field(None, ge=MIN_LATENCY_MS, le=MAX_LATENCY_MS,
                                  description="TPOT target, ms per output token")
    tpot_percentile: float | None = Field(None, ge=50.0, lt=100.0,
                                          description="TPOT percentile judged (default 90, or the scenario's)")
    min_goodput: float | None = Field(None, ge=0.0, le=1.0,
                                      description="Least share of requests within both SLOs (default 0.9)")
    systems: DistinctNames | None = Field(None, min_length=1, max_length=64,
                                        description="System ids or GPU names (default: all)")
    precisions: DistinctNames | None = Field(None, min_length=1, max_length=32,
                                             description="Weight precisions (default: the checkpoint's)")
    kv_dtypes: DistinctNames | None = Field(None, min_length=1, max_length=32)
    engine: EngineName | None = None
    prefix_cache_hit: float | None = Field(None, ge=0.0, le=1.0)
    allow_longer_context: bool = Field(False, description="Allow prompt + output beyond the model's "
                                       "max_position_embeddings (e.g. with RoPE scaling the config does not declare)")
    scenario: Path | None = None
    failover: int | None = Field(None, ge=0, le=1000, description="Spare replicas (N+k)")
    prices: list[str] | None = Field(None, max_length=64, description="SYSTEM=$/GPU-hour overrides")
    endpoint_price: str | None = Field(None, description="Per-token endpoint, e.g. in=0.6,out=2.2 ($/Mtok)")
    max_nodes: int | None = Field(None, ge=1, le=64, description="Most nodes per replica (default 4)")
    nodes: int | None = Field(None, ge=1, le=256, description="Capacity mode: the budget in nodes of each system "
                              "(no load: answers the load the best layouts carry within the SLOs)")
    gpus: int | None = Field(None, ge=1, le=2048, description="Capacity mode: the budget in GPUs of each system")
    no_disagg: bool = False
    verify: bool = False
    verify_requests: int | None = Field(None, ge=100, le=2_000_000,
                                        description="Requests --verify simulates, at least 100: a p90 and a goodput "
                                        "judged on fewer are noise (default: the scenario's, else 20,000)")
    catalog: list[Path] = Field(default_factory=list)
    profile: Profile | None = Field(None, description=_PROFILE_HELP)
    confidence: Literal[50, 80, 90] | None = Field(None, description=(
        "Size on the pessimistic bound of this prediction interval, percent (clusterfit.intervals): latency SLOs "
        "checked against its upper bound, throughput per replica at its lower bound; 50 or None: the point "
        "prediction"))


class DeployRequest(PlanRequest):
    """``clusterfit deploy``: the plan's options (or ``plan_file``, a ``plan --json`` output) plus the target.
    ``engine`` (vllm, sglang, trtllm) is both the engine planned for and the one launched; ``systems`` with a
    plan file picks that system's row instead of the recommendation; ``out``: the directory to create (None:
    return the files' text only, as the HTTP API does)."""

    plan_file: Path | None = None
    target: Literal["shell", "kubernetes", "slurm"] = "shell"
    out: Path | None = None
    max_model_len: int | None = Field(None, ge=16, le=MAX_TOKENS,
                                      description="Engine max model length (default: the model's max_position_embeddings)")
    speculative_draft_model: str | None = Field(
        None, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$",
        description="The draft checkpoint EAGLE / EAGLE-3 speculative decoding loads (a Hugging Face id)")


class SimulateRequest(LayoutRequest, EngineSettingsRequest, SpeculativeRequest):
    model: str | None = None
    scenario: Path | None = None
    system: str | None = None
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS)
    precision: str | None = None
    kv_dtype: str | None = Field(None, min_length=1)
    engine: EngineName | None = None
    isl: int | None = Field(None, ge=1, le=MAX_TOKENS)
    osl: int | None = Field(None, ge=1, le=MAX_TOKENS)
    length_cv: float = Field(0.0, ge=0.0, le=100.0)
    allow_longer_context: bool = Field(False, description="Allow prompt + output beyond the model's "
                                       "max_position_embeddings (e.g. with RoPE scaling the config does not declare)")
    rate: float | None = Field(None, ge=MIN_LOAD, le=MAX_RATE_RPS, description="Arrival rate, requests/s (open loop)")
    arrival: str | None = None
    concurrency: int | None = Field(None, ge=1, le=MAX_CLIENTS, description=(
        "A closed loop instead of a rate: this many clients, each sending its next request (or its session's next "
        "turn) when its last one ends"))
    think_time_s: float | None = Field(None, ge=0.0, le=MAX_THINK_TIME_S, description=(
        "With concurrency: a client's wait between an answer and its next request or session, s (default 0)"))
    ramp_s: float | None = Field(None, ge=0.0, le=MAX_SIM_TIME_S, description=(
        "With concurrency: the clients' first requests go out evenly over this many seconds (0: all at once; "
        "default: about one request's time in the system plus the think time)"))
    trace: str | None = Field(None, min_length=1, description="A trace file (CSV or JSONL) to replay")
    replicas: int | None = Field(None, ge=1, le=MAX_REPLICAS)
    requests: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    seed: int | None = Field(None, ge=0, le=2**32 - 1)
    policy: str | None = None
    fail_at: float | None = Field(None, ge=0, le=MAX_SIM_TIME_S)
    fail_replica: int = Field(0, ge=0)
    fail_node: int | None = Field(None, ge=0)
    restart_after: float | None = Field(None, ge=0, le=MAX_SIM_TIME_S)
    ttft_ms: float | None = Field(None, ge=MIN_LATENCY_MS, le=MAX_LATENCY_MS)
    tpot_ms: float | None = Field(None, ge=MIN_LATENCY_MS, le=MAX_LATENCY_MS)
    ttft_percentile: float | None = Field(None, ge=50.0, lt=100.0)
    tpot_percentile: float | None = Field(None, ge=50.0, lt=100.0)
    min_goodput: float | None = Field(None, ge=0.0, le=1.0)
    catalog: list[Path] = Field(default_factory=list)
    profile: Profile | None = Field(None, description=_PROFILE_HELP)


# ================================================================================== models, hardware
class ModelInfoRequest(RequestSchema):
    """``clusterfit.model_info``: one model (bundled name, alias, HF id or config.json path) and optionally the
    precision and KV-cache dtype to analyse it under."""

    model: str = Field(min_length=1, description="HF id, alias or path to a config.json")
    precision: str | None = Field(None, min_length=1)
    kv_dtype: str | None = Field(None, min_length=1)


class SystemsRequest(RequestSchema):
    """``clusterfit.systems``: extra hardware catalog files (YAML or TOML; later files win); one file may be given
    alone."""

    catalog: list[Path] = Field(default_factory=list, max_length=64,
                                description="Extra hardware catalog files (YAML or TOML)")


class ModelEntry(Schema):
    hf_id: str
    aliases: list[str]
    total_params: int
    active_params: int
    attention_kinds: dict[str, int]
    checkpoint_formats: list[str]


class ModelList(Schema):
    models: list[ModelEntry]


class SystemRow(Schema):
    """One system of the hardware catalog (GB = 1e9 bytes, GiB = 2**30; per GPU unless the name says node)."""

    id: str
    name: str
    gpu: str
    gpu_name: str
    gpus_per_node: int
    scale_up_domain_gpus: int
    hbm_gb_per_gpu: float = Field(description=(
        "Marketed device memory per GPU (HBM; GDDR on L40S and RTX PRO), decimal GB; where the vendor states GiB "
        "(MI325X 256, TPU7x 192) the GiB figure x 2^30 / 1e9"))
    hbm_gib_visible_per_gpu: float | None
    hbm_visible_derived: bool | None
    hbm_gb_per_node: float = Field(description="hbm_gb_per_gpu x GPUs per node")
    mem_bw_tbs_per_gpu: float
    bf16_tflops_dense_per_gpu: float | None
    fp8_tflops_dense_per_gpu: float | None
    fp4_tflops_dense_per_gpu: float | None
    scale_up_gbs_per_gpu_per_dir: float = Field(description=(
        "Scale-up bandwidth per GPU per direction, GB/s, over the link scale_up_link names (NVLink, PCIe, Infinity "
        "Fabric, ICI, ...); formerly nvlink_gbs_per_gpu_per_dir"))
    scale_up_link: str | None
    nic_gbps_per_gpu: float
    network_gbps_per_node: float
    unverified: list[str]


class HardwareList(Schema):
    systems: list[SystemRow]


# ================================================================================================ fit
class MoeSummary(Schema):
    experts: int
    top_k: int
    expert_intermediate: int
    shared_experts: int
    moe_layers: int


class ModelSummary(Schema):
    """Architecture facts (parameter counts are element counts)."""

    _omit_if_none = frozenset({"flops_per_token", "moe", "precision", "kv_dtype", "kv_bytes_per_token"})
    name: str
    hf_id: str | None
    model_type: str | None
    total_params: int
    active_params: int
    active_params_excl_embedding: int
    active_params_non_embedding: int = Field(description="Active parameters without the input embedding and the LM "
                                             "head (Qwen-Next and GLM model cards)")
    params_by_component: dict[str, int]
    layers: int
    hidden: int
    vocab: int
    attention_kinds: dict[str, int]
    ffn_kinds: dict[str, int]
    mtp_layers: int
    notes: list[str]
    flops_per_token: dict[str, float] | None = None
    moe: MoeSummary | None = None
    precision: dict[str, str] | None = None
    kv_dtype: str | None = None
    kv_bytes_per_token: int | None = None


class _LayoutSizes(Protocol):
    tp: int
    pp: int
    ep: int
    dp: int


class AsLayout:
    """``as_layout``: the ``layout.Layout`` of a result's tp / pp / ep / dp fields (LayoutOut, PlanOption). It
    declares no fields (a pydantic model would take annotations here as its first fields)."""

    def as_layout(self: _LayoutSizes) -> "Layout":
        from .layout import Layout

        return Layout(tp=self.tp, pp=self.pp, ep=self.ep, dp=self.dp)


class LayoutOut(Schema, AsLayout):
    tp: int
    pp: int
    ep: int
    dp: int


class NaiveFit(Schema):
    """Parameters x bytes per parameter against the node's marketed memory (GB = 1e9 bytes)."""

    bytes_per_param: float
    weight_bytes: int
    node_bytes: int
    fits: bool
    nodes_needed: int
    left_bytes: int
    nodes: int = Field(1, description="Nodes that fits and left_bytes are against (--nodes)")


class ReserveBytes(Schema):
    """Runtime reserve per GPU, bytes."""

    cuda_context: int
    cublas: int
    nccl: int
    cuda_graphs: int
    activations: int
    total: int


class SessionsFit(Schema):
    """Whether ``sessions`` concurrent sessions of ``context`` tokens fit, and what holding them takes: the
    fewest nodes over replicas of 1..64 nodes each (default layout), as replicas x nodes per replica."""

    sessions: int
    fit_on_shown_replica: bool
    held_by_shown_replica: int
    replicas: int | None
    nodes_per_replica: int | None
    nodes: int | None
    explanation: str


class MostSessions(Schema):
    """The layout (of those the planner searches, on the same nodes) whose replica holds the most sequences of
    the asked context, when it beats the shown one, and why they differ."""

    layout: LayoutOut
    label: str
    max_sequences: int
    max_kv_tokens: int
    shown_max_sequences: int
    explanation: str


class SystemFit(Schema):
    """The realistic fit of one replica on one system (bytes; per GPU where the name says so). With a
    ``sessions`` request, ``fits`` also requires the shown replica to hold them (see ``sessions_fit``)."""

    _omit_if_none = frozenset({"sessions_fit", "most_sessions"})

    system: str
    nodes: int
    gpus: int
    layout: LayoutOut
    engine: str
    context: int
    fits: bool
    reason: str
    nodes_needed: int | None
    device_bytes_per_gpu: int
    weight_bytes: int
    weight_bytes_per_gpu: int
    reserve_bytes_per_gpu: ReserveBytes
    kv_budget_bytes_per_gpu: int
    kv_budget_bytes: int
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: float
    kv_bytes_per_sequence_per_gpu: float
    max_kv_tokens: int
    max_sequences: int
    naive: NaiveFit
    notes: list[str]
    #: the engine's memory fraction on this GPU and layout (SGLang's default follows both; see the notes)
    memory_fraction: float
    #: the engine's tokens per step on this GPU (vLLM's default follows its memory), whose activation workspace the
    #: reserve holds; the top-level engine_settings give the engine's catalog default
    max_num_batched_tokens: int
    system_name: str
    gpu: str
    gpus_per_node: int
    gpu_memory_marketed_bytes: int
    sessions_fit: SessionsFit | None = None
    most_sessions: MostSessions | None = None


class EngineSettings(Schema):
    """How the engine budgets memory: ``fraction`` of device memory (mode total_fraction: vLLM
    gpu_memory_utilization, SGLang mem_fraction_static) or of the memory left free after weights (mode
    free_fraction: TensorRT-LLM free_gpu_memory_fraction)."""

    fraction: float
    mode: str
    max_num_batched_tokens: int
    source: str


class ServingEngineSettings(EngineSettings):
    """The engine settings in force (``fraction``, ``mode``, ``max_num_batched_tokens``, ``source`` as fit's), plus
    ``max_num_seqs`` (running sequences per engine instance, i.e. per attention-DP rank), ``enforce_eager`` (no
    CUDA graphs), ``async_scheduling`` (host work overlapped with the GPU's) and ``given``: the settings the user set
    (options, keywords or the scenario's engine_settings)."""

    #: bounded as a plan's settings run (deploy passes them to the engine): the engines' ranges for the token and
    #: sequence caps; the fraction may be an engine's own default below the 0.05 a user may give, so only > 0
    fraction: float = Field(gt=0.0, le=GPU_MEMORY_UTILIZATION_RANGE[1])
    max_num_batched_tokens: MaxNumBatchedTokens
    max_num_seqs: int = Field(ge=MAX_NUM_SEQS_RANGE[0], le=MAX_NUM_SEQS_RANGE[1])
    enforce_eager: bool
    async_scheduling: bool
    given: list[str]

    @classmethod
    def of(cls, engine: Any, given: list[str]) -> "ServingEngineSettings":
        """The settings an ``engines.Engine`` runs with; ``given``: the names the user set."""
        return cls(fraction=engine.gpu_memory_utilization, mode=engine.memory_mode,
                   max_num_batched_tokens=engine.max_num_batched_tokens, source=engine.memory_source,
                   max_num_seqs=engine.max_num_seqs, enforce_eager=not engine.cuda_graphs,
                   async_scheduling=engine.async_scheduling, given=given)


class FitResult(Schema):
    model: ModelSummary
    precision: str
    engine: str
    engine_settings: EngineSettings
    context: int
    results: list[SystemFit]


# ========================================================================================== intervals
class Interval(Schema):
    """A predicted figure and its 80% prediction interval, in the figure's unit (clusterfit.intervals)."""

    value: float
    lo: float
    hi: float


class IntervalBasis(Schema):
    """The residual family an interval comes from: its table key (engine|GPU family|dense/moe|regime, ``*`` where
    a level was dropped), the fallback level used and how many grouped-CV residuals it holds."""

    key: str
    level: str
    n: int


class IntervalsUsed(Schema):
    """How the ``*_interval`` figures of a result were made: the confidence (percent), the table, the band per
    regime (prefill, decode, throughput)."""

    confidence: int
    table: str
    by_regime: dict[str, IntervalBasis]


class PercentileIntervals(Schema):
    """Intervals of the p50 / p90 / p99 / mean of a simulated latency, seconds (None: no request measured)."""

    p50: Interval | None
    p90: Interval | None
    p99: Interval | None
    mean: Interval | None


class ConfidenceBound(Schema):
    """``plan --confidence``: the figures a plan row was sized on, at the interval's pessimistic bound (TTFT and TPOT
    at the upper bound, requests/s per (decode) replica at the lower bound)."""

    confidence: int
    ttft_s: float
    tpot_s: float | None   # None: one output token per request (no request decodes)
    requests_per_s_per_replica: float


# =============================================================================================== perf
class StepSeconds(Schema):
    """Seconds of one engine step: the whole step, by kind (compute, memory, communication, overhead), by op."""

    step_s: float
    by_kind_s: dict[str, float]
    by_op_s: dict[str, float]


class SpeculativeOut(Schema):
    """The speculative decoding a prediction or plan ran with: draft tokens per step, the drafter, the per-draft-token
    acceptance, the mean tokens a step emits per sequence and the drafter's cost per draft token (a fraction of a
    decode step); a plan file's block is checked as deploy reads it. The acceptance is 1 where the acceptance length
    given is its most, draft tokens + 1 (every draft accepted)."""

    method: SpeculativeMethod
    draft_tokens: int = Field(ge=1, le=MAX_DRAFT_TOKENS)
    acceptance: float = Field(ge=0.0, le=1.0)
    tokens_per_step: float = Field(ge=1.0, le=MAX_DRAFT_TOKENS + 1.0)
    draft_cost: float = Field(ge=0.0)


class PerfResult(Schema):
    _omit_if_none = frozenset({"speculative", "ttft_s_interval", "tpot_s_interval", "output_tokens_per_s_interval",
                               "output_tokens_per_s_per_gpu_interval", "tokens_per_s_per_user_interval",
                               "decode_step_s_interval", "prefill_s_interval", "intervals"})
    model: str
    system: str
    engine: str
    precision: str
    kv_dtype: str
    layout: LayoutOut
    isl: int
    osl: int
    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float = Field(description=(
        "Output tokens/s of one replica at ``batch`` (saturated under max_throughput), not of a cluster"))
    output_tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    batch: float = Field(description="Running sequences of the replica (all its attention-DP ranks together)")
    kv_limited_batch: float = Field(description="Sequences the replica's KV cache admits at once")
    decode_step_s: float
    prefill_s: float
    gpus: int
    kv_capacity_tokens: float = Field(description="KV token slots of one replica (all its attention-DP ranks)")
    weight_bytes_per_gpu: float
    breakdown: StepSeconds
    notes: list[str] = Field(default_factory=list, description="What the tool changed or assumed, in words")
    engine_settings: ServingEngineSettings | None = None
    speculative: SpeculativeOut | None = None
    ttft_s_interval: Interval | None = None
    tpot_s_interval: Interval | None = None
    output_tokens_per_s_interval: Interval | None = None
    output_tokens_per_s_per_gpu_interval: Interval | None = None
    tokens_per_s_per_user_interval: Interval | None = None
    decode_step_s_interval: Interval | None = None
    prefill_s_interval: Interval | None = None
    intervals: IntervalsUsed | None = None


# ========================================================================================== simulate
class Percentiles(Schema):
    """p50 / p90 / p99 / mean of a latency, seconds (None: no request measured)."""

    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None


class SloOut(Schema):
    ttft_s: float | None
    tpot_s: float | None
    ttft_percentile: float
    tpot_percentile: float = 90.0
    min_goodput: float = 0.9


class SloVerdict(Schema):
    """What the SLO verdict judged: the measured TTFT and TPOT at the percentiles asked, the goodput against its
    threshold, each check's outcome (None: no target) and the verdict as one line."""

    ttft_percentile: float
    ttft_s: float | None
    ttft_target_s: float | None
    ttft_ok: bool | None
    tpot_percentile: float
    tpot_s: float | None
    tpot_target_s: float | None
    tpot_ok: bool | None
    goodput: float
    min_goodput: float
    goodput_ok: bool
    all_completed: bool
    text: str


class SimThroughput(Schema):
    """Completed requests and tokens per second of the simulated run, all replicas together."""

    requests_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float


class QueueStats(Schema):
    """Requests waiting (queued, not yet running), summed over the live replicas at each sampling instant."""

    mean_waiting: float
    max_waiting: float


class KvStats(Schema):
    """KV cache use as a fraction of capacity, averaged over the live replicas at each sampling instant."""

    mean: float
    max: float


class ReplicaStats(Schema):
    replica: int
    completed: int
    preemptions: int
    output_tokens: float
    steps: int
    busy_s: float
    mean_waiting: float
    mean_kv_utilisation: float
    utilisation: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None


class Window(Schema):
    t_s: float
    arrivals: int
    completed: int
    output_tokens_per_s: float
    failed: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    e2e_p99_s: float | None
    goodput: float | None
    waiting: float | None
    kv_utilisation: float | None
    live_replicas: int | None


class SimEvent(Schema):
    """A failure, restart or scaling event; the counts are set for losses, mean_outstanding for scaling, ``note`` for
    one that was not exercised (SimReport.not_exercised)."""

    _omit_if_none = frozenset({"cause", "in_flight", "retried", "failed", "mean_outstanding", "note"})
    t_s: float
    event: str
    replica: int
    cause: str | None = None
    in_flight: int | None = None
    retried: int | None = None
    failed: int | None = None
    mean_outstanding: float | None = None
    note: str | None = None


class ClosedLoopOut(Schema):
    """A closed loop's clients (sim.clients): each sends its next request when its last one ends."""

    clients: int = Field(description="clients that ran, each with one request (or session turn) in flight at most: "
                                     "those asked for, or fewer where there are fewer sessions")
    clients_asked: int = Field(description="clients asked for (concurrency)")
    sessions: int = Field(description="sessions the clients ran (a request without a session counts as one)")
    think_time_s: float = Field(description="a client's wait between an answer and its next request or session, s")
    session_think_time_s: float | None = Field(description="a client's wait between a session's answer and its next "
                                               "turn, s (None: no request has a next turn)")
    ramp_s: float = Field(description="the clients' first requests went out evenly spread over this many seconds")


class SimReport(Schema):
    """What the simulator measured (``clusterfit simulate --json`` adds model and system)."""

    requests: int
    completed: int
    rejected: int
    rejected_too_long: int = Field(0, description="of the rejected requests, those whose prompt + output tokens "
                                                  "exceed what one replica's KV cache admits (kv_admit_tokens); "
                                                  "the others met a full queue (max_queue)")
    kv_admit_tokens: float | None = Field(None, description="KV-cache tokens one replica admits a request into: "
                                                            "its capacity less the engine's watermark")
    failed: int
    retried: int
    preemptions: int
    ttft_s: Percentiles
    tpot_s: Percentiles
    itl_s: Percentiles = Field(description="inter-token latency: every gap between two streamed tokens of a request, "
                                           "pooled over requests (what bench clients report as ITL)")
    e2e_s: Percentiles
    goodput: float
    goodput_rps: float
    slo: SloOut
    holds_slo: bool | None
    verdict: SloVerdict | None = None
    throughput: SimThroughput
    duration_s: float
    queue: QueueStats
    kv_utilisation: KvStats
    replicas: int
    gpus_per_replica: int
    gpu_hours: float
    policy: str
    seed: int
    per_replica: list[ReplicaStats]
    windows: list[Window]
    events: list[SimEvent]
    not_exercised: list[SimEvent] = Field(default_factory=list, description="failures and restarts due after the "
                                          "last request finished: not run (they would lose nothing), each with a note")
    closed_loop: ClosedLoopOut | None = Field(None, description="the clients of a closed loop (absent for open-loop "
                                              "arrivals): the rate is what the replicas answered, not a given")
    sim_wall_s: float


class SimResult(SimReport):
    _omit_if_none = frozenset({"plot", "ttft_s_interval", "tpot_s_interval", "e2e_s_interval", "intervals",
                               "speculative", "closed_loop"})
    _run: Any = PrivateAttr(default=None)
    model: str
    system: str
    engine: str = Field(description="the engine whose scheduler and step times were simulated (vllm, sglang, trtllm)")
    precision: str = Field(description="the weights' precision simulated ('checkpoint': the checkpoint's own formats; "
                                       "with --scenario and no --precision, the scenario's first)")
    kv_dtype: str = Field(description="the KV-cache dtype simulated (with --scenario and no --kv-dtype, the "
                                      "scenario's first)")
    layout: LayoutOut = Field(description="each replica's parallel layout (with --scenario and no layout option, "
                                          "the one plan --scenario recommends)")
    notes: list[str] = Field(default_factory=list, description="What the tool chose or assumed, in words")
    #: the speculative decoding simulated, as perf's block (absent without it)
    speculative: SpeculativeOut | None = None
    plot: str | None = None
    ttft_s_interval: PercentileIntervals | None = None
    tpot_s_interval: PercentileIntervals | None = None
    e2e_s_interval: PercentileIntervals | None = None
    intervals: IntervalsUsed | None = None


# =============================================================================================== plan
class PrefillPool(Schema):
    layout: str
    tp: int
    pp: int
    ep: int
    dp: int
    gpus_per_replica: int
    replicas: int
    requests_per_s_per_replica: float
    kv_transfer_s: float


class ReplicaPlacement(Schema):
    """Where one replica runs: node indices (0-based, within the plan) and GPU indices on each of them."""

    replica: int
    role: str          # serving, prefill, decode, or "spare ..." for N+k spares
    nodes: list[int]
    gpus: list[int]


class PlanOption(Schema, AsLayout):
    """The best plan of one system, sized for the target load (money in $, per hour unless named).
    ``rent_unit``: "gpu" when the price quote rents single GPUs (cost = GPUs used), else "node" (whole nodes;
    ``idle_gpus`` of them unused). ``headroom_requests_per_s``: what the rented GPUs carry within the SLOs with
    idle rented GPUs also serving. ``tie_break``: the rule that chose this plan over one of equal cost.
    ``tpot_s`` and ``tokens_per_s_per_user`` are None with one output token per request (osl 1: sampled at the end of
    the prefill, so no request decodes and there is no TPOT)."""

    _omit_if_none = frozenset({"prefill", "xPyD", "explanation", "tie_break", "ttft_s_interval", "tpot_s_interval",
                               "tokens_per_s_per_user_interval", "full_load_requests_per_s_interval",
                               "full_load_output_tokens_per_s_interval", "serving_replicas_interval", "intervals",
                               "sized_on"})
    system: str
    gpu: str
    mode: Literal["aggregated", "disaggregated"]
    precision: str
    kv_dtype: str
    layout: str
    tp: int
    pp: int
    ep: int
    dp: int
    nodes_per_replica: int
    gpus_per_replica: int
    replicas: int
    serving_replicas: int
    spare_replicas: int
    nodes: int
    total_gpus: int
    rented_gpus: int
    rent_unit: Literal["gpu", "node"] = "node"
    idle_gpus: int = 0
    headroom_requests_per_s: float = 0.0
    tie_break: str | None = None
    placement: list[ReplicaPlacement] = Field(default_factory=list)
    batch: float = Field(description="Running sequences per (decode) replica at the target load")
    max_batch_within_slo: float
    price_per_gpu_hour: float | None
    price_source: str | None
    cost_per_hour: float | None = Field(description="$ per hour of the whole plan: all replicas, every rented GPU")
    cost_per_month: float | None = Field(description=(
        "cost_per_hour x the hours of a month (planning/cost.py HOURS_PER_MONTH 730, or the scenario's "
        "cost.hours_per_month)"))
    cost_per_mtok_out: float | None
    cost_per_mtok_in: float | None
    cost_per_mtok_out_full_load: float | None
    cost_per_mtok_in_full_load: float | None
    ttft_s: float
    tpot_s: float | None
    tokens_per_s_per_user: float | None
    requests_per_s: float = Field(description="The offered (target) load, the whole cluster")
    output_tokens_per_s: float = Field(description="Output tokens/s of the whole cluster at the offered load")
    output_tokens_per_s_per_gpu: float
    full_load_requests_per_s: float
    full_load_output_tokens_per_s: float
    internode_replica: bool
    step_breakdown_s: dict[str, float] = Field(description=(
        "Seconds per kind of one decode step at max_batch_within_slo (the batch the binding limit stops at), "
        "step_s their sum"))
    binding: str
    why: str
    speed_calibrated: bool
    prefill: PrefillPool | None = None
    xPyD: str | None = None
    explanation: str | None = None
    ttft_s_interval: Interval | None = None
    tpot_s_interval: Interval | None = None
    tokens_per_s_per_user_interval: Interval | None = None
    full_load_requests_per_s_interval: Interval | None = None
    full_load_output_tokens_per_s_interval: Interval | None = None
    serving_replicas_interval: Interval | None = None
    intervals: IntervalsUsed | None = None
    sized_on: ConfidenceBound | None = None


class ParetoPoint(Schema):
    _omit_if_none = frozenset({"tokens_per_s_per_user_interval", "output_tokens_per_s_per_gpu_interval"})
    tokens_per_s_per_user: float
    output_tokens_per_s_per_gpu: float
    mode: str
    layout: str
    batch: float
    tokens_per_s_per_user_interval: Interval | None = None
    output_tokens_per_s_per_gpu_interval: Interval | None = None


class PerMtok(Schema):
    input: float
    output: float


class EndpointComparison(Schema):
    input_per_mtok: float
    output_per_mtok: float
    endpoint_cost_per_hour: float
    cluster_cost_per_hour: float
    verdict: str
    break_even_requests_per_s: float | None
    break_even_output_tokens_per_s: float | None
    cluster_equivalent_per_mtok: PerMtok
    explanation: str


class LongestRequest(Schema):
    """The longest request the planned workload describes (its longest prompt class and longest output): what an
    engine's max_model_len must hold (deploy checks --max-model-len against it, also for a saved plan)."""

    prompt_tokens: float
    output_tokens: float
    #: True when every request has the same lengths (isl and osl, no distribution, no agent sessions)
    fixed: bool

    def describe(self) -> str:
        total = self.prompt_tokens + self.output_tokens
        if self.fixed:
            return f"isl + osl = {total:,.0f}"
        return (f"the longest the workload describes: prompt {self.prompt_tokens:,.0f} + output "
                f"{self.output_tokens:,.0f} = {total:,.0f} tokens")


class ClosestMiss(Schema):
    _omit_if_none = frozenset({"ttft_s_interval", "tpot_s_interval"})
    system: str
    precision: str
    layout: str
    tp: int
    pp: int
    ep: int
    dp: int
    gpus_per_replica: int
    batch: float
    tpot_s: float
    ttft_s: float
    missed: list[str]
    binding: str
    why: str
    ttft_s_interval: Interval | None = None
    tpot_s_interval: Interval | None = None


class PredictedLatency(Schema):
    """The plan's own figures: TTFT and TPOT at the SLO's percentiles, the mean TPOT, requests/s served."""

    ttft_s: float
    tpot_s: float | None   # None: one output token per request (no TPOT)
    ttft_percentile: float = 90.0
    tpot_percentile: float = 90.0
    tpot_mean_s: float | None = None
    requests_per_s: float | None = None


class Disagreement(Schema):
    """A figure where the simulation and the plan differ by more than 10%, and why (as far as we can tell)."""

    metric: str
    plan: float
    simulated: float
    ratio: float
    why: str


class SimulatedVerification(SimReport):
    """``plan --verify`` that ran: the simulator's report of the recommended plan (the same keys as
    ``simulate --json``), what the plan predicted, and where the two differ by more than 10%."""

    _omit_if_none = frozenset({"mode", "pools", "closed_loop", "note"})
    simulated: Literal[True] = True
    plan_predicted: PredictedLatency
    disagreements: list[Disagreement] = Field(default_factory=list)
    note: str | None = Field(None, description="what the check simulated other than the planned load, in words (the "
                             "scenario's own arrivals, an open loop in place of concurrent sessions, a closed loop "
                             "of fewer clients or too few requests each); absent when it simulated that load")
    mode: str | None = None
    pools: dict[str, Any] | None = None


class SkippedVerification(Schema):
    """``plan --verify`` that did not run, and why."""

    simulated: Literal[False] = False
    reason: str


#: ``plan --verify``: the simulation of the recommended plan, or why none ran (``simulated`` tells which).
Verification = SimulatedVerification | SkippedVerification


class DeployFile(Schema):
    path: str
    role: str
    text: str


class DeployResult(Schema):
    """What ``clusterfit deploy`` wrote (``out`` None: nothing written) for which plan row."""

    out: str | None
    engine: str
    engine_version: str
    target: str
    plan: PlanOption
    files: list[DeployFile]


class CapacityLayout(Schema):
    """One layout packed into the budget (capacity mode): the load it carries within the SLOs at ``batch`` per
    (decode) replica. ``output_tokens_per_s_per_gpu`` is per GPU of the budget (idle GPUs included);
    ``requests_per_s`` and ``output_tokens_per_s`` count the serving replicas only (spares stand by). ``tpot_s`` and
    ``tokens_per_s_per_user`` are None with one output token per request (no request decodes)."""

    _omit_if_none = frozenset({"prefill_layout", "prefill_replicas", "xPyD", "requests_per_s_interval",
                               "output_tokens_per_s_interval", "output_tokens_per_s_per_gpu_interval",
                               "tokens_per_s_per_user_interval", "ttft_s_interval", "tpot_s_interval"})
    system: str
    mode: Literal["aggregated", "disaggregated"]
    precision: str
    kv_dtype: str
    layout: str
    tp: int
    pp: int
    ep: int
    dp: int
    gpus_per_replica: int
    nodes_per_replica: int
    replicas: int
    serving_replicas: int
    spare_replicas: int
    gpus_used: int
    idle_gpus: int
    batch: float
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float | None
    ttft_s: float
    tpot_s: float | None
    prefill_layout: str | None = None
    prefill_replicas: int | None = None
    xPyD: str | None = None
    requests_per_s_interval: Interval | None = None
    output_tokens_per_s_interval: Interval | None = None
    output_tokens_per_s_per_gpu_interval: Interval | None = None
    tokens_per_s_per_user_interval: Interval | None = None
    ttft_s_interval: Interval | None = None
    tpot_s_interval: Interval | None = None


class CapacityAnswer(Schema):
    """Capacity mode (``plan --nodes N`` / ``--gpus N`` with no load): the budget per system and every layout
    that fits in it, the most requests/s first (ties: fewer nodes per replica, then lower TPOT)."""

    nodes: int | None
    gpus: int | None
    budget_gpus: dict[str, int]
    layouts: list[CapacityLayout]


class PlanResult(Schema):
    _omit_if_none = frozenset({"endpoint", "closest", "explanation", "verify", "plot", "capacity", "confidence",
                               "speculative", "one_output_token"})
    model: str
    workload: str
    slo: str
    failover: int
    engine: str
    feasible: bool
    recommended: PlanOption | None
    per_system: list[PlanOption]
    pareto: dict[str, list[ParetoPoint]]
    configurations_evaluated: int
    candidates_compiled: int
    not_fitting: list[str]
    queueing_model: str
    #: systems with layouts that fit but none within the SLOs (or the --confidence bound), each with its closest miss
    no_plan: list[str] = Field(default_factory=list)
    #: the longest request of the workload (None in plans written before it was recorded)
    longest_request: LongestRequest | None = None
    #: the hours of a month cost_per_month bills (planning/cost.py HOURS_PER_MONTH 730, or the scenario's
    #: cost.hours_per_month); None in plans written before it was recorded
    hours_per_month: float | None = None
    endpoint: EndpointComparison | None = None
    closest: ClosestMiss | None = None
    explanation: str | None = None
    verify: Verification | None = None
    plot: str | None = None
    #: the settings the recommended replica runs with (the engine's defaults on its GPU and layout, yours over
    #: them); the catalog's defaults when nothing is recommended
    engine_settings: ServingEngineSettings | None = None
    capacity: CapacityAnswer | None = None
    confidence: int | None = None
    #: speculative decoding on every replica, as perf's block (the draft cost derived from the model); None: none
    speculative: SpeculativeOut | None = None
    #: True when every request asks for one output token: it is sampled at the end of the prefill, no request
    #: decodes, so the options' tpot_s (the engine's decode step at their batch) is no request's TPOT; absent otherwise
    one_output_token: bool | None = None
