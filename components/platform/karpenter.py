"""Karpenter: launches GPU nodes for pending pods from a NodePool per capacity type of each pool and its EC2NodeClass.

The CRD chart is installed (and upgraded) beside the controller, as the Karpenter docs advise: the controller
chart installs its CRDs only on the first install (shared/reference/karpenter.md section 1). The controller
runs on the system node group (the chart's affinity keeps it off Karpenter's own nodes), takes AWS
credentials through the Pod Identity association the AWS layer made, and reads the interruption queue
the AWS layer wired to EventBridge. The node objects come from `karpenter_pools`, the same pool spec the
managed-node-group mode builds node groups from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.helm.v3 import Release

from inferstack.catalog.charts import chart
from inferstack.conventions import KARPENTER_SERVICE_ACCOUNT as SERVICE_ACCOUNT
from inferstack.helm import helm_release
from inferstack.aws.karpenter import spot_service_linked_role
from inferstack.platform.karpenter_pools import (
    CPU_POOL_SUFFIX,
    allows_spot,
    cpu_node_class,
    cpu_node_pool,
    ec2_node_classes,
    node_pools,
)
from inferstack.spec import StackSpec

CHART, CRD_CHART = "karpenter", "karpenter-crd"


@dataclass(frozen=True)
class KarpenterPoolNetwork:
    """Where a pool's nodes go: its subnets, security groups and (EFA) cluster placement group."""

    subnet_ids: pulumi.Input[Sequence[str]]
    security_group_ids: Sequence[pulumi.Input[str]]
    placement_group_name: pulumi.Input[str] | None = None


@dataclass(frozen=True)
class KarpenterArgs:
    spec: StackSpec
    cluster_name: pulumi.Input[str]
    node_role_name: pulumi.Input[str]
    interruption_queue_name: pulumi.Input[str]
    networks: Mapping[str, KarpenterPoolNetwork]  # by pool name
    depends_on: Sequence[pulumi.Resource] = ()   # the controller's Pod Identity association
    # The cluster's subnets and security group, for the CPU NodePool (platform.karpenter_cpu_pool) when it is on.
    system_network: KarpenterPoolNetwork | None = None
    node_access: pulumi.Resource | None = None   # the nodes' EKS access entry: nothing joins before it exists


def controller_values(spec: StackSpec, cluster_name: pulumi.Input[str], queue_name: pulumi.Input[str]) -> dict[str, Any]:
    """Chart values: the cluster, the interruption queue, the pinned image, and node repair when a pool asks for it
    (Karpenter's NodeRepair gate, section 8: force-replaces a node whose AcceleratedHardwareReady stays False 10 min)."""
    image, digest = chart(CHART).extra["image"].split("@")
    repository, tag = image.rsplit(":", 1)
    return {
        "settings": {
            "clusterName": cluster_name,
            "interruptionQueue": queue_name,
            "featureGates": {"nodeRepair": any(pool.auto_repair for pool in spec.node_pools)},
        },
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        "controller": {
            "image": {"repository": repository, "tag": tag, "digest": digest},
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        },
    }


class Karpenter(pulumi.ComponentResource):
    """The CRD chart, the controller chart, and per pool its EC2NodeClasses and NodePools."""

    release: Release
    node_classes: dict[str, CustomResource]  # by class name less the environment: `<pool>` or `<pool>-<suffix>`
    node_pools: dict[str, list[CustomResource]]
    cpu_pool: CustomResource | None  # the system pods' CPU NodePool, when platform.karpenter_cpu_pool is on

    def __init__(self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:Karpenter", name, None, opts)
        spec = args.spec
        namespace = chart(CHART).namespace
        crds = helm_release(
            f"{name}-crds", CRD_CHART, namespace=namespace, values={}, opts=pulumi.ResourceOptions(parent=self)
        )
        controller = helm_release(
            f"{name}-release",
            CHART,
            namespace=namespace,
            values=controller_values(spec, args.cluster_name, args.interruption_queue_name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[crds, *args.depends_on]),
        )
        # A node launched before its role's access entry exists cannot join; Karpenter deletes it after its
        # registration timeout and tries again, so the node objects wait for the entry.
        # They also wait for the controller, so that Pulumi (which deletes a resource before what it depends on) deletes
        # them while the controller still runs: its finalizers on NodePools, EC2NodeClasses and NodeClaims terminate
        # the instances; with the controller gone first they hang and the instances keep running outside the state.
        after_crds = pulumi.ResourceOptions(
            parent=self,
            depends_on=[crds, controller, *([args.node_access] if args.node_access is not None else [])],
        )
        spot_role = spot_service_linked_role(name, spec, pulumi.ResourceOptions(parent=self))
        # A spot NodePool launches nothing the account's EC2 Spot service-linked role does not allow yet.
        after_spot_role = pulumi.ResourceOptions.merge(
            after_crds, pulumi.ResourceOptions(depends_on=[spot_role] if spot_role is not None else [])
        )
        self.node_classes, self.node_pools = {}, {}
        for pool in spec.node_pools:
            network = args.networks[pool.name]
            classes = ec2_node_classes(
                pool,
                environment=spec.environment,
                node_role_name=args.node_role_name,
                subnet_ids=network.subnet_ids,
                security_group_ids=list(network.security_group_ids),
                placement_group_name=network.placement_group_name,
                tags=dict(spec.tags),
            )
            for node_class in classes:
                short = node_class["metadata"]["name"].removeprefix(spec.environment + "-")
                self.node_classes[short] = self._object(f"{name}-{short}-nodeclass", node_class, after_crds)
            self.node_pools[pool.name] = [
                self._object(
                    f"{name}-{body['metadata']['name'].removeprefix(spec.environment + '-')}",
                    body,
                    after_spot_role if allows_spot(body) else after_crds,
                )
                for body in node_pools(
                    pool, environment=spec.environment, maintenance_window=spec.platform.maintenance_window,
                )
            ]
        self.cpu_pool = self._cpu_pool(name, args, after_crds) if spec.platform.karpenter_cpu_pool.enabled else None
        self.release = controller
        self.register_outputs(
            {
                "release": controller.status,
                "node_classes": sorted(self.node_classes),
                "node_pools": {pool: [p.metadata["name"] for p in pools] for pool, pools in self.node_pools.items()},
            }
        )

    def _cpu_pool(self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions) -> CustomResource:
        """The CPU NodePool and its EC2NodeClass, on the cluster's subnets and security group."""
        spec, network = args.spec, args.system_network
        if network is None:
            raise ValueError("platform.karpenter_cpu_pool is on but KarpenterArgs.system_network is not given")
        node_class = cpu_node_class(
            environment=spec.environment,
            node_role_name=args.node_role_name,
            subnet_ids=network.subnet_ids,
            security_group_ids=list(network.security_group_ids),
            tags=dict(spec.tags),
        )
        self._object(f"{name}-{CPU_POOL_SUFFIX}-nodeclass", node_class, opts)
        return self._object(f"{name}-{CPU_POOL_SUFFIX}", cpu_node_pool(spec.environment, spec.platform.karpenter_cpu_pool), opts)

    @staticmethod
    def _object(resource_name: str, body: Mapping[str, Any], opts: pulumi.ResourceOptions) -> CustomResource:
        return CustomResource(
            resource_name,
            api_version=body["apiVersion"],
            kind=body["kind"],
            metadata=body["metadata"],
            spec=body["spec"],
            opts=opts,
        )
