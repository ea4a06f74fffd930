"""The platform layer's refusals: what the GPU operator, the node autoscaler (cluster-autoscaler or Karpenter),
KEDA and LeaderWorkerSet must be able to do for the stack's pools and services."""

from __future__ import annotations

from inferstack.catalog.charts import cluster_autoscaler_image_tags
from inferstack.catalog.karpenter import NEWEST_KUBERNETES
from inferstack.spec import CreateCluster, MigSharing, ModelServiceSpec, MpsSharing, StackSpec
from inferstack.spec.errors import SpecError, refusals_of
from inferstack.spec.pools import WHOLE_GPU, PoolHardware


def stack_refusals(spec: StackSpec) -> list[SpecError]:
    """The cluster-wide settings: one MIG strategy, one node-repair switch under Karpenter, a node autoscaler
    built for the cluster's Kubernetes minor."""
    return refusals_of(
        lambda: _check_gpu_operator(spec),
        lambda: _check_karpenter_repair(spec),
        lambda: _check_autoscaler_version(spec),
    )


def pool_refusals(spec: StackSpec, index: int, hardware: PoolHardware) -> list[SpecError]:
    """Under Karpenter: a pool advertises only what Karpenter sees before a node exists, and keeps no idle node."""
    if not spec.platform.karpenter:
        return []
    path = f"node_pools[{index}]"
    return refusals_of(lambda: _check_karpenter_pool(path, hardware), lambda: _check_no_idle_nodes(path, hardware))


def check_model(spec: StackSpec, path: str, model: ModelServiceSpec) -> None:
    """A service that scales needs KEDA; a replica over several nodes needs LeaderWorkerSet."""
    if model.multi_node and not spec.platform.leaderworkerset:
        field = "pipeline_parallel" if model.pipeline_parallel > 1 else "data_parallel_local"
        raise SpecError(
            f"{path}.{field}",
            "multi-node models run as LeaderWorkerSets but platform.leaderworkerset is false",
            "set platform.leaderworkerset to true",
        )
    scaling = model.autoscaling
    if scaling.max_replicas > scaling.min_replicas and not spec.platform.keda:
        raise SpecError(
            f"{path}.autoscaling",
            "autoscaling needs KEDA but platform.keda is false",
            "set platform.keda to true or min_replicas equal to max_replicas",
        )


def worker_refusals(spec: StackSpec) -> list[SpecError]:
    """Queue-fed workers scale with KEDA."""
    if spec.platform.keda:
        return []
    return [
        SpecError(f"workers[{i}]", "queue-fed workers scale with KEDA but platform.keda is false", "set platform.keda to true")
        for i in range(len(spec.workers))
    ]


def major_minor(version: str) -> tuple[int, int]:
    """'1.36' (a Kubernetes minor) or '9.0' (a compute capability) as numbers that compare."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _check_autoscaler_version(spec: StackSpec) -> None:
    cluster = spec.cluster
    if not isinstance(cluster, CreateCluster):
        return
    tags = cluster_autoscaler_image_tags()
    if spec.platform.node_autoscaler == "cluster-autoscaler" and cluster.kubernetes_version not in tags:
        raise SpecError(
            "cluster.kubernetes_version",
            f"the chart catalog has no cluster-autoscaler image for Kubernetes {cluster.kubernetes_version} "
            f"(it has {', '.join(tags)})",
            "use one of those versions, add the image to components/catalog/charts.json, "
            "or set platform.node_autoscaler to 'none'",
        )
    if spec.platform.karpenter and major_minor(cluster.kubernetes_version) > major_minor(NEWEST_KUBERNETES):
        raise SpecError(
            "cluster.kubernetes_version",
            f"the pinned Karpenter supports Kubernetes up to {NEWEST_KUBERNETES} (its compatibility table, "
            "shared/reference/karpenter.md section 1)",
            f"use {NEWEST_KUBERNETES} or older, or pin a newer Karpenter in components/catalog/charts.json",
        )


def _check_gpu_operator(spec: StackSpec) -> None:
    """The GPU operator sets one MIG strategy for every node, and its device plugin refuses MPS under 'mixed'."""
    mig = [(i, p) for i, p in enumerate(spec.node_pools) if isinstance(p.gpu_sharing, MigSharing)]
    if not mig:
        return
    _, first = mig[0]
    strategy = first.gpu_sharing.strategy
    for i, pool in mig[1:]:
        if pool.gpu_sharing.strategy != strategy:
            raise SpecError(
                f"node_pools[{i}].gpu_sharing.strategy",
                f"the GPU operator applies one MIG strategy to the whole cluster, but pool {first.name!r} uses "
                f"{strategy!r} and pool {pool.name!r} uses {pool.gpu_sharing.strategy!r}",
                f"use the same strategy on every MIG pool, e.g. {strategy!r}",
            )
    if strategy == "mixed":
        for i, pool in enumerate(spec.node_pools):
            if isinstance(pool.gpu_sharing, MpsSharing):
                raise SpecError(
                    f"node_pools[{i}].gpu_sharing.mode",
                    f"the NVIDIA device plugin refuses MPS when the cluster's MIG strategy is 'mixed' "
                    f"(set by pool {first.name!r})",
                    "use time_slicing on this pool, or strategy 'single' on the MIG pools",
                )


def _check_karpenter_repair(spec: StackSpec) -> None:
    """Karpenter's node repair is one feature gate for the whole controller (settings.featureGates.nodeRepair,
    shared/reference/karpenter.md section 8), so under Karpenter every pool is repaired or none is."""
    if not spec.platform.karpenter or len({pool.auto_repair for pool in spec.node_pools}) < 2:
        return
    repaired = next(pool.name for pool in spec.node_pools if pool.auto_repair)
    index, pool = next((i, p) for i, p in enumerate(spec.node_pools) if not p.auto_repair)
    raise SpecError(
        f"node_pools[{index}].auto_repair",
        f"false, but Karpenter's node repair is one switch for the controller: with {repaired!r} repaired, the "
        f"nodes of {pool.name!r} would be replaced too",
        "set auto_repair the same on every pool, or use platform.node_autoscaler 'cluster-autoscaler', whose node "
        "groups are repaired one by one",
    )


def _check_karpenter_pool(path: str, hardware: PoolHardware) -> None:
    """What Karpenter can launch for: it sizes a node from the instance type's own resources (nvidia.com/gpu),
    so a pod asking for a MIG profile or a renamed GPU share never gets a node (the resources exist only once the
    GPU operator runs there; Karpenter's NodeOverlay, which would declare them, is alpha: shared/reference/
    karpenter.md sections 2 and 5). MIG strategy single advertises its slices as nvidia.com/gpu, which Karpenter
    sees, though it counts the instance's GPUs, not the slices: it may launch a node too many for a burst, which
    consolidates once empty."""
    pool = hardware.spec
    hidden = sorted(set(hardware.resources_per_node) - {WHOLE_GPU})
    if hidden:
        raise SpecError(
            f"{path}.gpu_sharing",
            f"pool {pool.name!r} advertises {', '.join(hidden)}, which Karpenter cannot see on an instance type "
            "before the node exists, so pods asking for it would never get a node",
            "use MIG strategy 'single' (slices advertised as nvidia.com/gpu), whole GPUs (gpu_sharing mode 'none'), "
            "or platform.node_autoscaler 'cluster-autoscaler'",
        )


def _check_no_idle_nodes(path: str, hardware: PoolHardware) -> None:
    """Karpenter launches nodes for pending pods and removes empty ones (shared/reference/karpenter.md sections
    4.1 and 5), so a pool's min_nodes would never hold."""
    pool = hardware.spec
    if pool.min_nodes > 0:
        raise SpecError(
            f"{path}.min_nodes",
            f"{pool.min_nodes} with platform.node_autoscaler 'karpenter': Karpenter launches nodes for pending "
            "pods and removes empty ones, so no minimum of idle nodes is kept",
            "set min_nodes to 0: the services' autoscaling.min_replicas keep their nodes running, and "
            "capacity.on_demand_base says how many of them are on-demand",
        )
