"""A node group that can be at zero nodes tells cluster-autoscaler what a node of it would offer.

With no node to copy, cluster-autoscaler (kubernetes/autoscaler cluster-autoscaler-1.36.1,
cloudprovider/aws/aws_manager.go `buildNodeFromTemplate`) builds the group's template node from the
instance type and the Auto Scaling group's node-template tags. A pod asking for a MIG slice, a shared
GPU or EFA devices, or selecting the pool's labels, never scales an empty group up unless those tags
say the node has them. The expected tags are derived here from what the group advertises as the
registered resources tell it (policies/pools.py), not from the program's own tag function.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from inferstack import conventions
from inferstack.aws.node_template import LABEL_TAG, RESOURCE_TAG, TAINT_TAG
from inferstack.policies.pools import NodeGroupView, node_groups
from inferstack.policies.props import items, mapping, text
from inferstack.spec.pools import WHOLE_GPU

# The EKS API spells taint effects in capitals; node-template taint tags use Kubernetes' spelling.
KUBERNETES_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}


def expected_tags(group: NodeGroupView) -> dict[str, str]:
    """The node-template tags that describe one of the group's nodes: its device resources (stating
    nvidia.com/gpu even when renamed away, since the autoscaler would assume the instance type's GPUs),
    its labels and the EKS capacity type label, and its taints. Devices a DRA driver hands out are no extended
    resource of the node (they are in its ResourceSlices), so no tag states them."""
    resources = dict(group.plugin_resources)
    instance = group.instance
    if instance is not None and instance.gpu_count:
        resources.setdefault(WHOLE_GPU, 0)
    tags = {f"{RESOURCE_TAG}{name}": str(amount) for name, amount in resources.items()}
    labels = {**group.labels, conventions.EKS_CAPACITY_LABEL: group.capacity_type}
    tags.update({f"{LABEL_TAG}{key}": value for key, value in labels.items()})
    for taint in items(group.resource.props.get("taints")):
        taint = mapping(taint)
        effect = KUBERNETES_EFFECTS.get(text(taint.get("effect")), text(taint.get("effect")))
        tags[f"{TAINT_TAG}{text(taint.get('key'))}"] = f"{text(taint.get('value'))}:{effect}"
    return tags


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    groups = [g for g in node_groups(args.resources) if g.min_size == 0 and not g.is_karpenter]
    if not groups:
        args.not_applicable("no node group can scale to zero nodes")
    for group in groups:
        if group.advertised is None:
            continue  # gpu-requests-advertised reports groups whose resources are unknown
        wrong = [
            f"{key}={value!r} (has {group.asg_tags[key]!r})" if key in group.asg_tags else f"{key}={value!r}"
            for key, value in sorted(expected_tags(group).items())
            if group.asg_tags.get(key) != value
        ]
        if wrong:
            report(
                f"{group} can be at zero nodes, but its Auto Scaling group lacks the cluster-autoscaler "
                f"node-template tags {', '.join(wrong)}, so pods needing them never scale it up. To fix: tag the "
                "Auto Scaling group (aws.autoscaling.Tag on the node group's resources[0].autoscalingGroups[0].name) "
                "with its nodes' resources, labels and taints; EKS does not copy node group tags to it.",
                group.resource.urn,
            )


autoscaler_node_templates = StackValidationPolicy(
    name="autoscaler-node-templates",
    description="Node groups that can be at zero nodes carry cluster-autoscaler node-template tags for "
    "their resources, labels and taints.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
)
