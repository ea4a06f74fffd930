"""cluster-autoscaler: grows the GPU node groups for pending pods and shrinks idle ones.

It finds the node groups by the tags EKS puts on their Auto Scaling groups
(`k8s.io/cluster-autoscaler/enabled`, `k8s.io/cluster-autoscaler/<cluster>`) and gets AWS credentials
through EKS Pod Identity. Its policy may describe everything (those actions take no resource scoping in
AWS) but may only resize or shrink Auto Scaling groups tagged as this cluster's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws
from pulumi_aws import eks, iam
from pulumi_kubernetes.helm.v3 import Release

from inferstack.aws.iam import VERSION, pod_identity_trust_policy
from inferstack.catalog.charts import chart, cluster_autoscaler_image_tags
from inferstack.helm import helm_release
from inferstack.spec import CreateCluster, StackSpec

CHART = "cluster-autoscaler"
SERVICE_ACCOUNT = "cluster-autoscaler"

# Actions AWS does not scope to resources: granted on "*".
DESCRIBE_ACTIONS = [
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "autoscaling:DescribeTags",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
]
SCALE_ACTIONS = ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]


def cluster_tag(cluster_name: str) -> str:
    """The tag EKS sets (value 'owned') on the Auto Scaling groups of a cluster's managed node groups."""
    return f"k8s.io/cluster-autoscaler/{cluster_name}"


def autoscaler_policy(cluster_name: str, region: str, account_id: str, partition: str) -> dict[str, Any]:
    """Least privilege: describe anything, resize only this cluster's groups, read only its node groups."""
    return {
        "Version": VERSION,
        "Statement": [
            {"Sid": "Describe", "Effect": "Allow", "Action": DESCRIBE_ACTIONS, "Resource": "*"},
            {
                "Sid": "ScaleOwnGroups",
                "Effect": "Allow",
                "Action": SCALE_ACTIONS,
                "Resource": f"arn:{partition}:autoscaling:{region}:{account_id}:autoScalingGroup:*:"
                "autoScalingGroupName/*",
                "Condition": {"StringEquals": {f"aws:ResourceTag/{cluster_tag(cluster_name)}": "owned"}},
            },
            {
                "Sid": "ReadOwnNodeGroups",
                "Effect": "Allow",
                "Action": "eks:DescribeNodegroup",
                "Resource": f"arn:{partition}:eks:{region}:{account_id}:nodegroup/{cluster_name}/*/*",
            },
        ],
    }


def image_tag(spec: StackSpec) -> str | None:
    """The autoscaler image matching the cluster's minor version (the spec check makes sure the catalog
    has one); None for an existing cluster, whose version the spec does not say (the chart's own image)."""
    if not isinstance(spec.cluster, CreateCluster):
        return None
    return cluster_autoscaler_image_tags()[spec.cluster.kubernetes_version]


def autoscaler_values(spec: StackSpec, cluster_name: pulumi.Input[str]) -> dict[str, Any]:
    values: dict[str, Any] = {
        "cloudProvider": "aws",
        "awsRegion": spec.region,
        "autoDiscovery": {"clusterName": cluster_name},
        "fullnameOverride": CHART,
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
        "extraArgs": {
            "balance-similar-node-groups": True,  # keep a pool's zones even
            "expander": "least-waste",
            "skip-nodes-with-system-pods": False,  # GPU nodes only run daemonsets besides workloads
        },
    }
    if any(pool.device_mode == "dra" for pool in spec.node_pools):
        # It simulates claims only with this on (off by default on 1.34, locked on from 1.35): catalog/dra.json.
        values["extraArgs"]["enable-dynamic-resource-allocation"] = True
    tag = image_tag(spec)
    if tag is not None:
        values["image"] = {"tag": tag}
    return values


@dataclass(frozen=True)
class ClusterAutoscalerArgs:
    spec: StackSpec
    cluster_name: pulumi.Input[str]


class ClusterAutoscaler(pulumi.ComponentResource):
    """IAM role + Pod Identity association, then the pinned chart in kube-system."""

    role: iam.Role
    release: Release

    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:ClusterAutoscaler", name, None, opts)
        spec = args.spec
        child = pulumi.ResourceOptions(parent=self)
        namespace = chart(CHART).namespace
        cluster_name = pulumi.Output.from_input(args.cluster_name)
        account = pulumi_aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self)).account_id
        partition = pulumi_aws.get_partition_output(opts=pulumi.InvokeOutputOptions(parent=self)).partition

        self.role = iam.Role(
            f"{name}-role",
            assume_role_policy=cluster_name.apply(
                lambda cluster: json.dumps(pod_identity_trust_policy(cluster, [namespace], SERVICE_ACCOUNT))
            ),
            description="cluster-autoscaler: resize this cluster's node groups",
            opts=child,
        )
        iam.RolePolicy(
            f"{name}-policy",
            role=self.role.id,
            policy=pulumi.Output.all(cluster_name, account, partition).apply(
                lambda a: json.dumps(autoscaler_policy(a[0], spec.region, a[1], a[2]))
            ),
            opts=child,
        )
        association = eks.PodIdentityAssociation(
            f"{name}-pod-identity",
            cluster_name=cluster_name,
            namespace=namespace,
            service_account=SERVICE_ACCOUNT,
            role_arn=self.role.arn,
            opts=child,
        )
        # Pod Identity injects credentials when a pod is created, so the association must exist first.
        self.release = helm_release(
            f"{name}-release",
            CHART,
            namespace=namespace,
            values=autoscaler_values(spec, cluster_name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[association]),
        )
        self.register_outputs({"role_arn": self.role.arn, "release": self.release.status})
