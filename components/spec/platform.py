"""The platform around the services: the inference gateway, the weights bucket, add-ons, observability, budget."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inferstack.spec.base import Model, Name
from inferstack.spec.edge import EdgeAuthSpec, EdgeTlsSpec
from inferstack.spec.prices import StatedPrice

class GatewaySpec(Model):
    """One OpenAI-style endpoint for every model: Gateway API + Inference Extension."""

    enabled: bool = Field(True, description="Create the inference gateway. Defaults to true.")
    implementation: Literal["istio", "agentgateway"] = Field(
        "istio",
        description="Gateway implementation (with its GatewayClass) that routes to InferencePools. Defaults to istio.",
    )
    name: Name = Field("inference-gateway", description="Gateway name. Defaults to 'inference-gateway'.")
    port: int | None = Field(
        None, ge=1, le=65535, description="Listener port. Defaults to 443 with TLS, 80 with tls.mode 'none'."
    )
    tls: EdgeTlsSpec = Field(
        default_factory=EdgeTlsSpec,
        description="TLS at the listener. Defaults to HTTPS with the Kubernetes Secret '<name>-tls'.",
    )
    auth: EdgeAuthSpec = Field(
        default_factory=EdgeAuthSpec,
        description="Authentication and per-tenant model access before routing. Defaults to closed: every request "
        "refused until a JWT issuer and tenants are set.",
    )
    body_based_routing: bool = Field(
        True, description="Route by the request body's `model` field. Defaults to true."
    )
    prefix_cache_routing: bool = Field(
        True, description="Endpoint picker scores pods by prefix-cache affinity. Defaults to true."
    )
    request_timeout_seconds: int = Field(300, ge=1, description="Route request timeout. Defaults to 300.")

    @property
    def listener_port(self) -> int:
        if self.port is not None:
            return self.port
        return 443 if self.tls.encrypted else 80

    @property
    def tls_secret(self) -> str:
        """The TLS Secret the listener serves with mode 'secret'."""
        return self.tls.secret_name or f"{self.name}-tls"


class WeightsStoreSpec(Model):
    """Where model weights live in S3."""

    existing_bucket: str | None = Field(
        None,
        description="Use this bucket instead of creating one. Defaults to none: an encrypted, versioned, private bucket is created.",
    )


class MaintenanceWindowSpec(Model):
    """A daily UTC window for replacing serving nodes that drifted (a new AMI pin or Kubernetes version)."""

    start_hour_utc: int = Field(2, ge=0, le=23, description="Hour (UTC) the window opens. Defaults to 2.")
    hours: int = Field(4, ge=1, le=23, description="Length of the window in hours. Defaults to 4.")


class KarpenterCpuPoolSpec(Model):
    """A Karpenter NodePool of general-purpose CPU nodes for the system pods the system node group cannot hold."""

    enabled: bool = Field(
        False,
        description="Under Karpenter, add a NodePool of on-demand CPU nodes for system pods (CoreDNS, Prometheus, "
        "KEDA, gateways, endpoint pickers) beyond the fixed system node group, which nothing scales under "
        "Karpenter. The Karpenter controller itself stays on the system node group: it must not run on nodes it "
        "manages. Defaults to false.",
    )
    max_vcpus: int = Field(
        32, ge=2, description="Most vCPUs the NodePool's nodes may have together (its limits.cpu). Defaults to 32."
    )
    instance_categories: list[Literal["c", "m", "r"]] = Field(
        default_factory=lambda: ["c", "m", "r"],
        min_length=1,
        description="EC2 instance categories Karpenter may pick from (compute, general purpose, memory optimized), "
        "generation 3 and newer, as Karpenter's getting-started NodePool. Defaults to c, m and r.",
    )


class PlatformSpec(Model):
    """Cluster add-ons beyond the GPU operator."""

    node_autoscaler: Literal["cluster-autoscaler", "karpenter", "none"] = Field(
        "cluster-autoscaler",
        description="What adds GPU nodes for pending pods: cluster-autoscaler (EKS managed node groups per pool and "
        "capacity type), karpenter (a Karpenter NodePool per pool and capacity type, nodes launched by Karpenter), "
        "or none (fixed node groups). Defaults to cluster-autoscaler.",
    )
    maintenance_window: MaintenanceWindowSpec = Field(
        default_factory=MaintenanceWindowSpec,
        description="Under Karpenter, when serving nodes may be replaced for drift, one at a time. Defaults to "
        "02:00-06:00 UTC.",
    )
    create_spot_service_linked_role: bool = Field(
        False,
        description="Under Karpenter with a pool on spot, create the account's EC2 Spot service-linked role "
        "(AWSServiceRoleForEC2Spot), without which Karpenter's spot launches fail with "
        "AuthFailure.ServiceLinkedRoleCreationNotPermitted. The role is account-wide and creating it where it "
        "exists fails (InvalidInput: has been taken), so set true only in an account that never used spot; "
        "otherwise the plan gives the command that creates it. Defaults to false.",
    )
    karpenter_cpu_pool: KarpenterCpuPoolSpec = Field(
        default_factory=KarpenterCpuPoolSpec,
        description="Under Karpenter, an opt-in NodePool of on-demand CPU nodes for the system pods. Defaults to off.",
    )
    node_monitoring_agent: bool = Field(
        True,
        description="Install the EKS node monitoring agent add-on on a created cluster: it sets the node conditions "
        "auto repair acts on (AcceleratedHardwareReady from DCGM on GPU nodes, except MIG pools'). Defaults to true.",
    )
    keda: bool = Field(True, description="Install KEDA for model and worker autoscaling. Defaults to true.")
    leaderworkerset: bool = Field(True, description="Install LeaderWorkerSet for multi-node models. Defaults to true.")

    @model_validator(mode="after")
    def _karpenter_settings_need_karpenter(self) -> "PlatformSpec":
        """The spot role and the CPU NodePool are Karpenter's: set under another autoscaler they would do nothing."""
        asked = [name for name, on in (("create_spot_service_linked_role", self.create_spot_service_linked_role),
                                       ("karpenter_cpu_pool.enabled", self.karpenter_cpu_pool.enabled)) if on]
        if asked and self.node_autoscaler != "karpenter":
            raise ValueError(
                f"{' and '.join(asked)} {'apply' if len(asked) > 1 else 'applies'} only under Karpenter, and node_autoscaler is {self.node_autoscaler!r}. "
                "To fix: set node_autoscaler to 'karpenter', or drop them"
            )
        return self

    @property
    def karpenter(self) -> bool:
        """Karpenter launches the GPU nodes (no GPU managed node groups)."""
        return self.node_autoscaler == "karpenter"


class ObservabilitySpec(Model):
    """Metrics, dashboards and alerts."""

    prometheus_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="Use an existing Prometheus at this URL. Defaults to none: kube-prometheus-stack is installed.",
    )
    dashboards: bool = Field(True, description="Grafana dashboard for TTFT, TPOT, KV cache, queue, GPU use. Defaults to true.")
    alerts: bool = Field(True, description="Alert rules for KV cache near full and idle GPUs. Defaults to true.")
    kv_cache_alert_threshold: float = Field(0.9, gt=0, le=1, description="KV-cache use that alerts. Defaults to 0.9.")
    gpu_idle_alert_minutes: int = Field(30, ge=1, description="Minutes of idle GPU before alerting. Defaults to 30.")
    scrape_interval_seconds: int = Field(15, ge=1, description="Scrape interval for serving metrics. Defaults to 15.")


class BudgetSpec(Model):
    """Cost guardrails checked by `plan` and the policy pack."""

    max_usd_per_hour: float | None = Field(
        None, gt=0, description="Ceiling for the stack's cost at max scale. Defaults to none (not enforced)."
    )
    spot_discount: float | None = Field(
        None, ge=0, lt=1,
        description="Spot discount off on-demand for every spot node, overriding the catalog's spot snapshot "
        "(components/catalog/spot_prices.json, per instance type and region). Defaults to none: the snapshot's.",
    )
    prices: list[StatedPrice] = Field(
        default_factory=list,
        description="Prices the team pays (negotiated rates, a Savings Plan, what a Capacity Block cost), each "
        "winning over the catalog's for its instance type and purchase. Defaults to none: catalog prices.",
    )
