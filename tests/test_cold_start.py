"""Cold start as data: the compile cache on the node, the weight loader, and a replica's start split by phase."""

from __future__ import annotations

import math

import pytest

from inferstack.planning.creation_times import CREATION_TIMES, replica_parts
from inferstack.planning.sizing import checkpoint_bytes, load_seconds
from inferstack.serving import pods
from inferstack.serving.vllm_args import loader_args, serve_argv
from inferstack.spec.pools import PoolHardware
from inferstack.stacks import load_stack

from inferstack.engine.render import kubernetes_objects
from test_serving import (BUCKET, STACKS, container, group_pods, of_kind, render, service_of,
                          vllm_workloads)

STREAMED = "llama-8b-fp8"


def env_of(c: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c["env"]}


@pytest.fixture(scope="module")
def prod():
    return load_stack(STACKS, "prod")


@pytest.fixture(scope="module")
def streamed(prod):
    """prod with one service switched to weight_loader s3_stream, rendered as the program wires serving."""
    models = [m.model_copy(update={"weight_loader": "s3_stream"}) if m.name == STREAMED else m for m in prod.models]
    spec = prod.model_copy(update={"models": models})
    return spec, kubernetes_objects(render(spec))


def pods_of(objects, name):
    return [t["spec"] for w in vllm_workloads(objects) if service_of(w) == name for t, _ in group_pods(w)]


def test_every_pod_keeps_its_compile_cache_on_the_node_per_service(prod, streamed):
    """VLLM_CACHE_ROOT (vllm/envs.py, default ~/.cache/vllm) holds torch_compile_cache/<hash>/rank_{r}_{dp}
    (vllm/compilation/backends.py); vLLM keeps a TRITON_CACHE_DIR the caller sets instead of putting it beside the
    Inductor cache (vllm/compilation/compiler_interface.py initialize_inductor_cache), so the pod sets none."""
    spec, objects = streamed
    for model in spec.models:
        for pod in pods_of(objects, model.name):
            c = container({"spec": pod})
            env = env_of(c)
            assert env["VLLM_CACHE_ROOT"] == pods.COMPILE_CACHE_MOUNT
            assert "TRITON_CACHE_DIR" not in env and "TORCHINDUCTOR_CACHE_DIR" not in env
            mount = next(m for m in c["volumeMounts"] if m["mountPath"] == pods.COMPILE_CACHE_MOUNT)
            assert not mount.get("readOnly")
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            assert volume["hostPath"]["path"] == f"{pods.COMPILE_CACHE_HOST_DIR}/{model.name}"
            access = next(i for i in pod["initContainers"] if i["name"] == "compile-cache-access")
            assert access["command"] == ["chmod", "0770", pods.COMPILE_CACHE_MOUNT]
            assert access["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            # vLLM's group opens the directory: gid 0 in the pinned images (vllm_images.json).
            assert c["securityContext"]["runAsGroup"] == 0


def test_s3_stream_skips_the_prefetch_and_streams_the_s3_uri(streamed):
    """An object-storage model path keeps its URI as model_weights and must load with runai_streamer
    (vllm/config/vllm.py, the model_weights check; s3:// prefix in vllm/transformers_utils/runai_utils.py)."""
    spec, objects = streamed
    model = spec.model_service(STREAMED)
    bucket, prefix = pods.weights_location(model)
    for pod in pods_of(objects, STREAMED):
        c = container({"spec": pod})
        assert [i["name"] for i in pod["initContainers"]] == ["compile-cache-access"]
        assert c["command"] == ["vllm", "serve"]
        assert c["args"][0] == f"s3://{bucket or BUCKET}/{prefix}"
        assert c["args"][c["args"].index("--load-format") + 1] == "runai_streamer"
        assert "--model-loader-extra-config" not in c["args"]
        assert env_of(c)["AWS_REGION"] == spec.region
        assert pod["serviceAccountName"] == "model-reader"   # the Pod Identity role the pre-fetch reads with
        assert {v["name"] for v in pod["volumes"]}.isdisjoint({"model-cache", "prefetch"})
        assert all(m["name"] not in ("model-cache", "prefetch") for m in c["volumeMounts"])
    names = {o["metadata"]["name"] for o in of_kind(objects, "ConfigMap")}
    assert f"{STREAMED}-prefetch" not in names
    for other in (m for m in spec.models if m.name != STREAMED):
        for pod in pods_of(objects, other.name):
            assert pod["initContainers"][0]["name"] == "prefetch-weights"
            assert "--load-format" not in container({"spec": pod})["args"]


def test_the_loader_flag_is_an_exact_vllm_format(prod):
    """vLLM 0.33's loaders are registered by name (vllm/model_executor/model_loader/__init__.py); the local
    loader keeps vLLM's default (auto), reading the NVMe cache's safetensors."""
    model = prod.model_service(STREAMED)
    hardware = PoolHardware(prod.pool(model.pool))
    assert loader_args(model) == []
    streamed = model.model_copy(update={"weight_loader": "s3_stream"})
    argv = serve_argv(streamed, hardware, "s3://b/p")
    assert argv[argv.index("--load-format") + 1] == "runai_streamer"


def test_a_start_splits_into_its_phases_with_their_sources():
    """16 GB by hand: copy 16/0.58 s, load 16/7 s; cold warm-up without a compile cache, warm with it."""
    weights = 16 * 10**9
    s3, nvme = 16 / 0.58, 16 / 7.0
    node, pull = CREATION_TIMES["gpu_node"].seconds, CREATION_TIMES["image_pull"].seconds
    cold, warm = CREATION_TIMES["engine_warmup_cold"].seconds, CREATION_TIMES["engine_warmup_warm"].seconds
    assert warm < cold
    local_cold = replica_parts(weights, "local", new_node=True)
    assert [p for p, _, _ in local_cold] == ["node boot", "image pull", "weight copy", "load", "warm-up"]
    assert [s for _, _, s in local_cold] == pytest.approx([node, pull, s3, nvme, cold])
    def split(parts):
        return [p for p, _, _ in parts], [s for _, _, s in parts]

    phases, seconds = split(replica_parts(weights, "local", warm=True))
    assert phases == ["load", "warm-up"] and seconds == pytest.approx([nvme, warm])
    stream = replica_parts(weights, "s3_stream", new_node=False)
    phases, seconds = split(stream)
    assert phases == ["image pull", "weight copy + load", "warm-up"] and seconds == pytest.approx([pull, s3, cold])
    phases, seconds = split(replica_parts(weights, "s3_stream", warm=True))
    assert phases == ["weight copy + load", "warm-up"] and seconds == pytest.approx([s3, warm])
    for _, key, _ in local_cold + stream:
        assert CREATION_TIMES[key].source


def test_the_startup_window_covers_a_cold_engine_start_for_both_loaders(prod):
    """The startup probe and scale-down windows use sizing.load_seconds (container start to serving): it must
    cover the plan's container phases (load or stream, cold warm-up) whichever loader the service uses."""
    for model in prod.models:
        weights = checkpoint_bytes(model)
        for loader in ("local", "s3_stream"):
            container_phases = [s for p, _, s in replica_parts(weights, loader, new_node=False)
                                if p not in ("image pull", "weight copy")]
            assert math.ceil(sum(container_phases)) <= load_seconds(model)
