"""The hardware catalog checked against the EC2 instance data AWS publishes (as shipped by moto).

Every spec fact in instances.json must equal what DescribeInstanceTypes says, both in moto's raw
table and through boto3 under mock_aws; the MIG tables must be internally consistent. prices.json
holds a price only where DescribeInstanceTypeOfferings offers the type, and its us-east-1 figures are
Karpenter's generated table (aws/karpenter-provider-aws@6fc13b5, pkg/providers/pricing/zz_generated.pricing_aws.go).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from importlib.resources import files
from pathlib import Path
from typing import Any, Mapping

import boto3
import pytest

from inferstack import catalog
from inferstack.catalog import GPUS, INSTANCE_TYPES, InstanceType

moto = pytest.importorskip("moto", reason="moto (test extra) ships the EC2 instance data")
from moto.ec2.models.instance_types import INSTANCE_TYPES as EC2_INSTANCE_TYPES  # noqa: E402

# EC2 names both A100 variants "A100"; the catalog keys them by memory size.
EC2_GPU_NAME = {"A100-40GB": "A100", "A100-80GB": "A100"}
# Families whose every size is meant to be in the catalog.
FULL_FAMILIES = ("g5", "g6", "g6e")
NAMES = sorted(INSTANCE_TYPES)


def ec2_facts(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The DescribeInstanceTypes fields the catalog records, in one comparable dict."""
    (gpu,) = entry["GpuInfo"]["Gpus"]
    disks = entry.get("InstanceStorageInfo", {}).get("Disks", [])
    network = entry["NetworkInfo"]
    return {
        "gpu_name": gpu["Name"],
        "gpu_count": gpu["Count"],
        "gpu_memory_mib": gpu["MemoryInfo"]["SizeInMiB"],
        "vcpus": entry["VCpuInfo"]["DefaultVCpus"],
        "memory_mib": entry["MemoryInfo"]["SizeInMiB"],
        "nvme": [(d["Count"], d["SizeInGB"]) for d in disks],
        "efa_supported": network["EfaSupported"],
        "max_efa_interfaces": network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0),
        "network_cards": network["MaximumNetworkCards"],
        "usage_classes": sorted(entry["SupportedUsageClasses"]),
    }


def catalog_facts(it: InstanceType) -> dict[str, Any]:
    return {
        "gpu_name": EC2_GPU_NAME.get(it.gpu.name, it.gpu.name),
        "gpu_count": it.gpu_count,
        "gpu_memory_mib": it.gpu.memory_mib,
        "vcpus": it.vcpus,
        "memory_mib": it.memory_mib,
        "nvme": [(it.nvme_count, it.nvme_size_gb)] if it.has_instance_store else [],
        "efa_supported": it.efa_supported,
        "max_efa_interfaces": it.max_efa_interfaces,
        "network_cards": it.network_cards,
        "usage_classes": sorted(it.usage_classes),
    }


@pytest.mark.parametrize("name", NAMES)
def test_instance_type_matches_ec2_data(name: str) -> None:
    assert name in EC2_INSTANCE_TYPES, f"{name} is not an EC2 instance type"
    assert catalog_facts(INSTANCE_TYPES[name]) == ec2_facts(EC2_INSTANCE_TYPES[name])


@pytest.mark.parametrize("name", NAMES)
def test_instance_gpu_memory_is_the_gpu_memory(name: str) -> None:
    (ec2_gpu,) = EC2_INSTANCE_TYPES[name]["GpuInfo"]["Gpus"]
    assert INSTANCE_TYPES[name].gpu.memory_mib == ec2_gpu["MemoryInfo"]["SizeInMiB"]


@pytest.mark.parametrize("family", FULL_FAMILIES)
def test_family_is_complete(family: str) -> None:
    ec2_sizes = {n for n in EC2_INSTANCE_TYPES if n.split(".", 1)[0] == family}
    assert ec2_sizes == {n for n, it in INSTANCE_TYPES.items() if it.family == family}


@pytest.fixture(scope="module")
def described() -> dict[str, dict[str, Any]]:
    """DescribeInstanceTypes for every catalog type through boto3, answered by moto."""
    with moto.mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        pages = ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=NAMES)
        return {t["InstanceType"]: t for page in pages for t in page["InstanceTypes"]}


@pytest.mark.parametrize("name", ["p5.48xlarge", "g6e.xlarge", "p4d.24xlarge", "p6-b200.48xlarge"])
def test_instance_type_matches_describe_instance_types(described: dict[str, dict[str, Any]], name: str) -> None:
    assert catalog_facts(INSTANCE_TYPES[name]) == ec2_facts(described[name])


PRICES = json.loads(files("inferstack.catalog").joinpath("prices.json").read_text(encoding="utf-8"))
PRICED = {(name, region) for name, by_region in PRICES["on_demand_usd_per_hour"].items() for region in by_region}
KARPENTER_PRICES = Path("/work/.mirror/aws+karpenter-provider-aws/repo")
KARPENTER_COMMIT = "6fc13b5236fd04fd16ff3f9dc7490d0813994099"
KARPENTER_PRICES_FILE = "pkg/providers/pricing/zz_generated.pricing_aws.go"


def offered_in(region: str) -> set[str]:
    """The catalog's types EC2 offers in a region (DescribeInstanceTypeOfferings, LocationType region, via moto)."""
    with moto.mock_aws():
        ec2 = boto3.client("ec2", region_name=region)
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="region", Filters=[{"Name": "instance-type", "Values": NAMES}]
        )
        return {o["InstanceType"] for page in pages for o in page["InstanceTypeOfferings"]}


@pytest.mark.parametrize("region", sorted({region for _, region in PRICED}))
def test_a_price_exists_only_where_ec2_offers_the_type(region: str) -> None:
    """prices.json keeps a figure only for a region that sells the type (moto 5.2.5's EC2 offering data)."""
    priced_here = {name for name, priced_region in PRICED if priced_region == region}
    assert priced_here <= offered_in(region)
    assert all(name in INSTANCE_TYPES for name in priced_here)


def test_every_type_offered_in_us_east_1_is_priced_there() -> None:
    """us-east-1 has Karpenter's full table, so there a missing price can only mean "not offered"."""
    priced = {name for name, region in PRICED if region == "us-east-1"}
    assert priced == offered_in("us-east-1")


def test_prices_are_positive_finite_and_the_lookup_knows_no_other() -> None:
    assert set(PRICES["on_demand_usd_per_hour"]) == set(INSTANCE_TYPES), "one row per catalog type"
    for name, region in PRICED:
        price = catalog.on_demand_price(name, region)
        assert price is not None and math.isfinite(price) and price > 0, (name, region)
    assert catalog.on_demand_price("p5e.48xlarge", "us-east-1") is None  # not offered there
    assert catalog.on_demand_price("g6.xlarge", "mars-central-1") is None
    assert catalog.on_demand_price("g6.nonesuch", "us-east-1") is None


@pytest.mark.skipif(not KARPENTER_PRICES.exists(), reason="needs the aws/karpenter-provider-aws mirror on this machine")
def test_us_east_1_prices_equal_karpenters_generated_table() -> None:
    """aws/karpenter-provider-aws@6fc13b5:pkg/providers/pricing/zz_generated.pricing_aws.go ("generated at
    2026-07-20T13:44:30Z for us-east-1"), read from the local mirror: every us-east-1 figure is Karpenter's."""
    source = subprocess.run(
        ["git", "-C", str(KARPENTER_PRICES), "show", f"{KARPENTER_COMMIT}:{KARPENTER_PRICES_FILE}"],
        capture_output=True, text=True, check=True,
    ).stdout
    karpenter = {m[1]: float(m[2]) for m in re.finditer(r'"([a-z0-9.-]+)": ([0-9.]+)', source)}
    ours = {name: p["us-east-1"] for name, p in PRICES["on_demand_usd_per_hour"].items() if "us-east-1" in p}
    assert ours == {name: karpenter[name] for name in ours}


@pytest.mark.parametrize(("name", "usd_per_hour"), [("g6.xlarge", 0.8048), ("g5.xlarge", 1.0060)])
def test_us_east_2_prices_agree_with_the_aws_price_feed(name: str, usd_per_hour: float) -> None:
    """A second source for a region other than us-east-1: the AWS price feed as quoted in a public repository
    (spot-checked in /work/shared/reference/vllm-and-hardware.md section 5) gives the same us-east-2 figures."""
    assert catalog.on_demand_price(name, "us-east-2") == usd_per_hour


def test_prices_differ_by_region_where_the_sources_say_so() -> None:
    """The catalog is per region, not one region's table copied: Tokyo's L4 costs more than Virginia's."""
    assert catalog.on_demand_price("g6.xlarge", "ap-northeast-1") > catalog.on_demand_price("g6.xlarge", "us-east-1")


@pytest.mark.parametrize("name", sorted(n for n, g in GPUS.items() if g.mig_capable))
def test_mig_profiles_fit_one_gpu(name: str) -> None:
    g = GPUS[name]
    assert (g.mig_compute_slices, g.mig_memory_slices) == (7, 8)
    for p in g.mig_profiles:
        assert p.compute_slices * p.max_count <= g.mig_compute_slices, p
        assert p.memory_slices * p.max_count <= g.mig_memory_slices, p


@pytest.mark.parametrize("name", sorted(n for n, g in GPUS.items() if g.mig_capable))
def test_mig_profile_names_match_their_slices(name: str) -> None:
    """"3g.40gb" means 3 compute slices and 40 GB; "+me" variants share the plain profile's slices."""
    profiles = {p.name: p for p in GPUS[name].mig_profiles}
    for p in profiles.values():
        compute, memory_gb, media = re.fullmatch(r"(\d)g\.(\d+)gb(\+me)?", p.name).groups()
        assert (int(compute), int(memory_gb)) == (p.compute_slices, p.memory_gb), p
        if media:
            plain = profiles[p.name.removesuffix("+me")]
            assert (p.compute_slices, p.memory_slices) == (plain.compute_slices, plain.memory_slices)
    full = max(profiles.values(), key=lambda p: p.memory_slices)
    assert (full.compute_slices, full.memory_slices) == (7, 8)


@pytest.mark.parametrize("name", sorted(n for n, g in GPUS.items() if not g.mig_capable))
def test_non_mig_gpus_have_no_profiles(name: str) -> None:
    g = GPUS[name]
    assert (g.mig_profiles, g.mig_compute_slices, g.mig_memory_slices, g.mig_profile("1g.10gb")) == ((), 0, 0, None)


def test_mig_profile_lookup_and_resource_name() -> None:
    profile = catalog.gpu("H100").mig_profile("3g.40gb")
    assert (profile.memory_slices, profile.resource) == (4, "nvidia.com/mig-3g.40gb")


def test_every_instance_gpu_is_in_the_gpu_table() -> None:
    assert {it.gpu.name for it in INSTANCE_TYPES.values()} == set(GPUS)


def test_unknown_instance_type_suggests_close_names() -> None:
    with pytest.raises(catalog.UnknownInstanceType, match=r"did you mean 'p5\.48xlarge'") as err:
        catalog.instance_type("p5.48xlarg")
    assert isinstance(err.value, KeyError)


def test_unknown_gpu_suggests_close_names() -> None:
    with pytest.raises(catalog.UnknownGpu, match=r"did you mean .*'H100'") as err:
        catalog.gpu("H10")
    assert isinstance(err.value, KeyError)


def test_catalog_mappings_are_read_only() -> None:
    with pytest.raises(TypeError):
        INSTANCE_TYPES["x"] = INSTANCE_TYPES["p5.48xlarge"]  # type: ignore[index]


# ------------------------------------------------------------------------------------------ model catalog
# Every fact below is a Hugging Face config.json key or a model-card figure; models.json's `model_sources`
# names, per model, the config.json and card it was read from (e.g. huggingface.co/openai/gpt-oss-20b
# config.json, huggingface.co/Qwen/Qwen3-235B-A22B config.json, the Llama 4 Scout text_config).

from inferstack.catalog import models as model_catalog  # noqa: E402
from inferstack.spec import CheckpointFormat, ModelArchitecture  # noqa: E402

MODEL_IDS = sorted(model_catalog.MODELS)
MOE_IDS = sorted(m for m, f in model_catalog.MODELS.items() if f.get("experts") is not None)


def catalog_architecture(model_id: str) -> ModelArchitecture:
    return ModelArchitecture(**model_catalog.MODELS[model_id], **model_catalog.VOCABULARY[model_id])


def test_the_catalog_holds_at_least_thirty_base_models() -> None:
    """Issue 14 item 3 asks for a catalog of what teams run: at least 30 models."""
    assert len(MODEL_IDS) >= 30


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_model_facts_are_a_valid_architecture(model_id: str) -> None:
    arch = catalog_architecture(model_id)
    assert arch.params_billion > 0 and arch.vocab_size == model_catalog.VOCABULARY[model_id]["vocab_size"]


def test_models_vocabulary_and_sources_name_the_same_ids() -> None:
    assert set(model_catalog.VOCABULARY) == set(model_catalog.MODELS)
    assert set(model_catalog.MODEL_SOURCES) == set(model_catalog.MODELS)


@pytest.mark.parametrize("model_id", sorted([*model_catalog.MODELS, *model_catalog.CHECKPOINTS]))
def test_every_model_and_checkpoint_says_where_its_facts_were_read(model_id: str) -> None:
    source = model_catalog.model_source(model_id)
    assert isinstance(source, str) and len(source.split()) >= 5, source


def test_model_source_refuses_an_id_the_catalog_does_not_hold() -> None:
    with pytest.raises(KeyError, match="not in the model catalog"):
        model_catalog.model_source("example/not-a-model")


@pytest.mark.parametrize("checkpoint_id", sorted(model_catalog.CHECKPOINTS))
def test_checkpoint_maps_to_a_catalog_model_with_a_valid_format(checkpoint_id: str) -> None:
    checkpoint = model_catalog.CHECKPOINTS[checkpoint_id]
    assert checkpoint["base_model"] in model_catalog.MODELS
    assert CheckpointFormat(**checkpoint["format"]).quant_method != "none"


def _attention_params(arch: ModelArchitecture) -> int:
    """Q, K, V and output projections of a GQA layer; 0 for MLA, whose projections need q_lora_rank (not a field)."""
    if arch.attention == "mla":
        return 0
    q_and_o = 2 * arch.hidden_size * arch.attention_heads * arch.head_dim
    k_and_v = 2 * arch.hidden_size * arch.kv_heads * arch.head_dim
    return arch.layers * (q_and_o + k_and_v)


def _embedding_params(arch: ModelArchitecture) -> int:
    matrices = 1 if arch.tied_embeddings or arch.task == "embed" else 2
    return arch.vocab_size * arch.hidden_size * matrices


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_attention_experts_and_embeddings_fit_in_the_stated_parameters(model_id: str) -> None:
    """The shapes' weights never exceed the model card's total (1% slack: cards round, e.g. Qwen3-30B-A3B's 30.5B)."""
    arch = catalog_architecture(model_id)
    assert _attention_params(arch) + _embedding_params(arch) + arch.expert_params <= arch.params_billion * 1e9 * 1.01


@pytest.mark.parametrize("model_id", MOE_IDS)
def test_moe_expert_weights_are_below_the_total(model_id: str) -> None:
    """moe_layers x experts x 3 x hidden x moe_intermediate_size: the routed experts alone stay below params_billion."""
    arch = catalog_architecture(model_id)
    assert arch.expert_params < arch.params_billion * 1e9
    assert arch.active_params_billion is not None and arch.active_params_billion < arch.params_billion


@pytest.mark.parametrize("model_id", MOE_IDS)
def test_moe_total_is_within_five_percent_of_its_shapes(model_id: str) -> None:
    """Routed and shared experts (each moe_intermediate_size wide), attention and embeddings give the card's total.

    The estimate leaves out what the architecture has no field for: dense layers' MLPs (DeepSeek's first 3,
    Llama 4 Maverick's 24 non-MoE layers), MLA's projections and norms, each under 2% of these models.
    """
    arch = catalog_architecture(model_id)
    layers = arch.layers if arch.moe_layers is None else arch.moe_layers
    one_expert_everywhere = layers * 3 * arch.hidden_size * arch.moe_intermediate_size
    estimate = (
        _attention_params(arch) + _embedding_params(arch) + one_expert_everywhere * (arch.experts + arch.shared_experts)
    )
    assert estimate == pytest.approx(arch.params_billion * 1e9, rel=0.05)


@pytest.mark.parametrize("model_id", MOE_IDS)
def test_moe_active_parameters_hold_the_experts_a_token_uses(model_id: str) -> None:
    """A token multiplies with its experts_per_token routed experts and the shared ones in every MoE layer."""
    arch = catalog_architecture(model_id)
    layers = arch.layers if arch.moe_layers is None else arch.moe_layers
    used = layers * 3 * arch.hidden_size * arch.moe_intermediate_size * (arch.experts_per_token + arch.shared_experts)
    assert used < arch.active_params_billion * 1e9
