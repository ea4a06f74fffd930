"""The NVIDIA GPU operator, set up for the EKS NVIDIA AMIs: the AMI ships the driver and container toolkit,
the operator adds the device plugin (with MIG / time-slicing / MPS configs), GPU feature discovery, the MIG
manager and the DCGM exporter.

Each pool's nodes pick their MIG layout and sharing config by label (`nvidia.com/mig.config`,
`nvidia.com/device-plugin.config`, set by the AWS layer to the names in `gpu_nodes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.helm.v3 import Release

from inferstack.catalog.charts import chart
from inferstack.helm import helm_release
from inferstack.platform.gpu_nodes import (
    MIG_DISABLED,
    WHOLE_GPU_CONFIG,
    device_plugin_configs,
    dump_yaml,
    gpu_tolerations,
    mig_parted_config,
    mig_strategy,
)
from inferstack.spec import StackSpec

CHART = "gpu-operator"
MIG_CONFIG_MAP = "inferstack-mig-parted-config"
DEVICE_PLUGIN_CONFIG_MAP = "inferstack-device-plugin-config"


def gpu_operator_values(spec: StackSpec) -> dict[str, Any]:
    """Helm values: driver and toolkit off (the AMI has them), every operand tolerating the GPU pools' taints."""
    tolerations = gpu_tolerations(spec.node_pools)
    return {
        "driver": {"enabled": False},
        "toolkit": {"enabled": False},
        "nfd": {"enabled": True},
        "node-feature-discovery": {"worker": {"tolerations": tolerations}},
        "daemonsets": {"tolerations": tolerations},
        "mig": {"strategy": mig_strategy(spec)},
        "migManager": {
            "enabled": True,
            "config": {
                "create": True,
                "name": MIG_CONFIG_MAP,
                "default": MIG_DISABLED,
                "data": {"config.yaml": dump_yaml(mig_parted_config(spec))},
            },
        },
        "devicePlugin": {
            "enabled": True,
            "config": {
                "create": True,
                "name": DEVICE_PLUGIN_CONFIG_MAP,
                "default": WHOLE_GPU_CONFIG,
                "data": {key: dump_yaml(config) for key, config in device_plugin_configs(spec).items()},
            },
        },
        "gfd": {"enabled": True},
        # The operator creates the ServiceMonitor itself and retries until the Prometheus CRDs exist,
        # so this release need not wait for the metrics stack.
        "dcgmExporter": {
            "enabled": True,
            "serviceMonitor": {"enabled": True, "interval": f"{spec.observability.scrape_interval_seconds}s"},
        },
    }


@dataclass(frozen=True)
class GpuOperatorArgs:
    spec: StackSpec
    depends_on: Sequence[pulumi.Resource] = ()  # the GPU node pools: operands start once nodes can join


class GpuOperator(pulumi.ComponentResource):
    """One pinned gpu-operator release; its ClusterPolicy CRD is what `release` installs."""

    release: Release

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:GpuOperator", name, None, opts)
        self.release = helm_release(
            f"{name}-release",
            CHART,
            namespace=chart(CHART).namespace,
            values=gpu_operator_values(args.spec),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"release": self.release.status})
