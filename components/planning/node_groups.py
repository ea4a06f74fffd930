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
    """Baseline group of `on_demand_base` fixed nodes, then a burst group for the rest of `max_nodes`.

    The baseline runs the primary type (the one a reservation is for and prices are quoted for);
    the burst group lists every type of the pool so spot can draw from all their capacity pools, in
    the order `burst_instance_types` gives.
    """
    capacity = pool.capacity
    base = capacity.on_demand_base
    groups = []
    if base > 0:
        reservation = capacity.reservation
        if reservation is None:
            suffix, capacity_type, label = GROUP_ON_DEMAND, "ON_DEMAND", "on-demand"
        elif reservation.kind == "capacity_block":
            suffix, capacity_type, label = GROUP_CAPACITY_BLOCK, CAPACITY_BLOCK, "reserved"
        else:
            suffix, capacity_type, label = GROUP_RESERVED, "ON_DEMAND", "reserved"
        groups.append(
            NodeGroupPlan(suffix, capacity_type, label, (pool.instance_types[0],), base, base, base, reservation)
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


def nodes_at_min(pool: NodePoolSpec) -> int:
    """Nodes the pool runs before any autoscaler acts: every group at its minimum size."""
    return sum(g.min_size for g in plan_node_groups(pool))


def on_demand_nodes_at_min(pool: NodePoolSpec) -> int:
    """Nodes of the pool's on-demand and reserved groups at their minimum size: those never reclaimed."""
    return sum(g.min_size for g in plan_node_groups(pool) if g.capacity_type != SPOT)


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
