"""KEDA ScaledObjects for model services, on the serving metrics vLLM and the endpoint picker export.

Each metric scales the way its meaning asks:
* queue_depth: total `vllm:num_requests_waiting` of the service, `AverageValue` (HPA divides by replicas),
  so the target is waiting requests per replica;
* kv_cache: mean `vllm:kv_cache_usage_perc`, `Value` (HPA multiplies by the replica ratio);
* epp_queue: the endpoint picker's pool-mean queue `llm_d_epp_average_queue_size`, `Value`;
* running_sequences: total `vllm:num_requests_running` of the service, `AverageValue`;
* prompt_tokens (a prefill role): its running plus waiting requests times the traffic's computed prompt tokens,
  `AverageValue` (planning/scaling_thresholds.py says why that is its outstanding prompt tokens).

With an `slo` and neither metric nor target stated, the metric and threshold come from the throughput model
(planning/scaling_thresholds.py), the same figure and derivation the plan prints (`scaler_metric`).

A replica that is still loading exports no vLLM metrics, so nothing may scale a service down (or to
zero) faster than a model loads: the cooldown, the initial cooldown and the HPA's scale-down
stabilization window are all at least the model's load time.

A scale-to-zero service also gets a wake trigger on requests reaching its endpoint picker. With no pod the picker
counts a request only as an error: llm-d-router v0.10.0 pkg/epp/requestcontrol/director.go `HandleRequest` returns
ServiceUnavailable ("failed to find endpoint candidates") before pkg/epp/handlers/server.go:497 records
`llm_d_epp_request_total`, and the deferred handler at server.go:356-358 records `llm_d_epp_request_error_total`
instead. Both counters carry the request's own model as `model_name` (director.go: IncomingModelName is the body's
`model`), so a service with LoRA adapters is woken by requests for any of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from inferstack.planning.disaggregation import metric_labels, service_of
from inferstack.planning.scaling_thresholds import HPA_TOLERANCE, derive_threshold
from inferstack.planning.service_performance import workload_of
from inferstack.serving import names, pods
from inferstack.serving.model_service import ScaleTarget
from inferstack.planning.sizing import load_seconds
from inferstack.spec import ModelServiceSpec, StackSpec
from inferstack.spec.pools import PoolHardware

KEDA_API_VERSION = "keda.sh/v1alpha1"
DEFAULT_TARGETS = {"queue_depth": 5.0, "kv_cache": 0.8, "epp_queue": 5.0}
MAX_STABILIZATION_SECONDS = 3600  # the HPA API's limit
# Requests in this window keep a scale-to-zero service awake (and wake it).
ACTIVITY_WINDOW = "10m"
# What the picker counts per request: served (a pod was picked) and failed (none was, as at zero replicas).
REQUEST_COUNTERS = ("llm_d_epp_request_total", "llm_d_epp_request_error_total")


def _selector(**labels: str) -> str:
    return ",".join(f'{key}="{value}"' for key, value in labels.items())


@dataclass(frozen=True)
class ScalerMetric:
    """What an engine scales on: its metric, the threshold as the ScaledObject states it, and where it came from."""

    metric: str
    threshold: str
    derivation: str     # 'stated', 'default', or how the throughput model derived it

    @property
    def trigger(self) -> str:
        """The KEDA trigger's name, which the simulator reads the trigger by (queue-depth, running-sequences, ...)."""
        return self.metric.replace("_", "-")


def scaler_metric(spec: StackSpec, model: ModelServiceSpec) -> ScalerMetric:
    """The stated metric and target, the model's when the service states an slo and the engine neither, else the
    defaults."""
    scaling = model.autoscaling
    derived = derive_threshold(model, service_of(spec.models, model), PoolHardware(spec.pool(model.pool)))
    if derived is not None:
        return ScalerMetric(derived.metric, f"{derived.threshold:.10g}", derived.derivation)
    metric = scaling.metric or "queue_depth"
    if scaling.target is not None:
        return ScalerMetric(metric, f"{scaling.target:g}", "stated")
    return ScalerMetric(metric, f"{DEFAULT_TARGETS[metric]:g}", "default")


# The endpoint picker's flow control holds requests in the picker once its pool saturates: the utilization
# detector's score per pod is max(waiting / queueDepthThreshold, KV use / kvCacheUtilThreshold), the pool's their
# average, defaults 5 and 0.8 (llm-d-router v0.10.0 pkg/epp/framework/plugins/flowcontrol/saturationdetector/
# utilization/README.md and config.go; pkg/epp/flowcontrol/README.md: "saturation no longer pushes excess requests
# into each model server's local queue"). A scaler on vLLM's queue or KV use must be able to pass its target by the
# HPA's tolerance before that, or it never fires: the detector's thresholds sit just above that point.
SATURATION_QUEUE_DEFAULT, SATURATION_KV_DEFAULT = 5, 0.8
SATURATION_KV_MARGIN = 0.02


def saturation_thresholds(spec: StackSpec, model: ModelServiceSpec) -> dict[str, float]:
    """The picker's utilization-detector parameters for a service, above what its scaler must see to scale up."""
    chosen = scaler_metric(spec, model)
    target = float(chosen.threshold)
    queue, kv = SATURATION_QUEUE_DEFAULT, SATURATION_KV_DEFAULT
    if chosen.metric in ("queue_depth", "epp_queue"):
        queue = max(queue, math.floor(target * (1 + HPA_TOLERANCE)) + 1)
    elif chosen.metric == "kv_cache":
        kv = max(kv, min(1.0, round(target * (1 + HPA_TOLERANCE) + SATURATION_KV_MARGIN, 2)))
    return {"queueDepthThreshold": queue, "kvCacheUtilThreshold": kv}


def metric_trigger(spec: StackSpec, model: ModelServiceSpec, prometheus: str) -> dict[str, Any]:
    """The engine's serving metric as a KEDA prometheus trigger."""
    chosen = scaler_metric(spec, model)
    namespace = spec.serving_namespace
    engine = _selector(namespace=namespace, **metric_labels(model))
    metric_type = "AverageValue"
    if chosen.metric == "queue_depth":
        query = f"sum(vllm:num_requests_waiting{{{engine}}})"
    elif chosen.metric == "running_sequences":
        query = f"sum(vllm:num_requests_running{{{engine}}})"
    elif chosen.metric == "prompt_tokens":
        prompt = workload_of(service_of(spec.models, model).traffic).computed_prompt_tokens
        query = f"sum(vllm:num_requests_running{{{engine}}} + vllm:num_requests_waiting{{{engine}}}) * {prompt}"
    elif chosen.metric == "kv_cache":
        query = f"avg(vllm:kv_cache_usage_perc{{{engine}}})"
        metric_type = "Value"
    else:
        # The InferencePool (and the `name` label of the picker's pool metrics) is named after the service.
        query = f"max(llm_d_epp_average_queue_size{{{_selector(namespace=namespace, name=model.name)}}})"
        metric_type = "Value"
    return {
        "type": "prometheus",
        "name": chosen.trigger,
        "metricType": metric_type,
        "metadata": {
            "serverAddress": prometheus,
            "query": query,
            "threshold": chosen.threshold,
            "activationThreshold": "0",
        },
    }


def requests_seen(counter: str, selector: str) -> str:
    """> 0 when the counter moved within the window. A series the picker creates on its first request starts at 1,
    and increase() needs two samples, so a series that did not exist a window ago counts as requests too."""
    series = f"{counter}{{{selector}}}"
    return (f"(sum(increase({series}[{ACTIVITY_WINDOW}])) > 0) "
            f"or count({series} unless {series} offset {ACTIVITY_WINDOW})")


def activity_trigger(spec: StackSpec, model: ModelServiceSpec, prometheus: str) -> dict[str, Any]:
    """1 while requests for the service (or its adapters) reached the endpoint picker recently, served or not, else 0:
    wakes a service from zero and asks for at most one replica (the serving metric decides beyond that)."""
    # DNS labels: nothing in them is special to a regular expression.
    requested = "|".join(names.requested_models(model))
    selector = f'namespace="{spec.serving_namespace}",model_name=~"{requested}"'
    seen = " or ".join(f"({requests_seen(counter, selector)})" for counter in REQUEST_COUNTERS)
    return {
        "type": "prometheus",
        "name": "requests",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": prometheus,
            "query": f"clamp_max({seen}, 1)",
            "threshold": "1",
            "activationThreshold": "0",
        },
    }


def scaled_object_spec(spec: StackSpec, model: ModelServiceSpec, target: ScaleTarget, prometheus: str) -> dict[str, Any]:
    scaling = model.autoscaling
    loading = load_seconds(model)
    body: dict[str, Any] = {
        "scaleTargetRef": target.as_ref(),
        "pollingInterval": scaling.polling_interval_seconds,
        "cooldownPeriod": max(scaling.cooldown_seconds, loading),
        "initialCooldownPeriod": loading,
        # With scale-to-zero KEDA keeps minReplicaCount while active and idles at 0 (idle must be below min).
        "minReplicaCount": max(1, scaling.min_replicas),
        "maxReplicaCount": scaling.max_replicas,
        "advanced": {
            "horizontalPodAutoscalerConfig": {
                "behavior": {
                    "scaleDown": {
                        "stabilizationWindowSeconds": min(MAX_STABILIZATION_SECONDS, max(scaling.cooldown_seconds, loading)),
                        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                    }
                }
            }
        },
        "triggers": [metric_trigger(spec, model, prometheus)],
    }
    if scaling.scale_to_zero:
        body["idleReplicaCount"] = 0
        body["triggers"].append(activity_trigger(spec, model, prometheus))
    return body


def needs_scaler(spec: StackSpec, model: ModelServiceSpec) -> bool:
    scaling = model.autoscaling
    return spec.platform.keda and (scaling.max_replicas > scaling.min_replicas or scaling.scale_to_zero)


@dataclass(frozen=True)
class ModelAutoscalerArgs:
    spec: StackSpec
    model: ModelServiceSpec
    target: ScaleTarget
    prometheus_url: str  # where the serving metrics are queried (the platform's Prometheus or the spec's)
    depends_on: Sequence[pulumi.Resource] = ()  # the workload and the KEDA release (its CRDs)


class ModelAutoscaler(pulumi.ComponentResource):
    """The ScaledObject of one model service."""

    def __init__(self, name: str, args: ModelAutoscalerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving:ModelAutoscaler", name, None, opts)
        model = args.model
        self.scaled_object = CustomResource(
            f"{name}-scaledobject",
            api_version=KEDA_API_VERSION,
            kind="ScaledObject",
            metadata={
                "name": model.name,
                "namespace": args.spec.serving_namespace,
                "labels": pods.object_labels(model.name),
            },
            spec=scaled_object_spec(args.spec, model, args.target, args.prometheus_url),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"target": args.target.as_ref()})
