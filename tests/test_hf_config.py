"""Reading a model's architecture and stored format from its Hugging Face config.json.

Key names and defaults follow the transformers configuration classes (huggingface/transformers):
  src/transformers/models/gpt_oss/configuration_gpt_oss.py @02b8f42 (GptOssConfig: defaults are gpt-oss-120b;
      layer_types alternate sliding/full, sliding first)
  src/transformers/models/deepseek_v3/configuration_deepseek_v3.py @001f85b (DeepseekV3Config: defaults are
      DeepSeek-V3; first_k_dense_replace, n_routed_experts, n_shared_experts, MLA ranks)
  src/transformers/models/qwen3_moe/configuration_qwen3_moe.py @008e574 (num_experts, mlp_only_layers,
      decoder_sparse_step; sliding_window only with use_sliding_window)
  src/transformers/models/mixtral/configuration_mixtral.py @008e574 (MixtralConfig: defaults are Mixtral-8x7B;
      num_local_experts, each expert sized by intermediate_size)
  src/transformers/models/gemma3/configuration_gemma3.py @008f5c8 (Gemma3Config nests Gemma3TextConfig under
      text_config; sliding_window_pattern 6; tie_word_embeddings true by default)
Each config below names where its values were copied from; each parameter count is compared with the
model card's figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferstack.spec import SpecError
from inferstack.spec.hf_config import architecture_from_config, checkpoint_format_from_config

# huggingface.co/meta-llama/Llama-3.1-8B config.json, as copied in citsjtu2020/LLM-Prof@8434c8d:sglang/Model_Config.md
LLAMA_3_1_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
}
# huggingface.co/Qwen/Qwen3-30B-A3B config.json, as copied in citsjtu2020/LLM-Prof@8434c8d:sglang/Model_Config.md
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "rope_theta": 1000000.0, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936,
}
# gpt-oss-120b: GptOssConfig's defaults (transformers @02b8f42, configuration_gpt_oss.py, the 120b shapes) with
# layer_types spelled out as its __post_init__ builds them; quantization_config as huggingface.co/openai/
# gpt-oss-120b/blob/main/config.json states it (MXFP4 experts; attention, router, embeddings and LM head not converted).
GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 36, "num_local_experts": 128,
    "vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64,
    "num_key_value_heads": 8, "sliding_window": 128, "tie_word_embeddings": False, "max_position_embeddings": 131072,
    "num_experts_per_tok": 4, "attention_bias": True, "swiglu_limit": 7.0,
    "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(36)],
    "quantization_config": {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"],
        "quant_method": "mxfp4",
    },
}
# DeepSeek-V3: DeepseekV3Config's defaults (transformers @001f85b, configuration_deepseek_v3.py); the FP8 block
# quantization_config as DeepSeek-V3's config.json states it (activation_scheme dynamic, e4m3, 128x128 blocks).
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
}
# Mixtral-8x7B: MixtralConfig's defaults (transformers @008e574, configuration_mixtral.py).
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 131072, "tie_word_embeddings": False, "sliding_window": None,
    "num_experts_per_tok": 2, "num_local_experts": 8,
}


def write(folder: Path, config: dict, name: str = "config.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def within(value: float, card: float, tolerance: float = 0.02) -> bool:
    return abs(value - card) <= tolerance * card


def test_llama_3_1_8b_is_a_dense_gqa_model_of_8_03b(tmp_path: Path):
    """Card: 8.03B. By hand: attention 32 x (4096x128x(32+2x8) + 32x128x4096) = 1.342B, MLP 32 x 3x4096x14336 =
    5.637B, embedding and LM head 2 x 128256x4096 = 1.051B, norms 0.3M: 8.030B."""
    arch = architecture_from_config(write(tmp_path, LLAMA_3_1_8B))
    assert within(arch.params_billion, 8.03, 0.002)
    assert (arch.layers, arch.hidden_size, arch.attention_heads, arch.kv_heads, arch.head_dim) == (32, 4096, 32, 8, 128)
    assert arch.max_context == 131072 and arch.task == "generate"
    assert arch.experts is None and arch.active_params_billion is None and arch.attention == "gqa"
    assert arch.vocab_size == 128256 and arch.tied_embeddings is False
    assert arch.sliding_window is None


def test_qwen3_30b_a3b_is_moe_of_30_5b_total(tmp_path: Path):
    """Card: 30.5B total, 3.3B activated. By hand: experts 48 x 128 x 3x2048x768 = 28.991B, attention
    48 x (2048x128x(32+2x4) + 32x128x2048) = 0.906B, router 48 x 2048x128 = 12.6M, embedding and LM head
    2 x 151936x2048 = 0.622B: 30.53B. Active: 48 x 8 experts = 1.812B + attention + router + LM head 0.311B =
    3.042B; Qwen's card counts the input embedding too (+0.311B = 3.353B)."""
    arch = architecture_from_config(write(tmp_path, QWEN3_30B_A3B))
    assert within(arch.params_billion, 30.5)
    assert within(arch.active_params_billion + 151936 * 2048 / 1e9, 3.3)
    assert (arch.experts, arch.experts_per_token, arch.shared_experts) == (128, 8, 0)
    assert arch.moe_layers == 48 and arch.moe_intermediate_size == 768
    assert arch.sliding_window is None  # use_sliding_window false: the window is not used
    assert arch.max_context == 40960


def test_gpt_oss_120b_is_moe_of_116_8b_with_5_1b_active_and_half_its_layers_windowed(tmp_path: Path):
    """Card (openai/gpt-oss-120b): 116.83B total, 5.13B active. By hand: experts 36 x 128 x 3x2880x2880 =
    114.67B (each expert sized by intermediate_size), attention 36 x (2880x64x(64+16) + 64x64x2880) = 0.955B,
    embedding and unembedding 2 x 201088x2880 = 1.158B: 116.79B. Active: 36 x 4 experts = 3.583B + attention
    + router 13M + unembedding 0.579B = 5.13B (the card counts the unembedding, not the input embedding)."""
    arch = architecture_from_config(write(tmp_path, GPT_OSS_120B))
    assert within(arch.params_billion, 116.8)
    assert within(arch.active_params_billion, 5.1)
    assert (arch.experts, arch.experts_per_token, arch.moe_layers, arch.moe_intermediate_size) == (128, 4, 36, 2880)
    assert (arch.sliding_window, arch.sliding_window_layers) == (128, 18)
    stored = checkpoint_format_from_config(tmp_path / "config.json")
    assert (stored.quant_method, stored.weight_bits, stored.weight_type) == ("mxfp4", 4, "float")
    assert (stored.group_size, stored.scale_bits, stored.applies_to) == (32, 8, "experts")


def test_gpt_oss_without_layer_types_alternates_as_its_config_class_does(tmp_path: Path):
    config = {k: v for k, v in GPT_OSS_120B.items() if k != "layer_types"}
    assert architecture_from_config(write(tmp_path, config)).sliding_window_layers == 18


def test_deepseek_v3_is_mla_with_its_first_3_layers_dense(tmp_path: Path):
    """Card: 671B main-model parameters (685B with the 14B multi-token-prediction module), 37B activated."""
    arch = architecture_from_config(write(tmp_path, DEEPSEEK_V3))
    assert (arch.attention, arch.kv_lora_rank, arch.qk_rope_head_dim) == ("mla", 512, 64)
    assert (arch.experts, arch.shared_experts, arch.moe_layers) == (256, 1, 58)
    assert arch.head_dim == 128 + 64  # qk_nope_head_dim + qk_rope_head_dim (DeepseekV3Config.qk_head_dim)
    assert within(arch.params_billion, 671)
    assert within(arch.active_params_billion, 37)
    stored = checkpoint_format_from_config(tmp_path / "config.json")
    assert (stored.quant_method, stored.weight_bits, stored.activation_bits, stored.group_size) == ("fp8", 8, 8, None)


def test_mixtral_sizes_each_expert_by_intermediate_size(tmp_path: Path):
    """Card (Mixtral-8x7B): 46.7B total, 12.9B active per token."""
    arch = architecture_from_config(write(tmp_path, MIXTRAL_8X7B))
    assert (arch.experts, arch.experts_per_token, arch.moe_intermediate_size, arch.moe_layers) == (8, 2, 14336, 32)
    assert within(arch.params_billion, 46.7)
    assert within(arch.active_params_billion, 12.9)


def test_gemma3_reads_text_config_and_its_5_local_to_1_global_pattern(tmp_path: Path):
    """Gemma3ForConditionalGeneration nests the language model under text_config; a layer is global when
    its number is a multiple of sliding_window_pattern (62 layers, pattern 6: 10 global, 52 windowed);
    tie_word_embeddings defaults to true (Gemma3TextConfig)."""
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": {"model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504,
                        "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16,
                        "head_dim": 128, "sliding_window": 1024, "sliding_window_pattern": 6,
                        "vocab_size": 262208, "max_position_embeddings": 131072},
        "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27},
    }
    arch = architecture_from_config(write(tmp_path, config))
    assert (arch.layers, arch.hidden_size, arch.kv_heads, arch.head_dim) == (62, 5376, 16, 128)
    assert (arch.sliding_window, arch.sliding_window_layers) == (1024, 52)
    assert arch.tied_embeddings is True and arch.task == "generate"


def test_layer_types_count_the_windowed_layers(tmp_path: Path):
    config = dict(LLAMA_3_1_8B, sliding_window=4096,
                  layer_types=["sliding_attention"] * 24 + ["full_attention"] * 8)
    arch = architecture_from_config(write(tmp_path, config))
    assert (arch.sliding_window, arch.sliding_window_layers) == (4096, 24)


def test_a_window_without_a_pattern_covers_every_layer(tmp_path: Path):
    """Mistral-7B-v0.1 and Phi-3 state only sliding_window: every layer uses it."""
    arch = architecture_from_config(write(tmp_path, dict(LLAMA_3_1_8B, model_type="mistral", sliding_window=4096)))
    assert (arch.sliding_window, arch.sliding_window_layers) == (4096, 32)


@pytest.mark.parametrize("head", ["BertModel", "XLMRobertaModel", "Qwen3ForSequenceClassification"])
def test_encoder_and_classification_heads_are_embedding_models(tmp_path: Path, head: str):
    arch = architecture_from_config(write(tmp_path, dict(LLAMA_3_1_8B, architectures=[head])))
    assert arch.task == "embed"
    # No LM head: one vocab x hidden matrix fewer than the generating model.
    generating = architecture_from_config(write(tmp_path, LLAMA_3_1_8B, "generating.json"))
    assert round((generating.params_billion - arch.params_billion) * 1e9, -6) == round(128256 * 4096, -6)


def test_bert_mlp_is_two_matrices(tmp_path: Path):
    """BERT-base (110M on its card): 12 layers of hidden 768, intermediate 3072, vocab 30522; its MLP is up and
    down only. Position and token-type embeddings (0.4M) and biases are not counted."""
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 768, "intermediate_size": 3072,
              "num_hidden_layers": 12, "num_attention_heads": 12, "max_position_embeddings": 512, "vocab_size": 30522}
    arch = architecture_from_config(write(tmp_path, config))
    assert within(arch.params_billion, 0.110, 0.03) and arch.task == "embed" and arch.kv_heads == 12


def test_a_snapshot_directory_is_read_through_its_config_json(tmp_path: Path):
    snapshot = tmp_path / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "0e9e39f"
    snapshot.mkdir(parents=True)
    write(snapshot, LLAMA_3_1_8B)
    assert architecture_from_config(snapshot).layers == 32


def test_unknown_keys_are_ignored(tmp_path: Path):
    config = dict(LLAMA_3_1_8B, some_future_key={"nested": True}, rope_parameters={"rope_type": "llama3"})
    assert architecture_from_config(write(tmp_path, config)) == architecture_from_config(
        write(tmp_path, LLAMA_3_1_8B, "plain.json"))


def test_defaults_kv_heads_to_heads_and_head_dim_to_hidden_over_heads(tmp_path: Path):
    config = {k: v for k, v in LLAMA_3_1_8B.items() if k not in ("num_key_value_heads",)}
    arch = architecture_from_config(write(tmp_path, config))
    assert (arch.kv_heads, arch.head_dim) == (32, 4096 // 32)


def test_missing_keys_are_one_message_naming_every_key_and_the_file(tmp_path: Path):
    config = {k: v for k, v in LLAMA_3_1_8B.items() if k not in ("hidden_size", "vocab_size", "intermediate_size")}
    path = write(tmp_path, config)
    with pytest.raises(SpecError) as raised:
        architecture_from_config(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ")
    for key in ("hidden_size", "vocab_size", "intermediate_size"):
        assert key in message
    assert "To fix:" in message


def test_an_mla_config_missing_its_ranks_names_them(tmp_path: Path):
    config = {k: v for k, v in DEEPSEEK_V3.items() if k not in ("qk_nope_head_dim", "v_head_dim")}
    with pytest.raises(SpecError, match="qk_nope_head_dim, v_head_dim"):
        architecture_from_config(write(tmp_path, config))


def test_malformed_json_is_reported_at_file_line_column(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "hidden_size": 4096,\n  "num_hidden_layers": 32\n  "vocab_size": 1\n}\n', encoding="utf-8")
    with pytest.raises(SpecError) as raised:
        architecture_from_config(path)
    assert str(raised.value).startswith(f"{path}:4:3: not valid JSON")


def test_a_path_that_holds_no_config_is_refused(tmp_path: Path):
    with pytest.raises(SpecError, match="holds no config.json"):
        architecture_from_config(tmp_path)
    with pytest.raises(SpecError, match="does not exist"):
        architecture_from_config(tmp_path / "nowhere.json")


def test_a_config_that_is_not_an_object_is_refused(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(SpecError, match="JSON list, not an object"):
        architecture_from_config(path)


def test_values_that_make_no_architecture_name_the_file(tmp_path: Path):
    with pytest.raises(SpecError, match="num_experts_per_tok|experts_per_token"):
        architecture_from_config(write(tmp_path, dict(MIXTRAL_8X7B, num_experts_per_tok=9)))


# ---------------------------------------------------------------------------------------- stored format


def quantized(tmp_path: Path, quantization_config: dict) -> Path:
    return write(tmp_path, dict(LLAMA_3_1_8B, quantization_config=quantization_config))


def test_a_16_bit_checkpoint_has_no_stored_format(tmp_path: Path):
    assert checkpoint_format_from_config(write(tmp_path, LLAMA_3_1_8B)) is None


def test_awq_is_4_bit_int_groups_with_zero_points(tmp_path: Path):
    """AutoAWQ writes bits, group_size, zero_point, version (hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4)."""
    stored = checkpoint_format_from_config(quantized(
        tmp_path, {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}))
    assert (stored.quant_method, stored.weight_bits, stored.weight_type, stored.group_size, stored.zero_points) == (
        "awq", 4, "int", 128, True)


def test_gptq_group_size_minus_one_is_per_channel(tmp_path: Path):
    stored = checkpoint_format_from_config(quantized(
        tmp_path, {"quant_method": "gptq", "bits": 8, "group_size": -1, "desc_act": False, "sym": True}))
    assert (stored.weight_bits, stored.group_size, stored.zero_points) == (8, None, False)


def test_compressed_tensors_fp8_w8a8(tmp_path: Path):
    """llm-compressor's FP8 scheme: config_groups.group_0 with 8-bit float weights and input activations."""
    stored = checkpoint_format_from_config(quantized(tmp_path, {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"],
                                      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                                      "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}},
    }))
    assert (stored.quant_method, stored.weight_bits, stored.weight_type, stored.activation_bits) == (
        "compressed-tensors", 8, "float", 8)


def test_compressed_tensors_w4a16_groups(tmp_path: Path):
    stored = checkpoint_format_from_config(quantized(tmp_path, {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                      "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                                  "group_size": 128, "symmetric": True}}},
    }))
    assert (stored.weight_bits, stored.weight_type, stored.activation_bits, stored.group_size, stored.zero_points) == (
        4, "int", 16, 128, False)


NVFP4 = (4, "float", 16, 8)   # FP4 E2M1 weights, one FP8 E4M3 scale per 16 (plus an FP32 scale per tensor)


@pytest.mark.parametrize(("activations", "bits"), [({"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                      "group_size": 16, "dynamic": "local"}, 4), (None, 16)])
def test_nvfp4_compressed_tensors_is_read_as_w4a4_or_w4a16(tmp_path: Path, activations, bits):
    """llm-compressor's nvfp4-pack-quantized: 4-bit float weights, strategy tensor_group, groups of 16; NVFP4A16
    leaves input_activations out."""
    stored = checkpoint_format_from_config(quantized(tmp_path, {
        "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                  "group_size": 16}, "input_activations": activations}},
    }))
    assert (stored.weight_bits, stored.weight_type, stored.group_size, stored.scale_bits) == NVFP4
    assert stored.is_nvfp4 and stored.activation_bits == bits


@pytest.mark.parametrize("quantization_config", [
    {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None},
    {"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "group_size": 16}},   # hf_quant_config.json
])
def test_modelopt_nvfp4_flat_or_nested(tmp_path: Path, quantization_config):
    """vLLM 0.33 modelopt.py `_extract_modelopt_quant_algo` reads quant_algo flat or under `quantization`."""
    stored = checkpoint_format_from_config(quantized(tmp_path, quantization_config))
    assert stored.quant_method == "modelopt" and stored.activation_bits == 4
    assert (stored.weight_bits, stored.weight_type, stored.group_size, stored.scale_bits) == NVFP4


def test_modelopt_fp8_and_weight_only_nvfp4(tmp_path: Path):
    fp8 = checkpoint_format_from_config(quantized(tmp_path, {"quant_method": "modelopt", "quant_algo": "FP8"}))
    assert (fp8.weight_bits, fp8.weight_type, fp8.activation_bits) == (8, "float", 8)
    w4a16 = checkpoint_format_from_config(quantized(tmp_path, {"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4"}))
    assert w4a16.is_nvfp4 and w4a16.activation_bits == 16


def test_a_modelopt_algo_it_cannot_size_is_refused_by_name(tmp_path: Path):
    with pytest.raises(SpecError) as raised:
        checkpoint_format_from_config(quantized(tmp_path, {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}))
    assert "quantization_config.quant_algo" in str(raised.value) and "'MIXED_PRECISION'" in str(raised.value)


def test_a_method_it_cannot_express_is_refused_by_name(tmp_path: Path):
    path = quantized(tmp_path, {"quant_method": "bitsandbytes", "load_in_4bit": True})
    with pytest.raises(SpecError) as raised:
        checkpoint_format_from_config(path)
    assert "quantization_config.quant_method: 'bitsandbytes'" in str(raised.value)


# ------------------------------------------------------------------------------ architecture_from in a stack

STACK_YAML = """\
environment: dev
region: us-east-1
node_pools:
  - {name: l40s, instance_types: [g6e.xlarge], min_nodes: 0, max_nodes: 2}
models:
  - {name: mine, model: me/llama-8b-awq, pool: l40s, tier: standard, architecture_from: %s}
"""


def test_a_yaml_stack_reads_architecture_from_a_config_beside_it(tmp_path: Path):
    """The path is relative to the stack file's folder; the quantization_config gives the checkpoint_format."""
    from inferstack.stacks import load_stack

    snapshot = tmp_path / "snapshots" / "llama"
    snapshot.mkdir(parents=True)
    write(snapshot, dict(LLAMA_3_1_8B, quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128}))
    (tmp_path / "mine.yaml").write_text(STACK_YAML % "snapshots/llama", encoding="utf-8")
    service = load_stack(tmp_path, "mine").models[0]
    assert service.architecture == architecture_from_config(snapshot)
    assert service.stored_format == checkpoint_format_from_config(snapshot)


def test_architecture_from_beside_architecture_is_refused(tmp_path: Path):
    from inferstack.stacks import load_stack

    write(tmp_path, LLAMA_3_1_8B)
    text = (STACK_YAML % "config.json").replace("architecture_from", "architecture: {layers: 1}, architecture_from")
    (tmp_path / "mine.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match=r"mine.yaml: models\[0\].architecture_from: is given beside `architecture`"):
        load_stack(tmp_path, "mine")


def test_architecture_from_a_missing_config_names_the_field_and_the_path(tmp_path: Path):
    from inferstack.stacks import load_stack

    (tmp_path / "mine.yaml").write_text(STACK_YAML % "nowhere/config.json", encoding="utf-8")
    with pytest.raises(SpecError, match=r"mine.yaml: models\[0\].architecture_from: .*nowhere/config.json does not exist"):
        load_stack(tmp_path, "mine")
