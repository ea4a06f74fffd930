"""KEDA scaling stays inside what the pool can hold, and online services never scale to zero."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from inferstack.planning.pool_capacity import pods_per_node, replicas_held
from inferstack.policies.pools import NodeGroupView, RegisteredWorkload, candidates, node_groups, workloads
from inferstack.policies.props import dig, mapping, string_map, text, whole
from inferstack.policies.workloads import PRIORITY_CLASS_LABEL, TIER_LABEL, kind_of

SCALED_OBJECT = "ScaledObject"
KEDA_DEFAULT_MIN = 0    # KEDA's minReplicaCount when unset: it scales to zero
KEDA_DEFAULT_MAX = 100


@dataclass(frozen=True)
class ScaledObject:
    resource: PolicyResource
    name: str
    namespace: str
    labels: Mapping[str, str]
    target_kind: str
    target_name: str
    min_replicas: int
    max_replicas: int
    idle_replicas: int | None

    def __str__(self) -> str:
        return f"ScaledObject {self.namespace}/{self.name}"


def scaled_objects(resources: Sequence[PolicyResource]) -> list[ScaledObject]:
    found = []
    for resource in resources:
        if kind_of(resource.resource_type) != SCALED_OBJECT or not resource.resource_type.startswith("kubernetes:keda.sh/"):
            continue
        props = resource.props
        spec = mapping(props.get("spec"))
        target = mapping(spec.get("scaleTargetRef"))
        found.append(
            ScaledObject(
                resource=resource,
                name=text(dig(props, "metadata", "name")) or resource.name,
                namespace=text(dig(props, "metadata", "namespace")) or "default",
                labels=string_map(dig(props, "metadata", "labels")),
                target_kind=text(target.get("kind")) or "Deployment",
                target_name=text(target.get("name")),
                min_replicas=whole(spec.get("minReplicaCount"), KEDA_DEFAULT_MIN),
                max_replicas=whole(spec.get("maxReplicaCount"), KEDA_DEFAULT_MAX),
                idle_replicas=whole(spec.get("idleReplicaCount")),
            )
        )
    return found


def target_of(scaled: ScaledObject, found: Sequence[RegisteredWorkload]) -> RegisteredWorkload | None:
    for registered in found:
        w = registered.workload
        if (w.kind, w.name, w.namespace) == (scaled.target_kind, scaled.target_name, scaled.namespace):
            return registered
    return None


def scaler_of(registered: RegisteredWorkload, scaled: Sequence[ScaledObject]) -> ScaledObject | None:
    w = registered.workload
    return next(
        (s for s in scaled if (s.target_kind, s.target_name, s.namespace) == (w.kind, w.name, w.namespace)), None
    )


def minimum_replicas(registered: RegisteredWorkload, scaled: Sequence[ScaledObject]) -> int:
    """Replicas that always run: the ScaledObject's minimum, else spec.replicas (default 1)."""
    scaler = scaler_of(registered, scaled)
    if scaler is not None:
        return scaler.min_replicas
    return registered.workload.replicas if registered.workload.replicas is not None else 1


def pool_limit(groups: Sequence[NodeGroupView], registered: RegisteredWorkload) -> tuple[int, str] | None:
    """(most replicas the eligible node groups hold at max size, how) or None: the spec's scaling check
    counts the same way (planning.pool_capacity.replicas_held), whole pods per node. A replica whose pods
    request different devices counts each pod at the largest request of every device."""
    template = registered.gpu_template()
    if template is None or not registered.claims_resolve:  # unresolved claims: gpu-requests-advertised reports them
        return None
    eligible = candidates(groups, template)
    if not eligible or any(g.advertised is None for g in eligible):
        return None
    device_templates = [t for t in registered.workload.templates if registered.device_requests(t)]
    request: dict[str, float] = {}
    for t in device_templates:
        for name, amount in registered.device_requests(t).items():
            if amount > 0:
                request[name] = max(request.get(name, 0), amount)
    if not request:
        return None
    pods = sum(t.copies for t in device_templates)
    held = replicas_held([(g.max_size, g.advertised) for g in eligible], request, pods)
    asked = ", ".join(f"{name}={amount:g}" for name, amount in sorted(request.items()))
    how = " + ".join(f"{g.name}: {g.max_size} nodes x {pods_per_node(g.advertised, request)}" for g in eligible)
    total = sum(g.max_size * pods_per_node(g.advertised, request) for g in eligible)
    return held, f"{total} pods of {asked} ({how}) / {pods} per replica"


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    groups = node_groups(args.resources)
    found = workloads(args.resources)
    for scaled in scaled_objects(args.resources):
        urn = scaled.resource.urn
        if scaled.min_replicas > scaled.max_replicas:
            report(
                f"{scaled} minReplicaCount {scaled.min_replicas} is greater than maxReplicaCount "
                f"{scaled.max_replicas}. To fix: lower min_replicas or raise max_replicas.",
                urn,
            )
        target = target_of(scaled, found)
        tier = target.workload.tier if target is not None else scaled.labels.get(TIER_LABEL, scaled.labels.get(PRIORITY_CLASS_LABEL))
        if tier == "online" and (scaled.min_replicas < 1 or scaled.idle_replicas is not None):
            report(
                f"{scaled} scales online service {scaled.target_name} to zero (minReplicaCount "
                f"{scaled.min_replicas}{', idleReplicaCount set' if scaled.idle_replicas is not None else ''}). "
                "To fix: keep min_replicas >= 1 for tier online, or mark the service tier standard.",
                urn,
            )
        if target is None:
            continue
        limit = pool_limit(groups, target)
        if limit is not None and scaled.max_replicas > limit[0]:
            report(
                f"{scaled} maxReplicaCount {scaled.max_replicas} for {target} is more than its pool can hold: "
                f"{limit[1]} = {limit[0]} replicas. To fix: lower max_replicas to {limit[0]} or raise the pool's "
                "max_nodes.",
                urn,
            )


keda_scaling_bounds = StackValidationPolicy(
    name="keda-scaling-bounds",
    description="KEDA min <= max, max within what the pool can hold, no scale-to-zero for online services.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
)
