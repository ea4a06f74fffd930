"""Hourly cost of node pools from the catalog's on-demand prices and a stated spot discount."""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.spec import StackSpec
from inferstack.spec.pools import PoolHardware


@dataclass(frozen=True)
class PoolCost:
    pool: str
    on_demand_usd_per_node: float | None   # None when the type has no price in the catalog's region
    spot_discount: float
    min_usd_per_hour: float | None
    max_usd_per_hour: float | None


def nodes_at(pool, nodes: int) -> tuple[int, int]:
    """(on-demand, discounted) nodes when the pool runs `nodes` nodes: the baseline fills first."""
    on_demand = min(nodes, pool.capacity.on_demand_base)
    rest = nodes - on_demand
    return (on_demand, rest) if pool.capacity.spot else (on_demand + rest, 0)


def pool_cost(spec: StackSpec, hardware: PoolHardware) -> PoolCost:
    pool = hardware.spec
    price = hardware.primary.on_demand_usd_per_hour
    discount = spec.budget.spot_discount

    def at(nodes: int) -> float | None:
        if price is None:
            return None
        on_demand, spot = nodes_at(pool, nodes)
        return round(price * (on_demand + spot * (1 - discount)), 4)

    baseline = max(pool.min_nodes, pool.capacity.on_demand_base)
    return PoolCost(pool.name, price, discount, at(baseline), at(pool.max_nodes))


def stack_costs(spec: StackSpec) -> list[PoolCost]:
    return [pool_cost(spec, PoolHardware(pool)) for pool in spec.node_pools]
