"""Kueue nominal quotas never promise more than the flavor's nodes can hold at max size.

Kueue admits workloads against quota, not against nodes: a quota above capacity admits pods that
then sit Pending. The flavor's nodeLabels select node groups; their max size times what one node
offers is the ceiling for the sum of every ClusterQueue's nominal quota on that flavor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from pulumi_policy import EnforcementLevel, PolicyResource, ReportViolation, StackValidationArgs, StackValidationPolicy

from inferstack.policies.pools import NodeGroupView, node_groups
from inferstack.policies.props import count, dig, items, mapping, quantity, string_map, text
from inferstack.policies.workloads import is_device_resource, kind_of

KUEUE_GROUP = "kubernetes:kueue.x-k8s.io/"
CHECKED_RESOURCES = ("cpu", "memory")  # plus every device resource


def _kueue(resources: Sequence[PolicyResource], kind: str) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type.startswith(KUEUE_GROUP) and kind_of(r.resource_type) == kind]


def _name(resource: PolicyResource) -> str:
    return text(dig(resource.props, "metadata", "name")) or resource.name


def _capacity(groups: Sequence[NodeGroupView], resource_name: str) -> float | None:
    total = 0.0
    for group in groups:
        per_node = group.node_capacity(resource_name)
        if per_node is None:
            return None
        total += group.max_size * per_node
    return total


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    flavors: Mapping[str, Mapping[str, str]] = {
        _name(r): string_map(dig(r.props, "spec", "nodeLabels")) for r in _kueue(args.resources, "ResourceFlavor")
    }
    quotas: dict[tuple[str, str], list[tuple[PolicyResource, float, str]]] = defaultdict(list)
    for queue in _kueue(args.resources, "ClusterQueue"):
        for group in items(dig(queue.props, "spec", "resourceGroups")):
            for flavor in items(mapping(group).get("flavors")):
                flavor = mapping(flavor)
                for resource in items(flavor.get("resources")):
                    resource = mapping(resource)
                    name = text(resource.get("name"))
                    amount = quantity(resource.get("nominalQuota"))
                    if amount is not None and (name in CHECKED_RESOURCES or is_device_resource(name)):
                        raw = resource.get("nominalQuota")
                        quotas[(text(flavor.get("name")), name)].append((queue, amount, raw if isinstance(raw, str) else count(amount)))
    groups = node_groups(args.resources)
    if not groups:
        args.not_applicable("the stack creates no node groups, so flavor capacity is not known")
    for (flavor, resource_name), entries in sorted(quotas.items(), key=lambda item: item[0]):
        if flavor not in flavors:
            continue
        selected = [g for g in groups if g.carries(flavors[flavor])]
        capacity = _capacity(selected, resource_name)
        if capacity is None:
            continue
        total = sum(amount for _, amount, _ in entries)
        if total > capacity:
            queues = ", ".join(f"ClusterQueue {_name(q)}: {raw}" for q, _, raw in entries)
            shown = count(capacity) if resource_name != "memory" else f"{capacity / 2**30:g}Gi"
            where = ", ".join(f"{g.name} (max {g.max_size})" for g in selected) or "no node group"
            report(
                f"nominal quota for {resource_name} on flavor {flavor} ({queues}) exceeds what the flavor's node "
                f"groups can hold at max size: {shown} from {where}. To fix: lower the queues' quota to at most "
                f"{shown} in total (queues.cluster_queues[].quota_gpus for devices), or raise the pool's max_nodes.",
                entries[0][0].urn,
            )


kueue_quotas_within_pools = StackValidationPolicy(
    name="kueue-quotas-within-pools",
    description="Kueue nominal quotas never exceed the capacity of the node groups their flavor selects.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
)
