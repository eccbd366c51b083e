"""The `clusterfit calibrate` command: time the model's kernels on this machine's GPUs and write a profile."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from .options import CatalogOpt, JsonOpt
from .output import check_outputs, emit

if TYPE_CHECKING:
    from rich.console import Console

    from ..profile import Profile


def calibrate_command(
    out: Annotated[str, typer.Option("--out", "-o", metavar="FILE", help="Profile file to write (JSON)")]
    = "profile.json",
    gpus: Annotated[Optional[int], typer.Option(
        help="GPUs in the all-reduce timing (default: all visible; 1: none). Kernels are timed on GPU 0")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer shapes (about a quarter of the rows)")] = False,
    gpu: Annotated[Optional[str], typer.Option(
        "--gpu", help="Catalog GPU to fit against (default: from the device name)")] = None,
    device: Annotated[str, typer.Option(
        help="cuda; or cpu: a development dry run at tiny shapes, meaningless for predictions")] = "cuda",
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure GEMM, attention, MoE and all-reduce kernels on this machine's GPUs and write a profile for --profile."""
    from rich.console import Console

    from .. import api
    from ..errors import ParameterError

    if not out.strip():   # a Path would read '' as '.', the current folder ("output . is a directory")
        raise ParameterError("out", "is empty; give the profile file to write (e.g. profile.json)")
    path = Path(out)
    check_outputs([("--out", path)], [("--catalog", p) for p in catalog or []])
    err = Console(stderr=True)
    profile = api.calibrate(out=path, gpus=gpus, quick=quick, device=device, gpu=gpu, catalog=list(catalog or []),
                            log=lambda line: err.print(f"[dim]{line}[/]", highlight=False, soft_wrap=True))
    emit(profile.model_dump(mode="json", by_alias=True), as_json, lambda c: render_profile(c, profile, path))


def render_profile(console: Console, profile: Profile, out: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    f = profile.fit
    t = Table(title=f"Kernel profile: {profile.summary()}")
    for col in ("curve", "fitted", "rows", "median err", "max err"):
        t.add_column(col, justify="left" if col in ("curve", "fitted") else "right")

    def row(name: str, key: str, text: str) -> None:
        r = f.report.get(key)
        t.add_row(name, text, *(("-", "-", "-") if r is None else
                                (str(r.rows), f"{r.median_abs_err_pct:.1f}%", f"{r.max_abs_err_pct:.1f}%")))

    for dt, g in (("bf16", f.gemm.bf16), ("fp8", f.gemm.fp8)):
        if g is not None:
            row(f"GEMM {dt}", f"gemm_{dt}", f"eff_max {g.eff_max:.3f}, m0 {g.m0:.0f}, n0 {g.n0:.0f}, k0 {g.k0:.0f}, "
                f"weights {g.mem_eff:.3f} of bandwidth")
    row("attention decode", "attn_decode", f"{f.attn_decode.mem_eff:.3f} of bandwidth")
    row("attention prefill", "attn_prefill", f"eff_max {f.attn_prefill.eff_max:.3f}, w0 {f.attn_prefill.w0:.0f}")
    if f.moe is not None:
        row("MoE grouped GEMM", "moe", f"eff_max {f.moe.eff_max:.3f}, m0 {f.moe.m0:.0f}, weights {f.moe.mem_eff:.3f}")
    row("copy / read", "copy", f"{f.copy_.mem_eff:.3f} / {f.copy_.read_mem_eff:.3f} of bandwidth")
    if f.allreduce is not None:
        ar = f.allreduce
        row(f"all-reduce x{ar.gpus}", "allreduce", f"{ar.bw_bytes_per_s / 1e9:.0f} GB/s per GPU, "
            f"{ar.hop_s * 1e6:.1f} us per hop")
    t.caption = "efficiencies are fractions of the catalog datasheet of " + profile.gpu.id
    console.print(t)
    for note in profile.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if profile.measurement.device == "cuda":
        console.print(f"wrote {out}: use it with `clusterfit perf|plan|simulate ... --profile {out}`", soft_wrap=True)
    else:
        console.print(f"wrote {out}: a dry run, for developing clusterfit only (--profile refuses it)", soft_wrap=True)
