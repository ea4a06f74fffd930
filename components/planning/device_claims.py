"""What a pod on a DRA pool claims: one ResourceClaim per rank group of its GPUs, each GPU paired with the EFA
devices on its PCIe root.

Under the device plugin a pod asks for counts of extended resources (`pool_capacity.gpu_requests` and
`efa_requests`); under DRA it asks for the same devices as claims the scheduler allocates from the drivers'
ResourceSlices. The counts are the same figures, so Kueue's quota (deviceClassMappings), the plan and the
policies count what the device plugin would. A claim's requests use only `exactly` with ExactCount, the one
form Kueue accounts (kueue v0.19.2 pkg/dra/claims.go), and a claim pairs its GPUs with EFA devices by
`matchAttribute: resource.kubernetes.io/pcieRoot`, which both drivers publish.

A rank group is the GPUs of one PCIe root that the pod uses (one GPU on a p5.48xlarge, whose 8 roots each hold
one GPU and 4 EFA devices) with that root's share of the pod's EFA devices: the scheduler can then meet every
claim only with devices that sit together, which is what the device plugin cannot ask for.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.catalog.dra import (
    DEVICE_CLASSES, GPU_ATTRIBUTES, PCIE_ROOT_ATTRIBUTE, DeviceClass, PcieLayout, pcie_layout,
)
from inferstack.planning.pool_capacity import efa_requests, gpu_requests
from inferstack.spec import MigSharing, ModelServiceSpec, NodePoolSpec
from inferstack.spec.errors import SpecError
from inferstack.spec.pools import EFA_RESOURCE, PoolHardware

GPU_REQUEST, EFA_REQUEST = "gpu", "efa"


def uses_dra(hardware: PoolHardware) -> bool:
    return hardware.spec.device_mode == "dra"


def pool_device_classes(pool: NodePoolSpec) -> list[DeviceClass]:
    """The DeviceClasses a DRA pool's claims name: its GPUs' (MIG slices on a MIG pool), then EFA's on an EFA pool."""
    gpu = DEVICE_CLASSES["mig" if isinstance(pool.gpu_sharing, MigSharing) else "gpu"]
    return [gpu, DEVICE_CLASSES["efa"]] if pool.efa.enabled else [gpu]


@dataclass(frozen=True)
class RankClaim:
    """One ResourceClaim of a pod: `gpus` devices of `gpu_class` (filtered by `selectors`), and `efa` EFA devices
    on the same PCIe root when `efa` > 0."""

    gpu_class: str
    gpus: int
    efa: int
    selectors: tuple[str, ...]

    @property
    def paired(self) -> bool:
        return self.efa > 0

    def claim_spec(self) -> dict:
        """The ResourceClaimSpec (resource.k8s.io/v1) of one rank group."""
        gpu = {"deviceClassName": self.gpu_class, "allocationMode": "ExactCount", "count": self.gpus}
        if self.selectors:
            gpu["selectors"] = [{"cel": {"expression": expression}} for expression in self.selectors]
        requests = [{"name": GPU_REQUEST, "exactly": gpu}]
        devices: dict = {"requests": requests}
        if self.paired:
            efa_class = DEVICE_CLASSES["efa"].name
            requests.append(
                {"name": EFA_REQUEST, "exactly": {"deviceClassName": efa_class, "allocationMode": "ExactCount",
                                                  "count": self.efa}}
            )
            devices["constraints"] = [{"requests": [GPU_REQUEST, EFA_REQUEST], "matchAttribute": PCIE_ROOT_ATTRIBUTE}]
        return {"devices": devices}


@dataclass(frozen=True)
class PodClaims:
    """A pod's claims: `count` claims alike, one per rank group."""

    claim: RankClaim
    count: int

    @property
    def gpus(self) -> int:
        return self.claim.gpus * self.count

    @property
    def efa(self) -> int:
        return self.claim.efa * self.count

    def claim_names(self) -> list[str]:
        return [f"rank-{index}" for index in range(self.count)]

    def describe(self) -> str:
        """'8 claims of 1 GPU + 4 EFA on one PCIe root' for the plan."""
        unit = "GPU" if self.claim.gpu_class == DEVICE_CLASSES["gpu"].name else "MIG slice"
        one = f"{self.claim.gpus} {unit}{'s' if self.claim.gpus > 1 else ''}"
        if self.claim.paired:
            one += f" + {self.claim.efa} EFA on one PCIe root"
        return f"{self.count} claim{'s' if self.count > 1 else ''} of {one}"


def gpu_selectors(model: ModelServiceSpec, hardware: PoolHardware) -> tuple[str, ...]:
    """CEL selectors on the GPU request: the MIG profile of a slice, and the pool's gpu_selector."""
    attributes = "device.attributes['gpu.nvidia.com']"
    selectors = []
    if model.mig_profile is not None:
        selectors.append(f"{attributes}.{GPU_ATTRIBUTES['mig_profile']} == '{model.mig_profile}'")
    chosen = hardware.spec.gpu_selector
    if chosen is not None and chosen.product is not None:
        selectors.append(f"{attributes}.{GPU_ATTRIBUTES['product']} == '{chosen.product}'")
    if chosen is not None and chosen.min_compute_capability is not None:
        selectors.append(
            f"{attributes}.{GPU_ATTRIBUTES['compute_capability']}.compareTo(semver('{chosen.min_compute_capability}.0')) >= 0"
        )
    return tuple(selectors)


def pod_claims(model: ModelServiceSpec, hardware: PoolHardware, path: str = "models[]") -> PodClaims:
    """The claims one pod of `model` makes on a DRA pool; SpecError at `path` when its node cannot meet them."""
    gpus = sum(gpu_requests(model, hardware).values())
    efa = efa_requests(model, hardware).get(EFA_RESOURCE, 0)
    gpu_class = pool_device_classes(hardware.spec)[0].name
    selectors = gpu_selectors(model, hardware)
    if not efa:
        return PodClaims(RankClaim(gpu_class, 1, 0, selectors), gpus)
    layout = pcie_layout(hardware.primary.name)
    if layout is None:  # refused with the pool (platform/dra_refusals.py)
        raise ValueError(f"no PCIe layout of {hardware.primary.name} to pair GPUs with EFA devices on")
    return _paired(model, gpu_class, selectors, gpus, efa, layout, path)


def _paired(
    model: ModelServiceSpec, gpu_class: str, selectors: tuple[str, ...], gpus: int, efa: int, layout: PcieLayout,
    path: str,
) -> PodClaims:
    """Rank groups of one root's GPUs each, with the pod's EFA devices spread evenly over them."""
    per_group = min(gpus, layout.gpus_per_root)
    groups, spare_gpus = divmod(gpus, per_group)
    efa_per_group, spare_efa = divmod(efa, groups)
    if spare_gpus or spare_efa or groups > layout.roots or efa_per_group > layout.efa_per_root:
        whole = f"a multiple of {layout.gpus_per_root} and " if layout.gpus_per_root > 1 else ""
        raise SpecError(
            f"{path}.tensor_parallel",
            f"a pod of {model.name!r} takes {gpus} GPU device{'s' if gpus > 1 else ''} and {efa} EFA devices (its "
            f"share of the node's), which do not split into groups of one PCIe root each on {layout.instance_type} "
            f"({layout.roots} roots of {layout.gpus_per_root} GPU and {layout.efa_per_root} EFA devices)",
            f"give each pod {whole}at most {layout.roots * layout.gpus_per_root} GPUs (tensor_parallel x "
            f"data_parallel_local), whole GPUs rather than MIG slices where it talks over EFA, or use device_mode "
            "'device_plugin' on the pool",
        )
    return PodClaims(RankClaim(gpu_class, per_group, efa_per_group, selectors), groups)
