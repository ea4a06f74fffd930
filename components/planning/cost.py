"""Hourly cost of node pools: each node at the price of how it is bought, and where that price comes from.

A node is bought one of three ways (its node group's capacity type): on-demand (the baseline, an ODCR's nodes,
an on-demand burst), spot, or inside a Capacity Block. `node_price` is the one lookup: a price the spec states
(budget.prices) first; else on-demand from the catalog (prices.json), spot at a discount off it (budget.spot_discount
if stated, else the spot snapshot's for the type and region), a Capacity Block at its catalog rate. A pair none
of them prices is unpriced (None), never $0: `check_budget` refuses a stated budget it cannot check.

A pool's burst group may run any of its types, so its cost is a range: min scale at the cheapest, max scale at
the dearest. A Capacity Block is prepaid for its window: inside it the block's nodes cost its rate; outside it they
are gone (EKS scales the group to 0, Karpenter drains them) and the pool is what else it has.
`nodes_cost` is the one arithmetic for nodes at prices: the plan applies it to a pool's node groups filled to a
size, the `budget-at-max-scale` policy to each rendered node group at its max size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from inferstack.catalog import (
    capacity_block_price, capacity_block_prices_source, on_demand_price, prices_source, snapshot_spot_discount,
    spot_prices_source,
)
from inferstack.planning.node_groups import CAPACITY_BLOCK, SPOT, NodeGroupPlan, nodes_at_min, plan_node_groups
from inferstack.planning.pool_capacity import nodes_for_replicas
from inferstack.spec import BudgetSpec, StackSpec
from inferstack.spec.errors import SpecError
from inferstack.spec.pools import PoolHardware
from inferstack.spec.prices import ON_DEMAND_PURCHASES, Purchase, stated_price

NodePurchase = Literal["on_demand", "spot", "capacity_block"]


@dataclass(frozen=True)
class Price:
    """USD per node-hour and where the figure comes from (a catalog file's label and date, or the spec)."""

    usd_per_hour: float
    source: str
    spot_discount: float | None = None  # for a spot price derived off on-demand: the discount applied


@dataclass(frozen=True)
class Unpriced:
    instance_type: str
    purchase: NodePurchase
    reason: str  # what has no figure: "<type> has <reason>"


@dataclass(frozen=True)
class PoolCost:
    pool: str
    prices: tuple[tuple[str, NodePurchase, Price], ...]  # every (type, purchase) its nodes are bought at
    min_usd_per_hour: float | None         # min-scale nodes (nodes_at_min_scale), burst at the cheapest type
    max_usd_per_hour: float | None         # max_nodes, burst at the dearest type
    unpriced: tuple[Unpriced, ...] = ()    # (type, purchase) pairs nothing prices; any leaves the pool unpriced
    outside_block: tuple[float | None, float | None] | None = None  # (min, max) outside a Capacity Block's window

    def price(self, instance_type: str, purchase: NodePurchase) -> Price | None:
        return next((p for t, k, p in self.prices if t == instance_type and k == purchase), None)


def group_purchase(capacity_type: str) -> NodePurchase:
    """How a node group's nodes are bought, from its EKS capacity type."""
    return {CAPACITY_BLOCK: "capacity_block", SPOT: "spot"}.get(capacity_type, "on_demand")


def _stated(budget: BudgetSpec, region: str, instance_type: str, purchase: NodePurchase) -> Price | None:
    found = stated_price(budget, region, instance_type, purchase)
    if found is None:
        return None
    return Price(found.usd_per_hour, f"stated in the spec ({found.purchase}): {found.source}")


def unpriced_reason(region: str, instance_type: str, purchase: NodePurchase) -> str:
    """What has no figure, to follow "<type> has": the plan's warning, the budget refusal and the policy say it
    alike."""
    if purchase == "capacity_block":
        return f"no Capacity Block rate in {region} in the catalog ({capacity_block_prices_source()})"
    if on_demand_price(instance_type, region) is None:
        return f"no on-demand price in {region} in the catalog"
    return f"no spot discount in {region} in the spot snapshot ({spot_prices_source()}) and no budget.spot_discount"


def node_price(budget: BudgetSpec, region: str, instance_type: str, purchase: NodePurchase) -> Price | None:
    """What one node of the type bought this way costs per hour in the region, and the figure's source."""
    stated = _stated(budget, region, instance_type, purchase)
    public = on_demand_price(instance_type, region)
    if stated is not None and purchase == "spot" and public is not None:   # the discount it amounts to
        return Price(stated.usd_per_hour, stated.source, round(max(0.0, 1 - stated.usd_per_hour / public), 4))
    if stated is not None:
        return stated
    if purchase == "capacity_block":
        rate = capacity_block_price(instance_type, region)
        return None if rate is None else Price(rate, f"{region} Capacity Block rate, {capacity_block_prices_source()}")
    if public is None:
        return None
    source = f"{region} on-demand, {prices_source(region)}"
    if purchase == "on_demand":
        return Price(public, source)
    if budget.spot_discount is not None:
        discount, whose = budget.spot_discount, "stated in the spec (budget.spot_discount)"
    else:
        discount, whose = snapshot_spot_discount(instance_type, region), f"of {spot_prices_source()}"
    if discount is None:
        return None
    return Price(round(public * (1 - discount), 4), f"{source}, less the spot discount {whose}", discount)


def replica_node_price(spec: StackSpec, hardware: PoolHardware) -> Price | None:
    """The node price a replica's share is taken from: the pool's first type on-demand (as the throughput table
    and the placements quote it), a stated on-demand or Savings Plan rate first."""
    return node_price(spec.budget, spec.region, hardware.primary.name, "on_demand")


def nodes_cost(nodes: Mapping[NodePurchase, int], prices: Mapping[NodePurchase, Price]) -> float:
    """USD per hour of nodes bought each way at that way's price (a purchase with 0 nodes needs no price)."""
    return sum(count * prices[purchase].usd_per_hour for purchase, count in nodes.items() if count)


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


def _filled(groups: list[NodeGroupPlan], nodes: int) -> list[tuple[NodeGroupPlan, int]]:
    """The groups filled in order (the baseline first) to `nodes` nodes."""
    filled = []
    for group in groups:
        taken = min(nodes, group.max_size)
        nodes -= taken
        filled.append((group, taken))
    return filled


def pool_cost(spec: StackSpec, hardware: PoolHardware) -> PoolCost:
    pool, budget, region = hardware.spec, spec.budget, spec.region
    groups = plan_node_groups(pool)
    looked_up: dict[tuple[str, NodePurchase], Price | None] = {}
    for group in groups:
        purchase = group_purchase(group.capacity_type)
        for name in group.instance_types:
            if (name, purchase) not in looked_up:
                looked_up[(name, purchase)] = node_price(budget, region, name, purchase)
    prices = {key: price for key, price in looked_up.items() if price is not None}
    unpriced = tuple(Unpriced(name, purchase, unpriced_reason(region, name, purchase))
                     for (name, purchase), price in looked_up.items() if price is None)

    def at(nodes: int, pick: Callable[..., Price], with_block: bool = True) -> float | None:
        """The pool at `nodes` nodes, each group's at the type `pick` (min or max) chooses by its price; without
        the block, its nodes are left out (outside its window they are not there)."""
        if unpriced:
            return None
        total = 0.0
        for group, taken in _filled(groups, nodes):
            purchase = group_purchase(group.capacity_type)
            if purchase == "capacity_block" and not with_block:
                continue
            price = pick((prices[(name, purchase)] for name in group.instance_types), key=lambda p: p.usd_per_hour)
            total += nodes_cost({purchase: taken}, {purchase: price})
        return round(total, 4)

    low, high = nodes_at_min_scale(spec, hardware), pool.max_nodes
    block = any(group_purchase(g.capacity_type) == "capacity_block" for g in groups)
    outside = (at(low, min, with_block=False), at(high, max, with_block=False)) if block else None
    listed = tuple((name, purchase, price) for (name, purchase), price in prices.items())
    return PoolCost(pool.name, listed, at(low, min), at(high, max), unpriced, outside)


def stack_costs(spec: StackSpec) -> list[PoolCost]:
    return [pool_cost(spec, PoolHardware(pool)) for pool in spec.node_pools]


def stated_purchases(spec: StackSpec) -> dict[str, set[Purchase]]:
    """The purchases a stated price may name for each instance type: how the stack's node groups buy it (on-demand
    also as a Savings Plan, which prices the same nodes)."""
    bought: dict[str, set[Purchase]] = {}
    for pool in spec.node_pools:
        for group in plan_node_groups(pool):
            purchase = group_purchase(group.capacity_type)
            ways = set(ON_DEMAND_PURCHASES) if purchase == "on_demand" else {purchase}
            for name in group.instance_types:
                bought.setdefault(name, set()).update(ways)
    return bought


def check_stated_prices(spec: StackSpec) -> None:
    """Every stated price pays for nodes the stack buys: its type in a pool, bought that way, in the stack's
    region, stated once (a Savings Plan and an on-demand rate for one type would both claim its on-demand nodes)."""
    bought = stated_purchases(spec)
    seen: dict[tuple[str, str], int] = {}
    for index, price in enumerate(spec.budget.prices):
        path = f"budget.prices[{index}]"
        if price.region is not None and price.region != spec.region:
            raise SpecError(
                f"{path}.region", f"{price.region!r} is not the stack's region {spec.region!r}: no node of this "
                "stack pays it", f"set region to {spec.region!r} or drop it (it defaults to the stack's region)",
            )
        if price.instance_type not in bought:
            used = ", ".join(sorted(bought)) or "none"
            raise SpecError(
                f"{path}.instance_type", f"{price.instance_type!r} is not an instance type of any node pool "
                f"(they use {used}), so no node pays this price",
                "name an instance type a node pool lists, or drop this price",
            )
        ways = bought[price.instance_type]
        if price.purchase not in ways:
            raise SpecError(
                f"{path}.purchase", f"{price.purchase!r}: no node pool buys {price.instance_type} that way (it is "
                f"bought {', '.join(sorted(ways))})", f"use purchase {' or '.join(repr(w) for w in sorted(ways))}, "
                "or drop this price",
            )
        key = (price.instance_type, "on_demand" if price.purchase in ON_DEMAND_PURCHASES else price.purchase)
        if key in seen:
            raise SpecError(
                f"{path}.purchase", f"{price.purchase!r} for {price.instance_type} prices the same nodes as "
                f"budget.prices[{seen[key]}]", "keep one price per instance type and purchase ('on_demand' and "
                "'savings_plan' both price on-demand nodes)",
            )
        seen[key] = index


def check_budget(spec: StackSpec) -> None:
    """The budget section holds: every stated price pays for nodes the stack buys, a stated budget holds at max
    scale, and every pool it covers has a price (else it cannot be checked)."""
    check_stated_prices(spec)
    budget = spec.budget.max_usd_per_hour
    if budget is None:
        return
    costs = stack_costs(spec)
    for index, (pool, cost) in enumerate(zip(spec.node_pools, costs)):
        if cost.unpriced:
            missing = cost.unpriced[0]
            position = list(pool.instance_types).index(missing.instance_type)
            field = (f"node_pools[{index}].capacity.reservation" if missing.purchase == "capacity_block"
                     else f"node_pools[{index}].instance_types[{position}]")
            raise SpecError(
                field,
                f"{missing.instance_type!r} has {missing.reason}, so the budget of ${budget:,.2f}/h cannot be "
                f"checked",
                f"state its price in budget.prices (instance_type {missing.instance_type!r}, purchase "
                f"{missing.purchase!r}, usd_per_hour, source), use an instance type the catalog prices in "
                f"{spec.region} (components/catalog/prices.json), or remove budget.max_usd_per_hour",
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
        f"at max scale the node pools cost ${total:,.2f}/h ({pools}; {prices_note(spec.region, spec.budget)}, each "
        f"pool's burst at its most expensive instance type), over the budget of ${budget:,.2f}/h",
        f"lower max_nodes of the largest pools, move their burst capacity to spot, or raise "
        f"budget.max_usd_per_hour to at least {total:,.2f}",
    )


def prices_note(region: str, budget: BudgetSpec) -> str:
    """Whose prices the totals use, short: the plan's text, the budget refusal and the policy say it alike."""
    spot = (f"spot {budget.spot_discount:.0%} off (budget.spot_discount)" if budget.spot_discount is not None
            else f"spot discounts per type from {spot_prices_source()}")
    count = len(budget.prices)
    stated = "" if not count else "; 1 price stated in the spec wins" if count == 1 else (
        f"; {count} prices stated in the spec win")
    return f"{region} on-demand prices from {prices_source(region)}; {spot}{stated}"
