"""How a model service's replicas are replaced on an update, from the room its pool has left at max size.

Pure (no Pulumi): the model service component writes the strategy into its Deployment or
LeaderWorkerSet and the plan reports the same derivation, so the two never differ.

A surge (one extra replica started before an old one leaves) only helps when that replica can be
scheduled: on a GPU pool with no room left it sits Pending and the rollout stalls. So each pool is
filled at max nodes with every workload it runs at max replicas (model services and batch job pods),
first fit by size; a service surges only if one more of its replicas still fits on what is left.
Otherwise the rollout replaces one replica at a time, which keeps serving while min replicas > 1 and,
for a service that may run a single replica, means a gap of one load time (`sizing.load_seconds`).

`pulumi up` does not wait for a rollout (the workloads carry `pulumi.com/skipAwait`): a replica may
first need a GPU node scale-up, and a rollout of several large replicas can run longer than a CI job
may; `check_timeout_seconds` sizes the wait for whoever checks it (the plan prints the command).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from inferstack.planning.pool_capacity import gpu_requests
from inferstack.planning.creation_times import CREATION_TIMES
from inferstack.planning.sizing import load_seconds
from inferstack.spec import ModelServiceSpec, StackSpec
from inferstack.spec.pools import PoolHardware

Kind = Literal["surge", "one-at-a-time", "downtime"]


@dataclass(frozen=True)
class PodGroup:
    """Pods of one workload on a pool at max scale, each requesting `count` of `resource`."""

    workload: str
    resource: str
    count: int
    pods_per_replica: int
    replicas: int


@dataclass(frozen=True)
class Rollout:
    """A service's update strategy and what it costs in serving capacity."""

    model: str
    kind: Kind
    max_surge: int
    max_unavailable: int
    spare_replica_fits: bool
    replica_needs: dict[str, int]    # devices one replica requests
    free_at_max: dict[str, int]      # the pool's max_resources less every workload at max (negative: overcommitted)
    load_seconds: int
    downtime_seconds: int | None     # when a single replica runs: the gap an update opens
    check_timeout_seconds: int       # a bound for waiting on the whole rollout at max replicas

    @property
    def deployment_strategy(self) -> dict[str, Any]:
        return {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": self.max_surge, "maxUnavailable": self.max_unavailable},
        }

    @property
    def lws_strategy(self) -> dict[str, Any]:
        """LWS's own defaults are maxSurge 0, maxUnavailable 1: stated here so the choice is visible."""
        return {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxSurge": self.max_surge, "maxUnavailable": self.max_unavailable},
        }


def service_pods(model: ModelServiceSpec, hardware: PoolHardware) -> PodGroup:
    """One pod per node of a replica (nodes_per_replica of them), each with the devices the pod spec requests."""
    ((resource, count),) = gpu_requests(model, hardware).items()
    return PodGroup(model.name, resource, count, model.nodes_per_replica, model.autoscaling.max_replicas)


def pool_workloads(spec: StackSpec, pool: str) -> tuple[PodGroup, ...]:
    """Every GPU workload that can run on a pool at max scale: services at max replicas, batch jobs' pods."""
    hardware = PoolHardware(spec.pool(pool))
    groups = [service_pods(m, hardware) for m in spec.models if m.pool == pool]
    for job in spec.batch_jobs:
        if job.pool == pool:
            # The job's pods request what its model service's engine takes on one node of this pool, every
            # data-parallel rank on it (the spec checked that they fit there: serving.batch_model).
            engine = spec.model_service(job.model_service).model_copy(update={"data_parallel_local": None})
            ((resource, count),) = gpu_requests(engine, hardware).items()
            groups.append(PodGroup(f"batch:{job.name}", resource, count, 1, job.parallelism))
    return tuple(groups)


def _place(free: list[dict[str, int]], resource: str, count: int) -> bool:
    """First fit: the first node with `count` of `resource` left takes the pod."""
    for node in free:
        if node.get(resource, 0) >= count:
            node[resource] -= count
            return True
    return False


@lru_cache(maxsize=128)
def _left_at_max(per_node: tuple[tuple[str, int], ...], max_nodes: int, groups: tuple[PodGroup, ...]):
    """Each node's devices left once every pod is placed (largest requests first), and whether all fit."""
    free = [dict(per_node) for _ in range(max_nodes)]
    pods = sorted(
        ((g.resource, g.count) for g in groups for _ in range(g.pods_per_replica * g.replicas)),
        key=lambda pod: -pod[1],
    )
    placed = [_place(free, resource, count) for resource, count in pods]
    return tuple(tuple(sorted(node.items())) for node in free), all(placed)


def spare_replica_fits(hardware: PoolHardware, groups: tuple[PodGroup, ...], own: PodGroup) -> bool:
    """Whether one more replica of `own` fits beside every workload of the pool at max replicas."""
    left, all_placed = _left_at_max(tuple(sorted(hardware.resources_per_node.items())), hardware.spec.max_nodes, groups)
    if not all_placed:
        return False
    free = [dict(node) for node in left]
    return all(_place(free, own.resource, own.count) for _ in range(own.pods_per_replica))


def free_at_max(hardware: PoolHardware, groups: tuple[PodGroup, ...]) -> dict[str, int]:
    """PoolHardware.max_resources less what every workload requests at max replicas."""
    free = dict(hardware.max_resources)
    for g in groups:
        free[g.resource] = free.get(g.resource, 0) - g.count * g.pods_per_replica * g.replicas
    return free


def rollout(spec: StackSpec, model: ModelServiceSpec) -> Rollout:
    """Surge where a spare replica fits at max size, else one replica at a time (a gap when only one runs);
    `spec` is the stack as it deploys (validation's), so its engines and placements are decided."""
    hardware = PoolHardware(spec.pool(model.pool))
    groups = pool_workloads(spec, model.pool)
    own = service_pods(model, hardware)
    fits = spare_replica_fits(hardware, groups, own)
    load = load_seconds(model)
    single = model.autoscaling.min_replicas <= 1
    kind: Kind = "surge" if fits else ("downtime" if single else "one-at-a-time")
    # A surge replica may wait for a node scale-up; a replaced one takes the node its predecessor left.
    step = load + (CREATION_TIMES["gpu_node"].seconds if fits else 0)
    return Rollout(
        model=model.name,
        kind=kind,
        max_surge=1 if fits else 0,
        max_unavailable=0 if fits else 1,
        spare_replica_fits=fits,
        replica_needs={own.resource: own.count * own.pods_per_replica},
        free_at_max=free_at_max(hardware, groups),
        load_seconds=load,
        downtime_seconds=load if kind == "downtime" else None,
        check_timeout_seconds=round(step * model.autoscaling.max_replicas),
    )
