"""Fill in `auto` pool, tensor_parallel and mig_profile of model services from the stack's own pools.

Each auto service takes the cheapest device that holds its weights plus the KV cache for its stated
context x concurrency (max_model_len x max_num_seqs, or one sequence), priced as its share of a node
(whole GPUs, a MIG slice by compute slices, or a time-sliced/MPS share), within what the pool can
still hold at max scale after the services placed explicitly. Larger services choose first, so small
ones pack into the slices and shares that are left. Pool roles bound the choice: an online service considers
only serving pools, and only those whose on-demand nodes still hold its minimum replicas (the rule
planning/minimum_capacity.py checks afterwards, so auto never picks a pool that rule then refuses); a batch-tier
service prefers batch pools. `inferstack.planning.placement` is the free-form planner
(it also chooses node types and MIG layouts); here the pools and their layouts are given by the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from inferstack.planning.cost import node_price
from inferstack.planning.node_groups import on_demand_node_limit, on_demand_nodes_at_min
from inferstack.planning.pool_capacity import nodes_for_replicas
from inferstack.planning.sizing import fit, parallelism_problem, stated_sequences, weights_bytes
from inferstack.spec.errors import SpecError, quoted
from inferstack.spec import AUTO, MigSharing, ModelServiceSpec, MpsSharing, StackSpec, TimeSlicing
from inferstack.spec.platform import BudgetSpec
from inferstack.spec.pools import WHOLE_GPU, PoolHardware

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Candidate:
    model: ModelServiceSpec     # the service with pool, tensor_parallel and mig_profile filled in
    resource: str               # what each replica requests
    count: int                  # how many of it per replica
    usd_per_hour: float         # the replica's share of its node(s)
    memory_bytes: int           # device memory it occupies (the tie-break: smaller first)


@dataclass(frozen=True)
class Considered:
    """The pools auto placement weighs for one service, in order, those its tier prefers, and what its tier
    did to the choice (the pools it left out and why, or its preference)."""
    pools: tuple[str, ...]
    preferred: frozenset[str]
    note: str = ""


@dataclass(frozen=True)
class AutoChoice:
    """What auto placement chose for a service, and why: the plan's reason line."""
    service: str
    candidate: Candidate
    considered: Considered

    def reason(self) -> str:
        chosen = self.candidate
        return (f"auto chose pool {chosen.model.pool!r} ({chosen.count} x {chosen.resource} a replica, "
                f"${chosen.usd_per_hour}/h): the cheapest fit among pools {quoted(self.considered.pools)}"
                + (f"; {self.considered.note}" if self.considered.note else ""))


def is_auto(model: ModelServiceSpec) -> bool:
    return AUTO in (model.pool, model.tensor_parallel, model.mig_profile)


def is_online(model: ModelServiceSpec) -> bool:
    """A service whose minimum replicas must run on nodes spot never reclaims (planning/minimum_capacity.py)."""
    return model.tier == "online" and model.autoscaling.min_replicas > 0


def considered_pools(spec: StackSpec, model: ModelServiceSpec, pools: Mapping[str, PoolHardware]) -> Considered:
    """A named pool alone; for `auto`, the pools the service's tier allows: an online service serving pools
    only (a batch pool may be all spot), a batch-tier service batch pools first."""
    if model.pool != AUTO:
        return Considered((model.pool,), frozenset((model.pool,)))
    roles = {p.name: p.role for p in spec.node_pools if p.name in pools}
    batch = [name for name in pools if roles[name] == "batch"]
    serving = [name for name in pools if roles[name] == "serving"]
    if is_online(model):
        note = (f"it left out batch pools {quoted(batch)}: an online service's minimum replicas need "
                "on-demand nodes, which a batch pool need not keep") if batch else ""
        return Considered(tuple(serving), frozenset(serving), note)
    if model.tier == "batch" and batch:
        return Considered(tuple(batch + serving), frozenset(batch), f"a batch-tier service takes batch pools "
                          f"{quoted(batch)} first")
    return Considered(tuple(pools), frozenset(pools))


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


def on_demand_usd(budget: BudgetSpec | None, region: str, instance_type: str) -> float | None:
    """A node's on-demand price in the region: the spec's stated one (budget.prices), else the catalog's."""
    price = node_price(budget or BudgetSpec(), region, instance_type, "on_demand")
    return None if price is None else price.usd_per_hour


def candidates(
    model: ModelServiceSpec, pools: dict[str, PoolHardware], region: str, considered: Considered | None = None,
    budget: BudgetSpec | None = None,
) -> list[Candidate]:
    """Every placement of `model` on the pools considered (by default every pool for `auto`) that fits, the
    preferred pools' first, then cheapest first at on-demand prices in `region` as the spec states them or the
    catalog has them (a pool unpriced there is no candidate)."""
    if considered is None:
        names = tuple(pools) if model.pool == AUTO else (model.pool,)
        considered = Considered(names, frozenset(names))
    names = list(considered.pools)
    found = []
    for name in names:
        hardware = pools[name]
        price = on_demand_usd(budget, region, hardware.primary.name)
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
    return sorted(found, key=lambda c: (c.model.pool not in considered.preferred, c.usd_per_hour, c.memory_bytes,
                                        names.index(c.model.pool)))


def resolve_models(
    spec: StackSpec, pools: dict[str, PoolHardware]
) -> tuple[tuple[ModelServiceSpec, ...], dict[str, str]]:
    """The stack's services with every `auto` field decided, and service name -> why auto placement put it where
    it did, for the services it placed; raises SpecError when one cannot be placed."""
    models, choices = _resolve(spec, pools)
    return models, {choice.service: choice.reason() for choice in choices}


def _resolve(
    spec: StackSpec, pools: Mapping[str, PoolHardware]
) -> tuple[tuple[ModelServiceSpec, ...], list[AutoChoice]]:
    """The services with `auto` decided, and each choice auto made."""
    if not any(is_auto(m) for m in spec.models):
        return tuple(spec.models), []
    free = {name: dict(hardware.max_resources) for name, hardware in pools.items()}
    online: dict[str, list[tuple[ModelServiceSpec, int]]] = {name: [] for name in pools}
    for model in spec.models:
        if not is_auto(model) and model.pool in pools:
            resource = pools[model.pool].resource_for_slice(model.mig_profile)
            count = model.gpus_per_replica if resource == WHOLE_GPU else 1
            free[model.pool][resource] = free[model.pool].get(resource, 0) - count * model.autoscaling.max_replicas
            if is_online(model):
                online[model.pool].append((model, model.autoscaling.min_replicas))
    resolved = {i: m for i, m in enumerate(spec.models) if not is_auto(m)}
    choices = []
    auto = sorted((i for i, m in enumerate(spec.models) if is_auto(m)), key=lambda i: -weights_bytes(spec.models[i]))
    for index in auto:
        model = spec.models[index]
        considered = considered_pools(spec, model, pools)
        options = candidates(model, pools, spec.region, considered, spec.budget)
        replicas = model.autoscaling.max_replicas
        roomy = [c for c in options if free[c.model.pool].get(c.resource, 0) >= c.count * replicas]
        if not roomy:
            raise _unplaceable(index, model, options, pools, spec, considered)
        if model.pool == AUTO and is_online(model):  # a named pool's baseline is refused at the pool
            held = [c for c in roomy if _baseline_holds(spec, pools, online[c.model.pool], c.model)]
            if not held:
                raise _no_baseline(index, model, roomy, spec, pools)
            roomy = held
        choice = roomy[0]
        free[choice.model.pool][choice.resource] -= choice.count * replicas
        if is_online(model):
            online[choice.model.pool].append((choice.model, model.autoscaling.min_replicas))
        resolved[index] = choice.model
        choices.append(AutoChoice(model.name, choice, considered))
    return tuple(resolved[i] for i in range(len(spec.models))), choices


def _on_demand_nodes(spec: StackSpec, hardware: PoolHardware) -> int:
    """The pool's never-reclaimed nodes as planning/minimum_capacity.py counts them: Karpenter's on-demand
    NodePool limits, or the on-demand groups at their minimum size."""
    pool = hardware.spec
    return on_demand_node_limit(pool) if spec.platform.karpenter else on_demand_nodes_at_min(pool)


def _baseline_holds(spec: StackSpec, pools: dict[str, PoolHardware], already: list, placed: ModelServiceSpec) -> bool:
    hardware = pools[placed.pool]
    needed = nodes_for_replicas([*already, (placed, placed.autoscaling.min_replicas)], hardware)
    return needed <= _on_demand_nodes(spec, hardware)


def _no_baseline(index: int, model: ModelServiceSpec, roomy: list[Candidate], spec: StackSpec,
                 pools: dict[str, PoolHardware]) -> SpecError:
    names = list(dict.fromkeys(c.model.pool for c in roomy))
    held = ", ".join(f"{name!r} {_on_demand_nodes(spec, pools[name])}" for name in names)
    replicas = model.autoscaling.min_replicas
    return SpecError(
        f"models[{index}].pool",
        f"auto placement keeps an online service's minimum replicas on on-demand nodes, and no pool it considered "
        f"that fits {model.name!r} ({quoted(names)}) has on-demand nodes left for its {replicas} minimum "
        f"replica{'s' if replicas != 1 else ''} beside the online services already there (on-demand nodes: {held})",
        f"raise capacity.on_demand_base of one of those pools, set this service's tier to 'standard', or name a "
        f"pool in models[{index}].pool",
    )


def _unplaceable(index: int, model: ModelServiceSpec, options: list[Candidate], pools, spec: StackSpec,
                 considered: Considered) -> SpecError:
    need = f"{model.max_model_len} tokens x {stated_sequences(model)} sequences"
    names = list(considered.pools)
    if not names:
        return SpecError(
            f"models[{index}].pool",
            f"auto placement puts an online service on serving pools only, and the stack has none: "
            f"{considered.note}",
            f"add a pool with role 'serving', set this service's tier to 'standard', or name a pool in "
            f"models[{index}].pool",
        )
    region = spec.region
    unpriced = [name for name in names if on_demand_usd(spec.budget, region, pools[name].primary.name) is None]
    if not options and unpriced == names:
        return SpecError(
            f"models[{index}].pool",
            f"auto placement chooses by price, and no pool in {quoted(names)} has an on-demand price in {region} "
            "in the catalog or the spec",
            "state the price in budget.prices (purchase 'on_demand'), or add a pool of an instance type the catalog "
            "prices in this region (components/catalog/prices.json)",
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
        f" (pools {quoted(unpriced)} have no on-demand price in {region} in the catalog or budget.prices, so it "
        "left them out)"
        if unpriced else ""
    )
    return SpecError(
        f"models[{index}].{field}",
        f"auto placement found no device in pools {quoted(names)} that holds {model.name!r} with its KV cache "
        f"for {need}{left_out}" + (f"; {considered.note}" if considered.note else ""),
        "add a pool with larger GPUs, quantize the model, or lower max_model_len / max_num_seqs",
    )
