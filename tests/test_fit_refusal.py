"""Where a fit refusal lands and what it offers (planning/fit_refusal.py).

A model too big for its pool is refused on the field the first change inside the pool is made on (quantization
for a lower precision, tensor_parallel or pipeline_parallel for more of the pool's GPUs, mig_profile for a larger
slice), else on `pool`, with the layouts of the same GPU that fit: vLLM starts a service only when its weights and
one full-length sequence fit each GPU (vLLM 0.33.0 v1/core/kv_cache_utils.py check_enough_kv_cache_memory), the
rule planning.sizing.fit encodes. The options' figures are recomputed here from sizing.fit, never written down.
"""

from __future__ import annotations

import json
from pathlib import Path

from stack_files import refusal

from inferstack.catalog import INSTANCE_TYPES
from inferstack.cli import EXIT_BAD_INPUT, main
from inferstack.planning.sizing import fit
from inferstack.spec import ModelServiceSpec, NodePoolSpec
from inferstack.spec.pools import PoolHardware

A10G_ONE = {"name": "a10g", "instance_types": ["g5.xlarge"], "max_nodes": 1, "capacity": {"on_demand_base": 1}}


def stack(pool: dict, **model) -> dict:
    return {"environment": "fit", "node_pools": [pool], "models": [{"name": "m", "pool": pool["name"], **model}]}


def sized(model: str, instance_type: str, **layout):
    service = ModelServiceSpec(name="m", model=model, pool="p", **layout)
    return fit(service, PoolHardware(NodePoolSpec(name="p", instance_types=[instance_type], max_nodes=1)))


def test_a_model_too_big_for_a_one_gpu_node_is_refused_on_the_pool_with_the_node_that_holds_it():
    """gpt-oss-120b (openai/gpt-oss-120b config.json: 128 MXFP4 experts of 2880 x 2880 over 36 layers, 116.83B
    parameters) on one A10G (22,888 MiB x 0.92 = 20.56 GiB): no lower precision exists (the checkpoint is already
    4-bit and the catalog holds no smaller one), the pool has one GPU per node and one node, so the change is the
    pool: 4 x A10G of a g5.12xlarge at tensor_parallel 4, as the issue's user found."""
    assert INSTANCE_TYPES["g5.12xlarge"].gpu_count == 4 and INSTANCE_TYPES["g5.12xlarge"].gpu.name == "A10G"
    error = refusal(stack(A10G_ONE, model="openai/gpt-oss-120b"))
    assert error.path == "models[0].pool"
    assert "a A10G gives 20.56 GiB at gpu_memory_utilization 0.92" in error.problem
    assert round(22_888 * 0.92 / 1024, 2) == 20.56
    held = sized("openai/gpt-oss-120b", "g5.12xlarge", tensor_parallel=4)
    assert held.starts and not sized("openai/gpt-oss-120b", "g5.12xlarge", tensor_parallel=2).starts
    assert error.fix == (f"a node with more GPUs: a pool of g5.12xlarge (4 x A10G) at tensor_parallel 4 gives "
                         f"{held.max_concurrency} x 8192-token sequences")
    assert "nothing inferstack knows" not in error.fix


def test_more_nodes_of_the_pool_put_it_on_pipeline_parallel():
    """The same model with four one-GPU nodes allowed: four pipeline stages hold it, a change inside the pool."""
    error = refusal(stack({**A10G_ONE, "max_nodes": 4}, model="openai/gpt-oss-120b"))
    assert error.path == "models[0].pipeline_parallel"
    assert error.fix.startswith("more GPUs: tensor_parallel 1, pipeline_parallel 4 (4 GPUs) gives ")


def test_more_gpus_of_the_node_put_it_on_tensor_parallel():
    """Qwen3-235B-A22B-FP8 (220.02 GiB of FP8 weights) at tensor_parallel 1 on an 8 x H100 node: no smaller
    checkpoint in the catalog, 4 of the node's GPUs hold it."""
    pool = {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 1, "capacity": {"on_demand_base": 1}}
    error = refusal(stack(pool, model="Qwen/Qwen3-235B-A22B-FP8"))
    assert error.path == "models[0].tensor_parallel"
    held = sized("Qwen/Qwen3-235B-A22B-FP8", "p5.48xlarge", tensor_parallel=4)
    assert error.fix == (f"more GPUs: tensor_parallel 4, pipeline_parallel 1 (4 GPUs) gives {held.max_concurrency} "
                         "x 8192-token sequences")


def test_a_lower_precision_that_fits_keeps_it_on_quantization():
    """Llama-3.1-70B in 16 bits (141 GB) on one H100 of a p5.4xlarge: online FP8 is the first change offered."""
    pool = {"name": "h100", "instance_types": ["p5.4xlarge"], "max_nodes": 1, "capacity": {"on_demand_base": 1}}
    error = refusal(stack(pool, model="meta-llama/Llama-3.1-70B-Instruct"))
    assert error.path == "models[0].quantization" and error.fix.startswith("lower precision: ")


def test_nothing_fits_on_any_node_of_the_gpu_says_so_on_the_pool():
    """DeepSeek-V3's 626.64 GiB of FP8 weights exceed even 8 x A10G (8 x 20.56 = 164.5 GiB)."""
    error = refusal(stack(A10G_ONE, model="deepseek-ai/DeepSeek-V3"))
    assert error.path == "models[0].pool"
    assert error.fix == "nothing inferstack knows fits it on a A10G: use a GPU with more memory"


def test_the_cli_exits_2_with_the_pool_field_and_the_layout(tmp_path: Path, capsys):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "fit.json").write_text(json.dumps(stack(A10G_ONE, model="openai/gpt-oss-120b")), encoding="utf-8")
    status = main(["check", "fit", "--stacks-dir", str(stacks)])
    err = capsys.readouterr().err
    assert status == EXIT_BAD_INPUT and "Traceback" not in err
    assert "models[0].pool" in err and "a pool of g5.12xlarge (4 x A10G) at tensor_parallel 4" in err
