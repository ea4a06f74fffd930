"""The engine step model and the load it carries: both ceilings, prompt chunks, kernels, tensor parallelism,
prefix reuse, and the replicas traffic and an SLO need."""

from __future__ import annotations

import math

import pytest

from inferstack.planning import sizing
from inferstack.planning.engine_step import (
    ASSUMPTIONS,
    KERNELS,
    KV_BANDWIDTH_EFFICIENCY,
    SEQUENCE_OVERHEAD_SECONDS,
)
from inferstack.planning.load import Workload, admission_limit, at_concurrency, at_request_rate
from inferstack.planning.service_performance import engine_for, service_estimate
from inferstack.planning.quantization import kernel_family
from inferstack.spec import LatencySlo, ModelServiceSpec, NodePoolSpec, TrafficSpec
from inferstack.spec.pools import PoolHardware

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_8B_AWQ = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


def service(
    model: str = LLAMA_8B, instance: str = "p5.48xlarge", tp: int = 1, **fields
) -> tuple[ModelServiceSpec, PoolHardware]:
    spec = ModelServiceSpec(name="svc", model=model, pool="gpu", tensor_parallel=tp, **fields)
    return spec, PoolHardware(NodePoolSpec(name="gpu", instance_types=[instance], max_nodes=1))


def engine(*args, **fields):
    return engine_for(*service(*args, **fields))


def test_one_request_on_an_h100_is_bound_by_reading_the_weights_by_hand():
    # Llama 3.1 8B in 16 bits on one H100: a step reads the sized weights at 3350 GB/s x the 16-bit share and
    # one sequence's KV (128 + 512/2 tokens of 131072 B) at 3350 GB/s x the KV share, plus one scheduled
    # sequence's overhead (the stated constants).
    model, hardware = service()
    weights = sizing.fit(model, hardware).weights_bytes_per_device
    by_hand = (
        weights / (3350e9 * KERNELS["16-bit"].bandwidth_efficiency.value)
        + 384 * 131072 / (3350e9 * KV_BANDWIDTH_EFFICIENCY.value)
        + SEQUENCE_OVERHEAD_SECONDS.value
    )
    point = at_concurrency(engine_for(model, hardware), Workload(128, 512), 1)
    assert point.steps.decode_step.bound == "bandwidth"
    assert point.steps.decode_step.seconds == pytest.approx(by_hand, rel=1e-3)
    assert point.inter_token_seconds == pytest.approx(0.0073, rel=0.1)   # published: 7.2-7.4 ms (GPUStack Qwen3-8B)
    assert point.limit == "load"


def test_throughput_stops_growing_with_batch_at_the_compute_ceiling():
    replica = engine()
    rates = {c: at_concurrency(replica, Workload(128, 512), c).output_tokens_per_second for c in (1, 8, 64, 512, 1024)}
    assert rates[8] > 7 * rates[1]              # bandwidth-bound: a step costs about the same for 8 sequences
    assert rates[1024] < 1.1 * rates[512]        # compute-bound: twice the sequences, about the same tokens
    assert at_concurrency(replica, Workload(128, 512), 1024).steps.decode_step.bound == "compute"


def test_long_prompts_stretch_inter_token_latency_and_first_token_time():
    replica = engine()
    short, long = (at_concurrency(replica, Workload(prompt, 128), 64) for prompt in (128, 8192))
    assert long.inter_token_seconds > 5 * short.inter_token_seconds    # prompt chunks ride in decode steps
    assert long.first_token_seconds > 10 * short.first_token_seconds
    assert long.output_tokens_per_second < short.output_tokens_per_second / 5


def test_four_bit_weights_win_at_batch_one_and_about_tie_at_high_concurrency():
    """Marlin W4A16 reads a quarter of the bytes but runs its matmuls near the 16-bit rate once compute-bound
    (vLLM 0.33 quantization/auto_awq.py picks Marlin; GPUStack Qwen3-14B on A100: AWQ 1,802 vs BF16 1,887 tok/s)."""
    awq, sixteen = engine(LLAMA_8B_AWQ), engine()
    single = [at_concurrency(e, Workload(128, 512), 1).output_tokens_per_second for e in (awq, sixteen)]
    crowded = [at_concurrency(e, Workload(128, 512), 256).output_tokens_per_second for e in (awq, sixteen)]
    assert single[0] > 1.5 * single[1]
    assert crowded[0] == pytest.approx(crowded[1], rel=0.25)


def test_fp8_runs_on_fp8_tensor_cores_only_where_the_gpu_has_them():
    """vLLM 0.33 fp8.py: below compute capability 8.9 FP8 is weight-only Marlin (W8A16)."""
    on_h100 = service(instance="p5.48xlarge", quantization="fp8")
    on_a100 = service(instance="p4de.24xlarge", quantization="fp8")
    assert kernel_family(on_h100[0], on_h100[1].gpu) == "w8a8-fp8"
    assert kernel_family(on_a100[0], on_a100[1].gpu) == "w8a16-marlin"
    assert engine_for(*on_h100).device.peak_flops["fp8"] == pytest.approx(1979e12)
    assert "fp8" not in engine_for(*on_a100).device.peak_flops


def test_tensor_parallel_over_pcie_gains_little_and_over_nvlink_scales():
    """g6e has no NVLink, and vLLM turns its custom all-reduce off past two PCIe-only GPUs
    (vllm distributed/device_communicators/custom_all_reduce.py); TensorRT-LLM 0.14's perf overview measures
    70B at TP 4 -> 8: 1,161 -> 1,188 tok/s on L40S, 1,763 -> 3,190 on A100 SXM."""
    def speedup(instance: str, **fields) -> float:
        replicas = [engine(LLAMA_70B, instance, tp, **fields) for tp in (4, 8)]
        rate = [at_concurrency(e, Workload(1000, 1000), 256).output_tokens_per_second for e in replicas]
        return rate[1] / rate[0]

    assert speedup("g6e.48xlarge", quantization="fp8") < 1.25
    assert speedup("p4de.24xlarge") > 1.5
    assert engine(LLAMA_70B, "g6e.48xlarge", 4, quantization="fp8").shard.link.kind == "pcie"
    assert engine(LLAMA_70B, "p4de.24xlarge", 4).shard.link.kind == "nvlink"


def test_a_cached_prefix_fits_more_sequences_and_shortens_the_first_token():
    replica = engine()
    plain, shared = Workload(4096, 256), Workload(4096, 256, cached_prefix_tokens=3072)
    assert admission_limit(replica, shared)[0] > 3 * admission_limit(replica, plain)[0]
    plain_point, shared_point = (at_concurrency(replica, w, 100) for w in (plain, shared))
    assert shared_point.first_token_seconds < plain_point.first_token_seconds / 2
    assert shared_point.output_tokens_per_second > plain_point.output_tokens_per_second


def test_a_closed_loop_obeys_littles_law():
    point = at_concurrency(engine(), Workload(128, 512), 64)
    in_system = point.requests_per_second * (point.first_token_seconds + 511 * point.inter_token_seconds)
    assert in_system == pytest.approx(64, rel=1e-3)


def test_an_open_loop_carries_its_rate_until_the_replica_saturates():
    replica, workload = engine(), Workload(128, 512)
    light = at_request_rate(replica, workload, 5.0)
    assert not light.saturated and light.output_tokens_per_second == pytest.approx(5.0 * 512, rel=1e-3)
    full = at_concurrency(replica, workload, admission_limit(replica, workload)[0])
    over = at_request_rate(replica, workload, 1.5 * full.requests_per_second)
    assert over.saturated and over.output_tokens_per_second == pytest.approx(full.output_tokens_per_second)


def test_the_traffic_sets_the_replicas_and_an_slo_can_need_more():
    traffic = TrafficSpec(requests_per_second=30, mean_input_tokens=1024, mean_output_tokens=256)
    loose = service_estimate(*service(traffic=traffic), region="us-east-1")
    tight = service_estimate(*service(traffic=traffic, slo=LatencySlo(itl_ms=12)), region="us-east-1")
    assert loose.replicas == loose.replicas_for_traffic and loose.replicas_for_slo is None
    assert loose.at_traffic.output_tokens_per_second == pytest.approx(30 * 256 / loose.replicas, rel=1e-3)
    assert tight.replicas == tight.replicas_for_slo > tight.replicas_for_traffic
    assert tight.at_traffic.inter_token_seconds * 1000 <= 12
    assert tight.usd_per_million_output_tokens > loose.usd_per_million_output_tokens
    # The price per token follows from the replicas: 55.04/8 $/h per H100 replica.
    assert tight.usd_per_hour == pytest.approx(tight.replicas * 55.04 / 8)
    assert tight.usd_per_million_output_tokens == pytest.approx(tight.usd_per_hour / (30 * 256 * 3600) * 1e6)


def test_an_slo_below_what_one_request_gets_is_unreachable_and_says_why():
    traffic = TrafficSpec(requests_per_second=1)
    estimate = service_estimate(*service(traffic=traffic, slo=LatencySlo(itl_ms=2)), region="us-east-1")
    assert estimate.replicas_for_slo is None
    assert "ms per token after it on H100" in estimate.slo_unreachable
    assert estimate.replicas == estimate.replicas_for_traffic


def test_a_mig_slice_gets_its_share_of_bandwidth_compute_and_price():
    spec = ModelServiceSpec(
        name="small", model="meta-llama/Llama-3.2-3B-Instruct", pool="mig", mig_profile="3g.40gb",
        traffic=TrafficSpec(requests_per_second=1),
    )
    hardware = PoolHardware(NodePoolSpec(
        name="mig", instance_types=["p5.48xlarge"], max_nodes=1, gpu_sharing={"mode": "mig", "layout": {"3g.40gb": 2}},
    ))
    device = engine_for(spec, hardware).device
    assert device.bandwidth_bytes_per_second == pytest.approx(3350e9 * 4 / 8)
    assert device.peak_flops["bf16"] == pytest.approx(989e12 * 3 / 7)
    # 3 of 7 compute slices, 4 of 8 memory slices: the slice blocks half of a $6.88/h GPU.
    assert service_estimate(spec, hardware, region="us-east-1").usd_per_hour == pytest.approx(55.04 / 8 / 2)


def test_without_traffic_or_room_for_one_request_it_says_why():
    with pytest.raises(ValueError, match="states no traffic"):
        service_estimate(*service(), region="us-east-1")
    crowded = TrafficSpec(requests_per_second=1, mean_input_tokens=100_000, mean_output_tokens=30_000)
    with pytest.raises(ValueError, match="less than one 115000-token request"):
        service_estimate(*service(instance="g6.xlarge", max_model_len=131072, traffic=crowded), region="us-east-1")


def test_every_assumption_states_its_value_and_reason():
    assert all(a.name and a.value != "" and len(a.why) > 20 for a in ASSUMPTIONS)
    assert all(0 < a.value <= 1 for a in ASSUMPTIONS if "share" in a.name)
    assert not any(math.isnan(a.value) for a in ASSUMPTIONS if isinstance(a.value, float))


def test_one_token_outputs_carry_their_rate_until_the_step_budget_is_full():
    replica = engine("BAAI/bge-large-en-v1.5", "g6.xlarge", max_model_len=512)
    workload = Workload(256, 1)
    light = at_request_rate(replica, workload, 50.0)
    assert not light.saturated and light.requests_per_second == pytest.approx(50.0, rel=1e-3)
    assert light.inter_token_seconds is None   # no token follows the first
    full = at_concurrency(replica, workload, admission_limit(replica, workload)[0])
    assert at_request_rate(replica, workload, 2 * full.requests_per_second).saturated


def test_the_stated_constants_are_the_calibration_fit():
    """No stated constant moved 5% either way lowers the calibration loss by more than rounding can explain,
    and the tied and sourced ones are what the calibration says they are."""
    from inferstack.planning import calibrate
    from inferstack.planning.engine_step import STATED

    points = calibrate.counted_points()
    stated = calibrate.loss(STATED, points)
    for parameter in calibrate.fitted_parameters(points):
        for factor in (0.95, 1.05):
            moved = parameter.write(STATED, parameter.read(STATED) * factor)
            assert calibrate.loss(moved, points) > stated * 0.995, parameter.name
    assert STATED.bandwidth_share["w8a16-marlin"] == STATED.bandwidth_share["w4a16-marlin"]
    assert STATED.compute_share["w8a8-int8"] == STATED.compute_share["w8a8-fp8"]
    assert STATED.bandwidth_share["w8a8-fp8"] == STATED.bandwidth_share["w8a8-int8"] == STATED.bandwidth_share["16-bit"]


def test_at_full_load_the_binding_limit_is_named():
    replica = engine(max_num_seqs=64)
    workload = Workload(128, 512)
    cap, limit = admission_limit(replica, workload)
    assert (cap, limit) == (64, "max_num_seqs")
    assert at_concurrency(replica, workload, cap).limit == "max_num_seqs"
    assert at_concurrency(replica, workload, 200).limit == "max_num_seqs"
    assert at_concurrency(replica, workload, 10).limit == "load"


@pytest.mark.parametrize("prompt, budget, concurrency", [(1900, None, None), (2100, None, None), (128, 512, 596)])
def test_littles_law_holds_where_prompts_outgrow_the_step_budget(prompt, budget, concurrency):
    """Around the point where a prompt stops fitting beside the decode tokens the step mix must stay
    continuous, or the closed loop settles on a jump: requests in the replica = rate x time in it."""
    replica = engine(instance="p4de.24xlarge", max_num_batched_tokens=budget)
    workload = Workload(prompt, 128)
    load = concurrency or admission_limit(replica, workload)[0]
    point = at_concurrency(replica, workload, load)
    in_system = point.requests_per_second * (point.first_token_seconds + 127 * point.inter_token_seconds)
    assert in_system == pytest.approx(load, rel=1e-2)   # admitted and queued alike


def test_pipeline_stages_keep_batches_in_flight():
    """vLLM keeps one batch per pipeline stage in flight: the same GPUs split into 2 stages of TP 4 make
    about the tokens TP 8 makes, with a token every 2 stage steps."""
    tp8 = engine(LLAMA_70B, "p5.48xlarge", 8)
    pp2 = engine(LLAMA_70B, "p5.48xlarge", 4, pipeline_parallel=2)
    workload = Workload(1024, 256)
    assert pp2.shard.layers == 40 and pp2.pipeline_parallel == 2
    rates = [at_concurrency(e, workload, 128).output_tokens_per_second for e in (tp8, pp2)]
    assert rates[1] == pytest.approx(rates[0], rel=0.35)
    single = at_concurrency(pp2, workload, 1)
    assert single.inter_token_seconds == pytest.approx(2 * single.steps.mean_seconds)


def test_a_time_to_first_token_slo_needs_replicas_where_prompts_queue():
    workload = Workload(2048, 128)
    alone_ms = at_request_rate(engine(), workload, 1e-9).first_token_seconds * 1000
    traffic = TrafficSpec(requests_per_second=160, mean_input_tokens=2048, mean_output_tokens=128)
    loose = service_estimate(*service(traffic=traffic), region="us-east-1")
    tight = service_estimate(*service(traffic=traffic, slo=LatencySlo(ttft_ms=1.5 * alone_ms)), region="us-east-1")
    assert loose.at_traffic.first_token_seconds * 1000 > 1.5 * alone_ms   # prompts queue for chunk steps
    assert tight.replicas > loose.replicas and tight.slo_unreachable is None
    assert tight.at_traffic.first_token_seconds * 1000 <= 1.5 * alone_ms
    below_alone = service_estimate(
        *service(traffic=traffic, slo=LatencySlo(ttft_ms=0.5 * alone_ms)), region="us-east-1"
    )
    assert "to its first token" in below_alone.slo_unreachable and below_alone.replicas == loose.replicas


def test_a_time_sliced_share_gets_a_share_of_the_gpu_and_its_price():
    spec = ModelServiceSpec(
        name="small", model="meta-llama/Llama-3.2-3B-Instruct", pool="shared", traffic=TrafficSpec(requests_per_second=1),
    )
    hardware = PoolHardware(NodePoolSpec(
        name="shared", instance_types=["g6.xlarge"], max_nodes=1, gpu_sharing={"mode": "time_slicing", "replicas": 2},
    ))
    device = engine_for(spec, hardware).device
    assert device.bandwidth_bytes_per_second == pytest.approx(300e9 / 2)
    assert device.peak_flops["bf16"] == pytest.approx(121e12 / 2)
    estimate = service_estimate(spec, hardware, region="us-east-1")
    assert estimate.usd_per_hour == pytest.approx(estimate.replicas * 0.8048 / 2)
