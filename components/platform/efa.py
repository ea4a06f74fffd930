"""The AWS EFA device plugin: advertises vpc.amazonaws.com/efa on the nodes of EFA pools, and runs nowhere else."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.helm.v3 import Release

from inferstack.catalog.charts import chart
from inferstack.helm import helm_release
from inferstack.platform.gpu_nodes import gpu_tolerations
from inferstack.spec import NodePoolSpec

CHART = "aws-efa-k8s-device-plugin"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def efa_pools(pools: Sequence[NodePoolSpec]) -> list[NodePoolSpec]:
    return [p for p in pools if p.efa.enabled]


def efa_plugin_values(pools: Sequence[NodePoolSpec]) -> dict[str, Any]:
    """Helm values: node affinity on the EFA pools' instance types, tolerating the GPU pools' taints."""
    efa = efa_pools(pools)
    if not efa:
        raise ValueError("the EFA device plugin needs at least one pool with efa enabled")
    instance_types = sorted({t for pool in efa for t in pool.instance_types})
    return {
        "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": instance_types},
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
