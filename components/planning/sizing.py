"""GPU memory sizing for a model service: weights, KV cache per token, and what fits.

Pure functions over the spec and the catalogs. The model follows how vLLM 0.33 budgets memory:
each device (GPU, MIG slice or GPU share) gives `gpu_memory_utilization` of its memory; from that
it keeps its shard of the weights and a runtime reserve (CUDA context and graphs, collective
buffers, the activation peak of one scheduler step, the sampler's logits) and hands the rest to
the KV cache. Tensor parallelism splits KV heads across devices (replicating them when there are
fewer heads than devices); pipeline parallelism splits layers. A data-parallel replica is several
ranks, each a tensor-parallel group with its own sequences and KV cache. On a dense model the ranks are
independent engines, each holding the whole model split over its own tensor-parallel group only
(vllm/v1/engine/core.py:1546-1555); on an MoE model they share the MoE layers:
vLLM shards the routed experts over all tensor x data-parallel GPUs, as slices of every expert or,
with expert parallelism, as whole experts (`FusedMoEParallelConfig.make`,
vllm/model_executor/layers/fused_moe/config.py). A rank's token capacity is what one of its devices'
KV cache holds, as every device holds its slice of every token of its rank.

A spec that cannot start (weights too large, or not one full-length sequence in the KV cache) is
rejected by `fit_refusal.check_fit` with the numbers and the changes that would fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from inferstack.planning import lora, speculative
from inferstack.planning.creation_times import replica_parts
from inferstack.planning.engine_step import Windowed
from inferstack.planning.parameters import DTYPE_BYTES, embedding_params, vocabulary
from inferstack.planning.quantization import served_format
from inferstack.planning.shard_blocks import block_problem
from inferstack.catalog import Gpu
from inferstack.catalog.models import download_bytes
from inferstack.catalog.mxfp4_padding import MXFP4_PADDING
from inferstack.spec import CheckpointFormat, MigSharing, ModelServiceSpec, MpsSharing, TimeSlicing
from inferstack.spec.pools import PoolHardware

GIB = 1024**3
MIB = 1024**2

# Group-wise formats (AWQ, GPTQ, W4A16) store a 16-bit scale per group of weights, and AWQ/GPTQ a
# 4-bit zero point too: 4-bit weights in groups of 128 with zero points take 0.5 + 2.5/128 bytes.
SCALE_BYTES = 2
ZERO_POINT_BYTES = 0.5
KV_BYTES = {"auto": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
LOGIT_BYTES = 4  # the sampler works on float32 logits

# CUDA context, cuBLAS workspaces and captured CUDA graphs, per device.
RUNTIME_RESERVE_BYTES = int(1.5 * GIB)
# NCCL buffers when a replica spans devices (tensor or pipeline parallel).
COLLECTIVE_RESERVE_BYTES = int(0.5 * GIB)
# Peak activation memory of a profiling step, per scheduled token and unit of hidden size: about 20
# live 16-bit hidden-width tensors (QKV, the fused gate/up MLP at ~3.5x hidden, residuals). vLLM's
# own profile of an 8B Llama at 8192 batched tokens reports ~1.2 GiB, which this reproduces.
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 20 * DTYPE_BYTES

# Model start-up: engine start (torch.compile, CUDA graph capture) plus reading the weights from the
# node's NVMe cache at a conservative rate.
ENGINE_START_SECONDS = 180
WEIGHTS_READ_BYTES_PER_SECOND = 500 * 10**6


@dataclass(frozen=True)
class Fit:
    """How one replica of a model sits on its devices; every byte figure is exact and reproducible by hand."""

    devices: int                           # GPUs, slices or shares the replica occupies
    device_memory_bytes: int               # memory of one such device
    gpu_memory_utilization: float
    weights_bytes: int                     # whole model
    weights_bytes_per_device: int          # the largest share one device holds (weights_bytes_per_device())
    reserve_bytes_per_device: int          # runtime reserve outside weights and KV cache
    kv_bytes_per_token: int                # whole model, per token of what vLLM reserves for a full-length sequence
    kv_bytes_per_token_per_device: int     # one device's slice of it
    max_model_len: int
    stated_sequences: int                  # the replica's: max_num_seqs (or 1) per data-parallel rank
    data_parallel: int = 1                 # ranks, each with its own sequences and KV cache
    adapter_bytes_per_device: int = 0      # LoRA slots vLLM pre-allocates (planning/lora.py)
    draft_bytes_per_device: int = 0        # a speculative draft model's weights (planning/speculative.py)

    @property
    def budget_bytes_per_device(self) -> int:
        return int(self.device_memory_bytes * self.gpu_memory_utilization)

    @property
    def kv_cache_bytes_per_device(self) -> int:
        taken = (self.weights_bytes_per_device + self.reserve_bytes_per_device + self.adapter_bytes_per_device
                 + self.draft_bytes_per_device)
        return max(0, self.budget_bytes_per_device - taken)

    @property
    def kv_cache_bytes(self) -> int:
        return self.kv_cache_bytes_per_device * self.devices

    @property
    def rank_kv_tokens(self) -> int:
        """Tokens one data-parallel rank's KV cache holds at once (the whole replica's without data parallelism)."""
        return self.kv_cache_bytes_per_device // self.kv_bytes_per_token_per_device

    @property
    def kv_tokens(self) -> int:
        """Tokens the replica's KV cache holds at once, across all running sequences of all its ranks."""
        return self.data_parallel * self.rank_kv_tokens

    @property
    def rank_concurrency(self) -> int:
        """Full-length (max_model_len) sequences one rank's KV cache holds at once."""
        return self.rank_kv_tokens // self.max_model_len

    @property
    def max_concurrency(self) -> int:
        """Full-length (max_model_len) sequences the replica's KV cache holds at once."""
        return self.data_parallel * self.rank_concurrency

    @property
    def weights_fit(self) -> bool:
        return self.kv_cache_bytes_per_device > 0

    @property
    def starts(self) -> bool:
        """vLLM starts only when one max_model_len sequence fits each rank's KV cache (its own startup check)."""
        return self.rank_concurrency >= 1

    @property
    def fits(self) -> bool:
        """The stated context x sequences fit at once: what the plan's "fits" and auto placement mean."""
        return self.max_concurrency >= self.stated_sequences

    @property
    def memory_bytes(self) -> int:
        return self.devices * self.device_memory_bytes


# ------------------------------------------------------------------------------------------- weights


def bytes_per_param(stored: CheckpointFormat) -> float:
    """Bytes per quantized parameter of a format. Per-tensor, per-channel and 128x128-block scales add
    under 0.1% and are not counted; group-wise scales (16-bit for AWQ/GPTQ, 8-bit E8M0 for MXFP4) and
    zero points are."""
    width = stored.weight_bits / 8
    if stored.group_size is None:
        return width
    scale = stored.scale_bits / 8
    return width + (scale + (ZERO_POINT_BYTES if stored.zero_points else 0)) / stored.group_size


def format_bytes(model: ModelServiceSpec, stored: CheckpointFormat) -> int:
    """The model's weights in a format: what the format covers at its width (every linear layer, or only the
    MoE experts), the rest (embeddings, LM head, a vision encoder, and for an experts-only format attention and
    router) in 16 bits: quantized checkpoints of multimodal models keep their vision tower unquantized (its modules
    are on the quantization config's ignore list)."""
    arch = model.resolved_architecture
    params = round(arch.params_billion * 1e9)
    if stored.weight_bits == 16:
        return params * DTYPE_BYTES
    covered = (arch.expert_params if stored.applies_to == "experts"
               else params - embedding_params(model) - round((arch.vision_params_billion or 0) * 1e9))
    return int((params - covered) * DTYPE_BYTES + covered * bytes_per_param(stored))


def expert_padding(model: ModelServiceSpec, gpu: Gpu | None) -> Fraction:
    """How much more memory vLLM gives each GPU's slice of the routed experts than the checkpoint stores: MXFP4
    kernels pad the slice's intermediate size (the whole expert's under expert parallelism, else its share over
    the tensor x data-parallel GPUs) and the hidden size (`Mxfp4MoEMethod.maybe_roundup_sizes`,
    vllm/model_executor/layers/quantization/mxfp4.py:183-197, before create_weights). 1 for other formats."""
    padding = MXFP4_PADDING.get(gpu.capability[0]) if gpu is not None else None
    if padding is None or served_format(model).quant_method != "mxfp4":
        return Fraction(1)
    intermediate_multiple, hidden_multiple = padding.intermediate_multiple, padding.hidden_multiple
    arch = model.resolved_architecture
    group = 1 if model.resolved_expert_parallel else model.tensor_parallel * model.data_parallel
    intermediate = Fraction(arch.moe_intermediate_size, group)
    padded_intermediate = math.ceil(intermediate / intermediate_multiple) * intermediate_multiple
    padded_hidden = math.ceil(arch.hidden_size / hidden_multiple) * hidden_multiple
    return padded_intermediate * padded_hidden / (intermediate * arch.hidden_size)


def expert_weights_bytes(model: ModelServiceSpec, gpu: Gpu | None = None) -> int:
    """The routed experts' share of `weights_bytes`: what a step reads only for the experts its tokens use. On a
    `gpu`, as vLLM holds them there (`expert_padding`); without one, as stored."""
    served = served_format(model)
    experts = model.resolved_architecture.expert_params
    width = DTYPE_BYTES if served.weight_bits == 16 else bytes_per_param(served)
    return int(experts * width * expert_padding(model, gpu))


def weights_bytes(model: ModelServiceSpec) -> int:
    """Weights held on the GPU: the checkpoint as stored, or FP8 when vLLM quantizes a 16-bit one online."""
    return format_bytes(model, served_format(model))


def experts_per_device(model: ModelServiceSpec) -> Fraction:
    """Routed experts' worth of each MoE layer one GPU holds. vLLM shards the MoE layers over all
    tensor_parallel x data_parallel GPUs of a replica: as a slice of every expert, or with expert
    parallelism (the service's resolved choice, `ModelServiceSpec.resolved_expert_parallel`) as whole experts,
    the first E mod n GPUs taking one more (`FusedMoEParallelConfig.make`; "linear" placement in
    `determine_expert_map`, vllm/model_executor/layers/fused_moe/). 0 for a dense model."""
    experts = model.resolved_architecture.experts or 0
    group = model.tensor_parallel * model.data_parallel
    return Fraction(math.ceil(experts / group) if model.resolved_expert_parallel else Fraction(experts, group))


def weights_bytes_per_device(model: ModelServiceSpec, gpu: Gpu | None = None) -> int:
    """The most weight bytes one GPU of the replica holds: the dense part (attention, router, shared experts,
    embeddings, dense layers) split over a rank's tensor-parallel group, and its `experts_per_device` of the
    routed experts (padded as vLLM's kernels hold them on `gpu`), both over the pipeline stages."""
    experts = model.resolved_architecture.experts
    routed = expert_weights_bytes(model)
    dense = weights_bytes(model) - routed
    share = Fraction(dense, model.tensor_parallel)
    if experts:
        share += routed * experts_per_device(model) / experts * expert_padding(model, gpu)
    return math.ceil(share / model.pipeline_parallel)


def checkpoint_bytes(model: ModelServiceSpec) -> int:
    """Weights as stored: what is downloaded, cached on NVMe and read at start (16-bit for online FP8). A catalog
    checkpoint whose repository's size is recorded is that size (DeepSeek's files carry its MTP module)."""
    if model.checkpoint_format is None and (recorded := download_bytes(model.model)) is not None:
        return recorded
    return format_bytes(model, model.stored_format)


# ------------------------------------------------------------------------------------------ KV cache


# Tokens per KV block (vLLM 0.33 CacheConfig.DEFAULT_BLOCK_SIZE): a layer's reservation is whole blocks.
KV_BLOCK_TOKENS = 16


def _kv_width(model: ModelServiceSpec) -> int:
    """Bytes of one cached K or V value, in the dtype vLLM runs (the checkpoint's stored KV format for auto)."""
    return KV_BYTES[model.resolved_kv_cache_dtype]


def _per_layer_bytes(model: ModelServiceSpec, tensor_parallel: int) -> int:
    """KV bytes one layer keeps per token on one tensor rank.

    GQA/MHA: K and V of the rank's KV heads (replicated when there are fewer heads than ranks).
    MLA: one compressed latent plus the decoupled RoPE key, the same on every rank: vLLM's MLA backends
    cache `kv_lora_rank + qk_rope_head_dim` values per token and layer and do not split them over tensor
    parallelism (vllm/v1/attention/backends/mla/common.py, `MLACommonBackend.get_kv_cache_shape`).
    """
    arch = model.resolved_architecture
    width = _kv_width(model)
    if arch.attention == "mla":
        return (arch.kv_lora_rank + arch.qk_rope_head_dim) * width
    return 2 * max(1, arch.kv_heads // tensor_parallel) * arch.head_dim * width


def concurrent_batches(model: ModelServiceSpec) -> int:
    """Scheduler steps in flight at once (VllmConfig.max_concurrent_batches, vllm/config/vllm.py:587-598): one per
    pipeline stage, plus one with async scheduling, which vLLM turns on for a generating model on the mp executor
    and off for a pooling one (vllm/config/vllm.py:1685-1719)."""
    return model.pipeline_parallel + (1 if model.resolved_architecture.task == "generate" else 0)


def hybrid_kv_cache(model: ModelServiceSpec) -> bool:
    """Whether vLLM's hybrid KV cache manager frees what falls outside a window or chunk. It turns itself off for
    chunked local attention with an EAGLE-style draft (vllm/config/vllm.py:2235-2245), and then every layer is
    kept as a full-attention one (`unify_hybrid_kv_cache_specs`, vllm/v1/core/kv_cache_planning.py:853-876)."""
    speculative_method = model.speculative.method if model.speculative is not None else None
    return not (model.resolved_architecture.chunked_layers and speculative_method in ("eagle", "eagle3", "mtp"))


def _blocks_of(tokens: int) -> int:
    return -(-tokens // KV_BLOCK_TOKENS)


def _layer_kinds(model: ModelServiceSpec) -> list[tuple[str, int, int]]:
    """(kind, layers, layers as vLLM counts them) per kind of attention layer. Kinds form KV cache groups of equal
    size, the smallest kind's (the largest's when under 1.5 times it), each kind padded up to whole groups
    (`_get_kv_cache_groups_uniform_page_size`, vllm/v1/core/kv_cache_planning.py:416-557); the startup check and
    the concurrency count both take the padded groups (`_max_memory_usage_bytes_from_groups`, :1253-1285;
    `get_max_concurrency_for_kv_cache_config`, vllm/v1/core/kv_cache_utils.py:1061-1093)."""
    arch = model.resolved_architecture
    if not hybrid_kv_cache(model):
        return [("full-attention", arch.layers, arch.layers)]
    kinds = [("full-attention", arch.layers - arch.windowed_layers - arch.chunked_layers),
             ("sliding-window", arch.windowed_layers), ("chunked local-attention", arch.chunked_layers)]
    kinds = [(kind, layers) for kind, layers in kinds if layers]
    group = min(layers for _, layers in kinds)
    if max(layers for _, layers in kinds) < 1.5 * group:
        group = max(layers for _, layers in kinds)
    return [(kind, layers, -(-layers // group) * group) for kind, layers in kinds]


def _reserved_layer_tokens(model: ModelServiceSpec, in_flight_tokens: int) -> int:
    """Layer-tokens vLLM reserves for one max_model_len sequence, in whole blocks (`max_memory_usage_bytes` of each
    layer's spec, vllm/v1/kv_cache_interface.py): a full-attention layer every token (FullAttentionSpec, :643-648);
    a sliding-window layer the window's last `sliding_window - 1` tokens plus the in-flight ones, plus a block as
    the window may start mid-block (SlidingWindowSpec, :918-950); a chunked local-attention layer one chunk plus
    the in-flight tokens (ChunkedLocalAttentionSpec, :863-888); never more than the sequence."""
    arch = model.resolved_architecture
    length = model.max_model_len
    blocks = {"full-attention": _blocks_of(length)}
    if arch.windowed_layers:
        blocks["sliding-window"] = _blocks_of(min(arch.sliding_window - 1 + in_flight_tokens, length)) + 1
    if arch.chunked_layers:
        blocks["chunked local-attention"] = _blocks_of(min(arch.attention_chunk_size + in_flight_tokens, length))
    return sum(counted * blocks[kind] for kind, _, counted in _layer_kinds(model)) * KV_BLOCK_TOKENS


def _in_flight_tokens(model: ModelServiceSpec, hardware: PoolHardware | None) -> int:
    """Tokens scheduled but not yet settled (VllmConfig.max_in_flight_tokens, vllm/config/vllm.py:600-609): each
    concurrent step's max_num_batched_tokens. Without a pool, none: what a sequence keeps between steps."""
    if hardware is None:
        return 0
    return concurrent_batches(model) * scheduler_defaults(model, hardware)[0]


def kv_bytes_per_token(model: ModelServiceSpec, hardware: PoolHardware | None = None) -> int:
    """Whole-model KV bytes vLLM reserves per token of a max_model_len sequence (one tensor rank's worth for MLA):
    `_reserved_layer_tokens` over the sequence, with the pool's in-flight tokens when one is given."""
    layer_tokens = _reserved_layer_tokens(model, _in_flight_tokens(model, hardware))
    return -(-layer_tokens * _per_layer_bytes(model, 1) // model.max_model_len)


def kv_bytes_per_token_per_device(model: ModelServiceSpec, hardware: PoolHardware | None = None) -> int:
    """One device's share of `kv_bytes_per_token`: its layers (the largest pipeline stage; each kind of layer
    spread evenly over the stages) and its KV heads (tensor rank)."""
    arch = model.resolved_architecture
    stage_layers = math.ceil(arch.layers / model.pipeline_parallel)
    layer_tokens = _reserved_layer_tokens(model, _in_flight_tokens(model, hardware))
    stage_bytes = Fraction(layer_tokens * stage_layers, arch.layers) * _per_layer_bytes(model, model.tensor_parallel)
    return math.ceil(stage_bytes / model.max_model_len)


def _kept_tokens(model: ModelServiceSpec, kind: str) -> int | None:
    """The most tokens of a running sequence a kind of layer keeps (None: all). vLLM 0.33.0 frees every whole block
    before `get_num_skipped_tokens` (SingleTypeKVCacheManager.remove_skipped_blocks,
    v1/core/single_type_kv_cache_manager.py:682-715): max(0, computed - sliding_window + 1) for
    SlidingWindowManager (:1148-1183, less the tokens multi-module speculative decoding retains), so its window's
    last sliding_window - 1 tokens and the block the window starts in stay; the computed tokens rounded down to the
    chunk for ChunkedLocalAttentionManager (:1381-1425), so the current chunk stays, at most a whole one (an upper
    bound: over a long sequence it averages half)."""
    arch = model.resolved_architecture
    if kind == "sliding-window":
        return arch.sliding_window - 1 + KV_BLOCK_TOKENS
    if kind == "chunked local-attention":
        return arch.attention_chunk_size
    return None


def kv_layout(model: ModelServiceSpec, *, with_draft: bool = False) -> Windowed:
    """The KV bytes one device keeps of a running sequence, per kind of layer (engine_step.Windowed): its layers on
    the device (the largest pipeline stage, each kind spread evenly, counted in vLLM's padded groups as
    `_layer_kinds`) x one tensor rank's bytes per layer and token, each kind at most the tokens it keeps
    (`_kept_tokens`). This, not the startup reservation of `kv_bytes_per_token_per_device` (one max_model_len
    sequence with the in-flight tokens, spread over its length), is what running sequences fill and a decode step
    reads. `with_draft`: also a speculative draft's KV, kept whole, which fills the cache but no target step
    reads."""
    arch = model.resolved_architecture
    stage = Fraction(math.ceil(arch.layers / model.pipeline_parallel), arch.layers)
    per_layer = _per_layer_bytes(model, model.tensor_parallel)
    kinds = [(float(counted * stage * per_layer), _kept_tokens(model, kind)) for kind, _, counted in _layer_kinds(model)]
    draft = speculative.draft_kv_bytes_per_token_per_device(model, _kv_width(model), per_layer) if with_draft else 0
    if draft:
        kinds.append((float(draft), None))
    return Windowed(tuple(kinds))


def kv_formula(model: ModelServiceSpec) -> str:
    """What sizing counts per token of KV cache, as the plan states it: the layers and values, their width, and
    what vLLM reserves for a sequence on sliding-window and chunked local-attention layers."""
    arch = model.resolved_architecture
    width = _kv_width(model)
    if arch.attention == "mla":
        formula = f"MLA latent: {arch.layers} layers x ({arch.kv_lora_rank} + {arch.qk_rope_head_dim}) values"
    else:
        formula = f"GQA: 2 x {arch.layers} layers x {arch.kv_heads} KV heads x {arch.head_dim}"
    formula += f" x {width} byte{'s' if width > 1 else ''}"
    if model.kv_cache_dtype == "auto" and model.resolved_kv_cache_dtype != "auto":
        formula += f" ({model.resolved_kv_cache_dtype}, the KV format the checkpoint stores)"
    in_flight = f"{concurrent_batches(model)} x max_num_batched_tokens in-flight tokens"
    local = []
    if arch.windowed_layers:
        local.append(("sliding-window", arch.windowed_layers, f"{arch.sliding_window - 1} + {in_flight} and a block"))
    if arch.chunked_layers:
        local.append(("chunked local-attention", arch.chunked_layers, f"{arch.attention_chunk_size} + {in_flight}"))
    if local and not hybrid_kv_cache(model):
        kinds = " and ".join(f"{layers} {kind}" for kind, layers, _ in local)
        return formula + f"; {kinds} layers kept in full (vLLM's hybrid KV cache manager is off with an EAGLE draft)"
    for kind, layers, held in local:
        formula += f"; {layers} {kind} layers hold {held} of a sequence, at most all of it"
    padded = [f"{layers} {kind} layers as {counted}" for kind, layers, counted in _layer_kinds(model)
              if counted != layers]
    if padded:
        formula += f" (vLLM's equal-sized KV cache groups count {', '.join(padded)})"
    return formula


# Why auto expert parallelism is on, as the plan's layout line says it (ModelServiceSpec.expert_parallel_basis).
EXPERT_PARALLEL_WHY = {
    "data_parallel": " (auto: data-parallel ranks share the MoE layers, which vLLM runs expert-parallel)",
    "unsliceable": " (auto: the experts' intermediate size does not split over the GPUs, so vLLM cannot slice them)",
    "all2all_backend": " (auto: all2all_backend is stated, and only expert-parallel layers exchange tokens)",
}


def parallel_layout(model: ModelServiceSpec) -> str:
    """How a replica's GPUs split the model, as the plan states it, with each GPU's share of the routed experts."""
    parts = [f"tensor_parallel {model.tensor_parallel}"]
    if model.pipeline_parallel > 1:
        parts.append(f"pipeline_parallel {model.pipeline_parallel}")
    if model.data_parallel > 1:
        parts.append(f"data_parallel {model.data_parallel} ({model.data_parallel_per_node} per node)")
    layout = " x ".join(parts)
    experts = model.resolved_architecture.experts
    if experts:
        share = experts_per_device(model)
        why = EXPERT_PARALLEL_WHY.get(model.expert_parallel_basis, "")
        group = model.tensor_parallel * model.data_parallel
        if model.resolved_expert_parallel:
            layout += (f"; expert parallel{why}: {share} of {experts} experts per GPU, "
                       f"all-to-all {model.all2all_exchange}")
        elif group == 1:
            layout += f"; all {experts} experts on its one GPU"
        else:
            if model.expert_parallel is None:
                why = (f" (auto: {group} GPUs for {experts} experts would leave some with none)" if group > experts
                       else " (auto: vLLM's default for a tensor-parallel replica; expert_parallel: true holds whole "
                       "experts per GPU instead)")
            layout += f"; every expert sliced {group} ways{why}"
    return layout


# ------------------------------------------------------------------------------------------- devices


def device_memory_bytes(model: ModelServiceSpec, hardware: PoolHardware) -> int:
    """Memory of the device one shard of the replica gets: a GPU, a MIG slice or a GPU share."""
    sharing = hardware.spec.gpu_sharing
    gpu_bytes = hardware.gpu.memory_mib * MIB
    if isinstance(sharing, MigSharing):
        profile_name = model.mig_profile or next(iter(sharing.layout))
        return hardware.gpu.mig_profile(profile_name).memory_gb * 10**9
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        return gpu_bytes // sharing.replicas
    return gpu_bytes


def _visible_device_bytes(model: ModelServiceSpec, hardware: PoolHardware) -> int:
    """What vLLM sees as the device's total memory: a MIG slice is its own device, a share is not."""
    if isinstance(hardware.spec.gpu_sharing, MigSharing):
        return device_memory_bytes(model, hardware)
    return hardware.gpu.memory_mib * MIB


def scheduler_defaults(model: ModelServiceSpec, hardware: PoolHardware) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM 0.33 resolves them for the OpenAI server."""
    visible_gib = _visible_device_bytes(model, hardware) / GIB
    if visible_gib >= 160:
        tokens, seqs = 16384, 1024
    elif visible_gib >= 70 and "A100" not in hardware.gpu.name:
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    tokens = model.max_num_batched_tokens or tokens
    if not model.enable_chunked_prefill:
        # Without chunked prefill a whole prompt is one step.
        tokens = max(tokens, model.max_model_len)
    return tokens, model.max_num_seqs or seqs


def reserve_bytes_per_device(model: ModelServiceSpec, hardware: PoolHardware) -> int:
    arch = model.resolved_architecture
    tp = model.tensor_parallel
    batched_tokens, seqs = scheduler_defaults(model, hardware)
    reserve = RUNTIME_RESERVE_BYTES
    if model.gpus_per_replica > 1:
        reserve += COLLECTIVE_RESERVE_BYTES
    reserve += batched_tokens * arch.hidden_size * ACTIVATION_BYTES_PER_TOKEN_HIDDEN // tp
    known = vocabulary(model)
    if known is not None and arch.task == "generate":
        reserve += seqs * known[0] * LOGIT_BYTES // tp
    return reserve


def stated_sequences(model: ModelServiceSpec) -> int:
    """Full-length sequences a replica states it runs at once: max_num_seqs (each data-parallel rank schedules its
    own), or one per rank when the service leaves that to vLLM."""
    return model.data_parallel * (model.max_num_seqs or 1)


def fit(model: ModelServiceSpec, hardware: PoolHardware) -> Fit:
    return Fit(
        devices=model.gpus_per_replica,
        device_memory_bytes=device_memory_bytes(model, hardware),
        gpu_memory_utilization=model.gpu_memory_utilization,
        weights_bytes=weights_bytes(model),
        weights_bytes_per_device=weights_bytes_per_device(model, hardware.gpu),
        reserve_bytes_per_device=reserve_bytes_per_device(model, hardware),
        kv_bytes_per_token=kv_bytes_per_token(model, hardware),
        kv_bytes_per_token_per_device=kv_bytes_per_token_per_device(model, hardware)
        + speculative.draft_kv_bytes_per_token_per_device(
            model, _kv_width(model), _per_layer_bytes(model, model.tensor_parallel)
        ),
        max_model_len=model.max_model_len,
        stated_sequences=stated_sequences(model),
        data_parallel=model.data_parallel,
        adapter_bytes_per_device=lora.adapter_bytes_per_device(model),
        draft_bytes_per_device=speculative.draft_weights_bytes_per_device(model),
    )


def prefetched_bytes(model: ModelServiceSpec) -> int:
    """What a serving pod copies into the node's cache: the checkpoint (unless vLLM streams it from S3), each LoRA
    adapter (planning/lora.adapter_file_bytes) and a speculative draft's 16-bit weights."""
    stored = checkpoint_bytes(model) if model.weight_loader == "local" else 0
    stored += sum(lora.adapter_file_bytes(model, adapter.rank) for adapter in model.lora_adapters)
    spec = model.speculative
    if spec is not None and (params := speculative.draft_params(spec)) is not None:
        stored += math.ceil(params * 1e9 * speculative.DRAFT_BYTES_PER_PARAM)
    return stored


def load_seconds(model: ModelServiceSpec) -> int:
    """Seconds from container start until vLLM serves: the startup probe and scale-down windows use it."""
    return ENGINE_START_SECONDS + math.ceil(checkpoint_bytes(model) / WEIGHTS_READ_BYTES_PER_SECOND)


def startup_seconds(model: ModelServiceSpec) -> float:
    """How long a container may take from its start to serving. One pod: the model's load. A multi-node group's
    leader serves only once every node's engine has joined (vLLM 0.33.0 v1/engine/utils.py:1403-1445
    wait_for_engine_startup, remote engines included), and LWS creates the workers only after the leader
    (startupPolicy LeaderCreated), possibly on a node still to be launched: its budget covers a member's whole cold
    start, node boot, image pull, weight copy, load and warm-up (creation_times.replica_parts), since
    a leader restart recreates the group (restartPolicy RecreateGroupOnPodRestart) and starts it all again."""
    if not model.multi_node:
        return load_seconds(model)
    cold = replica_parts(checkpoint_bytes(model), model.weight_loader, new_node=True)
    return max(load_seconds(model), sum(seconds for _, _, seconds in cold))


def parallelism_problem(model: ModelServiceSpec) -> str | None:
    """vLLM's own split rules: heads divide by tensor_parallel, layers cover the pipeline stages, sliced experts
    divide by the GPUs that share them, and every quantized matrix splits on its blocks (shard_blocks)."""
    arch = model.resolved_architecture
    tp = model.tensor_parallel
    if arch.attention_heads % tp:
        return f"{arch.attention_heads} attention heads do not split evenly over tensor_parallel {tp}"
    if arch.kv_heads % tp and tp % arch.kv_heads:
        return f"{arch.kv_heads} KV heads and tensor_parallel {tp}: neither divides the other"
    if arch.layers < model.pipeline_parallel:
        return f"{arch.layers} layers cannot fill {model.pipeline_parallel} pipeline stages"
    group = tp * model.data_parallel
    if (arch.experts and not model.resolved_expert_parallel and arch.moe_intermediate_size
            and arch.moe_intermediate_size % group):
        # Without expert parallelism every expert is sliced over the tensor x data-parallel GPUs.
        return (f"experts of intermediate size {arch.moe_intermediate_size} do not split evenly over {group} GPUs "
                "(tensor_parallel x data_parallel)")
    return block_problem(model)
