"""Run a benchmark: find the model, check the endpoint with one request, send the planned load, summarise.

    from clusterfit.bench import BenchConfig, run_bench
    result = run_bench(BenchConfig(url="http://127.0.0.1:8000", rate=4, requests=200, isl=512, osl=128))
    result.tpot_s.mean, result.throughput.output_tokens_per_s, result.failures, result.records[0].ttft_s

Open loop (``rate``, ``trace``): each request is sent at its planned time whatever the server does (a concurrency
cap, when given, holds requests back and shows as send lag). Closed loop (``concurrency`` alone): that many requests
in flight, the next sent when one finishes. No request is sent after ``duration`` seconds; requests in flight then
finish (each within ``timeout``). Before the load, one request of 1 output token checks that the endpoint answers as
an OpenAI-compatible stream (vLLM's bench sends such a test request too); it is not counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from ..errors import ClusterfitError
from .config import DEFAULT_REQUESTS, MAX_BENCH_REQUESTS, BenchConfig, base_v1, parse_config
from .load import Plan, describe_lengths, filler_prompt, plan
from .metrics import summarize
from .result import BenchLoad, BenchResult, BenchSweep, RequestRecord

#: Seconds the model look-up (GET /v1/models) may take.
MODELS_TIMEOUT_S = 30.0


class BenchProgress(Protocol):
    """What a progress display is told: a run starts (``total`` requests, None when only a duration bounds it),
    each request ends, the run ends."""

    def started(self, total: int | None, description: str) -> None: ...

    def request_done(self, record: RequestRecord) -> None: ...

    def finished(self) -> None: ...


def run_bench(config: BenchConfig | None = None, /, progress: BenchProgress | None = None,
              **kwargs: Any) -> BenchResult:
    """Run one benchmark (a BenchConfig, or its fields as keyword arguments) and return its BenchResult.

    Raises ClusterfitError when the endpoint cannot be used at all: nothing listens, the URL is wrong, it does not
    answer as an OpenAI-compatible stream, or every request failed. Requests that fail in a run that otherwise
    works are counted in the result (``failed``, ``failures``), never raised. Inside a running event loop, await
    ``bench_async`` instead."""
    cfg = parse_config(config, **kwargs)
    return asyncio.run(bench_async(cfg, progress))


def run_sweep(config: BenchConfig, parameter: Literal["rate", "concurrency"], values: list[float],
              progress: BenchProgress | None = None) -> BenchSweep:
    """Run ``config`` at each value of ``parameter`` (requests/s or requests in flight), one after another."""
    base = config.model_dump(exclude_unset=True)
    configs = [parse_config(**(base | {parameter: v})) for v in values]   # every value checked before any run
    runs = [run_bench(c, progress) for c in configs]
    return BenchSweep(parameter=parameter, values=[float(v) for v in values], runs=runs)


async def bench_async(config: BenchConfig, progress: BenchProgress | None = None) -> BenchResult:
    """``run_bench`` as a coroutine."""
    import httpx

    cfg = parse_config(config)
    if cfg.model == "":    # BenchConfig takes any name of at most 512 characters; an empty one names no model
        raise ClusterfitError("--model is empty: give the served model name, or leave --model out to take the first "
                              "model GET /v1/models lists")
    # what can be checked here is checked before the endpoint is contacted: the trace, the prediction's options
    planned = plan(cfg)
    if cfg.compare is not None:
        from .compare import check_prediction_options

        check_prediction_options(cfg)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=cfg.concurrency or 1024)
    async with httpx.AsyncClient(timeout=httpx.Timeout(cfg.timeout), limits=limits, trust_env=False) as client:
        # one GET /v1/models serves both the model's discovery and --compare's check of what is served
        listing: ModelsListing | None
        if cfg.model is None:
            listing = await models_listing(client, cfg)
            model = discover_model(listing)
        else:
            listing = await models_listing(client, cfg) if cfg.compare is not None else None
            model = cfg.model
        served = served_model(cfg, model, listing) if cfg.compare is not None else None
        await preflight(client, cfg, model)
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        records, duration_s = await _drive(client, cfg, model, planned, progress)
    if records and not any(r.ok for r in records):
        raise ClusterfitError(_all_failed(records, cfg.completions_url()))
    result = BenchResult.model_validate({
        "url": cfg.url, "endpoint": cfg.endpoint, "model": model, "started_at": started_at, "load": _load(cfg),
        **summarize(records, duration_s, None if cfg.ttft_ms is None else cfg.ttft_ms / 1e3,
                    None if cfg.tpot_ms is None else cfg.tpot_ms / 1e3),
        "notes": list(planned.notes)})
    result._records = records
    if cfg.compare is not None:
        from .compare import compare

        result.comparison = compare(cfg, result, served)
    return result


def _load(cfg: BenchConfig) -> BenchLoad:
    trace = cfg.kind == "trace"
    return BenchLoad(kind=cfg.kind, rate_rps=cfg.rate, arrival=cfg.arrival_process if cfg.kind == "rate" else None,
                     burstiness=cfg.burstiness, concurrency=cfg.concurrency, trace=cfg.trace,
                     input_lengths=None if trace else describe_lengths(cfg.input_spec),
                     output_lengths=None if trace else describe_lengths(cfg.output_spec),
                     requests_limit=cfg.requests if cfg.requests is not None or trace or cfg.duration is not None
                     else DEFAULT_REQUESTS,
                     duration_limit_s=cfg.duration, timeout_s=cfg.timeout, seed=cfg.seed, ignore_eos=cfg.ignore_eos)


def _cannot_connect(url: str, detail: str) -> str:
    return f"cannot connect to {url}: {detail}; is the server running, and is the URL right?"


@dataclass(frozen=True)
class ModelsListing:
    """What GET /v1/models answered: the response, or the transport error that stopped it (one of them is set)."""

    url: str
    response: Any = None     # httpx.Response
    error: Any = None        # httpx.HTTPError


async def models_listing(client: Any, cfg: BenchConfig) -> ModelsListing:
    """GET /v1/models once, for discover_model and served_model."""
    import httpx

    from .client import headers

    url = base_v1(cfg.url) + "/models"
    try:
        return ModelsListing(url, response=await client.get(url, headers=headers(),
                                                             timeout=min(cfg.timeout, MODELS_TIMEOUT_S)))
    except httpx.HTTPError as exc:
        return ModelsListing(url, error=exc)


def _entries(listing: ModelsListing | None) -> list[Any] | None:
    """The listing's ``data`` in OpenAI's shape ([]: an answer other than HTTP 200; None: no answer, or not that
    shape)."""
    response = None if listing is None else listing.response
    if response is None:
        return None
    if response.status_code != 200:
        return []
    try:
        entries = response.json()["data"]
    except (ValueError, LookupError, TypeError):
        return None
    return entries if isinstance(entries, list) else None


def discover_model(listing: ModelsListing) -> str:
    """The first model id the server lists at GET /v1/models (what vLLM's bench does without --model)."""
    import httpx

    from .client import describe_error

    url = listing.url
    if isinstance(listing.error, httpx.ConnectError):
        raise ClusterfitError(_cannot_connect(url, describe_error(listing.error)))
    if listing.error is not None:
        raise ClusterfitError(f"--model not given, and GET {url} failed: {describe_error(listing.error)}; is the URL "
                              "an OpenAI-compatible server? (or give --model)")
    entries = _entries(listing)
    try:
        model = entries[0]["id"] if entries else None
    except (LookupError, TypeError):
        model = None
    if not isinstance(model, str) or not model:
        raise ClusterfitError(f"--model not given, and GET {url} (HTTP {listing.response.status_code}) lists no model "
                              "in OpenAI's shape ({\"data\": [{\"id\": ...}]}); give --model")
    return model


def served_model(cfg: BenchConfig, model: str, listing: ModelsListing | None) -> tuple[str, str | None] | None:
    """The id and ``root`` (vLLM: the checkpoint served; None when not said) of ``model`` as GET /v1/models lists it
    (the first entry when none has its id), or None when the server does not say (no listing, not OpenAI's shape).
    Best effort: --compare uses it to say when the endpoint serves another model than the one predicted."""
    entries = _entries(listing)
    if entries is None:
        return None
    entries = [e for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]
    entry = next((e for e in entries if e["id"] == model), entries[0] if entries and cfg.model is None else None)
    if entry is None:
        return (model, None) if cfg.model is not None else None
    root = entry.get("root")
    return entry["id"], root if isinstance(root, str) and root else None


#: Prompt tokens of the check request; its index seeds its filler words apart from the run's requests.
_PREFLIGHT_TOKENS = 8
_PREFLIGHT_INDEX = MAX_BENCH_REQUESTS


async def preflight(client: Any, cfg: BenchConfig, model: str) -> None:
    """Send one request of 1 output token; raise ClusterfitError saying why the endpoint cannot be benchmarked."""
    from .client import request_body, send_request

    url = cfg.completions_url()
    rec = RequestRecord(_PREFLIGHT_INDEX, None, 0.0, _PREFLIGHT_TOKENS, 1)
    body = request_body(cfg.endpoint, model, filler_prompt(_PREFLIGHT_TOKENS, _PREFLIGHT_INDEX, cfg.seed), 1,
                        cfg.ignore_eos)
    await send_request(client, url, body, cfg.endpoint, cfg.timeout, rec, time.perf_counter())
    if rec.ok:
        return
    if rec.error == "connect":
        raise ClusterfitError(_cannot_connect(url, rec.detail))
    if rec.error == "timeout":
        raise ClusterfitError(f"{url} did not answer a 1-token request within --timeout {cfg.timeout:g} s")
    if rec.error is not None and rec.error.startswith("http_"):
        hint = " (--no-ignore-eos if the server refuses ignore_eos)" if rec.http_status == 400 else ""
        raise ClusterfitError(f"{url} refused a 1-token request of model {model!r}: {rec.detail}; is it an "
                              f"OpenAI-compatible server, and is --model right?{hint}")
    raise ClusterfitError(f"{url} did not answer as an OpenAI-compatible streaming endpoint ({rec.error}: "
                          f"{rec.detail})")


def _all_failed(records: list[RequestRecord], url: str) -> str:
    from .metrics import failure_counts

    counts = failure_counts(records)
    parts = ", ".join(f"{c['reason']} x{c['count']}" for c in counts)
    return f"all {len(records)} requests to {url} failed ({parts}); first: {counts[0]['example']}"


async def _drive(client: Any, cfg: BenchConfig, model: str, planned: Plan,
                 progress: BenchProgress | None) -> tuple[list[RequestRecord], float]:
    """Send the ``planned`` requests (``plan(cfg)``); return their records (in plan order) and the run's duration,
    s."""
    from .client import request_body, send_request

    url = cfg.completions_url()
    slots = asyncio.Semaphore(cfg.concurrency) if cfg.concurrency is not None else None
    records: list[RequestRecord] = []
    pending: set[asyncio.Task[RequestRecord]] = set()
    done: Callable[[RequestRecord], None] = progress.request_done if progress is not None else (lambda r: None)
    if progress is not None:
        progress.started(planned.total, f"{cfg.kind} {_load_label(cfg)}")

    async def one(body: dict[str, Any], rec: RequestRecord, origin: float) -> RequestRecord:
        try:
            await send_request(client, url, body, cfg.endpoint, cfg.timeout, rec, origin)
        finally:
            if slots is not None:
                slots.release()
        done(rec)
        return rec

    origin = time.perf_counter()
    try:
        for p in planned.requests:
            body = request_body(cfg.endpoint, model, filler_prompt(p.input_tokens, p.index, cfg.seed),
                                p.output_tokens, cfg.ignore_eos)
            if p.arrival_s is not None:
                delay = origin + p.arrival_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            if slots is not None:
                await slots.acquire()
            if cfg.duration is not None and time.perf_counter() - origin >= cfg.duration:
                if slots is not None:
                    slots.release()
                break
            rec = RequestRecord(p.index, p.arrival_s, 0.0, p.input_tokens, p.output_tokens)
            records.append(rec)
            task = asyncio.create_task(one(body, rec, origin))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending)
    finally:
        for task in pending:
            task.cancel()
        if progress is not None:
            progress.finished()
    return records, time.perf_counter() - origin


def _load_label(cfg: BenchConfig) -> str:
    if cfg.kind == "rate":
        return f"{cfg.rate:g} req/s" + (f", at most {cfg.concurrency} in flight" if cfg.concurrency else "")
    if cfg.kind == "concurrency":
        return f"{cfg.concurrency} in flight"
    return str(cfg.trace)
