"""Memory fit: the naive sizing table reproduced, GLM-5.3 realistic view checked by hand, properties, errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clusterfit as cf
from clusterfit.arch import load_model
from clusterfit.engines import get_engine
from clusterfit.hardware import load_hardware
from clusterfit.layout import Layout
from clusterfit.memory import (CUBLAS_BYTES, CUDA_CONTEXT_BYTES, fit, kv_bytes_per_sequence, pipeline_stages,
                               weight_bytes_per_gpu)
from clusterfit.precision import resolve_precision

GB = 10**9
H200_BYTES = 150_109_880_320


# ---- the sizing table of the issue, by the naive view --------------------------------------------

def test_naive_table_fp8(run_json):
    out = run_json("fit", "--params", "744B", "--precision", "fp8", "--system", "h100", "--system", "h200",
                   "--system", "b200")
    naive = {r["system"]: r["naive"] for r in out["results"]}
    assert naive["dgx_h100"]["fits"] is False and naive["dgx_h100"]["nodes_needed"] == 2
    assert naive["hgx_h200"]["fits"] is True and naive["hgx_h200"]["left_bytes"] == 1128 * GB - 744 * GB == 384 * GB
    assert naive["dgx_b200"]["fits"] is True and naive["dgx_b200"]["left_bytes"] == 1440 * GB - 744 * GB == 696 * GB


def test_naive_table_bf16(run_json):
    out = run_json("fit", "--params", "744B", "--precision", "bf16", "-s", "h100", "-s", "h200", "-s", "b200")
    naive = {r["system"]: r["naive"] for r in out["results"]}
    assert naive["dgx_h100"]["weight_bytes"] == 1488 * GB
    assert [naive[s]["nodes_needed"] for s in ("dgx_h100", "hgx_h200", "dgx_b200")] == [3, 2, 2]
    assert not any(naive[s]["fits"] for s in naive)


# ---- GLM-5.3 at fp8, realistic, by hand ------------------------------------------------------------

def _glm53_by_hand():
    """Component counts of zai-org/GLM-5.3 from its config.json, written out."""
    h, L, V, H = 6144, 78, 154880, 64
    q_down = h * 2048 + 2048                 # q_a_proj + q_a_layernorm (replicated under TP)
    kv_down = h * (512 + 64) + 512           # kv_a_proj_with_mqa + kv_a_layernorm (replicated)
    q_up = 2048 * H * (192 + 64)             # q_b_proj
    kv_up = 512 * H * (192 + 256)            # kv_b_proj
    o = H * 256 * h
    full_indexers = 21                       # indexer_types: 'full' layers
    indexer = 2048 * 32 * 128 + h * 128 + 2 * 128 + h * 32
    return dict(h=h, L=L, V=V, q_down=q_down, kv_down=kv_down, sharded_attn=q_up + kv_up + o,
                indexer=full_indexers * indexer, dense=3 * 3 * h * 12288, experts=75 * 256 * 3 * h * 2048,
                shared=75 * 3 * h * 2048, router=75 * (256 * h + 256), norms=L * 2 * h + h)


def test_glm53_weights_per_gpu_by_hand():
    m = load_model("zai-org/GLM-5.3")
    p = resolve_precision(m, "fp8")
    c = _glm53_by_hand()
    fp8 = 1.0                                # --precision fp8: per-tensor scales (one fp32 per tensor: 0)
    per_gpu = (c["L"] * (c["sharded_attn"] / 8 + c["q_down"] + c["kv_down"]) * fp8
               + c["indexer"] * fp8                            # replicated
               + (c["dense"] + c["shared"] + c["experts"]) / 8 * fp8
               + (c["router"] + c["norms"]) * 2                # bf16, replicated
               + 2 * c["V"] * c["h"] * 2 / 8)                  # bf16 embedding + LM head, vocab-parallel
    assert weight_bytes_per_gpu(m, p, Layout(tp=8, ep=8)) == math.ceil(per_gpu)


@pytest.mark.parametrize("system,visible", [("h200", H200_BYTES), ("b200", None), ("h100", None)])
def test_glm53_realistic_fit_by_hand(system, visible):
    m = load_model("zai-org/GLM-5.3")
    p = resolve_precision(m, "fp8")
    s = load_hardware().system(system)
    device = s.gpu.usable_memory_bytes
    if visible:
        assert device == visible
    nodes = 2 if system == "h100" else 1
    lay = Layout(tp=8, pp=2, ep=8) if system == "h100" else Layout(tp=8, ep=8)
    r32 = fit(m, s, p, None, nodes, get_engine("vllm"), 32768)
    assert r32.layout == lay
    assert r32.weight_bytes_per_gpu == weight_bytes_per_gpu(m, p, lay)   # the most loaded stage's
    # vLLM-style reserve: measured context + cuBLAS, estimated NCCL 512 MiB and activations of 8192 tokens:
    # 16-bit residual + normed copy (2 x 6144) + fused-MoE cache top_k x 3 x 2048 + top_k x hidden (EP: moe_tp=1),
    # plus fp32 logits for max_num_seqs = 1024 sequences (vLLM's default on >= 70 GiB GPUs that are not A100s,
    # EngineArgs.get_batch_defaults) over a 1/8 vocab shard.
    act = 8192 * 2 * (2 * 6144 + 8 * 3 * 2048 + 8 * 6144) + 1024 * 154880 // 8 * 4
    assert r32.reserve.activations == act
    # MLA latent (512) + rope key (64), bf16, replicated on every TP rank, + fp8 indexer keys (128 + 4 B scale)
    # on 21 layers; with PP2 each stage's GPUs hold 39 of the 78 layers (and that half's indexer layers), and the
    # stage whose GPUs hold fewer sequences sets the cache (vLLM gives every stage the smallest block count)
    stages = []
    for k in range(lay.pp):
        layers = m.layers[39 * k:39 * (k + 1)] if lay.pp == 2 else m.layers
        per_token = len(layers) * 576 * 2 + sum(1 for x in layers if x.attention.index_cached) * 132
        w = weight_bytes_per_gpu(m, p, lay, stage=k)
        budget = int(0.9 * device - w - act - CUDA_CONTEXT_BYTES - CUBLAS_BYTES - (512 << 20))
        stages.append((budget // (per_token * 32768), budget, per_token))
    _, budget, per_token = min(stages)
    if system != "h100":
        assert per_token == 78 * 576 * 2 + 21 * 132
    assert r32.kv_budget_bytes_per_gpu == budget
    assert r32.kv_bytes_per_token_per_gpu == per_token
    for ctx, res in ((32768, r32), (131072, fit(m, s, p, None, nodes, get_engine("vllm"), 131072))):
        per_seq = per_token * ctx            # 32768 and 131072 are whole 16-token blocks
        assert res.max_sequences == budget // per_seq
    # sanity of the story the table tells: H200 holds 12 sequences at 32k and 3 at 128k
    if system == "h200":
        assert (r32.max_sequences, budget // (per_token * 131072)) == (12, 3)


def test_tensorrt_llm_reserves_no_sampler_logits():
    """TensorRT-LLM profiles memory with dummy context requests of max_num_tokens tokens, one output token each
    (KvCacheCreator._create_dummy_context_requests): no max_num_seqs x vocab logits are kept from the KV cache, where
    vLLM's dummy sampler run over max_num_seqs requests keeps them. Llama-3.3-70B fp8 on one H100: activations of
    8192 tokens x 2 bytes x (2 x 8192 residual + normed copy + 2 x 28672 gate+up) for TensorRT-LLM; vLLM adds 1024 x
    128,256 x 4 bytes (525 MB)."""
    m = load_model("meta-llama/Llama-3.3-70B-Instruct")
    p = resolve_precision(m, "fp8")
    s = load_hardware().system("h100")
    trt = fit(m, s, p, Layout(tp=1), 1, get_engine("trtllm"), 4096)
    assert trt.reserve.activations == 8192 * 2 * (2 * 8192 + 2 * 28672)
    vllm = fit(m, s, p, Layout(tp=1), 1, get_engine("vllm"), 4096)
    assert vllm.reserve.activations == 8192 * 2 * (2 * 8192 + 2 * 28672) + 1024 * 128256 * 4


def test_nodes_needed_realistic(run_json):
    out = run_json("fit", "glm-5.3", "--precision", "fp8", "-s", "h100", "-s", "h200", "-s", "b200")
    assert [r["nodes_needed"] for r in out["results"]] == [2, 1, 1]
    assert out["model"]["kv_bytes_per_token"] == 78 * 576 * 2 + 21 * 132
    r = out["results"][1]
    for key in ("system", "nodes", "fits", "nodes_needed", "weight_bytes", "kv_budget_bytes", "kv_bytes_per_token",
                "max_sequences", "naive"):
        assert key in r
    assert out["model"]["total_params"] == load_model("glm-5.3").total_params


# ---- properties ----------------------------------------------------------------------------------

MODELS = ["llama-3.1-70b", "deepseek-v3", "gpt-oss-120b", "qwen3-next-80b-a3b", "gemma-3-27b-it", "glm-5.3"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MODELS), st.integers(min_value=40, max_value=400), st.integers(1, 60),
       st.sampled_from([1024, 8192, 65536]))
def test_more_memory_never_holds_fewer_sequences(name, gb, extra_gb, context):
    from dataclasses import replace

    m = load_model(name)
    p = resolve_precision(m, "fp8")
    s = load_hardware().system("h200")
    small = replace(s, gpu=replace(s.gpu, visible_memory_bytes=gb * GB))
    big = replace(s, gpu=replace(s.gpu, visible_memory_bytes=(gb + extra_gb) * GB))
    lay = Layout(tp=8, ep=8 if m.is_moe else 1)
    assert fit(m, big, p, lay, 1, get_engine("vllm"), context).max_sequences >= fit(m, small, p, lay, 1, get_engine("vllm"), context).max_sequences


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 4))
def test_more_nodes_never_need_more_weight_bytes_per_gpu(name, nodes):
    from clusterfit.layout import default_layout

    m = load_model(name)
    p = resolve_precision(m, "fp8")
    s = load_hardware().system("h100")
    w1 = weight_bytes_per_gpu(m, p, default_layout(m, s, 8 * nodes))
    w2 = weight_bytes_per_gpu(m, p, default_layout(m, s, 8 * (nodes + 1)))
    assert w2 <= w1


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["llama-3.1-8b", "gpt-oss-20b", "gemma-3-27b-it", "deepseek-v3"]), st.integers(1, 200_000))
def test_kv_grows_linearly_until_window_caps(name, ctx):
    m = load_model(name)
    p = resolve_precision(m)
    lay = Layout()
    per_token_growth = sum(
        (2 * a.num_kv_heads * a.head_dim if a.kind != "mla" else (a.kv_lora_rank + a.qk_rope_head_dim))
        * p.kv_bytes_per_elem
        for a in (layer.attention for layer in m.layers) if not a.window or ctx < a.window)
    assert kv_bytes_per_sequence(m, p, lay, ctx + 1) - kv_bytes_per_sequence(m, p, lay, ctx) == per_token_growth
    windows = [layer.attention.window for layer in m.layers if layer.attention.window]
    if windows and ctx > max(windows):
        full_only = kv_bytes_per_sequence(m, p, lay, ctx + 1000) - kv_bytes_per_sequence(m, p, lay, ctx)
        assert full_only == 1000 * per_token_growth


def test_engines_documented():
    for name in ("vllm", "sglang", "trtllm", "TensorRT-LLM"):
        e = get_engine(name)
        assert e.memory_source and 0 < e.gpu_memory_utilization <= 1
        assert e.memory_mode in ("total_fraction", "free_fraction")


# ---- errors: one message, exit code 2 ---------------------------------------------------------------

@pytest.mark.parametrize("args,msg", [
    (("fit", "glm-5.4"), "unknown model 'glm-5.4'. Did you mean: glm-5.3"),
    (("fit", "llama-3.1-8b", "-s", "h900"), "unknown system 'h900'"),
    (("fit", "llama-3.1-8b", "--precision", "fp7"), "unknown precision 'fp7'"),
    (("fit", "llama-3.1-8b", "--kv-dtype", "int3"), "unknown KV-cache dtype 'int3'"),
    (("fit", "llama-3.1-8b", "--kv-dtype", "fp4"), "unknown KV-cache dtype 'fp4'"),  # as typed, not 'nvfp4'
    (("fit", "llama-3.1-70b", "--tp", "3"), "TP=3 does not divide the 64 attention heads"),
    (("fit", "llama-3.1-70b", "--tp", "-2"), "--tp: must be an integer in 1..4,096"),
    (("fit", "llama-3.1-8b", "--ep", "2"), "EP=2 needs an MoE model"),
    (("fit", "deepseek-v3", "--tp", "8", "--ep", "3"), "EP=3 must divide tp*dp=8"),
    (("fit", "llama-3.1-8b", "--context", "-5"), "--context: must be an integer in 1..100,000,000"),
    (("fit", "llama-3.1-8b", "--context", "1000000000"), "--context: must be an integer in 1..100,000,000"),
    (("fit", "llama-3.1-8b", "--nodes", "0"), "--nodes: must be an integer in 1..4,096"),
    (("fit", "llama-3.1-8b", "--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization: must be a number in 0.05..1.0"),
    (("fit", "--params", "-3B", "--precision", "fp8"), "parameter count must be positive"),
    (("fit", "--params", "lots", "--precision", "fp8"), "cannot read parameter count 'lots'"),
    (("fit", "--params", "1e20", "--precision", "fp8"), "--params must be between"),
    (("fit", "--params", "70B"), "error: --precision: is needed with a bare parameter count (--params): bf16"),
    (("fit", "--params", "70B", "--precision", "fp8", "--sessions", "10"), "--sessions: needs the model's architecture"),
    (("fit", "--params", "70B", "--precision", "fp8", "--context", "1000"), "--context: needs the model's architecture"),
    (("fit", "--params", "70B", "--precision", "fp8", "--kv-dtype", "fp8"), "--kv-dtype: needs the model's architecture"),
    (("fit",), "give a MODEL or --params, one of them"),
    (("fit", "llama-3.1-8b", "--params", "8B", "--precision", "bf16"), "give a MODEL or --params, not both"),
])
def test_errors_exit_2(run_cli, args, msg):
    code, out, err = run_cli(*args)
    assert code == 2
    assert msg in " ".join(err.split())
    assert "Traceback" not in err


def test_malformed_and_incomplete_config_files(run_cli, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 10,')
    code, _, err = run_cli("fit", str(bad))
    assert code == 2 and f"model config {bad}: not valid JSON at line 1, column 20" in " ".join(err.split())
    bad.write_text('{"hidden_size": 4096}')
    code, _, err = run_cli("fit", str(tmp_path))
    assert code == 2 and "missing required field 'num_hidden_layers'" in err
    code, _, err = run_cli("fit", str(tmp_path / "missing.json"))
    assert code == 2 and "not found" in " ".join(err.split())


def test_local_config_path(run_json, tmp_path):
    import json
    from importlib.resources import files

    src = files("clusterfit").joinpath("catalog/models/meta-llama__Llama-3.1-8B.json").read_text()
    (tmp_path / "config.json").write_text(src)
    out = run_json("fit", str(tmp_path / "config.json"), "-s", "h100")
    assert out["model"]["total_params"] == load_model("llama-3.1-8b").total_params
    assert json.loads(src)["hidden_size"] == 4096


def test_mxfp8_weights_by_hand(run_json):
    """MXFP8 (OCP Microscaling Formats v1.0): fp8 e4m3 elements in blocks of 32 sharing one 8-bit e8m0 scale, 8 + 8/32 =
    8.25 bits per weight, run on fp8 tensor cores. Llama-3.1-8B: the quantisable linear layers go from 1 byte (fp8,
    per-tensor scale) to 1.03125 bytes per parameter; embeddings, LM head and norms stay 16-bit."""
    from clusterfit.precision import naive_bytes_per_param, weight_format

    wf = weight_format("MXFP8")
    assert (wf.name, wf.bits_per_param, wf.compute_dtype) == ("mxfp8", 8.25, "fp8")
    assert naive_bytes_per_param("mxfp8") == 1.0
    m = load_model("meta-llama/Llama-3.1-8B")
    fp8 = resolve_precision(m, "fp8")
    mx = resolve_precision(m, "mxfp8")
    linear = sum(n for c, n in m.params.items() if fp8.formats[c].name == "fp8")
    assert sum(mx.bytes_for(c, n) for c, n in m.params.items()) - sum(fp8.bytes_for(c, n) for c, n in m.params.items()) \
        == pytest.approx(linear * 0.03125)
    out = run_json("fit", "meta-llama/Llama-3.1-8B", "--precision", "mxfp8", "-s", "h200")
    assert out["results"][0]["fits"]


def test_fit_caps_sequences_at_what_the_engine_runs(run_json):
    """Llama-3.1-8B TP8 on a B200 node holds 1,257 sequences of 8,192 tokens in its KV cache, but vLLM runs at most
    1,024 at once there (max_num_seqs, engines.yaml), as perf refuses --batch 1200: fit shows the cap and says so, and
    1,200 sessions take a second replica."""
    r = run_json("fit", "llama-3.1-8b", "--system", "b200", "--context", "8192", "--sessions", "1200")["results"][0]
    assert r["max_sequences"] == 1024 and not r["fits"]
    assert any(n.startswith("the KV cache holds 1,257 sequences of 8,192 tokens, but vllm runs at most 1,024")
               for n in r["notes"])
    assert r["sessions_fit"]["explanation"].endswith("takes 2 node(s) (2 replica(s) of 1 node(s))")


def test_pipeline_stages_split_layers_as_vllm_does():
    """vllm/distributed/utils.py get_pp_indices: L // pp layers each, the remainder one more each on the stages before
    the last, from the second-to-last backwards (its docstring's examples: 61 over PP2 and 22 over PP4)."""
    assert [len(r) for r in pipeline_stages(61, 2)] == [31, 30]
    assert [len(r) for r in pipeline_stages(22, 4)] == [5, 6, 6, 5]
    assert [len(r) for r in pipeline_stages(36, 8)] == [4, 4, 4, 5, 5, 5, 5, 4]
    stages = pipeline_stages(36, 8)
    assert stages[0].start == 0 and stages[-1].stop == 36
    assert all(a.stop == b.start for a, b in zip(stages, stages[1:]))


def test_the_stage_with_the_most_full_attention_layers_binds_the_cache():
    """gpt-oss-120b alternates sliding-window (even) and full-attention (odd) layers. Over TP1 PP8 its 36 layers
    split 4, 4, 4, 5, 5, 5, 5, 4: stage 5 (layers 17-21) holds three full layers where stage 1 (layers 0-3) holds
    two, so it holds the fewest sequences and sets the cache. fit and perf agree on it (both sized stage 1 before,
    fit 913 sequences of 32k, perf 732, where the GPUs of stage 5 hold about 616)."""
    m = load_model("openai/gpt-oss-120b")
    p = resolve_precision(m, "mxfp4")
    s = load_hardware().system("h200")
    lay = Layout(tp=1, pp=8)
    r = fit(m, s, p, lay, 1, get_engine("trtllm"), 32768)
    assert r.kv_stage == 4
    full = [i for i in range(17, 22) if not m.layers[i].attention.window]
    assert full == [17, 19, 21]
    chunked = get_engine("trtllm").chunked_attention_context_only
    per_seq = sum(m.layers[i].attention.kv_bytes_per_sequence(32768, p.kv_bytes_per_elem, 1, 16, chunked)
                  for i in range(17, 22))
    assert r.kv_bytes_per_sequence_per_gpu == per_seq
    assert r.max_sequences == r.kv_budget_bytes_per_gpu // per_seq
    stage0 = kv_bytes_per_sequence(m, p, lay, 32768, 16, stage=0)
    assert stage0 < per_seq           # two full layers and two windows of 128 tokens
    shown = cf.fit(model="gpt-oss-120b", systems=["h200"], engine="trtllm", tp=1, pp=8, context=32768).results[0]
    perf = cf.perf(model="gpt-oss-120b", system="h200", engine="trtllm", tp=1, pp=8, isl=1024, osl=128, batch=1,
                   context=32768)
    assert perf.kv_capacity_tokens == shown.max_kv_tokens
    assert any("pipeline stage 5 of 8 (layers 17-21) holds the fewest KV tokens" in n for n in shown.notes)


def test_pipeline_note_names_sequences_where_the_binding_stage_holds_more_tokens():
    """The binding stage is the one holding the fewest sequences of the context; where stages mix layer kinds it can
    hold more KV tokens than another stage (MiMo-V2-Flash TP1 PP8: stage 1's six layers, 25,600 bytes per token), and
    the note then says sequences, not tokens (it said 'the fewest KV tokens' whatever the stage held)."""
    shown = cf.fit(model="XiaomiMiMo/MiMo-V2-Flash", systems=["h200"], tp=1, pp=8, context=32768).results[0]
    note = next(n for n in shown.notes if n.startswith("pipeline stage"))
    assert note.startswith("pipeline stage 1 of 8 (layers 0-5) holds the fewest sequences of 32,768 tokens")


@pytest.mark.parametrize("name,precision,pp", [("deepseek-ai/DeepSeek-V3", "fp8", 2), ("openai/gpt-oss-120b", "mxfp4", 8),
                                               ("meta-llama/Llama-3.1-70B-Instruct", "bf16", 3)])
def test_pipeline_stages_partition_the_weights(name, precision, pp):
    """Each stage's GPUs hold their own layers' weights, the first the embedding, the last the LM head: the stages
    add up to one GPU of the same TP without a pipeline (to the byte, less one per stage's rounding up). DeepSeek-V3
    over PP2: the first stage's 31 layers hold its 3 dense ones, so the second (30 MoE layers) is the heavier."""
    m = load_model(name)
    p = resolve_precision(m, precision)
    whole = weight_bytes_per_gpu(m, p, Layout(tp=8, ep=8 if m.params["routed_experts"] else 1))
    lay = Layout(tp=8, pp=pp, ep=8 if m.params["routed_experts"] else 1)
    stages = [weight_bytes_per_gpu(m, p, lay, stage=k) for k in range(pp)]
    assert whole <= sum(stages) <= whole + pp
    assert weight_bytes_per_gpu(m, p, lay) == max(stages)
    if "DeepSeek" in name:
        assert stages[1] > stages[0]


def test_kv_heads_replicated_when_tp_exceeds_them_by_hand():
    """Llama-3.1-8B (8 KV heads) over TP16: vLLM's QKVParallelLinear gives each rank one whole KV head (two ranks per
    head), so a GPU holds 1/16 of q, o, the MLP and the vocab-parallel embedding and LM head, and 1/8 of k and v.
    By hand, bf16, per layer: q + o 2 x 4096^2 / 16, k + v 2 x 4096 x 128 (one head), MLP 3 x 4096 x 14336 / 16, two
    norms 2 x 4096; plus the final norm and 2 x 128256 x 4096 / 16. The replicated K/V was charged (tp - 1) times
    over: 1,507,598,336 bytes (+45%)."""
    m = load_model("meta-llama/Llama-3.1-8B-Instruct")
    per_layer = 2 * 4096**2 // 16 + 2 * 4096 * 128 + 3 * 4096 * 14336 // 16 + 2 * 4096
    params = 32 * per_layer + 4096 + 2 * 128256 * 4096 // 16
    assert weight_bytes_per_gpu(m, resolve_precision(m, "bf16"), Layout(tp=16)) == 2 * params == 1_037_836_288


def test_kv_budget_bytes_sums_the_replicas_gpus_not_the_nodes():
    """README: kv_budget_bytes is the sum over the replica's GPUs. A TP1 replica on an 8-GPU node summed all 8
    (937,527,803,904 bytes for Llama-3.1-8B on an H200 node, 8x the one GPU whose KV max_kv_tokens counts)."""
    one = cf.fit(model="llama-3.1-8b", systems=["h200"], tp=1).results[0]
    assert one.gpus == 8 and one.kv_budget_bytes == one.kv_budget_bytes_per_gpu
    four = cf.fit(model="llama-3.1-8b", systems=["h200"], tp=4).results[0]
    assert four.kv_budget_bytes == 4 * four.kv_budget_bytes_per_gpu


def test_tp_split_that_cuts_fp8_weight_blocks_is_refused_for_vllm_and_sglang(run_cli):
    """MiniMax-M2.5's checkpoint is fp8 in 128 x 128 blocks and its experts are 1536 wide: over TP8 without EP each
    rank would hold 192 columns of an expert, which vLLM's and SGLang's fp8 create_weights refuse ('not divisible
    by weight quantization block_n = 128'); fit said it fits, 100 sequences. With EP8 each expert is whole on a rank."""
    code, _, err = run_cli("fit", "MiniMaxAI/MiniMax-M2.5", "--system", "h200", "--tp", "8")
    assert code == 2 and err.startswith("error: --ep: impossible layout TP8 for MiniMax-M2.5 under vllm: its routed "
                                        "experts of layer 0 are 1536 wide; split over 8 ranks that is 192 per rank"), err
    code, _, err = run_cli("fit", "MiniMaxAI/MiniMax-M2.5", "--system", "h200", "--tp", "8", "--engine", "sglang")
    assert code == 2 and "under sglang" in err
    assert cf.fit(model="MiniMaxAI/MiniMax-M2.5", systems=["h200"], tp=8, ep=8).results[0].fits
    assert cf.fit(model="MiniMaxAI/MiniMax-M2.5", systems=["h200"]).results[0].layout.ep == 8   # the default layout
