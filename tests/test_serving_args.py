"""`vllm serve` / `vllm run-batch` command lines for vLLM 0.33, flag by flag."""

from __future__ import annotations

import pytest

from inferstack.serving.vllm_args import run_batch_argv, serve_argv
from inferstack.spec import ModelServiceSpec, NodePoolSpec
from inferstack.spec.pools import PoolHardware

H100 = PoolHardware(NodePoolSpec(name="h100", instance_types=["p5.48xlarge"], max_nodes=4, efa=True))
L4_SLICED = PoolHardware(
    NodePoolSpec(name="l4", instance_types=["g6.xlarge"], max_nodes=2, gpu_sharing={"mode": "time_slicing", "replicas": 4})
)
MIG = PoolHardware(
    NodePoolSpec(name="mig", instance_types=["p4de.24xlarge"], max_nodes=1, gpu_sharing={"mode": "mig", "layout": {"3g.40gb": 2}})
)


def model(**fields) -> ModelServiceSpec:
    return ModelServiceSpec(**{"name": "svc", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100", **fields})


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_a_16_bit_model_gets_the_exact_default_command_line():
    assert serve_argv(model(), H100, "/models/m") == [
        "vllm", "serve", "/models/m",
        "--served-model-name", "svc",
        "--dtype", "bfloat16",
        "--tensor-parallel-size", "1",
        "--pipeline-parallel-size", "1",
        "--max-model-len", "8192",
        "--gpu-memory-utilization", "0.92",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--port", "8000",
    ]


@pytest.mark.parametrize(
    ("checkpoint", "quantization"),
    [
        ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "awq"),
        ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "auto"),
        ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "gptq"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "int8"),
        ("RedHatAI/Meta-Llama-3.1-70B-Instruct-quantized.w4a16", "int4"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "fp8"),
    ],
)
def test_a_pre_quantized_checkpoint_gets_no_quantization_flag(checkpoint, quantization):
    """vLLM 0.33 vllm/config/model.py `_verify_quantization` reads the method from the checkpoint's
    quantization_config when --quantization is unset; for AWQ/GPTQ, AutoAWQConfig/AutoGPTQConfig
    (quantization/auto_awq.py, auto_gptq.py `override_quantization_method`, `get_quant_method`) then pick
    the Marlin kernel whenever `check_marlin_supported` allows (compute capability >= 7.5, group size
    -1/32/64/128). Passing the method adds nothing and a different one is refused, so none is passed."""
    tp = 4 if "72B" in checkpoint or "70B" in checkpoint else 1
    argv = serve_argv(model(model=checkpoint, quantization=quantization, tensor_parallel=tp), H100, "/m")
    assert "--quantization" not in argv


def test_online_fp8_on_a_16_bit_checkpoint_uses_the_per_tensor_shorthand():
    """vLLM 0.33 model_loader/weight_utils.py `get_quant_config`: a 16-bit checkpoint with
    `--quantization fp8` logs "--quantization fp8 is deprecated for online quantization; use
    --quantization fp8_per_tensor instead" and builds the same OnlineQuantizationConfig; config/quantization.py
    `_ONLINE_SHORTHANDS` defines fp8_per_tensor (static per-tensor FP8 weights), which on GPUs without FP8
    hardware falls back to MarlinFP8ScaledMMLinearKernel (quantization/online/fp8.py)."""
    argv = serve_argv(model(quantization="fp8"), H100, "/m")
    assert flag(argv, "--quantization") == "fp8_per_tensor"
    assert argv.count("--quantization") == 1


def test_a_model_given_by_architecture_states_its_stored_format():
    """An unknown checkpoint stored as W4A16 needs no flag either: vLLM reads its compressed-tensors config."""
    architecture = {"params_billion": 8, "layers": 32, "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8,
                    "head_dim": 128, "max_context": 32768}
    stored = {"quant_method": "compressed-tensors", "weight_bits": 4, "weight_type": "int", "group_size": 128}
    argv = serve_argv(
        model(model="acme/llama-w4a16", architecture=architecture, checkpoint_format=stored, quantization="int4"), H100, "/m"
    )
    assert "--quantization" not in argv


def test_kv_cache_dtype_limits_and_disabled_features():
    argv = serve_argv(
        model(kv_cache_dtype="fp8_e5m2", max_num_seqs=48, max_num_batched_tokens=4096, max_model_len=4096,
              enable_prefix_caching=False, enable_chunked_prefill=False, dtype="float16"),
        H100,
        "/m",
    )
    assert flag(argv, "--kv-cache-dtype") == "fp8_e5m2"
    assert flag(argv, "--max-num-seqs") == "48"
    assert flag(argv, "--max-num-batched-tokens") == "4096"
    assert flag(argv, "--dtype") == "float16"
    assert "--disable-prefix-caching" in argv and "--disable-chunked-prefill" in argv
    assert "--enable-prefix-caching" not in argv and "--no-enable-prefix-caching" not in argv


def test_tensor_parallel_size_equals_the_gpus_of_the_pod():
    argv = serve_argv(model(tensor_parallel=4), H100, "/m")
    assert flag(argv, "--tensor-parallel-size") == "4" and flag(argv, "--pipeline-parallel-size") == "1"


def test_time_sliced_gpus_divide_the_memory_share_by_the_pods_per_gpu():
    argv = serve_argv(model(model="Qwen/Qwen2.5-7B-Instruct-AWQ", quantization="awq", pool="l4", gpu_memory_utilization=0.9), L4_SLICED, "/m")
    assert flag(argv, "--gpu-memory-utilization") == "0.225"


def test_a_mig_slice_keeps_the_spec_utilization():
    argv = serve_argv(model(model="BAAI/bge-large-en-v1.5", pool="mig", mig_profile="3g.40gb", max_model_len=512), MIG, "/m")
    assert flag(argv, "--gpu-memory-utilization") == "0.92"


def test_embedding_models_run_as_pooling_runners():
    argv = serve_argv(model(model="Qwen/Qwen3-Embedding-0.6B", max_model_len=8192), H100, "/m")
    assert argv[argv.index("--runner"):argv.index("--runner") + 4] == ["--runner", "pooling", "--convert", "embed"]
    assert not any("prefix-caching" in a or "chunked-prefill" in a for a in argv)


def test_multi_node_leader_and_worker():
    spanning = model(model="meta-llama/Llama-3.1-70B-Instruct", tensor_parallel=8, pipeline_parallel=2)
    leader = serve_argv(spanning, H100, "/m", role="leader")
    worker = serve_argv(spanning, H100, "/m", role="worker")
    multi_node = [
        "--distributed-executor-backend", "mp",
        "--nnodes", "$(LWS_GROUP_SIZE)",
        "--node-rank", "$(LWS_WORKER_INDEX)",
        "--master-addr", "$(LWS_LEADER_ADDRESS)",
    ]
    assert leader[-len(multi_node) - 2:] == [*multi_node, "--port", "8000"]
    assert worker[-len(multi_node) - 1:] == [*multi_node, "--headless"]
    assert "--port" not in worker
    # TP x PP is the group's GPUs: 8 per node x 2 nodes.
    assert flag(leader, "--tensor-parallel-size") == "8" and flag(leader, "--pipeline-parallel-size") == "2"
    assert leader[:len(leader) - 2] == worker[:len(worker) - 1]


def test_roles_must_match_the_parallelism():
    with pytest.raises(ValueError, match="does not match the 1 node"):
        serve_argv(model(), H100, "/m", role="leader")
    with pytest.raises(ValueError, match="does not match the 2 node"):
        serve_argv(model(model="meta-llama/Llama-3.1-70B-Instruct", tensor_parallel=8, pipeline_parallel=2), H100, "/m")


def test_run_batch_takes_engine_flags_but_no_server_port():
    argv = run_batch_argv(model(quantization="fp8"), H100, "/models/m", input_path="/work/in.jsonl", output_path="/work/out.jsonl")
    assert argv[:8] == ["vllm", "run-batch", "-i", "/work/in.jsonl", "-o", "/work/out.jsonl", "--model", "/models/m"]
    assert flag(argv, "--served-model-name") == "svc" and flag(argv, "--quantization") == "fp8_per_tensor"
    assert "--port" not in argv
