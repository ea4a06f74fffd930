"""Exact `vllm serve` / `vllm run-batch` command lines for the pinned vLLM (0.33) from a model service spec.

Pure functions, so the flags can be checked without a cluster. Flag spellings follow vLLM 0.33's
`EngineArgs`: boolean features use its `--enable-x` / `--disable-x` pairs, and multi-node replicas
use the multiprocessing executor with LeaderWorkerSet's environment (`$(VAR)` is expanded by the
kubelet in container args). With `--nnodes`, vLLM derives each node's first data-parallel rank from
`--node-rank` and reaches the leader's data-parallel coordinator at `--master-addr`
(`EngineArgs.create_engine_config`, vllm/engine/arg_utils.py).
"""

from __future__ import annotations

from typing import Literal

from inferstack.planning.disaggregation import kv_transfer_args, served_name
from inferstack.planning.kv_offload import kv_offload_args
from inferstack.planning.lora import lora_args
from inferstack.planning.quantization import vllm_quantization
from inferstack.planning.speculative import speculative_args
from inferstack.spec import ModelServiceSpec, MpsSharing, TimeSlicing
from inferstack.spec.pools import PoolHardware

VLLM_PORT = 8000
# A decode engine of a disaggregated service listens here, behind the llm-d routing sidecar on VLLM_PORT
# (llm-d-router v0.10.0 pkg/sidecar/proxy/options.go: --port 8000, --model-server-port 8200).
DECODE_ENGINE_PORT = 8200
Role = Literal["single", "leader", "worker"]


def gpu_memory_utilization(model: ModelServiceSpec, hardware: PoolHardware) -> float:
    """Share of the whole GPU this process may take: on time-sliced or MPS GPUs, the spec's share divided
    by the pods per GPU, so co-located replicas all fit (vLLM measures against the full device)."""
    sharing = hardware.spec.gpu_sharing
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        return round(model.gpu_memory_utilization / sharing.replicas, 4)
    return model.gpu_memory_utilization


def _data_and_expert_parallel_args(model: ModelServiceSpec) -> list[str]:
    """Data-parallel ranks (all of the replica's, and this node's) and expert parallelism as the service resolves it
    (stated, or auto: `ModelServiceSpec.expert_parallel_basis`); nothing for the defaults."""
    args = []
    if model.data_parallel > 1:
        args += [
            "--data-parallel-size", str(model.data_parallel),
            "--data-parallel-size-local", str(model.data_parallel_per_node),
        ]
    if model.resolved_expert_parallel:
        args.append("--enable-expert-parallel")
    if model.all2all_backend is not None:
        args += ["--all2all-backend", model.all2all_backend]
    return args


def engine_args(model: ModelServiceSpec, hardware: PoolHardware, *, role: Role = "single") -> list[str]:
    """Engine flags shared by `vllm serve` and `vllm run-batch`."""
    args = ["--served-model-name", served_name(model), "--dtype", model.dtype]
    method = vllm_quantization(model)  # None for a pre-quantized checkpoint: vLLM reads its config
    if method is not None:
        args += ["--quantization", method]
    if model.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", model.kv_cache_dtype]
    if model.attention_backend is not None:
        args += ["--attention-backend", model.attention_backend]
    args += [
        "--tensor-parallel-size", str(model.tensor_parallel),
        "--pipeline-parallel-size", str(model.pipeline_parallel),
        *_data_and_expert_parallel_args(model),
        "--max-model-len", str(model.max_model_len),
        "--gpu-memory-utilization", str(gpu_memory_utilization(model, hardware)),
    ]
    if model.max_num_seqs is not None:
        args += ["--max-num-seqs", str(model.max_num_seqs)]
    if model.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(model.max_num_batched_tokens)]
    if model.resolved_architecture.task == "embed":
        # Pooling models: prefix caching and chunked prefill are left to vLLM, which turns them off
        # for encoder-only attention.
        args += ["--runner", "pooling", "--convert", "embed"]
    else:
        args.append("--enable-prefix-caching" if model.enable_prefix_caching else "--disable-prefix-caching")
        args.append("--enable-chunked-prefill" if model.enable_chunked_prefill else "--disable-chunked-prefill")
    args += [*speculative_args(model), *lora_args(model), *kv_offload_args(model), *kv_transfer_args(model)]
    if role != "single":
        args += [
            "--distributed-executor-backend", "mp",
            "--nnodes", "$(LWS_GROUP_SIZE)",
            "--node-rank", "$(LWS_WORKER_INDEX)",
            "--master-addr", "$(LWS_LEADER_ADDRESS)",
        ]
    return args


def serve_argv(model: ModelServiceSpec, hardware: PoolHardware, model_path: str, *, role: Role = "single") -> list[str]:
    """`vllm serve` for one pod: the whole replica ("single"), or the leader / a headless worker of a group."""
    if (role == "single") == model.multi_node:
        raise ValueError(f"role {role!r} does not match the {model.nodes_per_replica} node(s) of a {model.name} replica")
    argv = ["vllm", "serve", model_path, *engine_args(model, hardware, role=role), *loader_args(model)]
    if role == "worker":
        return [*argv, "--headless"]
    return [*argv, "--port", str(engine_port(model))]


def engine_port(model: ModelServiceSpec) -> int:
    """Where vLLM itself listens: behind the routing sidecar on a decode engine, else the service port."""
    return DECODE_ENGINE_PORT if model.pd_role == "decode" else VLLM_PORT


def loader_args(model: ModelServiceSpec) -> list[str]:
    """How vLLM reads the weights: by default from the local path it is given (the NVMe cache); for s3_stream,
    the Run:ai streamer from the s3:// URI given as the model. vLLM would switch `auto` to the streamer for an
    object URI itself and refuses any other format but modelexpress / runai_streamer(_sharded) there
    (vllm/config/vllm.py, the model_weights check); the flag is explicit so the command says what it does.
    No --model-loader-extra-config: its concurrency (one of the only keys the loader accepts: distributed,
    concurrency, memory_limit, vllm/model_executor/model_loader/runai_streamer_loader.py) keeps the streamer's
    default."""
    return ["--load-format", "runai_streamer"] if model.weight_loader == "s3_stream" else []


def run_batch_argv(
    model: ModelServiceSpec, hardware: PoolHardware, model_path: str, *, input_path: str, output_path: str
) -> list[str]:
    """`vllm run-batch` over an OpenAI batch file (JSONL); requests must name the served model.

    run-batch takes the same engine flags as `vllm serve`, so the engine keeps the model's parallel layout: vLLM
    0.33's `run-batch` subcommand parses with `make_arg_parser` (vllm/entrypoints/cli/run_batch.py:62), which adds
    `AsyncEngineArgs.add_cli_args` (vllm/entrypoints/launchers/run_batch.py:294-297), and `main` builds its engine from those args
    (run_batch.py:1104, `build_async_engine_client`, whose `AsyncEngineArgs.from_cli_args(args)` is
    vllm/entrypoints/launchers/api_server/entry.py:52). One process on one node drives tensor x pipeline GPUs per
    data-parallel rank (`ParallelConfig.world_size`, vllm/config/parallel.py:964-967) and, without --nnodes, the
    --data-parallel-size-local ranks, all of --data-parallel-size by default (vllm/engine/arg_utils.py:2486-2535):
    `model` is one node's engine (batch_model), whose pod requests exactly that many GPUs."""
    if model.multi_node:
        raise ValueError(f"{model.name}: batch jobs run on one node, a replica takes {model.nodes_per_replica}")
    return ["vllm", "run-batch", "-i", input_path, "-o", output_path, "--model", model_path, *engine_args(model, hardware)]
