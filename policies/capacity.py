"""How capacity is bought: online serving keeps an on-demand baseline, batch work rides spot.

A spot reclaim takes every spot node of a type at once; an online service whose minimum replicas
only fit on spot loses all of them together. Its minimum must fit on nodes that are always running
and never reclaimed: on-demand (or reserved) node groups with a minimum size. A Karpenter NodePool keeps no
node; its node limit bounds the on-demand nodes it may launch, and its weight (above spot's) and the pods'
preferred capacity put minimum replicas there when they start. Karpenter does not move a replica back from spot
after a scale-down left it there, which this rule cannot see.
"""

from __future__ import annotations

from collections import defaultdict

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from inferstack.policies.pools import RegisteredWorkload, candidates, node_groups, workloads
from inferstack.policies.props import count
from inferstack.policies.scaling import minimum_replicas, scaled_objects


def _baseline(args: StackValidationArgs, report: ReportViolation) -> None:
    groups = node_groups(args.resources)
    scaled = scaled_objects(args.resources)
    needs: dict[tuple[tuple[str, ...], str], list[tuple[RegisteredWorkload, int, float]]] = defaultdict(list)
    for registered in workloads(args.resources):
        found = registered.workload
        template = registered.gpu_template()
        if found.tier != "online" or not found.is_serving or template is None or not registered.claims_resolve:
            continue
        eligible = candidates(groups, template)
        if not eligible:
            continue  # gpu-requests-advertised reports pods that match no node group
        if all(g.is_spot for g in eligible):
            report(
                f"{found} is tier online but every node group it can run on is spot: "
                f"{', '.join(str(g) for g in eligible)}. To fix: give its pool an on-demand baseline "
                "(capacity.on_demand_base >= 1) and do not select capacity=spot, or mark it tier standard.",
                registered.resource.urn,
            )
            continue
        baseline = [g for g in eligible if not g.is_spot and g.baseline_nodes > 0]
        if not baseline:
            report(
                f"{found} is tier online but none of its on-demand node groups keeps a node running: "
                f"{', '.join(str(g) for g in eligible if not g.is_spot)}. To fix: set the pool's "
                "capacity.on_demand_base (and min_nodes) to at least 1.",
                registered.resource.urn,
            )
            continue
        minimum = minimum_replicas(registered, scaled)
        names = tuple(sorted(g.name for g in baseline))
        for resource_name, amount in registered.device_requests_per_replica().items():
            needs[(names, resource_name)].append((registered, minimum, amount))
    by_name = {g.name: g for g in groups}
    for (names, resource_name), services in needs.items():
        baseline = [by_name[n] for n in names]
        if any(g.advertised is None for g in baseline):
            continue
        held = sum(g.baseline_nodes * g.offers(resource_name) for g in baseline)
        needed = sum(minimum * amount for _, minimum, amount in services)
        if needed > held:
            listed = ", ".join(f"{r.workload.name} ({m} x {count(a)})" for r, m, a in services)
            layout = ", ".join(f"{g.name}: {g.baseline_nodes} nodes x {g.offers(resource_name)}" for g in baseline)
            report(
                f"online services {listed} need {count(needed)} {resource_name} at minimum scale but the on-demand "
                f"baseline holds {held} ({layout}), so some minimum replicas would run on spot. To fix: raise the "
                "pool's capacity.on_demand_base or lower those services' min_replicas.",
                services[0][0].resource.urn,
            )


serving_on_demand_baseline = StackValidationPolicy(
    name="serving-on-demand-baseline",
    description="Online serving keeps an on-demand baseline that holds its minimum replicas; never spot alone.",
    validate=_baseline,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _batch_on_spot(args: StackValidationArgs, report: ReportViolation) -> None:
    groups = node_groups(args.resources)
    for registered in workloads(args.resources):
        found = registered.workload
        template = registered.gpu_template()
        if not found.is_batch or template is None:
            continue
        eligible = candidates(groups, template)
        if eligible and not any(g.is_spot for g in eligible):
            report(
                f"{found} is batch work but runs only on on-demand capacity ({', '.join(str(g) for g in eligible)}). "
                "To fix: run it on a batch pool with spot capacity; spot costs far less than on-demand and batch work can retry.",
                registered.resource.urn,
            )


batch_on_spot = StackValidationPolicy(
    name="batch-on-spot",
    description="Batch work runs on spot capacity (advisory).",
    validate=_batch_on_spot,
    enforcement_level=EnforcementLevel.ADVISORY,
)
