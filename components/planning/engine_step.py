"""The time of one vLLM engine step: a stated model with a bandwidth ceiling and a compute ceiling.

vLLM's V1 engine runs in steps: each step gives every decoding sequence one token and spends what is
left of `max_num_batched_tokens` on prompt chunks (chunked prefill). A step's time is the sum of

    linear layers   max(weight bytes / effective bandwidth,
                        2 x parameters x tokens in the step / effective throughput of the weights' kernel)
    KV reads        decoding sequences x their mean context x KV bytes per token / effective bandwidth
    prompt attention  4 x layers x heads x head_dim x prompt tokens x context they attend / 16-bit throughput
    all-reduce      2 per layer when tensor parallel: a latency plus the step's activations over the link
    overhead        a fixed time per step plus a time per running sequence (scheduling, sampling, output)

all per device: a replica's tensor-parallel ranks run their shards at once. The efficiencies and
overheads are stated assumptions, fitted to published measurements (catalog/serving_measurements.json)
by planning/calibrate.py; planning/accuracy.py reports the model's error on every one of them.
"""

from __future__ import annotations

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


FITTED = "fitted to the published measurements in catalog/serving_measurements.json (planning/calibrate.py)"

KERNELS = {
    "16-bit": KernelFamily(
        "16-bit", "bf16",
        Assumption("16-bit weights: share of bandwidth", 0.72,
                   f"cuBLAS streaming 16-bit weights, beside the fixed overhead of a step; {FITTED} (16-bit points "
                   "at 1 to 8 in flight)"),
        Assumption("16-bit weights: share of dense BF16 throughput", 0.58,
                   f"large-batch and prompt GEMMs; {FITTED} (16-bit points at 64 and more in flight, long prompts)"),
    ),
    "w8a8-fp8": KernelFamily(
        "w8a8-fp8", "fp8",
        Assumption("FP8 W8A8: share of bandwidth", 0.77,
                   "CUTLASS scaled-mm streaming 1-byte weights; with half the bytes of 16-bit the fixed overhead "
                   f"of a step is a larger part of it, so at small batch FP8 reaches a lower share overall; {FITTED}"),
        Assumption("FP8 W8A8: share of dense FP8 throughput", 0.50,
                   f"FP8 GEMMs at large batch, with per-token activation quantization; {FITTED}"),
    ),
    "w8a16-marlin": KernelFamily(
        "w8a16-marlin", "bf16",
        Assumption("8-bit weight-only (Marlin W8A16): share of bandwidth", 0.58,
                   "taken as 4-bit Marlin's: the same kernel family dequantizing on chip (FP8 on GPUs without FP8 "
                   "tensor cores, 8-bit GPTQ); the published W8A16 points are compute-bound and do not fix it"),
        Assumption("8-bit weight-only (Marlin W8A16): share of dense BF16 throughput", 0.35,
                   f"FP8 checkpoints on A100 run their matmuls at the 16-bit rate and spend tensor-core time "
                   f"dequantizing; {FITTED} (Qwen3 FP8 on A100)"),
    ),
    "w4a16-marlin": KernelFamily(
        "w4a16-marlin", "bf16",
        Assumption("4-bit weight-only (Marlin W4A16): share of bandwidth", 0.58,
                   f"4-bit weights with 16-bit group scales and zero points, dequantized on chip; {FITTED} "
                   "(AWQ/GPTQ points at batch 1)"),
        Assumption("4-bit weight-only (Marlin W4A16): share of dense BF16 throughput", 0.55,
                   "Marlin turns compute-bound past a few dozen tokens a step and then runs near the 16-bit GEMM "
                   f"rate, so at high concurrency AWQ makes about the tokens 16-bit does; {FITTED} (AWQ at 64 "
                   "and 1,000 in flight)"),
    ),
    "w8a8-int8": KernelFamily(
        "w8a8-int8", "int8",
        Assumption("INT8 W8A8: share of bandwidth", 0.77,
                   "taken as FP8 W8A8's (the same CUTLASS scaled-mm family); no published INT8 point in the table"),
        Assumption("INT8 W8A8: share of dense INT8 throughput", 0.50, "taken as FP8 W8A8's; no published INT8 point"),
    ),
}

KV_BANDWIDTH_EFFICIENCY = Assumption(
    "KV reads: share of bandwidth", 0.81,
    f"paged-attention decode kernels stream each sequence's KV blocks; {FITTED} (20K-token contexts, large batches)",
)
PROMPT_ATTENTION_EFFICIENCY = Assumption(
    "prompt attention: share of dense BF16 throughput", 0.7,
    "FlashAttention forward reaches 50-73% of A100 peak (FlashAttention-2 paper, Dao 2023) and about 75% of H100 "
    "with FlashAttention-3 (Shah et al. 2024)",
)
STEP_OVERHEAD_SECONDS = Assumption(
    "overhead per step", 0.0013,
    f"scheduling, input preparation, launch gaps and sampling around one step, in seconds; {FITTED} (the gap "
    "between single-request inter-token latency and the weights' read time)",
)
SEQUENCE_OVERHEAD_SECONDS = Assumption(
    "overhead per running sequence per step", 0.000016,
    f"per-sequence scheduling, sampling and output work of each step, in seconds; {FITTED} (hundreds to a "
    "thousand sequences in flight)",
)
ALL_REDUCE_LATENCY_SECONDS = {
    "nvlink": Assumption(
        "cost per all-reduce over NVLink", 0.000035,
        "seconds per call beyond moving its bytes, two calls per layer: the collective's latency and the "
        f"synchronisation and launch gaps around it; {FITTED} (70B-class models at TP 2-8 on A100/H100, batch 1)",
    ),
    "pcie": Assumption(
        "cost per all-reduce over PCIe", 0.000034,
        f"as over NVLink, for NCCL over PCIe through the host; {FITTED} (70B at TP 4 and 8 on L40S)",
    ),
}
LINK_EFFICIENCY = {
    "nvlink": Assumption(
        "all-reduce share of NVLink line rate", 0.82,
        "NCCL reaches about 370 of NVLink 4's 450 GB/s one way after protocol overhead (the NCCL maintainer in "
        "NVIDIA/nccl-tests#212)",
    ),
    "pcie": Assumption(
        "all-reduce share of PCIe line rate", 0.44,
        "without NVLink or GPU peer-to-peer NCCL stages through host memory, and vLLM turns its custom all-reduce "
        f"off past two PCIe-only GPUs (distributed/device_communicators/custom_all_reduce.py); {FITTED} "
        "(70B at TP 4 and 8 on L40S)",
    ),
}
ACTIVATION_BYTES = 2   # 16-bit activations cross the link in an all-reduce


def kernel_assumptions() -> tuple[Assumption, ...]:
    return tuple(a for k in KERNELS.values() for a in (k.bandwidth_efficiency, k.compute_efficiency))


ASSUMPTIONS = (
    *kernel_assumptions(), KV_BANDWIDTH_EFFICIENCY, PROMPT_ATTENTION_EFFICIENCY, STEP_OVERHEAD_SECONDS,
    SEQUENCE_OVERHEAD_SECONDS, *ALL_REDUCE_LATENCY_SECONDS.values(), *LINK_EFFICIENCY.values(),
)


@dataclass(frozen=True)
class StepConstants:
    """The values the step model computes with; `STATED` holds the assumptions above, and the calibration
    (inferstack.planning.calibrate) refits them against the measurement table."""

    bandwidth_share: Mapping[str, float]     # by kernel family
    compute_share: Mapping[str, float]       # by kernel family
    kv_bandwidth_share: float
    prompt_attention_share: float
    step_overhead_seconds: float
    sequence_overhead_seconds: float
    all_reduce_seconds: Mapping[str, float]  # by link kind
    link_share: Mapping[str, float]          # by link kind


STATED = StepConstants(
    bandwidth_share=MappingProxyType({name: k.bandwidth_efficiency.value for name, k in KERNELS.items()}),
    compute_share=MappingProxyType({name: k.compute_efficiency.value for name, k in KERNELS.items()}),
    kv_bandwidth_share=KV_BANDWIDTH_EFFICIENCY.value,
    prompt_attention_share=PROMPT_ATTENTION_EFFICIENCY.value,
    step_overhead_seconds=STEP_OVERHEAD_SECONDS.value,
    sequence_overhead_seconds=SEQUENCE_OVERHEAD_SECONDS.value,
    all_reduce_seconds=MappingProxyType({kind: a.value for kind, a in ALL_REDUCE_LATENCY_SECONDS.items()}),
    link_share=MappingProxyType({kind: a.value for kind, a in LINK_EFFICIENCY.items()}),
)


@dataclass(frozen=True)
class Device:
    """One device a replica's shard runs on (a GPU, a MIG slice or a time-shared part of one)."""

    bandwidth_bytes_per_second: float
    peak_flops: dict[str, float]          # dense FLOP/s by peak: 'bf16', 'fp8', 'int8' (absent if none)


@dataclass(frozen=True)
class Link:
    """How tensor-parallel ranks exchange activations: 'nvlink' or 'pcie', bytes per second one way."""

    kind: str
    bytes_per_second: float


@dataclass(frozen=True)
class Shard:
    """What one device of a replica holds and computes, per token, for the step model."""

    weights_bytes: int
    kv_bytes_per_token: int
    linear_flops_per_token: float              # 2 x the device's share of the parameters
    attention_flops_per_token_and_context: float   # 4 x its layers x its query heads x head_dim
    kernel: KernelFamily
    layers: int                                 # layers on this device (its pipeline stage)
    hidden_size: int
    tensor_parallel: int
    link: Link | None                           # None when tensor_parallel is 1
    expert_weights_bytes: int = 0               # the routed experts' part of weights_bytes (MoE)
    experts: int = 0                            # routed experts per MoE layer; 0 for a dense model
    experts_per_token: int = 0
    expert_token_sources: int = 1               # data-parallel ranks whose tokens reach this device's experts

    def weights_read(self, tokens: float) -> float:
        """Weight bytes one step reads for `tokens` tokens: every dense weight, and of the routed experts the
        share its tokens touch. With each token routing to k of E experts, uniformly (the assumption), a
        step of n tokens touches 1 - (1 - k/E)^n of them (so one decoding token reads k/E of the experts,
        a large batch nearly all). Under data parallelism every rank's tokens reach the shared MoE layers, so
        n counts the tokens of `expert_token_sources` ranks stepping alike."""
        if not self.experts:
            return self.weights_bytes
        routed = max(tokens, 1.0) * self.expert_token_sources
        touched = 1 - (1 - self.experts_per_token / self.experts) ** routed
        return self.weights_bytes - self.expert_weights_bytes + self.expert_weights_bytes * touched


@dataclass(frozen=True)
class StepTime:
    """One step's time and its parts, in seconds; `bound` names the larger linear-layer ceiling."""

    linear: float
    bound: str                   # 'bandwidth' or 'compute'
    kv_reads: float
    prompt_attention: float
    all_reduce: float
    overhead: float

    @property
    def seconds(self) -> float:
        return self.linear + self.kv_reads + self.prompt_attention + self.all_reduce + self.overhead


def step_time(
    shard: Shard, device: Device, constants: StepConstants, *, decoding: float, mean_context: float,
    prompt_tokens: float, prompt_attended_context: float, running: float,
) -> StepTime:
    """Time of one step with `decoding` sequences at `mean_context` and `prompt_tokens` of prompt chunks
    attending on average `prompt_attended_context` tokens each; `running` counts every admitted sequence."""
    kernel = shard.kernel
    tokens = decoding + prompt_tokens
    read = shard.weights_read(tokens) / (device.bandwidth_bytes_per_second * constants.bandwidth_share[kernel.name])
    peak = device.peak_flops.get(kernel.peak) or device.peak_flops["bf16"]
    compute = tokens * shard.linear_flops_per_token / (peak * constants.compute_share[kernel.name])
    kv = decoding * mean_context * shard.kv_bytes_per_token / (
        device.bandwidth_bytes_per_second * constants.kv_bandwidth_share
    )
    attention = prompt_tokens * prompt_attended_context * shard.attention_flops_per_token_and_context / (
        device.peak_flops["bf16"] * constants.prompt_attention_share
    )
    reduce = 0.0
    if shard.tensor_parallel > 1 and shard.link is not None:
        tp = shard.tensor_parallel
        payload = tokens * shard.hidden_size * ACTIVATION_BYTES * 2 * (tp - 1) / tp
        link = shard.link
        per_call = constants.all_reduce_seconds[link.kind] + payload / (
            link.bytes_per_second * constants.link_share[link.kind]
        )
        reduce = 2 * shard.layers * per_call
    overhead = constants.step_overhead_seconds + running * constants.sequence_overhead_seconds
    return StepTime(
        linear=max(read, compute), bound="compute" if compute > read else "bandwidth",
        kv_reads=kv, prompt_attention=attention, all_reduce=reduce, overhead=overhead,
    )
