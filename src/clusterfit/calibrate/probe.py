"""Time the performance model's kernels on the local GPU with PyTorch (``clusterfit calibrate``).

Adapted from the probes behind the shipped H200 measurements (shared/tools/gpu_probe.py and gpu_probe2.py, copied
into this module and changed where noted): the same kernels, shapes and timing rule, written as profile timings
(clusterfit.profile.Timings).

- Timing: CUDA events around each call, median of ``repeats`` calls after ``warmup`` calls (host clock on the CPU).
- GEMMs: y[M,N] = x[M,K] @ W[N,K]^T over the probe's (K, N) pairs (Llama-3.1-8B and -70B projections and MLPs,
  DeepSeek-V3 / Qwen3 MoE widths and an LM-head shard) and M from 1 to 16,384 tokens; bf16 with torch.matmul
  (cuBLAS), fp8 e4m3 with torch._scaled_mm and per-tensor scales where the GPU has fp8 tensor cores. Changed from
  the probe: x is quantised *outside* the timed call, because serving engines fuse that quantisation into the
  preceding kernel (the probe timed it and clusterfit had to fit it out again); M is padded to 16 for fp8 as the
  probe did (torch._scaled_mm's alignment).
- Attention: torch scaled_dot_product_attention in bf16, 32 query / 8 KV heads of 128 (Llama-3.1-8B); decode
  (one query per sequence, native GQA) over (B, L) from one 1k sequence to 256 x 8k, causal prefill of 1k-16k tokens.
- MoE: routed-expert FFNs (gate+up, SiLU, down; bf16; torch._grouped_mm) of one GPU holding 1/8 of the experts (EP=8)
  of DeepSeek-V3 (7168/2048, 256 experts, top-8) and Qwen3-235B-A22B (4096/1536, 128 experts, top-8) for 1 to 16,384
  tokens routed uniformly at random (seeded). Without torch._grouped_mm the MoE family is not measured (a loop over
  experts times Python, not the fused kernels engines run) except in a CPU dry run.
- Streams: a device-to-device copy (bytes read + written) and a read-only reduction, of buffers far larger than
  the L2 cache (up to 4 GiB, an eighth of the GPU's memory at most).

``quick``: fewer shapes (every family still measured, about a quarter of the rows). ``dry_run``: tiny shapes on the
CPU, to exercise the code without a GPU; its numbers mean nothing for predictions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Log = Callable[[str], None]


@dataclass(frozen=True)
class Shapes:
    """What one calibration times."""

    gemm_kn: tuple[tuple[int, int], ...]
    gemm_m: tuple[int, ...]
    heads: tuple[int, int, int]                 # query heads, KV heads, head dimension
    decode: tuple[tuple[int, int], ...]         # (sequences, cached tokens)
    prefill: tuple[tuple[int, int], ...]        # (sequences, tokens)
    moe: tuple[tuple[int, int, int, int], ...]  # (hidden, expert intermediate, experts, top-k); 1/8 of them local
    moe_tokens: tuple[int, ...]
    stream_bytes: int
    allreduce_bytes: tuple[int, ...]
    warmup: int = 5
    repeats: int = 30


#: gpu_probe.py's GEMM_KN and GEMM_M (the shipped H200 rows): (K, N) of Llama-3.1-8B qkv / gate+up / down,
#: Llama-3.1-70B qkv / gate+up / down, DeepSeek-V3 (7168 -> 4096, 2048 -> 7168) and its LM head over 8 GPUs.
GEMM_KN = ((4096, 6144), (4096, 28672), (14336, 4096), (8192, 10240), (8192, 57344), (28672, 8192),
           (7168, 4096), (2048, 7168), (7168, 129280 // 8))
GEMM_M = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
#: All-reduce message sizes per rank: 8 KiB (a decode step's activations of one token at hidden 4096) to 256 MiB.
ALLREDUCE_BYTES = tuple(2 ** p for p in range(13, 29))

FULL = Shapes(
    gemm_kn=GEMM_KN, gemm_m=GEMM_M, heads=(32, 8, 128),
    decode=((1, 1024), (1, 8192), (1, 32768), (1, 131072), (16, 4096), (64, 2048), (64, 8192), (128, 4096),
            (256, 2048), (256, 8192)),
    prefill=((1, 1024), (1, 4096), (1, 16384), (4, 4096)),
    moe=((7168, 2048, 256, 8), (4096, 1536, 128, 8)),
    moe_tokens=(1, 8, 32, 64, 128, 256, 512, 1024, 4096, 16384),
    stream_bytes=4 << 30, allreduce_bytes=ALLREDUCE_BYTES)

QUICK = Shapes(
    gemm_kn=((4096, 6144), (14336, 4096), (8192, 57344)), gemm_m=(1, 16, 64, 256, 1024, 4096, 16384),
    heads=(32, 8, 128), decode=((1, 8192), (16, 4096), (64, 8192), (256, 2048)), prefill=((1, 1024), (1, 4096), (1, 16384)),
    moe=((7168, 2048, 256, 8),), moe_tokens=(1, 32, 256, 1024, 16384),
    stream_bytes=1 << 30, allreduce_bytes=ALLREDUCE_BYTES[::3], warmup=3, repeats=10)

DRY_RUN = Shapes(
    gemm_kn=((256, 512), (512, 256)), gemm_m=(1, 16, 64), heads=(8, 2, 64), decode=((1, 256), (4, 512)),
    prefill=((1, 128), (1, 256)), moe=((256, 128, 16, 2),), moe_tokens=(8, 64),
    stream_bytes=16 << 20, allreduce_bytes=(1 << 12, 1 << 16), warmup=1, repeats=3)


def median_time_s(torch: Any, cuda: bool, fn: Callable[[], Any], warmup: int, repeats: int) -> float:
    """Median seconds of fn() over ``repeats`` calls after ``warmup`` calls: CUDA events around each call on a GPU
    (``cuda``), the host clock on the CPU. The probes' one timing rule (also benchmarks/probe_decode_steps.py)."""
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    times.sort()
    return float(times[len(times) // 2])


class Probe:
    """Times kernels on one device (``torch.device``), returning profile timing rows (plain dicts)."""

    def __init__(self, torch: Any, device: str, shapes: Shapes, log: Log) -> None:
        self.torch, self.device, self.shapes, self.log = torch, device, shapes, log
        self.cuda = device.startswith("cuda")
        self.notes: list[str] = []
        self.bf16 = torch.bfloat16

    # ---------------------------------------------------------------------------------------- timing
    def time_s(self, fn: Callable[[], Any], warmup: int | None = None, repeats: int | None = None) -> float:
        """Median seconds of fn() (``median_time_s``) at the shapes' warm-up and repeat counts unless given."""
        return median_time_s(self.torch, self.cuda, fn, self.shapes.warmup if warmup is None else warmup,
                             self.shapes.repeats if repeats is None else repeats)

    def _free(self) -> None:
        if self.cuda:
            self.torch.cuda.empty_cache()

    # --------------------------------------------------------------------------------------- streams
    def streams(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(copy row, read row): a device-to-device copy and a read-only sum over ``stream_bytes``."""
        torch, n = self.torch, self.shapes.stream_bytes
        if self.cuda:  # at most an eighth of the device: two buffers for the copy, headroom for the rest
            n = min(n, torch.cuda.get_device_properties(self.device).total_memory // 8)
        a = torch.empty(n // 2, dtype=self.bf16, device=self.device).normal_()
        b = torch.empty_like(a)
        t_copy = self.time_s(lambda: b.copy_(a), repeats=min(self.shapes.repeats, 20))
        t_read = self.time_s(lambda: a.sum(), repeats=min(self.shapes.repeats, 20))
        del a, b
        self._free()
        self.log(f"copy {n * 2 / 1e9:.2f} GB moved: {2 * n / t_copy / 1e12:.3f} TB/s; read {n / t_read / 1e12:.3f} TB/s")
        return {"bytes_read_plus_written": 2 * n, "s": t_copy}, {"bytes": n, "s": t_read}

    # ----------------------------------------------------------------------------------------- GEMMs
    def _fp8(self) -> Any:
        """torch.float8_e4m3fn where this device runs torch._scaled_mm (CUDA, compute capability >= 8.9), else None."""
        torch = self.torch
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if not self.cuda or fp8 is None or not hasattr(torch, "_scaled_mm"):
            return None
        if torch.cuda.get_device_capability(self.device) < (8, 9):
            self.notes.append("fp8 GEMMs not measured: no fp8 tensor cores (compute capability below 8.9); the "
                              "shipped fp8 curve stays")
            return None
        return fp8

    def _quant(self, x: Any, fp8: Any) -> tuple[Any, Any]:
        """Per-tensor fp8 e4m3 quantisation (gpu_probe.py quant_fp8): (values, fp32 scale)."""
        amax = x.abs().amax().float().clamp(min=1e-12)
        scale = amax / 448.0
        return (x / scale).to(fp8), scale.reshape(())

    def gemms(self) -> list[dict[str, Any]]:
        torch = self.torch
        rows: list[dict[str, Any]] = []
        fp8 = self._fp8()
        for k, n in self.shapes.gemm_kn:
            w = torch.randn(n, k, dtype=self.bf16, device=self.device) * 0.02
            wq = ws = None
            if fp8 is not None:
                wq, ws = self._quant(w, fp8)
            fp8_ms: set[int] = set()
            for m in self.shapes.gemm_m:
                x = torch.randn(m, k, dtype=self.bf16, device=self.device)
                rows.append({"dtype": "bf16", "m": m, "n": n, "k": k, "s": self.time_s(lambda: x @ w.t())})
                mp = max(16, m)
                if wq is not None and mp not in fp8_ms:
                    fp8_ms.add(mp)
                    xq, xs = self._quant(torch.randn(mp, k, dtype=self.bf16, device=self.device), fp8)
                    wt = wq.t()
                    try:
                        t8 = self.time_s(lambda: torch._scaled_mm(xq, wt, scale_a=xs, scale_b=ws, out_dtype=self.bf16))
                    except RuntimeError as exc:  # a torch / device combination without this kernel
                        self.notes.append(f"fp8 GEMM {mp}x{k}x{n} failed ({str(exc).splitlines()[0][:160]}); fp8 "
                                          "GEMMs not measured")
                        fp8, wq = None, None
                    else:
                        rows.append({"dtype": "fp8", "m": mp, "n": n, "k": k, "s": t8})
                del x
            done = [r for r in rows if (r["k"], r["n"]) == (k, n)]
            self.log(f"gemm K={k} N={n}: " + ", ".join(f"{r['m']}:{2 * r['m'] * n * k / r['s'] / 1e12:.0f}"
                                                       f"{'' if r['dtype'] == 'bf16' else '/fp8'}" for r in done)
                     + " TFLOP/s")
            del w, wq
            self._free()
        if fp8 is None:
            rows = [r for r in rows if r["dtype"] == "bf16"]
        return rows

    # ------------------------------------------------------------------------------------- attention
    def attention(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        torch = self.torch
        sdpa = torch.nn.functional.scaled_dot_product_attention
        hq, hkv, d = self.shapes.heads
        dec, pre = [], []
        for b, length in self.shapes.decode:
            q = torch.randn(b, hq, 1, d, dtype=self.bf16, device=self.device)
            k = torch.randn(b, hkv, length, d, dtype=self.bf16, device=self.device)
            v = torch.randn_like(k)
            t = self.time_s(lambda: sdpa(q, k, v, enable_gqa=True))
            dec.append({"b": b, "l": length, "hq": hq, "hkv": hkv, "d": d, "s": t})
            self.log(f"attention decode B={b} L={length}: {t * 1e6:.0f} us, "
                     f"{2 * b * hkv * length * d * 2 / t / 1e12:.2f} TB/s of KV")
            del q, k, v
        for b, tokens in self.shapes.prefill:
            q = torch.randn(b, hq, tokens, d, dtype=self.bf16, device=self.device)
            k = torch.randn(b, hkv, tokens, d, dtype=self.bf16, device=self.device)
            v = torch.randn_like(k)
            t = self.time_s(lambda: sdpa(q, k, v, is_causal=True, enable_gqa=True),
                            repeats=min(self.shapes.repeats, 10))
            pre.append({"b": b, "t": tokens, "hq": hq, "hkv": hkv, "d": d, "s": t})
            self.log(f"attention prefill B={b} T={tokens}: {t * 1e3:.2f} ms, "
                     f"{2 * b * hq * tokens * tokens * d / t / 1e12:.0f} TFLOP/s")
            del q, k, v
        self._free()
        return dec, pre

    # ------------------------------------------------------------------------------------------- MoE
    def moe(self) -> list[dict[str, Any]]:
        """Routed-expert FFNs of one EP=8 rank (gpu_probe2.py moe()); [] where torch._grouped_mm does not run."""
        torch = self.torch
        rows: list[dict[str, Any]] = []
        grouped = hasattr(torch, "_grouped_mm") and self.cuda
        if not grouped and self.cuda:
            self.notes.append("MoE not measured: this PyTorch has no torch._grouped_mm; the shipped MoE curve stays")
            return rows
        silu = torch.nn.functional.silu
        gen = torch.Generator(device=self.device).manual_seed(0)
        for hidden, inter, experts, top_k in self.shapes.moe:
            local = experts // 8
            w1 = torch.randn(local, hidden, 2 * inter, dtype=self.bf16, device=self.device) * 0.02
            w2 = torch.randn(local, inter, hidden, dtype=self.bf16, device=self.device) * 0.02
            for b in self.shapes.moe_tokens:
                choice = torch.rand(b, experts, device=self.device, generator=gen).topk(top_k, dim=1).indices.flatten()
                counts = torch.bincount(choice[choice < local], minlength=local)
                routed = int(counts.sum().item())
                if routed == 0:
                    continue
                x = torch.randn(routed, hidden, dtype=self.bf16, device=self.device)
                offs = torch.cumsum(counts, 0).to(torch.int32)
                active = int((counts > 0).sum().item())

                def run_grouped() -> Any:
                    g, u = torch._grouped_mm(x, w1, offs=offs).chunk(2, dim=-1)
                    return torch._grouped_mm((silu(g) * u).contiguous(), w2, offs=offs)

                def run_loop() -> Any:  # CPU dry run only: a Python loop over the experts
                    outs, start = [], 0
                    for e, c in enumerate(counts.tolist()):
                        if c:
                            g, u = (x[start:start + c] @ w1[e]).chunk(2, dim=-1)
                            outs.append((silu(g) * u) @ w2[e])
                        start += c
                    return outs

                method = "torch._grouped_mm" if grouped else "python loop over experts (dry run)"
                try:
                    t = self.time_s(run_grouped if grouped else run_loop, repeats=min(self.shapes.repeats, 20))
                except RuntimeError as exc:
                    self.notes.append(f"MoE not measured: torch._grouped_mm failed ({str(exc).splitlines()[0][:160]}); "
                                      "the shipped MoE curve stays")
                    return []
                rows.append({"hidden": hidden, "moe_inter": inter, "routed_tokens": routed, "active_experts": active,
                             "s": t, "method": method})
                self.log(f"moe {hidden}/{inter} B={b}: {routed} tokens on {active}/{local} experts, {t * 1e6:.0f} us")
                del x
            del w1, w2
            self._free()
        return rows
