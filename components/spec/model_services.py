"""A vLLM model service: its model, precision, parallelism, placement, scaling, traffic and latency targets."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, model_validator

from inferstack.catalog.attention_backends import ATTENTION_BACKENDS
from inferstack.catalog.models import model_facts
from inferstack.catalog.vllm_images import DEFAULT_EFA_VLLM_IMAGE, DEFAULT_VLLM_IMAGE
from inferstack.spec.architecture import SIXTEEN_BIT, CheckpointFormat, ModelArchitecture, catalog_stored_format
from inferstack.spec.autoscaling import AutoscalingSpec
from inferstack.spec.base import Model, Name, PinnedImage, S3Uri
from inferstack.spec.serving_features import DisaggregationSpec, KvOffloadSpec, LoraAdapterSpec, SpeculativeSpec

# vLLM 0.33's `All2AllBackend` (vllm/config/parallel.py) as its CLI accepts it on NVIDIA GPUs. Left out:
# "passthrough" (not selectable from the CLI), "naive" and "pplx" (removed: vLLM falls back to
# allgather_reducescatter), "mori_*" (ROCm MI300/MI350 only) and "flashinfer_all2allv" (a deprecated
# alias of flashinfer_nvlink_two_sided).
AttentionBackendName = Literal[tuple(ATTENTION_BACKENDS)]  # type: ignore[valid-type]
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
# Why a service's expert parallelism is on or off (ModelServiceSpec.expert_parallel_basis): stated in the spec, or
# the auto rule's reason for on, or "off".
ExpertParallelBasis = Literal["stated", "data_parallel", "unsliceable", "all2all_backend", "off"]


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
    attention_backend: AttentionBackendName | None = Field(
        None, description="vLLM attention backend (--attention-backend). Defaults to vLLM's choice for the GPU; a "
        "prefill/decode pair on two GPU generations that would choose differently gets one both run.",
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
    expert_parallel: bool | None = Field(
        None,
        description="Expert parallelism (--enable-expert-parallel): each GPU of the replica's "
        "tensor_parallel x data_parallel group holds whole routed experts instead of a slice of every expert. "
        "Defaults to auto: on for a mixture-of-experts replica of several GPUs whose layout vLLM runs with expert "
        "parallelism (data_parallel above 1, whose ranks share the MoE layers, or experts that do not slice evenly "
        "over the GPUs, or an all2all_backend stated), else off, as in vLLM; the plan says which and why.",
    )
    all2all_backend: All2AllBackend | None = Field(
        None,
        description="How expert-parallel MoE layers exchange tokens (--all2all-backend); turns auto expert_parallel "
        "on. Between EFA nodes only allgather_reducescatter runs. Defaults to vLLM's (allgather_reducescatter).",
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
        if self.all2all_backend is not None and self.expert_parallel is False:
            raise ValueError(
                f"all2all_backend {self.all2all_backend!r} only applies to expert-parallel MoE layers. To fix: set "
                "expert_parallel to true (or leave it unset), or drop all2all_backend"
            )
        return self

    @property
    def all2all_exchange(self) -> str:
        """The all-to-all backend vLLM runs: the spec's, else vLLM's default."""
        return self.all2all_backend or VLLM_ALL2ALL_BACKEND

    @property
    def expert_parallel_basis(self) -> ExpertParallelBasis:
        """Why expert parallelism is on or off: the spec's word, else the auto rule.

        vLLM slices every expert over the tensor_parallel x data_parallel GPUs unless --enable-expert-parallel is
        given (ParallelConfig.enable_expert_parallel defaults to False, vllm/config/parallel.py line 190;
        FusedMoEParallelConfig.make, fused_moe/config.py lines 1198-1233). Auto turns it on where vLLM's own docs
        and recipes run the layout with it: data-parallel ranks share the MoE layers, which vLLM pairs with expert
        parallelism (docs/serving/data_parallel_deployment.md, expert_parallel_deployment.md: "EP is more efficient
        when used in conjunction with DP"; every data-parallel recipe of vllm-project/recipes passes
        --enable-expert-parallel, strategies/single_node_dep.yaml and multi_node_dep.yaml); experts whose
        intermediate size does not split over the GPUs cannot be sliced at all (FusedMoEConfig asserts
        intermediate_size % tp_size == 0, fused_moe/config.py line 1352; vllm-project/recipes
        Qwen/Qwen3-Coder-480B-A35B.md: when sliced experts fail to load, run data + expert parallel); and a stated
        all2all_backend, which only expert-parallel layers use. It stays off for a
        tensor-parallel replica whose experts slice evenly: vLLM's default, and the recipes' default strategy
        (src/lib/command-synthesis.js recommendStrategy: tensor parallel for every model unless a recipe says
        otherwise), and on one GPU, for a dense model, or with more GPUs than experts."""
        if self.expert_parallel is not None:
            return "stated"
        arch = self.resolved_architecture
        experts = arch.experts or 0
        tp = self.tensor_parallel if isinstance(self.tensor_parallel, int) else 1
        group = tp * self.data_parallel
        if experts == 0 or group == 1 or group > experts:
            return "off"
        if self.data_parallel > 1:
            return "data_parallel"
        if arch.moe_intermediate_size and arch.moe_intermediate_size % group:
            return "unsliceable"
        if self.all2all_backend is not None:
            return "all2all_backend"
        return "off"

    @property
    def resolved_expert_parallel(self) -> bool:
        """Whether vLLM runs the MoE layers expert-parallel (--enable-expert-parallel): see expert_parallel_basis."""
        if self.expert_parallel is not None:
            return self.expert_parallel
        return self.expert_parallel_basis != "off"

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

    @property
    def resolved_kv_cache_dtype(self) -> str:
        """The KV dtype vLLM runs: for --kv-cache-dtype auto, the format the checkpoint stores KV scales for."""
        if self.kv_cache_dtype == "auto":
            return self.stored_format.kv_cache_dtype
        return self.kv_cache_dtype
