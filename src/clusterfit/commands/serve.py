"""`clusterfit serve`: the HTTP API and the web page (needs the ``web`` extra: FastAPI and uvicorn)."""

from __future__ import annotations

from typing import Annotated

import typer


def serve_command(
    host: Annotated[str, typer.Option(help="Address to listen on (default: loopback only; 0.0.0.0 exposes it)")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free port)")] = 8000,
) -> None:
    """Serve the JSON API (/api/..., docs at /docs) and the sizing page (/) over HTTP."""
    import socket

    from ..errors import ClusterfitError
    from ..twin.server import bind

    try:
        import uvicorn

        from ..web import create_app
    except ImportError as exc:
        raise ClusterfitError(f"`clusterfit serve` needs the web extra ({exc.name or exc} is not installed): "
                              "pip install 'clusterfit[web]'") from None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    typer.echo(f"clusterfit serving on http://{shown}:{bound}/ (API docs at /docs; Ctrl-C stops)", err=True)
    server = uvicorn.Server(uvicorn.Config(create_app(), log_level="warning", access_log=False))
    server.run(sockets=[sock])
