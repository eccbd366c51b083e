"""PNG plots of a simulation: latency CDFs and per-window time series (matplotlib, optional extra)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import ClusterfitError
from .cluster import SimRun
from .metrics import latencies


def _pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend, or a ClusterfitError naming the optional extra."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise ClusterfitError("plots need matplotlib, the optional 'plot' extra: pip install matplotlib") from None
    return plt


def check_plot_path(path: str | Path) -> None:
    """Fail early (before a long simulation) on a non-PNG path or a missing matplotlib."""
    if Path(path).suffix.lower() != ".png":
        raise ClusterfitError(f"--plot writes PNG files; got {Path(path).name}")
    _pyplot()


def plot_simulation(report: dict[str, Any], run: SimRun, path: str | Path) -> Path:
    """Write a PNG with the TTFT / TPOT / e2e latency CDFs and the time series (TTFT p50/p99 per
    window, waiting requests, KV utilisation, live replicas; failures and scaling marked)."""
    path = Path(path)
    check_plot_path(path)
    plt = _pyplot()
    ttft, tpot, e2e = latencies(run.requests)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax = axes[0, 0]
    for name, x in (("TTFT", ttft), ("e2e", e2e)):
        x = np.sort(x[np.isfinite(x)])
        if x.size:
            ax.plot(x, np.arange(1, x.size + 1) / x.size, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("latency, s")
    ax.set_ylabel("share of requests")
    ax.set_title("Latency CDF")
    ax.grid(alpha=0.3)
    ax.legend()
    ax = axes[0, 1]
    x = np.sort(tpot[np.isfinite(tpot)])
    if x.size:
        ax.plot(x * 1e3, np.arange(1, x.size + 1) / x.size, color="tab:green")
    ax.set_xlabel("TPOT, ms")
    ax.set_title("Time per output token CDF")
    ax.grid(alpha=0.3)
    win = report["windows"]
    t = np.array([w["t_s"] for w in win])

    def col(key: str) -> np.ndarray:
        return np.array([np.nan if w[key] is None else w[key] for w in win], float)

    ax = axes[1, 0]
    ax.plot(t, col("ttft_p50_s"), label="TTFT p50")
    ax.plot(t, col("ttft_p99_s"), label="TTFT p99")
    ax.set_yscale("log")
    ax.set_xlabel("time, s")
    ax.set_ylabel("TTFT of arrivals in window, s")
    ax.set_title("Latency over time")
    ax.grid(alpha=0.3)
    ax = axes[1, 1]
    ax.plot(t, col("waiting"), label="waiting requests", color="tab:red")
    ax.set_xlabel("time, s")
    ax.set_ylabel("waiting requests")
    ax2 = ax.twinx()
    ax2.plot(t, col("kv_utilisation"), label="KV utilisation", color="tab:purple")
    ax2.plot(t, col("live_replicas") / max(report["replicas"], 1), label="live replicas (share)", color="tab:gray",
             linestyle="--")
    ax2.set_ylim(0, 1.05)
    ax.set_title("Queue, KV and replicas")
    for a in (axes[1, 0], axes[1, 1]):
        for ev in report["events"]:
            a.axvline(ev["t_s"], color="black", alpha=0.4, linestyle=":")
    axes[1, 0].legend()
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left")
    fig.suptitle(f"{report['requests']} requests on {report['replicas']} replicas ({report['policy']}): "
                 f"goodput {report['goodput']:.1%}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
