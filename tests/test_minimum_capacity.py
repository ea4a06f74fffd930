"""Capacity at minimum scale, refused at spec time (components/planning/minimum_capacity.py).

Upstream rules the checks encode:
- EKS User Guide, managed-node-groups "Managed node group capacity types": a SPOT group's nodes are
  interrupted with a two-minute notice when EC2 needs the capacity back, all instances of a capacity pool at
  once; ON_DEMAND nodes are not. So an online service's minimum replicas go on on-demand/reserved groups.
- EKS API `NodegroupScalingConfig` (aws/aws-sdk: eks UpdateNodegroupConfig): EKS itself never changes
  `desiredSize`; only a node autoscaler does (kubernetes/autoscaler cluster-autoscaler/FAQ.md "How does
  scale-up work?"). inferstack sets desiredSize to minSize, so without an autoscaler a pool at zero stays empty.
"""

from __future__ import annotations

import copy
import json

import pytest
from stack_files import DEV, PROD, edited, refusal, refused_by_render_and_plan

from inferstack.planning.node_groups import on_demand_nodes_at_min, plan_node_groups
from inferstack.planning.pool_capacity import nodes_for_replicas
from inferstack.spec import StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.validation import validate

QWEN = {"name": "qwen", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq", "pool": "l4",
        "max_model_len": 8192}


def stack(pool: dict, *models: dict, **top) -> dict:
    return {"environment": "test", "node_pools": [{"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 4,
                                                   **pool}],
            "models": [copy.deepcopy(m) for m in models], **top}


@pytest.mark.parametrize(
    ("pool", "models", "path", "problem", "fix"),
    [
        pytest.param(
            {"capacity": {"on_demand_base": 0}}, [QWEN], "node_pools[0].capacity.on_demand_base",
            "pool 'l4' keeps 0 on-demand nodes at minimum scale, but the minimum replicas of its online services "
            "qwen (1 replica) need 1 node of g6.xlarge: the rest would run on spot",
            "raise capacity.on_demand_base to 1", id="spot-only pool",
        ),
        pytest.param(
            {"capacity": {"on_demand_base": 1}},
            [QWEN, {**QWEN, "name": "qwen-b", "autoscaling": {"min_replicas": 2, "max_replicas": 2}}],
            "node_pools[0].capacity.on_demand_base",
            "qwen (1 replica), qwen-b (2 replicas) need 3 nodes of g6.xlarge", "raise capacity.on_demand_base to 3",
            id="services sharing a pool add up",
        ),
        pytest.param(
            {"min_nodes": 0, "capacity": {"on_demand_base": 0, "spot": False}}, [QWEN], "node_pools[0].min_nodes",
            "keeps 0 on-demand nodes at minimum scale", "raise min_nodes to 1", id="on-demand pool at zero",
        ),
        pytest.param(
            {"capacity": {"on_demand_base": 1}, "gpu_sharing": {"mode": "time_slicing", "replicas": 2}},
            [{**QWEN, "autoscaling": {"min_replicas": 3, "max_replicas": 4}}], "node_pools[0].capacity.on_demand_base",
            "qwen (3 replicas) need 2 nodes of g6.xlarge", "raise capacity.on_demand_base to 2", id="shared GPUs",
        ),
    ],
)
def test_online_minimum_replicas_beyond_the_on_demand_baseline_are_refused(pool, models, path, problem, fix):
    error = refusal(stack(pool, *models))
    assert error.path == path
    assert problem in error.problem
    assert fix in error.fix and "tier to 'standard'" in error.fix


def test_a_fix_past_max_nodes_raises_max_nodes_too_and_then_validates():
    """spec/checks.py min_max refuses min_nodes or on_demand_base above max_nodes, so "raise min_nodes to 4" on a
    pool of at most 2 nodes, whose two services each fit it alone, is a fix the spec would refuse (issue 26, item 7): the fix names max_nodes, and the
    spec with both raised is accepted."""
    models = [{**QWEN, "name": name, "autoscaling": {"min_replicas": 2, "max_replicas": 2}} for name in ("a", "b")]
    error = refusal(stack({"max_nodes": 2, "min_nodes": 1, "capacity": {"on_demand_base": 0, "spot": False}}, *models))
    assert error.path == "node_pools[0].min_nodes"
    assert "raise max_nodes and min_nodes to 4 (max_nodes is 2)" in error.fix
    validate(StackSpec.model_validate(
        stack({"max_nodes": 4, "min_nodes": 4, "capacity": {"on_demand_base": 0, "spot": False}}, *models)))


@pytest.mark.parametrize(
    ("pool", "model"),
    [
        pytest.param({"capacity": {"on_demand_base": 0}}, {**QWEN, "tier": "standard"}, id="standard tier on spot"),
        pytest.param({"capacity": {"on_demand_base": 2}},
                     {**QWEN, "autoscaling": {"min_replicas": 2, "max_replicas": 4}}, id="baseline holds the minimum"),
        pytest.param({"min_nodes": 1, "capacity": {"on_demand_base": 0, "spot": False}}, QWEN,
                     id="an on-demand pool's min_nodes"),
    ],
)
def test_a_baseline_that_holds_the_minimum_is_accepted(pool, model):
    validate(StackSpec.model_validate(stack(pool, model)))


def test_the_baseline_is_the_node_groups_the_aws_layer_creates():
    """One source: the on-demand and reserved groups plan_node_groups makes, at their min_size."""
    spec = validate(StackSpec.model_validate(stack({"min_nodes": 3, "capacity": {"on_demand_base": 2}}, QWEN))).written
    pool = spec.node_pools[0]
    groups = {g.capacity_type: g.min_size for g in plan_node_groups(pool)}
    assert groups == {"ON_DEMAND": 2, "SPOT": 1}
    assert on_demand_nodes_at_min(pool) == 2


def test_nodes_for_replicas_counts_the_scarcest_resource_of_a_mig_pool():
    """Every node offers each MIG profile of the layout; the profile that runs out first decides."""
    validated = validate(StackSpec.model_validate({
        "environment": "test",
        "node_pools": [{"name": "mig", "instance_types": ["p4de.24xlarge"], "max_nodes": 2,
                        "capacity": {"on_demand_base": 2},
                        "gpu_sharing": {"mode": "mig", "layout": {"3g.40gb": 1, "1g.10gb": 2}}}],
        "models": [
            {"name": "embed", "model": "BAAI/bge-large-en-v1.5", "pool": "mig", "mig_profile": "1g.10gb",
             "max_model_len": 512, "autoscaling": {"min_replicas": 16, "max_replicas": 16}},
            {"name": "small", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq", "pool": "mig",
             "mig_profile": "3g.40gb", "max_model_len": 8192, "autoscaling": {"min_replicas": 9, "max_replicas": 9}},
        ],
    }))
    hardware = PoolHardware(validated.written.node_pools[0])
    models = validated.stack.models
    assert hardware.resources_per_node == {"nvidia.com/mig-3g.40gb": 8, "nvidia.com/mig-1g.10gb": 16}
    assert nodes_for_replicas([(models[0], 16)], hardware) == 1
    assert nodes_for_replicas([(models[0], 16), (models[1], 9)], hardware) == 2


@pytest.mark.parametrize(
    ("pool", "path"),
    [
        pytest.param({"min_nodes": 0, "capacity": {"on_demand_base": 0}}, "node_pools[0].min_nodes", id="spot at zero"),
        pytest.param({"min_nodes": 0, "capacity": {"on_demand_base": 0, "spot": False}}, "node_pools[0].min_nodes",
                     id="on-demand at zero"),
    ],
)
def test_pools_at_zero_without_a_node_autoscaler_are_refused(pool, path):
    error = refusal(stack(pool, {**QWEN, "tier": "batch"}, platform={"node_autoscaler": "none"}))
    assert error.path == path
    assert "0 with platform.node_autoscaler 'none': nothing adds nodes to pool 'l4'" in error.problem
    assert "platform.node_autoscaler to 'cluster-autoscaler'" in error.fix


def test_a_pool_that_starts_with_its_nodes_needs_no_node_autoscaler():
    spec = validate(StackSpec.model_validate(
        stack({"capacity": {"on_demand_base": 1}}, QWEN, platform={"node_autoscaler": "none"}))).written
    assert spec.platform.node_autoscaler == "none"


# --------------------------------------------------------------------------------- through the CLI


ONLINE_DEV = (('tier="standard"', 'tier="online"'),
              ("min_replicas=0, max_replicas=2, scale_to_zero=True", "min_replicas=1, max_replicas=2"))


@pytest.mark.parametrize(
    ("edits", "path"),
    [
        pytest.param(ONLINE_DEV, "node_pools[0].capacity.on_demand_base", id="dev's spot pool serving online"),
        pytest.param((("budget=", 'platform={"node_autoscaler": "none"},\n    budget='),), "node_pools[0].min_nodes",
                     id="dev without a node autoscaler"),
    ],
)
def test_the_cli_refuses_before_anything_renders(tmp_path, edits, path):
    stack_file = tmp_path / "dev.py"
    stack_file.write_text(edited(DEV, *edits))
    message = refused_by_render_and_plan(stack_file, tmp_path / "out")
    assert f"{path}:" in message and "To fix:" in message


# ---------------------------------------------------------------------------------- at max scale


def test_the_plan_warns_when_a_pools_services_cannot_all_reach_max_replicas(tmp_path, capsys):
    """Not refused: services sharing a pool may overcommit its max on purpose, but what cannot run at once is
    said. cluster-autoscaler never grows a group beyond its maxSize (kubernetes/autoscaler FAQ.md), so the
    replicas beyond it stay pending."""
    from inferstack.cli import main

    # prod's h100 pool at 6 nodes: llama-70b 6 replicas x 4 GPUs + llama-70b-long 2 x 16 = 56 GPUs, 8 a node
    stack_file = tmp_path / "prod.py"
    stack_file.write_text(edited(PROD, ("max_nodes=7,                                          # both", "max_nodes=6,  #")))
    assert main(["plan", str(stack_file), "--json"]) == 0
    pools = {p["name"]: p for p in json.loads(capsys.readouterr().out)["node_pools"]}
    assert (pools["h100"]["nodes_for_max_replicas"], pools["h100"]["nodes"]["max"]) == (7, 6)
    assert pools["l40s"]["nodes_for_max_replicas"] <= pools["l40s"]["nodes"]["max"]
    assert main(["plan", str(stack_file)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "h100: its models at max replicas need 7 nodes, max_nodes is 6: they cannot all scale to max at once" in text
    assert "l40s: its models at max replicas" not in text
    assert main(["plan", "prod"]) == 0
    assert "at max replicas need" not in capsys.readouterr().out  # the shipped stack holds both at max
