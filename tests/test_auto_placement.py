"""`auto` pool / tensor_parallel / mig_profile: the cheapest device of the stack's pools that fits."""

from __future__ import annotations

import copy
import itertools

import pytest

from inferstack.planning.auto_placement import candidates
from inferstack.planning.sizing import fit
from inferstack.spec import SpecError, StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.validation import validate

BASE = {
    "environment": "auto",
    "node_pools": [
        {"name": "mig", "instance_types": ["p4de.24xlarge"], "max_nodes": 1, "capacity": {"on_demand_base": 1},
         "gpu_sharing": {"mode": "mig", "layout": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}},
        {"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 2, "capacity": {"on_demand_base": 2}},
        {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 2, "capacity": {"on_demand_base": 1}},
    ],
    "models": [
        {"name": "embed", "model": "BAAI/bge-large-en-v1.5", "pool": "auto", "mig_profile": "auto", "max_model_len": 512},
        {"name": "big", "model": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "quantization": "awq",
         "pool": "auto", "tensor_parallel": "auto", "max_model_len": 32768, "max_num_seqs": 16},
        {"name": "small", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq", "pool": "auto",
         "tensor_parallel": "auto", "mig_profile": "auto", "max_model_len": 8192, "max_num_seqs": 4},
    ],
}


def stack(**changes) -> StackSpec:
    """BASE with `changes`, as written, once every layer accepts it."""
    spec = copy.deepcopy(BASE)
    for index, update in changes.get("models", {}).items():
        spec["models"][index].update(update)
    for index, update in changes.get("pools", {}).items():
        spec["node_pools"][index].update(update)
    return validate(StackSpec.model_validate(spec)).written


def placed(spec: StackSpec) -> dict[str, tuple]:
    return {m.name: (m.pool, m.tensor_parallel, m.mig_profile) for m in validate(spec).stack.models}


def test_each_service_gets_the_cheapest_device_that_fits():
    assert placed(stack()) == {
        "embed": ("mig", 1, "1g.10gb"),     # 1/7 of an A100 beats a whole L4
        "big": ("h100", 4, None),           # TP2 leaves too little KV cache for 16 x 32k tokens
        "small": ("l4", 1, None),
    }
    assert validate(stack()).auto_placed == ("embed", "big", "small")


def test_the_choice_is_the_cheapest_of_all_feasible_combinations():
    spec = stack()
    pools = {p.name: PoolHardware(p) for p in spec.node_pools}
    options = [candidates(m, pools, spec.region) for m in spec.models]
    cheapest = min(sum(c.usd_per_hour for c in combo) for combo in itertools.product(*options))
    chosen = {m.name: m for m in validate(spec).stack.models}
    total = sum(next(c.usd_per_hour for c in opts if c.model == chosen[c.model.name]) for opts in options)
    assert total == pytest.approx(cheapest)


def test_every_auto_placement_fits_by_sizing():
    spec = validate(stack()).stack
    for model in spec.models:
        result = fit(model, PoolHardware(spec.pool(model.pool)))
        assert result.fits and result.max_concurrency >= (model.max_num_seqs or 1), model.name


def test_small_services_pack_into_slices_until_they_run_out():
    # two 1g.10gb slices per GPU x 8 GPUs = 16 replicas on the cheapest slice
    spec = stack(models={0: {"autoscaling": {"min_replicas": 1, "max_replicas": 16}}})
    assert placed(spec)["embed"] == ("mig", 1, "1g.10gb")
    # one 1g.10gb per GPU = 8 slots; 9 replicas skip every option too small for all of them
    # (8 slices, 2 L4 nodes, 8 x 2g.20gb, 8 x 3g.40gb) and take single H100s beside the 70B
    one_small_slice = {"gpu_sharing": {"mode": "mig", "layout": {"1g.10gb": 1, "2g.20gb": 1, "3g.40gb": 1}}}
    spec = stack(pools={0: one_small_slice}, models={0: {"autoscaling": {"min_replicas": 1, "max_replicas": 9}}})
    assert placed(spec)["embed"] == ("h100", 1, None)


def test_fixed_fields_are_kept_and_only_the_rest_is_chosen():
    spec = stack(models={1: {"pool": "h100", "tensor_parallel": 8}, 2: {"pool": "mig"}})
    assert placed(spec)["big"] == ("h100", 8, None)
    assert placed(spec)["small"] == ("mig", 1, "2g.20gb")


def test_explicit_services_take_their_capacity_first():
    spec = stack(models={2: {"pool": "l4", "tensor_parallel": 1, "mig_profile": None,
                             "autoscaling": {"min_replicas": 2, "max_replicas": 2}}})
    # both L4 nodes belong to 'small', so a second small service cannot land there
    extra = copy.deepcopy(BASE)
    extra["models"][2].update(pool="l4", tensor_parallel=1, mig_profile=None, autoscaling={"min_replicas": 2, "max_replicas": 2})
    extra["models"].append({"name": "small-2", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq",
                            "pool": "auto", "max_model_len": 8192, "max_num_seqs": 4})
    assert placed(StackSpec.model_validate(extra))["small-2"][0] != "l4"
    assert placed(spec)["small"] == ("l4", 1, None)


def test_a_service_that_fits_nowhere_is_refused_with_the_need_and_the_fix():
    with pytest.raises(SpecError) as caught:
        stack(models={1: {"model": "meta-llama/Llama-3.1-70B-Instruct", "quantization": "none",
                          "max_model_len": 131072, "max_num_seqs": 64}})
    error = caught.value
    assert error.path == "models[1].pool"
    assert "no device in pools 'mig', 'l4', 'h100'" in error.problem and "131072 tokens x 64 sequences" in error.problem
    assert "quantize the model" in error.fix


def test_not_enough_room_names_max_replicas():
    with pytest.raises(SpecError) as caught:
        stack(models={1: {"autoscaling": {"min_replicas": 1, "max_replicas": 5}}})
    assert caught.value.path == "models[1].autoscaling.max_replicas"
    assert "cannot hold 5 replicas" in caught.value.problem


def test_the_program_deploys_the_resolved_placement():
    from inferstack.engine import run_stack
    from inferstack.engine.render import kubernetes_objects

    objects = kubernetes_objects(run_stack(stack()))
    embed = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "embed")
    limits = embed["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == "1"


def test_a_price_the_spec_states_ranks_the_pools():
    """A negotiated on-demand rate (budget.prices) is what auto placement compares: at $1/h an eighth of an H100
    node costs less than a whole L4, so the small service moves to the H100 pool."""
    assert placed(stack())["small"] == ("l4", 1, None)
    spec = copy.deepcopy(BASE)
    spec["budget"] = {"prices": [{"instance_type": "p5.48xlarge", "purchase": "on_demand", "usd_per_hour": 1.0,
                                  "source": "negotiated rate (test)"}]}
    written = validate(StackSpec.model_validate(spec)).written
    assert placed(written)["small"][0] == "h100"
    pools = {p.name: PoolHardware(p) for p in written.node_pools}
    (best, *_) = candidates(written.models[2], pools, written.region, budget=written.budget)
    assert best.model.pool == "h100" and best.usd_per_hour < 1.0
