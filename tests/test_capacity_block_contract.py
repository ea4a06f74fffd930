"""A Capacity Block node group is sized the way EKS runs it (issue 26, item 5b).

Upstream rules encoded here (awsdocs/amazon-eks-user-guide latest/ug/nodes/capacity-blocks-mng.adoc, commit
2ef9e386c918fb0273527207d6af9d3d19ef4621; the same text at latest/ug/ml/capacity-blocks-mng.adoc, 4d52b4d05e34):
- "When upgrading managed node groups with Capacity Blocks, make sure that the desired size of the node group is
  set to 0": the stack must let the desired size go to 0 and never set it back.
- "Amazon EKS uses a scheduled scaling policy to scale down the node group size to 0" 40 minutes before the
  reservation ends: the group's minimum must allow 0, and the stack must not undo EKS's scale-down.
- "If you specify a non-zero desiredSize in the create request, Amazon EKS will honor that ... Whenever the
  reservation becomes active ... the ASG will be scaled up to the desiredSize mentioned at create time": created at
  the block's size, the group gets its nodes when the block starts, with or without a node autoscaler.
"""

from __future__ import annotations

import pytest
from aws_recording import build, run

from inferstack.aws.cluster import DESIRED_SIZE
from inferstack.planning.node_groups import CAPACITY_BLOCK, GROUP_CAPACITY_BLOCK, nodes_at_min, plan_node_groups
from inferstack.spec import NodePoolSpec
from inferstack.validation import validate

BLOCK_POOL = {
    "name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 4, "efa": True,
    "capacity": {"on_demand_base": 2, "reservation": {"kind": "capacity_block", "id": "cr-0123456789abcdef0"}},
}


@pytest.fixture(scope="module")
def block_group():
    recording = run(validate(build({"node_pools": [BLOCK_POOL]})).written)
    return recording.named(f"prod-h100-{GROUP_CAPACITY_BLOCK}")


def test_the_group_is_created_at_the_blocks_size_with_a_minimum_of_zero(block_group):
    assert block_group.inputs["scalingConfig"] == {"minSize": 0, "maxSize": 2, "desiredSize": 2}


def test_the_stack_never_resets_the_desired_size_eks_or_an_upgrade_set(block_group):
    assert DESIRED_SIZE in block_group.options["ignore_changes"]


def test_planning_counts_the_blocks_nodes_as_created():
    pool = NodePoolSpec.model_validate(BLOCK_POOL)
    (block, _) = plan_node_groups(pool)
    assert block.capacity_type == CAPACITY_BLOCK and (block.min_size, block.desired_size) == (0, 2)
    assert nodes_at_min(pool) == 2


def test_the_plan_says_what_the_blocks_nodes_do_over_the_block():
    """The plan's words are the group's: created at the block's size, emptied by EKS 40 minutes before the end, at 0
    for an upgrade; under Karpenter, drained when the reservation turns `expiring` (karpenter.md section 4.3)."""
    from inferstack.planning.node_groups import capacity_block_lifecycle

    pool = NodePoolSpec.model_validate(BLOCK_POOL)
    said = capacity_block_lifecycle(pool, karpenter=False)
    assert "created at 2 nodes" in said and "EKS scales it to 0 40 min before the block ends" in said
    assert "desired size at 0" in said
    assert "40 min before the block ends" in capacity_block_lifecycle(pool, karpenter=True)
    assert capacity_block_lifecycle(NodePoolSpec.model_validate({**BLOCK_POOL, "capacity": {"on_demand_base": 2}}),
                                    karpenter=False) is None
