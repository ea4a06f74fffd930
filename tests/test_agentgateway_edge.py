"""The edge on agentgateway (serving/agentgateway_edge.py), evaluated the way agentgateway evaluates it.

Upstream rules the evaluator encodes (agentgateway/agentgateway main 75b4e6ce6e0e1ac7959d5548ebe8dbeaede4f180,
v1.4.1-206; the mirror has no 1.5.0 tag):
* Order (crates/agentgateway/src/proxy/httpproxy.rs apply_request_policies): jwt (line 191), api key (200),
  authorization (210), local rate limit (227), transformation (255); a status from one ends the request.
* JWT (crates/agentgateway/src/http/jwt.rs, Mode and Jwt::apply): no bearer: 401 if Strict, else go on; a bearer
  that does not verify (issuer, audience, signature): go on if Permissive, else 401; a verified one: its claims become
  `jwt` and the header is removed.
* API key (crates/agentgateway/src/http/apikey.rs APIKeyAuthentication::verify, apply): the same modes; a known key's
  metadata becomes `apiKey` (flattened beside `key`) and the header is removed.
* Authorization (crates/agentgateway/src/http/authorization.rs RuleSets::validate; controller/pkg/agentgateway/
  plugins/traffic_plugin.go TranslateAuthorization): no rules: allowed; else allowed when any Allow expression is
  true, 403 otherwise; an expression that errors is false (crates/agentgateway/src/cel/types.rs eval_bool). An absent
  credential's variable errors when read (schema/cel.md: "only present if ...").
* Rate limits (CRD agentgateway.dev_agentgatewaypolicies.yaml, rateLimit.conditional; crates/agentgateway/src/store/
  policy.rs RequestPolicy::select): the first entry whose condition is true (eval_bool) applies.
* Token limits count only on requests to an `ai` backend (httpproxy.rs 2375-2558, apply_llm_request_policies), and
  there only on parsed or Detect routes (Passthrough and Models skip them, 2562-2610). The route type is the longest
  `ai.routes` suffix the path ends with, `*` last, else Completions (crates/agentgateway/src/llm/policy/mod.rs
  resolve_route 704-719); a custom provider sends parsed routes to its format's path, or "/v1" + the OpenAI suffix
  (crates/agentgateway/src/llm/mod.rs set_default_path 1330-1375, crates/llm/src/openai.rs 65-76), and Detect and
  Passthrough on the client's path (mod.rs 1179).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import pytest

from kube_validation import assert_valid
from inferstack.serving import agentgateway_edge as edge
from inferstack.spec import SpecError, StackSpec
from inferstack.spec.edge import implementation_refusals
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
ISSUER, AUDIENCE = "https://login.acme.example", "inference-prod"
KEY_SECRET = "inference-api-keys"
# The API key Secret's entries as agentgateway reads them: key -> metadata (spec/edge.py EdgeAuthSpec.api_key_secret).
SECRET_KEYS = {"sk-search": {"tenant": "search"}, "sk-legal": {"tenant": "legal"}}
GATEWAY_REF = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gateway"}
POLICY_API_VERSION = "agentgateway.dev/v1alpha1"


@dataclass(frozen=True)
class Token:
    claims: dict[str, Any]
    signed_by_issuer: bool = True


@dataclass(frozen=True)
class Call:
    """A request as the PostRouting policies see it: the routing header already set from the body's model."""

    model: str
    bearer: Token | str | None = None   # a JWT, an API key, or no Authorization header
    headers: dict[str, str] = field(default_factory=dict)


def token(tenant: str, **overrides: Any) -> Token:
    return Token({"iss": ISSUER, "aud": AUDIENCE, "sub": f"{tenant}-svc", "tenant": tenant, **overrides})


def _verified_jwt(settings: dict, bearer: Token | str) -> dict | None:
    if not isinstance(bearer, Token) or not bearer.signed_by_issuer:
        return None
    for provider in settings["providers"]:
        audiences = provider.get("audiences")
        if bearer.claims.get("iss") == provider["issuer"] and (not audiences or bearer.claims.get("aud") in audiences):
            return dict(bearer.claims)
    return None


def _verified_key(settings: dict, bearer: Token | str) -> dict | None:
    if not isinstance(bearer, str) or settings["secretRef"]["name"] != KEY_SECRET or bearer not in SECRET_KEYS:
        return None
    return {"key": "<redacted>", **SECRET_KEYS[bearer]}


def authenticate(traffic: dict, call: Call) -> int | dict[str, Any]:
    """401, or the CEL variables the credentials give: jwt.rs and apikey.rs, JWT first."""
    bearer, variables = call.bearer, {}
    for kind, name, verify in (("jwtAuthentication", "jwt", _verified_jwt),
                               ("apiKeyAuthentication", "apiKey", _verified_key)):
        settings = traffic.get(kind)
        if settings is None:
            continue
        mode = settings.get("mode", "Optional")
        if bearer is None:
            if mode == "Strict":
                return 401
            continue
        verified = verify(settings, bearer)
        if verified is None:
            if mode != "Permissive":
                return 401
            continue
        variables[name], bearer = verified, None   # the verified credential's header is removed
    return variables


def activation(call: Call, variables: dict[str, Any]) -> dict[str, Any]:
    headers = {**{k.lower(): v for k, v in call.headers.items()}, edge.MODEL_HEADER.lower(): call.model}
    return {name: celpy.json_to_cel(value) for name, value in {"request": {"headers": headers}, **variables}.items()}


def cel_true(expression: str, context: dict[str, Any]) -> bool:
    """eval_bool: true only when the expression evaluates to true; an error is false."""
    env = celpy.Environment()
    try:
        return bool(env.program(env.compile(expression)).evaluate(context))
    except celpy.CELEvalError:
        return False


def decision(policy: dict | None, call: Call) -> int:
    """The status agentgateway answers after routing: 401, 403, or 200 (passed on to the rate limit and the pool)."""
    if policy is None:
        return 200
    traffic = policy["traffic"]
    variables = authenticate(traffic, call)
    if isinstance(variables, int):
        return variables
    rules = traffic.get("authorization", {}).get("policy", {}).get("matchExpressions", [])
    if not rules:
        return 200
    context = activation(call, variables)
    return 200 if any(cel_true(rule, context) for rule in rules) else 403


def stack(**auth: Any) -> StackSpec:
    """The prod stack on agentgateway with the given auth settings, through the spec's own validation."""
    document = load_stack(STACKS, "prod").model_dump(exclude_none=True)
    document["gateway"]["implementation"] = "agentgateway"
    document["gateway"]["auth"].update(auth)
    spec = StackSpec.model_validate(document)
    validate(spec)
    return spec


@pytest.fixture(scope="module")
def both() -> StackSpec:
    """JWT and API keys; legal also limited by tokens."""
    tenants = [{"name": "search", "models": ["llama-70b", "llama-8b-fp8", "bge-embed"]},
               {"name": "legal", "models": ["llama-70b-long"], "requests_per_minute": 120, "tokens_per_minute": 50000}]
    return stack(api_key_secret=KEY_SECRET, tenants=tenants)


def policy_object(name: str, spec: dict) -> dict:
    return {"apiVersion": POLICY_API_VERSION, "kind": "AgentgatewayPolicy",
            "metadata": {"name": name, "namespace": "serving"}, "spec": spec}


def test_the_policies_validate_against_the_agentgateway_crd(both):
    """agentgateway main 75b4e6ce6e0e controller/install/helm/agentgateway-crds/templates/
    agentgateway.dev_agentgatewaypolicies.yaml v1alpha1 (tests/schemas; unknown fields rejected, CEL rules run):
    targetRefs kinds and groups, jwks remote url, secretRef kind, local entries with one of requests or tokens."""
    closed = stack(tenants=[])
    keys_only = stack(jwt=None, api_key_secret=KEY_SECRET)
    objects = [policy_object(f"access-{i}", edge.access_policy_spec(spec, GATEWAY_REF))
               for i, spec in enumerate((both, closed, keys_only))]
    objects += [policy_object(model.name, edge.rate_limit_policy_spec(both, model))
                for model in both.models if edge.rate_limit_policy_spec(both, model) is not None]
    assert len(objects) == 3 + 4
    assert_valid(objects)


@pytest.mark.parametrize("credentials", ["jwt", "api_key", "both"])
def test_only_an_allowed_tenant_reaches_its_models(credentials):
    """jwt.rs / apikey.rs modes, authorization.rs validate (see the module docstring)."""
    settings = {"jwt": {"api_key_secret": None}, "api_key": {"jwt": None, "api_key_secret": KEY_SECRET},
                "both": {"api_key_secret": KEY_SECRET}}[credentials]
    policy = edge.access_policy_spec(stack(**settings), GATEWAY_REF)
    decide = lambda call: decision(policy, call)  # noqa: E731
    search = token("search") if credentials != "api_key" else "sk-search"
    legal = token("legal") if credentials != "api_key" else "sk-legal"
    assert decide(Call("llama-8b-fp8")) in (401, 403)                      # no credentials
    assert decide(Call("llama-8b-fp8", "sk-wrong")) in (401, 403)          # a key the Secret does not hold
    assert decide(Call("llama-8b-fp8", token("search", iss="https://evil.example"))) in (401, 403)
    assert decide(Call("llama-8b-fp8", Token(token("search").claims, signed_by_issuer=False))) in (401, 403)
    assert decide(Call("llama-70b-long", search)) == 403                    # a model its tenant may not call
    assert decide(Call("llama-8b-fp8", search)) == 200
    assert decide(Call("llama-70b-long", legal)) == 200
    assert decide(Call("llama-8b-fp8", token("nobody"))) in (401, 403)     # a tenant the stack does not list


def test_with_both_credentials_either_one_authenticates(both):
    """JWT Permissive then API key Optional (jwt.rs Jwt::apply removes a verified token's header, so the key check
    finds none; apikey.rs verify rejects an unknown key with 401)."""
    policy = edge.access_policy_spec(both, GATEWAY_REF)
    assert decision(policy, Call("llama-8b-fp8", token("search"))) == 200
    assert decision(policy, Call("llama-8b-fp8", "sk-search")) == 200
    assert decision(policy, Call("llama-8b-fp8", "sk-wrong")) == 401
    assert decision(policy, Call("llama-8b-fp8")) == 403
    assert decision(policy, Call("llama-8b-fp8", token("search", aud="someone-else"))) == 401
    # A client's own routing header does not widen access: the policy reads the header the route was chosen by.
    assert decision(policy, Call("llama-70b-long", "sk-search", {edge.MODEL_HEADER.lower(): "llama-8b-fp8"})) == 403


def test_without_tenants_the_gateway_is_closed():
    """authorization.rs RuleSets::validate: with no rule everyone has access, so the closed policy holds one Allow
    expression that is never true; the CRD needs at least one (rbac.go MinItems=1)."""
    for settings in ({"tenants": []}, {"jwt": None, "tenants": []}):
        policy = edge.access_policy_spec(stack(**settings), GATEWAY_REF)
        assert policy["traffic"]["authorization"]["policy"]["matchExpressions"] == ["false"]
        assert decision(policy, Call("llama-8b-fp8", token("search"))) in (401, 403)


def test_allow_anonymous_renders_no_access_policy():
    assert edge.access_policy_spec(stack(jwt=None, tenants=[], allow_anonymous=True), GATEWAY_REF) is None


def test_a_tenant_may_call_the_lora_adapters_of_its_services():
    serving = load_stack(STACKS, "serving").model_dump(exclude_none=True)
    serving["gateway"].update(implementation="agentgateway", auth={
        "api_key_secret": KEY_SECRET, "tenants": [{"name": "search", "models": ["llama-8b-lora"]}]})
    spec = StackSpec.model_validate(serving)
    policy = edge.access_policy_spec(spec, GATEWAY_REF)
    for adapter in ("support-agent", "sql-writer", "summarizer", "llama-8b-lora"):
        assert decision(policy, Call(adapter, "sk-search")) == 200


def _conditional_entry(policy: dict, context: dict[str, Any]) -> dict | None:
    """rateLimit.conditional: the first entry whose condition holds (a condition-less entry always does)."""
    for entry in policy["traffic"]["rateLimit"]["conditional"]:
        if "condition" not in entry or cel_true(entry["condition"], context):
            return entry
    return None


def test_each_tenant_has_its_own_bucket_with_the_spec_limits(both):
    """CRD rateLimit.conditional (first match, maxItems 16) and local[] (requests or tokens, unit); traffic_plugin.go
    processLocalRateLimitTraffic makes unit Minutes a bucket refilled by that many each minute."""
    by_name = {model.name: model for model in both.models}
    route = edge.rate_limit_policy_spec(both, by_name["llama-70b-long"])
    assert route["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "llama-70b-long"}]
    legal = _conditional_entry(route, activation(Call("llama-70b-long"), {"apiKey": {"key": "x", "tenant": "legal"}}))
    assert legal["policy"]["local"] == [{"requests": 120, "unit": "Minutes"}, {"tokens": 50000, "unit": "Minutes"}]
    shared = edge.rate_limit_policy_spec(both, by_name["llama-8b-fp8"])
    search = _conditional_entry(shared, activation(Call("llama-8b-fp8"), {"jwt": token("search").claims}))
    assert search["policy"]["local"] == [{"requests": 600, "unit": "Minutes"}]
    assert _conditional_entry(shared, activation(Call("llama-8b-fp8"), {"jwt": token("legal").claims})) is None
    only_legal = stack(api_key_secret=KEY_SECRET, tenants=[{"name": "legal", "models": ["llama-70b-long"]}])
    assert edge.rate_limit_policy_spec(only_legal, by_name["llama-8b-fp8"]) is None   # no tenant may call it


def test_a_service_with_more_tenants_than_a_route_keeps_apart_is_refused():
    """CRD rateLimit.conditional maxItems: 16 (spec/edge.py MAX_ROUTE_TENANTS), refused by the stack's checks."""
    tenants = [{"name": f"team-{i}", "models": ["bge-embed"]} for i in range(17)]
    with pytest.raises(SpecError) as caught:
        stack(api_key_secret=KEY_SECRET, tenants=tenants)
    error = caught.value
    assert error.path == "gateway.auth.tenants" and "17 tenants may call model service 'bge-embed'" in str(error)
    assert "To fix" in str(error)
    assert not implementation_refusals(stack(api_key_secret=KEY_SECRET).gateway.auth, "agentgateway")


def _coalesce(expression: str, context: dict[str, Any]) -> Any:
    """agentgateway's coalesce (schema/cel-functions.md): the first argument that resolves to a non-null value."""
    match = re.fullmatch(r"coalesce\((.*)\)", expression)
    arguments = match[1].split(", ") if match else [expression]   # claim text holds no ', ' (spec/edge.py CLAIM_TEXT)
    env = celpy.Environment()
    for argument in arguments:
        try:
            value = env.program(env.compile(argument)).evaluate(context)
        except celpy.CELEvalError:
            continue
        if value is not None:
            return value
    return None


def test_the_fairness_header_names_the_authenticated_tenant(both):
    """llm-d-router v0.10.0 pkg/epp/metadata/consts.go:38 (x-llm-d-inference-fairness-id), set after authentication
    by the PostRouting transformation (httpproxy.rs:255), from whichever credential verified."""
    request = edge.access_policy_spec(both, GATEWAY_REF)["traffic"]["transformation"]["request"]
    (header,) = request["set"]
    assert header["name"] == "x-llm-d-inference-fairness-id"
    by_jwt = activation(Call("llama-8b-fp8"), {"jwt": token("search").claims})
    by_key = activation(Call("llama-70b-long"), {"apiKey": {"key": "x", "tenant": "legal"}})
    assert _coalesce(header["value"], by_jwt) == "search" and _coalesce(header["value"], by_key) == "legal"


def backend_object(name: str, spec: dict) -> dict:
    return {"apiVersion": edge.AGENTGATEWAY_BACKEND_API_VERSION, "kind": "AgentgatewayBackend",
            "metadata": {"name": name, "namespace": "serving"}, "spec": spec}


def test_only_services_with_a_token_limit_get_an_ai_backend(both):
    """localratelimit.rs check_request skips token limits; only apply_llm_request_policies (httpproxy.rs 496-548),
    run for a backend with an LLM provider (2375), checks them, and the response's usage amends them (llm/mod.rs
    amend_tokens 3006-3027). So the route of a service a tenant limits by tokens goes to an AgentgatewayBackend whose
    custom provider's backendRef is the service's InferencePool (the CRD allows only a Service or InferencePool)."""
    by_name = {model.name: model for model in both.models}
    assert [name for name, model in by_name.items() if edge.counts_tokens(both, model)] == ["llama-70b-long"]
    backend = edge.ai_backend_spec(both, by_name["llama-70b-long"])
    custom = backend["ai"]["provider"]["custom"]
    assert custom["backendRef"] == {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                    "name": "llama-70b-long"}
    assert edge.route_backend_ref(both, by_name["llama-70b-long"]) == {
        "group": "agentgateway.dev", "kind": "AgentgatewayBackend", "name": "llama-70b-long"}
    assert edge.ai_backend_spec(both, by_name["llama-8b-fp8"]) is None
    assert edge.route_backend_ref(both, by_name["llama-8b-fp8"])["kind"] == "InferencePool"
    istio = both.model_copy(update={"gateway": both.gateway.model_copy(update={"implementation": "istio"})})
    assert edge.route_backend_ref(istio, by_name["llama-70b-long"])["kind"] == "InferencePool"


def test_the_ai_backends_validate_against_the_agentgateway_crd(both):
    """agentgateway main 75b4e6ce6e0e controller/install/helm/agentgateway-crds/templates/
    agentgateway.dev_agentgatewaybackends.yaml v1alpha1 (tests/schemas; unknown fields rejected, CEL rules run):
    exactly one backend kind, a custom provider with exactly one of backendRef or host, a backendRef only to a
    Service or InferencePool, 1-6 formats of the enum, `ai` policies only on an `ai` backend, routes of the enum."""
    objects = [backend_object(model.name, edge.ai_backend_spec(both, model))
               for model in both.models if edge.counts_tokens(both, model)]
    assert len(objects) == 1
    assert_valid(objects)
    wrong = copy.deepcopy(objects[0])
    wrong["spec"]["ai"]["provider"]["custom"]["backendRef"]["kind"] = "Deployment"
    with pytest.raises(AssertionError):
        assert_valid([wrong])


def _route_type(routes: dict[str, str], path: str) -> str:
    """resolve_route: the longest suffix the path ends with, then `*`, else Completions."""
    for suffix in sorted((s for s in routes if s != "*"), key=len, reverse=True):
        if path.endswith(suffix):
            return routes[suffix]
    return routes.get("*", "Completions")


# crates/llm/src/custom.rs ProviderFormat::from_route_type and openai.rs path_suffix, for the parsed route types.
_FORMAT_SUFFIX = {"Completions": "/chat/completions", "Embeddings": "/embeddings", "Responses": "/responses"}


def _upstream_path(custom: dict, route_type: str, path: str) -> str:
    """set_default_path for a custom provider: Detect/Passthrough keep the path; a parsed route goes to its format's
    `path`, else "/v1" + its suffix."""
    if route_type in ("Detect", "Passthrough"):
        return path
    paths = {f["type"]: f.get("path") for f in custom["formats"]}
    return paths.get(route_type) or "/v1" + _FORMAT_SUFFIX[route_type]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"])
def test_vllm_gets_its_request_unchanged_and_its_tokens_count(both, path):
    """vLLM's OpenAI-compatible paths on the ai backend (module docstring): each counts tokens (not Passthrough or
    Models), reaches vLLM on its own path, a parsed one only with its format listed (llm/mod.rs
    non_chat_provider_format_for 1044-1065, supported_chat_formats 983-993), and no `model` or path override is set,
    so the client's model, a LoRA adapter's name among them, reaches vLLM (crates/llm/src/custom.rs Provider.model)."""
    model = next(model for model in both.models if edge.counts_tokens(both, model))
    backend = edge.ai_backend_spec(both, model)
    custom, routes = backend["ai"]["provider"]["custom"], backend["policies"]["ai"]["routes"]
    route_type = _route_type(routes, path)
    assert route_type not in ("Passthrough", "Models")
    if route_type != "Detect":
        assert route_type in {f["type"] for f in custom["formats"]}
    assert _upstream_path(custom, route_type, path) == path
    assert "model" not in custom
    assert not {"path", "pathPrefix", "host"} & set(backend["ai"]["provider"])


def test_the_agentgateway_stack_renders_valid_objects_and_passes_the_policy_pack(both, tmp_path, capsys):
    """End to end: the rendered access policy, each route's limits, the ai backend of the token-limited service and
    the HTTPRoute sending to it validate against their schemas (agentgateway CRDs here, Gateway API v1.6.1 in
    ../shared), and every mandatory rule of the pack passes."""
    import json

    from inferstack.cli import main
    from inferstack.engine import run_stack
    from inferstack.engine.render import kubernetes_objects

    recording = run_stack(both)
    objects = kubernetes_objects(recording)
    kinds = [o["kind"] for o in objects]
    assert kinds.count("AgentgatewayBackend") == 1 and "RequestAuthentication" not in kinds
    policies = {o["metadata"]["name"] for o in objects if o["kind"] == "AgentgatewayPolicy"}
    assert {"inference-gateway-access", "inference-gateway-request-headers", "llama-70b-long"} <= policies
    (route,) = [o for o in objects if o["kind"] == "HTTPRoute" and o["metadata"]["name"] == "llama-70b-long"]
    assert route["spec"]["rules"][0]["backendRefs"][0]["kind"] == "AgentgatewayBackend"
    assert_valid([o for o in objects if o["kind"] in ("AgentgatewayPolicy", "AgentgatewayBackend", "HTTPRoute")])
    path = tmp_path / "resources.json"
    path.write_text(json.dumps([r.as_dict() for r in recording.resources]), encoding="utf-8")
    code = main(["check", "--resources", str(path), "--format", "json"])
    report = json.loads(capsys.readouterr().out)["policies"]
    assert code == 0, [(p["name"], p["violations"]) for p in report if p["violations"]]
