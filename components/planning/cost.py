"""Hourly cost of node pools from the catalog's on-demand prices in the stack's region and a stated spot discount.

A pool that lists several instance types may run any of them, so its cost is a range: min scale at its
cheapest type, max scale at its most expensive. A type the catalog has no price for in the stack's region
leaves the pool unpriced (None), never $0: `check_budget` refuses a stated budget it cannot check.
`nodes_cost` is the one arithmetic for nodes at a price: the plan applies it to a pool's node groups filled
to a size, the `budget-at-max-scale` policy to each rendered node group at its max size.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.catalog import on_demand_price
from inferstack.planning.node_groups import nodes_at, nodes_at_min
from inferstack.planning.pool_capacity import nodes_for_replicas
from inferstack.spec import StackSpec
from inferstack.spec.errors import SpecError
from inferstack.spec.pools import PoolHardware


@dataclass(frozen=True)
class PoolCost:
    pool: str
    on_demand_usd_per_node: float | None   # the most expensive type's price; None when a type has no price
    spot_discount: float
    min_usd_per_hour: float | None         # min-scale nodes (nodes_at_min_scale) at the cheapest type
    max_usd_per_hour: float | None         # max_nodes at the most expensive type
    unpriced_types: tuple[str, ...] = ()   # instance types with no catalog price in the stack's region


def nodes_cost(price: float, on_demand: int, spot: int, spot_discount: float) -> float:
    """USD per hour of `on_demand` nodes at `price` and `spot` nodes at the assumed discount off it."""
    return price * (on_demand + spot * (1 - spot_discount))


def nodes_at_min_scale(spec: StackSpec, hardware: PoolHardware) -> int:
    """Nodes the pool runs at min scale. Node groups keep their minimum sizes. Karpenter keeps no idle node: it
    launches what the pool's services need at their minimum replicas, on the reserved or on-demand NodePools
    first (their weights), and a reservation is paid for whether or not its instances run (EC2 User Guide,
    "Capacity Reservation pricing and billing"), so its instances count as running."""
    pool = hardware.spec
    if not spec.platform.karpenter:
        return nodes_at_min(pool)
    needed = nodes_for_replicas(
        [(m, m.autoscaling.min_replicas) for m in spec.models if m.pool == pool.name], hardware
    )
    reserved = pool.capacity.on_demand_base if pool.capacity.reservation is not None else 0
    return min(pool.max_nodes, max(needed, reserved))


def pool_cost(spec: StackSpec, hardware: PoolHardware) -> PoolCost:
    pool = hardware.spec
    discount = spec.budget.spot_discount
    by_type = {t.name: on_demand_price(t.name, spec.region) for t in hardware.instance_types}
    unpriced = tuple(name for name, price in by_type.items() if price is None)
    prices = [price for price in by_type.values() if price is not None]

    def at(nodes: int, price: float | None) -> float | None:
        if unpriced or price is None:
            return None
        return round(nodes_cost(price, *nodes_at(pool, nodes), discount), 4)

    highest = max(prices) if prices and not unpriced else None
    lowest = min(prices) if prices and not unpriced else None
    return PoolCost(pool.name, highest, discount, at(nodes_at_min_scale(spec, hardware), lowest), at(pool.max_nodes, highest), unpriced)


def stack_costs(spec: StackSpec) -> list[PoolCost]:
    return [pool_cost(spec, PoolHardware(pool)) for pool in spec.node_pools]


def check_budget(spec: StackSpec) -> None:
    """A stated budget holds at max scale, and every pool it covers has a price (else it cannot be checked)."""
    budget = spec.budget.max_usd_per_hour
    if budget is None:
        return
    costs = stack_costs(spec)
    for index, (pool, cost) in enumerate(zip(spec.node_pools, costs)):
        if cost.unpriced_types:
            name = cost.unpriced_types[0]
            raise SpecError(
                f"node_pools[{index}].instance_types[{list(pool.instance_types).index(name)}]",
                f"{name!r} has no on-demand price in {spec.region} in the catalog, so the budget of "
                f"${budget:,.2f}/h cannot be checked",
                f"use an instance type the catalog prices in {spec.region} (components/catalog/prices.json), "
                "or remove budget.max_usd_per_hour",
            )
    total = round(sum(c.max_usd_per_hour for c in costs), 2)
    if total <= budget:
        return
    pools = ", ".join(
        f"{c.pool} ${c.max_usd_per_hour:,.2f}/h"
        for c in sorted(costs, key=lambda c: -c.max_usd_per_hour) if c.max_usd_per_hour
    )
    raise SpecError(
        "budget.max_usd_per_hour",
        f"at max scale the node pools cost ${total:,.2f}/h ({pools}; {spec.region} on-demand prices, spot "
        f"{spec.budget.spot_discount:.0%} off, each pool at its most expensive instance type), over the budget of "
        f"${budget:,.2f}/h",
        f"lower max_nodes of the largest pools, move their burst capacity to spot, or raise "
        f"budget.max_usd_per_hour to at least {total:,.2f}",
    )
