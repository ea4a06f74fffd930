"""The benchmark's pieces: generated stacks are valid and big enough, the floor replays exactly what the
plan registered, the summary lines add up, and `python -m inferstack.bench` prints them all.
Nothing here is timed: the targets live in the benchmark's output."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from inferstack import bench
from inferstack.catalog.measurements import MEASUREMENTS
from inferstack.engine import run_stack
from inferstack.engine.mocks import PlanMocks
from inferstack.policies.runner import blocking, run_policies, spec_policy_config
from inferstack.engine.recorder import record
from inferstack.spec import MigSharing, NoSharing, TimeSlicing
from inferstack.spec.pools import PoolHardware
from inferstack.stacks import load_stack

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("services", [10, 50])
def test_generated_stack_is_valid_varied_and_its_pools_hold_every_replica(services):
    spec = bench.generate_stack(services)
    assert len(spec.models) == services and spec.environment == f"generated-{services}"
    stored = {(m.stored_format.quant_method, m.stored_format.weight_bits) for m in spec.models}
    assert stored >= {("none", 16), ("awq", 4), ("gptq", 4), ("compressed-tensors", 8)}
    assert {m.tensor_parallel for m in spec.models} >= {1, 2, 4, 8}
    sharing = {type(p.gpu_sharing) for p in spec.node_pools}
    assert {MigSharing, NoSharing, TimeSlicing} <= sharing
    for pool in spec.node_pools:
        hardware = PoolHardware(pool)
        served = [m for m in spec.models if m.pool == pool.name]
        needed: dict[str, int] = {}
        for m in served:
            resource = hardware.resource_for_slice(m.mig_profile)
            needed[resource] = needed.get(resource, 0) + m.autoscaling.max_replicas * m.gpus_per_replica
        for resource, count in needed.items():
            assert count <= hardware.max_resources[resource], (pool.name, resource)


def test_generated_stack_passes_every_mandatory_policy():
    """Among them: online minimum replicas fit the on-demand baseline, Kueue quotas fit the pools."""
    spec = bench.generate_stack(10)
    resources = [r.as_dict() for r in run_stack(spec).resources]
    results = run_policies(resources, spec.environment, spec_policy_config(spec))
    assert not blocking(results), [r.as_dict() for r in results if r.blocking]


def test_generated_stack_file_loads_back_as_the_same_spec(tmp_path):
    path = bench.write_generated_stack(10, tmp_path)
    assert load_stack(tmp_path, path.stem) == bench.generate_stack(10)


def test_floor_replays_exactly_what_the_plan_registered():
    spec = load_stack(ROOT / "stacks", "dev")
    recording = run_stack(spec)
    registered = [r.as_dict() for r in recording.resources]
    replay = {"stack": recording.stack, "region": spec.region, "resources": registered, "outputs": recording.outputs}
    floor = record(bench.replay_program(replay), replay["stack"], PlanMocks(replay["region"]))
    assert [r.as_dict() for r in floor.resources] == registered
    assert floor.outputs == recording.outputs
    assert any(r["type"] == "kubernetes:yaml/v2:ConfigFile" for r in registered)  # a remote component
    assert any(r["type"].startswith("pulumi:providers:") for r in registered)


def test_engine_runs_leave_the_garbage_collector_and_the_sdk_as_they_found_them():
    import pulumi.runtime.resource as sdk_runtime

    thresholds, stack_trace = gc.get_threshold(), sdk_runtime._get_stack_trace
    record(lambda: None, "empty", PlanMocks("us-east-1"))
    assert gc.get_threshold() == thresholds and sdk_runtime._get_stack_trace is stack_trace


def test_growth_line_gives_seconds_and_marginal_cost_per_service():
    lines = [{"services": 10, "seconds": 2.0}, {"services": 50, "seconds": 4.0}, {"services": 200, "seconds": 11.5}]
    growth = bench.growth_line(lines)
    assert growth["seconds_per_service"] == {"10": 0.2, "50": 0.08, "200": 0.0575}
    assert growth["marginal_seconds_per_service"] == {"10-50": 0.05, "50-200": 0.05}
    assert growth["met"] is True
    lines[2]["seconds"] = 40.0  # a service added past 50 costs four times one added before: not linear
    assert bench.growth_line(lines)["met"] is False


def test_fixed_mix_line_puts_the_planner_at_the_exhaustive_optimum_and_below_naive():
    line = bench.fixed_mix_line()
    assert line["met"] is True
    assert (line["planner"]["gpus"], line["planner"]["usd_per_hour"]) == (
        line["exhaustive"]["gpus"], line["exhaustive"]["usd_per_hour"]
    )
    assert line["naive"]["gpus"] > line["planner"]["gpus"]


def test_bench_prints_a_plan_line_with_its_floor_the_fixed_mix_and_the_planner_at_scale(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert bench.main(["--cases", "dev", "--repeat", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    plan, mix, scale, *measurements, model = lines
    assert plan["case"] == "plan" and plan["stack"] == "dev" and plan["services"] == 1
    assert plan["resources"] > 50 and plan["seconds"] > 0 and plan["floor_seconds"] > 0
    assert plan["ratio"] == round(plan["seconds"] / plan["floor_seconds"], 2)
    # The validation room's share: one validation inside the plan, timed on its own.
    assert 0 < plan["validation_seconds"] < plan["seconds"]
    assert plan["validation_share"] == round(plan["validation_seconds"] / plan["seconds"], 3)
    assert plan["peak_mib"] > 0 and plan["floor_peak_mib"] > 0 and "ru_maxrss" in plan["peak_mib_is"]
    assert plan["target"] == "<= 1.25x floor" and isinstance(plan["met"], bool)
    assert mix["case"] == "fixed-mix" and mix["met"] is True
    assert scale["case"] == "placement-200" and scale["cpu_seconds"] > 0 and isinstance(scale["met"], bool)
    assert scale["usd_per_hour"] <= scale["naive_usd_per_hour"]
    assert len(measurements) == len(MEASUREMENTS) and {m["case"] for m in measurements} == {"measurement"}
    assert all(abs(m["ratio"] - m["modelled"] / m["measured"]) < 0.01 for m in measurements)
    assert model["case"] == "throughput-model" and model["accuracy"].startswith("out of sample")
    parts = ("all", "dense", "MoE")
    assert model["met"] == all(
        model[f"{part}_median_error"] <= 0.25 and model[f"{part}_worst_factor"] <= 2 for part in parts
    )
    counted_lines = [m for m in measurements if "out_of_sample_ratio" in m]
    assert counted_lines and all(m["engine"].startswith("vllm") and "held_out" not in m for m in counted_lines)


def test_the_simulate_line_replays_a_day_at_one_second(tmp_path):
    """The bench's `simulate` case: prod's services over the shipped day, interpolated to every second."""
    line = bench.simulation_line(ROOT / "stacks", tmp_path)
    assert line["case"] == "simulate" and line["stack"] == "prod" and line["trace_spacing_seconds"] == 1
    assert line["trace_seconds"] == 86_400 and line["services"] == 4
    assert line["seconds"] > 0 and isinstance(line["met"], bool)
