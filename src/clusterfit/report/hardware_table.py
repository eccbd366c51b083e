"""The hardware table: one row per system, units in the keys (and in the rich column headers).

Memory: ``hbm_gb_per_gpu`` is the marketed figure in decimal GB (1e9 bytes); ``hbm_gib_visible_per_gpu`` is what
the framework sees, in GiB (2^30 bytes), where measured or derived (see catalog/hardware.yaml). FLOP/s are dense
(no 2:4 sparsity). Scale-up bandwidth (``scale_up_gbs_per_gpu_per_dir``: NVLink, PCIe, Infinity Fabric or ICI, as
``scale_up_link`` says) is per GPU per direction; NIC rates are line rates in Gb/s.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ..hardware import GB, GiB, HardwareCatalog, System
from .tables import fitted_table


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
        "scale_up_gbs_per_gpu_per_dir": gpu.scale_up_bw_bytes_per_s / 1e9,
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
    # (row key, header with unit, format); the title says "per GPU unless marked per node" and "dense"
    ("id", "system", "s"),
    ("gpu", "GPU", "s"),
    ("gpus_per_node", "GPUs/\nnode", "d"),
    ("scale_up_domain_gpus", "domain\nGPUs", "d"),
    # device memory (HBM; GDDR on L40S and RTX PRO), as the vendor markets it, in decimal GB
    ("hbm_gb_per_gpu", "memory GB\nmarketed", ".0f"),
    ("hbm_gib_visible_per_gpu", "visible\nGiB", ".1f"),
    ("hbm_gb_per_node", "memory/node\nGB", ".0f"),
    ("mem_bw_tbs_per_gpu", "mem BW\nTB/s", ".2f"),
    ("bf16_tflops_dense_per_gpu", "BF16\nTFLOP/s", ".0f"),
    ("fp8_tflops_dense_per_gpu", "FP8\nTFLOP/s", ".0f"),
    ("fp4_tflops_dense_per_gpu", "FP4\nTFLOP/s", ".0f"),
    ("scale_up_gbs_per_gpu_per_dir", "scale-up\nGB/s/dir", ".0f"),
    ("nic_gbps_per_gpu", "NIC\nGb/s", ".0f"),
    ("network_gbps_per_node", "NIC/node\nGb/s", ".0f"),
]

# Left out first when the terminal is too narrow (numbers are never cut; --json has everything).
_DROP_ORDER = ["gpu", "network_gbps_per_node", "hbm_gb_per_node", "hbm_gib_visible_per_gpu",
               "fp4_tflops_dense_per_gpu", "scale_up_domain_gpus", "gpus_per_node"]


def render_hardware(console: Console, rows: list[dict[str, Any]]) -> None:
    """Draw the rows as a rich table; '-' marks a value the catalog does not have, '*' a row with unverified
    fields, '~' a visible-memory figure derived from nvidia-smi by the measured H200 ratio.

    Numbers are never cut: on a narrow terminal whole columns are left out (and named below the table).
    """
    formatted = []
    converted = []
    for row in rows:
        cells = {key: _cell(row.get(key), fmt) for key, _, fmt in _COLUMNS}
        if row.get("unverified"):
            cells["id"] += "*"
        if row.get("hbm_visible_derived"):
            cells["hbm_gib_visible_per_gpu"] = "~" + cells["hbm_gib_visible_per_gpu"]
        gib = gib_marketed(row["hbm_gb_per_gpu"])
        if gib is not None:
            cells["hbm_gb_per_gpu"] += "†"
            converted.append(f"{row['gpu']} {gib:g} GiB")
        formatted.append(cells)
    columns = [(key, header, key in ("id", "gpu")) for key, header, _ in _COLUMNS]
    table, skipped = fitted_table("clusterfit hardware", columns, formatted, _DROP_ORDER, console.width)
    console.print(table)
    note = ("per GPU unless marked per node; memory: HBM, or GDDR (L40S, RTX PRO); FLOP/s dense (no sparsity); "
            "scale-up per direction; GB = 1e9 bytes, GiB = 2^30 bytes. * some fields unverified (see "
            "catalog/hardware.yaml); ~ visible memory derived from nvidia-smi MiB by the H200 torch/nvidia-smi ratio.")
    if converted:
        note += f" † marketed in GiB, converted to GB: {', '.join(converted)}."
    if skipped:
        note += f" Left out for width: {', '.join(skipped)} (see --json)."
    console.print(note, style="dim", highlight=False)


def gib_marketed(gb: float) -> float | None:
    """The GiB figure a marketed capacity was converted from (the catalog's memory_gib x 2^30 bytes: 192 GiB ->
    206.158 GB), or None when it is a whole number of bytes that is not a whole number of GiB (a GB figure)."""
    whole = round(gb * GB)
    if whole % GiB or not whole % GB:   # not whole GiB, or a whole number of GB as well
        return None
    return whole / GiB


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "s":
        return str(value)
    return format(value, fmt)


def _tflops(flops: float | None) -> float | None:
    return flops / 1e12 if flops else None
