"""What a pool needs before its pods can claim devices through Dynamic Resource Allocation, and what a service's
claims need of the pool's nodes.

Each refusal names the upstream fact behind it (components/catalog/dra.json): the Kubernetes minor the API and the
EFA driver need, the pinned Karpenter's missing DRA support, the GPU driver's lack of shares a claim per pod can
use, Kueue's one resource name per DeviceClass, cluster-autoscaler's templates without devices, and the PCIe
layout a GPU-EFA pairing is built on.
"""

from __future__ import annotations

from inferstack.catalog.dra import MINIMUM_KUBERNETES, MINIMUM_KUBERNETES_EFA, UNSUPPORTED, pcie_layout
from inferstack.planning.device_claims import pod_claims, uses_dra
from inferstack.planning.node_groups import plan_node_groups
from inferstack.platform.refusals import major_minor
from inferstack.spec import CreateCluster, MigSharing, ModelServiceSpec, MpsSharing, StackSpec, TimeSlicing
from inferstack.spec.errors import SpecError, refusals_of
from inferstack.spec.pools import PoolHardware


def pool_refusals(spec: StackSpec, index: int, hardware: PoolHardware) -> list[SpecError]:
    path = f"node_pools[{index}]"
    pool = hardware.spec
    if pool.device_mode != "dra":
        if pool.gpu_selector is None:
            return []
        return [SpecError(
            f"{path}.gpu_selector",
            "is set, but only DRA claims select GPUs by their attributes: the device plugin hands out any GPU of the node",
            "set device_mode to 'dra', or remove gpu_selector",
        )]
    return refusals_of(
        lambda: _check_kubernetes(spec, path, hardware),
        lambda: _check_node_autoscaler(spec, path, hardware),
        lambda: _check_sharing(path, hardware),
        lambda: _check_pcie_layouts(path, hardware),
        lambda: _check_gpu_selector(path, hardware),
    )


def check_model(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """A service's pods on a DRA pool: each pod's claims can be met on one node of the pool."""
    if uses_dra(hardware):
        pod_claims(model, hardware, path)


def _check_kubernetes(spec: StackSpec, path: str, hardware: PoolHardware) -> None:
    cluster = spec.cluster
    if not isinstance(cluster, CreateCluster):
        raise SpecError(
            f"{path}.device_mode",
            f"'dra' needs Kubernetes {MINIMUM_KUBERNETES} or newer, and the version of an existing cluster is not "
            "known to the stack",
            "use device_mode 'device_plugin' on an existing cluster, or let the stack create the cluster "
            f"(cluster.mode 'create', kubernetes_version {MINIMUM_KUBERNETES} or newer)",
        )
    version = cluster.kubernetes_version
    if major_minor(version) < major_minor(MINIMUM_KUBERNETES):
        raise SpecError(
            f"{path}.device_mode",
            f"'dra' needs Kubernetes {MINIMUM_KUBERNETES} or newer (resource.k8s.io/v1), and "
            f"cluster.kubernetes_version is {version}",
            f"raise cluster.kubernetes_version to {MINIMUM_KUBERNETES} or newer, or use device_mode 'device_plugin'",
        )
    if hardware.spec.efa.enabled and major_minor(version) < major_minor(MINIMUM_KUBERNETES_EFA):
        raise SpecError(
            f"{path}.device_mode",
            f"'dra' on an EFA pool needs Kubernetes {MINIMUM_KUBERNETES_EFA} or newer (AWS's EFA DRA driver, "
            f"aws-dranet, requires it), and cluster.kubernetes_version is {version}",
            f"raise cluster.kubernetes_version to {MINIMUM_KUBERNETES_EFA} or newer, or use device_mode "
            "'device_plugin' on this pool",
        )


def _check_node_autoscaler(spec: StackSpec, path: str, hardware: PoolHardware) -> None:
    if spec.platform.karpenter:
        raise SpecError(
            f"{path}.device_mode",
            f"'dra' under platform.node_autoscaler 'karpenter': {UNSUPPORTED['karpenter']}",
            "use device_mode 'device_plugin' on this pool, or platform.node_autoscaler 'cluster-autoscaler'",
        )
    if spec.platform.node_autoscaler != "cluster-autoscaler":
        return
    pool = hardware.spec
    for group in plan_node_groups(pool):
        if group.min_size == 0 and group.max_size > 0 and group.reservation is None:
            base = pool.capacity.on_demand_base
            which = "" if base == 0 else f" ({group.capacity_label} above the on-demand baseline of {base})"
            raise SpecError(
                f"{path}.min_nodes",
                f"{pool.min_nodes} on a DRA pool leaves its {group.suffix} node group{which} empty: "
                f"{UNSUPPORTED['scale_from_zero']}, so cluster-autoscaler would never add a node to it for a pod "
                "that claims devices",
                f"set min_nodes to {base + 1} or more (a standing node in each of the pool's node groups shows the "
                f"autoscaler the devices a new one brings), set capacity.on_demand_base to max_nodes "
                f"({pool.max_nodes}: one fixed group), or use device_mode 'device_plugin'",
            )


def _check_sharing(path: str, hardware: PoolHardware) -> None:
    sharing = hardware.spec.gpu_sharing
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        raise SpecError(
            f"{path}.gpu_sharing.mode",
            f"{sharing.mode!r} under device_mode 'dra': {UNSUPPORTED['sharing']}",
            "use whole GPUs or MIG strategy 'single' on a DRA pool, or device_mode 'device_plugin' to share GPUs",
        )
    if isinstance(sharing, MigSharing) and sharing.strategy != "single":
        raise SpecError(
            f"{path}.gpu_sharing.strategy",
            f"{sharing.strategy!r} under device_mode 'dra': Kueue counts every device of the MIG DeviceClass as one "
            "resource (kueue v0.19.2 Resources.DeviceClassMappings maps a class to one name), so slices of "
            "different profiles could not keep quotas of their own",
            "use strategy 'single' (one profile on every GPU), or device_mode 'device_plugin'",
        )


def _check_pcie_layouts(path: str, hardware: PoolHardware) -> None:
    """An EFA pool's claims pair GPUs with the EFA devices of their PCIe root: every type needs its layout."""
    if not hardware.spec.efa.enabled:
        return
    for position, instance in enumerate(hardware.instance_types):
        if pcie_layout(instance.name) is None:
            raise SpecError(
                f"{path}.instance_types[{position}]",
                f"{instance.name!r} under device_mode 'dra' with EFA: its PCIe layout (which EFA devices share a "
                "root with each GPU) is not in components/catalog/dra.json, so no claim could pair them",
                "use an instance type whose layout is recorded (p5.48xlarge), device_mode 'device_plugin', or "
                "record the type's layout in components/catalog/dra.json with its source",
            )


def _check_gpu_selector(path: str, hardware: PoolHardware) -> None:
    """A selector no GPU of the pool matches makes every claim unmeetable."""
    chosen = hardware.spec.gpu_selector
    if chosen is None:
        return
    gpu = hardware.gpu
    family = gpu.name.split("-")[0]
    if chosen.product is not None and family.lower() not in chosen.product.lower():
        raise SpecError(
            f"{path}.gpu_selector.product",
            f"{chosen.product!r} cannot name the pool's GPUs, which are {gpu.name}",
            f"name the product the driver reports for a {gpu.name} (it contains {family!r}), or remove product",
        )
    wanted = chosen.min_compute_capability
    if wanted is not None and major_minor(wanted) > major_minor(gpu.compute_capability):
        raise SpecError(
            f"{path}.gpu_selector.min_compute_capability",
            f"{wanted}, but the pool's {gpu.name} GPUs have compute capability {gpu.compute_capability}, so no "
            "claim could be met",
            f"set it to {gpu.compute_capability} or lower, or remove it",
        )
