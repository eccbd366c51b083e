"""All-reduce timings across the visible GPUs: torch.distributed (NCCL) in processes started by
torch.multiprocessing.spawn, one per GPU, on the loopback address.

Timing rule (as nccl-tests' all_reduce_perf): per message size, ``warmup`` all-reduces, then ``iters`` back-to-back
all-reduces between two CUDA events on rank 0, seconds per call = elapsed / iters; that is repeated ``repeats`` times
and the median kept. The message is ``bytes`` of bf16 per rank (an in-place sum). A CPU dry run uses the gloo backend
and the host clock, to exercise the same code without GPUs.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any


def _free_port() -> int:
    """A free TCP port on 127.0.0.1 for the process group's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, sizes: list[int], warmup: int, iters: int, repeats: int, cuda: bool,
            out: str) -> None:
    """One rank: join the group, time every size, rank 0 writes [{bytes, s}] as JSON to ``out``."""
    import torch
    import torch.distributed as dist

    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device(f"cuda:{rank}") if cuda else None)
    try:
        device = f"cuda:{rank}" if cuda else "cpu"
        rows = []
        for nbytes in sizes:
            x = torch.ones(max(1, nbytes // 2), dtype=torch.bfloat16, device=device)
            for _ in range(warmup):
                dist.all_reduce(x)
            samples = []
            for _ in range(repeats):
                dist.barrier()
                if cuda:
                    torch.cuda.synchronize()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(iters):
                        dist.all_reduce(x)
                    end.record()
                    end.synchronize()
                    samples.append(start.elapsed_time(end) / 1e3 / iters)
                else:
                    t = time.perf_counter()
                    for _ in range(iters):
                        dist.all_reduce(x)
                    samples.append((time.perf_counter() - t) / iters)
            samples.sort()
            rows.append({"bytes": x.numel() * 2, "s": samples[len(samples) // 2]})
            del x
        if rank == 0:
            Path(out).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def time_allreduce(torch: Any, gpus: int, sizes: tuple[int, ...], cuda: bool, warmup: int = 5, iters: int = 20,
                   repeats: int = 5) -> list[dict[str, Any]]:
    """Rows {gpus, bytes, s} of all-reduces over ``gpus`` ranks (GPUs 0..gpus-1, or CPU processes for a dry run)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="clusterfit-allreduce-") as tmp:
        out = os.path.join(tmp, "rows.json")
        mp.spawn(_worker, args=(gpus, _free_port(), list(sizes), warmup, iters, repeats, cuda, out), nprocs=gpus,
                 join=True)
        rows = json.loads(Path(out).read_text())
    return [{"gpus": gpus, **r} for r in rows]
