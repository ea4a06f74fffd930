"""What cluster-autoscaler must be told about a node group it grows from zero: its template node tags.

With no node of a group to copy, cluster-autoscaler's AWS provider (kubernetes/autoscaler,
cluster-autoscaler-1.36.1, cloudprovider/aws/aws_manager.go `buildNodeFromTemplate`) builds the group's
template node from the Auto Scaling group: cpu, memory and `nvidia.com/gpu` from the instance type, then
`<prefix>resources/<name>` tags (quantities that override the instance type's), `<prefix>label/<key>`
tags and `<prefix>taint/<key>` tags valued `<value>:<Effect>`. A pod whose requests, nodeSelector or
tolerations that node does not satisfy never triggers a scale-up.

For an EKS managed node group it also asks DescribeNodegroup (managed_nodegroup_cache.go, aws_wrapper.go
`getManagedNodegroupInfo`) for the group's labels, its taints that have a value, and the
`<prefix>resources/*` entries of the group's own tags. EKS does not copy a managed node group's tags to
its Auto Scaling group, and a failed DescribeNodegroup leaves only the Auto Scaling group's tags, so the
whole template is tagged on the Auto Scaling group as well (README.md "Auto-Discovery Setup").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from inferstack import conventions
from inferstack.planning.pool_capacity import advertised_per_node
from inferstack.spec import Taint
from inferstack.spec.pools import WHOLE_GPU, PoolHardware

TEMPLATE_PREFIX = "k8s.io/cluster-autoscaler/node-template/"
RESOURCE_TAG = f"{TEMPLATE_PREFIX}resources/"
LABEL_TAG = f"{TEMPLATE_PREFIX}label/"
TAINT_TAG = f"{TEMPLATE_PREFIX}taint/"

GPU_TAINT = Taint(key=conventions.GPU_TAINT_KEY, value="true", effect="NoSchedule")


def template_resources(hardware: PoolHardware) -> dict[str, int]:
    """Extended resources one node advertises. `nvidia.com/gpu` is always stated: the autoscaler would
    otherwise assume the instance type's GPU count, which a MIG-mixed or shared pool renames away. A DRA pool's
    node advertises none: its devices are in the drivers' ResourceSlices, which no tag describes."""
    resources: dict[str, int] = {WHOLE_GPU: 0} if hardware.gpus_per_node else {}
    if hardware.spec.device_mode != "dra":
        resources.update(advertised_per_node(hardware))
    return resources


def node_template_tags(resources: Mapping[str, int], labels: Mapping[str, str], taints: Iterable[Taint]) -> dict[str, str]:
    """The tags from which the autoscaler's template node gets these resources, labels and taints."""
    tags = {f"{RESOURCE_TAG}{name}": str(amount) for name, amount in resources.items()}
    tags.update({f"{LABEL_TAG}{key}": value for key, value in labels.items()})
    tags.update({f"{TAINT_TAG}{t.key}": f"{t.value or ''}:{t.effect}" for t in taints})
    return tags
