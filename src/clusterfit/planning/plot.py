"""Pareto-front plot (matplotlib, the optional ``plot`` extra, imported only when asked)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ClusterfitError

if TYPE_CHECKING:
    from ..schema import PlanResult


def plot_pareto(result: PlanResult, path: str | Path) -> Path:
    """Write each system's front (output tokens/s per GPU vs tokens/s per user) with the chosen plans marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ClusterfitError("--plot needs matplotlib: pip install 'clusterfit[plot]'") from None
    p = Path(path)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    chosen = {r.system: r for r in result.per_system}
    rec = result.recommended.system if result.recommended is not None else None
    for sys_id, front in result.pareto.items():
        if not front:
            continue
        x = [pt.tokens_per_s_per_user for pt in front]
        y = [pt.output_tokens_per_s_per_gpu for pt in front]
        (line,) = ax.plot(x, y, marker=".", label=sys_id)
        per_user = chosen[sys_id].tokens_per_s_per_user if sys_id in chosen else None   # None: no request decodes
        if per_user is not None:
            r = chosen[sys_id]
            ax.scatter([per_user], [r.output_tokens_per_s_per_gpu], s=140 if sys_id == rec else 70,
                       marker="*" if sys_id == rec else "o", color=line.get_color(), edgecolor="black", zorder=5)
    ax.set_xlabel("output tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"{result.model}: Pareto fronts (marker: chosen plan, star: recommended)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    try:
        fig.savefig(p, dpi=120, bbox_inches="tight")
    except OSError as exc:
        raise ClusterfitError(f"cannot write the plot to {p}: {exc}") from None
    finally:
        plt.close(fig)
    return p
