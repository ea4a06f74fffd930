"""Karpenter's AWS side: the controller's identity and the interruption queue EventBridge feeds.

As Karpenter v1.14.1's reference CloudFormation builds them ([cfn], shared/reference/karpenter.md sections 6 and 7):
the controller role with the six managed policies of karpenter_iam, trusted by EKS Pod Identity for
kube-system/karpenter (section 7.3, as the getting-started guide associates it); an EC2_LINUX access entry so the
nodes Karpenter launches with the node role can join an API-authenticated cluster (section 7.2); the SQS queue the
controller reads (`settings.interruptionQueue`) and the five EventBridge rules that send to it (section 6); and, on
request, the account's EC2 Spot service-linked role that spot launches need.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pulumi
from pulumi_aws import cloudwatch, eks, iam, sqs

from inferstack.aws import iam as policies
from inferstack.aws import karpenter_iam
from inferstack.aws.cluster import ClusterRef
from inferstack.catalog.charts import chart
from inferstack.conventions import KARPENTER_SERVICE_ACCOUNT as SERVICE_ACCOUNT
from inferstack.planning.node_groups import SPOT, plan_node_groups
from inferstack.spec import StackSpec

NAMESPACE = chart("karpenter").namespace  # where the controller chart is installed (charts.json)
QUEUE_RETENTION_SECONDS = 300  # [cfn] MessageRetentionPeriod
# SQS CreateQueue: a QueueName has up to 80 alphanumerics, hyphens and underscores; EKS CreateCluster allows 100
# characters of the same in a cluster name.
QUEUE_NAME_MAX = 80
QUEUE_NAME_DIGEST = 8
NODE_ACCESS_TYPE = "EC2_LINUX"  # EKS grants the node permissions itself (section 7.2)


# Karpenter's getting-started guide creates the EC2 Spot service-linked role once per account; without it spot launches
# fail with AuthFailure.ServiceLinkedRoleCreationNotPermitted. Creating it where it exists fails ("has been taken").
SPOT_SERVICE = "spot.amazonaws.com"
SPOT_SERVICE_LINKED_ROLE = "AWSServiceRoleForEC2Spot"
SPOT_ROLE_COMMAND = f"aws iam create-service-linked-role --aws-service-name {SPOT_SERVICE}"


def needs_spot_service_linked_role(spec: StackSpec) -> bool:
    """A Karpenter NodePool may launch spot: the account needs the EC2 Spot service-linked role."""
    return spec.platform.karpenter and any(
        plan.capacity_type == SPOT for pool in spec.node_pools for plan in plan_node_groups(pool)
    )


def spot_service_linked_role_note(spec: StackSpec) -> str | None:
    """What the plan says of the role: that the stack creates it, or that the account needs it and how to make it."""
    if not needs_spot_service_linked_role(spec):
        return None
    if spec.platform.create_spot_service_linked_role:
        return f"the stack creates the account's EC2 Spot service-linked role {SPOT_SERVICE_LINKED_ROLE}"
    return (f"Karpenter's spot NodePools need the account's EC2 Spot service-linked role {SPOT_SERVICE_LINKED_ROLE} "
            f"(without it spot launches fail with AuthFailure.ServiceLinkedRoleCreationNotPermitted); an account that "
            f"never used spot lacks it: run `{SPOT_ROLE_COMMAND}` once, or set "
            "platform.create_spot_service_linked_role")


def spot_service_linked_role(name: str, spec: StackSpec, opts: pulumi.ResourceOptions) -> iam.ServiceLinkedRole | None:
    """The EC2 Spot service-linked role, when the spec asks for it and a NodePool may launch spot."""
    if not (spec.platform.create_spot_service_linked_role and needs_spot_service_linked_role(spec)):
        return None
    return iam.ServiceLinkedRole(
        f"{name}-spot-service-linked-role",
        aws_service_name=SPOT_SERVICE,
        opts=opts,
    )


def interruption_queue_name(cluster_name: str) -> str:
    """The cluster's name, as [cfn] names the queue; a longer name keeps its first characters and a digest of the
    whole, so two clusters that share a long prefix still get their own queues."""
    if len(cluster_name) <= QUEUE_NAME_MAX:
        return cluster_name
    digest = hashlib.sha256(cluster_name.encode()).hexdigest()[:QUEUE_NAME_DIGEST]
    return f"{cluster_name[: QUEUE_NAME_MAX - QUEUE_NAME_DIGEST - 1]}-{digest}"


def account_of(arn: str) -> str:
    """'arn:aws:eks:us-east-1:123456789012:cluster/c' -> '123456789012' (no invoke, so plans stay offline)."""
    return arn.split(":")[4]


@dataclass(frozen=True)
class KarpenterAwsArgs:
    cluster: ClusterRef
    node_role_arn: pulumi.Input[str]  # the role of the nodes Karpenter launches; no managed node group may use it
    node_role_name: pulumi.Input[str]  # the same role, as the EC2NodeClass names it (`spec.role`)
    partition: str
    region: str
    environment: str


class KarpenterAws(pulumi.ComponentResource):
    """The controller's Pod Identity role and policies, the nodes' access entry, the interruption queue and rules."""

    controller_role_arn: pulumi.Output[str]
    interruption_queue_name: pulumi.Output[str]  # the chart's settings.interruptionQueue
    interruption_queue_arn: pulumi.Output[str]
    node_role_name: pulumi.Output[str]  # what the EC2NodeClass's `role` must be: the role granted below
    controller_identity: eks.PodIdentityAssociation  # the controller's pods get credentials from it at creation
    node_access: eks.AccessEntry  # lets the nodes Karpenter launches join the cluster
    cluster_subnet_ids: pulumi.Output[list[str]]
    cluster_security_group_id: pulumi.Output[str]

    def __init__(self, name: str, args: KarpenterAwsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws:Karpenter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster = args.cluster

        queue = sqs.Queue(
            f"{name}-interruption-queue",
            name=cluster.name.apply(interruption_queue_name),
            message_retention_seconds=QUEUE_RETENTION_SECONDS,
            sqs_managed_sse_enabled=True,
            opts=child,
        )
        sqs.QueuePolicy(
            f"{name}-interruption-queue-policy",
            queue_url=queue.url,
            policy=queue.arn.apply(lambda arn: json.dumps(karpenter_iam.interruption_queue_policy(arn))),
            opts=child,
        )
        for rule in karpenter_iam.INTERRUPTION_RULES:
            event_rule = cloudwatch.EventRule(
                f"{name}-{rule.segment}",
                description=f"Karpenter of {args.environment}: {rule.detail_type} to the interruption queue "
                f"([cfn] {rule.upstream})",
                event_pattern=json.dumps(rule.event_pattern),
                opts=child,
            )
            cloudwatch.EventTarget(
                f"{name}-{rule.segment}-target",
                rule=event_rule.name,
                target_id=karpenter_iam.QUEUE_TARGET_ID,
                arn=queue.arn,
                opts=child,
            )

        role = iam.Role(
            f"{name}-controller",
            description=f"Karpenter controller of {args.environment}",
            assume_role_policy=cluster.name.apply(
                lambda cluster_name: json.dumps(
                    policies.pod_identity_trust_policy(cluster_name, [NAMESPACE], SERVICE_ACCOUNT)
                )
            ),
            opts=child,
        )
        scope = pulumi.Output.all(cluster.name, cluster.arn, args.node_role_arn, queue.arn).apply(
            lambda v: karpenter_iam.ControllerScope(
                partition=args.partition,
                region=args.region,
                account_id=account_of(v[1]),
                cluster_name=v[0],
                node_role_arn=v[2],
                queue_arn=v[3],
            )
        )
        attachments = []
        for controller_policy in karpenter_iam.CONTROLLER_POLICIES:
            policy = iam.Policy(
                f"{name}-{controller_policy.segment}",
                description=f"Karpenter controller of {args.environment}: "
                f"[cfn] KarpenterController{controller_policy.group}Policy",
                policy=scope.apply(lambda s, build=controller_policy.document: json.dumps(build(s))),
                opts=child,
            )
            attachments.append(iam.RolePolicyAttachment(
                f"{name}-{controller_policy.segment}-attachment", role=role.name, policy_arn=policy.arn, opts=child
            ))
        association = eks.PodIdentityAssociation(
            f"{name}-controller-identity",
            cluster_name=cluster.name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            role_arn=role.arn,
            # The controller release waits for this association, so on teardown the policies are detached only once
            # the controller (deleted after its NodePools and EC2NodeClasses) is gone: it terminates nodes with them.
            opts=pulumi.ResourceOptions(parent=self, depends_on=attachments),
        )
        node_access = eks.AccessEntry(
            f"{name}-nodes",
            cluster_name=cluster.name,
            principal_arn=args.node_role_arn,
            type=NODE_ACCESS_TYPE,
            opts=child,
        )

        self.controller_role_arn = role.arn
        self.interruption_queue_name = queue.name
        self.interruption_queue_arn = queue.arn
        self.node_role_name = pulumi.Output.from_input(args.node_role_name)
        # The controller gets no credentials unless its association exists when its pods start (it retries AWS calls
        # until the policies are attached); the nodes it launches need their access entry to join.
        self.controller_identity = association
        self.node_access = node_access
        # Where the opt-in CPU NodePool's nodes go: the cluster's subnets and security group.
        self.cluster_subnet_ids = cluster.subnet_ids
        self.cluster_security_group_id = cluster.security_group_id
        self.register_outputs(
            {
                "controller_role_arn": self.controller_role_arn,
                "interruption_queue_name": self.interruption_queue_name,
                "interruption_queue_arn": self.interruption_queue_arn,
                "node_role_name": self.node_role_name,
            }
        )
