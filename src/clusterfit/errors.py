"""The one error type users see. The CLI prints its message and exits with code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ClusterfitError(ValueError):
    """Bad input or an impossible request, with a message meant for the user."""


def close_matches(word: str, choices: Iterable[str], n: int = 5) -> list[str]:
    """Up to ``n`` entries of ``choices`` that look like ``word`` (case-insensitive)."""
    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.5)
    substr = [c for lc, c in lowered.items() if word.lower() in lc and c not in hits]
    return ([lowered[h] for h in hits] + substr)[:n]


#: The command that lists the known names of each kind.
LISTING = {"model": "clusterfit models", "system": "clusterfit hardware", "gpu": "clusterfit hardware"}


def unknown(kind: str, word: str, choices: Iterable[str]) -> ClusterfitError:
    """A ClusterfitError for an unknown name, listing close matches (choices may include aliases)."""
    choices = list(dict.fromkeys(choices))
    hits = close_matches(word, choices)
    hint = f" Did you mean: {', '.join(hits)}?" if hits else ""
    if kind in LISTING:
        return ClusterfitError(f"unknown {kind} '{word}'.{hint} See `{LISTING[kind]}` for the full list.")
    return ClusterfitError(f"unknown {kind} '{word}'.{hint} Known: {', '.join(choices)}.")
