"""Cost is never silently zero: pools are costed as a range over their instance types at the stack region's
prices, a type without a catalog price in that region leaves its pool unpriced, and a stated budget is checked
at spec time. Each node group's nodes are priced at the types that group launches (planning/node_groups.py:
the baseline runs the primary type, the burst any type of the pool); spot at the spot snapshot's discount
(components/catalog/spot_prices.json) unless budget.spot_discount overrides it (tests/test_prices.py).

Prices are the catalog's per region (components/catalog/prices.json: instances.vantage.sh data as published in
tsaol/aws-gpu@77fcd9fe1d0652fd07b830e5ed030d61da87923e:data/<family>_instances.js; us-east-1 also
aws/karpenter-provider-aws@6fc13b5236fd04fd16ff3f9dc7490d0813994099:pkg/providers/pricing/zz_generated.pricing_aws.go);
the expected figures below are computed from those catalog entries, not written in.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from inferstack.catalog import on_demand_price, prices_source, snapshot_spot_discount
from inferstack.planning.cost import Price, nodes_cost, stack_costs
from inferstack.planning.node_groups import nodes_at, nodes_at_min, plan_node_groups
from inferstack.spec import SpecError, StackSpec
from inferstack.validation import validate

REPO = Path(__file__).resolve().parents[1]


def price(name: str, region: str = "us-east-1") -> float | None:
    return on_demand_price(name, region)


def spec(pools: list[dict], budget: float | None = None, region: str = "us-east-1") -> dict:
    document = {"environment": "cost", "region": region, "node_pools": pools}
    if budget is not None:
        document["budget"] = {"max_usd_per_hour": budget}
    return document


def valid(document: dict) -> StackSpec:
    """The document as written, once every layer accepts it."""
    return validate(StackSpec.model_validate(document)).written


def refusal(document: dict) -> SpecError:
    with pytest.raises((SpecError, ValidationError)) as caught:
        validate(StackSpec.model_validate(document))
    assert isinstance(caught.value, SpecError), caught.value
    return caught.value


@pytest.mark.parametrize("types", [["g6.xlarge", "g6.4xlarge", "g6.2xlarge"], ["g6e.4xlarge", "g6e.xlarge"]])
def test_a_mixed_pool_costs_its_cheapest_type_at_min_and_its_dearest_at_max(types):
    """The baseline node runs the primary type; the two burst nodes may run any type, the dearest at max."""
    pool = {"name": "mixed", "instance_types": types, "min_nodes": 1, "max_nodes": 3,
            "capacity": {"on_demand_base": 1, "spot": False}}
    (cost,) = stack_costs(valid(spec([pool])))
    prices = [price(t) for t in types]
    assert cost.min_usd_per_hour == round(price(types[0]), 4)  # pool costs are quoted to 1/100 of a cent
    assert cost.max_usd_per_hour == round(price(types[0]) + 2 * max(prices), 4)
    assert [cost.price(t, "on_demand").usd_per_hour for t in types] == prices


def test_spot_nodes_above_the_baseline_take_the_discount_at_the_dearest_type():
    pool = {"name": "mixed", "instance_types": ["g6.xlarge", "g6.2xlarge"], "max_nodes": 4,
            "capacity": {"on_demand_base": 1, "spot": True}}
    document = spec([pool]) | {"budget": {"spot_discount": 0.5}}
    (cost,) = stack_costs(valid(document))
    assert cost.max_usd_per_hour == round(price("g6.xlarge") + 3 * price("g6.2xlarge") * 0.5, 4)


@pytest.mark.parametrize(
    ("spot", "expected"),
    [(True, {1: (1, 0), 2: (2, 0), 4: (2, 2), 5: (2, 3)}), (False, {1: (1, 0), 2: (2, 0), 4: (4, 0), 5: (5, 0)})],
)
def test_a_pool_at_a_size_fills_its_node_groups_baseline_first(spot, expected):
    """The nodes a cost is quoted for are those of the node groups the AWS layer creates (plan_node_groups):
    the on-demand baseline fills first, the burst group above it is spot only when the pool says so."""
    document = spec([{"name": "l4", "instance_types": ["g6.xlarge"], "min_nodes": 3, "max_nodes": 5,
                      "capacity": {"on_demand_base": 2, "spot": spot}}])
    pool = valid(document).node_pools[0]
    assert {nodes: nodes_at(pool, nodes) for nodes in expected} == expected
    assert nodes_at_min(pool) == sum(g.min_size for g in plan_node_groups(pool)) == 3
    (cost,) = stack_costs(valid(document))
    # At min scale: the 2 baseline nodes at the full price, the third at the spot snapshot's discount.
    off = snapshot_spot_discount("g6.xlarge", "us-east-1")
    spot_price = round(price("g6.xlarge") * (1 - off), 4)
    assert cost.min_usd_per_hour == round(price("g6.xlarge") * 2 + (spot_price if spot else price("g6.xlarge")), 4)
    on_demand, spot_node = Price(price("g6.xlarge"), "catalog"), Price(spot_price, "snapshot")
    assert nodes_cost({"on_demand": 2, "spot": 1}, {"on_demand": on_demand, "spot": spot_node}) == pytest.approx(
        price("g6.xlarge") * 2 + spot_price)


@pytest.mark.parametrize("capacity", [{"on_demand_base": 1, "spot": False}, {"on_demand_base": 0, "spot": True}])
def test_a_type_without_a_price_leaves_its_pool_unpriced_not_free(capacity):
    assert price("p5e.48xlarge", "us-east-2") is None, "the catalog has no us-east-2 price for p5e.48xlarge"
    pool = {"name": "h200", "instance_types": ["p5e.48xlarge"], "min_nodes": 1, "max_nodes": 2, "efa": True,
            "capacity": capacity}
    (cost,) = stack_costs(valid(spec([pool], region="us-east-2")))
    assert cost.min_usd_per_hour is None and cost.max_usd_per_hour is None
    assert {u.instance_type for u in cost.unpriced} == {"p5e.48xlarge"}


@pytest.mark.parametrize("index", [0, 1])
def test_a_budget_over_an_unpriced_pool_is_refused_at_the_type(index):
    pools = [{"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 1}]
    pools.insert(index, {"name": "h200", "instance_types": ["p5e.48xlarge"], "max_nodes": 1, "efa": True})
    error = refusal(spec(pools, budget=1000.0, region="us-east-2"))
    assert error.path == f"node_pools[{index}].instance_types[0]"
    assert "no on-demand price in us-east-2" in error.problem and "$1,000.00/h" in error.problem
    assert "budget.max_usd_per_hour" in error.fix


@pytest.mark.parametrize("region", ["us-east-2", "eu-central-1", "ap-northeast-1"])
def test_a_pool_costs_the_stack_regions_prices(region):
    pool = {"name": "l4", "instance_types": ["g6.xlarge", "g6.4xlarge"], "min_nodes": 1, "max_nodes": 3,
            "capacity": {"on_demand_base": 1, "spot": False}}
    (cost,) = stack_costs(valid(spec([pool], region=region)))
    assert cost.min_usd_per_hour == round(price("g6.xlarge", region), 4)
    assert cost.max_usd_per_hour == round(price("g6.xlarge", region) + 2 * price("g6.4xlarge", region), 4)
    assert cost.price("g6.4xlarge", "on_demand").usd_per_hour == price("g6.4xlarge", region)


@pytest.mark.parametrize(
    ("region", "pools", "path", "unpriced"),
    [
        # g6e is offered in ap-south-1 and me-central-1 (EC2's offerings) but no source prices it there.
        ("ap-south-1", [{"name": "l40s", "instance_types": ["g6e.xlarge", "g6e.2xlarge"], "max_nodes": 1}],
         "node_pools[0].instance_types[0]", "g6e.xlarge"),
        ("me-central-1", [{"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 1},
                          {"name": "l40s", "instance_types": ["g6e.2xlarge"], "max_nodes": 1}],
         "node_pools[1].instance_types[0]", "g6e.2xlarge"),
    ],
)
def test_a_type_priced_elsewhere_but_not_in_the_stack_region_refuses_the_budget(region, pools, path, unpriced):
    assert price(unpriced, "us-east-1") is not None and price(unpriced, region) is None
    error = refusal(spec(pools, budget=1000.0, region=region))
    assert error.path == path
    assert f"{unpriced!r} has no on-demand price in {region}" in error.problem
    assert "components/catalog/prices.json" in error.fix
    # Without a budget the stack is allowed, and the pool is unpriced rather than free.
    costs = stack_costs(valid(spec(pools, region=region)))
    assert [c.max_usd_per_hour is None for c in costs] == [p["instance_types"].count(unpriced) > 0 for p in pools]


# ------------------------------------------------------------------- auto placement at the region's prices

L4 = {"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 2, "capacity": {"on_demand_base": 2}}
L40S = {"name": "l40s", "instance_types": ["g6e.xlarge"], "max_nodes": 1, "capacity": {"on_demand_base": 1}}


def auto_stack(region: str, pools: list[dict], max_model_len: int) -> dict:
    model = {"name": "chat", "model": "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "quantization": "fp8",
             "pool": "auto", "max_model_len": max_model_len, "max_num_seqs": 4}
    return spec(pools, region=region) | {"models": [model]}


@pytest.mark.parametrize("region", ["us-east-1", "ap-northeast-1", "ap-south-1"])
def test_auto_placement_prices_each_candidate_in_the_stack_region(region):
    from inferstack.planning.auto_placement import candidates
    from inferstack.spec.pools import PoolHardware

    stack = valid(auto_stack(region, [L4], 8192))
    pools = {p.name: PoolHardware(p) for p in stack.node_pools}
    (best, *_) = candidates(stack.models[0], pools, region)
    assert best.model.pool == "l4" and best.usd_per_hour == round(price("g6.xlarge", region), 6)


def test_auto_placement_leaves_out_a_pool_unpriced_in_the_stack_region():
    # 32K tokens x 4 of the 8B model fit an L40S but not an L4: us-east-1 prices the L40S and places it there.
    assert [m.pool for m in validate(StackSpec.model_validate(auto_stack("us-east-1", [L4, L40S], 32768))).stack.models] \
        == ["l40s"]
    error = refusal(auto_stack("ap-south-1", [L4, L40S], 32768))
    assert error.path == "models[0].pool"
    assert "pools 'l40s' have no on-demand price in ap-south-1 in the catalog or budget.prices, so it left them out" \
        in error.problem
    error = refusal(auto_stack("ap-south-1", [L40S], 8192))
    assert error.path == "models[0].pool"
    assert "no pool in 'l40s' has an on-demand price in ap-south-1" in error.problem
    assert "components/catalog/prices.json" in error.fix


@pytest.mark.parametrize(
    ("pool", "nodes_at_full_price"),
    [
        ({"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 3, "efa": True,
          "capacity": {"on_demand_base": 3, "spot": False}}, 3),
        ({"name": "l40s", "instance_types": ["g6e.xlarge", "g6e.4xlarge"], "max_nodes": 10,
          "capacity": {"on_demand_base": 10, "spot": False}}, 10),
    ],
)
def test_a_budget_below_the_cost_at_max_scale_is_refused_with_the_figures(pool, nodes_at_full_price):
    total = nodes_at_full_price * price(pool["instance_types"][0])  # all baseline: the primary type
    error = refusal(spec([pool], budget=round(total / 2, 2)))
    assert error.path == "budget.max_usd_per_hour"
    assert f"${total:,.2f}/h" in error.problem and f"{pool['name']} ${total:,.2f}/h" in error.problem
    assert f"at least {total:,.2f}" in error.fix
    # The same stack at its own cost fits.
    valid(spec([pool], budget=round(total + 0.01, 2)))


def test_without_a_budget_an_unpriced_pool_is_allowed_and_shown_unpriced():
    pool = {"name": "h200", "instance_types": ["p5e.48xlarge"], "max_nodes": 1, "efa": True}
    (cost,) = stack_costs(valid(spec([pool], region="us-east-2")))
    assert cost.max_usd_per_hour is None


@pytest.mark.parametrize(
    ("pools", "path"),
    [
        ("[{name: h100, instance_types: [p5.48xlarge], max_nodes: 4, efa: true}]", "budget.max_usd_per_hour"),
        ("[{name: h200, instance_types: [p5e.48xlarge], max_nodes: 1, efa: true}]", "node_pools[0].instance_types[0]"),
    ],
)
def test_plan_and_render_refuse_a_budget_they_cannot_hold(tmp_path: Path, pools: str, path: str):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "tight.yaml").write_text(textwrap.dedent(
        f"""
        environment: tight
        region: us-east-2
        node_pools: {pools}
        budget: {{max_usd_per_hour: 10}}
        """
    ))
    for command in (["plan", "tight"], ["render", "tight", "--out", str(tmp_path / "out")]):
        result = subprocess.run([sys.executable, "-m", "inferstack.cli", *command, "--stacks-dir", str(stacks)],
                                cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert f"tight.yaml: {path}:" in result.stderr and "To fix:" in result.stderr
        assert result.stdout == ""
    assert not (tmp_path / "out").exists(), "nothing is rendered for a refused budget"


# ------------------------------------------------------------------------------- the text plan in 80 columns


@pytest.fixture(scope="module")
def plans() -> dict[str, dict]:
    """The plans of the example stacks and of one with an unpriced pool outside us-east-1."""
    from inferstack.engine import run_stack
    from inferstack.presentation.summary import build_plan
    from inferstack.stacks import load_stack

    specs = {name: load_stack(REPO / "stacks", name) for name in ("dev", "prod")}
    specs["unpriced"] = valid(spec(
        [{"name": "h200", "instance_types": ["p5e.48xlarge"], "max_nodes": 1, "efa": True},
         {"name": "l4", "instance_types": ["g6.xlarge", "g6.4xlarge"], "min_nodes": 1, "max_nodes": 2}],
        region="us-east-2",
    ))
    return {name: build_plan(s, run_stack(s)) for name, s in specs.items()}


def text_at_80_columns(plan: dict) -> str:
    from rich.console import Console

    from inferstack.presentation.terminal import print_plan

    console = Console(record=True, width=80)
    print_plan(plan, console)
    return console.export_text()


@pytest.mark.parametrize("name", ["dev", "prod", "unpriced"])
def test_the_plan_shows_every_figure_whole_in_80_columns(plans, name):
    plan = plans[name]
    text = text_at_80_columns(plan)
    assert "…" not in text, "nothing is cut to an ellipsis"
    # Tables are laid out to the width (the long lines are notes printed to wrap in the terminal).
    table_lines = [line for line in text.splitlines() if line.startswith(" ") and "  " in line.strip()]
    assert table_lines and max(len(line) for line in table_lines) <= 80
    for pool in plan["node_pools"]:
        for figure in pool["usd_per_hour"].values():
            assert (f"${figure:,.2f}" if figure is not None else "n/a") in text, (pool["name"], figure)
    for row in plan["throughput"]["models"]:
        assert f"${row['usd_per_hour']:,.2f}" in text and f"${row['usd_per_million_output_tokens']:.4f}" in text


def test_the_plan_says_whose_prices_and_that_unpriced_pools_are_not_free(plans):
    text = " ".join(text_at_80_columns(plans["unpriced"]).split())
    assert "at least $" in text and "unpriced (no price in us-east-2): h200" in text
    assert f"us-east-2 on-demand prices from {prices_source('us-east-2')}" in text
    assert "instances.vantage.sh" in prices_source("us-east-2") and "Karpenter" in prices_source("us-east-1")
    dev = " ".join(text_at_80_columns(plans["dev"]).split())
    assert f"Total: up to {plans['dev']['totals']['gpus_max']} GPUs, $" in dev and "at least" not in dev
