"""Both roles of a prefill/decode pair hash alike in NIXL's handshake, read from the rendered pods.

Upstream (vLLM 0.33.0, the PyPI wheel):
* vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py:146-203 `compute_nixl_compatibility_hash`: the vLLM
  version, the model path, dtype, KV heads, head size, layers, the attention backend's name, the KV cache dtype,
  whether the hybrid KV manager is on, the speculative factors and the transfer mode; metadata.py:103-143
  `_get_speculative_compatibility_factors`: for methods where `use_eagle()` (config/speculative.py:2116-2120:
  eagle, eagle3, mtp, dflash, dspark) the draft's method, model path, revision and KV dtype, else nothing;
* nixl/base_worker.py:1192-1205: a peer whose hash differs is refused ("NIXL compatibility hash mismatch");
  config/kv_transfer.py:88: kv_load_failure_policy defaults to "fail", so the request fails;
* vllm/platforms/cuda.py:84-181 `_get_backend_priorities` and :377-417 `get_valid_backends`: with no
  --attention-backend the first valid backend of the GPU's order is used: FLASHINFER first on compute capability
  10.x, FLASH_ATTN first elsewhere (non-MLA); cuda.py:420-446: a given backend is used as given.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from stack_files import rendered_objects  # noqa: E402
from test_serving_features import edited  # noqa: E402

from inferstack.catalog import GPUS, instance_type
from inferstack.cli import EXIT_BAD_INPUT
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"
SERVICE = "qwen-32b-pd"
EAGLE_METHODS = {"eagle", "eagle3", "mtp", "dflash", "dspark"}
EAGLE3 = {"method": "eagle3", "model": "RedHatAI/Qwen3-32B-speculator.eagle3",
          "weights": "s3://ml-adapters/drafts/eagle3-qwen3-32b/v1", "draft_params_billion": 1.6,
          "num_speculative_tokens": 3}
B200_POOL = {"name": "b200", "instance_types": ["p6-b200.48xlarge"], "min_nodes": 1, "max_nodes": 1,
             "capacity": {"on_demand_base": 1, "spot": False}, "efa": True}


def default_backend(compute_capability: str) -> str:
    """cuda.py:155-181, a dense GQA model whose head size every backend takes: FLASHINFER leads on 10.x."""
    return "FLASHINFER" if compute_capability.startswith("10.") else "FLASH_ATTN"


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def vllm_argv(container: dict) -> list[str]:
    command = [*container.get("command", []), *container.get("args", [])]
    if len(command) == 3 and command[:2] == ["/bin/sh", "-c"]:
        command = shlex.split(command[2])
    return command[command.index("vllm"):]


def hashed_factors(objects: list[dict], workload: str, pools: dict[str, str]) -> dict:
    """What NIXL hashes for the engine this Deployment runs, as vLLM would see it on the pool's GPU."""
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == workload)
    pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "vllm")
    argv = vllm_argv(container)
    gpu = pools[pod["nodeSelector"]["inferstack.dev/pool"]]
    speculative = json.loads(flag(argv, "--speculative-config") or "null")
    kv_dtype = flag(argv, "--kv-cache-dtype") or "auto"
    draft = None
    if speculative and speculative["method"] in EAGLE_METHODS:
        draft = (speculative["method"], speculative.get("model"), speculative.get("kv_cache_dtype") or kv_dtype)
    return {
        "vllm_version": container["image"],
        "model": argv[2],
        "dtype": flag(argv, "--dtype"),
        "attn_backend_name": flag(argv, "--attention-backend") or default_backend(GPUS[gpu].compute_capability),
        "cache_dtype": kv_dtype,
        "is_hma_enabled": "--disable-hybrid-kv-cache-manager" not in argv,
        "speculative_config": draft,
        "transfer_mode": json.loads(flag(argv, "--kv-transfer-config"))["kv_connector"],
    }


def render(data: dict, tmp_path: Path) -> tuple[int, list[dict], StackSpec]:
    spec = StackSpec.model_validate(data)
    code, objects = rendered_objects(spec, tmp_path)
    return code, objects, spec


def pool_gpus(spec: StackSpec) -> dict[str, str]:
    return {pool.name: instance_type(pool.instance_types[0]).gpu.name for pool in spec.node_pools}


def both_roles(objects: list[dict], spec: StackSpec) -> tuple[dict, dict]:
    pools = pool_gpus(spec)
    return hashed_factors(objects, SERVICE, pools), hashed_factors(objects, f"{SERVICE}-prefill", pools)


@pytest.fixture(scope="module")
def serving() -> StackSpec:
    return load_stack(STACKS, "serving")


def test_the_example_stacks_pair_hashes_alike(serving, tmp_path):
    code, objects, spec = render(serving.model_dump(mode="json", exclude_none=True), tmp_path)
    assert code == 0
    decode, prefill = both_roles(objects, spec)
    assert decode == prefill


def test_an_eagle3_draft_is_carried_by_both_roles(serving, tmp_path):
    data = edited(serving, SERVICE, speculative=EAGLE3)
    code, objects, spec = render(data, tmp_path)
    assert code == 0
    decode, prefill = both_roles(objects, spec)
    assert decode["speculative_config"] is not None
    assert decode == prefill


def test_an_ngram_draft_stays_with_decode_as_nixl_hashes_none(serving, tmp_path):
    data = edited(serving, SERVICE, speculative={"method": "ngram", "num_speculative_tokens": 3})
    code, objects, spec = render(data, tmp_path)
    assert code == 0
    decode, prefill = both_roles(objects, spec)
    assert decode == prefill and decode["speculative_config"] is None
    prefill_pod = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == f"{SERVICE}-prefill")
    assert "--speculative-config" not in vllm_argv(prefill_pod["spec"]["template"]["spec"]["containers"][-1])


def test_prefill_on_b200_and_decode_on_h100_run_one_backend(serving, tmp_path):
    data = serving.model_dump(mode="json", exclude_none=True)
    data["node_pools"].append(B200_POOL)
    data = edited(StackSpec.model_validate(data), SERVICE, disaggregation={
        "prefill": {"tensor_parallel": 1, "pool": "b200", "autoscaling": {"min_replicas": 1, "max_replicas": 2}},
        "non_cached_tokens": 256,
    })
    code, objects, spec = render(data, tmp_path)
    assert code == 0
    decode, prefill = both_roles(objects, spec)
    assert decode == prefill
    # The decode GPU's own choice, which B200 also runs, is pinned on both.
    assert decode["attn_backend_name"] == "FLASH_ATTN"


def test_a_backend_one_role_cannot_run_is_refused_with_its_field(serving, tmp_path, capsys):
    """FLASHINFER_MLA runs on compute capability 10.x only (mla/flashinfer_mla.py:220); Qwen3 is not MLA at all."""
    data = edited(serving, SERVICE, attention_backend="FLASHINFER_MLA")
    code, _, _ = render(data, tmp_path)
    assert code == EXIT_BAD_INPUT
    assert "models[0].attention_backend" in capsys.readouterr().err
