"""The AWS EFA device plugin: advertises vpc.amazonaws.com/efa on the nodes of the EFA pools that use the device
plugin, and runs nowhere else (a DRA pool's EFA devices are the EFA DRA driver's: platform/dra_drivers.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.helm.v3 import Release

from inferstack.catalog.charts import chart
from inferstack.conventions import POOL_LABEL
from inferstack.helm import helm_release
from inferstack.platform.gpu_nodes import gpu_tolerations
from inferstack.spec import NodePoolSpec

CHART = "aws-efa-k8s-device-plugin"


def efa_pools(pools: Sequence[NodePoolSpec]) -> list[NodePoolSpec]:
    """The EFA pools whose interfaces the device plugin advertises."""
    return [p for p in pools if p.efa.enabled and p.device_mode == "device_plugin"]


def efa_plugin_values(pools: Sequence[NodePoolSpec]) -> dict[str, Any]:
    """Helm values: node affinity on those pools' label (the chart's supportedInstanceLabels become one
    `key In values` term per key: templates/daemonset.yaml), tolerating their taints."""
    efa = efa_pools(pools)
    if not efa:
        raise ValueError("the EFA device plugin needs at least one device-plugin pool with efa enabled")
    return {
        "supportedInstanceLabels": {"keys": [POOL_LABEL], "values": [pool.name for pool in efa]},
        "tolerations": gpu_tolerations(efa),
    }


@dataclass(frozen=True)
class EfaDevicePluginArgs:
    pools: Sequence[NodePoolSpec]  # the stack's pools; only the EFA ones matter
    depends_on: Sequence[pulumi.Resource] = ()


class EfaDevicePlugin(pulumi.ComponentResource):
    """One pinned aws-efa-k8s-device-plugin release in kube-system."""

    release: Release

    def __init__(self, name: str, args: EfaDevicePluginArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:EfaDevicePlugin", name, None, opts)
        self.release = helm_release(
            f"{name}-release",
            CHART,
            namespace=chart(CHART).namespace,
            values=efa_plugin_values(args.pools),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"release": self.release.status})
