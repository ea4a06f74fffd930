"""A stack serving gpt-oss-120b on one H100 and DeepSeek-V3 on one 8-GPU H200 node plans, renders, passes its
policies, and passes vLLM only flags the pinned vLLM has.

The flags are checked against the table of `vllm serve` flags in ../shared/reference/vllm-and-hardware.md
section 1, read from vLLM 0.33.0's vllm/engine/arg_utils.py (`EngineArgs.add_cli_args`) and
vllm/entrypoints/common/cli_args.py; the test skips without ../shared.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from kube_validation import assert_valid

from inferstack.cli import main

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference" / "vllm-and-hardware.md"

STACK = """\
environment: moe
region: us-east-2
node_pools:
  - {name: h100, instance_types: [p5.48xlarge], min_nodes: 1, max_nodes: 2, capacity: {on_demand_base: 1}}
  - {name: h200, instance_types: [p5en.48xlarge], min_nodes: 1, max_nodes: 1, capacity: {on_demand_base: 1}}
models:
  - {name: gpt-oss, model: openai/gpt-oss-120b, pool: h100, max_model_len: 32768, max_num_seqs: 8,
     kv_cache_dtype: fp8}
  - {name: deepseek, model: deepseek-ai/DeepSeek-V3, pool: h200, tensor_parallel: 8, max_model_len: 32768,
     max_num_seqs: 16, kv_cache_dtype: fp8}
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("moe")
    stack = folder / "moe.yaml"
    stack.write_text(STACK)
    assert main(["render", str(stack), "--out", str(folder / "out")]) == 0
    return folder / "out", json.loads((folder / "out" / "plan.json").read_text())


def pinned_vllm_flags() -> set[str]:
    if not REFERENCE.exists():
        pytest.skip("../shared/reference is absent")
    section = REFERENCE.read_text().split("## 1.", 1)[1].split("\n## 2.", 1)[0]
    return set(re.findall(r"`(--[a-z0-9-]+)", section))


def vllm_containers(out: Path) -> dict[str, list[str]]:
    found = {}
    for path in sorted((out / "kubernetes").glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        if obj["kind"] != "Deployment":
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "vllm":
                found[obj["metadata"]["name"]] = container["args"]
    return found


def test_both_models_plan_and_fit_their_one_node(rendered):
    _, plan = rendered
    rows = {row["model"]: row for row in plan["placements"]}
    assert rows["gpt-oss"]["devices_per_replica"] == 1 and rows["gpt-oss"]["fits"]
    assert rows["deepseek"]["devices_per_replica"] == 8 and rows["deepseek"]["fits"]
    assert round(rows["gpt-oss"]["weights_gib"], 1) == 60.8        # MXFP4 experts, not 217.6 GiB of 16 bits
    assert rows["deepseek"]["kv_formula"] == "MLA latent: 61 layers x (512 + 64) values x 1 byte"
    assert "MXFP4 weight-only (W4A16): H100 has no FP4 tensor cores" in rows["gpt-oss"]["weights"]["kernel"]
    assert rows["deepseek"]["weights"]["kernel"] == "FP8 W8A8 on FP8 tensor cores (as stored)"


def test_the_stack_passes_every_mandatory_policy_and_validates(rendered):
    out, plan = rendered
    failing = [p["name"] for p in plan["policies"] if p["enforcement"] == "mandatory" and p["violations"]]
    assert failing == []
    assert_valid([yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))])


def test_every_vllm_argument_is_a_flag_of_the_pinned_vllm(rendered):
    out, _ = rendered
    known = pinned_vllm_flags()
    containers = vllm_containers(out)
    assert set(containers) == {"gpt-oss", "deepseek"}
    for name, args in containers.items():
        flags = {a.split("=", 1)[0] for a in args if a.startswith("--")}
        assert flags <= known, (name, sorted(flags - known))
        assert args[:2] == ["vllm", "serve"]
    assert "--quantization" not in containers["gpt-oss"]   # vLLM reads mxfp4 from the checkpoint's config
    assert containers["deepseek"][containers["deepseek"].index("--tensor-parallel-size") + 1] == "8"
