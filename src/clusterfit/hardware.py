"""Accelerators and systems (nodes, racks) as typed specs.

Units are in the field names: bytes, bytes/s (decimal), FLOP/s (dense, no 2:4 sparsity).
The values come from ``catalog/hardware.yaml``; every value there names its source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ClusterfitError

GB = 10**9
GiB = 2**30
MiB = 2**20


@dataclass(frozen=True)
class Gpu:
    """One accelerator.

    memory_bytes: marketed capacity in bytes (141 GB -> 141e9; where the vendor states GiB, GiB x 2^30).
    visible_memory_bytes: what the device exposes to the framework (torch total_memory), where known;
        otherwise None and ``usable_memory_bytes`` falls back to the marketed figure.
    mem_bw_bytes_per_s: peak HBM/GDDR bandwidth (datasheet), bytes/s.
    dense_flops: dense tensor-core peak per dtype in FLOP/s ("bf16", "fp16", "fp8", "fp4", "int8").
    scale_up_bw_bytes_per_s: NVLink/xGMI/ICI bandwidth per GPU per direction, bytes/s
        (PCIe per direction for PCIe cards without a bridge).
    """

    id: str
    name: str
    memory_bytes: int
    mem_bw_bytes_per_s: float
    dense_flops: dict[str, float]
    scale_up_bw_bytes_per_s: float
    visible_memory_bytes: int | None = None
    pcie_gen: int | None = None
    tdp_w: float | None = None
    vendor: str = "nvidia"
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def usable_memory_bytes(self) -> int:
        """Bytes the device exposes (measured/reported) or, if unknown, the marketed bytes."""
        return self.visible_memory_bytes or self.memory_bytes

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype; falls back to the next wider supported dtype.

        fp4 -> fp8 -> bf16 (a GPU without fp4 runs fp4 weights through fp8 or bf16 math).
        """
        order = {"fp4": ["fp4", "fp8", "bf16"], "fp8": ["fp8", "bf16"], "int8": ["int8", "fp8", "bf16"],
                 "int4": ["int8", "fp8", "bf16"], "fp16": ["fp16", "bf16"], "bf16": ["bf16", "fp16"]}
        for d in order.get(dtype, [dtype]):
            v = self.dense_flops.get(d)
            if v:
                return v
        raise ClusterfitError(f"GPU {self.id} has no dense {dtype} (or wider) peak in the catalog")


@dataclass(frozen=True)
class System:
    """A node (or rack) of identical GPUs.

    gpus_per_node: GPUs in one node/tray (the unit a user rents: 8 for HGX/DGX, 4 for an NVL72 tray).
    scale_up_domain_gpus: GPUs joined by NVLink/NVSwitch (8 for HGX/DGX, 72 for NVL72).
    nic_gbps_per_gpu: scale-out (InfiniBand/RoCE) line rate per GPU, Gb/s (decimal bits).
    """

    id: str
    name: str
    gpu: Gpu
    gpus_per_node: int
    scale_up_domain_gpus: int
    nic_gbps_per_gpu: float
    nics_per_node: int | None = None
    aliases: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def net_bw_bytes_per_s(self) -> float:
        """Scale-out bandwidth per GPU per direction, bytes/s (400 Gb/s -> 50e9)."""
        return self.nic_gbps_per_gpu * 1e9 / 8

    @property
    def node_memory_bytes(self) -> int:
        """Marketed memory of one node, bytes."""
        return self.gpu.memory_bytes * self.gpus_per_node
