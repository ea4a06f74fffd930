"""The stack's hourly cost at max scale stays within its budget.

A policy cannot read the stack spec, so the budget arrives as policy config: the offline runner
passes the spec's `budget`, `pulumi preview` users pass `--policy-pack-config`. The region is the
one the program gives its AWS provider (the recorded `pulumi:providers:aws` resource's `region`).
The cost is each GPU node group's max size times the catalog's on-demand price in that region of
its pool's most expensive instance type (over every group carrying the pool's label), with the spot
discount on SPOT groups: the same prices and arithmetic (`planning.cost.nodes_cost`) as the plan's totals,
which leave the system node group (no pool label) out as well. A group the catalog cannot price there makes the budget
uncheckable: refused.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from inferstack.catalog import on_demand_price
from inferstack.planning.cost import nodes_cost
from inferstack.policies.pools import NodeGroupView, node_groups
from inferstack.policies.props import number, text
from inferstack.spec import BudgetSpec

MAX_USD_PER_HOUR = "maxUsdPerHour"
SPOT_DISCOUNT = "spotDiscount"
DEFAULT_SPOT_DISCOUNT: float = BudgetSpec.model_fields["spot_discount"].default
AWS_PROVIDER = "pulumi:providers:aws"


@dataclass(frozen=True)
class GroupCost:
    group: NodeGroupView
    usd_per_hour: float | None  # None: some instance type of the group has no catalog price in the region
    unpriced: str | None = None  # the first such type
    priced_at: str | None = None  # the pool's dearest instance type, which the cost is quoted at


def stack_region(resources: Iterable[PolicyResource]) -> str | None:
    """The region of the stack's AWS providers; None when none states one or they disagree."""
    regions = {text(r.props.get("region")) for r in resources if r.resource_type == AWS_PROVIDER} - {""}
    return regions.pop() if len(regions) == 1 else None


def max_scale_costs(groups: Sequence[NodeGroupView], region: str | None, spot_discount: float) -> list[GroupCost]:
    """The GPU node groups' costs at max size, each at the dearest instance type of its pool."""
    pool_types: dict[str, dict[str, None]] = defaultdict(dict)  # ordered, as the spec lists them
    for group in groups:
        if group.pool is not None:
            pool_types[group.pool].update(dict.fromkeys(group.instance_types))
    costs = []
    for group in groups:
        if group.pool is None:
            continue
        prices = {name: on_demand_price(name, region) if region else None for name in pool_types[group.pool]}
        unpriced = next((name for name, price in prices.items() if price is None), None)
        if unpriced is not None or not prices:
            costs.append(GroupCost(group, None, unpriced))
            continue
        dearest = max(prices, key=prices.__getitem__)
        on_demand, spot = (0, group.max_size) if group.is_spot else (group.max_size, 0)
        costs.append(GroupCost(group, nodes_cost(prices[dearest], on_demand, spot, spot_discount), priced_at=dearest))
    return costs


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    config = args.get_config()
    budget = number(config.get(MAX_USD_PER_HOUR))
    if budget is None:
        args.not_applicable(f"no {MAX_USD_PER_HOUR} in the policy config (the stack sets no budget)")
    discount = number(config.get(SPOT_DISCOUNT))
    discount = DEFAULT_SPOT_DISCOUNT if discount is None else discount
    region = stack_region(args.resources)
    costs = max_scale_costs(node_groups(args.resources), region, discount)
    for cost in costs:
        if cost.usd_per_hour is None:
            where = f"in {region}" if region else "(no aws provider states the stack's region)"
            report(
                f"node group {cost.group.name}: {cost.unpriced or 'its instance type'} has no on-demand price {where} "
                f"in the catalog, so the budget of ${budget:,.2f}/h cannot be checked. To fix: use an instance type "
                "the catalog prices in the stack's region (components/catalog/prices.json), or remove "
                "budget.max_usd_per_hour."
            )
    priced = sorted((c for c in costs if c.usd_per_hour is not None), key=lambda c: -c.usd_per_hour)
    total = sum(c.usd_per_hour for c in priced)
    if total > budget:
        biggest = ", ".join(
            f"{c.group.name} {c.group.max_size} x {c.priced_at} "
            f"{'spot ' if c.group.is_spot else ''}${c.usd_per_hour:,.2f}/h"
            for c in priced[:3]
        )
        unpriced = [c.group.name for c in costs if c.usd_per_hour is None]
        note = f" (not priced: {', '.join(unpriced)})" if unpriced else ""
        report(
            f"at max scale the node groups cost ${total:,.2f}/h, over the budget of ${budget:,.2f}/h "
            f"({region} on-demand prices, spot {discount:.0%} off); the largest: {biggest}{note}. "
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
            SPOT_DISCOUNT: {"type": "number", "minimum": 0, "exclusiveMaximum": 1, "default": DEFAULT_SPOT_DISCOUNT,
                            "description": "Assumed spot discount off on-demand (the spec's budget.spot_discount)."},
        }
    ),
)
