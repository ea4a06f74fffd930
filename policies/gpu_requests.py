"""Pods request device resources that a node group they can land on advertises.

A pod that asks for nvidia.com/mig-3g.20gb on a pool cut into 1g.10gb slices, or for a whole GPU on
a time-sliced pool, stays Pending forever; so does one asking for more GPUs than a node has.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from inferstack.policies.pools import candidates, describe_offer, node_groups, workloads
from inferstack.policies.props import count


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    groups = node_groups(args.resources)
    if not groups:
        args.not_applicable("the stack creates no node groups, so what nodes advertise is not known")
    for registered in workloads(args.resources):
        found = registered.workload
        for template in found.templates:
            requests = template.device_requests()
            if not requests:
                continue
            pods = f"{found}" if template.role == "pod" else f"{found} {template.role} pods"
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
            for name, amount in sorted(requests.items()):
                offering = [g for g in eligible if g.offers(name) > 0]
                if not offering:
                    report(
                        f"{pods} request {count(amount)} {name} but no node group they can run on advertises it "
                        f"({describe_offer(eligible)}). To fix: request a resource the pool advertises (a whole GPU "
                        "nvidia.com/gpu, a MIG slice of the pool's layout nvidia.com/mig-<profile>, or "
                        "nvidia.com/gpu.shared on a shared pool), or change the pool's gpu_sharing.",
                        registered.resource.urn,
                    )
                elif max(g.offers(name) for g in offering) < amount:
                    most = max(g.offers(name) for g in offering)
                    report(
                        f"{pods} request {count(amount)} {name} per pod but a node offers at most {most} "
                        f"({describe_offer(offering)}). To fix: split the model across nodes (pipeline_parallel) "
                        "or use a larger instance type.",
                        registered.resource.urn,
                    )


gpu_requests_advertised = StackValidationPolicy(
    name="gpu-requests-advertised",
    description="Pods request GPU, MIG, shared-GPU and EFA resources that a node group they can run on advertises.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
)
