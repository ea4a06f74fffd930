"""Karpenter's AWS-side documents as plain data: the controller's six IAM policies, the interruption queue's
policy and the EventBridge patterns that feed it.

Each is transcribed from Karpenter v1.14.1's reference CloudFormation, [cfn] =
aws/karpenter-provider-aws@v1.14.1 website/content/en/preview/getting-started/getting-started-with-karpenter/
cloudformation.yaml (shared/reference/karpenter.md sections 6 and 7.1): the same Sids, actions, resource ARNs and
conditions, with the CFN substitutions (${AWS::Partition}, ${AWS::Region}, ${AWS::AccountId}, ${ClusterName},
the node role and queue ARNs) made parameters. Upstream split the single policy into these six in 1.9.0 with no
change in permissions: one document of all of them is some 5,900 characters for a short cluster name and passes
IAM's 6,144-character managed-policy limit as the name grows (section 7.1; the cluster name appears in it 16 times).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

VERSION = "2012-10-17"
# What the EC2NodeClass role may be passed to ([cfn] AllowPassingInstanceRole; the .cn name is China's partition).
EC2_SERVICES = ("ec2.amazonaws.com", "ec2.amazonaws.com.cn")
# The only instance tags Karpenter adds after launch ([cfn] AllowScopedResourceTagging).
POST_LAUNCH_TAG_KEYS = ("eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name")
# The EC2 calls that may tag what they create ([cfn] AllowScopedResourceCreationTagging).
TAGGED_CREATE_ACTIONS = ("RunInstances", "CreateFleet", "CreateLaunchTemplate")
NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
REGION_TAG = "topology.kubernetes.io/region"
CLUSTER_NAME_TAG = "eks:eks-cluster-name"
# The read-only EC2 calls [cfn] grants on Resource "*" (they take no resource ARN), held to the cluster's region.
REGIONAL_READ_ACTIONS = (
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeImages",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceStatus",  # instance health checks without the queue, first in 1.12.0 (section 6)
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribePlacementGroups",  # placementGroupSelector, first in 1.11.0 (section 4.4)
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
)


@dataclass(frozen=True)
class ControllerScope:
    """What the controller's policies are narrowed to: one cluster, its region, its node role and its queue."""

    partition: str
    region: str
    account_id: str
    cluster_name: str
    node_role_arn: str
    queue_arn: str

    @property
    def cluster_arn(self) -> str:
        return f"arn:{self.partition}:eks:{self.region}:{self.account_id}:cluster/{self.cluster_name}"

    @property
    def cluster_tag(self) -> str:
        """The tag Karpenter puts on everything it launches, `kubernetes.io/cluster/<cluster>: owned` (section 3.8)."""
        return f"kubernetes.io/cluster/{self.cluster_name}"

    def ec2(self, resource: str, account: str = "*") -> str:
        """A regional EC2 ARN; public images and snapshots have no account (upstream's `::image/*`)."""
        return f"arn:{self.partition}:ec2:{self.region}:{account}:{resource}"

    @property
    def instance_profiles(self) -> str:
        return f"arn:{self.partition}:iam::{self.account_id}:instance-profile/*"


def _statement(sid: str, actions: list[str] | str, resources: list[str] | str, condition: dict | None = None) -> dict:
    statement: dict = {"Sid": sid, "Effect": "Allow", "Resource": resources, "Action": actions}
    if condition:
        statement["Condition"] = condition
    return statement


def _document(*statements: dict) -> dict:
    return {"Version": VERSION, "Statement": list(statements)}


def node_lifecycle_policy(scope: ControllerScope) -> dict:
    """[cfn] NodeLifecyclePolicy: launch, tag and terminate only what carries this cluster's and a NodePool's tags."""
    launched = [
        scope.ec2("fleet/*"),
        scope.ec2("instance/*"),
        scope.ec2("volume/*"),
        scope.ec2("network-interface/*"),
        scope.ec2("launch-template/*"),
        scope.ec2("spot-instances-request/*"),
    ]
    owned_resource = {
        "StringEquals": {f"aws:ResourceTag/{scope.cluster_tag}": "owned"},
        "StringLike": {f"aws:ResourceTag/{NODEPOOL_TAG}": "*"},
    }
    requested = {
        f"aws:RequestTag/{scope.cluster_tag}": "owned",
        f"aws:RequestTag/{CLUSTER_NAME_TAG}": scope.cluster_name,
    }
    return _document(
        _statement(
            "AllowScopedEC2InstanceAccessActions",
            ["ec2:RunInstances", "ec2:CreateFleet"],
            [
                scope.ec2("image/*", account=""),
                scope.ec2("snapshot/*", account=""),
                scope.ec2("security-group/*"),
                scope.ec2("subnet/*"),
                scope.ec2("capacity-reservation/*"),  # ODCRs and Capacity Blocks, first in 1.3.0 (section 4.2)
                scope.ec2("placement-group/*"),  # first in 1.11.0 (section 4.4)
            ],
        ),
        _statement(
            "AllowScopedEC2LaunchTemplateAccessActions",
            ["ec2:RunInstances", "ec2:CreateFleet"],
            scope.ec2("launch-template/*"),
            owned_resource,
        ),
        _statement(
            "AllowScopedEC2InstanceActionsWithTags",
            ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            launched,
            {"StringEquals": dict(requested), "StringLike": {f"aws:RequestTag/{NODEPOOL_TAG}": "*"}},
        ),
        _statement(
            "AllowScopedResourceCreationTagging",
            "ec2:CreateTags",
            launched,
            {
                "StringEquals": {**requested, "ec2:CreateAction": list(TAGGED_CREATE_ACTIONS)},
                "StringLike": {f"aws:RequestTag/{NODEPOOL_TAG}": "*"},
            },
        ),
        _statement(
            "AllowScopedResourceTagging",
            "ec2:CreateTags",
            scope.ec2("instance/*"),
            {
                **owned_resource,
                "StringEqualsIfExists": {f"aws:RequestTag/{CLUSTER_NAME_TAG}": scope.cluster_name},
                "ForAllValues:StringEquals": {"aws:TagKeys": list(POST_LAUNCH_TAG_KEYS)},
            },
        ),
        _statement(
            "AllowScopedDeletion",
            ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            [scope.ec2("instance/*"), scope.ec2("launch-template/*")],
            owned_resource,
        ),
    )


def iam_integration_policy(scope: ControllerScope) -> dict:
    """[cfn] IAMIntegrationPolicy: pass the node role to EC2 and manage only the instance profiles Karpenter tagged
    for this cluster, region and an EC2NodeClass (section 3.3)."""
    resource_scope = {
        f"aws:ResourceTag/{scope.cluster_tag}": "owned",
        f"aws:ResourceTag/{REGION_TAG}": scope.region,
    }
    request_scope = {
        f"aws:RequestTag/{scope.cluster_tag}": "owned",
        f"aws:RequestTag/{CLUSTER_NAME_TAG}": scope.cluster_name,
        f"aws:RequestTag/{REGION_TAG}": scope.region,
    }
    return _document(
        _statement(
            "AllowPassingInstanceRole",
            "iam:PassRole",
            scope.node_role_arn,
            {"StringEquals": {"iam:PassedToService": list(EC2_SERVICES)}},
        ),
        _statement(
            "AllowScopedInstanceProfileCreationActions",
            ["iam:CreateInstanceProfile"],
            scope.instance_profiles,
            {"StringEquals": request_scope, "StringLike": {f"aws:RequestTag/{NODECLASS_TAG}": "*"}},
        ),
        _statement(
            "AllowScopedInstanceProfileTagActions",
            ["iam:TagInstanceProfile"],
            scope.instance_profiles,
            {
                "StringEquals": {**resource_scope, **request_scope},
                "StringLike": {f"aws:ResourceTag/{NODECLASS_TAG}": "*", f"aws:RequestTag/{NODECLASS_TAG}": "*"},
            },
        ),
        _statement(
            "AllowScopedInstanceProfileActions",
            ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
            scope.instance_profiles,
            {"StringEquals": resource_scope, "StringLike": {f"aws:ResourceTag/{NODECLASS_TAG}": "*"}},
        ),
    )


def eks_integration_policy(scope: ControllerScope) -> dict:
    """[cfn] EKSIntegrationPolicy: find this cluster's API endpoint (section 7.3)."""
    return _document(_statement("AllowAPIServerEndpointDiscovery", "eks:DescribeCluster", scope.cluster_arn))


def interruption_policy(scope: ControllerScope) -> dict:
    """[cfn] InterruptionPolicy: read and delete messages of this cluster's interruption queue only (section 6)."""
    return _document(
        _statement(
            "AllowInterruptionQueueActions",
            ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
            scope.queue_arn,
        )
    )


def zonal_shift_policy(scope: ControllerScope) -> dict:
    """[cfn] ZonalShiftPolicy (first in 1.12.0): read the zonal-shift status of this cluster only."""
    return _document(
        _statement(
            "AllowZonalShiftStatusReadOnly",
            ["arc-zonal-shift:GetManagedResource"],
            "*",
            {"StringEquals": {"arc-zonal-shift:ResourceIdentifier": scope.cluster_arn}},
        )
    )


def resource_discovery_policy(scope: ControllerScope) -> dict:
    """[cfn] ResourceDiscoveryPolicy: the read-only calls, regional ones held to the cluster's region."""
    return _document(
        _statement(
            "AllowRegionalReadActions",
            list(REGIONAL_READ_ACTIONS),
            "*",
            {"StringEquals": {"aws:RequestedRegion": scope.region}},
        ),
        _statement(
            "AllowSSMReadActions",
            "ssm:GetParameter",
            f"arn:{scope.partition}:ssm:{scope.region}::parameter/aws/service/*",  # AWS's public parameters
        ),
        _statement("AllowPricingReadActions", "pricing:GetProducts", "*"),
        _statement("AllowUnscopedInstanceProfileListAction", "iam:ListInstanceProfiles", "*"),
        _statement("AllowInstanceProfileReadActions", "iam:GetInstanceProfile", scope.instance_profiles),
    )


@dataclass(frozen=True)
class ControllerPolicy:
    """One of the six managed policies, named `KarpenterController<group>Policy-<cluster>` in [cfn]."""

    group: str
    segment: str  # its part of our resource names
    document: Callable[[ControllerScope], dict]


CONTROLLER_POLICIES = (
    ControllerPolicy("NodeLifecycle", "node-lifecycle", node_lifecycle_policy),
    ControllerPolicy("IAMIntegration", "iam-integration", iam_integration_policy),
    ControllerPolicy("EKSIntegration", "eks-integration", eks_integration_policy),
    ControllerPolicy("Interruption", "interruption", interruption_policy),
    ControllerPolicy("ZonalShift", "zonal-shift", zonal_shift_policy),
    ControllerPolicy("ResourceDiscovery", "resource-discovery", resource_discovery_policy),
)


def interruption_queue_policy(queue_arn: str) -> dict:
    """[cfn] KarpenterInterruptionQueuePolicy: EventBridge (and SQS) may send to the queue; nothing may use it
    without TLS."""
    return {
        "Version": VERSION,
        "Id": "EC2InterruptionPolicy",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
            },
            {
                "Sid": "DenyHTTP",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "sqs:*",
                "Resource": queue_arn,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ],
    }


@dataclass(frozen=True)
class InterruptionRule:
    """One EventBridge rule of [cfn] that forwards an EC2 or Health event to the interruption queue (section 6)."""

    upstream: str  # the [cfn] resource name
    segment: str  # its part of our resource names, short enough for EventBridge's 64-character rule names
    source: str
    detail_type: str

    @property
    def event_pattern(self) -> dict:
        return {"source": [self.source], "detail-type": [self.detail_type]}


# [cfn]: every AWS Health event (the controller keeps scheduledChange events of EC2), spot 2-minute warnings,
# rebalance recommendations, instance state changes and, first in 1.10.0, interruptible ODCR warnings.
INTERRUPTION_RULES = (
    InterruptionRule("ScheduledChangeRule", "health", "aws.health", "AWS Health Event"),
    InterruptionRule("SpotInterruptionRule", "spot", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    InterruptionRule("RebalanceRule", "rebalance", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
    InterruptionRule("InstanceStateChangeRule", "state-change", "aws.ec2", "EC2 Instance State-change Notification"),
    InterruptionRule(
        "CapacityReservationInterruptionRule",
        "reservation",
        "aws.ec2",
        "EC2 Capacity Reservation Instance Interruption Warning",
    ),
)
# The target Id every [cfn] rule gives the queue.
QUEUE_TARGET_ID = "KarpenterInterruptionQueueTarget"
