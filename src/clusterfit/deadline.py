"""A wall-clock budget for one computation, checked by the long loops (the simulator's event loop).

The HTTP API answers a call that runs past its budget (``web.app.TIMEOUT_S``) at once; a Python thread cannot be
stopped from outside, so the computation itself stops at its next check instead of holding its worker slot to the
end. Outside ``within`` there is no budget and ``check`` costs one context-variable read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .errors import ClusterfitError

_END: ContextVar[float | None] = ContextVar("clusterfit_deadline", default=None)


class OutOfTime(ClusterfitError):
    """The computation ran past the budget ``within`` gave it."""


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Run the block with ``seconds`` of wall-clock time: ``check`` raises OutOfTime after that."""
    token = _END.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _END.reset(token)


def check() -> None:
    """Raise OutOfTime when the enclosing ``within`` budget is spent; nothing without one."""
    end = _END.get()
    if end is not None and time.monotonic() > end:
        raise OutOfTime("the computation ran past its time budget and was stopped")
