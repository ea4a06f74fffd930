"""EKS node auto repair must repair the first failed node of every GPU node group, and the plan says per pool what
one failed node costs (issue 26, item 3).

Upstream rules encoded here:
- awsdocs/amazon-eks-user-guide latest/ug/nodes/node-repair.adoc (commit dbc0b72986433b6f3ee9b5bcff7119048d5b2786):
  with no threshold set, a managed node group stops repairing when it "has more than five nodes and more than 20%
  of the nodes in the node group are unhealthy"; `maxUnhealthyNodeThresholdCount` / `...Percentage` replace that
  rule with "the number (percentage) of unhealthy nodes above which node auto repair stops".
- EKS API NodeRepairConfig (docs.aws.amazon.com/eks/latest/APIReference/API_NodeRepairConfig.html): a count or a
  percentage, never both, for the threshold and for the parallel repairs.
- kubernetes-sigs/karpenter pkg/controllers/node/health/controller.go (commit bc5346fa61bd)
  `isHealthyForNodes`: 20% of a NodePool's nodes, rounded up, may be unhealthy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_policies import rendered  # noqa: E402

from inferstack.planning.node_health import managed_group_halts_at, node_health_plan
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def eks_repairs(config: dict, group_nodes: int, unhealthy: int) -> bool:
    """Whether a managed node group with this nodeRepairConfig goes on repairing (node-repair.adoc)."""
    if not config.get("enabled"):
        return False
    if "maxUnhealthyNodeThresholdCount" in config:
        return unhealthy <= config["maxUnhealthyNodeThresholdCount"]
    if "maxUnhealthyNodeThresholdPercentage" in config:
        return unhealthy * 100 <= config["maxUnhealthyNodeThresholdPercentage"] * group_nodes
    return group_nodes <= 5 or unhealthy * 100 <= 20 * group_nodes


def gpu_node_groups(stack: str) -> list[dict]:
    return [r for r in rendered(stack) if r["type"].endswith(":NodeGroup") and not r["name"].endswith("-eks-system")]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_gpu_node_group_repairs_its_first_failed_node_at_every_size(stack):
    groups = gpu_node_groups(stack)
    assert groups
    for group in groups:
        config = group["inputs"]["nodeRepairConfig"]
        for nodes in range(1, group["inputs"]["scalingConfig"]["maxSize"] + 1):
            assert eks_repairs(config, nodes, unhealthy=1), (group["name"], nodes, config)


def test_repair_is_paced_one_node_at_a_time_and_keeps_eks_default_stop():
    for group in gpu_node_groups("prod"):
        config = group["inputs"]["nodeRepairConfig"]
        assert config["maxParallelNodesRepairedCount"] == 1 and "maxParallelNodesRepairedPercentage" not in config
        assert not {"maxUnhealthyNodeThresholdCount", "maxUnhealthyNodeThresholdPercentage"} & set(config)


@pytest.mark.parametrize("nodes", range(1, 41))
def test_the_planned_stop_is_the_first_unhealthy_count_eks_stops_at(nodes):
    first_stop = next((n for n in range(1, nodes + 1) if not eks_repairs({"enabled": True}, nodes, n)), None)
    assert managed_group_halts_at(nodes) == first_stop


def test_the_plan_says_per_pool_what_one_failed_node_costs():
    spec: StackSpec = load_stack(STACKS, "prod")
    health = {p["pool"]: p for p in node_health_plan(spec)["pools"]}
    assert set(health) == {pool.name for pool in spec.node_pools}
    for pool in spec.node_pools:
        fate = health[pool.name]["one_node_fails"]
        assert fate.startswith("repaired: EKS node auto repair replaces it"), fate
        multi_node = [m.name for m in spec.models if m.pool == pool.name and m.multi_node]
        for name in multi_node:
            assert f"a replica of {name}" in fate and "goes down whole" in fate
        if not multi_node:
            assert "goes down whole" not in fate
    batch = health["l40s-batch"]["one_node_fails"]
    assert "EKS would stop repairing spot (up to 8 nodes) from 2 unhealthy nodes" in batch


def test_the_plan_states_an_unrepaired_pool_and_karpenters_rounding():
    spec = load_stack(STACKS, "karpenter")
    for pool in node_health_plan(spec)["pools"]:
        assert "so one node is always repaired" in pool["one_node_fails"]
    data = spec.model_dump(mode="json", exclude_unset=True)
    data["node_pools"][0]["auto_repair"] = False
    off = node_health_plan(StackSpec.model_validate(data))["pools"][0]
    assert off["one_node_fails"].startswith("not repaired: auto_repair is off")
