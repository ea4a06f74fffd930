"""Expert and data parallelism for MoE services: sizing per GPU for the TP x DP x EP layout, the exact vLLM 0.33
flags, LeaderWorkerSet groups across nodes, and every refusal (issue 14, item 4).

Upstream rules encoded here, read from the vLLM 0.33.0 wheel (pip download vllm==0.33.0):
- vllm/model_executor/layers/fused_moe/config.py, `FusedMoEParallelConfig.make`: MoE layers shard over all
  tensor_parallel x data_parallel GPUs ("flatten_tp_across_dp_and_pcp"); without expert parallelism every
  expert is sliced that many ways, with it each GPU owns whole experts (ep_size = tp x dp).
- vllm/engine/arg_utils.py, `EngineArgs.add_cli_args`: --data-parallel-size (-dp, line 1240),
  --data-parallel-size-local (-dpl, 1259), --enable-expert-parallel (-ep, 1305), --all2all-backend (1318),
  --master-addr (1175), --nnodes (1177), --node-rank (1178). `create_engine_config` (~2390-2445): with
  --nnodes > 1 the backend must be mp, nnodes must divide the world size dp x pp x tp, and a node's local
  ranks are (world / nnodes) / (pp x tp).
- vllm/entrypoints/cli/serve.py: --headless starts no API server; the leader's API server fronts every rank.
- vllm/config/parallel.py: the `All2AllBackend` Literal (ALL2ALL_UPSTREAM below); "pplx" and "naive" are
  mapped to allgather_reducescatter in `__post_init__` ("has been removed"), "passthrough" is removed from the
  CLI choices in add_cli_args, "mori_*" assert ROCm gfx942/gfx950, "flashinfer_all2allv" is a deprecated alias.
- DeepEP's internode kernels need NVSHMEM IBGDA, which EFA lacks (deepseek-ai/DeepEP#369, vllm-project/vllm#27898).
- deepep_v2 does not cross EFA nodes here (issue 25 item 10): vllm/distributed/device_communicators/all2all.py
  `DeepEPV2All2AllManager._check_gin_support` (lines 1074-1100) raises "DeepEPv2 requires NCCL GIN" when the EP
  group's communicator has no GIN backend; over EFA that backend is aws-ofi-nccl's GIN plugin (v1.21.0
  doc/gin-getting-started.md: NCCL 2.31.2+, GDRCopy 2.5+), whose init fails without a GDRCopy handle
  (src/rdma/gin/nccl_ofi_gin_api.cpp lines 62-73), i.e. without the gdrdrv module the EKS NVIDIA AMIs do not load
  (awslabs/amazon-eks-ami#2736: opt-in build variable, default false). Only allgather_reducescatter crosses EFA.
"""

from __future__ import annotations

import copy
import json
import typing
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from kube_validation import assert_valid
from pydantic import ValidationError

from inferstack.catalog.all2all_backends import ALL2ALL_BACKENDS
from inferstack.cli import main
from inferstack.planning.engine_step import RoutedExperts, Shard, Windowed
from inferstack.planning.service_performance import engine_for, service_estimate, workload_of
from inferstack.planning.load import at_request_rate
from inferstack.planning.sizing import (
    COLLECTIVE_RESERVE_BYTES,
    RUNTIME_RESERVE_BYTES,
    experts_per_device,
    fit,
    parallel_layout,
    weights_bytes,
)
from inferstack.serving.vllm_args import engine_args, serve_argv
from inferstack.spec import (
    All2AllBackend, ModelServiceSpec, NodePoolSpec, SpecError, StackSpec, describe_validation_error,
)
from inferstack.spec.pools import PoolHardware
from inferstack.validation import validate

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference" / "vllm-and-hardware.md"
H200 = PoolHardware(NodePoolSpec(name="h200", instance_types=["p5en.48xlarge"], max_nodes=2, efa=True))
H200_BYTES = 144384 * 1024**2              # catalog gpus.json: 144384 MiB
ALL2ALL_UPSTREAM = {
    "naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2", "mori_high_throughput",
    "mori_low_latency", "moonep", "nixl_ep", "allgather_reducescatter", "flashinfer_all2allv",
    "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided", "passthrough",
}
FLAGS_FROM_THE_WHEEL = {
    "--data-parallel-size-local", "--all2all-backend", "--nnodes", "--node-rank", "--master-addr", "--headless",
}

# DeepSeek-V3 (config.json): 61 layers, the first 3 dense, 256 routed experts of moe_intermediate_size 2048 on
# hidden 7168; FP8 linear layers, 16-bit embedding and LM head (672,853,358,080 bytes, tests/test_moe_sizing.py).
ROUTED = 58 * 256 * 3 * 7168 * 2048        # routed expert parameters, one byte each in FP8
DENSE = 672_853_358_080 - ROUTED            # attention, router, shared experts, dense layers, embeddings


def deepseek(**fields) -> ModelServiceSpec:
    return ModelServiceSpec(
        name="deepseek", model="deepseek-ai/DeepSeek-V3", pool="h200", max_model_len=32768, max_num_seqs=32,
        kv_cache_dtype="fp8", **fields,
    )


WIDE = dict(data_parallel=16, data_parallel_local=8, expert_parallel=True)


# ------------------------------------------------------------------------------------------------- sizing


def test_wide_expert_parallel_holds_the_dense_part_per_rank_and_a_sixteenth_of_the_experts():
    model = deepseek(**WIDE)
    assert ROUTED == 653_908_770_816 and DENSE == 18_944_587_264
    assert weights_bytes(model) == 672_853_358_080
    assert experts_per_device(model) == 16                          # 256 experts over 16 GPUs
    result = fit(model, H200)
    per_gpu = DENSE + ROUTED * 16 // 256                          # 18,944,587,264 + 40,869,298,176
    assert result.weights_bytes_per_device == per_gpu == 59_813_885_440
    # TP 1: nothing splits the activations or logits. An H200 shows vLLM 141 GiB: 8192 batched tokens.
    reserve = RUNTIME_RESERVE_BYTES + COLLECTIVE_RESERVE_BYTES + 8192 * 7168 * 40 + 32 * 129280 * 4
    assert result.reserve_bytes_per_device == reserve
    kv_per_token = 61 * (512 + 64) * 1                            # MLA latent in FP8, whole on every rank
    assert result.kv_bytes_per_token_per_device == kv_per_token == 35_136
    kv_cache = int(H200_BYTES * 0.92) - per_gpu - reserve
    assert result.kv_cache_bytes_per_device == kv_cache
    rank = kv_cache // kv_per_token // 32768
    assert result.rank_concurrency == rank == 65                  # each rank has its own sequences
    assert result.max_concurrency == 16 * 65 == 1040
    assert result.stated_sequences == 16 * 32 and result.fits and result.devices == 16


def test_data_parallel_attention_holds_more_sequences_than_tensor_parallel_on_one_node():
    """Under TP 8 every GPU keeps the whole MLA latent of every sequence; eight DP ranks each keep their own."""
    tp8 = fit(deepseek(tensor_parallel=8), H200)
    dp8 = fit(deepseek(data_parallel=8, expert_parallel=True), H200)
    assert tp8.weights_bytes_per_device == 672_853_358_080 // 8 == 84_106_669_760
    assert dp8.weights_bytes_per_device == DENSE + ROUTED // 8 == 100_683_183_616   # dense part on every rank
    assert tp8.max_concurrency == tp8.rank_concurrency
    assert dp8.max_concurrency == 8 * dp8.rank_concurrency > 4 * tp8.max_concurrency


def test_whole_experts_do_not_split_evenly_and_the_fullest_gpu_decides():
    """Linear placement: 256 experts over 6 GPUs gives four GPUs 43 and two 42; sliced, each holds 256/6."""
    uneven = deepseek(data_parallel=6, expert_parallel=True)
    assert experts_per_device(uneven) == 43
    assert experts_per_device(deepseek(data_parallel=6, expert_parallel=False)) == Fraction(256, 6)
    assert fit(uneven, H200).weights_bytes_per_device == DENSE + ROUTED * 43 // 256


def test_a_dense_model_and_data_parallel_one_size_as_before():
    llama = ModelServiceSpec(name="l", model="meta-llama/Llama-3.1-70B-Instruct", pool="h200", tensor_parallel=4)
    assert fit(llama, H200).weights_bytes_per_device == -(-weights_bytes(llama) // 4)
    assert experts_per_device(llama) == 0


def test_the_plan_states_the_layout():
    assert parallel_layout(deepseek(**WIDE)) == (
        "tensor_parallel 1 x data_parallel 16 (8 per node); expert parallel: 16 of 256 experts per GPU, "
        "all-to-all allgather_reducescatter"
    )
    assert parallel_layout(deepseek(tensor_parallel=8, expert_parallel=False)) == (
        "tensor_parallel 8; every expert sliced 8 ways"
    )


# ------------------------------------------------------------------------------------------- vLLM flags


def pinned_vllm_flags() -> set[str]:
    if not REFERENCE.exists():
        pytest.skip("../shared/reference is absent")
    import re

    section = REFERENCE.read_text().split("## 1.", 1)[1].split("\n## 2.", 1)[0]
    return set(re.findall(r"`(--[a-z0-9-]+)", section)) | FLAGS_FROM_THE_WHEEL


def test_engine_flags_name_the_layout_exactly():
    args = engine_args(deepseek(**WIDE, all2all_backend="allgather_reducescatter"), H200)
    joined = " ".join(args)
    assert "--tensor-parallel-size 1 --pipeline-parallel-size 1 --data-parallel-size 16 " \
           "--data-parallel-size-local 8 --enable-expert-parallel --all2all-backend allgather_reducescatter" in joined
    plain = engine_args(deepseek(tensor_parallel=8), H200)
    assert not {"--data-parallel-size", "--enable-expert-parallel", "--all2all-backend"} & set(plain)


def test_every_flag_is_a_flag_of_the_pinned_vllm():
    known = pinned_vllm_flags()
    model = deepseek(**WIDE, all2all_backend="allgather_reducescatter")
    for role in ("leader", "worker"):
        flags = {a for a in serve_argv(model, H200, "/m", role=role) if a.startswith("--")}
        assert flags <= known, sorted(flags - known)


def test_the_group_obeys_vllm_multi_node_data_parallel_rules():
    """create_engine_config: nnodes divides dp x pp x tp, and local ranks = (world / nnodes) / (pp x tp)."""
    model = deepseek(**WIDE)
    args = serve_argv(model, H200, "/m", role="leader")
    value = {flag: args[args.index(flag) + 1] for flag in (
        "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
        "--distributed-executor-backend",
    )}
    tp, pp, dp = (int(value[f]) for f in ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size"))
    nnodes = model.nodes_per_replica                              # what $(LWS_GROUP_SIZE) expands to
    world = dp * pp * tp
    assert nnodes == 2 and world % nnodes == 0
    assert int(value["--data-parallel-size-local"]) == world // nnodes // (pp * tp) == 8
    assert value["--distributed-executor-backend"] == "mp"
    assert model.gpus_per_pod == world // nnodes == 8


def test_the_backend_choices_are_the_upstream_ones_that_work_on_nvidia():
    ours = set(typing.get_args(All2AllBackend))
    assert ours <= ALL2ALL_UPSTREAM
    assert ALL2ALL_UPSTREAM - ours == {
        "naive", "pplx", "passthrough", "mori_high_throughput", "mori_low_latency", "flashinfer_all2allv",
    }
    assert set(ALL2ALL_BACKENDS) == ours                          # every choice says how far it reaches


# ------------------------------------------------------------------------------------------ performance


def test_a_data_parallel_replica_carries_its_ranks_traffic():
    model = deepseek(**WIDE, traffic={"requests_per_second": 20.0, "mean_input_tokens": 2000, "mean_output_tokens": 500})
    engine = engine_for(model, H200)
    assert engine.kv_cache_bytes == fit(model, H200).kv_cache_bytes_per_device and engine.shard.experts.token_sources == 16
    estimate = service_estimate(model, H200, region="us-east-2")
    rank = at_request_rate(engine, workload_of(model.traffic), 20.0 / 16 / estimate.replicas)
    assert estimate.at_traffic.requests_per_second == pytest.approx(16 * rank.requests_per_second)
    assert estimate.at_traffic.first_token_seconds == rank.first_token_seconds


def test_every_ranks_tokens_reach_the_shared_experts():
    def shard(sources: int) -> Shard:
        experts = RoutedExperts(weights_bytes=8_000, flops_per_assignment=1.0, experts=256, per_token=8,
                                token_sources=sources, devices=sources, expert_parallel=True, moe_layers=1,
                                family="triton", peak="bf16")
        return Shard(weights_bytes=10_000, kv=Windowed(((1.0, None),)), linear_flops_per_token=1.0,
                     attention_flops_per_token_and_context=1.0, kernel=None, layers=1, hidden_size=1,
                     tensor_parallel=1, link=None, experts=experts)

    one, sixteen = shard(1), shard(16)
    assert sixteen.weights_read(4) == pytest.approx(one.weights_read(64))
    assert one.weights_read(1) == pytest.approx(2_000 + 8_000 * 8 / 256)


# --------------------------------------------------------------------------------------------- rendering

STACK = {
    "environment": "wide",
    "region": "us-east-2",
    "node_pools": [{"name": "h200", "instance_types": ["p5en.48xlarge"], "min_nodes": 2, "max_nodes": 2,
                    "efa": True, "capacity": {"on_demand_base": 2}}],
    "models": [{"name": "deepseek", "model": "deepseek-ai/DeepSeek-V3", "pool": "h200", **WIDE,
                "all2all_backend": "allgather_reducescatter", "max_model_len": 32768, "max_num_seqs": 32,
                "kv_cache_dtype": "fp8"}],
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("wide")
    stack = folder / "wide.yaml"
    stack.write_text(yaml.safe_dump(STACK))
    assert main(["render", str(stack), "--out", str(folder / "out")]) == 0
    return folder / "out", json.loads((folder / "out" / "plan.json").read_text())


def test_a_replica_over_two_nodes_is_one_leaderworkerset_group(rendered):
    out, plan = rendered
    objects = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))]
    (group,) = [o for o in objects if o["kind"] == "LeaderWorkerSet"]
    template = group["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    for role, last in (("leaderTemplate", ["--port", "8000"]), ("workerTemplate", ["--headless"])):
        (vllm,) = [c for c in template[role]["spec"]["containers"] if c["name"] == "vllm"]
        assert vllm["args"][-len(last):] == last
        assert "--nnodes" in vllm["args"] and "--enable-expert-parallel" in vllm["args"]
        assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert vllm["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"   # all of a p5en's interfaces
    (row,) = plan["placements"]
    assert row["devices_per_replica"] == 16 and row["transport"] == "efa" and row["fits"]
    assert row["weights_gib_per_device"] == round(59_813_885_440 / 1024**3, 2)
    failing = [p["name"] for p in plan["policies"] if p["enforcement"] == "mandatory" and p["violations"]]
    assert failing == []
    assert_valid(objects)


# ---------------------------------------------------------------------------------------------- refusals


def refusal(change) -> SpecError:
    spec = copy.deepcopy(STACK)
    change(spec)
    with pytest.raises((SpecError, ValidationError)) as caught:
        validate(StackSpec.model_validate(spec))
    error = caught.value
    return describe_validation_error(error, StackSpec) if isinstance(error, ValidationError) else error


def service(**fields):
    return lambda spec: spec["models"][0].update(fields)


def dense(**fields):
    return service(**{"model": "meta-llama/Llama-3.1-70B-Instruct", "expert_parallel": False, "all2all_backend": None,
                      "data_parallel": 1, "data_parallel_local": None, "max_model_len": 8192, **fields})


REFUSALS = {
    "local ranks not dividing": (service(data_parallel_local=6), "models[0]", "does not divide data_parallel 16"),
    "data with pipeline parallel": (service(pipeline_parallel=2), "models[0]", "spreads over nodes by its ranks"),
    "backend without expert parallel": (service(expert_parallel=False), "models[0]", "only applies to expert-parallel"),
    "expert parallel on a dense model": (dense(expert_parallel=True, tensor_parallel=8), "models[0].expert_parallel",
                                         "no experts to split"),
    "expert parallel on one GPU": (service(model="Qwen/Qwen3-30B-A3B", data_parallel=1, data_parallel_local=None,
                                           all2all_backend=None, max_model_len=32768), "models[0].expert_parallel",
                                   "this replica has one"),
    "ranks beyond one node": (service(data_parallel_local=16), "models[0].data_parallel_local", "need 16 GPUs"),
    "more nodes than the pool": (service(data_parallel=24), "models[0].data_parallel_local",
                                 "a replica takes 3 nodes"),
    "nvlink backend across nodes": (service(all2all_backend="flashinfer_nvlink_one_sided"), "models[0].all2all_backend",
                                    "over one node's NVLink"),
    "deepep v1 over efa": (service(all2all_backend="deepep_low_latency"), "models[0].all2all_backend",
                           "does not run between nodes over EFA"),
    "deepep v2 over efa": (service(all2all_backend="deepep_v2"), "models[0].all2all_backend",
                           "DeepEPv2 requires NCCL GIN"),
    "nixl ep over efa": (service(all2all_backend="nixl_ep"), "models[0].all2all_backend",
                         "does not run between nodes over EFA"),
    "a removed backend": (service(all2all_backend="pplx"), "models[0].all2all_backend", "allgather_reducescatter"),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_each_layout_mistake_is_refused_with_its_path_and_fix(case):
    change, path, says = REFUSALS[case]
    error = refusal(change)
    assert error.path == path and says in str(error) and str(error).count("To fix:") == 1


def test_auto_placement_picks_a_tensor_parallel_size_whose_ranks_fit_a_node():
    spec = copy.deepcopy(STACK)
    service(pool="auto", tensor_parallel="auto")(spec)
    (placed,) = validate(StackSpec.model_validate(spec)).stack.models
    assert placed.pool == "h200" and placed.tensor_parallel == 1 and placed.gpus_per_pod == 8


def test_nearest_valid_layouts_are_accepted():
    for change in (service(all2all_backend=None), service(data_parallel=8, data_parallel_local=None),
                   service(all2all_backend="deepep_low_latency", data_parallel=8, data_parallel_local=None)):
        spec = copy.deepcopy(STACK)
        change(spec)
        validate(StackSpec.model_validate(spec))
