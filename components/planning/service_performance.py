"""Throughput, latency, replicas and $/1M output tokens of a model service at its stated traffic.

Joins a service's spec and its pool's catalog facts into the load model's plain numbers (`engine_for`),
then answers at the stated traffic: per replica the output tokens/s, time to first token and
inter-token latency; the replicas the traffic needs, and with an SLO the replicas the SLO needs; their
price per hour and per million output tokens (REPLICA_PRICE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from inferstack.catalog import on_demand_price
from inferstack.planning.engine_step import ASSUMPTIONS as STEP_ASSUMPTIONS
from inferstack.planning.engine_step import KERNELS, STATED, Assumption, Device, Link, RoutedExperts, Shard
from inferstack.planning.load import (
    BISECTION_STEPS, Engine, LoadPoint, Workload, admission_limit, at_concurrency, at_request_rate,
)
from inferstack.planning.quantization import dense_kernel_family, moe_kernel, served_format
from inferstack.planning.sizing import (
    GIB,
    expert_weights_bytes,
    experts_per_device,
    fit,
    kv_layout,
    scheduler_defaults,
)
from inferstack.spec import LatencySlo, MigSharing, ModelServiceSpec, MpsSharing, NoSharing, TimeSlicing, TrafficSpec
from inferstack.spec.pools import PoolHardware

SHARED_DEVICE = Assumption(
    "a shared GPU",
    "MIG slice: its memory slices' bandwidth and compute slices' throughput; time-slicing/MPS: 1/replicas",
    "A MIG slice owns its memory controllers, L2 and SMs; time-shared pods split the GPU when all are busy.",
)
REPLICA_PRICE = Assumption(
    "replica price", "node price x devices / GPUs per node",
    "A replica pays for the devices it blocks; a MIG slice for the larger of its compute and memory share "
    "of a GPU, a time-sliced or MPS share for 1/replicas of one.",
)
PIPELINE = Assumption(
    "pipeline parallel", "pipeline_parallel batches in flight, a token every pipeline_parallel stage steps",
    "vLLM keeps one batch per stage in flight; stage hand-offs are not counted.",
)
DATA_PARALLEL = Assumption(
    "data parallel", "a replica is data_parallel engines with an even share of its traffic",
    "vLLM's API server spreads requests over the ranks by their queues; the MoE layers' token exchange "
    "between ranks is timed as vLLM's default all-gather and reduce-scatter over the GPUs' link.",
)
ASSUMPTIONS = (*STEP_ASSUMPTIONS, SHARED_DEVICE, PIPELINE, DATA_PARALLEL, REPLICA_PRICE)

SECONDS_PER_HOUR = 3600
ALONE = 1e-9   # a share of the traffic so small that each request has its replica to itself


def _device_share(model: ModelServiceSpec, hardware: PoolHardware) -> tuple[float, float]:
    """(bandwidth share, compute share) of one GPU that one device of the replica gets (SHARED_DEVICE)."""
    sharing = hardware.spec.gpu_sharing
    gpu = hardware.gpu
    if isinstance(sharing, MigSharing):
        profile = gpu.mig_profile(model.mig_profile or next(iter(sharing.layout)))
        return profile.memory_slices / gpu.mig_memory_slices, profile.compute_slices / gpu.mig_compute_slices
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        return 1 / sharing.replicas, 1 / sharing.replicas
    return 1.0, 1.0


def device_for(model: ModelServiceSpec, hardware: PoolHardware) -> Device:
    gpu = hardware.gpu
    bandwidth_share, compute_share = _device_share(model, hardware)
    peaks = {"bf16": gpu.bf16_dense_tflops, "fp8": gpu.fp8_dense_tflops, "int8": gpu.int8_dense_tops}
    return Device(
        bandwidth_bytes_per_second=gpu.memory_bandwidth_gbs * 1e9 * bandwidth_share,
        peak_flops={name: tflops * 1e12 * compute_share for name, tflops in peaks.items() if tflops},
    )


def attention_flops(model: ModelServiceSpec, layers: int) -> float:
    """FLOPs a token spends per token of context on one device in (GQA/MHA) attention: 2 x head_dim for the scores
    and as many for the sum, per query head of the device, on every layer, windowed or not (engine_step)."""
    arch = model.resolved_architecture
    return 4 * layers * arch.attention_heads / model.tensor_parallel * arch.head_dim


def decode_attention_flops(model: ModelServiceSpec, layers: int) -> float:
    """The same for a decoding token (DECODE_ATTENTION): MLA scores every query head over the latent and the RoPE
    key and sums over the latent; GQA/MHA as in prompt attention."""
    arch = model.resolved_architecture
    if arch.attention == "mla":
        return 2 * layers * arch.attention_heads / model.tensor_parallel * (2 * arch.kv_lora_rank + arch.qk_rope_head_dim)
    return attention_flops(model, layers)


def routed_experts(model: ModelServiceSpec, hardware: PoolHardware) -> RoutedExperts | None:
    """What one GPU of the replica holds and computes of the routed experts; None for a dense model."""
    arch = model.resolved_architecture
    if not arch.experts:
        return None
    pp = model.pipeline_parallel
    devices = model.tensor_parallel * model.data_parallel
    expert_parallel = model.resolved_expert_parallel
    per_expert_params = arch.expert_params / arch.experts / pp
    kernel = moe_kernel(model, hardware.gpu)
    return RoutedExperts(
        weights_bytes=math.ceil(
            expert_weights_bytes(model, hardware.gpu) * experts_per_device(model) / arch.experts / pp
        ),
        flops_per_assignment=2 * per_expert_params / (1 if expert_parallel else devices),
        experts=arch.experts,
        per_token=arch.experts_per_token,
        token_sources=model.data_parallel,
        devices=devices,
        expert_parallel=expert_parallel,
        moe_layers=math.ceil((arch.moe_layers or arch.layers) / pp),
        family=kernel.family,
        peak=kernel.peak,
        block_fp8=kernel.family == "triton" and served_format(model).weight_block_size is not None,
    )


def engine_for(model: ModelServiceSpec, hardware: PoolHardware) -> Engine:
    """The load model's engine for a service on its pool, the same sizing the plan and the pods use: the
    replica, or one of its data-parallel ranks (DATA_PARALLEL)."""
    arch = model.resolved_architecture
    sized = fit(model, hardware)
    tp, pp = model.tensor_parallel, model.pipeline_parallel
    link = None
    if tp > 1 or model.data_parallel > 1:
        primary = hardware.primary
        link = Link(primary.gpu_link, primary.gpu_link_gbs_per_direction * 1e9)
    layers = math.ceil(arch.layers / pp)
    experts = routed_experts(model, hardware)
    active = (arch.active_params_billion or arch.params_billion) * 1e9
    routed_active = arch.expert_params * arch.experts_per_token / arch.experts if arch.experts else 0
    shard = Shard(
        weights_bytes=sized.weights_bytes_per_device,
        kv=kv_layout(model),
        linear_flops_per_token=2 * (active - routed_active) / (tp * pp),
        attention_flops_per_token_and_context=attention_flops(model, layers),
        kernel=KERNELS[dense_kernel_family(model, hardware.gpu)],
        layers=layers,
        hidden_size=arch.hidden_size,
        tensor_parallel=tp,
        link=link,
        decode_attention_flops_per_token_and_context=decode_attention_flops(model, layers),
        experts=experts,
        latent_attention=arch.attention == "mla",
    )
    batched_tokens, seqs = scheduler_defaults(model, hardware)
    return Engine(
        shard=shard, device=device_for(model, hardware), pipeline_parallel=pp, max_num_seqs=seqs,
        max_num_batched_tokens=batched_tokens, kv_cache_bytes=sized.kv_cache_bytes_per_device,
        kept_kv=kv_layout(model, with_draft=True), constants=STATED,
    )


def workload_of(traffic: TrafficSpec) -> Workload:
    """The traffic's mean request; its shared prefix is served from the prefix cache (the spec refuses a
    shared prefix with prefix caching off)."""
    return Workload(traffic.mean_input_tokens, traffic.mean_output_tokens, traffic.shared_prefix_tokens)


def replica_usd_per_hour(model: ModelServiceSpec, hardware: PoolHardware, node_usd_per_hour: float) -> float:
    """What one replica's devices cost per hour (REPLICA_PRICE)."""
    per_gpu = node_usd_per_hour / hardware.gpus_per_node
    if isinstance(hardware.spec.gpu_sharing, NoSharing):
        return per_gpu * model.gpus_per_replica
    # A shared device blocks the larger of its bandwidth (memory slices) and compute share of a GPU.
    return per_gpu * max(_device_share(model, hardware))


@dataclass(frozen=True)
class ServiceEstimate:
    """A service at its stated traffic: per replica at that load and at full load, replicas and cost."""

    at_traffic: LoadPoint               # one replica's share of the traffic, on `replicas` replicas
    full_load: LoadPoint                # one replica with every sequence it admits
    traffic_requests_per_second: float
    traffic_output_tokens_per_second: float
    replicas_for_traffic: int           # fewest replicas that carry the traffic
    replicas_for_slo: int | None        # fewest that also meet the SLO; None without one
    slo_unreachable: str | None         # why no replica count meets the SLO
    replicas: int                       # what the estimate is priced at
    usd_per_hour: float
    usd_per_million_output_tokens: float
    usd_per_million_output_tokens_at_full_load: float
    capacity_requests_per_second: float  # the most the service's max replicas carry within its SLO


def _meets(point: LoadPoint, slo: LatencySlo | None) -> bool:
    if point.saturated:
        return False
    if slo is None:
        return True
    ttft_ok = slo.ttft_ms is None or point.first_token_seconds * 1000 <= slo.ttft_ms
    # One-token outputs have no token after the first, so no inter-token latency to hold.
    itl_ok = slo.itl_ms is None or point.inter_token_seconds is None or point.inter_token_seconds * 1000 <= slo.itl_ms
    return ttft_ok and itl_ok


def _fewest_replicas(
    engine: Engine, workload: Workload, rate: float, slo: LatencySlo | None, start: int
) -> int:
    """Fewest replicas from `start` whose share of `rate` they carry (within `slo`), by doubling then bisection;
    the caller checks that a request alone meets the SLO, so some count does."""
    def ok(replicas: int) -> bool:
        return _meets(at_request_rate(engine, workload, rate / replicas), slo)

    if ok(start):
        return start
    high = start * 2
    while not ok(high):
        high *= 2
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        if ok(middle):
            high = middle
        else:
            low = middle
    return high


def capacity_at_slo(engine: Engine, workload: Workload, slo: LatencySlo | None, engines: int, ceiling: float) -> float:
    """The highest request rate `engines` replicas (or data-parallel ranks) carry within `slo` (unsaturated without
    one), by bisection below `ceiling`, the rate they finish at full load; 0 when a request alone misses the SLO. What
    a gateway limit is held against: a tenant allowed more than this would be queued or refused at the SLO anyway."""
    def ok(rate: float) -> bool:
        return _meets(at_request_rate(engine, workload, rate / engines), slo)

    low, high = 0.0, ceiling
    if ok(high):
        return high
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        if ok(middle):
            low = middle
        else:
            high = middle
    return low


def _whole_replica(point: LoadPoint, ranks: int) -> LoadPoint:
    """A replica of `ranks` data-parallel engines, each at `point`: their sequences and rates add, latencies stay."""
    if ranks == 1:
        return point
    return replace(
        point, running=point.running * ranks, decoding=point.decoding * ranks,
        requests_per_second=point.requests_per_second * ranks,
        output_tokens_per_second=point.output_tokens_per_second * ranks,
    )


def service_estimate(
    model: ModelServiceSpec, hardware: PoolHardware, *, region: str, node_usd_per_hour: float | None = None
) -> ServiceEstimate:
    """The estimate for a model service on its pool, at its stated traffic and (by default) the on-demand price
    of the pool's first instance type in the stack's `region`."""
    traffic = model.traffic
    if traffic is None:
        raise ValueError(f"model service {model.name!r} states no traffic: add traffic.requests_per_second")
    price = on_demand_price(hardware.primary.name, region) if node_usd_per_hour is None else node_usd_per_hour
    if price is None:
        raise ValueError(f"{hardware.primary.name} has no on-demand price in {region} in the catalog: state it in "
                         "budget.prices (purchase on_demand or savings_plan)")
    engine = engine_for(model, hardware)
    workload = workload_of(traffic)
    cap, _ = admission_limit(engine, workload)
    if cap < 1:
        raise ValueError(
            f"the KV cache holds {engine.kv_cache_bytes / GIB:.2f} GiB a GPU, less than one "
            f"{workload.held_tokens:.0f}-token request ({traffic.mean_input_tokens} in + {traffic.mean_output_tokens} "
            f"out) keeps: {engine.kept_kv.over(workload.held_tokens) / GIB:.2f} GiB"
        )
    ranks = model.data_parallel
    full = at_concurrency(engine, workload, cap)
    rate = traffic.requests_per_second / ranks   # what each rank's share of a replica count is taken from
    for_traffic = max(1, math.ceil(rate / full.requests_per_second))
    for_traffic = _fewest_replicas(engine, workload, rate, None, for_traffic)
    for_slo, unreachable = None, None
    replicas = for_traffic
    if model.slo is not None:
        alone = at_request_rate(engine, workload, rate * ALONE)
        if _meets(alone, model.slo):
            for_slo = _fewest_replicas(engine, workload, rate, model.slo, for_traffic)
            replicas = for_slo
        else:
            after = "" if alone.inter_token_seconds is None else (
                f" and {alone.inter_token_seconds * 1000:.1f} ms per token after it"
            )
            unreachable = (
                f"a request alone takes {alone.first_token_seconds * 1000:.0f} ms to its first token{after} on "
                f"{hardware.gpu.name}"
            )
    point = _whole_replica(at_request_rate(engine, workload, rate / replicas), ranks)
    engines = model.autoscaling.max_replicas * ranks
    capacity = capacity_at_slo(engine, workload, model.slo, engines, full.requests_per_second * engines)
    full = _whole_replica(full, ranks)
    replica_price = replica_usd_per_hour(model, hardware, price)
    usd_per_hour = replicas * replica_price
    wanted = traffic.requests_per_second * traffic.mean_output_tokens
    return ServiceEstimate(
        at_traffic=point,
        full_load=full,
        traffic_requests_per_second=traffic.requests_per_second,
        traffic_output_tokens_per_second=wanted,
        replicas_for_traffic=for_traffic,
        replicas_for_slo=for_slo,
        slo_unreachable=unreachable,
        replicas=replicas,
        usd_per_hour=usd_per_hour,
        usd_per_million_output_tokens=usd_per_hour / (wanted * SECONDS_PER_HOUR) * 1e6,
        usd_per_million_output_tokens_at_full_load=(
            replica_price / (full.output_tokens_per_second * SECONDS_PER_HOUR) * 1e6
        ),
        capacity_requests_per_second=capacity,
    )
