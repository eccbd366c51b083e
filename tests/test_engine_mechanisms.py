"""The engine mechanisms of the step model (issue 8/11 point 2, issue 9/12 point 3), each checked against values
computed by hand from its definition in clusterfit/engines.py:

- CUDA-graph replay: a decode-only step of at most ``cuda_graph_max_bs`` sequences per attention rank pays
  ``graph_kernel_overhead_s`` per kernel; prefill / mixed steps and larger batches pay ``kernel_overhead_s``.
- async scheduling / overlap schedulers: the host's work (step_overhead_s + seq_overhead_s x sequences) overlaps the
  GPU's, so a step costs max(GPU, host) instead of GPU + host.
- per-device serving defaults: vLLM's max_num_seqs / max_num_batched_tokens are 1024 / 8192 on devices of at least
  70 GiB that are not A100s and 256 / 2048 elsewhere (EngineArgs.get_batch_defaults); the user's settings win.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from clusterfit.arch import load_model
from clusterfit.compose import Catalog, compile_replica
from clusterfit.engines import EngineSettings, get_engine
from clusterfit.errors import ClusterfitError
from clusterfit.layout import Layout
from clusterfit.perfmodel.serving import first_token_s, max_throughput_batch, predict
from clusterfit.planning.capacity import aggregated_curve
from clusterfit.planning.workload import SLO, Load, Workload
from clusterfit.precision import resolve_precision

#: Kernels of one Llama-3.1-8B step in the step model, by hand: per layer 4 GEMMs (QKV, O, gate+up, down) + attention,
#: 2 norms and the activation / rotary = 8, over 32 layers (tests/test_engine_settings.py N_KERNELS).
N_KERNELS = 32 * (4 + 4)


def _step(engine, system="h200", layout=Layout(tp=1), model_id="meta-llama/Llama-3.1-8B", precision="bf16"):
    cat = Catalog.load()
    sysm = cat.system(system)
    model = load_model(model_id)
    prec = resolve_precision(model, precision)
    return compile_replica(model, sysm, prec, layout, engine).step


def _engine(**changes):
    return dataclasses.replace(get_engine("vllm"), **changes)


def test_graph_replayed_decode_steps_pay_the_graph_per_kernel_cost():
    eng = _engine(kernel_overhead_s=20e-6, graph_kernel_overhead_s=2e-6, cuda_graph_max_bs=64,
                  async_scheduling=False, step_overhead_s=0.0, seq_overhead_s=0.0)
    graphs = _step(eng)
    flat = _step(dataclasses.replace(eng, graph_kernel_overhead_s=20e-6))
    # a decode-only batch of 64 (at the capture size) replays the graph: 256 kernels x (20 - 2) us cheaper
    d64 = flat.decode_step_s(64, 1024) - graphs.decode_step_s(64, 1024)
    assert d64 == pytest.approx(N_KERNELS * 18e-6, rel=1e-9)
    # 65 sequences are past the capture size, and any step with prefill tokens runs without the graph
    assert flat.decode_step_s(65, 1024) == pytest.approx(graphs.decode_step_s(65, 1024), rel=1e-12)
    assert flat.step_s(512, 512 * 256, 8, 8 * 1024) == pytest.approx(graphs.step_s(512, 512 * 256, 8, 8 * 1024),
                                                                      rel=1e-12)
    # --enforce-eager: no step replays a graph
    eager = dataclasses.replace(eng, cuda_graphs=False)
    assert not np.any(_step(eager)._graph_replayed(0.0, 1.0))


def test_unset_graph_cost_means_one_per_kernel_cost():
    eng = _engine(kernel_overhead_s=7e-6, graph_kernel_overhead_s=None)
    assert eng.graph_kernel_s == 7e-6


def test_async_scheduling_hides_host_work_behind_the_gpu():
    sync = _engine(async_scheduling=False, step_overhead_s=1e-3, seq_overhead_s=0.0)
    gpu_only = _step(dataclasses.replace(sync, step_overhead_s=0.0)).decode_step_s(1, 1024)
    assert gpu_only > 1e-3       # Llama-3.1-8B bf16 streams 16 GB per step: above 3.35 ms on an H200
    # synchronous: GPU + host; async with host shorter than the GPU: the GPU alone
    assert _step(sync).decode_step_s(1, 1024) == pytest.approx(gpu_only + 1e-3, rel=1e-12)
    overlapped = dataclasses.replace(sync, async_scheduling=True)
    assert _step(overlapped).decode_step_s(1, 1024) == pytest.approx(gpu_only, rel=1e-12)
    # async with the host longer than the GPU: the host bounds the step
    slow_host = dataclasses.replace(overlapped, step_overhead_s=0.5)
    assert _step(slow_host).decode_step_s(1, 1024) == pytest.approx(0.5, rel=1e-12)


def test_llama_8b_batch1_decode_step_on_one_h200_is_between_the_weight_floor_and_6_ms():
    """Issue target: Llama-3.1-8B bf16, one H200, batch 1, context 1024, default engine (vLLM): decode step between
    the weight-streaming floor and 6.0 ms. Floor by hand: 8.03e9 parameters x 2 bytes / 4.8e12 B/s = 3.35 ms."""
    floor = 8.03e9 * 2 / 4.8e12
    assert floor == pytest.approx(3.35e-3, abs=0.01e-3)
    cat = Catalog.load()
    sysm = cat.system("h200")
    model = load_model("meta-llama/Llama-3.1-8B")
    step = compile_replica(model, sysm, resolve_precision(model, "bf16"), Layout(tp=1),
                           cat.engine("vllm", sysm)).step
    assert floor < float(step.decode_step_s(1, 1024)) < 6.0e-3


@pytest.mark.parametrize("system, seqs, tokens", [("h200", 1024, 8192), ("h100", 1024, 8192),
                                                   ("b200", 1024, 8192), ("a100_sxm_80gb", 256, 2048),
                                                   ("l40s", 256, 2048)])
def test_vllm_serving_defaults_follow_the_device(system, seqs, tokens):
    cat = Catalog.load()
    eng = cat.engine("vllm", cat.system(system))
    assert (eng.max_num_seqs, eng.max_num_batched_tokens) == (seqs, tokens)


def test_the_users_settings_win_over_the_device_defaults():
    cat = Catalog.load(settings=EngineSettings(max_num_seqs=64, max_num_batched_tokens=4096))
    eng = cat.engine("vllm", cat.system("a100_sxm_80gb"))
    assert (eng.max_num_seqs, eng.max_num_batched_tokens) == (64, 4096)
    # and an async_scheduling setting reaches the engine
    cat = Catalog.load(settings=EngineSettings(async_scheduling=False))
    assert cat.engine("vllm", cat.system("h200")).async_scheduling is False


def test_no_async_scheduling_option_adds_the_host_time_back(run_json):
    """perf --no-async-scheduling (vLLM releases up to v0.11): the batch-1 decode step pays GPU + host instead of
    max(GPU, host); the difference is the host time, step_overhead_s + seq_overhead_s x 1 sequence, when the host
    is the shorter of the two."""
    args = ("perf", "meta-llama/Llama-3.1-8B", "--system", "h200", "--tp", "1", "--isl", "1024", "--osl", "128",
            "--batch", "1", "--context", "1024")
    on, off = run_json(*args), run_json(*args, "--no-async-scheduling")
    eng = get_engine("vllm")
    host = eng.step_overhead_s + eng.seq_overhead_s
    assert on["engine_settings"]["async_scheduling"] is True and off["engine_settings"]["given"] == ["async_scheduling"]
    assert host < on["decode_step_s"]
    assert off["decode_step_s"] - on["decode_step_s"] == pytest.approx(host, rel=1e-9)


def test_fp4_expert_gemms_saturate_at_the_fitted_cap_of_the_bf16_curve():
    """moe_fp4_efficiency_cap (TensorRT-LLM, fitted per GPU family with fp4 tensor cores) caps the efficiency of the
    MoE expert GEMMs that run in fp4; below the cap they follow the grouped-GEMM curve on the fp4 peak. On a B200,
    Qwen3-30B-A3B nvfp4: a 65,536-token prefill step's experts are compute-bound at the cap and at half of it, so
    halving the cap doubles their time exactly; a 1,024-sequence decode step's experts sit below the cap, which leaves
    them unchanged; the H200 (no fp4 math) has no cap (1)."""
    from clusterfit.compose import build_replica

    catalog = Catalog.load()
    sm = build_replica(catalog, "Qwen/Qwen3-30B-A3B", "b200", precision="nvfp4", engine="trtllm", tp=1).step
    cap = sm.engine.moe_fp4_efficiency_cap
    assert 0.05 <= cap < 1.0 and [g.compute_dtype for g in sm.moe] == ["fp4"]

    def with_cap(c):
        return dataclasses.replace(sm, engine=dataclasses.replace(sm.engine, moe_fp4_efficiency_cap=c))

    def experts(m, p, d):
        return m.breakdown(p, p * p / 2, d, d * 1024)["by_op_s"]["moe_experts"]

    p = 65536.0
    assert experts(with_cap(cap / 2), p, 0) == pytest.approx(2 * experts(sm, p, 0), rel=1e-9)
    assert experts(sm, p, 0) > experts(with_cap(1.0), p, 0)
    # a 1,024-sequence decode step: 1,024 x 8 / 128 = 64 tokens per expert, below the cap (under the former
    # multiplier on the whole curve these experts took 1.46x their uncapped time)
    assert experts(sm, 0, 1024) == experts(with_cap(1.0), 0, 1024)
    h200 = build_replica(catalog, "Qwen/Qwen3-30B-A3B", "h200", precision="nvfp4", engine="trtllm", tp=1).step
    assert h200.engine.moe_fp4_efficiency_cap == 1.0 and "fp4" not in [g.compute_dtype for g in h200.moe]


#: Qwen3.5-9B's recurrent state per sequence at TP 1, by hand from its config.json: 24 of its 32 layers are Gated
#: DeltaNet layers (full_attention_interval 4), each with 32 value heads of a 128 x 128 state in fp32 (4 bytes) plus
#: the short convolution's last 3 inputs of 2 x 16 x 128 + 32 x 128 channels in bf16 (2 bytes): 51,511,296 bytes.
QWEN35_9B_STATE_BYTES = 24 * (32 * 128 * 128 * 4 + (2 * 16 * 128 + 32 * 128) * 3 * 2)
#: Its KV per token at TP 1: 8 full-attention layers x 4 KV heads x 256 head dim x (K + V) x 2 bytes (bf16).
QWEN35_9B_KV_BYTES_PER_TOKEN = 8 * 4 * 256 * 2 * 2


def _qwen35_9b(engine, budget):
    cat = Catalog.load()
    model = load_model("Qwen/Qwen3.5-9B")
    return compile_replica(model, cat.system("h100"), resolve_precision(model, "bf16"), Layout(tp=1), engine,
                           kv_budget_bytes_per_gpu=budget).step


def test_sglang_splits_a_hybrid_models_memory_between_states_and_kv_and_caps_the_running_requests():
    """SGLang (mamba_full_memory_ratio 0.9): the states get floor(B x 0.9 / 1.9 / state) slots, the KV pool the rest,
    and at most slots // 3 requests run (model_runner_kv_cache_mixin.py). With B = 40 GiB: 40 x 2^30 x 0.9 / 1.9 /
    51,511,296 = 394.95 -> 394 slots, 131 running requests, (40 GiB - 394 x 51,511,296) / 32 KiB = 691,352 KV
    tokens."""
    budget = 40 * 2**30
    sm = _qwen35_9b(get_engine("sglang"), budget)
    slots = int(budget * 0.9 / 1.9 // QWEN35_9B_STATE_BYTES)
    assert slots == 394
    assert sm.max_num_seqs == slots // 3 == 131
    assert sm.kv_capacity_tokens == pytest.approx((budget - slots * QWEN35_9B_STATE_BYTES)
                                                  / QWEN35_9B_KV_BYTES_PER_TOKEN, rel=1e-9)
    assert sm.kv_capacity_tokens == pytest.approx(691_352, abs=0.1)
    # the states live in their own pool: a sequence's KV bytes are its tokens' only
    assert sm.kv_bytes_per_sequence(1000) == pytest.approx(1000 * QWEN35_9B_KV_BYTES_PER_TOKEN, rel=1e-9)
    # a user's max_num_seqs above the state pool's cap is cut to it; one below it stands
    assert _qwen35_9b(get_engine("sglang").with_settings(max_num_seqs=512), budget).max_num_seqs == 131
    assert _qwen35_9b(get_engine("sglang").with_settings(max_num_seqs=64), budget).max_num_seqs == 64


def test_vllm_keeps_one_pool_for_a_hybrid_models_states_and_kv():
    """vLLM (no mamba_full_memory_ratio): the whole budget is one pool, each sequence holding its state in it."""
    budget = 40 * 2**30
    sm = _qwen35_9b(get_engine("vllm"), budget)
    assert sm.kv_capacity_tokens == pytest.approx(budget / QWEN35_9B_KV_BYTES_PER_TOKEN, rel=1e-9)
    assert sm.kv_bytes_per_sequence(1000) == pytest.approx(QWEN35_9B_STATE_BYTES
                                                           + 1000 * QWEN35_9B_KV_BYTES_PER_TOKEN, rel=1e-9)
    assert sm.max_num_seqs == get_engine("vllm").for_device(Catalog.load().system("h100").gpu).max_num_seqs


def test_the_memory_fit_reports_the_state_pool_split():
    """memory.fit (the `fit` command) applies the same split to the engine's KV budget B: KV tokens from B minus the
    state slots, sequences capped at slots // 3 under SGLang; vLLM's one pool holds state + tokens per sequence."""
    from clusterfit.memory import fit, recurrent_state_bytes_per_sequence

    cat = Catalog.load()
    model, system = load_model("Qwen/Qwen3.5-9B"), cat.system("h100")
    prec = resolve_precision(model, "bf16")
    assert recurrent_state_bytes_per_sequence(model, Layout(tp=1)) == QWEN35_9B_STATE_BYTES
    s = fit(model, system, prec, Layout(tp=1), 1, get_engine("sglang"), context=4096, block_size=1)
    b = s.kv_budget_bytes_per_gpu
    slots = int(b * 0.9 / 1.9 // QWEN35_9B_STATE_BYTES)
    assert s.max_kv_tokens == int((b - slots * QWEN35_9B_STATE_BYTES) // QWEN35_9B_KV_BYTES_PER_TOKEN)
    assert s.max_sequences == min(slots // 3, int((b - slots * QWEN35_9B_STATE_BYTES)
                                                 // (4096 * QWEN35_9B_KV_BYTES_PER_TOKEN)))
    assert any("pool of their own" in n for n in s.notes)
    v = fit(model, system, prec, Layout(tp=1), 1, get_engine("vllm"), context=4096, block_size=1)
    assert v.max_sequences == int(v.kv_budget_bytes_per_gpu // (QWEN35_9B_STATE_BYTES
                                                                + 4096 * QWEN35_9B_KV_BYTES_PER_TOKEN))
    # a budget whose state share holds fewer than 3 states runs nothing, and says why (SGLang refuses to start)
    tight = fit(model, system, prec, Layout(tp=1), 1, get_engine("sglang").with_settings(gpu_memory_utilization=0.222),
                context=4096)
    assert 0 < tight.kv_budget_bytes_per_gpu * 0.9 / 1.9 < 3 * QWEN35_9B_STATE_BYTES
    assert not tight.fits and "recurrent-state pool holds" in tight.reason
    # the step model the planner and simulator run admits on the same numbers
    sm = _qwen35_9b(get_engine("sglang"), b)
    assert sm.max_num_seqs == slots // 3
    assert sm.kv_capacity_tokens == pytest.approx((b - slots * QWEN35_9B_STATE_BYTES) / QWEN35_9B_KV_BYTES_PER_TOKEN)


@pytest.mark.parametrize("engine, field, value", [
    ("sglang", "mamba_full_memory_ratio", 0.0), ("sglang", "mamba_full_memory_ratio", -1.0),
    ("sglang", "mamba_states_per_running_request", 0), ("sglang", "mamba_states_per_running_request", 2.5),
    ("trtllm", "pp_hop_overhead_s", -1e-3), ("trtllm", "pp_hop_seq_overhead_s", -1e-3),
    ("trtllm", "attention_dp_seq_overhead_s", -1e-6), ("trtllm", "attention_dp_seq_overhead_s", 2.0),
    ("vllm", "sink_attention_prefill_scale", 0.0), ("vllm", "sink_attention_prefill_scale", 1.5)])
def test_engine_settings_out_of_range_are_refused(engine, field, value):
    with pytest.raises(ClusterfitError, match=field):
        dataclasses.replace(get_engine(engine), **{field: value})


@pytest.mark.parametrize("tp, dp, ep, host_per_seq_s", [
    (1, 4, 4, 8e-6 / 4 + 3e-6),   # each of 4 ranks schedules its own sequences; rank 0 files all responses
    (4, 1, 4, 8e-6),              # no attention DP: one host, no gather
    (1, 2, 2, 8e-6 / 2 + 3e-6)])
def test_attention_dp_host_cost_has_a_per_rank_and_a_replica_wide_part(tp, dp, ep, host_per_seq_s):
    """StepModel.host_terms: seq_overhead_s / dp per running sequence of the replica, plus
    attention_dp_seq_overhead_s under attention DP (TensorRT-LLM's _enqueue_responses gathers every rank's responses
    to rank 0). 256 decoding sequences of Qwen3-30B-A3B, host time added to the GPU's (no overlap)."""
    eng = dataclasses.replace(get_engine("trtllm"), step_overhead_s=0.0, seq_overhead_s=8e-6,
                              attention_dp_seq_overhead_s=3e-6, async_scheduling=False)
    free = dataclasses.replace(eng, seq_overhead_s=0.0, attention_dp_seq_overhead_s=0.0)
    layout = Layout(tp=tp, dp=dp, ep=ep)
    with_host, without = (_step(e, layout=layout, model_id="Qwen/Qwen3-30B-A3B") for e in (eng, free))
    d = float(with_host.decode_step_s(256, 1024) - without.decode_step_s(256, 1024))
    assert d == pytest.approx(256 * host_per_seq_s, rel=1e-9)


def _pp_step(engine, pp: int):
    return _step(engine, layout=Layout(pp=pp))


def test_tensorrt_llm_keeps_pp_micro_batches_of_max_batch_size_in_flight():
    # PyTorchModelEngine.get_max_num_sequences = pp x max_batch_size (engines.py max_num_seqs_per_microbatch)
    trt = get_engine("trtllm").with_settings(max_num_seqs=16)
    assert _pp_step(trt, 2).max_num_seqs == 32 and _pp_step(trt, 4).max_num_seqs == 64
    assert _pp_step(trt, 1).max_num_seqs == 16
    # vLLM's max_num_seqs is one cap for the whole pipeline
    assert _pp_step(get_engine("vllm").with_settings(max_num_seqs=16), 2).max_num_seqs == 16
    # the max-throughput batch takes the larger cap where the KV cache holds more (8B on 2 H200s: ~hundreds)
    sm = _pp_step(trt, 2)
    assert float(sm.kv_admitted_sequences(1000, 1000)) > 32
    assert float(max_throughput_batch(sm, 1000, 1000)) == 32


@pytest.mark.parametrize("pp", [2, 4])
def test_pp_token_return_adds_one_hop_per_stage_boundary(pp):
    eng = dataclasses.replace(get_engine("trtllm"), pp_hop_overhead_s=5e-3, pp_hop_seq_overhead_s=20e-6)
    hops = _pp_step(eng, pp)
    none = _pp_step(dataclasses.replace(eng, pp_hop_overhead_s=0.0, pp_hop_seq_overhead_s=0.0), pp)
    # 64 decoding sequences in pp micro-batches of 64 / pp: (pp - 1) x (5 ms + 20 us x 64 / pp) per iteration
    d = float(hops.decode_step_s(64, 1024) - none.decode_step_s(64, 1024))
    assert d == pytest.approx((pp - 1) * (5e-3 + 20e-6 * 64 / pp), rel=1e-9)
    # one GPU has no hop
    one = _pp_step(eng, 1)
    assert float(one.decode_step_s(64, 1024)) == pytest.approx(
        float(_pp_step(dataclasses.replace(eng, pp_hop_overhead_s=0.0, pp_hop_seq_overhead_s=0.0), 1)
              .decode_step_s(64, 1024)), rel=1e-12)


def test_async_scheduling_adds_the_step_already_chosen_to_ttft():
    """Under async scheduling a request arriving among b - 1 running sequences first waits for the decode step the
    engine already chose (engines.schedules_ahead): perf's TTFT is first_token_s + decode_step_s(b - 1, context)
    (+ the front end, 0 here); alone (concurrency 1), synchronous, or under multi-step scheduling nothing is added.
    The planner adds that step times 1 - exp(-B), the chance an arrival finds a sequence running, to the mean TTFT
    and leaves TPOT alone (the same step model with num_scheduler_steps 2, whose steps are the same, as reference)."""
    isl, osl = 1024, 256
    ctx = isl + osl / 2
    asy = _step(_engine(request_latency_s=0.0))
    for c in (1, 16):
        got = predict(None, None, None, None, step_model=asy, isl=isl, osl=osl, concurrency=c)["ttft_s"]
        ahead = float(asy.decode_step_s(c - 1, ctx)) if c > 1 else 0.0
        assert got == pytest.approx(first_token_s(asy, isl, c - 1, ctx) + ahead, rel=1e-12)
        assert c == 1 or ahead > 1e-3
    for eng in (_engine(request_latency_s=0.0, async_scheduling=False),
                _engine(request_latency_s=0.0, num_scheduler_steps=2)):
        sm = _step(eng)
        got = predict(None, None, None, None, step_model=sm, isl=isl, osl=osl, concurrency=16)["ttft_s"]
        assert got == pytest.approx(first_token_s(sm, isl, 15, ctx), rel=1e-12)
    multi = _step(_engine(request_latency_s=0.0, num_scheduler_steps=2))
    wl = Workload.simple(isl, osl, Load("requests_per_s", 1.0))
    B = np.array([0.5, 1.0, 8.0, 64.0])
    a, m = aggregated_curve(asy, wl, SLO(), B), aggregated_curve(multi, wl, SLO(), B)
    decode = np.asarray(asy.decode_step_s(B, wl.decode_context_mean_tokens))
    np.testing.assert_allclose(a.ttft_mean_s - m.ttft_mean_s, (1.0 - np.exp(-B)) * decode, rtol=1e-9)
    np.testing.assert_allclose(a.tpot_s, m.tpot_s, rtol=1e-12)


def _prefill_ops(model_id: str, system: str, engine) -> dict[str, float]:
    """The ops of one 8,192-token prefill chunk at offset 24,000 (a 32k prompt's last chunk) on one GPU, in the
    checkpoint's precision."""
    sm = _step(engine, system, model_id=model_id, precision=None)
    p = 8192.0
    return sm.breakdown(p, p * (24000 + p / 2), 0, 0)["by_op_s"]


@pytest.mark.parametrize("model_id, system, slowed", [
    ("openai/gpt-oss-20b", "a100", True),          # sinks, compute capability 8.0: vLLM's Triton backend
    ("openai/gpt-oss-20b", "l40s", True),          # 8.9 (Ada): no FlashAttention-3 either
    ("openai/gpt-oss-20b", "h100", False),         # 9.0: FlashAttention-3 runs the sinks
    ("meta-llama/Llama-3.1-8B", "a100", False)])   # no sinks: FlashAttention-2
def test_attention_sink_prefill_runs_at_the_engines_scale_before_hopper(model_id, system, slowed):
    """sink_attention_prefill_scale (engines.py: vLLM serves gpt-oss with TRITON_ATTN on Ampere): the prefill
    attention of layers with sinks takes 1/scale of FlashAttention's time on a GPU of compute capability < 9.0,
    every other op and every other case is unchanged."""
    triton = _prefill_ops(model_id, system, _engine(sink_attention_prefill_scale=0.4))
    flash = _prefill_ops(model_id, system, _engine(sink_attention_prefill_scale=1.0))
    assert flash["attention_prefill"] > 0
    ratio = 1 / 0.4 if slowed else 1.0
    assert triton["attention_prefill"] == pytest.approx(flash["attention_prefill"] * ratio, rel=1e-12)
    assert {k: v for k, v in triton.items() if k != "attention_prefill"} == \
        pytest.approx({k: v for k, v in flash.items() if k != "attention_prefill"}, rel=1e-12)


def test_every_gpt_oss_layer_has_sinks_and_llama_none():
    assert all(L.attention.sinks for L in load_model("openai/gpt-oss-20b").layers)
    assert not any(L.attention.sinks for L in load_model("meta-llama/Llama-3.1-8B").layers)


def test_gpu_family_constants_apply_once():
    # catalog/engines.yaml: vLLM's by_gpu_family blackwell moe_fp4_efficiency_cap (below 1, the default); applying the
    # family's constants again (Catalog.engine does, then compile_step) changes nothing and builds no new engine
    base = get_engine("vllm")
    cap = base.by_gpu_family["blackwell"]["moe_fp4_efficiency_cap"]
    on_b200 = base.for_gpu("b200")
    assert base.moe_fp4_efficiency_cap == 1.0 and cap < 1.0 and on_b200.moe_fp4_efficiency_cap == cap
    assert on_b200.for_gpu("b200") is on_b200
    assert base.for_gpu("h200") is base   # no constants of its own for Hopper
