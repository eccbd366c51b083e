"""The one error type users see. The CLI prints its message and exits with code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def brief(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for an error message about a value of any size (a request may
    send a 10,000-character list where a number belongs)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 client", "3,000 clients"), for messages and notes."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


class ClusterfitError(ValueError):
    """Bad input or an impossible request, with a message meant for the user. ``parameter`` names the request
    parameter it is about where one is known (the HTTP API's error body carries it); the message says it in words."""

    parameter: str | None = None


class ParameterError(ClusterfitError):
    """A request parameter out of its range or of the wrong type; ``parameter`` names it (API name). Also importable
    from clusterfit.schema, where the request models live."""

    parameter: str

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter
        self.detail = message


def no_decode_tpot(parameter: str) -> ParameterError:
    """A TPOT target for requests of one output token (plan, simulate): that token is sampled at the end of the
    prefill, so no request decodes and the target would judge nothing."""
    return ParameterError(parameter, "with one output token per request no request decodes (the token is sampled at "
                          "the end of its prefill), so there is no TPOT to hold; drop the TPOT target (the TTFT "
                          "target bounds the latency)")


def close_matches(word: str, choices: Iterable[str], n: int = 5) -> list[str]:
    """Up to ``n`` entries of ``choices`` that look like ``word`` (case-insensitive)."""
    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.5)
    substr = [c for lc, c in lowered.items() if word.lower() in lc and c not in hits]
    return ([lowered[h] for h in hits] + substr)[:n]


#: The command that lists the known names of each kind.
LISTING = {"model": "clusterfit models", "system": "clusterfit hardware", "gpu": "clusterfit hardware"}
#: The request parameter an unknown name of each kind was given in.
PARAMETER_OF_KIND = {"model": "model", "system": "system", "engine": "engine",
                     "precision": "precision", "KV-cache dtype": "kv_dtype"}


def unknown(kind: str, word: str, choices: Iterable[str]) -> ClusterfitError:
    """A ClusterfitError for an unknown name, listing close matches (choices may include aliases)."""
    choices = list(dict.fromkeys(choices))
    hits = close_matches(word, choices)
    hint = f" Did you mean: {', '.join(hits)}?" if hits else ""
    if kind in LISTING:
        err = ClusterfitError(f"unknown {kind} '{word}'.{hint} See `{LISTING[kind]}` for the full list.")
    else:
        err = ClusterfitError(f"unknown {kind} '{word}'.{hint} Known: {', '.join(choices)}.")
    err.parameter = PARAMETER_OF_KIND.get(kind)
    return err
