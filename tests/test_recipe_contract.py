"""The FP8 KV-cache advice follows vLLM's own recipes (vllm-project/recipes): OpenAI/GPT-OSS_Hopper.yaml serves
gpt-oss with a 16-bit KV cache (no kv-cache-dtype), OpenAI/GPT-OSS_Blackwell.yaml with `kv-cache-dtype: fp8`. The
advisory vllm-fp8-kv-cache policy asks for FP8 on Hopper and newer except where the recipe leaves it out."""

from __future__ import annotations

from pathlib import Path

from inferstack.catalog import GPUS
from inferstack.catalog.vllm_recipes import fp8_kv_left_out
from inferstack.engine import run_stack
from inferstack.policies.runner import run_policies
from inferstack.spec import ModelServiceSpec, NodePoolSpec, StackSpec
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def test_the_recipe_fact_is_per_generation():
    assert fp8_kv_left_out("openai/gpt-oss-120b", GPUS["H100"]) is not None
    assert fp8_kv_left_out("openai/gpt-oss-120b", GPUS["B200"]) is None       # Blackwell's recipe sets fp8
    assert fp8_kv_left_out("meta-llama/Llama-3.3-70B-Instruct", GPUS["H100"]) is None


def advised(spec: StackSpec) -> list[str]:
    resources = [r.as_dict() for r in run_stack(spec).resources]
    (fp8,) = [r for r in run_policies(resources, spec.environment) if r.name == "vllm-fp8-kv-cache"]
    return [v.message for v in fp8.violations]


def with_service(model: str, pool: str, instance: str) -> StackSpec:
    base = load_stack(STACKS, "dev")
    data = base.model_dump(mode="json", exclude_none=True)
    data.pop("budget", None)
    data["node_pools"].append(NodePoolSpec(name=pool, instance_types=[instance], min_nodes=1, max_nodes=1,
                                           capacity={"on_demand_base": 1})
                              .model_dump(mode="json", exclude_none=True))
    data["models"].append(ModelServiceSpec(name="oss", model=model, pool=pool, max_model_len=8192)
                          .model_dump(mode="json", exclude_none=True))
    return StackSpec.model_validate(data)


def test_gpt_oss_on_hopper_keeps_the_recipes_16_bit_kv_cache():
    assert not [m for m in advised(with_service("openai/gpt-oss-20b", "h100x", "p5.48xlarge")) if "oss" in m]


def test_other_models_on_hopper_are_still_advised_fp8():
    assert [m for m in advised(with_service("Qwen/Qwen3-8B", "h100x", "p5.48xlarge")) if "oss" in m]
