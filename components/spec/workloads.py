"""Work beside the model services: queue-fed workers and offline batch inference jobs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inferstack.spec.base import Model, Name, PinnedImage, S3Uri

class QueueWorkerSpec(Model):
    """A Deployment that pulls jobs from a Redis list and calls a model service; KEDA scales it on list length."""

    name: Name = Field(description="Worker name. Required.")
    model_service: str = Field(description="Model service the worker calls. Required.")
    image: PinnedImage = Field(description="Worker image, pinned to a version or digest. Required.")
    list_name: str | None = Field(None, description="Redis list holding jobs. Defaults to the worker name.")
    jobs_per_replica: int = Field(5, ge=1, description="Queued jobs per replica (KEDA listLength). Defaults to 5.")
    min_replicas: int = Field(0, ge=0, description="Minimum replicas. Defaults to 0.")
    max_replicas: int = Field(10, ge=1, description="Maximum replicas. Defaults to 10.")
    polling_interval_seconds: int = Field(15, ge=1, description="KEDA polling interval. Defaults to 15.")
    cooldown_seconds: int = Field(300, ge=0, description="KEDA cooldown. Defaults to 300.")


class BatchJobSpec(Model):
    """Offline batch inference (vLLM run-batch) admitted by Kueue, usually on spot: a CronJob on a schedule,
    or one Job when there is none."""

    name: Name = Field(description="Job name (the CronJob's, or the one-off Job's prefix). Required.")
    model_service: str = Field(
        description="Model service whose model and precision the job runs (its base engine: no LoRA adapters, "
        "speculative draft, host KV tier or prefill/decode split). Required."
    )
    pool: str = Field(description="Node pool to run on (a batch pool on spot is typical). Required.")
    input: S3Uri = Field(description="S3 URI of the OpenAI batch input (JSONL). Required.")
    output: S3Uri = Field(description="S3 URI for the results. Required.")
    parallelism: int = Field(1, ge=1, le=64, description="Pods running at once, each on its own input shard. Defaults to 1.")
    schedule: str | None = Field(
        None,
        description="When to run, in Kubernetes CronJob syntax: five fields (minute hour day-of-month month "
        "day-of-week, e.g. '0 2 * * *') or @yearly, @monthly, @weekly, @daily, @hourly. Defaults to none: one Job "
        "runs once; a later edit starts a new Job and leaves the running one to finish.",
    )
    time_zone: str | None = Field(
        None,
        description="IANA time zone of the schedule, e.g. 'Europe/Paris'. Defaults to none: the kube-controller-manager's local time zone.",
    )
    concurrency_policy: Literal["Forbid", "Allow", "Replace"] = Field(
        "Forbid",
        description="When a run is due while the last one still runs or waits in its queue: Forbid skips it, Allow "
        "runs both, Replace stops the running one. Defaults to Forbid.",
    )
    successful_jobs_history_limit: int = Field(3, ge=0, description="Finished successful runs kept. Defaults to 3.")
    failed_jobs_history_limit: int = Field(1, ge=0, description="Finished failed runs kept. Defaults to 1.")
    starting_deadline_seconds: int | None = Field(
        None,
        ge=10,
        le=2**63 - 1,  # an int64 in batch/v1
        description="A run that cannot start this long after its time is skipped (at least 10: the CronJob "
        "controller checks every 10 seconds). Defaults to none: no deadline.",
    )
