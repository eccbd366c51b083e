"""Command-line options shared by several commands, defined once (same names, types and help everywhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

TpOpt = Annotated[Optional[int], typer.Option(help="Tensor parallel size")]
PpOpt = Annotated[Optional[int], typer.Option(help="Pipeline parallel size")]
EpOpt = Annotated[Optional[int], typer.Option(help="Expert parallel size (MoE)")]
DpOpt = Annotated[Optional[int], typer.Option(help="Attention data-parallel ranks inside the replica (DEP, MoE)")]
PrecisionOpt = Annotated[Optional[str], typer.Option(
    help="Weight precision: bf16, fp8, fp8_block, int8, int4, mxfp4, nvfp4 (default: the checkpoint's)")]
ExpertsPrecisionOpt = Annotated[Optional[str], typer.Option(help="Override the routed experts' precision")]
KvDtypeOpt = Annotated[Optional[str], typer.Option(help="KV-cache dtype: bf16, fp16, fp8")]
CatalogOpt = Annotated[Optional[list[Path]], typer.Option(
    "--catalog", metavar="FILE", help="Extra hardware catalog, YAML or TOML (repeatable; later files win)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON")]
LongerContextOpt = Annotated[bool, typer.Option(
    "--allow-longer-context", help="Allow prompt + output beyond the model's max_position_embeddings")]
EngineOpt = Annotated[str, typer.Option(help="Serving engine: vllm, sglang or trtllm")]


def given(**options: object) -> dict[str, object]:
    """The options the user gave (not None), as API keyword arguments."""
    return {k: v for k, v in options.items() if v is not None}
