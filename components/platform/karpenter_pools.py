"""A pool's Karpenter objects: one EC2NodeClass (how its nodes are made) and a NodePool per capacity plan.

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
from inferstack.spec import MaintenanceWindowSpec, NodePoolSpec
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


def _closed_budget(window: MaintenanceWindowSpec) -> dict[str, Any]:
    """A budget of 0 from the window's end to its next start: the most restrictive active budget wins (section 5)."""
    return {
        "nodes": "0",
        "reasons": ["Drifted"],  # a WhenEmpty pool is never Underutilized
        "schedule": f"0 {(window.start_hour_utc + window.hours) % 24} * * *",
        "duration": f"{24 - window.hours}h",
    }


def node_class_name(environment: str, pool: NodePoolSpec) -> str:
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
    *,
    environment: str,
    node_role_name: pulumi.Input[str],
    subnet_ids: Sequence[pulumi.Input[str]] | pulumi.Output,
    security_group_ids: Sequence[pulumi.Input[str]],
    placement_group_name: pulumi.Input[str] | None,
    tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The pool's EC2NodeClass: AMI alias, network, IMDSv2, disks and NVMe cache, EFA, placement, reservation.

    EFA pools use the first subnet only: a cluster placement group and EFA traffic stay in one zone (section 4.4).
    A reserved pool joins no placement group of the stack's (`joins_no_placement_group`): Karpenter puts every
    instance of a node class into its one group (section 4.4), the reservation's included.
    """
    name = node_class_name(environment, pool)
    spec: dict[str, Any] = {
        "amiSelectorTerms": [{"alias": ami_alias(pool)}],
        "role": node_role_name,
        "subnetSelectorTerms": _id_terms(subnet_ids, first_only=pool.efa.enabled),
        "securityGroupSelectorTerms": _id_terms(security_group_ids),
        # IMDSv2 only, one hop: pods get AWS credentials from Pod Identity, never the node's role (section 3.6).
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
        "blockDeviceMappings": _block_devices(pool),
        "tags": {"Name": name, **(tags or {})},
        **_storage(pool),
    }
    reservation = pool.capacity.reservation
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
    node_class_name: str,
    maintenance_window: MaintenanceWindowSpec,
) -> list[dict[str, Any]]:
    """One NodePool per plan of `plan_node_groups`: reserved first, then the on-demand baseline, then the burst
    (weights, section 5); at most the plan's nodes (`limits.nodes`), labelled and tainted as its node group is."""
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
                            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": NODE_CLASS_KIND, "name": node_class_name},
                            "requirements": _requirements(pool, hardware, plan),
                            "taints": taints,
                            **_lifetime(pool),
                        },
                    },
                },
            }
        )
    return objects
