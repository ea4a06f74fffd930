"""The inference gateway: one OpenAI-style endpoint for every model service.

* Gateway API and Inference Extension CRDs from their release manifests (no Helm chart ships them),
  and the llm-d router's CRDs (InferenceObjective lives in `llm-d.ai` since GAIE v1.6.0).
* The implementation: Istio (base + istiod with the inference extension switched on) or agentgateway
  (CRDs + controller with `inferenceExtension.enabled`); each provides its GatewayClass.
* A Gateway, internal to the VPC, and body-based routing that copies the request's `model` field
  into `X-Gateway-Model-Name` (GAIE's BBR chart on Istio; an agentgateway transformation policy,
  as that chart only wires Istio and GKE).
* Request headers set before any routing or picking: the routing sidecar's removed (only the picker may set them;
  serving/disaggregation.py), and the InferenceObjective named after the requested model, since the picker reads the
  objective, and so the tier's priority, from a header only. On Istio an EnvoyFilter of Envoy header_mutation filters
  ahead of the picker's ext_proc; on agentgateway a PreRouting transformation. A route-level HTTPRoute
  RequestHeaderModifier would not do: Envoy applies route header changes in its router filter, after ext_proc, so it
  would strip the picker's own header and name the objective too late.
* The edge (spec/edge.py): the listener HTTPS with the spec's TLS Secret, or HTTP behind the AWS load balancer's ACM
  certificate, or plain HTTP by explicit choice; on Istio a RequestAuthentication verifying the issuer's JWTs and an
  ALLOW AuthorizationPolicy per tenant and model on the Gateway, so a request without a verified token of a tenant
  allowed its model never reaches a route (with no tenant the policy allows nothing).
* Per model service, a `ModelRoute`: the endpoint picker (EPP) with prefix-cache-aware scoring, its
  InferencePool selecting the service's serving pods, an InferenceObjective carrying the tier's
  priority, and an HTTPRoute matching the model's name.

The EPP is rendered here as plain objects rather than through the `llm-d-router-gateway` chart: with
`router.inferencePool.create: false` (needed to own and validate the InferencePool) that chart
switches the picker to its standalone `--endpoint-selector` mode, which reads no InferencePool and
no InferenceObjectives, so priorities would be lost. Plain objects keep `--pool-name` mode, pin the
picker's image to the catalog's llm-d-router release, size it for small system nodes, and are
validated like everything else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import yaml
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.apps.v1 import Deployment
from pulumi_kubernetes.core.v1 import ConfigMap, Service, ServiceAccount
from pulumi_kubernetes.yaml.v2 import ConfigFile

from inferstack.catalog.charts import MANIFESTS, chart
from inferstack.helm import helm_release
from inferstack.planning import kv_offload
from inferstack.serving import agentgateway_edge, autoscaling, disaggregation, names, pods
from inferstack.serving.headers import (
    DEPRECATED_PICKER_HEADERS, FAIRNESS_HEADER, MODEL_HEADER, OBJECTIVE_HEADER, PICKER_CONTROL_HEADERS,
)
from inferstack.serving.inference_api import INFERENCE_GROUP, INFERENCE_POOL_API_VERSION
from inferstack.serving.model_service import pool_selector
from inferstack.serving.rbac import granted_role
from inferstack.serving.vllm_args import VLLM_PORT
from inferstack.spec import GatewaySpec, ModelServiceSpec, StackSpec
from inferstack.spec.edge import ACM_CERTIFICATE_ANNOTATION, ACM_PORTS_ANNOTATION, JwtIssuerSpec, TenantSpec

GATEWAY_API_VERSION = "gateway.networking.k8s.io/v1"
OBJECTIVE_API_VERSION = "llm-d.ai/v1alpha2"
GATEWAY_GROUP, OBJECTIVE_GROUP = GATEWAY_API_VERSION.split("/")[0], OBJECTIVE_API_VERSION.split("/")[0]
AGENTGATEWAY_POLICY_API_VERSION = "agentgateway.dev/v1alpha1"
ENVOY_FILTER_API_VERSION = "networking.istio.io/v1alpha3"
ISTIO_SECURITY_API_VERSION = "security.istio.io/v1"
# Envoy's header mutation HTTP filter (envoy.extensions.filters.http.header_mutation.v3.HeaderMutation), twice.
HEADER_MUTATION_TYPE = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"
STRIP_FILTER = "inferstack.strip_routing_headers"
OBJECTIVE_FILTER = "inferstack.inference_objective"
BBR_FILTER = "envoy.filters.http.ext_proc.bbr"
# Flow control's fairness policy that takes the tenants' queues in turn, so one tenant's burst cannot starve another's
# (llm-d-router v0.10.0 pkg/epp/framework/plugins/flowcontrol/fairness/roundrobin/README.md); the default,
# global-strict, serves the oldest request of any tenant first (pkg/epp/flowcontrol/registry/config.go).
FAIRNESS_POLICY = "round-robin-fairness-policy"
# The host KV tier's prefix index and its scorer (picker_config).
HOST_TIER_PRODUCER = "host-tier-prefix-producer"
HOST_TIER_SCORER = "host-tier-prefix-scorer"

# The picker's image is released with the llm-d router; the catalog pins that release.
EPP_IMAGE = f"ghcr.io/llm-d/llm-d-router-endpoint-picker:{chart('llm-d-router-gateway').app_version}"
EPP_EXT_PROC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
EPP_UID = 65532  # the distroless image's nonroot user
EPP_COMPONENT = "endpoint-picker"
EPP_CONFIG_FILE = "plugins.yaml"

# Load balancers the implementation creates for the Gateway stay inside the VPC: the AWS Load Balancer
# Controller reads the scheme annotation, the in-tree controller the internal one.
INTERNAL_LOAD_BALANCER = {
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
}


SATURATION_DETECTOR = "saturation-detector"


def picker_config(model: ModelServiceSpec, prefix_cache: bool, queue_seconds: int,
                  saturation: Mapping[str, float]) -> str:
    """EndpointPickerConfig: queue depth and KV-cache use, plus prefix-cache affinity when on, LoRA affinity for a
    service with adapters, and a second prefix index for its host KV tier; flow control on, so a saturated pool's
    requests wait in the picker by their InferenceObjective's priority, each tenant's in its own queue taken in turn,
    for at most `queue_seconds` (the route's timeout: past it the gateway has given up on them). The pool counts as
    saturated at the `saturation` thresholds (autoscaling.saturation_thresholds: above where the service's scaler
    fires, so requests held in the picker never hide the load from it).

    Flow control is off unless its feature gate is set (llm-d-router v0.10.0 pkg/epp/flowcontrol/README.md,
    "Enabling, disabling, and tuning"); a band's fairnessPolicyRef names a plugin instance of the config, and only the
    default policies are registered without one (pkg/epp/config/loader/flowcontrol.go resolvePlugin,
    defaults.go); defaultRequestTTL and the band templates are apix/config/v1alpha1 FlowControlConfig's fields.

    The metrics data source and extractor the scorers read are injected by the picker itself, and so is the
    GPU tier's prefix index (approx-prefix-cache-producer, tuned from the pods' metrics). The host tier's index
    is sized to the blocks the tier holds and scored below the GPU's, whose hits cost no copy
    (planning/kv_offload.py); lora-affinity-scorer prefers pods with the request's adapter loaded
    (llm-d-router v0.10.0 scheduling/scorer/loraaffinity).
    """
    plugins: list[dict[str, Any]] = []
    scorers = [("queue-scorer", 2), ("kv-cache-utilization-scorer", 2)]
    if prefix_cache:
        scorers.append(("prefix-cache-scorer", 3))
        if model.kv_offload is not None:
            plugins.append({
                "type": "approx-prefix-cache-producer", "name": HOST_TIER_PRODUCER,
                "parameters": {"autoTune": False, "blockSizeTokens": kv_offload.INDEX_BLOCK_TOKENS,
                               "lruCapacityPerServer": kv_offload.tier_blocks(model)},
            })
            plugins.append({"type": "prefix-cache-scorer", "name": HOST_TIER_SCORER,
                            "parameters": {"prefixMatchInfoProducerName": HOST_TIER_PRODUCER}})
            scorers.append((HOST_TIER_SCORER, 2))
    if model.lora_adapters:
        scorers.append(("lora-affinity-scorer", 2))
    named = {plugin["name"] for plugin in plugins}
    plugins += [{"type": scorer} for scorer, _ in scorers if scorer not in named]
    profile = [{"pluginRef": scorer, "weight": weight} for scorer, weight in scorers]
    profiles = [{"name": "default", "plugins": profile}]
    if model.disaggregation is not None:
        plugins, profiles = disaggregated_profiles(model, plugins, profile)
    # A template: each priority gets its own band; negative priorities fall back to it (registry/config.go).
    band = {"priority": 0, "fairnessPolicyRef": FAIRNESS_POLICY}
    detector = {"type": "utilization-detector", "name": SATURATION_DETECTOR, "parameters": dict(saturation)}
    config = {
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "featureGates": ["flowControl"],
        "plugins": [*plugins, {"type": FAIRNESS_POLICY}, detector],
        "schedulingProfiles": profiles,
        "flowControl": {"defaultRequestTTL": f"{queue_seconds}s", "defaultPriorityBand": band,
                        "saturationDetector": {"pluginRef": SATURATION_DETECTOR}},
    }
    return yaml.safe_dump(config, sort_keys=False)


def disaggregated_profiles(
    model: ModelServiceSpec, plugins: list[dict[str, Any]], scorers: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """llm-d-router v0.10.0's P/D scheduling (deploy/config/pd-epp-config.yaml; profilehandler/disagg/README.md):
    disagg-profile-handler runs the decode profile and, when prefix-based-pd-decider finds at least
    `non_cached_tokens` of the prompt uncached on the chosen decode pod, the prefill profile; each profile keeps
    only its role's pods (prefill-filter, decode-filter on llm-d.ai/role) and picks the best-scored one."""
    assert model.disaggregation is not None
    plugins = [
        *plugins,
        {"type": "prefill-filter"},
        {"type": "decode-filter"},
        {"type": "max-score-picker"},
        {"type": "prefix-based-pd-decider",
         "parameters": {"nonCachedTokens": model.disaggregation.non_cached_tokens}},
        {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": "prefix-based-pd-decider"}}},
    ]
    profiles = [
        {"name": role, "plugins": [{"pluginRef": f"{role}-filter"}, {"pluginRef": "max-score-picker"},
                                   *(dict(scorer) for scorer in scorers)]}
        for role in ("prefill", "decode")
    ]
    return plugins, profiles


def picker_args(spec: StackSpec, model: ModelServiceSpec) -> list[str]:
    args = [
        "--pool-name", names.client_service(model),
        "--pool-namespace", spec.serving_namespace,
        "--pool-group", INFERENCE_GROUP,
        "--config-file", f"/config/{EPP_CONFIG_FILE}",
        "--grpc-health-port", str(EPP_HEALTH_PORT),
        "--zap-encoder", "json",
        "--tracing=false",
        # The platform's PodMonitor scrapes the picker's pool aggregates (KEDA's epp_queue) without a token.
        "--metrics-endpoint-auth=false",
    ]
    if spec.gateway.implementation == "istio":
        # Istio would need a DestinationRule to speak TLS to the picker's self-signed certificate; the
        # gateway-to-model-server hop is plain HTTP inside the cluster anyway.
        args.append("--secure-serving=false")
    return args


def picker_pod_spec(spec: StackSpec, model: ModelServiceSpec) -> dict[str, Any]:
    def grpc_probe(period: int) -> dict[str, Any]:
        return {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": period}

    return {
        "serviceAccountName": names.endpoint_picker(model),
        "terminationGracePeriodSeconds": 130,  # drains in-flight ext-proc streams
        "securityContext": {**pods.POD_SECURITY, "runAsNonRoot": True, "runAsUser": EPP_UID, "runAsGroup": EPP_UID},
        "containers": [
            {
                "name": "epp",
                "image": EPP_IMAGE,
                "args": picker_args(spec, model),
                "env": [
                    {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "ports": [
                    {"name": "grpc", "containerPort": EPP_EXT_PROC_PORT, "protocol": "TCP"},
                    {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": EPP_METRICS_PORT, "protocol": "TCP"},
                ],
                "livenessProbe": {**grpc_probe(10), "initialDelaySeconds": 5},
                "readinessProbe": grpc_probe(2),
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
                "securityContext": {**pods.RESTRICTED, "readOnlyRootFilesystem": True},
                "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True}],
            }
        ],
        "volumes": [{"name": "config", "configMap": {"name": names.endpoint_picker(model)}}],
    }


def inference_pool_spec(model: ModelServiceSpec) -> dict[str, Any]:
    return {
        "selector": {"matchLabels": disaggregation.inference_pool_selector(model.name) if model.pd_role == "decode"
                     else pool_selector(model)},
        "targetPorts": [{"number": VLLM_PORT}],
        "appProtocol": "http",
        # Without a picker the gateway still spreads requests over the pool's pods.
        "endpointPickerRef": {
            "name": names.endpoint_picker(model),
            "kind": "Service",
            "port": {"number": EPP_EXT_PROC_PORT},
            "failureMode": "FailOpen",
        },
    }


def http_route_spec(spec: StackSpec, model: ModelServiceSpec) -> dict[str, Any]:
    return {
        "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": spec.gateway.name}],
        "rules": [
            {
                # The model and each of its LoRA adapters, which requests name as their model.
                "matches": [
                    {
                        "path": {"type": "PathPrefix", "value": "/"},
                        "headers": [{"type": "Exact", "name": MODEL_HEADER, "value": served}],
                    }
                    for served in (model.name, *(adapter.name for adapter in model.lora_adapters))
                ],
                "backendRefs": [agentgateway_edge.route_backend_ref(spec, model)],
                "timeouts": {"request": f"{spec.gateway.request_timeout_seconds}s"},
            }
        ],
    }


# Headers only the endpoint picker may set, removed from every request the gateway receives: the routing sidecar's
# (serving/disaggregation.py) and the picker's answer to the data plane, the endpoint a request goes to (GAIE
# docs/proposals/004-endpoint-picker-protocol/README.md, "Destination Endpoint"), so a client's copy never reaches
# the load balancer, not even where the picker fails open; the picker's tenant and objective headers, which the
# gateway sets itself from the verified token and the requested model; and its other control headers.
UNTRUSTED_ROUTING_HEADERS = (
    *disaggregation.SIDECAR_ROUTING_HEADERS, "x-gateway-destination-endpoint", FAIRNESS_HEADER,
    *DEPRECATED_PICKER_HEADERS, *PICKER_CONTROL_HEADERS,
)


def request_headers_envoy_filter(gateway_ref: dict[str, str], body_based_routing: bool) -> dict[str, Any]:
    """Two Envoy header_mutation filters in the gateway's HTTP filters (Istio EnvoyFilter HTTP_FILTER patches on the
    HTTP connection manager): the first of all removes the routing sidecar's headers; the second names the request's
    InferenceObjective after its model, from the routing header, so it sits after body-based routing's ext_proc
    (GAIE v1.5.0 config/charts/body-based-routing/templates/istio.yaml: `envoy.filters.http.ext_proc.bbr`, inserted
    first) and before the picker's. Applied after that chart's EnvoyFilter (priority 0; Istio applies higher
    priorities later), so the filter it follows is there."""
    strip = {"name": STRIP_FILTER, "typed_config": {"@type": HEADER_MUTATION_TYPE, "mutations": {"request_mutations": [
        {"remove": header} for header in UNTRUSTED_ROUTING_HEADERS]}}}
    objective = {"name": OBJECTIVE_FILTER, "typed_config": {"@type": HEADER_MUTATION_TYPE, "mutations": {
        "request_mutations": [{"append": {
            "header": {"key": OBJECTIVE_HEADER, "value": f"%REQ({MODEL_HEADER.lower()})%"},
            "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
        }}]}}}
    connection_manager = {"name": "envoy.filters.network.http_connection_manager"}
    after_bbr = {**connection_manager, "subFilter": {"name": BBR_FILTER}} if body_based_routing else connection_manager
    return {
        "targetRefs": [gateway_ref],
        "priority": 10,
        "configPatches": [
            {"applyTo": "HTTP_FILTER",
             "match": {"context": "GATEWAY", "listener": {"filterChain": {"filter": after_bbr}}},
             "patch": {"operation": "INSERT_AFTER" if body_based_routing else "INSERT_FIRST", "value": objective}},
            {"applyTo": "HTTP_FILTER",
             "match": {"context": "GATEWAY", "listener": {"filterChain": {"filter": connection_manager}}},
             "patch": {"operation": "INSERT_FIRST", "value": strip}},
        ],
    }


def agentgateway_request_transformation(body_based_routing: bool) -> dict[str, Any]:
    """agentgateway's PreRouting transformation (runs before route selection and the inference backend): the routing
    header from the body's model when body-based routing is on, the objective header from the same model, and the
    routing sidecar's headers removed. One policy, so no two PreRouting transformations on the Gateway compete."""
    model = "json(request.body).model" if body_based_routing else f'request.headers["{MODEL_HEADER.lower()}"]'
    headers = [{"name": MODEL_HEADER, "value": model}] if body_based_routing else []
    return {"set": [*headers, {"name": OBJECTIVE_HEADER, "value": model}],
            "remove": list(UNTRUSTED_ROUTING_HEADERS)}


def gateway_listener(gateway: GatewaySpec) -> dict[str, Any]:
    """The Gateway's one listener: HTTPS terminating with the TLS Secret (Gateway API v1.6.1 GatewayTLSConfig,
    mode Terminate), or HTTP behind a load balancer that terminates TLS itself (acm), or plain HTTP (none)."""
    listener: dict[str, Any] = {"name": "http", "port": gateway.listener_port, "protocol": "HTTP"}
    if gateway.tls.mode == "secret":
        listener = {"name": "https", "port": gateway.listener_port, "protocol": "HTTPS", "tls": {
            "mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret", "name": gateway.tls_secret}]}}
    return {**listener, "allowedRoutes": {"namespaces": {"from": "Same"}}}


def load_balancer_annotations(gateway: GatewaySpec) -> dict[str, str]:
    """What the implementation copies onto the load balancer's Service: internal to the VPC, and the ACM certificate
    when the load balancer terminates TLS."""
    if gateway.tls.mode != "acm":
        return dict(INTERNAL_LOAD_BALANCER)
    assert gateway.tls.certificate_arn is not None
    return {**INTERNAL_LOAD_BALANCER, ACM_CERTIFICATE_ANNOTATION: gateway.tls.certificate_arn,
            ACM_PORTS_ANNOTATION: str(gateway.listener_port)}


def edge_summary(gateway: GatewaySpec) -> tuple[str, str]:
    """(transport, authentication) in words, for the plan: which listener the clients reach, and who gets through."""
    transport = {
        "secret": f"HTTPS on port {gateway.listener_port}, certificate from Secret {gateway.tls_secret}",
        "acm": f"HTTPS on port {gateway.listener_port}, terminated by the load balancer with {gateway.tls.certificate_arn}",
        "none": f"plain HTTP on port {gateway.listener_port} (tls.mode 'none' chosen explicitly)",
    }[gateway.tls.mode]
    auth = gateway.auth
    if auth.allow_anonymous:
        return transport, "none: every request is let through without credentials (auth.allow_anonymous)"
    if (auth.jwt is None and auth.api_key_secret is None) or not auth.tenants:
        return transport, "closed: no tenant is set, so every request is refused"
    tenants = "; ".join(f"{tenant.name}: {', '.join(tenant.models)}" for tenant in auth.tenants)
    credentials = [f"JWT from {auth.jwt.issuer}, tenant claim {auth.jwt.tenant_claim!r}"] if auth.jwt else []
    if auth.api_key_secret is not None:
        credentials.append(f"API keys from Secret {auth.api_key_secret} (metadata.tenant)")
    return transport, f"{' or '.join(credentials)} ({tenants})"


def request_authentication_spec(gateway_ref: dict[str, str], jwt: JwtIssuerSpec) -> dict[str, Any]:
    """Istio RequestAuthentication on the gateway workload: a request with a token that fails verification is
    rejected, one without a token passes on with no identity (istio.io docs/reference/config/security/
    request_authentication), which the AuthorizationPolicy then refuses. A verified token's tenant claim is copied
    into the picker's fairness header (jwtRules[].outputClaimToHeaders; istio/istio 1.30.3
    pilot/pkg/security/authn/policy_applier.go sets Envoy's claim_to_headers from it), so flow control queues each
    tenant apart and the rate limits count per tenant."""
    return {"targetRefs": [gateway_ref], "jwtRules": [
        {"issuer": jwt.issuer, "audiences": list(jwt.audiences), "jwksUri": jwt.jwks_uri,
         "outputClaimToHeaders": [{"header": FAIRNESS_HEADER, "claim": jwt.tenant_claim}]}]}


# Envoy's local rate limit HTTP filter and the TypedStruct Istio's own samples wrap it in (istio/istio 1.30.3
# samples/ratelimit/local-rate-limit-service.yaml); the picker's ext_proc filter, which Istio appends after its authn
# and authz filters on a Gateway with InferencePools (pilot/pkg/networking/core/listener_builder.go;
# pilot/pkg/xds/filters/filters.go InferencePoolExtProc, named envoy.filters.http.ext_proc).
LOCAL_RATE_LIMIT_FILTER = "envoy.filters.http.local_ratelimit"
LOCAL_RATE_LIMIT_TYPE = "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"
TYPED_STRUCT_TYPE = "type.googleapis.com/udpa.type.v1.TypedStruct"
EXT_PROC_FILTER = "envoy.filters.http.ext_proc"
RATE_LIMIT_STATS = "inferstack_tenant_rate_limit"
TENANT_DESCRIPTOR, SERVICE_DESCRIPTOR = "tenant", "service"


# The gateway's pods, each with its own local buckets: Istio's automated deployment and agentgateway's run one
# unless told otherwise (istio.io docs, Kubernetes Gateway API task, "Automated Deployment"), and the stack says
# nothing else.
GATEWAY_PODS = 1


def tenant_service_limits(spec: StackSpec) -> list[tuple[TenantSpec, ModelServiceSpec]]:
    """(tenant, model service) for every service a tenant may call that the stack has."""
    services = {model.name: model for model in spec.models}
    return [(tenant, services[name]) for tenant in spec.gateway.auth.tenants for name in tenant.models
            if name in services]


def _bucket(requests_per_minute: int) -> dict[str, Any]:
    """A minute's requests, refilled whole every minute (so a tenant may spend its minute in one burst)."""
    return {"max_tokens": requests_per_minute, "tokens_per_fill": requests_per_minute, "fill_interval": "60s"}


def rate_limit_envoy_filter(spec: StackSpec, gateway_ref: dict[str, str]) -> dict[str, Any]:
    """Per tenant and model service, a local rate limit on the gateway (Istio EnvoyFilter after the pattern of
    istio/istio 1.30.3 samples/ratelimit/local-rate-limit-service.yaml): the filter inserted before the picker's
    ext_proc (after authentication and authorization, so the tenant header is the verified claim's and a refused
    request spends nothing), holding the buckets itself, and on every route the actions that make a request's
    descriptor: (tenant, its fairness header) and (service, the service whose name or adapter the routing header
    names). The buckets sit in the filter's own config, not in each route's typed_per_filter_config, because a route's
    config gets buckets of its own (envoyproxy/envoy#14732) and every name a service answers to is a route of its
    own: one bucket per (tenant, service), shared by the service's adapters. Envoy answers 429 when it is empty
    (envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit: descriptors, token_bucket, filter_enabled,
    always_consume_default_token_bucket; config.route.v3.RateLimit.Action request_headers, header_value_match)."""
    limits = tenant_service_limits(spec)
    actions = [
        {"actions": [
            {"request_headers": {"header_name": FAIRNESS_HEADER, "descriptor_key": TENANT_DESCRIPTOR}},
            {"header_value_match": {"descriptor_key": SERVICE_DESCRIPTOR, "descriptor_value": model.name,
                                    "headers": [{"name": MODEL_HEADER.lower(), "string_match": {"exact": requested}}]}},
        ]}
        for model in spec.models if model.pd_role != "prefill" for requested in names.requested_models(model)
    ]
    enabled = {"default_value": {"numerator": 100, "denominator": "HUNDRED"}}
    limiter = {
        "stat_prefix": RATE_LIMIT_STATS,
        # Requests no descriptor matches spend this bucket only: the sum of every tenant's, so it never binds first.
        "token_bucket": _bucket(sum(tenant.requests_per_minute for tenant, _ in limits) or 1),
        "always_consume_default_token_bucket": False,
        "filter_enabled": {"runtime_key": f"{RATE_LIMIT_STATS}_enabled", **enabled},
        "filter_enforced": {"runtime_key": f"{RATE_LIMIT_STATS}_enforced", **enabled},
        "descriptors": [
            {"entries": [{"key": TENANT_DESCRIPTOR, "value": tenant.name},
                         {"key": SERVICE_DESCRIPTOR, "value": model.name}],
             "token_bucket": _bucket(tenant.requests_per_minute)}
            for tenant, model in limits
        ],
    }
    return {
        "targetRefs": [gateway_ref],
        "configPatches": [
            {"applyTo": "HTTP_FILTER",
             "match": {"context": "GATEWAY", "listener": {"filterChain": {"filter": {
                 "name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": EXT_PROC_FILTER}}}}},
             "patch": {"operation": "INSERT_BEFORE", "value": {"name": LOCAL_RATE_LIMIT_FILTER, "typed_config": {
                 "@type": TYPED_STRUCT_TYPE, "type_url": LOCAL_RATE_LIMIT_TYPE, "value": limiter}}}},
            {"applyTo": "HTTP_ROUTE",
             "match": {"context": "GATEWAY", "routeConfiguration": {"vhost": {"route": {"action": "ANY"}}}},
             "patch": {"operation": "MERGE", "value": {"route": {"rate_limits": actions}}}},
        ],
    }


def authorization_policy_spec(spec: StackSpec, gateway_ref: dict[str, str]) -> dict[str, Any]:
    """Istio AuthorizationPolicy on the gateway workload, ALLOW: one rule per tenant, a verified token of the issuer
    with the tenant's claim, for the models it may call (the routing header the HTTPRoutes match, set from the body
    by body-based routing ahead of Istio's filters). An ALLOW policy denies whatever no rule matches, so with no
    tenant it allows nothing (istio.io docs/reference/config/security/authorization-policy)."""
    auth = spec.gateway.auth
    policy: dict[str, Any] = {"targetRefs": [gateway_ref], "action": "ALLOW"}
    if auth.jwt is None or not auth.tenants:
        return policy
    services = {model.name: model for model in spec.models}
    rules = []
    for tenant in auth.tenants:
        served = [name for model in tenant.models if model in services for name in names.requested_models(services[model])]
        if not served:   # spec/edge.py tenant_refusals names the missing services; an empty condition matches nothing
            continue
        rules.append({
            "from": [{"source": {"requestPrincipals": [f"{auth.jwt.issuer}/*"]}}],
            "when": [{"key": f"request.auth.claims[{auth.jwt.tenant_claim}]", "values": [tenant.name]},
                     {"key": f"request.headers[{MODEL_HEADER.lower()}]", "values": served}],
        })
    return {**policy, "rules": rules}


@dataclass(frozen=True)
class ModelRouteArgs:
    spec: StackSpec
    model: ModelServiceSpec
    gateway: pulumi.Resource
    crds: Mapping[str, pulumi.Resource]   # API group -> what installs its CRDs
    depends_on: Sequence[pulumi.Resource] = ()


class ModelRoute(pulumi.ComponentResource):
    """One model behind the gateway: endpoint picker, InferencePool, InferenceObjective, HTTPRoute."""

    def __init__(self, name: str, args: ModelRouteArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving:ModelRoute", name, None, opts)
        spec, model = args.spec, args.model
        namespace = spec.serving_namespace
        picker = names.endpoint_picker(model)
        labels = pods.object_labels(picker, EPP_COMPONENT)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        self.service_account = ServiceAccount(
            f"{name}-epp-sa", metadata={"name": picker, "namespace": namespace, "labels": labels}, opts=child
        )
        binding = granted_role(
            f"{name}-epp",
            name=picker,
            namespace=namespace,
            labels=labels,
            rules=[
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [INFERENCE_GROUP], "resources": ["inferencepools"], "verbs": ["get", "list", "watch"]},
                {
                    "apiGroups": ["llm-d.ai"],
                    "resources": ["inferenceobjectives", "inferencemodelrewrites"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
            service_account=picker,
            parent=self,
            depends_on=args.depends_on,
            binding_waits_for=[self.service_account],
        )
        config = ConfigMap(
            f"{name}-epp-config",
            metadata={"name": picker, "namespace": namespace, "labels": labels},
            data={EPP_CONFIG_FILE: picker_config(
                model, spec.gateway.prefix_cache_routing, spec.gateway.request_timeout_seconds,
                autoscaling.saturation_thresholds(spec, model))},
            opts=child,
        )
        Service(
            f"{name}-epp-service",
            metadata={"name": picker, "namespace": namespace, "labels": labels},
            spec={
                "type": "ClusterIP",
                "selector": pods.selector_labels(picker, EPP_COMPONENT),
                "ports": [
                    {"name": "grpc-ext-proc", "port": EPP_EXT_PROC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                    {"name": "http-metrics", "port": EPP_METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
                ],
            },
            opts=child,
        )
        self.pool = CustomResource(
            f"{name}-pool",
            api_version=INFERENCE_POOL_API_VERSION,
            kind="InferencePool",
            metadata={"name": names.client_service(model), "namespace": namespace, "labels": pods.object_labels(model.name)},
            spec=inference_pool_spec(model),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, args.crds[INFERENCE_GROUP]]),
        )
        Deployment(
            f"{name}-epp",
            metadata={"name": picker, "namespace": namespace, "labels": labels},
            spec={
                "replicas": 1,
                # One active picker keeps the prefix-cache index whole; the old one goes before the new starts.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": pods.selector_labels(picker, EPP_COMPONENT)},
                "template": {"metadata": {"labels": labels}, "spec": picker_pod_spec(spec, model)},
            },
            # The picker's gRPC health (liveness and readiness alike without leader election) is "my
            # InferencePool has synced", so it follows the pool and the RBAC that lets it read it:
            # started before them, it fails its probes and the kubelet restarts it.
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*args.depends_on, config, self.service_account, binding, self.pool]
            ),
        )
        for requested in names.requested_models(model):   # the gateway names the objective after the request's model
            CustomResource(
                f"{name}-objective" if requested == model.name else f"{name}-{requested}-objective",
                api_version=OBJECTIVE_API_VERSION,
                kind="InferenceObjective",
                metadata={"name": requested, "namespace": namespace, "labels": pods.object_labels(model.name)},
                spec={
                    "poolRef": {"group": INFERENCE_GROUP, "kind": "InferencePool", "name": names.client_service(model)},
                    "priority": pods.priority_value(spec, model.tier),
                },
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[*args.depends_on, args.crds[OBJECTIVE_GROUP], self.pool]
                ),
            )
        backend = agentgateway_edge.ai_backend_spec(spec, model)
        route_waits_for = [*args.depends_on, args.crds[GATEWAY_GROUP], args.gateway, self.pool]
        if backend is not None:   # agentgateway counts a token limit's tokens only through an ai backend
            route_waits_for.append(CustomResource(
                f"{name}-ai-backend", api_version=agentgateway_edge.AGENTGATEWAY_BACKEND_API_VERSION,
                kind="AgentgatewayBackend",
                metadata={"name": names.ai_backend(model), "namespace": namespace,
                          "labels": pods.object_labels(model.name)},
                spec=backend, opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, args.gateway,
                                                                                   self.pool]),
            ))
        self.route = CustomResource(
            f"{name}-route",
            api_version=GATEWAY_API_VERSION,
            kind="HTTPRoute",
            metadata={"name": names.client_service(model), "namespace": namespace, "labels": pods.object_labels(model.name)},
            spec=http_route_spec(spec, model),
            opts=pulumi.ResourceOptions(parent=self, depends_on=route_waits_for),
        )
        limits = agentgateway_edge.rate_limit_policy_spec(spec, model)
        if spec.gateway.implementation == "agentgateway" and limits is not None:
            CustomResource(
                f"{name}-rate-limit", api_version=AGENTGATEWAY_POLICY_API_VERSION, kind="AgentgatewayPolicy",
                metadata={"name": names.route_rate_limit(model), "namespace": namespace,
                          "labels": pods.object_labels(model.name)},
                spec=limits, opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, self.route]),
            )
        self.register_outputs({"pool": names.client_service(model), "picker": picker})


@dataclass(frozen=True)
class InferenceGatewayArgs:
    spec: StackSpec
    depends_on: Sequence[pulumi.Resource] = ()  # the serving namespace


class InferenceGateway(pulumi.ComponentResource):
    """CRDs, the gateway implementation, the Gateway, body-based routing and one ModelRoute per model."""

    def __init__(self, name: str, args: InferenceGatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving:InferenceGateway", name, None, opts)
        spec = args.spec
        gateway = spec.gateway
        namespace = spec.serving_namespace
        child = pulumi.ResourceOptions(parent=self)

        self.gateway_api_crds = ConfigFile(f"{name}-gateway-api-crds", file=MANIFESTS["gateway-api-crds"]["url"], opts=child)
        self.inference_crds = ConfigFile(
            f"{name}-inference-extension-crds", file=MANIFESTS["inference-extension-crds"]["url"], opts=child
        )
        self.router_crds = ConfigFile(f"{name}-llm-d-router-crds", file=MANIFESTS["llm-d-router-crds"]["url"], opts=child)

        controller = self._implementation(name, spec)
        self.gateway = CustomResource(
            f"{name}-gateway",
            api_version=GATEWAY_API_VERSION,
            kind="Gateway",
            metadata={"name": gateway.name, "namespace": namespace, "labels": pods.object_labels(gateway.name, "gateway")},
            spec={
                "gatewayClassName": gateway.implementation,
                "listeners": [gateway_listener(gateway)],
                "infrastructure": {"annotations": load_balancer_annotations(gateway)},
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, self.gateway_api_crds, controller]),
        )
        if gateway.body_based_routing:
            self._body_based_routing(name, spec, controller, args.depends_on)
        self._request_headers(name, spec, controller, args.depends_on)
        self._authentication(name, spec, args.depends_on)

        crds = {
            GATEWAY_GROUP: self.gateway_api_crds, INFERENCE_GROUP: self.inference_crds, OBJECTIVE_GROUP: self.router_crds,
        }
        self.routes = {
            model.name: ModelRoute(
                f"{name}-{model.name}",
                ModelRouteArgs(spec=spec, model=model, gateway=self.gateway, crds=crds, depends_on=args.depends_on),
                opts=child,
            )
            for model in spec.models
            if model.pd_role != "prefill"   # a disaggregated service's prefill engines sit in its InferencePool
        }
        self.register_outputs({"gateway": gateway.name, "class": gateway.implementation, "pools": list(self.routes)})

    def _implementation(self, name: str, spec: StackSpec) -> pulumi.Resource:
        """The controller releases; returns the one the Gateway waits for (it creates the GatewayClass)."""
        if spec.gateway.implementation == "istio":
            namespace = chart("istiod").namespace
            base = helm_release(
                f"{name}-istio-base", "istio-base", namespace=namespace, values={},
                opts=pulumi.ResourceOptions(parent=self), release_name="istio-base",
            )
            inference = {"ENABLE_GATEWAY_API_INFERENCE_EXTENSION": "true"}
            return helm_release(
                f"{name}-istiod", "istiod", namespace=namespace,
                values={"pilot": {"env": inference}, "meshConfig": {"defaultConfig": {"proxyMetadata": inference}}},
                # istiod serves the Gateway API and InferencePool kinds: their CRDs exist before it starts.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[base, self.gateway_api_crds, self.inference_crds]),
            )
        namespace = chart("agentgateway").namespace
        crds = helm_release(
            f"{name}-agentgateway-crds", "agentgateway-crds", namespace=namespace, values={},
            opts=pulumi.ResourceOptions(parent=self),
        )
        return helm_release(
            f"{name}-agentgateway", "agentgateway", namespace=namespace,
            values={"inferenceExtension": {"enabled": True}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[crds, self.gateway_api_crds, self.inference_crds]),
        )

    def _request_headers(
        self, name: str, spec: StackSpec, controller: pulumi.Resource, depends_on: Sequence[pulumi.Resource]
    ) -> None:
        """What the gateway does to every request's headers before any routing or picking, once per Gateway: remove
        the routing sidecar's, name the request's InferenceObjective, and (agentgateway, with body-based routing)
        copy the body's model into the routing header."""
        opts = pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, controller, self.gateway])
        metadata = {"name": names.request_headers_policy(spec), "namespace": spec.serving_namespace,
                    "labels": pods.object_labels(spec.gateway.name, "gateway")}
        gateway_ref = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": spec.gateway.name}
        if spec.gateway.implementation == "istio":
            CustomResource(
                f"{name}-request-headers", api_version=ENVOY_FILTER_API_VERSION, kind="EnvoyFilter",
                metadata=metadata, spec=request_headers_envoy_filter(gateway_ref, spec.gateway.body_based_routing),
                opts=opts,
            )
            return
        CustomResource(
            f"{name}-request-headers", api_version=AGENTGATEWAY_POLICY_API_VERSION, kind="AgentgatewayPolicy",
            metadata=metadata,
            spec={"targetRefs": [gateway_ref],
                  "traffic": {"phase": "PreRouting", "transformation": {
                      "request": agentgateway_request_transformation(spec.gateway.body_based_routing)}}},
            opts=opts,
        )

    def _authentication(self, name: str, spec: StackSpec, depends_on: Sequence[pulumi.Resource]) -> None:
        """No request reaches a route unauthenticated. Istio: the token issuer's RequestAuthentication, the tenants'
        AuthorizationPolicy and their rate limits on the Gateway; agentgateway: one AgentgatewayPolicy for
        authentication, the tenants' rules and the fairness header (serving/agentgateway_edge.py), and each route's
        limits in its ModelRoute."""
        if spec.gateway.auth.allow_anonymous:
            return
        # The Gateway waits for the controller (istiod after istio-base, or agentgateway after its CRDs).
        opts = pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, self.gateway])
        labels = pods.object_labels(spec.gateway.name, "gateway")
        gateway_ref = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": spec.gateway.name}
        if spec.gateway.implementation == "agentgateway":
            CustomResource(
                f"{name}-access", api_version=AGENTGATEWAY_POLICY_API_VERSION, kind="AgentgatewayPolicy",
                metadata={"name": names.gateway_access(spec), "namespace": spec.serving_namespace, "labels": labels},
                spec=agentgateway_edge.access_policy_spec(spec, gateway_ref), opts=opts,
            )
            return
        if spec.gateway.auth.jwt is not None:
            CustomResource(
                f"{name}-jwt", api_version=ISTIO_SECURITY_API_VERSION, kind="RequestAuthentication",
                metadata={"name": names.gateway_jwt(spec), "namespace": spec.serving_namespace, "labels": labels},
                spec=request_authentication_spec(gateway_ref, spec.gateway.auth.jwt), opts=opts,
            )
        CustomResource(
            f"{name}-tenants", api_version=ISTIO_SECURITY_API_VERSION, kind="AuthorizationPolicy",
            metadata={"name": names.gateway_tenants(spec), "namespace": spec.serving_namespace, "labels": labels},
            spec=authorization_policy_spec(spec, gateway_ref), opts=opts,
        )
        if tenant_service_limits(spec):
            CustomResource(
                f"{name}-rate-limits", api_version=ENVOY_FILTER_API_VERSION, kind="EnvoyFilter",
                metadata={"name": names.gateway_rate_limits(spec), "namespace": spec.serving_namespace,
                          "labels": labels},
                spec=rate_limit_envoy_filter(spec, gateway_ref), opts=opts,
            )

    def _body_based_routing(
        self, name: str, spec: StackSpec, controller: pulumi.Resource, depends_on: Sequence[pulumi.Resource]
    ) -> None:
        """On Istio, GAIE's body-based-routing chart copies the body's `model` into the routing header (agentgateway
        does it in its request-header policy)."""
        if spec.gateway.implementation != "istio":
            return
        helm_release(
            f"{name}-body-based-routing", "body-based-routing", namespace=spec.serving_namespace,
            values={"provider": {"name": "istio"}, "inferenceGateway": {"name": spec.gateway.name}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, controller, self.gateway]),
            release_name=f"{spec.gateway.name}-bbr",
        )
