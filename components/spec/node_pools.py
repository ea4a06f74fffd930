"""GPU node pools: their instance types, how their nodes are bought, GPU sharing, EFA and the NVMe cache."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, StringConstraints, field_validator

from inferstack.spec.base import Model, Name

class NoSharing(Model):
    """Each pod gets whole GPUs."""

    mode: Literal["none"] = Field("none", description="Whole GPUs per pod.")


class MigSharing(Model):
    """Multi-Instance GPU: every GPU of the pool is split into the same layout of hardware slices."""

    mode: Literal["mig"] = Field(description="Partition every GPU with MIG.")
    strategy: Literal["single", "mixed"] = Field(
        "mixed",
        description="GPU operator MIG strategy: 'single' advertises slices as nvidia.com/gpu (one profile only), "
        "'mixed' as nvidia.com/mig-<profile>. Defaults to mixed.",
    )
    layout: dict[str, Annotated[int, Field(ge=1, le=7)]] = Field(
        description="Slices per GPU, profile -> count, e.g. {'3g.40gb': 2} or {'1g.10gb': 2, '2g.20gb': 1, '3g.40gb': 1}. "
        "Required.",
        min_length=1,
    )


class TimeSlicing(Model):
    """Time-sliced sharing: pods take turns on a GPU; no memory isolation."""

    mode: Literal["time_slicing"] = Field(description="Share GPUs by time-slicing.")
    replicas: int = Field(4, ge=2, le=48, description="Pods per GPU. Defaults to 4.")


class MpsSharing(Model):
    """CUDA MPS: concurrent kernels with memory and compute split equally; full GPUs only."""

    mode: Literal["mps"] = Field(description="Share GPUs with CUDA MPS.")
    replicas: int = Field(2, ge=2, le=48, description="Pods per GPU. Defaults to 2.")


GpuSharing = Annotated[Union[NoSharing, MigSharing, TimeSlicing, MpsSharing], Field(discriminator="mode")]


class Taint(Model):
    key: str = Field(description="Taint key. Required.")
    value: str | None = Field(None, description="Taint value. Defaults to none.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "NoSchedule", description="Taint effect. Defaults to NoSchedule."
    )


class Reservation(Model):
    """Reserved capacity backing the pool's on-demand nodes."""

    kind: Literal["odcr", "capacity_block"] = Field(
        description="'odcr' (on-demand capacity reservation) or 'capacity_block' (EC2 Capacity Block for ML). Required."
    )
    id: Annotated[str, StringConstraints(pattern=r"^cr-[0-9a-f]{8,17}$")] = Field(description="Reservation id (cr-...). Required.")
    availability_zone: str | None = Field(
        None, pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$",
        description="The zone the reservation is in, checked against the pool's first zone (where its reserved "
        "nodes launch). Defaults to unchecked.",
    )


class CapacitySpec(Model):
    """How the pool's nodes are bought: an on-demand baseline, spot above it, or reserved capacity."""

    on_demand_base: int = Field(
        0,
        ge=0,
        description="Nodes that always run on-demand (the serving baseline); the minimum replicas of the pool's "
        "online services must fit on them. Defaults to 0.",
    )
    spot: bool = Field(
        True,
        description="Nodes above the on-demand baseline run on spot across the pool's instance types. "
        "When false they are on-demand too. Defaults to true.",
    )
    reservation: Reservation | None = Field(
        None, description="Capacity reservation or block for the on-demand nodes. Defaults to none."
    )


class EfaSpec(Model):
    """Elastic Fabric Adapter networking for multi-node tensor/pipeline parallel traffic."""

    enabled: bool = Field(False, description="Attach one EFA interface per network card. Defaults to false.")
    placement_group: str | None = Field(
        None,
        description="Name of an existing cluster placement group to launch into. "
        "Defaults to none: the pool creates its own when create_placement_group is true.",
    )
    create_placement_group: bool = Field(
        True,
        description="Create a cluster placement group for the pool's groups. A Capacity Block group never joins it "
        "(the block brings its own placement), nor a reserved group (an ODCR serves only the placement group it was "
        "created in: name that one in placement_group); set false when placement_group names one. Defaults to true.",
    )


class NvmeCacheSpec(Model):
    """Local NVMe instance store assembled into one volume that holds the model cache."""

    enabled: bool = Field(True, description="Assemble the instance-store disks into the model cache. Defaults to true.")
    raid: Literal["RAID0", "RAID10"] = Field(
        "RAID0", description="nodeadm localStorage strategy. RAID10 needs 4+ disks. Defaults to RAID0."
    )
    budget_percent: int = Field(
        80,
        ge=10,
        le=95,
        description="Share of the volume under the model cache (the NVMe array, or the root EBS volume when the "
        "cache is disabled) that cached weights may fill; beyond it the least recently used superseded versions "
        "are evicted. The rest stays free for container images and pod data, which nodeadm keeps on the same "
        "array. Defaults to 80.",
    )


class GpuSelector(Model):
    """Which GPUs a DRA claim may take, by the attributes the NVIDIA DRA driver publishes."""

    product: str | None = Field(
        None, min_length=1,
        description="The GPU's product name exactly as the driver reports it (NVML), e.g. 'NVIDIA H100 80GB HBM3'; "
        "it must name the pool's GPU model, but the variant's exact spelling is not in the catalog, so a name no GPU "
        "reports leaves the claims unmet. Defaults to any.",
    )
    min_compute_capability: Annotated[str, StringConstraints(pattern=r"^\d+\.\d+$")] | None = Field(
        None, description="The lowest CUDA compute capability a claimed GPU may have, e.g. '9.0'. Defaults to any."
    )


def _bool_to_enabled(value):
    """Let `efa=True` / `nvme_cache=False` stand for the full object."""
    return {"enabled": value} if isinstance(value, bool) else value


class NodePoolSpec(Model):
    """A group of GPU nodes of interchangeable instance types."""

    name: Name = Field(description="Pool name, used in node labels and resource names. Required.")
    role: Literal["serving", "batch"] = Field(
        "serving", description="'serving' pools keep an on-demand baseline; 'batch' pools may be all spot. Defaults to serving."
    )
    instance_types: list[str] = Field(
        min_length=1,
        description="EC2 instance types, all with the same GPU model and count; several give spot more pools "
        "to draw from. Required.",
    )
    min_nodes: int = Field(
        0, ge=0, description="Minimum nodes; at least 1 when platform.node_autoscaler is 'none'. Defaults to 0."
    )
    max_nodes: int = Field(ge=1, description="Maximum nodes. Required.")
    capacity: CapacitySpec = Field(default_factory=CapacitySpec, description="Purchase options. Defaults to all spot.")
    efa: EfaSpec = Field(default_factory=EfaSpec, description="EFA networking (true/false or an object). Defaults to off.")
    nvme_cache: NvmeCacheSpec = Field(
        default_factory=NvmeCacheSpec, description="NVMe model cache (true/false or an object). Defaults to on, RAID0."
    )
    gpu_sharing: GpuSharing = Field(default_factory=NoSharing, description="GPU sharing mode. Defaults to none.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra node labels. Defaults to none.")
    taints: list[Taint] = Field(
        default_factory=list,
        description="Extra taints; every GPU pool is always tainted nvidia.com/gpu=true:NoSchedule. Defaults to none.",
    )
    availability_zones: list[str] = Field(
        default_factory=list,
        description="Zones the pool may use. Defaults to all cluster zones (EFA pools use the first zone only).",
    )
    disk_size_gib: int = Field(200, ge=50, le=16384, description="Root EBS volume size. Defaults to 200 GiB.")
    ami_type: Literal["AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA"] = Field(
        "AL2023_x86_64_NVIDIA", description="EKS AMI type. Defaults to AL2023_x86_64_NVIDIA."
    )
    device_mode: Literal["device_plugin", "dra"] = Field(
        "device_plugin",
        description="How pods get the pool's GPUs and EFA devices: 'device_plugin' (extended resources nvidia.com/gpu "
        "and vpc.amazonaws.com/efa) or 'dra' (Dynamic Resource Allocation: ResourceClaims served by NVIDIA's and "
        "AWS's DRA drivers, each GPU paired with the EFA devices on its PCIe root). DRA needs Kubernetes 1.34 (1.35 "
        "with EFA), node groups (not Karpenter), whole GPUs or MIG strategy single, and under cluster-autoscaler a "
        "standing node in each of the pool's node groups (min_nodes above on_demand_base, or on_demand_base equal "
        "to max_nodes). Defaults to device_plugin.",
    )
    gpu_selector: GpuSelector | None = Field(
        None, description="Under device_mode 'dra': which GPUs the pool's claims may take. Defaults to any."
    )
    auto_repair: bool = Field(
        True,
        description="Node auto repair (EKS on node groups, Karpenter's NodeRepair on NodePools): a node that stays "
        "unhealthy is replaced, one at a time, and repair pauses while more than 20% of the pool is unhealthy. GPU "
        "faults count only with platform.node_monitoring_agent. Defaults to true.",
    )

    _efa_bool = field_validator("efa", "nvme_cache", mode="before")(_bool_to_enabled)
