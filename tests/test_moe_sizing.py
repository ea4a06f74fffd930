"""Sizing of mixture-of-experts, latent-attention and sliding-window models, worked by hand.

Architectures as their config.json states them (huggingface.co/<id>/blob/main/config.json):
- openai/gpt-oss-120b: 36 layers, hidden 2880, 64 heads, 8 KV heads of 64, 128 experts (4 per token) with
  intermediate size 2880, vocab 201088 untied, sliding_window 128 on half the layers (layer_types alternates
  sliding_attention / full_attention); quantization_config mxfp4 with self_attn, router, embed_tokens and
  lm_head left out (modules_to_not_convert). Model card: 116.83B parameters, 5.13B active.
- Qwen/Qwen3-30B-A3B: 48 layers, hidden 2048, 32 heads, 4 KV heads of 128, 128 experts (8 per token) of
  moe_intermediate_size 768, vocab 151936 untied, max_position_embeddings 40960; 30.5B parameters, 3.3B active.
- deepseek-ai/DeepSeek-V3: 61 layers (first_k_dense_replace 3), hidden 7168, kv_lora_rank 512,
  qk_rope_head_dim 64, 256 routed experts (8 per token) + 1 shared, moe_intermediate_size 2048, vocab 129280;
  quantization_config fp8 (e4m3, 128x128 blocks, dynamic activations); 671B parameters, 37B active.
MXFP4 (OCP Microscaling spec v1.0): blocks of 32 FP4 (E2M1) values sharing one 8-bit E8M0 scale, 4.25 bits a
weight. MLA KV cache: vLLM keeps `kv_lora_rank + qk_rope_head_dim` values per token and layer, unsplit by
tensor parallelism (vllm/v1/attention/backends/mla/common.py `get_kv_cache_shape` (num_blocks, block_size,
head_size) with head_size kv_lora_rank + qk_rope_head_dim).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from inferstack.planning.sizing import (
    COLLECTIVE_RESERVE_BYTES,
    RUNTIME_RESERVE_BYTES,
    fit,
    kv_bytes_per_token,
    kv_formula,
    weights_bytes,
)
from inferstack.spec import ModelArchitecture, ModelServiceSpec, NodePoolSpec, StackSpec, describe_validation_error
from inferstack.spec.pools import PoolHardware

GIB = 1024**3
H100 = PoolHardware(NodePoolSpec(name="h100", instance_types=["p5.48xlarge"], max_nodes=1))
H200 = PoolHardware(NodePoolSpec(name="h200", instance_types=["p5en.48xlarge"], max_nodes=1))
H100_BYTES = 81920 * 1024**2     # catalog gpus.json: 81920 MiB
H200_BYTES = 144384 * 1024**2


def service(model: str, **fields) -> ModelServiceSpec:
    return ModelServiceSpec(name="m", model=model, pool="p", **fields)


def test_gpt_oss_120b_holds_its_experts_in_mxfp4_and_the_rest_in_16_bits():
    experts = 36 * 128 * 3 * 2880 * 2880                       # layers x experts x (gate, up, down) x hidden x size
    assert experts == 114_661_785_600
    rest = 116_830_000_000 - experts                             # attention, router, embeddings, LM head
    expected = int(rest * 2 + experts * (0.5 + 1 / 32))          # 16-bit rest; FP4 + an 8-bit scale per 32
    model = service("openai/gpt-oss-120b", max_model_len=8192)
    assert weights_bytes(model) == expected == 65_250_502_400    # 60.77 GiB, not the 217.6 GiB of 16 bits
    assert round(weights_bytes(model) / GIB, 2) == 60.77


def test_gpt_oss_sliding_window_layers_keep_their_window_and_the_in_flight_tokens():
    """vLLM 0.33.0 v1/kv_cache_interface.py:918-950 (SlidingWindowSpec.max_admission_blocks_per_request): a window
    layer reserves cdiv(min(window - 1 + in-flight tokens, max_model_len), 16) + 1 blocks of a sequence; in flight
    are 2 x max_num_batched_tokens (vllm/config/vllm.py:587-609, async scheduling). The old count kept only the
    128-token window (36,900 bytes a token) and under-counted the reservation by 11%."""
    # 18 full layers keep every token: 2 (K, V) x 8 KV heads x 64 x 2 bytes = 2048 bytes a layer.
    # Between steps a window layer holds cdiv(127, 16) + 1 = 9 blocks = 144 tokens:
    # (18 x 131072 + 18 x 144) x 2048 / 131072 = 36,904.5 bytes a token, rounded up.
    model = service("openai/gpt-oss-120b", max_model_len=131072, max_num_seqs=64)
    assert kv_bytes_per_token(model) == -(-(18 * 131072 + 18 * 144) * 2048 // 131072) == 36_905
    assert kv_formula(model) == ("GQA: 2 x 36 layers x 8 KV heads x 64 x 2 bytes; 18 sliding-window layers hold 127 "
                                 "+ 2 x max_num_batched_tokens in-flight tokens and a block of a sequence, at most "
                                 "all of it")
    result = fit(model, H100)
    # On an H100 (8192 batched tokens): cdiv(127 + 2 x 8192, 16) + 1 = 1033 blocks = 16,528 tokens a window layer.
    per_token = -(-(18 * 131072 + 18 * 16_528) * 2048 // 131072)
    assert result.kv_bytes_per_token == per_token == 41_513
    # Reserve: runtime 1.5 GiB + one step's activations (8192 batched tokens x 2880 x 40 bytes) + float32
    # logits of 64 sequences over the 201088-token vocabulary. The H100 runs the OAI Triton MXFP4 kernel, whose
    # 64-multiple intermediate padding leaves 2880 as it is.
    reserve = RUNTIME_RESERVE_BYTES + 8192 * 2880 * 40 + 64 * 201088 * 4
    kv_cache = int(H100_BYTES * 0.92) - 65_250_502_400 - reserve
    assert (result.reserve_bytes_per_device, result.kv_cache_bytes_per_device) == (reserve, kv_cache)
    assert result.kv_tokens == kv_cache // 41_513 == 269_098
    assert result.max_concurrency == 269_098 // 131072 == 2        # on one H100, at the full context
    assert result.starts and not result.fits                        # 2 of the 64 stated sequences


def test_qwen3_30b_a3b_counts_every_expert_in_memory():
    experts = 48 * 128 * 3 * 2048 * 768
    assert experts == 28_991_029_248                                 # 95% of the 30.5B sit in experts
    model = service("Qwen/Qwen3-30B-A3B", max_model_len=32768, max_num_seqs=64)
    assert weights_bytes(model) == 30_500_000_000 * 2                # 16-bit: all experts, not the 3.3B active
    assert kv_bytes_per_token(model) == 2 * 48 * 4 * 128 * 2 == 98_304
    reserve = RUNTIME_RESERVE_BYTES + 8192 * 2048 * 40 + 64 * 151936 * 4
    kv_cache = int(H100_BYTES * 0.92) - 61_000_000_000 - reserve
    result = fit(model, H100)
    assert result.kv_cache_bytes_per_device == kv_cache
    assert result.max_concurrency == kv_cache // 98_304 // 32768 == 4


def test_deepseek_v3_latent_attention_caches_a_latent_per_layer_not_per_head():
    model = service("deepseek-ai/DeepSeek-V3", max_model_len=32768, max_num_seqs=64, tensor_parallel=8)
    latent = 61 * (512 + 64) * 2                                     # layers x (latent + rope key) x 2 bytes
    heads_formula = 2 * 61 * 128 * 192 * 2                           # what the multi-head formula would say
    assert kv_bytes_per_token(model) == latent == 70_272
    assert heads_formula // latent == 85                             # the old result was that many times too large
    assert kv_formula(model) == "MLA latent: 61 layers x (512 + 64) values x 2 bytes"
    # FP8 weights, 16-bit embedding and LM head: 129280 x 7168 x 2 matrices.
    embeddings = 129280 * 7168 * 2
    assert weights_bytes(model) == embeddings * 2 + (671_000_000_000 - embeddings) * 1 == 672_853_358_080
    result = fit(model, H200)
    # Tensor parallel 8 splits weights, activations and logits, but every rank holds the whole latent. An H200
    # shows vLLM 141 GiB, under the 160 GiB of its 16384-token default: 8192 batched tokens.
    reserve = RUNTIME_RESERVE_BYTES + COLLECTIVE_RESERVE_BYTES + 8192 * 7168 * 40 // 8 + 64 * 129280 * 4 // 8
    kv_cache = int(H200_BYTES * 0.92) - 672_853_358_080 // 8 - reserve
    assert result.kv_bytes_per_token_per_device == 70_272
    assert result.kv_cache_bytes_per_device == kv_cache
    assert result.max_concurrency == kv_cache // 70_272 // 32768 == 22   # on one 8-GPU H200 node


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"experts": 8}, "an MoE architecture needs experts_per_token, moe_intermediate_size"),
        ({"attention": "mla"}, "an MLA architecture needs kv_lora_rank, qk_rope_head_dim"),
        ({"experts": 8, "experts_per_token": 9, "moe_intermediate_size": 64}, "experts_per_token 9 is more than experts 8"),
        ({"sliding_window": 128, "sliding_window_layers": 40}, "sliding_window_layers 40 is more than layers 32"),
    ],
)
def test_an_incomplete_architecture_is_refused_with_what_it_lacks(fields, says):
    dense = {"params_billion": 8, "layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8,
             "head_dim": 128, "max_context": 8192}
    with pytest.raises(ValidationError) as caught:
        StackSpec.model_validate({
            "environment": "t",
            "node_pools": [{"name": "p", "instance_types": ["p5.48xlarge"], "max_nodes": 1,
                            "capacity": {"on_demand_base": 1}}],
            "models": [{"name": "m", "model": "acme/custom", "pool": "p", "architecture": {**dense, **fields}}],
        })
    error = describe_validation_error(caught.value, StackSpec)
    assert error.path == "models[0].architecture"
    assert says in error.problem and "config.json" in error.fix or "at most" in error.fix


def test_an_architecture_given_in_the_spec_sizes_like_the_catalog_entry():
    from inferstack.catalog.models import model_facts

    stated = ModelArchitecture(**model_facts("openai/gpt-oss-120b"), vocab_size=201088)
    model = service("acme/gpt-oss-copy", architecture=stated, max_model_len=8192,
                    checkpoint_format={"quant_method": "mxfp4", "weight_bits": 4, "weight_type": "float",
                                       "group_size": 32, "scale_bits": 8, "applies_to": "experts"})
    assert weights_bytes(model) == weights_bytes(service("openai/gpt-oss-120b", max_model_len=8192))


def test_a_moe_step_reads_only_the_experts_its_tokens_touch():
    """One decoding token of gpt-oss-120b routes to 4 of 128 experts per layer: the step reads every dense
    weight and 4/128 of the expert weights; n tokens, routed uniformly, touch 1 - (124/128)^n of them. The
    matmul work is 2 x the 5.13B active parameters a token, not 2 x 116.83B."""
    from inferstack.planning.service_performance import engine_for
    from inferstack.planning.sizing import expert_weights_bytes

    model = service("openai/gpt-oss-120b", max_model_len=8192, max_num_seqs=64)
    experts = int(114_661_785_600 * (0.5 + 1 / 32))                  # MXFP4 experts, as stored
    assert expert_weights_bytes(model) == experts == 60_914_073_600
    shard = engine_for(model, H100).shard
    dense = 65_250_502_400 - experts                                  # attention, router, embeddings in 16 bits
    assert shard.weights_read(1) == dense + experts * 4 / 128
    assert shard.weights_read(64) == pytest.approx(dense + experts * (1 - (124 / 128) ** 64))
    routed_active = 114_661_785_600 * 4 / 128
    assert shard.linear_flops_per_token == pytest.approx(2 * (5.13e9 - routed_active))
    assert shard.experts.flops_per_assignment == pytest.approx(2 * 114_661_785_600 / 128)
    dense_model = engine_for(service("meta-llama/Llama-3.1-8B-Instruct", max_model_len=8192), H100).shard
    assert dense_model.weights_read(1) == dense_model.weights_read(64) == dense_model.weights_bytes


def test_nvfp4_llama_3_3_70b_takes_4_5_bits_a_weight_and_keeps_embeddings_in_16():
    """NVFP4 (NVIDIA, 'Introducing NVFP4'): FP4 E2M1 values in blocks of 16 sharing an FP8 E4M3 scale, plus one
    FP32 scale per tensor (negligible): 4 + 8/16 = 4.5 bits. Llama-3.3-70B config.json: vocab 128256, hidden 8192,
    untied; 70.6B parameters in the catalog (70.55B on the model card)."""
    model = service("nvidia/Llama-3.3-70B-Instruct-FP4")
    embeddings = 128256 * 8192 * 2
    linear = 70_600_000_000 - embeddings
    assert weights_bytes(model) == int(embeddings * 2 + linear * (0.5 + 1 / 16))
    result = fit(model, H100)
    assert result.weights_bytes_per_device == weights_bytes(model)       # one GPU
