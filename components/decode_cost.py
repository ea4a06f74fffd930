"""Dollars per million output tokens, from a stated memory-bandwidth model of decode.

Decode is bound by memory bandwidth: every step reads each device's shard of the weights and the KV
cache of every running sequence once, and yields one token per sequence. So a replica running a batch
of B sequences makes B tokens per step, with

    step_seconds = (weights_bytes_per_device + B x average_context x kv_bytes_per_token_per_device)
                   / (device_bandwidth x BANDWIDTH_EFFICIENCY)

B is as large as the replica allows at full load: max_num_seqs, or the sequences the KV cache holds
at their full length, whichever is smaller. The stated traffic then fixes the replicas needed and the
cost per token. Every assumption is a named `Assumption` below (value and reason) and is returned
with the numbers, so the plan prints them instead of hiding them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferstack.sizing import fit, scheduler_defaults
from inferstack.spec.models import MigSharing, ModelServiceSpec, MpsSharing, TimeSlicing, TrafficSpec
from inferstack.spec.pools import PoolHardware


@dataclass(frozen=True)
class Assumption:
    """One stated assumption of the model: its value and why it holds (printed by `plan`)."""

    name: str
    value: float | str
    why: str


BANDWIDTH_EFFICIENCY = Assumption(
    "bandwidth efficiency", 0.7,
    "Share of the datasheet memory bandwidth a decode step is taken to reach: memory-bound kernels never "
    "reach peak; 0.7 is an estimate, not a measurement.",
)
AVERAGE_CONTEXT_OUTPUT_SHARE = Assumption(
    "average context", 0.5,
    "A running sequence's context is its prompt plus this share of its output: it grows one token per "
    "step from the prompt to prompt + output.",
)
SEQUENCE_KV = Assumption(
    "KV cache per sequence", "input + output tokens",
    "At full load the KV cache holds kv_tokens / (input + output) sequences, each at its full length.",
)
PREFILL = Assumption(
    "prefill", "not modelled",
    "Processing the prompt is compute-bound and not counted: the estimate is the decode cost alone, a "
    "lower bound that is close when outputs are long next to prompts.",
)
PARALLEL_DEVICES = Assumption(
    "tensor/pipeline parallel", "devices read their shards in parallel; traffic between them not modelled",
    "A step takes one device's bytes over one device's bandwidth: tensor-parallel ranks work at once and "
    "pipeline stages are kept busy by batches in flight; all-reduce and stage hand-offs are not counted.",
)
SHARED_DEVICE_BANDWIDTH = Assumption(
    "bandwidth of a shared GPU", "MIG slice: its memory slices' share; time-slicing/MPS: 1/replicas",
    "A MIG slice owns its memory slices' controllers and L2; time-shared pods split the GPU when all are busy.",
)
WEIGHT_BYTES = Assumption(
    "weight bytes read per step", "as held on the GPU (quantized weights at their stored width)",
    "4-bit and FP8 kernels read the quantized weights and dequantize on chip, so a step reads the held bytes; "
    "on GPUs without FP8 tensor cores (A10G, A100) FP8 runs as weight-only Marlin (W8A16): decode reads the same "
    "bytes, but the matmuls, which bound the unmodelled prefill, run at the 16-bit rate.",
)
REPLICA_PRICE = Assumption(
    "replica price", "node price x devices / GPUs per node",
    "A replica pays for the devices it blocks; a MIG slice for the larger of its compute and memory share "
    "of a GPU, a time-sliced or MPS share for 1/replicas of one.",
)
ASSUMPTIONS = (
    BANDWIDTH_EFFICIENCY, AVERAGE_CONTEXT_OUTPUT_SHARE, SEQUENCE_KV, PREFILL, PARALLEL_DEVICES,
    SHARED_DEVICE_BANDWIDTH, WEIGHT_BYTES, REPLICA_PRICE,
)

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class DecodeEstimate:
    """Throughput and cost of one model service at its stated traffic."""

    batch: int                          # sequences per replica at full load
    batch_limit: str                    # what bounds it: 'max_num_seqs' or 'kv_cache'
    step_seconds: float                 # one decode step at that batch = time per output token
    tokens_per_second: float            # output tokens per replica at full load
    traffic_tokens_per_second: float    # output tokens the stated traffic asks for
    replicas: int                       # replicas that traffic needs
    usd_per_hour: float                 # those replicas' price
    usd_per_million_output_tokens: float        # at the stated traffic
    usd_per_million_output_tokens_at_full_load: float
    assumptions: tuple[Assumption, ...]


def decode_cost(
    *,
    weights_bytes_per_device: int,
    kv_bytes_per_token_per_device: int,
    kv_tokens: int,
    bandwidth_gbs: float,
    max_num_seqs: int,
    replica_usd_per_hour: float,
    traffic: TrafficSpec,
) -> DecodeEstimate:
    """The decode model over plain numbers (bandwidth of one device, in GB/s)."""
    sequence_tokens = traffic.mean_input_tokens + traffic.mean_output_tokens
    by_kv = kv_tokens // sequence_tokens
    if by_kv < 1:
        raise ValueError(
            f"the KV cache holds {kv_tokens} tokens, less than one {sequence_tokens}-token request "
            f"({traffic.mean_input_tokens} in + {traffic.mean_output_tokens} out)"
        )
    batch, limit = (max_num_seqs, "max_num_seqs") if max_num_seqs <= by_kv else (by_kv, "kv_cache")
    context = traffic.mean_input_tokens + AVERAGE_CONTEXT_OUTPUT_SHARE.value * traffic.mean_output_tokens
    step_bytes = weights_bytes_per_device + batch * context * kv_bytes_per_token_per_device
    step = step_bytes / (bandwidth_gbs * 1e9 * BANDWIDTH_EFFICIENCY.value)
    per_replica = batch / step
    wanted = traffic.requests_per_second * traffic.mean_output_tokens
    replicas = math.ceil(wanted / per_replica)
    usd_per_hour = replicas * replica_usd_per_hour
    return DecodeEstimate(
        batch=batch,
        batch_limit=limit,
        step_seconds=step,
        tokens_per_second=per_replica,
        traffic_tokens_per_second=wanted,
        replicas=replicas,
        usd_per_hour=usd_per_hour,
        usd_per_million_output_tokens=usd_per_hour / (wanted * SECONDS_PER_HOUR) * 1e6,
        usd_per_million_output_tokens_at_full_load=replica_usd_per_hour / (per_replica * SECONDS_PER_HOUR) * 1e6,
        assumptions=ASSUMPTIONS,
    )


def device_bandwidth_gbs(hardware: PoolHardware, mig_profile: str | None) -> float:
    """Bandwidth of the device one shard gets: the GPU's, or a share of it (SHARED_DEVICE_BANDWIDTH)."""
    sharing = hardware.spec.gpu_sharing
    gpu = hardware.gpu
    if isinstance(sharing, MigSharing):
        profile = gpu.mig_profile(mig_profile or next(iter(sharing.layout)))
        return gpu.memory_bandwidth_gbs * profile.memory_slices / gpu.mig_memory_slices
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        return gpu.memory_bandwidth_gbs / sharing.replicas
    return gpu.memory_bandwidth_gbs


def replica_usd_per_hour(model: ModelServiceSpec, hardware: PoolHardware, node_usd_per_hour: float) -> float:
    """What one replica's devices cost per hour (REPLICA_PRICE)."""
    per_gpu = node_usd_per_hour / hardware.gpus_per_node
    sharing = hardware.spec.gpu_sharing
    gpu = hardware.gpu
    if isinstance(sharing, MigSharing):
        profile = gpu.mig_profile(model.mig_profile or next(iter(sharing.layout)))
        return per_gpu * max(profile.compute_slices / gpu.mig_compute_slices, profile.memory_slices / gpu.mig_memory_slices)
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        return per_gpu / sharing.replicas
    return per_gpu * model.gpus_per_replica


def service_decode_cost(
    model: ModelServiceSpec, hardware: PoolHardware, *, node_usd_per_hour: float | None = None
) -> DecodeEstimate:
    """The estimate for a model service on its pool, at its stated traffic and (by default) on-demand prices."""
    if model.traffic is None:
        raise ValueError(f"model service {model.name!r} states no traffic: add traffic.requests_per_second")
    price = hardware.primary.on_demand_usd_per_hour if node_usd_per_hour is None else node_usd_per_hour
    if price is None:
        raise ValueError(f"{hardware.primary.name} has no price in the catalog: pass node_usd_per_hour")
    sized = fit(model, hardware)
    return decode_cost(
        weights_bytes_per_device=sized.weights_bytes_per_device,
        kv_bytes_per_token_per_device=sized.kv_bytes_per_token_per_device,
        kv_tokens=sized.kv_tokens,
        bandwidth_gbs=device_bandwidth_gbs(hardware, model.mig_profile),
        max_num_seqs=scheduler_defaults(model, hardware)[1],
        replica_usd_per_hour=replica_usd_per_hour(model, hardware, price),
        traffic=model.traffic,
    )
