"""The AWS layer as one component: everything later layers need from AWS, built from the stack spec.

An explicit AWS provider carries the spec's region and tags, so the spec alone decides where and how
resources are tagged, whatever the Pulumi stack's own config says.
"""

from __future__ import annotations

from dataclasses import dataclass
import pulumi
import pulumi_aws

from inferstack.aws import iam as policies
from inferstack.aws.cluster import (
    CLUSTER_ROLE,
    ClusterRef,
    EksCluster,
    EksClusterArgs,
    existing_cluster_ref,
    kubeconfig_yaml,
)
from inferstack.aws.karpenter import KarpenterAws, KarpenterAwsArgs
from inferstack.aws.network import Network, NetworkArgs, existing_subnets_in_zones
from inferstack.aws.node_template import TAINT_TAG
from inferstack.aws.node_pool import RESOURCE_SUFFIXES, GpuNodePool, GpuNodePoolArgs, autoscaler_tags
from inferstack.planning.node_groups import plan_node_groups
from inferstack.aws.weights_store import BATCH_ROLE, READER_ROLE, WeightsStore, WeightsStoreArgs
from inferstack.spec import CreateCluster, SpecError, StackSpec
from inferstack.spec.pools import PoolHardware

# Name segments of the stack-wide resources (`<environment>-<segment>...`); pools may not reuse them.
PROVIDER, NETWORK, EKS, NODE_ROLE, WEIGHTS, KUBERNETES = "aws", "network", "eks", "node-role", "weights", "kubernetes"
KARPENTER = "karpenter"
STACK_SEGMENTS = (PROVIDER, NETWORK, EKS, NODE_ROLE, WEIGHTS, KUBERNETES, KARPENTER)
# Pulumi autonames a resource '<logical name>-' plus 7 random hex characters (pulumi.com/docs, "Resource names >
# Autonaming"), and the AWS provider refuses the name when that exceeds the field's limit: an IAM role's `name` is
# AutoName("name", 64, "-") (pulumi/pulumi-aws@00ba5ea53c2548fd367776345b7c52f191ce1372:provider/resources.go,
# "aws_iam_role"; IAM CreateRole takes RoleName of 1 to 64 characters).
AUTONAME_SUFFIX = 8
IAM_ROLE_NAME_MAX = 64
# The cluster-autoscaler's role: program.py names the platform '<env>-platform', platform/platform.py its autoscaler
# '<platform>-autoscaler', platform/autoscaler.py the role '<autoscaler>-role'.
AUTOSCALER_ROLE = "platform-autoscaler-role"
NODE_GROUP_NAME_MAX = 63
# AWS tag limits (AWS General Reference, "Tagging your AWS resources": 50 user tags per resource, keys of
# up to 128 and values of up to 256 characters; Amazon EC2 Auto Scaling user guide, "Tag Auto Scaling
# groups": 50 tags per group). EKS puts its own tags on a managed node group's Auto Scaling group
# (eks:cluster-name, eks:nodegroup-name, k8s.io/cluster-autoscaler/enabled and /<cluster>).
TAGS_PER_RESOURCE = 50
TAG_KEY_MAX, TAG_VALUE_MAX = 128, 256
EKS_AUTOSCALING_GROUP_TAGS = 4


def iam_role_names(env: str) -> tuple[str, ...]:
    """The logical names of every IAM role a stack may create, whether or not its feature is on today (switching
    the cluster-autoscaler or batch jobs on later must not meet a name IAM refuses)."""
    return (
        f"{env}-{NODE_ROLE}",
        f"{env}-{EKS}-{CLUSTER_ROLE}",
        f"{env}-{WEIGHTS}-{READER_ROLE}",
        f"{env}-{WEIGHTS}-{BATCH_ROLE}",
        f"{env}-{AUTOSCALER_ROLE}",
        f"{env}-{KARPENTER}-controller",
        f"{env}-{KARPENTER}-{NODE_ROLE}",
    )


def check_resource_names(spec: StackSpec) -> None:
    """Resource names are `<environment>-<pool>-<suffix>`: refuse names that repeat another's or outgrow AWS's limits."""
    env = spec.environment
    longest_role = max(iam_role_names(env), key=len)
    excess = len(longest_role) + AUTONAME_SUFFIX - IAM_ROLE_NAME_MAX
    if excess > 0:
        raise SpecError(
            "environment",
            f"IAM role {longest_role!r} plus Pulumi's {AUTONAME_SUFFIX}-character suffix is longer than IAM's "
            f"{IAM_ROLE_NAME_MAX} characters",
            f"shorten the environment name to at most {len(env) - excess} characters",
        )
    for i, pool in enumerate(spec.node_pools):
        for segment in STACK_SEGMENTS:
            if pool.name == segment or pool.name.startswith(f"{segment}-"):
                raise SpecError(
                    f"node_pools[{i}].name",
                    f"{pool.name!r} would name its resources like the stack's own {segment!r} resources",
                    f"rename the pool so it does not start with {segment!r}",
                )
        for other in spec.node_pools:
            for suffix in RESOURCE_SUFFIXES:
                taken = f"{other.name}-{suffix}"
                if pool.name == taken or pool.name.startswith(f"{taken}-"):
                    raise SpecError(
                        f"node_pools[{i}].name",
                        f"{pool.name!r} would name its resources like the {suffix!r} resources of pool {other.name!r}",
                        f"rename the pool so it does not start with {taken!r}",
                    )
        _check_node_group_tags(spec, i)
        for plan in plan_node_groups(pool):
            group = f"{env}-{pool.name}-{plan.suffix}"
            excess = len(group) + AUTONAME_SUFFIX - NODE_GROUP_NAME_MAX
            if excess > 0:
                raise SpecError(
                    f"node_pools[{i}].name",
                    f"node group {group!r} plus Pulumi's {AUTONAME_SUFFIX}-character suffix is longer than EKS's "
                    f"{NODE_GROUP_NAME_MAX} characters",
                    f"shorten the pool or environment name by {excess} character{'s' if excess > 1 else ''}",
                )


def _check_node_group_tags(spec: StackSpec, index: int) -> None:
    """A node group carries the stack's tags and its cluster-autoscaler node-template tags (one per label,
    taint and advertised resource), and its Auto Scaling group the same beside EKS's own (the stack's tags
    propagate from there to the instances): both within AWS's tag limits, or EKS refuses the group or its tags."""
    pool = spec.node_pools[index]
    path = f"node_pools[{index}]"
    for plan in plan_node_groups(pool):
        tags = autoscaler_tags(pool, PoolHardware(pool), plan)
        for key, value in tags.items():
            if len(key) > TAG_KEY_MAX or len(value) > TAG_VALUE_MAX:
                field = "taints" if key.startswith(TAINT_TAG) else "labels"
                raise SpecError(
                    f"{path}.{field}",
                    f"the cluster-autoscaler tag {key!r} = {value!r} is longer than AWS's {TAG_KEY_MAX}-character "
                    f"keys or {TAG_VALUE_MAX}-character values",
                    f"shorten that key (or value) in the pool's {field}",
                )
        on_group = len({**spec.tags, **tags})
        on_autoscaling_group = on_group + EKS_AUTOSCALING_GROUP_TAGS  # the stack's tags go there too (launch)
        if max(on_group, on_autoscaling_group) > TAGS_PER_RESOURCE:
            raise SpecError(
                f"{path}.labels",
                f"node group {plan.suffix!r} of pool {pool.name!r} would carry {on_group} tags (the stack's tags and "
                f"one cluster-autoscaler template tag per label, taint and resource) and its Auto Scaling group "
                f"{on_autoscaling_group} with EKS's own; AWS allows {TAGS_PER_RESOURCE}",
                "drop pool labels or taints, or stack tags",
            )


@dataclass(frozen=True)
class AwsFoundationArgs:
    spec: StackSpec


class AwsFoundation(pulumi.ComponentResource):
    """Network, EKS cluster (created or existing), GPU node pools and the weights store of one environment."""

    cluster_name: pulumi.Output[str]
    cluster_endpoint: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]  # secret
    node_pool_names: pulumi.Output[list[str]]  # every GPU node group's EKS name
    weights_bucket: pulumi.Output[str]
    weights_bucket_arn: pulumi.Output[str]
    model_reader_role_arn: pulumi.Output[str]
    node_pools: dict[str, GpuNodePool]
    cluster: ClusterRef  # security group, VPC and subnets for layers that add their own AWS resources
    kubernetes_provider: pulumi.ProviderResource  # a pulumi_kubernetes.Provider for this cluster
    aws_provider: pulumi.ProviderResource  # region and default tags from the spec, for layers that add AWS resources
    pod_identities: dict[tuple[str, str], pulumi.Resource]  # (namespace, service account) -> Pod Identity association
    karpenter: KarpenterAws | None  # the controller's identity, its nodes' role and the interruption queue

    def __init__(self, name: str, args: AwsFoundationArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        spec = args.spec
        provider = pulumi_aws.Provider(
            f"{name}-{PROVIDER}",
            region=spec.region,
            default_tags=pulumi_aws.ProviderDefaultTagsArgs(tags=dict(spec.tags)) if spec.tags else None,
            opts=pulumi.ResourceOptions(parent=opts.parent if opts else None),
        )
        super().__init__(
            "inferstack:aws:Foundation",
            name,
            None,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=[provider])),
        )
        self.aws_provider = provider
        child = pulumi.ResourceOptions(parent=self)
        partition = policies.partition_of(spec.region)

        node_role, node_role_attachments = policies.service_role(
            f"{name}-{NODE_ROLE}",
            service="ec2.amazonaws.com",
            managed_policies=policies.NODE_POLICIES,
            partition=partition,
            description=f"EKS nodes of {spec.cluster_name}",
            parent=self,
        )

        network: Network | None = None
        ready: list[pulumi.Resource] = []
        cluster_spec = spec.cluster
        if isinstance(cluster_spec, CreateCluster):
            if cluster_spec.network.existing_subnet_ids:
                cluster_subnets: list[pulumi.Input[str]] = list(cluster_spec.network.existing_subnet_ids)
            else:
                network = Network(
                    f"{name}-{NETWORK}",
                    NetworkArgs(spec=cluster_spec.network, region=spec.region, cluster_name=spec.cluster_name),
                    opts=child,
                )
                cluster_subnets = list(network.private_subnets.values())
            cluster = EksCluster(
                f"{name}-{EKS}",
                EksClusterArgs(
                    spec=spec,
                    subnet_ids=cluster_subnets,
                    node_role_arn=node_role.arn,
                    node_role_ready=node_role_attachments,
                    partition=partition,
                ),
                opts=child,
            )
            ref: ClusterRef = cluster.ref
            self.kubeconfig = cluster.kubeconfig
            ready = cluster.ready
        else:
            ref = existing_cluster_ref(cluster_spec.name, parent=self)
            if cluster_spec.kubeconfig is not None:
                self.kubeconfig = pulumi.Output.secret(cluster_spec.kubeconfig)
            else:
                self.kubeconfig = pulumi.Output.secret(
                    pulumi.Output.all(ref.name, ref.endpoint, ref.certificate_authority).apply(
                        lambda v: kubeconfig_yaml(v[0], v[1], v[2], spec.region)
                    )
                )

        self.node_pools = {}
        karpenter = spec.platform.karpenter
        for i, pool in enumerate(spec.node_pools):
            if network is not None:
                subnets: pulumi.Input = network.subnets_for(pool.availability_zones)
            else:
                subnets = existing_subnets_in_zones(
                    ref.subnet_ids, pool.availability_zones, f"node_pools[{i}].availability_zones", parent=self
                )
            self.node_pools[pool.name] = GpuNodePool(
                f"{name}-{pool.name}",
                GpuNodePoolArgs(
                    pool=pool,
                    cluster=ref,
                    subnet_ids=subnets,
                    node_role_arn=node_role.arn,
                    tags=spec.tags,
                    depends_on=[*node_role_attachments, *ref.node_prerequisites],
                    managed_node_groups=not karpenter,
                ),
                opts=child,
            )
        self.karpenter = None
        if karpenter:
            # Its own node role: EKS gives a managed node group's role (the system nodes') an access entry itself,
            # and one role can be in one entry only (shared/reference/karpenter.md 7.2).
            karpenter_node_role, _ = policies.service_role(
                f"{name}-{KARPENTER}-{NODE_ROLE}",
                service="ec2.amazonaws.com",
                managed_policies=policies.KARPENTER_NODE_POLICIES,
                partition=partition,
                description=f"Karpenter's nodes of {spec.cluster_name}",
                parent=self,
            )
            self.karpenter = KarpenterAws(
                f"{name}-{KARPENTER}",
                KarpenterAwsArgs(
                    cluster=ref, node_role_arn=karpenter_node_role.arn, node_role_name=karpenter_node_role.name,
                    partition=partition, region=spec.region, environment=spec.environment,
                ),
                opts=child,
            )

        weights = WeightsStore(
            f"{name}-{WEIGHTS}", WeightsStoreArgs(spec=spec, cluster_name=ref.name, partition=partition), opts=child
        )

        import pulumi_kubernetes  # on use: importing this module (schema, checks, tests) skips the Kubernetes SDK

        self.kubernetes_provider = pulumi_kubernetes.Provider(
            f"{name}-{KUBERNETES}",
            kubeconfig=self.kubeconfig,
            opts=pulumi.ResourceOptions(parent=self, depends_on=ready),
        )

        self.cluster = ref
        self.cluster_name = ref.name
        self.cluster_endpoint = ref.endpoint
        self.node_pool_names = pulumi.Output.all(*[p.node_group_names for p in self.node_pools.values()]).apply(
            lambda groups: [group for names in groups for group in names]
        )
        self.weights_bucket = weights.bucket_name
        self.weights_bucket_arn = weights.bucket_arn
        self.model_reader_role_arn = weights.reader_role_arn
        self.pod_identities = weights.identities
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "cluster_endpoint": self.cluster_endpoint,
                "kubeconfig": self.kubeconfig,
                "node_pool_names": self.node_pool_names,
                "weights_bucket": self.weights_bucket,
                "weights_bucket_arn": self.weights_bucket_arn,
                "model_reader_role_arn": self.model_reader_role_arn,
            }
        )
