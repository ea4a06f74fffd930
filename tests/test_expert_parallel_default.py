"""An MoE service's expert parallelism defaults to what vLLM runs its layout with (issue 25 item 6), and the plan
says which and why.

`expert_parallel` unset is auto. Upstream, read for the rule:
* vLLM 0.33.0 wheel, vllm/config/parallel.py line 190: `enable_expert_parallel: bool = False`, "Use expert
  parallelism instead of tensor parallelism for MoE layers"; vllm/model_executor/layers/fused_moe/config.py
  `FusedMoEParallelConfig.make` (lines 1198-1233): without it the MoE layers are one tensor-parallel group of
  tp x dp GPUs, every expert sliced that many ways; with it each GPU owns whole experts (ep_size = tp x dp).
* vLLM docs/serving/data_parallel_deployment.md: "By default, expert layers form a tensor parallel group of size
  DP x TP. To use expert parallelism instead, include the --enable-expert-parallel CLI arg";
  docs/serving/expert_parallel_deployment.md: "EP is typically coupled with Data Parallelism (DP) ... EP is more
  efficient when used in conjunction with DP". vllm-project/recipes strategies/single_node_dep.yaml and
  multi_node_dep.yaml (data + expert parallel, "Best throughput for MoE models") pass --enable-expert-parallel
  with --data-parallel-size, as every data-parallel MoE recipe does (DeepSeek/DeepSeek-V3.md DP8+EP,
  moonshotai/Kimi-K2.md DP16+EP, Qwen/Qwen3-Coder-480B-A35B.md DP8+EP).
  => auto is ON when data_parallel > 1.
* fused_moe/config.py line 1352, `assert self.intermediate_size % tp_size == 0`: experts that do not split over
  the group cannot be sliced at all (Qwen3-Coder-480B-A35B.md: when the sliced experts fail to load, switch to
  data + expert parallel). => auto is ON when moe_intermediate_size does not divide by tp x dp.
* vllm-project/recipes src/lib/command-synthesis.js `recommendStrategy`: "Tensor Parallel is the default for every
  model" unless a recipe names another. => auto is OFF for a tensor-parallel replica whose experts slice evenly,
  which is vLLM's own default; `expert_parallel: true` turns it on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from inferstack.cli import main
from inferstack.planning.sizing import experts_per_device, fit, parallel_layout, parallelism_problem
from inferstack.serving.vllm_args import engine_args
from inferstack.spec import ModelServiceSpec, NodePoolSpec, SpecError, StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.validation import validate

VLLM_SRC = Path("/tmp/vllm/src/vllm")
H200 = PoolHardware(NodePoolSpec(name="h200", instance_types=["p5en.48xlarge"], max_nodes=2, efa=True))


def deepseek(**fields) -> ModelServiceSpec:
    return ModelServiceSpec(name="deepseek", model="deepseek-ai/DeepSeek-V3", pool="h200", max_model_len=32768,
                            max_num_seqs=32, kv_cache_dtype="fp8", **fields)


# A GQA MoE whose experts (intermediate size 1410) do not split over 4 GPUs though its 32 heads do.
ODD = dict(params_billion=30.0, layers=48, hidden_size=2048, attention_heads=32, kv_heads=4, head_dim=128,
           max_context=32768, vocab_size=151936, experts=64, experts_per_token=8, moe_intermediate_size=1410)


def odd(**fields) -> ModelServiceSpec:
    return ModelServiceSpec(name="odd", model="acme/odd-moe", pool="h200", architecture=ODD, **fields)


def test_the_field_defaults_to_auto_and_the_schema_says_so(capsys):
    assert ModelServiceSpec.model_fields["expert_parallel"].default is None
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "expert_parallel" in node and isinstance(node["expert_parallel"], dict):
                found.append(node["expert_parallel"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    (field,) = found
    assert field["default"] is None and {"type": "boolean"} in field["anyOf"] and {"type": "null"} in field["anyOf"]
    assert "Defaults to auto" in field["description"]


def test_upstream_defaults_are_as_read():
    if not (VLLM_SRC / "config/parallel.py").exists():
        pytest.skip("the vLLM 0.33.0 wheel is not extracted at /tmp/vllm")
    parallel = (VLLM_SRC / "config/parallel.py").read_text().splitlines()
    assert parallel[189].strip() == "enable_expert_parallel: bool = False"
    moe = (VLLM_SRC / "model_executor/layers/fused_moe/config.py").read_text().splitlines()
    assert moe[1351].strip() == "assert self.intermediate_size % tp_size == 0"


def test_data_parallel_ranks_run_expert_parallel_by_default():
    model = deepseek(data_parallel=8)
    assert model.expert_parallel is None and model.resolved_expert_parallel
    assert model.expert_parallel_basis == "data_parallel"
    assert "--enable-expert-parallel" in engine_args(model, H200)
    assert experts_per_device(model) == 32                        # whole experts: 256 over 8 GPUs
    assert fit(model, H200).weights_bytes_per_device == fit(deepseek(data_parallel=8, expert_parallel=True),
                                                             H200).weights_bytes_per_device
    assert parallel_layout(model) == (
        "tensor_parallel 1 x data_parallel 8 (8 per node); expert parallel (auto: data-parallel ranks share the MoE "
        "layers, which vLLM runs expert-parallel): 32 of 256 experts per GPU, all-to-all allgather_reducescatter"
    )


def test_a_tensor_parallel_replica_stays_sliced_by_default_and_the_plan_says_why():
    model = deepseek(tensor_parallel=8)
    assert not model.resolved_expert_parallel and model.expert_parallel_basis == "off"
    assert "--enable-expert-parallel" not in engine_args(model, H200)
    assert parallel_layout(model) == (
        "tensor_parallel 8; every expert sliced 8 ways (auto: vLLM's default for a tensor-parallel replica; "
        "expert_parallel: true holds whole experts per GPU instead)"
    )


def test_stated_values_win():
    assert not deepseek(data_parallel=8, expert_parallel=False).resolved_expert_parallel
    assert "--enable-expert-parallel" not in engine_args(deepseek(data_parallel=8, expert_parallel=False), H200)
    assert parallel_layout(deepseek(data_parallel=8, expert_parallel=False)).endswith("every expert sliced 8 ways")
    on = deepseek(tensor_parallel=8, expert_parallel=True)
    assert on.resolved_expert_parallel and on.expert_parallel_basis == "stated"
    assert "--enable-expert-parallel" in engine_args(on, H200)
    assert parallel_layout(on).endswith(
        "expert parallel: 32 of 256 experts per GPU, all-to-all allgather_reducescatter"
    )


def test_experts_that_cannot_be_sliced_run_expert_parallel_by_default():
    auto = odd(tensor_parallel=4)
    assert auto.expert_parallel_basis == "unsliceable" and auto.resolved_expert_parallel
    assert parallelism_problem(auto) is None
    assert "the experts' intermediate size does not split over the GPUs" in parallel_layout(auto)
    assert "--enable-expert-parallel" in engine_args(auto, H200)
    sliced = odd(tensor_parallel=4, expert_parallel=False)
    assert parallelism_problem(sliced) == (
        "experts of intermediate size 1410 do not split evenly over 4 GPUs (tensor_parallel x data_parallel)"
    )


def test_a_stated_backend_asks_for_expert_parallelism():
    model = deepseek(tensor_parallel=8, all2all_backend="deepep_low_latency")
    assert model.resolved_expert_parallel and model.expert_parallel_basis == "all2all_backend"
    args = engine_args(model, H200)
    assert "--enable-expert-parallel" in args and "deepep_low_latency" in args


def test_one_gpu_a_dense_model_and_more_gpus_than_experts_stay_off():
    assert not ModelServiceSpec(name="g", model="openai/gpt-oss-120b", pool="h200").resolved_expert_parallel
    dense = ModelServiceSpec(name="l", model="meta-llama/Llama-3.1-70B-Instruct", pool="h200", tensor_parallel=8)
    assert not dense.resolved_expert_parallel and "--enable-expert-parallel" not in engine_args(dense, H200)
    mixtral = ModelServiceSpec(name="m", model="mistralai/Mixtral-8x7B-Instruct-v0.1", pool="h200",
                               tensor_parallel=4, data_parallel=4)
    assert not mixtral.resolved_expert_parallel                   # 16 GPUs for 8 experts
    assert "would leave some with none" in parallel_layout(mixtral)


# ------------------------------------------------------------------------------------------ through the stack


def stack(**model) -> dict:
    return {
        "environment": "ep",
        "region": "us-east-2",
        "node_pools": [{"name": "h200", "instance_types": ["p5en.48xlarge"], "min_nodes": 1, "max_nodes": 1,
                        "capacity": {"on_demand_base": 1}}],
        "models": [{"name": "qwen", "model": "Qwen/Qwen3-30B-A3B", "pool": "h200", "max_model_len": 32768,
                    "max_num_seqs": 16, **model}],
    }


def test_the_plan_prints_the_choice(tmp_path, capsys):
    path = tmp_path / "ep.yaml"
    path.write_text(yaml.safe_dump(stack(data_parallel=4)))
    assert main(["plan", str(path)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "expert parallel (auto: data-parallel ranks share the MoE layers, which vLLM runs expert-parallel)" in said
    out = tmp_path / "out"
    assert main(["render", str(path), "--out", str(out)]) == 0
    (row,) = json.loads((out / "plan.json").read_text())["placements"]
    assert "expert parallel (auto: data-parallel" in row["layout"]
    deployments = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))]
    (vllm,) = [c for d in deployments if d["kind"] == "Deployment"
               for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    assert "--enable-expert-parallel" in vllm["args"]


REFUSALS = {
    "a backend on a dense model": (
        dict(model="meta-llama/Llama-3.1-8B-Instruct", all2all_backend="allgather_reducescatter"),
        "models[0].all2all_backend", "is a dense model with no experts to split", "drop all2all_backend"),
    "a backend on one GPU": (
        dict(all2all_backend="deepep_low_latency"),
        "models[0].all2all_backend", "this replica has one", "drop all2all_backend"),
    "stated expert parallelism on one GPU": (
        dict(expert_parallel=True), "models[0].expert_parallel", "this replica has one",
        "set expert_parallel to false"),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_asking_for_expert_parallelism_where_it_cannot_run_is_refused(case):
    fields, path, says, fix = REFUSALS[case]
    with pytest.raises(SpecError) as caught:
        validate(StackSpec.model_validate(stack(**fields)))
    error = caught.value
    assert error.path == path and says in error.problem and fix in error.fix and str(error).count("To fix:") == 1


def test_a_backend_with_expert_parallel_false_is_refused_at_load():
    with pytest.raises(ValidationError, match="only applies to expert-parallel MoE layers"):
        StackSpec.model_validate(stack(data_parallel=4, expert_parallel=False, all2all_backend="deepep_low_latency"))
