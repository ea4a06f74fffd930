"""device_mode 'dra' (issue 31): what a DRA pool needs, refused at its field before anything is created, and what
the platform and serving layers render for it.

Each refusal encodes the upstream fact components/catalog/dra.json records with its source: resource.k8s.io/v1 from
Kubernetes 1.34, aws-dranet's Kubernetes 1.35+ (stable/aws-dranet/README.md), no enableDRA in Karpenter 1.14.1,
no consumable shares in dra-driver-nvidia-gpu v0.4.0, one resource name per DeviceClass in Kueue v0.19.2
(Resources.DeviceClassMappings), no devices in cluster-autoscaler's template of an empty node group.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import pytest
import yaml
from platform_recording import releases, render
from stack_files import refusal, refused_by_render_and_plan

from inferstack.catalog.dra import DEVICE_PLUGIN_DEPLOY_LABEL, PcieLayout
from inferstack.engine import run_stack
from inferstack.engine.render import kubernetes_objects
from inferstack.planning import device_claims
from inferstack.platform.kueue import device_class_mappings
from inferstack.presentation.summary import build_plan
from inferstack.spec import SpecError, StackSpec
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def base() -> dict:
    """A small valid DRA spec: H100s on EFA and L40S under DRA, an L40S batch pool on the device plugin."""
    return {
        "environment": "dra-test",
        "cluster": {"mode": "create", "kubernetes_version": "1.36"},
        "node_pools": [
            {"name": "h100", "instance_types": ["p5.48xlarge"], "device_mode": "dra", "efa": True,
             "min_nodes": 2, "max_nodes": 2, "capacity": {"on_demand_base": 2}},
            {"name": "l40s", "instance_types": ["g6e.2xlarge"], "device_mode": "dra", "min_nodes": 2,
             "max_nodes": 3, "capacity": {"on_demand_base": 1}},
            {"name": "batch", "role": "batch", "instance_types": ["g6e.xlarge"], "max_nodes": 2},
        ],
        "models": [
            {"name": "long", "model": "meta-llama/Llama-3.1-70B-Instruct", "pool": "h100", "tensor_parallel": 8,
             "pipeline_parallel": 2, "max_model_len": 32768, "max_num_seqs": 16, "kv_cache_dtype": "fp8",
             "tier": "standard"},
            {"name": "small", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "l40s", "max_model_len": 8192,
             "tier": "standard"},
        ],
    }


def changed(setter) -> dict:
    spec = copy.deepcopy(base())
    setter(spec)
    return spec


def pool(index: int, **fields):
    return lambda spec: spec["node_pools"][index].update(fields)


def everywhere(*setters):
    def apply(spec):
        for setter in setters:
            setter(spec)
    return apply


REFUSALS = {
    "a GPU selector without DRA": (pool(2, gpu_selector={"min_compute_capability": "8.9"}),
                                   "node_pools[2].gpu_selector", "device_mode to 'dra'"),
    "Kubernetes 1.33": (lambda s: s["cluster"].update(kubernetes_version="1.33"),
                        "node_pools[0].device_mode", "raise cluster.kubernetes_version to 1.34"),
    "EFA on Kubernetes 1.34": (lambda s: s["cluster"].update(kubernetes_version="1.34"),
                               "node_pools[0].device_mode", "1.35 or newer"),
    "an existing cluster": (lambda s: s.update(cluster={"mode": "existing", "name": "team"}),
                            "node_pools[0].device_mode", "device_mode 'device_plugin' on an existing cluster"),
    "scale from zero under cluster-autoscaler": (pool(1, min_nodes=0, capacity={"on_demand_base": 0}),
                                                 "node_pools[1].min_nodes", "set min_nodes to 1 or more"),
    "an empty spot group above the baseline": (pool(1, min_nodes=1), "node_pools[1].min_nodes",
                                               "set min_nodes to 2 or more"),
    "time-slicing": (pool(1, gpu_sharing={"mode": "time_slicing", "replicas": 2}),
                     "node_pools[1].gpu_sharing.mode", "whole GPUs or MIG strategy 'single'"),
    "MPS": (pool(1, gpu_sharing={"mode": "mps", "replicas": 2}),
            "node_pools[1].gpu_sharing.mode", "device_mode 'device_plugin' to share GPUs"),
    "MIG strategy mixed": (
        everywhere(pool(1, instance_types=["p4de.24xlarge"],
                        gpu_sharing={"mode": "mig", "strategy": "mixed", "layout": {"3g.40gb": 2}}),
                   lambda s: s["models"][1].update(mig_profile="3g.40gb", model="BAAI/bge-large-en-v1.5",
                                                   max_model_len=512)),
        "node_pools[1].gpu_sharing.strategy", "use strategy 'single'"),
    "EFA on a type without a recorded PCIe layout": (pool(0, instance_types=["p4d.24xlarge"]),
                                                     "node_pools[0].instance_types[0]", "p5.48xlarge"),
    "a product no GPU of the pool is": (pool(1, gpu_selector={"product": "NVIDIA H100 80GB HBM3"}),
                                        "node_pools[1].gpu_selector.product", "it contains 'L40S'"),
    "a compute capability above the pool's GPUs": (pool(0, gpu_selector={"min_compute_capability": "10.0"}),
                                                   "node_pools[0].gpu_selector.min_compute_capability",
                                                   "set it to 9.0 or lower"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_rejection_names_its_field_and_fix(case):
    setter, path, fix = REFUSALS[case]
    error = refusal(changed(setter))
    found = {e.path: e for e in getattr(error, "refusals", [error])}
    assert path in found, (case, [str(e) for e in found.values()])
    assert fix in found[path].fix, found[path]


def test_karpenter_refuses_a_dra_pool():
    """aws/karpenter-provider-aws v1.14.1 (the pinned release) has no settings.enableDRA (charts/karpenter/values.yaml,
    pkg/operator/options): it cannot launch a node for a pod that claims devices."""
    def karpenter(spec):
        spec["platform"] = {"node_autoscaler": "karpenter"}
        spec["cluster"]["kubernetes_version"] = "1.35"
        for entry in spec["node_pools"]:
            entry.update(min_nodes=0)
    error = refusal(changed(karpenter))
    paths = {e.path: e for e in getattr(error, "refusals", [error])}
    assert "enableDRA" in paths["node_pools[0].device_mode"].problem
    assert "node_pools[1].device_mode" in paths


def test_the_base_spec_and_the_shipped_example_are_accepted():
    validate(StackSpec.model_validate(base()))
    assert {p.name for p in validate(load_stack(STACKS, "dra")).stack.node_pools if p.device_mode == "dra"} == {
        "h100", "l40s"}


def test_a_refused_dra_stack_file_exits_2_with_one_line_and_renders_nothing(tmp_path):
    source = (STACKS / "dra.py").read_text()
    assert source.count('min_compute_capability="8.9"') == 1
    path = tmp_path / "dra.py"
    path.write_text(source.replace('min_compute_capability="8.9"', 'min_compute_capability="9.0"'))
    message = refused_by_render_and_plan(path, tmp_path / "out")
    assert "node_pools[1].gpu_selector.min_compute_capability: 9.0" in message and "8.9" in message, message


class TestRankGroups:
    """One claim per rank group: the GPUs of one PCIe root with its share of the pod's EFA devices."""

    def hardware(self, spec: dict, name: str):
        validated = validate(StackSpec.model_validate(spec))
        return validated, validated.pools[name]

    def test_p5_pairs_each_gpu_with_the_four_efa_devices_of_its_root(self):
        validated, h100 = self.hardware(base(), "h100")
        claims = device_claims.pod_claims(validated.stack.models[0], h100)
        assert (claims.count, claims.claim.gpus, claims.claim.efa) == (8, 1, 4)
        spec = claims.claim.claim_spec()["devices"]
        assert spec["constraints"] == [{"requests": ["gpu", "efa"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
        assert [r["exactly"]["deviceClassName"] for r in spec["requests"]] == ["gpu.nvidia.com", "efa.networking.k8s.aws"]

    def test_a_pod_without_efa_claims_one_gpu_per_rank_and_no_efa(self):
        validated, l40s = self.hardware(base(), "l40s")
        claims = device_claims.pod_claims(validated.stack.models[1], l40s)
        assert (claims.count, claims.claim.gpus, claims.claim.efa) == (1, 1, 0)
        assert "constraints" not in claims.claim.claim_spec()["devices"]

    def test_a_layout_of_two_gpus_and_one_efa_per_root_groups_gpus_by_root(self, monkeypatch):
        """A p4d-like layout (4 roots of 2 GPUs and 1 EFA device): 8 GPUs are 4 claims of 2 GPUs + 1 EFA; 3 GPUs
        cannot be split into whole roots and are refused at the service's field."""
        validated, h100 = self.hardware(base(), "h100")
        long = validated.stack.models[0]
        layout = PcieLayout("p5.48xlarge", roots=4, gpus_per_root=2, efa_per_root=1)
        monkeypatch.setattr(device_claims, "pcie_layout", lambda name: layout)
        monkeypatch.setattr(type(h100), "efa_interfaces", property(lambda self: 4))
        claims = device_claims.pod_claims(long, h100, "models[0]")
        assert (claims.count, claims.claim.gpus, claims.claim.efa) == (4, 2, 1)
        odd = long.model_copy(update={"tensor_parallel": 3})   # still across nodes, so over EFA
        with pytest.raises(SpecError) as caught:
            device_claims.pod_claims(odd, h100, "models[0]")
        assert caught.value.path == "models[0].tensor_parallel" and "multiple of 2" in caught.value.fix

    def test_selectors_name_the_driver_attributes(self):
        """dra-driver-nvidia-gpu v0.4.0 cmd/gpu-kubelet-plugin/deviceinfo.go:160-170 publishes productName (a string)
        and cudaComputeCapability (a semantic version), mig.go:147 a MIG device's profile."""
        spec = changed(pool(1, gpu_selector={"product": "NVIDIA L40S", "min_compute_capability": "8.9"}))
        validated, l40s = self.hardware(spec, "l40s")
        selectors = device_claims.pod_claims(validated.stack.models[1], l40s).claim.selectors
        assert selectors == (
            "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'",
            "device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('8.9.0')) >= 0",
        )


@functools.cache
def rendered_dra() -> tuple[list[dict], dict]:
    validated = validate(load_stack(STACKS, "dra"))
    recording = run_stack(validated)
    return kubernetes_objects(recording), build_plan(validated, recording)


def test_dra_pods_claim_instead_of_requesting_extended_resources():
    objects, _ = rendered_dra()
    templates = {o["metadata"]["name"] for o in objects if o["kind"] == "ResourceClaimTemplate"}
    assert templates == {"llama-70b-long-devices", "llama-70b-devices", "llama-8b-fp8-devices"}
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):   # a multi-node replica claims per pod
        pod = group[role]["spec"]
        assert [c["resourceClaimTemplateName"] for c in pod["resourceClaims"]] == ["llama-70b-long-devices"] * 8
        (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
        assert [c["name"] for c in vllm["resources"]["claims"]] == [c["name"] for c in pod["resourceClaims"]]
        assert not [k for k in vllm["resources"]["limits"] if k.startswith("nvidia.com/") or k.endswith("/efa")]
    batch = next(o for o in objects if o["kind"] == "CronJob")   # the batch pool keeps the device plugin
    pod = batch["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert "resourceClaims" not in pod
    (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_one_mechanism_per_node():
    """NVIDIA/gpu-operator v26.7.0 controllers/state_manager.go addGPUStateLabels keeps a state label it finds with a
    non-empty value, and the device plugin DaemonSet selects nvidia.com/gpu.deploy.device-plugin: 'true': 'false'
    on a DRA pool's nodes keeps it off them. The validator label stays: the operands wait for its toolkit step.
    aws/eks-charts' EFA plugin and aws-dranet turn each supportedInstanceLabels key into a `key In values` term
    (templates/daemonset.yaml): the plugin on the device-plugin EFA pools, the driver on the DRA ones."""
    validated = validate(load_stack(STACKS, "dra"))
    groups = [r for r in run_stack(validated).resources if r.type == "aws:eks/nodeGroup:NodeGroup"]
    gpu_groups = [g for g in groups if "inferstack.dev/pool" in (g.inputs.get("labels") or {})]
    assert len(gpu_groups) >= 3
    for group in gpu_groups:
        labels = group.inputs["labels"]
        dra = validated.stack.pool(labels["inferstack.dev/pool"]).device_mode == "dra"
        assert (labels.get(DEVICE_PLUGIN_DEPLOY_LABEL) == "false") == dra, group.name
        assert "nvidia.com/gpu.deploy.operator-validator" not in labels
    recorded = releases(render(validated.stack))
    assert "aws-efa-k8s-device-plugin" not in recorded   # the only EFA pool is a DRA pool
    gpu, efa = recorded["dra-driver-nvidia-gpu"].inputs, recorded["aws-dranet"].inputs
    terms = gpu["values"]["kubeletPlugin"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "inferstack.dev/pool", "operator": "In", "values": ["h100", "l40s"]}]}]
    assert efa["values"]["supportedInstanceLabels"] == {"keys": ["inferstack.dev/pool"], "values": ["h100"]}
    assert gpu["namespace"] != "default" and efa["namespace"] == "kube-system"
    for values in (gpu["values"]["kubeletPlugin"], efa["values"]):
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in values["tolerations"]


def test_a_mixed_stack_keeps_the_efa_plugin_on_its_device_plugin_pools():
    spec = changed(lambda s: s["node_pools"].append(
        {"name": "h100-plugin", "instance_types": ["p5.48xlarge"], "efa": True, "max_nodes": 1}))
    recorded = releases(render(validate(StackSpec.model_validate(spec)).stack))
    values = recorded["aws-efa-k8s-device-plugin"].inputs["values"]
    assert values["supportedInstanceLabels"] == {"keys": ["inferstack.dev/pool"], "values": ["h100-plugin"]}


def test_kueue_counts_claimed_devices_as_the_device_plugin_would():
    """kueue v0.19.2 Resources.DeviceClassMappings: each class a claim names maps to one resource name, and
    pkg/dra/claims.go admits no workload whose claim names an unmapped class."""
    stack = validate(load_stack(STACKS, "dra")).stack
    assert device_class_mappings(stack) == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]},
        {"name": "vpc.amazonaws.com/efa", "deviceClassNames": ["efa.networking.k8s.aws"]},
    ]
    config = yaml.safe_load(releases(render(stack))["kueue"].inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["resources"]["deviceClassMappings"] == device_class_mappings(stack)
    assert device_class_mappings(load_stack(STACKS, "prod")) == []


def test_cluster_autoscaler_simulates_claims():
    """cluster-autoscaler 1.34 handles DRA objects only with --enable-dynamic-resource-allocation (off by default;
    on and locked from 1.35: kubernetes/autoscaler config/flags/flags.go)."""
    args = releases(render(load_stack(STACKS, "dra")))["cluster-autoscaler"].inputs["values"]["extraArgs"]
    assert args["enable-dynamic-resource-allocation"] is True
    prod = releases(render(load_stack(STACKS, "prod")))["cluster-autoscaler"].inputs["values"]["extraArgs"]
    assert "enable-dynamic-resource-allocation" not in prod


def test_the_plan_says_per_pool_which_mechanism_runs_and_what_each_pod_claims():
    _, plan = rendered_dra()
    pools = {p["name"]: p["devices"] for p in plan["node_pools"]}
    assert pools["h100"] == {"mode": "dra", "releases": ["dra-driver-nvidia-gpu 0.4.0", "aws-dranet 1.0.0"],
                             "device_classes": ["gpu.nvidia.com", "efa.networking.k8s.aws"], "gpu_selector": None}
    assert pools["l40s"]["gpu_selector"] == {"min_compute_capability": "8.9"}
    assert pools["l40s-batch"]["mode"] == "device_plugin"
    claims = {row["model"]: row["claims"] for row in plan["placements"]}
    assert claims["llama-70b-long"] == {
        "template": "llama-70b-long-devices", "per_pod": 8, "gpus_per_claim": 1, "efa_per_claim": 4,
        "paired_by": "resource.kubernetes.io/pcieRoot", "describe": "8 claims of 1 GPU + 4 EFA on one PCIe root"}
    assert claims["llama-70b"]["efa_per_claim"] == 0
    json.dumps(plan)


def test_the_claim_template_is_replaced_whole_when_its_spec_changes():
    """kubernetes pkg/apis/resource/validation ValidateResourceClaimTemplateUpdate: the spec is immutable, and
    pulumi-kubernetes would update it in place, so the program replaces it (same name: delete first)."""
    recording = run_stack(validate(load_stack(STACKS, "dra")))
    templates = [r for r in recording.resources if r.type == "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"]
    assert len(templates) == 3
    for template in templates:
        assert template.options.get("replace_on_changes") == ["spec"], template.options
        assert template.options.get("delete_before_replace") is True


def test_a_dra_node_group_keeps_its_efa_interfaces_for_the_driver_to_discover():
    """aws-dranet publishes the EFA devices the instance has (kubernetes-sigs/dranet pkg/inventory): under managed
    node groups the launch template still attaches one efa-only interface per network card (EC2 efa-acc-inst-types:
    ENA at card 0 / device 0, efa-only at card 0 / device 1 and at device 0 of every further card)."""
    recording = run_stack(validate(load_stack(STACKS, "dra")))
    templates = {r.name: r.inputs for r in recording.resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"}
    h100 = [inputs for name, inputs in templates.items() if "-h100-" in name]
    assert h100
    for inputs in h100:
        kinds = [i["interfaceType"] for i in inputs["networkInterfaces"]]
        assert kinds == ["interface"] + ["efa-only"] * 32


def test_a_dra_group_tells_the_autoscaler_its_nodes_advertise_no_extended_devices():
    """kubernetes/autoscaler cloudprovider/aws/aws_manager.go buildNodeFromTemplate takes nvidia.com/gpu from the
    instance type unless a node-template resources tag overrides it: a DRA node advertises no nvidia.com/gpu or
    vpc.amazonaws.com/efa (its devices are ResourceSlices), so the tags state 0 GPUs and no EFA; the device-plugin
    batch pool keeps its 1 GPU."""
    recording = run_stack(validate(load_stack(STACKS, "dra")))
    tags = {r.name: r.inputs["tag"] for r in recording.resources if r.type == "aws:autoscaling/tag:Tag"}
    device_tags = {name: tag["value"] for name, tag in tags.items() if "/resources/" in tag["key"]}
    assert device_tags == {
        "dra-h100-on-demand-resources/nvidia.com/gpu": "0",
        "dra-l40s-on-demand-resources/nvidia.com/gpu": "0",
        "dra-l40s-spot-resources/nvidia.com/gpu": "0",
        "dra-l40s-batch-spot-resources/nvidia.com/gpu": "1",
    }
