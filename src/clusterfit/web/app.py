"""The HTTP API and the web page: ``create_app()`` builds the FastAPI application ``clusterfit serve`` runs.

Routes: ``POST /api/fit``, ``/api/perf``, ``/api/plan``, ``/api/simulate`` (bodies: ``web.bodies``, the API's
request models without server paths; responses: the API's result models, exactly ``--json``), ``GET /api/models``,
``/api/systems``, ``/api/health``; the page at ``/`` (``web/static``); OpenAPI at ``/openapi.json`` and Swagger UI
at ``/docs`` (served from the ``fastapi-offline`` package's assets, no CDN; without that package ``/docs`` says so).

Limits: request bodies of at most ``MAX_BODY_BYTES`` (413); at most ``workers`` computations at once (a call waits
up to ``queue_s`` for a free worker, with at most ``MAX_WAITING`` calls waiting; 429 after that); ``timeout_s`` of
compute per call (a longer one is answered 422; a simulation or a plan's search stops at its next check of the
budget, ``clusterfit.deadline``, and frees its worker slot; other work keeps the slot until it ends); at most
200,000 simulated requests. The catalog reads (``/api/models``, ``/api/systems``) take no worker slot. Errors are
JSON ``{"detail": message, "parameter": name}`` with the message the command line prints: 400 malformed JSON, 422
invalid request (a key given twice in one object too: json would keep the last), 404/405/413/429. No traceback is
ever sent; an unexpected failure is a 500 naming only the exception's type.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import warnings
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..deadline import OutOfTime, within
from ..errors import ClusterfitError
from ..inputs import RepeatedKey, unique_keys
from ..schema import (DeployResult, FitResult, HardwareList, ModelList, ParameterError, PerfResult, PlanResult, Schema, SimResult,
                      parse_request)
from .bodies import DeployBody, ErrorBody, FitBody, PerfBody, PlanBody, SimulateBody
from .custom_model import bundled_model, register_config

log = logging.getLogger("clusterfit.web")

#: Largest request body accepted, bytes.
MAX_BODY_BYTES = 1_000_000
#: Compute allowed per call, seconds.
TIMEOUT_S = 10.0
#: Computations running at once.
WORKERS = 2
#: How long a call waits for a free worker before it is answered 429, seconds, and how many calls may wait.
QUEUE_S = 5.0
MAX_WAITING = 16

STATIC = Path(__file__).parent / "static"

# FastAPI's handling of a body parameter trips a harmless pydantic warning about the parameter's alias
warnings.filterwarnings("ignore", message="The 'alias' attribute with value 'req'", category=UserWarning)
T = TypeVar("T")

#: The page may load only what this server serves.
PAGE_CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
            "font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Malformed JSON, or a body that is not a JSON object"},
    413: {"model": ErrorBody, "description": f"Body larger than {MAX_BODY_BYTES:,} bytes"},
    422: {"model": ErrorBody, "description": "Invalid request (the message the command line prints)"},
    429: {"model": ErrorBody, "description": "All workers busy: retry shortly"},
}


class BodyTooLarge(StarletteHTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit:,} bytes")


class Busy(StarletteHTTPException):
    def __init__(self) -> None:
        super().__init__(429, "all workers are busy; retry in a moment", headers={"Retry-After": "1"})


class TooLong(ClusterfitError):
    """A computation beyond the per-call budget."""


def _error(status: int, message: str, parameter: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": message, "parameter": parameter}, status_code=status, headers=headers)


class BodyLimit:
    """ASGI middleware: refuse bodies over ``limit`` bytes (by Content-Length, and while streaming)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers", []):
            if key == b"content-length":
                if not value.isdigit():
                    await _error(400, "invalid Content-Length header")(scope, receive, send)
                    return
                if int(value) > self.limit:
                    await _error(413, BodyTooLarge(self.limit).detail)(scope, receive, send)
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except BodyTooLarge as exc:
            if not started:
                await _error(413, exc.detail)(scope, receive, send)


class Slots:
    """``workers`` worker slots. A call waits for one on its event loop (an asyncio future, first come first
    served), not in a thread: a blocking ``Semaphore.acquire`` per waiting call held a thread of the loop's default
    executor for up to ``queue_s``, the executor the catalog reads (``asyncio.to_thread``) run in. A slot is given
    back from any thread (a worker's done callback): to the first call still waiting, else to the free count."""

    def __init__(self, workers: int) -> None:
        self.free = workers
        self._lock = threading.Lock()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot."""
        return len(self._waiters)

    async def wait(self, timeout_s: float, max_waiting: int) -> bool:
        """Take a slot, waiting up to ``timeout_s`` for one; False when none came in time or ``max_waiting`` calls
        wait already. A call cancelled while it waits (its client went away) takes no slot."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.free > 0 and not self._waiters:   # a free slot no earlier call waits for: first come first served
                self.free -= 1
                return True
            if len(self._waiters) >= max_waiting or timeout_s <= 0:
                return False
            entry = (loop, loop.create_future())
            self._waiters.append(entry)
        try:
            await asyncio.wait_for(entry[1], timeout_s)   # cancels the future on a timeout or a cancellation
            return True
        except asyncio.TimeoutError:
            self._give_up(entry)
            return False
        except asyncio.CancelledError:
            self._give_up(entry)
            raise

    def _give_up(self, entry: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]) -> None:
        """A call stops waiting: out of the queue; a slot handed to it as it stopped goes to the next call (a hand-over
        still to run finds its future cancelled and passes the slot on itself, _hand_over)."""
        with self._lock:
            queued = entry in self._waiters
            if queued:
                self._waiters.remove(entry)
        if not queued and entry[1].done() and not entry[1].cancelled():
            self.release()

    def release(self) -> None:
        """Give a slot back (from any thread)."""
        with self._lock:
            while self._waiters:
                loop, future = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(self._hand_over, future)
                    return
                except RuntimeError:   # that call's event loop is closed: the next one
                    continue
            self.free += 1

    def _hand_over(self, future: asyncio.Future[None]) -> None:
        """On the waiting call's loop: the slot is its own, unless it stopped waiting meanwhile."""
        if future.done():
            self.release()
        else:
            future.set_result(None)


class Runner:
    """Runs computations in worker threads: at most ``workers`` at once, ``timeout_s`` each. A call that finds every
    worker busy waits up to ``queue_s`` for one (at most ``MAX_WAITING`` calls wait), else Busy."""

    def __init__(self, workers: int, timeout_s: float, queue_s: float = QUEUE_S) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="clusterfit-web")
        self.slots = Slots(workers)
        self.timeout_s = timeout_s
        self.queue_s = queue_s

    def _budgeted(self, fn: Callable[[], T]) -> T:
        """``fn`` in a worker thread under the per-call budget: the simulator stops at its next check once the
        budget is spent (clusterfit.deadline), freeing the slot a second after the 422 rather than at its end."""
        with within(self.timeout_s):
            return fn()

    async def _slot(self) -> None:
        """Take a worker slot, waiting up to ``queue_s`` for one; Busy when none frees in time or too many wait."""
        if not await self.slots.wait(self.queue_s, MAX_WAITING):
            raise Busy()

    async def run(self, fn: Callable[[], T]) -> T:
        await self._slot()
        try:
            future = self.pool.submit(self._budgeted, fn)
        except BaseException:
            self.slots.release()
            raise
        future.add_done_callback(lambda _f: self.slots.release())
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s)
        except (asyncio.TimeoutError, OutOfTime):   # the computation may notice the budget first
            raise TooLong(f"the request needs more than the {self.timeout_s:g} s of compute one HTTP call may use; "
                          "ask for less (fewer simulated requests, systems or precisions), or run it with the "
                          "command line") from None


def _api_kwargs(body: FitBody | PerfBody | PlanBody | SimulateBody | DeployBody) -> dict[str, Any]:
    """The API keyword arguments of ``body``: the fields it set, with ``model`` resolved to a cached model."""
    data = body.model_dump(exclude_unset=True, exclude={"config"})
    data.pop("catalog", None)
    if body.config is not None:
        data["model"] = register_config(body.config, body.model)
    elif body.model is not None:
        data["model"] = bundled_model(body.model)
    elif not isinstance(body, FitBody) or body.params is None:   # fit may size a parameter count instead
        raise ParameterError("model", "is required: a bundled model's name or alias (GET /api/models), or the "
                             "model's config.json content as `config`")
    return data


def _json(result: BaseModel) -> Response:
    """``result`` as the command line's ``--json`` (non-finite numbers as null, so the JSON is always valid)."""
    return Response(result.model_dump_json(), media_type="application/json")


_BODY_OF: dict[str, type[Schema]] = {"/api/fit": FitBody, "/api/perf": PerfBody, "/api/plan": PlanBody, "/api/simulate": SimulateBody,
                                    "/api/deploy": DeployBody}


#: What to send instead of each field that names a server file.
_NO_FILE_INSTEAD = {
    "catalog": "the bundled systems are the ones served (GET /api/systems); a model that is not bundled goes as "
               "its config.json content in `config`",
    "scenario": "send the scenario's settings as the request's own fields (isl, osl, rate, ttft_ms, tpot_ms, ...)",
    "trace": "send the load as `rate` with `isl` and `osl`, or run `clusterfit simulate --trace` locally",
    "plan_file": "send the plan's question (model, isl, osl, rate, targets) instead: the server plans it again",
    "out": "the answer carries the files' text; nothing is written on the server",
}


#: JSON's names for the Python types a parsed body can have.
_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _validation_message(request: Request, exc: RequestValidationError) -> tuple[int, str, str | None]:
    """Status, message and parameter for a body FastAPI could not validate: the API's own message."""
    errors = list(exc.errors())
    for err in errors:
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            where = err.get("loc", [None, None])
            pos = where[1] if len(where) > 1 else None
            return 400, f"malformed JSON{f' at character {pos}' if isinstance(pos, int) else ''}: " \
                        f"{ctx.get('error', 'could not parse the body')}", None
    body = exc.body
    if not isinstance(body, dict):
        if isinstance(body, bytes):   # not read as JSON: FastAPI parses JSON only under a JSON content type (a
            # JSON string it parsed is a str)
            ctype = request.headers.get("content-type") or "none"
            return 400, (f"the request body must be JSON sent with content-type application/json (got content-type "
                         f"{ctype})"), None
        if body is None:   # no bytes, or the JSON null
            got = "no body" if request.headers.get("content-length", "0") == "0" else "null"
        else:
            got = f"a JSON {_JSON_TYPES.get(type(body), type(body).__name__)}"
        return 400, f"the request body must be a JSON object of parameters, got {got}", None
    for field, instead in _NO_FILE_INSTEAD.items():
        if any(tuple(e.get("loc", ()))[1:2] == (field,) for e in errors):
            what = "writes no file" if field == "out" else "reads no file a request names"
            return 422, (f"{field}: not accepted over HTTP: the server {what} (got {body.get(field)!r}); "
                         f"{instead}"), field
    cls = _BODY_OF.get(request.url.path)
    if cls is not None:
        try:
            parse_request(cls, body)
        except ParameterError as perr:
            return 422, str(perr), perr.parameter
        except ClusterfitError as cerr:
            return 422, str(cerr), _body_parameter(request.url.path, cerr.parameter)
    err = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
    return 422, f"{loc + ': ' if loc else ''}{str(err.get('msg', 'invalid')).lower()}", loc or None


def _body_parameter(path: str, name: str | None) -> str | None:
    """The body field an error's parameter names on this endpoint: ``systems`` on /api/plan for a ``system``
    (the model code names the one value it was given; bodies that take several use the plural)."""
    cls = _BODY_OF.get(path)
    if name is None or cls is None or name in cls.model_fields:
        return name
    return f"{name}s" if f"{name}s" in cls.model_fields else name


class RepeatedBodyKey(HTTPException):
    """A request body naming a key twice in one object: 422 naming the key, or the body's field that holds the
    object (a key repeated inside ``config`` names config). FastAPI answers any other error while it reads a body
    with its own 400; an HTTPException passes through."""

    def __init__(self, field: str | None, exc: RepeatedKey) -> None:
        self.parameter = field
        super().__init__(422, f"{field}: {exc}" if field else str(exc))


class UniqueKeysRequest(Request):
    """A request whose JSON body refuses a repeated key (``inputs.unique_keys``): json keeps the last one silently
    (``{"model": "llama-3.1-8b", "model": "qwen3-8b"}`` sized Qwen3-8B)."""

    async def json(self) -> Any:
        repeated: dict[int, RepeatedKey] = {}   # id of each object that repeats a key -> unique_keys' error

        def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            try:
                return unique_keys(pairs)
            except RepeatedKey as exc:   # parse on, to tell which of the body's fields holds the object
                obj = dict(pairs)
                repeated[id(obj)] = exc
                return obj

        data = json.loads(await self.body(), object_pairs_hook=pairs_hook)
        if repeated:
            raise RepeatedBodyKey(*_where_repeated(data, repeated))
        return data


def _where_repeated(data: Any, repeated: dict[int, RepeatedKey]) -> tuple[str | None, RepeatedKey]:
    """The body's field at fault and the error of an object that repeats a key: the body itself repeating a key
    (that key), else the first field whose value holds such an object (None: the body is not an object)."""
    if id(data) in repeated:
        return repeated[id(data)].key, repeated[id(data)]
    for field, value in data.items() if isinstance(data, dict) else ():
        stack = [value]
        while stack:
            node = stack.pop()
            if id(node) in repeated:
                return field, repeated[id(node)]
            stack.extend(node.values() if isinstance(node, dict) else node if isinstance(node, list) else ())
    return None, next(iter(repeated.values()))


class UniqueKeysRoute(APIRoute):
    """The API's routes: they read the body through UniqueKeysRequest."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handle = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handle(UniqueKeysRequest(request.scope, request.receive))

        return route


def _unreadable_body(exc: StarletteHTTPException) -> str | None:
    """What was wrong with a body FastAPI could not read as JSON, other than a JSON syntax error: fastapi/routing.py
    raises ``HTTPException(400, ...) from`` the reader's exception (a RecursionError on deep nesting, a
    UnicodeDecodeError on bytes that are not UTF-8), so the cause's type says which (None: another error, whose
    detail stands)."""
    cause = exc.__cause__
    if exc.status_code != 400:
        return None
    if isinstance(cause, RecursionError):
        return "the request body could not be parsed: JSON nested too deeply (Python's recursion limit)"
    if isinstance(cause, UnicodeDecodeError):
        return f"the request body could not be parsed: bytes that are not UTF-8 text (byte {cause.start:,})"
    return None


def _install_errors(app: FastAPI) -> None:
    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        status, message, parameter = _validation_message(request, exc)
        return _error(status, message, parameter)

    async def on_clusterfit(request: Request, exc: Exception) -> Response:
        return _error(422, str(exc), _body_parameter(request.url.path, getattr(exc, "parameter", None)))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        detail = _unreadable_body(exc) or str(exc.detail)
        return _error(exc.status_code, detail, getattr(exc, "parameter", None), dict(exc.headers or {}))

    async def on_any(request: Request, exc: Exception) -> Response:
        if isinstance(exc, RecursionError):
            return _error(400, "the request body is nested too deeply")
        log.exception("internal error on %s %s", request.method, request.url.path)
        return _error(500, f"internal error ({type(exc).__name__}); the server log has the details")

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(ClusterfitError, on_clusterfit)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_any)


def _docs(app: FastAPI) -> None:
    """Swagger UI at /docs from the fastapi-offline package's vendored assets (no CDN), or a note without it."""
    import importlib.util

    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        @app.get("/docs", include_in_schema=False)
        async def no_docs() -> HTMLResponse:
            return HTMLResponse("<!doctype html><title>clusterfit API</title><p>The interactive API docs need the "
                                "<code>fastapi-offline</code> package (<code>pip install 'clusterfit[web]'</code>), "
                                "which serves Swagger UI without a CDN. The API's schema is at "
                                "<a href='/openapi.json'>/openapi.json</a>.</p>", status_code=200)
        return
    from fastapi.openapi.docs import get_swagger_ui_html

    assets = Path(spec.origin).parent / "static"
    app.mount("/docs-static", StaticFiles(directory=assets), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="clusterfit API",
                                   swagger_js_url="/docs-static/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-static/swagger-ui.css",
                                   swagger_favicon_url="/docs-static/favicon.png",
                                   swagger_ui_parameters={"validatorUrl": None})


def _warm() -> None:
    """Load the catalogs and compile a first fit in the background so the first request is fast."""
    try:
        from .. import api
        from ..arch import list_models

        api.models()
        api.systems()
        names = list_models()
        api.fit(model=bundled_model(names[0]), systems=["h100"]) if names else None
    except Exception:  # noqa: BLE001 - warming is best effort; requests report their own errors
        log.debug("warm-up failed", exc_info=True)


def create_app(workers: int = WORKERS, timeout_s: float = TIMEOUT_S, max_body_bytes: int = MAX_BODY_BYTES,
               warm: bool = True, queue_s: float = QUEUE_S) -> FastAPI:
    """The FastAPI application: the JSON API, the page at ``/`` and the docs."""
    from .. import api

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if warm:
            threading.Thread(target=_warm, name="clusterfit-web-warm", daemon=True).start()
        yield
        runner.pool.shutdown(wait=False, cancel_futures=True)

    runner = Runner(workers, timeout_s, queue_s)
    app = FastAPI(title="clusterfit", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan,
                  description="Size, plan and simulate LLM serving clusters over HTTP: the same typed API as the "
                  "`clusterfit` command line (`--json` output). Models are bundled names (GET /api/models) or a "
                  "config.json sent in the body as `config`; the server reads no file a request names.")
    app.router.route_class = UniqueKeysRoute
    cache: dict[str, Response] = {}
    lock = threading.Lock()

    async def cached(key: str, make: Callable[[], BaseModel]) -> Response:
        """A catalog read: the bundled lists, computed once, outside the worker slots (no request input)."""
        if key not in cache:
            result = await asyncio.to_thread(make)
            with lock:
                cache.setdefault(key, _json(result))
        return cache[key]

    async def call(fn: Callable[..., BaseModel], body: FitBody | PerfBody | PlanBody | SimulateBody | DeployBody) -> Response:
        return _json(await runner.run(lambda: fn(**_api_kwargs(body))))

    @app.post("/api/fit", response_model=FitResult, responses=_ERRORS, tags=["api"])
    async def fit(req: FitBody) -> Response:
        """Does the model fit on each system? Naive and realistic views (`clusterfit fit --json`)."""
        return await call(api.fit, req)

    @app.post("/api/perf", response_model=PerfResult, responses=_ERRORS, tags=["api"])
    async def perf(req: PerfBody) -> Response:
        """TTFT, TPOT and throughput of one replica under one load (`clusterfit perf --json`)."""
        return await call(api.perf, req)

    @app.post("/api/plan", response_model=PlanResult, responses=_ERRORS, tags=["api"])
    async def plan(req: PlanBody) -> Response:
        """The cheapest systems, layouts and replica counts within the SLOs, with cost (`clusterfit plan --json`)."""
        return await call(api.plan, req)

    @app.post("/api/deploy", response_model=DeployResult, responses=_ERRORS, tags=["api"])
    async def deploy(req: DeployBody) -> Response:
        """Launch command, Kubernetes manifests or Slurm script for the plan (`clusterfit deploy --json`; the
        files' text, nothing written on the server)."""
        return await call(api.deploy, req)

    @app.post("/api/simulate", response_model=SimResult, responses=_ERRORS, tags=["api"])
    async def simulate(req: SimulateBody) -> Response:
        """Replicas under traffic, failures and SLOs (`clusterfit simulate --json`; at most 200,000 requests)."""
        return await call(api.simulate, req)

    @app.get("/api/models", response_model=ModelList, tags=["api"])
    async def models() -> Response:
        """The bundled models (HF ids and aliases): the names `model` accepts."""
        return await cached("models", api.models)

    @app.get("/api/systems", response_model=HardwareList, tags=["api"])
    async def systems() -> Response:
        """The systems of the hardware catalog."""
        return await cached("systems", api.systems)

    @app.get("/api/health", tags=["api"])
    async def health() -> dict[str, str]:
        """Liveness: the server answers."""
        return {"status": "ok", "version": __version__}

    page = (STATIC / "index.html").read_text(encoding="utf-8")

    @app.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _docs(app)
    _install_errors(app)
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    return app
