"""Terminal tables that never cut a number: on a narrow terminal whole columns are left out instead."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table

#: (row key, header (may hold '\n'), left-aligned?)
Column = tuple[str, str, bool]


def needed_width(columns: Sequence[Column], rows: Sequence[dict[str, str]], skipped: Sequence[str]) -> int:
    """Characters a table of ``rows`` needs without wrapping any cell or header word (1 space each side)."""
    need = 0
    for key, header, _ in columns:
        if key not in skipped:
            content = max((len(r[key]) for r in rows), default=1)
            need += max(content, *(len(line) for line in header.split("\n"))) + 3
    return need


def fitted_table(title: str, columns: Sequence[Column], rows: Sequence[dict[str, str]], drop_order: Sequence[str],
                 width: int) -> tuple[Table, list[str]]:
    """A rich Table of the formatted ``rows`` that fits ``width`` characters by leaving out columns in
    ``drop_order`` (as few as needed); returns the table and the keys left out."""
    skipped: list[str] = []
    for key in drop_order:
        if needed_width(columns, rows, skipped) <= width:
            break
        skipped.append(key)
    kept = [c for c in columns if c[0] not in skipped]
    table = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for key, header, left in kept:
        content = max((len(r[key]) for r in rows), default=1)
        words = max(len(line) for line in header.split("\n"))
        table.add_column(header, justify="left" if left else "right", min_width=max(content, words), no_wrap=True)
    for r in rows:
        table.add_row(*(r[key] for key, _, _ in kept))
    return table, skipped
