"""The cluster platform: every add-on the serving layer builds on, installed in parallel.

Only the waits that are required are expressed (dependency_rule.DependencyRule): the GPU operator and the
EFA device plugin wait for the GPU node pools (their DaemonSets run there), controllers run on the
system nodes (the Kubernetes provider waits for those), and each custom resource waits for the release
that installs its CRD. Nothing else is serialised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
from pulumi_kubernetes.core.v1 import Namespace
from pulumi_kubernetes.helm.v3 import Release

from inferstack.platform.autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
from inferstack.platform.dra_drivers import DraDrivers, DraDriversArgs, dra_pools
from inferstack.platform.efa import EfaDevicePlugin, EfaDevicePluginArgs, efa_pools
from inferstack.planning.pool_capacity import advertised_per_node
from inferstack.platform.gpu_operator import GpuOperator, GpuOperatorArgs
from inferstack.platform.karpenter import Karpenter, KarpenterArgs
from inferstack.platform.keda import Keda, KedaArgs
from inferstack.platform.kueue import Kueue, KueueArgs
from inferstack.platform.lws import LeaderWorkerSet, LeaderWorkerSetArgs
from inferstack.platform.metrics import Metrics, MetricsArgs
from inferstack.platform.namespaces import Namespaces, NamespacesArgs
from inferstack.spec import StackSpec
from inferstack.spec.pools import PoolHardware


@dataclass(frozen=True)
class ClusterPlatformArgs:
    spec: StackSpec
    cluster_name: pulumi.Input[str]
    # The GPU node groups: the GPU operator's and EFA device plugin's DaemonSets run on them.
    node_pool_dependencies: Sequence[pulumi.Resource] = ()
    # Under platform.node_autoscaler 'karpenter': what the controller and its node objects are built from.
    karpenter: KarpenterArgs | None = None


class ClusterPlatform(pulumi.ComponentResource):
    """GPU operator, EFA device plugin, DRA drivers, Kueue, KEDA, LeaderWorkerSet, metrics, cluster-autoscaler and the
    serving and batch namespaces. Pass the cluster's Kubernetes provider and the stack's AWS provider (for
    the autoscaler's IAM role) in `opts.providers`; every child inherits them."""

    namespaces: dict[str, Namespace]  # by role: 'serving', 'batch'
    crd_releases: dict[str, Release]  # 'gpu-operator', 'kueue', 'keda', 'lws', 'prometheus' (those installed)
    advertised: dict[str, dict[str, int]]  # pool -> resource -> units per node
    prometheus_url: str
    kueue: Kueue | None

    def __init__(self, name: str, args: ClusterPlatformArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:ClusterPlatform", name, None, opts)
        spec = args.spec
        child = pulumi.ResourceOptions(parent=self)
        after_pools = list(args.node_pool_dependencies)

        self.namespaces = Namespaces(f"{name}-namespaces", NamespacesArgs(spec), child).by_role
        gpu_operator = GpuOperator(f"{name}-gpu-operator", GpuOperatorArgs(spec, after_pools), child)
        self.crd_releases = {"gpu-operator": gpu_operator.release}
        if efa_pools(spec.node_pools):
            EfaDevicePlugin(f"{name}-efa", EfaDevicePluginArgs(spec.node_pools, after_pools), child)
        if dra_pools(spec.node_pools):
            DraDrivers(f"{name}-dra", DraDriversArgs(spec.node_pools, after_pools), child)
        self.kueue = None
        if spec.queues.enabled:
            self.kueue = Kueue(f"{name}-kueue", KueueArgs(spec, self.namespaces), child)
            self.crd_releases["kueue"] = self.kueue.release
        if spec.platform.keda:
            self.crd_releases["keda"] = Keda(f"{name}-keda", KedaArgs(), child).release
        if spec.platform.leaderworkerset:
            self.crd_releases["lws"] = LeaderWorkerSet(f"{name}-lws", LeaderWorkerSetArgs(), child).release
        metrics = Metrics(
            f"{name}-metrics", MetricsArgs(spec.observability, self.namespaces["serving"]), child
        )
        if metrics.release is not None:
            self.crd_releases["prometheus"] = metrics.release
        self.prometheus_url = metrics.prometheus_url
        if spec.platform.node_autoscaler == "cluster-autoscaler":
            ClusterAutoscaler(
                f"{name}-autoscaler", ClusterAutoscalerArgs(spec, args.cluster_name), child
            )
        if args.karpenter is not None:
            Karpenter(f"{name}-karpenter", args.karpenter, child)
        self.advertised = {pool.name: advertised_per_node(PoolHardware(pool)) for pool in spec.node_pools}
        self.register_outputs(
            {
                "namespaces": {role: ns.metadata.name for role, ns in self.namespaces.items()},
                "crd_releases": sorted(self.crd_releases),
                "advertised": self.advertised,
                "prometheus_url": self.prometheus_url,
            }
        )
