"""A service's max replicas hold its stated traffic within its SLO (unsaturated without one).

A policy cannot read the stack spec or run the throughput model on resources alone, so the replicas each service
needs arrive as policy config: the offline runner passes them from the spec (planning/scaling_thresholds.slo_capacity)
or from plan.json (`throughput.models[].slo_capacity.replicas_needed`, the same figure). What the stack deploys
decides the most replicas it can run: the maxReplicaCount of the KEDA ScaledObject that targets the service's
workload, else the workload's own replicas (Kubernetes' default 1). The workload is the one labelled with the
engine's name (`app.kubernetes.io/name`, as serving/pods.selector_labels labels it): a prefill/decode service is
checked per role, each against its part of the SLO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from inferstack.planning.disaggregation import service_of
from inferstack.planning.scaling_thresholds import slo_capacity as service_slo_capacity
from inferstack.policies.pools import RegisteredWorkload, workloads
from inferstack.policies.props import items, mapping, text, whole
from inferstack.policies.scaling import ScaledObject, scaled_objects, scaler_of
from inferstack.spec import StackSpec
from inferstack.spec.pools import PoolHardware

SERVICES = "services"             # config: [{service, replicasNeeded}]
SERVICE_LABEL = "app.kubernetes.io/name"


def spec_config(spec: StackSpec) -> dict[str, Any]:
    """The policy's config from a validated stack: the replicas each service's traffic needs within its SLO."""
    services = []
    for model in spec.models:
        found = service_slo_capacity(model, service_of(spec.models, model), PoolHardware(spec.pool(model.pool)))
        if found is not None:
            services.append({"service": model.name, "replicasNeeded": found.replicas_needed})
    return {SERVICES: services} if services else {}


def plan_config(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The same config from a plan.json's throughput.models[].slo_capacity (a prefill/decode service's per role,
    under roles[])."""
    rows = items(mapping(plan.get("throughput")).get("models"))
    engines = [(text(mapping(row).get("model")), row) for row in rows]
    engines += [(text(mapping(role).get("engine")), role) for row in rows for role in items(mapping(row).get("roles"))]
    services = [
        {"service": name, "replicasNeeded": needed}
        for name, row in engines
        if (needed := whole(mapping(mapping(row).get("slo_capacity")).get("replicas_needed"))) is not None
    ]
    return {SERVICES: services} if services else {}


def most_replicas(registered: RegisteredWorkload, scalers: Sequence[ScaledObject]) -> tuple[int, str]:
    """(the most replicas the stack runs of a workload, what says so)."""
    scaler = scaler_of(registered, scalers)
    if scaler is not None:
        return scaler.max_replicas, f"{scaler} maxReplicaCount"
    replicas = registered.workload.replicas
    return (1, "its replicas (unset: 1)") if replicas is None else (replicas, "its replicas")


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    wanted = items(args.get_config().get(SERVICES))
    if not wanted:
        args.not_applicable(f"no {SERVICES} in the policy config (no service states its traffic)")
    found = workloads(args.resources)
    scalers = scaled_objects(args.resources)
    for entry in wanted:
        entry = mapping(entry)
        service, needed = text(entry.get("service")), whole(entry.get("replicasNeeded"))
        if needed is None:
            continue
        registered = next((w for w in found if w.workload.labels.get(SERVICE_LABEL) == service), None)
        if registered is None:
            report(f"service {service}: no workload labelled {SERVICE_LABEL}={service}, so the {needed} replicas its "
                   "traffic needs within its SLO cannot be checked. To fix: deploy it, or drop it from the policy "
                   f"config's {SERVICES}.")
            continue
        most, source = most_replicas(registered, scalers)
        if most < needed:
            report(
                f"service {service}: its stated traffic needs {needed} replicas within its SLO (the plan's "
                f"throughput.models[].slo_capacity), but {registered} runs at most {most} ({source}), so the traffic "
                f"would queue past the SLO. To fix: raise autoscaling.max_replicas to {needed} (and the pool's "
                "max_nodes to hold them), relax the slo, or state the traffic the service really gets.",
                registered.resource.urn,
            )


slo_capacity = StackValidationPolicy(
    name="slo-capacity",
    description="Each service's max replicas hold its stated traffic within its SLO.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(
        properties={
            SERVICES: {"type": "array", "items": {"type": "object"},
                       "description": "Per service that states traffic: {service, replicasNeeded} (the plan's "
                       "throughput.models[].slo_capacity.replicas_needed)."},
        }
    ),
)
