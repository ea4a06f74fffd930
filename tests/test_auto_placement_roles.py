"""`auto` placement within pool roles: an online service lands on a serving pool whose on-demand nodes hold its
minimum replicas, a batch-tier service prefers batch pools, and what auto chose is said with why."""

from __future__ import annotations

import copy

from stack_files import refusal

from inferstack.spec import StackSpec
from inferstack.validation import validate

SMALL = {"name": "chat", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq", "pool": "auto",
         "tensor_parallel": "auto", "max_model_len": 8192, "max_num_seqs": 4}
BASE = {
    "environment": "roles",
    "node_pools": [
        {"name": "l40s", "instance_types": ["g6e.xlarge"], "max_nodes": 2, "capacity": {"on_demand_base": 1}},
        # cheaper, and all spot: a batch pool need keep no on-demand node
        {"name": "spot-l4", "role": "batch", "instance_types": ["g6.xlarge"], "max_nodes": 4,
         "capacity": {"on_demand_base": 0}},
    ],
    "models": [SMALL],
}


def stack(models=None, pools=None) -> dict:
    spec = copy.deepcopy(BASE)
    if models is not None:
        spec["models"] = models
    for index, update in (pools or {}).items():
        spec["node_pools"][index].update(update)
    return spec


def placed(document: dict) -> dict[str, str]:
    return {m.name: m.pool for m in validate(StackSpec.model_validate(document)).stack.models}


def reasons(document: dict) -> dict[str, str]:
    """As the plan reads them: what validation kept of auto placement's choices."""
    validated = validate(StackSpec.model_validate(document))
    return dict(validated.auto_reasons)


def test_an_online_service_skips_the_cheaper_all_spot_batch_pool_and_says_so():
    """planning/minimum_capacity.py: an online service's minimum replicas run on on-demand nodes (a spot reclaim
    takes every spot node of a type at once); a batch pool may keep none, so auto leaves it out."""
    assert placed(stack()) == {"chat": "l40s"}
    why = reasons(stack())["chat"]
    assert why.startswith("auto chose pool 'l40s' (1 x nvidia.com/gpu a replica, $")
    assert "cheapest fit among pools 'l40s'" in why
    assert "left out batch pools 'spot-l4': an online service's minimum replicas need on-demand nodes" in why


def test_a_standard_service_may_take_the_batch_pool():
    assert placed(stack(models=[{**SMALL, "tier": "standard"}])) == {"chat": "spot-l4"}


def test_a_batch_tier_service_prefers_batch_pools_over_a_cheaper_serving_pool():
    cheap_serving = {0: {"instance_types": ["g6.xlarge"]}, 1: {"instance_types": ["g6e.xlarge"]}}
    batch = {**SMALL, "tier": "batch", "autoscaling": {"min_replicas": 0, "max_replicas": 1, "scale_to_zero": True}}
    assert placed(stack(models=[batch], pools=cheap_serving)) == {"chat": "spot-l4"}
    assert "a batch-tier service takes batch pools 'spot-l4' first" in reasons(stack(models=[batch], pools=cheap_serving))["chat"]
    assert placed(stack(models=[{**batch, "tier": "standard"}], pools=cheap_serving)) == {"chat": "l40s"}


def test_an_online_service_whose_serving_pools_have_no_on_demand_room_is_refused_at_its_pool_field():
    """The baseline rule of planning/minimum_capacity.py, applied while choosing: before, auto took the pool and
    the rule then blamed node_pools[0].capacity.on_demand_base, a pool the user never chose."""
    explicit = {**SMALL, "name": "first", "pool": "l40s", "tensor_parallel": 1}
    error = refusal(stack(models=[explicit, SMALL]))

    assert error.path == "models[1].pool"
    assert "keeps an online service's minimum replicas on on-demand nodes" in error.problem
    assert "'chat'" in error.problem and "('l40s')" in error.problem and "on-demand nodes: 'l40s' 1" in error.problem
    assert "raise capacity.on_demand_base" in error.fix and "models[1].pool" in error.fix


def test_an_online_service_with_only_batch_pools_is_refused_at_its_pool_field():
    document = stack(pools={0: {"role": "batch"}})
    error = refusal(document)

    assert error.path == "models[0].pool"
    assert "serving pools only, and the stack has none" in error.problem and "'l40s', 'spot-l4'" in error.problem
    assert "role 'serving'" in error.fix and "models[0].pool" in error.fix


def test_a_second_online_service_goes_where_on_demand_nodes_are_left():
    """Auto counts the online services it placed before: each serving pool keeps one on-demand node, so the two
    online services take one each, and neither the all-spot batch pool."""
    document = stack(models=[{**SMALL, "name": "first"}, {**SMALL, "name": "second", "max_num_seqs": 2}])
    document["node_pools"].append({"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 1,
                                   "capacity": {"on_demand_base": 1}})
    chosen = placed(document)
    assert sorted(chosen.values()) == ["l4", "l40s"]


def test_the_printed_plan_says_what_auto_chose_and_why(tmp_path, capsys):
    """The plan prints the reason auto placement gives, under its placements."""
    from inferstack.cli import main

    (tmp_path / "roles.py").write_text("from inferstack.spec import StackSpec\n"
                                       f"stack = StackSpec.model_validate({stack()!r})\n")
    assert main(["plan", "roles", "--stacks-dir", str(tmp_path)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "chat: auto chose pool 'l40s'" in printed and "it left out batch pools 'spot-l4'" in printed
