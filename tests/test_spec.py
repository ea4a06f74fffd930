"""The stack spec: valid specs parse; every rejection names the field path, the value and the fix."""

from __future__ import annotations

import copy
import json

import pytest
from stack_files import rejection

from inferstack.spec import StackSpec
from inferstack.validation import validate


def base() -> dict:
    """A small valid spec; each test changes one thing."""
    return {
        "environment": "test",
        "node_pools": [
            {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 2, "efa": True,
             "capacity": {"on_demand_base": 1}},
            {"name": "mig", "instance_types": ["p4de.24xlarge"], "max_nodes": 1, "capacity": {"on_demand_base": 1},
             "gpu_sharing": {"mode": "mig", "layout": {"3g.40gb": 2}}},
            {"name": "l4", "instance_types": ["g6.xlarge", "g6.2xlarge"], "max_nodes": 2,
             "gpu_sharing": {"mode": "time_slicing", "replicas": 2}},
        ],
        "models": [
            {"name": "llama", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100", "tensor_parallel": 2},
            {"name": "embed", "model": "BAAI/bge-large-en-v1.5", "pool": "mig", "mig_profile": "3g.40gb",
             "max_model_len": 512},
        ],
        "workers": [{"name": "w", "model_service": "llama", "image": "python:3.13.1-slim"}],
    }


def test_valid_spec_fills_documented_defaults():
    spec = validate(StackSpec.model_validate(base())).written
    assert spec.cluster.kubernetes_version == "1.36"
    assert spec.node_pools[0].efa.enabled and spec.node_pools[0].nvme_cache.raid == "RAID0"
    assert [q.name for q in spec.queues.cluster_queues] == ["serving", "batch"]
    assert spec.models[0].gpu_memory_utilization == 0.92


def test_every_field_is_documented_with_its_default():
    schema = StackSpec.model_json_schema()
    missing = []
    for name, definition in [("StackSpec", schema), *schema["$defs"].items()]:
        for field, prop in definition.get("properties", {}).items():
            text = prop.get("description", "")
            if not text or not ("Defaults to" in text or "Required" in text or field == "mode"):
                missing.append(f"{name}.{field}")
    assert missing == []


def mutate(path_setter):
    spec = copy.deepcopy(base())
    path_setter(spec)
    return spec


REJECTIONS = {
    "unknown field": (
        lambda s: s["node_pools"][0].update(maxnodes=3),
        "node_pools[0].maxnodes", "did you mean 'max_nodes'",
    ),
    "unknown instance type": (
        lambda s: s["node_pools"][0].update(instance_types=["p5.48xlarg"]),
        "node_pools[0].instance_types[0]", "did you mean 'p5.48xlarge'",
    ),
    "model names a missing pool": (
        lambda s: s["models"][0].update(pool="h200"),
        "models[0].pool", "'h200' is not a node pool",
    ),
    "mig profile not on the GPU": (
        lambda s: s["models"][1].update(mig_profile="3g.71gb"),
        "models[1].mig_profile", "not a MIG profile of A100-80GB",
    ),
    "mig profile not in the pool layout": (
        lambda s: s["models"][1].update(mig_profile="1g.10gb"),
        "models[1].mig_profile", "has no 1g.10gb slices",
    ),
    "tensor parallel beyond a node": (
        lambda s: s["node_pools"][0].update(instance_types=["p5.4xlarge"]),
        "models[0].tensor_parallel", "tensor_parallel 2 exceeds the 1 GPUs of a p5.4xlarge node",
    ),
    "tensor parallel beyond its range": (
        lambda s: s["models"][0].update(tensor_parallel=16),
        "models[0].tensor_parallel", "less than or equal to 8",
    ),
    "pipeline parallel beyond the pool": (
        lambda s: s["models"][0].update(tensor_parallel=8, pipeline_parallel=3),
        "models[0].pipeline_parallel", "has max_nodes 2",
    ),
    "efa on a type without it": (
        lambda s: s["node_pools"][2].update(efa=True),
        "node_pools[2].instance_types[0]", "g6.xlarge does not support EFA",
    ),
    "efa pool mixing network cards": (  # in a region that offers both types
        lambda s: (s["node_pools"][0].update(instance_types=["p5e.48xlarge", "p5en.48xlarge"]),
                   s.update(region="us-west-2")),
        "node_pools[0].instance_types", "p5e.48xlarge has 32, p5en.48xlarge has 16",
    ),
    "min above max": (
        lambda s: s["node_pools"][2].update(min_nodes=3),
        "node_pools[2].min_nodes", "min_nodes 3 can't be greater than max_nodes 2",
    ),
    "baseline above max": (
        lambda s: s["node_pools"][0]["capacity"].update(on_demand_base=5),
        "node_pools[0].capacity.on_demand_base", "can't be greater than max_nodes 2",
    ),
    "replicas min above max": (
        lambda s: s["models"][0].update(autoscaling={"min_replicas": 4, "max_replicas": 2}),
        "models[0].autoscaling.min_replicas", "min_replicas 4 can't be greater than max_replicas 2",
    ),
    "zero replicas without scale to zero": (
        lambda s: s["models"][0].update(autoscaling={"min_replicas": 0, "max_replicas": 2}),
        "models[0].autoscaling.min_replicas", "scale_to_zero is false",
    ),
    "mig on a GPU without MIG": (
        lambda s: s["node_pools"][2].update(gpu_sharing={"mode": "mig", "layout": {"1g.10gb": 7}}),
        "node_pools[2].gpu_sharing.mode", "L4 (g6.xlarge) does not support MIG",
    ),
    "too many mig slices": (
        lambda s: s["node_pools"][1].update(gpu_sharing={"mode": "mig", "layout": {"3g.40gb": 2, "1g.10gb": 1}}),
        "node_pools[1].gpu_sharing.layout", "needs 7 compute and 9 memory slices",
    ),
    "mig profile count beyond its maximum": (
        lambda s: s["node_pools"][1].update(gpu_sharing={"mode": "mig", "layout": {"3g.40gb": 3}}),
        "node_pools[1].gpu_sharing.layout.3g.40gb", "holds at most 2",
    ),
    "media-extension mig profile": (
        lambda s: s["node_pools"][1].update(gpu_sharing={"mode": "mig", "layout": {"1g.10gb+me": 1}}),
        "node_pools[1].gpu_sharing.layout.1g.10gb+me", "is a media-extension profile",
    ),
    "single strategy with two profiles": (
        lambda s: s["node_pools"][1].update(
            gpu_sharing={"mode": "mig", "strategy": "single", "layout": {"3g.40gb": 1, "2g.20gb": 1}}
        ),
        "node_pools[1].gpu_sharing.strategy", "must use one profile",
    ),
    "mig slice on a time-sliced pool": (
        lambda s: s["models"][1].update(pool="l4"),
        "models[1].mig_profile", "is not partitioned with MIG",
    ),
    "parallel model on a shared gpu": (
        lambda s: s["models"][0].update(pool="l4", tensor_parallel=2),
        "models[0].tensor_parallel", "shares GPUs",
    ),
    "instance types with different GPUs": (
        lambda s: s["node_pools"][2].update(instance_types=["g6.xlarge", "g6e.xlarge"]),
        "node_pools[2].instance_types[1]", "must be interchangeable",
    ),
    "unknown model without architecture": (
        lambda s: s["models"][0].update(model="acme/secret-model"),
        "models[0].model", "not in the model catalog",
    ),
    "context beyond the model": (
        lambda s: s["models"][1].update(max_model_len=8192),
        "models[1].max_model_len", "longer than BAAI/bge-large-en-v1.5's context of 512",
    ),
    "worker calls a missing service": (
        lambda s: s["workers"][0].update(model_service="lama"),
        "workers[0].model_service", "did you mean 'llama'",
    ),
    "duplicate pool names": (
        lambda s: s["node_pools"][2].update(name="h100", efa=False),
        "node_pools[2].name", "'h100' is used 2 times",
    ),
    "unpinned worker image": (
        lambda s: s["workers"][0].update(image="python"),
        "workers[0].image", "is not an image reference pinned to a tag or a digest",
    ),
    "unknown sharing mode": (
        lambda s: s["node_pools"][2].update(gpu_sharing={"mode": "vgpu"}),
        "node_pools[2].gpu_sharing", "'vgpu' is not a known 'mode'",
    ),
    "quota beyond the pool": (
        lambda s: s.update(queues={"cluster_queues": [
            {"name": "serving", "role": "serving", "quota_gpus": {"h100": 17}},
            {"name": "batch", "role": "batch"},
        ]}),
        "queues.cluster_queues[0].quota_gpus.h100", "2 nodes x 8 devices = 16",
    ),
    "reserved node label": (
        lambda s: s["node_pools"][0].update(labels={"nvidia.com/mig.config": "all-1g.10gb"}),
        "node_pools[0].labels", "set by inferstack from gpu_sharing",
    ),
    "nvme raid10 with too few disks": (
        lambda s: s["node_pools"][2].update(nvme_cache={"raid": "RAID10"}),
        "node_pools[2].nvme_cache.raid", "RAID10 needs at least 4 NVMe disks",
    ),
    "capacity block on a g instance": (
        lambda s: s["node_pools"][2].update(
            capacity={"on_demand_base": 1, "reservation": {"kind": "capacity_block", "id": "cr-0123456789abcdef0"}}
        ),
        "node_pools[2].capacity.reservation.kind", "not sold as an EC2 Capacity Block",
    ),
    "checkpoint beyond the weights cache": (
        lambda s: (s["node_pools"][0].update(nvme_cache=False, disk_size_gib=50),
                   s["models"][0].update(model="meta-llama/Llama-3.1-70B-Instruct", tensor_parallel=4)),
        "models[0].pool", "may cache 40.0 GiB per node (80% of the 50 GiB root volume of a p5.48xlarge)",
    ),
    "batch job on a service that spans nodes": (  # with the on-demand nodes its online replica needs
        lambda s: (s["models"][0].update(model="meta-llama/Llama-3.1-70B-Instruct", tensor_parallel=8,
                                         pipeline_parallel=2, max_model_len=16384),
                   s["node_pools"][0]["capacity"].update(on_demand_base=2),
                   s.update(batch_jobs=[{"name": "b", "model_service": "llama", "pool": "h100",
                                         "input": "s3://in-bucket/in.jsonl", "output": "s3://out-bucket/out/"}])),
        "batch_jobs[0].model_service", "'llama' spans 2 nodes; a batch job runs on one node",
    ),
    "a pool label too long for its autoscaler tag": (
        lambda s: s["node_pools"][2].update(labels={"team.example.com/" + "k" * 70: "x"}),
        "node_pools[2].labels", "longer than AWS's 128-character keys",
    ),
    "more pool labels than an Auto Scaling group takes tags": (
        lambda s: s["node_pools"][2].update(labels={f"l{n}": "x" for n in range(45)}),
        "node_pools[2].labels", "AWS allows 50",
    ),
    "the gpu taint again": (
        lambda s: s["node_pools"][0].update(taints=[{"key": "nvidia.com/gpu", "value": "true"}]),
        "node_pools[0].taints[0]", "taint nvidia.com/gpu:NoSchedule is already on the pool's nodes",
    ),
    "zone outside the region": (
        lambda s: s["node_pools"][0].update(availability_zones=["us-west-2a"]),
        "node_pools[0].availability_zones[0]", "not in region us-east-1",
    ),
    "an slo without traffic": (
        lambda s: s["models"][0].update(slo={"itl_ms": 30}),
        "models[0].slo", "states no traffic",
    ),
    "an slo with no target": (
        lambda s: s["models"][0].update(traffic={"requests_per_second": 1}, slo={}),
        "models[0].slo", "states ttft_ms, itl_ms or both",
    ),
    "a shared prefix as long as the prompt": (
        lambda s: s["models"][0].update(traffic={"requests_per_second": 1, "mean_input_tokens": 512,
                                                 "shared_prefix_tokens": 512}),
        "models[0].traffic", "must be less than mean_input_tokens (512)",
    ),
    "a shared prefix without prefix caching": (
        lambda s: s["models"][0].update(enable_prefix_caching=False, traffic={"requests_per_second": 1,
                                                                             "shared_prefix_tokens": 256}),
        "models[0].traffic.shared_prefix_tokens", "recomputed for every request",
    ),
    "a mean request longer than max_model_len": (
        lambda s: s["models"][0].update(max_model_len=2048, traffic={"requests_per_second": 1,
                                                                     "mean_input_tokens": 4000}),
        "models[0].traffic", "longer than max_model_len 2048",
    ),
    "an infinite request rate": (
        lambda s: s["models"][0].update(traffic={"requests_per_second": float("inf")}),
        "models[0].traffic.requests_per_second", "finite number",
    ),
    "a latency target of zero": (
        lambda s: s["models"][0].update(traffic={"requests_per_second": 1}, slo={"ttft_ms": 0}),
        "models[0].slo.ttft_ms", "greater than 0",
    ),
}


@pytest.mark.parametrize("case", list(REJECTIONS), ids=list(REJECTIONS))
def test_rejection_names_path_problem_and_fix(case):
    setter, path, fragment = REJECTIONS[case]
    error = rejection(mutate(setter))
    assert error.path == path
    assert fragment in error.problem
    assert error.fix and str(error).count("To fix:") == 1


def test_schema_is_json():
    json.dumps(StackSpec.model_json_schema())


# -------------------------------------------------------------------- quantization vs stored format
# vLLM 0.33.0 (PyPI sdist vllm-0.33.0.tar.gz): vllm/config/model.py `ModelConfig._verify_quantization`
# compares --quantization with the checkpoint's quantization_config; model_executor/model_loader/
# weight_utils.py `get_quant_config` needs a 16-bit checkpoint's method to quantize online.

AWQ_8B = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"


def with_model(**fields) -> dict:
    spec = base()
    spec["models"][0] = {**spec["models"][0], **fields}
    return spec


@pytest.mark.parametrize(
    ("checkpoint", "quantization"),
    [(AWQ_8B, "auto"), (AWQ_8B, "awq"), (AWQ_8B, "int4"), ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "fp8"),
     ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "int8"), ("meta-llama/Llama-3.1-8B-Instruct", "none"),
     ("meta-llama/Llama-3.1-8B-Instruct", "fp8")],
)
def test_a_quantization_the_checkpoint_satisfies_is_accepted(checkpoint, quantization):
    """vLLM 0.33 config/model.py `_verify_quantization`: a pre-quantized checkpoint runs as its config
    says (awq is accepted by AutoAWQConfig.override_quantization_method); a 16-bit one runs at 16 bits
    or, with fp8, quantized online (weight_utils.py `get_quant_config`)."""
    validate(StackSpec.model_validate(with_model(model=checkpoint, quantization=quantization)))


@pytest.mark.parametrize("quantization", ["awq", "gptq", "int4", "int8"])
def test_an_integer_quantization_of_a_16_bit_checkpoint_is_refused_with_a_real_checkpoint(quantization):
    """vLLM 0.33 weight_utils.py `get_quant_config`: with no quantization_config in the checkpoint and a
    method that is not an online shorthand, vLLM looks for the method's config file and stops with
    "Cannot find the config file for awq" (or gptq); config/quantization.py `_ONLINE_SHORTHANDS` quantizes
    dense layers online to FP8 only (int8_per_channel_weight_only covers MoE experts alone)."""
    error = rejection(with_model(quantization=quantization))
    assert error.path == "models[0].quantization"
    assert repr(quantization) in error.problem and "16-bit checkpoint" in error.problem
    if quantization in ("awq", "gptq"):
        assert f"Cannot find the config file for {quantization}" in error.problem
    assert "set quantization 'fp8' (quantized online by vLLM at load)" in error.fix
    if quantization == "awq":
        assert f"use an AWQ checkpoint of the model such as {AWQ_8B!r} from the catalog" in error.fix


def test_following_the_fix_of_a_refused_quantization_gives_a_valid_spec():
    """Every checkpoint the fix names is one vLLM serves as asked: setting model to it validates."""
    for quantization in ("awq", "int4", "int8"):
        error = rejection(with_model(quantization=quantization))
        named = error.fix.split("such as '")[1].split("'")[0]
        validate(StackSpec.model_validate(with_model(model=named, quantization=quantization)))
    validate(StackSpec.model_validate(with_model(quantization="fp8")))


def test_a_method_without_a_catalog_checkpoint_says_how_to_name_one():
    error = rejection(with_model(model="Qwen/Qwen3-8B", quantization="gptq"))
    assert "such as" not in error.fix
    assert "point model at a checkpoint stored as gptq (with architecture and checkpoint_format" in error.fix


def test_fp8_on_an_awq_checkpoint_is_refused_as_vllm_refuses_it():
    """vLLM 0.33 config/model.py `_verify_quantization`: AutoAWQConfig.override_quantization_method
    accepts only awq/awq_marlin/auto_awq/marlin, so fp8 on an AWQ checkpoint raises "Quantization method
    specified in the model config (awq) does not match the quantization method specified in the
    `quantization` argument (fp8)"."""
    error = rejection(with_model(model=AWQ_8B, quantization="fp8"))
    assert error.path == "models[0].quantization"
    assert (
        "Quantization method specified in the model config (awq) does not match the quantization method "
        "specified in the `quantization` argument (fp8)"
    ) in error.problem
    assert "set quantization 'auto' to serve it as stored (AWQ 4-bit group-128)" in error.fix
    assert "such as 'RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8'" in error.fix or "such as 'neuralmagic/" in error.fix
    assert "use the 16-bit base model 'meta-llama/Llama-3.1-8B-Instruct' with quantization 'fp8' (online)" in error.fix


@pytest.mark.parametrize(
    ("checkpoint", "quantization", "method"),
    [(AWQ_8B, "none", None), ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "awq", "compressed-tensors"),
     ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "awq", "gptq")],
)
def test_a_quantization_a_pre_quantized_checkpoint_does_not_store_is_refused(checkpoint, quantization, method):
    """vLLM 0.33 `_verify_quantization`: a method other than the checkpoint's is refused; a pre-quantized
    checkpoint is never served at 16 bits."""
    error = rejection(with_model(model=checkpoint, quantization=quantization, tensor_parallel=4 if "72B" in checkpoint else 2))
    assert error.path == "models[0].quantization"
    if method:
        assert f"in the model config ({method})" in error.problem
    assert "set quantization 'auto'" in error.fix
    if quantization == "none":
        assert "use the 16-bit base model 'meta-llama/Llama-3.1-8B-Instruct'" in error.fix


def test_an_unknown_model_states_its_checkpoint_format():
    architecture = {"params_billion": 8, "layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8,
                    "head_dim": 128, "max_context": 32768}
    stored = {"quant_method": "awq", "weight_bits": 4, "weight_type": "int", "group_size": 128, "zero_points": True}
    spec = validate(StackSpec.model_validate(
        with_model(model="acme/llama-awq", architecture=architecture, checkpoint_format=stored, quantization="awq")
    )).written
    assert spec.models[0].stored_format.quant_method == "awq"
    # Without the field the checkpoint is taken to be 16-bit, where awq cannot start.
    error = rejection(with_model(model="acme/llama-awq", architecture=architecture, quantization="awq"))
    assert error.path == "models[0].quantization"


def test_a_checkpoint_format_that_contradicts_the_catalog_is_refused():
    stored = {"quant_method": "gptq", "weight_bits": 4, "weight_type": "int", "group_size": 128, "zero_points": True}
    error = rejection(with_model(model=AWQ_8B, checkpoint_format=stored))
    assert error.path == "models[0].checkpoint_format"
    assert "AWQ 4-bit group-128" in error.problem and "GPTQ 4-bit group-128" in error.problem
    error = rejection(with_model(checkpoint_format=stored))  # the catalog's 16-bit base model
    assert error.path == "models[0].checkpoint_format" and "16-bit" in error.problem


@pytest.mark.parametrize(
    ("stored", "says"),
    [({"quant_method": "awq", "weight_bits": 8, "weight_type": "int"}, "4-bit int"),
     ({"quant_method": "fp8", "weight_bits": 8, "weight_type": "int"}, "8-bit float"),
     ({"quant_method": "compressed-tensors", "weight_bits": 4, "weight_type": "int", "activation_bits": 8}, "W8A8"),
     ({"quant_method": "none", "weight_bits": 4, "weight_type": "int"}, "16-bit float")],
)
def test_a_checkpoint_format_vllm_cannot_load_is_refused(stored, says):
    """vLLM 0.33 quantization/auto_awq.py AutoAWQConfig.TYPE_MAP holds 4-bit only (auto_gptq.py: 4 and
    8); fp8 stores float weights; compressed-tensors W8A8 quantizes activations of 8-bit weights."""
    architecture = {"params_billion": 8, "layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8,
                    "head_dim": 128, "max_context": 32768}
    error = rejection(with_model(model="acme/x", architecture=architecture, checkpoint_format=stored))
    assert error.path.startswith("models[0].checkpoint_format") and says in error.problem


def test_a_cluster_block_without_mode_creates_a_cluster():
    """`mode` defaults to create, so a YAML `cluster:` block may leave it out; a wrong mode names the field."""
    spec = base()
    spec["cluster"] = {"kubernetes_version": "1.36", "endpoint_public_access": False}
    assert validate(StackSpec.model_validate(spec)).written.cluster.mode == "create"
    spec["cluster"] = {"mode": "creat"}
    error = rejection(spec)
    assert (error.path, error.problem) == ("cluster", "'creat' is not a known 'mode'")
    assert error.fix == "use one of 'create', 'existing'"
