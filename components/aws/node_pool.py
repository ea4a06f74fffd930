"""One GPU node pool: launch template(s) and EKS managed node groups for its capacity mix.

The groups and their sizes are planning's (`planning.node_groups.plan_node_groups`): a fixed on-demand
(or reserved) baseline of the primary instance type, and a burst group above it that runs on spot across
every instance type of the pool.
EFA pools get one EFA interface per network card, a cluster placement group, a security group that
lets the pool's nodes reach each other on all protocols, and a single subnet (a placement group and
EFA traffic stay in one zone). The NVMe instance store becomes the model cache through nodeadm.
Every group, and the Auto Scaling group EKS makes for it, carries the cluster-autoscaler node-template
tags of what its nodes offer, so the autoscaler can grow a group that has no node yet.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import jinja2
import pulumi
from pulumi_aws import autoscaling, ec2, eks, vpc

from inferstack import conventions
from inferstack.catalog.dra import DEVICE_PLUGIN_DEPLOY_LABEL
from inferstack.aws.cluster import DESIRED_SIZE, ClusterRef
from inferstack.aws.node_template import GPU_TAINT, TEMPLATE_PREFIX, node_template_tags, template_resources
from inferstack.catalog.node_amis import release_version
from inferstack.planning.node_groups import (
    CAPACITY_BLOCK,
    GROUP_BURST,
    GROUP_CAPACITY_BLOCK,
    GROUP_ON_DEMAND,
    GROUP_RESERVED,
    GROUP_SPOT,
    NodeGroupPlan,
    plan_node_groups,
)
from inferstack.planning.pool_capacity import advertised_per_node
from inferstack.spec import MigSharing, MpsSharing, NodePoolSpec, Reservation, Taint, TimeSlicing
from inferstack.spec.pools import PoolHardware

USER_DATA_BOUNDARY = "//INFERSTACK-NODEADM//"
TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}
# The EBS volume that holds images and pod data: AL2023's root disk, Bottlerocket's data disk.
DATA_VOLUME_DEVICE = {"AL2023_x86_64_NVIDIA": "/dev/xvda", "BOTTLEROCKET_x86_64_NVIDIA": "/dev/xvdb"}

# Suffixes of the resource names a pool creates (`<environment>-<pool>-<suffix>`); pool names that
# would reproduce another pool's resource names are refused by AwsFoundation.
LAUNCH_TEMPLATE = "launch-template"  # the burst group's
RESERVED_LAUNCH_TEMPLATE = "reserved-launch-template"
ON_DEMAND_LAUNCH_TEMPLATE = "on-demand-launch-template"  # an unreserved baseline's
PLACEMENT_GROUP = "placement"
EFA_SECURITY_GROUP = "efa"
# Node updates for GPU nodes (EKS User Guide, managed-node-update-behavior): one node at a time, and a
# drain that PodDisruptionBudgets block fails the update (PodEvictionFailure after 15 minutes) instead of
# force-deleting serving pods. Groups on reserved capacity have no spare instance to surge into, so they
# update with MINIMAL (no extra node launched); the others with DEFAULT (a new node before the old drains).
MAX_UNAVAILABLE = 1
FORCE_UPDATE_VERSION = False
RESOURCE_SUFFIXES = (
    LAUNCH_TEMPLATE,
    RESERVED_LAUNCH_TEMPLATE,
    ON_DEMAND_LAUNCH_TEMPLATE,
    PLACEMENT_GROUP,
    EFA_SECURITY_GROUP,
    GROUP_ON_DEMAND,
    GROUP_RESERVED,
    GROUP_CAPACITY_BLOCK,
    GROUP_SPOT,
    GROUP_BURST,
)


def launch_template_suffix(plan: NodeGroupPlan) -> str:
    """Each group has a launch template of its own: every new template version rolls the groups that use
    it, so a change for the baseline must not roll the burst group (or the reverse)."""
    if plan.reservation is not None:
        return RESERVED_LAUNCH_TEMPLATE
    return ON_DEMAND_LAUNCH_TEMPLATE if plan.suffix == GROUP_ON_DEMAND else LAUNCH_TEMPLATE


# EKS node auto repair (EKS API NodeRepairConfig): a GPU node reloads its models once replaced, so one at a time.
REPAIR_PARALLEL_NODES = 1


def node_repair_config(pool: NodePoolSpec) -> eks.NodeGroupNodeRepairConfigArgs:
    """No unhealthy-node threshold: EKS's default halts repair only in a group of more than five nodes with more
    than 20% of them unhealthy (EKS User Guide node-repair.adoc), so a small group always repairs its first sick
    node, where a 20% threshold would stop a group of one to four nodes at it (planning.node_health states it)."""
    if not pool.auto_repair:
        return eks.NodeGroupNodeRepairConfigArgs(enabled=False)
    return eks.NodeGroupNodeRepairConfigArgs(enabled=True, max_parallel_nodes_repaired_count=REPAIR_PARALLEL_NODES)


def update_strategy(plan: NodeGroupPlan) -> str:
    """MINIMAL where the capacity is reserved (nothing to surge into), DEFAULT elsewhere."""
    return "MINIMAL" if plan.reservation is not None else "DEFAULT"


def efa_interface_layout(efa_interfaces: int) -> list[tuple[int, int, str]]:
    """(network card, device index, interface type) per interface, as EC2 documents it for EFA.

    The primary ENA interface sits at card 0 / device 0, an `efa-only` interface at card 0 /
    device 1, and one `efa-only` interface at device 0 of every further card.
    """
    if efa_interfaces < 1:
        raise ValueError("an EFA pool needs at least one EFA interface")
    return [(0, 0, "interface"), (0, 1, "efa-only")] + [(card, 0, "efa-only") for card in range(1, efa_interfaces)]


def node_labels(pool: NodePoolSpec, hardware: PoolHardware, capacity_label: str) -> dict[str, str]:
    """Labels the platform and serving layers select on; the pool's own labels come last."""
    sharing = pool.gpu_sharing
    labels = {
        conventions.POOL_LABEL: pool.name,
        conventions.GPU_LABEL: hardware.gpu.name,
        conventions.CAPACITY_LABEL: capacity_label,
        conventions.SHARING_LABEL: sharing.mode,
    }
    if isinstance(sharing, MigSharing):
        labels[conventions.MIG_CONFIG_LABEL] = f"inferstack-{pool.name}"
    elif isinstance(sharing, (TimeSlicing, MpsSharing)):
        labels[conventions.DEVICE_PLUGIN_CONFIG_LABEL] = pool.name
    if pool.device_mode == "dra":
        # The GPU operator keeps a state label it finds set (catalog/dra.json gpu_operator): its device plugin
        # stays off the node, so the DRA driver is the only one handing out its GPUs.
        labels[DEVICE_PLUGIN_DEPLOY_LABEL] = "false"
    return {**labels, **pool.labels}


def pool_taints(pool: NodePoolSpec) -> list[Taint]:
    """nvidia.com/gpu=true:NoSchedule keeps everything but GPU workloads off the pool; the pool's own follow."""
    return [GPU_TAINT, *pool.taints]


def node_taints(pool: NodePoolSpec) -> list[eks.NodeGroupTaintArgs]:
    """The pool's taints as the EKS API spells their effects."""
    return [eks.NodeGroupTaintArgs(key=t.key, value=t.value, effect=TAINT_EFFECTS[t.effect]) for t in pool_taints(pool)]


def autoscaler_tags(pool: NodePoolSpec, hardware: PoolHardware, plan: NodeGroupPlan) -> dict[str, str]:
    """The node-template tags of one group: what a node offers, the labels pods select on (EKS adds the
    capacity type label itself), and its taints."""
    labels = {**node_labels(pool, hardware, plan.capacity_label), conventions.EKS_CAPACITY_LABEL: plan.capacity_type}
    return node_template_tags(template_resources(hardware), labels, pool_taints(pool))


def joins_no_placement_group(pool: NodePoolSpec, reservation: Reservation | None) -> bool:
    """A Capacity Block comes with its own placement: AWS co-locates its instances in an EC2 UltraCluster
    (EC2 user guide, "Capacity Blocks for ML"), and its launches name the block, not a placement group of
    ours. An On-Demand reservation is used inside a cluster placement group only when it was created in that
    group (EC2 user guide, "Capacity Reservations for cluster placement groups"; CreateCapacityReservation
    PlacementGroupArn): a group this stack creates cannot hold a reservation bought before it, so the reserved
    nodes launch without one (the reservation keeps them in its zone); `efa.placement_group` names the group a
    reservation was created in. The burst groups keep the pool's group."""
    if reservation is None:
        return False
    return reservation.kind == "capacity_block" or pool.efa.create_placement_group


def launch_template_instance_type(plan: NodeGroupPlan) -> str | None:
    """A Capacity Block group names its one instance type in the launch template and none on the node
    group, or EKS refuses it (EKS User Guide, capacity-blocks-mng; launch-templates: a type in the
    template excludes instance types on the node group). Every other group lists its types itself."""
    return plan.instance_types[0] if plan.capacity_type == CAPACITY_BLOCK else None


@cache
def _user_data_template() -> jinja2.Template:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(files("inferstack.templates").joinpath("nodeadm-userdata.j2").read_text(encoding="utf-8"))


def render_user_data(raid: str) -> str:
    """MIME multipart user data whose nodeadm NodeConfig assembles the instance-store NVMe disks."""
    if raid not in ("RAID0", "RAID10"):
        raise ValueError(f"nodeadm localStorage strategy {raid!r} is not RAID0 or RAID10")
    return _user_data_template().render(boundary=USER_DATA_BOUNDARY, strategy=raid)


@dataclass(frozen=True)
class GpuNodePoolArgs:
    pool: NodePoolSpec
    cluster: ClusterRef
    # The pool's private subnets, its first zone first (EFA and reserved groups use only that one).
    subnet_ids: Sequence[pulumi.Input[str]] | pulumi.Output[list[str]]
    node_role_arn: pulumi.Input[str]
    # The organisation's tags for the instances the groups start: set on each Auto Scaling group (propagated
    # at launch), never in the launch template, where a tag change would make a version and roll every node.
    tags: Mapping[str, str]
    # What nodes need before they can join: core add-ons, the node role's policies.
    depends_on: Sequence[pulumi.Resource] = ()
    # False under Karpenter: only the pool's EFA network is made here, Karpenter launches the nodes.
    managed_node_groups: bool = True


class GpuNodePool(pulumi.ComponentResource):
    """The node groups of one GPU pool behind a launch template that carries EFA, placement and NVMe setup;
    under Karpenter only its EFA security group and placement group, which Karpenter's EC2NodeClass selects."""

    node_groups: list[eks.NodeGroup]
    subnet_ids: Sequence[pulumi.Input[str]] | pulumi.Output[list[str]]
    security_group_ids: list[pulumi.Input[str]]   # the cluster's group, and the pool's EFA group
    placement_group_name: pulumi.Input[str] | None
    node_group_names: pulumi.Output[list[str]]
    node_group_arns: pulumi.Output[list[str]]
    advertised: dict[str, int]  # extended resources per node, e.g. {'nvidia.com/gpu': 8}

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws:GpuNodePool", name, None, opts)
        pool = args.pool
        hardware = PoolHardware(pool)
        child = pulumi.ResourceOptions(parent=self)
        if isinstance(args.subnet_ids, pulumi.Output):
            all_subnets: pulumi.Input = args.subnet_ids
            first_subnet: pulumi.Input = args.subnet_ids.apply(lambda ids: ids[:1])
        else:  # subnets created by this stack: a single-zone group then depends on its own subnet only
            all_subnets = list(args.subnet_ids)
            first_subnet = all_subnets[:1]

        network_interfaces = None
        placement = None
        self.subnet_ids = args.subnet_ids
        self.security_group_ids = [args.cluster.security_group_id]
        self.placement_group_name = None
        if pool.efa.enabled:
            efa_group = ec2.SecurityGroup(
                f"{name}-{EFA_SECURITY_GROUP}",
                vpc_id=args.cluster.vpc_id,
                description=f"EFA traffic between the nodes of GPU pool {pool.name}",
                tags={"Name": f"{name}-{EFA_SECURITY_GROUP}"},
                opts=child,
            )
            vpc.SecurityGroupIngressRule(
                f"{name}-{EFA_SECURITY_GROUP}-ingress",
                security_group_id=efa_group.id,
                referenced_security_group_id=efa_group.id,
                ip_protocol="-1",
                description="All traffic from nodes of the same EFA pool",
                opts=child,
            )
            vpc.SecurityGroupEgressRule(
                f"{name}-{EFA_SECURITY_GROUP}-egress",
                security_group_id=efa_group.id,
                referenced_security_group_id=efa_group.id,
                ip_protocol="-1",
                description="All traffic to nodes of the same EFA pool",
                opts=child,
            )
            # Custom security groups replace EKS's default, so the cluster's own group is added back.
            groups = [args.cluster.security_group_id, efa_group.id]
            self.security_group_ids = groups
            network_interfaces = [
                ec2.LaunchTemplateNetworkInterfaceArgs(
                    network_card_index=card,
                    device_index=device,
                    interface_type=kind,
                    security_groups=groups,
                    delete_on_termination="true",
                )
                for card, device, kind in efa_interface_layout(hardware.efa_interfaces)
            ]
            group_name: pulumi.Input[str] | None = pool.efa.placement_group
            if pool.efa.create_placement_group:
                group_name = ec2.PlacementGroup(
                    f"{name}-{PLACEMENT_GROUP}", strategy="cluster", tags={"Name": f"{name}-{PLACEMENT_GROUP}"}, opts=child
                ).name
            if group_name is not None:
                placement = ec2.LaunchTemplatePlacementArgs(group_name=group_name)
            self.placement_group_name = group_name

        user_data = None
        if pool.nvme_cache.enabled:
            user_data = base64.b64encode(render_user_data(pool.nvme_cache.raid).encode()).decode()

        plans = plan_node_groups(pool) if args.managed_node_groups else []

        def launch_template(suffix: str, reservation: Reservation | None, instance_type: str | None) -> ec2.LaunchTemplate:
            """Only what the nodes are made of: every input here is part of the template version."""
            instance_tags = {"Name": name}
            reserved = None
            market = None
            if reservation is not None:
                reserved = ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                    capacity_reservation_target=ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                        capacity_reservation_id=reservation.id
                    )
                )
                if reservation.kind == "capacity_block":
                    market = ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
            return ec2.LaunchTemplate(
                f"{name}-{suffix}",
                description=f"GPU nodes of pool {pool.name}",
                update_default_version=True,
                instance_type=instance_type,
                block_device_mappings=[
                    ec2.LaunchTemplateBlockDeviceMappingArgs(
                        device_name=DATA_VOLUME_DEVICE[pool.ami_type],
                        ebs=ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                            volume_size=pool.disk_size_gib,
                            volume_type="gp3",
                            encrypted="true",
                            delete_on_termination="true",
                        ),
                    )
                ],
                # IMDSv2 only, one hop: pods get AWS credentials from Pod Identity, never the node's role.
                metadata_options=ec2.LaunchTemplateMetadataOptionsArgs(
                    http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
                ),
                network_interfaces=network_interfaces,
                placement=None if joins_no_placement_group(pool, reservation) else placement,
                user_data=user_data,
                capacity_reservation_specification=reserved,
                instance_market_options=market,
                tag_specifications=[
                    ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=instance_tags)
                    for kind in ("instance", "volume", "network-interface")
                ],
                # A baseline that fills its pool kept the shared template's name before groups had their own.
                opts=pulumi.ResourceOptions(
                    parent=self,
                    aliases=[pulumi.Alias(name=f"{name}-{LAUNCH_TEMPLATE}")]
                    if suffix == ON_DEMAND_LAUNCH_TEMPLATE and len(plans) == 1
                    else None,
                ),
            )

        self.node_groups = []
        for plan in plans:
            template_type = launch_template_instance_type(plan)
            template = launch_template(launch_template_suffix(plan), plan.reservation, template_type)
            # A cluster placement group, EFA and a zonal reservation all live in one zone.
            single_zone = pool.efa.enabled or plan.reservation is not None
            # Sized by the autoscaler, or by EKS for a Capacity Block (0 before the block ends, 0 for an upgrade).
            autoscaled = plan.min_size != plan.max_size
            template_tags = autoscaler_tags(pool, hardware, plan)
            group = eks.NodeGroup(
                f"{name}-{plan.suffix}",
                cluster_name=args.cluster.name,
                version=args.cluster.kubernetes_version,  # EKS upgrades only the control plane otherwise
                node_role_arn=args.node_role_arn,
                subnet_ids=first_subnet if single_zone else all_subnets,
                instance_types=None if template_type else list(plan.instance_types),
                capacity_type=plan.capacity_type,
                ami_type=pool.ami_type,
                # The template names no image, so EKS picks the AMI: pinned, a new release shows in the diff
                # instead of riding along with the next launch template edit.
                release_version=args.cluster.kubernetes_version.apply(
                    lambda minor: release_version(pool.ami_type, minor)
                ),
                scaling_config=eks.NodeGroupScalingConfigArgs(
                    min_size=plan.min_size, max_size=plan.max_size, desired_size=plan.desired_size
                ),
                launch_template=eks.NodeGroupLaunchTemplateArgs(
                    id=template.id, version=template.latest_version.apply(str)
                ),
                labels=node_labels(pool, hardware, plan.capacity_label),
                taints=node_taints(pool),
                tags=template_tags,  # the autoscaler reads the resources/* ones through DescribeNodegroup
                update_config=eks.NodeGroupUpdateConfigArgs(
                    max_unavailable=MAX_UNAVAILABLE, update_strategy=update_strategy(plan)
                ),
                node_repair_config=node_repair_config(pool),
                force_update_version=FORCE_UPDATE_VERSION,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=list(args.depends_on),
                    ignore_changes=[DESIRED_SIZE] if autoscaled else None,
                ),
            )
            self.node_groups.append(group)
            # EKS does not pass a node group's tags on to its Auto Scaling group: tag that group directly.
            group_name = group.resources.apply(lambda found: found[0].autoscaling_groups[0].name)
            for key, value in template_tags.items():
                autoscaling.Tag(
                    f"{name}-{plan.suffix}-{key.removeprefix(TEMPLATE_PREFIX)}",
                    autoscaling_group_name=group_name,
                    tag=autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
                    opts=child,
                )
            # A new value reaches the nodes launched after it, without rolling the ones running.
            for key, value in args.tags.items():
                autoscaling.Tag(
                    f"{name}-{plan.suffix}-tag-{key}",
                    autoscaling_group_name=group_name,
                    tag=autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=True),
                    opts=child,
                )

        self.node_group_names = pulumi.Output.all(*[g.node_group_name for g in self.node_groups])
        self.node_group_arns = pulumi.Output.all(*[g.arn for g in self.node_groups])
        self.advertised = advertised_per_node(hardware)
        self.register_outputs(
            {
                "node_group_names": self.node_group_names,
                "node_group_arns": self.node_group_arns,
                "advertised": self.advertised,
            }
        )
