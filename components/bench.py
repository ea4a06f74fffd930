"""`python -m inferstack.bench` (`make bench`): how fast `inferstack plan` is, beside what Pulumi alone costs.

Every measurement runs in a fresh interpreter, so import time and memory are real:

* plan: `inferstack plan <stack>` as the CLI runs it (its output discarded), for dev, prod and
  generated stacks of 10, 50 and 200 model services;
* floor: a process that imports Pulumi and the provider modules the plan loaded, then replays the
  very registrations the plan made (type, name, parent, inputs, depends_on) as raw
  `CustomResource` / `ComponentResource` calls under the same mock engine: the cost of Pulumi
  itself, with none of inferstack's logic.

It prints one JSON line per stack, one for `inferstack simulate prod` over a day at 1-second resolution (case
`simulate`, timed in this process after its imports), one for the growth with the number of services and one for the fixed model
mix's placements (planner, exhaustive optimum, one model per whole GPU), one for the planner alone over 200
services, then the throughput model against each published measurement (modelled / measured) and its stated
accuracy.
Only the standard library is imported at module level: the children time their own imports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RATIO_TARGET = 1.25            # plan wall time <= 1.25x its floor
LARGEST_TARGET_SECONDS = 15.0  # the 200-service plan, on a 2-core machine
# Linear growth: a service added between 50 and 200 may cost at most this much more than one added
# between 10 and 50 (headroom for timing noise; quadratic growth would show ~4x).
GROWTH_TOLERANCE = 1.25
PLACEMENT_TARGET_SECONDS = 1.0  # the free-form planner over 200 services, CPU time
SIMULATE_TARGET_SECONDS = 30.0  # `inferstack simulate prod` over 24 hours at 1-second resolution, on 2 cores
SIMULATE_TRACE = "prod-day.csv"  # the shipped 5-minute day, interpolated to every second
GENERATED_SIZES = (10, 50, 200)
SIMULATE_CASE = "simulate"
CASES = ("dev", "prod", *(f"generated-{n}" for n in GENERATED_SIZES), SIMULATE_CASE)
PEAK_SOURCE = "peak RSS of the child process (getrusage ru_maxrss)"
PROVIDER_PACKAGES = ("pulumi", "pulumi_aws", "pulumi_kubernetes")


# ------------------------------------------------------------------------------------ generated stacks

# Pools of the generated stacks: (name, fields). Whole H100s on EFA, A100s split by MIG, L40S and L4
# nodes with whole GPUs, and single-L4 nodes shared by time-slicing.
_POOLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("h100", {"instance_types": ["p5.48xlarge"], "efa": True}),
    ("a100-mig", {"instance_types": ["p4de.24xlarge"],
                  "gpu_sharing": {"mode": "mig", "layout": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}}),
    ("l40s", {"instance_types": ["g6e.12xlarge", "g6e.24xlarge"]}),
    ("l4", {"instance_types": ["g6.12xlarge", "g6.24xlarge"]}),
    ("l4-shared", {"instance_types": ["g6.xlarge", "g6.2xlarge"],
                   "gpu_sharing": {"mode": "time_slicing", "replicas": 2}}),
)

# Service kinds cycled through: catalog models at several precisions, tensor parallel 1-8, one
# multi-node kind, MIG slices of three sizes, a scale-to-zero kind and every scaling metric.
_KINDS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama70-awq", {"model": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "quantization": "awq",
                     "kv_cache_dtype": "fp8", "pool": "h100", "tensor_parallel": 2, "max_model_len": 16384,
                     "max_num_seqs": 32, "traffic": {"requests_per_second": 5}}),
    ("llama8-fp8", {"model": "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "quantization": "fp8", "pool": "l40s",
                    "max_model_len": 16384, "max_num_seqs": 32, "autoscaling": {"metric": "epp_queue"}}),
    ("qwen7-awq", {"model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq", "pool": "l4-shared",
                   "max_model_len": 8192, "max_num_seqs": 8, "tier": "standard",
                   "autoscaling": {"min_replicas": 0, "scale_to_zero": True}}),
    ("bge", {"model": "BAAI/bge-large-en-v1.5", "pool": "a100-mig", "mig_profile": "1g.10gb", "max_model_len": 512}),
    ("llama3b", {"model": "meta-llama/Llama-3.2-3B-Instruct", "pool": "a100-mig", "mig_profile": "3g.40gb",
                 "max_model_len": 8192, "max_num_seqs": 16}),
    ("qwen3-8b", {"model": "Qwen/Qwen3-8B", "pool": "l40s", "tensor_parallel": 2, "max_model_len": 32768,
                  "max_num_seqs": 16, "autoscaling": {"metric": "kv_cache", "target": 0.8}}),
    ("qwen72-gptq", {"model": "Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "quantization": "gptq", "kv_cache_dtype": "fp8",
                     "pool": "h100", "tensor_parallel": 4, "max_model_len": 32768, "max_num_seqs": 32}),
    ("qwen-embed", {"model": "Qwen/Qwen3-Embedding-0.6B", "pool": "a100-mig", "mig_profile": "2g.20gb",
                    "max_model_len": 8192, "max_num_seqs": 8}),
    ("llama8-w8a8", {"model": "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "quantization": "int8",
                     "pool": "l4", "tensor_parallel": 2, "max_model_len": 8192, "max_num_seqs": 16}),
    ("llama70-long", {"model": "meta-llama/Llama-3.3-70B-Instruct", "kv_cache_dtype": "fp8", "pool": "h100",
                      "tensor_parallel": 8, "pipeline_parallel": 2, "max_model_len": 131072, "max_num_seqs": 16,
                      "tier": "standard", "autoscaling": {"max_replicas": 1}}),
)


def generate_stack(services: int):
    """A valid StackSpec with `services` model services cycled over _KINDS, each pool sized to hold every
    service at max replicas and every online service's minimum on its on-demand baseline."""
    from inferstack.spec import ModelServiceSpec, NodePoolSpec, StackSpec
    from inferstack.spec.pools import PoolHardware

    models = []
    for i in range(services):
        kind, fields = _KINDS[i % len(_KINDS)]
        scaling = {"min_replicas": 1, "max_replicas": 2, **fields.get("autoscaling", {})}
        models.append(ModelServiceSpec(**{**fields, "name": f"{kind}-{i:03d}", "autoscaling": scaling}))
    pools = []
    for name, fields in _POOLS:
        served = [m for m in models if m.pool == name]
        if not served:
            continue
        hardware = PoolHardware(NodePoolSpec(name=name, max_nodes=1, **fields))

        def nodes(replicas) -> int:
            """Nodes that hold `replicas(model)` of every served model (per resource the pool advertises)."""
            needed: dict[str, int] = {}
            for m in served:
                resource = hardware.resource_for_slice(m.mig_profile)
                needed[resource] = needed.get(resource, 0) + replicas(m) * m.gpus_per_replica
            return max(math.ceil(n / hardware.resources_per_node[r]) for r, n in needed.items())

        baseline = nodes(lambda m: m.autoscaling.min_replicas if m.tier == "online" else 0)
        most = max(nodes(lambda m: m.autoscaling.max_replicas), max(m.nodes_per_replica for m in served))
        pools.append(
            NodePoolSpec(
                name=name, min_nodes=baseline, max_nodes=most,
                capacity={"on_demand_base": baseline, "spot": True}, **fields,
            )
        )
    return StackSpec(
        environment=f"generated-{services}",
        region="us-east-1",
        tags={"team": "ml-platform", "env": "bench"},
        node_pools=pools,
        models=models,
    )


def write_generated_stack(services: int, folder: Path) -> Path:
    """The generated stack as a JSON stack file (only the fields set, as a person would write it)."""
    path = folder / f"generated-{services}.json"
    document = generate_stack(services).model_dump(mode="json", exclude_unset=True)
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------- children


def _peak_mib() -> float:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)  # bytes on macOS, KiB elsewhere


def _loaded_provider_modules() -> list[str]:
    """Pulumi and provider modules this process has executed (the providers import their submodules
    lazily: a module not yet used sits in sys.modules as a placeholder of another type)."""
    import types

    return sorted(
        name for name, module in sys.modules.items()
        if name.split(".")[0] in PROVIDER_PACKAGES and type(module) is types.ModuleType
    )


def plan_child(stack: str, stacks_dir: Path, replay_path: Path) -> dict[str, Any]:
    """Time `inferstack plan <stack>` in this (fresh) process; then write what it registered for the floor."""
    started = time.perf_counter()
    import inferstack.engine as engine
    from inferstack import cli, stacks

    runs: list[tuple[Any, Any]] = []
    validations: list[float] = []
    run_stack, validate = engine.run_stack, stacks.validate

    def recorded(validated):
        recording = run_stack(validated)
        runs.append((validated.stack, recording))
        return recording

    def timed(spec):
        began = time.perf_counter()
        try:
            return validate(spec)
        finally:
            validations.append(time.perf_counter() - began)

    # The CLI imports run_stack at call time and the loader calls validate by its module's name, so both run
    # through these wrappers.
    engine.run_stack, stacks.validate = recorded, timed
    try:
        with open(os.devnull, "w", encoding="utf-8") as sink, contextlib.redirect_stdout(sink):
            status = cli.main(["plan", stack, "--stacks-dir", str(stacks_dir)])
    finally:
        engine.run_stack, stacks.validate = run_stack, validate
    seconds = time.perf_counter() - started
    peak = _peak_mib()
    if status != 0 or len(runs) != 1 or len(validations) != 1:
        raise RuntimeError(
            f"inferstack plan {stack} exited {status} after {len(runs)} engine runs and {len(validations)} validations"
        )
    spec, recording = runs[0]
    replay = {
        "stack": recording.stack,
        "region": spec.region,
        "resources": [r.as_dict() for r in recording.resources],
        "outputs": recording.outputs,
        "modules": _loaded_provider_modules(),
    }
    replay_path.write_text(json.dumps(replay), encoding="utf-8")
    return {
        "services": len(spec.models),
        "resources": sum(1 for r in recording.resources if r.custom),
        "components": sum(1 for r in recording.resources if not r.custom),
        "seconds": round(seconds, 3),
        "validation_seconds": round(validations[0], 3),
        "peak_mib": peak,
    }


def replay_program(replay: dict[str, Any]):
    """A Pulumi program that registers the recorded resources raw: no provider classes, no inferstack code."""
    import pulumi
    from pulumi.runtime import rpc

    def raw(value: Any) -> Any:
        if isinstance(value, dict):
            if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
                return pulumi.Output.secret(raw(value["value"]))
            return {k: raw(v) for k, v in value.items()}
        if isinstance(value, list):
            return [raw(v) for v in value]
        return value

    def program() -> None:
        made: dict[str, pulumi.Resource] = {}
        for r in replay["resources"]:
            options = dict(r["options"])  # the recorded resource options, under ResourceOptions' own names
            if "custom_timeouts" in options:
                options["custom_timeouts"] = pulumi.CustomTimeouts(**options["custom_timeouts"])
            opts = pulumi.ResourceOptions(
                parent=made.get(r["parent"]), depends_on=[made[d] for d in r["depends_on"]], **options
            )
            if r["custom"]:
                made[r["name"]] = pulumi.CustomResource(r["type"], r["name"], raw(r["inputs"]), opts)
            else:
                # Only a remote component (a provider's, e.g. yaml/v2:ConfigFile) sends inputs.
                remote = bool(r["inputs"])
                inputs = raw(r["inputs"]) if remote else None
                component = pulumi.ComponentResource(r["type"], r["name"], inputs, opts, remote)
                if not remote:
                    component.register_outputs({})
                made[r["name"]] = component
        for name, value in replay["outputs"].items():
            pulumi.export(name, raw(value))

    return program


def floor_child(replay_path: Path) -> dict[str, Any]:
    """Time the floor in this (fresh) process: Pulumi, the plan's provider modules, the raw replay."""
    import importlib

    replay = json.loads(replay_path.read_text(encoding="utf-8"))
    started = time.perf_counter()
    for name in replay["modules"]:
        hasattr(importlib.import_module(name), "__all__")  # reading an attribute loads a lazily imported module
    from inferstack.engine.mocks import PlanMocks
    from inferstack.engine.recorder import record

    recording = record(replay_program(replay), replay["stack"], PlanMocks(replay["region"]))
    seconds = time.perf_counter() - started
    peak = _peak_mib()
    same = [r.as_dict() for r in recording.resources] == replay["resources"]
    missing = sorted(set(replay["modules"]) - set(_loaded_provider_modules()))
    return {"seconds": round(seconds, 3), "peak_mib": peak, "same_registrations": same, "modules_not_loaded": missing}


# --------------------------------------------------------------------------------------------- parent


def _child(*args: str) -> dict[str, Any]:
    # Children read bytecode as an installed package does (pip compiles what it installs, so the floor's Pulumi
    # modules load from .pyc): without this an editable checkout under PYTHONDONTWRITEBYTECODE would time
    # inferstack's compiler, not its code.
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-m", "inferstack.bench", "--child", *args], capture_output=True, text=True, check=False,
        env=environment,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench child {' '.join(args)} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def _compile_package() -> None:
    """Write the bytecode of inferstack's own modules (components/ and policies/) before any timing, as
    `pip install` does for the Pulumi modules the floor loads."""
    import compileall
    import inferstack
    import inferstack.policies

    for folder in {Path(inferstack.__file__).parent, Path(inferstack.policies.__file__).parent}:
        compileall.compile_dir(str(folder), quiet=1)


def plan_case(case: str, stacks_dir: Path, work: Path, repeat: int) -> dict[str, Any]:
    """One JSON line: the plan of `case` and its floor, each the fastest of `repeat` fresh processes
    (plan and floor alternate, so load from elsewhere on the machine hits both alike)."""
    stack, folder = case, stacks_dir
    if case.startswith("generated-"):
        stack, folder = str(write_generated_stack(int(case.split("-")[1]), work)), work
    replay = work / f"{case}.replay.json"
    plans, floors = [], []
    for _ in range(repeat):
        plans.append(_child("plan", stack, str(folder), str(replay)))
        floors.append(_child("floor", str(replay)))
        if not floors[-1]["same_registrations"] or floors[-1]["modules_not_loaded"]:
            raise RuntimeError(f"the floor of {case} did not replay the plan: {floors[-1]}")
    plan = min(plans, key=lambda r: r["seconds"])
    floor = min(floors, key=lambda r: r["seconds"])
    ratio = plan["seconds"] / floor["seconds"]
    line = {
        "case": "plan",
        "stack": case,
        "services": plan["services"],
        "resources": plan["resources"],
        "components": plan["components"],
        "seconds": plan["seconds"],
        # The validation room's share of the plan: every spec rule and layer refusal, auto placement, expansion.
        "validation_seconds": plan["validation_seconds"],
        "validation_share": round(plan["validation_seconds"] / plan["seconds"], 3),
        "peak_mib": plan["peak_mib"],
        "floor_seconds": floor["seconds"],
        "floor_peak_mib": floor["peak_mib"],
        "ratio": round(ratio, 2),
        "peak_mib_is": PEAK_SOURCE,
        "runs": repeat,
        "target": f"<= {RATIO_TARGET}x floor",
        "met": ratio <= RATIO_TARGET,
    }
    if case == f"generated-{GENERATED_SIZES[-1]}":
        line["seconds_target"] = f"< {LARGEST_TARGET_SECONDS:g} s"
        line["seconds_met"] = plan["seconds"] < LARGEST_TARGET_SECONDS
    return line


def growth_line(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Seconds per service at each size, and the marginal cost of a service between sizes."""
    seconds = {line["services"]: line["seconds"] for line in lines}
    sizes = sorted(seconds)
    marginal = {
        f"{a}-{b}": round((seconds[b] - seconds[a]) / (b - a), 4) for a, b in zip(sizes, sizes[1:])
    }
    steps = list(marginal.values())
    return {
        "case": "growth",
        "services": sizes,
        "seconds": [seconds[n] for n in sizes],
        "seconds_per_service": {str(n): round(seconds[n] / n, 4) for n in sizes},
        "marginal_seconds_per_service": marginal,
        "target": f"linear or better: each marginal s/service <= {GROWTH_TOLERANCE}x the one before",
        "met": all(later <= GROWTH_TOLERANCE * earlier for earlier, later in zip(steps, steps[1:])),
    }


def fixed_mix_line() -> dict[str, Any]:
    """The fixed model mix placed by the planner, the exhaustive optimum and one model per whole GPU."""
    from inferstack.planning.demand import FIXED_MIX
    from inferstack.planning.placement import plan_placement
    from inferstack.planning.placement_yardsticks import exhaustive_placement, naive_placement

    demands, pools = FIXED_MIX.demands(), FIXED_MIX.options()
    line: dict[str, Any] = {
        "case": "fixed-mix",
        "models": len(demands),
        "replicas": sum(d.replicas for d in demands),
        "pools": [p.name for p in pools],
    }
    planners = (("planner", plan_placement), ("exhaustive", exhaustive_placement), ("naive", naive_placement))
    for label, planner in planners:
        started = time.perf_counter()
        placement = planner(demands, pools)
        line[label] = {
            "gpus": placement.total_gpus,
            "usd_per_hour": placement.usd_per_hour,
            "nodes": placement.nodes,
            "seconds": round(time.perf_counter() - started, 3),
        }
    score = {label: (line[label]["gpus"], line[label]["usd_per_hour"]) for label in ("planner", "exhaustive", "naive")}
    line["target"] = "planner == exhaustive optimum (GPUs and $/h); both below naive"
    line["met"] = score["planner"] == score["exhaustive"] and all(
        p < n for p, n in zip(score["planner"], score["naive"])
    )
    return line


def placement_scale_line() -> dict[str, Any]:
    """The free-form planner alone over the largest generated stack's single-node services with `pool: auto`:
    its time at scale (the tests check only that it places every replica, no dearer than one model per GPU)."""
    from inferstack.planning.demand import Demand, catalog_options
    from inferstack.planning.placement import plan_placement
    from inferstack.planning.placement_yardsticks import naive_placement

    services = GENERATED_SIZES[-1]
    spec = generate_stack(services)
    demands = [
        Demand.from_spec(m.model_copy(update={"pool": "auto"})) for m in spec.models if not m.multi_node
    ]
    options = catalog_options(spec.region)
    started = time.process_time()
    placement = plan_placement(demands, options)
    seconds = time.process_time() - started
    return {
        "case": f"placement-{services}",
        "services": len(demands),
        "cpu_seconds": round(seconds, 3),
        "usd_per_hour": placement.usd_per_hour,
        "naive_usd_per_hour": naive_placement(demands, options).usd_per_hour,
        "target": f"< {PLACEMENT_TARGET_SECONDS} CPU s",
        "met": seconds < PLACEMENT_TARGET_SECONDS,
    }


def one_second_day(shipped: Path, folder: Path) -> Path:
    """The shipped trace at 1-second resolution: each service's rate interpolated linearly between its rows."""
    import csv

    with shipped.open(encoding="utf-8") as source:
        rows = list(csv.DictReader(source))
    header = list(rows[0])
    by_service: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_service.setdefault(row["service"], []).append(row)
    end = max(int(r["time_s"]) for r in rows) + 300
    lines = [",".join(header)]
    for service, points in by_service.items():
        points = [*points, {**points[-1], "time_s": str(end)}]
        for here, after in zip(points, points[1:]):
            start, stop = int(here["time_s"]), int(after["time_s"])
            low, high = float(here["requests_per_second"]), float(after["requests_per_second"])
            tokens = [here[name] for name in header[3:]]
            for t in range(start, stop):
                rate = low + (high - low) * (t - start) / (stop - start)
                lines.append(",".join([str(t), service, f"{rate:.4f}", *tokens]))
    path = folder / "prod-day-1s.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def simulation_line(stacks_dir: Path, work: Path) -> dict[str, Any]:
    """`inferstack simulate prod` over a 24-hour trace at 1-second resolution: the trace read and the replay (the
    recommendation's re-simulations aside), wall time."""
    from inferstack.presentation import simulation_report
    from inferstack.stacks import load_validated

    validated = load_validated(stacks_dir, "prod")
    trace_path = one_second_day(stacks_dir / "traces" / SIMULATE_TRACE, work)
    started = time.perf_counter()
    trace = simulation_report.read_trace(trace_path, validated)
    result = simulation_report.run(validated, trace)
    seconds = time.perf_counter() - started
    return {
        "case": "simulate",
        "stack": "prod",
        "trace_seconds": result.seconds,
        "trace_spacing_seconds": trace.spacing,
        "controller_step_seconds": result.step,
        "services": len(result.services),
        "seconds": round(seconds, 3),
        "target": f"< {SIMULATE_TARGET_SECONDS:g} s",
        "met": seconds < SIMULATE_TARGET_SECONDS,
    }


def throughput_model_lines() -> list[dict[str, Any]]:
    """The throughput model against every published measurement: one line a point (in sample and, for a counted
    vLLM point, out of sample), then its stated accuracy against the targets."""
    from inferstack.planning.accuracy import comparisons, counted, in_sample, other_engines, out_of_sample

    stored = out_of_sample()
    lines = []
    for row in comparisons():
        point = row.measurement
        lines.append({
            "case": "measurement",
            "measurement": point.id,
            "publisher": point.publisher,
            "model": point.model,
            "instance_type": point.instance_type,
            "tensor_parallel": point.tensor_parallel,
            "tokens_in_out": [point.input_tokens, point.output_tokens],
            "load": (
                {"concurrency": point.concurrency} if point.concurrency is not None
                else {"request_rate": point.request_rate}
            ),
            "engine": f"{point.engine} {point.engine_version or ''}".strip(),
            "figure": row.figure,
            "measured": point_figure(row.measured),
            "modelled": point_figure(row.modelled),
            "ratio": round(row.ratio, 3),
            **({"out_of_sample_ratio": stored.ratios[point.id]} if counted(point) else {}),
            **latency_ratios(row),
            **({"held_out": point.held_out} if point.held_out else {}),
        })
    whole = stored.over(stored.ratios)
    parts = {"all": whole, **stored.by_architecture()}
    lines.append({
        "case": "throughput-model", "accuracy": stored.stated(),
        **{f"{name}_median_error": round(a.median_error, 4) for name, a in parts.items()},
        **{f"{name}_worst_factor": round(a.worst_factor, 3) for name, a in parts.items()},
        "worst_point": whole.worst_point,
        "in_sample": in_sample().short(), "other_engines": other_engines().short(),
        "held_out": sum(1 for row in comparisons() if row.measurement.held_out),
        "target": "out of sample (leave one publisher out), for all, dense and MoE: median error <= 25%, worst <= 2x",
        "met": all(a.median_error <= 0.25 and a.worst_factor <= 2 for a in parts.values()),
    })
    return lines


def latency_ratios(row: Any) -> dict[str, float]:
    """Modelled / measured inter-token latency and time to first token, where the point publishes them."""
    ratios = {"itl_ratio": row.latency_ratio, "ttft_ratio": row.first_token_ratio}
    return {name: round(ratio, 3) for name, ratio in ratios.items() if ratio is not None}


def point_figure(value: float) -> float:
    return round(value, 2 if value < 100 else 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferstack.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cases", nargs="+", choices=CASES, default=list(CASES),
        help=f"stacks to plan, and {SIMULATE_CASE!r} for the replay of a day (default: all)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per plan and floor; the fastest counts (default: 3)"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)  # internal: plan/floor in a fresh process
    args = parser.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        result = plan_child(rest[0], Path(rest[1]), Path(rest[2])) if kind == "plan" else floor_child(Path(rest[0]))
        print(json.dumps(result))
        return 0

    from inferstack.stacks import find_project_root

    stacks_dir = find_project_root() / "stacks"
    _compile_package()
    generated = []
    with tempfile.TemporaryDirectory(prefix="inferstack-bench-") as work:
        for case in args.cases:
            if case == SIMULATE_CASE:
                print(json.dumps(simulation_line(stacks_dir, Path(work))), flush=True)
                continue
            line = plan_case(case, stacks_dir, Path(work), args.repeat)
            print(json.dumps(line), flush=True)
            if case.startswith("generated-"):
                generated.append(line)
    if len(generated) > 1:
        print(json.dumps(growth_line(generated)), flush=True)
    print(json.dumps(fixed_mix_line()), flush=True)
    print(json.dumps(placement_scale_line()), flush=True)
    for line in throughput_model_lines():
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
