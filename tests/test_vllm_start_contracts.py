"""What vLLM 0.33 refuses at start and what it serves, from stacks a team would write (issue 25 item 9).

Refused, each with vLLM's reason and the field path, before anything is rendered:
- a draft_model with another vocabulary than the target: vllm/config/speculative.py:2036-2037 calls
  `verify_equal_vocab_size_if_draft_model` (2040-2055) unless `use_heterogeneous_vocab` (496), which inferstack
  never sets; it raises "Target and draft model should have the same vocabulary size";
- `mtp` on a model without MTP layers: the draft is the target's own config (speculative.py:1252-1262), which
  `hf_config_override` (711-) turns into an MTP model type only for the classes it knows (deepseek_v3 ->
  deepseek_mtp with n_predict = num_nextn_predict_layers, 749-763); a Llama stays "llama", not in MTPModelTypes
  (38-67), and falls through to `NotImplementedError("Unsupported speculative method: 'mtp'")` (1469-1501);
- an EAGLE-3 head trained for another hidden size: vllm/model_executor/models/llama_eagle3.py:218-249 builds
  `fc` over `target_hidden_size` (default: the head's own hidden_size) x 3 auxiliary hidden states, while the
  target hands it the concatenation of three of its own (vllm/v1/worker/gpu_model_runner.py:4893-4894) and the
  proposer asserts the fused width (vllm/v1/spec_decode/llm_base_proposer.py:549-552).

Served, sized as vLLM allocates:
- LoRA on MoE models: Qwen3MoeForCausalLM implements SupportsLoRA (vllm/model_executor/models/qwen3_moe.py:543);
  every LinearBase and MoERunner is a LoRA module (vllm/lora/utils.py:245-259), the router a ReplicatedLinear
  (qwen3_moe.py:170 GateLinear, vllm/model_executor/layers/fused_moe/router/gate_linear.py:22; slots as in
  vllm/lora/layers/base_linear.py:104-143), the experts FusedMoEWithLoRA with max_loras (model_manager.py:348-349)
  x local experts x rank x (3 H + 3 I_p) (vllm/lora/layers/fused_moe.py:172-232), one w13 A slice for 3D-weight
  models (FusedMoE3DWithLoRA, fused_moe.py:486-520; gpt_oss.py:1372 is_3d_moe_weight); expert parallelism only
  over allgather_reducescatter (fused_moe.py:234-243 `_ep_check`); a class without SupportsLoRA is refused
  (vllm/v1/worker/lora_model_runner_mixin.py:49-50).
- data parallelism on dense models: "Non-MoE DP ranks are completely independent" (vllm/v1/engine/core.py:1546-1555,
  `reconfigure_for_independent_dp_rank`), each rank the whole model behind one API server; the Data Parallel
  Deployment docs (docs.vllm.ai/en/latest/serving/data_parallel_deployment/): "This will work with both dense and MoE
  models".
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from stack_files import refused_by_render_and_plan, run_cli

from inferstack.catalog import models as catalog
from inferstack.planning import lora, speculative
from inferstack.planning.pool_capacity import gpu_requests, nodes_for_replicas
from inferstack.planning.sizing import GIB, fit, kv_bytes_per_token_per_device, weights_bytes
from inferstack.serving.vllm_args import engine_args
from inferstack.spec import ModelServiceSpec, NodePoolSpec, StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.validation import validate

VLLM = Path("/tmp/vllm/src/vllm")       # the vLLM 0.33.0 wheel's sources, when extracted on this machine
H100 = PoolHardware(NodePoolSpec(name="h100", instance_types=["p5.48xlarge"], max_nodes=1))
DRAFT = "s3://ml-adapters/drafts/v1"
ADAPTERS = [{"name": "support", "weights": "s3://ml-adapters/moe/support/v1", "rank": 16},
            {"name": "sql", "weights": "s3://ml-adapters/moe/sql/v1", "rank": 32}]


def service(**fields) -> ModelServiceSpec:
    return ModelServiceSpec(**{"name": "svc", "pool": "h100", "max_model_len": 16384, "max_num_seqs": 8, **fields})


def llama70b(**fields) -> ModelServiceSpec:
    return service(model="meta-llama/Llama-3.3-70B-Instruct", tensor_parallel=4, kv_cache_dtype="fp8", **fields)


def stack(*models: dict, pool: dict | None = None, region: str = "us-east-1") -> dict:
    return {
        "environment": "dev", "region": region,
        "node_pools": [pool or {"name": "h100", "instance_types": ["p5.48xlarge"], "min_nodes": 1, "max_nodes": 1,
                                "capacity": {"on_demand_base": 1}}],
        "models": [{"pool": "h100", "max_model_len": 16384, "max_num_seqs": 8, **m} for m in models],
    }


# ----------------------------------------------------------------------------------- speculative decoding


def test_a_draft_of_another_vocabulary_is_refused_with_vllms_reason():
    """speculative.py:2040-2055: the draft's vocab_size must equal the target's (128256 for Llama 3.3; Qwen2.5's
    152064, config.json vocab_size as the catalog holds them)."""
    found = speculative.problem(llama70b(speculative={"method": "draft_model", "model": "Qwen/Qwen2.5-7B-Instruct",
                                                      "weights": DRAFT}))
    assert found is not None
    field, what, fix = found
    assert field == "model" and "152064" in what and "128256" in what
    assert "Target and draft model should have the same vocabulary size" in what
    assert "meta-llama/Llama-3.2-3B-Instruct" in fix          # a smaller catalog model of the same vocabulary
    same = llama70b(speculative={"method": "draft_model", "model": "meta-llama/Llama-3.2-3B-Instruct", "weights": DRAFT})
    assert speculative.problem(same) is None


def test_the_targets_stated_vocabulary_counts_when_the_catalog_lacks_the_model():
    arch = {"params_billion": 8, "layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8,
            "head_dim": 128, "max_context": 8192, "vocab_size": 32000}
    custom = service(model="example/own-8b", architecture=arch,
                     speculative={"method": "draft_model", "model": "meta-llama/Llama-3.2-3B-Instruct", "weights": DRAFT})
    assert speculative.problem(custom)[0] == "model"
    unknown = custom.model_copy(update={"architecture": custom.architecture.model_copy(update={"vocab_size": None})})
    assert speculative.problem(unknown) is None                    # nothing known to compare: vLLM decides


def test_an_eagle3_head_trained_for_another_hidden_size_is_refused():
    """llama_eagle3.py:218-249: fc takes target_hidden_size (the head's hidden_size when unset) x 3; the 8B head's
    12288 inputs meet the 70B's three 8192-wide hidden states (gpu_model_runner.py:4893-4894)."""
    head = catalog.SPECULATORS["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"]
    assert "target_hidden_size" not in head and 3 * head["hidden_size"] == 12288
    wrong = llama70b(speculative={"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                  "weights": DRAFT, "draft_params_billion": 0.5})
    field, what, fix = speculative.problem(wrong)
    assert field == "model" and "3 x 4096 = 12288" in what and "3 hidden states of 8192 (24576)" in what
    assert "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B" in fix
    right = llama70b(speculative={"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
                                  "weights": DRAFT, "draft_params_billion": 1.6})
    assert speculative.problem(right) is None


def test_every_catalog_head_fits_the_model_it_was_trained_for():
    for name, head in catalog.SPECULATORS.items():
        target = catalog.MODELS[head["trained_for"]]
        assert (head.get("target_hidden_size") or head["hidden_size"]) == target["hidden_size"], name
        assert head["vocab_size"] == 128256 and head["draft_vocab_size"] == 32000 and head["layers"] == 1


def test_mtp_drafts_only_with_the_models_own_mtp_layers():
    """speculative.py:749-763 gives DeepSeek-V3 (num_nextn_predict_layers 1) an MTP draft; a Llama config falls
    through to speculative.py:1499-1501, "Unsupported speculative method: 'mtp'"."""
    field, what, fix = speculative.problem(llama70b(speculative={"method": "mtp", "num_speculative_tokens": 1}))
    assert field == "method" and "Unsupported speculative method: 'mtp'" in what and "LlamaForCausalLM" in what
    assert "deepseek-ai/DeepSeek-V3" in fix
    deepseek = service(model="deepseek-ai/DeepSeek-V3", tensor_parallel=8,
                       speculative={"method": "mtp", "num_speculative_tokens": 1})
    assert speculative.problem(deepseek) is None
    # A quantized checkpoint has its base model's layers; a model outside the catalog is left to vLLM.
    assert speculative.problem(service(model="Qwen/Qwen3-32B-FP8", speculative={"method": "mtp"}))[0] == "method"


def test_the_catalog_knows_every_models_class_and_mtp_layers():
    """num_nextn_predict_layers from config.json (DeepSeek-V3's README_WEIGHTS.md: 1 MTP module); 0 where absent."""
    assert set(catalog.MODEL_CLASSES) == set(catalog.MODELS)
    with_mtp = {name for name, facts in catalog.MODEL_CLASSES.items() if facts["mtp_layers"]}
    assert with_mtp == {"deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"}
    assert {catalog.MODEL_CLASSES[name]["architecture"] for name in with_mtp} == {"DeepseekV3ForCausalLM"}
    assert all(len(facts["source"].split()) >= 5 for facts in catalog.MODEL_CLASSES.values())


def test_a_deepseek_mtp_service_plans():
    h200 = {"name": "h100", "instance_types": ["p5en.48xlarge"], "min_nodes": 1, "max_nodes": 1,
            "capacity": {"on_demand_base": 1}}
    data = stack({"name": "deepseek", "model": "deepseek-ai/DeepSeek-V3", "tensor_parallel": 8, "kv_cache_dtype": "fp8",
                  "speculative": {"method": "mtp", "num_speculative_tokens": 1}}, pool=h200, region="us-east-2")
    (model,) = validate(StackSpec.model_validate(data)).written.models
    assert speculative.speculative_config(model) == {"method": "mtp", "num_speculative_tokens": 1}


# ------------------------------------------------------------------------------------------ LoRA on MoE


def qwen_moe(**fields) -> ModelServiceSpec:
    return service(model="Qwen/Qwen3-30B-A3B", lora_adapters=ADAPTERS, **fields)


def test_lora_on_qwen3_moe_is_served_with_slots_for_every_expert():
    """Qwen3-30B-A3B (config.json: H 2048, 32 query / 4 KV heads of 128, 128 experts of 768, 48 layers), rank 32
    slots: attention 4 H + 2 q + 2 kv, the router H + E, and fused_moe.py:172-232's per-expert 3 H + 3 I."""
    model = qwen_moe()
    assert lora.problem(model) is None
    per_layer = 2 * 32 * (4 * 2048 + 2 * 4096 + 2 * 512 + (2048 + 128) + 128 * (3 * 2048 + 3 * 768))
    assert lora.slot_bytes_per_layer(model) == per_layer == 70_459_392
    assert fit(model, H100).adapter_bytes_per_device == 2 * 48 * per_layer
    assert 6.2 < 2 * 48 * per_layer / GIB < 6.4                       # the KV cache pays 6.3 GiB for two slots


def test_moe_lora_slots_split_as_the_experts_do():
    """FusedMoEParallelConfig: without expert parallelism every expert sliced over tp x dp (I_p = 768 / 2); with it
    each GPU holds 128 / 2 whole experts."""
    sliced = qwen_moe(tensor_parallel=2)
    per_layer = 2 * 32 * (4 * 2048 + (2 * 4096 + 2 * 512) / 2 + (2048 + 128) + 128 * (3 * 2048 + 3 * 384))
    assert lora.slot_bytes_per_layer(sliced) == per_layer
    whole = qwen_moe(tensor_parallel=2, expert_parallel=True)
    per_layer = 2 * 32 * (4 * 2048 + (2 * 4096 + 2 * 512) / 2 + (2048 + 128) + 64 * (3 * 2048 + 3 * 768))
    assert lora.slot_bytes_per_layer(whole) == per_layer
    # The pre-fetched file holds every expert whole, at each adapter's own rank.
    assert lora.adapter_file_bytes(whole, 16) == 48 * 2 * 16 * (4 * 2048 + 2 * 4096 + 2 * 512 + 2176 + 128 * 8448)


def test_a_fused_w13_moe_keeps_one_gate_up_slice_of_lora_a():
    """gpt-oss (gpt_oss.py:1372 is_3d_moe_weight): FusedMoE3DWithLoRA's w13 A is one r x H (fused_moe.py:486-520),
    so an expert takes 2 H + 3 I. gpt-oss-20b: H 2880, 64 query / 8 KV heads of 64, 32 experts of 2880."""
    model = service(model="openai/gpt-oss-20b", lora_adapters=ADAPTERS)
    assert catalog.class_facts(model.model)["architecture"] in lora.FUSED_W13_EXPERTS and lora.problem(model) is None
    per_layer = 2 * 32 * (4 * 2880 + 2 * 4096 + 2 * 512 + (2880 + 32) + 32 * (2 * 2880 + 3 * 2880))
    assert lora.slot_bytes_per_layer(model) == per_layer


def test_shared_experts_are_wrapped_as_a_dense_mlp():
    """Llama 4 Scout: one shared expert of 8192 beside 16 routed ones, every layer MoE."""
    model = service(model="meta-llama/Llama-4-Scout-17B-16E-Instruct", tensor_parallel=4, lora_adapters=ADAPTERS)
    assert lora.problem(model) is None
    shared = 3 * 5120 + 3 * 8192 / 4
    per_layer = 2 * 32 * (4 * 5120 + (2 * 5120 + 2 * 1024) / 4 + (5120 + 16) + shared + 16 * (3 * 5120 + 3 * 8192 / 4))
    assert lora.slot_bytes_per_layer(model) == per_layer


def test_lora_with_expert_parallelism_needs_allgather_reducescatter():
    """fused_moe.py:234-243: "Fused MoE LoRA with EP currently only supports all2all_backend='allgather_reducescatter'"."""
    refused = qwen_moe(tensor_parallel=2, expert_parallel=True, all2all_backend="deepep_low_latency")
    field, what, fix = lora.problem(refused)
    assert field == "all2all_backend" and "allgather_reducescatter" in what and "deepep_low_latency" in what
    assert lora.problem(qwen_moe(tensor_parallel=2, expert_parallel=True)) is None


def test_what_inferstack_cannot_size_stays_refused_and_says_vllm_would_serve_it():
    field, what, _ = lora.problem(service(model="deepseek-ai/DeepSeek-V3", tensor_parallel=8, lora_adapters=ADAPTERS))
    assert field == "lora_adapters" and "vLLM 0.33 serves LoRA" in what and "cannot size" in what
    maverick = service(model="meta-llama/Llama-4-Maverick-17B-128E-Instruct", tensor_parallel=8, lora_adapters=ADAPTERS)
    field, what, _ = lora.problem(maverick)
    assert field == "lora_adapters" and "24 of" in what and "dense" in what


def test_a_class_without_supports_lora_is_refused(monkeypatch):
    """lora_model_runner_mixin.py:49-50 refuses a model whose class lacks SupportsLoRA."""
    monkeypatch.setattr(lora, "class_facts", lambda model_id: {"architecture": "NoLoraForCausalLM", "mtp_layers": 0})
    field, what, _ = lora.problem(qwen_moe())
    assert field == "lora_adapters" and "does not support LoRA yet" in what and "NoLoraForCausalLM" in what


def test_every_catalog_class_implements_supports_lora_in_the_wheel():
    """No catalog model is refused LoRA for its class; where the wheel is extracted, each class the registry maps a
    catalog architecture to declares SupportsLoRA itself or through a base class."""
    classes = {facts["architecture"] for facts in catalog.MODEL_CLASSES.values()}
    assert classes <= lora.SUPPORTS_LORA
    if not VLLM.exists():
        pytest.skip("the vLLM 0.33.0 wheel is not extracted at /tmp/vllm")
    models = VLLM / "model_executor" / "models"
    registry = (models / "registry.py").read_text()
    sources = {path.stem: path.read_text() for path in models.glob("*.py")}

    def bases(name: str) -> str | None:
        for text in sources.values():
            found = re.search(rf"^class {name}\((.*?)\):", text, re.M | re.S)
            if found:
                return found.group(1)
        return None

    def supports(name: str, depth: int = 0) -> bool:
        declared = bases(name)
        if declared is None or depth > 4:
            return False
        return "SupportsLoRA" in declared or any(
            supports(base, depth + 1) for base in re.findall(r"\b([A-Z]\w+ForCausalLM|[A-Z]\w+Model)\b", declared))

    assert not supports("BertModel") and supports("BertEmbeddingModel")     # the check tells the two apart
    for architecture in sorted(classes):
        mapped = re.search(rf'"{architecture}": \(\s*"(\w+)",\s*"(\w+)",?\s*\)', registry)
        assert mapped, architecture
        assert supports(mapped.group(2)), (architecture, mapped.group(2))


# ----------------------------------------------------------------------------- data parallel, dense models


def test_data_parallel_on_a_dense_model_is_engines_that_each_hold_the_whole_model():
    """core.py:1546-1555: each rank of a dense model is its own engine; weights are split by tensor parallelism
    only, each rank keeps its own KV cache and sequences, and the replica takes tp x dp GPUs."""
    data = stack({"name": "llama-dp", "model": "meta-llama/Llama-3.1-8B-Instruct", "data_parallel": 4,
                  "max_num_seqs": 32})
    (model,) = validate(StackSpec.model_validate(data)).written.models
    single = model.model_copy(update={"data_parallel": 1})
    result, one = fit(model, H100), fit(single, H100)
    assert result.devices == 4 and model.gpus_per_replica == 4
    assert result.weights_bytes_per_device == one.weights_bytes_per_device == weights_bytes(model)  # not split by DP
    assert result.kv_bytes_per_token_per_device == kv_bytes_per_token_per_device(single)
    assert result.rank_kv_tokens == result.kv_cache_bytes_per_device // result.kv_bytes_per_token_per_device
    assert result.max_concurrency == 4 * result.rank_concurrency and result.stated_sequences == 4 * 32
    args = engine_args(model, H100)
    assert args[args.index("--data-parallel-size") + 1] == "4" and args[args.index("--tensor-parallel-size") + 1] == "1"
    assert gpu_requests(model, H100) == {"nvidia.com/gpu": 4}
    assert nodes_for_replicas([(model, 2)], H100) == 1 and nodes_for_replicas([(model, 3)], H100) == 2


def test_tensor_and_data_parallel_dense_splits_weights_over_tensor_ranks_only():
    model = service(model="meta-llama/Llama-3.1-70B-Instruct", tensor_parallel=4, data_parallel=2)
    result = fit(model, H100)
    assert result.devices == 8 and result.weights_bytes_per_device == -(-weights_bytes(model) // 4)
    assert result.kv_bytes_per_token_per_device == 80 * 2 * (8 // 4) * 128 * 2


# ---------------------------------------------------------------------- through the CLI: refused, exit 2


REFUSED = {
    "draft of another vocabulary": (
        {"name": "llama", "model": "meta-llama/Llama-3.3-70B-Instruct", "tensor_parallel": 4, "kv_cache_dtype": "fp8",
         "speculative": {"method": "draft_model", "model": "Qwen/Qwen2.5-7B-Instruct", "weights": DRAFT}},
        "models[0].speculative.model", "same vocabulary size"),
    "eagle3 head of another hidden size": (
        {"name": "llama", "model": "meta-llama/Llama-3.3-70B-Instruct", "tensor_parallel": 4, "kv_cache_dtype": "fp8",
         "speculative": {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "weights": DRAFT,
                         "draft_params_billion": 0.5}},
        "models[0].speculative.model", "its fc takes 3 x 4096"),
    "mtp on a model without mtp layers": (
        {"name": "qwen", "model": "Qwen/Qwen3-32B", "tensor_parallel": 2,
         "speculative": {"method": "mtp", "num_speculative_tokens": 1}},
        "models[0].speculative.method", "Unsupported speculative method: 'mtp'"),
    "moe lora over a deepep exchange": (
        {"name": "qwen-moe", "model": "Qwen/Qwen3-30B-A3B", "tensor_parallel": 2, "expert_parallel": True,
         "all2all_backend": "deepep_low_latency", "lora_adapters": ADAPTERS},
        "models[0].all2all_backend", "Fused MoE LoRA with EP currently only supports"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_render_and_plan_refuse_with_exit_2_and_the_field_path(case, tmp_path):
    service_fields, path, says = REFUSED[case]
    file = tmp_path / "stack.yaml"
    file.write_text(yaml.safe_dump(stack(service_fields)))
    message = refused_by_render_and_plan(file, tmp_path / "out")
    located, _, fix = message.partition(". To fix: ")
    assert located.startswith("inferstack: ") and f": {path}: " in located and says in located, message
    assert fix


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_the_nearest_stack_vllm_starts_plans(case, tmp_path):
    """Each refusal is that one mistake: the same service with the draft, head, method or exchange vLLM takes plans."""
    fixed = copy.deepcopy(REFUSED[case][0])
    if "speculative" in fixed:
        fixed["speculative"] = {"method": "ngram"} if fixed["speculative"]["method"] == "mtp" else {
            "method": fixed["speculative"]["method"], "weights": DRAFT,
            "model": {"draft_model": "meta-llama/Llama-3.2-3B-Instruct",
                      "eagle3": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}[fixed["speculative"]["method"]],
            **({"draft_params_billion": 1.6} if fixed["speculative"]["method"] == "eagle3" else {})}
    else:
        fixed.pop("all2all_backend")
    file = tmp_path / "stack.yaml"
    file.write_text(yaml.safe_dump(stack(fixed)))
    result = run_cli("plan", str(file), "--json")
    assert result.returncode == 0, result.stderr


def test_moe_lora_and_dense_data_parallel_plan_through_the_cli(tmp_path):
    file = tmp_path / "stack.yaml"
    file.write_text(yaml.safe_dump(stack(
        {"name": "qwen-moe-lora", "model": "Qwen/Qwen3-30B-A3B", "lora_adapters": ADAPTERS},
        {"name": "llama-dp", "model": "meta-llama/Llama-3.1-8B-Instruct", "data_parallel": 4, "max_num_seqs": 32},
    )))
    out = tmp_path / "out"
    assert run_cli("render", str(file), "--out", str(out)).returncode == 0
    plan = json.loads((out / "plan.json").read_text())
    placements = {row["model"]: row for row in plan["placements"]}
    assert set(placements) >= {"qwen-moe-lora", "llama-dp"}
    text = run_cli("plan", str(file)).stdout
    assert "6.30 GiB per GPU taken from the KV cache" in text and "data_parallel 4" in text
