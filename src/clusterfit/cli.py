"""The `clusterfit` command line: parse options, call the typed API (``clusterfit.api``), render. Nothing else.

Every command accepts ``--json`` and prints one JSON object: the API result's ``model_dump(mode="json")``.
User errors (ClusterfitError, usage errors: a missing or unknown option, a bad value) print one line starting
with ``error:`` to stderr and exit with code 2. Start-up stays light: command modules import the API, numpy and
pydantic only when they run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import typer

from .commands import calibrate, deploy, fit, hardware, perf, plan, serve, simulate
from .commands import bench
from .commands import twin
from .commands.output import fail, parameter_flag
from .errors import ClusterfitError, brief

#: Every command, in --help order: name -> function.
COMMANDS: dict[str, Callable[..., Any]] = {
    "fit": fit.fit_command, "models": fit.models_command, "model": fit.model_command,
    "hardware": hardware.hardware_command, "systems": hardware.systems_command, "perf": perf.perf_command,
    "plan": plan.plan_command, "simulate": simulate.simulate_command, "deploy": deploy.deploy_command,
    "serve": serve.serve_command, "calibrate": calibrate.calibrate_command, "bench": bench.bench_command,
    "twin": twin.twin_command,
}
#: Commands kept out of --help (``systems``: an alias of ``hardware`` that error messages point to).
HIDDEN = frozenset({"systems"})

def _version(value: bool) -> None:
    if value:
        from . import __version__

        sys.stdout.write(f"clusterfit {__version__}\n")
        raise typer.Exit()


def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Size, plan and simulate LLM serving clusters: memory fit, performance, planning, simulation."""


def build_app(names: list[str] | None = None) -> typer.Typer:
    """The command line with the commands ``names`` (default: every command, in COMMANDS order)."""
    cli = typer.Typer(
        name="clusterfit",
        help="Size, plan and simulate LLM serving clusters: memory fit, performance, planning, simulation.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    cli.callback()(_root)
    for name in COMMANDS if names is None else names:
        cli.command(name, hidden=name in HIDDEN)(COMMANDS[name])
    return cli


app = build_app()


def _usage_error_type() -> type[Exception]:
    """The base class of the command-line parser's usage errors (missing/unknown option, bad value).

    typer >= 0.2x vendors click as ``typer._click``; older releases use click itself. ``typer.BadParameter`` is
    public in both, and its ancestor ``ClickException`` is the base of every usage error either way."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            return cls
    return typer.BadParameter


def _typed_options(group: Any, name: str, args: list[str]) -> Iterator[tuple[str, Any]]:
    """The options of command ``name`` (of ``group``, the click command typer builds; typer vendors click as
    typer._click: duck-typed) that ``args`` give, in order, each as (its flag as typed, its parameter): ``--system=x``
    is ``--system``, ``-s`` stays ``-s``; nothing after ``--``."""
    command = getattr(group, "commands", {}).get(name, group)
    owner = {flag: param for param in command.params if param.param_type_name == "option"
             for flag in (*param.opts, *param.secondary_opts)}
    for token in args:
        if token == "--":
            break
        flag = token.split("=", 1)[0] if token.startswith("--") else token
        if flag in owner:
            yield flag, owner[flag]


def _option_flags(group: Any, name: str, args: list[str]) -> set[str]:
    """The options of command ``name`` (of ``group``) that ``args`` give, each by its first long flag (``-s`` and
    ``--system=x`` are ``--system``): an error about a parameter names its flag when the user gave it."""
    out = set()
    for _, param in _typed_options(group, name, args):
        flags = [*param.opts, *param.secondary_opts]
        out.add(next((f for f in flags if f.startswith("--")), flags[0]))
    return out


def _repeated_option(group: Any, name: str, args: list[str]) -> str | None:
    """The first option of command ``name`` (of ``group``) that takes one value (or is one flag) but appears more
    than once in ``args``, as a message; None when there is none. The parser would silently keep the last one
    (``--system h200 --system h100`` ran on h100; ``--cuda-graphs --eager`` kept --eager)."""
    seen: dict[str, str] = {}
    for flag, param in _typed_options(group, name, args):
        if param.multiple or getattr(param, "count", False):
            continue
        key = param.name or flag
        if key in seen:
            first = seen[key]
            again = "given twice" if first == flag else f"given with {first}"
            return f"{flag}: {again}; it takes one value (give it once)"
        seen[key] = flag
    return None


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app; user and usage errors become one ``error:`` line and exit 2."""
    args = sys.argv[1:] if argv is None else list(argv)
    # typer turns every registered command's signature into parameters on each call (~50 ms for all of them):
    # a call that names its command first gets a command line holding that command only (same options, help and
    # errors); anything else (--help, --version, a typo that needs the list of commands) gets the whole one.
    name = args[0] if args and args[0] in COMMANDS else None   # the command named first, if any
    cli = build_app([name]) if name else app
    # the click command typer would build inside cli(...): built once, checked, then run (typer's __call__ adds only
    # its pretty-exception hook, which this app turns off)
    command = typer.main.get_command(cli)
    repeated = _repeated_option(command, name, args[1:]) if name else None
    if repeated:
        fail(repeated)
    try:
        command(args=args, standalone_mode=False)
    except ClusterfitError as exc:
        fail(parameter_flag(exc, _option_flags(command, name, args[1:]) if name else ()))
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        fail("aborted")
    except _usage_error_type() as exc:
        fail(exc.format_message())  # type: ignore[attr-defined]
    except OSError as exc:   # a file the checks above did not reach: still one line, naming the file
        if exc.filename is None:
            raise
        fail(f"{brief(str(exc.filename))}: {exc.strerror or exc}")


if __name__ == "__main__":
    main()
