"""Kueue: quota for the GPU pools, in v1beta2 objects.

A ResourceFlavor per pool and capacity type (the node groups the AWS layer creates: an on-demand or reserved
baseline, a spot or on-demand burst above it); ClusterQueues in one cohort whose nominal quotas come from
the pools' max sizes and the resources each pool advertises (whole GPUs, MIG slices, shared GPUs, EFA
interfaces); WorkloadPriorityClasses; a LocalQueue per cluster queue in the namespace of its role.

Every cluster queue lists every flavor, with zero nominal quota on pools it does not own: Kueue lets a
queue borrow only on flavors it lists, and borrowing idle GPUs is what the cohort is for.
Kueue governs the scarce devices only; CPU and memory are left to the scheduler (`excludeResourcePrefixes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.core.v1 import Namespace
from pulumi_kubernetes.helm.v3 import Release

from inferstack.catalog.charts import chart
from inferstack.conventions import EKS_CAPACITY_LABEL, KARPENTER_CAPACITY_LABEL, POOL_LABEL
from inferstack.helm import helm_release
from inferstack.planning.device_claims import pool_device_classes
from inferstack.planning.node_groups import max_nodes_by
from inferstack.planning.pool_capacity import advertised_per_node
from inferstack.platform.gpu_nodes import dump_yaml, gpu_tolerations
from inferstack.spec import ClusterQueueSpec, NodePoolSpec, PriorityClassSpec, StackSpec
from inferstack.spec.pools import EFA_RESOURCE, PoolHardware

CHART = "kueue"
API_VERSION = "kueue.x-k8s.io/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
# Kueue's own leader-election lease, as its chart names it; a different name would let two managers lead.
LEADER_ELECTION_LEASE = "c1f6bfd2.kueue.x-k8s.io"
# Pods request these too, but only GPUs, MIG slices, shared GPUs and EFA interfaces are quota'd.
UNQUOTAED_RESOURCES = ["cpu", "memory", "ephemeral-storage", "hugepages-"]
FAIR_SHARING_STRATEGIES = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
KUBERNETES_PROVIDER_VERSION = version("pulumi-kubernetes")  # the plugin a raw Kubernetes resource runs on
CAPACITY_SUFFIX = {"ON_DEMAND": "on-demand", "CAPACITY_BLOCK": "capacity-block", "SPOT": "spot"}
# Karpenter's nodes carry no EKS capacityType label; they carry karpenter.sh/capacity-type (on-demand | reserved |
# spot: shared/reference/karpenter.md 4.1), which equals the pool's capacity label of each node group plan.


@dataclass(frozen=True)
class Flavor:
    """One pool's nodes of one EKS capacity type, and what they hold at the pool's max size."""

    pool: NodePoolSpec
    capacity_type: str  # the value of capacity_label on its nodes: ON_DEMAND | CAPACITY_BLOCK | SPOT (EKS), or
                        # on-demand | reserved | spot (Karpenter)
    resources: dict[str, int]  # resource -> units on all of this flavor's nodes
    capacity_label: str = EKS_CAPACITY_LABEL

    @property
    def name(self) -> str:
        return f"{self.pool.name}-{CAPACITY_SUFFIX.get(self.capacity_type, self.capacity_type)}"

    @property
    def is_spot(self) -> bool:
        return self.capacity_type in ("SPOT", "spot")


def pool_flavors(pool: NodePoolSpec, karpenter: bool = False) -> list[Flavor]:
    """The pool's capacity types in the order Kueue should try them: serving prefers its on-demand
    baseline, batch prefers spot. A flavor's nodes are those of the pool's node groups (or Karpenter
    NodePools) of its capacity type."""
    per_node = advertised_per_node(PoolHardware(pool))
    counts = max_nodes_by(pool, "capacity_label" if karpenter else "capacity_type")
    label = KARPENTER_CAPACITY_LABEL if karpenter else EKS_CAPACITY_LABEL
    flavors = [
        Flavor(pool, kind, {name: units * count for name, units in per_node.items()}, label)
        for kind, count in counts.items()
    ]
    spot_first = pool.role == "batch"
    return sorted(flavors, key=lambda f: f.is_spot != spot_first)


def stack_flavors(spec: StackSpec, pool: NodePoolSpec) -> list[Flavor]:
    return pool_flavors(pool, karpenter=spec.platform.karpenter)


def resource_flavor(flavor: Flavor) -> dict[str, Any]:
    """ResourceFlavor spec: Kueue adds these node labels and tolerations to the pods it admits on it."""
    return {
        "nodeLabels": {POOL_LABEL: flavor.pool.name, flavor.capacity_label: flavor.capacity_type},
        "tolerations": gpu_tolerations([flavor.pool]),
    }


def _split(total: int, capacities: dict[str, int]) -> dict[str, int]:
    """`total` units spread over resources in proportion to their capacity (largest remainder, exact sum)."""
    whole = sum(capacities.values())
    shares = {name: total * cap // whole for name, cap in capacities.items()}
    leftover = total - sum(shares.values())
    by_remainder = sorted(capacities, key=lambda name: -(total * capacities[name] % whole))
    for name in by_remainder[:leftover]:
        shares[name] += 1
    return shares


def nominal_quotas(flavors: Sequence[Flavor], quota: int | None) -> dict[str, dict[str, int]]:
    """A pool's nominal quota per flavor and resource: its whole capacity, or `quota` devices taken from
    the preferred flavors first. EFA interfaces follow the GPUs, never limiting them."""
    quotas: dict[str, dict[str, int]] = {}
    remaining = quota
    for flavor in flavors:
        devices = {name: units for name, units in flavor.resources.items() if name != EFA_RESOURCE}
        if remaining is None:
            granted = dict(devices)
        else:
            take = min(remaining, sum(devices.values()))
            granted = _split(take, devices)
            remaining -= take
        if EFA_RESOURCE in flavor.resources:
            granted[EFA_RESOURCE] = flavor.resources[EFA_RESOURCE]
        quotas[flavor.name] = granted
    return quotas


def owned_pools(spec: StackSpec, queue: ClusterQueueSpec) -> list[str]:
    """The pools whose capacity a queue holds as nominal quota: its list, else every pool of its role."""
    if queue.pools is not None:
        return list(queue.pools)
    return [p.name for p in spec.node_pools if p.role == queue.role]


def role_namespace(spec: StackSpec, role: str) -> str:
    return spec.serving_namespace if role == "serving" else spec.batch_namespace


def cluster_queue(spec: StackSpec, queue: ClusterQueueSpec) -> dict[str, Any]:
    """ClusterQueue spec: one resource group over every resource of every pool, own flavors first."""
    owned = owned_pools(spec, queue)
    flavors_by_pool = {p.name: stack_flavors(spec, p) for p in spec.node_pools}
    order = owned + [p.name for p in spec.node_pools if p.name not in owned]
    covered = sorted({name for flavors in flavors_by_pool.values() for f in flavors for name in f.resources})
    flavor_entries = []
    for pool_name in order:
        flavors = flavors_by_pool[pool_name]
        quotas = nominal_quotas(flavors, queue.quota_gpus.get(pool_name)) if pool_name in owned else {}
        for flavor in flavors:
            granted = quotas.get(flavor.name, {})
            resources = []
            for name in covered:
                entry: dict[str, Any] = {"name": name, "nominalQuota": granted.get(name, 0)}
                if name != EFA_RESOURCE:
                    if queue.borrowing_limit_gpus is not None:
                        entry["borrowingLimit"] = queue.borrowing_limit_gpus
                    if queue.lending_limit_gpus is not None:
                        entry["lendingLimit"] = min(queue.lending_limit_gpus, entry["nominalQuota"])
                resources.append(entry)
            flavor_entries.append({"name": flavor.name, "resources": resources})
    preemption: dict[str, Any] = {
        "withinClusterQueue": queue.within_cluster_queue,
        "reclaimWithinCohort": queue.reclaim_within_cohort,
    }
    # Borrowing workloads may preempt lower priorities elsewhere in the cohort (classic preemption only).
    if queue.reclaim_within_cohort != "Never" and not spec.queues.fair_sharing:
        preemption["borrowWithinCohort"] = {"policy": "LowerPriority"}
    return {
        "cohortName": spec.queues.cohort,
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": role_namespace(spec, queue.role)}},
        "resourceGroups": [{"coveredResources": covered, "flavors": flavor_entries}],
        "preemption": preemption,
    }


def device_class_mappings(spec: StackSpec) -> list[dict[str, Any]]:
    """Kueue's DRA accounting: each DeviceClass the DRA pools' claims name counts as the extended resource the
    device plugin would advertise, so the cluster queues' quotas hold for both (catalog/dra.json kueue). Kueue
    admits no workload whose claim names a class without a mapping."""
    classes: dict[str, list[str]] = {}
    for pool in spec.node_pools:
        if pool.device_mode != "dra":
            continue
        for device_class in pool_device_classes(pool):
            names = classes.setdefault(device_class.resource, [])
            if device_class.name not in names:
                names.append(device_class.name)
    return [{"name": resource, "deviceClassNames": names} for resource, names in classes.items()]


def manager_config(spec: StackSpec) -> dict[str, Any]:
    """Kueue's Configuration: Deployment, LeaderWorkerSet and Job integrations, only in the stack's namespaces."""
    frameworks = ["batch/job", "pod", "deployment"]  # Kueue's deployment integration works through pods
    if spec.platform.leaderworkerset:
        frameworks.append("leaderworkerset.x-k8s.io/leaderworkerset")
    config: dict[str, Any] = {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": LEADER_ELECTION_LEASE},
        # Workloads opt in with the kueue.x-k8s.io/queue-name label; nothing outside these namespaces is touched.
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": sorted({spec.serving_namespace, spec.batch_namespace}),
                }
            ]
        },
        "integrations": {"frameworks": frameworks},
        "resources": {"excludeResourcePrefixes": UNQUOTAED_RESOURCES},
    }
    mappings = device_class_mappings(spec)
    if mappings:
        config["resources"]["deviceClassMappings"] = mappings
    if spec.queues.fair_sharing:
        config["fairSharing"] = {"preemptionStrategies": FAIR_SHARING_STRATEGIES}
    return config


@dataclass(frozen=True)
class KueueArgs:
    spec: StackSpec
    namespaces: dict[str, Namespace]  # role -> the Namespace that holds that role's LocalQueues


class Kueue(pulumi.ComponentResource):
    """The Kueue release and its flavors, cohort, cluster queues, priority classes and local queues.

    Every custom resource waits for the release, which installs the CRDs, and for nothing else but the
    namespace a LocalQueue lives in.
    """

    release: Release
    flavors: dict[str, CustomResource]
    cohort: CustomResource
    cluster_queues: dict[str, CustomResource]
    local_queues: dict[str, CustomResource]  # by cluster queue name; each LocalQueue is named after its queue
    priority_classes: dict[str, pulumi.CustomResource]

    def __init__(self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:Kueue", name, None, opts)
        spec = args.spec
        self.release = helm_release(
            f"{name}-release",
            CHART,
            namespace=chart(CHART).namespace,
            values={"managerConfig": {"controllerManagerConfigYaml": dump_yaml(manager_config(spec))}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self._crd_opts = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        self._prefix = name

        self.flavors = {
            f.name: self._object("ResourceFlavor", f.name, resource_flavor(f))
            for pool in spec.node_pools
            for f in stack_flavors(spec, pool)
        }
        self.cohort = self._object("Cohort", spec.queues.cohort, {})
        self.cluster_queues = {
            q.name: self._object("ClusterQueue", q.name, cluster_queue(spec, q)) for q in spec.queues.cluster_queues
        }
        self.local_queues = {
            q.name: self._object(
                "LocalQueue", q.name, {"clusterQueue": q.name}, namespace=args.namespaces[q.role].metadata.name
            )
            for q in spec.queues.cluster_queues
        }
        self.priority_classes = {p.name: self._priority_class(p) for p in spec.queues.priorities}
        self.register_outputs(
            {
                "release": self.release.status,
                "cluster_queues": sorted(self.cluster_queues),
                "priority_classes": sorted(self.priority_classes),
            }
        )

    def _object(
        self, kind: str, object_name: str, body: dict[str, Any], namespace: pulumi.Input[str] | None = None
    ) -> CustomResource:
        metadata: dict[str, Any] = {"name": object_name}
        if namespace is not None:
            metadata["namespace"] = namespace
        return CustomResource(
            f"{self._prefix}-{kind.lower()}-{object_name}",
            api_version=API_VERSION,
            kind=kind,
            metadata=metadata,
            spec=body,
            opts=self._crd_opts,
        )

    def _priority_class(self, priority: PriorityClassSpec) -> pulumi.CustomResource:
        """WorkloadPriorityClass keeps `value` at the top level, which apiextensions.CustomResource cannot
        carry, so it is registered as a raw resource of the Kubernetes provider (pinned like its own types)."""
        kind = "WorkloadPriorityClass"
        return pulumi.CustomResource(
            f"kubernetes:{API_VERSION}:{kind}",
            f"{self._prefix}-{kind.lower()}-{priority.name}",
            {
                "apiVersion": API_VERSION,
                "kind": kind,
                "metadata": {"name": priority.name},
                "value": priority.value,
                "description": priority.description,
            },
            pulumi.ResourceOptions.merge(self._crd_opts, pulumi.ResourceOptions(version=KUBERNETES_PROVIDER_VERSION)),
        )
