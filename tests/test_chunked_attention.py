"""Chunked attention (Llama-4): TensorRT-LLM masks context tokens only, so its KV cache keeps the whole context."""

from clusterfit.arch import load_model
from clusterfit.engines import get_engine
from clusterfit.hardware import load_hardware
from clusterfit.layout import Layout
from clusterfit.memory import kv_bytes_per_sequence
from clusterfit.perfmodel import compile_step
from clusterfit.precision import resolve_precision

MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"


def test_chunked_layers_are_flagged():
    m = load_model(MAVERICK)
    chunked = [L.attention for L in m.layers if L.attention.chunked]
    assert len(chunked) == 36 and all(a.window == 8192 for a in chunked)


def test_trtllm_keeps_full_kv_for_chunked_layers_vllm_does_not():
    m = load_model(MAVERICK)
    system = load_hardware().system("H200-SXM-141GB")
    prec = resolve_precision(m, "fp8", None, "fp8")
    lay = Layout(tp=8, pp=1, ep=1, dp=1)
    trt = compile_step(m, system, lay, prec, get_engine("trtllm"), kv_budget_bytes_per_gpu=50e9)
    vll = compile_step(m, system, lay, prec, get_engine("vllm"), kv_budget_bytes_per_gpu=50e9)
    ctx = 22000
    assert abs(float(trt.kv_bytes_per_sequence(ctx)) - trt.kv_bytes_per_token_per_gpu * ctx) < 1.0
    assert float(vll.kv_bytes_per_sequence(ctx)) < 0.6 * float(trt.kv_bytes_per_sequence(ctx))
    # memory.fit's per-sequence count follows the same rule
    full = kv_bytes_per_sequence(m, prec, lay, ctx, 1, chunked_full=True)
    capped = kv_bytes_per_sequence(m, prec, lay, ctx, 1)
    assert abs(full - trt.kv_bytes_per_token_per_gpu * ctx) < 1.0 and capped < 0.6 * full
