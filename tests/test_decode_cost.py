"""The memory-bandwidth model of decode, checked against figures worked by hand."""

from __future__ import annotations

import pytest

from inferstack import sizing
from inferstack.decode_cost import (
    ASSUMPTIONS,
    BANDWIDTH_EFFICIENCY,
    decode_cost,
    device_bandwidth_gbs,
    service_decode_cost,
)
from inferstack.spec.models import ModelServiceSpec, NodePoolSpec, TrafficSpec
from inferstack.spec.pools import PoolHardware


def test_llama_8b_fp8_on_one_l40s_by_hand():
    # Each step reads 8.0 GB of weights + 64 sequences x (1024 + 256/2) tokens x 131072 B
    # = 8.0e9 + 9.664e9 = 17.664e9 B at 864 GB/s x 0.7 = 604.8 GB/s: 29.21 ms, so 64 / 0.02921 = 2191 tokens/s.
    # 2 requests/s x 256 tokens = 512 tokens/s: one g6e.xlarge at $1.861/h, 1.861 / (512 x 3600) x 1e6 = $1.0097.
    estimate = decode_cost(
        weights_bytes_per_device=8_000_000_000, kv_bytes_per_token_per_device=131_072, kv_tokens=1_000_000,
        bandwidth_gbs=864, max_num_seqs=64, replica_usd_per_hour=1.861,
        traffic=TrafficSpec(requests_per_second=2, mean_input_tokens=1024, mean_output_tokens=256),
    )
    assert (estimate.batch, estimate.batch_limit, estimate.replicas) == (64, "max_num_seqs", 1)
    assert estimate.step_seconds == pytest.approx(0.029206, rel=1e-4)
    assert estimate.tokens_per_second == pytest.approx(2191.3, rel=1e-4)
    assert estimate.usd_per_million_output_tokens == pytest.approx(1.0097, rel=1e-4)
    assert estimate.usd_per_million_output_tokens_at_full_load == pytest.approx(0.23590, rel=1e-4)


def test_llama_70b_awq_tensor_parallel_4_on_h100s_by_hand():
    # Per device: a quarter of 40 GB of weights, 2 of 8 KV heads (81920 B a token) and 488281 KV tokens,
    # which hold 488281 // 1280 = 381 full requests (< max_num_seqs 1024). A step reads
    # 10e9 + 381 x 1152 x 81920 = 45.956e9 B at 3350 GB/s x 0.7 = 2345 GB/s: 19.60 ms, 19441 tokens/s.
    # 100 requests/s x 256 = 25600 tokens/s needs 2 replicas at 55.04 x 4/8 = $27.52/h each:
    # 55.04 / (25600 x 3600) x 1e6 = $0.5972.
    estimate = decode_cost(
        weights_bytes_per_device=10_000_000_000, kv_bytes_per_token_per_device=81_920, kv_tokens=488_281,
        bandwidth_gbs=3350, max_num_seqs=1024, replica_usd_per_hour=27.52,
        traffic=TrafficSpec(requests_per_second=100, mean_input_tokens=1024, mean_output_tokens=256),
    )
    assert (estimate.batch, estimate.batch_limit, estimate.replicas) == (381, "kv_cache", 2)
    assert estimate.step_seconds == pytest.approx(0.019597, rel=1e-4)
    assert estimate.tokens_per_second == pytest.approx(19441, rel=1e-4)
    assert estimate.usd_per_hour == pytest.approx(55.04)
    assert estimate.usd_per_million_output_tokens == pytest.approx(0.59722, rel=1e-4)


def test_a_service_is_costed_from_sizing_and_its_pool():
    model = ModelServiceSpec(
        name="chat", model="meta-llama/Llama-3.1-8B-Instruct", quantization="fp8", pool="l40s",
        traffic=TrafficSpec(requests_per_second=2),
    )
    hardware = PoolHardware(NodePoolSpec(name="l40s", instance_types=["g6e.xlarge"], max_nodes=1))
    fit = sizing.fit(model, hardware)
    estimate = service_decode_cost(model, hardware)
    by_hand = decode_cost(
        weights_bytes_per_device=fit.weights_bytes_per_device, kv_bytes_per_token_per_device=fit.kv_bytes_per_token_per_device,
        kv_tokens=fit.kv_tokens, bandwidth_gbs=864, max_num_seqs=256, replica_usd_per_hour=1.861, traffic=model.traffic,
    )
    assert estimate == by_hand
    assert estimate.assumptions == ASSUMPTIONS and BANDWIDTH_EFFICIENCY in estimate.assumptions


def test_a_mig_slice_gets_its_memory_slices_share_of_bandwidth_and_price():
    model = ModelServiceSpec(
        name="small", model="meta-llama/Llama-3.2-3B-Instruct", pool="mig", mig_profile="3g.40gb",
        traffic=TrafficSpec(requests_per_second=1),
    )
    hardware = PoolHardware(NodePoolSpec(
        name="mig", instance_types=["p5.48xlarge"], max_nodes=1, gpu_sharing={"mode": "mig", "layout": {"3g.40gb": 2}},
    ))
    assert device_bandwidth_gbs(hardware, "3g.40gb") == 3350 * 4 / 8
    # 3 of 7 compute slices, 4 of 8 memory slices: the slice blocks half of a $6.88/h GPU.
    assert service_decode_cost(model, hardware).usd_per_hour == pytest.approx(55.04 / 8 / 2)


def test_every_assumption_states_its_value_and_reason():
    assert all(a.name and a.value != "" and len(a.why) > 20 for a in ASSUMPTIONS)


def test_without_traffic_or_room_for_one_request_it_says_why():
    model = ModelServiceSpec(name="quiet", model="meta-llama/Llama-3.2-3B-Instruct", pool="l4")
    hardware = PoolHardware(NodePoolSpec(name="l4", instance_types=["g6.xlarge"], max_nodes=1))
    with pytest.raises(ValueError, match="states no traffic"):
        service_decode_cost(model, hardware)
    with pytest.raises(ValueError, match="holds 1000 tokens, less than one 1280-token request"):
        decode_cost(weights_bytes_per_device=1, kv_bytes_per_token_per_device=1, kv_tokens=1000, bandwidth_gbs=1,
                    max_num_seqs=1, replica_usd_per_hour=1, traffic=TrafficSpec(requests_per_second=1))
