"""Issue 26 item 6b: under Karpenter the system node group is fixed (nothing scales it), so an opt-in CPU NodePool
takes the system pods that do not fit on it, and the plan says which of the two the stack has.

Upstream (aws/karpenter-provider-aws tag v1.14.1):
- website/content/en/preview/getting-started/getting-started-with-karpenter/_index.md:78: the kube-system and karpenter
  namespaces run on EKS managed node groups (or Fargate); scripts/step12-add-nodepool.sh:1-48: the general-purpose
  NodePool: amd64 Linux, capacity type on-demand, instance-category c/m/r, instance-generation Gt 2, limits.cpu,
  WhenEmptyOrUnderutilized after 1m, expireAfter 720h, an al2023 alias EC2NodeClass;
- charts/karpenter/values.yaml:93-99: the controller's required node affinity karpenter.sh/nodepool DoesNotExist keeps
  it off every node Karpenter launches, this NodePool's included, so the controller stays on the system node group.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_validation import assert_valid

from inferstack.platform.karpenter_pools import cpu_node_class, cpu_node_pool, cpu_pool_note
from inferstack.spec import StackSpec, describe_validation_error
from inferstack.spec.platform import KarpenterCpuPoolSpec
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def karpenter_spec(**platform) -> StackSpec:
    spec = load_stack(STACKS, "karpenter").model_dump(mode="json", exclude_unset=True)
    spec["platform"].update(platform)
    return StackSpec.model_validate(spec)


def objects(cpu_pool: KarpenterCpuPoolSpec) -> tuple[dict, dict]:
    node_class = cpu_node_class(environment="prod", node_role_name="prod-karpenter-node",
                                subnet_ids=["subnet-0aaa1111", "subnet-0bbb2222", "subnet-0ccc3333"],
                                security_group_ids=["sg-0cluster1"], tags={"team": "ml-platform"})
    return node_class, cpu_node_pool("prod", cpu_pool)


def test_the_cpu_objects_pass_the_upstream_crd_schemas():
    assert_valid(list(objects(KarpenterCpuPoolSpec(enabled=True, max_vcpus=64, instance_categories=["c", "m"]))))


def test_the_nodepool_is_the_upstream_general_purpose_one_capped_in_vcpus():
    node_class, node_pool = objects(KarpenterCpuPoolSpec(enabled=True, max_vcpus=64))
    spec = node_pool["spec"]
    assert spec["limits"] == {"cpu": "64"}
    assert spec["template"]["spec"]["nodeClassRef"]["name"] == node_class["metadata"]["name"]
    requirements = {r["key"]: (r["operator"], r["values"]) for r in spec["template"]["spec"]["requirements"]}
    assert requirements == {
        "kubernetes.io/arch": ("In", ["amd64"]),
        "kubernetes.io/os": ("In", ["linux"]),
        "karpenter.sh/capacity-type": ("In", ["on-demand"]),
        "karpenter.k8s.aws/instance-category": ("In", ["c", "m", "r"]),
        "karpenter.k8s.aws/instance-generation": ("Gt", ["2"]),
    }
    assert spec["disruption"] == {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"}


def test_system_pods_need_no_toleration_and_nodes_use_every_cluster_subnet():
    node_class, node_pool = objects(KarpenterCpuPoolSpec(enabled=True))
    assert "taints" not in node_pool["spec"]["template"]["spec"]
    assert len(node_class["spec"]["subnetSelectorTerms"]) == 3
    assert node_class["spec"]["amiSelectorTerms"][0]["alias"].startswith("al2023@")
    assert node_class["spec"]["metadataOptions"]["httpTokens"] == "required"


def test_the_plan_names_the_pool_or_says_the_system_group_is_fixed():
    on = cpu_pool_note(karpenter_spec(karpenter_cpu_pool={"enabled": True, "max_vcpus": 48}))
    assert "karpenter-system-cpu" in on and "48 vCPUs" in on and "controller stays on the system node group" in on
    off = cpu_pool_note(karpenter_spec())
    assert "nothing scales under Karpenter" in off and "platform.karpenter_cpu_pool.enabled" in off


def test_the_cpu_pool_outside_karpenter_is_refused_at_the_field():
    spec = load_stack(STACKS, "karpenter").model_dump(mode="json", exclude_unset=True)
    spec["platform"] = {"karpenter_cpu_pool": {"enabled": True}}
    with pytest.raises(ValueError) as caught:
        StackSpec.model_validate(spec)
    error = describe_validation_error(caught.value, StackSpec)
    assert error.path == "platform" and "karpenter_cpu_pool.enabled" in str(error) and str(error).count("To fix:") == 1
