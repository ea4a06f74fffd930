"""How long the engine takes to create each kind of resource, and a model replica to start.

Typical creation times are data (CREATION_TIMES), each with its source; figures nobody has published
are marked as estimates. The resource graph (serving_time) adds them up along its chains of waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

PEER_SYSTEMS = "shared/reference/peer-systems.md section D"


@dataclass(frozen=True)
class CreationTime:
    """A typical duration, where it comes from, and whether anyone measured it."""

    key: str
    seconds: float
    source: str
    measured: bool


def _table(*entries: CreationTime) -> Mapping[str, CreationTime]:
    return {e.key: e for e in entries}


CREATION_TIMES: Mapping[str, CreationTime] = _table(
    CreationTime(
        "eks_cluster", 870,
        f"EKS control plane create, 13 m 13 s to ~16 m across 21 regions (easontechtalk.com blog, unofficial; "
        f"{PEER_SYSTEMS}): the midpoint, 14.5 min", True,
    ),
    CreationTime(
        "node_group", 180,
        "Managed node group create: EC2 launch to node registration ~70-80 s (amazon-eks-ami #1099) plus the "
        "node group's own workflow, which AWS does not publish: estimate", False,
    ),
    CreationTime(
        "gpu_node", 240,
        "A GPU node for the first replica: autoscaler scale-up, EC2 launch and registration (~70-80 s, "
        "amazon-eks-ami #1099; 'GPU types boot longer', karpenter-provider-aws #6165) and the GPU device "
        "plugin's start: estimate", False,
    ),
    CreationTime(
        "image_pull", 334,
        f"Pulling a 9.5 GB PyTorch image, uncached: 334 s (eks-blueprints patterns/ml-container-cache; "
        f"{PEER_SYSTEMS}); the vLLM image is of that size", True,
    ),
    CreationTime(
        "engine_start", 75,
        f"vLLM start with weights on local disk: 85.3 s mean warm start for Qwen3-32B on H100 (llm-d PR #2492; "
        f"{PEER_SYSTEMS}) less ~10 s to read its 65 GB at NVMe speed", True,
    ),
    CreationTime(
        "weights_s3_gb_per_s", 0.58,
        f"Weights streamed from S3: 3.3 GiB in 6.1 s with the Run:ai streamer (run-ai/runai-model-streamer #67; "
        f"{PEER_SYSTEMS}), in GB/s", True,
    ),
    CreationTime(
        "weights_nvme_gb_per_s", 7.0,
        f"Weights read from the NVMe cache: ~7 GB/s, '180 GB in about 25 s' (vllm #15862; {PEER_SYSTEMS}), in GB/s",
        False,
    ),
    CreationTime(
        "gpu_operator", 180,
        f"Helm install of the NVIDIA GPU operator (several DaemonSets and a validator): no published figure "
        f"({PEER_SYSTEMS}: 'Helm install time ... not found'): estimate", False,
    ),
    CreationTime(
        "helm_release", 90,
        f"Helm install of an operator chart waiting for its pods: no published figure ({PEER_SYSTEMS}): estimate",
        False,
    ),
    CreationTime("eks_addon", 60, "EKS managed add-on create: no published figure: estimate", False),
    CreationTime("nat_gateway", 120, "NAT gateway create (pending to available): no published figure: estimate", False),
    CreationTime("aws_resource", 5, "Other AWS API resources (IAM, VPC pieces, S3, security groups): estimate", False),
    CreationTime("kubernetes_object", 2, "Applying one Kubernetes object: estimate", False),
    CreationTime("none", 0, "Components and providers create nothing", True),
)

# Type tokens with their own entry; other aws:/kubernetes: types fall back to the generic ones.
TYPE_KEYS: Mapping[str, str] = {
    "aws:eks/cluster:Cluster": "eks_cluster",
    "aws:eks/nodeGroup:NodeGroup": "node_group",
    "aws:eks/addon:Addon": "eks_addon",
    "aws:ec2/natGateway:NatGateway": "nat_gateway",
    "kubernetes:helm.sh/v3:Release": "helm_release",
    "kubernetes:helm.sh/v4:Chart": "helm_release",
}


def creation_key(resource: Mapping[str, Any]) -> str:
    """The CREATION_TIMES entry a resources.json entry takes (its model's first replica aside: see
    replica_ready_seconds)."""
    kind = str(resource["type"])
    # A Kubernetes component (yaml/v2 ConfigFile, helm/v4 Chart) is a remote component: the recording
    # holds it without the objects it creates, so its own entry stands for them.
    if kind.startswith("pulumi:providers:") or (resource.get("custom") is False and not kind.startswith("kubernetes:")):
        return "none"
    key = TYPE_KEYS.get(kind)
    if key == "helm_release" and "gpu-operator" in str((resource.get("inputs") or {}).get("chart", "")):
        return "gpu_operator"
    if key:
        return key
    if kind.startswith("aws:"):
        return "aws_resource"
    return "kubernetes_object"


def typical_seconds(resource: Mapping[str, Any]) -> float:
    return CREATION_TIMES[creation_key(resource)].seconds


def replica_parts(
    weights_bytes: int, weights_from: Literal["s3", "nvme"], *, new_node: bool = True
) -> tuple[tuple[str, float], ...]:
    """What a replica's start takes, as (CREATION_TIMES key, seconds) in order: a GPU node when one must be
    added, the image, the weights (copied from S3 onto a cold node, or read from its NVMe cache), the engine."""
    rate = CREATION_TIMES[f"weights_{weights_from}_gb_per_s"].seconds * 1e9
    parts = [("gpu_node", CREATION_TIMES["gpu_node"].seconds)] if new_node else []
    parts.append(("image_pull", CREATION_TIMES["image_pull"].seconds))
    parts.append((f"weights_{weights_from}_gb_per_s", weights_bytes / rate))
    parts.append(("engine_start", CREATION_TIMES["engine_start"].seconds))
    return tuple(parts)


def replica_ready_seconds(weights_bytes: int, weights_from: Literal["s3", "nvme"], *, new_node: bool = True) -> float:
    """A model's replica: a GPU node, the image, the weights (from S3 or the NVMe cache), the engine."""
    return sum(seconds for _, seconds in replica_parts(weights_bytes, weights_from, new_node=new_node))

