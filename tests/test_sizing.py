"""Sizing against figures worked out by hand, and every "does not fit" path with its numbers and options.

The expected values are plain arithmetic over the models' config.json facts and the GPUs' EC2 memory,
written out below so each can be checked with a calculator:

    budget   = device bytes x gpu_memory_utilization
    reserve  = 1.5 GiB (+0.5 GiB NCCL when the replica spans devices)
               + batched tokens x hidden x 40 B / tp          (activation peak)
               + max_num_seqs x vocab x 4 B / tp              (float32 logits, generative models)
    KV cache = budget - weights / devices - reserve            (per device)
    tokens   = KV cache // (2 x layers/pp x max(1, kv_heads/tp) x head_dim x KV bytes)
"""

from __future__ import annotations

import copy
import json

import pytest
from stack_files import refusal

from inferstack.planning.sizing import GIB, checkpoint_bytes, fit, load_seconds, weights_bytes
from inferstack.spec import ModelServiceSpec, NodePoolSpec, StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.validation import validate

MIB = 2**20
FOUR_BIT = 0.5 + 2.5 / 128  # 4-bit weight + a 16-bit scale and 4-bit zero per 128 weights


def sized(model: dict, pool: dict):
    return fit(ModelServiceSpec(**model), PoolHardware(NodePoolSpec(**pool)))


# Each pool keeps one on-demand node, where an online service's minimum replica runs (spec/capacity.py).
BASELINE = {"capacity": {"on_demand_base": 1}}
L40S = {"name": "l40s", "instance_types": ["g6e.xlarge"], "max_nodes": 1, **BASELINE}
L4_SHARED = {"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 1, **BASELINE,
             "gpu_sharing": {"mode": "time_slicing", "replicas": 2}}
H100 = {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 2, **BASELINE}
A100_MIG = {
    "name": "mig", "instance_types": ["p4de.24xlarge"], "max_nodes": 1, **BASELINE,
    "gpu_sharing": {"mode": "mig", "layout": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
}


def test_llama_8b_bf16_on_an_l40s():
    result = sized({"name": "m", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "l40s"}, L40S)
    weights = 8_030_000_000 * 2                                      # 16.06 GB = 14.96 GiB
    budget = int(45_776 * MIB * 0.92)                                # 44,159,645,777
    reserve = int(1.5 * GIB) + 2048 * 4096 * 40 + 256 * 128_256 * 4  # L40S (<70 GiB): 2048 tokens, 256 seqs
    assert result.weights_bytes == weights
    assert round(result.weights_bytes / GIB, 2) == 14.96
    assert result.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    assert result.reserve_bytes_per_device == reserve == 2_077_491_200
    assert result.kv_cache_bytes_per_device == budget - weights - reserve == 26_022_154_577  # 24.24 GiB
    assert result.kv_tokens == 198_533
    assert result.max_concurrency == 198_533 // 8192 == 24


def test_qwen_7b_awq_on_half_a_time_sliced_l4():
    result = sized(
        {"name": "m", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq", "pool": "l4", "max_num_seqs": 16},
        L4_SHARED,
    )
    embedding = 152_064 * 3_584 * 2                 # untied embedding + LM head stay 16-bit
    weights = int(embedding * 2 + (7_620_000_000 - embedding) * FOUR_BIT)
    share = 22_888 * MIB // 2                        # one of two time-slicing replicas
    reserve = int(1.5 * GIB) + 2048 * 3584 * 40 + 16 * 152_064 * 4
    assert embedding == 1_089_994_752
    assert result.weights_bytes == weights == 5_572_531_293  # 5.19 GiB
    assert result.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == 57_344
    assert result.kv_cache_bytes_per_device == int(share * 0.92) - weights - reserve == 3_553_434_039
    assert result.kv_tokens == 61_966
    assert result.max_concurrency == 7


def test_llama_70b_awq_tensor_parallel_4_on_h100s_with_fp8_kv():
    result = sized(
        {
            "name": "m", "model": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "quantization": "awq",
            "kv_cache_dtype": "fp8", "pool": "h100", "tensor_parallel": 4, "max_model_len": 32768, "max_num_seqs": 64,
        },
        H100,
    )
    embedding = 128_256 * 8_192 * 2
    weights = int(embedding * 2 + (70_600_000_000 - embedding) * FOUR_BIT)   # 37.06 GiB
    # H100 (>=70 GiB, not A100): 8192 batched tokens; NCCL reserve; activations and logits split over 4.
    reserve = int(1.5 * GIB) + int(0.5 * GIB) + 8192 * 8192 * 40 // 4 + 64 * 128_256 * 4 // 4
    per_device_token = 2 * 80 * (8 // 4) * 128 * 1                        # 2 of 8 KV heads per GPU, 1-byte KV
    assert result.weights_bytes == weights == 39_789_883_786
    assert result.kv_bytes_per_token == 2 * 80 * 8 * 128 * 1 == 163_840
    assert result.kv_bytes_per_token_per_device == per_device_token == 40_960
    assert result.kv_cache_bytes_per_device == int(81_920 * MIB * 0.92) - -(-weights // 4) - reserve == 66_253_146_627
    assert result.kv_tokens == 1_617_508
    assert result.max_concurrency == 49
    assert result.kv_cache_bytes == 4 * 66_253_146_627


def test_bge_embedding_model_on_a_mig_slice():
    result = sized(
        {"name": "m", "model": "BAAI/bge-large-en-v1.5", "pool": "mig", "mig_profile": "1g.10gb", "max_model_len": 512},
        A100_MIG,
    )
    reserve = int(1.5 * GIB) + 2048 * 1024 * 40      # an embedding model samples no logits
    assert result.weights_bytes == 335_000_000 * 2
    assert result.device_memory_bytes == 10 * 10**9   # the slice, not the A100
    assert result.kv_bytes_per_token == 2 * 24 * 16 * 64 * 2 == 98_304
    assert result.kv_cache_bytes_per_device == 9_200_000_000 - 670_000_000 - reserve == 6_835_501_184
    assert result.kv_tokens == 69_534
    assert result.max_concurrency == 135


def test_llama_70b_bf16_over_two_nodes_splits_layers_and_heads():
    result = sized(
        {
            "name": "m", "model": "meta-llama/Llama-3.1-70B-Instruct", "kv_cache_dtype": "fp8", "pool": "h100",
            "tensor_parallel": 8, "pipeline_parallel": 2, "max_model_len": 131072, "max_num_seqs": 32,
        },
        H100,
    )
    reserve = int(1.5 * GIB) + int(0.5 * GIB) + 8192 * 8192 * 40 // 8 + 32 * 128_256 * 4 // 8
    assert result.devices == 16
    assert result.weights_bytes_per_device == 141_200_000_000 // 16 == 8_825_000_000
    assert result.kv_bytes_per_token_per_device == 2 * (80 // 2) * (8 // 8) * 128 * 1 == 10_240
    assert result.kv_cache_bytes_per_device == int(81_920 * MIB * 0.92) - 8_825_000_000 - reserve == 67_717_318_182
    assert result.kv_tokens == 6_613_019
    assert result.max_concurrency == 50


def test_kv_heads_are_replicated_when_tensor_parallel_exceeds_them():
    # Qwen2.5-7B has 4 KV heads: at tensor_parallel 4 each GPU holds one; the per-device token is the
    # same as it would be with 8 (heads are replicated, never split below one per GPU).
    four = sized({"name": "m", "model": "Qwen/Qwen2.5-7B-Instruct", "pool": "h100", "tensor_parallel": 4}, H100)
    assert four.kv_bytes_per_token_per_device == 2 * 28 * 1 * 128 * 2


def test_weights_of_a_model_without_vocabulary_facts_count_every_parameter_quantized():
    architecture = {"params_billion": 10, "layers": 40, "hidden_size": 5120, "attention_heads": 40, "kv_heads": 8,
                    "head_dim": 128, "max_context": 32768}
    stored = {"quant_method": "gptq", "weight_bits": 4, "weight_type": "int", "group_size": 128, "zero_points": True}
    model = ModelServiceSpec(name="m", model="acme/custom-10b-gptq", architecture=architecture, checkpoint_format=stored,
                             quantization="gptq", pool="h100")
    assert weights_bytes(model) == int(10_000_000_000 * FOUR_BIT)


def test_load_time_covers_engine_start_and_reading_the_weights():
    model = ModelServiceSpec(name="m", model="meta-llama/Llama-3.1-70B-Instruct", pool="h100", tensor_parallel=8)
    assert load_seconds(model) == 180 + 141_200_000_000 // 500_000_000 + 1  # 180 s start + 282.4 s at 500 MB/s


# ------------------------------------------------------------------------------------ rejections


def stack(pool: dict, model: dict) -> dict:
    return {"environment": "test", "node_pools": [pool], "models": [{"name": "m", "pool": pool["name"], **model}]}


def test_weights_too_large_for_one_gpu_name_the_numbers_and_the_options():
    error = refusal(stack(H100, {"model": "meta-llama/Llama-3.1-70B-Instruct"}))
    assert error.path == "models[0].quantization"
    # 141.2 GB of 16-bit weights against 0.92 x 80 GiB.
    assert "131.50 GiB each" in error.problem and "73.60 GiB" in error.problem and "H100" in error.problem
    assert "lower precision: quantization 'fp8'" in error.fix
    assert "more GPUs: tensor_parallel 2, pipeline_parallel 1 (2 GPUs)" in error.fix
    assert "shorter context" not in error.fix  # no context length makes the weights fit


def test_context_longer_than_the_kv_cache_names_tokens_and_options():
    l4 = {"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 2}
    error = refusal(stack(l4, {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 131072}))
    assert error.path == "models[0].max_model_len"
    result = sized({"name": "m", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "l4", "max_model_len": 131072}, l4)
    assert f"{result.kv_tokens} tokens at 131072 bytes per token" in error.problem
    assert "fewer than one 131072-token sequence" in error.problem
    assert "lower precision: quantization 'fp8', kv_cache_dtype 'fp8'" in error.fix
    assert "more GPUs: tensor_parallel 1, pipeline_parallel 2 (2 GPUs)" in error.fix
    assert f"shorter context: max_model_len {result.kv_tokens} or less" in error.fix


def test_mig_slice_too_small_offers_a_larger_slice_and_whole_gpus():
    error = refusal(stack(A100_MIG, {"model": "Qwen/Qwen3-8B", "mig_profile": "1g.10gb"}))
    assert error.path == "models[0].mig_profile"  # the change inside the pool; no precision change is offered
    assert "A100-80GB MIG slice 1g.10gb gives 8.57 GiB" in error.problem
    assert "larger slice: mig_profile '3g.40gb'" in error.fix
    assert "(add it to the pool's MIG layout)" not in error.fix.split("larger slice")[1].split(";")[0]
    assert "on a pool of whole A100-80GBs" in error.fix
    # The catalog has no 4-bit Qwen3-8B checkpoint and online FP8 (8.2 GB) is still too large: no
    # precision change is offered rather than one vLLM could not start.
    assert "lower precision" not in error.fix and "int4" not in error.fix


def test_larger_slice_outside_the_layout_says_to_add_it():
    pool = copy.deepcopy(A100_MIG)
    pool["gpu_sharing"]["layout"] = {"1g.10gb": 7}
    error = refusal(stack(pool, {"model": "Qwen/Qwen3-8B", "mig_profile": "1g.10gb"}))
    assert "mig_profile '3g.40gb' (add it to the pool's MIG layout)" in error.fix


def test_time_sliced_share_too_small_offers_whole_gpus():
    pool = {**L4_SHARED, "gpu_sharing": {"mode": "time_slicing", "replicas": 4}}
    error = refusal(stack(pool, {"model": "meta-llama/Llama-3.1-8B-Instruct"}))
    assert "1/4 of a L4 (time_slicing)" in error.problem
    assert "bfloat16 weights of 14.96 GiB" in error.problem
    assert error.fix == "more GPUs: tensor_parallel 1, pipeline_parallel 1 (1 GPU) on a pool of whole L4s gives 3 x 8192-token sequences"


def test_a_larger_time_slicing_share_is_an_option_when_it_fits():
    pool = {**L4_SHARED, "gpu_sharing": {"mode": "time_slicing", "replicas": 4}}
    error = refusal(stack(pool, {"model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq"}))
    assert "larger share: time_slicing replicas 2 per GPU" in error.fix


def test_tensor_parallel_that_does_not_divide_the_heads_is_rejected():
    error = refusal(stack(H100, {"model": "Qwen/Qwen2.5-7B-Instruct", "tensor_parallel": 8}))
    assert error.path == "models[0].tensor_parallel"
    assert "28 attention heads do not split evenly over tensor_parallel 8" in error.problem
    assert error.fix == "use tensor_parallel in [1, 2, 4]"


def test_a_model_that_fits_nowhere_says_so():
    l4 = {"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 1}
    huge = {"params_billion": 400, "layers": 126, "hidden_size": 16384, "attention_heads": 128, "kv_heads": 8,
            "head_dim": 128, "max_context": 131072}
    error = refusal(stack(l4, {"model": "acme/huge", "architecture": huge}))
    assert error.fix == "nothing inferstack knows fits it on a L4: use a GPU with more memory"
    assert "745.06 GiB" in error.problem  # 400e9 x 2 bytes


# ------------------------------------------------------------------------- bytes per stored format
# What each format stores per linear-layer weight (embeddings and LM head stay 16-bit), from the
# tensors vLLM 0.33 creates for it: AWQ qweight (int32-packed 4-bit) + qzeros (4-bit) + 16-bit scales
# per group (quantization/auto_awq.py create_weights); GPTQ the same plus g_idx (auto_gptq.py);
# compressed-tensors pack-quantized W4A16 symmetric: packed weights + 16-bit group scales, no zero points
# (compressed_tensors/schemes/compressed_tensors_wNa16.py); W8A8 and FP8: one byte per weight plus
# per-channel or per-tensor scales (schemes/compressed_tensors_w8a8_*.py, fp8.py).

LLAMA_8B = 8_030_000_000
LLAMA_8B_EMBEDDING = 128_256 * 4_096 * 2   # untied token embedding + LM head = 1,050,673,152


@pytest.mark.parametrize(
    ("checkpoint", "per_param"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", 2.0),
        ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", 0.5 + (2 + 0.5) / 128),   # scale + zero per 128
        # A GPTQ checkpoint (issue 27): its files hold qzeros per group even when symmetric (vLLM 0.33.0
        # model_executor/layers/quantization/auto_gptq.py:405-429 registers qzeros whatever `sym` says).
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", 0.5 + (2 + 0.5) / 128),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", 1.0),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", 1.0),
    ],
)
def test_a_pre_quantized_checkpoint_downloads_and_holds_its_stored_bytes(checkpoint, per_param):
    model = ModelServiceSpec(name="m", model=checkpoint, pool="l40s")
    if per_param == 2.0:
        expected = LLAMA_8B * 2
    else:
        expected = int(LLAMA_8B_EMBEDDING * 2 + (LLAMA_8B - LLAMA_8B_EMBEDDING) * per_param)
    assert weights_bytes(model) == checkpoint_bytes(model) == expected


def test_a_per_channel_w4a16_checkpoint_has_no_group_scales():
    model = ModelServiceSpec(name="m", model="RedHatAI/Meta-Llama-3.1-70B-Instruct-quantized.w4a16", pool="h100")
    embedding = 128_256 * 8_192 * 2
    assert weights_bytes(model) == int(embedding * 2 + (70_600_000_000 - embedding) * 0.5)


def test_online_fp8_downloads_16_bit_bytes_but_holds_fp8_bytes():
    """vLLM 0.33 quantization/online/fp8.py Fp8PerTensorOnlineLinearMethod loads the 16-bit weights and
    quantizes each linear layer while loading; online/base.py leaves the embedding and ParallelLMHead
    unquantized (only LinearBase layers get an online method)."""
    model = ModelServiceSpec(name="m", model="meta-llama/Llama-3.1-8B-Instruct", quantization="fp8", pool="l40s")
    held = LLAMA_8B_EMBEDDING * 2 + (LLAMA_8B - LLAMA_8B_EMBEDDING) * 1
    assert weights_bytes(model) == held == 9_080_673_152                      # 8.46 GiB on the GPU
    assert checkpoint_bytes(model) == LLAMA_8B * 2 == 16_060_000_000          # 14.96 GiB downloaded and read
    assert load_seconds(model) == 180 + 16_060_000_000 // 500_000_000 + 1       # start-up reads the stored files
    result = sized({"name": "m", "model": "meta-llama/Llama-3.1-8B-Instruct", "quantization": "fp8", "pool": "l40s"}, L40S)
    assert result.weights_bytes == held


def test_sizing_never_suggests_a_quantization_the_checkpoint_cannot_take():
    """The old suggestion `quantization 'int4'` on a 16-bit checkpoint would stop vLLM at startup
    (weight_utils.py get_quant_config); a suggestion is online FP8 or a catalog checkpoint by id."""
    l4 = {"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 1}
    error = refusal(stack(L40S, {"model": "meta-llama/Llama-3.1-70B-Instruct"}))
    assert "int4" not in error.fix and "'awq'" not in error.fix
    assert error.fix.startswith(
        "lower precision: model 'hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4', kv_cache_dtype 'fp8' "
        "(the catalog's checkpoint stored as AWQ 4-bit group-128) gives 1 x 8192-token sequences"
    )
    # A 4-bit checkpoint cannot be quantized further: no precision change, whatever the shortfall.
    error = refusal(stack(l4, {"model": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4"}))
    assert "quantization" not in error.fix and "lower precision" not in error.fix


@pytest.mark.parametrize(
    ("pool", "model"),
    [
        (L40S, {"model": "meta-llama/Llama-3.1-70B-Instruct"}),
        (H100, {"model": "meta-llama/Llama-3.1-70B-Instruct"}),
        (L4_SHARED, {"model": "meta-llama/Llama-3.1-8B-Instruct"}),
        (L4_SHARED, {"model": "meta-llama/Llama-3.1-8B-Instruct", "quantization": "none"}),
    ],
)
def test_following_a_lower_precision_suggestion_gives_a_valid_spec(pool, model):
    error = refusal(stack(pool, model))
    suggestion = next(option for option in error.fix.split("; or ") if option.startswith("lower precision: "))
    change = suggestion.removeprefix("lower precision: ").split(" (")[0].split(" gives ")[0]
    applied = {key: value.strip("'") for key, value in (item.split(" ", 1) for item in change.split(", "))}
    assert applied  # e.g. {"quantization": "fp8"} or {"model": "<catalog checkpoint>", "kv_cache_dtype": "fp8"}
    validate(StackSpec.model_validate(stack(pool, {**model, **applied})))


# ------------------------------------------------------------------------------------ "fits"

QWEN_ON_HALF_L4 = {"name": "m", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq", "pool": "l4",
                   "max_model_len": 8192}


@pytest.mark.parametrize(("seqs", "fits"), [(None, True), (7, True), (8, False), (16, False)])
def test_fits_means_the_stated_context_times_sequences(seqs, fits):
    """One meaning for the plan and auto placement: max_model_len x max_num_seqs (one when unstated) at once.
    vLLM itself starts when one full-length request fits (vllm/v1/core/kv_cache_utils.py
    `check_enough_kv_cache_memory`), so fewer than stated is accepted and the plan warns."""
    result = sized({**QWEN_ON_HALF_L4, "max_num_seqs": seqs}, L4_SHARED)
    assert result.max_concurrency == 7 and result.starts
    assert result.fits is fits


def test_the_plan_says_how_many_sequences_fit_and_warns(tmp_path, capsys):
    from inferstack.cli import main

    path = tmp_path / "few.yaml"
    model = {k: v for k, v in QWEN_ON_HALF_L4.items() if k not in ("name", "pool")}
    path.write_text(json.dumps(stack(L4_SHARED, {**model, "max_num_seqs": 16})))
    assert main(["plan", str(path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["placements"]
    assert (row["fits"], row["max_concurrency_at_full_length"], row["sequences_stated"]) == (False, 7, 16)
    assert main(["plan", str(path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "7 of 16" in text
    assert "m: only 7 of its 16 sequences (max_num_seqs) fit the KV cache at 8192 tokens each" in text

