"""Names of the Kubernetes objects the serving layer creates, and of those its controllers create from them.

One definition per name, read by the components that create the objects and by the spec check that
refuses a stack where two objects of one kind in one namespace would share a name. A clash with a
controller-created object is silent on a real cluster: the LeaderWorkerSet controller creates the
headless Service that `LWS_LEADER_ADDRESS` resolves through only when no Service of the LWS's name
exists (`CreateHeadlessServiceIfNotExists`, kubernetes-sigs/lws v0.10.0
pkg/utils/controller/controller_utils.go), so a Service of ours under that name would leave the
workers of a multi-node replica unable to reach their leader.

Pure string functions over the spec: no Pulumi, so the spec check can run them before anything registers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from inferstack.conventions import BATCH_RUNNER_SERVICE_ACCOUNT, MODEL_READER_SERVICE_ACCOUNT
from inferstack.planning.disaggregation import prefill_name, served_name
from inferstack.spec.errors import SpecError
from inferstack.spec import BatchJobSpec, ModelServiceSpec, QueueWorkerSpec, StackSpec

REDIS = "redis"                               # the job queue's Deployment, Service and NetworkPolicy (batch namespace)
REDIS_AUTH = "redis-auth"                     # the Secret holding the job queue's password
SERVING_DASHBOARD = "inferstack-serving-dashboard"
SERVING_ALERTS = "inferstack-serving"
VLLM_POD_MONITOR = "vllm"
EPP_POD_MONITOR = "endpoint-picker"
LWS_SUFFIX = "group"  # a multi-node replica is an LWS "group"; its pods are <lws>-<group>[-<worker>]
# The body-based-routing chart (GAIE v1.5.0, values `bbr.name`) names its Deployment and Service so.
BODY_BASED_ROUTER = "body-based-router"
DEFAULT_DENY = "default-deny-ingress"          # the NetworkPolicy that closes each namespace (serving, batch)
# A Service name is a DNS-1035 label (Kubernetes apimachinery validation.IsDNS1035Label): it starts with a letter.
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def client_service(model: ModelServiceSpec) -> str:
    """The ClusterIP Service clients call, whatever the topology: `http://<name>.<namespace>.svc:8000`.

    Also the name of its PodDisruptionBudget, ScaledObject, InferencePool, InferenceObjective and HTTPRoute, and
    on agentgateway of its AgentgatewayBackend (with a token limit) and its route's AgentgatewayPolicy.
    """
    return model.name


def requested_models(model: ModelServiceSpec) -> tuple[str, ...]:
    """What requests for a service send as `model`: its name and each LoRA adapter's. Also the names of its
    InferenceObjectives, one per requested model, since the gateway names the objective after the request's model."""
    return (served_name(model), *(adapter.name for adapter in model.lora_adapters))


def workload(model: ModelServiceSpec) -> str:
    """The Deployment (one node per replica) or LeaderWorkerSet (several nodes per replica).

    A LeaderWorkerSet must not share the client Service's name: its controller's headless Service
    takes the LWS's name, and only when that name is free.
    """
    return f"{model.name}-{LWS_SUFFIX}" if model.multi_node else model.name


def lws_headless_service(model: ModelServiceSpec) -> str | None:
    """The headless Service the LWS controller creates (subdomain policy Shared, the default): the LWS's name."""
    return workload(model) if model.multi_node else None


def prefetch_config_map(owner: str) -> str:
    """The weights pre-fetch script of a model service or batch job."""
    return f"{owner}-prefetch"


def claim_template(owner: str) -> str:
    """The ResourceClaimTemplate of a model service's or batch job's pods on a DRA pool (one rank group's devices)."""
    return f"{owner}-devices"


def endpoint_picker(model: ModelServiceSpec) -> str:
    """The endpoint picker's Deployment, Service, ServiceAccount, Role, RoleBinding and ConfigMap."""
    return f"{model.name}-epp"


def request_headers_policy(spec: StackSpec) -> str:
    """The gateway policy (an EnvoyFilter or AgentgatewayPolicy) that sets and removes request headers before routing."""
    return f"{spec.gateway.name}-request-headers"


def worker_program(worker: QueueWorkerSpec) -> str:
    return f"{worker.name}-program"


def batch_scripts(job: BatchJobSpec) -> str:
    return f"{job.name}-scripts"


@dataclass(frozen=True)
class ObjectName:
    """One object the stack makes exist: by inferstack itself, or by a controller acting on one of ours."""

    namespace: str
    kind: str
    name: str
    made_by: str             # who creates it, for the message
    path: str | None = None  # the spec field whose name it derives from (renaming it renames the object);
                             # None for the names the platform always takes


def gateway_jwt(spec: StackSpec) -> str:
    """The gateway's RequestAuthentication: which tokens it verifies."""
    return f"{spec.gateway.name}-jwt"


def gateway_tenants(spec: StackSpec) -> str:
    """The gateway's ALLOW AuthorizationPolicy: which tenant may call which model service."""
    return f"{spec.gateway.name}-tenants"


def gateway_rate_limits(spec: StackSpec) -> str:
    """The gateway's per-tenant request limits (an EnvoyFilter on Istio)."""
    return f"{spec.gateway.name}-rate-limits"


def gateway_access(spec: StackSpec) -> str:
    """agentgateway's Gateway-wide policy: authentication, the tenants' rules and the fairness header."""
    return f"{spec.gateway.name}-access"


def ai_backend(model: ModelServiceSpec) -> str:
    """agentgateway's AgentgatewayBackend in front of the service's InferencePool (agentgateway_edge.ai_backend_spec)."""
    return client_service(model)


def route_rate_limit(model: ModelServiceSpec) -> str:
    """agentgateway's per-tenant limits on a service's HTTPRoute, named after the route."""
    return client_service(model)


def object_names(spec: StackSpec) -> Iterator[ObjectName]:
    """Every named object of the serving and batch namespaces. A service's objects are reserved whether or
    not an optional feature (gateway, autoscaling) is on, so switching one on later cannot start a clash;
    the platform's own (the gateway implementation's, the job queue's) follow what the stack installs."""
    serving, batch = spec.serving_namespace, spec.batch_namespace
    for namespace in {serving, batch}:
        yield ObjectName(namespace, "ServiceAccount", MODEL_READER_SERVICE_ACCOUNT, "inferstack")
        yield ObjectName(namespace, "NetworkPolicy", DEFAULT_DENY, "inferstack")
    yield ObjectName(batch, "ServiceAccount", BATCH_RUNNER_SERVICE_ACCOUNT, "inferstack")
    yield ObjectName(serving, "ConfigMap", SERVING_DASHBOARD, "inferstack")
    yield ObjectName(serving, "PrometheusRule", SERVING_ALERTS, "inferstack")
    for monitor in (VLLM_POD_MONITOR, EPP_POD_MONITOR):
        yield ObjectName(serving, "PodMonitor", monitor, "inferstack")
    yield ObjectName(serving, "Gateway", spec.gateway.name, "inferstack", "gateway.name")
    # The edge's Istio security objects: the JWT check and the tenants' ALLOW policy (serving/gateway.py).
    yield ObjectName(serving, "RequestAuthentication", gateway_jwt(spec), "inferstack", "gateway.name")
    yield ObjectName(serving, "AuthorizationPolicy", gateway_tenants(spec), "inferstack", "gateway.name")
    # The request headers' policy, and the per-tenant limits (Istio) or the access policy (agentgateway).
    policy = "EnvoyFilter" if spec.gateway.implementation == "istio" else "AgentgatewayPolicy"
    yield ObjectName(serving, policy, request_headers_policy(spec), "inferstack", "gateway.name")
    edge = gateway_rate_limits(spec) if spec.gateway.implementation == "istio" else gateway_access(spec)
    yield ObjectName(serving, policy, edge, "inferstack", "gateway.name")
    if spec.gateway.implementation == "istio":
        # Istio's automated deployment provisions `<Gateway>-<GatewayClass>` (istio.io, Kubernetes Gateway
        # API task, "Automated Deployment"); body-based routing runs beside it on Istio.
        proxy = f"{spec.gateway.name}-{spec.gateway.implementation}"
        for kind in ("Deployment", "Service", "ServiceAccount"):
            yield ObjectName(serving, kind, proxy, "Istio's gateway deployment", "gateway.name")
        for kind in ("Deployment", "Service"):
            yield ObjectName(serving, kind, BODY_BASED_ROUTER, "the body-based-routing chart")
        yield ObjectName(serving, "NetworkPolicy", BODY_BASED_ROUTER, "inferstack")
    # The gateway proxies' NetworkPolicy, named like the proxies' Deployment.
    yield ObjectName(serving, "NetworkPolicy", f"{spec.gateway.name}-{spec.gateway.implementation}", "inferstack",
                     "gateway.name")
    for i, model in enumerate(spec.models):
        path = f"models[{i}].name"
        ours = f"model service {model.name!r}"
        kind = "LeaderWorkerSet" if model.multi_node else "Deployment"
        yield ObjectName(serving, kind, workload(model), ours, path)
        headless = lws_headless_service(model)
        if headless is not None:
            yield ObjectName(serving, "Service", headless, f"the LeaderWorkerSet controller for {ours}", path)
        for kind in ("Service", "PodDisruptionBudget", "ScaledObject", "InferencePool", "HTTPRoute", "NetworkPolicy"):
            yield ObjectName(serving, kind, client_service(model), ours, path)
        if spec.gateway.implementation == "agentgateway":
            yield ObjectName(serving, "AgentgatewayPolicy", route_rate_limit(model), ours, path)
            yield ObjectName(serving, "AgentgatewayBackend", ai_backend(model), ours, path)
        # One objective per requested model; a name repeated within the service is the LoRA check's to refuse.
        for objective in dict.fromkeys(requested_models(model)):
            where = path if objective == model.name else f"models[{i}].lora_adapters"
            yield ObjectName(serving, "InferenceObjective", objective, ours, where)
        yield ObjectName(serving, "ConfigMap", prefetch_config_map(model.name), ours, path)
        yield ObjectName(serving, "ResourceClaimTemplate", claim_template(model.name), ours, path)
        picker = f"the endpoint picker of {ours}"
        for kind in ("Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "NetworkPolicy"):
            yield ObjectName(serving, kind, endpoint_picker(model), picker, path)
        if model.disaggregation is not None:
            # The decode sidecars' SSRF allowlist: an InferencePool of the prefill pods and the Role that reads it.
            for kind in ("InferencePool", "Role", "RoleBinding"):
                yield ObjectName(serving, kind, prefill_name(model.name), ours, path)
            yield ObjectName(serving, "ResourceClaimTemplate", claim_template(prefill_name(model.name)), ours, path)
    if spec.workers:
        for kind in ("Deployment", "Service", "NetworkPolicy"):
            yield ObjectName(batch, kind, REDIS, "the job queue (Redis)")
        yield ObjectName(batch, "Secret", REDIS_AUTH, "the job queue's password")
    for i, worker in enumerate(spec.workers):
        path, ours = f"workers[{i}].name", f"worker {worker.name!r}"
        for kind in ("Deployment", "ScaledObject", "TriggerAuthentication"):
            yield ObjectName(batch, kind, worker.name, ours, path)
        yield ObjectName(batch, "ConfigMap", worker_program(worker), ours, path)
    for i, job in enumerate(spec.batch_jobs):
        path, ours = f"batch_jobs[{i}].name", f"batch job {job.name!r}"
        yield ObjectName(batch, "CronJob" if job.schedule else "Job", job.name, ours, path)  # a one-off Job's name prefix
        for name in (prefetch_config_map(job.name), batch_scripts(job)):
            yield ObjectName(batch, "ConfigMap", name, ours, path)
        yield ObjectName(batch, "ResourceClaimTemplate", claim_template(job.name), ours, path)


def check_object_names(spec: StackSpec) -> None:
    """Refuse a spec in which two objects of one kind and namespace would get the same name, or a Service
    would get a name the API server refuses."""
    seen: dict[tuple[str, str, str], ObjectName] = {}
    for entry in object_names(spec):
        if entry.kind == "Service" and entry.path is not None and not DNS_1035_LABEL.fullmatch(entry.name):
            raise SpecError(
                entry.path,
                f"{entry.made_by} would need Service {entry.namespace}/{entry.name}, and a Service name must start "
                "with a letter (DNS-1035)",
                "start the name with a letter, e.g. 'm-" + entry.name + "'",
            )
        key = (entry.namespace, entry.kind, entry.name)
        first = seen.setdefault(key, entry)
        if first is entry:
            continue
        raise SpecError(
            # The entry a rename fixes: the platform's own names never meet each other, only a spec entry.
            entry.path or first.path or "models",
            f"{entry.made_by} and {first.made_by} would both need {entry.kind} {entry.namespace}/{entry.name}",
            "rename one of them",
        )
