"""What one node of a pool advertises and may cache, what a pod of a service requests of it (devices and EFA
interfaces), and the nodes replicas need.

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
    """The device resource one pod requests: its GPUs (tensor-parallel group times the node's data-parallel
    ranks), one MIG slice or one GPU share."""
    resource = hardware.resource_for_slice(model.mig_profile)
    count = model.gpus_per_pod if resource == WHOLE_GPU and model.mig_profile is None else 1
    return {resource: count}


def nodes_for_replicas(services: list[tuple[ModelServiceSpec, int]], hardware: PoolHardware) -> int:
    """Nodes that hold `replicas` of each service at once: each node offers every resource of the pool,
    so the scarcest resource decides. A replica is nodes_per_replica pods of one device request each."""
    needed: dict[str, int] = defaultdict(int)
    for model, replicas in services:
        for resource, count in gpu_requests(model, hardware).items():
            needed[resource] += replicas * model.nodes_per_replica * count
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


def efa_requests(model: ModelServiceSpec, hardware: PoolHardware) -> dict[str, int]:
    """EFA interfaces for a pod that talks across nodes, a multi-node replica's or a prefill/decode engine's
    (its KV cache moves over EFA): its GPUs' share of the node's interfaces. Other single-node replicas talk
    over NVLink and leave the interfaces to the pods that need them."""
    if not (model.multi_node or model.pd_role) or not hardware.efa_interfaces:
        return {}
    return {EFA_RESOURCE: max(1, hardware.efa_interfaces * model.gpus_per_pod // hardware.gpus_per_node)}


def pool_cache_budget_bytes(hardware: PoolHardware) -> int:
    """Bytes of weights a node of this pool may cache: `budget_percent` of the volume under the cache.

    That volume is the instance-store array nodeadm assembles (RAID0: every disk, RAID10: half of them;
    EC2 gives instance-store sizes in decimal GB) on the pool's smallest type, since a pod may land on
    any of them; with the NVMe cache disabled, the hostPath lies on the root EBS volume (GiB).
    """
    cache = hardware.spec.nvme_cache
    if cache.enabled:
        mirrors = 2 if cache.raid == "RAID10" else 1
        volume = min(t.nvme_total_gb for t in hardware.instance_types) * 10**9 // mirrors
    else:
        volume = hardware.spec.disk_size_gib * 1024**3
    return volume * cache.budget_percent // 100
