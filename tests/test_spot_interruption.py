"""Spot interruptions on managed node groups, and GPU node auto repair (issue 15, items 4 and 5 for node groups).

Upstream rules encoded here:
- EC2 User Guide, "Spot Instance interruption notices": a spot instance is reclaimed two minutes after its notice.
- EKS User Guide, "Managed node groups" (Spot capacity type): Capacity Rebalancing is on for spot groups; EKS drains a
  node on its rebalance recommendation once the replacement is Ready, or at once on the two-minute notice.
- Kubernetes "Pod Lifecycle", Termination of Pods: the preStop hook runs inside terminationGracePeriodSeconds.
- EKS API NodeRepairConfig: enabled; maxParallelNodesRepairedCount >= 1 or maxParallelNodesRepairedPercentage
  1-100, never both; maxUnhealthyNodeThresholdCount >= 1 or ...Percentage 1-100, never both, or neither for EKS's
  default stop (awsdocs/amazon-eks-user-guide latest/ug/nodes/node-repair.adoc).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_policies import rendered  # noqa: E402

from inferstack.cli import main
from inferstack.planning.interruption import SPOT_NOTICE_SECONDS, spot_pools

NOTICE = 120


def serving_templates(resources):
    for resource in resources:
        if not resource["type"].startswith("kubernetes:"):
            continue
        kind = resource["type"].rsplit(":", 1)[-1]
        spec = resource["inputs"].get("spec") or {}
        if kind == "Deployment" and any(c["name"] == "vllm" for c in spec["template"]["spec"]["containers"]):
            yield resource["name"], spec["template"]["spec"]
        elif kind == "LeaderWorkerSet":
            for role in ("leaderTemplate", "workerTemplate"):
                yield f"{resource['name']} {role}", spec["leaderWorkerTemplate"][role]["spec"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_serving_pod_stops_inside_the_notice(stack):
    assert SPOT_NOTICE_SECONDS == NOTICE
    found = list(serving_templates(rendered(stack)))
    assert found
    for name, pod in found:
        grace = pod["terminationGracePeriodSeconds"]
        (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
        pre_stop = vllm["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert pre_stop < grace <= NOTICE, name


def test_the_plan_states_the_budget_for_the_services_on_spot(tmp_path):
    out = tmp_path / "out"
    assert main(["render", "prod", "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    interruption = plan["interruption"]
    assert interruption["spot_pools"] == ["h100", "l40s", "l40s-batch"]
    assert set(interruption["services_on_spot"]) == {m["model"] for m in plan["placements"]
                                                      if m["pool"] in interruption["spot_pools"]}
    assert (interruption["notice_seconds"], interruption["grace_seconds"], interruption["spare_seconds"]) == (120, 90, 30)
    assert interruption["fits"]


def test_a_stack_without_spot_states_no_interruption(tmp_path, capsys):
    stack = tmp_path / "od.yaml"
    stack.write_text(
        "environment: od\nregion: us-east-1\nnode_pools:\n"
        "  - {name: l4, instance_types: [g6.xlarge], min_nodes: 1, max_nodes: 1, capacity: {spot: false}}\n"
        "models:\n  - {name: llama, model: meta-llama/Llama-3.1-8B-Instruct, pool: l4, max_model_len: 4096}\n"
    )
    assert main(["plan", str(stack)]) == 0
    assert "Spot interruptions" not in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- auto repair


def test_gpu_node_groups_repair_one_node_at_a_time():
    groups = [r for r in rendered() if r["type"].endswith(":NodeGroup") and r["name"] != "prod-eks-system"]
    assert groups
    for group in groups:
        repair = group["inputs"]["nodeRepairConfig"]
        assert repair["enabled"] is True
        assert repair["maxParallelNodesRepairedCount"] >= 1 and "maxParallelNodesRepairedPercentage" not in repair
        # No threshold: EKS's default keeps repairing groups of up to five nodes (tests/test_node_repair_contract.py).
        assert "maxUnhealthyNodeThresholdPercentage" not in repair and "maxUnhealthyNodeThresholdCount" not in repair


def test_a_pool_may_turn_auto_repair_off():
    from inferstack.aws.node_pool import node_repair_config
    from inferstack.spec import NodePoolSpec

    off = node_repair_config(NodePoolSpec(name="p", instance_types=["g6.xlarge"], max_nodes=1, auto_repair=False))
    assert off.enabled is False


def test_spot_pools_are_the_pools_with_a_spot_node_group():
    from inferstack.spec import StackSpec
    from inferstack.stacks import load_stack

    spec: StackSpec = load_stack(Path(__file__).resolve().parents[1] / "stacks", "prod")
    assert spot_pools(spec) == [p.name for p in spec.node_pools if p.capacity.spot and p.max_nodes > p.capacity.on_demand_base]
