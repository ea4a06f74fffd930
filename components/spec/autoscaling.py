"""KEDA scaling of a model service's replicas (and of a disaggregated service's prefill engines)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inferstack.spec.base import Model

class AutoscalingSpec(Model):
    """KEDA scaling of a model service on serving metrics."""

    min_replicas: int = Field(1, ge=0, description="Minimum replicas; 0 needs scale_to_zero. Defaults to 1.")
    max_replicas: int = Field(1, ge=1, description="Maximum replicas. Defaults to 1.")
    metric: Literal["queue_depth", "kv_cache", "epp_queue"] = Field(
        "queue_depth",
        description="Scale on vllm:num_requests_waiting per replica, vllm:kv_cache_usage_perc, or the endpoint "
        "picker's queue. Defaults to queue_depth.",
    )
    target: float | None = Field(
        None, gt=0, description="Target per replica. Defaults to 5 waiting requests, 0.8 KV-cache use, or 5 queued."
    )
    polling_interval_seconds: int = Field(15, ge=1, description="KEDA polling interval. Defaults to 15.")
    cooldown_seconds: int = Field(300, ge=0, description="KEDA cooldown before scaling down. Defaults to 300.")
    scale_to_zero: bool = Field(False, description="Allow scaling to zero replicas when idle. Defaults to false.")
