"""Network rules: EFA node groups keep their nodes close and let them talk to each other; every inferstack pod's
ingress is closed by a NetworkPolicy and no vLLM pod is open to every source.

The same holds for a Karpenter EC2NodeClass with EFA interfaces: its placementGroupSelector (or its
capacityReservationSelectorTerms) and its security groups (shared/reference/karpenter.md 4.4, 4.5).

EFA traffic needs every node of the pool in one cluster placement group (or in a capacity
reservation / block, which brings its own placement) and a security group that allows all traffic
to and from itself; without the self rule, NCCL over EFA hangs at the first collective.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_policy import EnforcementLevel, PolicyResource, ReportViolation, StackValidationArgs, StackValidationPolicy

from inferstack.policies.pools import (
    KARPENTER_NODE_CLASS, LAUNCH_TEMPLATE, NodeGroupView, efa_interfaces, node_class_efa_interfaces, node_groups,
)
from inferstack.policies.props import dig, items, mapping, string_map, text
from inferstack.policies.workloads import selector_matches, workload

SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
VPC_RULES = {
    "ingress": "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "egress": "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
}
EC2_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
ALL_PROTOCOLS = ("-1", "all")
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
PART_OF = ("app.kubernetes.io/part-of", "inferstack")
EVERY_ADDRESS = ("0.0.0.0/0", "::/0")


def _group_ids(template: PolicyResource) -> set[str]:
    props = template.props
    if template.resource_type == KARPENTER_NODE_CLASS:
        return {text(mapping(t).get("id")) for t in items(dig(props, "spec", "securityGroupSelectorTerms"))} - {""}
    ids = {text(i) for i in items(props.get("vpcSecurityGroupIds"))}
    for interface in items(props.get("networkInterfaces")):
        ids |= {text(i) for i in items(mapping(interface).get("securityGroups"))}
    return ids - {""}


def _self_rule(direction: str, template: PolicyResource, resources: Sequence[PolicyResource]) -> bool:
    """Whether one of the template's security groups allows all traffic from/to itself in this direction."""
    ids = _group_ids(template)
    for rule in resources:
        props = rule.props
        if rule.resource_type == VPC_RULES[direction]:
            group = text(props.get("securityGroupId"))
            if (
                group in ids
                and text(props.get("referencedSecurityGroupId")) == group
                and text(props.get("ipProtocol")) in ALL_PROTOCOLS
            ):
                return True
        elif rule.resource_type == EC2_RULE and text(props.get("type")) == direction:
            group = text(props.get("securityGroupId"))
            self_source = props.get("self") is True or text(props.get("sourceSecurityGroupId")) == group
            if group in ids and self_source and text(props.get("protocol")) in ALL_PROTOCOLS:
                return True
    for group in (d for d in template.dependencies if d.resource_type == SECURITY_GROUP):
        for inline in items(group.props.get(direction)):
            inline = mapping(inline)
            if inline.get("self") is True and text(inline.get("protocol")) in ALL_PROTOCOLS:
                return True
    return False


def _reservation(template: PolicyResource, users: Sequence[NodeGroupView]) -> bool:
    props = template.props
    target = mapping(dig(props, "capacityReservationSpecification", "capacityReservationTarget"))
    return (
        bool(text(target.get("capacityReservationId")) or text(target.get("capacityReservationResourceGroupArn")))
        or text(dig(props, "instanceMarketOptions", "marketType")) == "capacity-block"
        or any(g.capacity_type == "CAPACITY_BLOCK" for g in users)
    )


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    groups = node_groups(args.resources)
    for template in (r for r in args.resources if r.resource_type in (LAUNCH_TEMPLATE, KARPENTER_NODE_CLASS)):
        karpenter = template.resource_type == KARPENTER_NODE_CLASS
        interfaces = node_class_efa_interfaces(template) if karpenter else efa_interfaces(template)
        if not interfaces:
            continue
        if karpenter:
            subject = f"EC2NodeClass {text(dig(template.props, 'metadata', 'name'))} attaches {interfaces} EFA interfaces"
            placement = text(dig(template.props, "spec", "placementGroupSelector", "name")) or text(
                dig(template.props, "spec", "placementGroupSelector", "id")
            )
            reserved = bool(items(dig(template.props, "spec", "capacityReservationSelectorTerms")))
        else:
            users = [g for g in groups if g.launch_template is template]
            used_by = f" (node groups {', '.join(g.name for g in users)})" if users else ""
            subject = f"launch template {template.name}{used_by} attaches {interfaces} EFA interfaces"
            placement = text(dig(template.props, "placement", "groupName"))
            reserved = _reservation(template, users)
        if not placement and not reserved:
            report(
                f"{subject} but no placement group and no capacity reservation. To fix: keep "
                "efa.create_placement_group true (a cluster placement group), name an existing one in "
                "efa.placement_group, or back the pool with a capacity reservation or block.",
                template.urn,
            )
        for group in (d for d in template.dependencies if d.resource_type == PLACEMENT_GROUP):
            strategy = text(group.props.get("strategy"))
            if strategy != "cluster":
                report(
                    f"{subject} into placement group {group.name} with strategy {strategy or 'unset'!r}. "
                    "To fix: use strategy 'cluster', the only one that keeps EFA nodes on one network spine.",
                    template.urn,
                )
        for direction in ("ingress", "egress"):
            if not _self_rule(direction, template, args.resources):
                report(
                    f"{subject} but none of its security groups allows all {direction} traffic "
                    f"{'from' if direction == 'ingress' else 'to'} itself. To fix: add a "
                    f"vpc.SecurityGroup{direction.capitalize()}Rule with referenced_security_group_id = the group's "
                    "own id and ip_protocol '-1'.",
                    template.urn,
                )


efa_placement_and_security_group = StackValidationPolicy(
    name="efa-placement-and-security-group",
    description="EFA node groups launch into a cluster placement group (or a reservation) with a self-referencing all-traffic security group.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _isolates_ingress(policy: Mapping[str, Any]) -> bool:
    """policyTypes, when unset, holds Ingress (Kubernetes networking/v1 NetworkPolicySpec.policyTypes)."""
    types = items(policy.get("policyTypes"))
    return not types or "Ingress" in types


def _open_to_everyone(peer: Mapping[str, Any]) -> bool:
    """A peer that matches every source: all pods of all namespaces, or every address."""
    if "ipBlock" in peer:
        return text(dig(peer, "ipBlock", "cidr")) in EVERY_ADDRESS
    return peer.get("namespaceSelector") == {} and not mapping(peer.get("podSelector"))


def _open_rule(rule: Mapping[str, Any]) -> bool:
    """An ingress rule without `from` (or with an empty one) allows every source (NetworkPolicyIngressRule.from)."""
    peers = [mapping(p) for p in items(rule.get("from"))]
    return not peers or any(_open_to_everyone(p) for p in peers)


def _validate_coverage(args: StackValidationArgs, report: ReportViolation) -> None:
    policies: dict[str, list[Mapping[str, Any]]] = {}
    for resource in (r for r in args.resources if r.resource_type == NETWORK_POLICY):
        namespace = text(dig(resource.props, "metadata", "namespace")) or "default"
        body = mapping(resource.props.get("spec"))
        if _isolates_ingress(body):
            policies.setdefault(namespace, []).append(body)
    for resource in args.resources:
        found = workload(resource.resource_type, resource.props, resource.name)
        if found is None:
            continue
        for template in found.templates:
            labels = string_map(template.labels)
            if labels.get(PART_OF[0]) != PART_OF[1]:
                continue
            selecting = [p for p in policies.get(found.namespace, []) if selector_matches(mapping(p.get("podSelector")), labels)]
            subject = f"{found} ({'its' if template.role == 'pod' else template.role} pods)"
            if not selecting:
                report(
                    f"{subject} is selected by no NetworkPolicy with policyType Ingress in "
                    f"namespace {found.namespace}, so any pod in the cluster reaches it. To fix: keep the serving "
                    "layer's NetworkPolicies (serving/network_policies.py): the namespace's default deny and one per "
                    "kind of pod that names its callers.",
                    resource.urn,
                )
            elif any(t is template for t, _ in found.vllm_containers()):
                open_rules = [r for p in selecting for r in items(p.get("ingress")) if _open_rule(mapping(r))]
                if open_rules:
                    report(
                        f"{subject} run vLLM and a NetworkPolicy admits every source to them "
                        f"(ingress rule {open_rules[0]!r}). To fix: name the callers in `from` (the gateway's pods, "
                        "the endpoint picker, Prometheus, the service's own pods).",
                        resource.urn,
                    )


serving_pods_network_policy = StackValidationPolicy(
    name="serving-pods-network-policy",
    description="Every inferstack pod is selected by an ingress NetworkPolicy of its namespace, and none admits "
    "every source to a vLLM pod.",
    validate=_validate_coverage,
    enforcement_level=EnforcementLevel.MANDATORY,
)
