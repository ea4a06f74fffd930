"""NetworkPolicies of the serving and batch namespaces: every pod's ingress denied unless a rule names its caller.

Kubernetes semantics (kubernetes.io/docs/concepts/services-networking/network-policies): a pod selected by any policy whose policyTypes hold Ingress is isolated and accepts only what one of
those policies' rules allows; the rules of several policies add up; a peer with a podSelector alone means pods of the
policy's own namespace; traffic from the pod's own node (the kubelet's probes) is always allowed. So each namespace
gets one policy that selects every pod and allows nothing, and each kind of pod one that opens its ports to its callers:

* vLLM pods: their HTTP port to the gateway's proxies, the endpoint picker whose InferencePool holds them (it scrapes
  their /metrics), Prometheus and the queue workers that call their Service; every port to the pods of their own
  service (a LeaderWorkerSet group's NCCL/Gloo and a disaggregated service's NIXL side channel and transfers, which
  use ports of their own choosing), and to nothing beyond it.
* endpoint pickers: ext_proc to the gateway's proxies, metrics to Prometheus.
* the gateway's proxies: their listener and status port to anyone (the load balancer's targets are the pods).
* body-based routing (Istio): its ext_proc port to the gateway's proxies.

The job queue's Redis has its own policy (serving/workers.py); egress stays open (DNS, S3, the Kubernetes API for the
pickers and routing sidecars, EKS Pod Identity). The policies take effect where the CNI enforces NetworkPolicy: on
EKS, the VPC CNI add-on with `enableNetworkPolicy: "true"` (EKS User Guide, cni-network-policy.html).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi_kubernetes.networking.v1 import NetworkPolicy

from inferstack.catalog.charts import chart
from inferstack.serving import disaggregation, names, pods
from inferstack.serving.gateway import EPP_COMPONENT, EPP_EXT_PROC_PORT, EPP_METRICS_PORT
from inferstack.serving.vllm_args import VLLM_PORT
from inferstack.spec import ModelServiceSpec, StackSpec

DEFAULT_DENY = names.DEFAULT_DENY
# The label every Kubernetes namespace carries with its own name (Kubernetes 1.22+, "Targeting a Namespace by its name").
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Istio labels the pods it deploys for a Gateway with the Gateway's name (istio/istio 1.30
# manifests/charts/istio-control/istio-discovery/files/kube-gateway.yaml); agentgateway's deployer labels its proxies
# with the same key
# (agentgateway/agentgateway controller/pkg/deployer, wellknown.GatewayNameLabel, kept from kgateway's
# "a label on GW pods to indicate the name of the gateway").
GATEWAY_NAME_LABEL = "gateway.networking.k8s.io/gateway-name"
# The proxies' readiness endpoint (kube-gateway.yaml: containerPort 15021 `status-port`, /healthz/ready), open to the
# load balancer's health checks.
GATEWAY_STATUS_PORT = 15021
# The body-based-routing chart's pods and ext_proc port (GAIE config/charts/body-based-routing/templates/bbr.yaml labels
# them `app: <bbr.name>`; v1.5.0 values `bbr.port: 9004`, shared/reference/charts-and-versions.md section 2).
BODY_BASED_ROUTER_LABELS = {"app": names.BODY_BASED_ROUTER}
BODY_BASED_ROUTER_PORT = 9004
# prometheus-operator labels every Prometheus server pod so (pkg/prometheus/server/statefulset_test.go: the pods'
# operator.ApplicationNameLabelKey); the bundled one runs in kube-prometheus-stack's namespace.
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}
QUEUE_WORKER_COMPONENT = "queue-worker"


def _tcp(*numbers: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": number} for number in numbers]


def _in_namespace(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}, "podSelector": {"matchLabels": labels}}


def gateway_proxies(spec: StackSpec) -> dict[str, Any]:
    """The pods of the stack's Gateway, which run in its (the serving) namespace."""
    return {"podSelector": {"matchLabels": {GATEWAY_NAME_LABEL: spec.gateway.name}}}


def prometheus(spec: StackSpec) -> dict[str, Any]:
    """The bundled Prometheus in its namespace; an existing one (observability.prometheus_url) in any namespace."""
    if spec.observability.prometheus_url is None:
        return _in_namespace(chart("kube-prometheus-stack").namespace, PROMETHEUS_POD_LABELS)
    return {"namespaceSelector": {}, "podSelector": {"matchLabels": dict(PROMETHEUS_POD_LABELS)}}


def routed_service(spec: StackSpec, model: ModelServiceSpec) -> ModelServiceSpec:
    """The service whose InferencePool and endpoint picker hold this one's pods: a prefill engine's decode service."""
    return spec.model_service(model.pd_service) if model.pd_role == "prefill" else model


def peer_group(model: ModelServiceSpec) -> dict[str, str] | None:
    """Labels of the pods that talk to each other inside one service: both roles of a disaggregated service, the
    pods of a multi-node replica; None when a service's pods never call each other."""
    if model.pd_service is not None:
        return disaggregation.inference_pool_selector(model.pd_service)
    return pods.selector_labels(model.name) if model.multi_node else None


def model_server_policy(spec: StackSpec, model: ModelServiceSpec) -> dict[str, Any]:
    """Ingress to one service's vLLM pods."""
    callers = [prometheus(spec)]
    if spec.gateway.enabled:
        picker = names.endpoint_picker(routed_service(spec, model))
        callers += [gateway_proxies(spec), {"podSelector": {"matchLabels": pods.selector_labels(picker, EPP_COMPONENT)}}]
    callers += [
        _in_namespace(spec.batch_namespace, pods.selector_labels(worker.name, QUEUE_WORKER_COMPONENT))
        for worker in spec.workers
        if worker.model_service == model.name
    ]
    rules: list[dict[str, Any]] = [{"from": callers, "ports": _tcp(VLLM_PORT)}]
    group = peer_group(model)
    if group is not None:
        rules.append({"from": [{"podSelector": {"matchLabels": group}}]})
    return {"podSelector": {"matchLabels": pods.selector_labels(model.name)}, "policyTypes": ["Ingress"], "ingress": rules}


def picker_policy(spec: StackSpec, model: ModelServiceSpec) -> dict[str, Any]:
    """Ingress to a service's endpoint picker: ext_proc from the gateway, metrics to Prometheus."""
    picker = names.endpoint_picker(model)
    return {
        "podSelector": {"matchLabels": pods.selector_labels(picker, EPP_COMPONENT)},
        "policyTypes": ["Ingress"],
        "ingress": [
            {"from": [gateway_proxies(spec)], "ports": _tcp(EPP_EXT_PROC_PORT)},
            {"from": [prometheus(spec)], "ports": _tcp(EPP_METRICS_PORT)},
        ],
    }


def gateway_policy(spec: StackSpec) -> dict[str, Any]:
    """Ingress to the gateway's proxies: the edge, open to any source on its listener and status ports only."""
    return {
        "podSelector": gateway_proxies(spec)["podSelector"],
        "policyTypes": ["Ingress"],
        "ingress": [{"ports": _tcp(spec.gateway.listener_port, GATEWAY_STATUS_PORT)}],
    }


def body_based_router_policy(spec: StackSpec) -> dict[str, Any]:
    return {
        "podSelector": {"matchLabels": dict(BODY_BASED_ROUTER_LABELS)},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [gateway_proxies(spec)], "ports": _tcp(BODY_BASED_ROUTER_PORT)}],
    }


def default_deny_policy() -> dict[str, Any]:
    """Selects every pod of its namespace and allows nothing: what no other policy opens stays closed."""
    return {"podSelector": {}, "policyTypes": ["Ingress"]}


def network_policies(spec: StackSpec) -> list[tuple[str, str, dict[str, Any]]]:
    """(namespace, name, spec) of every NetworkPolicy the stack renders."""
    serving = spec.serving_namespace
    found = [(namespace, DEFAULT_DENY, default_deny_policy()) for namespace in dict.fromkeys((serving, spec.batch_namespace))]
    found += [(serving, names.client_service(model), model_server_policy(spec, model)) for model in spec.models]
    if spec.gateway.enabled and spec.models:
        # Named like the Deployments they select, whose names the spec check already keeps apart.
        found.append((serving, f"{spec.gateway.name}-{spec.gateway.implementation}", gateway_policy(spec)))
        found += [(serving, names.endpoint_picker(model), picker_policy(spec, model))
                  for model in spec.models if model.pd_role != "prefill"]
        if spec.gateway.implementation == "istio" and spec.gateway.body_based_routing:
            found.append((serving, names.BODY_BASED_ROUTER, body_based_router_policy(spec)))
    return found


@dataclass(frozen=True)
class NetworkIsolationArgs:
    spec: StackSpec
    # namespace name -> what creates it: each policy waits for its own namespace only
    namespaces: Mapping[str, Sequence[pulumi.Resource]] = field(default_factory=dict)


class NetworkIsolation(pulumi.ComponentResource):
    """The NetworkPolicies of the serving and batch namespaces."""

    def __init__(self, name: str, args: NetworkIsolationArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving:NetworkIsolation", name, None, opts)
        created = []
        for namespace, policy, body in network_policies(args.spec):
            NetworkPolicy(
                f"{name}-{namespace}-{policy}",
                metadata={"name": policy, "namespace": namespace, "labels": pods.object_labels(policy, "network-policy")},
                spec=body,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.namespaces.get(namespace, ()))),
            )
            created.append(f"{namespace}/{policy}")
        self.register_outputs({"network_policies": created})
