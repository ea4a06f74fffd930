"""The edge on agentgateway: who may call which model service through the Gateway, and how much.

Pure functions from the stack spec to AgentgatewayPolicy `spec`s (agentgateway.dev/v1alpha1). Upstream is
agentgateway/agentgateway at main 75b4e6ce6e0e (v1.4.1-206; the mirror has no 1.5.0 tag), CRD
controller/install/helm/agentgateway-crds/templates/agentgateway.dev_agentgatewaypolicies.yaml.

The order the proxy runs things in (crates/agentgateway/src/proxy/httpproxy.rs): PreRouting policies first
(apply_gateway_policies, lines 413-494: jwt, api key, authorization, then transformation), then route selection
(line 857), then PostRouting policies (apply_request_policies, lines 160-311: jwt 191, api key 200, authorization
210, local rate limit 227, transformation 255), and only then the endpoint picker (apply_inference_routing, 1919).
So the access policy here is PostRouting (the CRD's default phase): it reads the routing header the PreRouting
transformation (gateway.agentgateway_request_transformation) sets from the body, which a PreRouting authorization
would run before; and its transformation names the tenant's fairness queue after authentication, before the picker.
"""

from __future__ import annotations

import json
from typing import Any

from inferstack.serving import names
from inferstack.serving.headers import FAIRNESS_HEADER, MODEL_HEADER
from inferstack.serving.inference_api import INFERENCE_GROUP
from inferstack.spec import ModelServiceSpec, StackSpec
from inferstack.spec.edge import EdgeAuthSpec, TenantSpec

GATEWAY_GROUP = "gateway.networking.k8s.io"
AGENTGATEWAY_GROUP = "agentgateway.dev"
AGENTGATEWAY_BACKEND_API_VERSION = f"{AGENTGATEWAY_GROUP}/v1alpha1"
# How the ai backend treats vLLM's OpenAI-compatible paths: AgentgatewayPolicy/AgentgatewayBackend `ai.routes`, path
# suffixes matched with ends-with, the longest first, `*` last; without routes every path is chat Completions
# (crates/agentgateway/src/llm/policy/mod.rs resolve_route, 704-719), which would send /v1/embeddings to
# /v1/chat/completions. Chat is parsed (fields it does not know kept, `rest`) and a stream gets
# stream_options.include_usage so its last event carries usage (llm/mod.rs process_completions_request, 1541-1552);
# embeddings are parsed the same way; Detect (here /v1/completions, /v1/responses, ...) passes path and body on
# unchanged and reads `usage` from the response (llm/mod.rs process_detect_request 1816-1867,
# crates/llm/src/types/detect.rs lookups). All three count tokens; Passthrough and Models would not (httpproxy.rs
# 2562-2610).
LLM_ROUTES = {"/v1/chat/completions": "Completions", "/v1/embeddings": "Embeddings", "*": "Detect"}
# The custom provider's formats for the parsed routes (a parsed route whose format it lacks is refused: llm/mod.rs
# non_chat_provider_format_for 1044-1065, supported_chat_formats 983-993). No `path`: the upstream path is then
# "/v1" + the format's suffix, /v1/chat/completions and /v1/embeddings (llm/mod.rs set_default_path 1330-1375,
# crates/llm/src/openai.rs 65-76), vLLM's own. No `model`: the request's model is kept (crates/llm/src/custom.rs
# Provider.model), so LoRA adapters are still asked for by name.
PROVIDER_FORMATS = ({"type": "Completions"}, {"type": "Embeddings"})
# The routing header, as agentgateway's CEL reads it: request.headers[...] with the name lower-cased (schema/cel.md).
# `llm.requestModel` is no use here: it is "only present when using an `ai` backend", and even there the body is
# parsed only after these policies, at the backend call (httpproxy.rs 2375). The fairness header is set after
# authentication; the PreRouting transformation removes clients' copies (gateway.UNTRUSTED_ROUTING_HEADERS).
ROUTED_MODEL = f'request.headers["{MODEL_HEADER.lower()}"]'
# The API key Secret's entries carry the tenant as metadata.tenant; agentgateway flattens an entry's metadata into
# `apiKey` (crates/agentgateway/src/http/apikey.rs Claims, `#[serde(flatten)] metadata`).
API_KEY_TENANT_FIELD = "tenant"
# An Allow rule that never matches: with no rules at all agentgateway lets everyone through
# (crates/agentgateway/src/http/authorization.rs RuleSets::validate: "If there are no rule sets, everyone has
# access"), and the CRD needs at least one expression (controller/api/v1alpha1/agentgateway/rbac.go MinItems=1).
NOTHING = "false"


def _literal(text: str) -> str:
    """A CEL string literal (JSON's escaping is CEL's for the claim and tenant text the spec allows)."""
    return json.dumps(text)


def tenant_sources(auth: EdgeAuthSpec) -> list[str]:
    """CEL naming the request's tenant, one per credential the gateway verifies: the JWT's tenant claim (`jwt` holds
    a verified token's claims) and the API key's metadata.tenant (`apiKey`); schema/cel.md. Indexing reads any claim
    name: a string index on these values looks the field up (crates/cel-fork/cel/src/objects.rs, Dynamic index)."""
    sources = []
    if auth.jwt is not None:
        sources.append(f"jwt[{_literal(auth.jwt.tenant_claim)}]")
    if auth.api_key_secret is not None:
        sources.append(f"apiKey.{API_KEY_TENANT_FIELD}")
    return sources


def is_tenant(auth: EdgeAuthSpec, tenant: str) -> str:
    """CEL true when the request authenticated as `tenant`. A credential not presented leaves its variable absent,
    which errors; CEL's `||` is true when either side is (crates/cel-fork/cel/src/objects.rs LOGICAL_OR), and an
    expression that errors counts as false (crates/agentgateway/src/cel/types.rs Executor::eval_bool)."""
    return " || ".join(f"{source} == {_literal(tenant)}" for source in tenant_sources(auth))


def authentication(auth: EdgeAuthSpec) -> dict[str, Any]:
    """traffic.jwtAuthentication and traffic.apiKeyAuthentication, both read from `Authorization: Bearer` (the CRD's
    default location). The JWT check runs first (httpproxy.rs:191, 200) and removes the header it verified
    (crates/agentgateway/src/http/jwt.rs Jwt::apply). Alone, each is Strict: no or a bad credential is a 401. Together
    the JWT is Permissive (a bearer that is no valid token of the issuer passes on to the key check) and the key
    Optional (no header left: skip; an unknown key: 401; crates/agentgateway/src/http/apikey.rs verify); a request
    with neither carries no tenant, which the authorization refuses."""
    both = auth.jwt is not None and auth.api_key_secret is not None
    traffic: dict[str, Any] = {}
    if auth.jwt is not None:
        traffic["jwtAuthentication"] = {
            "mode": "Permissive" if both else "Strict",
            "providers": [{"issuer": auth.jwt.issuer, "audiences": list(auth.jwt.audiences),
                           "jwks": {"remote": {"url": auth.jwt.jwks_uri}}}],
        }
    if auth.api_key_secret is not None:
        traffic["apiKeyAuthentication"] = {"mode": "Optional" if both else "Strict",
                                           "secretRef": {"name": auth.api_key_secret}}
    return traffic


def allow_rules(spec: StackSpec) -> list[str]:
    """One Allow expression per tenant: authenticated as it, asking for a model it may call (a service's name and its
    LoRA adapters'). Any matching Allow expression allows; if none matches the request is denied (403): the
    controller makes each of matchExpressions an Allow rule (controller/pkg/agentgateway/plugins/traffic_plugin.go
    TranslateAuthorization) and RuleSets::validate allows on any (authorization.rs). With no tenant, NOTHING."""
    auth = spec.gateway.auth
    if not tenant_sources(auth):
        return [NOTHING]
    services = {model.name: model for model in spec.models}
    rules = []
    for tenant in auth.tenants:
        served = [name for model in tenant.models if model in services for name in names.requested_models(services[model])]
        if not served:   # spec/edge.py tenant_refusals names the missing services
            continue
        models = ", ".join(_literal(name) for name in served)
        rules.append(f"({is_tenant(auth, tenant.name)}) && {ROUTED_MODEL} in [{models}]")
    return rules or [NOTHING]


def fairness_transformation(auth: EdgeAuthSpec) -> dict[str, Any]:
    """traffic.transformation: the fairness header from the authenticated tenant, so the picker queues each tenant
    apart. `coalesce` takes the first credential's tenant that resolves (schema/cel-functions.md; agentgateway's own
    default user attribute reads `coalesce(apiKey.user, ..., jwt.sub, ...)`, src/config.rs:23); `set` overwrites
    (crates/agentgateway/src/http/transformation_cel.rs apply), and a failed expression removes the header
    (crates/agentgateway/src/http/mod.rs apply_header), so the picker never sees a tenant the gateway did not verify."""
    sources = tenant_sources(auth)
    tenant = sources[0] if len(sources) == 1 else f"coalesce({', '.join(sources)})"
    return {"request": {"set": [{"name": FAIRNESS_HEADER, "value": tenant}]}}


def access_policy_spec(spec: StackSpec, gateway_ref: dict[str, str]) -> dict[str, Any] | None:
    """The Gateway-wide PostRouting policy: authentication, the tenants' Allow rules and the fairness header (closed
    when no tenant is set); None with allow_anonymous. Policies on the Gateway merge field by field into each route's
    (the CRD's traffic description), so the routes' rate-limit policies leave these fields to it."""
    auth = spec.gateway.auth
    if auth.allow_anonymous:
        return None
    traffic = {**authentication(auth),
               "authorization": {"action": "Allow", "policy": {"matchExpressions": allow_rules(spec)}}}
    if tenant_sources(auth):
        traffic["transformation"] = fairness_transformation(auth)
    return {"targetRefs": [gateway_ref], "traffic": traffic}


def tenants_of(spec: StackSpec, model: ModelServiceSpec) -> list[TenantSpec]:
    return [tenant for tenant in spec.gateway.auth.tenants if model.name in tenant.models]


def tenant_limits(tenant: TenantSpec) -> list[dict[str, Any]]:
    """rateLimit local entries (one of requests or tokens each; unit Minutes refills that many every minute,
    traffic_plugin.go processLocalRateLimitTraffic). Tokens are counted from the response, for later requests, on
    routes to an ai backend (counts_tokens, route_backend_ref)."""
    limits = [{"requests": tenant.requests_per_minute, "unit": "Minutes"}]
    if tenant.tokens_per_minute is not None:
        limits.append({"tokens": tenant.tokens_per_minute, "unit": "Minutes"})
    return limits


def rate_limit_policy_spec(spec: StackSpec, model: ModelServiceSpec) -> dict[str, Any] | None:
    """A policy on the service's HTTPRoute: one rateLimit.conditional entry per tenant allowed it, so each tenant has
    its own bucket (one per entry and gateway pod; the first entry whose condition is true applies,
    crates/agentgateway/src/store/policy.rs RequestPolicy::select). No fallback entry:
    a request of no tenant never gets past the authorization, which runs first (httpproxy.rs:210, 227)."""
    tenants = tenants_of(spec, model)
    if spec.gateway.auth.allow_anonymous or not tenants:
        return None
    auth = spec.gateway.auth
    return {
        "targetRefs": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": names.client_service(model)}],
        "traffic": {"rateLimit": {"conditional": [
            {"condition": is_tenant(auth, tenant.name), "policy": {"local": tenant_limits(tenant)}}
            for tenant in tenants]}},
    }


def counts_tokens(spec: StackSpec, model: ModelServiceSpec) -> bool:
    """Whether a tenant allowed the service has a token limit: agentgateway checks and counts token limits only for
    requests to an `ai` backend, with an LLM provider (crates/agentgateway/src/proxy/httpproxy.rs 2375-2558
    apply_llm_request_policies; crates/agentgateway/src/http/localratelimit.rs check_request skips them)."""
    return (spec.gateway.implementation == "agentgateway" and rate_limit_policy_spec(spec, model) is not None
            and any(tenant.tokens_per_minute is not None for tenant in tenants_of(spec, model)))


def ai_backend_spec(spec: StackSpec, model: ModelServiceSpec) -> dict[str, Any] | None:
    """The AgentgatewayBackend `spec` (agentgateway.dev/v1alpha1) putting an LLM provider in front of the service's
    InferencePool, so token limits count; None when no tenant of it has one. The endpoint picker still chooses the
    pod: a custom provider's InferencePool backendRef gets the pool's InferenceRouting policy (httpproxy.rs 2160-2186,
    agentgateway#2976, after v1.4.1) and the pool's policy is sent to the gateways routing to this backend
    (controller/pkg/syncer/backend/backend_plugin.go BuildAgwBackendReferences;
    controller/pkg/agentgateway/plugins/inference_plugin.go inferencePoolAttachedGateways)."""
    if not counts_tokens(spec, model):
        return None
    pool = {"group": INFERENCE_GROUP, "kind": "InferencePool", "name": names.client_service(model)}
    return {"ai": {"provider": {"custom": {"backendRef": pool, "formats": [dict(f) for f in PROVIDER_FORMATS]}}},
            "policies": {"ai": {"routes": dict(LLM_ROUTES)}}}


def route_backend_ref(spec: StackSpec, model: ModelServiceSpec) -> dict[str, str]:
    """The HTTPRoute rule's backendRef: the service's AgentgatewayBackend where ai_backend_spec makes one (same name
    as the pool, another kind), else its InferencePool."""
    if counts_tokens(spec, model):
        return {"group": AGENTGATEWAY_GROUP, "kind": "AgentgatewayBackend", "name": names.ai_backend(model)}
    return {"group": INFERENCE_GROUP, "kind": "InferencePool", "name": names.client_service(model)}
