"""Kueue: cluster queues in one cohort, their quotas and preemption, and workload priorities."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from inferstack.spec.base import Model, Name

class PriorityClassSpec(Model):
    name: Name = Field(description="WorkloadPriorityClass name. Required.")
    value: int = Field(description="Priority; higher preempts lower. Required.")
    description: str = Field("", description="What runs at this priority. Defaults to empty.")


class ClusterQueueSpec(Model):
    """A Kueue ClusterQueue in the stack's cohort, with a LocalQueue in the namespace of its role."""

    name: Name = Field(description="ClusterQueue (and LocalQueue) name. Required.")
    role: Literal["serving", "batch"] = Field(description="Which workloads use it: serving or batch. Required.")
    pools: list[str] | None = Field(
        None, description="Pools whose GPUs this queue owns (nominal quota). Defaults to every pool of the same role."
    )
    quota_gpus: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="Nominal quota per pool in GPUs (or slices/replicas on shared pools). "
        "Defaults to the pool's max_nodes x devices per node.",
    )
    borrowing_limit_gpus: int | None = Field(
        None, ge=0, description="Most GPUs it may borrow from the cohort. Defaults to unlimited."
    )
    lending_limit_gpus: int | None = Field(
        None, ge=0, description="Most GPUs it lends to the cohort. Defaults to unlimited."
    )
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        "Any", description="Preempt borrowers in the cohort to reclaim nominal quota. Defaults to Any."
    )
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        "LowerPriority", description="Preemption inside the queue. Defaults to LowerPriority."
    )


def _default_queues() -> list[ClusterQueueSpec]:
    return [ClusterQueueSpec(name="serving", role="serving"), ClusterQueueSpec(name="batch", role="batch")]


def _default_priorities() -> list[PriorityClassSpec]:
    return [
        PriorityClassSpec(name="online", value=1000, description="Interactive serving with an SLO."),
        PriorityClassSpec(name="standard", value=500, description="Serving without an SLO."),
        PriorityClassSpec(name="batch", value=100, description="Offline and queue-fed work."),
    ]


class QueuesSpec(Model):
    """Kueue: flavors per pool and capacity type, cluster queues in one cohort, priorities."""

    enabled: bool = Field(True, description="Install Kueue and admit GPU workloads through it. Defaults to true.")
    cohort: Name = Field("inference", description="Cohort that lets queues borrow idle GPUs. Defaults to 'inference'.")
    cluster_queues: list[ClusterQueueSpec] = Field(
        default_factory=_default_queues, description="Cluster queues. Defaults to 'serving' and 'batch'."
    )
    priorities: list[PriorityClassSpec] = Field(
        default_factory=_default_priorities,
        description="WorkloadPriorityClasses. Defaults to online (1000), standard (500), batch (100).",
    )
    fair_sharing: bool = Field(False, description="Enable Kueue fair sharing across the cohort. Defaults to false.")
