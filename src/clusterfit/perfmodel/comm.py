"""Collective communication time: latency + bytes / bandwidth of the link actually crossed.

Links (per GPU, per direction): NVLink/NVSwitch inside the scale-up domain (``System.gpu.scale_up_bw_bytes_per_s``),
InfiniBand/RoCE between nodes (``System.net_bw_bytes_per_s``), PCIe for cards without NVLink (the catalog
puts the PCIe figure in scale_up_bw for those). Achieved fractions of those line rates and per-hop
latencies are the documented constants below (typical NCCL / TensorRT-LLM custom all-reduce figures on
Hopper: ~80% of NVLink line rate for large messages, ~10 us per small-message NVSwitch collective step, ~8 us across InfiniBand).

Algorithms (n ranks, message of ``b`` bytes per rank):
- all-reduce, ring:      2(n-1) hops of latency, 2(n-1)/n * b bytes on the slowest link
- all-reduce, one-shot:  1 hop; every rank reads the n-1 other buffers: (n-1) * b bytes (wins for small b)
- all-reduce, two-shot:  reduce-scatter + all-gather in 2 hops: 2(n-1)/n * b bytes
  The fastest of the three is used (engines switch by message size). One-shot and two-shot are the engines'
  custom all-reduce kernels, which read peers' buffers over NVLink; PCIe cards and groups spanning nodes run
  NCCL's ring only (vLLM and TensorRT-LLM disable their custom all-reduce without NVLink peer access).
- reduce-scatter / all-gather: (n-1) hops, (n-1)/n * b bytes.
- all-to-all (EP dispatch / combine): each rank sends b bytes spread over n ranks; the share leaving the
  node goes over the NIC, the rest over NVLink; time = latency + max(intra / nvlink, inter / nic).
- send/recv (PP): latency + b / bw of the link between the two stages.

All functions are numpy-broadcasting in the byte counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Achieved fraction of line rate for large messages (NCCL bus bandwidth / line rate).
NVLINK_EFF = 0.80
NET_EFF = 0.85
#: PCIe-only nodes: NCCL all-reduce on 8 GPUs reached a bus bandwidth of 28 GB/s on PCIe Gen5 x16 (64 GB/s per
#: direction) - 0.44 of line rate - and NCCL's maintainer notes that on PCIe systems the CPU and host memory
#: bound it (github.com/NVIDIA/nccl issue #1639, 8x RTX 5090, 2025-03). Topologies with PCIe switches that
#: allow full-rate peer-to-peer do better; this is the typical server figure.
PCIE_EFF = 0.44
#: Per-hop latency (s).
NVLINK_HOP_S = 10e-6
#: (NVLink: 10 us per hop, raised from 3 us. A small-message all-reduce over 8 NVSwitch-connected GPUs costs
#: ~10 us end to end in NCCL / the TensorRT-LLM one-shot kernel (launch, flag barrier across ranks, read-back),
#: not the ~3 us wire latency: github.com/NVIDIA/nccl issue #1259 measures ~6 us on 2 of an HGX 8x H100's GPUs
#: with NVLS and CUDA graphs, rising with the GPU count. The value is a scan of 3/6/10 us on the development
#: CSV: no row worse by > 5 points, 27 better.)
NET_HOP_S = 8e-6
#: PCIe: per ring step. An 8-GPU NCCL all-reduce of 8 bytes takes 54.18 us on 8x RTX 3090 (github.com/NVIDIA/nccl
#: issue #1439) and 42.56 us with the tree algorithm on 8x RTX 4090 (issue #1530); the ring's 2 x 7 steps at
#: 3.4 us give their mean, 48 us.
PCIE_HOP_S = 3.4e-6


@dataclass(frozen=True)
class Link:
    """One link kind: bandwidth per GPU per direction (bytes/s, achieved) and per-hop latency (s)."""

    bw_bytes_per_s: float
    hop_s: float
    #: whether the engines' one-shot / two-shot custom all-reduce (peer reads over NVLink) can run on this link
    custom_allreduce: bool = True


def links_for(system) -> tuple[Link, Link]:
    """(scale-up link, scale-out link) of a System, with the achieved-fraction constants applied."""
    gpu = system.gpu
    pcie = (getattr(system, "scale_up_domain_gpus", 8) or 1) <= 1 or gpu.scale_up_bw_bytes_per_s <= 128e9
    if pcie:
        up = Link(gpu.scale_up_bw_bytes_per_s * PCIE_EFF, PCIE_HOP_S, custom_allreduce=False)
    else:
        up = Link(gpu.scale_up_bw_bytes_per_s * NVLINK_EFF, NVLINK_HOP_S)
    net_bw = system.net_bw_bytes_per_s or up.bw_bytes_per_s
    out = Link(net_bw * NET_EFF, NET_HOP_S, custom_allreduce=False)  # peer reads do not cross nodes
    return up, out


def all_reduce_s(nbytes, n: int, link: Link):
    """Fastest of ring, one-shot and two-shot all-reduce of ``nbytes`` per rank over ``n`` ranks (ring only where
    the link has no custom all-reduce)."""
    b = np.asarray(nbytes, dtype=float)
    if n <= 1:
        return np.zeros_like(b)
    ring = 2 * (n - 1) * link.hop_s + 2.0 * (n - 1) / n * b / link.bw_bytes_per_s
    if not link.custom_allreduce:
        return ring
    one_shot = link.hop_s + (n - 1) * b / link.bw_bytes_per_s
    two_shot = 2 * link.hop_s + 2.0 * (n - 1) / n * b / link.bw_bytes_per_s
    return np.minimum(np.minimum(ring, one_shot), two_shot)


def reduce_scatter_s(nbytes, n: int, link: Link):
    b = np.asarray(nbytes, dtype=float)
    if n <= 1:
        return np.zeros_like(b)
    return (n - 1) * link.hop_s + (n - 1) / n * b / link.bw_bytes_per_s


def all_gather_s(nbytes, n: int, link: Link):
    """All-gather where each rank ends with ``nbytes`` (it contributes nbytes / n)."""
    return reduce_scatter_s(nbytes, n, link)


def all_to_all_s(nbytes_sent_per_rank, n: int, system, ranks_per_node: int | None = None):
    """All-to-all over ``n`` ranks, each sending ``nbytes_sent_per_rank`` spread evenly over all n ranks.

    Ranks are packed into scale-up domains of ``ranks_per_node`` (default: the system's domain size).
    """
    b = np.asarray(nbytes_sent_per_rank, dtype=float)
    if n <= 1:
        return np.zeros_like(b)
    up, out = links_for(system)
    g = min(n, ranks_per_node or system.scale_up_domain_gpus or 1)
    intra = b * (g - 1) / n
    inter = b * (n - g) / n
    t = np.maximum(intra / up.bw_bytes_per_s, inter / out.bw_bytes_per_s)
    hop = out.hop_s if n > g else up.hop_s
    return hop + t


def send_recv_s(nbytes, link: Link):
    b = np.asarray(nbytes, dtype=float)
    return link.hop_s + b / link.bw_bytes_per_s
