"""A batch job's engine keeps its model service's parallel layout, its pod requests exactly the GPUs that layout
runs on, and every example stack's batch jobs pass the policy pack (issue 25, item 8).

Upstream rules, read from the vLLM 0.33.0 wheel (vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl):
- vllm/entrypoints/cli/run_batch.py:62: `vllm run-batch` parses its command line with `make_arg_parser`, which adds
  `AsyncEngineArgs.add_cli_args` (vllm/entrypoints/launchers/run_batch.py:294-297): the engine flags of `vllm serve`.
- vllm/entrypoints/launchers/run_batch.py:1104: `main` builds its engine with `build_async_engine_client(args)`,
  i.e. `AsyncEngineArgs.from_cli_args(args)` (vllm/entrypoints/launchers/api_server/entry.py:52), so
  --tensor-parallel-size, --pipeline-parallel-size and --data-parallel-size reach the engine as given.
- vllm/config/parallel.py:964-967: one data-parallel rank drives pipeline x tensor (x prefill context, 1 here) GPUs;
  parallel.py:627-629: the replica's world is that times data_parallel_size.
- vllm/engine/arg_utils.py:2486-2535: without --nnodes, the node runs --data-parallel-size-local ranks, and by default
  all of --data-parallel-size.
So on its one node a batch pod's vLLM takes tensor x pipeline x local data-parallel ranks GPUs: the pod must request
that many nvidia.com/gpu (policies/vllm_serving.py, vllm-parallel-layout, reads the same flags off the pod spec).
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_files import edited, refused_by_render_and_plan

from inferstack.catalog.dra import DEVICE_CLASSES
from inferstack.cli import main
from inferstack.engine import run_stack
from inferstack.engine.render import kubernetes_objects
from inferstack.policies.runner import run_policies, spec_policy_config
from inferstack.policies.workloads import command_tokens, flag_value
from inferstack.serving.workers import render_batch_stage
from inferstack.spec import BatchJobSpec, StackSpec
from inferstack.stacks import load_stack
from inferstack.validation import validate

REPO = Path(__file__).resolve().parents[1]
STACKS = REPO / "stacks"
SHIPPED = sorted(p.stem for p in STACKS.glob("*.py") if p.stem != "__main__")
SERVING = (STACKS / "serving.py").read_text()
INPUT, OUTPUT = "s3://ml-batch/in.jsonl", "s3://ml-batch/out/"
WHOLE_GPU = "nvidia.com/gpu"
# vLLM 0.33's parallel-size flags and their short aliases (EngineArgs.add_cli_args, vllm/engine/arg_utils.py).
SIZE_FLAGS = {"tp": ("--tensor-parallel-size", "-tp"), "pp": ("--pipeline-parallel-size", "-pp"),
              "dp": ("--data-parallel-size", "-dp"), "local": ("--data-parallel-size-local", "-dpl")}

# The serving stack with a batch job on its tensor_parallel 2 service (the decode role of the prefill/decode pair).
SERVING_TP2 = edited(SERVING, (
    "    ],\n)\n",
    "    ],\n    batch_jobs=[{\"name\": \"nightly-pd\", \"model_service\": \"qwen-32b-pd\", \"pool\": \"h100\",\n"
    f"                 \"input\": \"{INPUT}\", \"output\": \"{OUTPUT}\"}}],\n)\n",
))


def moe_stack(*, job_pool: str = "h100", **service: Any) -> dict[str, Any]:
    """A mixture-of-experts service on H100s with one batch job, and a spot pool of single-GPU nodes."""
    return {
        "environment": "moe",
        "region": "us-east-1",
        "node_pools": [
            {"name": "h100", "instance_types": ["p5.48xlarge"], "min_nodes": 2, "max_nodes": 3, "efa": True,
             "capacity": {"on_demand_base": 2, "spot": True}},
            {"name": "l40s-batch", "role": "batch", "instance_types": ["g6e.xlarge"], "max_nodes": 2,
             "capacity": {"on_demand_base": 0, "spot": True}},
        ],
        "models": [{"name": "qwen-moe", "model": "Qwen/Qwen3-30B-A3B", "pool": "h100", "kv_cache_dtype": "fp8",
                    "max_model_len": 16384, "max_num_seqs": 32, "expert_parallel": True, **service}],
        "batch_jobs": [{"name": "nightly", "model_service": "qwen-moe", "pool": job_pool, "input": INPUT,
                        "output": OUTPUT}],
    }


def dense_stack(job_pool: dict[str, Any], **service: Any) -> dict[str, Any]:
    """A dense 8B on four-GPU L40S nodes, with a batch job on `job_pool`."""
    return {
        "environment": "dense",
        "region": "us-east-1",
        "node_pools": [
            {"name": "l40s", "instance_types": ["g6e.12xlarge"], "min_nodes": 1, "max_nodes": 2,
             "capacity": {"on_demand_base": 1, "spot": True}},
            job_pool,
        ],
        "models": [{"name": "llama-8b", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "l40s",
                    "max_model_len": 8192, "hf_token_secret": "hf-token", **service}],
        "batch_jobs": [{"name": "nightly", "model_service": "llama-8b", "pool": job_pool["name"], "input": INPUT,
                        "output": OUTPUT}],
    }


def with_a_batch_job_per_service(spec: StackSpec) -> StackSpec:
    """The stack plus a batch job on each service a batch pod can run (pipeline stages each take a node), on the
    service's own pool, so every parallel layout and GPU kind of the example stacks is rendered as a batch job."""
    data = spec.model_dump(mode="json", exclude_none=True)
    data["batch_jobs"] = [*data.get("batch_jobs", ()), *(
        {"name": f"batch-{m['name']}"[:40], "model_service": m["name"], "pool": m["pool"], "input": INPUT,
         "output": OUTPUT}
        for m in data["models"] if m.get("pipeline_parallel", 1) == 1
    )]
    return validate(StackSpec.model_validate(data)).written


def shipped(name: str) -> StackSpec:
    return load_stack(STACKS, name)


def serving_tp2() -> StackSpec:
    namespace: dict[str, Any] = {}
    exec(compile(SERVING_TP2, "serving.py", "exec"), namespace)  # a stack file is a module that defines `stack`
    return namespace["stack"]


CASES = {
    **{f"{name} as shipped": (lambda name=name: shipped(name)) for name in SHIPPED},
    **{f"{name} with a batch job per service": (lambda name=name: with_a_batch_job_per_service(shipped(name)))
       for name in SHIPPED},
    "serving with a batch job on its tensor_parallel 2 service": serving_tp2,
    "moe: data parallel on one node": lambda: StackSpec.model_validate(moe_stack(data_parallel=2)),
    "moe: data-parallel ranks over two nodes, one node of the job's pool holds them": lambda: StackSpec.model_validate(
        moe_stack(tensor_parallel=2, data_parallel=4, data_parallel_local=2)),
}


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def rendered(request) -> tuple[Any, Any]:
    validated = validate(CASES[request.param]())
    return validated, run_stack(validated)


def batch_pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(job name, pod spec) of each batch Job and CronJob."""
    pods = []
    for o in objects:
        if o["kind"] == "Job":
            pods.append((o["metadata"]["name"], o["spec"]["template"]["spec"]))
        elif o["kind"] == "CronJob":
            pods.append((o["metadata"]["name"], o["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
    return pods


def serving_engine(objects: list[dict[str, Any]], service: str) -> list[str]:
    """The command line of the service's own vLLM (its Deployment's pod, or its LeaderWorkerSet's leader)."""
    (workload,) = [o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet")
                   and o["metadata"]["labels"].get("app.kubernetes.io/component") == "vllm"
                   and o["metadata"]["labels"].get("app.kubernetes.io/name") == service]
    spec = workload["spec"]
    leader = workload["kind"] == "LeaderWorkerSet"
    template = spec["leaderWorkerTemplate"]["leaderTemplate"] if leader else spec["template"]
    (vllm,) = [c for c in template["spec"]["containers"] if c["name"] == "vllm"]
    return command_tokens(vllm)


def sizes(tokens: list[str]) -> dict[str, int | None]:
    found = {}
    for name, (flag, alias) in SIZE_FLAGS.items():
        value = flag_value(tokens, flag)
        value = flag_value(tokens, alias) if value is None else value
        found[name] = None if value is None else int(value)
    return found


def gpu_request(pod: dict, vllm: dict, objects: list[dict]) -> dict[str, int]:
    """The GPU container's device request: its nvidia.com/ limits (requests = limits), or on a DRA pool the GPUs of
    the claims it names, counted as the resource their DeviceClass maps to (components/catalog/dra.json)."""
    resources = vllm["resources"]
    if not resources.get("claims"):
        devices = {k: v for k, v in resources["requests"].items() if k.startswith("nvidia.com/")}
        assert {k: v for k, v in resources["limits"].items() if k.startswith("nvidia.com/")} == devices
        return devices
    templates = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceClaimTemplate"}
    by_class = {c.name: c.resource for c in DEVICE_CLASSES.values() if c.key != "efa"}
    claimed = {c["name"] for c in resources["claims"]}
    total: dict[str, int] = {}
    for claim in pod["resourceClaims"]:
        assert claim["name"] in claimed
        for request in templates[claim["resourceClaimTemplateName"]]["spec"]["spec"]["devices"]["requests"]:
            exactly = request["exactly"]
            if exactly["deviceClassName"] in by_class:
                resource = by_class[exactly["deviceClassName"]]
                total[resource] = total.get(resource, 0) + exactly["count"]
    return total


def test_the_run_batch_argv_layout_equals_the_jobs_gpu_request_and_the_services_layout(rendered):
    """vllm/config/parallel.py:964-967 and vllm/engine/arg_utils.py:2486-2535: tensor x pipeline x local data-parallel
    ranks GPUs on the node, which the Job requests (requests = limits). The sizes, expert parallelism and all-to-all
    backend are those of the service's own engine, all of its data-parallel ranks on the one node."""
    validated, recording = rendered
    spec = validated.stack
    objects = kubernetes_objects(recording)
    jobs = {job.name: job for job in spec.batch_jobs}
    pods = batch_pods(objects)
    assert len(pods) == len(jobs)
    for name, pod in pods:
        job = jobs[next(j for j in jobs if name == j or name.startswith(f"{j}-"))]
        (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
        tokens = command_tokens(vllm)
        at = tokens.index("vllm")
        assert tokens[at:at + 2] == ["vllm", "run-batch"], tokens
        assert "--nnodes" not in tokens and "--headless" not in tokens, "one pod, one node"
        found = sizes(tokens)
        tp, pp, dp = (found[n] or 1 for n in ("tp", "pp", "dp"))
        local = found["local"] or dp
        served = serving_engine(objects, job.model_service)
        service = sizes(served)
        assert (tp, pp, dp, local) == (service["tp"] or 1, service["pp"] or 1, service["dp"] or 1, dp), name
        for flag in ("--enable-expert-parallel", "--all2all-backend"):
            assert flag_value(tokens, flag) == flag_value(served, flag), (name, flag)
        (resource, count), = gpu_request(pod, vllm, objects).items()
        if resource == WHOLE_GPU and spec.pool(job.pool).gpu_sharing.mode != "mig":
            assert int(count) == tp * pp * local, f"{name}: {count} GPUs for tensor {tp} x pipeline {pp} x {local} DP"
        else:  # one MIG slice or one GPU share: one device, an engine of one GPU
            assert int(count) == 1 and tp * pp * local == 1, (name, resource, count)


def test_every_example_stacks_batch_jobs_pass_the_policy_pack(rendered):
    """The pack as `inferstack render` / `check` run it offline: no violation. Added jobs on a pool without spot
    capacity are batch work on on-demand nodes, which the advisory batch-on-spot rightly names."""
    validated, recording = rendered
    spec = validated.stack
    on_demand_only = {f"Job {spec.batch_namespace}/{job.name}-" for job in spec.batch_jobs
                      if not spec.pool(job.pool).capacity.spot}
    results = run_policies([r.as_dict() for r in recording.resources], validated.environment,
                           spec_policy_config(spec))
    violations = [
        (result.name, violation)
        for result in results for violation in result.as_dict()["violations"]
        if not (result.name == "batch-on-spot" and any(m in str(violation) for m in on_demand_only))
    ]
    assert violations == []
    assert {r.name for r in results} >= {"vllm-parallel-layout", "vllm-fp8-kv-cache"}


def test_the_serving_stack_with_a_tensor_parallel_2_batch_job_renders_and_checks(tmp_path):
    """The issue's stack: its own render exits 0 (it exited 1 on vllm-parallel-layout), and the pack run offline
    on the render (`check --resources`) passes; the Job requests the 2 GPUs its engine runs on."""
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "serving.py").write_text(SERVING_TP2)
    out = tmp_path / "out"
    assert main(["render", "serving", "--stacks-dir", str(stacks), "--out", str(out)]) == 0
    assert main(["check", "--resources", str(out / "resources.json")]) == 0
    objects = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))]
    ((_, pod),) = batch_pods(objects)
    (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
    tokens = command_tokens(vllm)
    assert flag_value(tokens, "--tensor-parallel-size") == "2" and vllm["resources"]["limits"][WHOLE_GPU] == "2"
    assert flag_value(tokens, "--kv-cache-dtype") == "fp8"  # the service's, which the fp8 advisory reads too


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_run_stage_runs_its_containers_args(tmp_path):
    """The flags the policies read off the pod spec are the ones that run: the run script execs its args."""
    job = BatchJobSpec(name="eval", model_service="chat", pool="l4", input=INPUT, output=OUTPUT)
    work = tmp_path / "work"
    work.mkdir()
    (work / "input.jsonl").write_text('{"custom_id": "0"}\n')
    script = tmp_path / "run"
    script.write_text(render_batch_stage("run", job, work_dir=str(work)))  # as the BatchJob's ConfigMap holds it
    ran = subprocess.run(
        ["bash", str(script), "cp", str(work / "input.jsonl"), str(work / "output.jsonl")],
        env={**os.environ, "JOB_COMPLETION_INDEX": "0"}, capture_output=True, text=True, timeout=20,
    )
    assert ran.returncode == 0, ran.stderr
    assert (work / "output.jsonl").read_text() == '{"custom_id": "0"}\n' and (work / ".succeeded").exists()


# ---------------------------------------------------------------------------------------------- refusals


REFUSALS = {
    "pipeline stages, each a node": (
        dense_stack({"name": "l40s-batch", "role": "batch", "instance_types": ["g6e.12xlarge"], "max_nodes": 2,
                     "capacity": {"on_demand_base": 0, "spot": True}}, tensor_parallel=2, pipeline_parallel=2),
        "batch_jobs[0].model_service", "'llama-8b' spans 2 nodes; a batch job runs on one node, and the service's 2 "
        "pipeline stages each take a node of their own",
    ),
    "data-parallel ranks over nodes that no node of the job's pool holds": (
        moe_stack(tensor_parallel=2, data_parallel=8, data_parallel_local=4),
        "batch_jobs[0].model_service", "8 data-parallel ranks need 16 GPUs (tensor_parallel 2 x data_parallel 8)",
    ),
    "data-parallel ranks beyond a node of the job's pool": (
        moe_stack(job_pool="l40s-batch", data_parallel=2),
        "batch_jobs[0].pool", "needs 2 GPUs on one node (tensor_parallel 1 x data_parallel 2) but a g6e.xlarge has 1",
    ),
    "tensor parallel on time-sliced GPUs": (
        dense_stack({"name": "l4-shared", "role": "batch", "instance_types": ["g6.12xlarge"], "max_nodes": 2,
                     "capacity": {"on_demand_base": 0, "spot": True},
                     "gpu_sharing": {"mode": "time_slicing", "replicas": 2}}, tensor_parallel=2),
        "batch_jobs[0].pool", "a shared GPU cannot be tensor or data parallel",
    ),
    "tensor parallel on MIG slices": (
        dense_stack({"name": "a100-mig", "instance_types": ["p4de.24xlarge"], "max_nodes": 1,
                     "capacity": {"on_demand_base": 1, "spot": False},
                     "gpu_sharing": {"mode": "mig", "strategy": "single", "layout": {"3g.40gb": 2}}},
                    tensor_parallel=2),
        "batch_jobs[0].pool", "a MIG slice cannot be tensor or data parallel",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_a_batch_job_whose_layout_one_pod_cannot_run_is_refused_with_its_path(case, tmp_path):
    """Refused by the spec check (exit 2, one line naming the field), before anything renders."""
    stack, path, says = REFUSALS[case]
    document = tmp_path / "stack.yaml"
    document.write_text(yaml.safe_dump(copy.deepcopy(stack)))
    message = refused_by_render_and_plan(document, tmp_path / "out")
    assert message.startswith(f"inferstack: stack.yaml: {path}: "), message
    assert says in message, message
