"""Pods request device resources that a node group they can land on advertises, through one mechanism a node.

A pod that asks for nvidia.com/mig-3g.20gb on a pool cut into 1g.10gb slices, or for a whole GPU on
a time-sliced pool, stays Pending forever; so does one asking for more GPUs than a node has, or one whose
claim names a ResourceClaimTemplate that does not exist (kubernetes pkg/scheduler/framework/plugins/
dynamicresources: the pod waits for its claim) or a DeviceClass the catalog cannot count. A node whose GPUs
or EFA devices both a device plugin and a DRA driver hand out gives one device to two pods.

Each way of asking is met only by its own mechanism: container limits by the extended resources a device plugin
advertises (kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go counts them against the node's
allocatable), claims by the devices a DRA driver publishes in ResourceSlices, per DeviceClass (plugins/
dynamicresources); a claim on a device-plugin pool, or a gpu.nvidia.com claim on a pool cut by MIG, never schedules.
"""

from __future__ import annotations

from collections.abc import Callable

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from inferstack.policies.pools import (
    NodeGroupView,
    RegisteredWorkload,
    candidates,
    describe_offer,
    node_groups,
    workloads,
)
from inferstack.policies.props import count
from inferstack.policies.workloads import PodTemplate


def _check_mechanisms(groups: list[NodeGroupView], report: ReportViolation) -> None:
    for group in groups:
        shared = {device: handed_by for device, handed_by in group.mechanisms.items() if len(handed_by) > 1}
        for device, handed_by in sorted(shared.items()):
            report(
                f"node group {group}: its {device} are handed out by both {' and '.join(map(str, handed_by))}, so "
                "one device can go to two pods. To fix: run one mechanism per node: on a device_mode 'dra' pool keep "
                "the node label nvidia.com/gpu.deploy.device-plugin=false and leave the pool out of the EFA device "
                "plugin's supportedInstanceLabels; on a device-plugin pool leave it out of the DRA drivers' node "
                "affinity.",
                group.resource.urn,
            )


def _check_claims(registered: RegisteredWorkload, template: PodTemplate, pods: str, report: ReportViolation) -> None:
    found = registered.workload
    for problem in template.claim_problems(registered.claims):
        report(
            f"{pods}: {problem}. To fix: claim from a ResourceClaimTemplate the stack creates in namespace "
            f"{found.namespace} (serving/claims.py makes one per service on a device_mode 'dra' pool) whose "
            "requests use exactly/ExactCount of a DeviceClass in catalog/dra.json, and name only its requests.",
            registered.resource.urn,
        )
    if registered.many_pods:
        for claim in (c for c in template.shared_claims() if c.source):  # a nameless one is reported above
            report(
                f"{pods}: claim {claim.name!r} names the ResourceClaim {found.namespace}/{claim.source}, which is "
                "allocated once for every pod of the workload, so all its pods land on one node and share the same "
                "devices (kubernetes pkg/scheduler/framework/plugins/dynamicresources: pods reserve an allocated "
                "claim). To fix: use resourceClaimTemplateName so each pod gets its own claim.",
                registered.resource.urn,
            )


def _check_offer(pods: str, eligible: list[NodeGroupView], asked: str, wanted: dict[str, float],
                 offered: Callable[[NodeGroupView, str], int], noun: str, how: str, fix: str, urn: str,
                 report: ReportViolation) -> None:
    """Each of one mechanism kind's requests against what the groups offer through that kind."""
    for name, amount in sorted(wanted.items()):
        offering = [g for g in eligible if offered(g, name) > 0]
        if not offering:
            report(
                f"{pods} {asked} {count(amount)} {name}{noun} but no node group they can run on {how} "
                f"({describe_offer(eligible)}). To fix: {fix}",
                urn,
            )
        elif (most := max(offered(g, name) for g in offering)) < amount:
            report(
                f"{pods} {asked} {count(amount)} {name}{noun} per pod but a node offers at most {most} "
                f"({describe_offer(offering)}). To fix: split the model across nodes (pipeline_parallel) "
                "or use a larger instance type.",
                urn,
            )


LIMITS_FIX = (
    "request a resource the pool advertises (a whole GPU nvidia.com/gpu, a MIG slice of the pool's layout "
    "nvidia.com/mig-<profile>, or nvidia.com/gpu.shared on a shared pool), or change the pool's gpu_sharing; a "
    "device_mode 'dra' pool runs no device plugin, so pods there claim devices through spec.resourceClaims."
)
CLAIMS_FIX = (
    "run the pods on a device_mode 'dra' pool whose DRA driver releases select the pool's label, and claim the "
    "DeviceClass its nodes publish (gpu.nvidia.com on whole GPUs, mig.nvidia.com on a pool cut by MIG); on a "
    "device-plugin pool request nvidia.com/gpu in the container's limits instead."
)


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    groups = node_groups(args.resources)
    _check_mechanisms(groups, report)
    for registered in workloads(args.resources):
        found = registered.workload
        for template in found.templates:
            pods = f"{found}" if template.role == "pod" else f"{found} {template.role} pods"
            _check_claims(registered, template, pods, report)
            requests = registered.device_requests(template)
            if not requests or not groups:
                continue
            eligible = candidates(groups, template)
            if not eligible:
                report(
                    f"{pods} request {', '.join(f'{count(v)} {k}' for k, v in sorted(requests.items()))} but no "
                    f"node group matches their node selector {template.node_selector()}. To fix: select a pool "
                    "label (inferstack.dev/pool) of a node group the stack creates.",
                    registered.resource.urn,
                )
                continue
            if any(g.advertised is None for g in eligible):
                continue
            urn = registered.resource.urn
            _check_offer(pods, eligible, "request", template.plugin_requests(), NodeGroupView.offers_to_limits, "",
                         "advertises it", LIMITS_FIX, urn, report)
            claimed = {name: float(n) for name, n in template.claimed(registered.claims).items()}
            _check_offer(pods, eligible, "claim", claimed, NodeGroupView.offers_to_claims, " devices",
                         "offers it to claims (through a DRA driver)", CLAIMS_FIX, urn, report)
    if not groups:
        args.not_applicable("the stack creates no node groups, so what nodes advertise is not known")


gpu_requests_advertised = StackValidationPolicy(
    name="gpu-requests-advertised",
    description="Pods request (or claim) GPU, MIG, shared-GPU and EFA devices that a node group they can run on "
    "offers through one mechanism per node, and every claim resolves to a template and DeviceClass the stack knows.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
)
