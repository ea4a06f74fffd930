"""The Pulumi program itself: spec in, every layer out. `pulumi up` and `inferstack plan` both run it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pulumi

from inferstack.spec import SpecError, StackSpec
from inferstack.stacks import StackNotFound, load_validated
from inferstack.validation import ValidatedStack, as_validated

if TYPE_CHECKING:  # the layers load when the program runs, not when this module is imported
    from inferstack.aws.foundation import AwsFoundation
    from inferstack.platform.karpenter import KarpenterArgs


def deploy(stack: StackSpec | ValidatedStack) -> None:
    """Create every layer of the platform for one validated stack (a spec is validated first) and export its
    outputs."""
    spec = as_validated(stack).stack
    from inferstack.aws.foundation import AwsFoundation, AwsFoundationArgs
    from inferstack.platform import ClusterPlatform, ClusterPlatformArgs
    from inferstack.serving.serving import Serving, ServingArgs

    aws = AwsFoundation(spec.environment, AwsFoundationArgs(spec=spec))
    platform = ClusterPlatform(
        f"{spec.environment}-platform",
        ClusterPlatformArgs(
            spec=spec,
            cluster_name=aws.cluster_name,
            node_pool_dependencies=[group for pool in aws.node_pools.values() for group in pool.node_groups],
            karpenter=karpenter_args(spec, aws),
        ),
        pulumi.ResourceOptions(providers={"kubernetes": aws.kubernetes_provider, "aws": aws.aws_provider}),
    )
    Serving(
        f"{spec.environment}-serving",
        ServingArgs(
            spec=spec,
            weights_bucket=aws.weights_bucket,
            prometheus_url=platform.prometheus_url,
            crd_dependencies=platform.crd_releases,
            namespaces=platform.namespaces,
            pod_identities=aws.pod_identities,
        ),
        pulumi.ResourceOptions(providers={"kubernetes": aws.kubernetes_provider}),
    )
    pulumi.export("cluster_name", aws.cluster_name)
    pulumi.export("cluster_endpoint", aws.cluster_endpoint)
    pulumi.export("kubeconfig", aws.kubeconfig)
    pulumi.export("node_pools", aws.node_pool_names)
    pulumi.export("weights_bucket", aws.weights_bucket)
    pulumi.export("prometheus_url", platform.prometheus_url)


def karpenter_args(spec: StackSpec, aws: AwsFoundation) -> KarpenterArgs | None:
    """What the platform's Karpenter needs from the AWS layer; None unless the stack uses Karpenter."""
    from inferstack.platform.karpenter import KarpenterArgs, KarpenterPoolNetwork

    if aws.karpenter is None:
        return None
    return KarpenterArgs(
        spec=spec,
        cluster_name=aws.cluster_name,
        node_role_name=aws.karpenter.node_role_name,
        interruption_queue_name=aws.karpenter.interruption_queue_name,
        networks={
            name: KarpenterPoolNetwork(pool.subnet_ids, pool.security_group_ids, pool.placement_group_name)
            for name, pool in aws.node_pools.items()
        },
        depends_on=[aws.karpenter.controller_identity],
        node_access=aws.karpenter.node_access,
        system_network=KarpenterPoolNetwork(aws.karpenter.cluster_subnet_ids, [aws.karpenter.cluster_security_group_id]),
    )


def deploy_or_fail(stacks_dir: Path, stack_name: str) -> None:
    """Load and validate the stack's spec and deploy it; a bad spec stops the update with its refusals, one a line."""
    try:
        validated = load_validated(stacks_dir, stack_name)
    except (SpecError, StackNotFound) as error:
        raise pulumi.RunError(str(error)) from None
    deploy(validated)
