"""What wakes a service idled to zero: the endpoint picker's counters as llm-d-router v0.10.0 writes them.

Upstream (llm-d/llm-d-router v0.10.0):
* pkg/epp/requestcontrol/director.go `HandleRequest`: sets `reqCtx.IncomingModelName` to the body's `model` first,
  and with no endpoint candidates returns ServiceUnavailable ("failed to find endpoint candidates for serving the
  request") before anything is scheduled;
* pkg/epp/handlers/server.go:497: `RecordRequestCounter` (llm_d_epp_request_total) runs only after HandleRequest
  succeeded; server.go:356-358, deferred: `RecordRequestErrCounter` (llm_d_epp_request_error_total) runs for a
  request that ended in an error;
* pkg/epp/metrics/llm_d_router_metrics.go: both counters are labelled model_name, target_model_name, fairness_id,
  priority (the error counter also error_code); Prometheus creates a series at its first increment, and
  increase() needs two samples of a series (Prometheus docs, "Query functions", increase).
"""

from __future__ import annotations

import re
from pathlib import Path

import promql_parser as pp
import pytest

from inferstack.serving.autoscaling import activity_trigger, scaled_object_spec
from inferstack.serving.model_service import ScaleTarget
from inferstack.spec import LoraAdapterSpec
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def series_at_zero_replicas(namespace: str, requested: str) -> dict[str, str]:
    """The one series that moves when a request for `requested` reaches a picker with no pod."""
    return {"__name__": "llm_d_epp_request_error_total", "namespace": namespace, "model_name": requested,
            "target_model_name": requested, "fairness_id": "default-flow", "priority": "0",
            "error_code": "ServiceUnavailable"}


def selectors(node) -> list[pp.VectorSelector]:
    found = []
    if isinstance(node, pp.VectorSelector):
        return [node]
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    for attr in ("expr", "lhs", "rhs", "vector_selector"):
        child = getattr(node, attr, None)
        if child is not None:
            found += selectors(child)
    for arg in getattr(node, "args", None) or ():
        found += selectors(arg)
    return found


def matches(selector: pp.VectorSelector, labels: dict[str, str]) -> bool:
    if selector.name and selector.name != labels["__name__"]:
        return False
    for matcher in selector.matchers.matchers:
        value, op = labels.get(matcher.name, ""), str(matcher.op)
        if op.endswith("Re") or "Regex" in op or op == "=~":
            ok = re.fullmatch(matcher.value, value) is not None
        else:
            ok = value == matcher.value
        if ("Not" in op or op.startswith("!")) == ok:
            return False
    return True


@pytest.fixture(scope="module")
def dev():
    return load_stack(STACKS, "dev")


def wake_query(spec, model) -> str:
    return activity_trigger(spec, model, "http://prometheus")["metadata"]["query"]


def test_a_request_at_zero_replicas_moves_a_series_the_wake_trigger_reads(dev):
    model = next(m for m in dev.models if m.autoscaling.scale_to_zero)
    ast = pp.parse(wake_query(dev, model))
    moved = series_at_zero_replicas(dev.serving_namespace, model.name)
    assert any(matches(s, moved) for s in selectors(ast)), "no selector of the wake query reads the picker's errors"


def test_the_first_request_of_a_fresh_picker_wakes_the_service(dev):
    """The series is created at 1 by the first failed request, so increase() alone reads nothing for it."""
    model = next(m for m in dev.models if m.autoscaling.scale_to_zero)
    query = wake_query(dev, model)
    for counter in ("llm_d_epp_request_total", "llm_d_epp_request_error_total"):
        assert re.search(rf"count\({counter}\{{[^}}]*\}} unless {counter}\{{[^}}]*\}} offset 10m\)", query), counter
    pp.parse(query)


def test_requests_for_an_adapter_wake_its_base_service(dev):
    base = next(m for m in dev.models if m.autoscaling.scale_to_zero)
    model = base.model_copy(update={"lora_adapters": [
        LoraAdapterSpec(name="sql-v1", weights="s3://adapters/sql", rank=16),
        LoraAdapterSpec(name="chat", weights="s3://adapters/chat", rank=8),
    ]})
    ast = pp.parse(wake_query(dev, model))
    for requested in ("sql-v1", "chat", base.name):
        assert any(matches(s, series_at_zero_replicas(dev.serving_namespace, requested)) for s in selectors(ast))
    assert not any(matches(s, series_at_zero_replicas(dev.serving_namespace, "sql-v1-old")) for s in selectors(ast))
    # Another service's requests never wake this one.
    assert not any(matches(s, series_at_zero_replicas(dev.serving_namespace, "other")) for s in selectors(ast))


def test_only_scale_to_zero_services_get_a_wake_trigger(dev):
    for model in dev.models:
        target = ScaleTarget(kind="Deployment", api_version="apps/v1", name=model.name)
        triggers = [t["name"] for t in scaled_object_spec(dev, model, target, "http://p")["triggers"]]
        assert ("requests" in triggers) == model.autoscaling.scale_to_zero
