"""The decode pods' routing sidecar as llm-d-router v0.10.0 runs it: whom it forwards prompts to, who may tell it,
and how long it keeps a connection.

Upstream (llm-d/llm-d-router v0.10.0):
* pkg/sidecar/proxy/chat_completions.go:86-132: the sidecar POSTs the prompt to the host:port in
  `x-prefiller-host-port`, and with SSRF protection refuses one its allowlist does not hold (403);
* pkg/common/routing/common.go:12-26: the headers the sidecar reads as destinations;
* pkg/epp/handlers/request.go:75-150: the picker's ext_proc reply only sets headers (HeaderMutation.SetHeaders), so
  a client's own routing header reaches the sidecar whenever the picker does not overwrite it;
* pkg/sidecar/proxy/options.go:67,280,338,668-671: `--enable-ssrf-protection` needs `--inference-pool`
  (namespace/name); pkg/sidecar/proxy/allowlist.go:73-170: the allowlist lists and watches that InferencePool by
  name (a metadata.name field selector) and the pods its spec.selector.matchLabels selects, through client-go's
  in-cluster config; allowlist.go:360-395: a pod's IP and name are what it allows;
* pkg/sidecar/proxy/proxy.go:541-551 and proxy_helpers.go:140-142: every upstream connection, to prefill engines and
  to the local vLLM alike, is kept idle for 90 s; vLLM 0.33.0 vllm/envs.py:110,1135: VLLM_HTTP_TIMEOUT_KEEP_ALIVE 5 s.
Kubernetes: RBAC docs ("Referring to resources": list/watch restricted by resourceNames need a metadata.name field
selector); Envoy docs (HTTP header manipulation: route-level request_headers_to_remove is applied by the router
filter, after every other HTTP filter such as ext_proc; the header_mutation filter runs where it is placed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from stack_files import rendered_objects

sys.path.insert(0, str(Path(__file__).parent))
from test_serving_features import edited  # noqa: E402

from inferstack.engine import run_stack
from inferstack.engine.render import kubernetes_objects
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"
SERVICE = "qwen-32b-pd"
ROUTING_HEADERS = {"x-prefiller-host-port", "x-encoder-hosts-ports", "x-data-parallel-host-port",
                   "x-kv-cache-source-host-port"}
SIDECAR_IDLE_SECONDS = 90
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def render(spec: StackSpec, out: Path) -> list[dict]:
    code, objects = rendered_objects(spec, out)
    assert code == 0
    return objects


@pytest.fixture(scope="module", params=["istio", "agentgateway"])
def objects(request, tmp_path_factory):
    spec = load_stack(STACKS, "serving")
    if request.param == "istio":
        return request.param, render(spec, tmp_path_factory.mktemp(request.param))
    # Authentication is rendered for Istio only, so an agentgateway stack fails the mandatory authenticated-routes
    # rule and renders nothing: its objects are read from the program's recording, which runs no policy.
    data = spec.model_dump(mode="json", exclude_none=True)
    data["gateway"] = {**data.get("gateway", {}), "implementation": request.param}
    data["gateway"].pop("auth", None)
    return request.param, kubernetes_objects(run_stack(StackSpec.model_validate(data)))


def of_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def named(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_the_gateway_removes_every_routing_header_before_the_picker(objects):
    implementation, objects = objects
    (gateway,) = of_kind(objects, "Gateway")
    ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway["metadata"]["name"]}
    if implementation == "istio":
        (envoy_filter,) = [o for o in of_kind(objects, "EnvoyFilter") if o["metadata"]["name"].endswith("-request-headers")]
        assert envoy_filter["spec"]["targetRefs"] == [ref]
        (patch,) = [p for p in envoy_filter["spec"]["configPatches"]
                    if any("remove" in m for m in p["patch"]["value"]["typed_config"]["mutations"]["request_mutations"])]
        assert patch["applyTo"] == "HTTP_FILTER" and patch["match"]["context"] == "GATEWAY"
        # First in the chain: ahead of the picker's ext_proc and body-based routing.
        assert patch["patch"]["operation"] == "INSERT_FIRST"
        config = patch["patch"]["value"]["typed_config"]
        assert config["@type"].endswith("envoy.extensions.filters.http.header_mutation.v3.HeaderMutation")
        removed = {m["remove"] for m in config["mutations"]["request_mutations"]}
    else:
        (policy,) = [o for o in of_kind(objects, "AgentgatewayPolicy") if o["metadata"]["name"].endswith("-request-headers")]
        assert policy["spec"]["targetRefs"] == [ref] and policy["spec"]["traffic"]["phase"] == "PreRouting"
        removed = set(policy["spec"]["traffic"]["transformation"]["request"]["remove"])
    assert ROUTING_HEADERS <= removed   # with the picker's own hint headers (gateway.UNTRUSTED_ROUTING_HEADERS)


def test_no_route_removes_headers_after_the_picker_set_them(objects):
    """A route-level removal runs in Envoy's router filter, after ext_proc: it would strip the picker's header."""
    _, objects = objects
    for route in of_kind(objects, "HTTPRoute"):
        for rule in route["spec"]["rules"]:
            assert not [f for f in rule.get("filters", []) if f["type"] == "RequestHeaderModifier"]


def test_the_sidecar_forwards_prompts_only_to_its_services_prefill_pods(objects):
    _, objects = objects
    decode = named(objects, "Deployment", SERVICE)
    pod = decode["spec"]["template"]["spec"]
    (sidecar,) = [c for c in pod["initContainers"] if c["name"] == "routing-sidecar"]
    args = dict(a.removeprefix("--").split("=", 1) for a in sidecar["args"])
    assert args["enable-ssrf-protection"] == "true"
    namespace, pool_name = args["inference-pool"].split("/")
    assert namespace == decode["metadata"]["namespace"]
    pool = named(objects, "InferencePool", pool_name)
    assert pool["metadata"]["namespace"] == namespace and pool["apiVersion"].split("/")[0] == args["pool-group"]
    pods = [(d["metadata"]["name"], d["spec"]["template"]["metadata"]["labels"]) for d in of_kind(objects, "Deployment")]
    allowed = {name for name, labels in pods if selects(pool["spec"]["selector"], labels)}
    assert allowed == {f"{SERVICE}-prefill"}


def test_the_sidecar_may_read_its_allowlist_and_nothing_else_gets_a_token(objects):
    _, objects = objects
    decode = named(objects, "Deployment", SERVICE)
    pod = decode["spec"]["template"]["spec"]
    (sidecar,) = [c for c in pod["initContainers"] if c["name"] == "routing-sidecar"]
    pool_name = next(a for a in sidecar["args"] if a.startswith("--inference-pool=")).split("/")[1]
    assert pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}
    volume = next(v for v in pod["volumes"] if v["name"] == mounts[TOKEN_DIR])
    sources = volume["projected"]["sources"]
    assert any("serviceAccountToken" in s for s in sources) and any("configMap" in s for s in sources)
    for container in pod["containers"]:
        assert TOKEN_DIR not in {m["mountPath"] for m in container.get("volumeMounts", [])}
    bindings = [b for b in of_kind(objects, "RoleBinding")
                if {"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                    "namespace": decode["metadata"]["namespace"]} in b["subjects"]]
    rules = [rule for b in bindings for rule in named(objects, "Role", b["roleRef"]["name"])["rules"]]
    pools = [r for r in rules if "inferencepools" in r["resources"]]
    assert pools and all(r["resourceNames"] == [pool_name] for r in pools)
    assert {"list", "watch"} <= {verb for r in pools for verb in r["verbs"]}
    assert {"list", "watch"} <= {verb for r in rules if "pods" in r["resources"] for verb in r["verbs"]}


def test_every_engine_behind_a_sidecar_outlives_its_idle_connections(objects):
    _, objects = objects
    for name in (SERVICE, f"{SERVICE}-prefill"):
        pod = named(objects, "Deployment", name)["spec"]["template"]["spec"]
        (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
        env = {e["name"]: e.get("value") for e in vllm["env"]}
        assert int(env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) > SIDECAR_IDLE_SECONDS, name


def test_a_stack_without_prefill_decode_still_strips_the_headers(tmp_path):
    """The picker fails open and may skip P/D, so the strip guards every route, not only split services."""
    spec = load_stack(STACKS, "serving")
    # One engine for the whole service would need 7 replicas for its traffic within its SLO (slo-capacity): the
    # strip is what is tested here, so the service states neither.
    data = edited(spec, SERVICE, disaggregation=None, traffic=None, slo=None)
    objects = render(StackSpec.model_validate(data), tmp_path)
    assert of_kind(objects, "EnvoyFilter")
    assert not [p for p in of_kind(objects, "InferencePool") if p["metadata"]["name"].endswith("-prefill")]
