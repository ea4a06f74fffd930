"""Fill in `auto` pool, tensor_parallel and mig_profile of model services from the stack's own pools.

Each auto service takes the cheapest device that holds its weights plus the KV cache for its stated
context x concurrency (max_model_len x max_num_seqs, or one sequence), priced as its share of a node
(whole GPUs, a MIG slice by compute slices, or a time-sliced/MPS share), within what the pool can
still hold at max scale after the services placed explicitly. Larger services choose first, so small
ones pack into the slices and shares that are left. `inferstack.planning.placement` is the free-form planner
(it also chooses node types and MIG layouts); here the pools and their layouts are given by the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.catalog import on_demand_price
from inferstack.planning.sizing import fit, parallelism_problem, stated_sequences, weights_bytes
from inferstack.spec.errors import SpecError, quoted
from inferstack.spec import AUTO, MigSharing, ModelServiceSpec, MpsSharing, StackSpec, TimeSlicing
from inferstack.spec.pools import WHOLE_GPU, PoolHardware

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Candidate:
    model: ModelServiceSpec     # the service with pool, tensor_parallel and mig_profile filled in
    resource: str               # what each replica requests
    count: int                  # how many of it per replica
    usd_per_hour: float         # the replica's share of its node(s)
    memory_bytes: int           # device memory it occupies (the tie-break: smaller first)


def is_auto(model: ModelServiceSpec) -> bool:
    return AUTO in (model.pool, model.tensor_parallel, model.mig_profile)


def _share_of_node(hardware: PoolHardware, candidate: ModelServiceSpec) -> float:
    """Fraction of one node a replica takes (times pipeline stages for multi-node replicas)."""
    sharing = hardware.spec.gpu_sharing
    per_gpu = 1 / hardware.gpus_per_node
    if isinstance(sharing, MigSharing):
        profile = hardware.gpu.mig_profile(candidate.mig_profile)
        return per_gpu * profile.compute_slices / hardware.gpu.mig_compute_slices
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        return per_gpu / sharing.replicas
    return per_gpu * candidate.gpus_per_replica


def _shapes(model: ModelServiceSpec, hardware: PoolHardware) -> list[dict]:
    """The (tensor_parallel, mig_profile) choices the pool allows, honouring fields the spec fixed."""
    sharing = hardware.spec.gpu_sharing
    if isinstance(sharing, MigSharing):
        if model.tensor_parallel not in (AUTO, 1) or model.pipeline_parallel > 1 or model.data_parallel > 1:
            return []
        profiles = list(sharing.layout) if model.mig_profile == AUTO else [model.mig_profile]
        return [{"tensor_parallel": 1, "mig_profile": p} for p in profiles if p in sharing.layout]
    if model.mig_profile not in (AUTO, None):
        return []
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        ok = model.tensor_parallel in (AUTO, 1) and model.pipeline_parallel == 1 and model.data_parallel == 1
        return [{"tensor_parallel": 1, "mig_profile": None}] if ok else []
    # A pod holds a tensor-parallel group per data-parallel rank on its node.
    sizes = [s for s in TENSOR_PARALLEL_SIZES
             if hardware.gpus_per_node % s == 0 and s * model.data_parallel_per_node <= hardware.gpus_per_node]
    if model.tensor_parallel != AUTO:
        sizes = [model.tensor_parallel] if model.tensor_parallel in sizes else []
    return [{"tensor_parallel": tp, "mig_profile": None} for tp in sizes]


def candidates(model: ModelServiceSpec, pools: dict[str, PoolHardware], region: str) -> list[Candidate]:
    """Every placement of `model` on the stack's pools that fits, cheapest first at on-demand prices in `region`
    (a pool unpriced there is no candidate)."""
    names = list(pools) if model.pool == AUTO else [model.pool]
    found = []
    for name in names:
        hardware = pools[name]
        price = on_demand_price(hardware.primary.name, region)
        if price is None:
            continue
        for shape in _shapes(model, hardware):
            candidate = model.model_copy(update={"pool": name, **shape})
            if parallelism_problem(candidate) is not None:
                continue
            result = fit(candidate, hardware)
            if not result.fits:
                continue
            resource = hardware.resource_for_slice(candidate.mig_profile)
            found.append(
                Candidate(
                    model=candidate,
                    resource=resource,
                    count=candidate.gpus_per_replica if resource == WHOLE_GPU else 1,
                    usd_per_hour=round(price * _share_of_node(hardware, candidate), 6),
                    memory_bytes=result.memory_bytes,
                )
            )
    return sorted(found, key=lambda c: (c.usd_per_hour, c.memory_bytes, names.index(c.model.pool)))


def resolve_models(spec: StackSpec, pools: dict[str, PoolHardware]) -> tuple[ModelServiceSpec, ...]:
    """The stack's services with every `auto` field decided; raises SpecError when one cannot be placed."""
    if not any(is_auto(m) for m in spec.models):
        return tuple(spec.models)
    free = {name: dict(hardware.max_resources) for name, hardware in pools.items()}
    for model in spec.models:
        if not is_auto(model) and model.pool in pools:
            resource = pools[model.pool].resource_for_slice(model.mig_profile)
            count = model.gpus_per_replica if resource == WHOLE_GPU else 1
            free[model.pool][resource] = free[model.pool].get(resource, 0) - count * model.autoscaling.max_replicas
    resolved = {i: m for i, m in enumerate(spec.models) if not is_auto(m)}
    auto = sorted((i for i, m in enumerate(spec.models) if is_auto(m)), key=lambda i: -weights_bytes(spec.models[i]))
    for index in auto:
        model = spec.models[index]
        options = candidates(model, pools, spec.region)
        replicas = model.autoscaling.max_replicas
        roomy = [c for c in options if free[c.model.pool].get(c.resource, 0) >= c.count * replicas]
        if not roomy:
            raise _unplaceable(index, model, options, pools, spec.region)
        choice = roomy[0]
        free[choice.model.pool][choice.resource] -= choice.count * replicas
        resolved[index] = choice.model
    return tuple(resolved[i] for i in range(len(spec.models)))


def _unplaceable(index: int, model: ModelServiceSpec, options: list[Candidate], pools, region: str) -> SpecError:
    need = f"{model.max_model_len} tokens x {stated_sequences(model)} sequences"
    names = list(pools) if model.pool == AUTO else [model.pool]
    unpriced = [name for name in names if on_demand_price(pools[name].primary.name, region) is None]
    if not options and unpriced == names:
        return SpecError(
            f"models[{index}].pool",
            f"auto placement chooses by price, and no pool in {quoted(names)} has an on-demand price in {region} "
            "in the catalog",
            "add a pool of an instance type the catalog prices in this region (components/catalog/prices.json)",
        )
    if options:
        where = quoted(sorted({c.model.pool for c in options}))
        return SpecError(
            f"models[{index}].autoscaling.max_replicas",
            f"auto placement found devices that fit {model.name!r} ({need}) only in pools {where}, "
            f"but they cannot hold {model.autoscaling.max_replicas} replicas beside the other services",
            "raise those pools' max_nodes, lower max_replicas, or name a pool",
        )
    field = "pool" if model.pool == AUTO else ("mig_profile" if model.mig_profile == AUTO else "tensor_parallel")
    left_out = (
        f" (pools {quoted(unpriced)} have no on-demand price in {region} in the catalog, so it left them out)"
        if unpriced else ""
    )
    return SpecError(
        f"models[{index}].{field}",
        f"auto placement found no device in pools {quoted(pools)} that holds {model.name!r} with its KV cache "
        f"for {need}{left_out}",
        "add a pool with larger GPUs, quantize the model, or lower max_model_len / max_num_seqs",
    )
