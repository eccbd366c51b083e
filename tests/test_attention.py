"""Each attention kind's facts, computed by hand from the bundled configs (clusterfit/attention.py)."""

from __future__ import annotations

import pytest

from clusterfit.arch import load_model
from clusterfit.attention import (ChunkedAttention, CompressedAttention, DeltaNetAttention, MLAttention,
                                  SlidingWindowAttention, SoftmaxAttention, SparseMLAttention)
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
    # TP16: each rank keeps one of the 8 KV heads' K/V projection (1/8) instead of 1/16
    assert a.replicated_params(8192, 16) == pytest.approx(2 * 8192 * 8 * 128 * (1 / 8 - 1 / 16) * 16)
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
    assert own.index_cost() == (2.0 * 32 * 128, 128.0) and shared.index_cost() == (0.0, 0.0)
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
