"""KEDA: the operator and its metrics server, which the serving layer's ScaledObjects (keda.sh/v1alpha1) need."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_kubernetes.helm.v3 import Release

from inferstack.catalog.charts import chart
from inferstack.helm import helm_release

CHART = "keda"


@dataclass(frozen=True)
class KedaArgs:
    """KEDA needs nothing from the spec: the chart's defaults are what the platform uses."""


class Keda(pulumi.ComponentResource):
    """One pinned KEDA release with the chart's defaults: CRDs, operator, metrics API server, webhooks.

    Its own ServiceMonitors stay off: the chart would need the Prometheus CRDs at install time, which
    would order this release after the metrics stack.
    """

    release: Release

    def __init__(self, name: str, args: KedaArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:Keda", name, None, opts)
        self.release = helm_release(
            f"{name}-release",
            CHART,
            namespace=chart(CHART).namespace,
            values={"crds": {"install": True}, "webhooks": {"enabled": True}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"release": self.release.status})
