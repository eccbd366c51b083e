"""The `clusterfit` command line: parse, call the domain functions, render. Nothing else lives here.

Every command accepts ``--json`` and prints one JSON object (the same shape the Python API returns).
User errors (ClusterfitError, bad option values) print one line to stderr and exit with code 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

from .errors import ClusterfitError

app = typer.Typer(
    name="clusterfit",
    help="Size, plan and simulate LLM serving clusters: memory fit, performance, planning, simulation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console()
err_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        from . import __version__

        sys.stdout.write(f"clusterfit {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Size, plan and simulate LLM serving clusters: memory fit, performance, planning, simulation."""


def emit(payload: dict[str, Any], as_json: bool, render: Callable[[Console], None]) -> None:
    """Print ``payload`` as JSON, or call ``render`` for the rich view."""
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2, default=_json_default) + "\n")
    else:
        render(console)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def fail(message: str) -> None:
    """Print a user error and exit with code 2."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise SystemExit(2)


# Command modules register themselves on `app` when imported.
from .commands import fit as _fit  # noqa: E402,F401
from .commands import hardware as _hardware  # noqa: E402,F401
from .commands import perf as _perf  # noqa: E402,F401
from .commands import plan as _plan  # noqa: E402,F401
from .commands import simulate as _simulate  # noqa: E402,F401


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turn ClusterfitError into exit code 2."""
    try:
        app(args=argv, standalone_mode=False)
    except ClusterfitError as exc:
        fail(str(exc))
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        fail("aborted")
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.UsageError):
            fail(exc.format_message())
        if isinstance(exc, click.exceptions.ClickException):
            fail(exc.format_message())
        raise
