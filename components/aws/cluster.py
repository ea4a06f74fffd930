"""The EKS control plane the stack creates: cluster role, access entries, core add-ons, system nodes, kubeconfig.

The cluster starts without self-managed add-ons; vpc-cni, kube-proxy, CoreDNS and the Pod Identity
agent are EKS managed add-ons at the versions the catalog pins for the Kubernetes minor
(catalog/eks_addons.json), so they move only with a cluster version bump; so is the node monitoring agent,
configured by planning/node_health. Authentication is API-only: access entries, no aws-auth ConfigMap.
"""

from __future__ import annotations

import json

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import yaml
from pulumi_aws import eks

from inferstack.aws import iam as policies
from inferstack.catalog.charts import eks_addon_versions
from inferstack.catalog.node_amis import release_version
from inferstack.planning import node_health
from inferstack.spec import CreateCluster, StackSpec

# Add-ons a node needs before it turns Ready (CNI, service routing, pod credentials).
NODE_ADDONS = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
# The VPC CNI enforces NetworkPolicies only when told to: without this, EKS accepts the serving namespaces'
# policies and filters nothing (EKS User Guide, networking/eks-networking-add-ons.adoc, "enableNetworkPolicy":
# "true" in the add-on's configuration values, vpc-cni v1.14.0-eksbuild.3 or later).
ADDON_CONFIGURATION = {"vpc-cni": json.dumps({"enableNetworkPolicy": "true"})}
# CoreDNS is a Deployment: it only becomes healthy once the system nodes exist.
DNS_ADDON = "coredns"
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
SYSTEM_DISK_GIB = 50  # room for controller images beyond EKS's 20 GiB default
DESIRED_SIZE = "scalingConfig.desiredSize"  # owned by the node autoscaler once the group exists
CLUSTER_ROLE = "cluster-role"
# What the CI role that runs `pulumi preview` gets: read-only, no Secrets (EKS User Guide, "Review access
# policy permissions", https://docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html).
CI_ACCESS_POLICY = "AmazonEKSViewPolicy"


@dataclass(frozen=True)
class ClusterRef:
    """What node pools and the weights store need from a cluster, whether created here or existing."""

    name: pulumi.Output[str]
    arn: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    certificate_authority: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    vpc_id: pulumi.Output[str]
    subnet_ids: pulumi.Output[list[str]]
    kubernetes_version: pulumi.Output[str]  # every node group runs the control plane's version
    # Resources nodes must wait for (core add-ons); empty for an existing cluster, which has them.
    node_prerequisites: Sequence[pulumi.Resource] = field(default_factory=tuple)


def kubeconfig_yaml(cluster_name: str, endpoint: str, certificate_authority: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token`, so it holds no credential itself."""
    user = f"{cluster_name}-aws"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": certificate_authority}}
        ],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
        "preferences": {},
        "users": [
            {
                "name": user,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region, "--output", "json"],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
    }
    return yaml.safe_dump(document, sort_keys=False)


def _role_slug(role_arn: str) -> str:
    """'arn:aws:iam::123456789012:role/team/Admin' -> '123456789012-team-admin' for a stable resource name."""
    account = role_arn.split(":")[4]
    path = role_arn.split(":role/", 1)[1]
    return f"{account}-{re.sub(r'[^a-z0-9]+', '-', path.lower()).strip('-')}"


@dataclass(frozen=True)
class EksClusterArgs:
    spec: StackSpec
    subnet_ids: Sequence[pulumi.Input[str]]
    node_role_arn: pulumi.Input[str]
    # The node role's policy attachments: system nodes cannot join before they exist.
    node_role_ready: Sequence[pulumi.Resource]
    partition: str


class EksCluster(pulumi.ComponentResource):
    """An EKS cluster with API authentication, managed core add-ons and a CPU system node group."""

    cluster_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    ref: ClusterRef
    ready: list[pulumi.Resource]  # what Kubernetes resources need: system nodes and every add-on

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws:EksCluster", name, None, opts)
        spec = args.spec
        cluster_spec = spec.cluster
        if not isinstance(cluster_spec, CreateCluster):
            raise TypeError("EksCluster creates clusters; an existing cluster is read by AwsFoundation")

        role, role_attachments = policies.service_role(
            f"{name}-{CLUSTER_ROLE}",
            service="eks.amazonaws.com",
            managed_policies=policies.CLUSTER_POLICIES,
            partition=args.partition,
            description=f"EKS control plane of {spec.cluster_name}",
            parent=self,
        )
        cluster = eks.Cluster(
            f"{name}-cluster",
            name=spec.cluster_name,
            version=cluster_spec.kubernetes_version,
            role_arn=role.arn,
            vpc_config=eks.ClusterVpcConfigArgs(
                subnet_ids=list(args.subnet_ids),
                endpoint_private_access=True,
                endpoint_public_access=cluster_spec.endpoint_public_access,
                # Never left unset on a public endpoint: EKS would open it to 0.0.0.0/0 (the spec refuses that).
                public_access_cidrs=cluster_spec.public_access_cidrs if cluster_spec.endpoint_public_access else None,
            ),
            access_config=eks.ClusterAccessConfigArgs(
                authentication_mode="API", bootstrap_cluster_creator_admin_permissions=True
            ),
            bootstrap_self_managed_addons=False,
            # Deleting or replacing the cluster takes every workload with it: only a stack marked for teardown may.
            opts=pulumi.ResourceOptions(parent=self, depends_on=role_attachments, protect=not spec.teardown),
        )

        for role_arn in cluster_spec.admin_role_arns:
            self._access_entry(f"{name}-admin", cluster, role_arn, policies.CLUSTER_ADMIN_ACCESS_POLICY, args.partition)
        for role_arn in cluster_spec.ci_role_arns:
            self._access_entry(f"{name}-ci", cluster, role_arn, CI_ACCESS_POLICY, args.partition)

        node_addons = [
            self._addon(name, cluster, addon, cluster_spec.kubernetes_version,
                        configuration_values=ADDON_CONFIGURATION.get(addon))
            for addon in NODE_ADDONS
        ]
        system = cluster_spec.system_nodes
        system_nodes = eks.NodeGroup(
            f"{name}-system",
            cluster_name=cluster.name,
            node_role_arn=args.node_role_arn,
            subnet_ids=list(args.subnet_ids),
            version=cluster.version,
            instance_types=[system.instance_type],
            capacity_type="ON_DEMAND",
            ami_type=SYSTEM_AMI_TYPE,
            release_version=release_version(SYSTEM_AMI_TYPE, cluster_spec.kubernetes_version),
            disk_size=SYSTEM_DISK_GIB,
            scaling_config=eks.NodeGroupScalingConfigArgs(
                min_size=system.min_nodes, max_size=system.max_nodes, desired_size=system.min_nodes
            ),
            update_config=eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*args.node_role_ready, *node_addons], ignore_changes=[DESIRED_SIZE]
            ),
        )
        dns = self._addon(name, cluster, DNS_ADDON, cluster_spec.kubernetes_version, after=[system_nodes])
        if node_health.installs_agent(spec):
            # Nothing waits for it: it only watches nodes, and its GPU half starts on each GPU node as it joins.
            self._addon(
                name, cluster, node_health.ADDON, cluster_spec.kubernetes_version, after=[system_nodes],
                configuration_values=node_health.agent_configuration_json(),
            )

        self.cluster_name = cluster.name
        self.endpoint = cluster.endpoint
        certificate_authority = cluster.certificate_authority.apply(lambda ca: ca.data)
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(cluster.name, cluster.endpoint, certificate_authority).apply(
                lambda v: kubeconfig_yaml(v[0], v[1], v[2], spec.region)
            )
        )
        self.ref = ClusterRef(
            name=cluster.name,
            arn=cluster.arn,
            endpoint=cluster.endpoint,
            certificate_authority=certificate_authority,
            security_group_id=cluster.vpc_config.cluster_security_group_id,
            vpc_id=cluster.vpc_config.vpc_id,
            subnet_ids=pulumi.Output.all(*args.subnet_ids),
            kubernetes_version=cluster.version,
            node_prerequisites=tuple(node_addons),
        )
        self.ready = [system_nodes, *node_addons, dns]
        self.register_outputs(
            {"cluster_name": self.cluster_name, "endpoint": self.endpoint, "kubeconfig": self.kubeconfig}
        )

    def _access_entry(self, prefix: str, cluster: eks.Cluster, role_arn: str, policy: str, partition: str) -> None:
        """An access entry for the role with one EKS access policy at cluster scope."""
        slug = _role_slug(role_arn)
        entry = eks.AccessEntry(
            f"{prefix}-{slug}",
            cluster_name=cluster.name,
            principal_arn=role_arn,
            type="STANDARD",
            opts=pulumi.ResourceOptions(parent=self),
        )
        eks.AccessPolicyAssociation(
            f"{prefix}-{slug}-policy",
            cluster_name=cluster.name,
            principal_arn=role_arn,
            policy_arn=policies.eks_access_policy_arn(partition, policy),
            access_scope=eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[entry]),
        )

    def _addon(
        self,
        name: str,
        cluster: eks.Cluster,
        addon: str,
        kubernetes_version: str,
        after: Sequence[pulumi.Resource] = (),
        configuration_values: str | None = None,
    ) -> eks.Addon:
        """A managed add-on at the version the catalog pins for this Kubernetes minor (the spec refuses a
        minor without pins)."""
        return eks.Addon(
            f"{name}-{addon}",
            cluster_name=cluster.name,
            addon_name=addon,
            addon_version=eks_addon_versions()[kubernetes_version][addon],
            configuration_values=configuration_values,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(after)),
        )


def existing_cluster_ref(name: str, parent: pulumi.Resource) -> ClusterRef:
    """Read an existing cluster by name; nothing of it is created or changed."""
    found = eks.get_cluster_output(name=name, opts=pulumi.InvokeOutputOptions(parent=parent))
    return ClusterRef(
        name=found.name,
        arn=found.arn,
        endpoint=found.endpoint,
        certificate_authority=found.certificate_authorities.apply(lambda cas: cas[0].data),
        security_group_id=found.vpc_config.cluster_security_group_id,
        vpc_id=found.vpc_config.vpc_id,
        subnet_ids=found.vpc_config.subnet_ids.apply(list),
        kubernetes_version=found.version,
    )

