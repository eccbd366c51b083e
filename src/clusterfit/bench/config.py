"""What `clusterfit bench` is asked to do: the endpoint, the load, the lengths, the bounds, the SLOs and the
optional prediction to compare with (``BenchConfig``, one pydantic model; the CLI's options with ``_`` for ``-``).

The load uses the simulator's workload vocabulary (``clusterfit.sim.config``): arrivals ``poisson`` / ``gamma`` /
``mmpp`` / ``diurnal`` at ``rate`` requests/s, lengths ``fixed`` / ``lognormal`` / ``empirical``
(``SampledLengthSpec``), or a trace file in the simulator's formats. ``concurrency`` alone is a closed loop (that
many requests in flight, each sent when one finishes: ``vllm bench serve --max-concurrency`` with an infinite
request rate); with ``rate`` or ``trace`` it caps the requests in flight (as ``--max-concurrency`` does there).
"""

from __future__ import annotations

import math
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from ..inputs import http_url_problem
from ..schema import MAX_RATE_RPS, MAX_TOKENS, EngineSettingsRequest, LayoutRequest, ParameterError
from ..sim.config import SampledLengthSpec
from ..sim.requests import check_rate

#: Most requests one run may send: each keeps its inter-token gaps (8 bytes per output token) until the end.
MAX_BENCH_REQUESTS = 1_000_000
#: Most requests in flight at once (each holds one connection).
MAX_CONCURRENCY = 100_000
#: Requests sent when neither ``requests`` nor ``duration`` is given.
DEFAULT_REQUESTS = 100
#: The smallest burstiness (vLLM's gamma shape k of the gaps): k = 0.01 is a CV of 10; below, the gaps' scale
#: 1 / (rate x k) overflows.
MIN_BURSTINESS = 0.01
#: Seconds one request may take, start to last byte, before it counts as a timeout (vLLM's client allows 6 h:
#: vllm/benchmarks/lib/endpoint_request_func.py AIOHTTP_TIMEOUT; an SRE's client gives up sooner).
DEFAULT_TIMEOUT_S = 600.0

Endpoint = Literal["completions", "chat"]
Arrival = Literal["poisson", "gamma", "mmpp", "diurnal"]
#: The path of each endpoint below the server's ``/v1``.
ENDPOINT_PATHS: dict[str, str] = {"completions": "/completions", "chat": "/chat/completions"}


class BenchConfig(LayoutRequest, EngineSettingsRequest):
    """One benchmark run against an OpenAI-compatible server.

    url: the server's base URL (``http://host:port``, or a gateway prefix; a trailing ``/v1`` is allowed).
    endpoint: ``completions`` (POST /v1/completions) or ``chat`` (POST /v1/chat/completions).
    model: the served model name sent in each request (None: the first entry of GET /v1/models).
    rate: arrivals per second (open loop); arrival: the simulator's process (default poisson; gamma when
        ``burstiness`` is given); burstiness: vLLM's gamma shape (1 Poisson, < 1 burstier, > 1 smoother; without
        it ``arrival: gamma`` takes the simulator's default CV of 2).
    concurrency: requests in flight (closed loop alone; a cap with rate or trace).
    trace: a CSV/JSONL trace (the simulator's formats, or a shipped sample name): its arrivals and lengths.
    isl / osl: prompt and output tokens per request (fixed, or the mean of a lognormal with ``length_cv``);
        input_lengths / output_lengths: any ``SampledLengthSpec`` (empirical values) instead.
    requests / duration: stop after this many requests, or send none after ``duration`` seconds (requests in
        flight then finish); timeout: seconds one request may take before it counts as failed (timeout).
    ttft_ms / tpot_ms: SLOs for goodput (vLLM's --goodput ttft:MS tpot:MS).
    ignore_eos: send ``ignore_eos: true`` so the server generates all ``max_tokens`` (vLLM, SGLang).
    compare and the layout / engine options: predict the same load with clusterfit (the simulator's replay of the
        requests sent, open or closed loop: bench.compare) for model ``compare`` on ``system`` and show it beside
        the measurement.
    """

    url: str = Field(description="The server's base URL, http:// or https://")
    endpoint: Endpoint = "completions"
    model: str | None = Field(None, max_length=512, description="Served model name (default: GET /v1/models)")
    rate: float | None = Field(None, gt=0, le=MAX_RATE_RPS, description="Arrival rate, requests/s")
    arrival: Arrival | None = None
    burstiness: float | None = Field(None, ge=MIN_BURSTINESS, le=1e6,
                                     description="Gamma shape of the gaps (vLLM's --burstiness)")
    concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY, description="Requests in flight")
    trace: str | None = None
    isl: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Prompt tokens per request")
    osl: int | None = Field(None, ge=1, le=MAX_TOKENS, description="Output tokens per request (max_tokens)")
    length_cv: float = Field(0.0, ge=0.0, le=100.0, description="CV of a lognormal around --isl/--osl (0: fixed)")
    input_lengths: SampledLengthSpec | None = None
    output_lengths: SampledLengthSpec | None = None
    requests: int | None = Field(None, ge=1, le=MAX_BENCH_REQUESTS)
    duration: float | None = Field(None, gt=0, le=7 * 86400.0, description="Send no request after this, s")
    timeout: float = Field(DEFAULT_TIMEOUT_S, gt=0, le=86400.0, description="Per-request limit, s")
    seed: int = Field(0, ge=0, le=2**32 - 1)
    ttft_ms: float | None = Field(None, gt=0, description="TTFT SLO for goodput, ms")
    tpot_ms: float | None = Field(None, gt=0, description="TPOT SLO for goodput, ms")
    ignore_eos: bool = True
    compare: str | None = Field(None, description="Model (HF id or alias) whose prediction is shown beside")
    system: str | None = None
    gpus: int | None = Field(None, ge=1, le=4096)
    precision: str | None = None
    kv_dtype: str | None = Field(None, min_length=1)
    engine: str | None = Field(None, min_length=1)
    replicas: int | None = Field(None, ge=1, le=4096, description="Replicas behind the endpoint (prediction)")
    policy: str | None = None
    catalog: list[str] = Field(default_factory=list)

    @property
    def kind(self) -> Literal["rate", "concurrency", "trace"]:
        """The load shape: open-loop arrivals at a rate, a trace replay, or a closed loop."""
        if self.trace is not None:
            return "trace"
        return "rate" if self.rate is not None else "concurrency"

    @property
    def input_spec(self) -> SampledLengthSpec:
        """Prompt lengths in the simulator's vocabulary (not for a trace)."""
        return self.input_lengths or _spec(self.isl, self.length_cv)

    @property
    def output_spec(self) -> SampledLengthSpec:
        """Output lengths in the simulator's vocabulary (not for a trace)."""
        return self.output_lengths or _spec(self.osl, self.length_cv)

    @property
    def arrival_process(self) -> Arrival:
        """The simulator's arrival process for ``rate``: as given, else gamma when ``burstiness`` is given."""
        return self.arrival or ("poisson" if self.burstiness is None else "gamma")

    @property
    def arrival_cv(self) -> float | None:
        """Coefficient of variation of the gaps, None for the simulator's default: gamma with shape k has CV
        1/sqrt(k) (vLLM draws its gaps with shape = burstiness, scale = 1/(rate x burstiness):
        vllm/benchmarks/serve.py get_request)."""
        return None if self.burstiness is None else 1.0 / math.sqrt(self.burstiness)

    def completions_url(self) -> str:
        """The endpoint's full URL."""
        return base_v1(self.url) + ENDPOINT_PATHS[self.endpoint]


def _spec(mean: int | None, cv: float) -> SampledLengthSpec:
    assert mean is not None  # check() requires isl/osl unless lengths come from a trace or a spec
    if cv == 0:
        return SampledLengthSpec(dist="fixed", value=mean)
    return SampledLengthSpec(dist="lognormal", mean=mean, cv=cv)


def base_v1(url: str) -> str:
    """``url`` without a trailing slash, ending in ``/v1`` (appended unless there)."""
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def check_url(url: str) -> None:
    """An http(s) URL with a host; else a ParameterError naming ``url``."""
    problem = http_url_problem(url)
    if problem is not None:
        raise ParameterError("url", f"{problem}, got {url!r}")
    parts = urlsplit(url.strip())
    # each message reads after the field's name: "url: must ..." (the API), "URL must ..." (the CLI's argument)
    if parts.query or parts.fragment:
        part = ("?" + parts.query if parts.query else "") + ("#" + parts.fragment if parts.fragment else "")
        raise ParameterError("url", f"must be the server's base URL (http://host:port, or a gateway prefix) with no "
                                    f"query or fragment; drop {part!r} from {url!r}")
    if parts.path.rstrip("/").endswith("/completions"):
        raise ParameterError("url", f"must be the server's base URL (http://host:port), not the endpoint path "
                                    f"{parts.path!r}; choose the endpoint with --endpoint")


def parse_config(config: BenchConfig | None = None, /, **kwargs: Any) -> BenchConfig:
    """A checked BenchConfig from a model or keyword arguments; a problem raises ParameterError naming the field."""
    from ..schema import parse_request

    if config is None:
        config = parse_request(BenchConfig, kwargs)
    elif kwargs:
        raise ParameterError("config", "give a BenchConfig or keyword arguments, not both")
    assert config is not None
    check(config)
    return config


def check(cfg: BenchConfig) -> None:
    """The relations between fields that pydantic's field checks do not see; each problem names the parameter
    (ParameterError)."""
    check_url(cfg.url)
    if cfg.trace is not None:
        clash = [n for n, v in (("rate", cfg.rate), ("arrival", cfg.arrival), ("isl", cfg.isl), ("osl", cfg.osl),
                                ("input_lengths", cfg.input_lengths), ("output_lengths", cfg.output_lengths))
                 if v is not None] + (["length_cv"] if cfg.length_cv else []) \
            + (["burstiness"] if cfg.burstiness is not None else [])
        if clash:
            raise ParameterError(clash[0], "a trace gives the arrivals and lengths; drop "
                                 + ", ".join(f"--{c.replace('_', '-')}" for c in clash) + " or the trace")
    else:
        if cfg.rate is None and cfg.concurrency is None:
            raise ParameterError("rate", "give a load: --rate R (requests/s), --concurrency N or --trace FILE")
        if cfg.rate is not None:
            check_rate(cfg.rate, live=True)
        if cfg.rate is None and (cfg.arrival is not None or cfg.burstiness is not None):
            raise ParameterError("arrival" if cfg.arrival is not None else "burstiness", "needs --rate")
        if cfg.arrival not in (None, "gamma") and cfg.burstiness is not None:
            raise ParameterError("burstiness", f"sets gamma-distributed gaps; --arrival {cfg.arrival} has its own")
        for name, mean, spec in (("isl", cfg.isl, cfg.input_lengths), ("osl", cfg.osl, cfg.output_lengths)):
            if mean is None and spec is None:
                raise ParameterError(name, f"is required (tokens per request), or --{name}-values")
            if mean is not None and spec is not None:
                raise ParameterError(name, f"give --{name} or --{name}-values, not both")
    _check_compare(cfg)


#: Options that only shape the prediction (they need ``compare``).
_PREDICTION_OPTIONS = ("system", "gpus", "tp", "pp", "ep", "dp", "precision", "kv_dtype", "engine", "replicas",
                       "policy", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
                       "enforce_eager")


def _check_compare(cfg: BenchConfig) -> None:
    if cfg.compare is None:
        given = [n for n in _PREDICTION_OPTIONS if getattr(cfg, n) is not None] + (["catalog"] if cfg.catalog else [])
        if given:
            raise ParameterError(given[0], "shapes the prediction: it needs --compare MODEL")
        return
    if cfg.system is None:
        raise ParameterError("system", "--compare needs --system (the system the endpoint runs on)")
    if cfg.policy is not None:
        from ..sim.config import check_policy

        check_policy(cfg.policy)
