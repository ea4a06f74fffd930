"""The price side of $/1M tokens (issue 28, item 6): prices the spec states, Capacity Blocks at their own rate
inside their window only, spot discounts per instance type and region from a dated snapshot, and a source and
date beside every price the plan, `check` and the budget policy use.

Upstream facts encoded here:
- Spot: instances.vantage.sh data as published in tsaol/aws-gpu@2d0108c7bd261c8e40493fbd35135437bd6c9099:
  data/gpu_instances_raw.json (2025-11-30), pricing.<region>.linux.spot_avg beside .ondemand
  (components/catalog/spot_prices.json keeps both, so a discount is read off one snapshot).
- Capacity Blocks: the "Amazon EC2 Capacity Blocks for ML Pricing" page (aws.amazon.com/ec2/capacityblocks/pricing,
  rates in force until 2025-01-01): p5.48xlarge $39.33 in us-east-1 and us-east-2, p4d.24xlarge $14.75 in
  us-east-2 and us-west-2, the "effective instance hourly rate" of a reservation fee "charged up front".
  EC2 User Guide, capacity-blocks-using: "Thirty minutes before the reservation expires, we begin to terminate
  any instances that are still running in the Capacity Block"; EKS User Guide capacity-blocks-mng: EKS scales the
  block's node group to 0 before the block ends. So the block's nodes cost its rate inside the window only.
- Savings Plans replace the On-Demand rate of the usage they cover ("Any remaining usage is charged at the
  On-Demand rates": AWS Savings Plans User Guide, docs.aws.amazon.com/savingsplans/latest/userguide/
  sp-applying.html), so a Savings Plan rate prices the on-demand nodes of its type (taken as fully covered) and
  not its spot nodes.
"""

from __future__ import annotations

import json
import re
import textwrap
from importlib.resources import files
from pathlib import Path

import pytest
from stack_files import refusal, run_cli

from inferstack.catalog import (
    INSTANCE_TYPES, capacity_block_price, on_demand_price, snapshot_spot_discount, spot_prices_source,
)
from inferstack.catalog.offerings import zones_offering
from inferstack.planning.cost import nodes_cost, stack_costs
from inferstack.spec import StackSpec
from inferstack.validation import validate


def _catalog(name: str) -> dict:
    return json.loads(files("inferstack.catalog").joinpath(name).read_text(encoding="utf-8"))


SPOT = _catalog("spot_prices.json")
BLOCKS = _catalog("capacity_block_prices.json")
ON_DEMAND = _catalog("prices.json")["on_demand_usd_per_hour"]

L4 = {"name": "l4", "instance_types": ["g6.xlarge", "g6.2xlarge"], "min_nodes": 1, "max_nodes": 3,
      "capacity": {"on_demand_base": 1, "spot": True}}
BLOCK = {"name": "h100", "instance_types": ["p5.48xlarge"], "min_nodes": 2, "max_nodes": 4, "efa": True,
         "capacity": {"on_demand_base": 2, "spot": True,
                      "reservation": {"kind": "capacity_block", "id": "cr-0123456789abcdef0"}}}


def stack(pools: list[dict], region: str = "us-east-1", **budget) -> dict:
    document = {"environment": "prices", "region": region, "node_pools": pools}
    return document | ({"budget": budget} if budget else {})


def costs(document: dict):
    return stack_costs(validate(StackSpec.model_validate(document)).written)


def stated(instance_type: str, purchase: str, usd: float, **more) -> dict:
    return {"instance_type": instance_type, "purchase": purchase, "usd_per_hour": usd,
            "source": f"contract {purchase}", **more}


# ----------------------------------------------------------------------------------------- the catalog data


def test_the_spot_snapshot_holds_only_pairs_the_catalog_prices_and_never_above_on_demand():
    """A snapshot figure is kept only where prices.json prices the type in the region; spot is capped at
    on-demand (the snapshot's own on-demand: a few averages round a hair above it), so no discount is negative."""
    pairs = SPOT["spot_and_on_demand_usd_per_hour"]
    for name, by_region in pairs.items():
        for region, (spot, own_on_demand) in by_region.items():
            assert region in ON_DEMAND[name], (name, region)
            assert 0 < spot <= own_on_demand * 1.0001, (name, region)
            assert 0 <= snapshot_spot_discount(name, region) < 1
    assert "2025-11-30" in SPOT["label"] and "2d0108c7bd261c8e40493fbd35135437bd6c9099" in SPOT["source"]


def test_capacity_block_rates_are_for_types_sold_as_blocks_in_regions_that_offer_them():
    for name, by_region in BLOCKS["usd_per_hour"].items():
        assert "capacity-block" in INSTANCE_TYPES[name].usage_classes
        for region, rate in by_region.items():
            assert zones_offering(region, name) and rate > 0
    assert capacity_block_price("p5.48xlarge", "us-east-1") == 39.33
    assert capacity_block_price("p4d.24xlarge", "us-west-2") == 14.75
    assert capacity_block_price("p5en.48xlarge", "us-east-2") is None   # the page names no rate: none invented
    assert "2025-01-01" in BLOCKS["label"]


# ----------------------------------------------------------------------------------------- spot per type and region


def test_spot_is_priced_at_the_snapshots_discount_for_its_type_and_region():
    """The discount differs per type and per region, read off the snapshot (tsaol/aws-gpu@2d0108c7:
    data/gpu_instances_raw.json, pricing.<region>.linux.spot_avg / .ondemand), not one stated 60%."""
    assert snapshot_spot_discount("g6.xlarge", "us-east-1") != snapshot_spot_discount("g6.2xlarge", "us-east-1")
    assert snapshot_spot_discount("g6.xlarge", "us-east-1") != snapshot_spot_discount("g6.xlarge", "eu-central-1")
    for region in ("us-east-1", "eu-central-1"):
        (cost,) = costs(stack([L4], region))
        for name in L4["instance_types"]:
            price = cost.price(name, "spot")
            spot, own = SPOT["spot_and_on_demand_usd_per_hour"][name][region]
            assert price.spot_discount == round(1 - spot / own, 4)
            assert price.usd_per_hour == round(on_demand_price(name, region) * (1 - price.spot_discount), 4)
            assert spot_prices_source() in price.source and "2025-11-30" in price.source
        dearest = max(cost.price(n, "spot").usd_per_hour for n in L4["instance_types"])
        assert cost.max_usd_per_hour == round(on_demand_price("g6.xlarge", region) + 2 * dearest, 4)


def test_a_stated_spot_discount_overrides_the_snapshot_everywhere():
    (cost,) = costs(stack([L4], spot_discount=0.5))
    for name in L4["instance_types"]:
        price = cost.price(name, "spot")
        assert price.spot_discount == 0.5 and "budget.spot_discount" in price.source
        assert price.usd_per_hour == round(on_demand_price(name, "us-east-1") * 0.5, 4)


def test_a_pair_the_snapshot_has_no_spot_figure_for_is_unpriced_and_says_so():
    """p5.4xlarge is priced on-demand in us-east-1 but the snapshot has no spot average there: no discount is
    invented; the pool is unpriced with that reason until the spec states a discount or a spot price."""
    assert on_demand_price("p5.4xlarge", "us-east-1") is not None
    assert snapshot_spot_discount("p5.4xlarge", "us-east-1") is None
    pool = {"name": "h100", "instance_types": ["p5.4xlarge"], "max_nodes": 2}
    (cost,) = costs(stack([pool]))
    assert cost.max_usd_per_hour is None
    (missing,) = cost.unpriced
    assert (missing.instance_type, missing.purchase) == ("p5.4xlarge", "spot")
    assert "no spot discount in us-east-1 in the spot snapshot" in missing.reason
    (priced,) = costs(stack([pool], spot_discount=0.3))
    assert priced.max_usd_per_hour == round(2 * on_demand_price("p5.4xlarge", "us-east-1") * 0.7, 4)
    (priced,) = costs(stack([pool], prices=[stated("p5.4xlarge", "spot", 2.5)]))
    assert priced.max_usd_per_hour == 5.0


# ----------------------------------------------------------------------------------------- stated prices


def test_a_stated_price_wins_over_the_catalog_and_names_its_source():
    (cost,) = costs(stack([L4], prices=[stated("g6.xlarge", "on_demand", 0.5), stated("g6.2xlarge", "spot", 0.2)]))
    on_demand = cost.price("g6.xlarge", "on_demand")
    assert on_demand.usd_per_hour == 0.5 and on_demand.source == "stated in the spec (on_demand): contract on_demand"
    assert cost.price("g6.2xlarge", "spot").usd_per_hour == 0.2
    # g6.xlarge's spot nodes still take the snapshot's discount off the public price: a negotiated rate is not
    # the spot market's.
    assert cost.price("g6.xlarge", "spot").spot_discount == snapshot_spot_discount("g6.xlarge", "us-east-1")
    assert cost.max_usd_per_hour == round(0.5 + 2 * max(0.2, cost.price("g6.xlarge", "spot").usd_per_hour), 4)


def test_a_savings_plan_rate_prices_the_on_demand_nodes_of_its_type():
    """A Savings Plan rate stands in for the On-Demand rate it covers (AWS Savings Plans User Guide,
    sp-applying.html)."""
    pool = {**L4, "capacity": {"on_demand_base": 3, "spot": False}, "instance_types": ["g6.xlarge"]}
    (cost,) = costs(stack([pool], prices=[stated("g6.xlarge", "savings_plan", 0.45, region="us-east-1")]))
    assert cost.max_usd_per_hour == round(3 * 0.45, 4)
    assert "savings_plan" in cost.price("g6.xlarge", "on_demand").source


def test_a_stated_price_prices_a_pair_the_catalog_has_none_for_and_the_budget_holds():
    """p5e.48xlarge has no catalog price in us-east-2: stated, its pool is priced and a budget can be checked."""
    assert on_demand_price("p5e.48xlarge", "us-east-2") is None
    pool = {"name": "h200", "instance_types": ["p5e.48xlarge"], "max_nodes": 1, "efa": True,
            "capacity": {"on_demand_base": 1, "spot": False}}
    document = stack([pool], "us-east-2", max_usd_per_hour=100.0, prices=[stated("p5e.48xlarge", "on_demand", 60.0)])
    (cost,) = costs(document)
    assert cost.max_usd_per_hour == 60.0 and not cost.unpriced
    error = refusal(document | {"budget": {**document["budget"], "max_usd_per_hour": 50.0}})
    assert error.path == "budget.max_usd_per_hour" and "$60.00/h" in error.problem
    assert "1 price stated in the spec wins" in error.problem


@pytest.mark.parametrize(
    ("price", "path", "problem", "fix"),
    [
        (stated("g6.xlarge", "on_demand", 1.0, region="us-west-2"), "budget.prices[0].region",
         "'us-west-2' is not the stack's region 'us-east-1'", "set region to 'us-east-1'"),
        (stated("g6e.xlarge", "on_demand", 1.0), "budget.prices[0].instance_type",
         "'g6e.xlarge' is not an instance type of any node pool (they use g6.2xlarge, g6.xlarge)",
         "name an instance type a node pool lists"),
        (stated("g6.2xlarge", "on_demand", 1.0), "budget.prices[0].purchase",
         "'on_demand': no node pool buys g6.2xlarge that way (it is bought spot)", "use purchase 'spot'"),
        (stated("g6.xlarge", "capacity_block", 1.0), "budget.prices[0].purchase",
         "'capacity_block': no node pool buys g6.xlarge that way", "or drop this price"),
    ],
)
def test_a_stated_price_no_node_pays_is_refused_at_its_field(price, path, problem, fix):
    error = refusal(stack([L4], prices=[price]))
    assert error.path == path and problem in error.problem and fix in error.fix


def test_two_prices_for_the_same_nodes_are_refused_at_the_second():
    twice = [stated("g6.xlarge", "on_demand", 0.7), stated("g6.xlarge", "savings_plan", 0.6)]
    error = refusal(stack([L4], prices=twice))
    assert error.path == "budget.prices[1].purchase"
    assert "prices the same nodes as budget.prices[0]" in error.problem and "one price per" in error.fix


def test_a_refused_price_exits_2_with_the_field_and_no_traceback(tmp_path: Path):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "priced.yaml").write_text(textwrap.dedent(
        """
        environment: priced
        region: us-east-1
        node_pools: [{name: l4, instance_types: [g6.xlarge], max_nodes: 1}]
        budget:
          prices: [{instance_type: g6.xlarge, region: eu-west-1, purchase: spot, usd_per_hour: 0.3, source: deal}]
        """
    ))
    result = run_cli("plan", "priced", "--stacks-dir", str(stacks))
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stdout == ""
    assert "priced.yaml: budget.prices[0].region: 'eu-west-1' is not the stack's region" in result.stderr
    assert "To fix: set region to 'us-east-1'" in result.stderr


# ----------------------------------------------------------------------------------------- Capacity Blocks


def test_a_capacity_block_pays_its_rate_inside_the_window_and_is_gone_outside_it():
    """The block's reservation fee is "charged up front" at its effective hourly rate (Capacity Blocks for ML
    pricing page: p5.48xlarge $39.33 in us-east-1), so its nodes count at min scale; EKS scales the block's
    group to 0 before the block ends (EKS User Guide capacity-blocks-mng) and EC2 terminates what still runs
    (EC2 User Guide capacity-blocks-using), so outside the window only the burst remains."""
    (cost,) = costs(stack([BLOCK]))
    rate = cost.price("p5.48xlarge", "capacity_block")
    assert rate.usd_per_hour == 39.33 and "2025-01-01" in rate.source
    spot = cost.price("p5.48xlarge", "spot").usd_per_hour
    assert cost.min_usd_per_hour == round(2 * 39.33, 4)                 # the prepaid block, never on-demand
    assert cost.max_usd_per_hour == round(2 * 39.33 + 2 * spot, 4)
    assert cost.outside_block == (0.0, round(2 * spot, 4))             # outside: only the spot burst remains
    assert cost.price("p5.48xlarge", "on_demand") is None              # no node of the pool is bought on-demand


def test_a_stated_block_rate_wins_and_a_block_the_catalog_cannot_price_needs_one():
    """A block is charged at the rate in force when it is bought (Capacity Blocks for ML pricing page), so what
    the team paid wins; the page names no p5en.48xlarge rate, so none is invented and a budget needs one stated."""
    (cost,) = costs(stack([BLOCK], prices=[stated("p5.48xlarge", "capacity_block", 31.0)]))
    assert cost.min_usd_per_hour == 62.0
    block = cost.price("p5.48xlarge", "capacity_block")
    assert block.source == "stated in the spec (capacity_block): contract capacity_block"
    p5en = {**BLOCK, "instance_types": ["p5en.48xlarge"]}
    (cost,) = costs(stack([p5en], "us-east-2"))
    (missing,) = cost.unpriced
    assert missing.purchase == "capacity_block" and cost.min_usd_per_hour is None
    error = refusal(stack([p5en], "us-east-2", max_usd_per_hour=500.0))
    assert error.path == "node_pools[0].capacity.reservation"
    assert "'p5en.48xlarge' has no Capacity Block rate in us-east-2 in the catalog" in error.problem
    assert "state its price in budget.prices (instance_type 'p5en.48xlarge', purchase 'capacity_block'" in error.fix
    (cost,) = costs(stack([p5en], "us-east-2", max_usd_per_hour=500.0,
                          prices=[stated("p5en.48xlarge", "capacity_block", 40.0)]))
    assert cost.min_usd_per_hour == 80.0


def test_nodes_cost_adds_each_purchase_at_its_price():
    from inferstack.planning.cost import Price

    prices = {"capacity_block": Price(39.33, "block"), "spot": Price(20.0, "snapshot")}
    assert nodes_cost({"capacity_block": 2, "spot": 3, "on_demand": 0}, prices) == pytest.approx(2 * 39.33 + 60)


# ----------------------------------------------------------------------------------------- the plan and the policy


DATED = re.compile(r"\d{4}-\d{2}-\d{2}")


@pytest.mark.parametrize("name", ["dev", "prod", "karpenter", "serving"])
def test_every_price_in_the_plan_names_its_source_and_date(name):
    from inferstack.presentation.summary import node_pools
    from inferstack.stacks import load_stack

    spec = validate(load_stack(Path(__file__).resolve().parents[1] / "stacks", name)).stack
    for pool in node_pools(spec):
        for price in pool["prices"]:
            assert price["usd_per_node_hour"] > 0
            assert DATED.search(price["source"]) or price["source"].startswith("stated in the spec"), price
        for missing in pool["unpriced"]:
            assert missing["reason"], missing


def test_the_plan_json_carries_stated_prices_and_block_windows():
    from inferstack.presentation.summary import node_pools

    spec = validate(StackSpec.model_validate(stack(
        [BLOCK, L4], prices=[stated("g6.xlarge", "on_demand", 0.5)]))).stack
    rows = {row["name"]: row for row in node_pools(spec)}
    outside = rows["h100"]["outside_capacity_block"]
    assert outside["min"] == 0.0 and outside["max"] == pytest.approx(rows["h100"]["usd_per_hour"]["max"] - 2 * 39.33)
    assert {(p["instance_type"], p["purchase"]) for p in rows["h100"]["prices"]} == {
        ("p5.48xlarge", "capacity_block"), ("p5.48xlarge", "spot")}
    (stated_row,) = [p for p in rows["l4"]["prices"] if p["purchase"] == "on_demand"]
    assert stated_row == {"instance_type": "g6.xlarge", "purchase": "on_demand", "usd_per_node_hour": 0.5,
                          "spot_discount": None, "source": "stated in the spec (on_demand): contract on_demand"}
    assert rows["l4"]["outside_capacity_block"] is None


@pytest.mark.parametrize("autoscaler", ["cluster-autoscaler", "karpenter"])
def test_the_budget_policy_prices_every_group_as_the_plan_does(autoscaler):
    """The policy reads the spec's stated prices and spot override from its config (the runner writes them) and
    prices a Capacity Block group (node group CAPACITY_BLOCK, or Karpenter's `-capacity-block` NodePool) at the
    block's rate: its total is the plan's."""
    from inferstack.engine import run_stack
    from inferstack.policies.budget import MAX_USD_PER_HOUR, budget_at_max_scale
    from inferstack.policies.runner import run_policies, spec_policy_config

    pools = [BLOCK, L4] if autoscaler != "karpenter" else [{**p, "min_nodes": 0} for p in (BLOCK, L4)]
    document = stack(pools, prices=[stated("g6.xlarge", "on_demand", 0.5)]) | {
        "platform": {"node_autoscaler": autoscaler}}
    spec = validate(StackSpec.model_validate(document)).stack
    total = round(sum(c.max_usd_per_hour for c in stack_costs(spec)), 2)
    config = spec_policy_config(spec)
    config[budget_at_max_scale.name][MAX_USD_PER_HOUR] = total / 2
    resources = [r.as_dict() for r in run_stack(spec).resources]
    (result,) = run_policies(resources, spec.environment, config, policies=[budget_at_max_scale])
    (violation,) = result.as_dict()["violations"]
    assert f"at max scale the node groups cost ${total:,.2f}/h" in violation["message"]
    assert "capacity-block $78.66/h" in violation["message"]
    assert "1 price stated in the spec wins" in violation["message"]



def test_the_pack_config_from_plan_json_is_the_one_from_the_spec():
    """`check --resources` reads the budget from plan.json (totals): the same stated prices and override."""
    from inferstack.policies.runner import plan_policy_config, spec_policy_config

    spec = validate(StackSpec.model_validate(stack(
        [L4], max_usd_per_hour=9.0, spot_discount=0.4, prices=[stated("g6.xlarge", "on_demand", 0.5)]))).stack
    totals = {"budget_usd_per_hour": 9.0, "spot_discount_override": 0.4,
              "stated_prices": [p.model_dump() for p in spec.budget.prices]}
    assert plan_policy_config({"totals": totals}) == spec_policy_config(spec) == {"budget-at-max-scale": {
        "maxUsdPerHour": 9.0, "spotDiscount": 0.4, "statedPrices": [
            {"instance_type": "g6.xlarge", "purchase": "on_demand", "usd_per_hour": 0.5, "source": "contract on_demand"}
        ]}}


def test_a_pack_config_no_spec_could_state_is_a_violation_not_a_traceback():
    """`pulumi preview --policy-pack-config` takes any JSON: a stated price missing its fields is reported."""
    from inferstack.engine import run_stack
    from inferstack.policies.budget import budget_at_max_scale
    from inferstack.policies.runner import run_policies

    spec = validate(StackSpec.model_validate(stack([L4]))).stack
    config = {budget_at_max_scale.name: {"maxUsdPerHour": 10.0, "statedPrices": [{"instance_type": "g6.xlarge"}]}}
    resources = [r.as_dict() for r in run_stack(spec).resources]
    (result,) = run_policies(resources, spec.environment, config, policies=[budget_at_max_scale])
    (violation,) = result.as_dict()["violations"]
    assert "the policy config's budget is not one a spec could state" in violation["message"]
    assert "To fix: pass maxUsdPerHour, spotDiscount and statedPrices" in violation["message"]
