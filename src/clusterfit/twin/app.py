"""The twin's HTTP server (FastAPI, the ``twin`` extra): OpenAI-compatible endpoints over a :class:`Twin`.

    GET  /v1/models                  the served model (vLLM's fields: root, max_model_len)
    POST /v1/completions             text completions, streaming (SSE) or not
    POST /v1/chat/completions        chat completions, streaming (SSE) or not
    GET  /health                     200 while serving
    GET  /metrics                    Prometheus text, vLLM's metric names (twin.metrics)
    GET  /twin                       what is simulated: model, system, layout, engine, replicas, limits
    GET  /twin/requests?after=SEQ    finished requests with their simulated times (seconds on the twin's clock)

A client that disconnects cancels its requests in the simulation, as vLLM aborts a request whose client left.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response, StreamingResponse

from ..errors import ClusterfitError, brief
from ..inputs import parse_document
from ..schema import parse_request
from .config import CHARS_PER_TOKEN, TwinRequest, build_setup
from .engine import Stream, Twin, TwinUnavailable
from .openai import (DONE_EVENT, ApiError, ChatBody, Chunks, CompletionBody, chat_prompt, completion_prompts,
                     output_tokens, parse_body, usage)


def make_app(request: TwinRequest | None = None, /, **kwargs: Any) -> FastAPI:
    """The twin as an ASGI app (serve it with uvicorn). Takes a :class:`TwinRequest` or its fields as keyword
    arguments (``make_app(model="meta-llama/Llama-3.1-8B", system="h200", replicas=2)``); bad ones raise
    ``ParameterError``. The clock starts when the server starts (the app's lifespan). ``app.state.twin`` is the
    :class:`Twin`."""
    req = request if request is not None else parse_request(TwinRequest, kwargs)
    twin = Twin(build_setup(req))

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        twin.start()
        try:
            yield
        finally:
            twin.stop()

    app = FastAPI(title="clusterfit twin", summary=f"A simulated {twin.setup.model_id} cluster behind an "
                  "OpenAI-compatible API", lifespan=lifespan)
    app.state.twin = twin
    _routes(app, twin)
    return app


def _routes(app: FastAPI, twin: Twin) -> None:
    setup = twin.setup
    created = int(time.time())

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def _http_error(_request: Request, exc: HTTPException) -> Response:
        return JSONResponse(ApiError(exc.status_code, str(exc.detail)).body(), status_code=exc.status_code)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=503 if twin.draining else 200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "clusterfit-twin",
             "root": setup.model_id, "parent": None, "max_model_len": setup.max_model_len}
            for name in setup.served_names]}

    @app.get("/metrics")
    async def metrics() -> Response:
        twin.sync()
        body, ctype = twin.metrics.render()
        return Response(body, media_type=ctype)

    @app.get("/twin")
    async def describe() -> dict[str, Any]:
        return describe_twin(twin)

    @app.get("/twin/requests")
    async def finished(request: Request, after: str = "0") -> dict[str, Any]:
        after_seq = _after_seq(request)   # ``after`` is named above for the API's schema; checked here, with the rest
        twin.sync()
        return {"clock_s": twin.now(), "requests": [_json_safe(r) for r in twin.finished(after_seq)]}

    async def serve(request: Request, chat: bool) -> Response:
        body = parse_body(ChatBody if chat else CompletionBody, await _json(request))
        model = _model(body.model, setup.served_names)
        prompts = [chat_prompt(body)] if chat else completion_prompts(body)
        outs = [output_tokens(body, p, setup.max_model_len, setup.request.chat_max_tokens) for p in prompts]
        jobs = [(p, o) for p, o in zip(prompts, outs) for _ in range(body.n)]
        if len(jobs) > 128:
            raise ApiError(400, f"{len(prompts)} prompts x n={body.n} is {len(jobs)} choices; at most 128",
                           param="n")
        limit = setup.request.max_outstanding
        if len(jobs) > limit:  # a 503 would ask the client to retry what can never be taken
            what = f"n={body.n}" if len(prompts) == 1 else f"{len(prompts)} prompts x n={body.n}"
            raise ApiError(400, f"{what} is {len(jobs)} simulated requests; the twin takes at most {limit:,} in "
                           "flight (--max-outstanding)", param="n" if body.n > 1 else "prompt")
        for p, o in zip(prompts, outs):
            if not twin.fits(p, o):
                raise ApiError(400, f"a request of {p} prompt + {o} output tokens needs more KV cache than one replica "
                               f"has ({twin.cluster.kv_capacity:,} tokens)", param="max_tokens")
        waker = asyncio.Event()
        try:
            streams = twin.submit(jobs, waker, wake_on_tokens=body.stream)
        except TwinUnavailable as exc:
            raise ApiError(503, str(exc), kind="server_error", code="overloaded") from None
        prefix = "chatcmpl-" if chat else "cmpl-"
        chunks = Chunks(chat, prefix + uuid.uuid4().hex, int(time.time()), model)
        tally = usage(prompts, [o for o in outs for _ in range(body.n)])
        watch = asyncio.ensure_future(_on_disconnect(request.receive, lambda: _cancel(twin, streams)))
        if not body.stream:
            try:
                while not all(s.done or s.aborted for s in streams):
                    await waker.wait()
                    waker.clear()
            finally:
                watch.cancel()
                _cancel(twin, streams)
            if any(s.aborted for s in streams):
                raise ApiError(503, f"the request was cancelled: {twin.failure or 'the twin is stopping'}",
                               kind="server_error")
            return JSONResponse(chunks.body([s.produced for s in streams], tally))
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(_events(twin, streams, waker, chunks, tally, include_usage, watch),
                                 media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serve(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serve(request, chat=True)


async def _events(twin: Twin, streams: list[Stream], waker: asyncio.Event, chunks: Chunks, tally: dict[str, int],
                  include_usage: bool, watch: asyncio.Future[None]) -> AsyncIterator[str]:
    """The SSE events of one response: tokens as the simulated cluster emits them, several per event when the
    loop was late; the last event of each choice carries ``finish_reason`` (and, without ``include_usage``, the
    usage when it is the last choice to finish); then the usage event if asked, then ``[DONE]``."""
    open_ = set(range(len(streams)))
    try:
        while open_:
            await waker.wait()
            waker.clear()
            if any(s.aborted for s in streams):  # the client left (nobody reads) or the twin stops: say why
                if twin.stopping:
                    err = ApiError(503, f"the request was cancelled: {twin.failure or 'the twin is stopping'}",
                                   kind="server_error")
                    yield f"data: {json.dumps(err.body())}\n\n"
                return
            for i in sorted(open_):
                s = streams[i]
                first = s.sent == 0
                k = twin.delivered(s)
                if s.done:
                    open_.discard(i)
                    last = not open_ and not include_usage
                    yield chunks.delta(i, k, first and k > 0, True, tally if last else None)
                elif k:
                    yield chunks.delta(i, k, first, False)
        if include_usage:
            yield chunks.usage_event(tally)
        yield DONE_EVENT
    finally:
        watch.cancel()
        _cancel(twin, streams)


def _cancel(twin: Twin, streams: list[Stream]) -> None:
    for s in streams:
        twin.abort(s)


async def _on_disconnect(receive: Callable[[], Awaitable[MutableMapping[str, Any]]], then: Callable[[], None]) -> None:
    """Wait for the client to go away (the ASGI ``http.disconnect`` message), then call ``then``."""
    while (await receive())["type"] != "http.disconnect":
        pass
    then()


async def _json(request: Request) -> Any:
    """The body as JSON: UTF-8, no NaN / Infinity, nested at most inputs.MAX_DEPTH levels (json.loads' own
    recursion on a deeper body was a RecursionError, a 500)."""
    raw = await request.body()
    try:
        return parse_document(raw.decode("utf-8"), "the request body", "json")
    except UnicodeDecodeError:
        raise ApiError(400, "the request body: not valid JSON: it is not UTF-8") from None
    except ClusterfitError as exc:
        raise ApiError(400, str(exc)) from None


def _after_seq(request: Request) -> int:
    """GET /twin/requests' one query parameter, ``after`` (a sequence number, default 0), checked here: any other
    parameter (``?limit=5``) would be ignored without a word, and FastAPI's own check answers 422 in its own shape,
    not a 400 in OpenAI's."""
    params = request.query_params
    other = next((k for k in params if k != "after"), None)
    if other is not None:
        raise ApiError(400, f"{other}: /twin/requests takes no such parameter; it takes after=SEQ (the requests "
                       "finished after sequence number SEQ)", param=other)
    values = params.getlist("after")
    if len(values) > 1:
        raise ApiError(400, "after: given more than once", param="after")
    text = values[0] if values else "0"
    try:
        if text.isascii() and text.isdigit():
            return int(text)
    except ValueError:   # more digits than int() reads
        pass
    raise ApiError(400, f"after: must be a sequence number (an integer >= 0), got {brief(text, 40)}", param="after")


def _model(name: str | None, served: tuple[str, ...]) -> str:
    if name is None:
        return served[0]
    if name not in served:
        raise ApiError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")
    return name


def _json_safe(record: dict[str, Any]) -> dict[str, Any]:
    """nan (a phase that never happened) as null."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()}


def describe_twin(twin: Twin) -> dict[str, Any]:
    """What the twin simulates (GET /twin), units in the key names."""
    setup = twin.setup
    rep = setup.replica
    cl = twin.cluster
    return {
        "model": setup.model_id, "served_model_names": list(setup.served_names), "system": rep.system.id,
        "gpu": rep.system.gpu.id, "layout": rep.layout.label(), "gpus_per_replica": rep.gpus,
        "replicas": setup.sim.replicas, "policy": setup.sim.policy, "engine": rep.engine.name,
        "precision": rep.precision.name, "kv_dtype": rep.precision.kv_dtype,
        "kv_capacity_tokens_per_replica": cl.kv_capacity, "max_num_seqs": cl.max_num_seqs,
        "max_num_batched_tokens": cl.max_num_batched_tokens, "max_model_len": setup.max_model_len,
        "chars_per_token": CHARS_PER_TOKEN, "chat_max_tokens": setup.request.chat_max_tokens,
        "max_outstanding": setup.request.max_outstanding, "in_flight": twin.in_flight,
        "clock_s": twin.now() if twin.started else None,
    }
