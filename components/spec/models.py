"""The stack spec: every knob of the platform, typed, described and defaulted in one place.

Field descriptions end with their default so `inferstack schema` documents the spec completely.
Cross-field rules (a model names a pool that exists, a MIG profile exists on that GPU, ...) live in
`inferstack.spec.checks` and run once the whole spec is parsed.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from inferstack.catalog.models import checkpoint_format as catalog_checkpoint_format, model_facts
from inferstack.catalog.vllm_images import DEFAULT_EFA_VLLM_IMAGE, DEFAULT_VLLM_IMAGE
from pydantic import (
    BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, StringConstraints, Tag, field_serializer, field_validator,
    model_validator,
)

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAME_MAX_LENGTH = 40
Name = Annotated[str, StringConstraints(pattern=DNS_LABEL, min_length=1, max_length=NAME_MAX_LENGTH)]
# The bucket and key are checked by spec.checks against S3's naming rules, with a message per rule.
S3Uri = Annotated[str, StringConstraints(pattern=r"^s3://\S*$")]
PinnedImage = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}|@sha256:[a-f0-9]{64})$"),
]

AUTO = "auto"  # a model service's pool, tensor_parallel or mig_profile left to auto placement

# vLLM 0.33's `All2AllBackend` (vllm/config/parallel.py) as its CLI accepts it on NVIDIA GPUs. Left out:
# "passthrough" (not selectable from the CLI), "naive" and "pplx" (removed: vLLM falls back to
# allgather_reducescatter), "mori_*" (ROCm MI300/MI350 only) and "flashinfer_all2allv" (a deprecated
# alias of flashinfer_nvlink_two_sided).
All2AllBackend = Literal[
    "allgather_reducescatter",
    "deepep_high_throughput",
    "deepep_low_latency",
    "deepep_v2",
    "moonep",
    "nixl_ep",
    "flashinfer_nvlink_two_sided",
    "flashinfer_nvlink_one_sided",
]
VLLM_ALL2ALL_BACKEND = "allgather_reducescatter"  # ParallelConfig.all2all_backend's default in vLLM 0.33


class Model(BaseModel):
    """Strict, immutable base: unknown fields are errors, specs never change after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------------------------- cluster


ZoneName = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")]
Ipv4Cidr = Annotated[str, StringConstraints(pattern=r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$")]


class ZoneSubnetCidrs(Model):
    """One zone's subnet CIDRs, chosen by hand instead of the zone's slot (e.g. addresses a VPC already has)."""

    private: Ipv4Cidr = Field(description="CIDR of the zone's private (node) subnet, inside vpc_cidr. Required.")
    public: Ipv4Cidr = Field(
        description="CIDR of the zone's public (NAT, load balancer) subnet, inside vpc_cidr. Required."
    )


class NetworkSpec(Model):
    """The VPC the platform creates, or existing subnets to place it in."""

    vpc_cidr: str = Field(
        "10.0.0.0/16",
        pattern=r"^\d{1,3}(\.\d{1,3}){3}/(1[6-9]|2[0-4])$",
        description="CIDR of the VPC to create (/16 to /24). Each zone letter a-g has fixed slots: its private "
        "subnet is one eighth of the VPC (a /19 of a /16), its public subnet one sixty-fourth (a /22); slots need a "
        "/22 or larger VPC, a smaller one needs subnet_cidrs for every zone. Defaults to 10.0.0.0/16.",
    )
    availability_zones: list[ZoneName] = Field(
        default_factory=list,
        description="Zones for private subnets, e.g. ['us-east-1a', 'us-east-1b']; adding or removing one leaves "
        "the other zones' subnets as they are. Defaults to the first three zones of the region (a, b, c).",
    )
    subnet_cidrs: dict[ZoneName, ZoneSubnetCidrs] = Field(
        default_factory=dict,
        description="Explicit subnet CIDRs per zone, in place of the zone's slot, e.g. to keep the addresses of "
        "subnets created before zone slots. Defaults to none: every zone uses its slot.",
    )
    existing_subnet_ids: list[Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list,
        description="Private subnet ids to use instead of creating a VPC. Defaults to none: a VPC is created.",
    )


class SystemNodesSpec(Model):
    """CPU nodes for operators and controllers, so GPU nodes only run GPU work."""

    instance_type: str = Field("m7i.xlarge", description="Instance type of the system node group. Defaults to m7i.xlarge.")
    min_nodes: int = Field(2, ge=1, description="Minimum system nodes. Defaults to 2.")
    max_nodes: int = Field(4, ge=1, description="Maximum system nodes. Defaults to 4.")


RoleArn = Annotated[str, StringConstraints(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")]


class CreateCluster(Model):
    """An EKS cluster the stack creates and owns."""

    mode: Literal["create"] = Field("create", description="Create a new EKS cluster. Defaults to create.")
    name: Name | None = Field(None, description="Cluster name. Defaults to '<environment>-inference'.")
    kubernetes_version: str = Field(
        "1.36", pattern=r"^1\.\d{2}$", description="EKS Kubernetes version. Defaults to 1.36."
    )
    endpoint_public_access: bool = Field(
        False,
        description="Also expose the API endpoint on the internet, to public_access_cidrs only. Defaults to false: the "
        "endpoint is private, reachable from the VPC and the networks routed into it (VPN, peering, Direct Connect).",
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list,
        description="Public IPv4 CIDRs that may reach the public endpoint (required with endpoint_public_access). "
        "Defaults to none. 0.0.0.0/0 is refused unless public_access_from_anywhere acknowledges it.",
    )
    public_access_from_anywhere: bool = Field(
        False,
        description="Acknowledge that 0.0.0.0/0 in public_access_cidrs opens the API endpoint to the whole internet "
        "(requests still need an access entry), e.g. for hosted CI runners without fixed addresses. Defaults to false.",
    )
    admin_role_arns: list[RoleArn] = Field(
        default_factory=list,
        description="IAM roles granted cluster-admin through EKS access entries. Defaults to none (only the creator).",
    )
    ci_role_arns: list[RoleArn] = Field(
        default_factory=list,
        description="IAM roles CI runs `pulumi preview` with: each gets an access entry with the read-only "
        "AmazonEKSViewPolicy at cluster scope. Defaults to none.",
    )
    network: NetworkSpec = Field(default_factory=NetworkSpec, description="The VPC. Defaults to a new /16 VPC in three zones.")
    system_nodes: SystemNodesSpec = Field(
        default_factory=SystemNodesSpec, description="CPU node group for add-ons. Defaults to 2-4 m7i.xlarge."
    )


class ExistingCluster(Model):
    """An EKS cluster that already exists: nothing of the cluster itself is created."""

    mode: Literal["existing"] = Field(description="Use an existing EKS cluster.")
    name: Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")] = Field(
        description="Name of the existing EKS cluster. Required."
    )
    kubeconfig: str | None = Field(
        None,
        description="Kubeconfig to reach the cluster (kept as a Pulumi secret). "
        "Defaults to one built from the cluster's endpoint that authenticates with `aws eks get-token`.",
    )


def mode(value: object) -> str:
    """`mode` picks the cluster kind; without one it is `create`, the documented default."""
    if isinstance(value, dict):
        return str(value.get("mode", "create"))
    return str(getattr(value, "mode", "create"))


ClusterSpec = Annotated[
    Union[Annotated[CreateCluster, Tag("create")], Annotated[ExistingCluster, Tag("existing")]],
    Discriminator(mode),
]


# ------------------------------------------------------------------------------------------ node pools


class NoSharing(Model):
    """Each pod gets whole GPUs."""

    mode: Literal["none"] = Field("none", description="Whole GPUs per pod.")


class MigSharing(Model):
    """Multi-Instance GPU: every GPU of the pool is split into the same layout of hardware slices."""

    mode: Literal["mig"] = Field(description="Partition every GPU with MIG.")
    strategy: Literal["single", "mixed"] = Field(
        "mixed",
        description="GPU operator MIG strategy: 'single' advertises slices as nvidia.com/gpu (one profile only), "
        "'mixed' as nvidia.com/mig-<profile>. Defaults to mixed.",
    )
    layout: dict[str, Annotated[int, Field(ge=1, le=7)]] = Field(
        description="Slices per GPU, profile -> count, e.g. {'3g.40gb': 2} or {'1g.10gb': 2, '2g.20gb': 1, '3g.40gb': 1}. "
        "Required.",
        min_length=1,
    )


class TimeSlicing(Model):
    """Time-sliced sharing: pods take turns on a GPU; no memory isolation."""

    mode: Literal["time_slicing"] = Field(description="Share GPUs by time-slicing.")
    replicas: int = Field(4, ge=2, le=48, description="Pods per GPU. Defaults to 4.")


class MpsSharing(Model):
    """CUDA MPS: concurrent kernels with memory and compute split equally; full GPUs only."""

    mode: Literal["mps"] = Field(description="Share GPUs with CUDA MPS.")
    replicas: int = Field(2, ge=2, le=48, description="Pods per GPU. Defaults to 2.")


GpuSharing = Annotated[Union[NoSharing, MigSharing, TimeSlicing, MpsSharing], Field(discriminator="mode")]


class Taint(Model):
    key: str = Field(description="Taint key. Required.")
    value: str | None = Field(None, description="Taint value. Defaults to none.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "NoSchedule", description="Taint effect. Defaults to NoSchedule."
    )


class Reservation(Model):
    """Reserved capacity backing the pool's on-demand nodes."""

    kind: Literal["odcr", "capacity_block"] = Field(
        description="'odcr' (on-demand capacity reservation) or 'capacity_block' (EC2 Capacity Block for ML). Required."
    )
    id: Annotated[str, StringConstraints(pattern=r"^cr-[0-9a-f]{8,17}$")] = Field(description="Reservation id (cr-...). Required.")
    availability_zone: str | None = Field(
        None, pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$",
        description="The zone the reservation is in, checked against the pool's first zone (where its reserved "
        "nodes launch). Defaults to unchecked.",
    )


class CapacitySpec(Model):
    """How the pool's nodes are bought: an on-demand baseline, spot above it, or reserved capacity."""

    on_demand_base: int = Field(
        0,
        ge=0,
        description="Nodes that always run on-demand (the serving baseline); the minimum replicas of the pool's "
        "online services must fit on them. Defaults to 0.",
    )
    spot: bool = Field(
        True,
        description="Nodes above the on-demand baseline run on spot across the pool's instance types. "
        "When false they are on-demand too. Defaults to true.",
    )
    reservation: Reservation | None = Field(
        None, description="Capacity reservation or block for the on-demand nodes. Defaults to none."
    )


class EfaSpec(Model):
    """Elastic Fabric Adapter networking for multi-node tensor/pipeline parallel traffic."""

    enabled: bool = Field(False, description="Attach one EFA interface per network card. Defaults to false.")
    placement_group: str | None = Field(
        None,
        description="Name of an existing cluster placement group to launch into. "
        "Defaults to none: the pool creates its own when create_placement_group is true.",
    )
    create_placement_group: bool = Field(
        True,
        description="Create a cluster placement group for the pool's groups. A Capacity Block group never joins it "
        "(the block brings its own placement), nor a reserved group (an ODCR serves only the placement group it was "
        "created in: name that one in placement_group); set false when placement_group names one. Defaults to true.",
    )


class NvmeCacheSpec(Model):
    """Local NVMe instance store assembled into one volume that holds the model cache."""

    enabled: bool = Field(True, description="Assemble the instance-store disks into the model cache. Defaults to true.")
    raid: Literal["RAID0", "RAID10"] = Field(
        "RAID0", description="nodeadm localStorage strategy. RAID10 needs 4+ disks. Defaults to RAID0."
    )
    budget_percent: int = Field(
        80,
        ge=10,
        le=95,
        description="Share of the volume under the model cache (the NVMe array, or the root EBS volume when the "
        "cache is disabled) that cached weights may fill; beyond it the least recently used superseded versions "
        "are evicted. The rest stays free for container images and pod data, which nodeadm keeps on the same "
        "array. Defaults to 80.",
    )


def _bool_to_enabled(value):
    """Let `efa=True` / `nvme_cache=False` stand for the full object."""
    return {"enabled": value} if isinstance(value, bool) else value


class NodePoolSpec(Model):
    """A group of GPU nodes of interchangeable instance types."""

    name: Name = Field(description="Pool name, used in node labels and resource names. Required.")
    role: Literal["serving", "batch"] = Field(
        "serving", description="'serving' pools keep an on-demand baseline; 'batch' pools may be all spot. Defaults to serving."
    )
    instance_types: list[str] = Field(
        min_length=1,
        description="EC2 instance types, all with the same GPU model and count; several give spot more pools "
        "to draw from. Required.",
    )
    min_nodes: int = Field(
        0, ge=0, description="Minimum nodes; at least 1 when platform.node_autoscaler is 'none'. Defaults to 0."
    )
    max_nodes: int = Field(ge=1, description="Maximum nodes. Required.")
    capacity: CapacitySpec = Field(default_factory=CapacitySpec, description="Purchase options. Defaults to all spot.")
    efa: EfaSpec = Field(default_factory=EfaSpec, description="EFA networking (true/false or an object). Defaults to off.")
    nvme_cache: NvmeCacheSpec = Field(
        default_factory=NvmeCacheSpec, description="NVMe model cache (true/false or an object). Defaults to on, RAID0."
    )
    gpu_sharing: GpuSharing = Field(default_factory=NoSharing, description="GPU sharing mode. Defaults to none.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra node labels. Defaults to none.")
    taints: list[Taint] = Field(
        default_factory=list,
        description="Extra taints; every GPU pool is always tainted nvidia.com/gpu=true:NoSchedule. Defaults to none.",
    )
    availability_zones: list[str] = Field(
        default_factory=list,
        description="Zones the pool may use. Defaults to all cluster zones (EFA pools use the first zone only).",
    )
    disk_size_gib: int = Field(200, ge=50, le=16384, description="Root EBS volume size. Defaults to 200 GiB.")
    ami_type: Literal["AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA"] = Field(
        "AL2023_x86_64_NVIDIA", description="EKS AMI type. Defaults to AL2023_x86_64_NVIDIA."
    )
    auto_repair: bool = Field(
        True,
        description="Node auto repair (EKS on node groups, Karpenter's NodeRepair on NodePools): a node that stays "
        "unhealthy is replaced, one at a time, and repair pauses while more than 20% of the pool is unhealthy. GPU "
        "faults count only with platform.node_monitoring_agent. Defaults to true.",
    )

    _efa_bool = field_validator("efa", "nvme_cache", mode="before")(_bool_to_enabled)


# ----------------------------------------------------------------------------------------------- queues


class PriorityClassSpec(Model):
    name: Name = Field(description="WorkloadPriorityClass name. Required.")
    value: int = Field(description="Priority; higher preempts lower. Required.")
    description: str = Field("", description="What runs at this priority. Defaults to empty.")


class ClusterQueueSpec(Model):
    """A Kueue ClusterQueue in the stack's cohort, with a LocalQueue in the namespace of its role."""

    name: Name = Field(description="ClusterQueue (and LocalQueue) name. Required.")
    role: Literal["serving", "batch"] = Field(description="Which workloads use it: serving or batch. Required.")
    pools: list[str] | None = Field(
        None, description="Pools whose GPUs this queue owns (nominal quota). Defaults to every pool of the same role."
    )
    quota_gpus: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="Nominal quota per pool in GPUs (or slices/replicas on shared pools). "
        "Defaults to the pool's max_nodes x devices per node.",
    )
    borrowing_limit_gpus: int | None = Field(
        None, ge=0, description="Most GPUs it may borrow from the cohort. Defaults to unlimited."
    )
    lending_limit_gpus: int | None = Field(
        None, ge=0, description="Most GPUs it lends to the cohort. Defaults to unlimited."
    )
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        "Any", description="Preempt borrowers in the cohort to reclaim nominal quota. Defaults to Any."
    )
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        "LowerPriority", description="Preemption inside the queue. Defaults to LowerPriority."
    )


def _default_queues() -> list[ClusterQueueSpec]:
    return [ClusterQueueSpec(name="serving", role="serving"), ClusterQueueSpec(name="batch", role="batch")]


def _default_priorities() -> list[PriorityClassSpec]:
    return [
        PriorityClassSpec(name="online", value=1000, description="Interactive serving with an SLO."),
        PriorityClassSpec(name="standard", value=500, description="Serving without an SLO."),
        PriorityClassSpec(name="batch", value=100, description="Offline and queue-fed work."),
    ]


class QueuesSpec(Model):
    """Kueue: flavors per pool and capacity type, cluster queues in one cohort, priorities."""

    enabled: bool = Field(True, description="Install Kueue and admit GPU workloads through it. Defaults to true.")
    cohort: Name = Field("inference", description="Cohort that lets queues borrow idle GPUs. Defaults to 'inference'.")
    cluster_queues: list[ClusterQueueSpec] = Field(
        default_factory=_default_queues, description="Cluster queues. Defaults to 'serving' and 'batch'."
    )
    priorities: list[PriorityClassSpec] = Field(
        default_factory=_default_priorities,
        description="WorkloadPriorityClasses. Defaults to online (1000), standard (500), batch (100).",
    )
    fair_sharing: bool = Field(False, description="Enable Kueue fair sharing across the cohort. Defaults to false.")


# ---------------------------------------------------------------------------------------------- gateway


class GatewaySpec(Model):
    """One OpenAI-style endpoint for every model: Gateway API + Inference Extension."""

    enabled: bool = Field(True, description="Create the inference gateway. Defaults to true.")
    implementation: Literal["istio", "agentgateway"] = Field(
        "istio",
        description="Gateway implementation (with its GatewayClass) that routes to InferencePools. Defaults to istio.",
    )
    name: Name = Field("inference-gateway", description="Gateway name. Defaults to 'inference-gateway'.")
    port: int = Field(80, ge=1, le=65535, description="HTTP listener port. Defaults to 80.")
    body_based_routing: bool = Field(
        True, description="Route by the request body's `model` field. Defaults to true."
    )
    prefix_cache_routing: bool = Field(
        True, description="Endpoint picker scores pods by prefix-cache affinity. Defaults to true."
    )
    request_timeout_seconds: int = Field(300, ge=1, description="Route request timeout. Defaults to 300.")


# ------------------------------------------------------------------------------------------------ models


class ModelArchitecture(Model):
    """What sizing needs to know about a model; the model catalog supplies it for known models."""

    params_billion: float = Field(gt=0, description="Parameter count in billions. Required.")
    layers: int = Field(ge=1, description="Transformer layers. Required.")
    hidden_size: int = Field(ge=1, description="Hidden size. Required.")
    attention_heads: int = Field(ge=1, description="Query heads. Required.")
    kv_heads: int = Field(ge=1, description="Key/value heads (GQA). Required.")
    head_dim: int = Field(ge=1, description="Dimension per head. Required.")
    max_context: int = Field(ge=1, description="Longest context the model supports. Required.")
    task: Literal["generate", "embed"] = Field("generate", description="Text generation or embeddings. Defaults to generate.")
    vocab_size: int | None = Field(
        None, ge=1, description="Vocabulary size (config.json vocab_size). Defaults to the model catalog's, if any."
    )
    tied_embeddings: bool = Field(
        False, description="The LM head shares the token embedding (config.json tie_word_embeddings). Defaults to false."
    )
    # Mixture of experts (config.json num_local_experts / n_routed_experts, num_experts_per_tok, ...).
    active_params_billion: float | None = Field(
        None, gt=0, description="Parameters a token uses (MoE: shared weights plus its experts). Defaults to all."
    )
    experts: int | None = Field(None, ge=2, description="Routed experts per MoE layer. Defaults to none: dense.")
    experts_per_token: int | None = Field(None, ge=1, description="Routed experts a token uses. Required with experts.")
    shared_experts: int = Field(0, ge=0, description="Experts every token uses (DeepSeek, Qwen2-MoE). Defaults to 0.")
    moe_layers: int | None = Field(
        None, ge=1, description="Layers whose MLP is MoE (DeepSeek keeps its first 3 dense). Defaults to every layer."
    )
    moe_intermediate_size: int | None = Field(
        None, ge=1, description="Intermediate size of one expert's gated MLP. Required with experts."
    )
    # Attention: grouped-query (K and V per KV head) or multi-head latent (one compressed latent per token).
    attention: Literal["gqa", "mla"] = Field(
        "gqa", description="'gqa' (multi-head and grouped-query) or 'mla' (multi-head latent attention). Defaults to gqa."
    )
    kv_lora_rank: int | None = Field(None, ge=1, description="MLA latent dimension (config.json kv_lora_rank). Required with mla.")
    qk_rope_head_dim: int | None = Field(
        None, ge=1, description="MLA decoupled RoPE key dimension (config.json qk_rope_head_dim). Required with mla."
    )
    sliding_window: int | None = Field(None, ge=1, description="Tokens a sliding-window layer attends. Defaults to none.")
    sliding_window_layers: int | None = Field(
        None, ge=0, description="Layers that use the sliding window; the rest attend the full context. Defaults to all "
        "layers when sliding_window is set.",
    )

    @model_validator(mode="after")
    def _kinds_complete(self) -> "ModelArchitecture":
        needs = []
        if self.experts is not None:
            needs += [f for f in ("experts_per_token", "moe_intermediate_size") if getattr(self, f) is None]
        if self.attention == "mla":
            needs += [f for f in ("kv_lora_rank", "qk_rope_head_dim") if getattr(self, f) is None]
        if needs:
            raise ValueError(
                f"{'an MoE' if self.experts is not None else 'an MLA'} architecture needs {', '.join(needs)}. To fix: "
                "set them from the model's config.json"
            )
        if self.experts is not None and self.experts_per_token > self.experts:
            raise ValueError(
                f"experts_per_token {self.experts_per_token} is more than experts {self.experts}. To fix: use the "
                "config.json's num_experts_per_tok"
            )
        for name in ("moe_layers", "sliding_window_layers"):
            value = getattr(self, name)
            if value is not None and value > self.layers:
                raise ValueError(f"{name} {value} is more than layers {self.layers}. To fix: at most {self.layers}")
        return self

    @property
    def expert_params(self) -> int:
        """Routed-expert weights across the MoE layers: gate, up and down projections of each expert."""
        if self.experts is None:
            return 0
        layers = self.layers if self.moe_layers is None else self.moe_layers
        return layers * self.experts * 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def windowed_layers(self) -> int:
        if self.sliding_window is None:
            return 0
        return self.layers if self.sliding_window_layers is None else self.sliding_window_layers


class CheckpointFormat(Model):
    """How a checkpoint stores its linear-layer weights, as its config.json's `quantization_config` says.

    vLLM reads this from the checkpoint itself, so it is a fact about the files, not a choice: sizing
    counts these bytes on disk, and what vLLM may be asked to run depends on it. Token embeddings and
    the LM head stay 16-bit in every format here.
    """

    quant_method: Literal["none", "awq", "gptq", "fp8", "compressed-tensors", "mxfp4", "modelopt"] = Field(
        "none",
        description="`quantization_config.quant_method` of the checkpoint's config.json (modelopt: NVIDIA "
        "ModelOpt's FP8 or NVFP4); none for a 16-bit checkpoint (no quantization_config). Defaults to none.",
    )
    weight_bits: Literal[4, 8, 16] = Field(16, description="Bits per stored weight. Defaults to 16.")
    weight_type: Literal["int", "float"] = Field(
        "float", description="Integer (AWQ, GPTQ, W4A16, W8A8-INT8) or float (FP8, 16-bit) weights. Defaults to float."
    )
    activation_bits: Literal[4, 8, 16] = Field(
        16, description="8 when activations are quantized too (W8A8 INT8 or FP8), 4 for NVFP4 W4A4, 16 for "
        "weight-only. Defaults to 16.",
    )
    group_size: int | None = Field(
        None,
        ge=1,
        description="Weights per 16-bit scale for group-wise formats (AWQ, GPTQ, W4A16: usually 128); none for "
        "per-channel, per-tensor or 128x128-block scales. Defaults to none.",
    )
    zero_points: bool = Field(
        False, description="A 4-bit zero point is stored per group (AWQ, GPTQ). Defaults to false."
    )
    scale_bits: Literal[8, 16] = Field(
        16, description="Bits of each group's scale: 16 (AWQ, GPTQ), 8 (MXFP4's E8M0 per 32 weights, NVFP4's E4M3 "
        "per 16). Defaults to 16."
    )
    applies_to: Literal["linear", "experts"] = Field(
        "linear",
        description="Which weights the format covers: every linear layer, or only the MoE experts (gpt-oss's MXFP4, "
        "with attention and the router in 16 bits). Defaults to linear.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "CheckpointFormat":
        kinds = {
            "none": {(16, "float")},
            "awq": {(4, "int")},
            "gptq": {(4, "int"), (8, "int")},
            "fp8": {(8, "float")},
            "compressed-tensors": {(4, "int"), (8, "int"), (8, "float"), (4, "float")},
            "mxfp4": {(4, "float")},
            "modelopt": {(8, "float"), (4, "float")},
        }
        if (self.weight_bits, self.weight_type) not in kinds[self.quant_method]:
            allowed = ", ".join(f"{bits}-bit {kind}" for bits, kind in sorted(kinds[self.quant_method]))
            raise ValueError(
                f"quant_method {self.quant_method!r} stores {allowed} weights, not {self.weight_bits}-bit "
                f"{self.weight_type}. To fix: set weight_bits and weight_type to one of those, or the quant_method "
                "the checkpoint's quantization_config names"
            )
        if self.activation_bits == 8 and self.weight_bits != 8:
            raise ValueError(
                "activation_bits 8 (W8A8) needs weight_bits 8. To fix: set weight_bits 8, or drop activation_bits "
                "for a weight-only checkpoint"
            )
        if (self.weight_bits, self.weight_type) == (4, "float"):
            block = 32 if self.quant_method == "mxfp4" else 16
            if (self.group_size, self.scale_bits) != (block, 8):
                raise ValueError(
                    f"4-bit float weights under {self.quant_method!r} come in blocks of {block} sharing an 8-bit scale "
                    f"({'MXFP4' if block == 32 else 'NVFP4'}). To fix: set group_size {block} and scale_bits 8"
                )
        if self.activation_bits == 4 and not self.is_nvfp4:
            raise ValueError(
                "activation_bits 4 is NVFP4's W4A4: 4-bit float weights in groups of 16 with 8-bit scales. To fix: "
                "state that format, or drop activation_bits for a weight-only checkpoint"
            )
        if self.group_size is None and self.zero_points:
            raise ValueError(
                "zero_points are stored per group. To fix: set group_size (e.g. 128, as the checkpoint's "
                "quantization_config states), or zero_points false"
            )
        return self

    @property
    def is_nvfp4(self) -> bool:
        """NVIDIA's FP4: E2M1 weights in blocks of 16 sharing an FP8 (E4M3) scale, plus one FP32 scale per tensor."""
        return self.weight_bits == 4 and self.weight_type == "float" and self.group_size == 16 and self.scale_bits == 8


SIXTEEN_BIT = CheckpointFormat()


def catalog_stored_format(model_id: str) -> CheckpointFormat | None:
    """A catalog checkpoint's stored format, typed; None for ids the catalog lists no format for."""
    stored = catalog_checkpoint_format(model_id)
    return None if stored is None else CheckpointFormat(**stored)


class AutoscalingSpec(Model):
    """KEDA scaling of a model service on serving metrics."""

    min_replicas: int = Field(1, ge=0, description="Minimum replicas; 0 needs scale_to_zero. Defaults to 1.")
    max_replicas: int = Field(1, ge=1, description="Maximum replicas. Defaults to 1.")
    metric: Literal["queue_depth", "kv_cache", "epp_queue"] = Field(
        "queue_depth",
        description="Scale on vllm:num_requests_waiting per replica, vllm:kv_cache_usage_perc, or the endpoint "
        "picker's queue. Defaults to queue_depth.",
    )
    target: float | None = Field(
        None, gt=0, description="Target per replica. Defaults to 5 waiting requests, 0.8 KV-cache use, or 5 queued."
    )
    polling_interval_seconds: int = Field(15, ge=1, description="KEDA polling interval. Defaults to 15.")
    cooldown_seconds: int = Field(300, ge=0, description="KEDA cooldown before scaling down. Defaults to 300.")
    scale_to_zero: bool = Field(False, description="Allow scaling to zero replicas when idle. Defaults to false.")


class TrafficSpec(Model):
    """Expected load, for cost per token estimates."""

    requests_per_second: float = Field(gt=0, allow_inf_nan=False, description="Mean requests per second. Required.")
    mean_input_tokens: int = Field(1024, ge=1, description="Mean prompt tokens. Defaults to 1024.")
    mean_output_tokens: int = Field(256, ge=1, description="Mean generated tokens. Defaults to 256.")
    shared_prefix_tokens: int = Field(
        0,
        ge=0,
        description="Leading prompt tokens every request shares (a system prompt or few-shot examples), computed "
        "once and then served from vLLM's prefix cache. Defaults to 0.",
    )

    @model_validator(mode="after")
    def _prefix_within_prompt(self) -> "TrafficSpec":
        if self.shared_prefix_tokens >= self.mean_input_tokens:
            raise ValueError(
                f"shared_prefix_tokens ({self.shared_prefix_tokens}) must be less than mean_input_tokens "
                f"({self.mean_input_tokens}): a prompt is its shared prefix plus at least one token of its own. "
                "To fix: lower shared_prefix_tokens, or raise mean_input_tokens to the whole prompt's length"
            )
        return self


class LatencySlo(Model):
    """Latency targets at the stated traffic; the plan sizes replicas to meet them."""

    ttft_ms: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Mean time to first token, in milliseconds. Defaults to none."
    )
    itl_ms: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Mean inter-token latency (time per output token after the first), in milliseconds. "
        "Defaults to none.",
    )

    @model_validator(mode="after")
    def _states_a_target(self) -> "LatencySlo":
        if self.ttft_ms is None and self.itl_ms is None:
            raise ValueError("an slo states ttft_ms, itl_ms or both. To fix: set ttft_ms and/or itl_ms, or remove the slo")
        return self


# vLLM 0.33's choices for --max-lora-rank (vllm/config/lora.py MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class LoraAdapterSpec(Model):
    """A LoRA adapter served beside its base model: requests name it as their model."""

    name: Name = Field(description="Served model name of the adapter (what requests send as `model`). Required.")
    weights: S3Uri = Field(description="S3 prefix of the adapter (adapter_config.json and its safetensors). Required.")
    rank: int = Field(ge=1, le=max(VLLM_LORA_RANKS), description="The adapter's LoRA rank r. Required.")


class SpeculativeSpec(Model):
    """Speculative decoding (vLLM --speculative-config): a proposer drafts tokens the model verifies in one step."""

    method: Literal["ngram", "draft_model", "eagle", "eagle3", "mtp"] = Field(
        description="ngram (prompt lookup, no model), draft_model (a small model of the same vocabulary), eagle / "
        "eagle3 (an EAGLE head trained for the model), or mtp (the model's own multi-token-prediction layers). "
        "Required.",
    )
    model: str | None = Field(
        None, description="Hugging Face id of the draft model or EAGLE head. Required for draft_model, eagle, eagle3."
    )
    weights: S3Uri | None = Field(
        None, description="S3 prefix holding the draft's files, pre-fetched to the NVMe cache beside the model's "
        "(serving pods reach no model hub). Required with model.",
    )
    draft_params_billion: float | None = Field(
        None, gt=0, description="Draft model size, for sizing, when the catalog does not list it. Defaults to the "
        "catalog's.",
    )
    num_speculative_tokens: int = Field(3, ge=1, le=16, description="Tokens drafted per step. Defaults to 3.")
    draft_tensor_parallel: int | None = Field(
        None, ge=1, description="Tensor parallelism of the draft model: 1 or the service's. Defaults to the service's.",
    )
    prompt_lookup_max: int | None = Field(
        None, ge=1, description="ngram: longest n-gram matched. Defaults to prompt_lookup_min, or 5 when neither is set."
    )
    prompt_lookup_min: int | None = Field(
        None, ge=1, description="ngram: shortest n-gram matched. Defaults to prompt_lookup_max, or 5 when neither is set."
    )


class KvOffloadSpec(Model):
    """A second KV-cache tier in host memory (vLLM's native OffloadingConnector, --kv-offloading-size)."""

    cpu_gib: float = Field(
        gt=0, allow_inf_nan=False, description="Host memory per replica for offloaded KV blocks, in GiB (vLLM "
        "shares it over the replica's ranks). Required.",
    )


class PrefillSpec(Model):
    """The prefill role of a disaggregated service: engines of its own that compute prompts and hand the KV
    cache to the service's decode engines."""

    tensor_parallel: int = Field(1, ge=1, le=8, description="Tensor parallelism of a prefill engine. Defaults to 1.")
    pool: str | None = Field(None, description="Node pool of the prefill engines. Defaults to the service's pool.")
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec, description="Prefill replica scaling. Defaults to exactly one replica."
    )
    max_num_seqs: int | None = Field(
        None, ge=1, description="Prompts a prefill engine computes at once (--max-num-seqs). Defaults to vLLM's.",
    )


class DisaggregationSpec(Model):
    """Prefill/decode disaggregation: the service's own replicas decode, the prefill role computes prompts, and
    vLLM's NIXL connector moves the KV cache between them over EFA."""

    prefill: PrefillSpec = Field(default_factory=PrefillSpec, description="The prefill role. Defaults to one TP-1 engine.")
    non_cached_tokens: int = Field(
        16, ge=1, description="A prompt goes to a prefill engine when at least this many of its tokens are not "
        "cached on the decode pod the picker chose (llm-d's prefix-based-pd-decider nonCachedTokens). Defaults to 16.",
    )


class ModelServiceSpec(Model):
    """A vLLM service: one model, its precision, parallelism, placement and scaling."""

    name: Name = Field(description="Service name (Kubernetes objects and the served model name). Required.")
    model: str = Field(
        min_length=1, description="Model id as on Hugging Face, e.g. 'meta-llama/Llama-3.1-8B-Instruct'. Required."
    )
    architecture: ModelArchitecture | None = Field(
        None, description="Model facts for sizing. Defaults to the model catalog's entry for `model`."
    )
    weights: S3Uri | None = Field(
        None, description="S3 prefix holding the weights. Defaults to s3://<weights bucket>/models/<model>/."
    )
    checkpoint_format: CheckpointFormat | None = Field(
        None,
        description="How the checkpoint stores its weights (its config.json's quantization_config), for a model "
        "given by `architecture`. Defaults to the model catalog's entry for `model`, else 16-bit.",
    )
    quantization: Literal["auto", "none", "fp8", "int8", "int4", "awq", "gptq"] = Field(
        "auto",
        description="Weight precision to serve: auto (as the checkpoint stores it); fp8 (an FP8 checkpoint, or a "
        "16-bit one quantized to FP8 by vLLM at load); or a statement the checkpoint must match: none (16-bit), "
        "awq, gptq, int4 (AWQ, GPTQ or W4A16 4-bit), int8 (W8A8 or GPTQ 8-bit). Defaults to auto.",
    )
    dtype: Literal["bfloat16", "float16"] = Field("bfloat16", description="Activation dtype. Defaults to bfloat16.")
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        "auto", description="KV-cache dtype; fp8 halves KV memory. Defaults to auto (the activation dtype)."
    )
    pool: str = Field(
        description="Node pool the service runs on, or 'auto' for the cheapest pool that fits it. Required."
    )
    tensor_parallel: Annotated[int, Field(ge=1, le=8)] | Literal["auto"] = Field(
        1, description="GPUs per node the model is split across, or 'auto' for the cheapest that fits. Defaults to 1."
    )
    pipeline_parallel: int = Field(
        1, ge=1, le=16, description="Nodes the model is split across (multi-node via LeaderWorkerSet). Defaults to 1."
    )
    data_parallel: int = Field(
        1, ge=1, le=64,
        description="Data-parallel attention ranks per replica (--data-parallel-size), for mixture-of-experts models: "
        "each rank has tensor_parallel GPUs, its own batch and KV cache, and the ranks share the MoE layers. "
        "Defaults to 1.",
    )
    data_parallel_local: int | None = Field(
        None, ge=1,
        description="Data-parallel ranks per node (--data-parallel-size-local); fewer than data_parallel spreads a "
        "replica over data_parallel / data_parallel_local nodes with LeaderWorkerSet. Defaults to data_parallel "
        "(one node).",
    )
    expert_parallel: bool = Field(
        False,
        description="Expert parallelism (--enable-expert-parallel): each GPU of the replica's "
        "tensor_parallel x data_parallel group holds whole routed experts instead of a slice of every expert. "
        "Defaults to false.",
    )
    all2all_backend: All2AllBackend | None = Field(
        None,
        description="How expert-parallel MoE layers exchange tokens (--all2all-backend); needs expert_parallel. "
        "Defaults to vLLM's (allgather_reducescatter).",
    )
    mig_profile: str | None = Field(
        None,
        description="MIG profile per replica on a MIG pool, e.g. '3g.40gb', or 'auto' for the smallest slice of the "
        "pool's layout that fits. Defaults to none (whole GPUs).",
    )
    max_model_len: int = Field(8192, ge=128, description="Context length served (--max-model-len). Defaults to 8192.")
    max_num_seqs: int | None = Field(
        None, ge=1, description="Concurrent sequences per replica (--max-num-seqs). Defaults to vLLM's GPU-based default."
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="Tokens per scheduler step (--max-num-batched-tokens). Defaults to vLLM's default."
    )
    gpu_memory_utilization: float = Field(
        0.92, gt=0, le=1, description="Share of GPU memory vLLM may use (--gpu-memory-utilization). Defaults to 0.92."
    )
    enable_prefix_caching: bool = Field(True, description="Prefix caching. Defaults to true.")
    enable_chunked_prefill: bool = Field(True, description="Chunked prefill. Defaults to true.")
    tier: Literal["online", "standard", "batch"] = Field(
        "online",
        description="online: SLO-bound (on-demand baseline, never scaled to zero); standard; batch. Defaults to online.",
    )
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec, description="Replica scaling. Defaults to exactly one replica."
    )
    hf_token_secret: Name | None = Field(
        None, description="Kubernetes Secret (key HF_TOKEN) for gated models. Defaults to none."
    )
    image: PinnedImage | None = Field(
        None,
        description=f"vLLM image, pinned. Defaults to {DEFAULT_VLLM_IMAGE}, or to vLLM's EFA build "
        f"{DEFAULT_EFA_VLLM_IMAGE} for a multi-node service on an EFA pool.",
    )
    image_provides_efa: bool = Field(
        False,
        description="The image (one the catalog does not list) carries libfabric and the aws-ofi-nccl NCCL plugin, "
        "so a multi-node service on an EFA pool may use it. Defaults to false.",
    )
    lora_adapters: tuple[LoraAdapterSpec, ...] = Field(
        (),
        description="LoRA adapters served with the model, pre-fetched to the NVMe cache beside its weights and "
        "routed by name. Defaults to none.",
    )
    max_loras: int | None = Field(
        None, ge=1, description="Adapters on the GPU at once (--max-loras). Defaults to all listed adapters."
    )
    speculative: SpeculativeSpec | None = Field(None, description="Speculative decoding. Defaults to none.")
    kv_offload: KvOffloadSpec | None = Field(
        None, description="Host-memory KV-cache tier. Defaults to none: the GPU's KV cache only."
    )
    disaggregation: DisaggregationSpec | None = Field(
        None, description="Prefill/decode disaggregation; the service's own fields describe the decode role. "
        "Defaults to none: every engine prefills and decodes.",
    )
    weight_loader: Literal["local", "s3_stream"] = Field(
        "local",
        description="local: read the weights from the node's NVMe cache after the pre-fetch; s3_stream: stream them "
        "from S3 into GPU memory with vLLM's Run:ai streamer (--load-format runai_streamer), no pre-fetch. "
        "Defaults to local.",
    )
    traffic: TrafficSpec | None = Field(None, description="Expected traffic for cost per token. Defaults to none.")
    slo: LatencySlo | None = Field(
        None, description="Latency targets at the stated traffic (needs traffic); the plan shows the replicas they "
        "need. Defaults to none.",
    )

    # Set on the prefill engines a disaggregated service expands into (planning/disaggregation.py): the service
    # whose gateway route and InferencePool they serve.
    _prefill_for: str | None = PrivateAttr(default=None)

    @property
    def pd_role(self) -> Literal["prefill", "decode"] | None:
        """The service decodes when it is disaggregated; its derived prefill engines prefill."""
        if self._prefill_for is not None:
            return "prefill"
        return "decode" if self.disaggregation is not None else None

    @property
    def pd_service(self) -> str | None:
        """The disaggregated service an engine belongs to (its own name for the decode role)."""
        return self._prefill_for or (self.name if self.disaggregation is not None else None)

    @model_validator(mode="after")
    def _data_parallel_layout(self) -> "ModelServiceSpec":
        local = self.data_parallel_local
        if local is not None and (local > self.data_parallel or self.data_parallel % local):
            raise ValueError(
                f"data_parallel_local {local} does not divide data_parallel {self.data_parallel} into whole nodes. "
                f"To fix: set data_parallel_local to a divisor of {self.data_parallel}, or drop it for one node"
            )
        if self.data_parallel > 1 and self.pipeline_parallel > 1:
            raise ValueError(
                f"data_parallel {self.data_parallel} with pipeline_parallel {self.pipeline_parallel}: a data-parallel "
                "replica spreads over nodes by its ranks (data_parallel_local), not by pipeline stages. To fix: set "
                "pipeline_parallel to 1 and data_parallel_local to the ranks per node"
            )
        if self.all2all_backend is not None and not self.expert_parallel:
            raise ValueError(
                f"all2all_backend {self.all2all_backend!r} only applies to expert-parallel MoE layers. To fix: set "
                "expert_parallel to true, or drop all2all_backend"
            )
        return self

    @property
    def all2all_exchange(self) -> str:
        """The all-to-all backend vLLM runs: the spec's, else vLLM's default."""
        return self.all2all_backend or VLLM_ALL2ALL_BACKEND

    @property
    def data_parallel_per_node(self) -> int:
        return self.data_parallel_local or self.data_parallel

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def gpus_per_pod(self) -> int:
        """GPUs one pod of a replica requests: its tensor-parallel group times its node's data-parallel ranks."""
        return self.tensor_parallel * self.data_parallel_per_node

    @property
    def nodes_per_replica(self) -> int:
        """Pods (one per node) of a replica: its pipeline stages, or its data-parallel ranks' nodes."""
        return self.pipeline_parallel * (self.data_parallel // self.data_parallel_per_node)

    @property
    def multi_node(self) -> bool:
        """A replica over several nodes runs as a LeaderWorkerSet group."""
        return self.nodes_per_replica > 1

    @property
    def resolved_architecture(self) -> ModelArchitecture:
        """The explicit architecture, else the catalog's (the spec checks that one exists)."""
        if self.architecture is not None:
            return self.architecture
        facts = model_facts(self.model)
        if facts is None:
            raise KeyError(f"{self.model!r} has no architecture")
        return ModelArchitecture(**facts)

    @property
    def stored_format(self) -> CheckpointFormat:
        """How the checkpoint stores its weights: the spec's, else the catalog's, else 16-bit."""
        if self.checkpoint_format is not None:
            return self.checkpoint_format
        return catalog_stored_format(self.model) or SIXTEEN_BIT


# ----------------------------------------------------------------------------------------------- workers


class QueueWorkerSpec(Model):
    """A Deployment that pulls jobs from a Redis list and calls a model service; KEDA scales it on list length."""

    name: Name = Field(description="Worker name. Required.")
    model_service: str = Field(description="Model service the worker calls. Required.")
    image: PinnedImage = Field(description="Worker image, pinned to a version or digest. Required.")
    list_name: str | None = Field(None, description="Redis list holding jobs. Defaults to the worker name.")
    jobs_per_replica: int = Field(5, ge=1, description="Queued jobs per replica (KEDA listLength). Defaults to 5.")
    min_replicas: int = Field(0, ge=0, description="Minimum replicas. Defaults to 0.")
    max_replicas: int = Field(10, ge=1, description="Maximum replicas. Defaults to 10.")
    polling_interval_seconds: int = Field(15, ge=1, description="KEDA polling interval. Defaults to 15.")
    cooldown_seconds: int = Field(300, ge=0, description="KEDA cooldown. Defaults to 300.")


class BatchJobSpec(Model):
    """Offline batch inference (vLLM run-batch) admitted by Kueue, usually on spot: a CronJob on a schedule,
    or one Job when there is none."""

    name: Name = Field(description="Job name (the CronJob's, or the one-off Job's prefix). Required.")
    model_service: str = Field(
        description="Model service whose model and precision the job runs (its base engine: no LoRA adapters, "
        "speculative draft, host KV tier or prefill/decode split). Required."
    )
    pool: str = Field(description="Node pool to run on (a batch pool on spot is typical). Required.")
    input: S3Uri = Field(description="S3 URI of the OpenAI batch input (JSONL). Required.")
    output: S3Uri = Field(description="S3 URI for the results. Required.")
    parallelism: int = Field(1, ge=1, le=64, description="Pods running at once, each on its own input shard. Defaults to 1.")
    schedule: str | None = Field(
        None,
        description="When to run, in Kubernetes CronJob syntax: five fields (minute hour day-of-month month "
        "day-of-week, e.g. '0 2 * * *') or @yearly, @monthly, @weekly, @daily, @hourly. Defaults to none: one Job "
        "runs once; a later edit starts a new Job and leaves the running one to finish.",
    )
    time_zone: str | None = Field(
        None,
        description="IANA time zone of the schedule, e.g. 'Europe/Paris'. Defaults to none: the kube-controller-manager's local time zone.",
    )
    concurrency_policy: Literal["Forbid", "Allow", "Replace"] = Field(
        "Forbid",
        description="When a run is due while the last one still runs or waits in its queue: Forbid skips it, Allow "
        "runs both, Replace stops the running one. Defaults to Forbid.",
    )
    successful_jobs_history_limit: int = Field(3, ge=0, description="Finished successful runs kept. Defaults to 3.")
    failed_jobs_history_limit: int = Field(1, ge=0, description="Finished failed runs kept. Defaults to 1.")
    starting_deadline_seconds: int | None = Field(
        None,
        ge=10,
        le=2**63 - 1,  # an int64 in batch/v1
        description="A run that cannot start this long after its time is skipped (at least 10: the CronJob "
        "controller checks every 10 seconds). Defaults to none: no deadline.",
    )


# ------------------------------------------------------------------------------------------- the rest


class WeightsStoreSpec(Model):
    """Where model weights live in S3."""

    existing_bucket: str | None = Field(
        None,
        description="Use this bucket instead of creating one. Defaults to none: an encrypted, versioned, private bucket is created.",
    )


class MaintenanceWindowSpec(Model):
    """A daily UTC window for replacing serving nodes that drifted (a new AMI pin or Kubernetes version)."""

    start_hour_utc: int = Field(2, ge=0, le=23, description="Hour (UTC) the window opens. Defaults to 2.")
    hours: int = Field(4, ge=1, le=23, description="Length of the window in hours. Defaults to 4.")


class PlatformSpec(Model):
    """Cluster add-ons beyond the GPU operator."""

    node_autoscaler: Literal["cluster-autoscaler", "karpenter", "none"] = Field(
        "cluster-autoscaler",
        description="What adds GPU nodes for pending pods: cluster-autoscaler (EKS managed node groups per pool and "
        "capacity type), karpenter (a Karpenter NodePool per pool and capacity type, nodes launched by Karpenter), "
        "or none (fixed node groups). Defaults to cluster-autoscaler.",
    )
    maintenance_window: MaintenanceWindowSpec = Field(
        default_factory=MaintenanceWindowSpec,
        description="Under Karpenter, when serving nodes may be replaced for drift, one at a time. Defaults to "
        "02:00-06:00 UTC.",
    )
    node_monitoring_agent: bool = Field(
        True,
        description="Install the EKS node monitoring agent add-on on a created cluster: it sets the node conditions "
        "auto repair acts on (AcceleratedHardwareReady from DCGM on GPU nodes, except MIG pools'). Defaults to true.",
    )
    keda: bool = Field(True, description="Install KEDA for model and worker autoscaling. Defaults to true.")
    leaderworkerset: bool = Field(True, description="Install LeaderWorkerSet for multi-node models. Defaults to true.")

    @property
    def karpenter(self) -> bool:
        """Karpenter launches the GPU nodes (no GPU managed node groups)."""
        return self.node_autoscaler == "karpenter"


class ObservabilitySpec(Model):
    """Metrics, dashboards and alerts."""

    prometheus_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="Use an existing Prometheus at this URL. Defaults to none: kube-prometheus-stack is installed.",
    )
    dashboards: bool = Field(True, description="Grafana dashboard for TTFT, TPOT, KV cache, queue, GPU use. Defaults to true.")
    alerts: bool = Field(True, description="Alert rules for KV cache near full and idle GPUs. Defaults to true.")
    kv_cache_alert_threshold: float = Field(0.9, gt=0, le=1, description="KV-cache use that alerts. Defaults to 0.9.")
    gpu_idle_alert_minutes: int = Field(30, ge=1, description="Minutes of idle GPU before alerting. Defaults to 30.")
    scrape_interval_seconds: int = Field(15, ge=1, description="Scrape interval for serving metrics. Defaults to 15.")


class BudgetSpec(Model):
    """Cost guardrails checked by `plan` and the policy pack."""

    max_usd_per_hour: float | None = Field(
        None, gt=0, description="Ceiling for the stack's cost at max scale. Defaults to none (not enforced)."
    )
    spot_discount: float = Field(
        0.6, ge=0, lt=1, description="Assumed spot discount off on-demand, for estimates. Defaults to 0.6 (60% off)."
    )


class StackSpec(Model):
    """Everything one environment of the platform is: the only input to the Pulumi program."""

    environment: Name = Field(description="Environment name, e.g. 'dev' or 'prod'. Required.")
    region: str = Field("us-east-1", pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$", description="AWS region. Defaults to us-east-1.")
    tags: dict[str, str] = Field(default_factory=dict, description="Tags on every AWS resource. Defaults to none.")
    cluster: ClusterSpec = Field(default_factory=CreateCluster, description="The EKS cluster. Defaults to creating one.")
    node_pools: list[NodePoolSpec] = Field(min_length=1, description="GPU node pools. Required (at least one).")
    weights: WeightsStoreSpec = Field(default_factory=WeightsStoreSpec, description="Weights bucket. Defaults to a new bucket.")
    platform: PlatformSpec = Field(default_factory=PlatformSpec, description="Add-ons. Defaults to all on.")
    queues: QueuesSpec = Field(default_factory=QueuesSpec, description="Kueue set-up. Defaults to serving and batch queues.")
    gateway: GatewaySpec = Field(default_factory=GatewaySpec, description="Inference gateway. Defaults to Istio.")
    serving_namespace: Name = Field("inference", description="Namespace of model services. Defaults to 'inference'.")
    batch_namespace: Name = Field("batch", description="Namespace of workers and batch jobs. Defaults to 'batch'.")
    models: list[ModelServiceSpec] = Field(default_factory=list, description="Model services. Defaults to none.")

    @field_serializer("models", mode="wrap")
    def _services_only(self, models: list[ModelServiceSpec], serialize):
        """A resolved stack lists its services' prefill engines too; a dump keeps the services, which expand again."""
        return serialize([m for m in models if m.pd_role != "prefill"])
    workers: list[QueueWorkerSpec] = Field(default_factory=list, description="Queue-fed workers. Defaults to none.")
    batch_jobs: list[BatchJobSpec] = Field(default_factory=list, description="Batch inference jobs. Defaults to none.")
    observability: ObservabilitySpec = Field(default_factory=ObservabilitySpec, description="Metrics. Defaults to all on.")
    budget: BudgetSpec = Field(default_factory=BudgetSpec, description="Cost guardrails. Defaults to none enforced.")
    teardown: bool = Field(
        False,
        description="Allow `pulumi destroy` to delete the cluster and the weights bucket with every object version in "
        "it (apply with `pulumi up` first). Defaults to false: both are protected from deletion and replacement, and "
        "the bucket with its settings is retained in AWS if it ever leaves the stack.",
    )

    _resolved_models: tuple[ModelServiceSpec, ...] = PrivateAttr(default=())
    _auto_placed: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _cross_field_checks(self) -> "StackSpec":
        from inferstack.spec.checks import check_stack

        self._resolved_models = check_stack(self)
        return self

    def resolved(self) -> "StackSpec":
        """This stack with every `auto` placement decided and every disaggregated service's prefill engines
        listed after it (itself when there is neither)."""
        if self._resolved_models == tuple(self.models):
            return self
        resolved = self.model_copy(update={"models": list(self._resolved_models)})
        resolved._resolved_models = self._resolved_models
        # Engines by name: a disaggregated service's prefill engines follow it in the resolved list.
        engines = {m.name: m for m in self._resolved_models}
        resolved._auto_placed = tuple(m.name for m in self.models if m != engines[m.name])
        return resolved

    @property
    def auto_placed(self) -> tuple[str, ...]:
        """Names of the services whose pool, tensor_parallel or MIG profile auto placement chose."""
        return self._auto_placed

    @property
    def cluster_name(self) -> str:
        if isinstance(self.cluster, ExistingCluster):
            return self.cluster.name
        return self.cluster.name or f"{self.environment}-inference"

    def pool(self, name: str) -> NodePoolSpec:
        return next(p for p in self.node_pools if p.name == name)

    def model_service(self, name: str) -> ModelServiceSpec:
        return next(m for m in self.models if m.name == name)
