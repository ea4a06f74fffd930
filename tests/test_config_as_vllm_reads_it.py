"""config.json (and hf_quant_config.json beside it) read as vLLM 0.33.0 reads them at load time.

Each test writes the files it reads, copied from the real ones (the source is named beside each copy), and
names the vLLM file whose rule it encodes:
  model_executor/models/llama4.py:94-135,184-262,324-360 (Llama 4: every interleave_moe_layer_step-th layer MoE
      with one shared expert of intermediate_size; the others a dense MLP of intermediate_size_mlp; layers whose
      no_rope_layers entry is 1 use ChunkedLocalAttention of attention_chunk_size)
  transformers_utils/config.py:951-962 (hf_quant_config.json is read when config.json has no quantization_config)
  transformers_utils/model_arch_config_convertor.py:241-281 (a ModelOpt producer means quant_method modelopt)
  utils/torch_utils.py:443-511 (get_kv_cache_quant_algo_string, resolve_kv_cache_dtype_string: --kv-cache-dtype
      auto runs the checkpoint's kv_cache_quant_algo FP8 as fp8_e4m3, for ModelOpt checkpoints)
  model_executor/layers/quantization/fp8.py:100-173 (weight_block_size of an FP8 checkpoint)
  model_executor/layers/attention/attention.py:329 (num_heads % num_kv_heads == 0 is asserted)
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from inferstack.spec import ModelServiceSpec, SpecError
from inferstack.spec.architecture import ModelArchitecture
from inferstack.spec.hf_config import architecture_from_config, checkpoint_format_from_config

REPO = Path(__file__).resolve().parents[1]

# meta-llama/Llama-4-Maverick-17B-128E-Instruct config.json, as NVIDIA/TensorRT-LLM@b35ac1b
# tests/unittest/_torch/modeling/test_modeling_llama_min_latency.py LLAMA_4_MAVERICK_TWO_LAYER_CONFIG copies it,
# with the two edits that copy marks undone: num_hidden_layers back to 48 and its added no_rope_layer_interval 2
# dropped (the config leaves the NoPE layers to Llama4TextConfig's default, one every 4 layers).
MAVERICK = {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
    "text_config": {
        "attention_bias": False, "attention_chunk_size": 8192, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 5120, "interleave_moe_layer_step": 2, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576, "model_type": "llama4_text",
        "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8,
        "num_local_experts": 128, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0,
        "torch_dtype": "bfloat16", "use_qk_norm": False, "vocab_size": 202048,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {"hidden_size": 1408, "intermediate_size": 5632, "model_type": "llama4_vision_model",
                      "num_hidden_layers": 34},
}
# meta-llama/Llama-4-Scout-17B-16E config.json text_config as a public Llama4Config dump prints it (transformers
# 4.51.0), also quoted in a vLLM bug report on a text-only Scout fine-tune: the Maverick shapes with 16 experts,
# interleave_moe_layer_step 1, moe_layers 0..47 and no_rope_layers [1, 1, 1, 0] x 12.
SCOUT = copy.deepcopy(MAVERICK)
SCOUT["text_config"].update({
    "interleave_moe_layer_step": 1, "num_local_experts": 16, "max_position_embeddings": 262144,
    "moe_layers": list(range(48)), "no_rope_layers": [1, 1, 1, 0] * 12, "use_qk_norm": True,
})
# Qwen/Qwen3-235B-A22B config.json (the keys the catalog's model_sources entry lists); its NVFP4 checkpoint by
# NVIDIA ModelOpt 0.29 keeps the format only in hf_quant_config.json, written as ModelOpt exports it
# (producer / quantization; the same schema as nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4's sidecar and the
# nvidia/Llama-3.3-70B-Instruct-NVFP4 snapshot's: quant_algo NVFP4, kv_cache_quant_algo FP8, group_size 16).
QWEN3_235B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960,
    "max_window_layers": 94, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 1536,
    "norm_topk_prob": True, "num_attention_heads": 64, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 94, "num_key_value_heads": 4, "rope_theta": 1000000.0, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936,
}
MODELOPT_NVFP4_SIDECAR = {
    "producer": {"name": "modelopt", "version": "0.29.0"},
    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                     "exclude_modules": ["lm_head"]},
}
# deepseek-ai/DeepSeek-V3 config.json quantization_config (the catalog's checkpoint source quotes it).
DEEPSEEK_V3_QUANT = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                     "weight_block_size": [128, 128]}
# mistralai/Mixtral-8x7B-Instruct-v0.1 config.json (MixtralConfig's defaults are this model's).
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "tie_word_embeddings": False, "vocab_size": 32000,
}


def write(folder: Path, config: dict, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(config), encoding="utf-8")
    return folder


def run_models_config(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "inferstack.cli", "models", "--config", str(path), "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


# ------------------------------------------------------------------------------------------------ Llama 4


def test_maverick_is_400b_with_24_moe_layers(tmp_path: Path):
    """Layer i is MoE when (i + 1) % 2 == 0: 24 MoE layers of 128 routed + 1 shared expert of intermediate_size
    8192, 24 dense layers of intermediate_size_mlp 16384 (llama4.py:340-360, 107-135).

        MoE    24 x 129 x 3 x 5120 x 8192        = 389,566,955,520
        dense  24 x 3 x 5120 x 16384             =   6,039,797,760
        attn   48 x (5120 x 128 x (40 + 16) + 40 x 128 x 5120) = 3,019,898,880
        embed + LM head 2 x 202048 x 5120        =   2,068,971,520
        router 24 x 5120 x 128 + norms 97 x 5120 =      16,225,280
        total                                    = 400,711,848,960  (the card's 400B; 778B when every layer was
                                                                    read as MoE of 128 routed experts)
    """
    arch = architecture_from_config(write(tmp_path, MAVERICK))
    assert arch.params_billion == 400.712
    assert (arch.moe_layers, arch.experts, arch.shared_experts, arch.moe_intermediate_size) == (24, 128, 1, 8192)


def test_scout_counts_its_shared_expert_in_every_layer(tmp_path: Path):
    """interleave_moe_layer_step 1: all 48 layers MoE, each of 16 routed + 1 shared expert (llama4.py:107-135).

        total   48 x 17 x 125,829,120 + 3,019,898,880 + 2,068,971,520 + 48 x 5120 x 16 + 97 x 5120
                = 107,769,861,120 (the card's 109B adds the 0.87B vision encoder)
        active  48 x 2 x 125,829,120 + 3,019,898,880 + 1,034,485,760 (LM head) + router + norms
                = 16,138,362,880 (the card's 17B counts the input embedding too; 10.1B without the shared expert)
    """
    arch = architecture_from_config(write(tmp_path, SCOUT))
    assert arch.params_billion == 107.77
    assert arch.active_params_billion == 16.138
    assert (arch.moe_layers, arch.shared_experts) == (48, 1)


@pytest.mark.parametrize("config", [MAVERICK, SCOUT], ids=["default-no-rope-layers", "listed-no-rope-layers"])
def test_llama4_rope_layers_use_chunked_local_attention(tmp_path: Path, config: dict):
    """no_rope_layers[i] == 1 builds ChunkedLocalAttention of attention_chunk_size (llama4.py:184-262); absent,
    transformers' Llama4TextConfig makes every 4th layer NoPE: 36 of 48 layers hold one 8192-token chunk."""
    arch = architecture_from_config(write(tmp_path, config))
    assert (arch.attention_chunk_size, arch.chunked_layers) == (8192, 36)


# ------------------------------------------------------------------------------ stored format and KV format


def test_modelopt_format_only_in_hf_quant_config_json_is_read_from_it(tmp_path: Path):
    """config.json without quantization_config: vLLM reads hf_quant_config.json in the same folder
    (transformers_utils/config.py:951-962) and a ModelOpt producer makes it quant_method modelopt, NVFP4
    (model_arch_config_convertor.py:241-268).

    Qwen3-235B-A22B is 235,093,659,648 parameters (94 x 128 x 3 x 4096 x 1536 experts, 94 x 71,303,168 attention,
    2 x 151936 x 4096 embeddings, router, norms); stored as NVFP4 (0.5 byte + one 1-byte scale per 16 weights)
    with 16-bit embeddings: 233,849 M x 0.5625 + 1,244.7 M x 2 = 134.0 GB, not 470.2 GB in BF16.
    """
    from inferstack.planning.sizing import checkpoint_bytes

    folder = write(write(tmp_path / "nvfp4", QWEN3_235B), MODELOPT_NVFP4_SIDECAR, "hf_quant_config.json")
    stored = checkpoint_format_from_config(folder)
    assert stored is not None and stored.is_nvfp4 and stored.quant_method == "modelopt"
    assert stored.kv_cache_dtype == "fp8"
    service = ModelServiceSpec(name="q", model="example/qwen3-235b-nvfp4", pool="p",
                               architecture=architecture_from_config(folder), checkpoint_format=stored)
    assert checkpoint_bytes(service) / 1e9 == pytest.approx(134.0, abs=0.1)


def test_inferstack_models_config_reads_both_files_of_a_folder(tmp_path: Path):
    """`inferstack models --config <folder>` with config.json and hf_quant_config.json prints the NVFP4 format."""
    folder = write(write(tmp_path, QWEN3_235B), MODELOPT_NVFP4_SIDECAR, "hf_quant_config.json")
    done = run_models_config(folder)
    assert done.returncode == 0, done.stderr
    stored = json.loads(done.stdout)["checkpoint_format"]
    assert (stored["quant_method"], stored["weight_bits"], stored["group_size"]) == ("modelopt", 4, 16)
    assert stored["kv_cache_dtype"] == "fp8"


def test_config_json_quantization_config_wins_over_the_sidecar(tmp_path: Path):
    """Only a config.json without quantization_config makes vLLM open hf_quant_config.json (config.py:953-962)."""
    config = dict(QWEN3_235B, quantization_config=DEEPSEEK_V3_QUANT)
    folder = write(write(tmp_path, config), MODELOPT_NVFP4_SIDECAR, "hf_quant_config.json")
    assert checkpoint_format_from_config(folder).quant_method == "fp8"


@pytest.mark.parametrize("kv, expected", [
    ({"kv_cache_quant_algo": "FP8"}, "fp8"),
    ({"kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}, "fp8"),
    ({}, "auto"),
], ids=["kv_cache_quant_algo", "kv_cache_scheme", "none"])
def test_auto_kv_cache_runs_the_format_a_modelopt_checkpoint_stores(tmp_path: Path, kv: dict, expected: str):
    """get_kv_cache_quant_algo_string (torch_utils.py:443-491): a ModelOpt config's kv_cache_quant_algo FP8, or a
    static 8-bit float kv_cache_scheme, is what --kv-cache-dtype auto runs; a stated dtype is kept."""
    quant = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, **kv}
    stored = checkpoint_format_from_config(write(tmp_path, dict(QWEN3_235B, quantization_config=quant)))
    assert stored.kv_cache_dtype == expected
    service = ModelServiceSpec(name="q", model="example/q", pool="p", checkpoint_format=stored,
                               architecture=architecture_from_config(tmp_path))
    assert service.resolved_kv_cache_dtype == expected
    assert service.model_copy(update={"kv_cache_dtype": "fp8_e5m2"}).resolved_kv_cache_dtype == "fp8_e5m2"


def test_catalog_nvfp4_checkpoint_runs_fp8_kv_under_auto():
    """nvidia/Llama-3.3-70B-Instruct-FP4 stores kv_cache_quant_algo FP8: auto resolves to fp8 (arg_utils.py:2297)."""
    service = ModelServiceSpec(name="l", model="nvidia/Llama-3.3-70B-Instruct-FP4", pool="p")
    assert service.resolved_kv_cache_dtype == "fp8"


def test_fp8_checkpoint_records_its_weight_block_size(tmp_path: Path):
    """Fp8Config reads weight_block_size [block_n, block_k] (fp8.py:100-173): DeepSeek-V3's 128 x 128 blocks."""
    config = dict(MIXTRAL_8X7B, quantization_config=DEEPSEEK_V3_QUANT)
    assert checkpoint_format_from_config(write(tmp_path, config)).weight_block_size == (128, 128)


# ------------------------------------------------------------------------------------------- refusals


def test_kv_heads_that_do_not_divide_the_query_heads_are_refused():
    """vLLM asserts num_heads % num_kv_heads == 0 building each attention layer (attention.py:329)."""
    with pytest.raises(ValueError, match="kv_heads 6 does not divide attention_heads 40"):
        ModelArchitecture(params_billion=8, layers=32, hidden_size=5120, attention_heads=40, kv_heads=6,
                          head_dim=128, max_context=8192)


def test_a_config_whose_kv_heads_do_not_divide_is_one_clear_error(tmp_path: Path):
    with pytest.raises(SpecError, match="kv_heads 6 does not divide attention_heads 32"):
        architecture_from_config(write(tmp_path, dict(MIXTRAL_8X7B, num_key_value_heads=6)))


def test_moe_config_without_num_experts_per_tok_names_the_key_exit_2(tmp_path: Path):
    """An MoE config.json without num_experts_per_tok: one line naming the key and the file, exit 2, no traceback."""
    config = {key: value for key, value in MIXTRAL_8X7B.items() if key != "num_experts_per_tok"}
    done = run_models_config(write(tmp_path, config))
    assert done.returncode == 2
    assert "num_experts_per_tok" in done.stderr and "config.json" in done.stderr
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------------- catalog, as read above


@pytest.mark.parametrize("model_id, config", [
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", MAVERICK), ("meta-llama/Llama-4-Scout-17B-16E-Instruct", SCOUT),
])
def test_catalog_llama4_entries_agree_with_their_config(tmp_path: Path, model_id: str, config: dict):
    """The catalog's Llama 4 facts are those the config reading gives: 36 chunked layers of 8192, the MoE layout."""
    read = architecture_from_config(write(tmp_path, config))
    listed = ModelServiceSpec(name="l", model=model_id, pool="p").resolved_architecture
    for field in ("attention_chunk_size", "chunked_layers", "experts", "shared_experts", "moe_intermediate_size",
                  "layers", "kv_heads"):
        assert getattr(listed, field) == getattr(read, field), field
    assert (listed.moe_layers or listed.layers) == read.moe_layers  # Scout lists none: every layer


def test_catalog_llama4_vision_encoder_is_its_vision_config():
    """vision_config llama4_vision_model (hidden 1408, intermediate 5632, 34 layers, 336 / 14 patches):
    per layer Q, K, V, O with biases 4 x (1408^2 + 1408), fc1 and fc2 with biases, two LayerNorms;
    plus class and patch embeddings, 577 positions, pre/post norms, the 2-layer adapter and the projector."""
    hidden, inner, layers = 1408, 5632, 34
    per_layer = 4 * (hidden * hidden + hidden) + (hidden * inner + inner) + (inner * hidden + hidden) + 4 * hidden
    embeddings = hidden + 577 * hidden + 3 * 14 * 14 * hidden + 4 * hidden
    adapter_and_projector = 23_068_672 + 16_777_216 + 5120 * 4096
    total = layers * per_layer + embeddings + adapter_and_projector
    assert total == 871_932_416
    listed = ModelServiceSpec(name="l", model="meta-llama/Llama-4-Scout-17B-16E-Instruct", pool="p")
    assert listed.resolved_architecture.vision_params_billion == round(total / 1e9, 3)


@pytest.mark.parametrize("checkpoint", ["Qwen/Qwen3-235B-A22B-FP8", "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"])
def test_catalog_fp8_block_checkpoints_record_their_blocks(checkpoint: str):
    """Their quantization_config says weight_block_size [128, 128] (fp8.py reads it)."""
    assert ModelServiceSpec(name="c", model=checkpoint, pool="p").stored_format.weight_block_size == (128, 128)


def test_catalog_corrections_read_from_the_checkpoints():
    """RedHatAI's Llama 3.1 8B w4a16 is a GPTQ checkpoint; Qwen3-Embedding-8B's max_position_embeddings is 40960;
    DeepSeek-V3's repository holds 688.6 GB (it ships the MTP module the 671B served weights leave out)."""
    from inferstack.catalog.models import download_bytes

    w4a16 = ModelServiceSpec(name="w", model="RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", pool="p")
    assert (w4a16.stored_format.quant_method, w4a16.stored_format.group_size) == ("gptq", 128)
    embedding = ModelServiceSpec(name="e", model="Qwen/Qwen3-Embedding-8B", pool="p")
    assert embedding.resolved_architecture.max_context == 40960
    assert download_bytes("deepseek-ai/DeepSeek-V3") == 688_600_000_000
    assert download_bytes("Qwen/Qwen3-8B-FP8") is None


def test_compressed_tensors_fp8_block_scheme_records_its_blocks(tmp_path: Path):
    """compressed-tensors' FP8_BLOCK preset (llm-compressor examples/model_free_ptq/kimi_k2_thinking_fp8_block.py
    makes one): weights strategy block with block_structure [128, 128], which vLLM takes as the weight_block_size
    (compressed_tensors/schemes/compressed_tensors_w8a8_fp8.py:64)."""
    quant = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128],
                    "symmetric": True, "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                              "dynamic": True},
    }}}
    stored = checkpoint_format_from_config(write(tmp_path, dict(MIXTRAL_8X7B, quantization_config=quant)))
    assert (stored.weight_bits, stored.activation_bits, stored.weight_block_size) == (8, 8, (128, 128))
    assert stored.kv_cache_dtype == "auto"  # vLLM resolves auto from a stored KV format only for ModelOpt


def test_a_modelopt_fp4_quant_method_is_modelopt(tmp_path: Path):
    """quant_method modelopt_fp4 (vLLM's own name for an NVFP4 ModelOpt config) is read as ModelOpt NVFP4."""
    quant = {"quant_method": "modelopt_fp4", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": "FP8"}
    stored = checkpoint_format_from_config(write(tmp_path, dict(QWEN3_235B, quantization_config=quant)))
    assert stored.quant_method == "modelopt" and stored.is_nvfp4 and stored.kv_cache_dtype == "fp8"
