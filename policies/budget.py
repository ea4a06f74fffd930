"""The stack's hourly cost at max scale stays within its budget.

A policy cannot read the stack spec, so the budget arrives as policy config: the offline runner
passes the spec's `budget`, `pulumi preview` users pass `--policy-pack-config`. The cost is each
node group's max size times the catalog's on-demand price of its first instance type, with the
spot discount on SPOT groups: the same arithmetic as the plan's totals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from inferstack.policies.pools import NodeGroupView, node_groups
from inferstack.policies.props import number
from inferstack.spec.models import BudgetSpec

MAX_USD_PER_HOUR = "maxUsdPerHour"
SPOT_DISCOUNT = "spotDiscount"
DEFAULT_SPOT_DISCOUNT: float = BudgetSpec.model_fields["spot_discount"].default


@dataclass(frozen=True)
class GroupCost:
    group: NodeGroupView
    usd_per_hour: float | None  # None: no catalog price for its instance type


def max_scale_costs(groups: Sequence[NodeGroupView], spot_discount: float) -> list[GroupCost]:
    costs = []
    for group in groups:
        instance = group.instance
        price = instance.on_demand_usd_per_hour if instance is not None else None
        if price is None:
            costs.append(GroupCost(group, None))
            continue
        factor = (1 - spot_discount) if group.is_spot else 1.0
        costs.append(GroupCost(group, group.max_size * price * factor))
    return costs


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    config = args.get_config()
    budget = number(config.get(MAX_USD_PER_HOUR))
    if budget is None:
        args.not_applicable(f"no {MAX_USD_PER_HOUR} in the policy config (the stack sets no budget)")
    discount = number(config.get(SPOT_DISCOUNT))
    discount = DEFAULT_SPOT_DISCOUNT if discount is None else discount
    costs = max_scale_costs(node_groups(args.resources), discount)
    priced = sorted((c for c in costs if c.usd_per_hour is not None), key=lambda c: -c.usd_per_hour)
    total = sum(c.usd_per_hour for c in priced)
    if total > budget:
        biggest = ", ".join(
            f"{c.group.name} {c.group.max_size} x {c.group.instance_types[0]} "
            f"{'spot ' if c.group.is_spot else ''}${c.usd_per_hour:,.2f}/h"
            for c in priced[:3]
        )
        unpriced = [c.group.name for c in costs if c.usd_per_hour is None]
        note = f" (not priced: {', '.join(unpriced)})" if unpriced else ""
        report(
            f"at max scale the node groups cost ${total:,.2f}/h, over the budget of ${budget:,.2f}/h "
            f"(spot {discount:.0%} off); the largest: {biggest}{note}. To fix: lower max_nodes of the largest "
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
