"""Karpenter's AWS side under the mock engine, against Karpenter v1.14.1's reference CloudFormation.

[cfn] is aws/karpenter-provider-aws@v1.14.1 website/content/en/preview/getting-started/getting-started-with-karpenter/
cloudformation.yaml; the sections are those of shared/reference/karpenter.md. The expected values are written out
here from those sources, not read back from components/aws/karpenter_iam.py.
"""

from __future__ import annotations

import json

import pulumi
import pytest
from parliament import analyze_policy_string, enhance_finding
from pulumi_aws import eks, iam
from rendered_artifacts import policy_documents, registrations
from iam_lint import justified, parliament_findings, with_community_auditors

from inferstack.aws import iam as policies
from inferstack.aws.cluster import ClusterRef
from inferstack.aws.karpenter import KarpenterAws, KarpenterAwsArgs, interruption_queue_name
from inferstack.engine.mocks import ACCOUNT_ID, PARTITION, PlanMocks
from inferstack.engine.recorder import Recording, Registration, record
from inferstack.policies.iam import iam_least_privilege, statement_problems
from inferstack.policies.runner import run_policies

REGION = "us-east-1"
CLUSTER = "inferstack-test"
COMPONENT = "test-karpenter"
CLUSTER_TAG = f"kubernetes.io/cluster/{CLUSTER}"
QUEUE = "aws:sqs/queue:Queue"
EVENT_RULE = "aws:cloudwatch/eventRule:EventRule"
EVENT_TARGET = "aws:cloudwatch/eventTarget:EventTarget"

# Section 6 table ([cfn] *Rule resources): source and detail-type of each EventBridge rule.
UPSTREAM_PATTERNS = [
    {"source": ["aws.health"], "detail-type": ["AWS Health Event"]},
    {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]},
    {"source": ["aws.ec2"], "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"]},
]
# Section 7.1 table ([cfn] the six *Policy resources): every Sid and its actions.
UPSTREAM_STATEMENTS = {
    "AllowScopedEC2InstanceAccessActions": {"ec2:RunInstances", "ec2:CreateFleet"},
    "AllowScopedEC2LaunchTemplateAccessActions": {"ec2:RunInstances", "ec2:CreateFleet"},
    "AllowScopedEC2InstanceActionsWithTags": {"ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"},
    "AllowScopedResourceCreationTagging": {"ec2:CreateTags"},
    "AllowScopedResourceTagging": {"ec2:CreateTags"},
    "AllowScopedDeletion": {"ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"},
    "AllowPassingInstanceRole": {"iam:PassRole"},
    "AllowScopedInstanceProfileCreationActions": {"iam:CreateInstanceProfile"},
    "AllowScopedInstanceProfileTagActions": {"iam:TagInstanceProfile"},
    "AllowScopedInstanceProfileActions": {
        "iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile",
    },
    "AllowAPIServerEndpointDiscovery": {"eks:DescribeCluster"},
    "AllowInterruptionQueueActions": {"sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"},
    "AllowZonalShiftStatusReadOnly": {"arc-zonal-shift:GetManagedResource"},
    "AllowRegionalReadActions": {
        "ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances", "ec2:DescribeInstanceStatus",
        "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplates",
        "ec2:DescribePlacementGroups", "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory",
        "ec2:DescribeSubnets",
    },
    "AllowSSMReadActions": {"ssm:GetParameter"},
    "AllowPricingReadActions": {"pricing:GetProducts"},
    "AllowUnscopedInstanceProfileListAction": {"iam:ListInstanceProfiles"},
    "AllowInstanceProfileReadActions": {"iam:GetInstanceProfile"},
}
# The statements [cfn] grants on Resource "*": read-only calls, the regional ones held to the region.
UPSTREAM_UNSCOPED = {
    "AllowRegionalReadActions", "AllowPricingReadActions", "AllowUnscopedInstanceProfileListAction",
    "AllowZonalShiftStatusReadOnly",
}
# The statements that create, tag, change or delete: [cfn] holds each to resources tagged (or being tagged)
# `kubernetes.io/cluster/<cluster>: owned`.
UPSTREAM_TAG_SCOPED = {
    "AllowScopedEC2LaunchTemplateAccessActions", "AllowScopedEC2InstanceActionsWithTags",
    "AllowScopedResourceCreationTagging", "AllowScopedResourceTagging", "AllowScopedDeletion",
    "AllowScopedInstanceProfileCreationActions", "AllowScopedInstanceProfileTagActions",
    "AllowScopedInstanceProfileActions",
}
# IAM quota: a managed policy holds at most 6,144 characters, whitespace not counted (IAM User Guide, "IAM and
# AWS STS quotas"); upstream split its policy into six in 1.9.0 to stay under it (section 7.1).
MANAGED_POLICY_MAX_CHARS = 6144


@pytest.fixture(scope="module")
def run() -> tuple[Recording, KarpenterAws]:
    built: dict[str, KarpenterAws] = {}

    def program() -> None:
        node_role = iam.Role(
            "test-node-role", assume_role_policy=json.dumps(policies.service_trust_policy("ec2.amazonaws.com"))
        )
        cluster = eks.Cluster(
            "test-eks", name=CLUSTER, role_arn="arn:aws:iam::123456789012:role/eks",
            vpc_config=eks.ClusterVpcConfigArgs(subnet_ids=["subnet-1"]),
        )
        ref = ClusterRef(
            name=cluster.name,
            arn=cluster.arn,
            endpoint=cluster.endpoint,
            certificate_authority=pulumi.Output.from_input("ca"),
            security_group_id=pulumi.Output.from_input("sg-1"),
            vpc_id=pulumi.Output.from_input("vpc-1"),
            subnet_ids=pulumi.Output.from_input(["subnet-1"]),
            kubernetes_version=pulumi.Output.from_input("1.36"),
        )
        karpenter = KarpenterAws(
            COMPONENT,
            KarpenterAwsArgs(
                cluster=ref, node_role_arn=node_role.arn, node_role_name=node_role.name,
                partition=PARTITION, region=REGION, environment="test",
            ),
        )
        built["karpenter"] = karpenter
        pulumi.export("node_role_arn", node_role.arn)
        pulumi.export("cluster_arn", cluster.arn)
        for output in ("controller_role_arn", "interruption_queue_name", "interruption_queue_arn", "node_role_name"):
            pulumi.export(output, getattr(karpenter, output))

    recording = record(program, "test", PlanMocks(REGION))
    return recording, built["karpenter"]


def _children(recording: Recording, type_token: str) -> list[Registration]:
    return [r for r in recording.of_type(type_token) if r.parent == COMPONENT]


def _one(recording: Recording, type_token: str) -> Registration:
    found = _children(recording, type_token)
    assert len(found) == 1, [r.name for r in found]
    return found[0]


def _statements(recording: Recording) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for policy in _children(recording, "aws:iam/policy:Policy"):
        for statement in json.loads(policy.inputs["policy"])["Statement"]:
            assert statement["Sid"] not in found, statement["Sid"]
            found[statement["Sid"]] = statement
    return found


def _as_set(value: str | list[str]) -> set[str]:
    return {value} if isinstance(value, str) else set(value)


def test_every_output_read_is_answered(run):
    recording, _ = run
    assert recording.unanswered == []


def test_queue_is_named_for_the_cluster_and_keeps_messages_five_minutes_encrypted(run):
    """Section 6, [cfn] KarpenterInterruptionQueue: QueueName ${ClusterName}, MessageRetentionPeriod 300,
    SqsManagedSseEnabled; the controller takes the queue's name (settings.interruptionQueue)."""
    recording, _ = run
    queue = _one(recording, QUEUE)
    assert queue.inputs["name"] == CLUSTER == recording.outputs["interruption_queue_name"]
    assert queue.inputs["messageRetentionSeconds"] == 300
    assert queue.inputs["sqsManagedSseEnabled"] is True
    assert recording.outputs["interruption_queue_arn"] == f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{CLUSTER}"


def test_queue_names_stay_within_sqs_limit_and_apart():
    """[cfn] names the queue after the cluster; SQS CreateQueue takes at most 80 characters, EKS cluster names 100."""
    assert interruption_queue_name("prod") == "prod"
    long_a, long_b = "a" * 90 + "-one", "a" * 90 + "-two"
    assert len(interruption_queue_name(long_a)) == 80
    assert interruption_queue_name(long_a) != interruption_queue_name(long_b)
    assert interruption_queue_name("b" * 80) == "b" * 80


def test_exactly_the_five_upstream_rules_each_target_the_queue(run):
    """Section 6, [cfn] ScheduledChangeRule, SpotInterruptionRule, RebalanceRule, InstanceStateChangeRule and
    CapacityReservationInterruptionRule (1.10.0+), each with target Id KarpenterInterruptionQueueTarget on the queue."""
    recording, _ = run
    rules = _children(recording, EVENT_RULE)
    patterns = [json.loads(rule.inputs["eventPattern"]) for rule in rules]
    key = lambda p: json.dumps(p, sort_keys=True)  # noqa: E731
    assert sorted(patterns, key=key) == sorted(UPSTREAM_PATTERNS, key=key)
    targets = _children(recording, EVENT_TARGET)
    assert len(targets) == len(rules)
    queue = _one(recording, QUEUE)
    for target in targets:
        assert target.inputs["arn"] == recording.outputs["interruption_queue_arn"]
        assert target.inputs["targetId"] == "KarpenterInterruptionQueueTarget"
        assert queue.name in target.input_dependencies
    # Each rule feeds exactly one target.
    fed = sorted(d for t in targets for d in t.input_dependencies if d in {r.name for r in rules})
    assert fed == sorted(r.name for r in rules)


def test_queue_policy_lets_eventbridge_send_and_refuses_plain_http(run):
    """Section 6, [cfn] KarpenterInterruptionQueuePolicy: events.amazonaws.com and sqs.amazonaws.com may
    sqs:SendMessage to the queue; DenyHTTP denies sqs:* when aws:SecureTransport is false."""
    recording, _ = run
    queue_arn = recording.outputs["interruption_queue_arn"]
    queue_policy = _one(recording, "aws:sqs/queuePolicy:QueuePolicy")
    assert queue_policy.inputs["queueUrl"] == f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT_ID}/{CLUSTER}"
    statements = json.loads(queue_policy.inputs["policy"])["Statement"]
    allow = [s for s in statements if s["Effect"] == "Allow"]
    assert len(allow) == 1
    assert set(allow[0]["Principal"]["Service"]) == {"events.amazonaws.com", "sqs.amazonaws.com"}
    assert allow[0]["Action"] == "sqs:SendMessage" and allow[0]["Resource"] == queue_arn
    deny = [s for s in statements if s["Effect"] == "Deny"]
    assert [s.get("Sid") for s in deny] == ["DenyHTTP"]
    assert deny[0]["Principal"] == "*" and deny[0]["Action"] == "sqs:*" and deny[0]["Resource"] == queue_arn
    assert str(deny[0]["Condition"]["Bool"]["aws:SecureTransport"]).lower() == "false"


def test_controller_role_is_assumed_through_pod_identity_by_kube_system_karpenter(run):
    """Section 7.3: Pod Identity trust is pods.eks.amazonaws.com with sts:AssumeRole and sts:TagSession, and the
    getting-started association is namespace kube-system, service account karpenter."""
    recording, _ = run
    role = _one(recording, "aws:iam/role:Role")
    (trust,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(trust["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    assert trust["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-service-account"] == "karpenter"
    association = _one(recording, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == ("kube-system", "karpenter")
    assert association.inputs["clusterName"] == CLUSTER
    assert association.inputs["roleArn"] == recording.outputs["controller_role_arn"]


def test_controller_role_carries_the_six_upstream_policies(run):
    """Section 7.1: [cfn] attaches six managed policies (NodeLifecycle, IAMIntegration, EKSIntegration, Interruption,
    ZonalShift, ResourceDiscovery), each within IAM's managed-policy size."""
    recording, karpenter = run
    documents = _children(recording, "aws:iam/policy:Policy")
    attachments = _children(recording, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert len(documents) == len(attachments) == 6
    for document in documents:
        compact = json.dumps(json.loads(document.inputs["policy"]), separators=(",", ":"))
        assert len(compact) <= MANAGED_POLICY_MAX_CHARS, document.name
    for attachment in attachments:
        assert attachment.inputs["role"] == recording.outputs["controller_role_arn"].rsplit("/", 1)[1]
    # The chart's pods get credentials only from an association that exists when they start.
    assert isinstance(karpenter.controller_identity, eks.PodIdentityAssociation)
    assert isinstance(karpenter.node_access, eks.AccessEntry)


def test_every_upstream_sid_and_action_is_granted_and_no_more(run):
    """Section 7.1, [cfn]: the Sids and actions of the six policies, DescribeInstanceStatus (1.12+) among them."""
    recording, _ = run
    statements = _statements(recording)
    assert {sid: _as_set(s["Action"]) for sid, s in statements.items()} == UPSTREAM_STATEMENTS
    assert all(s["Effect"] == "Allow" for s in statements.values())


def test_resources_are_scoped_as_upstream_scopes_them(run):
    """Section 7.1, [cfn]: no Action '*'; Resource '*' only on the read-only statements upstream leaves unscoped;
    the node role, cluster and queue by ARN; placement groups (1.11+) and capacity reservations (1.3+) launchable."""
    recording, _ = run
    statements = _statements(recording)
    cluster_arn = f"arn:aws:eks:{REGION}:{ACCOUNT_ID}:cluster/{CLUSTER}"
    for sid, statement in statements.items():
        assert "*" not in _as_set(statement["Action"]), sid
        assert ("*" in _as_set(statement["Resource"])) == (sid in UPSTREAM_UNSCOPED), sid
    assert statements["AllowPassingInstanceRole"]["Resource"] == recording.outputs["node_role_arn"]
    assert set(statements["AllowPassingInstanceRole"]["Condition"]["StringEquals"]["iam:PassedToService"]) == {
        "ec2.amazonaws.com", "ec2.amazonaws.com.cn",
    }
    assert statements["AllowAPIServerEndpointDiscovery"]["Resource"] == cluster_arn == recording.outputs["cluster_arn"]
    assert statements["AllowInterruptionQueueActions"]["Resource"] == recording.outputs["interruption_queue_arn"]
    zonal = statements["AllowZonalShiftStatusReadOnly"]["Condition"]["StringEquals"]
    assert zonal == {"arc-zonal-shift:ResourceIdentifier": cluster_arn}
    regional = statements["AllowRegionalReadActions"]["Condition"]["StringEquals"]
    assert regional == {"aws:RequestedRegion": REGION}
    launchable = set(statements["AllowScopedEC2InstanceAccessActions"]["Resource"])
    assert {f"arn:aws:ec2:{REGION}:*:placement-group/*", f"arn:aws:ec2:{REGION}:*:capacity-reservation/*"} <= launchable
    assert statements["AllowSSMReadActions"]["Resource"] == f"arn:aws:ssm:{REGION}::parameter/aws/service/*"
    profiles = f"arn:aws:iam::{ACCOUNT_ID}:instance-profile/*"
    for sid in ("AllowScopedInstanceProfileCreationActions", "AllowScopedInstanceProfileTagActions",
                "AllowScopedInstanceProfileActions", "AllowInstanceProfileReadActions"):
        assert statements[sid]["Resource"] == profiles, sid


def test_mutating_statements_are_held_to_this_clusters_tags(run):
    """Section 7.1, [cfn]: every create, tag or delete statement needs `kubernetes.io/cluster/<cluster>: owned`
    (on the resource or the request), launches also `eks:eks-cluster-name` and a NodePool tag, instance profiles
    the region and an EC2NodeClass tag (sections 3.3, 3.8)."""
    recording, _ = run
    statements = _statements(recording)
    for sid in UPSTREAM_TAG_SCOPED:
        equals = statements[sid]["Condition"]["StringEquals"]
        owned = {k for k, v in equals.items() if k.endswith(f"/{CLUSTER_TAG}") and v == "owned"}
        assert owned, sid
    launch = statements["AllowScopedEC2InstanceActionsWithTags"]["Condition"]
    assert launch["StringEquals"][f"aws:RequestTag/{CLUSTER_TAG}"] == "owned"
    assert launch["StringEquals"]["aws:RequestTag/eks:eks-cluster-name"] == CLUSTER
    assert launch["StringLike"] == {"aws:RequestTag/karpenter.sh/nodepool": "*"}
    tagging = statements["AllowScopedResourceCreationTagging"]["Condition"]["StringEquals"]
    assert set(tagging["ec2:CreateAction"]) == {"RunInstances", "CreateFleet", "CreateLaunchTemplate"}
    retag = statements["AllowScopedResourceTagging"]["Condition"]
    post_launch_keys = set(retag["ForAllValues:StringEquals"]["aws:TagKeys"])
    assert post_launch_keys == {"eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"}
    assert retag["StringEqualsIfExists"] == {"aws:RequestTag/eks:eks-cluster-name": CLUSTER}
    create_profile = statements["AllowScopedInstanceProfileCreationActions"]["Condition"]
    assert create_profile["StringEquals"]["aws:RequestTag/topology.kubernetes.io/region"] == REGION
    assert create_profile["StringLike"] == {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}
    for sid in ("AllowScopedEC2LaunchTemplateAccessActions", "AllowScopedDeletion", "AllowScopedResourceTagging"):
        assert statements[sid]["Condition"]["StringLike"] == {"aws:ResourceTag/karpenter.sh/nodepool": "*"}, sid


def test_node_role_gets_an_ec2_linux_access_entry(run):
    """Section 7.2: the node role's access entry is type EC2_LINUX (EKS CreateAccessEntry; terraform-aws-modules
    karpenter v21.19.0 aws_eks_access_entry.node)."""
    recording, _ = run
    entry = _one(recording, "aws:eks/accessEntry:AccessEntry")
    assert entry.inputs["type"] == "EC2_LINUX"
    assert entry.inputs["principalArn"] == recording.outputs["node_role_arn"]
    assert "kubernetesGroups" not in entry.inputs
    assert recording.outputs["node_role_name"] == recording.outputs["node_role_arn"].rsplit("/", 1)[1]


def test_every_resource_is_parented_to_the_component(run):
    """The project's rule: a component's resources are its children (README, Layout)."""
    recording, _ = run
    component = recording.named(COMPONENT)
    assert component.type == "inferstack:aws:Karpenter"
    made_by_the_test = {"test-node-role", "test-eks"}
    ours = [r for r in recording.resources if r.name not in made_by_the_test and r is not component]
    assert len(ours) == 2 + 5 * 2 + 1 + 6 * 2 + 2  # queue and its policy, rules and targets, role, policies and
    # attachments, association and access entry
    assert {r.parent for r in ours} == {COMPONENT}


def test_documents_pass_parliament(run):
    """duo-labs/parliament with its community auditors, as tests/test_outside_checks.py lints every render: the
    trust and queue policies as they are, the controller policies but for the findings `justified` explains."""
    recording, _ = run
    documents = policy_documents(registrations(recording.resources))
    controller = [d for d in documents if d.where.startswith(f"aws:iam/policy:Policy {COMPONENT}-")]
    assert len(controller) == 6
    others = [d for d in documents if d not in controller]
    assert {d.where.split(" ", 1)[0] for d in others} >= {"aws:iam/role:Role", "aws:sqs/queuePolicy:QueuePolicy"}
    assert parliament_findings(others) == []
    with_community_auditors()
    unjustified = []
    for found in controller:
        for finding in analyze_policy_string(json.dumps(found.document), include_community_auditors=True).findings:
            finding = enhance_finding(finding)
            if not justified(finding, found.document):
                unjustified.append(f"{found.where}: {finding.issue}: {finding.detail or finding.location}")
    assert unjustified == []


def test_parliament_justifications_are_narrow():
    """A RunInstances resource type no statement grants, and any other finding, still fail."""
    document = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": "arn:aws:ec2:us-east-1:*:instance/*"}]}
    with_community_auditors()
    findings = [enhance_finding(f) for f in analyze_policy_string(json.dumps(document)).findings]
    assert [f.issue for f in findings] == ["RESOURCE_MISMATCH"]
    assert not justified(findings[0], document)


def test_documents_pass_the_packs_iam_rule(run):
    """policies/iam.py iam-least-privilege over the registered IAM resources, and its statement check over every
    document, the queue policy included (the rule itself reads IAM resource types only)."""
    recording, _ = run
    (result,) = run_policies([r.as_dict() for r in recording.resources], "test", policies=[iam_least_privilege])
    assert result.violations == []
    for document in policy_documents(registrations(recording.resources)):
        for statement in document.document["Statement"]:
            assert statement_problems(statement) == [], (document.where, statement.get("Sid"))
