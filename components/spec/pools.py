"""What a node pool offers the scheduler, derived once from its spec and the hardware catalog.

The platform layer advertises these resources (device plugin, MIG manager), Kueue sets quotas on
them and the serving layer requests them: all three read this module so the names cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from inferstack.catalog import Gpu, InstanceType, instance_type
from inferstack.spec.node_pools import MigSharing, MpsSharing, NodePoolSpec, TimeSlicing

WHOLE_GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
EFA_RESOURCE = "vpc.amazonaws.com/efa"


@dataclass(frozen=True)
class PoolHardware:
    """A pool's spec joined with its catalog facts."""

    spec: NodePoolSpec

    @cached_property
    def instance_types(self) -> tuple[InstanceType, ...]:
        return tuple(instance_type(name) for name in self.spec.instance_types)

    @property
    def primary(self) -> InstanceType:
        """The first instance type: the one used for sizing, network cards and on-demand nodes."""
        return self.instance_types[0]

    @property
    def gpu(self) -> Gpu:
        return self.primary.gpu

    @property
    def gpus_per_node(self) -> int:
        return self.primary.gpu_count

    @cached_property
    def resources_per_node(self) -> dict[str, int]:
        """Extended resources one node advertises, e.g. {'nvidia.com/mig-3g.40gb': 16}."""
        sharing = self.spec.gpu_sharing
        gpus = self.gpus_per_node
        if isinstance(sharing, MigSharing):
            if sharing.strategy == "single":
                return {WHOLE_GPU: gpus * sum(sharing.layout.values())}
            return {f"nvidia.com/mig-{profile}": gpus * count for profile, count in sharing.layout.items()}
        if isinstance(sharing, (TimeSlicing, MpsSharing)):
            return {SHARED_GPU: gpus * sharing.replicas}
        return {WHOLE_GPU: gpus}

    def resource_for_slice(self, mig_profile: str | None) -> str:
        """The resource name a pod requests on this pool (for a MIG profile, or a whole/shared GPU)."""
        sharing = self.spec.gpu_sharing
        if isinstance(sharing, MigSharing):
            if sharing.strategy == "single":
                return WHOLE_GPU
            return f"nvidia.com/mig-{mig_profile}"
        if isinstance(sharing, (TimeSlicing, MpsSharing)):
            return SHARED_GPU
        return WHOLE_GPU

    @property
    def max_resources(self) -> dict[str, int]:
        """What the pool can ever hold: per-node resources times max_nodes."""
        return {name: count * self.spec.max_nodes for name, count in self.resources_per_node.items()}

    @property
    def efa_interfaces(self) -> int:
        """One EFA interface per network card (bounded by the type's EFA maximum)."""
        if not self.spec.efa.enabled:
            return 0
        return min(self.primary.network_cards, self.primary.max_efa_interfaces)
