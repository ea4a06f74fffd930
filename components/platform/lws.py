"""LeaderWorkerSet: the controller behind multi-node (pipeline parallel) model services."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_kubernetes.helm.v3 import Release

from inferstack.catalog.charts import chart
from inferstack.helm import helm_release

CHART = "lws"


@dataclass(frozen=True)
class LeaderWorkerSetArgs:
    """LeaderWorkerSet needs nothing from the spec: the chart's defaults are what the platform uses."""


class LeaderWorkerSet(pulumi.ComponentResource):
    """One pinned LWS release; it installs the leaderworkerset.x-k8s.io/v1 CRD.

    Prometheus integration stays off for the same reason as KEDA's: no install-time need for the
    metrics stack's CRDs.
    """

    release: Release

    def __init__(self, name: str, args: LeaderWorkerSetArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:LeaderWorkerSet", name, None, opts)
        self.release = helm_release(
            f"{name}-release",
            CHART,
            namespace=chart(CHART).namespace,
            values={"enablePrometheus": False},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"release": self.release.status})
