"""No object of ours takes a name a controller needs for an object it creates itself.

The LeaderWorkerSet controller (kubernetes-sigs/lws v0.10.0) creates a headless Service for the
pods of a LeaderWorkerSet and points every pod's subdomain at it: named after the LWS under the
default subdomain policy `Shared` (pkg/controllers/leaderworkerset_controller.go,
reconcileHeadlessServices), after each leader pod (`<lws>-<group>`) under `UniquePerReplica`
(pkg/controllers/pod_controller.go). It creates that Service only if none of the name exists
(pkg/utils/controller/controller_utils.go, CreateHeadlessServiceIfNotExists), so a Service of ours
under the name silently takes its place: `LWS_LEADER_ADDRESS` (`<leader>.<service>.<namespace>`)
then never resolves and the workers of a multi-node replica never reach their leader.
"""

from __future__ import annotations

from collections.abc import Iterator

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from inferstack.policies.props import dig, number, text
from inferstack.policies.workloads import kind_of

SHARED = "Shared"
UNIQUE_PER_REPLICA = "UniquePerReplica"


def lws_headless_services(props) -> Iterator[str]:
    """Names of the headless Services the LWS controller will create for one LeaderWorkerSet."""
    name = text(dig(props, "metadata", "name"))
    policy = text(dig(props, "spec", "networkConfig", "subdomainPolicy"), SHARED)
    if policy == UNIQUE_PER_REPLICA:
        replicas = int(number(dig(props, "spec", "replicas")) or 1)
        yield from (f"{name}-{group}" for group in range(replicas))
    else:
        yield name


def _controller_names(args: StackValidationArgs, report: ReportViolation) -> None:
    services = {
        (text(dig(r.props, "metadata", "namespace")) or "default", text(dig(r.props, "metadata", "name"))): r
        for r in args.resources
        if kind_of(r.resource_type) == "Service"
    }
    for resource in args.resources:
        if kind_of(resource.resource_type) != "LeaderWorkerSet":
            continue
        namespace = text(dig(resource.props, "metadata", "namespace")) or "default"
        lws = text(dig(resource.props, "metadata", "name"))
        for headless in lws_headless_services(resource.props):
            ours = services.get((namespace, headless))
            if ours is not None:
                report(
                    f"Service {namespace}/{headless} takes the name of the headless Service the LeaderWorkerSet "
                    f"controller creates for LeaderWorkerSet {namespace}/{lws}; the controller then creates none and "
                    "its workers cannot resolve the leader. To fix: give the Service or the LeaderWorkerSet another name.",
                    ours.urn,
                )


controller_created_names = StackValidationPolicy(
    name="controller-created-names",
    description="No Service takes the name of a headless Service the LeaderWorkerSet controller creates.",
    validate=_controller_names,
    enforcement_level=EnforcementLevel.MANDATORY,
)
