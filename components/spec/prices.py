"""Prices a team states in its spec (negotiated rates, a Savings Plan, what a Capacity Block cost). The plan's
costs read them first, before the catalog's; planning/cost.py `check_stated_prices` keeps each one paying for
nodes the stack buys (it knows how each pool's node groups buy their nodes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from inferstack.spec.base import Model

if TYPE_CHECKING:
    from inferstack.spec.platform import BudgetSpec

Purchase = Literal["on_demand", "spot", "capacity_block", "savings_plan"]
# The purchases that pay for on-demand nodes (the baseline, an ODCR's nodes, the on-demand burst): a Savings Plan
# rate replaces the on-demand rate for the nodes it covers, so a type has one or the other stated, never both.
ON_DEMAND_PURCHASES: tuple[Purchase, ...] = ("on_demand", "savings_plan")


class StatedPrice(Model):
    """A price the team pays for one instance type bought one way, which wins over the catalog's."""

    instance_type: str = Field(description="The EC2 instance type this price is for, e.g. 'p5.48xlarge'. Required.")
    region: str | None = Field(
        None, pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$",
        description="The region the price holds in; it must be the stack's. Defaults to the stack's region.",
    )
    purchase: Purchase = Field(
        description="How the nodes it prices are bought: 'on_demand' (a negotiated rate) or 'savings_plan' (the "
        "plan's rate, taken to cover every on-demand node of the type) for on-demand and ODCR nodes, 'spot' for "
        "spot nodes, 'capacity_block' for a Capacity Block's nodes (its effective hourly rate). Required.",
    )
    usd_per_hour: float = Field(gt=0, description="USD per instance-hour. Required.")
    source: str = Field(
        min_length=1, description="Where the figure comes from (contract, plan or block name), shown beside every "
        "cost it enters. Required.",
    )


def stated_price(budget: BudgetSpec, region: str, instance_type: str, purchase: Purchase) -> StatedPrice | None:
    """The budget's price for the type bought this way in `region` ('on_demand' also finds a Savings Plan rate)."""
    wanted = ON_DEMAND_PURCHASES if purchase in ON_DEMAND_PURCHASES else (purchase,)
    return next(
        (p for p in budget.prices if p.instance_type == instance_type and p.purchase in wanted
         and p.region in (None, region)),
        None,
    )
