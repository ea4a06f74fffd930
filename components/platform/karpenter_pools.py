"""A pool's Karpenter objects: its EC2NodeClasses (how its nodes are made) and a NodePool per capacity plan; and the
opt-in CPU NodePool for system pods.

The plans are planning's (`plan_node_groups`), the same ones the managed-node-group mode turns into EKS node
groups, so both modes give a pool the same capacity mix, sizes, labels and taints. Pure functions: they build
the objects as dicts (values may be Pulumi inputs) and create nothing. Section numbers cite
shared/reference/karpenter.md; the pinned facts live in catalog/karpenter.json with their sources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi

from inferstack.aws.node_pool import (
    DATA_VOLUME_DEVICE,
    efa_interface_layout,
    joins_no_placement_group,
    node_labels,
    pool_taints,
    render_user_data,
)
from inferstack.catalog.karpenter import FACTS
from inferstack.conventions import KARPENTER_CAPACITY_LABEL
from inferstack.planning.interruption import SERVING_NODE_TERMINATION_GRACE
from inferstack.planning.node_groups import NodeGroupPlan, plan_node_groups
from inferstack.spec import MaintenanceWindowSpec, NodePoolSpec, StackSpec
from inferstack.spec.cluster import CreateCluster
from inferstack.spec.platform import KarpenterCpuPoolSpec
from inferstack.spec.pools import PoolHardware

AMI_ALIASES: Mapping[str, Mapping[str, str]] = FACTS["ami_aliases"]
OS_VOLUMES: Mapping[str, Mapping[str, Any]] = FACTS["os_volumes"]
INSTANCE_STORE_POLICIES: tuple[str, ...] = tuple(FACTS["instance_store_policies"]["values"])
NODEPOOL_WEIGHTS: Mapping[str, int] = FACTS["nodepool_weights"]["values"]

NODE_CLASS_API, NODE_CLASS_KIND = "karpenter.k8s.aws/v1", "EC2NodeClass"
NODE_POOL_API, NODE_POOL_KIND = "karpenter.sh/v1", "NodePool"
INSTANCE_TYPE_KEY = "node.kubernetes.io/instance-type"
GPU_COUNT_KEY = "karpenter.k8s.aws/instance-gpu-count"
RESERVATION_ID_KEY = "karpenter.k8s.aws/capacity-reservation-id"

# Disruption (section 5). Choices, not upstream advice: the Karpenter docs give no GPU figure (section 9).
# Expiry is forceful and ignores budgets (section 5), so a serving node holding a loaded model never expires: it
# is replaced for drift (a new AMI pin or Kubernetes version) inside the maintenance window, and only once its
# serving pods (annotated karpenter.sh/do-not-disrupt) have left it. Batch nodes keep Karpenter's default lifetime,
# stated so a change of default upstream cannot drift every node.
SERVING_EXPIRE_AFTER = "Never"
BATCH_EXPIRE_AFTER = "720h"
# An empty serving node is kept this long: a replica on a fresh node waits for the node, the image, the weights
# from S3 and a warm-up with no compile cache (planning/creation_times.py gpu_node, image_pull,
# weights_s3_gb_per_s, engine_warmup_cold); one on the node it left reads its weights and compile cache from the
# NVMe (engine_warmup_warm), so a scale-down undone within half an hour costs no reload.
SERVING_CONSOLIDATE_AFTER = "30m"
# Batch nodes go as soon as they are idle or their jobs fit elsewhere; a job gets this long to finish or
# checkpoint when its node drifts (without it, do-not-disrupt pods hold a drifted node forever). Serving pools
# set planning's interruption notice, so an interruption or a drift inside the window drains serving pods in time.
BATCH_CONSOLIDATE_AFTER = "5m"
BATCH_TERMINATION_GRACE = "2h"


# IMDSv2 only, one hop: pods get AWS credentials from Pod Identity, never the node's role (section 3.6).
IMDS_OPTIONS: Mapping[str, Any] = {
    "httpEndpoint": "enabled",
    "httpProtocolIPv6": "disabled",
    "httpPutResponseHopLimit": 1,
    "httpTokens": "required",
}


def _closed_budget(window: MaintenanceWindowSpec) -> dict[str, Any]:
    """A budget of 0 from the window's end to its next start: the most restrictive active budget wins (section 5)."""
    return {
        "nodes": "0",
        "reasons": ["Drifted"],  # a WhenEmpty pool is never Underutilized
        "schedule": f"0 {(window.start_hour_utc + window.hours) % 24} * * *",
        "duration": f"{24 - window.hours}h",
    }


def node_class_name(environment: str, pool: NodePoolSpec, plan: NodeGroupPlan) -> str:
    """A reservation's NodePool gets a class of its own (`<env>-<pool>-<suffix>`): Karpenter puts every instance
    of a class into the class's one placement group (section 4.4), and a reservation the stack's group cannot hold
    must not keep the pool's other nodes out of it. The other NodePools share `<env>-<pool>`."""
    if plan.reservation is not None:
        return f"{environment}-{pool.name}-{plan.suffix}"
    return f"{environment}-{pool.name}"


def ami_alias(pool: NodePoolSpec) -> str:
    """`al2023@<ver>` or `bottlerocket@<ver>`: one alias resolves the NVIDIA variant for GPU instance types
    itself; there is no NVIDIA alias family (section 3.1), and `latest` would drift every node (section 9)."""
    alias = AMI_ALIASES[pool.ami_type]
    return f"{alias['family']}@{alias['version']}"


def _storage(pool: NodePoolSpec) -> dict[str, Any]:
    """instanceStorePolicy RAID0 where Karpenter assembles the array itself (section 3.5); RAID10 is not one of
    its policies, so AL2023 gets nodeadm's own localStorage strategy through userData (merged, section 3.7). The
    spec refuses the NVMe cache on Bottlerocket, which has no nodeadm."""
    cache = pool.nvme_cache
    if not cache.enabled:
        return {}
    if cache.raid in INSTANCE_STORE_POLICIES:
        return {"instanceStorePolicy": cache.raid}
    return {"userData": render_user_data(cache.raid)}


def _block_devices(pool: NodePoolSpec) -> list[dict[str, Any]]:
    """Setting blockDeviceMappings replaces the family's defaults (section 3.4): the kubelet volume gets the pool's
    disk size, and Bottlerocket keeps its separate OS volume."""
    ebs = {"volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}
    devices = []
    os_volume = OS_VOLUMES.get(pool.ami_type)
    if os_volume is not None:
        devices.append({"deviceName": os_volume["device"], "ebs": {**ebs, "volumeSize": f"{os_volume['gib']}Gi"}})
    devices.append(
        {
            "deviceName": DATA_VOLUME_DEVICE[pool.ami_type],
            "rootVolume": True,
            "ebs": {**ebs, "volumeSize": f"{pool.disk_size_gib}Gi"},
        }
    )
    return devices


def _id_terms(ids: Sequence[pulumi.Input[str]] | pulumi.Output, *, first_only: bool = False) -> Any:
    """Selector terms by id (sections 3.2, 4.2); an Output list stays an Output."""
    if isinstance(ids, pulumi.Output):
        return ids.apply(lambda found: [{"id": i} for i in (found[:1] if first_only else found)])
    chosen = list(ids)[:1] if first_only else list(ids)
    return [{"id": i} for i in chosen]


def ec2_node_class(
    pool: NodePoolSpec,
    plan: NodeGroupPlan,
    *,
    environment: str,
    node_role_name: pulumi.Input[str],
    subnet_ids: Sequence[pulumi.Input[str]] | pulumi.Output,
    security_group_ids: Sequence[pulumi.Input[str]],
    placement_group_name: pulumi.Input[str] | None,
    tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The EC2NodeClass of one plan of the pool: AMI alias, network, IMDSv2, disks and NVMe cache, EFA, placement,
    and the reservation for the reserved plan only.

    EFA pools use the first subnet only: a cluster placement group and EFA traffic stay in one zone (section 4.4).
    An EFA class joins the pool's placement group, but a reserved one joins none the stack creates
    (`joins_no_placement_group`): Karpenter puts every instance of a class into its one group (section 4.4).
    """
    name = node_class_name(environment, pool, plan)
    spec: dict[str, Any] = {
        "amiSelectorTerms": [{"alias": ami_alias(pool)}],
        "role": node_role_name,
        "subnetSelectorTerms": _id_terms(subnet_ids, first_only=pool.efa.enabled),
        "securityGroupSelectorTerms": _id_terms(security_group_ids),
        "metadataOptions": dict(IMDS_OPTIONS),
        "blockDeviceMappings": _block_devices(pool),
        "tags": {"Name": name, **(tags or {})},
        **_storage(pool),
    }
    reservation = plan.reservation
    if pool.efa.enabled:
        # Primary ENA interface plus one efa-only interface per network card (section 4.5 CEL rules).
        spec["networkInterfaces"] = [
            {"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind}
            for card, device, kind in efa_interface_layout(PoolHardware(pool).efa_interfaces)
        ]
        if placement_group_name is not None and not joins_no_placement_group(pool, reservation):
            spec["placementGroupSelector"] = {"name": placement_group_name}
    if reservation is not None:
        # ODCRs and Capacity Blocks alike: Karpenter uses a reservation only when a term selects it (sections 4.2-4.3).
        spec["capacityReservationSelectorTerms"] = [{"id": reservation.id}]
    return {"apiVersion": NODE_CLASS_API, "kind": NODE_CLASS_KIND, "metadata": {"name": name}, "spec": spec}


def ec2_node_classes(pool: NodePoolSpec, *, environment: str, **network: Any) -> list[dict[str, Any]]:
    """The pool's EC2NodeClasses, one per name `node_class_name` gives its plans; `network` as `ec2_node_class`."""
    classes: dict[str, dict[str, Any]] = {}
    for plan in plan_node_groups(pool):
        name = node_class_name(environment, pool, plan)
        if name not in classes:
            classes[name] = ec2_node_class(pool, plan, environment=environment, **network)
    return list(classes.values())


def _requirements(pool: NodePoolSpec, hardware: PoolHardware, plan: NodeGroupPlan) -> list[dict[str, Any]]:
    """The plan's capacity type (conventions.CAPACITY_LABEL values are Karpenter's, section 4.1) and instance types;
    the GPU count keeps every candidate on the NVIDIA AMI variant (section 3.1)."""
    requirements = [
        {"key": KARPENTER_CAPACITY_LABEL, "operator": "In", "values": [plan.capacity_label]},
        {"key": INSTANCE_TYPE_KEY, "operator": "In", "values": list(plan.instance_types)},
        {"key": GPU_COUNT_KEY, "operator": "In", "values": [str(hardware.gpus_per_node)]},
    ]
    if plan.reservation is not None:
        requirements.append({"key": RESERVATION_ID_KEY, "operator": "In", "values": [plan.reservation.id]})
    return requirements


# The opt-in CPU NodePool for system pods (platform.karpenter_cpu_pool), as Karpenter's getting-started NodePool
# (aws/karpenter-provider-aws v1.14.1 website/content/en/preview/getting-started/getting-started-with-karpenter/
# scripts/step12-add-nodepool.sh): amd64 Linux, on-demand, the chosen categories, generation 3 and newer, a CPU limit,
# consolidated when underutilized. Untainted, so pods that tolerate no GPU taint land on it; the controller's chart
# affinity (karpenter.sh/nodepool DoesNotExist, charts/karpenter/values.yaml) keeps Karpenter itself off it.
CPU_POOL_SUFFIX = "system-cpu"
CPU_POOL_AMI_TYPE = "AL2023_x86_64_NVIDIA"  # the al2023 alias resolves the standard AMI for CPU types (section 3.1)
CPU_POOL_MIN_GENERATION = "2"  # Gt: generation 3 and newer
CPU_POOL_CONSOLIDATE_AFTER = "1m"


def cpu_pool_name(environment: str) -> str:
    return f"{environment}-{CPU_POOL_SUFFIX}"


def cpu_node_class(
    *,
    environment: str,
    node_role_name: pulumi.Input[str],
    subnet_ids: Sequence[pulumi.Input[str]] | pulumi.Output,
    security_group_ids: Sequence[pulumi.Input[str]],
    tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The CPU NodePool's EC2NodeClass: the GPU classes' pinned AL2023 alias and IMDSv2 rule, every cluster subnet."""
    name = cpu_pool_name(environment)
    alias = AMI_ALIASES[CPU_POOL_AMI_TYPE]
    spec = {
        "amiSelectorTerms": [{"alias": f"{alias['family']}@{alias['version']}"}],
        "role": node_role_name,
        "subnetSelectorTerms": _id_terms(subnet_ids),
        "securityGroupSelectorTerms": _id_terms(security_group_ids),
        "metadataOptions": dict(IMDS_OPTIONS),
        "tags": {"Name": name, **(tags or {})},
    }
    return {"apiVersion": NODE_CLASS_API, "kind": NODE_CLASS_KIND, "metadata": {"name": name}, "spec": spec}


def cpu_node_pool(environment: str, cpu_pool: KarpenterCpuPoolSpec) -> dict[str, Any]:
    """The CPU NodePool, at most `max_vcpus` vCPUs in all (limits.cpu, section 5)."""
    name = cpu_pool_name(environment)
    requirements = [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": KARPENTER_CAPACITY_LABEL, "operator": "In", "values": ["on-demand"]},
        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": list(cpu_pool.instance_categories)},
        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": [CPU_POOL_MIN_GENERATION]},
    ]
    return {
        "apiVersion": NODE_POOL_API,
        "kind": NODE_POOL_KIND,
        "metadata": {"name": name},
        "spec": {
            "limits": {"cpu": str(cpu_pool.max_vcpus)},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                           "consolidateAfter": CPU_POOL_CONSOLIDATE_AFTER},
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": NODE_CLASS_KIND, "name": name},
                    "requirements": requirements,
                    "expireAfter": BATCH_EXPIRE_AFTER,
                },
            },
        },
    }


def cpu_pool_note(spec: StackSpec) -> str | None:
    """What the plan says of CPU room for system pods under Karpenter: the CPU NodePool, or that the fixed system node
    group is all there is and the field that adds more."""
    if not spec.platform.karpenter:
        return None
    cpu_pool = spec.platform.karpenter_cpu_pool
    if cpu_pool.enabled:
        return (f"Karpenter NodePool {cpu_pool_name(spec.environment)} launches on-demand CPU nodes "
                f"({'/'.join(cpu_pool.instance_categories)} families, generation 3 and newer, up to {cpu_pool.max_vcpus} "
                "vCPUs in all) for system pods the system node group cannot hold; the Karpenter controller stays on "
                "the system node group")
    if not isinstance(spec.cluster, CreateCluster):
        return ("system pods run on the existing cluster's own nodes: set platform.karpenter_cpu_pool.enabled for a "
                "Karpenter CPU NodePool beside them")
    system = spec.cluster.system_nodes
    return (f"system pods run only on the system node group's {system.min_nodes} {system.instance_type} nodes, which "
            "nothing scales under Karpenter: set platform.karpenter_cpu_pool.enabled for a CPU NodePool, or raise "
            "cluster.system_nodes.min_nodes")


def allows_spot(node_pool: Mapping[str, Any]) -> bool:
    """The NodePool's capacity-type requirement lets Karpenter launch spot."""
    return any(
        r["key"] == KARPENTER_CAPACITY_LABEL and r["operator"] == "In" and "spot" in r["values"]
        for r in node_pool["spec"]["template"]["spec"]["requirements"]
    )


def _disruption(pool: NodePoolSpec, window: MaintenanceWindowSpec) -> dict[str, Any]:
    if pool.role == "serving":
        # Never consolidate a node holding a loaded model; replace for drift one node at a time, in the window.
        return {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": SERVING_CONSOLIDATE_AFTER,
            "budgets": [{"nodes": "1"}, _closed_budget(window)],
        }
    return {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": BATCH_CONSOLIDATE_AFTER}


def _lifetime(pool: NodePoolSpec) -> dict[str, str]:
    """expireAfter, and for batch the longest a drain may wait (section 5)."""
    if pool.role == "serving":
        # Without it karpenter.sh/do-not-disrupt holds interruption drains and drift forever (kubernetes-sigs/karpenter
        # v1.14.1 pkg/apis/v1/nodeclaim.go:57-73, pkg/controllers/disruption/types.go:189-192).
        return {"expireAfter": SERVING_EXPIRE_AFTER, "terminationGracePeriod": SERVING_NODE_TERMINATION_GRACE}
    return {"expireAfter": BATCH_EXPIRE_AFTER, "terminationGracePeriod": BATCH_TERMINATION_GRACE}


def disruption_summary(pool: NodePoolSpec, window: MaintenanceWindowSpec) -> dict[str, Any]:
    """What the plan says of how Karpenter may take the pool's nodes away."""
    disruption, lifetime = _disruption(pool, window), _lifetime(pool)
    return {
        "role": pool.role,
        "consolidation_policy": disruption["consolidationPolicy"],
        "consolidate_after": disruption["consolidateAfter"],
        "budgets": disruption.get("budgets", "Karpenter's default: 10% of the NodePool's nodes at once"),
        "expire_after": lifetime["expireAfter"],
        "termination_grace_period": lifetime.get("terminationGracePeriod"),
        "serving_pods_block_disruption": pool.role == "serving",
    }


def node_pools(
    pool: NodePoolSpec,
    *,
    environment: str,
    maintenance_window: MaintenanceWindowSpec,
) -> list[dict[str, Any]]:
    """One NodePool per plan of `plan_node_groups`: reserved first, then the on-demand baseline, then the burst
    (weights, section 5); at most the plan's nodes (`limits.nodes`), labelled and tainted as its node group is,
    on the EC2NodeClass `node_class_name` names for the plan."""
    hardware = PoolHardware(pool)
    taints = [
        {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value is not None else {})}
        for t in pool_taints(pool)
    ]
    objects = []
    for plan in plan_node_groups(pool):
        objects.append(
            {
                "apiVersion": NODE_POOL_API,
                "kind": NODE_POOL_KIND,
                "metadata": {"name": f"{environment}-{pool.name}-{plan.suffix}"},
                "spec": {
                    "weight": NODEPOOL_WEIGHTS[plan.suffix],
                    "limits": {"nodes": str(plan.max_size)},
                    "disruption": _disruption(pool, maintenance_window),
                    "template": {
                        "metadata": {"labels": node_labels(pool, hardware, plan.capacity_label)},
                        "spec": {
                            "nodeClassRef": {
                                "group": "karpenter.k8s.aws",
                                "kind": NODE_CLASS_KIND,
                                "name": node_class_name(environment, pool, plan),
                            },
                            "requirements": _requirements(pool, hardware, plan),
                            "taints": taints,
                            **_lifetime(pool),
                        },
                    },
                },
            }
        )
    return objects
