"""Quantization blocks and groups against the parallel layout, as vLLM 0.33.0 checks them at load.

Each test writes the config.json it reads (tmp_path), with the values of the real checkpoint named in it, reads it
as `inferstack models --config` does (spec/hf_config.py), and works the per-rank sizes by hand. The vLLM rules are
cited per test; catalog/shard_blocks.json holds them with the same sources.

vLLM 0.33.0 differs from the issue's reading on one point, and these tests encode 0.33.0: block-quantized FP8
experts whose intermediate slice is not a multiple of the 128 block are not refused when a finer block of at
least 32 divides the slice and the hidden size (fused_moe/oracle/fp8.py:292-321 refine_fp8_moe_block_shape; with
the default moe_backend "auto", config/kernel.py:305, resolve_fp8_moe_weight_block_shape at :355-395 returns the
refined shape and quantization/fp8.py:554-566 skips validate_fp8_block_shape_moe; the Triton MoE kernels take any
block shape, fused_moe/experts/triton_moe.py:167-179). So Qwen3-235B-A22B-FP8 loads at tensor_parallel 8: its
1536 / 8 = 192 slice is refined to 64 x 64 blocks. The refusal ("The output_size of gate's and up's weight = N
is not divisible by weight quantization block_n = 128", quantization/utils/fp8_utils.py:1361-1366) remains where
the finest block is under 32.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from inferstack.cli import EXIT_BAD_INPUT, main
from inferstack.planning.fit_refusal import check_fit
from inferstack.planning.shard_blocks import block_problem
from inferstack.planning.sizing import parallelism_problem
from inferstack.spec import ModelServiceSpec, NodePoolSpec, SpecError
from inferstack.spec.pools import PoolHardware
from inferstack.spec.hf_config import service_fields_from_config

# Qwen/Qwen3-235B-A22B config.json (the catalog's model_sources entry: 94 layers, hidden 4096, 64 query / 4 KV
# heads of 128, 128 experts, 8 per token, moe_intermediate_size 1536, vocab 151936, max_position_embeddings 40960)
# with the quantization_config Qwen's FP8 checkpoints write (quant_method fp8, fmt e4m3, activation_scheme dynamic,
# weight_block_size [128, 128]; the catalog's Qwen/Qwen3-235B-A22B-FP8 source).
FP8_BLOCKS = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
QWEN3_235B_FP8 = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 94,
    "hidden_size": 4096, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
    "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 40960, "vocab_size": 151936,
    "tie_word_embeddings": False, "quantization_config": FP8_BLOCKS,
}
# Qwen/Qwen3-30B-A3B config.json (catalog model_sources: 48 layers, hidden 4096 -> 2048, 32 query / 4 KV heads of
# 128, 128 experts, 8 per token, moe_intermediate_size 768, vocab 151936, max_position_embeddings 40960).
QWEN3_30B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 48,
    "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 40960, "vocab_size": 151936,
    "tie_word_embeddings": False,
}
QWEN3_30B_FP8 = {**QWEN3_30B, "quantization_config": FP8_BLOCKS}
# Qwen/Qwen3-30B-A3B-GPTQ-Int4: the same shapes with the GPTQ quantization_config Qwen's Int4 checkpoints write
# (bits 4, group_size 128, sym true, desc_act false).
QWEN3_30B_GPTQ = {**QWEN3_30B, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128,
                                                       "sym": True, "desc_act": False}}


def service(tmp_path: Path, config: dict, model: str, **layout) -> ModelServiceSpec:
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return ModelServiceSpec(name="m", model=model, pool="p", **service_fields_from_config(tmp_path), **layout)


def test_qwen3_235b_fp8_at_tensor_parallel_8_loads_with_refined_blocks(tmp_path: Path):
    """vLLM 0.33.0 fused_moe/oracle/fp8.py:314-321: intermediate_size_per_partition 1536 / 8 = 192, 192 % 128 = 64,
    so the 128 x 128 scales are refined to gcd(128, 128, 192, 4096) = 64 >= 32 and the model loads. Attention
    (linear.py:1064-1077, fp8_utils.py:1329-1344): q 64 / 8 x 128 = 1024, k and v one replicated head of 128 (4 KV
    heads < 8), o_proj input 64 x 128 / 8 = 1024: all multiples of 128."""
    model = service(tmp_path, QWEN3_235B_FP8, "Qwen/Qwen3-235B-A22B-FP8", tensor_parallel=8)
    assert model.stored_format.weight_block_size == (128, 128)
    assert not model.resolved_expert_parallel
    assert 1536 // 8 == 192 and 192 % 128 and math.gcd(128, 128, 192, 4096) == 64
    assert block_problem(model) is None and parallelism_problem(model) is None


def test_sliced_experts_under_the_finest_block_are_refused_with_vllms_numbers(tmp_path: Path):
    """vLLM 0.33.0 fused_moe/config.py:1112 and 1351-1353: without expert parallelism the MoE layers are sliced over
    tensor_parallel x data_parallel = 8 x 2 = 16 ranks, 768 / 16 = 48; gcd(128, 128, 48, 2048) = 16 < 32
    (oracle/fp8.py:318-320), so no refinement and quantization/utils/fp8_utils.py:1361-1366 raises "The output_size
    of gate's and up's weight = 48 is not divisible by weight quantization block_n = 128"."""
    model = service(tmp_path, QWEN3_30B_FP8, "Qwen/Qwen3-30B-A3B-FP8", tensor_parallel=8, data_parallel=2,
                    data_parallel_local=1, expert_parallel=False)
    assert 768 // 16 == 48 and math.gcd(128, 128, 48, 2048) == 16
    problem = block_problem(model)
    assert problem is not None
    assert "gate's and up's weight = 768 / 16 = 48 is not divisible by weight quantization block_n = 128" in problem
    assert "gcd(128, 128, 48, 2048) = 16, is under 32" in problem
    assert parallelism_problem(model) == problem


def test_expert_parallelism_keeps_experts_whole_so_the_blocks_divide(tmp_path: Path):
    """vLLM 0.33.0 fused_moe/config.py:1226-1245: with --enable-expert-parallel the MoE layers run at tp_size 1, so
    intermediate_size_per_partition is the whole 768 = 6 x 128 (fp8_utils.py:1361 passes)."""
    model = service(tmp_path, QWEN3_30B_FP8, "Qwen/Qwen3-30B-A3B-FP8", tensor_parallel=8, data_parallel=2,
                    data_parallel_local=1, expert_parallel=True)
    assert 768 % 128 == 0
    assert block_problem(model) is None


def test_fewer_gpus_per_expert_refine_to_32(tmp_path: Path):
    """vLLM 0.33.0 oracle/fp8.py:318-321: at tensor_parallel 8 alone, 768 / 8 = 96, gcd(128, 128, 96, 2048) = 32,
    exactly the smallest refined block: it loads."""
    model = service(tmp_path, QWEN3_30B_FP8, "Qwen/Qwen3-30B-A3B-FP8", tensor_parallel=8)
    assert math.gcd(128, 128, 96, 2048) == 32
    assert block_problem(model) is None


def test_gptq_experts_halve_their_group_down_to_32_then_are_refused(tmp_path: Path):
    """vLLM 0.33.0 quantization/auto_gptq.py:238-250: experts Marlin cannot take (utils/marlin_utils.py:377-380,
    allow_tile_padding: 768 / 8 = 96 % 128 != 0) fall back to MoE WNA16, which halves group_size while it does not
    divide the slice and asserts group_size >= 32 (quantization/moe_wna16.py:280-286). At tensor_parallel 8:
    96 % 128, 96 % 64 = 32, 96 % 32 = 0 -> loads with groups of 32. At 8 x 2 data parallel without expert
    parallelism: 48 % 32 = 16 -> the group would drop to 16 -> refused."""
    loads = service(tmp_path, QWEN3_30B_GPTQ, "Qwen/Qwen3-30B-A3B-GPTQ-Int4", tensor_parallel=8)
    assert loads.stored_format.group_size == 128 and 96 % 32 == 0
    assert block_problem(loads) is None
    refused = loads.model_copy(update={"data_parallel": 2, "data_parallel_local": 1, "expert_parallel": False})
    assert 48 % 32 == 16
    assert block_problem(refused) == (
        "the expert intermediate size per partition = 768 / 16 = 48 (hidden size 2048) is not divisible by "
        "group_size = 128 nor by any halving of it down to 32")


def test_a_row_parallel_slice_that_cuts_a_group_is_refused():
    """vLLM 0.33.0 distributed/utils.py:137-152 verify_group_size_divides_partition (compressed_tensors_wNa16.py:171;
    auto_awq.py:819-823 for AWQ): o_proj's input is split by tensor_parallel. Hand-written shapes (no checkpoint has
    them): 8 heads of 64 under AWQ groups of 128; at tensor_parallel 8 a rank holds 8 x 64 / 8 = 64 inputs, half a
    group; at 4 it holds 128, one group."""
    architecture = {"params_billion": 1.0, "layers": 4, "hidden_size": 512, "attention_heads": 8, "kv_heads": 8,
                    "head_dim": 64, "max_context": 4096}
    awq = {"quant_method": "awq", "weight_bits": 4, "weight_type": "int", "group_size": 128, "zero_points": True}
    model = ModelServiceSpec(name="m", model="me/toy-awq", pool="p", architecture=architecture,
                             checkpoint_format=awq, tensor_parallel=8)
    assert 8 * 64 // 8 == 64 and 64 % 128
    assert block_problem(model) == (
        "o_proj's input_size_per_partition = 8 x 64 / 8 = 64 is not divisible by group_size = 128")
    assert block_problem(model.model_copy(update={"tensor_parallel": 4})) is None  # 128 per rank


def test_an_fp8_block_head_split_is_refused_on_the_qkv_partition():
    """vLLM 0.33.0 quantization/utils/fp8_utils.py:1329-1344: the column-parallel QKV layer checks each per-rank
    output partition against block_n; linear.py:1064-1077 gives q heads / tp x head_dim. 8 heads of 64 at
    tensor_parallel 2: q 4 x 64 = 256 (a multiple of 128), k and v 4 x 64 = 256; at tensor_parallel 4: q 2 x 64 =
    128, k and v 2 x 64 = 128; at tensor_parallel 8: q 64, not a multiple of 128 -> refused."""
    architecture = {"params_billion": 1.0, "layers": 4, "hidden_size": 512, "attention_heads": 8, "kv_heads": 8,
                    "head_dim": 64, "max_context": 4096}
    fp8 = {"quant_method": "fp8", "weight_bits": 8, "weight_type": "float", "activation_bits": 8,
           "weight_block_size": [128, 128]}
    model = ModelServiceSpec(name="m", model="me/toy-fp8", pool="p", architecture=architecture,
                             checkpoint_format=fp8, tensor_parallel=8)
    assert block_problem(model) == "q_proj's output_partition_size = 64 is not divisible by weight quantization block_n = 128"
    assert block_problem(model.model_copy(update={"tensor_parallel": 4})) is None


@pytest.mark.parametrize("expert_parallel", [None, True])
def test_the_spec_refusal_names_the_layout_field_the_numbers_and_the_fix(tmp_path: Path, capsys, expert_parallel):
    """The load failure above as `inferstack check` reports it: exit 2 on models[0].tensor_parallel with vLLM's
    numbers and the layouts that load (expert parallelism, or a tensor_parallel whose slice refines)."""
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_30B_FP8), encoding="utf-8")
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    model = {"name": "qwen", "model": "Qwen/Qwen3-30B-A3B-FP8", "pool": "h100", "tensor_parallel": 8,
             "data_parallel": 2, "data_parallel_local": 1, "expert_parallel": expert_parallel is True,
             **service_fields_from_config(tmp_path)}
    stack = {"environment": "blocks", "node_pools": [{"name": "h100", "instance_types": ["p5.48xlarge"],
                                                      "max_nodes": 2, "capacity": {"on_demand_base": 2}}],
             "models": [model]}
    (stacks / "blocks.json").write_text(json.dumps(stack), encoding="utf-8")
    status = main(["check", "blocks", "--stacks-dir", str(stacks)])
    err = capsys.readouterr().err
    if expert_parallel:
        assert status == 0 and "models[0]" not in err
        return
    assert status == EXIT_BAD_INPUT and "Traceback" not in err
    assert "models[0].tensor_parallel" in err
    assert "768 / 16 = 48 is not divisible by weight quantization block_n = 128" in err
    # tensor_parallel 4 x data_parallel 2 slices 768 / 8 = 96, refined to gcd(128, 128, 96, 2048) = 32: it loads.
    assert "set expert_parallel true" in err and "use tensor_parallel in [1, 2, 4]" in err


def test_experts_no_layout_can_split_are_refused_with_no_layout_offered():
    """vLLM 0.33.0 fused_moe/oracle/fp8.py:314-321 and quantization/utils/fp8_utils.py:1361-1366 at tensor_parallel
    1 too: hand-written experts of intermediate size 1400 (no checkpoint has them) under 128 x 128 FP8 blocks:
    1400 % 128 = 120 and gcd(128, 128, 1400, 2048) = 8 < 32 whole, and every slice of it is finer still, so no
    tensor_parallel loads and expert parallelism (whole experts) changes nothing."""
    architecture = {"params_billion": 3.0, "layers": 4, "hidden_size": 2048, "attention_heads": 16, "kv_heads": 8,
                    "head_dim": 128, "max_context": 4096, "experts": 8, "experts_per_token": 2,
                    "moe_intermediate_size": 1400}
    fp8 = {"quant_method": "fp8", "weight_bits": 8, "weight_type": "float", "activation_bits": 8,
           "weight_block_size": [128, 128]}
    model = ModelServiceSpec(name="m", model="me/toy-moe-fp8", pool="p", architecture=architecture,
                             checkpoint_format=fp8, tensor_parallel=2)
    assert math.gcd(128, 128, 1400, 2048) == 8
    hardware = PoolHardware(NodePoolSpec(name="p", instance_types=["p5.48xlarge"], max_nodes=1))
    with pytest.raises(SpecError) as caught:
        check_fit("models[0]", model, hardware)
    assert caught.value.path == "models[0].tensor_parallel"
    assert "1400 / 2 = 700 is not divisible by weight quantization block_n = 128" in caught.value.problem
    assert caught.value.fix == ("no tensor_parallel of the pool's 8-GPU nodes loads it: use another model or a hand-written "
                                "architecture that splits")
