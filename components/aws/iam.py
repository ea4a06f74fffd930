"""IAM policy documents as plain data, and the service roles built from them.

Documents are Python dicts serialised with json.dumps (no provider invoke), so tests and the policy
pack can read every statement the program registers. Only AWS-managed policies are attached by ARN;
every statement written here names its actions and resources exactly: no `*` action, no `s3:*`,
no `*` resource.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_aws import iam

VERSION = "2012-10-17"

# AWS-managed policies a role needs, by role.
CLUSTER_POLICIES = ("AmazonEKSClusterPolicy",)
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonEKS_CNI_Policy")
# Karpenter's node role as its reference CloudFormation attaches it (shared/reference/karpenter.md 7.2), with image
# pulls only; without AmazonSSMManagedInstanceCore: no SSM sessions onto GPU nodes that hold model weights.
KARPENTER_NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly", "AmazonEKS_CNI_Policy")
CLUSTER_ADMIN_ACCESS_POLICY = "AmazonEKSClusterAdminPolicy"


def partition_of(region: str) -> str:
    """The ARN partition of a region, so ARNs stay known at plan time without an invoke."""
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("cn-"):
        return "aws-cn"
    return "aws"


def managed_policy_arn(partition: str, name: str) -> str:
    return f"arn:{partition}:iam::aws:policy/{name}"


def eks_access_policy_arn(partition: str, name: str) -> str:
    return f"arn:{partition}:eks::aws:cluster-access-policy/{name}"


def service_trust_policy(service: str, *, tag_session: bool = False, conditions: Mapping | None = None) -> dict:
    """Who may assume a role: one AWS service principal (with sts:TagSession for session tags)."""
    statement: dict = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": ["sts:AssumeRole", "sts:TagSession"] if tag_session else "sts:AssumeRole",
    }
    if conditions:
        statement["Condition"] = dict(conditions)
    return {"Version": VERSION, "Statement": [statement]}


def pod_identity_trust_policy(cluster_name: str, namespaces: Sequence[str], service_account: str) -> dict:
    """EKS Pod Identity trust, narrowed by its session tags to one cluster, these namespaces and one service account."""
    return service_trust_policy(
        "pods.eks.amazonaws.com",
        tag_session=True,
        conditions={
            "StringEquals": {
                "aws:RequestTag/eks-cluster-name": cluster_name,
                "aws:RequestTag/kubernetes-namespace": sorted(set(namespaces)),
                "aws:RequestTag/kubernetes-service-account": service_account,
            }
        },
    )


@dataclass(frozen=True)
class S3ReadGrant:
    """Read access to the objects under one key prefix of one bucket ('' is the whole bucket)."""

    bucket_arn: str
    prefix: str

    def __post_init__(self) -> None:
        if self.prefix and not self.prefix.endswith("/"):
            raise ValueError(f"prefix {self.prefix!r} must end with '/' so it cannot match sibling keys")


def s3_read_policy(grants: Iterable[S3ReadGrant]) -> dict:
    """List a bucket only under the granted prefixes and get only the objects below them."""
    by_bucket: dict[str, list[str]] = {}
    for grant in grants:
        by_bucket.setdefault(grant.bucket_arn, []).append(grant.prefix)
    statements = []
    for i, (bucket_arn, prefixes) in enumerate(sorted(by_bucket.items())):
        prefixes = sorted(set(prefixes))
        whole_bucket = "" in prefixes
        listing: dict = {"Sid": f"ListWeights{i}", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn}
        if not whole_bucket:
            listing["Condition"] = {"StringLike": {"s3:prefix": [p for prefix in prefixes for p in (prefix, f"{prefix}*")]}}
        objects = [f"{bucket_arn}/*"] if whole_bucket else [f"{bucket_arn}/{prefix}*" for prefix in prefixes]
        statements.append(listing)
        statements.append({"Sid": f"GetWeights{i}", "Effect": "Allow", "Action": "s3:GetObject", "Resource": objects})
    if not statements:
        raise ValueError("an S3 read policy needs at least one grant")
    return {"Version": VERSION, "Statement": statements}


def s3_batch_policy(weights: Iterable[S3ReadGrant], inputs: Iterable[str], outputs: Iterable[str]) -> dict:
    """What a batch job needs: its model's weights, its input objects, and writes under its output prefixes.

    `inputs` are object ARNs; `outputs` are ARN prefixes ending in '/'.
    """
    statements = list(s3_read_policy(weights)["Statement"])
    statements.append({"Sid": "GetBatchInput", "Effect": "Allow", "Action": "s3:GetObject", "Resource": sorted(set(inputs))})
    statements.append(
        {
            "Sid": "PutBatchOutput",
            "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:AbortMultipartUpload"],
            "Resource": sorted({f"{prefix}*" for prefix in outputs}),
        }
    )
    return {"Version": VERSION, "Statement": statements}


def service_role(
    name: str,
    *,
    service: str,
    managed_policies: Sequence[str],
    partition: str,
    description: str,
    parent: pulumi.Resource,
) -> tuple[iam.Role, list[iam.RolePolicyAttachment]]:
    """A role an AWS service assumes, with AWS-managed policies attached (one attachment each)."""
    opts = pulumi.ResourceOptions(parent=parent)
    role = iam.Role(
        name,
        assume_role_policy=json.dumps(service_trust_policy(service)),
        description=description,
        opts=opts,
    )
    attachments = [
        iam.RolePolicyAttachment(
            f"{name}-{policy}",
            role=role.name,
            policy_arn=managed_policy_arn(partition, policy),
            opts=opts,
        )
        for policy in managed_policies
    ]
    return role, attachments
