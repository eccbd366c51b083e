"""The models users deploy (issue 12): bundled configs, their parameter counts and KV / state bytes by hand, the
architecture features they need (hybrid Mamba-2 / attention / MoE, latent MoE, per-layer head shapes, block-sparse
attention), name resolution, and refusals of what clusterfit cannot model."""

from __future__ import annotations

import json

import pytest

from clusterfit.arch import (checkpoint_precision, list_models, load_model, parse_config, resolve_model_id,
                             resolve_model_ref)
from clusterfit.engines import get_engine
from clusterfit.hardware import load_hardware
from clusterfit.layout import Layout
from clusterfit.memory import kv_bytes_per_sequence, kv_bytes_per_token
from clusterfit.perfmodel import compile_step
from clusterfit.precision import resolve_precision

NEW = ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-122B-A10B",
       "Qwen/Qwen3.5-397B-A17B", "MiniMaxAI/MiniMax-M2.5", "MiniMaxAI/MiniMax-M3",
       "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
       "google/gemma-4-26B-A4B", "XiaomiMiMo/MiMo-V2-Flash", "stepfun-ai/Step-3.7-Flash"]
#: Models the development collection names, bundled from configs constructed out of cited public copies.
CONSTRUCTED = ["Qwen/Qwen3.5-9B", "Qwen/Qwen3-14B", "zai-org/GLM-4.5-Air"]


def test_new_configs_are_bundled_with_their_source():
    from importlib.resources import files

    assert set(NEW + CONSTRUCTED) <= set(list_models())
    for hf_id in NEW + CONSTRUCTED:
        data = json.loads(files("clusterfit").joinpath("catalog/models", hf_id.replace("/", "__", 1) + ".json")
                          .read_text(encoding="utf-8"))
        expected = "Constructed, not a verbatim copy" if hf_id in CONSTRUCTED else "aiconfigurator-core 0.12.0"
        assert expected in data["_source"], hf_id


def test_qwen35_9b_matches_its_checkpoint_size():
    # model.safetensors.index.json of Qwen/Qwen3.5-9B (revision c2022362): total_size 19,306,216,416 bytes in bf16
    # = 9,653,108,208 parameters for the text model, the vision tower and the MTP layer together (the config's _source).
    m = load_model("Qwen/Qwen3.5-9B")
    counted = m.total_params + m.params["vision"] + m.params["mtp"]
    assert abs(counted - 19_306_216_416 // 2) / (19_306_216_416 // 2) < 1e-5
    assert m.attention_kinds() == {"linear (gated_deltanet)": 24, "gqa": 8}
    # 8 full-attention layers x K and V of 4 heads x 256, bf16: 32 KiB per token
    assert kv_bytes_per_token(m, resolve_precision(m)) == 8 * 2 * 4 * 256 * 2 == 32_768


# ---------------------------------------------------------------------------------------- nemotron_h
def test_nemotron_nano_parameters_by_hand():
    # hybrid_override_pattern "MEMEM*EMEMEM*E...": 23 Mamba-2, 6 attention, 23 MoE blocks (model card: 23 / 6 / 23)
    h, V = 2688, 131072
    attn = h * 32 * 128 + 2 * h * 2 * 128 + 32 * 128 * h                      # q, k, v, o; no bias, no qk norm
    inter, conv_dim = 64 * 64, 64 * 64 + 2 * 8 * 128
    mamba = h * (2 * inter + 2 * 8 * 128 + 64) + conv_dim * 4 + conv_dim + 3 * 64 + inter + inter * h
    routed = 128 * 2 * h * 1856                                               # up + down (squared ReLU, not gated)
    shared = 2 * h * 3712
    router = 128 * h + 128                                                    # gate + e_score_correction_bias
    total = 6 * attn + 23 * mamba + 23 * (routed + shared + router) + (52 * h + h) + 2 * V * h
    m = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert m.total_params == total
    assert m.active_params == total - 23 * 122 * 2 * h * 1856                 # 6 of 128 experts per token
    assert m.params["linear_attention"] == 23 * mamba and m.params["attention"] == 6 * attn
    assert m.attention_kinds() == {"linear (mamba2)": 11, "linear (mamba2 x2)": 6, "gqa": 6}
    assert m.ffn_kinds() == {"moe": 23}
    # the card: 3.6B active including embeddings
    assert abs(m.active_params / 1e9 - 3.6) <= 0.05


def test_nemotron_super_latent_moe_by_hand():
    # moe_latent_size 1024: 512 routed experts of 2688 work in the latent width; fc1/fc2_latent_proj around them
    # (vLLM nemotron_h.py NemotronHMoE); shared expert 5376 wide on the hidden width; 40 MoE blocks.
    h = 4096
    m = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8")
    f = next(L.ffn for L in m.layers)
    assert (f.latent_dim, f.gated, f.num_experts, f.top_k) == (1024, False, 512, 22)
    assert m.params["routed_experts"] == 40 * (512 * 2 * 1024 * 2688 + 2 * h * 1024)
    assert m.params["shared_experts"] == 40 * 2 * h * 5376
    assert m.params["router"] == 40 * (512 * h + 512)
    # no quantization_config in the FP8 repository's config.json: the checkpoint name says fp8
    assert m.quantization["routed_experts"] == "fp8" and m.quantization["embedding"] == "bf16"


def test_nemotron_kv_and_state_bytes_by_hand():
    m = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    p = resolve_precision(m)
    # KV: 6 attention layers x K and V of 2 heads x 128, bf16; state: 23 Mamba blocks x (SSM 64 x 64 x 128 float32
    # + conv (4096 + 2 x 8 x 128) x 3 bf16)
    per_token = 6 * 2 * 2 * 128 * 2
    state = 23 * (64 * 64 * 128 * 4 + (4096 + 2 * 8 * 128) * 3 * 2)
    assert kv_bytes_per_token(m, p) == per_token == 6144
    assert state == 49_082_368
    for ctx in (1, 32_768):
        assert kv_bytes_per_sequence(m, p, Layout(), ctx) == state + ctx * per_token
    # TP2: one KV head and half the Mamba heads and groups per rank; TP8: the 2 KV heads replicated, 1/8 of the state
    assert kv_bytes_per_sequence(m, p, Layout(tp=2), 1000) == state / 2 + 1000 * per_token / 2
    assert kv_bytes_per_sequence(m, p, Layout(tp=8), 1000) == state / 8 + 1000 * per_token / 2
    # the performance model holds the same bytes per sequence (its state read + written once per decode step)
    sm = compile_step(m, load_hardware().system("h200"), Layout(tp=1), p, get_engine("vllm"),
                      kv_budget_bytes_per_gpu=1e10)
    assert float(sm.kv_bytes_per_sequence(1000)) == pytest.approx(state + 1000 * per_token)


# --------------------------------------------------------------------------------- Qwen3.5 hybrid
def test_qwen35_gated_attention_and_gated_deltanet_by_hand():
    h = 5120
    m = load_model("Qwen/Qwen3.5-27B")
    full, lin = m.layers[3].attention, m.layers[0].attention
    # attn_output_gate: q_proj emits the query and its gate (2 x 24 x 256); q_norm, k_norm of 256
    assert full.params == h * 24 * 256 * 2 + h * 4 * 256 * 2 + 24 * 256 * h + 2 * 256
    nk, nv, d = 16, 48, 128
    conv_dim = 2 * nk * d + nv * d
    assert lin.params == h * (2 * nk * d + 2 * nv * d) + h * 2 * nv + conv_dim * 4 + 2 * nv + d + nv * d * h
    p = resolve_precision(m)
    assert kv_bytes_per_token(m, p) == 16 * 2 * 4 * 256 * 2 == 65_536
    state = 48 * (nv * d * d * 4 + conv_dim * 3 * 2)  # recurrent state float32 (mamba_ssm_dtype), conv bf16
    assert kv_bytes_per_sequence(m, p, Layout(), 4096) == state + 4096 * 65_536
    assert m.params["vision"] > 0 and m.mtp_layers == 1  # vision tower and the MTP layer counted apart


def test_qwen35_moe_shared_expert_and_its_gate():
    m = load_model("Qwen/Qwen3.5-35B-A3B")
    f = m.layers[0].ffn
    assert (f.num_experts, f.top_k, f.expert_intermediate, f.num_shared, f.shared_intermediate) == (256, 8, 512, 1, 512)
    assert m.params["router"] == 40 * (256 * 2048 + 2048)  # gate + shared_expert_gate [1 x hidden]


# ------------------------------------------------------------------------------------------- MiniMax
def test_minimax_m25_expert_width_and_per_layer_qk_norm():
    m = load_model("MiniMaxAI/MiniMax-M2.5")
    f = m.layers[0].ffn
    # num_local_experts + intermediate_size (the expert width, as in Mixtral); no shared expert
    assert (f.num_experts, f.top_k, f.expert_intermediate, f.num_shared) == (256, 8, 1536, 0)
    # qk_norm_type per_layer: q_norm over 48 x 128, k_norm over 8 x 128
    a = m.layers[0].attention
    assert a.params == 3072 * 48 * 128 + 2 * 3072 * 8 * 128 + 48 * 128 * 3072 + (48 + 8) * 128
    assert m.params["router"] == 62 * (256 * 3072 + 256)  # use_routing_bias


def test_minimax_m3_dense_layers_and_sparse_attention():
    m = load_model("MiniMaxAI/MiniMax-M3")
    assert m.ffn_kinds() == {"dense": 3, "moe": 57}
    assert m.layers[0].ffn.intermediate == 12288  # dense_intermediate_size, not intermediate_size (3072)
    assert m.attention_kinds() == {"gqa": 3, "gqa + sparse indexer": 57}
    p = resolve_precision(m)
    assert kv_bytes_per_token(m, p) == 60 * 2 * 4 * 128 * 2 + 57 * 128 * 2


# ---------------------------------------------------------------------- per-layer shapes and windows
def test_gemma4_dense_mlp_beside_the_experts_and_its_kv():
    m = load_model("google/gemma-4-26B-A4B")
    f = m.layers[0].ffn
    # the dense MLP (2112) runs on every token beside 8 of 128 experts of 704: one always-on shared expert
    assert (f.num_experts, f.top_k, f.expert_intermediate, f.num_shared, f.shared_intermediate) == (128, 8, 704, 1, 2112)
    p = resolve_precision(m)
    # 25 sliding layers (8 KV heads x 256, window 1024) + 5 full layers (2 KV heads x 512, V cached as a copy of K)
    sliding, full = 2 * 8 * 256 * 2, 2 * 2 * 512 * 2
    assert kv_bytes_per_token(m, p) == 25 * sliding + 5 * full
    assert kv_bytes_per_sequence(m, p, Layout(), 10_000) == 25 * 1024 * sliding + 5 * 10_000 * full


def test_mimo_v2_flash_hybrid_windows():
    m = load_model("XiaomiMiMo/MiMo-V2-Flash")
    assert m.attention_kinds() == {"gqa": 9, "gqa window 128": 39}
    assert m.ffn_kinds() == {"dense": 1, "moe": 47}  # moe_layer_freq
    p = resolve_precision(m, kv_dtype="bf16")
    full, swa = 4 * (192 + 128) * 2, 8 * (192 + 128) * 2
    assert kv_bytes_per_sequence(m, p, Layout(), 5000) == 9 * 5000 * full + 39 * 128 * swa


def test_step37_sliding_layers_and_shared_expert():
    m = load_model("stepfun-ai/Step-3.7-Flash")
    assert m.attention_kinds() == {"gqa": 12, "gqa window 512": 33}
    f = m.layers[3].ffn
    assert (f.num_experts, f.top_k, f.expert_intermediate, f.num_shared, f.shared_intermediate) == (288, 8, 1280, 1, 1280)
    assert m.mtp_layers == 3


def test_qwen3_small_models():
    m = load_model("Qwen/Qwen3-0.6B")
    # card: "Number of Parameters (Non-Embedding): 0.44B" (tied embeddings: no separate LM head)
    assert abs(m.active_params_non_embedding / 1e9 - 0.44) <= 0.005
    assert m.tie_embeddings and load_model("Qwen/Qwen3-1.7B").tie_embeddings


# ------------------------------------------------------------------------------------------ commands
@pytest.mark.parametrize("hf_id", NEW + CONSTRUCTED)
def test_model_and_fit_commands(run_json, hf_id):
    info = run_json("model", hf_id)
    assert info["hf_id"] == hf_id and info["total_params"] > 0
    fit = run_json("fit", hf_id, "--system", "h200")
    row = fit["results"][0]
    assert row["fits"] and row["max_sequences"] >= 1 and row["kv_bytes_per_sequence_per_gpu"] > 0, row


def test_models_command_lists_the_new_models(run_json):
    ids = {r["hf_id"] for r in run_json("models")["models"]}
    assert set(NEW + CONSTRUCTED) <= ids


# ------------------------------------------------------------------------------------- name resolution
@pytest.mark.parametrize("name,hf_id,precision", [
    ("Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B", None),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen/Qwen3-235B-A22B", "fp8"),
    ("DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1", None),
    ("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B", None),
    ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "meta-llama/Llama-3.3-70B-Instruct", "fp8"),
    ("Qwen3-32B-AWQ", "Qwen/Qwen3-32B", "int4"),
    ("Qwen3-30B-A3B-Thinking-2507", "Qwen/Qwen3-30B-A3B", None),
    ("Nemotron-3-Nano-30B-A3B", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", None),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nvfp4"),
    ("Qwen3.5-397B", "Qwen/Qwen3.5-397B-A17B", None),
    ("GLM-4.6", "zai-org/GLM-4.6", None),
    # a different network of the same family never maps to the base: its own config, or none
    ("GLM-4.5-Air-FP8", "zai-org/GLM-4.5-Air", "fp8"),
    ("GLM-4.5-Flash", None, None),
    ("Qwen3-Coder-30B-A3B-Instruct", None, None),
    ("Step-3.5-Flash", None, None),
])
def test_resolve_model_names(name, hf_id, precision):
    assert resolve_model_id(name) == hf_id
    ref = resolve_model_ref(name)
    assert (ref.precision if ref else None) == precision


def test_checkpoint_precision_from_the_name():
    assert checkpoint_precision("Qwen3-32B-FP8") == "fp8"
    assert checkpoint_precision("gpt-oss-120b-MXFP4") == "mxfp4"
    assert checkpoint_precision("Llama-3.1-8B-Instruct-GPTQ-Int8") == "int8"
    assert checkpoint_precision("Llama-3.1-8B-Instruct") is None


def test_a_precision_suffix_sets_the_checkpoint_formats(run_json):
    m = load_model("Qwen3-32B-FP8")
    assert m.hf_id == "Qwen/Qwen3-32B" and m.name == "Qwen3-32B-FP8"
    assert (m.quantization["dense_mlp"], m.quantization["attention"], m.quantization["embedding"]) == \
        ("fp8", "fp8", "bf16")
    assert load_model("Qwen/Qwen3-32B").quantization["dense_mlp"] == "bf16"  # the bundled model is unchanged
    # a suffix naming the config's own format keeps the config's (block-scaled) layout
    assert load_model("DeepSeek-V3-FP8").quantization["routed_experts"] == "fp8_block"
    info = run_json("model", "Qwen3-32B-FP8")
    assert info["precision"]["dense_mlp"] == "fp8"


# ---------------------------------------------------------------------------------------- refusals
def _config(tmp_path, **fields):
    base = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 512}
    base.update(fields)
    f = tmp_path / "config.json"
    f.write_text(json.dumps(base))
    return str(f)


@pytest.mark.parametrize("fields,what", [
    ({"model_type": "jamba", "layers_block_type": ["mamba", "attention", "mamba", "attention"],
      "mamba_d_state": 16}, "state-space (Mamba) layers outside nemotron_h"),
    ({"model_type": "nemotron_h", "hybrid_override_pattern": "M*ME", "mamba_num_heads": 8, "mamba_head_dim": 32,
      "ssm_state_size": 16, "n_groups": 1, "conv_kernel": 4}, "a mixer block with no FFN after it"),
    ({"model_type": "nemotron_h", "hybrid_override_pattern": "MEXE"}, "nemotron_h block type(s) 'X'"),
    ({"model_type": "gemma4_text", "hidden_size_per_layer_input": 256}, "Gemma 4 per-layer embeddings"),
    ({"layer_types": ["full_attention", "mamba2", "full_attention", "full_attention"]}, "layer type 'mamba2'"),
    ({"model_type": "step3p5", "moe_num_experts": 288, "num_attention_groups": 8}, "Step-3.5 style config fields"),
    ({"is_encoder_decoder": True}, "an encoder-decoder model"),
])
def test_unsupported_architectures_are_refused(run_cli, tmp_path, fields, what):
    code, out, err = run_cli("model", _config(tmp_path, **fields))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: unsupported architecture: ") and what in lines[0], err


def test_malformed_new_fields_are_one_error_line(run_cli, tmp_path):
    code, _, err = run_cli("model", _config(tmp_path, hybrid_layer_pattern=[0, 1, 2, 0]))
    assert code == 2 and err.startswith("error:") and "hybrid_layer_pattern" in err
    code, _, err = run_cli("model", _config(tmp_path, model_type="mimo_v2_flash", hybrid_layer_pattern=[0, 1, 1, 0],
                                            swa_num_attention_heads="many"))
    assert code == 2 and err.startswith("error:") and "Traceback" not in err
    # a layer_types list shorter than the model (it was ignored: every layer counted as full attention)
    code, _, err = run_cli("model", _config(tmp_path, layer_types=["sliding_attention", "full_attention"]))
    assert code == 2 and err.startswith("error:") and "layer_types lists 2 layers but num_hidden_layers is 4" in err


def test_a_real_configs_infinity_is_read(tmp_path):
    # Hugging Face writes float('inf') as Infinity (nemotron_h time_step_limit); it is in a field clusterfit does
    # not read, so the config loads.
    f = tmp_path / "config.json"
    f.write_text('{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, '
                 '"vocab_size": 1000, "intermediate_size": 512, "time_step_limit": [0.0, Infinity]}')
    assert load_model(str(f)).num_layers == 2
    assert parse_config(json.loads(f.read_text()), "x").num_layers == 2
