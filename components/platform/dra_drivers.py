"""The DRA drivers of the pools with device_mode 'dra': NVIDIA's GPU driver on all of them, AWS's EFA driver
(aws-dranet) on those with EFA, and the EFA DeviceClass their claims name.

Each driver runs only where a pool label selects it (`inferstack.dev/pool In [the DRA pools]`), and the device
plugins only where it does not (the GPU operator's through the node label the AWS layer sets, the EFA plugin
through its own pool selection, platform/efa.py), so no device is handed out by two mechanisms. The values are
the charts' own keys (NVIDIA/k8s-dra-driver-gpu v0.4.0 deployments/helm/dra-driver-nvidia-gpu/values.yaml,
aws/eks-charts stable/aws-dranet/values.yaml at 1.0.0):

* `gpuResourcesEnabledOverride`: the chart refuses to serve GPUs unless told the device plugin is off on the
  driver's nodes (templates/validation.yaml), which the pool selection makes true;
* `resources.computeDomains.enabled: false`: ComputeDomains are for multi-node NVLink (GB200), which no catalog
  instance type has, and without them the chart deploys no controller;
* `kubeletPlugin.affinity` replaces the chart's NFD-label affinity with the DRA pools, and `tolerations` adds the
  pools' taints;
* aws-dranet's `supportedInstanceLabels` keys its node affinity on the pool label, `deviceClass.create: false`
  leaves the DeviceClass to this component (the same name and selector), so the plan shows and checks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.helm.v3 import Release
from pulumi_kubernetes.resource.v1 import DeviceClass

from inferstack.catalog.charts import chart
from inferstack.catalog.dra import DEVICE_CLASSES
from inferstack.conventions import MANAGED_BY, POOL_LABEL
from inferstack.helm import helm_release
from inferstack.platform.gpu_nodes import gpu_tolerations
from inferstack.spec import NodePoolSpec

GPU_DRIVER_CHART = "dra-driver-nvidia-gpu"
EFA_DRIVER_CHART = "aws-dranet"


def dra_pools(pools: Sequence[NodePoolSpec]) -> list[NodePoolSpec]:
    return [p for p in pools if p.device_mode == "dra"]


def dra_efa_pools(pools: Sequence[NodePoolSpec]) -> list[NodePoolSpec]:
    return [p for p in dra_pools(pools) if p.efa.enabled]


def _on_pools(pools: Sequence[NodePoolSpec]) -> dict[str, Any]:
    """A required node affinity on these pools' label."""
    terms = [{"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [p.name for p in pools]}]}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def gpu_driver_values(pools: Sequence[NodePoolSpec]) -> dict[str, Any]:
    chosen = dra_pools(pools)
    if not chosen:
        raise ValueError("the NVIDIA DRA driver needs at least one pool with device_mode 'dra'")
    return {
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        "kubeletPlugin": {"affinity": _on_pools(chosen), "tolerations": gpu_tolerations(chosen)},
    }


def efa_driver_values(pools: Sequence[NodePoolSpec]) -> dict[str, Any]:
    chosen = dra_efa_pools(pools)
    if not chosen:
        raise ValueError("the EFA DRA driver needs at least one EFA pool with device_mode 'dra'")
    return {
        "supportedInstanceLabels": {"keys": [POOL_LABEL], "values": [p.name for p in chosen]},
        "tolerations": gpu_tolerations(chosen),
        "deviceClass": {"create": False, "name": DEVICE_CLASSES["efa"].name},
    }


def efa_device_class() -> dict[str, Any]:
    """The EFA DeviceClass spec, as aws-dranet's templates/deviceclass.yaml renders it."""
    return {"selectors": [{"cel": {"expression": DEVICE_CLASSES["efa"].selector}}]}


@dataclass(frozen=True)
class DraDriversArgs:
    pools: Sequence[NodePoolSpec]               # the stack's pools; only the DRA ones matter
    depends_on: Sequence[pulumi.Resource] = ()  # the GPU node groups: the kubelet plugins run there


class DraDrivers(pulumi.ComponentResource):
    """The pinned GPU driver release, the EFA driver release and EFA DeviceClass when a DRA pool has EFA."""

    releases: list[Release]

    def __init__(self, name: str, args: DraDriversArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:DraDrivers", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.releases = [helm_release(
            f"{name}-gpu", GPU_DRIVER_CHART, namespace=chart(GPU_DRIVER_CHART).namespace,
            values=gpu_driver_values(args.pools), opts=child,
        )]
        if dra_efa_pools(args.pools):
            self.releases.append(helm_release(
                f"{name}-efa", EFA_DRIVER_CHART, namespace=chart(EFA_DRIVER_CHART).namespace,
                values=efa_driver_values(args.pools), opts=child,
            ))
            DeviceClass(
                f"{name}-efa-class",
                metadata={"name": DEVICE_CLASSES["efa"].name, "labels": dict(MANAGED_BY)},
                spec=efa_device_class(),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"releases": [release.status for release in self.releases]})
