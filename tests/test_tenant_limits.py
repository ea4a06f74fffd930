"""Per-tenant limits and fairness on the Istio gateway, evaluated the way Envoy and the endpoint picker apply them.

Upstream rules the evaluator encodes:
* Envoy's HTTP filter chain on an Istio Gateway (istio/istio 1.30.3 pilot/pkg/networking/core/listener_builder.go,
  buildHTTPConnectionManager): authn filters (jwt_authn), then authz (rbac), then the picker's ext_proc
  (pilot/pkg/xds/filters/filters.go InferencePoolExtProc, `envoy.filters.http.ext_proc`), then the router; an
  EnvoyFilter HTTP_FILTER patch INSERT_FIRST puts its filter before all of them, INSERT_BEFORE before its subFilter.
* Envoy's JWT filter copies a verified token's claim into a header (claim_to_headers, which Istio sets from
  RequestAuthentication jwtRules[].outputClaimToHeaders: pilot/pkg/security/authn/policy_applier.go).
* Envoy's local rate limit (envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit; the route-level pattern
  of istio/istio 1.30.3 samples/ratelimit/local-rate-limit-service.yaml): each route rate_limits entry yields a
  descriptor when every action yields an entry (request_headers: the header's value, none when absent;
  header_value_match: (descriptor_key, descriptor_value) when the headers match); a request spends one token of each
  configured descriptor equal to one it yields, and of the default bucket when it yields none
  (always_consume_default_token_bucket false); an empty bucket answers 429; buckets refill every fill_interval.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
import pytest
import yaml
from rich.console import Console

from kube_validation import assert_valid
from test_edge_auth import Request, istio_decision, token
from inferstack.engine import run_stack
from inferstack.engine.render import kubernetes_objects
from inferstack.serving import gateway, names
from inferstack.spec.edge import DEFAULT_REQUESTS_PER_MINUTE
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"
GATEWAY = "inference-gateway"


@pytest.fixture(scope="module")
def prod():
    return load_stack(STACKS, "prod")


@pytest.fixture(scope="module")
def prod_objects(prod):
    return kubernetes_objects(run_stack(prod))


def _envoy_filter(objects: list[dict], name: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == "EnvoyFilter" and o["metadata"]["name"] == name]
    return found


def _patch(envoy_filter: dict, apply_to: str) -> dict:
    (patch,) = [p for p in envoy_filter["spec"]["configPatches"] if p["applyTo"] == apply_to]
    return patch


class Gateway:
    """One gateway pod: the edge's header filters, Istio's authentication and authorization, then the rate limit,
    for the rendered objects; one fill interval (a minute) of buckets."""

    def __init__(self, objects: list[dict], spec) -> None:
        self.objects = objects
        headers_filter = _envoy_filter(objects, f"{GATEWAY}-request-headers")
        (strip,) = [p["patch"]["value"] for p in headers_filter["spec"]["configPatches"]
                    if p["patch"]["value"]["name"] == gateway.STRIP_FILTER]
        self.removed = {m["remove"] for m in strip["typed_config"]["mutations"]["request_mutations"]}
        (authentication,) = [o for o in objects if o["kind"] == "RequestAuthentication"]
        (rule,) = authentication["spec"]["jwtRules"]
        self.claim_headers = {c["header"]: c["claim"] for c in rule["outputClaimToHeaders"]}
        limits = _envoy_filter(objects, names.gateway_rate_limits(spec))
        route = _patch(limits, "HTTP_ROUTE")
        # A route's own typed_per_filter_config would give each route (each name a service answers to) buckets of
        # its own (envoyproxy/envoy#14732); the buckets are the filter's, shared by every route.
        assert set(route["patch"]["value"]) == {"route"}
        self.rate_limits = route["patch"]["value"]["route"]["rate_limits"]
        config = _patch(limits, "HTTP_FILTER")["patch"]["value"]["typed_config"]["value"]
        self.always_default = config["always_consume_default_token_bucket"]
        self.buckets = {tuple((e["key"], e["value"]) for e in d["entries"]): d["token_bucket"]["max_tokens"]
                        for d in config["descriptors"]}
        self.default_bucket = config["token_bucket"]["max_tokens"]
        self.spent: Counter = Counter()

    def _descriptors(self, headers: dict[str, str]) -> list[tuple[tuple[str, str], ...]]:
        out = []
        for entry in self.rate_limits:
            pairs = []
            for action in entry["actions"]:
                if "request_headers" in action:
                    value = headers.get(action["request_headers"]["header_name"])
                    if value is None:
                        break
                    pairs.append((action["request_headers"]["descriptor_key"], value))
                else:
                    match = action["header_value_match"]
                    if not all(headers.get(h["name"]) == h["string_match"]["exact"] for h in match["headers"]):
                        break
                    pairs.append((match["descriptor_key"], match["descriptor_value"]))
            else:
                out.append(tuple(pairs))
        return out

    def send(self, request: Request) -> int:
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in self.removed}
        headers[gateway.MODEL_HEADER.lower()] = request.model          # body-based routing, from the body
        status = istio_decision(self.objects, GATEWAY, request)
        if status != 200:
            return status
        for header, claim in self.claim_headers.items():
            headers[header] = str(request.token.claims[claim])
        matched = [d for d in self._descriptors(headers) if d in self.buckets]
        spend = [*matched, *(["default"] if self.always_default or not matched else [])]
        limits = {**self.buckets, "default": self.default_bucket}
        if any(self.spent[key] >= limits[key] for key in spend):
            return 429
        self.spent.update(spend)
        return 200


def test_each_tenant_spends_only_its_own_bucket_per_service(prod, prod_objects):
    edge = Gateway(prod_objects, prod)
    search = next(t for t in prod.gateway.auth.tenants if t.name == "search")
    assert search.requests_per_minute == DEFAULT_REQUESTS_PER_MINUTE
    statuses = [edge.send(Request("llama-8b-fp8", token("search"))) for _ in range(search.requests_per_minute + 1)]
    assert statuses.count(200) == search.requests_per_minute and statuses[-1] == 429
    assert edge.send(Request("llama-70b", token("search"))) == 200       # its bucket for another service is full
    legal = [edge.send(Request("llama-70b-long", token("legal"))) for _ in range(121)]
    assert legal.count(200) == 120 and legal[-1] == 429                 # the stack states 120 for legal


def test_a_client_cannot_spend_another_tenants_bucket(prod, prod_objects):
    """The fairness header is removed at the edge and set from the verified claim, so a forged one counts for the
    caller's own tenant, and a request refused by authentication spends nothing."""
    edge = Gateway(prod_objects, prod)
    forged = {gateway.FAIRNESS_HEADER: "legal", "x-gateway-inference-fairness-id": "legal"}
    assert {gateway.FAIRNESS_HEADER, *gateway.DEPRECATED_PICKER_HEADERS} <= edge.removed
    for _ in range(5):
        assert edge.send(Request("llama-8b-fp8", token("search"), headers=forged)) == 200
    assert edge.spent[(("tenant", "search"), ("service", "llama-8b-fp8"))] == 5
    assert not any(key[0] == ("tenant", "legal") for key in edge.spent if key != "default")
    assert edge.send(Request("llama-8b-fp8")) == 403 and sum(edge.spent.values()) == 5


def test_the_rate_limit_runs_after_authorization_and_before_the_picker(prod, prod_objects):
    """listener_builder.go's order for a Gateway with InferencePools, with the patch applied as Istio applies
    INSERT_BEFORE (istio.io docs/reference/config/networking/envoy-filter, Patch.Operation)."""
    chain = ["istio.metadata_exchange", "envoy.filters.http.jwt_authn", "istio_authn", "envoy.filters.http.rbac",
             gateway.EXT_PROC_FILTER, "envoy.filters.http.grpc_stats", "envoy.filters.http.router"]
    patch = _patch(_envoy_filter(prod_objects, names.gateway_rate_limits(prod)), "HTTP_FILTER")
    assert patch["match"]["context"] == "GATEWAY" and patch["patch"]["operation"] == "INSERT_BEFORE"
    before = patch["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"]
    chain.insert(chain.index(before), patch["patch"]["value"]["name"])
    position = chain.index(gateway.LOCAL_RATE_LIMIT_FILTER)
    assert chain.index("envoy.filters.http.rbac") < position < chain.index(gateway.EXT_PROC_FILTER)


def test_the_limit_objects_validate_against_the_upstream_schemas(prod_objects):
    """Istio 1.30.3 envoyfilter_v1alpha3.json and requestauthentication_v1.json (unknown fields rejected)."""
    edge = [o for o in prod_objects if o["kind"] in ("EnvoyFilter", "RequestAuthentication")]
    assert sorted(o["kind"] for o in edge) == ["EnvoyFilter", "EnvoyFilter", "RequestAuthentication"]
    assert_valid(edge)


def test_without_tenants_no_limits_are_rendered(prod):
    closed = prod.model_copy(update={"gateway": prod.gateway.model_copy(update={"auth": type(prod.gateway.auth)()})})
    objects = kubernetes_objects(run_stack(closed))
    assert not [o for o in objects if o["kind"] == "EnvoyFilter" and o["metadata"]["name"].endswith("rate-limits")]


def test_the_picker_queues_each_tenant_apart_by_priority(prod, prod_objects):
    """llm-d-router v0.10.0: flow control runs only with its feature gate (pkg/epp/flowcontrol/README.md); a band's
    fairnessPolicyRef names a plugin of the config (pkg/epp/config/loader/flowcontrol.go resolvePlugin), and
    round-robin takes the tenants' queues in turn (plugins/flowcontrol/fairness/roundrobin/README.md); queues are
    keyed on the fairness header (pkg/epp/metadata/consts.go FlowFairnessIDKey) and the InferenceObjective's
    priority; defaultRequestTTL bounds the wait (apix/config/v1alpha1 FlowControlConfig)."""
    for config_map in (o for o in prod_objects if o["kind"] == "ConfigMap" and gateway.EPP_CONFIG_FILE in o.get("data", {})):
        config = yaml.safe_load(config_map["data"][gateway.EPP_CONFIG_FILE])
        assert "flowControl" in config["featureGates"]
        declared = {p.get("name", p["type"]) for p in config["plugins"]}
        flow = config["flowControl"]
        assert flow["defaultPriorityBand"]["fairnessPolicyRef"] == "round-robin-fairness-policy" in declared
        assert flow["saturationDetector"]["pluginRef"] in declared
        assert flow["defaultRequestTTL"] == f"{prod.gateway.request_timeout_seconds}s"
    assert gateway.FAIRNESS_HEADER == "x-llm-d-inference-fairness-id"


def test_the_picker_holds_requests_only_past_where_the_scaler_fires(prod, prod_objects):
    """With flow control on, the picker holds a saturated pool's requests itself: a pod's score is max(waiting /
    queueDepthThreshold, KV use / kvCacheUtilThreshold) and the pool saturates at their average near 1 (llm-d-router
    v0.10.0 saturationdetector/utilization/README.md, config.go defaults 5 and 0.8). The HPA scales only once the
    metric exceeds its target by the tolerance (kubernetes.io docs, horizontal-pod-autoscale, "Algorithm details":
    0.1). So vLLM's queue or KV use must be able to pass target x 1.1 below the detector's thresholds, or the scaler
    never fires; with the defaults, prod's queue-depth target 8 and kv-cache target 0.8 never would."""
    from inferstack.serving.autoscaling import scaler_metric

    pickers = {o["metadata"]["name"]: yaml.safe_load(o["data"][gateway.EPP_CONFIG_FILE])
               for o in prod_objects if o["kind"] == "ConfigMap" and gateway.EPP_CONFIG_FILE in o.get("data", {})}
    checked = set()
    for model in prod.models:
        if model.pd_role == "prefill" or names.endpoint_picker(model) not in pickers:
            continue
        config = pickers[names.endpoint_picker(model)]
        (detector,) = [p for p in config["plugins"]
                       if p.get("name") == config["flowControl"]["saturationDetector"]["pluginRef"]]
        assert detector["type"] == "utilization-detector"
        limits, chosen = detector["parameters"], scaler_metric(prod, model)
        fires_at = float(chosen.threshold) * 1.1
        if chosen.metric in ("queue_depth", "epp_queue"):
            assert limits["queueDepthThreshold"] > fires_at, model.name
        if chosen.metric == "kv_cache":
            assert fires_at < limits["kvCacheUtilThreshold"] <= 1.0, model.name
        checked.add(chosen.metric)
    assert {"queue_depth", "kv_cache", "epp_queue"} <= checked


def test_the_plan_prints_limits_beside_capacity_and_warns_above_it(prod):
    from inferstack.presentation.summary import edge, throughput
    from inferstack.presentation.terminal import Warnings, print_edge

    tenants = [t.model_copy(update={"requests_per_minute": 50_000}) if t.name == "search" else t
               for t in prod.gateway.auth.tenants]
    greedy = prod.model_copy(update={"gateway": prod.gateway.model_copy(update={
        "auth": prod.gateway.auth.model_copy(update={"tenants": tenants})})})
    estimates = throughput(greedy)
    summary = edge(greedy, estimates)
    capacity = {row["model"]: row["capacity_requests_per_minute"] for row in estimates["models"] if "error" not in row}
    rows = {(limit["tenant"], limit["model"]): limit for limit in summary["limits"]}
    assert rows[("search", "llama-70b")]["capacity_requests_per_minute"] == capacity["llama-70b"] < 50_000
    assert rows[("legal", "llama-70b-long")]["requests_per_minute"] == 120
    console, warnings = Console(record=True, width=200, file=io.StringIO()), Warnings()
    print_edge(summary, console, warnings)
    text = console.export_text()
    assert "Tenant limits" in text and "50,000" in text
    warned = [str(message) for _, message in warnings.items]
    assert any("the tenants may send llama-70b 50,000 requests/min together" in m for m in warned)
    assert not any("llama-70b-long" in m for m in warned)
    services = {s["model"]: s for s in summary["services"]}
    assert services["llama-70b"]["exceeds_capacity"] and not services["llama-70b-long"]["exceeds_capacity"]


def test_the_warning_counts_every_tenant_of_a_service_together(prod):
    """Two tenants each under a service's capacity can still admit more than it together."""
    from inferstack.presentation.summary import edge, throughput

    capacity = {r["model"]: r["capacity_requests_per_minute"] for r in throughput(prod)["models"] if "error" not in r}
    half = int(capacity["llama-70b"] * 0.6)
    tenants = [t.model_copy(update={"requests_per_minute": half}) for t in prod.gateway.auth.tenants]
    tenants[1] = tenants[1].model_copy(update={"models": ["llama-70b-long", "llama-70b"]})
    both = prod.model_copy(update={"gateway": prod.gateway.model_copy(update={
        "auth": prod.gateway.auth.model_copy(update={"tenants": tenants})})})
    summary = edge(both, throughput(both))
    (service,) = [s for s in summary["services"] if s["model"] == "llama-70b"]
    assert service["admitted_requests_per_minute"] == 2 * half and service["exceeds_capacity"]
    assert all(limit["requests_per_minute"] < capacity["llama-70b"] for limit in summary["limits"])


def test_capacity_is_what_max_replicas_carry_within_the_slo(prod):
    """The capacity is the highest rate at which the service's max replicas still meet its SLO: a little more
    misses it (planning/service_performance.capacity_at_slo, the same load model as the replica count)."""
    from inferstack.planning.load import at_request_rate
    from inferstack.planning.service_performance import (
        _meets, engine_for, service_estimate, workload_of,
    )
    from inferstack.spec.pools import PoolHardware

    model = next(m for m in prod.models if m.name == "llama-70b")
    hardware = PoolHardware(prod.pool(model.pool))
    estimate = service_estimate(model, hardware, region=prod.region, node_usd_per_hour=1.0)
    engine, workload = engine_for(model, hardware), workload_of(model.traffic)
    per_engine = estimate.capacity_requests_per_second / (model.autoscaling.max_replicas * model.data_parallel)
    assert _meets(at_request_rate(engine, workload, per_engine), model.slo)
    assert not _meets(at_request_rate(engine, workload, per_engine * 1.01), model.slo)
    assert estimate.capacity_requests_per_second >= estimate.traffic_requests_per_second


def test_the_html_page_shows_the_endpoint_and_its_limits(prod):
    from inferstack.presentation.html import render_html
    from inferstack.presentation.summary import build_plan

    page = render_html(build_plan(prod, run_stack(prod)))
    section = page[page.index('<h2 id="endpoint">'):page.index('<h2 id="serving">')]
    assert "search (llama-70b, llama-8b-fp8, bge-embed)" in section and "round-robin" in section
    assert "<td>legal</td><td>llama-70b-long</td><td class=\"num\">120</td>" in section


def test_a_services_lora_adapters_share_its_bucket():
    """Each name a service answers to is an Envoy route of its own; the buckets are the filter's, so a tenant's
    requests for the service and its adapters spend one bucket (not one per route)."""
    from inferstack.spec.edge import EdgeAuthSpec, JwtIssuerSpec, TenantSpec

    serving = load_stack(STACKS, "serving")
    auth = EdgeAuthSpec(jwt=JwtIssuerSpec(issuer="https://login.acme.example", audiences=["inference-prod"],
                                          jwks_uri="https://login.acme.example/.well-known/jwks.json"),
                        tenants=[TenantSpec(name="search", models=["llama-8b-lora"], requests_per_minute=3)])
    spec = serving.model_copy(update={"gateway": serving.gateway.model_copy(update={"auth": auth})})
    edge = Gateway(kubernetes_objects(run_stack(spec)), spec)
    adapters = [adapter.name for adapter in spec.model_service("llama-8b-lora").lora_adapters]
    sent = [edge.send(Request(name, token("search"))) for name in ("llama-8b-lora", adapters[0], adapters[1])]
    assert sent == [200, 200, 200] and edge.send(Request(adapters[2], token("search"))) == 429


def test_every_picker_control_header_a_client_could_steer_with_is_removed_at_the_edge(prod, prod_objects):
    """llm-d-router v0.10.0 pkg/epp/util/request/headers.go InputControlHeaders, with metadata/consts.go
    HeaderNames' deprecated aliases: the fairness id, the objective, the model-name rewrite, the endpoint subset and
    the SLO hints (the video metadata describes the request itself and stays)."""
    edge = Gateway(prod_objects, prod)
    control = {"x-llm-d-inference-fairness-id", "x-gateway-inference-fairness-id", "x-gateway-inference-objective",
               "x-llm-d-model-name-rewrite", "x-gateway-model-name-rewrite", "x-gateway-destination-endpoint-subset",
               "x-llm-d-slo-ttft-ms", "x-slo-ttft-ms", "x-llm-d-slo-tpot-ms", "x-slo-tpot-ms"}
    assert control <= edge.removed   # the objective's current name is overwritten, not removed
