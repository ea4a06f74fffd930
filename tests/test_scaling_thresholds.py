"""Scaler thresholds from the throughput model (planning/scaling_thresholds.py), rendered and planned alike.

Upstream rules encoded here:
* vLLM 0.33.0 vllm/v1/metrics/loggers.py:528 `vllm:num_requests_running` and :538 `vllm:num_requests_waiting` are
  the per-engine gauges of running and waiting requests (labels model_name, engine); there is no gauge of prompt
  tokens still to compute, so a prefill engine's outstanding prompt tokens are its requests times their prompt.
* KEDA prometheus scaler (keda.sh/docs/2.x/scalers/prometheus): `metricType: AverageValue` divides the query's value
  by the replica count, so a service-wide sum against a threshold is a per-replica target.
* Kubernetes HPA (kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale, "Algorithm details"): no scale
  while desired/current is within the tolerance, 0.1 by default (--horizontal-pod-autoscaler-tolerance).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from inferstack.planning.creation_times import replica_parts
from inferstack.planning.scaling_thresholds import (
    HPA_TOLERANCE, check_slo_reachable, derive_threshold, metric_at, replica_capacity, role_of,
)
from inferstack.planning.sizing import checkpoint_bytes
from inferstack.presentation.summary import scalers
from inferstack.presentation.terminal import print_scalers
from inferstack.serving.autoscaling import metric_trigger, scaler_metric
from inferstack.spec import LatencySlo, StackSpec
from inferstack.spec.errors import SpecError
from inferstack.spec.pools import PoolHardware
from inferstack.stacks import load_stack
from inferstack.validation import validate
from rich.console import Console

STACKS = Path(__file__).resolve().parents[1] / "stacks"
PROMETHEUS = "http://prometheus:9090"
CHAT = 2  # prod's llama-8b-fp8, the service with an slo


def _with_scaling(stack: str, index: int, **update) -> StackSpec:
    spec = load_stack(STACKS, stack)
    models = list(spec.models)
    model = models[index]
    scaling = update.pop("autoscaling", {})
    models[index] = model.model_copy(update={**update, "autoscaling": model.autoscaling.model_copy(update=scaling)})
    return validate(spec.model_copy(update={"models": models})).stack


def _chat(**scaling) -> StackSpec:
    """prod with its SLO service's metric left to the model."""
    return _with_scaling("prod", CHAT, autoscaling={"metric": None, "target": None, **scaling})


def _disaggregated() -> StackSpec:
    """The serving stack's prefill/decode service with an SLO and its scalers left to the model."""
    return _with_scaling("serving", 0, slo=LatencySlo(ttft_ms=2000, itl_ms=50), autoscaling={"metric": None, "target": None})


def test_an_slo_without_a_stated_target_scales_on_running_sequences_at_the_derived_threshold():
    spec = _chat()
    model = spec.models[CHAT]
    trigger = metric_trigger(spec, model, PROMETHEUS)
    assert trigger["name"] == "running-sequences"
    assert trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["query"] == (
        'sum(vllm:num_requests_running{namespace="inference",model_name="llama-8b-fp8"})'
    )
    derived = derive_threshold(model, model, PoolHardware(spec.pool(model.pool)))
    assert derived is not None and derived.metric == "running_sequences"
    assert trigger["metadata"]["threshold"] == f"{derived.threshold:.10g}"
    assert 0 < derived.threshold < metric_at(role_of(model, model, PoolHardware(spec.pool(model.pool))),
                                             "running_sequences", derived.slo_rate)


def test_the_headroom_lets_a_ramp_at_the_stated_growth_reach_the_slo_load_as_the_new_replica_serves():
    """trigger load = r_slo / (1 + g)^(reaction / 60), reaction = polling + a cold start on a new node; the HPA acts
    once the metric passes target x (1 + tolerance) (kubernetes.io docs, horizontal-pod-autoscale, "Algorithm
    details"), so the target is the metric at the trigger load / (1 + tolerance)."""
    spec = _chat(traffic_growth_per_minute=0.1, polling_interval_seconds=30)
    model = spec.models[CHAT]
    hardware = PoolHardware(spec.pool(model.pool))
    derived = derive_threshold(model, model, hardware)
    cold_start = sum(s for _, _, s in replica_parts(checkpoint_bytes(model), model.weight_loader, new_node=True))
    assert derived.reaction_seconds == pytest.approx(30 + cold_start)
    assert derived.growth == pytest.approx(1.1 ** ((30 + cold_start) / 60))
    assert derived.slo_rate == pytest.approx(replica_capacity(role_of(model, model, hardware)))
    # Where the HPA first acts, grown for the reaction time, is the SLO load; there the metric is target x 1.1.
    assert derived.trigger_rate * derived.growth == pytest.approx(derived.slo_rate)
    role = role_of(model, model, hardware)
    at_trigger = metric_at(role, "running_sequences", derived.trigger_rate)
    assert derived.threshold == pytest.approx(at_trigger / (1 + HPA_TOLERANCE), abs=0.05)
    flat = derive_threshold(_chat(traffic_growth_per_minute=0.0).models[CHAT], model, hardware)
    assert flat.trigger_rate == pytest.approx(flat.slo_rate)
    assert flat.threshold > derived.threshold


def test_a_prefill_role_scales_on_outstanding_prompt_tokens_and_its_decode_role_on_running_sequences():
    spec = _disaggregated()
    decode, prefill = spec.models[0], spec.models[1]
    assert prefill.pd_role == "prefill"
    traffic = decode.traffic
    prompt = traffic.mean_input_tokens - traffic.shared_prefix_tokens
    selector = 'namespace="inference",model_name="qwen-32b-pd",llm_d_ai_role="prefill"'
    trigger = metric_trigger(spec, prefill, PROMETHEUS)
    assert trigger["name"] == "prompt-tokens" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["query"] == (
        f"sum(vllm:num_requests_running{{{selector}}} + vllm:num_requests_waiting{{{selector}}}) * {prompt}"
    )
    assert "TTFT 2000 ms" in scaler_metric(spec, prefill).derivation
    decoding = metric_trigger(spec, decode, PROMETHEUS)
    assert decoding["name"] == "running-sequences"
    assert "ITL 50 ms" in scaler_metric(spec, decode).derivation


def test_a_stated_metric_or_target_stands():
    prod = validate(load_stack(STACKS, "prod")).stack
    stated = metric_trigger(prod, prod.models[0], PROMETHEUS)
    assert (stated["name"], stated["metadata"]["threshold"]) == ("queue-depth", "8")
    assert scaler_metric(prod, prod.models[0]).derivation == "stated"
    # prod's SLO service names epp_queue: its default target, not a derived one.
    assert scaler_metric(prod, prod.models[CHAT]).metric == "epp_queue"
    own = _chat(metric="running_sequences", target=12)
    assert scaler_metric(own, own.models[CHAT]).threshold == "12"


def test_the_plan_prints_the_figure_the_scaledobject_states_and_how_it_was_derived():
    spec = _chat()
    row = next(r for r in scalers(spec) if r["engine"] == "llama-8b-fp8")
    trigger = metric_trigger(spec, spec.models[CHAT], PROMETHEUS)
    assert (row["trigger"], row["threshold"]) == (trigger["name"], trigger["metadata"]["threshold"])
    assert row["derivation"].startswith("the SLO (TTFT 500 ms, ITL 40 ms) breaks at")
    console = Console(width=400, record=True)
    print_scalers(scalers(spec), console)
    assert f"llama-8b-fp8: running-sequences > {row['threshold']}: the SLO" in console.export_text()


@pytest.mark.parametrize(("scaling", "field", "words"), [
    ({"metric": "running_sequences", "target": None}, "autoscaling.target", "no default target"),
    ({"metric": "prompt_tokens", "target": 4000.0}, "autoscaling.metric", "also decodes"),
])
def test_the_new_metrics_are_refused_where_they_mean_nothing(scaling, field, words):
    with pytest.raises(SpecError) as caught:
        _with_scaling("prod", CHAT, autoscaling=scaling)
    assert caught.value.path == f"models[{CHAT}].{field}"
    assert words in caught.value.problem


@pytest.mark.parametrize(("slo", "field", "words"), [
    (LatencySlo(itl_ms=3), "slo.itl_ms", "3 ms is below one decode step alone on L40S"),
    (LatencySlo(ttft_ms=1), "slo.ttft_ms", "1 ms is below one request's time to first token alone on L40S"),
])
def test_an_slo_below_one_request_alone_is_refused_at_its_field_with_the_reachable_figure(slo, field, words):
    spec = validate(load_stack(STACKS, "prod")).stack
    model = spec.models[CHAT].model_copy(update={"slo": slo})
    with pytest.raises(SpecError) as caught:
        check_slo_reachable(f"models[{CHAT}]", model, model, PoolHardware(spec.pool(model.pool)))
    error = caught.value
    assert error.path == f"models[{CHAT}].{field}"
    assert words in error.problem
    reachable = float(error.fix.split(" to ")[1].split(" ")[0])
    assert reachable > (slo.itl_ms or slo.ttft_ms) and not math.isinf(reachable)


def test_a_reachable_slo_passes():
    spec = validate(load_stack(STACKS, "prod")).stack
    model = spec.models[CHAT]
    check_slo_reachable(f"models[{CHAT}]", model, model, PoolHardware(spec.pool(model.pool)))


def test_a_prefill_role_on_prompt_tokens_needs_the_services_traffic():
    spec = load_stack(STACKS, "serving")
    models = list(spec.models)
    service = models[0]
    role = service.disaggregation.prefill
    scaling = role.autoscaling.model_copy(update={"metric": "prompt_tokens", "target": 4000.0})
    models[0] = service.model_copy(update={
        "traffic": None,
        "disaggregation": service.disaggregation.model_copy(update={"prefill": role.model_copy(update={"autoscaling": scaling})}),
    })
    with pytest.raises(SpecError) as caught:
        validate(spec.model_copy(update={"models": models}))
    assert caught.value.path == "models[0].disaggregation.prefill.autoscaling.metric"
    assert "states no traffic" in caught.value.problem


def test_an_unreachable_slo_stops_the_cli_with_exit_2_and_one_line(tmp_path):
    """End to end: a prod whose chat service asks an ITL no decode step reaches is refused at its field, before
    anything is rendered (the brief: bad input is one message, exit 2, nothing created)."""
    from stack_files import PROD, edited, refused_stack_file

    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = edited(PROD, ("slo=LatencySlo(ttft_ms=500, itl_ms=40)", "slo=LatencySlo(ttft_ms=500, itl_ms=1)"))
    message = refused_stack_file(stacks, tmp_path / "out", "prod.py", text)
    assert "slo.itl_ms: 1 ms is below one decode step alone" in message and not (tmp_path / "out").exists()


def test_a_growth_that_leaves_a_target_below_one_is_refused_at_its_field():
    """Kubernetes refuses an HPA target that is not positive (pkg/apis/autoscaling/validation/validation.go
    validateMetricTarget: averageValue "must be positive"); below one sequence it would scale on any load."""
    with pytest.raises(SpecError) as caught:   # the stack's validation runs the check
        _chat(traffic_growth_per_minute=5)
    assert caught.value.path == f"models[{CHAT}].autoscaling.traffic_growth_per_minute"
    assert "below one" in str(caught.value) and "To fix" in str(caught.value)


@pytest.mark.parametrize(("slo", "field", "words"), [
    (LatencySlo(ttft_ms=1, itl_ms=50), "slo.ttft_ms", "its prefill engine: 1 ms is below one request's time to first"),
    (LatencySlo(ttft_ms=2000, itl_ms=1), "slo.itl_ms", "1 ms is below one decode step alone"),
])
def test_each_prefill_decode_role_answers_for_its_part_of_an_unreachable_slo(slo, field, words):
    """A disaggregated service's prefill engine computes its prompts (the TTFT), its decode engine the tokens after
    (the ITL): each is held to its part, and the refusal lands on the service's slo field."""
    with pytest.raises(SpecError) as caught:
        _with_scaling("serving", 0, slo=slo, autoscaling={"metric": None, "target": None})
    assert caught.value.path == f"models[0].{field}"
    assert words in caught.value.problem
