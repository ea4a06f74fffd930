"""The time of one vLLM engine step: a stated model with a bandwidth ceiling and a compute ceiling.

vLLM's V1 engine runs in steps: each step gives every decoding sequence one token and spends what is
left of `max_num_batched_tokens` on prompt chunks (chunked prefill). A step's time is the sum of

    dense layers    max(their weight bytes / effective bandwidth,
                        2 x their parameters x tokens in the step / effective throughput of their kernel)
    routed experts  (mixture-of-experts) max(bytes of the experts the step's tokens touch / bandwidth,
                        the tokens each expert gets, padded to the kernel's tile, x 2 x its parameters /
                        the grouped GEMM's throughput); under expert parallelism the busiest GPU's share
    decode attention  max(decoding sequences x the KV bytes each reads at its mean context / bandwidth,
                        the attention's FLOPs over that context / 16-bit throughput): MLA's latent
                        attention is compute-heavy where GQA's is a read
    prompt attention  4 x layers x heads x head_dim x prompt tokens x context they attend / 16-bit throughput
    all-reduce      2 per layer when tensor parallel: a latency plus the step's activations over the link
    token exchange  data-parallel MoE: the all-gather and reduce-scatter of every rank's tokens per MoE layer
    overhead        a time per scheduled sequence (scheduling, sampling, output) and, for MoE and MLA
                    layers, a fixed time per layer (routing, the latent projections' extra kernels)

all per device: a replica's tensor-parallel ranks run their shards at once. A decoding sequence reads only the
KV its layers keep: at most its window on a sliding-window layer, its chunk on a chunked local-attention layer
(Windowed). Attention FLOPs count the whole context on every layer: GPUStack's 32K-token gpt-oss prompts on
A100 run no faster than that (charging the sliding layers their window alone makes the model 2.2x optimistic
there).
The efficiencies and overheads are stated assumptions, fitted to published measurements
(catalog/serving_measurements.json) by planning/calibrate.py; planning/accuracy.py reports the model's error
on every one of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class Assumption:
    """One stated assumption of the model: its value and why it holds (printed by `plan`)."""

    name: str
    value: float | str
    why: str


@dataclass(frozen=True)
class KernelFamily:
    """How a weight format's matmuls run: the peak they draw on and the share of it they reach."""

    name: str
    peak: str                       # 'bf16', 'fp8' or 'int8': which of the GPU's dense throughputs
    bandwidth_efficiency: Assumption
    compute_efficiency: Assumption


FITTED = "fitted to the published vLLM measurements in catalog/serving_measurements.json (planning/calibrate.py)"

# What a GEMM bound by its weight reads reaches of the bandwidth, for 16-bit and 8-bit W8A8 weights alike (KERNELS).
WEIGHT_STREAMING_SHARE = 0.66

KERNELS = {
    "16-bit": KernelFamily(
        "16-bit", "bf16",
        Assumption("16-bit weights: share of bandwidth", WEIGHT_STREAMING_SHARE,
                   f"cuBLAS streaming 16-bit weights; {FITTED} (16-bit and FP8 W8A8 points at 1 to 8 in flight)"),
        Assumption("16-bit weights: share of dense BF16 throughput", 0.65,
                   f"large-batch and prompt GEMMs; {FITTED} (16-bit points at 64 and more in flight, long prompts)"),
    ),
    "w8a8-fp8": KernelFamily(
        "w8a8-fp8", "fp8",
        Assumption("FP8 W8A8: share of bandwidth", WEIGHT_STREAMING_SHARE,
                   "taken as 16-bit weights' and fitted with it: a GEMM bound by its weight reads streams them at "
                   "one share of the bandwidth whatever their width, and the table cannot fix FP8's apart (only one "
                   "publisher's dense FP8 points exercise it; fitted without them it fell to 0.28, leave one "
                   "source out)"),
        Assumption("FP8 W8A8: share of dense FP8 throughput", 0.45,
                   f"FP8 GEMMs at large batch, with per-token activation quantization; {FITTED}"),
    ),
    "w8a16-marlin": KernelFamily(
        "w8a16-marlin", "bf16",
        Assumption("8-bit weight-only (Marlin W8A16): share of bandwidth", 0.47,
                   "taken as 4-bit Marlin's: the same kernel family dequantizing on chip (FP8 on GPUs without FP8 "
                   "tensor cores, 8-bit GPTQ); the published W8A16 points are compute-bound and do not fix it"),
        Assumption("8-bit weight-only (Marlin W8A16): share of dense BF16 throughput", 0.38,
                   f"FP8 checkpoints on A100 run their matmuls at the 16-bit rate and spend tensor-core time "
                   f"dequantizing; {FITTED} (Qwen3 FP8 on A100)"),
    ),
    "w4a16-marlin": KernelFamily(
        "w4a16-marlin", "bf16",
        Assumption("4-bit weight-only (Marlin W4A16): share of bandwidth", 0.47,
                   f"4-bit weights with 16-bit group scales and zero points, dequantized on chip; {FITTED} "
                   "(AWQ/GPTQ points at batch 1)"),
        Assumption("4-bit weight-only (Marlin W4A16): share of dense BF16 throughput", 0.46,
                   "Marlin turns compute-bound past a few dozen tokens a step and then runs near the 16-bit GEMM "
                   f"rate, so at high concurrency AWQ makes about the tokens 16-bit does; {FITTED} (AWQ at 64 "
                   "and 1,000 in flight)"),
    ),
    "w8a8-int8": KernelFamily(
        "w8a8-int8", "int8",
        Assumption("INT8 W8A8: share of bandwidth", WEIGHT_STREAMING_SHARE,
                   "taken as FP8 W8A8's (the same CUTLASS scaled-mm family); no published INT8 point in the table"),
        Assumption("INT8 W8A8: share of dense INT8 throughput", 0.45, "taken as FP8 W8A8's; no published INT8 point"),
    ),
}

KV_BANDWIDTH_EFFICIENCY = Assumption(
    "KV reads: share of bandwidth", 0.88,
    f"paged-attention decode kernels stream each sequence's KV blocks; {FITTED} (20K-token contexts, large batches)",
)
PROMPT_ATTENTION_EFFICIENCY = Assumption(
    "prompt attention: share of dense BF16 throughput", 0.7,
    "FlashAttention forward reaches 50-73% of A100 peak (FlashAttention-2 paper, Dao 2023) and about 75% of H100 "
    "with FlashAttention-3 (Shah et al. 2024)",
)
MOE_LAYER_OVERHEAD_SECONDS = Assumption(
    "overhead per MoE layer per step", 3.2e-05,
    "the routing work of each MoE layer beyond the experts' GEMMs: the router's top-k, sorting the tokens by expert "
    "and padding them to tiles (moe_align_block_size), permuting them in and out and summing the k outputs, in "
    f"seconds; {FITTED} (MoE models at 1 to 8 in flight)",
)
MLA_LAYER_OVERHEAD_SECONDS = Assumption(
    "overhead per MLA layer per step", 0.00019,
    "the kernels multi-head latent attention runs beyond GQA's in each layer (the query and KV latent projections "
    "and their norms, RoPE on the split key, the per-head absorbed up-projections around the latent attention and "
    f"its decode metadata), in seconds; {FITTED} (DeepSeek-R1 at 4 to 50 in flight)",
)
SEQUENCE_OVERHEAD_SECONDS = Assumption(
    "overhead per scheduled sequence per step", 1.35e-05,
    f"per-sequence scheduling, sampling and output work of each step, in seconds; {FITTED} (hundreds to a "
    "thousand sequences in flight)",
)
MOE_BANDWIDTH_EFFICIENCY = Assumption(
    "routed experts: share of bandwidth", 0.73,
    "grouped-GEMM MoE kernels (Triton fused_moe, Marlin MoE, FlashInfer, the OAI Triton kernel) streaming the "
    f"touched experts' weights, one small GEMM an expert with its gathered tokens; {FITTED} (MoE points at 1 to 64 "
    "in flight)",
)
_MOE_COMPUTE_WHY = (
    "grouped GEMMs reach less of the peak than one large dense GEMM: each expert is a short GEMM with gathered rows, "
    "and a token's hidden state is permuted in and out"
)
MOE_COMPUTE_EFFICIENCY = {
    "triton": Assumption(
        "routed experts, Triton fused_moe: share of dense throughput", 0.15,
        f"{_MOE_COMPUTE_WHY}; {FITTED} (Qwen3 MoE in 16 bits and FP8, DeepSeek-R1 FP8 on Hopper)",
    ),
    "marlin-w4a16": Assumption(
        "routed experts, Marlin MoE 4-bit: share of dense BF16 throughput", 0.55,
        f"{_MOE_COMPUTE_WHY}, dequantizing 4-bit weights on chip; {FITTED} (gpt-oss MXFP4 on A100 and A10G)",
    ),
    "marlin-w8a16": Assumption(
        "routed experts, Marlin MoE 8-bit: share of dense BF16 throughput", 0.27,
        f"{_MOE_COMPUTE_WHY}, dequantizing FP8 weights on a GPU without FP8 tensor cores; {FITTED} (Qwen3-235B FP8 "
        "on A100)",
    ),
    "oai-triton": Assumption(
        "routed experts, OAI Triton MXFP4: share of dense BF16 throughput", 0.22,
        f"{_MOE_COMPUTE_WHY}; {FITTED} (gpt-oss on H100 and H200)",
    ),
    "flashinfer": Assumption(
        "routed experts, FlashInfer on Blackwell: share of the kernel's dense throughput", 0.11,
        f"{_MOE_COMPUTE_WHY}; {FITTED} (gpt-oss on B200)",
    ),
}
# vLLM's Triton fused_moe pads every expert's tokens to its BLOCK_SIZE_M tile (moe_align_block_size), which
# get_default_config picks from the step's token count M: 16 up to 32, 32 up to 96, 64 up to 512, else 128
# (vllm 0.33.0 model_executor/layers/fused_moe/fused_moe.py:1371-1380, the bf16 and per-tensor FP8 defaults).
MOE_TILE_ROWS = ((32, 16), (96, 32), (512, 64))
MOE_TILE_ROWS_ABOVE = 128
# Block-wise FP8 experts: 16 rows up to 64 tokens, else 64 (fused_moe.py:1344-1352).
MOE_BLOCK_FP8_TILE_ROWS = ((64, 16),)
MOE_BLOCK_FP8_TILE_ROWS_ABOVE = 64
MOE_TILE = Assumption(
    "routed experts: tile padding", "each expert's tokens padded to BLOCK_SIZE_M (16/32/64/128 by the step's tokens)",
    "vllm/model_executor/layers/fused_moe/fused_moe.py get_default_config and moe_align_block_size: an expert with "
    "3 tokens computes a 16-row tile; block-FP8 experts take 16 rows up to 64 tokens a step, else 64",
)
EXPERT_IMBALANCE = Assumption(
    "expert-parallel imbalance", "the busiest GPU gets mean + sqrt(2 ln GPUs x mean) of the routed tokens",
    "tokens routed independently (vLLM's default, with no expert load balancer) reach a GPU's experts as a "
    "Poisson count; the step waits for the busiest of the GPUs, whose excess over the mean is about sqrt(2 ln n) "
    "standard deviations (the expected maximum of n normal draws)",
)
DECODE_ATTENTION = Assumption(
    "decode attention compute", "its FLOPs at the prompt-attention share of dense BF16 throughput",
    "MLA decode runs every query head over the cached latent (kv_lora_rank + rope values to score, kv_lora_rank "
    "to sum): 2 x heads x (2 x kv_lora_rank + rope) FLOPs per layer and context token, which bounds it by "
    "compute, not by its small KV (FlashMLA README: 660 TFLOPS compute-bound on H800); GQA decode is a read",
)
ALL_REDUCE_LATENCY_SECONDS = {
    "nvlink": Assumption(
        "cost per all-reduce over NVLink", 2.5e-05,
        "seconds per call beyond moving its bytes, two calls per layer: the collective's latency and the "
        f"synchronisation and launch gaps around it; {FITTED} (tensor parallel 2 to 8 on A100, H100, H200 and B200)",
    ),
    "pcie": Assumption(
        "cost per all-reduce over PCIe", 6.8e-07,
        f"as over NVLink, for NCCL over PCIe through the host; {FITTED} (gpt-oss-20b at TP 4 on A10G)",
    ),
}
LINK_EFFICIENCY = {
    "nvlink": Assumption(
        "all-reduce share of NVLink line rate", 0.82,
        "NCCL reaches about 370 of NVLink 4's 450 GB/s one way after protocol overhead (the NCCL maintainer in "
        "NVIDIA/nccl-tests#212)",
    ),
    "pcie": Assumption(
        "all-reduce share of PCIe line rate", 0.089,
        "without NVLink or GPU peer-to-peer NCCL stages through host memory, and vLLM turns its custom all-reduce "
        f"off past two PCIe-only GPUs (distributed/device_communicators/custom_all_reduce.py); {FITTED} "
        "(gpt-oss-20b at TP 4 on A10G)",
    ),
}
ACTIVATION_BYTES = 2   # 16-bit activations cross the link in an all-reduce


def kernel_assumptions() -> tuple[Assumption, ...]:
    return tuple(a for k in KERNELS.values() for a in (k.bandwidth_efficiency, k.compute_efficiency))


ASSUMPTIONS = (
    *kernel_assumptions(), MOE_BANDWIDTH_EFFICIENCY, *MOE_COMPUTE_EFFICIENCY.values(), MOE_TILE, EXPERT_IMBALANCE,
    KV_BANDWIDTH_EFFICIENCY, PROMPT_ATTENTION_EFFICIENCY, DECODE_ATTENTION,
    MOE_LAYER_OVERHEAD_SECONDS, MLA_LAYER_OVERHEAD_SECONDS, SEQUENCE_OVERHEAD_SECONDS, *ALL_REDUCE_LATENCY_SECONDS.values(), *LINK_EFFICIENCY.values(),
)


@dataclass(frozen=True)
class StepConstants:
    """The values the step model computes with; `STATED` holds the assumptions above, and the calibration
    (inferstack.planning.calibrate) refits them against the measurement table."""

    bandwidth_share: Mapping[str, float]     # by kernel family
    compute_share: Mapping[str, float]       # by kernel family
    moe_bandwidth_share: float
    moe_compute_share: Mapping[str, float]   # by MoE kernel family (catalog/moe_kernels.json)
    kv_bandwidth_share: float
    prompt_attention_share: float
    moe_layer_overhead_seconds: float
    mla_layer_overhead_seconds: float
    sequence_overhead_seconds: float
    all_reduce_seconds: Mapping[str, float]  # by link kind
    link_share: Mapping[str, float]          # by link kind


STATED = StepConstants(
    bandwidth_share=MappingProxyType({name: k.bandwidth_efficiency.value for name, k in KERNELS.items()}),
    compute_share=MappingProxyType({name: k.compute_efficiency.value for name, k in KERNELS.items()}),
    moe_bandwidth_share=MOE_BANDWIDTH_EFFICIENCY.value,
    moe_compute_share=MappingProxyType({family: a.value for family, a in MOE_COMPUTE_EFFICIENCY.items()}),
    kv_bandwidth_share=KV_BANDWIDTH_EFFICIENCY.value,
    prompt_attention_share=PROMPT_ATTENTION_EFFICIENCY.value,
    moe_layer_overhead_seconds=MOE_LAYER_OVERHEAD_SECONDS.value,
    mla_layer_overhead_seconds=MLA_LAYER_OVERHEAD_SECONDS.value,
    sequence_overhead_seconds=SEQUENCE_OVERHEAD_SECONDS.value,
    all_reduce_seconds=MappingProxyType({kind: a.value for kind, a in ALL_REDUCE_LATENCY_SECONDS.items()}),
    link_share=MappingProxyType({kind: a.value for kind, a in LINK_EFFICIENCY.items()}),
)


@dataclass(frozen=True)
class Device:
    """One device a replica's shard runs on (a GPU, a MIG slice or a time-shared part of one)."""

    bandwidth_bytes_per_second: float
    peak_flops: dict[str, float]          # dense FLOP/s by peak: 'bf16', 'fp8', 'int8' (absent if none)

    def peak(self, name: str) -> float:
        """The named dense peak; a GPU without it runs at its 16-bit rate."""
        return self.peak_flops.get(name) or self.peak_flops["bf16"]


@dataclass(frozen=True)
class Link:
    """How tensor-parallel ranks exchange activations: 'nvlink' or 'pcie', bytes per second one way."""

    kind: str
    bytes_per_second: float


@dataclass(frozen=True)
class RoutedExperts:
    """What one device holds and computes of a mixture-of-experts model's routed experts."""

    weights_bytes: int            # the routed experts' bytes on this device: whole experts, or a slice of each
    flops_per_assignment: float   # 2 x the parameters one token routed to one expert costs here, over the stage
    experts: int                  # routed experts per MoE layer
    per_token: int                # experts each token routes to
    token_sources: int            # data-parallel ranks whose tokens reach this device's MoE layers
    devices: int                  # GPUs the experts are spread over (tensor x data parallel)
    expert_parallel: bool         # whole experts per device (else a slice of every expert)
    moe_layers: int               # MoE layers on this device (its pipeline stage)
    family: str                   # the grouped-GEMM kernel family (catalog/moe_kernels.json)
    peak: str                     # the throughput it draws on
    block_fp8: bool = False       # FP8 with 128x128 block scales (DeepSeek, Qwen3 FP8), which tiles by its own rule

    def touched_share(self, tokens: float) -> float:
        """Share of the experts a step of `tokens` tokens (per rank) touches: each token routes to k of E experts,
        uniformly (the assumption), so n routed tokens touch 1 - (1 - k/E)^n of them (one decoding token k/E, a
        large batch nearly all); under data parallelism every rank's tokens reach the shared MoE layers."""
        routed = max(tokens, 1.0) * self.token_sources
        return 1 - (1 - self.per_token / self.experts) ** routed

    def tile_rows(self, routed: float) -> int:
        """BLOCK_SIZE_M for a step of `routed` tokens (MOE_TILE): block-FP8 experts take their own rule."""
        table, above = (MOE_BLOCK_FP8_TILE_ROWS, MOE_BLOCK_FP8_TILE_ROWS_ABOVE) if self.block_fp8 else (
            MOE_TILE_ROWS, MOE_TILE_ROWS_ABOVE)
        return next((size for most, size in table if routed <= most), above)

    def computed_assignments(self, tokens: float) -> float:
        """(token, expert) pairs the busiest device computes in one step, each expert's rows padded to the kernel's
        tile (MOE_TILE) and, under expert parallelism, the busiest device's share (EXPERT_IMBALANCE)."""
        routed = max(tokens, 1.0) * self.token_sources
        rows = self.tile_rows(routed)
        per_expert = routed * self.per_token / self.experts
        # Expected tiles of a Poisson count with this mean: one once any token arrives (1 - e^-m for few tokens),
        # m / rows and half a tile of padding for many.
        tiles = per_expert / rows + -math.expm1(-per_expert) * (1 - 0.5 * min(1.0, per_expert / rows))
        local = self.experts / self.devices if self.expert_parallel else self.experts
        padded = local * tiles * rows
        if not self.expert_parallel or self.devices == 1:
            return padded
        mean = routed * self.per_token / self.devices
        return padded * (1 + math.sqrt(2 * math.log(self.devices) / mean))


@dataclass(frozen=True)
class Windowed:
    """A per-token figure of one device summed over its kinds of attention layer, each counting at most its window of
    a sequence's tokens (None: every one): the KV bytes a sequence keeps of the cache and a decode step reads. A
    sliding-window layer keeps its window, a chunked local-attention one at most its chunk (sizing.kv_layout)."""

    kinds: tuple[tuple[float, int | None], ...]

    def over(self, tokens: float) -> float:
        """The figure for a sequence of `tokens` tokens."""
        return sum(per_token * (tokens if window is None else min(tokens, window)) for per_token, window in self.kinds)


@dataclass(frozen=True)
class Shard:
    """What one device of a replica holds and computes, per token, for the step model."""

    weights_bytes: int                          # everything on the device, routed experts included
    kv: Windowed                                # KV bytes a decoding sequence reads each step, by its context
    linear_flops_per_token: float              # 2 x the device's share of the dense (non-routed) parameters
    attention_flops_per_token_and_context: float   # prompt attention: 4 x its layers x its query heads x head_dim
    kernel: KernelFamily                        # the dense layers' kernel
    layers: int                                 # layers on this device (its pipeline stage)
    hidden_size: int
    tensor_parallel: int
    link: Link | None                           # None when tensor_parallel is 1 (and no data parallel)
    decode_attention_flops_per_token_and_context: float = 0.0   # DECODE_ATTENTION
    experts: RoutedExperts | None = None        # None for a dense model
    latent_attention: bool = False              # MLA layers (DeepSeek), which run more kernels than GQA

    @property
    def dense_weights_bytes(self) -> int:
        return self.weights_bytes - (self.experts.weights_bytes if self.experts else 0)

    def weights_read(self, tokens: float) -> float:
        """Weight bytes one step of `tokens` tokens reads: every dense weight and the experts its tokens touch."""
        if self.experts is None:
            return self.weights_bytes
        return self.dense_weights_bytes + self.experts.weights_bytes * self.experts.touched_share(tokens)


@dataclass(frozen=True)
class StepTime:
    """One step's time and its parts, in seconds; `bound` names the larger dense-layer ceiling."""

    linear: float
    bound: str                   # 'bandwidth' or 'compute'
    experts: float
    kv_reads: float              # decode attention: its KV read or, when larger, its compute
    prompt_attention: float
    all_reduce: float            # tensor-parallel all-reduces and data-parallel token exchange
    overhead: float

    @property
    def seconds(self) -> float:
        return self.linear + self.experts + self.kv_reads + self.prompt_attention + self.all_reduce + self.overhead


def _collectives(calls: int, payload: float, link: Link, constants: StepConstants) -> float:
    per_call = constants.all_reduce_seconds[link.kind] + payload / (link.bytes_per_second * constants.link_share[link.kind])
    return calls * per_call


def step_time(
    shard: Shard, device: Device, constants: StepConstants, *, decoding: float, mean_context: float,
    prompt_tokens: float, prompt_attended_context: float, running: float,
) -> StepTime:
    """Time of one step with `decoding` sequences at `mean_context` and `prompt_tokens` of prompt chunks
    attending on average `prompt_attended_context` tokens each; `running` counts every admitted sequence."""
    kernel = shard.kernel
    bandwidth = device.bandwidth_bytes_per_second
    tokens = decoding + prompt_tokens
    read = shard.dense_weights_bytes / (bandwidth * constants.bandwidth_share[kernel.name])
    compute = tokens * shard.linear_flops_per_token / (device.peak(kernel.peak) * constants.compute_share[kernel.name])
    experts = 0.0
    routed = shard.experts
    if routed is not None:
        expert_read = routed.weights_bytes * routed.touched_share(tokens) / (bandwidth * constants.moe_bandwidth_share)
        expert_compute = routed.computed_assignments(tokens) * routed.flops_per_assignment / (
            device.peak(routed.peak) * constants.moe_compute_share[routed.family]
        )
        experts = max(expert_read, expert_compute) + routed.moe_layers * constants.moe_layer_overhead_seconds
    kv = max(
        decoding * shard.kv.over(mean_context) / (bandwidth * constants.kv_bandwidth_share),
        decoding * mean_context * shard.decode_attention_flops_per_token_and_context / (
            device.peak_flops["bf16"] * constants.prompt_attention_share
        ),
    )
    attention = prompt_tokens * prompt_attended_context * shard.attention_flops_per_token_and_context / (
        device.peak_flops["bf16"] * constants.prompt_attention_share
    )
    exchange = 0.0
    link = shard.link
    if shard.tensor_parallel > 1 and link is not None:
        tp = shard.tensor_parallel
        exchange += _collectives(
            2 * shard.layers, tokens * shard.hidden_size * ACTIVATION_BYTES * 2 * (tp - 1) / tp, link, constants
        )
    if routed is not None and routed.token_sources > 1 and link is not None:
        # vLLM's default allgather_reducescatter: each MoE layer gathers every rank's hidden states and
        # scatters the summed outputs back (catalog/all2all_backends.json).
        ranks = routed.token_sources
        exchange += _collectives(
            2 * routed.moe_layers, tokens * (ranks - 1) * shard.hidden_size * ACTIVATION_BYTES, link, constants
        )
    overhead = (
        (shard.layers * constants.mla_layer_overhead_seconds if shard.latent_attention else 0.0)
        + running * constants.sequence_overhead_seconds
    )
    return StepTime(
        linear=max(read, compute), bound="compute" if compute > read else "bandwidth", experts=experts,
        kv_reads=kv, prompt_attention=attention, all_reduce=exchange, overhead=overhead,
    )
