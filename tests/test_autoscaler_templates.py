"""cluster-autoscaler can grow every node group from zero nodes for the pods that select its pool.

The rule, as kubernetes/autoscaler implements it at tag cluster-autoscaler-1.36.1 (the image
components/catalog/charts.json pins for Kubernetes 1.36; 1.35.0 reads the same tags), in
cluster-autoscaler/cloudprovider/aws/:
- aws_manager.go `buildNodeFromTemplate`: capacity is 110 pods plus cpu, memory and nvidia.com/gpu of the
  group's (first) instance type; `extractAllocatableResourcesFromAsg` then sets every
  `k8s.io/cluster-autoscaler/node-template/resources/<name>` tag of the Auto Scaling group (a quantity);
  labels are `buildGenericLabels` (arch, os, instance type, region, zone, hostname) plus
  `extractLabelsFromAsg` (`.../node-template/label/<key>` tags, and `eks:<key>` tags as label `<key>`);
  taints are `extractTaintsFromAsg` (`.../node-template/taint/<key>` tags valued `<value>:<Effect>`).
- When the labels so built hold `nodegroup-name` and `cluster-name` (EKS's `eks:nodegroup-name` and
  `eks:cluster-name` tags on the Auto Scaling group), managed_nodegroup_cache.go and aws_wrapper.go
  `getManagedNodegroupInfo` add what DescribeNodegroup returns: its labels (plus capacityType, amiType,
  diskSize, version, nodegroup name) override, its taints that have a value are appended, and the
  `.../node-template/resources/*` entries of the node group's own tags override the capacity.
- README.md "Auto-Discovery Setup": scaling up from 0 reads the label, taint and resources tags from the
  Auto Scaling group; a pod whose selector, tolerations or requests the template node does not satisfy
  never triggers a scale-up.
EKS does not copy a managed node group's tags to its Auto Scaling group (EKS User Guide,
awsdocs/amazon-eks-user-guide latest/ug/clusters/management/eks-using-tags.adoc), and a DescribeNodegroup
the autoscaler may not make (or that fails) leaves only the Auto Scaling group's tags, so every case is
checked both with and without DescribeNodegroup's answer.

The template node is built here from the recorded tags, independently of the program's tag function.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferstack import conventions
from inferstack.aws.node_template import TEMPLATE_PREFIX
from inferstack.catalog import instance_type
from inferstack.engine import run_stack
from inferstack.policies.runner import run_policies
from inferstack.engine.recorder import Recording, Registration
from inferstack.policies.autoscaler_templates import autoscaler_node_templates
from inferstack.policies.props import quantity
from inferstack.policies.workloads import expression_matches, workload
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ASG_TAG = "aws:autoscaling/tag:Tag"
RESOURCE_FLAVOR = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"

# The prefixes and patterns aws_manager.go matches (spelled out here, not imported from the program).
RESOURCES_PREFIX = "k8s.io/cluster-autoscaler/node-template/resources/"
LABEL_PREFIX = "k8s.io/cluster-autoscaler/node-template/label/"
TAINT_PREFIX = "k8s.io/cluster-autoscaler/node-template/taint/"
TAINT_VALUE = re.compile(r"(.*):(?:NoSchedule|NoExecute|PreferNoSchedule)")
EKS_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
PODS_PER_TEMPLATE_NODE = 110


@dataclass
class TemplateNode:
    capacity: dict[str, float]
    labels: dict[str, str]
    taints: list[tuple[str, str, str]]  # (key, value, effect)


def _after(key: str, prefix: str) -> str:
    """Go's strings.Split(key, prefix)[1] when the split yields more than one part, else ''."""
    parts = key.split(prefix)
    return parts[1] if len(parts) > 1 else ""


def template_node(group: Registration, asg_tags: dict[str, str], zone: str, describe_nodegroup: bool) -> TemplateNode:
    """The node cluster-autoscaler would simulate for this empty group (aws_manager.go buildNodeFromTemplate)."""
    inputs = group.inputs
    types = inputs.get("instanceTypes") or [asg_tags["test:launch-template-instance-type"]]
    instance = instance_type(types[0])
    capacity: dict[str, float] = {
        "pods": PODS_PER_TEMPLATE_NODE,
        "cpu": instance.vcpus,
        "nvidia.com/gpu": instance.gpu_count,
        "memory": instance.memory_mib * 2**20,
    }
    for key, value in asg_tags.items():
        name = _after(key, RESOURCES_PREFIX)
        if name and (amount := quantity(value)) is not None:
            capacity[name] = amount
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance.name,
        "topology.kubernetes.io/region": zone[:-1],
        "topology.kubernetes.io/zone": zone,
        "topology.ebs.csi.aws.com/zone": zone,
        "kubernetes.io/hostname": f"{group.name}-asg-template",
    }
    for key, value in asg_tags.items():
        label = _after(key, LABEL_PREFIX) or _after(key, "eks:")
        if label:
            labels[label] = value
    taints = []
    for key, value in asg_tags.items():
        name = _after(key, TAINT_PREFIX)
        if TAINT_VALUE.search(value) and name:
            taint_value, effect = value.split(":", 1)
            taints.append((name, taint_value, effect))
    if describe_nodegroup and labels.get("nodegroup-name") and labels.get("cluster-name"):
        answered = {
            "amiType": inputs["amiType"],
            conventions.EKS_CAPACITY_LABEL: inputs.get("capacityType", "ON_DEMAND"),
            "eks.amazonaws.com/nodegroup": labels["nodegroup-name"],
            **(inputs.get("labels") or {}),
        }
        labels.update(answered)
        taints += [
            (t["key"], t["value"], EKS_EFFECTS[t["effect"]]) for t in inputs.get("taints") or [] if t.get("value") is not None
        ]
        for key, value in (inputs.get("tags") or {}).items():
            name = _after(key, RESOURCES_PREFIX)
            if name and (amount := quantity(value)) is not None:
                capacity[name] = amount
    return TemplateNode(capacity, labels, taints)


def eks_asg_tags(group: Registration, cluster: str) -> dict[str, str]:
    """The tags EKS itself puts on a managed node group's Auto Scaling group: the autoscaler's discovery
    tags and the group's names, which send the autoscaler to DescribeNodegroup."""
    return {
        "k8s.io/cluster-autoscaler/enabled": "true",
        f"k8s.io/cluster-autoscaler/{cluster}": "owned",
        "eks:cluster-name": cluster,
        "eks:nodegroup-name": group.name,
    }


def asg_tags(recording: Recording, group: Registration) -> dict[str, str]:
    tags = {}
    for tag in recording.of_type(ASG_TAG):
        if group.name in tag.depends_on and tag.inputs["tag"]["key"].startswith(TEMPLATE_PREFIX):
            assert tag.inputs["tag"]["propagateAtLaunch"] is False, f"{tag.name}: a template tag need not reach instances"
            tags[tag.inputs["tag"]["key"]] = tag.inputs["tag"]["value"]
    return tags


def node_labels(group: Registration) -> dict[str, str]:
    """Labels a real node of the group carries: the group's, plus the capacity type EKS adds."""
    return {**(group.inputs.get("labels") or {}), conventions.EKS_CAPACITY_LABEL: group.inputs.get("capacityType", "ON_DEMAND")}


def gpu_groups(recording: Recording) -> list[Registration]:
    return [g for g in recording.of_type(NODE_GROUP) if conventions.POOL_LABEL in (g.inputs.get("labels") or {})]


def pod_requests(spec: dict[str, Any]) -> dict[str, float]:
    """What one pod asks of a node: containers add up, init containers run one at a time; an unset
    request defaults to its limit."""
    def of(container: dict[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: quantity(value) or 0 for name, value in merged.items()}

    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for name, amount in of(container).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in of(container).items():
            total[name] = max(total.get(name, 0), amount)
    return total


def tolerates(tolerations: list[dict[str, Any]], taint: tuple[str, str, str]) -> bool:
    key, value, effect = taint
    for t in tolerations:
        if t.get("effect") not in (None, "", effect) or t.get("key") not in (None, "", key):
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == value:
            return True
    return False


def selecting_pods(recording: Recording) -> list[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of every serving, worker and batch pod template that selects a pool."""
    found = []
    for r in recording.resources:
        view = workload(r.type, r.inputs, r.name)
        if view is None:
            continue
        for template in view.templates:
            if conventions.POOL_LABEL in template.node_selector():
                found.append((f"{view} {template.role}", dict(template.spec)))
    return found


def _sharing_stack(mig_strategy: str) -> StackSpec:
    """A pool of each sharing mode with a service on it; one MIG strategy per cluster, and the device
    plugin refuses MPS beside the mixed one, so there are two such stacks."""
    pools = [
        {"name": "whole", "instance_types": ["g6e.xlarge"], "max_nodes": 2},
        {"name": "migmixed", "instance_types": ["p4de.24xlarge"], "max_nodes": 1,
         "gpu_sharing": {"mode": "mig", "strategy": "mixed", "layout": {"1g.10gb": 3, "2g.20gb": 2}}},
        {"name": "migsingle", "instance_types": ["p4de.24xlarge"], "max_nodes": 1,
         "gpu_sharing": {"mode": "mig", "strategy": "single", "layout": {"3g.40gb": 2}}},
        {"name": "slices", "instance_types": ["g6.xlarge", "g6.2xlarge"], "max_nodes": 2,
         "gpu_sharing": {"mode": "time_slicing", "replicas": 2}, "taints": [{"key": "team", "value": "search"}]},
        {"name": "mps", "instance_types": ["g6.xlarge"], "max_nodes": 2,
         "gpu_sharing": {"mode": "mps", "replicas": 2}, "taints": [{"key": "dedicated", "effect": "NoExecute"}]},
        {"name": "efa", "instance_types": ["p5.48xlarge"], "max_nodes": 2, "efa": True},
    ]
    small = {"model": "meta-llama/Llama-3.2-3B-Instruct", "max_model_len": 4096, "max_num_seqs": 4, "tier": "standard",
             "autoscaling": {"min_replicas": 0, "max_replicas": 1, "scale_to_zero": True}}
    models = [
        {**small, "name": "on-whole", "pool": "whole"},
        {**small, "name": "on-mig-mixed", "pool": "migmixed", "model": "BAAI/bge-large-en-v1.5",
         "mig_profile": "1g.10gb", "max_model_len": 512},
        {**small, "name": "on-mig-single", "pool": "migsingle", "mig_profile": "3g.40gb"},
        {**small, "name": "on-slices", "pool": "slices"},
        {**small, "name": "on-mps", "pool": "mps"},
        {**small, "name": "on-efa", "pool": "efa", "model": "meta-llama/Llama-3.1-70B-Instruct",
         "tensor_parallel": 8, "pipeline_parallel": 2, "max_model_len": 8192},
    ]
    left_out = {"migsingle", "mps"} if mig_strategy == "mixed" else {"migmixed"}
    return validate(StackSpec.model_validate({
        "environment": "sharing",
        "node_pools": [p for p in pools if p["name"] not in left_out],
        "models": [m for m in models if m["pool"] not in left_out],
    })).stack


STACK_CASES = {
    "dev": lambda: load_stack(STACKS, "dev"),
    "prod": lambda: load_stack(STACKS, "prod"),
    "sharing-mig-mixed": lambda: _sharing_stack("mixed"),
    "sharing-mig-single": lambda: _sharing_stack("single"),
}


@pytest.fixture(scope="module")
def recordings():
    cache: dict[str, tuple[StackSpec, Recording]] = {}

    def get(case: str) -> tuple[StackSpec, Recording]:
        if case not in cache:
            spec = STACK_CASES[case]()
            cache[case] = (spec, run_stack(spec))
        return cache[case]

    return get


def _templates(spec: StackSpec, recording: Recording, describe_nodegroup: bool):
    cluster = spec.cluster_name
    zone = f"{spec.region}a"
    for group in gpu_groups(recording):
        tags = {**eks_asg_tags(group, cluster), **asg_tags(recording, group)}
        if not group.inputs.get("instanceTypes"):
            template = next(r for r in recording.resources if r.name in group.depends_on and "instanceType" in r.inputs)
            tags["test:launch-template-instance-type"] = template.inputs["instanceType"]
        yield group, template_node(group, tags, zone, describe_nodegroup)


@pytest.mark.parametrize("describe_nodegroup", [True, False], ids=["with DescribeNodegroup", "ASG tags alone"])
@pytest.mark.parametrize("case", list(STACK_CASES))
def test_every_pod_scales_its_pool_up_from_zero(recordings, case, describe_nodegroup):
    spec, recording = recordings(case)
    templates = list(_templates(spec, recording, describe_nodegroup))
    pods = selecting_pods(recording)
    assert pods, f"{case}: no pod selects a pool"
    for name, pod in pods:
        selector = pod.get("nodeSelector") or {}
        terms = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms") or []
        groups = [(g, t) for g, t in templates if all(node_labels(g).get(k) == v for k, v in selector.items())]
        assert groups, f"{name}: no node group carries {selector}"
        requests = pod_requests(pod)
        for group, node in groups:
            short = {k: v for k, v in requests.items() if node.capacity.get(k, 0) < v}
            assert not short, f"{name} on {group.name}: the template node offers {node.capacity}, short of {short}"
            missing = {k: v for k, v in selector.items() if node.labels.get(k) != v}
            assert not missing, f"{name} on {group.name}: the template node lacks labels {missing}"
            assert not terms or any(
                all(expression_matches(e, node.labels) for e in term.get("matchExpressions") or []) for term in terms
            ), f"{name} on {group.name}: no required node affinity term matches {node.labels}"
            hard = [t for t in node.taints if t[2] in ("NoSchedule", "NoExecute")]
            untolerated = [t for t in hard if not tolerates(pod.get("tolerations") or [], t)]
            assert not untolerated, f"{name} on {group.name}: does not tolerate {untolerated}"


@pytest.mark.parametrize("describe_nodegroup", [True, False], ids=["with DescribeNodegroup", "ASG tags alone"])
@pytest.mark.parametrize("case", list(STACK_CASES))
def test_template_nodes_carry_the_gpu_taint_and_the_pools_taints(recordings, case, describe_nodegroup):
    spec, recording = recordings(case)
    for group, node in _templates(spec, recording, describe_nodegroup):
        wanted = {(conventions.GPU_TAINT_KEY, "true", "NoSchedule")}
        wanted |= {(t["key"], t.get("value") or "", EKS_EFFECTS[t["effect"]]) for t in group.inputs.get("taints") or []}
        assert wanted <= set(node.taints), f"{group.name}: template taints {node.taints}, nodes get {wanted}"


@pytest.mark.parametrize("case", list(STACK_CASES))
def test_kueue_flavors_select_labels_the_template_nodes_carry(recordings, case):
    """Kueue adds a ResourceFlavor's nodeLabels to the pods it admits (pool and EKS capacity type), so an
    admitted batch pod selects them: some group's template node must carry them, from the tags alone."""
    spec, recording = recordings(case)
    templates = list(_templates(spec, recording, describe_nodegroup=False))
    for flavor in recording.of_type(RESOURCE_FLAVOR):
        wanted = flavor.inputs["spec"].get("nodeLabels") or {}
        assert any(all(node.labels.get(k) == v for k, v in wanted.items()) for _, node in templates), (
            f"flavor {flavor.name}: no template node carries {wanted}"
        )


def test_an_empty_shared_pool_needs_its_tags(recordings):
    """The defect this guards: without the tags, dev's only model (nvidia.com/gpu.shared on a time-sliced
    pool at zero nodes) never scales up, because the instance type only says nvidia.com/gpu."""
    spec, recording = recordings("dev")
    group = gpu_groups(recording)[0]
    bare = template_node(group, eks_asg_tags(group, spec.cluster_name), f"{spec.region}a", describe_nodegroup=False)
    tagged = template_node(group, {**eks_asg_tags(group, spec.cluster_name), **asg_tags(recording, group)},
                           f"{spec.region}a", describe_nodegroup=False)
    assert "nvidia.com/gpu.shared" not in bare.capacity
    assert tagged.capacity["nvidia.com/gpu.shared"] == 2 and tagged.capacity["nvidia.com/gpu"] == 0


# ------------------------------------------------------------------------------------------ the policy


def _violations(resources: list[dict[str, Any]], stack: str) -> list[str]:
    (result,) = run_policies(resources, stack, policies=[autoscaler_node_templates])
    return [v.message for v in result.violations]


@pytest.mark.parametrize("case", list(STACK_CASES))
def test_the_policy_passes_every_stack(recordings, case):
    spec, recording = recordings(case)
    assert _violations([r.as_dict() for r in recording.resources], spec.environment) == []


def test_the_policy_fails_a_group_at_zero_without_its_tags(recordings):
    spec, recording = recordings("dev")
    group = gpu_groups(recording)[0]
    kept = [r.as_dict() for r in recording.resources if not (r.type == ASG_TAG and group.name in r.depends_on)]

    (message,) = _violations(kept, spec.environment)

    assert group.name in message and "can be at zero nodes" in message
    assert f"{RESOURCES_PREFIX}nvidia.com/gpu.shared='2'" in message
    assert f"{TAINT_PREFIX}nvidia.com/gpu='true:NoSchedule'" in message
    assert "aws.autoscaling.Tag" in message


def test_the_policy_names_a_tag_that_says_the_wrong_thing(recordings):
    spec, recording = recordings("dev")
    resources = [r.as_dict() for r in recording.resources]
    shared = next(r for r in resources if r["type"] == ASG_TAG and r["inputs"]["tag"]["key"].endswith("/gpu.shared"))
    shared["inputs"]["tag"]["value"] = "1"

    (message,) = _violations(resources, spec.environment)

    assert f"{RESOURCES_PREFIX}nvidia.com/gpu.shared='2' (has '1')" in message
