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
        "engine_warmup_warm", 75,
        f"vLLM start to serving with its weights on local disk, compile cache kept: 85.3 s mean warm start for "
        f"Qwen3-32B on H100 (llm-d PR #2492; {PEER_SYSTEMS}) less ~10 s to read its 65 GB at NVMe speed (the load, "
        f"counted apart): process start, torch.compile from its cache, memory profiling, CUDA graph capture", True,
    ),
    CreationTime(
        "engine_warmup_cold", 135,
        "The same start with an empty compile cache (a new node): engine_warmup_warm plus the ~60 s the cache saves. "
        "A 70B model compiles in ~15 s Dynamo + ~70 s Inductor cold (vllm #19824) and in 25 s from the cache "
        "(vllm #20402); vllm #44881 shows torch.compile 43 s cold vs ~5 s cached, in a 277 s cold start whose 210 s "
        "of profiling and warm-up (an NVFP4 model without native sm_120 kernels) the cache does not shorten: estimate",
        False,
    ),
    CreationTime(
        "weights_s3_gb_per_s", 0.58,
        f"Weights from S3: 3.3 GiB in 6.1 s with the Run:ai streamer (run-ai/runai-model-streamer #67; "
        f"{PEER_SYSTEMS}), in GB/s; the rate of the pre-fetch's copy to NVMe, and of weight_loader s3_stream's one "
        f"stream from S3 into GPU memory", True,
    ),
    CreationTime(
        "weights_nvme_gb_per_s", 7.0,
        f"Weights loaded from the NVMe cache into GPU memory: ~7 GB/s, '180 GB in about 25 s' (vllm #15862; "
        f"{PEER_SYSTEMS}), in GB/s",
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
    replica_parts)."""
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


WeightLoader = Literal["local", "s3_stream"]


def replica_parts(
    weights_bytes: int, loader: WeightLoader = "local", *, new_node: bool = True, warm: bool = False
) -> tuple[tuple[str, str, float], ...]:
    """What a replica's start takes, as (phase, CREATION_TIMES key, seconds) in order.

    A cold start: node boot (when a GPU node must be added), image pull, weight copy from S3 to the NVMe cache
    and load into GPU memory (or, for s3_stream, one stream from S3 into GPU memory), and the engine's warm-up
    with an empty compile cache. A warm restart keeps the node: the image is cached, the weights and the compile
    cache are on its NVMe, so only the load and a cached warm-up remain (s3_stream streams its weights again).
    """
    s3 = weights_bytes / (CREATION_TIMES["weights_s3_gb_per_s"].seconds * 1e9)
    nvme = weights_bytes / (CREATION_TIMES["weights_nvme_gb_per_s"].seconds * 1e9)
    parts: list[tuple[str, str, float]] = []
    if not warm:
        if new_node:
            parts.append(("node boot", "gpu_node", CREATION_TIMES["gpu_node"].seconds))
        parts.append(("image pull", "image_pull", CREATION_TIMES["image_pull"].seconds))
    if loader == "s3_stream":
        parts.append(("weight copy + load", "weights_s3_gb_per_s", s3))
    else:
        if not warm:
            parts.append(("weight copy", "weights_s3_gb_per_s", s3))
        parts.append(("load", "weights_nvme_gb_per_s", nvme))
    warmup = "engine_warmup_warm" if warm else "engine_warmup_cold"
    parts.append(("warm-up", warmup, CREATION_TIMES[warmup].seconds))
    return tuple(parts)
