"""Mixture-of-experts steps as vLLM 0.33 runs them: which grouped-GEMM kernel runs the experts per GPU
generation, the tile padding of each expert's tokens, expert-parallel imbalance, the data-parallel token
exchange, and MLA's compute-bound decode attention."""

from __future__ import annotations

import math

import pytest

from inferstack.planning.engine_step import MOE_TILE_ROWS, MOE_TILE_ROWS_ABOVE, STATED, RoutedExperts, step_time
from inferstack.planning.load import Workload, at_concurrency
from inferstack.planning.quantization import moe_kernel
from inferstack.planning.service_performance import decode_attention_flops, engine_for
from inferstack.spec import ModelServiceSpec, NodePoolSpec
from inferstack.spec.pools import PoolHardware


def service(model: str, instance: str, **fields) -> tuple[ModelServiceSpec, PoolHardware]:
    spec = ModelServiceSpec(name="svc", model=model, pool="gpu", **fields)
    return spec, PoolHardware(NodePoolSpec(name="gpu", instance_types=[instance], max_nodes=1))


@pytest.mark.parametrize("model, instance, family, peak", [
    # vllm 0.33.0 fused_moe/oracle/mxfp4.py:402-436 and catalog/mxfp4_padding.json: Marlin below SM90, the OAI
    # Triton kernel on SM90, FlashInfer TRT-LLM MXFP4 x BF16 on SM100, all on 16-bit activations.
    ("openai/gpt-oss-120b", "p4de.24xlarge", "marlin-w4a16", "bf16"),
    ("openai/gpt-oss-120b", "p5.48xlarge", "oai-triton", "bf16"),
    ("openai/gpt-oss-120b", "p6-b200.48xlarge", "flashinfer", "bf16"),
    # oracle/fp8.py:88-132: Triton FP8 W8A8 on Hopper (and SM89) under tensor parallelism, FlashInfer first on
    # SM100, Marlin W8A16 without FP8 tensor cores (fp8.py:757-758).
    ("Qwen/Qwen3-235B-A22B-FP8", "p5.48xlarge", "triton", "fp8"),
    ("Qwen/Qwen3-30B-A3B-FP8", "g6e.48xlarge", "triton", "fp8"),
    ("Qwen/Qwen3-235B-A22B-FP8", "p4de.24xlarge", "marlin-w8a16", "bf16"),
    ("Qwen/Qwen3-235B-A22B-FP8", "p6-b200.48xlarge", "flashinfer", "fp8"),
    # oracle/unquantized.py:68-94: Triton on SM90 (FlashInfer moved behind it), FlashInfer TRT-LLM on SM100.
    ("Qwen/Qwen3-30B-A3B", "p5.48xlarge", "triton", "bf16"),
    ("Qwen/Qwen3-30B-A3B", "p6-b200.48xlarge", "flashinfer", "bf16"),
])
def test_the_experts_run_on_the_kernel_vllm_picks_for_the_format_and_generation(model, instance, family, peak):
    spec, hardware = service(model, instance, tensor_parallel=8 if "235B" in model or "120b" in model else 1)
    kernel = moe_kernel(spec, hardware.gpu)
    assert (kernel.family, kernel.peak) == (family, peak)
    assert engine_for(spec, hardware).shard.experts.family == family


def test_tile_rows_follow_vllms_default_config():
    """vllm 0.33.0 model_executor/layers/fused_moe/fused_moe.py get_default_config: for bf16 and per-tensor FP8
    (lines 1371-1380) BLOCK_SIZE_M is 16 for M <= 32, 32 for M <= 96, 64 for M <= 512, else 128; for block-wise
    FP8 (lines 1344-1352) 16 for M <= 64, else 64."""
    assert MOE_TILE_ROWS == ((32, 16), (96, 32), (512, 64)) and MOE_TILE_ROWS_ABOVE == 128
    sixteen_bit, block_fp8 = _experts(), _experts(block_fp8=True)
    assert [sixteen_bit.tile_rows(m) for m in (32, 33, 96, 97, 512, 513)] == [16, 32, 32, 64, 64, 128]
    assert [block_fp8.tile_rows(m) for m in (64, 65, 100000)] == [16, 64, 64]
    spec, hardware = service("Qwen/Qwen3-235B-A22B-FP8", "p5.48xlarge", tensor_parallel=8)
    assert engine_for(spec, hardware).shard.experts.block_fp8


def _experts(**fields) -> RoutedExperts:
    base = dict(weights_bytes=1, flops_per_assignment=1.0, experts=128, per_token=8, token_sources=1, devices=8,
                expert_parallel=False, moe_layers=1, family="triton", peak="bf16")
    return RoutedExperts(**{**base, **fields})


def test_each_touched_expert_computes_at_least_one_tile():
    """moe_align_block_size pads every expert's tokens up to BLOCK_SIZE_M: one decoding token routed to 8 of 128
    experts computes about 8 tiles of 16 rows, not 8 rows; a large step wastes about half a tile an expert."""
    experts = _experts()
    one = experts.computed_assignments(1)
    assert 8 * 16 * 0.95 < one < 8 * 16 * 1.05
    big = experts.computed_assignments(8192)            # 512 tokens an expert, 128-row tiles
    assert big == pytest.approx(8192 * 8 + 128 * 64, rel=0.01)


def test_expert_parallel_steps_wait_for_the_busiest_gpu():
    """Tokens routed independently reach each GPU's experts as a Poisson count: the step waits for the busiest of n
    GPUs, about sqrt(2 ln n) standard deviations above the mean (EXPERT_IMBALANCE)."""
    sliced = _experts()
    whole = _experts(expert_parallel=True)
    tokens = 256
    mean_per_gpu = tokens * 8 / 8
    assert whole.computed_assignments(tokens) == pytest.approx(
        sliced.computed_assignments(tokens) / 8 * (1 + math.sqrt(2 * math.log(8) / mean_per_gpu))
    )


def test_data_parallel_moe_layers_gather_every_ranks_tokens():
    """vLLM's default all2all backend, allgather_reducescatter (vllm 0.33.0 config/parallel.py, all2all_backends.json):
    each MoE layer all-gathers the DP ranks' hidden states and reduce-scatters the outputs."""
    spec, hardware = service("deepseek-ai/DeepSeek-R1", "p5en.48xlarge", tensor_parallel=1, data_parallel=8,
                             max_model_len=8192)
    engine = engine_for(spec, hardware)
    step = step_time(engine.shard, engine.device, STATED, decoding=64, mean_context=2000, prompt_tokens=0,
                     prompt_attended_context=0, running=64)
    link = engine.shard.link
    payload = 64 * 7 * 7168 * 2
    per_call = STATED.all_reduce_seconds[link.kind] + payload / (link.bytes_per_second * STATED.link_share[link.kind])
    assert step.all_reduce == pytest.approx(2 * 58 * per_call)


def test_mla_decode_attention_is_bound_by_its_flops():
    """MLA decode scores every query head over the cached latent and RoPE key (kv_lora_rank + qk_rope_head_dim) and
    sums over the latent (kv_lora_rank). Under data-parallel attention each GPU runs all 128 heads over 576 cached
    values a token and layer: a compute-bound attention where GQA's is a read (FlashMLA README: 660 TFLOPS
    compute-bound on H800). At TP 8, 16 heads a GPU, the read still binds."""
    sliced, _ = service("deepseek-ai/DeepSeek-R1", "p5en.48xlarge", tensor_parallel=8, max_model_len=8192)
    assert decode_attention_flops(sliced, 61) == 2 * 61 * 16 * (2 * 512 + 64)
    spec, hardware = service("deepseek-ai/DeepSeek-R1", "p5en.48xlarge", tensor_parallel=1, data_parallel=8,
                             max_model_len=8192)
    engine = engine_for(spec, hardware)
    step = step_time(engine.shard, engine.device, STATED, decoding=256, mean_context=4000, prompt_tokens=0,
                     prompt_attended_context=0, running=256)
    kv_read = 256 * engine.shard.kv.over(4000) / (
        engine.device.bandwidth_bytes_per_second * STATED.kv_bandwidth_share
    )
    flops_bound = 256 * 4000 * engine.shard.decode_attention_flops_per_token_and_context / (
        engine.device.peak_flops["bf16"] * STATED.prompt_attention_share
    )
    assert step.kv_reads == pytest.approx(flops_bound) and flops_bound > 1.4 * kv_read


def test_a_backlog_of_short_prompts_fills_the_steps_room_instead_of_queueing_behind_chunk_steps():
    """vLLM's scheduler fills a step's max_num_batched_tokens with waiting prompts (v1/core/sched/scheduler.py), so
    the prefill queue's load is the prompts' share of that room: 1,000 requests of 128 prompt tokens and 4 output
    tokens wait a few steps for their first token, not hundreds."""
    spec, hardware = service("openai/gpt-oss-20b", "p5.48xlarge", max_model_len=2048)
    engine = engine_for(spec, hardware)
    point = at_concurrency(engine, Workload(128, 4), 1000)
    assert point.steps.prefill_load < 1
    assert point.first_token_seconds < 1000 * point.steps.mean_seconds
