"""Whether every quantized matrix of a model splits on its quantization blocks in a parallel layout.

vLLM refuses at load a layout whose per-rank slice of a matrix cuts through an FP8 scale block or a
quantization group (catalog/shard_blocks.json names each rule's vLLM source); sizing's parallelism_problem
asks `block_problem` so spec refusals, the plan and `inferstack models` agree.
"""

from __future__ import annotations

import json
import math
from importlib.resources import files

from inferstack.planning.quantization import served_format
from inferstack.spec import CheckpointFormat, ModelServiceSpec

RULES = json.loads(files("inferstack.catalog").joinpath("shard_blocks.json").read_text(encoding="utf-8"))
MIN_REFINED_FP8_MOE_BLOCK: int = RULES["fp8_block_moe"]["min_refined_block"]
GROUP_MOE_METHODS: frozenset[str] = frozenset(RULES["group_moe"]["methods"])
GROUP_HALVING_METHODS: frozenset[str] = frozenset(RULES["group_moe"]["halving_methods"])
MIN_HALVED_GROUP: int = RULES["group_moe"]["min_halved_group"]


def _attention_slices(model: ModelServiceSpec) -> dict[str, int]:
    """Per-rank sizes of the attention matrices along their split: q, k and v outputs split by head (a KV head
    replicated when tensor_parallel exceeds kv_heads), o_proj's input."""
    arch = model.resolved_architecture
    tp = model.tensor_parallel
    kv_heads_per_rank = max(arch.kv_heads // tp, 1)
    return {
        "q_proj": arch.attention_heads // tp * arch.head_dim,
        "k_proj": kv_heads_per_rank * arch.head_dim,
        "v_proj": kv_heads_per_rank * arch.head_dim,
        "o_proj": arch.attention_heads * arch.head_dim // tp,
    }


def _expert_split(model: ModelServiceSpec) -> int:
    """GPUs an expert's intermediate size is sliced over: 1 under expert parallelism (whole experts per rank),
    else the tensor_parallel x data_parallel group."""
    return 1 if model.resolved_expert_parallel else model.tensor_parallel * model.data_parallel


def _dense_mlp_problem(model: ModelServiceSpec, column: tuple[str, int] | None, row: tuple[str, int]) -> str | None:
    """The dense layers' MLP split over tensor_parallel: gate_up_proj (MergedColumnParallelLinear) gives each rank
    intermediate / tp outputs of gate and of up, checked against `column` (FP8's block_n; None where the kernel
    pads outputs); down_proj (RowParallelLinear) takes intermediate / tp inputs per rank, checked against `row`
    when sliced. Each is (vLLM's name of the block, its size)."""
    arch = model.resolved_architecture
    if arch.intermediate_size is None or not arch.dense_layers:
        return None
    tp = model.tensor_parallel
    size = arch.intermediate_size
    where = f"the dense MLP of {arch.dense_layers} layers"
    if size % tp:
        return f"{where}: intermediate_size {size} is not divisible by tensor_parallel {tp}"
    per_rank = size // tp
    if column is not None and per_rank % column[1]:
        return (f"{where}: the output_partition_size of gate_proj's and up_proj's weight = {size} / {tp} = "
                f"{per_rank} is not divisible by {column[0]} = {column[1]}")
    if tp > 1 and per_rank % row[1]:
        return (f"{where}: down_proj's input_size_per_partition = {size} / {tp} = {per_rank} is not divisible by "
                f"{row[0]} = {row[1]}")
    return None


def _fp8_block_problem(model: ModelServiceSpec, block_n: int, block_k: int) -> str | None:
    arch = model.resolved_architecture
    if arch.attention == "gqa":
        slices = _attention_slices(model)
        # Sliced, every q, k and v partition is checked; merged on one GPU, all but the last (v).
        merged = ("q_proj", "k_proj", "v_proj") if model.tensor_parallel > 1 else ("q_proj", "k_proj")
        for name in merged:
            if slices[name] % block_n:
                return (f"{name}'s output_partition_size = {slices[name]} is not divisible by weight "
                        f"quantization block_n = {block_n}")
        o_input = slices["o_proj"]
        if model.tensor_parallel > 1 and o_input % block_k:
            return (f"o_proj's input_size_per_partition = {arch.attention_heads} x {arch.head_dim} / "
                    f"{model.tensor_parallel} = {o_input} is not divisible by weight quantization block_k = "
                    f"{block_k}")
    dense = _dense_mlp_problem(model, ("weight quantization block_n", block_n),
                               ("weight quantization block_k", block_k))
    if dense is not None:
        return dense
    return None if arch.experts is None else _fp8_expert_problem(model, block_n, block_k, _expert_split(model))


def _fp8_expert_problem(model: ModelServiceSpec, block_n: int, block_k: int, split: int) -> str | None:
    arch = model.resolved_architecture
    per_rank = arch.moe_intermediate_size // split
    if per_rank % block_n == 0 and (split == 1 or per_rank % block_k == 0):
        return None
    refined = math.gcd(block_n, block_k, per_rank, arch.hidden_size)
    if refined >= MIN_REFINED_FP8_MOE_BLOCK:
        return None  # vLLM refines the block scales to refined x refined and loads.
    return (f"the output_size of gate's and up's weight = {arch.moe_intermediate_size} / {split} = {per_rank} is "
            f"not divisible by weight quantization block_n = {block_n}, and the finest block vLLM could refine the "
            f"scales to, gcd({block_n}, {block_k}, {per_rank}, {arch.hidden_size}) = {refined}, is under "
            f"{MIN_REFINED_FP8_MOE_BLOCK}")


def _group_problem(model: ModelServiceSpec, stored: CheckpointFormat) -> str | None:
    arch = model.resolved_architecture
    group = stored.group_size
    if stored.applies_to == "linear" and arch.attention == "gqa":
        o_input = _attention_slices(model)["o_proj"]
        if o_input % group:
            return (f"o_proj's input_size_per_partition = {arch.attention_heads} x {arch.head_dim} / "
                    f"{model.tensor_parallel} = {o_input} is not divisible by group_size = {group}")
    if stored.applies_to == "linear":
        # Marlin zero-pads misaligned output tiles (marlin_padded_nk), so only down_proj's input has a rule.
        dense = _dense_mlp_problem(model, None, ("group_size", group))
        if dense is not None:
            return dense
    return _group_expert_problem(model, stored, _expert_split(model))


def _group_expert_problem(model: ModelServiceSpec, stored: CheckpointFormat, split: int) -> str | None:
    arch = model.resolved_architecture
    group = stored.group_size
    if arch.experts is None or stored.quant_method not in GROUP_MOE_METHODS:
        return None
    per_rank = arch.moe_intermediate_size // split
    fitting = group
    if stored.quant_method in GROUP_HALVING_METHODS:
        while fitting > MIN_HALVED_GROUP and (per_rank % fitting or arch.hidden_size % fitting):
            fitting //= 2
    if arch.hidden_size % fitting or per_rank % fitting:
        halved = f" nor by any halving of it down to {MIN_HALVED_GROUP}" if fitting != group else ""
        return (f"the expert intermediate size per partition = {arch.moe_intermediate_size} / {split} = {per_rank} "
                f"(hidden size {arch.hidden_size}) is not divisible by group_size = {group}{halved}")
    return None


def block_problem(model: ModelServiceSpec) -> str | None:
    """Why vLLM would refuse this layout for the served format's blocks or groups, in vLLM's numbers; None when
    every matrix splits on them."""
    stored = served_format(model)
    if stored.weight_block_size is not None:
        return _fp8_block_problem(model, *stored.weight_block_size)
    if stored.group_size is not None:
        return _group_problem(model, stored)
    return None
