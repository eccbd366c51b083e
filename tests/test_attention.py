"""Each attention kind's facts, computed by hand from the bundled configs (clusterfit/attention.py)."""

from __future__ import annotations

import pytest

import clusterfit as cf
from clusterfit.arch import load_model
from clusterfit.attention import (BlockSparseAttention, ChunkedAttention, CompressedAttention, DeltaNetAttention,
                                  Mamba2Mixer, MLAttention, SlidingWindowAttention, SoftmaxAttention,
                                  SparseMLAttention)
from clusterfit.layout import Layout, layout_problem


def test_each_kind_is_recognised_from_the_config_fields():
    assert {type(L.attention) for L in load_model("meta-llama/Llama-3.1-70B").layers} == {SoftmaxAttention}
    assert {type(L.attention) for L in load_model("deepseek-ai/DeepSeek-V3").layers} == {MLAttention}  # kv_lora_rank
    assert {type(L.attention) for L in load_model("zai-org/GLM-5.3").layers} == {SparseMLAttention}  # + index_topk
    assert {type(L.attention) for L in load_model("deepseek-ai/DeepSeek-V3.2").layers} == {SparseMLAttention}
    gpt = load_model("openai/gpt-oss-20b").layers  # layer_types sliding / full
    assert [type(L.attention) for L in gpt[:2]] == [SlidingWindowAttention, SoftmaxAttention]
    scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").layers  # chunked x3, full
    assert [type(L.attention) for L in scout[:4]] == [ChunkedAttention] * 3 + [SoftmaxAttention]
    nxt = load_model("Qwen/Qwen3-Next-80B-A3B-Instruct").layers  # linear x3, full
    assert [type(L.attention) for L in nxt[:4]] == [DeltaNetAttention] * 3 + [SoftmaxAttention]
    v4 = load_model("deepseek-ai/DeepSeek-V4-Flash").layers  # compress_ratios [0, 0, 4, 128, ...]
    assert {type(L.attention) for L in v4} == {CompressedAttention}
    assert [L.attention.kv_compress_ratio for L in v4[:4]] == [1, 1, 4, 128]


def test_mla_kv_bytes_and_tp_rule():
    a = load_model("deepseek-ai/DeepSeek-V3").layers[0].attention
    # one MLA layer caches (kv_lora_rank + qk_rope_head_dim) elements per token, the same on every TP rank
    for tp in (1, 2, 8, 64):
        assert a.kv_bytes_per_token(2.0, tp) == (512 + 64) * 2
    assert a.kv_bytes_per_token(1.0) == 576
    # q_a [7168 x 1536] + bias 1536 and kv_a [7168 x (512 + 64)] + 512 are replicated on the TP ranks
    assert a.replicated_params(7168, 8) == 7168 * 1536 + 1536 + 7168 * 576 + 512
    assert all(a.kv_split_ok(tp) for tp in (1, 3, 8, 128))
    # absorbed decode: latent read once; 128 heads / tp each 2 x 576 + 2 x 512 FLOPs per key
    assert a.decode_cost(8, 2.0) == (16 * (2 * 576 + 2 * 512.0), 576 * 2.0)
    assert a.flops_per_token(1000) == 2.0 * 128 * (2 * 512 + 64) * 1000


def test_gqa_kv_heads_split_then_replicated():
    a = load_model("meta-llama/Llama-3.1-70B").layers[0].attention  # 64 heads, 8 KV heads of 128
    assert a.kv_bytes_per_token(2.0) == 2 * 8 * 128 * 2  # one copy: K and V of 8 heads
    assert a.kv_bytes_per_token(2.0, 4) == 2 * 2 * 128 * 2  # 2 KV heads per rank
    assert a.kv_bytes_per_token(2.0, 16) == 2 * 1 * 128 * 2  # one full head per rank past 8
    assert [a.kv_heads_per_rank(tp) for tp in (1, 2, 8, 16, 64)] == [8, 4, 1, 1, 1]
    assert a.replicated_params(8192, 8) == 0.0
    # TP16: each rank keeps one of the 8 KV heads' K/V projection (1/8) instead of 1/16. The memory model charges
    # (total - r) / tp + r per GPU, so r is the amount that turns kv / 16 into kv / 8 (the value asserted here was
    # (1/8 - 1/16) x 16 x kv, which charged the replicated part 15 times over: Llama-3.1-8B TP16 +45% weights)
    kv = 2 * 8192 * 8 * 128
    r = a.replicated_params(8192, 16)
    assert r == pytest.approx(kv * (1 / 8 - 1 / 16) * 16 / 15)
    assert (kv - r) / 16 + r == pytest.approx(kv / 8)
    assert a.kv_split_ok(16) and not a.kv_split_ok(3) and not a.kv_split_ok(12)
    assert layout_problem(load_model("meta-llama/Llama-3.1-70B"), Layout(tp=16)) is None


def test_windows_and_chunks_cap_the_cache():
    w = load_model("openai/gpt-oss-20b").layers[0].attention  # sliding window 128, 8 KV heads of 64
    assert w.kv_bytes_per_sequence(1000, 2.0, 1) == 128 * 2 * 8 * 64 * 2
    assert w.kv_bytes_per_sequence(100, 2.0, 1, block_size=16) == 112 * 2 * 8 * 64 * 2
    assert w.attended_keys(1000) == 128.0 and w.decode_window() == 128
    c = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").layers[0].attention  # chunk 8192
    per_tok = 2 * 8 * 128 * 2
    assert c.kv_bytes_per_sequence(20_000, 2.0, 1) == 8192 * per_tok
    assert c.kv_bytes_per_sequence(20_000, 2.0, 1, chunked_full=True) == 20_000 * per_tok  # prefill-only mask
    assert c.decode_window(chunked_context_only=True) == 0 and c.decode_window() == 8192


def test_dsa_indexer_keys_and_top_k():
    layers = load_model("zai-org/GLM-5.3").layers  # indexer_types full, full, full, shared, ...
    own, shared = layers[0].attention, layers[3].attention
    # latent + rope in kv dtype, plus the indexer's 128 fp8 values and one fp32 scale
    assert own.kv_bytes_per_token(2.0) == (512 + 64) * 2 + 128 * 1 + 4
    assert shared.kv_bytes_per_token(2.0) == (512 + 64) * 2
    assert own.indexer_params > 0 and shared.indexer_params == 0
    # scoring a key reads what is cached for it: the 128 fp8 values and the fp32 scale (128 before, the scale left out)
    assert own.index_cost() == (2.0 * 32 * 128, 128.0 * 1 + 4) and shared.index_cost() == (0.0, 0.0)
    # decode attends the top 2048 keys; the indexer scores all of them
    assert own.attended_keys(100_000) == 2048.0 and own.attended_keys(1000) == 1000.0
    assert own.flops_per_token(100_000) == 2.0 * 32 * 128 * 100_000 + 2.0 * 64 * (2 * 512 + 64) * 2048


def test_deltanet_state_split_over_tp():
    a = load_model("Qwen/Qwen3-Next-80B-A3B-Instruct").layers[0].attention
    # nv x dk x dv + (2 nk dk + nv dv) x (conv - 1) state elements, 2 bytes each, heads split over TP
    state = 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3
    assert a.linear_state_elems == state
    assert a.kv_bytes_per_token(2.0) == 0.0
    assert a.kv_bytes_per_sequence(123_456, 2.0, 1) == state * 2.0
    assert a.kv_bytes_per_sequence(7, 2.0, 4) == state / 4 * 2.0
    assert a.state_cost(2) == (4.0 * state / 2, 8.0 * state / 2)
    assert a.decode_cost(1, 2.0) == (0.0, 0.0) and a.projections(2048, 1) == []
    assert a.param_component == "linear_attention" and not a.caches_kv


def test_deepseek_v4_compressed_cache():
    layers = load_model("deepseek-ai/DeepSeek-V4-Flash").layers  # head_dim 512, window 128, index_head_dim 128
    plain, c4, c128 = layers[0].attention, layers[2].attention, layers[3].attention
    # one shared 512-wide vector (keys = values) per ratio tokens, the same on every TP rank
    assert plain.kv_bytes_per_token(2.0, 8) == 512 * 2
    assert c4.kv_bytes_per_token(2.0, 8) == 512 / 4 * 2 + (128 + 4) / 4  # + the indexer key per entry
    assert c128.kv_bytes_per_token(2.0) == 512 / 128 * 2  # no indexer on ratio-128 layers
    # ratio 4: ceil(1000 / 4) entries (whole 512 vectors + indexer keys) and the last 128 tokens uncompressed
    assert c4.kv_bytes_per_sequence(1000, 2.0, 1) == 250 * (512 * 2 + 132) + 128 * 512 * 2
    assert plain.kv_bytes_per_sequence(1000, 2.0, 1) == 128 * 512 * 2  # window only
    # attended: context / ratio + window, capped at top-k + window where an indexer selects
    assert c128.attended_keys(12_800) == 100 + 128
    assert c4.attended_keys(40_000) == 512 + 128
    assert c4.label() == "mqa window 128 compressed 1/4 + sparse indexer"


def test_new_kinds_are_recognised_from_the_config_fields():
    m3 = load_model("MiniMaxAI/MiniMax-M3").layers  # sparse_attention_freq [0, 0, 0, 1, ...]
    assert [type(L.attention) for L in m3[2:5]] == [SoftmaxAttention, BlockSparseAttention, BlockSparseAttention]
    nano = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").layers  # "MEMEM*EMEMEM*E..."
    assert [type(L.attention) for L in nano[:3]] == [Mamba2Mixer, Mamba2Mixer, SoftmaxAttention]
    qwen35 = load_model("Qwen/Qwen3.5-27B").layers  # layer_types linear x3, full
    assert [type(L.attention) for L in qwen35[:4]] == [DeltaNetAttention] * 3 + [SoftmaxAttention]
    mimo = load_model("XiaomiMiMo/MiMo-V2-Flash").layers  # hybrid_layer_pattern [0, 1, 1, 1, 1, 0, ...]
    assert [type(L.attention) for L in mimo[:2]] == [SoftmaxAttention, SlidingWindowAttention]


def test_keys_and_values_of_different_widths():
    # MiMo-V2-Flash sliding layers: 64 query / 8 KV heads, keys 192 wide, values 128 (swa_head_dim, swa_v_head_dim)
    a = load_model("XiaomiMiMo/MiMo-V2-Flash").layers[1].attention
    assert (a.num_heads, a.num_kv_heads, a.head_dim, a.v_head_dim, a.window) == (64, 8, 192, 128, 128)
    assert a.kv_bytes_per_token(2.0) == 8 * (192 + 128) * 2
    assert a.kv_bytes_per_token(1.0, 8) == 1 * (192 + 128)
    assert a.projections(4096, 1) == [("qkv_proj", (64 + 8) * 192 + 8 * 128, 4096), ("o_proj", 4096, 64 * 128)]
    assert a.decode_cost(1, 2.0) == (64 * (2 * 192 + 2 * 128.0), 8 * (192 + 128) * 2.0)
    # q, k, v, o, and the sliding layers' attention-sink logit per head (add_swa_attention_sink_bias)
    assert a.params == 4096 * 64 * 192 + 4096 * 8 * (192 + 128) + 64 * 128 * 4096 + 64


def test_key_reused_as_value():
    # Gemma 4 full-attention layers: attention_k_eq_v, 2 global KV heads of 512 (global_head_dim); the checkpoint has
    # no v_proj, vLLM still caches K and V (gemma4.py loads K into both slots).
    layers = load_model("google/gemma-4-26B-A4B").layers
    full, sliding = layers[5].attention, layers[0].attention
    assert full.k_is_v and (full.num_kv_heads, full.head_dim, full.window) == (2, 512, None)
    assert full.params == 2816 * 16 * 512 + 2816 * 2 * 512 + 16 * 512 * 2816 + 2 * 512  # q, k, o, q/k norms
    assert full.kv_bytes_per_token(2.0) == 2 * 2 * 512 * 2
    assert full.projections(2816, 1)[0] == ("qkv_proj", (16 + 2) * 512, 2816)
    # TP4 > 2 KV heads: each rank keeps one K head's projection (no V projection to replicate): per GPU
    # (k - r) / 4 + r = k / 2
    k = 2816 * 2 * 512
    r = full.replicated_params(2816, 4)
    assert r == pytest.approx(k * (1 / 2 - 1 / 4) * 4 / 3)
    assert (k - r) / 4 + r == pytest.approx(k / 2)
    assert not sliding.k_is_v and (sliding.num_kv_heads, sliding.head_dim, sliding.window) == (8, 256, 1024)


def test_block_sparse_attention_index_keys_and_top_k():
    # MiniMax-M3 sparse layers: 64 query / 4 KV heads of 128; one 128-wide bf16 index key per token; 4 index-query
    # heads (one per KV group); top 16 blocks of 128 tokens.
    a = load_model("MiniMaxAI/MiniMax-M3").layers[3].attention
    assert a.kv_bytes_per_token(2.0) == 2 * 4 * 128 * 2 + 128 * 2
    assert a.kv_bytes_per_token(1.0, 4) == 2 * 1 * 128 + 128 * 2  # index keys stay bf16 with an fp8 KV cache
    assert a.attended_keys(100_000) == 16 * 128 and a.attended_keys(1000) == 1000.0
    assert a.index_cost() == (2.0 * 4 * 128, 128 * 2.0)
    assert a.flops_per_token(100_000) == 2.0 * 4 * 128 * 100_000 + 2.0 * 64 * (128 + 128) * 2048
    # index_q [6144 x 4 x 128] + index_k [6144 x 128] + the two index norms
    assert a.indexer_params == 6144 * 4 * 128 + 6144 * 128 + 2 * 128
    assert a.label() == "gqa + sparse indexer"
    # the whole context stays cached (blocks are picked anywhere in it)
    assert a.kv_bytes_per_sequence(10_000, 2.0, 1) == 10_000 * (2 * 4 * 128 * 2 + 256)


def test_mamba2_state_split_over_tp():
    # Nemotron-3 Nano: 64 heads x 64 x d_state 128, 8 groups, conv kernel 4; SSM state float32
    # (mamba_ssm_cache_dtype), conv state bf16.
    m = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").layers[0].attention
    ssm, conv = 64 * 64 * 128, (64 * 64 + 2 * 8 * 128) * 3
    assert m.kv_bytes_per_token(2.0) == 0.0
    assert m.kv_bytes_per_sequence(50_000, 2.0, 1) == ssm * 4 + conv * 2
    assert m.kv_bytes_per_sequence(1, 2.0, 8) == (ssm * 4 + conv * 2) / 8
    assert m.state_cost(2)[1] == 2 * (ssm * 4 + conv * 2) / 2  # read and written once per decode step
    assert [m.kv_split_ok(tp) for tp in (1, 2, 4, 8, 16)] == [True, True, True, True, False]  # 8 groups
    assert m.label() == "linear (mamba2)" and m.param_component == "linear_attention"
    joined = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").layers[1].attention  # "MEM*": 2 blocks
    assert joined.blocks == 2 and joined.params == 2 * m.params
    assert joined.kv_bytes_per_sequence(1, 2.0, 1) == 2 * (ssm * 4 + conv * 2)


def test_one_mamba_group_is_copied_to_every_rank():
    cfg = {"hidden_size": 256, "mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 1,
           "conv_kernel": 4, "mamba_ssm_cache_dtype": "float32"}
    from clusterfit.attention import attention_for_layer

    m = attention_for_layer(cfg, 0, "mamba", 256, 4, 4, "nemotron_h")
    # vLLM pads 1 group to tp groups: each of 4 ranks keeps (8 x 32 / 4 + 2 x 1 x 16) conv channels
    assert m.kv_bytes_per_sequence(1, 2.0, 4) == 8 * 32 * 16 / 4 * 4 + (8 * 32 / 4 + 2 * 16) * 3 * 2
    assert m.kv_split_ok(4)
    # in_proj (z, x, B, C, dt), conv1d + bias, dt_bias / A / D, norm, out_proj
    conv_dim = 8 * 32 + 2 * 16
    assert m.params == 256 * (2 * 256 + 2 * 16 + 8) + conv_dim * 4 + conv_dim + 3 * 8 + 256 + 256 * 256


def test_gated_deltanet_state_in_the_configs_dtype():
    # Qwen3.5: mamba_ssm_dtype float32 for the recurrent state (vLLM Qwen3_5ForConditionalGenerationConfig); the
    # conv state in the model dtype. 48 value heads of 128, 16 key heads of 128, conv kernel 4.
    a = load_model("Qwen/Qwen3.5-27B").layers[0].attention
    recurrent, conv = 48 * 128 * 128, (2 * 16 * 128 + 48 * 128) * 3
    assert a.kv_bytes_per_sequence(1000, 2.0, 1) == recurrent * 4 + conv * 2
    assert a.kv_bytes_per_sequence(1000, 2.0, 4) == (recurrent * 4 + conv * 2) / 4


def test_dsa_fp8_cache_is_flashmla_sparse_record():
    """DeepSeek-V3.2's fp8 KV cache is FlashMLA's sparse fp8 record (vLLM 'fp8_ds_mla', 656 bytes): 512 fp8 latent
    values, an fp32 scale per 128 of them, the 64 rope values in bf16; plus the indexer's 128 fp8 + 4-byte scale.
    It was sized as 576 fp8 bytes, 11% more sequences than vLLM holds (32 against 29 at 32k on one H200 node)."""
    m = load_model("deepseek-ai/DeepSeek-V3.2")
    own = m.layers[0].attention
    assert own.kv_bytes_per_token(1.0) == 512 + 4 * 4 + 64 * 2 + 128 + 4 == 788
    assert own.decode_cost(8, 1.0)[1] == 656
    assert own.kv_bytes_per_token(2.0) == (512 + 64) * 2 + 128 + 4       # a bf16 cache: latent and rope in bf16
    fit = cf.fit(model="deepseek-ai/DeepSeek-V3.2", systems=["h200"], tp=8, ep=8, kv_dtype="fp8",
                 context=32768).results[0]
    assert fit.kv_bytes_per_token_per_gpu == 61 * 788
