"""Auto placement: the heuristic finds the exhaustive optimum, every replica fits by sizing's own
arithmetic, packing beats one model per GPU, and 200 services still plan no dearer than one model per GPU."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict

import pytest

from inferstack.planning import sizing
from inferstack.catalog import INSTANCE_TYPES, gpu, on_demand_price
from inferstack.planning.demand import (
    FIXED_MIX,
    PRICE_SCALE,
    Demand,
    Placement,
    PlacementError,
    PoolOption,
    catalog_options,
)
from inferstack.planning.placement import plan_placement
from inferstack.planning.placement_yardsticks import exhaustive_placement, naive_placement
from inferstack.spec import MigSharing, ModelServiceSpec, NodePoolSpec, NoSharing
from inferstack.spec.pools import PoolHardware

# (model id, quantization): the catalog's models at the precisions people serve them in.
MENU = [
    ("meta-llama/Llama-3.2-3B-Instruct", "none"),
    ("meta-llama/Llama-3.1-8B-Instruct", "fp8"),
    ("meta-llama/Llama-3.1-8B-Instruct", "none"),
    ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "awq"),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "awq"),
    ("BAAI/bge-large-en-v1.5", "none"),
    ("Qwen/Qwen3-Embedding-0.6B", "none"),
    ("Qwen/Qwen3-32B", "fp8"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "none"),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "gptq"),
]
REGION = "us-east-1"  # whose on-demand prices the options cost
CATALOG = catalog_options(REGION)


def service(name: str, model: str, **fields) -> ModelServiceSpec:
    return ModelServiceSpec(**{"name": name, "model": model, "pool": "auto", **fields})


def random_service(rng: random.Random, name: str) -> ModelServiceSpec:
    model, quantization = rng.choice(MENU)
    context = 512 if "bge" in model else rng.choice([2048, 4096, 8192, 16384])
    return service(name, model, quantization=quantization, max_model_len=context,
                   max_num_seqs=rng.choice([1, 4, 8, 16, 32]))


def random_mix(seed: int) -> tuple[list[Demand], list[PoolOption]]:
    """Up to 8 replicas of up to 5 services; the fixed mix's pools or a few catalog types, some capped
    by max_nodes; some services pinned to two of the pools."""
    rng = random.Random(seed)
    pools = FIXED_MIX.options() if rng.random() < 0.4 else rng.sample(CATALOG, rng.randint(2, 8))
    pools = [dataclasses.replace(p, max_nodes=rng.choice([None, None, 1, 2])) for p in pools]
    demands = []
    for i in range(rng.randint(1, 5)):
        demand = Demand.from_spec(random_service(rng, f"m{i}"), replicas=rng.choice([1, 1, 2, 3]))
        if rng.random() < 0.2:
            demand = dataclasses.replace(demand, allowed=frozenset(rng.sample([p.name for p in pools], min(2, len(pools)))))
        demands.append(demand)
    while sum(d.replicas for d in demands) > 8:
        demands.pop()
    return demands, pools


def score(placement: Placement) -> tuple[float, int]:
    return placement.usd_per_hour, placement.total_gpus


# ------------------------------------------------------------------------------------------ the mix


def test_fixed_mix_plan_is_the_exhaustive_optimum_and_beats_one_model_per_gpu():
    demands, pools = FIXED_MIX.demands(), FIXED_MIX.options()
    plan = plan_placement(demands, pools)
    assert score(plan) == score(exhaustive_placement(demands, pools))
    naive = naive_placement(demands, pools)
    assert plan.usd_per_hour < naive.usd_per_hour and plan.total_gpus < naive.total_gpus


def test_fixed_mix_packs_small_models_onto_one_mig_gpu():
    plan = plan_placement(FIXED_MIX.demands(), FIXED_MIX.options())
    slices_per_gpu = defaultdict(set)
    for a in plan.assignments:
        if a.mig_profile:
            slices_per_gpu[(a.pool, a.node, a.gpus)].add(a.demand)
    assert max(len(models) for models in slices_per_gpu.values()) >= 3


# ---------------------------------------------------------------------------------------- validity


def sizing_fit(demand: Demand, pool: PoolOption, tensor_parallel: int, mig_profile: str | None) -> sizing.Fit:
    """What sizing itself says of the replica, on a pool spec built like a user's."""
    sharing = MigSharing(mode="mig", layout={mig_profile: 1}) if mig_profile else NoSharing()
    hardware = PoolHardware(NodePoolSpec(name=pool.name, instance_types=[pool.instance_type], max_nodes=1,
                                         gpu_sharing=sharing))
    model = demand.model.model_copy(update={"tensor_parallel": tensor_parallel, "mig_profile": mig_profile, "pool": pool.name})
    assert sizing.parallelism_problem(model) is None
    return sizing.fit(model, hardware)


def assert_valid(placement: Placement, demands: list[Demand], pools: list[PoolOption]) -> None:
    by_name = {d.name: d for d in demands}
    pool_of = {p.name: p for p in pools}
    assert sorted((a.demand, a.replica) for a in placement.assignments) == sorted(
        (d.name, r) for d in demands for r in range(d.replicas)
    )
    whole_gpus: dict[tuple[str, int, int], str] = {}
    slices: dict[tuple[str, int, int], list[str]] = defaultdict(list)
    for a in placement.assignments:
        demand, pool = by_name[a.demand], pool_of[a.pool]
        assert demand.allowed is None or a.pool in demand.allowed
        assert sizing_fit(demand, pool, a.tensor_parallel, a.mig_profile).max_concurrency >= demand.concurrency
        assert a.node < placement.nodes[a.pool]
        assert all(0 <= g < pool.gpus_per_node for g in a.gpus)
        if a.mig_profile:
            assert pool.mig and len(a.gpus) == 1
            slices[(a.pool, a.node, a.gpus[0])].append(a.mig_profile)
        else:
            assert not pool.mig and len(a.gpus) == a.tensor_parallel
            for g in a.gpus:
                assert whole_gpus.setdefault((a.pool, a.node, g), a.demand) == a.demand, "a GPU given twice"
    for (pool_name, _, _), profiles in slices.items():
        card = pool_of[pool_name].gpu
        chosen = [card.mig_profile(p) for p in profiles]
        assert sum(p.compute_slices for p in chosen) <= card.mig_compute_slices
        assert sum(p.memory_slices for p in chosen) <= card.mig_memory_slices
        assert all(profiles.count(p.name) <= p.max_count for p in chosen)
    for use in placement.pools:
        pool = pool_of[use.pool]
        # The planner counts money in 1/PRICE_SCALE dollars per node-hour.
        assert use.usd_per_hour == pytest.approx(use.nodes * pool.usd_per_hour, abs=use.nodes / PRICE_SCALE)
        assert pool.max_nodes is None or use.nodes <= pool.max_nodes


def test_every_replica_of_the_fixed_mix_fits_by_sizing():
    demands, pools = FIXED_MIX.demands(), FIXED_MIX.options()
    for planner in (plan_placement, exhaustive_placement, naive_placement):
        assert_valid(planner(demands, pools), demands, pools)


@pytest.mark.parametrize("seed", range(60))
def test_plan_equals_the_exhaustive_optimum_on_random_small_mixes(seed):
    demands, pools = random_mix(seed)
    try:
        best = exhaustive_placement(demands, pools)
    except PlacementError:
        with pytest.raises(PlacementError):
            plan_placement(demands, pools)
        return
    plan = plan_placement(demands, pools)
    assert score(plan) == score(best)
    assert_valid(plan, demands, pools)
    assert_valid(best, demands, pools)


def test_mig_gpu_holds_at_most_seven_one_slice_models():
    pools = [PoolOption.from_instance_type("h100", "p5.4xlarge", region=REGION, mig=True)]
    demands = [Demand.from_spec(service(f"e{i}", "BAAI/bge-large-en-v1.5", max_model_len=512)) for i in range(8)]
    plan = plan_placement(demands, pools)
    assert {a.mig_profile for a in plan.assignments} == {"1g.10gb"}
    assert plan.nodes == {"h100": 2}
    assert_valid(plan, demands, pools)


def test_pinned_pool_and_tensor_parallel_are_kept():
    pools = FIXED_MIX.options()
    pinned = service("chat", "meta-llama/Llama-3.1-8B-Instruct", quantization="fp8", pool="h100", tensor_parallel=2)
    (assignment,) = plan_placement([Demand.from_spec(pinned)], pools).assignments
    assert (assignment.pool, assignment.tensor_parallel) == ("h100", 2)


def test_max_nodes_caps_a_pool():
    pools = [
        PoolOption.from_instance_type("l4", "g6.xlarge", region=REGION, max_nodes=2),
        PoolOption.from_instance_type("l40s", "g6e.xlarge", region=REGION),
    ]
    demands = [Demand.from_spec(service(f"m{i}", "meta-llama/Llama-3.2-3B-Instruct", max_model_len=4096)) for i in range(3)]
    plan = plan_placement(demands, pools)
    assert plan.nodes == {"l4": 2, "l40s": 1}
    with pytest.raises(PlacementError, match=r"max_nodes \(l4 2\)"):
        plan_placement(demands, pools[:1])


# ------------------------------------------------------------------------------------------ errors


def test_a_model_that_fits_nowhere_is_named_with_its_need_and_the_largest_option():
    huge = service("giant", "meta-llama/Llama-3.1-70B-Instruct", max_model_len=131072, max_num_seqs=8)
    pools = [
        PoolOption.from_instance_type("l4", "g6.xlarge", region=REGION),
        PoolOption.from_instance_type("l40s", "g6e.12xlarge", region=REGION),
    ]
    with pytest.raises(PlacementError) as caught:
        plan_placement([Demand.from_spec(huge)], pools)
    message = str(caught.value)
    assert "'giant' fits nowhere" in message
    assert "141.2 GB of weights + 343.6 GB of KV cache (131072 tokens x 8 sequences)" in message
    assert "the largest option, pool 'l40s' (g6e.12xlarge, tensor parallel 4 over L40Ss" in message


def test_from_spec_leaves_unset_placement_to_the_planner():
    free = Demand.from_spec(service("a", "meta-llama/Llama-3.2-3B-Instruct", autoscaling={"min_replicas": 2, "max_replicas": 3}))
    assert (free.allowed, free.tensor_parallel, free.mig_profile, free.replicas) == (None, None, None, 2)
    fixed = Demand.from_spec(ModelServiceSpec(name="b", model="BAAI/bge-large-en-v1.5", pool="mig", mig_profile="1g.10gb"))
    assert (fixed.allowed, fixed.mig_profile) == (frozenset({"mig"}), "1g.10gb")


def test_catalog_options_offer_mig_only_on_mig_gpus():
    mig_types = {o.instance_type for o in CATALOG if o.mig}
    assert mig_types == {
        name for name, it in INSTANCE_TYPES.items() if it.gpu.mig_capable and on_demand_price(name, REGION) is not None
    }
    assert gpu("H100").mig_capable and "p5.4xlarge" in mig_types


@pytest.mark.parametrize("region", ["us-east-1", "eu-north-1", "ap-south-1"])
def test_catalog_options_are_the_types_priced_in_the_region_at_its_prices(region):
    options = catalog_options(region)
    assert {o.instance_type for o in options} == {n for n in INSTANCE_TYPES if on_demand_price(n, region) is not None}
    assert all(o.usd_per_hour == on_demand_price(o.instance_type, region) for o in options)


def test_an_option_unpriced_in_its_region_needs_a_stated_price():
    # EC2 offers p5.4xlarge in eu-north-1, but the catalog's sources give no price there.
    with pytest.raises(PlacementError, match=r"p5\.4xlarge has no price in eu-north-1 in the catalog"):
        PoolOption.from_instance_type("h100", "p5.4xlarge", region="eu-north-1")
    stated = PoolOption.from_instance_type("h100", "p5.4xlarge", region="eu-north-1", usd_per_hour=7.5)
    assert stated.usd_per_hour == 7.5


# ------------------------------------------------------------------------------------------- scale


def test_plan_places_200_services_no_dearer_than_one_model_per_gpu():
    """At 200 services the planner still places every replica and never costs more than the naive
    placement. How long it takes is `make bench`'s business (its placement-200 line), not a test's."""
    rng = random.Random(7)
    demands = [Demand.from_spec(random_service(rng, f"s{i}")) for i in range(200)]
    plan = plan_placement(demands, CATALOG)
    for demand in demands:
        assert len(plan.of(demand.name)) == demand.replicas, demand.name
    assert plan.usd_per_hour <= naive_placement(demands, CATALOG).usd_per_hour
