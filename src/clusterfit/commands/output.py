"""Output helpers shared by the commands: JSON or rich rendering, and the one-line user error."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import ClusterfitError, ParameterError, brief

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console


def emit(result: BaseModel | dict[str, Any], as_json: bool, render: Callable[[Console], None]) -> None:
    """Print ``result`` as JSON, or call ``render`` for the rich view. A model is written by pydantic-core's
    serializer (``model_dump_json``: the same JSON as ``json.dumps(model_dump(mode="json"))`` once parsed, in
    about a third of the time for a 0.5 MB plan); a dict by the json module."""
    if as_json:
        text = json.dumps(result, indent=2) if isinstance(result, dict) else result.model_dump_json(indent=2)
        sys.stdout.write(text + "\n")
    else:
        render(safe_console())


def safe_console() -> Console:
    """A rich console whose markup never fails the command: a line holding text that reads as a broken markup tag
    (a config.json's ``model_type: 'x[/]'``, an output folder named ``out[/]``: rich raises MarkupError for a closing
    tag with nothing to close) is printed again, each string with its markup where that parses and as it is where it
    does not, table cells as they are. The commands escape the user's text they print (rich.markup.escape); this is
    the net under any line they miss."""
    from rich.console import Console
    from rich.errors import MarkupError

    class _SafeConsole(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            try:
                super().print(*objects, **kwargs)
            except MarkupError:   # each string's markup where it parses, its text as it is where it does not
                markup, self._markup = self._markup, False   # table cells follow the console's markup setting
                try:
                    super().print(*(_text(o) for o in objects), **kwargs)
                finally:
                    self._markup = markup

    def _text(obj: Any) -> Any:
        from rich.text import Text

        if not isinstance(obj, str):
            return obj
        try:
            return Text.from_markup(obj)
        except MarkupError:
            return Text(obj)

    return _SafeConsole()


def fail(message: str) -> NoReturn:
    """Print a user error as one line on stderr and exit with code 2."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise SystemExit(2)


#: API parameters whose command-line flag has another name: a repeatable option collected under a plural name,
#: deploy's --plan FILE.
_FLAG_OF = {"systems": "system", "precisions": "precision", "kv_dtypes": "kv_dtype", "prices": "price",
            "plan_file": "plan"}


def parameter_flag(exc: ClusterfitError, given: Collection[str] = ()) -> str:
    """The message of ``exc``, starting with the command-line flag where it names an API parameter (``tp`` ->
    ``--tp: ...``): a ParameterError's, and a ClusterfitError's that carries one (an unknown name, ``errors.unknown``:
    ``--precision: unknown precision 'int3' ...``) where that flag is among ``given`` (the long flags on the command
    line; a value read from a scenario file is no option's). The MODEL argument is no option: its errors are bare."""
    detail = exc.detail if isinstance(exc, ParameterError) else str(exc)
    if exc.parameter is None or exc.parameter == "model" or not exc.parameter.isidentifier():
        return detail if exc.parameter == "model" else str(exc)
    flag = "--" + _FLAG_OF.get(exc.parameter, exc.parameter).replace("_", "-")
    if not isinstance(exc, ParameterError) and flag not in given:
        return detail
    return f"{flag}: {detail}"


def check_outputs(outputs: list[tuple[str, Path]], inputs: list[tuple[str, Path]]) -> None:
    """Refuse, before any work, an output file whose folder is missing, that is a folder, that is an input, that
    another option writes too, or whose folder takes no new file (a read-only mount, /proc: a scratch file is
    created there and removed). ``outputs`` and ``inputs`` pair each path with its option (``("--plot", path)``);
    the error names the option (``--plot: the folder nodir does not exist``)."""
    import tempfile

    seen: dict[Path, str] = {}
    resolved_inputs = {p.resolve(): flag for flag, p in inputs}
    for flag, out in outputs:
        name = flag.lstrip("-").replace("-", "_")   # the parameter parameter_flag turns back into the flag
        target = out.resolve()
        try:
            if target.is_dir():
                raise ParameterError(name, f"{out} is a directory; give a file name")
            parent_ok = target.parent.is_dir()
        except OSError as exc:   # a name longer than the file system takes (ENAMETOOLONG), ...
            raise ParameterError(name, f"{brief(str(out))}: {exc.strerror or exc}") from None
        if not parent_ok:
            raise ParameterError(name, f"the folder {out.parent} does not exist")
        if target in resolved_inputs:
            raise ParameterError(name, f"{out} is also an input ({resolved_inputs[target]}); it would be "
                                 "overwritten")
        if target in seen:
            raise ParameterError(name, f"{out} is also given to {seen[target]}")
        seen[target] = flag
        try:
            with tempfile.TemporaryFile(dir=target.parent):
                pass
        except OSError as exc:
            raise ParameterError(name, f"cannot write in {out.parent} ({exc.strerror or exc})") from None
