"""No secret material as a literal in container env, args, ConfigMaps or Helm values.

The analyzer unwraps Pulumi secrets before policies see props, so a policy cannot tell a Pulumi
secret from a literal. What it can see is where the value lands: a token in a pod's env or args
is readable by anyone who can read the Deployment. The only accepted places for secret material
are Kubernetes Secrets (referenced with secretKeyRef / secretRef), which this rule never reads.
Helm values are checked for known credential formats only, since charts usually move sensitive
values into Secrets of their own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from inferstack.policies.pools import HELM_RELEASE_TYPES
from inferstack.policies.props import dotted, items, leaves, mapping, text
from inferstack.policies.workloads import command_tokens, workload

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
# Credential formats, by what they are.
CREDENTIAL_PATTERNS = (
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("a private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b")),
    ("an OpenAI-style API key", re.compile(r"\bsk-[A-Za-z0-9_-]{32,}\b")),
)
# Names (env vars, ConfigMap keys, --flags) whose values are secrets: they end in one of these words.
SENSITIVE_NAME = re.compile(
    r"(password|passwd|requirepass|token|apikey|secretkey|secretaccesskey|privatekey|clientsecret)$"
)
# Values that are not secret material even under a sensitive name.
HARMLESS_VALUE = re.compile(r"^(true|false|yes|no|on|off|none|null|\d+)?$", re.IGNORECASE)
REFERENCE = re.compile(r"^\$(\([A-Za-z_][A-Za-z0-9_]*\)|\{[A-Za-z_][A-Za-z0-9_]*\})$")


def credential_in(value: str) -> str | None:
    """What kind of credential the text contains, or None."""
    for kind, pattern in CREDENTIAL_PATTERNS:
        if pattern.search(value):
            return kind
    return None


def sensitive_name(name: str) -> bool:
    return bool(SENSITIVE_NAME.search(re.sub(r"[^a-z0-9]", "", name.lower())))


def literal_secret(name: str, value: Any) -> str | None:
    """Why `name: value` is secret material in the clear, or None."""
    if not isinstance(value, str):
        return None
    kind = credential_in(value)
    if kind:
        return f"contains {kind}"
    stripped = value.strip()
    if sensitive_name(name) and not HARMLESS_VALUE.match(stripped) and not REFERENCE.match(stripped):
        return "is a literal value under a secret's name"
    return None


def _arg_findings(tokens: list[str]) -> list[tuple[str, str]]:
    """(flag or '[i]', why) for args that carry secrets: credentials anywhere, literals after --token-like flags."""
    findings = []
    for index, token in enumerate(tokens):
        if token.startswith("--") and "=" in token:
            flag, value = token.split("=", 1)
            why = literal_secret(flag, value)
            if why:
                findings.append((flag, why))
            continue
        if token.startswith("--") and index + 1 < len(tokens) and not tokens[index + 1].startswith("--"):
            why = literal_secret(token, tokens[index + 1])
            if why:
                findings.append((token, why))
            continue
        kind = credential_in(token)
        if kind and not (index > 0 and tokens[index - 1].startswith("--") and "=" not in tokens[index - 1]):
            findings.append((f"args[{index}]", f"contains {kind}"))
    return findings


def _workload_literals(args: ResourceValidationArgs, report: ReportViolation) -> None:
    found = workload(args.resource_type, args.props, args.name)
    if found is None:
        return
    for template in found.templates:
        for container in template.containers():
            name = text(container.get("name"), "?")
            for env in items(container.get("env")):
                env = mapping(env)
                variable = text(env.get("name"))
                why = literal_secret(variable, env.get("value"))
                if why:
                    report(
                        f"{found} container {name!r} env {variable} {why}. To fix: put it in a Kubernetes Secret "
                        "and use valueFrom.secretKeyRef."
                    )
            for flag, why in _arg_findings(command_tokens(container)):
                report(
                    f"{found} container {name!r} {flag} {why}. To fix: read it from an env var set by "
                    "secretKeyRef (e.g. --api-key $(VLLM_API_KEY)) or from a mounted Secret."
                )


def _config_map_literals(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != CONFIG_MAP:
        return
    data: Mapping[str, Any] = mapping(args.props.get("data"))
    for key in data:
        why = literal_secret(str(key), data[key])
        if why:
            report(f"ConfigMap {args.name} key {key} {why}. To fix: move it to a Secret.")


def _helm_value_literals(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in HELM_RELEASE_TYPES:
        return
    for path, value in leaves(mapping(args.props.get("values"))):
        kind = credential_in(value) if isinstance(value, str) else None
        if kind:
            report(
                f"Helm release {args.name} values.{dotted(path)} contains {kind}. To fix: create a Kubernetes "
                "Secret and pass the chart its name (e.g. an existingSecret value) instead of the credential."
            )


# Istio's security objects at the gateway: an AuthorizationPolicy condition on a credential header compares against
# the credential itself, and an inline JWKS with a private member ("d", RFC 7517/7518) is a signing key.
ISTIO_SECURITY_PREFIX = "kubernetes:security.istio.io/"
CREDENTIAL_HEADER = re.compile(r"^request\.headers\[(authorization|x-api-key|api-key|apikey|proxy-authorization)\]$",
                               re.IGNORECASE)
PRIVATE_JWK = re.compile(r'"d"\s*:')


# agentgateway's policies state rules in CEL (agentgateway/agentgateway schema/cel.md): an expression comparing a
# credential header with a string holds the credential; its API keys belong in a Secret the policy references.
AGENTGATEWAY_PREFIX = "kubernetes:agentgateway.dev/"
_CEL_HEADER = r"""request\.headers\[\s*["'](?:authorization|x-api-key|api-key|apikey|proxy-authorization)["']\s*\]"""
_CEL_STRING = r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"""
# A credential header compared with a string in either order, in a list of strings, or tested with a string method.
CEL_CREDENTIAL_LITERAL = re.compile(
    rf"{_CEL_HEADER}\s*(?:==|!=|in\s*\[)\s*(?:{_CEL_STRING})"
    rf"|(?:{_CEL_STRING})\s*(?:==|!=)\s*{_CEL_HEADER}"
    rf"|{_CEL_HEADER}\s*\.\s*(?:startsWith|endsWith|contains|matches)\s*\(\s*(?:{_CEL_STRING})",
    re.IGNORECASE)


def cel_credential_literal(expression: str) -> bool:
    """Whether a CEL expression holds a credential: a credential header compared with, or tested against, a
    string keeps that string (the key) in the clear."""
    return CEL_CREDENTIAL_LITERAL.search(expression) is not None


def _gateway_security_literals(args: ResourceValidationArgs, report: ReportViolation) -> None:
    agentgateway = args.resource_type.startswith(AGENTGATEWAY_PREFIX)
    if not (args.resource_type.startswith(ISTIO_SECURITY_PREFIX) or agentgateway):
        return
    spec = mapping(args.props.get("spec"))
    metadata = mapping(args.props.get("metadata"))
    kind = args.resource_type.rsplit(":", 1)[-1]
    where = f"{kind} {text(metadata.get('namespace'), '-')}/{text(metadata.get('name'), args.name)}"
    if agentgateway:
        for path, value in leaves(spec):
            if isinstance(value, str) and cel_credential_literal(value):
                report(f"{where} spec.{dotted(path)} compares a credential header with a literal: the credentials "
                       "are readable by anyone who can read the policy. To fix: keep the keys in a Secret "
                       "(gateway.auth.api_key_secret) or authenticate with gateway.auth.jwt.")
    for index, rule in enumerate(items(spec.get("rules"))):
        for condition in items(mapping(rule).get("when")):
            key = text(mapping(condition).get("key"))
            if CREDENTIAL_HEADER.match(key) and items(mapping(condition).get("values")):
                report(f"{where} rules[{index}] compares {key} with literal values: the credentials are readable "
                       "by anyone who can read the policy. To fix: authenticate with gateway.auth.jwt and name "
                       "tenants by their claim.")
    for path, value in leaves(spec):
        if not isinstance(value, str):
            continue
        credential = credential_in(value)
        private_key = "jwks" in path and PRIVATE_JWK.search(value) is not None
        why = f"contains {credential}" if credential else "holds a private JSON Web Key" if private_key else None
        if why:
            report(f"{where} spec.{dotted(path)} {why}. To fix: keep signing keys with the issuer and give the "
                   "gateway only its public JWKS (gateway.auth.jwt.jwks_uri).")


no_literal_secrets = ResourceValidationPolicy(
    name="no-literal-secrets",
    description="No tokens, keys or passwords as literals in env, args, ConfigMaps, Helm values or gateway policies.",
    validate=[_workload_literals, _config_map_literals, _helm_value_literals, _gateway_security_literals],
    enforcement_level=EnforcementLevel.MANDATORY,
)
