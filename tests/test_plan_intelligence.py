"""The plan's answers: cost per pool and per million tokens, and time to serving over the real programs.

The time-to-serving test is the contract on the layers: every wait the dev and prod programs impose must
be required by dependency_rule.DependencyRule, so each model's longest chain equals its lower bound.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from rich.console import Console

from inferstack.catalog import on_demand_price, snapshot_spot_discount
from inferstack.planning.accuracy import out_of_sample
from inferstack.planning.cost import stack_costs
from inferstack.planning.service_performance import ASSUMPTIONS, service_estimate
from inferstack.engine import run_stack
from inferstack.presentation.terminal import print_plan
from inferstack.policies.runner import run_policies, spec_policy_config
from inferstack.presentation.summary import build_plan, graph_resources, time_to_serving
from inferstack.policies.budget import MAX_USD_PER_HOUR, budget_at_max_scale
from inferstack.planning.dependency_rule import DependencyRule
from inferstack.planning.serving_time import edges
from inferstack.spec import StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
INPUTS_REASON = "its inputs carry the dependency's outputs"


@pytest.fixture(scope="module")
def stacks():
    """(spec, recording, plan) of each example stack, run once for the module."""
    runs = {}
    for name in ("dev", "prod"):
        spec = load_stack(STACKS, name)
        recording = run_stack(spec)
        runs[name] = (spec, recording, build_plan(spec, recording))
    return runs


# --------------------------------------------------------------------------------------- time to serving


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_wait_of_the_program_is_required(stacks, name):
    _, recording, _ = stacks[name]
    resources = graph_resources(recording)
    by_name = {r["name"]: r for r in resources}
    rule = DependencyRule(resources)
    needless = [e for e in edges(resources) if not rule(by_name[e.dependent], by_name[e.dependency], e.kind)]
    assert needless == []
    # More strictly: each explicit depends_on (not implied by an input) has a reason of its own.
    explicit = [(r, d) for r in resources for d in r["depends_on"] if d not in r["input_dependencies"]]
    assert len(explicit) > 50
    for dependent, dependency in explicit:
        reason = rule.why(dependent, by_name[dependency], "depends_on")
        assert reason not in (None, INPUTS_REASON), f"{dependent['name']} -> {dependency}"


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_each_models_longest_chain_is_its_lower_bound(stacks, name):
    spec, _, plan = stacks[name]
    times = plan["time_to_serving"]
    assert [m["model"] for m in times["models"]] == [m.name for m in spec.models]
    assert times["needless_edges"] == []
    for model in times["models"]:
        assert model["seconds"] == model["lower_bound_seconds"], model["model"]
        assert model["critical_path"] == model["lower_bound_path"]
        steps = model["critical_path"]
        # From an empty account: the cluster is on the way, and the chain ends at the first ready replica.
        assert steps[0]["start"] == 0 and any(s["type"] == "aws:eks/cluster:Cluster" for s in steps)
        assert steps[-1]["name"] == f"{model['model']}: first ready replica"
        assert steps[-1]["finish"] == model["seconds"]
        assert all(a["finish"] <= b["start"] + 1e-6 for a, b in zip(steps, steps[1:]))


def test_a_needless_wait_shows_as_time_above_the_lower_bound(stacks):
    spec, recording, plan = stacks["prod"]
    slowed = copy.deepcopy(recording)
    # The GPU operator made to wait for the metrics stack, which it does not need.
    operator = slowed.named("prod-platform-gpu-operator-release")
    operator.depends_on = sorted([*operator.depends_on, "prod-platform-metrics-release"])
    times = time_to_serving(validate(spec).stack, slowed, plan["node_pools"], plan["placements"])
    assert times["needless_edges"] == [
        {"dependent": "prod-platform-gpu-operator-release", "dependency": "prod-platform-metrics-release",
         "kind": "depends_on"}
    ]
    for model in times["models"]:
        assert model["seconds"] == pytest.approx(model["lower_bound_seconds"] + 90)   # the metrics release's 90 s
        assert "prod-platform-metrics-release" in [s["name"] for s in model["critical_path"]]


def resource(name, type_, inputs=None, depends_on=(), input_dependencies=()):
    return {"type": type_, "name": name, "custom": True, "parent": None, "inputs": inputs or {},
            "depends_on": list(depends_on), "input_dependencies": list(input_dependencies)}


def test_the_rule_names_a_reason_or_calls_the_wait_needless():
    kueue = resource("kueue", "kubernetes:helm.sh/v3:Release", {"chart": "oci://registry.k8s.io/kueue/charts/kueue"})
    llm_d_crds = resource("router-crds", "kubernetes:yaml/v2:ConfigFile",
                          {"file": "https://github.com/llm-d/llm-d-router/releases/download/v0.10.0/manifests.yaml"})
    gpu_nodes = resource("gpu-nodes", "aws:eks/nodeGroup:NodeGroup",
                         {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]})
    program = resource("worker-program", "kubernetes:core/v1:ConfigMap", {
        "metadata": {"name": "worker-program", "namespace": "batch"},
        "data": {"worker.py": "REDIS = 'queue.batch.svc.cluster.local:6379'"},
    })
    redis = resource("redis", "kubernetes:core/v1:Service", {"metadata": {"name": "queue", "namespace": "batch"}})
    worker = resource("worker", "kubernetes:apps/v1:Deployment", {
        "metadata": {"name": "worker", "namespace": "batch",
                     "labels": {"kueue.x-k8s.io/queue-name": "batch"}},
        "spec": {"template": {"spec": {"volumes": [{"name": "p", "configMap": {"name": "worker-program"}}]}}},
    })
    route = resource("route", "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute",
                     {"metadata": {"name": "m", "namespace": "inference"}, "spec": {"parentRefs": [{"name": "gw"}]}})
    prefetch = resource("prefetch", "kubernetes:core/v1:ConfigMap", {"metadata": {"name": "p", "namespace": "inference"}})
    rule = DependencyRule([kueue, llm_d_crds, gpu_nodes, program, redis, worker, route, prefetch])
    assert rule.why(worker, program, "depends_on") == "names this ConfigMap"
    assert rule.why(worker, redis, "depends_on") == "names this Service"   # by its DNS name, in the mounted program
    assert rule.why(worker, kueue, "depends_on") == "Kueue's webhook must see objects labelled for a queue"
    assert rule(kueue, gpu_nodes, "depends_on") is False        # Kueue's controller runs on the system nodes
    assert rule(prefetch, kueue, "depends_on") is False         # a ConfigMap is not admitted by Kueue
    assert rule(route, llm_d_crds, "depends_on") is False       # an HTTPRoute's CRD is the Gateway API's
    assert rule(resource("x", "kubernetes:core/v1:ConfigMap", input_dependencies=["kueue"]), kueue, "depends_on")


def test_a_first_replica_waits_for_its_node_and_weights(stacks):
    dev = stacks["dev"][2]["time_to_serving"]["models"][0]
    prod = {m["model"]: m for m in stacks["prod"][2]["time_to_serving"]["models"]}
    # dev's pool starts at zero nodes and its model at zero replicas: a scale-up on the first request.
    assert dev["scale_from_zero"] and dev["new_node"] and dev["first_replica"][0]["part"] == "gpu_node"
    # prod's two min-scale H100 nodes hold llama-70b-long: llama-70b's first replica waits for a third.
    assert {name: m["new_node"] for name, m in prod.items()} == {
        "llama-70b": True, "llama-70b-long": False, "llama-8b-fp8": False, "bge-embed": False,
    }
    for model in prod.values():
        parts = [p["part"] for p in model["first_replica"]]
        assert parts == ["gpu_node"] * model["new_node"] + [
            "image_pull", "weights_s3_gb_per_s", "weights_nvme_gb_per_s", "engine_warmup_cold"
        ]
        assert model["weights_load_seconds"]["nvme"] < model["weights_load_seconds"]["s3"]
        replica = sum(p["seconds"] for p in model["first_replica"])
        assert model["critical_path"][-1]["seconds"] == pytest.approx(replica, abs=0.2)
    # The 16-GPU model loads 140 GB: slower than the 8B and the embedder, though it needs no new node.
    assert prod["llama-70b-long"]["seconds"] > prod["llama-8b-fp8"]["seconds"] > prod["bge-embed"]["seconds"]


# ---------------------------------------------------------------------------------------------------- cost


def test_each_pool_states_its_nodes_prices_and_spot_discount(stacks):
    """Each pool's $/h are planning.cost's figures; its on-demand price is the dearest type's, its spot figure the
    dearest spot type's at the spot snapshot's discount for that type in the region (catalog/spot_prices.json)."""
    spec, _, plan = stacks["prod"]
    costs = {c.pool: c for c in stack_costs(spec)}
    for pool in plan["node_pools"]:
        prices = [on_demand_price(name, spec.region) for name in spec.pool(pool["name"]).instance_types]
        assert pool["on_demand_usd_per_node_hour"] == max(prices)
        capacity = spec.pool(pool["name"]).capacity
        assert (pool["spot"] is None) == (not capacity.spot)
        cost = costs[pool["name"]]
        assert pool["usd_per_hour"] == {"min": cost.min_usd_per_hour, "max": cost.max_usd_per_hour}
        assert pool["at_scale"]["max"]["on_demand_nodes"] + pool["at_scale"]["max"]["spot_nodes"] == pool["nodes"]["max"]
    h100 = next(p for p in plan["node_pools"] if p["name"] == "h100")
    discount = snapshot_spot_discount("p5.48xlarge", spec.region)
    assert h100["spot"]["assumed_discount"] == discount
    assert h100["spot"]["usd_per_node_hour"] == pytest.approx(55.04 * (1 - discount), abs=1e-3)
    assert "2025-11-30" in h100["spot"]["source"]
    # llama-70b-long takes two whole nodes and llama-70b's two 4-GPU replicas a third: min scale has two.
    assert {p["name"]: p["nodes_for_min_replicas"] for p in plan["node_pools"]} == {
        "h100": 3, "a100-mig": 1, "l40s": 2, "l40s-batch": 0,
    }


def test_models_with_traffic_get_dollars_per_million_output_tokens(stacks):
    spec, _, plan = stacks["prod"]
    rows = {row["model"]: row for row in plan["throughput"]["models"]}
    assert set(rows) == {m.name for m in spec.models if m.traffic is not None} == {"llama-70b", "llama-8b-fp8"}
    for name, row in rows.items():
        model = spec.model_service(name)
        estimate = service_estimate(model, PoolHardware(spec.pool(model.pool)), region=spec.region)
        assert row["usd_per_million_output_tokens"] == pytest.approx(estimate.usd_per_million_output_tokens, abs=1e-4)
        assert row["replicas_needed"] == estimate.replicas <= row["max_replicas"]
        assert row["at_traffic"]["itl_ms"] == pytest.approx(estimate.at_traffic.inter_token_seconds * 1000, abs=0.01)
    assert [a["name"] for a in plan["throughput"]["assumptions"]] == [a.name for a in ASSUMPTIONS]
    assert plan["throughput"]["accuracy"]["stated"] == out_of_sample().stated()
    for row in plan["throughput"]["models"]:
        assert row["confidence"]["text"].endswith("(out of sample)") and row["confidence"]["points"] >= 5
    assert stacks["dev"][2]["throughput"] == {"models": [], "assumptions": [], "accuracy": None}   # dev states no traffic


@pytest.fixture(scope="module")
def tokyo():
    """prod moved to ap-northeast-1, which offers each of its instance types at prices above us-east-1's."""
    prod = load_stack(STACKS, "prod")
    # Without prod's budget: Tokyo's spot discounts (the snapshot's, 29% off p5.48xlarge) put prod over it.
    spec = StackSpec.model_validate(prod.model_dump(mode="json", exclude_unset=True)
                                    | {"region": "ap-northeast-1", "budget": {}})
    recording = run_stack(spec)
    return spec, recording, build_plan(spec, recording)


def test_the_plan_and_the_budget_policy_price_every_node_in_the_stack_region(stacks, tokyo):
    """Pool $/h, the service's $/h and $/1M tokens, and the budget policy's total use one lookup with one region
    (the policy finds it on the recorded pulumi:providers:aws resource), so none of them can differ."""
    spec, recording, plan = tokyo
    east = stacks["prod"][2]
    for pool, east_pool in zip(plan["node_pools"], east["node_pools"], strict=True):
        dearest = max(on_demand_price(name, spec.region) for name in pool["instance_types"])
        assert pool["on_demand_usd_per_node_hour"] == dearest > east_pool["on_demand_usd_per_node_hour"]
    rows = {row["model"]: row for row in plan["throughput"]["models"]}
    for name, row in rows.items():
        model = spec.model_service(name)
        estimate = service_estimate(model, PoolHardware(spec.pool(model.pool)), region=spec.region)
        assert row["usd_per_hour"] == round(estimate.usd_per_hour, 2)
        assert row["usd_per_million_output_tokens"] == pytest.approx(estimate.usd_per_million_output_tokens, abs=1e-4)
    east_rows = {row["model"]: row for row in east["throughput"]["models"]}
    assert all(rows[name]["usd_per_hour"] > east_rows[name]["usd_per_hour"] for name in rows)
    total = plan["totals"]["usd_per_hour_max"]
    config = spec_policy_config(spec)
    config[budget_at_max_scale.name][MAX_USD_PER_HOUR] = total / 2
    resources = [r.as_dict() for r in recording.resources]
    (result,) = run_policies(resources, spec.environment, config, policies=[budget_at_max_scale])
    (violation,) = result.as_dict()["violations"]
    assert f"at max scale the node groups cost ${total:,.2f}/h" in violation["message"]
    assert "ap-northeast-1 on-demand prices" in violation["message"]


def test_the_text_plan_prints_costs_assumptions_and_times(stacks):
    _, _, plan = stacks["prod"]
    console = Console(record=True, width=240)
    print_plan(plan, console, engine_seconds=1.0)
    text = console.export_text()
    fp8 = next(row for row in plan["throughput"]["models"] if row["model"] == "llama-8b-fp8")
    off = f"{snapshot_spot_discount('p5.48xlarge', 'us-east-1'):.0%} off"   # h100's spot, from the snapshot
    for needle in (off, "$/1M out", f"${fp8['usd_per_million_output_tokens']:.4f}", "Time to serving",
                   "lower bound", "35m 43s",
                   "first ready replica", "h100: its models' min replicas need 3 nodes"):
        assert needle in text, needle
    words = " ".join(text.split())   # a note longer than the width wraps between words
    assert f"model: {fp8['confidence']['text']}" in words
    assert " ".join(plan["throughput"]["accuracy"]["stated"].split()) in words
    for assumption in ASSUMPTIONS:
        assert " ".join(f"{assumption.name} = {assumption.value}: {assumption.why}".split()) in words
    assert "every wait in the program is required" in text
