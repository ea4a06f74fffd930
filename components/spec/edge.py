"""The gateway's edge: the certificate its listener serves, and who may call which model service through it."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from typing import Literal

from pydantic import Field, field_validator, model_validator

from inferstack.spec.base import Model, Name
from inferstack.spec.errors import SpecError, quoted

ACM_CERTIFICATE_ARN = re.compile(r"arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[A-Za-z0-9-]+")
# A claim name and a tenant go into Istio's `request.auth.claims[<claim>]` key and its values: no brackets or quotes.
CLAIM_TEXT = re.compile(r"[A-Za-z0-9_.:@/-]+")
HTTPS_URL = re.compile(r"https://\S+")
# With tls.mode 'acm' the load balancer terminates TLS with the ACM certificate on the listener's port (AWS Load
# Balancer Controller v2 docs/guide/service/annotations.md, "TLS": ssl-cert, ssl-ports); the gateway sets them on the
# Gateway's infrastructure, the policy pack reads them there.
ACM_CERTIFICATE_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-ssl-cert"
ACM_PORTS_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-ssl-ports"


def _claim_text(value: str) -> str:
    if not CLAIM_TEXT.fullmatch(value):
        raise ValueError(f"{value!r} is not claim text: Istio matches it inside request.auth.claims[...]. To fix: use "
                         "letters, digits and '_', '.', ':', '@', '/', '-' only; e.g. 'tenant'")
    return value


def _https_url(value: str) -> str:
    """Tokens checked against keys fetched in the clear could be forged on the way."""
    if not HTTPS_URL.fullmatch(value):
        raise ValueError(f"{value!r} is not an https:// URL. To fix: give the issuer's https:// address; e.g. "
                         "'https://login.acme.example'")
    return value


class EdgeTlsSpec(Model):
    """TLS at the gateway's listener."""

    mode: Literal["secret", "acm", "none"] = Field(
        "secret",
        description="Where the listener's certificate comes from: 'secret' (the Gateway terminates TLS with a "
        "Kubernetes Secret of type kubernetes.io/tls, e.g. one cert-manager keeps), 'acm' (the AWS load balancer "
        "terminates TLS with an ACM certificate) or 'none' (plain HTTP, by explicit choice only). Defaults to secret.",
    )
    secret_name: Name | None = Field(
        None,
        description="With mode 'secret', the TLS Secret in the serving namespace (a reference: the stack never holds "
        "the key). Defaults to '<gateway name>-tls'.",
    )
    certificate_arn: str | None = Field(
        None, description="With mode 'acm', the ACM certificate's ARN. Required with acm; defaults to none."
    )

    @field_validator("certificate_arn")
    @classmethod
    def _an_acm_certificate(cls, value: str | None) -> str | None:
        if value is not None and not ACM_CERTIFICATE_ARN.fullmatch(value):
            raise ValueError(f"{value!r} is not an ACM certificate ARN. To fix: use the ARN ACM shows for the "
                             "certificate; e.g. 'arn:aws:acm:us-east-1:123456789012:certificate/<id>'")
        return value

    @model_validator(mode="after")
    def _settings_of_the_mode(self) -> "EdgeTlsSpec":
        """Each mode has its own source of the certificate; a setting of another mode would be silently ignored."""
        if self.mode == "acm" and self.certificate_arn is None:
            raise ValueError("mode 'acm' needs certificate_arn. To fix: set certificate_arn to the ACM certificate's "
                             "ARN, or use mode 'secret'")
        if self.mode != "acm" and self.certificate_arn is not None:
            raise ValueError(f"certificate_arn applies to mode 'acm' only, and mode is {self.mode!r}. To fix: set "
                             "mode to 'acm', or drop certificate_arn")
        if self.mode != "secret" and self.secret_name is not None:
            raise ValueError(f"secret_name applies to mode 'secret' only, and mode is {self.mode!r}. To fix: set "
                             "mode to 'secret', or drop secret_name")
        return self

    @property
    def encrypted(self) -> bool:
        return self.mode != "none"


class JwtIssuerSpec(Model):
    """The OIDC issuer whose JSON Web Tokens the gateway accepts."""

    issuer: str = Field(description="The tokens' `iss`, an https:// URL. Required.")
    audiences: list[str] = Field(min_length=1, description="Accepted `aud` values. Required (at least one).")
    jwks_uri: str = Field(description="Where the issuer publishes its public signing keys (JWKS), https://. Required.")
    tenant_claim: str = Field("tenant", description="The claim that names the caller's tenant. Defaults to 'tenant'.")

    _https = field_validator("issuer", "jwks_uri")(_https_url)
    _claim = field_validator("tenant_claim")(_claim_text)


# A tenant's request limit per model service when the spec states none: ten requests a second, refilled each minute.
DEFAULT_REQUESTS_PER_MINUTE = 600


class TenantSpec(Model):
    """A caller, named by its JWT claim or its API key's metadata, the model services it may call, and how much."""

    name: str = Field(max_length=253, description="The tenant claim's value (or API key's tenant). Required.")
    models: list[Name] = Field(
        min_length=1, description="Model services (by name) it may call, with their LoRA adapters. Required."
    )
    requests_per_minute: int = Field(
        DEFAULT_REQUESTS_PER_MINUTE,
        ge=1,
        description="Requests a minute the tenant may send to each model service it calls: a bucket per tenant and "
        "service on each gateway pod, refilled every minute; over it the gateway answers 429. Defaults to 600.",
    )
    tokens_per_minute: int | None = Field(
        None,
        ge=1,
        description="Prompt plus completion tokens a minute per model service, agentgateway only: the service is "
        "then reached through an AgentgatewayBackend (an LLM provider in front of its InferencePool) that reads each "
        "response's usage, so the limit holds back the next requests; Istio's gateway counts requests only. Defaults "
        "to none.",
    )

    _claim = field_validator("name")(_claim_text)


class EdgeAuthSpec(Model):
    """Authentication before routing: no request reaches a route without a valid token of an allowed tenant."""

    jwt: JwtIssuerSpec | None = Field(
        None,
        description="The token issuer. Defaults to none: no request can authenticate, so the gateway refuses every "
        "request until an issuer and tenants are set.",
    )
    api_key_secret: Name | None = Field(
        None,
        description="agentgateway only: a Secret in the serving namespace holding API keys, by reference (the stack "
        "never holds a key). Each entry is JSON with `key` or `keyHash` ('sha256:<hex>') and `metadata.tenant`, the "
        "tenant it authenticates. Defaults to none.",
    )
    tenants: list[TenantSpec] = Field(
        default_factory=list, description="Who may call which model service. Defaults to none (nobody)."
    )
    allow_anonymous: bool = Field(
        False,
        description="Let every request through without credentials (a closed test cluster only). The mandatory "
        "policy 'authenticated-routes' fails such a stack. Defaults to false.",
    )

    @model_validator(mode="after")
    def _tenants_need_an_issuer(self) -> "EdgeAuthSpec":
        """A tenant is a claim of a verified token: without an issuer nothing verifies it."""
        if self.allow_anonymous and (self.jwt is not None or self.api_key_secret is not None or self.tenants):
            raise ValueError("allow_anonymous lets every request through, which makes jwt, api_key_secret and tenants "
                             "meaningless. To fix: drop allow_anonymous, or drop jwt, api_key_secret and tenants")
        if self.tenants and self.jwt is None and self.api_key_secret is None:
            raise ValueError("tenants are named by a claim of a verified token or by an API key, and neither a jwt "
                             "issuer nor an api_key_secret is set. To fix: set jwt (issuer, audiences, jwks_uri), or "
                             "api_key_secret on agentgateway")
        names = [tenant.name for tenant in self.tenants]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"tenants {', '.join(repeated)} are listed more than once. To fix: list each tenant once, "
                             "with every model it may call")
        return self


# agentgateway keeps each tenant's bucket on a route as one rateLimit.conditional entry, of which the CRD allows 16
# (agentgateway/agentgateway 75b4e6ce controller/install/helm/agentgateway-crds/templates/
# agentgateway.dev_agentgatewaypolicies.yaml, traffic.rateLimit.conditional maxItems).
MAX_ROUTE_TENANTS = 16


def implementation_refusals(auth: EdgeAuthSpec, implementation: str) -> list[SpecError]:
    """What the gateway in use cannot check. Istio's verifies JWTs and counts requests in Envoy's local rate limit:
    API keys (an external authorizer there) and token counts (known only when a response ends) are agentgateway's.
    On agentgateway the API server would refuse the rate-limit policy of a service more tenants may call."""
    if implementation == "istio":
        refusals = [
            SpecError(f"gateway.auth.tenants[{i}].tokens_per_minute",
                      f"{tenant.tokens_per_minute} tokens a minute needs agentgateway, which counts each response's "
                      "tokens; Istio's gateway counts requests only",
                      "set gateway.implementation to 'agentgateway', or limit the tenant with requests_per_minute")
            for i, tenant in enumerate(auth.tenants) if tenant.tokens_per_minute is not None
        ]
        if auth.api_key_secret is not None:
            refusals.insert(0, SpecError(
                "gateway.auth.api_key_secret", f"{auth.api_key_secret!r}: API keys are checked by agentgateway only; "
                "Istio's gateway verifies JWTs", "set gateway.implementation to 'agentgateway', or use gateway.auth.jwt"))
        return refusals
    callers = Counter(model for tenant in auth.tenants for model in dict.fromkeys(tenant.models))
    return [
        SpecError("gateway.auth.tenants",
                  f"{count} tenants may call model service {model!r}, and agentgateway keeps at most "
                  f"{MAX_ROUTE_TENANTS} tenants' rate limits apart on one route (AgentgatewayPolicy "
                  "rateLimit.conditional)",
                  f"let at most {MAX_ROUTE_TENANTS} tenants call {model!r}")
        for model, count in sorted(callers.items())
        if count > MAX_ROUTE_TENANTS
    ]


def tenant_refusals(auth: EdgeAuthSpec, services: Collection[str]) -> list[SpecError]:
    """A tenant allowed a model service the stack does not have would be allowed nothing, silently."""
    return [
        SpecError(f"gateway.auth.tenants[{i}].models[{j}]", f"no model service is named {model!r}",
                  f"use one of {quoted(sorted(services))}" if services else "add the model service first")
        for i, tenant in enumerate(auth.tenants)
        for j, model in enumerate(tenant.models)
        if model not in services
    ]
