"""Reading untrusted input files: size-limited, UTF-8, parsed with one-line errors and a nesting limit.

Every file a user names (scenario, hardware catalog, config.json) is read through ``read_text`` and parsed by
``parse_document``; errors are ClusterfitError with one line naming the file, the position and the problem.
"""

import functools
import json
import math
import os
import stat
import sys
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from .errors import ClusterfitError, brief

#: Largest scenario, catalog or config file read: the biggest shipped one is a few tens of kB.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
#: Deepest nesting of mappings and lists accepted (real files nest fewer than 10 levels).
MAX_DEPTH = 64
#: Most values (scalars, lists and mappings, YAML aliases expanded) a document may hold.
MAX_VALUES = 1_000_000


def not_a_file(mode: int) -> str | None:
    """What keeps a path whose ``st_mode`` is ``mode`` from being read as an input file, as words after "is"
    ("a directory"; "not a regular file ..." for a pipe, a device such as /dev/zero, a socket: reading one may never
    end, or end only after more bytes than any limit); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file (a pipe, a device or a socket)"


def read_text(path: str | Path, what: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The text of ``path`` (a ``what``: "scenario file", ...), refused when missing, not a regular file
    (``not_a_file``), larger than ``max_bytes`` (from its size, before reading it) or not UTF-8. At most ``max_bytes``
    + 1 bytes are read, and the file is opened without blocking (a FIFO with no writer is refused, not waited on)."""
    p = Path(path)
    try:
        with open(os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as fh:
            st = os.fstat(fh.fileno())
            problem = not_a_file(st.st_mode)
            if problem is not None:
                raise ClusterfitError(f"{what} {p} is {problem}; give a file")
            if st.st_size > max_bytes:   # refused unread
                raise ClusterfitError(f"{what} {p} is {st.st_size:,} bytes; the limit is {max_bytes:,} bytes")
            data = fh.read(max_bytes + 1)   # + 1: a file that grew since fstat still stops there
        if len(data) > max_bytes:   # it grew: its size now is unknown, only that it passed the limit
            raise ClusterfitError(f"{what} {p} is more than {max_bytes:,} bytes, the limit (it grew while read)")
    except ClusterfitError:
        raise
    except FileNotFoundError:
        raise ClusterfitError(f"{what} not found: {p}") from None
    except OSError as exc:
        raise ClusterfitError(f"{what} {p}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:   # a path holding a NUL character
        raise ClusterfitError(f"{what} {brief(str(p))}: cannot read it ({exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ClusterfitError(f"{what} {p} is not UTF-8 text (byte {exc.start:,}: {data[exc.start:exc.start + 1]!r})"
                              ) from None


def read_document(path: str | Path, what: str, kind: Literal["yaml", "toml", "json"], parameter: str) -> Any:
    """The parsed content of the file an option names (``read_text`` + ``parse_document``); any problem is a
    ParameterError naming ``parameter`` (the CLI prints its flag), the message starting with ``what`` and the path."""
    from .errors import ParameterError

    try:
        return parse_document(read_text(path, what), f"{what} {path}", kind)
    except ParameterError:
        raise
    except ClusterfitError as exc:
        raise ParameterError(parameter, str(exc)) from None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


class RepeatedKey(ValueError):
    """A key given twice in one JSON object (``unique_keys``); ``key`` is the key."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {brief(key)} is repeated in one object; give each key once")
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s object_pairs_hook: an object with a repeated key is an error, RepeatedKey (json keeps the
    last one silently; YAML and TOML documents refuse it too)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RepeatedKey(key)
        out[key] = value
    return out


def nested_too_deep(origin: str) -> ClusterfitError:
    """The error for a document at ``origin`` nested deeper than MAX_DEPTH levels, or deeper than a parser's own
    recursion goes (its RecursionError: ``json.loads`` of 100,000 '[')."""
    return ClusterfitError(f"{origin}: nested more than {MAX_DEPTH} levels deep")


def parse_problem(exc: ValueError) -> str:
    """A parser's ValueError as one line of words; CPython's limit on an integer's digits (whose message tells a
    programmer to raise it) says what is wrong with the input."""
    problem = " ".join(str(exc).split())
    if "integer string conversion" in problem:
        problem = f"an integer has more than {sys.get_int_max_str_digits():,} digits"
    return problem


def parse_document(text: str, origin: str, kind: Literal["yaml", "toml", "json"]) -> Any:
    """Parse YAML, TOML or JSON text; errors are one line with the position; NaN/Infinity (JSON) and nesting
    deeper than MAX_DEPTH are refused."""
    try:
        if kind == "toml":
            import tomllib

            data: Any = tomllib.loads(text)
        elif kind == "json":
            data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=unique_keys)
        else:
            import yaml

            data = yaml.load(text, Loader=_yaml_loader())
    except RecursionError:
        raise nested_too_deep(origin) from None
    except json.JSONDecodeError as exc:
        raise ClusterfitError(f"{origin}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
                              ) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError, NaN / Infinity in JSON, an integer too long for int()
        raise ClusterfitError(f"{origin}: not valid {kind.upper()}: {parse_problem(exc)}") from None
    except Exception as exc:  # yaml.YAMLError (yaml is imported lazily)
        mark = getattr(exc, "problem_mark", None)
        if mark is None and not type(exc).__module__.startswith("yaml"):
            raise
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ClusterfitError(f"{origin}: not valid YAML{where}: {problem}") from None
    check_depth(data, origin)
    return data


@functools.cache
def _yaml_loader() -> Any:
    """PyYAML's safe loader (libyaml's parser when present) refusing a mapping that repeats a key: PyYAML keeps
    the last value silently (a scenario with 'model:' twice, a catalog defining a GPU twice), where TOML refuses.

    Keys are compared as constructed (``1`` and ``0x1`` are one key). The check runs in ``flatten_mapping``, which
    PyYAML calls on every mapping node before it merges ``<<`` keys into it (merging rewrites the node's items, and a
    key a mapping sets over a merged one is no repeat), once per node: an aliased node is checked once, so the
    'billion laughs' guard (check_depth) still meets the aliases unexpanded."""
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.nodes import MappingNode, ScalarNode

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self._checked: set[int] = set()

        def flatten_mapping(self, node: Any) -> None:
            if isinstance(node, MappingNode) and id(node) not in self._checked:
                self._checked.add(id(node))
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.get(key)
                    except TypeError:   # unhashable: construct_mapping says so
                        continue
                    if first is not None:
                        raise ConstructorError(None, None, f"the key {brief(key_node.value)} is repeated (first on "
                                               f"line {first + 1}); give each key once", key_node.start_mark)
                    seen[key] = key_node.start_mark.line
            super().flatten_mapping(node)

    return Loader


def check_depth(data: Any, origin: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH (``nested_too_deep``), more than MAX_VALUES values once YAML aliases are
    expanded (a 'billion laughs' document: nine lines whose aliases expand to 9^9 values, which every reader after
    this would walk), and non-finite numbers (iteratively: no recursion on input)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ClusterfitError(f"{origin}: holds more than {MAX_VALUES:,} values (YAML aliases expanded)")
        if depth > MAX_DEPTH:
            raise nested_too_deep(origin)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
        elif isinstance(node, float) and not math.isfinite(node):
            where = _path_of(data, node)
            raise ClusterfitError(f"{origin}: {where + ': ' if where else ''}{node} is not a finite number")


def _path_of(data: Any, target: Any) -> str:
    """The path (``a.b[2]``) of the object ``target`` inside ``data``: looked up only for an error message, so
    that reading a document builds no paths."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        node, where = stack.pop()
        if node is target:
            return where
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return ""


def http_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as the base of an HTTP(S) server (None: nothing): not parseable, another scheme,
    no host, a port that is not a number."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        parts.port   # raises on a port that is not a number
    except ValueError as exc:   # also an unclosed IPv6 bracket
        return f"cannot be parsed ({exc})"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    if not parts.hostname:
        return "has no host"
    return None


def _allows_bool(annotation: Any) -> bool:
    """Whether a field annotation takes true / false (bool, Any, or a union or container holding one)."""
    if annotation is bool or annotation is Any:
        return True
    return any(_allows_bool(a) for a in get_args(annotation))


def _kinds(annotation: Any) -> list[Any]:
    """The types a field annotation takes, None left out (``int | None`` -> [int])."""
    return [a for a in (get_args(annotation) or (annotation,)) if a is not type(None)]


def _number_only(annotation: Any) -> bool:
    """Whether a field annotation takes numbers and nothing else (int, float, or an optional one)."""
    kinds = _kinds(annotation)
    return bool(kinds) and all(a in (int, float) for a in kinds)


def _bool_only(annotation: Any) -> bool:
    """Whether a field annotation is a flag: bool, or an optional bool."""
    return _kinds(annotation) == [bool]


class RefuseBool(BaseModel):
    """Mixin of the models users write (requests, scenario and simulation files): true / false where a field is a
    flag, and only there. Pydantic's lax mode would read them as 1 / 0 elsewhere (a rate of true requests/s), and
    read 1, 0, 'yes', 'off' ... as a flag (``prefix_cache: 1``)."""

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_bool(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or info.field_name is None:
            return value
        field = cls.model_fields.get(info.field_name)
        if field is None:
            return value
        if isinstance(value, bool):
            if not _allows_bool(field.annotation):
                # YAML 1.1 (PyYAML) reads an unquoted yes / no / on / off as true / false: a text field that got one
                # says so, since the file never wrote true or false
                hint = (" (YAML reads an unquoted yes / no / on / off as true / false: quote text such as 'no')"
                        if str in _kinds(field.annotation) else "")
                raise PydanticCustomError("bool_not_number", "true / false only go to yes/no fields{hint}",
                                          {"hint": hint})
        elif isinstance(value, int | float | str | bytes) and _bool_only(field.annotation):
            raise PydanticCustomError("not_a_flag", "a yes/no field takes true or false only, not {value}",
                                      {"value": brief(value)})
        return value


class NumbersAsNumbers(BaseModel):
    """Mixin of the HTTP API's bodies: a number field takes a JSON number, not a string of digits (pydantic's lax
    mode would read ``"isl": "100"`` as 100). Files keep the lax reading: YAML 1.1 (PyYAML) reads ``1e6`` without a
    dot as the string '1e6'."""

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_numeric_strings(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and _number_only(field.annotation):
                raise PydanticCustomError("str_not_number", "must be a JSON number, not a string")
        return value
