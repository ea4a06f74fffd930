"""The stack's hourly cost at max scale stays within its budget.

A policy cannot read the stack spec, so the budget arrives as policy config: the offline runner
passes the spec's `budget` (its ceiling, its spot-discount override and its stated prices), `pulumi preview`
users pass `--policy-pack-config`. The region is the one the program gives its AWS provider (the recorded
`pulumi:providers:aws` resource's `region`). The cost is each GPU node group's max size times the price of
how its nodes are bought (`planning.cost.node_price`: a stated price, else the catalog's on-demand, spot or
Capacity Block figure) at the dearest of its instance types: the same prices and arithmetic
(`planning.cost.nodes_cost`) as the plan's totals, which leave the system node group (no pool label) out as
well. A group nothing prices there makes the budget uncheckable: refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from inferstack.planning.cost import (
    NodePurchase, group_purchase, node_price, nodes_cost, prices_note, unpriced_reason,
)
from inferstack.planning.node_groups import GROUP_CAPACITY_BLOCK
from inferstack.policies.pools import NodeGroupView, node_groups
from inferstack.policies.props import number, text
from inferstack.spec import BudgetSpec

MAX_USD_PER_HOUR = "maxUsdPerHour"
SPOT_DISCOUNT = "spotDiscount"
STATED_PRICES = "statedPrices"
AWS_PROVIDER = "pulumi:providers:aws"


@dataclass(frozen=True)
class GroupCost:
    group: NodeGroupView
    usd_per_hour: float | None  # None: some instance type of the group has no price in the region
    unpriced: str | None = None  # the first such type
    priced_at: str | None = None  # the group's dearest instance type, which the cost is quoted at
    purchase: NodePurchase = "on_demand"


def stack_region(resources: Iterable[PolicyResource]) -> str | None:
    """The region of the stack's AWS providers; None when none states one or they disagree."""
    regions = {text(r.props.get("region")) for r in resources if r.resource_type == AWS_PROVIDER} - {""}
    return regions.pop() if len(regions) == 1 else None


def purchase_of(group: NodeGroupView) -> NodePurchase:
    """How the group's nodes are bought: a Karpenter NodePool says 'reserved' for an ODCR and a Capacity Block
    alike, so its name (`<env>-<pool>-capacity-block`, planning/node_groups.py) tells them apart."""
    if group.is_karpenter and text(group.resource.props.get("metadata", {}).get("name")).endswith(
        f"-{GROUP_CAPACITY_BLOCK}"
    ):
        return "capacity_block"
    return group_purchase(group.capacity_type)


def max_scale_costs(groups: Sequence[NodeGroupView], region: str | None, budget: BudgetSpec) -> list[GroupCost]:
    """The GPU node groups' costs at max size, each at the dearest of its instance types."""
    costs = []
    for group in groups:
        if group.pool is None:
            continue
        purchase = purchase_of(group)
        prices = {name: node_price(budget, region, name, purchase) if region else None for name in group.instance_types}
        unpriced = next((name for name, price in prices.items() if price is None), None)
        if unpriced is not None or not prices:
            costs.append(GroupCost(group, None, unpriced, purchase=purchase))
            continue
        dearest = max(prices, key=lambda name: prices[name].usd_per_hour)
        cost = nodes_cost({purchase: group.max_size}, {purchase: prices[dearest]})
        costs.append(GroupCost(group, cost, priced_at=dearest, purchase=purchase))
    return costs


def budget_from_config(config: dict[str, Any]) -> BudgetSpec:
    """The spec's budget as the pack config carries it (the runner writes it from the spec or plan.json)."""
    discount = number(config.get(SPOT_DISCOUNT))
    return BudgetSpec(max_usd_per_hour=number(config.get(MAX_USD_PER_HOUR)), spot_discount=discount,
                      prices=config.get(STATED_PRICES) or [])


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    config = args.get_config()
    if number(config.get(MAX_USD_PER_HOUR)) is None:
        args.not_applicable(f"no {MAX_USD_PER_HOUR} in the policy config (the stack sets no budget)")
    try:
        spec_budget = budget_from_config(config)
    except ValidationError as error:
        report(f"the policy config's budget is not one a spec could state ({error.errors()[0]['msg']}). To fix: pass "
               f"{MAX_USD_PER_HOUR}, {SPOT_DISCOUNT} and {STATED_PRICES} as the spec's budget states them.")
        return
    budget = spec_budget.max_usd_per_hour
    region = stack_region(args.resources)
    costs = max_scale_costs(node_groups(args.resources), region, spec_budget)
    for cost in costs:
        if cost.usd_per_hour is None:
            what = cost.unpriced or "its instance type"
            missing = (unpriced_reason(region, what, cost.purchase) if region and cost.unpriced else
                       f"no {cost.purchase.replace('_', '-')} price (no aws provider states the stack's region)")
            report(
                f"node group {cost.group.name}: {what} has {missing}, so the budget of ${budget:,.2f}/h cannot be "
                f"checked. To fix: state its price in budget.prices (purchase {cost.purchase}), use an instance "
                "type the catalog prices in the stack's region (components/catalog/prices.json), or remove "
                "budget.max_usd_per_hour."
            )
    priced = sorted((c for c in costs if c.usd_per_hour is not None), key=lambda c: -c.usd_per_hour)
    total = sum(c.usd_per_hour for c in priced)
    if total > budget:
        biggest = ", ".join(
            f"{c.group.name} {c.group.max_size} x {c.priced_at} "
            f"{'' if c.purchase == 'on_demand' else c.purchase.replace('_', '-') + ' '}${c.usd_per_hour:,.2f}/h"
            for c in priced[:3]
        )
        unpriced = [c.group.name for c in costs if c.usd_per_hour is None]
        note = f" (not priced: {', '.join(unpriced)})" if unpriced else ""
        report(
            f"at max scale the node groups cost ${total:,.2f}/h, over the budget of ${budget:,.2f}/h "
            f"({prices_note(region, spec_budget) if region else 'no region'}); the largest: {biggest}{note}. "
            "To fix: lower max_nodes of the largest "
            "pools, move their burst capacity to spot, or raise budget.max_usd_per_hour."
        )


budget_at_max_scale = StackValidationPolicy(
    name="budget-at-max-scale",
    description="The stack's hourly cost at max scale stays within its budget.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(
        properties={
            MAX_USD_PER_HOUR: {"type": "number", "exclusiveMinimum": 0,
                               "description": "Ceiling for the hourly cost at max scale (the spec's budget.max_usd_per_hour)."},
            SPOT_DISCOUNT: {"type": "number", "minimum": 0, "exclusiveMaximum": 1,
                            "description": "Spot discount off on-demand for every spot node (the spec's "
                            "budget.spot_discount); unset, the catalog's spot snapshot per type and region."},
            STATED_PRICES: {"type": "array", "items": {"type": "object"},
                            "description": "Prices the spec states (its budget.prices), which win over the catalog's."},
        }
    ),
)
