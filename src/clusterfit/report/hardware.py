"""The hardware table: one row per system, units in the keys (and in the rich column headers).

Memory: ``hbm_gb_per_gpu`` is the marketed figure in decimal GB (1e9 bytes); ``hbm_gib_visible_per_gpu`` is what
the framework sees, in GiB (2^30 bytes), where measured or derived (see catalog/hardware.yaml). FLOP/s are dense
(no 2:4 sparsity). NVLink/scale-up bandwidth is per GPU per direction; NIC rates are line rates in Gb/s.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..hardware import GB, GiB, HardwareCatalog, System


def system_row(system: System) -> dict[str, Any]:
    """One system as a flat dict; every numeric key names its unit and whether it is per GPU or per node."""
    gpu = system.gpu
    visible = gpu.visible_memory_bytes
    return {
        "id": system.id,
        "name": system.name,
        "gpu": gpu.id,
        "gpu_name": gpu.name,
        "gpus_per_node": system.gpus_per_node,
        "scale_up_domain_gpus": system.scale_up_domain_gpus,
        "hbm_gb_per_gpu": gpu.memory_bytes / GB,
        "hbm_gib_visible_per_gpu": round(visible / GiB, 2) if visible else None,
        "hbm_visible_derived": gpu.visible_memory_derived if visible else None,
        "hbm_gb_per_node": system.node_memory_bytes / GB,
        "mem_bw_tbs_per_gpu": gpu.mem_bw_bytes_per_s / 1e12,
        "bf16_tflops_dense_per_gpu": _tflops(gpu.dense_flops.get("bf16")),
        "fp8_tflops_dense_per_gpu": _tflops(gpu.dense_flops.get("fp8")),
        "fp4_tflops_dense_per_gpu": _tflops(gpu.dense_flops.get("fp4")),
        "nvlink_gbs_per_gpu_per_dir": gpu.scale_up_bw_bytes_per_s / 1e9,
        "scale_up_link": system.scale_up_link or gpu.scale_up_link,
        "nic_gbps_per_gpu": system.nic_gbps_per_gpu,
        "network_gbps_per_node": system.nic_gbps_per_gpu * system.gpus_per_node,
        "unverified": sorted({f"gpu.{f}" for f in gpu.unverified} | {f"system.{f}" for f in system.unverified}),
    }


def hardware_table(catalog: HardwareCatalog) -> list[dict[str, Any]]:
    """One row per system of ``catalog``, in catalog order (see ``system_row`` for the keys)."""
    return [system_row(s) for s in catalog.systems.values()]


def hardware_payload(catalog: HardwareCatalog) -> dict[str, Any]:
    """The JSON answer of `clusterfit hardware`: ``{"systems": [rows...]}``."""
    return {"systems": hardware_table(catalog)}


_COLUMNS: list[tuple[str, str, str]] = [
    # (row key, header with unit, format)
    ("id", "system", "s"),
    ("gpu", "GPU", "s"),
    ("gpus_per_node", "GPUs/\nnode", "d"),
    ("scale_up_domain_gpus", "scale-up\ndomain\n(GPUs)", "d"),
    ("hbm_gb_per_gpu", "HBM/GPU\n(GB, mkt)", ".0f"),
    ("hbm_gib_visible_per_gpu", "visible/GPU\n(GiB)", ".1f"),
    ("hbm_gb_per_node", "HBM/node\n(GB)", ".0f"),
    ("mem_bw_tbs_per_gpu", "mem BW/GPU\n(TB/s)", ".2f"),
    ("bf16_tflops_dense_per_gpu", "BF16/GPU\n(TFLOP/s\ndense)", ".0f"),
    ("fp8_tflops_dense_per_gpu", "FP8/GPU\n(TFLOP/s\ndense)", ".0f"),
    ("fp4_tflops_dense_per_gpu", "FP4/GPU\n(TFLOP/s\ndense)", ".0f"),
    ("nvlink_gbs_per_gpu_per_dir", "scale-up/GPU\n(GB/s\nper dir)", ".0f"),
    ("nic_gbps_per_gpu", "NIC/GPU\n(Gb/s)", ".0f"),
    ("network_gbps_per_node", "NIC/node\n(Gb/s)", ".0f"),
]


def render_hardware(console: Console, rows: list[dict[str, Any]]) -> None:
    """Draw the rows as a rich table; '-' marks a value the catalog does not have, '*' a row with unverified
    fields, '~' a visible-memory figure derived from nvidia-smi by the measured H200 ratio."""
    table = Table(title="clusterfit hardware (per GPU unless marked per node; FLOP/s dense, no sparsity)",
                  header_style="bold", show_lines=False)
    for i, (_, header, _) in enumerate(_COLUMNS):
        table.add_column(header, justify="left" if i < 2 else "right", no_wrap=i < 2)
    for row in rows:
        cells = []
        for key, _, fmt in _COLUMNS:
            cells.append(_cell(row.get(key), fmt))
        if row.get("unverified"):
            cells[0] += "*"
        if row.get("hbm_visible_derived"):
            cells[5] = "~" + cells[5]
        table.add_row(*cells)
    console.print(table)
    console.print("* some fields unverified (see catalog/hardware.yaml);  ~ visible memory derived from "
                  "nvidia-smi MiB by the H200 torch/nvidia-smi ratio;  GB = 1e9 bytes, GiB = 2^30 bytes",
                  style="dim", highlight=False)


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "s":
        return str(value)
    return format(value, fmt)


def _tflops(flops: float | None) -> float | None:
    return flops / 1e12 if flops else None
