"""A tier's priority reaches the endpoint picker the one way llm-d-router v0.10.0 reads it: a request header naming an
InferenceObjective.

Upstream:
* llm-d-router v0.10.0 pkg/epp/metadata/consts.go:42 (ObjectiveKey `x-llm-d-inference-objective`),
  pkg/epp/handlers/request.go:54 (read from the request headers), pkg/epp/requestcontrol/director.go
  `getInferenceObjective` and pkg/epp/datastore/datastore.go:235 (looked up by name; none found is priority 0);
* GAIE v1.5.0 config/charts/body-based-routing/templates/istio.yaml: the chart's ext_proc filter is
  `envoy.filters.http.ext_proc.bbr`, inserted first (values.yaml provider.istio.envoyFilter.operation), and sets
  the routing header; Istio EnvoyFilter docs: patches of a higher `priority` are applied later, and INSERT_AFTER
  needs the filter it names to be there already;
* Envoy docs (HTTP header manipulation): route-level header additions are applied by the router filter, after
  every other HTTP filter, so an HTTPRoute RequestHeaderModifier would name the objective after the picker ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stack_files import rendered_objects

from inferstack.engine import run_stack
from inferstack.engine.render import kubernetes_objects
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack
from inferstack.serving.pods import priority_value

STACKS = Path(__file__).resolve().parents[1] / "stacks"
OBJECTIVE_HEADER = "x-llm-d-inference-objective"
BBR_FILTER = "envoy.filters.http.ext_proc.bbr"


def render(spec: StackSpec, out: Path) -> list[dict]:
    code, objects = rendered_objects(spec, out)
    assert code == 0
    return objects


@pytest.fixture(scope="module", params=[("istio", True), ("istio", False), ("agentgateway", True)])
def rendered(request, tmp_path_factory):
    implementation, bbr = request.param
    spec = load_stack(STACKS, "serving")
    data = spec.model_dump(mode="json", exclude_none=True)
    data["gateway"] = {**data.get("gateway", {}), "implementation": implementation, "body_based_routing": bbr}
    spec = StackSpec.model_validate(data)
    if implementation == "istio":
        return request.param, spec, render(spec, tmp_path_factory.mktemp(implementation))
    # The serving stack names no tenant: its objects are read from the program's recording, which runs no policy.
    return request.param, spec, kubernetes_objects(run_stack(spec))


def _request_headers(obj: dict) -> bool:
    """The gateway's request-headers policy (serving/names.py request_headers_policy), beside its edge policies."""
    return obj["metadata"]["name"].endswith("-request-headers")


def objective_source(objects, implementation: str, bbr: bool) -> str:
    """What the gateway sets the objective header from, checking it is set before the picker runs."""
    if implementation == "istio":
        (envoy_filter,) = [o for o in objects if o["kind"] == "EnvoyFilter" and _request_headers(o)]
        assert envoy_filter["spec"]["priority"] > 0           # after the body-based-routing chart's (priority 0)
        for patch in envoy_filter["spec"]["configPatches"]:
            for mutation in patch["patch"]["value"]["typed_config"]["mutations"]["request_mutations"]:
                header = mutation.get("append", {}).get("header", {})
                if header.get("key") == OBJECTIVE_HEADER:
                    assert mutation["append"]["append_action"] == "OVERWRITE_IF_EXISTS_OR_ADD"  # a client's is replaced
                    where = patch["match"]["listener"]["filterChain"]["filter"]
                    if bbr:
                        assert patch["patch"]["operation"] == "INSERT_AFTER" and where["subFilter"]["name"] == BBR_FILTER
                    return header["value"]
        raise AssertionError("no filter sets the objective header")
    (policy,) = [o for o in objects if o["kind"] == "AgentgatewayPolicy" and _request_headers(o)]
    assert policy["spec"]["traffic"]["phase"] == "PreRouting"
    values = {s["name"]: s["value"] for s in policy["spec"]["traffic"]["transformation"]["request"]["set"]}
    return values[OBJECTIVE_HEADER]


def test_the_objective_header_carries_the_requested_model(rendered):
    (implementation, bbr), _, objects = rendered
    source = objective_source(objects, implementation, bbr)
    # The routing header (set from the body's model, or by the client without body-based routing) or the body itself.
    assert source in ("%REQ(x-gateway-model-name)%", "json(request.body).model", 'request.headers["x-gateway-model-name"]')


def test_every_requested_model_names_an_objective_of_its_tier(rendered):
    _, spec, objects = rendered
    objectives = {o["metadata"]["name"]: o for o in objects if o["kind"] == "InferenceObjective"}
    routes = [o for o in objects if o["kind"] == "HTTPRoute"]
    for route in routes:
        for rule in route["spec"]["rules"]:
            (backend,) = rule["backendRefs"]
            for match in rule["matches"]:
                (header,) = match["headers"]
                objective = objectives[header["value"]]
                assert objective["spec"]["poolRef"]["name"] == backend["name"]
                service = spec.model_service(backend["name"])
                assert objective["spec"]["priority"] == priority_value(spec, service.tier)
