"""Cost is never silently zero: pools are costed as a range over their instance types, a type without a
catalog price leaves its pool unpriced, and a stated budget is checked at spec time.

Prices are the catalog's (components/catalog/instances.json: Karpenter's generated us-east-1 table,
aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go); the expected figures below
are computed from those catalog entries, not written in.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from inferstack.catalog import instance_type
from inferstack.cost import PRICE_REGION, stack_costs
from inferstack.spec import SpecError, StackSpec

REPO = Path(__file__).resolve().parents[1]


def price(name: str) -> float:
    return instance_type(name).on_demand_usd_per_hour


def spec(pools: list[dict], budget: float | None = None, region: str = "us-east-1") -> dict:
    document = {"environment": "cost", "region": region, "node_pools": pools}
    if budget is not None:
        document["budget"] = {"max_usd_per_hour": budget}
    return document


def refusal(document: dict) -> SpecError:
    with pytest.raises((SpecError, ValidationError)) as caught:
        StackSpec.model_validate(document)
    assert isinstance(caught.value, SpecError), caught.value
    return caught.value


@pytest.mark.parametrize("types", [["g6.xlarge", "g6.4xlarge", "g6.2xlarge"], ["g6e.4xlarge", "g6e.xlarge"]])
def test_a_mixed_pool_costs_its_cheapest_type_at_min_and_its_dearest_at_max(types):
    pool = {"name": "mixed", "instance_types": types, "min_nodes": 1, "max_nodes": 3,
            "capacity": {"on_demand_base": 1, "spot": False}}
    (cost,) = stack_costs(StackSpec.model_validate(spec([pool])))
    prices = [price(t) for t in types]
    assert cost.min_usd_per_hour == pytest.approx(min(prices))
    assert cost.max_usd_per_hour == pytest.approx(3 * max(prices))
    assert cost.on_demand_usd_per_node == max(prices)


def test_spot_nodes_above_the_baseline_take_the_discount_at_the_dearest_type():
    pool = {"name": "mixed", "instance_types": ["g6.xlarge", "g6.2xlarge"], "max_nodes": 4,
            "capacity": {"on_demand_base": 1, "spot": True}}
    document = spec([pool]) | {"budget": {"spot_discount": 0.5}}
    (cost,) = stack_costs(StackSpec.model_validate(document))
    assert cost.max_usd_per_hour == pytest.approx(price("g6.2xlarge") * (1 + 3 * 0.5))


@pytest.mark.parametrize("capacity", [{"on_demand_base": 1, "spot": False}, {"on_demand_base": 0, "spot": True}])
def test_a_type_without_a_price_leaves_its_pool_unpriced_not_free(capacity):
    assert price("p5e.48xlarge") is None, "the catalog has no us-east-1 price for p5e.48xlarge"
    pool = {"name": "h200", "instance_types": ["p5e.48xlarge"], "min_nodes": 1, "max_nodes": 2, "efa": True,
            "capacity": capacity}
    (cost,) = stack_costs(StackSpec.model_validate(spec([pool], region="us-east-2")))
    assert cost.min_usd_per_hour is None and cost.max_usd_per_hour is None
    assert cost.unpriced_types == ("p5e.48xlarge",)


@pytest.mark.parametrize("index", [0, 1])
def test_a_budget_over_an_unpriced_pool_is_refused_at_the_type(index):
    pools = [{"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 1}]
    pools.insert(index, {"name": "h200", "instance_types": ["p5e.48xlarge"], "max_nodes": 1, "efa": True})
    error = refusal(spec(pools, budget=1000.0, region="us-east-2"))
    assert error.path == f"node_pools[{index}].instance_types[0]"
    assert "no on-demand price" in error.problem and PRICE_REGION in error.problem and "$1,000.00/h" in error.problem
    assert "budget.max_usd_per_hour" in error.fix


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
    dearest = max(price(t) for t in pool["instance_types"])
    total = nodes_at_full_price * dearest
    error = refusal(spec([pool], budget=round(total / 2, 2)))
    assert error.path == "budget.max_usd_per_hour"
    assert f"${total:,.2f}/h" in error.problem and f"{pool['name']} ${total:,.2f}/h" in error.problem
    assert f"at least {total:,.2f}" in error.fix
    # The same stack at its own cost fits.
    StackSpec.model_validate(spec([pool], budget=round(total + 0.01, 2)))


def test_without_a_budget_an_unpriced_pool_is_allowed_and_shown_unpriced():
    pool = {"name": "h200", "instance_types": ["p5e.48xlarge"], "max_nodes": 1, "efa": True}
    (cost,) = stack_costs(StackSpec.model_validate(spec([pool], region="us-east-2")))
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
    from inferstack.engine.summary import build_plan
    from inferstack.stacks import load_stack

    specs = {name: load_stack(REPO / "stacks", name) for name in ("dev", "prod")}
    specs["unpriced"] = StackSpec.model_validate(spec(
        [{"name": "h200", "instance_types": ["p5e.48xlarge"], "max_nodes": 1, "efa": True},
         {"name": "l4", "instance_types": ["g6.xlarge", "g6.4xlarge"], "min_nodes": 1, "max_nodes": 2}],
        region="us-east-2",
    ))
    return {name: {**build_plan(s, run_stack(s)), "engine_seconds": 1.0} for name, s in specs.items()}


def text_at_80_columns(plan: dict) -> str:
    from rich.console import Console

    from inferstack.engine.report import print_plan

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
    assert "at least $" in text and "not priced (no catalog price): h200" in text
    assert f"{PRICE_REGION} on-demand prices, not us-east-2's" in text
    dev = " ".join(text_at_80_columns(plans["dev"]).split())
    assert f"Total: up to {plans['dev']['totals']['gpus_max']} GPUs, $" in dev and "at least" not in dev
