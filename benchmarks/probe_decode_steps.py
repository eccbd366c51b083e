"""Whole decode steps on the local GPU, replayed as CUDA graphs and run eagerly, and grouped expert GEMMs at large
token counts: the measurements issue 11 asks for ("decode steps with CUDA graphs at batch 1-512 for a dense and a
MoE shape; grouped GEMM at large token counts"). Its outputs are kept in ``tests/data/measured/`` and checked against
the performance model by ``benchmarks/decode_steps_check.py``. Needs torch, and clusterfit importable (an install,
or ``PYTHONPATH=src``; the modules it uses import neither numpy nor pydantic): the shapes come from the catalog's
parsed architectures (clusterfit.arch.load_model), the timing rule is clusterfit.calibrate.probe.median_time_s.

Usage: python benchmarks/probe_decode_steps.py OUT.json [--quick] [--device cpu] [--compile | --only-compile]
       [--run MODEL:CONTEXT:B1,B2,... ...]

What one decode step is here: the model's forward pass for one new token of each of B sequences that each hold
``context`` cached tokens, built from PyTorch operators with random bf16 weights (shapes from the catalog's
config.json; nothing is downloaded). Per layer: RMSNorm, fused QKV projection, the new token's K and V written
into a preallocated cache [B, kv_heads, context + 1, head_dim], scaled_dot_product_attention over the cache (one
query per sequence, native GQA), output projection and residual; then RMSNorm and either the dense MLP (gate+up
GEMM, SiLU x up, down GEMM) or the routed MoE (router GEMM, softmax top-k with renormalised weights, tokens sorted
by expert, torch._grouped_mm for gate+up and down, weighted index_add back). After the layers: final RMSNorm and
the LM head on every row. Left out, and counted in neither timing: rotary embeddings (engines fuse them into a
neighbouring kernel), sampling, and the engine's scheduling on the host. Routing is whatever random weights give
(close to uniform), not a trained router's skew.

Timings (CUDA events, median): ``graph_s``, one replay of a CUDA graph captured around the step (the way vLLM,
SGLang and TensorRT-LLM run decode up to their capture sizes); ``eager_s``, the same step launched op by op from
Python (``--enforce-eager``-like: the GPU waits for the CPU when kernels are shorter than their launches).
``kernels``: GPU operations one eager step launches (torch.profiler, CUDA activity), at batch 1 and the largest.

Grouped GEMMs: one EP=8 rank of DeepSeek-V3 (32 local experts, hidden 7168, expert intermediate 2048), tokens split
evenly over the experts, gate+up and down timed separately, bf16 (torch._grouped_mm) and fp8 e4m3 with row-wise
scales (torch._scaled_grouped_mm; quantisation outside the timed call) where the GPU and PyTorch run it.
``--device cpu`` runs tiny shapes on the CPU to exercise the code; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from clusterfit.calibrate.probe import median_time_s

F = torch.nn.functional
BF16 = torch.bfloat16
T0 = time.time()


def log(*a: Any) -> None:
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def shape(model_id: str) -> dict[str, Any]:
    """The probe's shape fields of a catalog model, from its parsed architecture (clusterfit.arch.load_model; every
    layer of these models has the first layer's shape). Norm epsilon: 1e-6 (timing does not depend on it)."""
    from clusterfit.arch import load_model

    m = load_model(model_id)
    att, ffn = m.layers[0].attention, m.layers[0].ffn
    s = {"model": model_id, "layers": m.num_layers, "hidden": m.hidden, "heads": att.num_heads,
         "kv_heads": att.num_kv_heads, "head_dim": att.head_dim, "vocab": m.vocab, "eps": 1e-6}
    if ffn.kind == "moe":
        s |= {"experts": ffn.num_experts, "top_k": ffn.top_k, "moe_inter": ffn.expert_intermediate}
    else:
        s["inter"] = ffn.intermediate
    return s


def tiny(s: dict[str, Any]) -> dict[str, Any]:
    """A CPU dry run's shape: same structure, toy sizes."""
    t = dict(s, layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64, vocab=512)
    return t | ({"experts": 8, "top_k": 2, "moe_inter": 128} if "experts" in s else {"inter": 512})


class Timer:
    """clusterfit.calibrate.probe's timing rule (median_time_s) on this script's device."""

    def __init__(self, dev: str) -> None:
        self.cuda = dev == "cuda"

    def median_s(self, fn: Any, warmup: int, repeats: int) -> float:
        return median_time_s(torch, self.cuda, fn, warmup, repeats)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


class DecodeModel:
    """Random-weight decode step of one dense or MoE shape, for every batch up to ``max_batch``."""

    def __init__(self, s: dict[str, Any], max_batch: int, context: int, dev: str) -> None:
        self.s, self.context, self.dev = s, context, dev
        h, d, hq, hkv = s["hidden"], s["head_dim"], s["heads"], s["kv_heads"]

        def w(*dims: int) -> torch.Tensor:
            return torch.empty(*dims, dtype=BF16, device=dev).normal_(0.0, dims[-2] ** -0.5 if len(dims) > 1 else 1)

        self.layers = []
        for _ in range(s["layers"]):
            lay = {"n1": torch.ones(h, dtype=BF16, device=dev), "n2": torch.ones(h, dtype=BF16, device=dev),
                   "wqkv": w((hq + 2 * hkv) * d, h), "wo": w(h, hq * d),
                   "k": torch.empty(max_batch, hkv, context + 1, d, dtype=BF16, device=dev).normal_(),
                   "v": torch.empty(max_batch, hkv, context + 1, d, dtype=BF16, device=dev).normal_()}
            if "experts" in s:
                e, i = s["experts"], s["moe_inter"]
                lay |= {"wr": w(e, h), "w1": w(e, h, 2 * i), "w2": w(e, i, h)}
            else:
                lay |= {"wgu": w(2 * s["inter"], h), "wdown": w(h, s["inter"])}
            self.layers.append(lay)
        self.norm = torch.ones(h, dtype=BF16, device=dev)
        self.lm_head = w(s["vocab"], h)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        s, b, c = self.s, x.shape[0], self.context
        h, d, hq, hkv = s["hidden"], s["head_dim"], s["heads"], s["kv_heads"]
        for lay in self.layers:
            a = F.rms_norm(x, (h,), lay["n1"], s["eps"])
            q, k, v = (a @ lay["wqkv"].T).split([hq * d, hkv * d, hkv * d], dim=-1)
            kc, vc = lay["k"][:b], lay["v"][:b]
            kc[:, :, c] = k.view(b, hkv, d)
            vc[:, :, c] = v.view(b, hkv, d)
            o = F.scaled_dot_product_attention(q.view(b, hq, 1, d), kc, vc, enable_gqa=True)
            x = x + o.reshape(b, hq * d) @ lay["wo"].T
            a = F.rms_norm(x, (h,), lay["n2"], s["eps"])
            x = x + (self._moe(a, lay) if "experts" in s else self._mlp(a, lay))
        return F.rms_norm(x, (h,), self.norm, s["eps"]) @ self.lm_head.T

    @staticmethod
    def _mlp(a: torch.Tensor, lay: dict[str, torch.Tensor]) -> torch.Tensor:
        g, u = (a @ lay["wgu"].T).chunk(2, dim=-1)
        return (F.silu(g) * u) @ lay["wdown"].T

    def _moe(self, a: torch.Tensor, lay: dict[str, torch.Tensor]) -> torch.Tensor:
        e, k = self.s["experts"], self.s["top_k"]
        p, idx = (a @ lay["wr"].T).float().softmax(dim=-1).topk(k, dim=-1)
        p = p / p.sum(dim=-1, keepdim=True)
        flat = idx.flatten()
        order = torch.argsort(flat, stable=True)
        token = order // k
        counts = torch.zeros(e, dtype=torch.int32, device=a.device).scatter_add_(
            0, flat, torch.ones_like(flat, dtype=torch.int32))
        offs = counts.cumsum(0, dtype=torch.int32)
        g, u = torch._grouped_mm(a[token], lay["w1"], offs=offs).chunk(2, dim=-1)
        y = torch._grouped_mm((F.silu(g) * u).contiguous(), lay["w2"], offs=offs)
        y = y * p.flatten()[order].unsqueeze(1).to(y.dtype)
        return torch.zeros_like(a).index_add_(0, token, y)


def kernel_count(fn: Any) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA)


def decode_rows(s: dict[str, Any], batches: list[int], context: int, dev: str, timer: Timer,
                out: dict[str, Any], save: Any, compiled: bool = False) -> None:
    log(f"{s['model']}: building {s['layers']} layers, batches up to {max(batches)}, context {context}"
        + (", torch.compile" if compiled else ""))
    m = DecodeModel(s, max(batches), context, dev)
    step = m.step
    if compiled:  # Inductor fuses the element-wise work (norms, SiLU x up, residual adds) as vLLM's compile does
        step = torch.compile(m.step, dynamic=True, fullgraph=True)
    rows = out.setdefault("decode_steps", [])
    for b in batches:
        x = torch.empty(b, s["hidden"], dtype=BF16, device=dev).normal_()
        row: dict[str, Any] = {"model": s["model"], "batch": b, "context": context,
                               "build": "torch.compile (inductor)" if compiled else "eager ops"}
        with torch.inference_mode():
            t = time.time()
            step(x)
            if compiled and b == batches[0]:
                timer.sync()
                row["compile_s"] = time.time() - t
            row["eager_s"] = timer.median_s(lambda: step(x), warmup=3, repeats=15)
            if timer.cuda:
                if b in (batches[0], batches[-1]):
                    try:
                        row["kernels"] = kernel_count(lambda: step(x))
                    except Exception as exc:  # noqa: BLE001 - a probe records what failed and goes on
                        out["errors"].append(f"kernel count {s['model']} B={b}: {exc!r}"[:300])
                try:
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(2):
                            step(x)
                    torch.cuda.current_stream().wait_stream(side)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        step(x)
                    row["graph_s"] = timer.median_s(g.replay, warmup=5, repeats=40)
                    del g
                except Exception as exc:  # noqa: BLE001
                    out["errors"].append(f"graph {s['model']} B={b}: {exc!r}"[:300])
        rows.append(row)
        log(f"  B={b:4d}: eager {row['eager_s'] * 1e3:8.3f} ms, graph "
            f"{row.get('graph_s', float('nan')) * 1e3:8.3f} ms, kernels {row.get('kernels', '-')}")
        save()
    del m, step
    if timer.cuda:
        torch.cuda.empty_cache()


def launch_rows(dev: str, timer: Timer, out: dict[str, Any], n: int = 2000) -> None:
    """Cost of one minimal kernel (an in-place add on one element): replayed inside a CUDA graph of ``n`` such
    kernels, and launched eagerly from Python ``n`` times in a row; seconds per kernel."""
    x = torch.zeros(1, device=dev)

    def chain() -> None:
        for _ in range(n):
            x.add_(1.0)

    row: dict[str, Any] = {"kernels": n, "eager_s_per_kernel": timer.median_s(chain, warmup=2, repeats=7) / n}
    if timer.cuda:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            chain()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            chain()
        row["graph_s_per_kernel"] = timer.median_s(g.replay, warmup=3, repeats=15) / n
    out["launch"] = row
    log(f"launch: eager {row['eager_s_per_kernel'] * 1e6:.2f} us/kernel, graph "
        f"{row.get('graph_s_per_kernel', float('nan')) * 1e6:.2f} us/kernel")


def grouped_rows(tokens: list[int], hidden: int, inter: int, local: int, dev: str, timer: Timer,
                 out: dict[str, Any], save: Any) -> None:
    rows = out.setdefault("grouped_gemm", [])
    w1 = torch.empty(local, hidden, 2 * inter, dtype=BF16, device=dev).normal_(0, hidden ** -0.5)
    w2 = torch.empty(local, inter, hidden, dtype=BF16, device=dev).normal_(0, inter ** -0.5)
    fp8 = getattr(torch, "float8_e4m3fn", None)
    for t in tokens:
        t -= t % local
        offs = torch.arange(1, local + 1, device=dev, dtype=torch.int32) * (t // local)
        x = torch.empty(t, hidden, dtype=BF16, device=dev).normal_()
        a = torch.empty(t, inter, dtype=BF16, device=dev).normal_()
        for name, fn, flops in (
                ("gate_up", lambda: torch._grouped_mm(x, w1, offs=offs), 2.0 * t * hidden * 2 * inter),
                ("down", lambda: torch._grouped_mm(a, w2, offs=offs), 2.0 * t * inter * hidden)):
            sec = timer.median_s(fn, warmup=3, repeats=15)
            rows.append({"dtype": "bf16", "gemm": name, "tokens": t, "hidden": hidden, "moe_inter": inter,
                         "local_experts": local, "s": sec, "tflops": flops / sec / 1e12})
            log(f"  grouped bf16 {name} T={t}: {sec * 1e3:.3f} ms, {flops / sec / 1e12:.0f} TFLOP/s")
        if timer.cuda and fp8 is not None and hasattr(torch, "_scaled_grouped_mm"):
            try:
                xq, aq = x.to(fp8), a.to(fp8)
                # _scaled_grouped_mm wants the second operand column-major: [E, K, N] with stride 1 along K
                w1q = w1.transpose(1, 2).contiguous().to(fp8).transpose(1, 2)
                w2q = w2.transpose(1, 2).contiguous().to(fp8).transpose(1, 2)
                sa = torch.ones(t, device=dev)  # row-wise scales: one per token, one per expert output column
                for name, fn, flops in (
                        ("gate_up", lambda: torch._scaled_grouped_mm(
                            xq, w1q, sa, torch.ones(local, 2 * inter, device=dev),
                            offs=offs, out_dtype=BF16), 2.0 * t * hidden * 2 * inter),
                        ("down", lambda: torch._scaled_grouped_mm(
                            aq, w2q, sa, torch.ones(local, hidden, device=dev),
                            offs=offs, out_dtype=BF16), 2.0 * t * inter * hidden)):
                    sec = timer.median_s(fn, warmup=3, repeats=15)
                    rows.append({"dtype": "fp8_e4m3_rowwise", "gemm": name, "tokens": t, "hidden": hidden,
                                 "moe_inter": inter, "local_experts": local, "s": sec,
                                 "tflops": flops / sec / 1e12})
                    log(f"  grouped fp8 {name} T={t}: {sec * 1e3:.3f} ms, {flops / sec / 1e12:.0f} TFLOP/s")
            except Exception as exc:  # noqa: BLE001
                out["errors"].append(f"fp8 grouped T={t}: {exc!r}"[:300])
                log("  fp8 grouped failed:", repr(exc)[:200])
        save()
        del x, a


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--compile", action="store_true", help="also time both shapes built with torch.compile")
    ap.add_argument("--only-compile", action="store_true", help="time only the torch.compile builds (and launches)")
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no further shape after this many seconds")
    ap.add_argument("--run", action="append", metavar="MODEL:CONTEXT:B1,B2,...",
                    help="instead of the two default shapes: this catalog model at this context and these batches "
                         "(repeatable), and no grouped GEMMs")
    args = ap.parse_args()
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda: no CUDA device visible to PyTorch")
    timer = Timer(dev)
    out: dict[str, Any] = {
        "_what": __doc__.split("\n\n")[0], "errors": [],
        "env": {"torch": torch.__version__, "device": dev, "python": platform.python_version(),
                "name": torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor(),
                "date": time.strftime("%Y-%m-%d", time.gmtime()), "context": args.context}}
    path = Path(args.out)

    def save() -> None:
        path.write_text(json.dumps(out, indent=1) + "\n")

    batches = [1, 16, 128, 512] if args.quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    runs = [(shape(m), args.context, batches) for m in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B")]
    if args.run:
        runs = []
        for spec in args.run:
            model, ctx, bs = spec.rsplit(":", 2)
            runs.append((shape(model), int(ctx), [int(b) for b in bs.split(",")]))
    if dev == "cpu":
        runs = [(tiny(s), 64, [1, 4]) for s, _, _ in runs]
    launch_rows(dev, timer, out)
    builds = [True] if args.only_compile else [False, True] if args.compile else [False]
    for compiled in builds:
        for s, context, bs in runs:
            if time.time() - T0 > args.budget_s:
                out["errors"].append(f"decode {s['model']} compiled={compiled}: skipped, --budget-s spent")
                continue
            try:
                decode_rows(s, bs, context, dev, timer, out, save, compiled)
            except Exception as exc:  # noqa: BLE001 - keep the other shape's rows
                out["errors"].append(f"decode {s['model']} compiled={compiled}: {exc!r}"[:300])
                log("failed:", repr(exc)[:300])
                if dev == "cuda":
                    torch.cuda.empty_cache()
    if args.only_compile or args.run:
        save()
        log(f"wrote {path}; errors: {len(out['errors'])}")
        return
    tokens = [4096, 16384, 65536] if args.quick else [1024, 4096, 16384, 32768, 65536, 131072]
    try:
        if dev == "cpu":
            grouped_rows([64, 256], 256, 128, 4, dev, timer, out, save)
        else:
            grouped_rows(tokens, 7168, 2048, 256 // 8, dev, timer, out, save)
    except Exception as exc:  # noqa: BLE001
        out["errors"].append(f"grouped gemm: {exc!r}"[:300])
        log("failed:", repr(exc)[:300])
    save()
    log(f"wrote {path}; errors: {len(out['errors'])}")


if __name__ == "__main__":
    main()
