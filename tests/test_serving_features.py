"""Speculative decoding, LoRA adapters and the host KV-cache tier (issue 16, items 2, 3 and 4).

Upstream rules encoded here, read from the vLLM 0.33.0 wheel (pip download vllm==0.33.0 --no-deps):
- vllm/config/speculative.py: `draft_tensor_parallel_size` is 1 or the target's (`_verify_and_get_draft_tp`);
  ngram defaults prompt_lookup_min = max = 5 and refuses min > max; draft_model/eagle/eagle3 need `model`.
- vllm/engine/arg_utils.py: with LoRA on, max_num_batched_tokens >= max_num_seqs x (num_speculative_tokens + 1).
- vllm/config/speculative.py:1469-1501: `mtp` on a model type without an MTP draft (Llama) raises
  "Unsupported speculative method: 'mtp'" (issue 25 item 9; the rest of it in tests/test_vllm_start_contracts.py).
- vllm/config/lora.py: --max-lora-rank in {1, 8, 16, 32, 64, 128, 256, 320, 512}; --max-cpu-loras >= --max-loras.
- vllm/lora/model_manager.py + lora/layers/{base_linear,column_parallel_linear}.py: max_loras slots of
  max_lora_rank pre-allocated per wrapped layer before the KV cache is sized.
- vllm/entrypoints/common/cli_args.py: --lora-modules takes name=path items (nargs +).
- vllm/config/cache.py + config/vllm.py `_post_init_kv_transfer_config`: --kv-offloading-size is GiB for the
  engine, native backend = OffloadingConnector with cpu_bytes_to_use = size x 2^30.
- llm-d-router v0.10.0 approximateprefix/types.go: approx-prefix-cache-producer takes autoTune, blockSizeTokens,
  lruCapacityPerServer, and plugin.go raises any block size below 64 tokens to 64; scorer/prefix/plugin.go: prefix-cache-scorer takes prefixMatchInfoProducerName.
- Gateway API v1 HTTPRoute: a rule holds at most 64 matches.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from stack_files import refusal

from inferstack.cli import main
from inferstack.planning import kv_offload, lora, speculative
from inferstack.planning.sizing import GIB, fit
from inferstack.serving.gateway import (
    FAIRNESS_POLICY, HOST_TIER_PRODUCER, HOST_TIER_SCORER, SATURATION_DETECTOR, http_route_spec, picker_config,
)

SATURATION = {"queueDepthThreshold": 5, "kvCacheUtilThreshold": 0.8}
from inferstack.serving.vllm_args import engine_args
from inferstack.spec import StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
# Flags read from the 0.33.0 wheel: engine/arg_utils.py (--speculative-config 1864, --enable-lora 1609,
# --max-loras / --max-lora-rank / --max-cpu-loras from LoRAConfig, --kv-offloading-size 1453) and
# entrypoints/common/cli_args.py (--lora-modules 38), and --kv-transfer-config (arg_utils.py 1881).
NEW_FLAGS = {"--speculative-config", "--enable-lora", "--max-loras", "--max-lora-rank", "--max-cpu-loras",
             "--lora-modules", "--kv-offloading-size", "--kv-transfer-config"}
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DRAFT = "s3://ml-adapters/drafts/llama-3.2-3b/"


@pytest.fixture(scope="module")
def stack() -> StackSpec:
    return load_stack(STACKS, "serving")


def service(stack: StackSpec, name: str):
    return next(m for m in stack.models if m.name == name)


def hardware(stack: StackSpec, model) -> PoolHardware:
    return PoolHardware(stack.pool(model.pool))


def edited(stack: StackSpec, service: str, **changes) -> dict:
    """The stack as data with one service's fields replaced (None drops a field)."""
    data = stack.model_dump(mode="json", exclude_none=True)
    for m in data["models"]:
        if m["name"] == service:
            for key, value in changes.items():
                if value is None:
                    m.pop(key, None)
                else:
                    m[key] = value
    return data


# ------------------------------------------------------------------------------------ speculative


def test_the_speculative_config_is_vllm_json(stack):
    model = service(stack, "llama-70b-eagle")
    args = engine_args(model, hardware(stack, model))
    config = json.loads(args[args.index("--speculative-config") + 1])
    # The draft is read from its pre-fetched copy in the node's cache.
    assert config == {"method": "eagle3", "model": "/models/draft--llama-70b-eagle", "num_speculative_tokens": 3}


def test_the_draft_is_counted_per_gpu(stack):
    model = service(stack, "llama-70b-eagle")
    result = fit(model, hardware(stack, model))
    # 1.6 B parameters x 2 bytes over the target's tensor parallelism of 4.
    assert result.draft_bytes_per_device == 1_600_000_000 * 2 // 4
    without = fit(model.model_copy(update={"speculative": None}), hardware(stack, model))
    assert without.kv_cache_bytes_per_device - result.kv_cache_bytes_per_device == 800_000_000
    # The EAGLE-3 head's one decoder layer keeps KV like one of the target's: FP8, 8 KV heads over 4 ranks, 128 wide.
    assert result.kv_bytes_per_token_per_device - without.kv_bytes_per_token_per_device == 2 * 2 * 128 * 1


@pytest.mark.parametrize("change, field", [
    ({"method": "eagle", "num_speculative_tokens": 3}, "speculative.model"),
    ({"method": "eagle", "model": "x/eagle-head", "draft_params_billion": 1}, "speculative.weights"),
    ({"method": "ngram", "model": "x/y"}, "speculative.model"),
    ({"method": "mtp", "prompt_lookup_max": 4}, "speculative.prompt_lookup_max"),
    ({"method": "ngram", "prompt_lookup_min": 6, "prompt_lookup_max": 4}, "speculative.prompt_lookup_min"),
    ({"method": "draft_model", "model": "meta-llama/Llama-3.2-3B-Instruct", "weights": DRAFT, "draft_tensor_parallel": 2},
     "speculative.draft_tensor_parallel"),
    ({"method": "draft_model", "model": "someone/unlisted-draft", "weights": DRAFT}, "speculative.draft_params_billion"),
    ({"method": "mtp", "num_speculative_tokens": 1}, "speculative.method"),
    ({"method": "draft_model", "model": "Qwen/Qwen2.5-7B-Instruct", "weights": DRAFT}, "speculative.model"),
    ({"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "weights": DRAFT, "draft_params_billion": 0.5},
     "speculative.model"),
])
def test_speculative_refusals(stack, change, field):
    error = refusal(edited(stack, "llama-70b-eagle", speculative=change))
    assert error.path == f"models[3].{field}"


def test_an_ngram_and_a_catalog_draft_need_nothing_more(stack):
    for config in ({"method": "ngram"},
                   {"method": "draft_model", "model": "meta-llama/Llama-3.2-3B-Instruct", "weights": DRAFT}):
        validate(StackSpec.model_validate(edited(stack, "llama-70b-eagle", speculative=config)))


def test_lora_with_speculation_needs_room_for_every_draft(stack):
    data = edited(stack, "llama-8b-lora", speculative={"method": "ngram", "num_speculative_tokens": 4},
                  max_num_batched_tokens=64)
    error = refusal(data)
    assert error.path == "models[1].max_num_batched_tokens" and "16 x (num_speculative_tokens 4 + 1) = 80" in str(error)


def test_the_plan_warns_past_a_few_requests_per_replica(stack):
    busy = service(stack, "llama-70b-eagle").model_copy(
        update={"traffic": service(stack, "qwen-14b-tiered").traffic.model_copy(update={"requests_per_second": 9})}
    )
    assert "4.5 per replica" in speculative.latency_note(busy, 2)
    assert "per replica" not in speculative.latency_note(service(stack, "llama-70b-eagle"), 2).split("save")[1]


# ------------------------------------------------------------------------------------------- LoRA


def test_lora_flags_size_the_slots_from_the_list(stack):
    model = service(stack, "llama-8b-lora")
    args = engine_args(model, hardware(stack, model))
    assert args[args.index("--max-loras") + 1] == "3"
    assert args[args.index("--max-lora-rank") + 1] == "32"       # the largest adapter's rank is 32
    start = args.index("--lora-modules") + 1
    assert args[start:start + 3] == [f"{a.name}=/models/lora--llama-8b-lora--{a.name}" for a in model.lora_adapters]
    assert "--max-cpu-loras" not in args


def test_a_rank_between_choices_rounds_up_and_fewer_slots_keep_the_rest_on_the_host(stack):
    data = edited(stack, "llama-8b-lora", max_loras=2)
    data["models"][1]["lora_adapters"][1]["rank"] = 40
    model = next(m for m in validate(StackSpec.model_validate(data)).written.models if m.name == "llama-8b-lora")
    args = engine_args(model, hardware(stack, model))
    assert args[args.index("--max-lora-rank") + 1] == "64" and 64 in VLLM_LORA_RANKS
    assert args[args.index("--max-cpu-loras") + 1] == "3" >= args[args.index("--max-loras") + 1]


def test_adapter_memory_by_hand(stack):
    """Llama 3.1 8B: H 4096, q 4096, kv 1024, I 14336 (from its 8.03 B parameters), rank 32, three slots."""
    model = service(stack, "llama-8b-lora")
    assert abs(lora.intermediate_size(model) - 14336) < 100
    per_layer = 2 * 32 * (7 * 4096 + (2 * 4096 + 2 * 1024 + 3 * lora.intermediate_size(model)))
    assert lora.slot_bytes_per_layer(model) == per_layer
    assert fit(model, hardware(stack, model)).adapter_bytes_per_device == 3 * 32 * per_layer
    assert 0.45 < 3 * 32 * per_layer / GIB < 0.5


def test_adapters_are_routed_by_name(stack):
    model = service(stack, "llama-8b-lora")
    matches = http_route_spec(stack, model)["rules"][0]["matches"]
    assert [m["headers"][0]["value"] for m in matches] == ["llama-8b-lora", "support-agent", "sql-writer", "summarizer"]
    config = yaml.safe_load(picker_config(model, True, 300, SATURATION))
    assert {"pluginRef": "lora-affinity-scorer", "weight": 2} in config["schedulingProfiles"][0]["plugins"]


@pytest.mark.parametrize("change, path", [
    ({"max_loras": 4}, "models[1].max_loras"),
    ({"lora_adapters": [{"name": "a", "weights": "s3://bkt/a", "rank": 8}, {"name": "a", "weights": "s3://bkt/c", "rank": 8}]},
     "models[1].lora_adapters"),
    ({"lora_adapters": [{"name": "llama-8b-lora", "weights": "s3://bkt/a", "rank": 8}]}, "models[1].lora_adapters"),
    ({"lora_adapters": [{"name": f"a{i}", "weights": f"s3://bkt/{i}", "rank": 8} for i in range(64)]},
     "models[1].lora_adapters"),
])
def test_lora_refusals(stack, change, path):
    assert refusal(edited(stack, "llama-8b-lora", **change)).path == path


def test_no_adapters_no_max_loras(stack):
    assert refusal(edited(stack, "qwen-14b-tiered", max_loras=2)).path == "models[2].max_loras"


def test_a_rank_vllm_cannot_take_is_refused_by_the_schema():
    from inferstack.spec import LoraAdapterSpec

    with pytest.raises(ValueError):
        LoraAdapterSpec(name="a", weights="s3://b/a", rank=1024)


# -------------------------------------------------------------------------------------- host KV tier


def test_the_tier_flag_and_the_pickers_second_index(stack):
    model = service(stack, "qwen-14b-tiered")
    args = engine_args(model, hardware(stack, model))
    assert args[args.index("--kv-offloading-size") + 1] == "48"
    config = yaml.safe_load(picker_config(model, True, 300, SATURATION))
    producer = next(p for p in config["plugins"] if p.get("name") == HOST_TIER_PRODUCER)
    # Qwen3 14B, FP8 KV: 2 x 40 layers x 8 heads x 128 x 1 byte = 81920 B a token; the picker's blocks are 64 tokens
    # at least (approximateprefix/plugin.go minBlockSizeTokens).
    assert producer["parameters"] == {"autoTune": False, "blockSizeTokens": 64,
                                      "lruCapacityPerServer": 48 * GIB // 81920 // 64}
    scorer = next(p for p in config["plugins"] if p.get("name") == HOST_TIER_SCORER)
    assert scorer["parameters"] == {"prefixMatchInfoProducerName": HOST_TIER_PRODUCER}
    refs = {p["pluginRef"] for p in config["schedulingProfiles"][0]["plugins"]}
    assert {HOST_TIER_SCORER, "prefix-cache-scorer"} <= refs
    # Every profile entry names a declared plugin; the producer is named by a scorer, the fairness policy and the
    # saturation detector by flow control.
    names = {p.get("name", p["type"]) for p in config["plugins"]}
    assert refs <= names and names - refs == {HOST_TIER_PRODUCER, FAIRNESS_POLICY, SATURATION_DETECTOR}
    assert config["flowControl"]["defaultPriorityBand"]["fairnessPolicyRef"] == FAIRNESS_POLICY


def test_without_prefix_routing_the_tier_gets_no_index(stack):
    model = service(stack, "qwen-14b-tiered")
    config = yaml.safe_load(picker_config(model, False, 300, SATURATION))
    assert all(p.get("name") != HOST_TIER_PRODUCER for p in config["plugins"])


def test_a_tier_beyond_the_pods_memory_is_refused(stack):
    error = refusal(edited(stack, "qwen-14b-tiered", kv_offload={"cpu_gib": 200}))
    assert error.path == "models[2].kv_offload.cpu_gib" and "set cpu_gib to at most" in str(error)
    assert kv_offload.VLLM_HOST_RESERVE_BYTES == 16 * GIB


# ---------------------------------------------------------------------------------------- the stack


def test_the_stack_renders_validates_and_passes_every_policy(tmp_path):
    from kube_validation import assert_valid

    out = tmp_path / "out"
    assert main(["render", "serving", "--stacks-dir", str(STACKS), "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [p["name"] for p in plan["policies"] if p["violations"]] == []
    objects = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))]
    assert_valid(objects)
    argv = [a for o in objects if o["kind"] == "Deployment"
            for c in o["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm" for a in c["args"]]
    flags = {a for a in argv if a.startswith("--")}
    assert NEW_FLAGS - {"--max-cpu-loras"} <= flags            # every adapter fits a GPU slot here
    from test_expert_parallel import FLAGS_FROM_THE_WHEEL, REFERENCE

    if REFERENCE.exists():
        import re

        section = REFERENCE.read_text().split("## 1.", 1)[1].split("\n## 2.", 1)[0]
        pinned = set(re.findall(r"`(--[a-z0-9-]+)", section)) | FLAGS_FROM_THE_WHEEL
        assert flags <= pinned | NEW_FLAGS, sorted(flags - pinned - NEW_FLAGS)
    features = {row["model"]: row["features"] for row in plan["placements"]}
    assert all(features[name] for name in ("llama-8b-lora", "qwen-14b-tiered", "llama-70b-eagle", "qwen-32b-pd"))
    assert features["qwen-32b-pd-prefill"] == []


def test_every_adapter_and_the_draft_are_prefetched_and_readable(stack, tmp_path):
    """Each adapter (and a speculative draft) gets its own pre-fetch init container and script (the weights' versioned cache layout,
    weights/prefetch.py), vLLM reads it from the published path, and the serving role may read its prefix."""
    from inferstack.aws.weights_store import read_grants

    out = tmp_path / "out"
    assert main(["render", "serving", "--stacks-dir", str(STACKS), "--out", str(out)]) == 0
    objects = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "llama-8b-lora"]
    pod = deployment["spec"]["template"]["spec"]
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("llama-8b-lora")
                 and "prefetch.sh" in o.get("data", {})]
    model = service(stack, "llama-8b-lora")
    for adapter in model.lora_adapters:
        script = config["data"][lora.adapter_script(adapter.name)]
        bucket, _, prefix = adapter.weights.removeprefix("s3://").partition("/")
        assert f"bucket={bucket}" in script and lora.adapter_key(model, adapter.name) in script and prefix in script
        assert any(c["command"][-1] == f"/scripts/{lora.adapter_script(adapter.name)}" for c in pod["initContainers"])
    (eagle,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "llama-70b-eagle"]
    assert any(c["name"] == "prefetch-draft" for c in eagle["spec"]["template"]["spec"]["initContainers"])
    grants = {(g.bucket_arn, g.prefix) for g in read_grants(stack, "weights", "arn:aws:s3:::weights", "aws")}
    assert ("arn:aws:s3:::ml-adapters", "drafts/eagle3-llama3.3-70b/v1/") in grants
    assert {("arn:aws:s3:::ml-adapters", f"llama-8b/{a.name}/" + a.weights.rsplit("/", 1)[1] + "/")
            for a in model.lora_adapters} <= grants


def test_an_adapter_uri_without_a_key_is_refused(stack):
    data = edited(stack, "llama-8b-lora")
    data["models"][1]["lora_adapters"][0]["weights"] = "s3://ml-adapters"
    assert refusal(data).path == "models[1].lora_adapters[0].weights"


# vLLM 0.33.0 vllm/config/speculative.py: SpeculativeConfig fields (413-506) and SpeculativeMethod (38-82).
SPECULATIVE_FIELDS = {"num_speculative_tokens", "model", "method", "draft_tensor_parallel_size", "prompt_lookup_max",
                      "prompt_lookup_min"}
SPECULATIVE_METHODS = {"ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3", "extract_hidden_states",
                       "dflash", "ngram_gpu", "dspark", "mtp"}


@pytest.mark.parametrize("config", [
    {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4, "num_speculative_tokens": 5},
    {"method": "draft_model", "model": "meta-llama/Llama-3.2-3B-Instruct", "weights": DRAFT, "draft_tensor_parallel": 1},
    # mtp needs a model with MTP layers, which Llama 3.3 has not: accepted on DeepSeek-V3 in test_vllm_start_contracts.py
])
def test_every_speculative_config_is_one_vllm_accepts(stack, config):
    spec = validate(StackSpec.model_validate(edited(stack, "llama-70b-eagle", speculative=config))).written
    model = next(m for m in spec.models if m.name == "llama-70b-eagle")
    rendered = speculative.speculative_config(model)
    assert set(rendered) <= SPECULATIVE_FIELDS and rendered["method"] in SPECULATIVE_METHODS
    assert rendered["num_speculative_tokens"] >= 1


@pytest.mark.parametrize("service, pool", [("llama-8b-lora", "l40s"), ("qwen-32b-pd", "h100"),
                                           ("llama-70b-eagle", "h100"), ("qwen-14b-tiered", "l40s")])
def test_a_batch_job_runs_the_services_base_engine(stack, service, pool):
    """Batch pods pre-fetch the weights only and have no peers: no adapters, draft, host tier or KV transfer."""
    from inferstack.serving.batch_model import batch_model
    from inferstack.serving.vllm_args import run_batch_argv

    data = stack.model_dump(mode="json", exclude_none=True)
    data["batch_jobs"] = [{"name": "nightly", "model_service": service, "pool": pool,
                           "input": "s3://ml-batch/in.jsonl", "output": "s3://ml-batch/out/"}]
    spec = validate(StackSpec.model_validate(data)).written
    model, hardware = batch_model(spec, 0)
    argv = run_batch_argv(model, hardware, "/models/x", input_path="/in", output_path="/out")
    assert not {"--enable-lora", "--lora-modules", "--speculative-config", "--kv-offloading-size",
                "--kv-transfer-config"} & set(argv)
    assert argv[argv.index("--served-model-name") + 1] == service


def test_the_node_cache_counts_what_a_pod_prefetches(stack):
    """Adapters and a draft land in the same NVMe budget as the weights; s3_stream weights never do."""
    from inferstack.planning.sizing import checkpoint_bytes, prefetched_bytes

    lora_model = service(stack, "llama-8b-lora")
    adapters = sum(lora.adapter_file_bytes(lora_model, a.rank) for a in lora_model.lora_adapters)
    # Rank 16 on Llama 3.1 8B: 32 layers x 2 B x 16 x (7 x 4096 + 2 x 4096 + 2 x 1024 + 3 x I).
    assert lora.adapter_file_bytes(lora_model, 16) == 32 * 2 * 16 * (7 * 4096 + 2 * 4096 + 2 * 1024 + 3 * lora.intermediate_size(lora_model))
    assert prefetched_bytes(lora_model) == checkpoint_bytes(lora_model) + adapters
    streamed = lora_model.model_copy(update={"weight_loader": "s3_stream"})
    assert prefetched_bytes(streamed) == adapters
    eagle = service(stack, "llama-70b-eagle")
    assert prefetched_bytes(eagle) == checkpoint_bytes(eagle) + 1_600_000_000 * 2


def test_a_fit_refusal_names_the_adapter_slots_it_counted(stack):
    data = edited(stack, "llama-8b-lora", max_model_len=65536, max_num_seqs=1, gpu_memory_utilization=0.42)
    error = refusal(data)
    assert "LoRA slots 0.47 GiB" in str(error), str(error)
