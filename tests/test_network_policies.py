"""Network isolation of the serving and batch namespaces, judged the way Kubernetes judges NetworkPolicies.

The evaluator below encodes the NetworkPolicy rules of the Kubernetes documentation (kubernetes/website
content/en/docs/concepts/services-networking/network-policies.md: "Isolated and Non-isolated Pods", "Behavior of
`to` and `from` selectors", `policyTypes`, and "a pod cannot block access to itself"): a pod no policy selects for
Ingress accepts everything; a selected pod accepts only what the union of the selecting policies' rules allows; a
rule allows traffic matching both its `from` (absent or empty: every source) and its `ports` (absent or empty: every
port); a peer with a podSelector alone means pods of the policy's namespace, a namespaceSelector alone every pod of
the namespaces it matches, both together the matching pods of the matching namespaces. Namespaces carry
`kubernetes.io/metadata.name` (Kubernetes 1.22+). Sources outside the cluster match only ipBlock peers.

The pods the stack does not render are modelled with the labels their controllers give them: Istio's gateway proxies
(istio/istio 1.30 manifests/charts/istio-control/istio-discovery/files/kube-gateway.yaml:
`gateway.networking.k8s.io/gateway-name`), Prometheus (prometheus-operator pkg/prometheus/server/statefulset_test.go:
`app.kubernetes.io/name: prometheus`, in kube-prometheus-stack's namespace).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kube_validation import assert_valid
from test_serving import render

from inferstack.engine.render import kubernetes_objects
from inferstack.planning.disaggregation import SIDE_CHANNEL_PORT
from inferstack.serving.gateway import (
    EPP_EXT_PROC_PORT, EPP_METRICS_PORT, UNTRUSTED_ROUTING_HEADERS, agentgateway_request_transformation,
    request_headers_envoy_filter,
)
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
VLLM_PORT = 8000
REDIS_PORT = 6379
NCCL_PORT = 29500         # any port a LeaderWorkerSet group's collectives pick
NIXL_TRANSFER_PORT = 41000  # any port a NIXL transfer picks beside the side channel
NAME = "app.kubernetes.io/name"
COMPONENT = "app.kubernetes.io/component"


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str | None                       # None: a client outside the cluster
    labels: dict[str, str] = field(default_factory=dict)
    ip: str = "10.0.0.1"


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector: every matchLabels pair and every matchExpressions term (an empty selector selects all)."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        key, operator, values = term["key"], term["operator"], term.get("values") or []
        if not {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[operator]:
            return False
    return True


def peer_matches(peer: dict[str, Any], source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(source.ip)
        return (source.namespace is None and address in ipaddress.ip_network(block["cidr"])
                and not any(address in ipaddress.ip_network(e) for e in block.get("except") or []))
    if source.namespace is None:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": source.namespace}):
            return False
    elif source.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], source.labels)


def port_matches(ports: list[dict[str, Any]] | None, port: int) -> bool:
    return not ports or any(
        p.get("protocol", "TCP") == "TCP" and ("port" not in p or p["port"] <= port <= p.get("endPort", p["port"]))
        for p in ports
    )


def allowed(policies: list[dict[str, Any]], source: Pod, target: Pod, port: int) -> bool:
    """Whether `source` may open a TCP connection to `target` on `port`."""
    if source == target:
        return True
    isolating = [
        p for p in policies
        if p["metadata"]["namespace"] == target.namespace and selects(p["spec"]["podSelector"], target.labels)
        and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
    ]
    if not isolating:
        return True
    return any(
        (not rule.get("from") or any(peer_matches(peer, source, p["metadata"]["namespace"]) for peer in rule["from"]))
        and port_matches(rule.get("ports"), port)
        for p in isolating for rule in p["spec"].get("ingress") or []
    )


def rendered_pods(objects: list[dict[str, Any]]) -> list[Pod]:
    """One pod per pod template of every rendered workload."""
    found = []
    for o in objects:
        spec, namespace, name = o.get("spec") or {}, o["metadata"].get("namespace"), o["metadata"]["name"]
        templates = {
            "Deployment": lambda: [("", spec["template"])],
            "Job": lambda: [("", spec["template"])],
            "CronJob": lambda: [("", spec["jobTemplate"]["spec"]["template"])],
            "LeaderWorkerSet": lambda: [("-leader", spec["leaderWorkerTemplate"]["leaderTemplate"]),
                                        ("-worker", spec["leaderWorkerTemplate"]["workerTemplate"])],
        }.get(o["kind"], list)()
        found += [Pod(name + suffix, namespace, dict(t["metadata"]["labels"])) for suffix, t in templates]
    return found


class Cluster:
    """A rendered stack's pods and NetworkPolicies, with the pods its controllers add and some strangers."""

    def __init__(self, spec: StackSpec, objects: list[dict[str, Any]]) -> None:
        self.spec, self.objects = spec, objects
        self.policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
        self.pods = {p.name: p for p in rendered_pods(objects)}
        serving = spec.serving_namespace
        self.gateway = Pod("gateway-proxy", serving, {"gateway.networking.k8s.io/gateway-name": spec.gateway.name})
        self.prometheus = Pod("prometheus", "monitoring", {NAME: "prometheus", "prometheus": "kube-prometheus-stack-prometheus"})
        self.outsider = Pod("curl", "default", {"app": "curl"})
        self.neighbour = Pod("debug", serving, {"app": "debug"})
        self.client = Pod("client", None, ip="203.0.113.7")

    def can(self, source: Pod, target: Pod, port: int) -> bool:
        return allowed(self.policies, source, target, port)

    def vllm(self) -> list[Pod]:
        return [p for p in self.pods.values() if p.labels.get(COMPONENT) == "vllm"]

    def serving_vllm(self) -> list[Pod]:
        """vLLM pods with an HTTP server: all but a multi-node replica's workers."""
        return [p for p in self.vllm() if p.labels.get("inferstack.dev/role") != "worker"]

    def picker(self, service: str) -> Pod:
        return self.pods[f"{service}-epp"]


def cluster_of(stack: str, **gateway: Any) -> Cluster:
    """The serving layer of a repository stack as the program wires it (tests/test_serving.py render)."""
    spec = load_stack(STACKS, stack)
    if gateway:
        data = spec.model_dump(mode="json", exclude_none=True)
        data["gateway"] = {**data.get("gateway", {}), **gateway}
        spec = StackSpec.model_validate(data)
    spec = validate(spec).stack   # with a disaggregated service's prefill engines
    return Cluster(spec, kubernetes_objects(render(spec)))


@pytest.fixture(scope="module")
def prod() -> Cluster:
    return cluster_of("prod")


@pytest.fixture(scope="module")
def disaggregated() -> Cluster:
    return cluster_of("serving")


def test_the_policies_validate_against_the_kubernetes_schema(prod, disaggregated):
    for cluster in (prod, disaggregated):
        assert cluster.policies
        assert_valid(cluster.policies, cluster.spec.cluster.kubernetes_version)


def test_every_rendered_pod_is_isolated_for_ingress(prod, disaggregated):
    """Deny by default: a pod no policy selects would accept every connection."""
    for cluster in (prod, disaggregated):
        for pod in cluster.pods.values():
            assert not cluster.can(cluster.outsider, pod, VLLM_PORT), pod
            assert not cluster.can(cluster.neighbour, pod, VLLM_PORT), pod


def test_the_gateway_reaches_vllm_and_a_pod_elsewhere_does_not(prod, disaggregated):
    for cluster in (prod, disaggregated):
        assert cluster.serving_vllm()
        for pod in cluster.serving_vllm():
            assert cluster.can(cluster.gateway, pod, VLLM_PORT), pod
            for stranger in (cluster.outsider, cluster.neighbour, cluster.client):
                assert not cluster.can(stranger, pod, VLLM_PORT), (stranger, pod)
            assert not cluster.can(cluster.gateway, pod, NCCL_PORT), pod


def test_prometheus_scrapes_vllm_and_the_pickers(prod):
    for pod in prod.serving_vllm():
        assert prod.can(prod.prometheus, pod, VLLM_PORT), pod
    pickers = [p for p in prod.pods.values() if p.labels.get(COMPONENT) == "endpoint-picker"]
    assert pickers
    for picker in pickers:
        assert prod.can(prod.prometheus, picker, EPP_METRICS_PORT)
        assert not prod.can(prod.prometheus, picker, EPP_EXT_PROC_PORT)


def test_a_picker_is_reached_from_the_gateway_only_and_reads_its_own_pool(prod):
    models = [m for m in prod.spec.models if m.pd_role != "prefill"]
    for model in models:
        picker = prod.picker(model.name)
        assert prod.can(prod.gateway, picker, EPP_EXT_PROC_PORT)
        for stranger in (prod.outsider, prod.neighbour, *prod.vllm()):
            assert not prod.can(stranger, picker, EPP_EXT_PROC_PORT), stranger
        for pod in prod.serving_vllm():
            own = pod.labels[NAME] == model.name
            assert prod.can(picker, pod, VLLM_PORT) == own, (picker, pod)


def test_a_multi_node_group_talks_within_itself_only(prod):
    groups = [m for m in prod.spec.models if m.multi_node]
    assert groups
    for model in groups:
        leader, worker = prod.pods[f"{model.name}-group-leader"], prod.pods[f"{model.name}-group-worker"]
        assert prod.can(worker, leader, NCCL_PORT) and prod.can(leader, worker, NCCL_PORT)
        for other in (p for p in prod.vllm() if p.labels[NAME] != model.name):
            assert not prod.can(other, worker, NCCL_PORT), other
            assert not prod.can(other, leader, NCCL_PORT), other


def test_prefill_and_decode_peers_reach_each_other_and_no_one_else_does(disaggregated):
    cluster = disaggregated
    (decode_model,) = [m for m in cluster.spec.models if m.pd_role == "decode"]
    engines = [p for p in cluster.vllm() if p.labels.get("inferstack.dev/disaggregated-service") == decode_model.name]
    decode = [p for p in engines if p.labels.get("llm-d.ai/role") == "decode"]
    prefill = [p for p in engines if p.labels.get("llm-d.ai/role") == "prefill"]
    assert decode and prefill
    for d in decode:
        for p in prefill:
            assert cluster.can(d, p, VLLM_PORT)            # the routing sidecar hands the prompt over
            for port in (SIDE_CHANNEL_PORT, NIXL_TRANSFER_PORT):
                assert cluster.can(d, p, port) and cluster.can(p, d, port)
    others = [p for p in cluster.vllm() if p not in engines]
    for engine in engines:
        assert cluster.can(cluster.picker(decode_model.name), engine, VLLM_PORT)   # its pool holds both roles
        for other in others + [cluster.outsider, cluster.neighbour]:
            assert not cluster.can(other, engine, SIDE_CHANNEL_PORT), (other, engine)


def test_queue_workers_reach_their_model_service_and_redis(prod):
    (redis,) = [p for p in prod.pods.values() if p.labels.get(NAME) == "redis"]
    for worker in prod.spec.workers:
        pod = prod.pods[worker.name]
        assert prod.can(pod, redis, REDIS_PORT)
        for target in prod.serving_vllm():
            assert prod.can(pod, target, VLLM_PORT) == (target.labels[NAME] == worker.model_service), target
    assert not prod.can(prod.outsider, redis, REDIS_PORT)


@pytest.mark.parametrize("implementation", ["istio", "agentgateway"])
def test_clients_outside_reach_the_gateway_listener_only(implementation):
    # The stacks' JWT tenants are rendered for Istio only: agentgateway keeps its closed default.
    auth = {} if implementation == "agentgateway" else load_stack(STACKS, "dev").gateway.auth.model_dump(mode="json")
    cluster = cluster_of("dev", implementation=implementation, auth=auth)
    port = cluster.spec.gateway.listener_port
    assert cluster.can(cluster.client, cluster.gateway, port)
    assert not cluster.can(cluster.client, cluster.gateway, 15000)      # Envoy's admin port stays closed
    for pod in cluster.serving_vllm():
        assert not cluster.can(cluster.client, pod, VLLM_PORT)


def test_body_based_routing_answers_the_gateway_only(prod):
    router = Pod("body-based-router", prod.spec.serving_namespace, {"app": "body-based-router"})
    assert prod.can(prod.gateway, router, 9004)   # GAIE v1.5.0 body-based-routing values.yaml bbr.port
    assert not prod.can(prod.neighbour, router, 9004)


def test_the_edge_removes_every_header_the_picker_alone_may_set():
    """The picker answers the data plane with `x-gateway-destination-endpoint` (GAIE
    docs/proposals/004-endpoint-picker-protocol/README.md, "Destination Endpoint"); a client's copy is removed before
    any routing on both gateways, as are the routing sidecar's headers (llm-d-router v0.10.0
    pkg/common/routing/common.go)."""
    assert {"x-gateway-destination-endpoint", "x-prefiller-host-port"} <= set(UNTRUSTED_ROUTING_HEADERS)
    envoy = request_headers_envoy_filter({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "g"}, True)
    removed = {m["remove"] for p in envoy["configPatches"]
               for m in p["patch"]["value"]["typed_config"]["mutations"]["request_mutations"] if "remove" in m}
    assert removed == set(UNTRUSTED_ROUTING_HEADERS)
    for body_based_routing in (True, False):
        assert set(agentgateway_request_transformation(body_based_routing)["remove"]) == set(UNTRUSTED_ROUTING_HEADERS)
