"""KV cache and expert memory as vLLM 0.33.0 accounts them at start-up, worked by hand from the real configs.

vLLM sizes its KV cache per layer kind for one max_model_len sequence (`max_memory_usage_bytes`,
vllm/v1/kv_cache_interface.py), in blocks of 16 tokens (CacheConfig.DEFAULT_BLOCK_SIZE):
    full attention            cdiv(max_model_len, 16)                                          (:643-648)
    sliding window W          cdiv(min(W - 1 + in_flight, max_model_len), 16) + 1             (:918-950)
    chunked local attention C cdiv(min(C + in_flight, max_model_len), 16)                     (:863-888)
in_flight = max_concurrent_batches x max_num_batched_tokens (vllm/config/vllm.py:587-609): one pipeline stage plus
one for async scheduling, on by default on the mp executor (vllm/config/vllm.py:1685-1719), so 2 x 8192 on an H100
or H200 and 2 x 2048 on an A100. Layer kinds form equal-sized KV cache groups, each kind padded to whole groups
(vllm/v1/core/kv_cache_planning.py:416-557), and the startup check (`_max_memory_usage_bytes_from_groups`,
:1253-1285) and the concurrency count (`get_max_concurrency_for_kv_cache_config`,
vllm/v1/core/kv_cache_utils.py:1061-1093) both take the padded groups.

What running sequences then fill is another figure (the last section): a windowed layer frees what falls before
its window or chunk as a sequence advances (v1/core/single_type_kv_cache_manager.py), and the load model admits
sequences by those bytes.

The configs below are excerpts of the checkpoints' own files (huggingface.co/<id>/blob/main/config.json and, for
ModelOpt, hf_quant_config.json); the tests write them and read them back with `service_fields_from_config`.
"""

from __future__ import annotations

import json

import pytest

from inferstack.planning.sizing import (
    COLLECTIVE_RESERVE_BYTES,
    GIB,
    RUNTIME_RESERVE_BYTES,
    expert_padding,
    fit,
    kv_bytes_per_token,
    kv_formula,
    kv_layout,
    weights_bytes,
)
from inferstack.planning.load import Workload, admission_limit, kv_share
from inferstack.planning.service_performance import engine_for
from inferstack.spec import ModelServiceSpec, NodePoolSpec
from inferstack.spec.hf_config import service_fields_from_config
from inferstack.spec.pools import PoolHardware

H100 = PoolHardware(NodePoolSpec(name="h100", instance_types=["p5.48xlarge"], max_nodes=1))
H200 = PoolHardware(NodePoolSpec(name="h200", instance_types=["p5en.48xlarge"], max_nodes=1))
A100 = PoolHardware(NodePoolSpec(name="a100", instance_types=["p4de.24xlarge"], max_nodes=1))
B200 = PoolHardware(NodePoolSpec(name="b200", instance_types=["p6-b200.48xlarge"], max_nodes=1))
H100_BYTES = 81920 * 2**20       # catalog gpus.json: 81920 MiB (H100 and A100-80GB alike)
H200_BYTES = 144384 * 2**20      # 144384 MiB

# huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct config.json text_config (the keys sizing reads).
SCOUT_CONFIG = {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
        "attention_chunk_size": 8192, "no_rope_layers": [1, 1, 1, 0] * 12, "max_position_embeddings": 10485760,
        "vocab_size": 202048, "tie_word_embeddings": False,
    },
}
# huggingface.co/openai/gpt-oss-120b config.json.
GPT_OSS_CONFIG = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 36, "hidden_size": 2880,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880,
    "num_local_experts": 128, "num_experts_per_tok": 4, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "max_position_embeddings": 131072,
    "vocab_size": 201088, "tie_word_embeddings": False,
}
# huggingface.co/google/gemma-3-27b-it config.json text_config: every sixth layer global (10 of 62).
GEMMA3_CONFIG = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376, "num_attention_heads": 32,
        "num_key_value_heads": 16, "head_dim": 128, "intermediate_size": 21504, "sliding_window": 1024,
        "sliding_window_pattern": 6, "max_position_embeddings": 131072, "vocab_size": 262208,
    },
}
# huggingface.co/nvidia/Llama-3.3-70B-Instruct-FP4 config.json and hf_quant_config.json (ModelOpt keeps its format
# only there; vLLM reads it and resolves --kv-cache-dtype auto to its kv_cache_quant_algo,
# vllm/utils/torch_utils.py:498-516).
LLAMA_70B_FP4_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
    "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 131072, "vocab_size": 128256, "tie_word_embeddings": False,
}
LLAMA_70B_FP4_QUANT = {
    "producer": {"name": "modelopt"},
    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                     "exclude_modules": ["lm_head"]},
}


def read_back(tmp_path, config: dict, quant: dict | None = None) -> dict:
    (tmp_path / "config.json").write_text(json.dumps(config))
    if quant is not None:
        (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    return service_fields_from_config(tmp_path)


def from_config(tmp_path, model: str, config: dict, **fields) -> ModelServiceSpec:
    """A service sized by its config.json's attention layout, with the catalog's published parameter count."""
    catalog = ModelServiceSpec(name="m", model=model, pool="p").resolved_architecture
    read = read_back(tmp_path, config)["architecture"]
    layout = {key: read[key] for key in ("sliding_window", "sliding_window_layers", "attention_chunk_size",
                                         "chunked_layers") if key in read}
    return ModelServiceSpec(name="m", model=model, pool="p", architecture=catalog.model_copy(update=layout), **fields)


# -------------------------------------------------------------------------- chunked local attention (Llama 4)


def test_scout_chunked_layers_hold_one_chunk_and_the_in_flight_tokens(tmp_path):
    """vLLM 0.33.0 model_executor/models/llama4.py:185, 251-263: a layer whose no_rope_layers entry is 1 runs
    ChunkedLocalAttention (36 of 48); v1/kv_cache_interface.py:863-888 ChunkedLocalAttentionSpec reserves
    cdiv(min(8192 + in_flight, max_model_len), 16) blocks of a sequence. Sized as 48 full layers before."""
    model = from_config(tmp_path, "meta-llama/Llama-4-Scout-17B-16E-Instruct", SCOUT_CONFIG,
                        tensor_parallel=8, max_model_len=131072)
    assert (model.resolved_architecture.attention_chunk_size, model.resolved_architecture.chunked_layers) == (8192, 36)
    # TP 8 over 8 KV heads: one head a GPU, 2 (K, V) x 128 x 2 bytes = 512 bytes a layer and token.
    # An H200 runs 8192 batched tokens (141 GiB visible, under 160): in flight 2 x 8192; a chunked layer holds
    # min(8192 + 16384, 131072) = 24,576 tokens. Groups: 12 full, 36 chunked = 3 groups of 12, no padding.
    layer_tokens = 12 * 131072 + 36 * 24576
    assert layer_tokens == 2_457_600
    result = fit(model, H200)
    assert result.kv_bytes_per_token_per_device == layer_tokens * 512 // 131072 == 9600      # 48 full: 24,576
    assert result.kv_bytes_per_token == layer_tokens * 4096 // 131072 == 76_800              # 2.56x less
    assert kv_formula(model) == ("GQA: 2 x 48 layers x 8 KV heads x 128 x 2 bytes; 36 chunked local-attention "
                                 "layers hold 8192 + 2 x max_num_batched_tokens in-flight tokens of a sequence, at "
                                 "most all of it")
    # Reserve: runtime + NCCL + 8192 tokens x 5120 x 40 B / 8 + 1024 sequences x 202048 x 4 B / 8.
    reserve = RUNTIME_RESERVE_BYTES + COLLECTIVE_RESERVE_BYTES + 8192 * 5120 * 40 // 8 + 1024 * 202048 * 4 // 8
    kv_cache = int(H200_BYTES * 0.92) - 218_000_000_000 // 8 - reserve                      # 109B in 16 bits
    assert result.kv_cache_bytes_per_device == kv_cache
    assert result.max_concurrency == kv_cache // 9600 // 131072 == 87


def test_scout_at_its_ten_million_token_context_fits_8_h200_in_about_60_gib_a_gpu(tmp_path):
    """vLLM 0.33.0 v1/kv_cache_interface.py:863-888 (ChunkedLocalAttentionSpec) and v1/core/kv_cache_planning.py
    :1253-1285 (the startup check over the groups): at 10,485,760 tokens only the 12 global layers keep the whole
    sequence. Full attention on all 48 layers would need 240 GiB a GPU and refuse."""
    model = from_config(tmp_path, "meta-llama/Llama-4-Scout-17B-16E-Instruct", SCOUT_CONFIG,
                        tensor_parallel=8, max_model_len=10_485_760)
    layer_tokens = 12 * 10_485_760 + 36 * 24_576
    reserved = layer_tokens * 512                                     # one GPU's bytes for the sequence
    assert reserved == 64_877_494_272 and round(reserved / GIB, 1) == 60.4
    assert 48 * 10_485_760 * 512 // GIB == 240
    result = fit(model, H200)
    assert result.kv_bytes_per_token_per_device == -(-reserved // 10_485_760) == 6188
    assert result.kv_cache_bytes_per_device > 6188 * 10_485_760     # 102 GiB left after 25.4 GiB of weights
    assert result.starts and result.fits and result.max_concurrency == 1


def test_an_eagle_draft_turns_the_hybrid_manager_off_and_keeps_chunked_layers_whole(tmp_path):
    """vLLM 0.33.0 config/vllm.py:2235-2245: chunked local attention with an EAGLE-style draft disables the hybrid
    KV cache manager; v1/core/kv_cache_planning.py:853-876 then sizes every layer as full attention."""
    model = from_config(tmp_path, "meta-llama/Llama-4-Scout-17B-16E-Instruct", SCOUT_CONFIG, tensor_parallel=8,
                        max_model_len=131072, speculative={"method": "eagle3", "model": "org/scout-eagle3"})
    assert kv_bytes_per_token(model, H200) == 48 * 2 * 8 * 128 * 2 == 196_608
    assert kv_formula(model).endswith("; 36 chunked local-attention layers kept in full (vLLM's hybrid KV cache "
                                      "manager is off with an EAGLE draft)")


# ------------------------------------------------------------------------------------- sliding-window layers


@pytest.mark.parametrize(
    ("max_model_len", "window_tokens", "per_token", "before"),
    [
        # min(127 + 16384, 131072) = 16,511 -> cdiv 1032 + 1 = 1033 blocks = 16,528 tokens
        (131072, 16_528, 41_513, 36_900),
        # min(16,511, 8192) = 8192 -> 512 + 1 = 513 blocks = 8208 tokens
        (8192, 8208, 73_800, 37_440),
    ],
)
def test_gpt_oss_window_layers_reserve_a_window_the_in_flight_tokens_and_a_block(
        tmp_path, max_model_len, window_tokens, per_token, before):
    """vLLM 0.33.0 v1/kv_cache_interface.py:918-950 SlidingWindowSpec.max_admission_blocks_per_request, with
    model_executor/models/gpt_oss.py:175 (window 128 on layer_types' sliding layers, 18 of 36). 18 full and 18
    window layers make 2 groups of 18; 2 x 8 KV heads x 64 x 2 bytes = 2048 bytes a layer and token. The window
    alone (`before`) was 11% under at 131,072 and 49% at 8192."""
    model = from_config(tmp_path, "openai/gpt-oss-120b", GPT_OSS_CONFIG, max_model_len=max_model_len)
    assert model.resolved_architecture.windowed_layers == 18
    assert per_token == -(-(18 * max_model_len + 18 * window_tokens) * 2048 // max_model_len)
    assert before == 18 * 2048 + 18 * 2048 * 128 // max_model_len
    assert kv_bytes_per_token(model, H100) == per_token


@pytest.mark.parametrize(
    ("max_model_len", "per_token"),
    [
        # min(1023 + 16384, 131072) = 17,407 -> cdiv 1088 + 1 = 1089 blocks = 17,424 tokens
        (131072, (10 * 131072 + 60 * 17_424) * 8192 // 131072),
        # at 8192 a window layer holds the whole sequence and a block: 513 blocks = 8208 tokens
        (8192, (10 * 8192 + 60 * 8208) * 8192 // 8192),
    ],
)
def test_gemma3_window_layers_are_padded_to_whole_groups_of_the_global_layers(tmp_path, max_model_len, per_token):
    """vLLM 0.33.0 model_executor/models/gemma3.py:153-155 (sliding layers by layer type) and
    v1/core/kv_cache_planning.py:416-557 (`_get_kv_cache_groups_uniform_page_size`): 10 global and 52 window
    layers group by 10, so the window layers take 6 groups (60 layers' blocks); each window layer reserves
    SlidingWindowSpec's cdiv(min(1023 + 2 x 8192, max_model_len), 16) + 1 blocks
    (v1/kv_cache_interface.py:918-950). 2 x 16 KV heads x 128 x 2 bytes = 8192 bytes a layer and token."""
    model = from_config(tmp_path, "google/gemma-3-27b-it", GEMMA3_CONFIG, max_model_len=max_model_len)
    assert model.resolved_architecture.windowed_layers == 52
    assert kv_bytes_per_token(model, H100) == per_token == {131072: 147_260, 8192: 574_400}[max_model_len]
    # The window alone counted 10 x 8192 + 52 x 8192 x 1024 / max_model_len bytes: 42% and 76% under.
    assert kv_formula(model).endswith("(vLLM's equal-sized KV cache groups count 52 sliding-window layers as 60)")


# ------------------------------------------------------------------------------------ MXFP4 experts in memory


def test_gpt_oss_120b_on_one_a100_holds_one_full_length_sequence_not_two(tmp_path):
    """vLLM 0.33.0 model_executor/layers/fused_moe/oracle/mxfp4.py:402-436 (gpt-oss backend order) with the
    device gates (experts/gpt_oss_triton_kernels_moe.py:41-62: Triton needs SM90+; marlin_moe.py:592-594) runs
    Marlin on an A100, which pads each expert's intermediate size to 128 and hidden size to 256
    (mxfp4.py:865-870 mxfp4_round_up_hidden_size_and_intermediate_size; quantization/mxfp4.py:183-197 before
    create_weights): 2880 x 2880 experts are held as 2944 x 3072, 9.04% more."""
    model = from_config(tmp_path, "openai/gpt-oss-120b", GPT_OSS_CONFIG, max_model_len=131072)
    assert expert_padding(model, A100.gpu) == pytest.approx(2944 * 3072 / (2880 * 2880))
    experts = 36 * 128 * 3 * 2880 * 2880 * (0.5 + 1 / 32)            # MXFP4 experts as stored: 60,914,073,600 B
    held = 36 * 128 * 3 * 2944 * 3072 * (0.5 + 1 / 32)               # as Marlin holds them: 66,418,900,992 B
    assert (experts, held) == (60_914_073_600, 66_418_900_992)
    result = fit(model, A100)
    assert result.weights_bytes_per_device == weights_bytes(model) - 60_914_073_600 + 66_418_900_992
    # An A100 runs 2048 batched tokens and 256 sequences: reserve 1.5 GiB + 2048 x 2880 x 40 + 256 x 201088 x 4.
    reserve = RUNTIME_RESERVE_BYTES + 2048 * 2880 * 40 + 256 * 201088 * 4
    kv_cache = int(H100_BYTES * 0.92) - result.weights_bytes_per_device - reserve
    assert result.kv_cache_bytes_per_device == kv_cache == 6_219_612_006
    # Window layers: cdiv(127 + 2 x 2048, 16) + 1 = 265 blocks = 4240 tokens.
    per_token = -(-(18 * 131072 + 18 * 4240) * 2048 // 131072)
    assert result.kv_bytes_per_token_per_device == per_token == 38_057
    assert result.max_concurrency == kv_cache // per_token // 131072 == 1
    unpadded = int(H100_BYTES * 0.92) - weights_bytes(model) - reserve
    assert unpadded // per_token // 131072 == 2                      # what the unpadded weights would leave


@pytest.mark.parametrize(
    ("hardware", "tensor_parallel", "padded"),
    [
        (H100, 1, (2880, 2880)),      # OAI Triton on SM90: intermediate to 64s, hidden as is (mxfp4.py:915-916)
        (H100, 2, (1472, 2880)),      # 1440 a GPU -> 1472
        (A100, 2, (1536, 3072)),      # Marlin: 1440 -> 1536, hidden 2880 -> 3072
        (B200, 1, (2944, 3072)),      # FlashInfer TRT-LLM on SM100: 128s and 256s (mxfp4.py:871-873)
    ],
)
def test_mxfp4_expert_padding_follows_the_kernel_vllm_runs_on_the_gpu(tmp_path, hardware, tensor_parallel, padded):
    """vLLM 0.33.0 model_executor/layers/fused_moe/oracle/mxfp4.py:402-436 and 837-917: the first kernel whose
    device gate passes (TRT-LLM on SM100 with FlashInfer, experts/trtllm_mxfp4_moe.py:121-123; OAI Triton on SM90;
    Marlin below) sets the padding of each GPU's slice of the intermediate size and of the hidden size."""
    model = from_config(tmp_path, "openai/gpt-oss-120b", GPT_OSS_CONFIG, tensor_parallel=tensor_parallel)
    intermediate = 2880 // tensor_parallel
    assert expert_padding(model, hardware.gpu) == pytest.approx(padded[0] * padded[1] / (intermediate * 2880))


# ----------------------------------------------------------------------------------- stored KV formats


def test_modelopt_nvfp4_llama_70b_runs_fp8_kv_and_fits_one_h100_at_131072(tmp_path):
    """vLLM 0.33.0 utils/torch_utils.py:498-516 resolve_kv_cache_dtype_string: --kv-cache-dtype auto becomes the
    checkpoint's kv_cache_quant_algo (FP8 in ModelOpt's hf_quant_config.json, read by
    model_executor/layers/quantization/modelopt.py:335-373), so each K and V value takes 1 byte, not 2."""
    fields = read_back(tmp_path, LLAMA_70B_FP4_CONFIG, LLAMA_70B_FP4_QUANT)
    model = ModelServiceSpec(name="m", model="nvidia/Llama-3.3-70B-Instruct-FP4", pool="p", max_model_len=131072,
                             **fields)
    assert model.resolved_kv_cache_dtype == "fp8"
    assert kv_formula(model) == ("GQA: 2 x 80 layers x 8 KV heads x 128 x 1 byte (fp8, the KV format the "
                                 "checkpoint stores)")
    result = fit(model, H100)
    assert result.kv_bytes_per_token_per_device == 2 * 80 * 8 * 128 * 1 == 163_840
    # Reserve: 1.5 GiB + 8192 tokens x 8192 x 40 B + 1024 sequences x 128256 x 4 B.
    reserve = RUNTIME_RESERVE_BYTES + 8192 * 8192 * 40 + 1024 * 128256 * 4
    assert result.reserve_bytes_per_device == reserve == 4_820_303_872
    kv_cache = int(H100_BYTES * 0.92) - result.weights_bytes_per_device - reserve
    assert result.kv_cache_bytes_per_device == kv_cache
    assert round(result.weights_bytes_per_device / GIB) == 40          # ~42.7 GB: the checkpoint's index says so
    assert kv_cache // 163_840 >= 131072 > kv_cache // 327_680        # 16-bit KV would hold under one sequence
    assert result.fits


# --------------------------------------------------------------------------- what running sequences keep


def test_gpt_oss_running_sequences_keep_only_their_window_on_sliding_layers(tmp_path):
    """vLLM 0.33.0 v1/core/single_type_kv_cache_manager.py: remove_skipped_blocks frees every whole block before
    get_num_skipped_tokens, which SlidingWindowManager puts at max(0, computed - sliding_window + 1). A running
    gpt-oss sequence so keeps every token on its 18 full layers and at most the window's 127 tokens and the
    16-token block the window starts in on its 18 sliding layers: a short sequence costs its length on both, a long
    one its window. The startup reservation (fit above) is another figure: one max_model_len sequence with the
    in-flight tokens."""
    model = from_config(tmp_path, "openai/gpt-oss-120b", GPT_OSS_CONFIG, max_model_len=2048)
    per_layer = 2 * 8 * 64 * 2                             # K and V of 8 heads of 64, 16 bits: 2048 bytes
    layout = kv_layout(model)
    assert layout.kinds == ((18 * per_layer, None), (18 * per_layer, 127 + 16))
    assert layout.over(100) == 36 * per_layer * 100
    assert layout.over(10_000) == 18 * per_layer * (10_000 + 143)
    # At max_model_len 2048 on an A100 the reservation counts both kinds whole (2048 is less than 127 + 2 x 2048
    # in-flight tokens; the sliding layers a block more), so it charges a token about 36 layers, where a
    # 313-token sequence keeps about 26.2 a token.
    result = fit(model, A100)
    assert result.kv_bytes_per_token_per_device == (18 * 2048 + 18 * (2048 + 16)) * per_layer // 2048 == 74_016
    assert layout.over(313) / (313 * per_layer) == pytest.approx(18 + 18 * 143 / 313)


def test_admission_fills_the_cache_with_what_each_sequence_keeps(tmp_path):
    """The load model admits as many sequences as the KV cache's bytes hold at the workload's mean length, each
    costing what it keeps (vLLM's scheduler allocates blocks while the pool has them, v1/core/sched/scheduler.py);
    for gpt-oss on one A100 that is about 1.38 times the count the startup reservation would give."""
    model = from_config(tmp_path, "openai/gpt-oss-120b", GPT_OSS_CONFIG, max_model_len=2048, max_num_seqs=1024)
    engine = engine_for(model, A100)
    workload = Workload(215, 197)
    admitted, limit = admission_limit(engine, workload)
    assert limit == "kv_cache"
    assert admitted == pytest.approx(engine.kv_cache_bytes / engine.kept_kv.over(workload.held_tokens))
    by_reservation = engine.kv_cache_bytes / 74_016 / workload.held_tokens
    assert fit(model, A100).rank_kv_tokens == engine.kv_cache_bytes // 74_016
    assert admitted / by_reservation == pytest.approx(74_016 / 2048 / (18 + 18 * 143 / workload.held_tokens))


def test_scout_running_sequences_keep_at_most_one_chunk_on_chunked_layers(tmp_path):
    """ChunkedLocalAttentionManager.get_num_skipped_tokens (v1/core/single_type_kv_cache_manager.py): the computed
    tokens rounded down to attention_chunk_size, so a chunked layer keeps at most one 8192-token chunk."""
    model = from_config(tmp_path, "meta-llama/Llama-4-Scout-17B-16E-Instruct", SCOUT_CONFIG,
                        tensor_parallel=8, max_model_len=131072)
    layout = kv_layout(model)
    assert layout.kinds == ((12 * 512, None), (36 * 512, 8192))
    assert layout.over(100_000) == 512 * (12 * 100_000 + 36 * 8192)


def test_a_dense_model_keeps_every_token_on_every_layer():
    model = ModelServiceSpec(name="m", model="meta-llama/Llama-3.1-8B-Instruct", pool="p", max_model_len=8192)
    layout = kv_layout(model)
    assert layout.kinds == ((32 * 2 * 8 * 128 * 2, None),)
    engine = engine_for(model, H100)
    workload = Workload(1000, 200)
    admitted, _ = admission_limit(engine, workload)
    assert admitted == pytest.approx(min(engine.max_num_seqs, engine.kv_cache_bytes / (131_072 * 1100)))


def test_gemma3_running_sequences_keep_the_padded_window_groups(tmp_path):
    """The block pool is shared by equal-sized groups (v1/core/kv_cache_planning.py:416-557): a block of a window
    group spans all 10 of its layer slots, so Gemma 3's 52 window layers keep blocks as 60 do, each at most the
    window's 1023 tokens and a block (SlidingWindowManager.get_num_skipped_tokens)."""
    model = from_config(tmp_path, "google/gemma-3-27b-it", GEMMA3_CONFIG, max_model_len=131072)
    per_layer = 2 * 16 * 128 * 2
    assert kv_layout(model).kinds == ((10 * per_layer, None), (60 * per_layer, 1023 + 16))
    # At the long max_model_len the reservation spreads each window over the whole length, so a short sequence
    # keeps more than it: 300 tokens keep 70 layers' worth a token, the reservation charges under 18.
    assert kv_layout(model).over(300) / 300 / per_layer == 70
    assert kv_bytes_per_token(model, H100) / per_layer < 18


def test_a_draft_fills_the_cache_but_no_target_step_reads_it(tmp_path):
    """An EAGLE-3 head keeps KV for every token of its one decoder layer (the draft's share of the cache, as the
    startup fit counts it); the step model has no drafting steps, so only what the sequences keep carries it."""
    model = ModelServiceSpec(name="m", model="meta-llama/Llama-3.1-8B-Instruct", pool="p", max_model_len=8192,
                             speculative={"method": "eagle3", "model": "org/llama-eagle3"})
    read, kept = kv_layout(model), kv_layout(model, with_draft=True)
    per_layer = 2 * 8 * 128 * 2
    assert read.kinds == ((32 * per_layer, None),)
    assert kept.kinds == ((32 * per_layer, None), (per_layer, None))
    engine = engine_for(model, H100)
    assert engine.shard.kv == read and engine.kept_kv == kept


def test_kv_share_is_the_running_sequences_and_the_prefix_over_the_cache():
    model = ModelServiceSpec(name="m", model="meta-llama/Llama-3.1-8B-Instruct", pool="p", max_model_len=8192)
    engine = engine_for(model, H100)
    workload = Workload(1000, 200, cached_prefix_tokens=400)
    per_token = 32 * 2 * 8 * 128 * 2
    assert kv_share(engine, workload, 10) == pytest.approx((10 * per_token * 700 + per_token * 400) / engine.kv_cache_bytes)


def test_a_device_keeps_its_stage_and_its_rank_of_each_running_sequence():
    """MLA caches one latent and RoPE key a layer on every tensor rank (MLACommonBackend.get_kv_cache_shape), so
    DeepSeek-R1 at pipeline 2 keeps 31 of its 61 layers x 576 values x 2 bytes a token on each GPU; GQA with fewer
    KV heads than ranks replicates them, so Qwen3-235B's 4 heads at TP 8 keep one head a GPU on all 94 layers."""
    deepseek = ModelServiceSpec(name="m", model="deepseek-ai/DeepSeek-R1", pool="p", tensor_parallel=8,
                                pipeline_parallel=2, max_model_len=8192)
    assert kv_layout(deepseek).kinds == ((31 * (512 + 64) * 2, None),)
    qwen = ModelServiceSpec(name="m", model="Qwen/Qwen3-235B-A22B", pool="p", tensor_parallel=8, max_model_len=8192)
    assert kv_layout(qwen).kinds == ((94 * 2 * 1 * 128 * 2, None),)
