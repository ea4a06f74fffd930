"""The mandatory slo-capacity rule (policies/slo_capacity.py) and the plan.json field CI reads, each shown to fail
with one thing broken.

Upstream rules encoded here:
* KEDA ScaledObject spec (keda.sh/docs/2.x/reference/scaledobject-spec): `maxReplicaCount` is the most replicas the
  HPA KEDA creates may scale the target to.
* Kubernetes apps/v1 DeploymentSpec (kubernetes/api apps/v1/types.go `Replicas`): "Defaults to 1", the count a
  workload without a scaler runs.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from pulumi_policy import EnforcementLevel

from inferstack.engine import run_stack
from inferstack.planning.scaling_thresholds import replica_capacity, role_of, slo_capacity as service_slo_capacity
from inferstack.policies.rules import POLICIES
from inferstack.policies.runner import plan_policy_config, run_policies, spec_policy_config
from inferstack.policies.slo_capacity import SERVICES, slo_capacity
from inferstack.presentation.summary import throughput
from inferstack.spec import LatencySlo, StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
CHAT = 2  # prod's llama-8b-fp8: traffic and an slo, max 6 replicas
SCALED_OBJECT = "prod-serving-llama-8b-fp8-autoscaler-scaledobject"


def _prod() -> StackSpec:
    return validate(load_stack(STACKS, "prod")).stack


@functools.cache
def _rendered() -> str:
    return json.dumps([r.as_dict() for r in run_stack(load_stack(STACKS, "prod")).resources])


def rendered() -> list[dict[str, Any]]:
    return json.loads(_rendered())


def _result(resources: list[dict[str, Any]], config: dict[str, Any]):
    return next(r for r in run_policies(resources, "prod", config) if r.name == slo_capacity.name)


def test_the_rule_is_mandatory_in_the_pack():
    assert slo_capacity.name == "slo-capacity" and slo_capacity in POLICIES
    assert slo_capacity.enforcement_level == EnforcementLevel.MANDATORY


def test_the_needed_replicas_are_the_traffic_over_what_one_replica_carries_within_the_slo():
    spec = _prod()
    model = spec.models[CHAT]
    hardware = PoolHardware(spec.pool(model.pool))
    found = service_slo_capacity(model, model, hardware)
    per_replica = replica_capacity(role_of(model, model, hardware))
    assert found.replicas_needed == -(-model.traffic.requests_per_second // per_replica)
    assert (found.max_replicas, found.holds) == (6, found.replicas_needed <= 6)


def test_prod_holds_its_slo_and_passes():
    spec = _prod()
    config = spec_policy_config(spec)
    assert config[slo_capacity.name][SERVICES] == [
        {"service": row["model"], "replicasNeeded": row["slo_capacity"]["replicas_needed"]}
        for row in throughput(spec)["models"] if row.get("slo_capacity")
    ]
    result = _result(rendered(), config)
    assert result.violations == [] and not result.blocking


def test_max_replicas_below_what_the_slo_needs_fails():
    spec = _prod()
    resources = rendered()
    scaled = next(r for r in resources if r["name"] == SCALED_OBJECT)
    needed = next(e["replicasNeeded"] for e in spec_policy_config(spec)[slo_capacity.name][SERVICES]
                  if e["service"] == "llama-8b-fp8")
    scaled["inputs"]["spec"]["maxReplicaCount"] = needed - 1
    result = _result(resources, spec_policy_config(spec))
    assert result.blocking
    [violation] = result.violations
    assert f"needs {needed} replicas within its SLO" in violation.message
    assert f"runs at most {needed - 1}" in violation.message and "To fix:" in violation.message


def test_without_a_scaler_the_workload_replicas_are_the_most_it_runs():
    resources = [r for r in rendered() if r["name"] != SCALED_OBJECT]
    config = {slo_capacity.name: {SERVICES: [{"service": "llama-8b-fp8", "replicasNeeded": 2}]}}
    deployment = next(r for r in resources if r["name"] == "prod-serving-llama-8b-fp8-deployment")
    deployment["inputs"]["spec"].pop("replicas", None)
    [violation] = _result(resources, config).violations
    assert "runs at most 1 (its replicas (unset: 1))" in violation.message


def test_a_service_the_stack_does_not_deploy_is_a_violation_not_a_pass():
    config = {slo_capacity.name: {SERVICES: [{"service": "no-such-service", "replicasNeeded": 1}]}}
    [violation] = _result(rendered(), config).violations
    assert "no workload labelled app.kubernetes.io/name=no-such-service" in violation.message


def test_plan_json_states_it_for_ci_and_configures_the_rule_alike():
    spec = _prod()
    rows = throughput(spec)["models"]
    chat = next(r for r in rows if r["model"] == "llama-8b-fp8")
    assert set(chat["slo_capacity"]) == {"replicas_needed", "max_replicas", "holds"}
    assert chat["slo_capacity"]["holds"] is True
    plan = {"totals": {}, "throughput": {"models": rows}}
    assert plan_policy_config(plan)[slo_capacity.name] == spec_policy_config(spec)[slo_capacity.name]


def test_traffic_the_max_replicas_cannot_carry_does_not_hold():
    spec = load_stack(STACKS, "prod")
    models = list(spec.models)
    chat = models[CHAT]
    models[CHAT] = chat.model_copy(update={"traffic": chat.traffic.model_copy(update={"requests_per_second": 400})})
    spec = validate(spec.model_copy(update={"models": models})).stack
    row = next(r for r in throughput(spec)["models"] if r["model"] == "llama-8b-fp8")
    assert row["slo_capacity"]["holds"] is False
    assert row["slo_capacity"]["replicas_needed"] > row["slo_capacity"]["max_replicas"] == 6


def test_a_prefill_decode_service_is_checked_per_role_from_the_spec_and_from_plan_json():
    """Each role of a disaggregated service runs its own workload (the prefill LeaderWorkerSet or Deployment named
    after its engine), so each is held to the replicas its part of the SLO needs; plan.json states them under the
    service's roles[] and the policy's config reads the same figures from either source."""
    spec = load_stack(STACKS, "serving")
    service = spec.models[0]
    assert service.disaggregation is not None
    models = list(spec.models)
    models[0] = service.model_copy(update={"slo": LatencySlo(ttft_ms=2000, itl_ms=50)})
    spec = validate(spec.model_copy(update={"models": models})).stack
    from_spec = spec_policy_config(spec)[slo_capacity.name][SERVICES]
    engines = {entry["service"] for entry in from_spec}
    assert {service.name, f"{service.name}-prefill"} <= engines
    row = next(r for r in throughput(spec)["models"] if r["model"] == service.name)
    assert {role["role"] for role in row["roles"]} == {"decode", "prefill"}
    plan = {"throughput": {"models": throughput(spec)["models"]}}
    from_plan = plan_policy_config(plan)[slo_capacity.name][SERVICES]
    assert sorted(from_plan, key=lambda e: e["service"]) == sorted(from_spec, key=lambda e: e["service"])
