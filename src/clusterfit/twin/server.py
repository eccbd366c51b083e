"""Running a twin: on a socket until Ctrl-C (``clusterfit twin``), or in a background thread for tests and scripts
(:func:`running_twin`)."""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ClusterfitError, ParameterError

if TYPE_CHECKING:
    from .config import TwinRequest
    from .engine import Twin

#: Seconds a stopping server lets open streams go on (new requests get 503) before it ends them with an error event.
GRACEFUL_SHUTDOWN_S = 5


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError as exc:
        raise ClusterfitError(f"the twin needs the twin extra ({exc.name} is not installed): "
                              "pip install 'clusterfit[twin]'") from None
    return uvicorn


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one); a clear error if it is taken. An empty host is refused:
    the socket layer reads it as every interface (0.0.0.0), which only an explicit 0.0.0.0 may ask for."""
    if not host.strip():
        raise ParameterError("host", f"{host!r} is empty; give an address to listen on (127.0.0.1: this machine "
                             "only; 0.0.0.0: every interface)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        # a host that does not resolve or is not this machine's is --host's fault; a port taken or refused, --port's
        bad_host = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
        raise ParameterError("host" if bad_host else "port",
                             f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def server_for(app: Any, **config: Any) -> Any:
    """A uvicorn server for the twin ``app`` (uvloop and httptools when installed; no access log).

    On Ctrl-C or SIGTERM the twin drains with its listener open: new connections are still accepted and answered
    (requests 503, ``/health`` 503) while open streams go on for up to GRACEFUL_SHUTDOWN_S seconds; then they are
    ended with an error event and the server shuts down (at once when no request is in flight). uvicorn's own
    handling would close the listener on the first signal, refusing connections instead of answering 503. A second
    signal exits at once."""
    uvicorn = _uvicorn()
    twin = app.state.twin

    class TwinServer(uvicorn.Server):  # type: ignore[name-defined]
        draining = False  # a first signal came: the twin drains, the listener open
        should_exit: bool  # uvicorn's (typed here: uvicorn's types are not checked)
        force_exit: bool

        def handle_exit(self, sig: int, frame: Any) -> None:
            if twin.started and not self.draining and not self.should_exit:
                self.draining = True
                self._captured_signals.append(sig)  # re-raised once the server has stopped, as uvicorn does
                twin.loop.call_soon_threadsafe(twin.drain, GRACEFUL_SHUTDOWN_S)
                return
            if twin.started:  # a second signal: end the open streams and exit without waiting for them
                twin.loop.call_soon_threadsafe(twin.stop)
            super().handle_exit(sig, frame)
            self.force_exit = self.draining

        async def on_tick(self, counter: int) -> bool:
            if self.draining and not self.should_exit and twin.draining and (twin.stopping or not twin.in_flight):
                self.should_exit = True  # drained (or the grace is over and the streams were ended): shut down
            exit_now: bool = await super().on_tick(counter)
            return exit_now

    return TwinServer(uvicorn.Config(app, log_level="warning", access_log=False,
                                     timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S + 5, **config))


@dataclass(frozen=True)
class RunningTwin:
    """A twin serving in a background thread: ``url`` (no trailing slash; the OpenAI base is ``url + "/v1"``) and
    the :class:`Twin` (read it through the HTTP API while it runs: it lives on the server's thread)."""

    url: str
    twin: Twin


@contextmanager
def running_twin(request: TwinRequest | None = None, /, host: str = "127.0.0.1", **kwargs: Any) -> Iterator[RunningTwin]:
    """Serve a twin on ``host``:<free port> in a background thread; yield it; stop it (open streams are closed).

        with running_twin(model="meta-llama/Llama-3.1-8B", system="h200", replicas=2) as t:
            httpx.post(t.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 8})
    """
    from .app import make_app

    app = make_app(request, **kwargs)
    sock = bind(host, 0)
    port = sock.getsockname()[1]
    server = server_for(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="clusterfit-twin", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise ClusterfitError("the twin server did not start")
        time.sleep(0.01)
    shown = f"[{host}]" if ":" in host else host
    twin = app.state.twin
    try:
        yield RunningTwin(f"http://{shown}:{port}", twin)
    finally:
        twin.loop.call_soon_threadsafe(twin.drain, 0.0)  # end open streams now
        server.should_exit = True
        thread.join(timeout=GRACEFUL_SHUTDOWN_S + 10)
        sock.close()
