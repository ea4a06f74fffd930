"""The stack spec: every knob of the platform, typed, described and defaulted in one place.

Cross-field rules (a model names a pool that exists, a MIG profile exists on that GPU, ...) live in
`inferstack.spec.checks`; `inferstack.validation.validate` runs them with every layer's own refusals.
"""

from __future__ import annotations

from pydantic import Field, field_serializer

from inferstack.spec.base import Model, Name
from inferstack.spec.cluster import ClusterSpec, CreateCluster, ExistingCluster
from inferstack.spec.model_services import ModelServiceSpec
from inferstack.spec.node_pools import NodePoolSpec
from inferstack.spec.platform import (
    BudgetSpec, GatewaySpec, ObservabilitySpec, PlatformSpec, WeightsStoreSpec,
)
from inferstack.spec.queues import QueuesSpec
from inferstack.spec.workloads import BatchJobSpec, QueueWorkerSpec

class StackSpec(Model):
    """Everything one environment of the platform is: the only input to the Pulumi program."""

    environment: Name = Field(description="Environment name, e.g. 'dev' or 'prod'. Required.")
    region: str = Field("us-east-1", pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$", description="AWS region. Defaults to us-east-1.")
    tags: dict[str, str] = Field(default_factory=dict, description="Tags on every AWS resource. Defaults to none.")
    cluster: ClusterSpec = Field(default_factory=CreateCluster, description="The EKS cluster. Defaults to creating one.")
    node_pools: list[NodePoolSpec] = Field(min_length=1, description="GPU node pools. Required (at least one).")
    weights: WeightsStoreSpec = Field(default_factory=WeightsStoreSpec, description="Weights bucket. Defaults to a new bucket.")
    platform: PlatformSpec = Field(default_factory=PlatformSpec, description="Add-ons. Defaults to all on.")
    queues: QueuesSpec = Field(default_factory=QueuesSpec, description="Kueue set-up. Defaults to serving and batch queues.")
    gateway: GatewaySpec = Field(default_factory=GatewaySpec, description="Inference gateway. Defaults to Istio.")
    serving_namespace: Name = Field("inference", description="Namespace of model services. Defaults to 'inference'.")
    batch_namespace: Name = Field("batch", description="Namespace of workers and batch jobs. Defaults to 'batch'.")
    models: list[ModelServiceSpec] = Field(default_factory=list, description="Model services. Defaults to none.")

    @field_serializer("models", mode="wrap")
    def _services_only(self, models: list[ModelServiceSpec], serialize):
        """A validated stack lists its services' prefill engines too; a dump keeps the services, which expand again."""
        return serialize([m for m in models if m.pd_role != "prefill"])
    workers: list[QueueWorkerSpec] = Field(default_factory=list, description="Queue-fed workers. Defaults to none.")
    batch_jobs: list[BatchJobSpec] = Field(default_factory=list, description="Batch inference jobs. Defaults to none.")
    observability: ObservabilitySpec = Field(default_factory=ObservabilitySpec, description="Metrics. Defaults to all on.")
    budget: BudgetSpec = Field(default_factory=BudgetSpec, description="Cost guardrails. Defaults to none enforced.")
    teardown: bool = Field(
        False,
        description="Allow `pulumi destroy` to delete the cluster and the weights bucket with every object version in "
        "it (apply with `pulumi up` first). Defaults to false: both are protected from deletion and replacement, and "
        "the bucket with its settings is retained in AWS if it ever leaves the stack.",
    )

    @property
    def cluster_name(self) -> str:
        if isinstance(self.cluster, ExistingCluster):
            return self.cluster.name
        return self.cluster.name or f"{self.environment}-inference"

    def pool(self, name: str) -> NodePoolSpec:
        return next(p for p in self.node_pools if p.name == name)

    def model_service(self, name: str) -> ModelServiceSpec:
        return next(m for m in self.models if m.name == name)
