"""The `clusterfit hardware` command: list the systems of the hardware catalog (plus user catalogs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from .options import CatalogOpt
from .output import emit

if TYPE_CHECKING:
    from rich.console import Console


def hardware_command(
    catalog: CatalogOpt = None,
    as_json: bool = typer.Option(False, "--json", help='Print {"systems": (a list of rows)} as JSON.'),
) -> None:
    """Systems you can size for: GPUs per node, scale-up domain, memory, bandwidth, dense peaks, network."""
    from .. import api

    result = api.systems(catalog)

    def render(console: Console) -> None:
        from ..report.hardware_table import render_hardware

        render_hardware(console, [r.model_dump() for r in result.systems])

    emit(result, as_json, render)


def systems_command(catalog: CatalogOpt = None,
                    as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Alias of `clusterfit hardware` (error messages for unknown systems point here)."""
    hardware_command(catalog=catalog, as_json=as_json)
