"""The inference gateway's edge: TLS on every listener, and no route reachable without authentication.

* HTTPS listener: each Gateway listener is HTTPS with a certificate (Gateway API v1.6.1 GatewayTLSConfig: mode
  Terminate with certificateRefs), or an HTTP listener behind a load balancer that terminates TLS with an ACM
  certificate on its port (AWS Load Balancer Controller annotations ssl-cert and ssl-ports on the Gateway's
  infrastructure, which the implementation copies onto its Service).
* Authentication in front of every route: every HTTPRoute's Gateway has an Istio ALLOW AuthorizationPolicy and no
  rule of any ALLOW policy on it lets a request through without a verified token (a `requestPrincipals` source),
  so a request without credentials matches no rule and is denied (istio.io docs/reference/config/security/
  authorization-policy: with any ALLOW policy on a workload, a request no ALLOW policy matches is denied); a rule that
  asks for a token needs a RequestAuthentication on the same Gateway, without which nothing verifies one. On an
  agentgateway Gateway (gatewayClassName agentgateway) the same holds of its AgentgatewayPolicies: some Allow
  authorization targets the Gateway (with any Allow rule, a request no rule matches is denied), each of its
  expressions reads a verified identity (`jwt` or `apiKey`; a missing one makes the expression an error, which
  denies) or is `false`, and a jwtAuthentication or apiKeyAuthentication verifies the identity it reads
  (agentgateway/agentgateway 75b4e6ce crates/agentgateway/src/http/authorization.rs; schema/cel.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_policy import (
    EnforcementLevel, PolicyResource, ReportViolation, StackValidationArgs, StackValidationPolicy,
)

from inferstack.policies.props import dig, items, mapping, number, string_map, text
from inferstack.policies.workloads import kind_of
from inferstack.spec.edge import ACM_CERTIFICATE_ANNOTATION, ACM_PORTS_ANNOTATION

GATEWAY_GROUP = "gateway.networking.k8s.io"
ISTIO_SECURITY_GROUP = "security.istio.io"
AGENTGATEWAY_GROUP = "agentgateway.dev"
AGENTGATEWAY_CLASS = "agentgateway"
VERIFIED_IDENTITY = re.compile(r"\b(jwt|apiKey)\b")
NEVER = "false"


def _of(resources: Sequence[PolicyResource], group: str, kind: str) -> list[PolicyResource]:
    return [r for r in resources if kind_of(r.resource_type) == kind and r.resource_type.startswith(f"kubernetes:{group}/")]


def _object(resource: PolicyResource) -> tuple[str, str]:
    metadata = mapping(resource.props.get("metadata"))
    return text(metadata.get("namespace"), "default"), text(metadata.get("name"), resource.name)


def _targets_gateway(policy: PolicyResource, namespace: str, gateway: str) -> bool:
    refs = items(dig(policy.props, "spec", "targetRefs"))
    return _object(policy)[0] == namespace and any(
        text(mapping(ref).get("kind")) == "Gateway" and text(mapping(ref).get("name")) == gateway for ref in refs
    )


def listener_problem(listener: Mapping[str, Any], annotations: Mapping[str, str]) -> str | None:
    """Why a Gateway listener serves clients in the clear, or None."""
    protocol = text(listener.get("protocol"))
    port = f"{number(listener.get('port')) or 0:.0f}"
    if protocol == "HTTPS":
        tls = mapping(listener.get("tls"))
        if text(tls.get("mode"), "Terminate") != "Terminate" or not items(tls.get("certificateRefs")):
            return "is HTTPS without a certificate to terminate with (tls.mode Terminate, tls.certificateRefs)"
        return None
    acm_ports = [p.strip() for p in annotations.get(ACM_PORTS_ANNOTATION, "").split(",")]
    if annotations.get(ACM_CERTIFICATE_ANNOTATION) and port in acm_ports:
        return None
    return f"serves {protocol or 'an unknown protocol'} on port {port} and no load balancer certificate covers it"


def _validate_listeners(args: StackValidationArgs, report: ReportViolation) -> None:
    for gateway in _of(args.resources, GATEWAY_GROUP, "Gateway"):
        namespace, name = _object(gateway)
        annotations = string_map(dig(gateway.props, "spec", "infrastructure", "annotations"))
        for listener in items(dig(gateway.props, "spec", "listeners")):
            problem = listener_problem(mapping(listener), annotations)
            if problem:
                report(
                    f"Gateway {namespace}/{name} listener {text(mapping(listener).get('name'), '?')!r} {problem}. "
                    "To fix: set gateway.tls.mode to 'secret' (a TLS Secret) or 'acm' (an ACM certificate); "
                    "tls.mode 'none' fails this rule on purpose.",
                    gateway.urn,
                )


def unauthenticated_rule(rule: Mapping[str, Any]) -> bool:
    """Whether an ALLOW rule can match a request that carries no verified token: a rule without `from`, or with a
    source that asks for no request principal, matches requests without one."""
    sources = [mapping(mapping(entry).get("source")) for entry in items(rule.get("from"))]
    return not sources or any(not items(source.get("requestPrincipals")) for source in sources)


def _validate_routes(args: StackValidationArgs, report: ReportViolation) -> None:
    authorizations = _of(args.resources, ISTIO_SECURITY_GROUP, "AuthorizationPolicy")
    authentications = _of(args.resources, ISTIO_SECURITY_GROUP, "RequestAuthentication")
    agentgateway_policies = _of(args.resources, AGENTGATEWAY_GROUP, "AgentgatewayPolicy")
    classes = {_object(g): text(dig(g.props, "spec", "gatewayClassName"))
               for g in _of(args.resources, GATEWAY_GROUP, "Gateway")}
    for route in _of(args.resources, GATEWAY_GROUP, "HTTPRoute"):
        namespace, name = _object(route)
        for parent in items(dig(route.props, "spec", "parentRefs")):
            gateway = text(mapping(parent).get("name"))
            key = (text(mapping(parent).get("namespace"), namespace), gateway)
            if key not in classes:
                continue
            if classes[key] == AGENTGATEWAY_CLASS:
                problem = _route_override(route, agentgateway_policies) or _agentgateway_problem(
                    key, agentgateway_policies)
            else:
                problem = _gateway_problem(key, authorizations, authentications)
            if problem:
                report(
                    f"HTTPRoute {namespace}/{name} on Gateway {key[0]}/{gateway}: {problem}. To fix: set "
                    "gateway.auth.jwt (or gateway.auth.api_key_secret on agentgateway) and gateway.auth.tenants, or "
                    "leave auth closed; auth.allow_anonymous fails this rule on purpose.",
                    route.urn,
                )


ACCESS_FIELDS = ("authorization", "jwtAuthentication", "apiKeyAuthentication")


def _route_override(route: PolicyResource, policies: Sequence[PolicyResource]) -> str | None:
    """A policy on the route itself that sets an access field replaces the Gateway's: more precise policies win field
    by field (agentgateway 75b4e6ce AgentgatewayPolicy CRD, traffic: "Gateway < Listener < Route < Route Rule")."""
    namespace, name = _object(route)
    for policy in policies:
        refs = items(dig(policy.props, "spec", "targetRefs"))
        on_route = _object(policy)[0] == namespace and any(
            text(mapping(ref).get("kind")) == "HTTPRoute" and text(mapping(ref).get("name")) == name for ref in refs)
        fields = [f for f in ACCESS_FIELDS if dig(policy.props, "spec", "traffic", f)]
        if on_route and fields:
            return (f"AgentgatewayPolicy {_object(policy)[1]} on the route sets {', '.join(fields)}, which replaces "
                    "the Gateway's")
    return None


def top_level_disjuncts(expression: str) -> list[str]:
    """A CEL expression split at its top-level `||` (outside parentheses, brackets and string literals)."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(expression):
        char = expression[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif expression.startswith("||", i) and depth == 0:
            parts.append(expression[start:i])
            start, i = i + 2, i + 1
        i += 1
    return [*parts, expression[start:]]


def reads_identity(expression: str) -> bool:
    """Whether every way the expression can be true reads a verified identity: each top-level alternative names
    `jwt` or `apiKey` (an absent one is an error, and an error denies)."""
    return all(VERIFIED_IDENTITY.search(part) for part in top_level_disjuncts(expression))


def _agentgateway_problem(gateway: tuple[str, str], policies: Sequence[PolicyResource]) -> str | None:
    """Why requests without credentials can reach an agentgateway Gateway's routes, or None."""
    on_gateway = [p for p in policies if _targets_gateway(p, *gateway)]
    allows = [mapping(dig(p.props, "spec", "traffic", "authorization")) for p in on_gateway]
    allows = [a for a in allows if a and text(a.get("action"), "Allow") == "Allow"]
    if not allows:
        return "no AgentgatewayPolicy with an Allow authorization targets the Gateway, so agentgateway lets every " \
               "request through"
    expressions = [text(e).strip() for a in allows for e in items(dig(a, "policy", "matchExpressions"))]
    anonymous = [e for e in expressions if e != NEVER and not reads_identity(e)]
    if anonymous:
        return f"Allow rule {anonymous[0]!r} reads no verified identity (jwt or apiKey), so it matches requests " \
               "without credentials"
    verifies = any(dig(p.props, "spec", "traffic", field) for p in on_gateway
                   for field in ("jwtAuthentication", "apiKeyAuthentication"))
    if any(e != NEVER for e in expressions) and not verifies:
        return "its Allow rules read jwt or apiKey and no jwtAuthentication or apiKeyAuthentication verifies either"
    return None


def _gateway_problem(
    gateway: tuple[str, str], authorizations: Sequence[PolicyResource], authentications: Sequence[PolicyResource]
) -> str | None:
    """Why requests without credentials can reach the Gateway's routes, or None."""
    allows = [p for p in authorizations if _targets_gateway(p, *gateway)
              and text(dig(p.props, "spec", "action"), "ALLOW") == "ALLOW"]
    if not allows:
        return "no ALLOW AuthorizationPolicy targets the Gateway, so Istio lets every request through"
    open_rules = [f"{_object(p)[1]} rules[{i}]" for p in allows
                  for i, rule in enumerate(items(dig(p.props, "spec", "rules"))) if unauthenticated_rule(mapping(rule))]
    if open_rules:
        return f"{', '.join(open_rules)} allow requests without a verified token (no requestPrincipals)"
    asks_for_tokens = any(items(dig(p.props, "spec", "rules")) for p in allows)
    if asks_for_tokens and not any(_targets_gateway(a, *gateway) for a in authentications):
        return "its AuthorizationPolicy asks for request principals and no RequestAuthentication verifies tokens"
    return None


https_listener = StackValidationPolicy(
    name="https-listener",
    description="Every Gateway listener terminates TLS, itself (HTTPS with a certificate) or at an ACM load balancer.",
    validate=_validate_listeners,
    enforcement_level=EnforcementLevel.MANDATORY,
)

authenticated_routes = StackValidationPolicy(
    name="authenticated-routes",
    description="Every HTTPRoute's Gateway refuses requests without verified credentials (Istio AuthorizationPolicy, "
    "or agentgateway's AgentgatewayPolicy authorization).",
    validate=_validate_routes,
    enforcement_level=EnforcementLevel.MANDATORY,
)
