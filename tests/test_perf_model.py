"""Performance model: hand-computed FLOP/byte counts, collectives, kernel composition, physics bounds, CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from clusterfit.arch import list_models, load_model
from clusterfit.engines import get_engine
from clusterfit.hardware import load_hardware
from clusterfit.layout import Layout
from clusterfit.perfmodel import compile_step, comm, ops, predict
from clusterfit.perfmodel.kernels import _read_catalog, load_curves
from clusterfit.precision import resolve_precision


@pytest.fixture(scope="module")
def h200():
    return load_hardware().system("h200")


# ------------------------------------------------------------------ hand-computed FLOPs and bytes
def test_llama8b_op_counts():
    m = load_model("meta-llama/Llama-3.1-8B")
    att, ffn = m.layers[0].attention, m.layers[0].ffn
    g = {x.name: x for x in ops.attention_gemms(att, 4096, tp=1) + ops.dense_mlp_gemms(ffn, 4096, tp=1)}
    assert (g["qkv_proj"].n, g["qkv_proj"].k) == ((32 + 2 * 8) * 128, 4096)  # 6144 x 4096
    assert (g["o_proj"].n, g["o_proj"].k) == (4096, 4096)
    assert (g["mlp_gate_up"].n, g["mlp_down"].k) == (2 * 14336, 14336)
    # per layer weights = 6144*4096 + 4096*4096 + 3*4096*14336 = 218,103,808 elements
    assert sum(x.weight_elems() for x in g.values()) == 218_103_808
    # decode attention per cached token, bf16 KV: 8 kv heads * (128+128) * 2 bytes = 4096 B; 32 heads * 512 FLOPs
    flops, nbytes = att.decode_cost(tp=1, kv_bytes_per_elem=2.0)
    assert (flops, nbytes) == (32 * 512.0, 4096.0)
    # TP8: one kv head per rank, 4 query heads
    assert att.decode_cost(tp=8, kv_bytes_per_elem=2.0) == (4 * 512.0, 512.0)


def test_deepseek_v3_mla_moe_counts():
    m = load_model("deepseek-ai/DeepSeek-V3")
    att, ffn = m.layers[10].attention, m.layers[10].ffn
    # absorbed MLA: latent 512 + rope 64 read once; 128 heads * (2*576 + 2*512) FLOPs per cached token
    assert att.decode_cost(tp=1, kv_bytes_per_elem=1.0) == (128 * (2 * 576 + 2 * 512.0), 576.0)
    # MoE on EP8, 1 token: 8 pairs over 8 ranks -> 1 pair per rank; distinct experts 256*(1-(1-8/256)^1) = 8 -> 1 per rank
    flops, wbytes, abytes, pairs, active = ops.moe_flops_bytes(ffn, 7168, ep=8, moe_tp=1, tokens=1.0,
                                                               weight_bytes_per_elem=1.0)
    assert pairs == pytest.approx(1.0) and active == pytest.approx(1.0)
    assert flops == pytest.approx(2 * 3 * 7168 * 2048)
    assert wbytes == pytest.approx(3 * 7168 * 2048)
    # large batch touches every local expert
    assert ops.moe_flops_bytes(ffn, 7168, 8, 1, 4096.0, 1.0)[4] == pytest.approx(32.0, rel=1e-6)
    assert ops.expected_distinct_experts(256, 8, 2) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 2))


def test_expected_max_of_normals_matches_the_order_statistics_tables():
    # E[max of n standard normals]: 1/sqrt(pi) for n = 2 (exact), 1.02938 for 4, 1.42360 for 8, 1.76599 for 16
    # (Harter 1961, Biometrika 48, 151-165, table of expected values of normal order statistics)
    assert ops.expected_max_std_normal(1) == 0.0
    assert ops.expected_max_std_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    for n, table in ((4, 1.02938), (8, 1.42360), (16, 1.76599)):
        assert ops.expected_max_std_normal(n) == pytest.approx(table, abs=1e-5)


def test_busiest_ep_rank_reads_more_experts_at_small_batches():
    # DeepSeek-V3 at EP8, one token: p = 8/256, 32 local experts -> mean 1.0, sd sqrt(32 * p * (1 - p)) = 0.98425,
    # busiest 1.0 + 0.98425 * 1.42360 = 2.4012 (by hand); at 4096 tokens every local expert is touched on every rank
    def busiest(tokens, ep):   # the mean rank's touched experts, as moe_flops_bytes counts them, then the busiest
        return ops.ep_busiest_rank_experts(ops.expected_distinct_experts(256, 8, tokens) / ep, 256 / ep, ep)

    assert busiest(1.0, 8) == pytest.approx(1.0 + math.sqrt(31 / 32) * 1.42360, rel=1e-5)
    assert busiest(4096.0, 8) == pytest.approx(32.0)
    assert busiest(1.0, 1) == pytest.approx(8.0)      # one rank: all it touches
    # against a Monte Carlo draw of uniform top-8 routing over 8 ranks of 32 experts (seeded): the normal
    # approximation stays within 10% of the simulated busiest rank from 1 to 64 tokens
    rng = np.random.default_rng(7)
    for tokens in (1, 8, 64):
        drawn = []
        for _ in range(2000):
            touched = np.zeros(256, bool)
            for _t in range(tokens):
                touched[rng.choice(256, 8, replace=False)] = True
            drawn.append(touched.reshape(8, 32).sum(axis=1).max())
        assert busiest(float(tokens), 8) == pytest.approx(np.mean(drawn), rel=0.10)


def test_expert_parallel_batch_one_decode_waits_for_the_busiest_ranks_weights(h200):
    # one DeepSeek-V3 token: TP8 experts read 8 experts x 1/8 of each per GPU (one expert's bytes), EP8 one whole
    # expert on the mean rank but 2.40 on the busiest (above), which the layer waits for: memory-bound at batch 1,
    # the EP8 expert time is 2.40x the TP8 one (activation bytes are under 0.1% of the weights')
    m = load_model("deepseek-ai/DeepSeek-V3")
    p = resolve_precision(m)
    t = {lay.ep: compile_step(m, h200, lay, p, get_engine("trtllm")).breakdown(0, 0, 1, 1024)["by_op_s"]["moe_experts"]
         for lay in (Layout(tp=8, ep=8), Layout(tp=8))}
    assert t[8] / t[1] == pytest.approx(1.0 + math.sqrt(31 / 32) * 1.42360, rel=0.02)


# ---------------------------------------------------------------------------- communication
def test_allreduce_8gpu_nvlink(h200):
    up, _ = comm.links_for(h200)
    assert up.bw_bytes_per_s == pytest.approx(450e9 * comm.NVLINK_EFF)
    b = 64e6
    ring = 2 * 7 * comm.NVLINK_HOP_S + 2 * 7 / 8 * b / up.bw_bytes_per_s
    two_shot = 2 * comm.NVLINK_HOP_S + 2 * 7 / 8 * b / up.bw_bytes_per_s
    assert comm.all_reduce_s(b, 8, up) == pytest.approx(min(ring, two_shot))
    small = 16e3  # one-shot wins for small messages
    assert comm.all_reduce_s(small, 8, up) == pytest.approx(comm.NVLINK_HOP_S + 7 * small / up.bw_bytes_per_s)


def test_all_to_all_two_nodes(h200):
    up, out = comm.links_for(h200)
    b = 100e6  # each of 16 ranks sends 100 MB spread over 16 ranks; 7/16 stays in the node, 8/16 crosses IB
    expect = comm.NET_HOP_S + max(b * 7 / 16 / up.bw_bytes_per_s, b * 8 / 16 / out.bw_bytes_per_s)
    assert comm.all_to_all_s(b, 16, h200) == pytest.approx(expect)
    assert out.bw_bytes_per_s == pytest.approx(50e9 * comm.NET_EFF)


# --------------------------------------------------------------- composition from measured kernels
def test_h200_decode_step_matches_measured_kernels(h200):
    """A Llama-3.1-8B decode step (batch 64, context 2048, bf16, TP1) against the sum of the measured kernels."""
    k = _read_catalog("h200-kernels.json")  # the measurements benchmarks/fit_kernels.py fits
    gem = {(g["M"], g["K"], g["N"]): g["s"] for g in k["kernels"]["gemm"] if g["dtype"] == "bf16"}
    att = {(a["B"], a["L"]): a["s"] for a in k["kernels"]["attention"]
           if a["kind"] == "decode" and a.get("how") == "enable_gqa"}
    c = load_curves()
    per_layer = gem[(64, 4096, 6144)] + gem[(64, 4096, 28672)] + gem[(64, 14336, 4096)] - 3 * c.gemm["bf16"].t0_s
    per_layer += att[(64, 2048)] - c.attn_decode_t0_s
    # o_proj (4096x4096) was not measured: its bytes at the measured qkv bandwidth
    per_layer += (gem[(64, 4096, 6144)] - c.gemm["bf16"].t0_s) * 4096 / 6144
    measured_sum = 32 * per_layer
    m = load_model("meta-llama/Llama-3.1-8B")
    sm = compile_step(m, h200, Layout(tp=1), resolve_precision(m), get_engine("trtllm"))
    bd = sm.breakdown(0, 0, 64, 64 * 2048)["by_op_s"]
    model_sum = sum(bd[x] for x in ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down", "attention_decode"))
    scale = sm.engine.memory_scale
    assert model_sum * scale == pytest.approx(measured_sum, rel=0.2)


# ---------------------------------------------------------------------------------- physics bounds
@pytest.mark.parametrize("system_id", sorted(load_hardware().systems))
def test_physics_bounds_every_model(system_id):
    """No prediction beats physics, for every catalog model on every catalog system: batch-1 decode reads at
    least the non-expert weights of one GPU at the datasheet bandwidth; prefill does at least 2 x active
    parameters x tokens FLOPs at the GPU's highest dense peak."""
    from clusterfit.layout import valid_tp_sizes

    s = load_hardware().system(system_id)
    for name in list_models():
        m = load_model(name)
        p = resolve_precision(m)
        tp = max(valid_tp_sizes(m, s.gpus_per_node))
        lay = Layout(tp=tp, ep=tp if m.is_moe else 1)
        sm = compile_step(m, s, lay, p, get_engine("vllm"), kv_budget_bytes_per_gpu=1e9)
        dec = float(sm.decode_step_s(1, 1))
        assert dec >= _active_bytes_floor(sm) / s.gpu.mem_bw_bytes_per_s, name
        pre = float(sm.prefill_s(8192))
        flops = 2.0 * m.active_params * 8192 / sm.gpus
        assert pre >= flops / max(s.gpu.dense_flops.values()), name


def _active_bytes_floor(sm):
    """Bytes every batch-1 decode must read: non-expert GEMM weights on one GPU (all layers)."""
    return sum(g.count * g.n * g.k * g.w_bytes_per_elem for g in sm.gemms)


def test_predict_keys_and_monotonic(h200):
    m = load_model("meta-llama/Llama-3.1-8B")
    p = resolve_precision(m)
    out = predict(m, h200, Layout(tp=1), p, get_engine("vllm"), 1024, 512, concurrency=8)
    for k in ("ttft_s", "tpot_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "tokens_per_s_per_user",
              "batch", "decode_step_s", "prefill_s", "breakdown"):
        assert k in out
    hi = predict(m, h200, Layout(tp=1), p, get_engine("vllm"), 1024, 512, concurrency=64)
    assert hi["output_tokens_per_s"] > out["output_tokens_per_s"] and hi["tpot_s"] > out["tpot_s"]
    sm = compile_step(m, h200, Layout(tp=1), p, get_engine("vllm"))
    b = np.array([1, 2, 4, 8, 16])
    steps = sm.step_s(0 * b, 0 * b, b, b * 1000.0)
    assert steps.shape == (5,) and np.all(np.diff(steps) >= 0)


def _cli(*args):
    return subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", *args],
                          capture_output=True, text=True)


def test_cli_json_and_errors():
    r = _cli("perf", "meta-llama/Llama-3.1-8B", "--system", "h200", "--tp", "1", "--isl", "512", "--osl", "128",
             "--batch", "8", "--context", "600", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["batch"] == 8 and d["tpot_s"] > 0 and "by_op_s" in d["breakdown"]
    assert _cli("perf", "meta-llama/Llama-3.1-8B", "--system", "h200", "--isl", "512", "--osl", "128").returncode == 2
    assert _cli("perf", "no-such-model", "--system", "h200", "--isl", "1", "--osl", "1",
                "--concurrency", "1").returncode == 2
    assert _cli("perf", "meta-llama/Llama-3.1-8B", "--system", "h200", "--isl", "512", "--osl", "128",
                "--concurrency", "4", "--engine", "nope").returncode == 2


@pytest.mark.parametrize("pp", [1, 2, 4])
def test_step_model_kv_capacity_matches_memory_fit(pp):
    """The step model's sequences per replica agree with the memory model's, pipeline stages included
    (each stage holds 1/pp of the layers, so pp stages hold pp x the sequences of one stage's budget)."""
    from clusterfit.memory import fit

    m = load_model("meta-llama/Llama-3.1-70B")
    s = load_hardware().system("h100")
    p = resolve_precision(m, "fp8")
    lay = Layout(tp=8 // pp if pp < 8 else 1, pp=pp)
    nodes = 1
    r = fit(m, s, p, lay, nodes, get_engine("vllm"), context=32768)
    sm = compile_step(m, s, lay, p, get_engine("vllm"))
    assert float(sm.max_sequences(32768)) == pytest.approx(r.max_sequences, rel=0.02, abs=1)


def test_w4a16_experts_stream_their_weights_at_small_batch_and_cap_at_large():
    """gpt-oss-120b (mxfp4 experts) on one A100, which has no fp4 tensor cores: the experts run as W4A16 (4-bit
    weights unpacked to bf16 in the GEMM's main loop). At batch 4 the 16 routed (token, expert) pairs of a layer hit
    ~15.3 distinct experts and the layer time is their 4.25-bit weights streamed at the measured MoE bandwidth
    (hand-computed below); the fp8 kernels' fill cost (m0 ~185 rows) once put a compute floor at 4x that. At 8,192
    tokens (256 rows per expert) the layer is bound by the W4A16 cap of the kernel vLLM runs below compute capability
    9.0 (Marlin): FLOPs / (bf16 peak x WEIGHT_ONLY_MARLIN_MAX_EFF)."""
    from clusterfit.perfmodel import step as st

    system = load_hardware().system("a100")
    m = load_model("openai/gpt-oss-120b")
    sm = compile_step(m, system, Layout(tp=1), resolve_precision(m), get_engine("vllm"))
    (g,) = sm.moe
    assert g.eff_cap == st.WEIGHT_ONLY_MARLIN_MAX_EFF and g.m0 == st.WEIGHT_ONLY_M0 and g.compute_dtype == "bf16"
    c, eng = sm.curves, sm.engine
    hidden, inter, layers, experts, k = 2880, 2880, 36, 128, 4
    elems = 3 * hidden * inter                                         # gate, up, down of one expert
    distinct = experts * (1 - (1 - k / experts) ** 4)                  # each of 4 tokens picks 4 distinct experts
    assert distinct == pytest.approx(15.27, abs=0.01)
    wbytes = distinct * elems * 4.25 / 8
    abytes = 4 * k * (hidden * 2 + 3 * inter) * 2.0                    # activations in and out, bf16
    bw = system.gpu.mem_bw_bytes_per_s * c.moe_mem_eff * eng.memory_scale
    got = sm.breakdown(0, 0, 4, 4 * 1024)["by_op_s"]["moe_experts"]
    assert got == pytest.approx(layers * (wbytes + abytes) / bw, rel=1e-6)
    # large M: bound by the dequantising main loop at WEIGHT_ONLY_MARLIN_MAX_EFF of the bf16 peak
    tokens = 8192
    flops = 2.0 * tokens * k * elems
    peak = system.gpu.peak_flops("bf16")
    got = sm.breakdown(tokens, tokens * tokens / 2, 0, 0)["by_op_s"]["moe_experts"]
    assert got == pytest.approx(layers * flops / (peak * st.WEIGHT_ONLY_MARLIN_MAX_EFF), rel=1e-6)


@pytest.mark.parametrize("gpu, kernel", [("a100", "marlin"), ("A100-PCIE-80GB", "marlin"), ("l40s", "marlin"),
                                         ("h100", "triton"), ("h200", "triton"), ("gh200_96gb", "triton"),
                                         ("mi300x", "triton")])
def test_weight_only_kernel_follows_vllms_backend_choice(gpu, kernel):
    """vLLM's get_mxfp4_backend runs mxfp4 experts through Marlin below compute capability 9.0 (A100 8.0, L40S 8.9
    in NVIDIA's table) and through Triton matmul_ogs on Hopper (9.0) and ROCm; fp8 experts through Marlin where the
    GPU lacks fp8 tensor cores (quantization/fp8.py); the ceiling follows the kernel."""
    from clusterfit.perfmodel import step as st
    from clusterfit.precision import weight_format

    g, mxfp4, int4 = load_hardware().gpu(gpu), weight_format("mxfp4"), weight_format("int4")
    assert st.weight_only_kernel(g, mxfp4) == kernel
    cap = st.weight_only_cap(g, mxfp4)
    assert cap == (st.WEIGHT_ONLY_MARLIN_MAX_EFF if kernel == "marlin" else st.WEIGHT_ONLY_MAX_EFF)
    # GPTQ / AWQ int4 experts: Marlin MoE on every NVIDIA GPU, Blackwell included (bf16 math, no fp4 involved)
    assert st.weight_only_kernel(g, int4) == ("triton" if g.vendor != "nvidia" else "marlin")
    # fp8 experts: weight-only Marlin (W8A16) where the GPU has no fp8 tensor cores (A100), native fp8 elsewhere
    fp8 = weight_format("fp8")
    assert st.weight_only_cap(g, fp8) == (st.WEIGHT_ONLY_MARLIN_MAX_EFF if not g.dense_flops.get("fp8")
                                          else float("inf"))
    b200 = load_hardware().gpu("b200")
    assert st.weight_only_cap(b200, mxfp4) == float("inf")  # fp4 tensor cores: no dequantisation
    assert st.weight_only_cap(b200, int4) == st.WEIGHT_ONLY_MARLIN_MAX_EFF


def test_delta_rule_decode_streams_its_state_at_the_measured_kernel_bandwidth():
    """Qwen3.5-9B on one H100: 24 of its 32 layers are Gated DeltaNet. Each decode step reads and writes every
    sequence's recurrent state (kept in fp32: 32 value heads x 128 x 128, plus the convolution's last 3 inputs of
    2 x 16 x 128 + 32 x 128 channels), i.e. 24 x 2 x 4 B x (524,288 + 24,576) = 105,381,888 B per sequence, moved at
    DELTA_RULE_STATE_MEM_EFF (0.53, vLLM PR #31722's H200 kernel timings) of the 3.35 TB/s datasheet bandwidth."""
    from clusterfit.perfmodel import step as st

    system = load_hardware().system("h100")
    m = load_model("Qwen/Qwen3.5-9B")
    sm = compile_step(m, system, Layout(tp=1), resolve_precision(m), get_engine("vllm"))
    per_seq = 24 * 2 * 4 * (32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3)
    assert per_seq == 105_381_888
    assert sm.linear.delta_state_bytes_per_seq == per_seq and sm.linear.state_bytes_per_seq == 0
    got = sm.breakdown(0, 0, 512, 512 * 700)["by_op_s"]["linear_attention"]
    bw = 3.35e12 * st.DELTA_RULE_STATE_MEM_EFF * sm.engine.memory_scale
    assert got == pytest.approx(512 * per_seq / bw, rel=1e-9)
    # Mamba-2 (Nemotron-H) state goes through the softmax-decode bandwidth, not the delta-rule kernel's
    nem = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    sn = compile_step(nem, system, Layout(tp=1), resolve_precision(nem), get_engine("vllm"))
    assert sn.linear.delta_state_bytes_per_seq == 0 and sn.linear.state_bytes_per_seq > 0


def test_front_end_latency_adds_to_ttft_only():
    """request_latency_s (the engine's front end: HTTP, tokenisation, the hand-over to the engine process) is added
    to perf's TTFT once; the steps, TPOT and throughput do not change."""
    from dataclasses import replace

    m = load_model("meta-llama/Llama-3.1-8B")
    system = load_hardware().system("h200")
    base = get_engine("vllm")
    out = []
    for front in (0.0, 0.03):
        eng = replace(base, request_latency_s=front)
        sm = compile_step(m, system, Layout(tp=1), resolve_precision(m), eng)
        out.append(predict(None, None, None, None, isl=1000, osl=200, concurrency=8, step_model=sm))
    assert out[1]["ttft_s"] - out[0]["ttft_s"] == pytest.approx(0.03, rel=1e-9)
    for key in ("tpot_s", "output_tokens_per_s", "decode_step_s"):
        assert out[1][key] == out[0][key]
    with pytest.raises(Exception, match="request_latency_s"):
        replace(base, request_latency_s=-0.001)


@pytest.mark.parametrize("model, system, layout", [
    ("deepseek-v3", "h100", ("--tp", "8", "--pp", "2", "--ep", "8")),    # 61 layers over 2 stages: 31 + 30
    ("llama-3.1-70b", "h100", ("--tp", "2", "--pp", "3")),                 # 80 over 3: 27 + 27 + 26
    ("llama-3.1-8b", "h200", ("--tp", "8",)),
    ("gpt-oss-120b", "h200", ("--tp", "2", "--pp", "4")),                  # windows: the stage with most full layers
    ("deepseek-v3.2", "h200", ("--tp", "8", "--ep", "8")),                 # indexer keys: fp8 + an fp32 scale
])
def test_fit_and_perf_agree_on_the_kv_cache_of_a_layout(run_json, model, system, layout):
    """The pipeline stage whose GPUs hold the fewest KV tokens binds the cache; perf sized it by the average (1/pp),
    so it took 104 sequences where fit said 102 (DeepSeek-V3, TP8 PP2), and showed one token more per rank by
    rounding where fit floors. DeepSeek-V3.2's indexer keys: perf left out their 4-byte scale (586,659 tokens
    against fit's 584,831 on one H200 node)."""
    f = run_json("fit", model, "--system", system, *layout, "--context", "8192")["results"][0]
    p = run_json("perf", model, "--system", system, *layout, "--isl", "4096", "--osl", "4096", "--batch", "1",
                 "--context", "8192")
    assert p["kv_capacity_tokens"] == f["max_kv_tokens"]
    top = run_json("perf", model, "--system", system, *layout, "--isl", "4096", "--osl", "4096", "--batch",
                   str(f["max_sequences"]), "--context", "8192")
    assert top["batch"] == f["max_sequences"]


def test_the_default_layout_is_the_fewest_gpus_fit_finds(run_json):
    """Llama-3.1-405B on 8x L40S nodes: fit needs 3 nodes (TP8 PP3); perf's default layout tried 1, 2, 4 ... nodes
    and took 4 (TP8 PP4), against its help text ("the fewest GPUs that fit")."""
    f = run_json("fit", "llama-3.1-405b", "--system", "l40s")["results"][0]
    p = run_json("perf", "llama-3.1-405b", "--system", "l40s", "--isl", "50", "--osl", "5", "--concurrency", "2")
    assert f["gpus"] == p["gpus"] == 24 and p["layout"] == f["layout"]
