"""Metrics for the serving path: a Prometheus stack (unless the spec names an existing Prometheus), pod
monitors for vLLM and the endpoint picker, a Grafana dashboard and alert rules.

DCGM's ServiceMonitor comes from the GPU operator. The monitors, rules and dashboard live in the serving
namespace; the bundled Prometheus and Grafana are told to look in every namespace. An existing Prometheus
is expected to run the Prometheus operator (the monitors and rules are its custom resources).

The metric and label names used below are the ones the pinned exporters write (catalog exporter_metrics.json,
checked by tests/test_outside_checks.py): the DCGM exporter labels a GPU's series `hostname` (its node) and `gpu`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.core.v1 import ConfigMap, Namespace
from pulumi_kubernetes.helm.v3 import Release

from inferstack.catalog.charts import chart
from inferstack.conventions import MANAGED_BY
from inferstack.helm import helm_release
from inferstack.planning.disaggregation import ROLE_LABEL as PD_ROLE_LABEL, ROLE_METRIC_LABEL
from inferstack.serving import names
from inferstack.serving.pods import ROLE_LABEL
from inferstack.serving.vllm_args import VLLM_PORT
from inferstack.spec import ObservabilitySpec

CHART = "kube-prometheus-stack"
FULLNAME = "kube-prometheus-stack"  # fixes the chart's object names, so the Prometheus URL below is known
MONITORING_API_VERSION = "monitoring.coreos.com/v1"
COMPONENT_LABEL = "app.kubernetes.io/component"
VLLM_COMPONENT = "vllm"
VLLM_METRICS_PORT = VLLM_PORT  # the API port serves /metrics (a decode engine's routing sidecar passes it on)
# Worker pods of a multi-node (LeaderWorkerSet) replica run vLLM headless: no API server, no metrics port.
NO_METRICS_ROLES = ("worker",)
# Engine activity, which DCGM measures per MIG instance too; DCGM_FI_DEV_GPU_UTIL reads 0 on a MIG-enabled GPU.
GPU_ACTIVITY_METRIC = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
ENDPOINT_PICKER_COMPONENT = "endpoint-picker"
ENDPOINT_PICKER_METRICS_PORT = 9090
DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_FILE = "inferstack-serving.json"


def bundled_prometheus_url() -> str:
    namespace = chart(CHART).namespace
    return f"http://{FULLNAME}-prometheus.{namespace}.svc:9090"


def prometheus_stack_values(observability: ObservabilitySpec) -> dict[str, Any]:
    """Helm values: select monitors, rules and dashboards from every namespace, not just the release's."""
    interval = f"{observability.scrape_interval_seconds}s"
    return {
        "fullnameOverride": FULLNAME,
        "prometheus": {
            "prometheusSpec": {
                "scrapeInterval": interval,
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
                "serviceMonitorNamespaceSelector": {},
                "podMonitorNamespaceSelector": {},
                "ruleNamespaceSelector": {},
            }
        },
        "grafana": {
            # Empty: the Grafana chart generates a random admin password instead of the stack's well-known one.
            "adminPassword": "",
            "sidecar": {
                "dashboards": {"enabled": True, "label": DASHBOARD_LABEL, "labelValue": "1", "searchNamespace": "ALL"}
            },
        },
        # EKS runs the control plane; there is nothing of it to scrape.
        "kubeControllerManager": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeEtcd": {"enabled": False},
    }


def pod_monitor(
    component: str, port: int, interval_seconds: int, skip_roles: tuple[str, ...] = (),
    target_labels: tuple[str, ...] = (),
) -> dict[str, Any]:
    """PodMonitor spec: scrape /metrics on `port` of the pods labelled with this component, except those whose
    role serves no metrics (NotIn also matches pods without the role label, i.e. single-pod replicas), with the
    pod labels `target_labels` copied onto the series (prometheus-operator sanitizes their names)."""
    selector: dict[str, Any] = {"matchLabels": {COMPONENT_LABEL: component}}
    if skip_roles:
        selector["matchExpressions"] = [{"key": ROLE_LABEL, "operator": "NotIn", "values": list(skip_roles)}]
    body: dict[str, Any] = {
        "selector": selector,
        "podMetricsEndpoints": [{"portNumber": port, "path": "/metrics", "interval": f"{interval_seconds}s"}],
    }
    if target_labels:
        body["podTargetLabels"] = list(target_labels)
    return body


def alert_rules(observability: ObservabilitySpec) -> dict[str, Any]:
    """PrometheusRule spec: a KV cache about to force preemptions, and GPUs that sit idle (paid for, unused).

    GpuIdle has one series per GPU of each node, so it fires for every idle GPU on its own.
    """
    threshold = observability.kv_cache_alert_threshold
    idle = observability.gpu_idle_alert_minutes
    return {
        "groups": [
            {
                "name": "inferstack-serving",
                "rules": [
                    {
                        "alert": "VllmKvCacheNearlyFull",
                        "expr": f"max by (namespace, pod, model_name) (vllm:kv_cache_usage_perc) > {threshold}",
                        "for": "5m",
                        "labels": {"severity": "warning"},
                        "annotations": {
                            "summary": "vLLM KV cache nearly full",
                            "description": "KV cache of {{ $labels.pod }} ({{ $labels.model_name }}) is "
                            "{{ $value | humanizePercentage }} full; requests queue or get preempted. "
                            "Add replicas or lower max_num_seqs.",
                        },
                    },
                    {
                        "alert": "GpuIdle",
                        "expr": f"max by (hostname, gpu) ({GPU_ACTIVITY_METRIC}) == 0",
                        "for": f"{idle}m",
                        "labels": {"severity": "info"},
                        "annotations": {
                            "summary": "GPU idle",
                            "description": f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.hostname }}}} has been idle "
                            f"for {idle} minutes; scale its pool down or give it work.",
                        },
                    },
                ],
            }
        ]
    }


def _panel(title: str, expr: str, legend: str, unit: str, x: int, y: int, thresholds: list[dict] | None = None):
    panel: dict[str, Any] = {
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "targets": [{"refId": "A", "expr": expr, "legendFormat": legend}],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
    }
    if thresholds:
        panel["fieldConfig"]["defaults"]["thresholds"] = {"mode": "absolute", "steps": thresholds}
        panel["fieldConfig"]["defaults"]["custom"] = {"thresholdsStyle": {"mode": "line"}}
    return panel


def serving_dashboard(observability: ObservabilitySpec) -> dict[str, Any]:
    """Grafana dashboard: TTFT, inter-token latency, KV-cache use, queue depth and GPU use."""
    # By model and, for a disaggregated service, role: its prefill and decode engines serve one model name.
    p95 = f"histogram_quantile(0.95, sum by (le, model_name, {ROLE_METRIC_LABEL}) (rate({{metric}}_bucket[5m])))"
    by_model = f"{{{{model_name}}}} {{{{{ROLE_METRIC_LABEL}}}}}"
    kv_steps = [{"color": "green", "value": None}, {"color": "red", "value": observability.kv_cache_alert_threshold}]
    panels = [
        _panel("Time to first token (p95)", p95.format(metric="vllm:time_to_first_token_seconds"),
               by_model, "s", 0, 0),
        _panel("Inter-token latency / TPOT (p95)", p95.format(metric="vllm:inter_token_latency_seconds"),
               by_model, "s", 12, 0),
        _panel("KV-cache use", "max by (model_name, pod) (vllm:kv_cache_usage_perc)",
               "{{model_name}} {{pod}}", "percentunit", 0, 8, kv_steps),
        _panel("Queue depth (waiting requests)", f"sum by (model_name, {ROLE_METRIC_LABEL}) (vllm:num_requests_waiting)",
               by_model, "short", 12, 8),
        _panel("GPU engine activity", f"avg by (hostname) ({GPU_ACTIVITY_METRIC})",
               "{{hostname}}", "percentunit", 0, 16),
    ]
    return {
        "uid": "inferstack-serving",
        "title": "inferstack serving",
        "tags": ["inferstack", "vllm"],
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]
        },
        "panels": panels,
    }


@dataclass(frozen=True)
class MetricsArgs:
    observability: ObservabilitySpec
    serving_namespace: Namespace


class Metrics(pulumi.ComponentResource):
    """kube-prometheus-stack (or an existing Prometheus), monitors, alert rules and the serving dashboard."""

    release: Release | None  # None when the spec points at an existing Prometheus
    prometheus_url: str  # where KEDA triggers and people query
    pod_monitors: list[CustomResource]
    alert_rules: CustomResource | None
    dashboard: ConfigMap | None

    def __init__(self, name: str, args: MetricsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:Metrics", name, None, opts)
        observability = args.observability
        namespace = args.serving_namespace.metadata.name
        self.release = None
        self.prometheus_url = observability.prometheus_url or bundled_prometheus_url()
        if observability.prometheus_url is None:
            self.release = helm_release(
                f"{name}-release",
                CHART,
                namespace=chart(CHART).namespace,
                values=prometheus_stack_values(observability),
                opts=pulumi.ResourceOptions(parent=self),
            )
        crd = pulumi.ResourceOptions(parent=self, depends_on=[self.release] if self.release else [])

        def monitoring(kind: str, object_name: str, body: dict[str, Any]) -> CustomResource:
            return CustomResource(
                f"{name}-{kind.lower()}-{object_name}",
                api_version=MONITORING_API_VERSION,
                kind=kind,
                metadata={"name": object_name, "namespace": namespace, "labels": dict(MANAGED_BY)},
                spec=body,
                opts=crd,
            )

        interval = observability.scrape_interval_seconds
        self.pod_monitors = [
            monitoring(
                "PodMonitor", names.VLLM_POD_MONITOR,
                # A disaggregated service's prefill and decode engines serve one model name: the role tells them apart.
                pod_monitor(VLLM_COMPONENT, VLLM_METRICS_PORT, interval, NO_METRICS_ROLES, (PD_ROLE_LABEL,)),
            ),
            monitoring(
                "PodMonitor",
                names.EPP_POD_MONITOR,
                pod_monitor(ENDPOINT_PICKER_COMPONENT, ENDPOINT_PICKER_METRICS_PORT, interval),
            ),
        ]
        self.alert_rules = None
        if observability.alerts:
            self.alert_rules = monitoring("PrometheusRule", names.SERVING_ALERTS, alert_rules(observability))
        self.dashboard = None
        if observability.dashboards:
            self.dashboard = ConfigMap(
                f"{name}-dashboard",
                metadata={
                    "name": names.SERVING_DASHBOARD,
                    "namespace": namespace,
                    "labels": {**MANAGED_BY, DASHBOARD_LABEL: "1"},
                },
                data={DASHBOARD_FILE: json.dumps(serving_dashboard(observability), indent=2)},
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"prometheus_url": self.prometheus_url})
