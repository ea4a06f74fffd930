"""The mandatory edge rules (policies/edge.py), each shown to fail on the prod render with one thing broken.

* https-listener: Gateway API v1.6.1 config/crd/standard/gateway.networking.k8s.io_gateways.yaml (listener
  protocol HTTPS with tls.mode Terminate and certificateRefs); AWS Load Balancer Controller v2
  docs/guide/service/annotations.md "TLS" (service.beta.kubernetes.io/aws-load-balancer-ssl-cert, -ssl-ports).
* authenticated-routes: istio.io docs/reference/config/security/authorization-policy (ALLOW policies deny what no
  rule matches; a rule without `from` matches any source) and docs/reference/config/security/request_authentication
  (without one, no token is verified, so no request has a request principal).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from inferstack.cli import main
from inferstack.engine import run_stack
from inferstack.policies.rules import POLICIES
from inferstack.serving import gateway
from inferstack.spec.edge import EdgeAuthSpec, EdgeTlsSpec
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"
ACM_ARN = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-6789-abcd-ef0123456789"


def _prod_with(**gateway_update: Any):
    prod = load_stack(STACKS, "prod")
    return prod.model_copy(update={"gateway": prod.gateway.model_copy(update=gateway_update)})


@functools.cache
def _rendered(tls_mode: str = "secret", anonymous: bool = False) -> str:
    update: dict[str, Any] = {}
    if tls_mode != "secret":
        update["tls"] = EdgeTlsSpec(mode=tls_mode, certificate_arn=ACM_ARN if tls_mode == "acm" else None)
    if anonymous:
        update["auth"] = EdgeAuthSpec(allow_anonymous=True)
    return json.dumps([r.as_dict() for r in run_stack(_prod_with(**update)).resources])


def rendered(tls_mode: str = "secret", anonymous: bool = False) -> list[dict[str, Any]]:
    return json.loads(_rendered(tls_mode, anonymous))


def of_kind(resources: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in resources if r["type"].endswith(f":{kind}")]


def check(resources: list[dict[str, Any]], tmp_path: Path, capsys) -> tuple[int, dict[str, dict]]:
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(resources), encoding="utf-8")
    code = main(["check", "--resources", str(path), "--format", "json"])
    return code, {p["name"]: p for p in json.loads(capsys.readouterr().out)["policies"]}


def failing(report: dict[str, dict]) -> set[str]:
    return {name for name, p in report.items() if p["violations"] and p["enforcement"] == "mandatory"}


def messages(report: dict[str, dict], policy: str) -> str:
    return "\n".join(v["message"] for v in report[policy]["violations"])


def test_both_rules_are_mandatory_members_of_the_pack():
    levels = {p.name: p.enforcement_level.name for p in POLICIES}
    assert levels["https-listener"] == levels["authenticated-routes"] == "MANDATORY"


def test_the_prod_render_passes_both(tmp_path, capsys):
    _, report = check(rendered(), tmp_path, capsys)
    assert not {"https-listener", "authenticated-routes"} & failing(report)


def test_an_http_listener_fails_https_listener(tmp_path, capsys):
    resources = rendered()
    (gateway_resource,) = of_kind(resources, "Gateway")
    listener = gateway_resource["inputs"]["spec"]["listeners"][0]
    listener.update(protocol="HTTP", port=80)
    del listener["tls"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"https-listener"}
    assert ("Gateway inference/inference-gateway listener 'https' serves HTTP on port 80 and no load balancer "
            "certificate covers it") in messages(report, "https-listener")


def test_an_https_listener_without_a_certificate_fails(tmp_path, capsys):
    resources = rendered()
    (gateway_resource,) = of_kind(resources, "Gateway")
    del gateway_resource["inputs"]["spec"]["listeners"][0]["tls"]["certificateRefs"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"https-listener"}


def test_tls_at_the_acm_load_balancer_passes_and_plain_http_by_choice_fails(tmp_path, capsys):
    acm = rendered("acm")
    (gateway_resource,) = of_kind(acm, "Gateway")
    spec = gateway_resource["inputs"]["spec"]
    assert spec["listeners"][0]["protocol"] == "HTTP" and spec["listeners"][0]["port"] == 443
    assert spec["infrastructure"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-ssl-ports"] == "443"
    assert "https-listener" not in failing(check(acm, tmp_path, capsys)[1])
    # The ACM certificate on another port than the listener's leaves the listener in the clear.
    spec["infrastructure"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-ssl-ports"] = "8443"
    assert failing(check(acm, tmp_path, capsys)[1]) == {"https-listener"}
    code, report = check(rendered("none"), tmp_path, capsys)
    assert code == 1 and failing(report) == {"https-listener"}
    assert "tls.mode 'none' fails this rule on purpose" in messages(report, "https-listener")


def test_the_plan_words_say_which_transport_was_chosen():
    assert gateway.edge_summary(_prod_with().gateway)[0] == (
        "HTTPS on port 443, certificate from Secret inference-gateway-tls")
    plain = _prod_with(tls=EdgeTlsSpec(mode="none")).gateway
    assert gateway.edge_summary(plain)[0] == "plain HTTP on port 80 (tls.mode 'none' chosen explicitly)"
    closed = _prod_with(implementation="agentgateway", auth=EdgeAuthSpec()).gateway
    assert gateway.edge_summary(closed)[1] == "closed: no tenant is set, so every request is refused"
    keys = _prod_with(implementation="agentgateway", auth=_agentgateway_auth()).gateway
    assert gateway.edge_summary(keys)[1].startswith(
        "JWT from https://login.acme.example, tenant claim 'tenant' or API keys from Secret inference-api-keys")


@pytest.mark.parametrize(
    ("kind", "edit", "expected"),
    [
        ("AuthorizationPolicy", lambda resources, policy: resources.remove(policy),
         "no ALLOW AuthorizationPolicy targets the Gateway, so Istio lets every request through"),
        ("AuthorizationPolicy", lambda resources, policy: policy["inputs"]["spec"]["rules"].append({"when": [
            {"key": "request.headers[x-gateway-model-name]", "values": ["llama-8b-fp8"]}]}),
         "inference-gateway-tenants rules[2] allow requests without a verified token (no requestPrincipals)"),
        ("AuthorizationPolicy", lambda resources, policy: policy["inputs"]["spec"].update(action="DENY"),
         "no ALLOW AuthorizationPolicy targets the Gateway"),
        ("RequestAuthentication", lambda resources, authentication: resources.remove(authentication),
         "its AuthorizationPolicy asks for request principals and no RequestAuthentication verifies tokens"),
    ],
)
def test_a_route_reachable_without_a_token_fails_authenticated_routes(tmp_path, capsys, kind, edit, expected):
    resources = rendered()
    (target,) = of_kind(resources, kind)
    edit(resources, target)
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"authenticated-routes"}
    assert f"HTTPRoute inference/llama-8b-fp8 on Gateway inference/inference-gateway: {expected}" in messages(
        report, "authenticated-routes")


def test_anonymous_access_renders_no_policy_and_fails_authenticated_routes(tmp_path, capsys):
    resources = rendered(anonymous=True)
    assert not of_kind(resources, "AuthorizationPolicy") and not of_kind(resources, "RequestAuthentication")
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"authenticated-routes"}
    assert "auth.allow_anonymous fails this rule on purpose" in messages(report, "authenticated-routes")


@pytest.mark.parametrize(
    ("kind", "edit", "expected"),
    [
        ("AuthorizationPolicy", lambda spec: spec["rules"].append({
            "from": [{"source": {"requestPrincipals": ["*"]}}],
            "when": [{"key": "request.headers[x-api-key]", "values": ["team-a-8f3k2j4h5g6f7d8s"]}]}),
         "AuthorizationPolicy inference/inference-gateway-tenants rules[2] compares request.headers[x-api-key] with "
         "literal values"),
        ("RequestAuthentication", lambda spec: spec["jwtRules"][0].update(
            jwks='{"keys": [{"kty": "RSA", "n": "sXch", "e": "AQAB", "d": "VFCWOqXr"}]}'),
         "RequestAuthentication inference/inference-gateway-jwt spec.jwtRules[0].jwks holds a private JSON Web Key"),
        ("RequestAuthentication", lambda spec: spec["jwtRules"][0].update(
            jwksUri="https://login.acme.example/jwks?token=hf_" + "Ab3" * 12),
         "contains a Hugging Face token"),
    ],
)
def test_credentials_in_the_gateway_policies_fail_no_literal_secrets(tmp_path, capsys, kind, edit, expected):
    """An API key compared in an AuthorizationPolicy condition (istio.io docs/reference/config/security/conditions:
    request.headers[...]) sits in the clear in the object; an inline JWKS member "d" is a private key (RFC 7518
    section 6.3.2)."""
    resources = rendered()
    (target,) = of_kind(resources, kind)
    edit(target["inputs"]["spec"])
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "no-literal-secrets" in failing(report)
    assert expected in messages(report, "no-literal-secrets")


def _agentgateway_auth() -> EdgeAuthSpec:
    prod = load_stack(STACKS, "prod")
    return prod.gateway.auth.model_copy(update={"api_key_secret": "inference-api-keys"})


@functools.cache
def _agentgateway_rendered() -> str:
    stack = _prod_with(implementation="agentgateway", auth=_agentgateway_auth())
    return json.dumps([r.as_dict() for r in run_stack(stack).resources])


def _access_policy(resources: list[dict[str, Any]]) -> dict[str, Any]:
    (policy,) = [r for r in of_kind(resources, "AgentgatewayPolicy")
                 if r["inputs"]["metadata"]["name"] == "inference-gateway-access"]
    return policy


def test_agentgateway_authentication_passes_both_rules(tmp_path, capsys):
    code, report = check(json.loads(_agentgateway_rendered()), tmp_path, capsys)
    assert not failing(report) and code == 0


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda resources, policy: resources.remove(policy),
         "no AgentgatewayPolicy with an Allow authorization targets the Gateway"),
        (lambda resources, policy: policy["inputs"]["spec"]["traffic"]["authorization"]["policy"][
            "matchExpressions"].append('request.headers["x-gateway-model-name"] == "llama-8b-fp8"'),
         "reads no verified identity (jwt or apiKey)"),
        (lambda resources, policy: [policy["inputs"]["spec"]["traffic"].pop(field)
                                    for field in ("jwtAuthentication", "apiKeyAuthentication")],
         "no jwtAuthentication or apiKeyAuthentication verifies either"),
        (lambda resources, policy: policy["inputs"]["spec"]["traffic"]["authorization"]["policy"][
            "matchExpressions"].append('true || jwt.sub == ""'),
         "reads no verified identity (jwt or apiKey)"),
        (lambda resources, policy: next(
            r for r in resources if r["type"].endswith(":AgentgatewayPolicy")
            and r["inputs"]["metadata"]["name"] == "llama-8b-fp8")["inputs"]["spec"]["traffic"].update(
                authorization={"action": "Allow", "policy": {"matchExpressions": ["true"]}}),
         "AgentgatewayPolicy llama-8b-fp8 on the route sets authorization, which replaces the Gateway's"),
    ],
)
def test_an_agentgateway_route_reachable_without_credentials_fails_authenticated_routes(tmp_path, capsys, edit,
                                                                                        expected):
    resources = json.loads(_agentgateway_rendered())
    edit(resources, _access_policy(resources))
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"authenticated-routes"}
    assert expected in messages(report, "authenticated-routes")


@pytest.mark.parametrize("expression", [
    'jwt.tenant == "search" && request.headers["x-api-key"] == "team-a-8f3k2j4h5g6f7d8s"',
    '"team-a-8f3k2j4h5g6f7d8s" == request.headers["x-api-key"]',
    'request.headers["authorization"].contains("8f3k2j4h5g6f7d8s")',
    "request.headers['x-api-key'] in ['team-a-8f3k2j4h5g6f7d8s']",
])
def test_an_api_key_in_an_agentgateway_rule_fails_no_literal_secrets(tmp_path, capsys, expression):
    """A CEL comparison of a credential header with a string, in either order or by a string method (agentgateway
    schema/cel.md request.headers), holds the key in the clear."""
    resources = json.loads(_agentgateway_rendered())
    _access_policy(resources)["inputs"]["spec"]["traffic"]["authorization"]["policy"]["matchExpressions"].append(
        expression)
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "no-literal-secrets" in failing(report)
    assert "compares a credential header with a literal" in messages(report, "no-literal-secrets")


def test_the_plan_says_which_listener_clients_reach_and_who_gets_through():
    """The plan's `edge` section is edge_summary's words; plain HTTP and an open door are warnings in its text."""
    from rich.console import Console

    from inferstack.presentation.summary import build_plan
    from inferstack.presentation.terminal import print_plan

    prod = _prod_with()
    plan = build_plan(prod, run_stack(prod))
    transport, authentication = gateway.edge_summary(prod.gateway)
    assert plan["edge"]["transport"] == transport and plan["edge"]["authentication"] == authentication
    assert [t["name"] for t in plan["edge"]["tenants"]] == [t.name for t in prod.gateway.auth.tenants]
    plain = _prod_with(tls=EdgeTlsSpec(mode="none"), port=80)
    console = Console(record=True, width=200)
    print_plan(build_plan(plain, run_stack(plain)), console)
    text = console.export_text()
    assert "listener: plain HTTP on port 80" in text
    assert "clients reach the endpoint over plain HTTP (gateway.tls.mode 'none')" in text
