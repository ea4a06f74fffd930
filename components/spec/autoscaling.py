"""KEDA scaling of a model service's replicas (and of a disaggregated service's prefill engines)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inferstack.spec.base import Model

ScalingMetric = Literal["queue_depth", "kv_cache", "epp_queue", "prompt_tokens", "running_sequences"]


class AutoscalingSpec(Model):
    """KEDA scaling of a model service on serving metrics."""

    min_replicas: int = Field(1, ge=0, description="Minimum replicas; 0 needs scale_to_zero. Defaults to 1.")
    max_replicas: int = Field(1, ge=1, description="Maximum replicas. Defaults to 1.")
    metric: ScalingMetric | None = Field(
        None,
        description="Scale on vllm:num_requests_waiting per replica, vllm:kv_cache_usage_perc, the endpoint "
        "picker's queue, outstanding prompt tokens per replica or running sequences per replica. Defaults to none: "
        "with an slo and no target, derived from the throughput model (prompt_tokens for a prefill role, "
        "running_sequences otherwise; the plan prints how), else queue_depth.",
    )
    target: float | None = Field(
        None, gt=0, description="Target per replica. Defaults to 5 waiting requests, 0.8 KV-cache use or 5 queued; "
        "prompt_tokens and running_sequences need one; with an slo and neither metric nor target, derived.",
    )
    traffic_growth_per_minute: float = Field(
        0.05, ge=0, le=10, allow_inf_nan=False,
        description="The fastest rise of the traffic a derived threshold absorbs while a new replica starts, as a "
        "fraction per minute (compounded): 0.05 is 5 percent a minute. Defaults to 0.05.",
    )
    polling_interval_seconds: int = Field(15, ge=1, description="KEDA polling interval. Defaults to 15.")
    cooldown_seconds: int = Field(300, ge=0, description="KEDA cooldown before scaling down. Defaults to 300.")
    scale_to_zero: bool = Field(False, description="Allow scaling to zero replicas when idle. Defaults to false.")
