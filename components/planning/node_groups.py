"""How a pool's nodes are bought: the managed node groups it becomes, their sizes, and its nodes at a scale.

A pool becomes up to two node groups: a fixed on-demand (or reserved) baseline of the primary instance
type, and a burst group above it that runs on spot across every instance type of the pool. The AWS layer
creates these groups, Kueue gives each capacity type a flavor, the plan prices them and the spec's
minimum-capacity rule counts their never-reclaimed nodes: all from `plan_node_groups`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from inferstack.spec import NodePoolSpec, Reservation

# Suffixes of the node groups' resource names (`<environment>-<pool>-<suffix>`).
GROUP_ON_DEMAND = "on-demand"
GROUP_RESERVED = "reserved"
GROUP_CAPACITY_BLOCK = "capacity-block"
GROUP_SPOT = "spot"
GROUP_BURST = "on-demand-burst"
CAPACITY_BLOCK = "CAPACITY_BLOCK"
SPOT = "SPOT"


@dataclass(frozen=True)
class NodeGroupPlan:
    """One managed node group of a pool: how its nodes are bought and how many there may be."""

    suffix: str
    capacity_type: str  # EKS capacityType: ON_DEMAND | SPOT | CAPACITY_BLOCK
    capacity_label: str  # conventions.CAPACITY_LABEL value: on-demand | spot | reserved
    instance_types: tuple[str, ...]
    min_size: int
    max_size: int
    desired_size: int
    reservation: Reservation | None = None


def plan_node_groups(pool: NodePoolSpec) -> list[NodeGroupPlan]:
    """Baseline group of `on_demand_base` fixed nodes (a Capacity Block's may drop to 0), then a burst group
    for the rest of `max_nodes`.

    The baseline runs the primary type (the one a reservation is for and prices are quoted for);
    the burst group lists every type of the pool so spot can draw from all their capacity pools, in
    the order `burst_instance_types` gives.
    """
    capacity = pool.capacity
    base = capacity.on_demand_base
    groups = []
    if base > 0:
        reservation = capacity.reservation
        low = base
        if reservation is None:
            suffix, capacity_type, label = GROUP_ON_DEMAND, "ON_DEMAND", "on-demand"
        elif reservation.kind == "capacity_block":
            suffix, capacity_type, label = GROUP_CAPACITY_BLOCK, CAPACITY_BLOCK, "reserved"
            # Created at the block's size, its nodes launch once the block starts (the Auto Scaling group retries
            # until then); EKS scales the group to 0 before the block ends, and an upgrade needs it at 0 first
            # (EKS User Guide, capacity-blocks-mng), so its minimum is 0 and its desired size is EKS's to change.
            low = 0
        else:
            suffix, capacity_type, label = GROUP_RESERVED, "ON_DEMAND", "reserved"
        groups.append(
            NodeGroupPlan(suffix, capacity_type, label, (pool.instance_types[0],), low, base, base, reservation)
        )
    burst = pool.max_nodes - base
    if burst > 0:
        low = max(0, pool.min_nodes - base)
        if capacity.spot:
            suffix, capacity_type, label = GROUP_SPOT, SPOT, "spot"
        else:
            suffix, capacity_type, label = GROUP_BURST, "ON_DEMAND", "on-demand"
        groups.append(NodeGroupPlan(suffix, capacity_type, label, burst_instance_types(pool), low, burst, low))
    return groups


def burst_instance_types(pool: NodePoolSpec) -> tuple[str, ...]:
    """The burst group's types in an order that only a real change alters: `instance_types` is ForceNew on
    aws_eks_node_group (terraform-provider-aws internal/service/eks/node_group.go, a TypeList, so order
    counts) and replacing a group drains all its nodes. The primary type stays first: On-Demand allocates
    `prioritized` in the listed order (EKS User Guide, managed-node-groups "Managed node group capacity
    types") and plans and policies quote a group by its first type; Spot allocates price-capacity-optimized,
    where order means nothing. The other types are sorted, so reordering them changes nothing."""
    primary, *others = pool.instance_types
    return (primary, *sorted(others))


def capacity_block_lifecycle(pool: NodePoolSpec, karpenter: bool) -> str | None:
    """What a Capacity Block pool's reserved nodes do over the block, as the plan says it (EKS User Guide,
    capacity-blocks-mng: created at a non-zero desired size the group launches when the block starts; EKS scales it
    to 0 40 minutes before the block ends; an upgrade needs its desired size at 0. Karpenter selects the block like
    an ODCR and drains its nodes when it turns `expiring`, 40 minutes before its end: shared/reference/karpenter.md
    section 4.3)."""
    reservation = pool.capacity.reservation
    if reservation is None or reservation.kind != "capacity_block" or pool.capacity.on_demand_base == 0:
        return None
    if karpenter:
        return (f"Capacity Block {reservation.id}: Karpenter launches into it once the block is active and drains "
                "its nodes 40 min before the block ends")
    return (f"Capacity Block {reservation.id}: its node group is created at {pool.capacity.on_demand_base} nodes, "
            "which launch when the block starts; EKS scales it to 0 40 min before the block ends, and an upgrade "
            "needs its desired size at 0 first (the stack leaves the desired size alone)")


def nodes_at_min(pool: NodePoolSpec) -> int:
    """Nodes the pool runs before any autoscaler acts: every group at the size it is created with (its minimum,
    but for a Capacity Block group, created at the block's size with a minimum of 0)."""
    return sum(g.desired_size for g in plan_node_groups(pool))


def on_demand_nodes_at_min(pool: NodePoolSpec) -> int:
    """Nodes of the pool's on-demand and reserved groups as created: those never reclaimed by spot."""
    return sum(g.desired_size for g in plan_node_groups(pool) if g.capacity_type != SPOT)


def on_demand_node_limit(pool: NodePoolSpec) -> int:
    """On-demand (and reserved) nodes the pool may run at most: what Karpenter's non-spot NodePools are limited to."""
    return sum(g.max_size for g in plan_node_groups(pool) if g.capacity_type != SPOT)


def nodes_at(pool: NodePoolSpec, nodes: int) -> tuple[int, int]:
    """(never-reclaimed, spot) nodes when the pool runs `nodes` of them: the groups fill in order, the
    baseline first."""
    on_demand = spot = 0
    left = nodes
    for group in plan_node_groups(pool):
        taken = min(left, group.max_size)
        left -= taken
        if group.capacity_type == SPOT:
            spot += taken
        else:
            on_demand += taken
    return on_demand, spot


def max_nodes_by(pool: NodePoolSpec, key: Literal["capacity_type", "capacity_label"]) -> dict[str, int]:
    """The pool's nodes at max size per EKS capacity type, or per capacity label (on-demand | reserved | spot,
    which is also the capacity type Karpenter labels its nodes with), in the groups' order (baseline first)."""
    nodes: dict[str, int] = {}
    for group in plan_node_groups(pool):
        nodes[getattr(group, key)] = nodes.get(getattr(group, key), 0) + group.max_size
    return nodes
