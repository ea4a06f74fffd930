"""`inferstack diff` on changes whose node replacement no Pulumi diff shows: Karpenter drift, GPU capacity deleted,
a node group's AMI release moved. Each test renders a stack before and after one edit on the embedded engine.

Upstream rules (catalog/replacement.json karpenter_drift, with line numbers there):
- aws/karpenter-provider-aws v1.14.1 pkg/apis/v1/ec2nodeclass.go EC2NodeClassSpec and EC2NodeClass.Hash(): every
  spec field is hashed into karpenter.k8s.aws/ec2nodeclass-hash except the selector terms, ipPrefixCount and
  amiFamily (`hash:"ignore"`); pkg/cloudprovider/drift.go isNodeClassDrifted: AMIs, subnets, security groups and
  capacity reservations are compared with each node instead.
- kubernetes-sigs/karpenter 6e7eab7a0f48 (the core v1.14.1 pins) pkg/apis/v1/nodepool.go NodePool.Hash(): only
  spec.template is hashed (requirements `hash:"ignore"`); pkg/controllers/nodeclaim/disruption/drift.go.
- aws/karpenter-provider-aws v1.14.1 website/content/en/preview/concepts/disruption.md "Drift": spec.weight,
  spec.limits and spec.disruption are behavioral fields, not considered for drift.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from inferstack import cli
from inferstack.catalog.replacement import drift_rule_for, rule_for
from inferstack.presentation import diff
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack

ROOT = Path(__file__).resolve().parents[1]


@cache
def _spec(stack: str) -> StackSpec:
    return load_stack(ROOT / "stacks", stack)


@cache
def _side(spec_json: str):
    return diff.run_spec(StackSpec.model_validate_json(spec_json))


def _edited(stack: str, edit) -> str:
    data = _spec(stack).model_dump(mode="json")
    edit(data)
    return StackSpec.model_validate(data).model_dump_json()


def _diff(stack: str, before_edit, after_edit) -> dict:
    return diff.diff(_side(_edited(stack, before_edit)), _side(_edited(stack, after_edit)), "test")


def _unchanged(_data) -> None:
    return None


def _pool(data: dict, name: str) -> dict:
    return next(p for p in data["node_pools"] if p["name"] == name)


def _exit_code(result: dict) -> int:
    """What `inferstack diff` returns for a result (components/cli.py _diff)."""
    return cli.EXIT_BLOCKING_REPLACEMENT if result["blocking_replacements"] else 0


def test_drift_rules_follow_the_karpenter_hash_fields():
    """ec2nodeclass.go: spec is hashed, the selector terms, ipPrefixCount and amiFamily are `hash:"ignore"`;
    nodepool.go: only spec.template is hashed and its requirements are `hash:"ignore"`; disruption.md "Drift":
    weight, limits and disruption are behavioral."""
    node_class = drift_rule_for(diff.NODE_CLASS)
    assert node_class.hashed == "spec"
    assert {"spec.amiSelectorTerms", "spec.subnetSelectorTerms", "spec.securityGroupSelectorTerms",
            "spec.capacityReservationSelectorTerms", "spec.ipPrefixCount"} <= set(node_class.hash_ignored)
    assert node_class.dynamic["spec.amiSelectorTerms"] == "any_change"
    assert node_class.dynamic["spec.subnetSelectorTerms"] == "removed_values"
    node_pool = drift_rule_for(diff.NODE_POOL)
    assert node_pool.hashed == "spec.template" and node_pool.hash_ignored == ("spec.template.spec.requirements",)
    assert set(node_pool.behavioral) == {"spec.weight", "spec.limits", "spec.disruption"}
    for rule in (node_class, node_pool):
        assert "karpenter" in rule.source and "drift.go" in rule.source


def test_a_bigger_root_disk_on_a_karpenter_pool_drifts_its_nodes_and_exits_3():
    """blockDeviceMappings is hashed into the EC2NodeClass hash (ec2nodeclass.go, pkg/cloudprovider/drift.go
    areStaticFieldsDrifted): every NodePool whose nodeClassRef names the class drifts. Pulumi itself only updates
    the EC2NodeClass in place."""
    def bigger(data):
        _pool(data, "l40s")["disk_size_gib"] = 400

    result = _diff("karpenter", _unchanged, bigger)
    assert [c for c in result["replaced"] if c["type"] == diff.NODE_CLASS] == []
    drifting = {d["node_pool"]: d for d in result["node_pools_drifting"]}
    assert set(drifting) == {"karpenter-l40s-on-demand", "karpenter-l40s-spot"}
    for entry in drifting.values():
        assert entry["pool"] == "l40s" and entry["gpu"]
        assert "EC2NodeClass karpenter-l40s spec.blockDeviceMappings" in entry["why"]
        assert "node(s)" in entry["drains"]
    assert result["services_only_on_drifting_pools"] == ["karpenter-serving-llama-8b-deployment"]
    assert _exit_code(result) == 3
    text = diff.as_text(result)
    assert "DRIFTS    Karpenter NodePool karpenter-l40s-spot (pool l40s, GPU)" in text
    assert "karpenter-h100" not in " ".join(d["why"] for d in result["node_pools_drifting"])


def test_nodepool_weight_limits_and_budgets_drift_nothing():
    """disruption.md "Drift", Behavioral Fields: spec.weight, spec.limits, spec.disruption.* are not considered for
    drift (nodepool.go Hash() covers spec.template only)."""
    resources, plan = _side(_spec("karpenter").model_dump_json())
    edited = json.loads(json.dumps(resources))
    for resource in edited:
        if resource["type"] == diff.NODE_POOL:
            spec = resource["inputs"]["spec"]
            spec["weight"] = 1
            spec["limits"] = {"nodes": "9"}
            spec["disruption"]["budgets"] = [{"nodes": "3"}]
    result = diff.diff((resources, plan), (edited, plan), "test")
    assert {c["type"] for c in result["updated"]} == {diff.NODE_POOL}
    assert result["node_pools_drifting"] == [] and result["downtime"] == []
    assert _exit_code(result) == 0


def test_requirements_drift_only_the_nodes_they_no_longer_allow():
    """drift.go areRequirementsDrifted: a node drifts when its labels are no longer Compatible with the NodePool's
    requirements, so allowing another instance type drifts nothing and dropping one drifts the pool."""
    resources, plan = _side(_spec("karpenter").model_dump_json())

    def with_types(types):
        edited = json.loads(json.dumps(resources))
        for resource in edited:
            if resource["inputs"].get("metadata", {}).get("name") == "karpenter-l40s-spot":
                for requirement in resource["inputs"]["spec"]["template"]["spec"]["requirements"]:
                    if requirement["key"] == "node.kubernetes.io/instance-type":
                        requirement["values"] = types
        return edited

    wider = diff.diff((resources, plan), (with_types(["g6e.2xlarge", "g6e.4xlarge", "g6e.xlarge", "g6e.8xlarge"]), plan), "t")
    assert wider["node_pools_drifting"] == [] and _exit_code(wider) == 0
    narrower = diff.diff((resources, plan), (with_types(["g6e.2xlarge"]), plan), "t")
    assert [d["node_pool"] for d in narrower["node_pools_drifting"]] == ["karpenter-l40s-spot"]
    assert _exit_code(narrower) == 3


def test_a_new_ami_pin_drifts_through_the_resolved_ami():
    """amiSelectorTerms is hash-ignored but resolved (pkg/cloudprovider/drift.go isAMIDrifted): a new alias
    version drifts every node of the class; ipPrefixCount is hash-ignored and compared nowhere."""
    resources, plan = _side(_spec("karpenter").model_dump_json())
    repinned, prefixed = json.loads(json.dumps(resources)), json.loads(json.dumps(resources))
    for resource in repinned:
        if resource["inputs"].get("metadata", {}).get("name") in ("karpenter-h100", "karpenter-h100-reserved") \
                and resource["type"] == diff.NODE_CLASS:
            resource["inputs"]["spec"]["amiSelectorTerms"] = [{"alias": "al2023@v20260901"}]
    for resource in prefixed:
        if resource["type"] == diff.NODE_CLASS:
            resource["inputs"]["spec"]["ipPrefixCount"] = 2
    result = diff.diff((resources, plan), (repinned, plan), "t")
    assert {d["node_pool"] for d in result["node_pools_drifting"]} == {"karpenter-h100-reserved", "karpenter-h100-spot"}
    assert result["services_only_on_drifting_pools"] == ["karpenter-serving-llama-70b-deployment"]
    assert any(s["name"] == "karpenter-serving-llama-70b-deployment" for s in result["downtime"])
    assert _exit_code(result) == 3
    untouched = diff.diff((resources, plan), (prefixed, plan), "t")
    assert untouched["node_pools_drifting"] == [] and _exit_code(untouched) == 0


def test_switching_a_pool_to_spot_deletes_its_gpu_node_groups_and_exits_3():
    """The node groups of the old capacity plan are deleted (EKS drains them): the services on the pool lose their
    nodes, although the pool keeps other groups."""
    def on_demand(data):
        data["node_pools"][0]["capacity"] = {"on_demand_base": 1, "spot": False}

    def spot(data):
        data["node_pools"][0]["capacity"] = {"on_demand_base": 0, "spot": True}

    result = _diff("dev", on_demand, spot)
    deleted = result["gpu_capacity_deleted"]
    assert deleted and all(d["type"] == diff.NODE_GROUP and d["pool"] == "l4" for d in deleted)
    assert all(d["services"] for d in deleted)
    assert {d["name"] for d in deleted} <= {b["name"] for b in result["blocking_replacements"]}
    assert _exit_code(result) == 3
    assert "DELETES   GPU node group" in diff.as_text(result)


def test_moving_a_stack_to_karpenter_names_the_deleted_node_groups_and_exits_3():
    """Node groups deleted, NodePools added: the pods move only once Karpenter launches nodes and the groups drain."""
    def node_groups(data):
        data["platform"]["node_autoscaler"] = "cluster-autoscaler"

    result = _diff("karpenter", node_groups, _unchanged)
    deleted = {d["name"] for d in result["gpu_capacity_deleted"]}
    gpu_groups = {c["name"] for c in result["deleted"] if c["type"] == diff.NODE_GROUP}
    assert deleted and deleted <= gpu_groups
    assert {d["pool"] for d in result["gpu_capacity_deleted"]} == {"h100", "l40s", "a100-mig"}
    assert any(c["type"] == diff.NODE_POOL for c in result["added"])
    assert _exit_code(result) == 3


def test_a_release_version_move_rolls_the_gpu_node_group():
    """terraform-provider-aws internal/service/eks/node_group.go (012e0a32f068): release_version is updated by
    UpdateNodegroupVersion, a rolling replacement of the group's nodes (catalog rolls_on)."""
    assert "releaseVersion" in rule_for(diff.NODE_GROUP).rolls_on
    resources, plan = _side(_spec("dev").model_dump_json())

    def pinned(release):
        edited = json.loads(json.dumps(resources))
        for resource in edited:
            if diff.is_gpu_node_group(resource):
                resource["inputs"]["releaseVersion"] = release
        return edited

    result = diff.diff((pinned("1.36.0-20260724"), plan), (pinned("1.36.0-20260901"), plan), "t")
    rolled = [r for r in result["node_groups_rolling"] if r["gpu"]]
    assert rolled and all(r["why"] == "new releaseVersion" for r in rolled)
    assert {r["name"] for r in rolled} <= {b["name"] for b in result["blocking_replacements"]}
    assert _exit_code(result) == 3


def test_cli_diff_exits_3_naming_the_pool_whose_nodes_drift(tmp_path, capsys):
    """`inferstack diff` against a render whose l40s EC2NodeClass had a smaller root volume: blockDeviceMappings is
    hashed (aws/karpenter-provider-aws v1.14.1 pkg/apis/v1/ec2nodeclass.go), so Karpenter replaces the pool's nodes."""
    assert cli.main(["render", "karpenter", "--out", str(tmp_path / "now")]) == 0
    capsys.readouterr()
    resources = json.loads((tmp_path / "now" / "resources.json").read_text())
    for resource in resources:
        if resource["type"] == diff.NODE_CLASS and resource["inputs"]["metadata"]["name"] == "karpenter-l40s":
            resource["inputs"]["spec"]["blockDeviceMappings"][0]["ebs"]["volumeSize"] = "100Gi"
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "resources.json").write_text(json.dumps(resources))
    assert cli.main(["diff", "karpenter", "--against", str(tmp_path / "old")]) == 3
    out = capsys.readouterr().out
    assert "Karpenter NodePool karpenter-l40s-spot (pool l40s, GPU)" in out
    assert "Karpenter NodePool karpenter-l40s-on-demand (pool l40s, GPU)" in out
