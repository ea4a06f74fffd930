"""The dense MLP's quantization groups and blocks against tensor_parallel, as vLLM 0.33.0 checks them at load.

A dense layer's MLP is split over tensor_parallel: gate_up_proj is a MergedColumnParallelLinear (each rank holds
intermediate_size / tp outputs of gate and of up, vLLM 0.33.0 model_executor/layers/linear.py:497-503) and
down_proj a RowParallelLinear (each rank takes intermediate_size / tp inputs, linear.py:1708); models/qwen2.py:91-98
builds them. Under AWQ, GPTQ and W4A16 groups, down_proj's input per rank must hold whole groups:
quantization/auto_awq.py:306-333 uses Marlin only when utils/marlin_utils.py:306-325 check_marlin_supports_layer
passes (with tile padding, only input_size_per_partition % group_size == 0 matters), else the AWQ kernel, which
raises "The input size is not aligned with the quantized weight shape. This can be caused by too large tensor
parallel size." (auto_awq.py:819-824); GPTQ's kernel choice fails the same way (kernels/linear/mixed_precision/
marlin.py:57-66 "in_features per partition ... is not divisible by group_size"). Gate and up need no alignment
under groups: Marlin zero-pads misaligned output tiles (marlin.py:68, marlin_utils.py marlin_padded_nk). Under FP8
blocks, quantization/utils/fp8_utils.py:1318-1344 validate_fp8_block_shape checks down_proj's sliced input against
block_k and every gate/up output partition against block_n.

Each test writes the config.json it reads, with the real checkpoint's values and where they were read.
"""

from __future__ import annotations

import json
from pathlib import Path

from inferstack.catalog.models import model_facts
from inferstack.cli import EXIT_BAD_INPUT, main
from inferstack.planning.shard_blocks import block_problem
from inferstack.planning.sizing import parallelism_problem
from inferstack.presentation.models import model_report
from inferstack.spec import ModelServiceSpec
from inferstack.spec.hf_config import architecture_from_config, service_fields_from_config

# Qwen/Qwen2.5-14B-Instruct-AWQ config.json: the Qwen2.5-14B shapes (48 layers, hidden 5120, intermediate_size
# 13824, 40 query / 8 KV heads of 128, vocab 152064 untied, max_position_embeddings 32768: the catalog's
# Qwen/Qwen2.5-14B-Instruct source; intermediate_size 13824 also in a public Qwen2.5-14B shape table) with the
# quantization_config Qwen's AWQ checkpoints write (AutoAWQ GEMM: bits 4, group_size 128, zero_point true).
QWEN25_14B_AWQ = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824,
    "max_position_embeddings": 32768, "num_attention_heads": 40, "num_hidden_layers": 48, "num_key_value_heads": 8,
    "tie_word_embeddings": False, "vocab_size": 152064,
    "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                            "version": "gemm"},
}
# Qwen/Qwen2.5-72B-Instruct-AWQ config.json as a public planner's test fixture copies it: 80 layers, hidden 8192,
# intermediate_size 29696 (padded: Qwen2.5-72B-Instruct's is 29568), 64 query / 8 KV heads, the same AWQ config.
QWEN25_72B_AWQ = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8192, "intermediate_size": 29696,
    "max_position_embeddings": 32768, "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
    "tie_word_embeddings": False, "vocab_size": 152064,
    "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                            "version": "gemm"},
}


def service(tmp_path: Path, config: dict, model: str, **layout) -> ModelServiceSpec:
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return ModelServiceSpec(name="m", model=model, pool="p", **service_fields_from_config(tmp_path), **layout)


def test_config_json_gives_the_dense_intermediate_size(tmp_path: Path):
    """config.json intermediate_size is the dense MLP's width; Llama 4 sizes its dense layers by
    intermediate_size_mlp (vLLM 0.33.0 models/llama4.py:352) and a model whose every layer is MoE has none."""
    (tmp_path / "config.json").write_text(json.dumps(QWEN25_14B_AWQ), encoding="utf-8")
    arch = architecture_from_config(tmp_path)
    assert (arch.intermediate_size, arch.dense_layers) == (13824, 48)
    assert model_facts("Qwen/Qwen2.5-14B-Instruct-AWQ")["intermediate_size"] == 13824


def test_qwen25_14b_awq_at_tensor_parallel_8_cuts_down_projs_groups(tmp_path: Path):
    """13824 / 128 = 108 groups. tensor_parallel 8: down_proj's input_size_per_partition = 13824 / 8 = 1728 =
    13.5 groups -> Marlin is refused (marlin_utils.py:321-325) and AWQ's own kernel raises (auto_awq.py:819-824).
    tensor_parallel 4: 3456 = 27 groups; 2: 6912 = 54 groups: they load. Attention splits at 8 (o_proj input
    40 x 128 / 8 = 640 = 5 groups), so the dense MLP is the refusal."""
    model = service(tmp_path, QWEN25_14B_AWQ, "Qwen/Qwen2.5-14B-Instruct-AWQ", tensor_parallel=8)
    assert 13824 // 8 == 1728 and 1728 % 128 == 64 and 40 * 128 // 8 % 128 == 0
    assert block_problem(model) == ("the dense MLP of 48 layers: down_proj's input_size_per_partition = 13824 / 8 = "
                                    "1728 is not divisible by group_size = 128")
    assert parallelism_problem(model) == block_problem(model)
    for loads in (4, 2, 1):
        assert 13824 // loads % 128 == 0
        assert parallelism_problem(model.model_copy(update={"tensor_parallel": loads})) is None


def test_the_padded_72b_awq_checkpoint_splits_where_the_base_width_would_not(tmp_path: Path):
    """Qwen pads the 72B quantized checkpoints' MLP to 29696 = 232 groups: 29696 / 8 = 3712 = 29 groups, loads.
    The base width 29568 = 231 groups would not split even over 2 (14784 = 115.5 groups), so the catalog keeps the
    checkpoint's own width (models.json checkpoints[...].intermediate_size)."""
    model = service(tmp_path, QWEN25_72B_AWQ, "Qwen/Qwen2.5-72B-Instruct-AWQ", tensor_parallel=8)
    assert 29696 // 8 == 3712 and 3712 % 128 == 0 and 29568 // 2 % 128 == 64
    assert parallelism_problem(model) is None
    assert model_facts("Qwen/Qwen2.5-72B-Instruct-AWQ")["intermediate_size"] == 29696
    assert model_facts("Qwen/Qwen2.5-72B-Instruct")["intermediate_size"] == 29568
    unpadded = model.model_copy(update={"architecture": model.architecture.model_copy(
        update={"intermediate_size": 29568}), "tensor_parallel": 2})
    assert "29568 / 2 = 14784 is not divisible by group_size = 128" in block_problem(unpadded)


def test_fp8_blocks_check_gate_and_up_outputs_against_block_n():
    """fp8_utils.py:1329-1344: gate_up_proj's output partitions per rank divide by block_n = 128. Hand-written
    dense MLP of 1408 (no checkpoint has it; attention 16 heads of 128 splits at 2): 1408 / 2 = 704 = 5.5 blocks
    -> refused on gate/up; at tensor_parallel 1, 1408 = 11 blocks loads. A width of 2 x 1408 = 2816 at 2 gives
    1408 outputs (11 blocks) and 1408 down_proj inputs, divisible by block_k 128 too."""
    architecture = {"params_billion": 1.0, "layers": 4, "hidden_size": 2048, "attention_heads": 16, "kv_heads": 8,
                    "head_dim": 128, "max_context": 4096, "intermediate_size": 1408}
    fp8 = {"quant_method": "fp8", "weight_bits": 8, "weight_type": "float", "activation_bits": 8,
           "weight_block_size": [128, 128]}
    model = ModelServiceSpec(name="m", model="me/toy-fp8", pool="p", architecture=architecture,
                             checkpoint_format=fp8, tensor_parallel=2)
    assert 1408 // 2 % 128 == 64 and 1408 % 128 == 0
    assert block_problem(model) == (
        "the dense MLP of 4 layers: the output_partition_size of gate_proj's and up_proj's weight = 1408 / 2 = 704 "
        "is not divisible by weight quantization block_n = 128")
    assert block_problem(model.model_copy(update={"tensor_parallel": 1})) is None
    wider = model.model_copy(update={"architecture": model.architecture.model_copy(update={"intermediate_size": 2816})})
    assert block_problem(wider) is None


def test_inferstack_check_refuses_the_layout_with_the_path_numbers_and_fix(tmp_path: Path, capsys):
    """The load failure above as `inferstack check` reports it: exit 2 on models[0].tensor_parallel, vLLM's
    numbers, and the tensor_parallel sizes of the 8-GPU node that load (1, 2, 4)."""
    (tmp_path / "config.json").write_text(json.dumps(QWEN25_14B_AWQ), encoding="utf-8")
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    model = {"name": "qwen", "model": "Qwen/Qwen2.5-14B-Instruct-AWQ", "pool": "a100", "tensor_parallel": 8,
             **service_fields_from_config(tmp_path)}
    stack = {"environment": "dense", "node_pools": [{"name": "a100", "instance_types": ["p4d.24xlarge"],
                                                     "max_nodes": 1, "capacity": {"on_demand_base": 1}}],
             "models": [model]}
    (stacks / "dense.json").write_text(json.dumps(stack), encoding="utf-8")
    status = main(["check", "dense", "--stacks-dir", str(stacks)])
    err = capsys.readouterr().err
    assert status == EXIT_BAD_INPUT and "Traceback" not in err
    assert "models[0].tensor_parallel" in err
    assert "down_proj's input_size_per_partition = 13824 / 8 = 1728 is not divisible by group_size = 128" in err
    assert "use tensor_parallel in [1, 2, 4]" in err


def test_models_rows_only_offer_layouts_whose_dense_groups_split():
    """`inferstack models` rows for the 14B AWQ checkpoint pass the same rule (13824 / tp whole groups)."""
    for row in model_report("Qwen/Qwen2.5-14B-Instruct-AWQ")["fits"]:
        if row["fits"]:
            assert 13824 // row["tensor_parallel"] % 128 == 0, row
