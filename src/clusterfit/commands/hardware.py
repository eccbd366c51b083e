"""The `clusterfit hardware` command: list the systems of the hardware catalog (plus user catalogs)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from ..cli import app, emit
from ..hardware import load_hardware
from ..report.hardware import hardware_payload, render_hardware


@app.command("hardware")
def hardware(
    catalog: list[Path] = typer.Option(
        None, "--catalog", metavar="FILE",
        help="Extra hardware catalog (YAML or TOML, same schema as the built-in one) that adds or overrides "
             "GPUs and systems; repeatable, later files win."),
    as_json: bool = typer.Option(False, "--json", help='Print {"systems": [rows...]} as JSON.'),
) -> None:
    """Systems you can size for: GPUs per node, scale-up domain, memory, bandwidth, dense peaks, network."""
    cat = load_hardware(list(catalog) if catalog else None)
    payload = hardware_payload(cat)

    def render(console: Console) -> None:
        render_hardware(console, payload["systems"])

    emit(payload, as_json, render)


@app.command("systems", hidden=True)
def systems(
    catalog: list[Path] = typer.Option(None, "--catalog", metavar="FILE", help="Extra hardware catalog."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Alias of `clusterfit hardware` (error messages for unknown systems point here)."""
    hardware(catalog=catalog, as_json=as_json)
