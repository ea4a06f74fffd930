"""What one node of a pool advertises, what a pod of a service requests of it, and the nodes replicas need.

The platform advertises these resources and Kueue sets quotas on them, the AWS layer tags node groups with
them for the autoscaler, the serving layer requests them, and the plan and the spec's capacity rules count
nodes with them: one derivation, so none of those figures can differ. The replicas a pool holds are counted
once (`replicas_held`) for the spec's scaling check and the `keda-scaling-bounds` policy, the first over the
spec's pool, the second over the node groups the program registered.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

from inferstack.spec import ModelServiceSpec
from inferstack.spec.pools import EFA_RESOURCE, WHOLE_GPU, PoolHardware


def advertised_per_node(hardware: PoolHardware) -> dict[str, int]:
    """Extended resources one node of the pool advertises once the platform runs, EFA interfaces included."""
    resources = dict(hardware.resources_per_node)
    if hardware.efa_interfaces:
        resources[EFA_RESOURCE] = hardware.efa_interfaces
    return resources


def gpu_requests(model: ModelServiceSpec, hardware: PoolHardware) -> dict[str, int]:
    """The device resource one pod requests: its tensor-parallel GPUs, one MIG slice or one GPU share."""
    resource = hardware.resource_for_slice(model.mig_profile)
    count = model.tensor_parallel if resource == WHOLE_GPU and model.mig_profile is None else 1
    return {resource: count}


def nodes_for_replicas(services: list[tuple[ModelServiceSpec, int]], hardware: PoolHardware) -> int:
    """Nodes that hold `replicas` of each service at once: each node offers every resource of the pool,
    so the scarcest resource decides. A replica is pipeline_parallel pods of one device request each."""
    needed: dict[str, int] = defaultdict(int)
    for model, replicas in services:
        for resource, count in gpu_requests(model, hardware).items():
            needed[resource] += replicas * model.pipeline_parallel * count
    per_node = hardware.resources_per_node
    return max((math.ceil(amount / per_node[resource]) for resource, amount in needed.items()), default=0)


def pods_per_node(offer: Mapping[str, float], pod_request: Mapping[str, float]) -> int:
    """Whole pods one node holds: a pod takes all of its request from a single node."""
    return min(int(offer.get(resource, 0) // amount) for resource, amount in pod_request.items())


def replicas_held(nodes: Iterable[tuple[int, Mapping[str, float]]], pod_request: Mapping[str, float],
                  pods_per_replica: int) -> int:
    """The most replicas these nodes hold with nothing else on them, `nodes` as (count, what one node
    offers) pairs; a replica is `pods_per_replica` pods, which may sit on different nodes."""
    return sum(count * pods_per_node(offer, pod_request) for count, offer in nodes) // pods_per_replica
