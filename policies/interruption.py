"""Serving pods that can land on spot nodes stop inside the two-minute interruption notice.

EC2 reclaims a spot instance two minutes after its interruption notice; EKS drains a spot managed node
group's node on that notice (or earlier, on a rebalance recommendation). A drained pod gets its
terminationGracePeriodSeconds, preStop hook included (Kubernetes "Pod Lifecycle", Termination of Pods):
a longer period is cut short by the reclaim, and a preStop that takes the whole period leaves vLLM no
time to finish the requests it holds.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from inferstack.planning.interruption import SPOT_NOTICE_SECONDS
from inferstack.policies.pools import candidates, node_groups, workloads
from inferstack.policies.props import dig, items, mapping, whole

KUBERNETES_DEFAULT_GRACE_SECONDS = 30  # PodSpec.terminationGracePeriodSeconds when unset


def _pre_stop_seconds(template_spec) -> int:
    """The longest preStop sleep of the pod's containers (an exec or httpGet hook has no stated length)."""
    longest = 0
    for container in items(template_spec.get("containers")):
        seconds = dig(mapping(container), "lifecycle", "preStop", "sleep", "seconds")
        longest = max(longest, whole(seconds, 0) or 0)
    return longest


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    groups = node_groups(args.resources)
    for registered in workloads(args.resources):
        found = registered.workload
        if not found.is_serving or not found.runs_vllm:
            continue
        for template in found.templates:
            spot = [g for g in candidates(groups, template) if g.is_spot]
            if not spot:
                continue
            grace = whole(template.spec.get("terminationGracePeriodSeconds"), KUBERNETES_DEFAULT_GRACE_SECONDS)
            pre_stop = _pre_stop_seconds(template.spec)
            where = f"{found}" + ("" if template.role == "pod" else f" {template.role} pods")
            if grace > SPOT_NOTICE_SECONDS:
                report(
                    f"{where} can run on spot node groups ({', '.join(str(g) for g in spot)}) but take "
                    f"terminationGracePeriodSeconds {grace}, longer than the {SPOT_NOTICE_SECONDS} s interruption "
                    f"notice: the reclaim kills them mid-drain. To fix: set it to {SPOT_NOTICE_SECONDS} or less.",
                    registered.resource.urn,
                )
            elif pre_stop >= grace:
                report(
                    f"{where} sleep {pre_stop} s in preStop within a {grace} s grace period, so vLLM is killed "
                    "before it finishes any request. To fix: keep the preStop sleep well under the grace period.",
                    registered.resource.urn,
                )


spot_interruption_budget = StackValidationPolicy(
    name="spot-interruption-budget",
    description="Serving pods that can run on spot nodes stop, preStop included, inside the two-minute notice.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
)
