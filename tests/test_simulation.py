"""`inferstack simulate`: the replay against cases worked by hand, its determinism and its refusals.

The small stack is prod's llama-8b-fp8 alone on an on-demand L40S pool (one GPU a node, one replica a node),
scaled by KEDA on queue depth (target 8, polling 15 s). Its figures come from the functions the plan uses: c, one
replica's full-load request rate (load.at_concurrency at the admission limit), and S, a pod's start on a new node
(creation_times.replica_parts). Steps are 15 s (the trace's spacing and the polling interval).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from inferstack.cli import EXIT_BAD_INPUT, main
from inferstack.planning import simulation as sim
from inferstack.planning.creation_times import replica_parts
from inferstack.planning.load import Workload, admission_limit, at_concurrency, at_request_rate
from inferstack.planning.service_performance import engine_for
from inferstack.planning.sizing import checkpoint_bytes
from inferstack.presentation import simulation_report as report
from inferstack.presentation.summary import engine_cost
from inferstack.spec import SpecError, StackSpec
from inferstack.stacks import load_validated
from inferstack.validation import validate

REPO = Path(__file__).resolve().parents[1]
SERVICE = "llama-8b-fp8"
STEP = 15


def small_document(**autoscaling) -> dict:
    prod = load_validated(REPO / "stacks", "prod").written.model_dump(mode="json", exclude_unset=True)
    pool = next(p for p in prod["node_pools"] if p["name"] == "l40s")
    model = next(m for m in prod["models"] if m["name"] == SERVICE)
    model.pop("slo")
    model.pop("traffic")
    scaling = {"min_replicas": 1, "max_replicas": 2, "metric": "queue_depth", "target": 8, **autoscaling}
    prod["node_pools"] = [dict(pool, min_nodes=1, max_nodes=3, capacity={"on_demand_base": 1, "spot": False})]
    prod["models"] = [dict(model, tier="standard", autoscaling=scaling)]
    prod["workers"], prod["batch_jobs"] = [], []
    prod.pop("budget")
    prod["gateway"]["auth"]["tenants"] = [{"name": "search", "models": [SERVICE]}]
    return prod


def small(**autoscaling):
    return validate(StackSpec.model_validate(small_document(**autoscaling)))


def one_replica_rate(validated) -> float:
    """c: what one replica carries at full load, at the default 1024 -> 256 tokens the trace rows leave unset."""
    model = validated.stack.models[0]
    engine = engine_for(model, validated.pools[model.pool])
    workload = Workload(1024, 256)
    return at_concurrency(engine, workload, admission_limit(engine, workload)[0]).requests_per_second


def start_seconds(validated, **where) -> float:
    model = validated.stack.models[0]
    return sum(s for _, _, s in replica_parts(checkpoint_bytes(model), model.weight_loader, **where))


def write_trace(path: Path, changes: list[tuple[int, float]], end: int) -> Path:
    """A row every 15 s until `end` (the trace's spacing, so it ends there), at the rate of the latest change."""
    rows = [(t, next(r for at, r in reversed(changes) if at <= t)) for t in range(0, end, STEP)]
    path.write_text("time_s,service,requests_per_second\n" + "".join(f"{t},{SERVICE},{r!r}\n" for t, r in rows))
    return path


def replay(validated, trace: Path) -> sim.ServiceResult:
    return report.run(validated, report.read_trace(trace, validated)).services[0]


def test_constant_load_under_capacity_meets_the_slo_without_scaling(tmp_path):
    """Worked by hand: at c/2 every 15 s step brings 7.5c requests and one ready replica serves 15c, so none queues,
    the summed vllm:num_requests_waiting stays 0 and the HPA's desired ceil(1 x 0/8) is clamped to minReplicaCount 1
    (KEDA scaledobject-spec; Kubernetes horizontal-pod-autoscale "Algorithm details"): attainment 1, no scale-up,
    one replica for the hour at its price."""
    validated = small()
    c = one_replica_rate(validated)
    result = replay(validated, write_trace(tmp_path / "t.csv", [(0, c / 2)], 3600))
    assert result.slo_attainment == 1.0
    assert (result.scale_ups, result.cold_starts, result.peak_queue, result.seconds_below_slo) == (0, 0, 0.0, 0)
    assert result.requests == pytest.approx(c / 2 * 3600, abs=0.1)
    assert result.usd == pytest.approx(engine_cost(validated.stack.models[0], validated.pools["l40s"],
                                                   validated.stack)["replica"], abs=0.01)


def test_a_step_above_one_replica_scales_up_after_polling_and_start_and_counts_the_wait_late(tmp_path):
    """Worked by hand, rate R = 1.5c from t = 0, no SLO (a request is late when it queued; within a step requests
    are served first in, first out, and those served in the step they arrive did not wait):
    - poll at 0 reads an empty queue; step 0 serves 15c of its 22.5c, leaving 7.5c queued;
    - poll at 15 reads 7.5c (> 8 x 1.1 waiting per replica): the HPA asks ceil(7.5c/8) > 2, KEDA's
      maxReplicaCount 2 caps it; the pod needs a second node, so it serves at T = 15 + S rounded up to a step;
    - until T one replica serves 15c a step and the queue grows 7.5c a step: step k serves max(0, 15c - 7.5c k) of
      its own arrivals (15c, then 7.5c), and the queue peaks at 7.5c x T/15 = 0.5c x T;
    - from T two replicas serve 30c against 22.5c arriving, the queue shrinks 7.5c a step, and the three steps
      before it empties (at 2T - 15) serve 7.5c, 15c and 22.5c of their own arrivals; every later arrival is met.
    So met = 45c + 22.5c x (N - 2T/15 + 1) of 22.5c x N over N steps, and requests were late in the steps from 15
    to 2T - 15: 2T - 15 seconds. The trace ends 150 s after 2T, before the scale-down stabilization window
    (>= 300 s) could act."""
    validated = small()
    c = one_replica_rate(validated)
    ready = STEP + math.ceil(start_seconds(validated, new_node=True) / STEP) * STEP
    end = 2 * ready + 150
    rate = 1.5 * c
    result = replay(validated, write_trace(tmp_path / "t.csv", [(0, rate)], end))
    steps = end // STEP
    met = 45 * c + STEP * rate * (steps - 2 * ready // STEP + 1)
    assert (result.scale_ups, result.cold_starts) == (1, 1)
    assert result.peak_queue == pytest.approx(0.5 * c * ready, abs=0.1)
    assert result.slo_attainment == pytest.approx(met / (STEP * rate * steps), abs=1e-6)
    assert result.seconds_below_slo == 2 * ready - STEP


def test_zero_traffic_costs_the_plans_min_scale_and_starts_nothing(tmp_path):
    """Worked by hand: no request, so no trigger leaves 0 and the two min replicas run the whole hour on their
    on-demand nodes: usd = the plan's min-scale $/h (presentation/summary.engine_cost 'min') x 1 h, no cold start,
    attainment 1 (no request missed)."""
    validated = small(min_replicas=2, max_replicas=3)
    result = replay(validated, write_trace(tmp_path / "t.csv", [(0, 0.0)], 3600))
    plan = engine_cost(validated.stack.models[0], validated.pools["l40s"], validated.stack)
    assert result.usd == pytest.approx(plan["min"], abs=0.01)
    assert (result.cold_starts, result.scale_ups, result.requests, result.slo_attainment) == (0, 0, 0.0, 1.0)
    assert result.gpu_hours == pytest.approx(2.0)


def test_scale_to_zero_and_back_starts_cold_once(tmp_path):
    """Worked by hand, min 0 with scale_to_zero (idleReplicaCount 0, minReplicaCount 1), one request every 100 s (so
    the few that wait for the start stay under 8 x 1.1 queued and ask no second replica): the replay starts idle; the
    first requests (t = 0) wake it at the poll of 15 (the `requests` trigger, 1 > activationThreshold 0) onto the
    pool's standing node, which never held the weights: one cold start. Requests stop at 600; the trigger stays 1 for
    the 10-minute window after the last at 585, then every trigger is at 0 for cooldownPeriod and KEDA idles it at
    0. When requests return at 4800 the node (kept at the pool's min_nodes by cluster-autoscaler) still caches the
    weights: a warm start, not a cold one. Two scale-ups."""
    validated = small(min_replicas=0, scale_to_zero=True)
    result = replay(validated, write_trace(tmp_path / "t.csv", [(0, 0.01), (600, 0.0), (4800, 0.01)], 6000))
    assert (result.cold_starts, result.scale_ups) == (1, 2)
    assert result.slo_attainment < 1   # the requests that arrived at zero waited for a replica


@pytest.mark.parametrize(("idle_seconds", "cold_starts"), [(900, 1), (2700, 2)])
def test_under_karpenter_a_node_left_empty_past_consolidate_after_takes_its_weights(tmp_path, idle_seconds,
                                                                                    cold_starts):
    """Worked by hand, the scale-to-zero case under Karpenter (no standing node): the first wake launches a node, a
    cold start. Requests stop at 600 and the last poll the `requests` trigger is active at is 1170 (585 + the 10-minute
    window, exclusive); KEDA idles the service at I, the first poll at least cooldownPeriod after 1170, and the node
    is empty from then. The serving NodePool consolidates an empty node after consolidateAfter 30m
    (platform/karpenter_pools.py SERVING_CONSOLIDATE_AFTER; Karpenter docs "Disruption", consolidationPolicy
    WhenEmpty): requests back at I + 900 find the node and its cached weights (a warm start, one cold start in
    all); at I + 2700 it is gone and the wake launches a new node (two cold starts)."""
    document = small_document(min_replicas=0, scale_to_zero=True)
    document["platform"] = {**document.get("platform", {}), "node_autoscaler": "karpenter"}
    document["node_pools"][0].update(min_nodes=0, capacity={"on_demand_base": 0, "spot": False})
    validated = validate(StackSpec.model_validate(document))
    cooldown = report.setups(validated)[0][0].scaler.cooldown
    idle = 1170 + math.ceil(cooldown / STEP) * STEP
    back = idle + idle_seconds
    result = replay(validated, write_trace(tmp_path / "t.csv", [(0, 0.01), (600, 0.0), (back, 0.01)], back + 900))
    assert (result.cold_starts, result.scale_ups) == (cold_starts, 2)


@pytest.mark.parametrize(("share", "scale_ups"), [(1 / 1.5, 1), (1.2, 0)])
def test_running_sequences_scale_on_the_sequences_each_replica_runs(tmp_path, share, scale_ups):
    """Worked by hand: at c/2 one replica runs r sequences (load.at_request_rate), and the running-sequences trigger
    (sum of vllm:num_requests_running, AverageValue) asks ceil(r / target): with the target r/1.5 that is 2, one
    scale-up; with 1.2r the ratio 0.83 asks ceil(0.83) = 1, none (Kubernetes horizontal-pod-autoscale, "Algorithm
    details"; KEDA scaledobject-spec triggers[].metricType)."""
    base = small()
    engine = engine_for(base.stack.models[0], base.pools["l40s"])
    c = one_replica_rate(base)
    running = at_request_rate(engine, Workload(1024, 256), c / 2).running
    validated = small(metric="running_sequences", target=running * share)
    result = replay(validated, write_trace(tmp_path / "t.csv", [(0, c / 2)], 600))
    assert result.scale_ups == scale_ups


def test_the_hpa_rule_per_metric_type():
    """Kubernetes docs horizontal-pod-autoscale, "Algorithm details": desired = ceil(current x metric / target), no
    change within the 0.1 tolerance; KEDA's AverageValue targets the metric divided by the replicas, Value the
    metric itself (KEDA docs, scaledobject-spec, triggers[].metricType)."""
    average = sim.Trigger("queue-depth", "AverageValue", 8, 0)
    value = sim.Trigger("kv-cache", "Value", 0.8, 0)
    assert sim.metric_replicas(average, 40, 2) == 5          # 40 waiting over 2 replicas, 8 each: 5
    assert sim.metric_replicas(average, 17, 2) == 2          # 8.5 each: within 10% of 8
    assert sim.metric_replicas(value, 0.96, 3) == 4          # ceil(3 x 0.96 / 0.8) = ceil(3.6)
    assert sim.metric_replicas(value, 0.2, 4) == 1


def test_an_unknown_trigger_name_is_refused_by_name():
    body = {"triggers": [{"name": "gpu-temperature", "metadata": {"threshold": "1"}}]}
    with pytest.raises(SpecError, match="gpu-temperature"):
        sim.scaler_from_scaled_object(body, SERVICE)


def test_every_trigger_the_contract_names_has_a_signal():
    assert set(sim.SIGNALS) == {"queue-depth", "kv-cache", "epp-queue", "requests", "prompt-tokens",
                                "running-sequences"}


def small_stack_file(tmp_path: Path, **autoscaling) -> Path:
    path = tmp_path / "small.json"
    path.write_text(json.dumps(small_document(**autoscaling)))
    return path


def test_the_same_trace_prints_the_same_bytes(tmp_path, capsys):
    stack = small_stack_file(tmp_path)
    trace = write_trace(tmp_path / "t.csv", [(0, 2.0), (300, 12.0), (900, 1.0)], 1200)
    outputs = []
    for _ in range(2):
        assert main(["simulate", str(stack), "--trace", str(trace), "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0])["runs"][0]["services"][0]["service"] == SERVICE


def test_set_compares_side_by_side_and_recommends(tmp_path, capsys):
    stack = small_stack_file(tmp_path)
    trace = write_trace(tmp_path / "t.csv", [(0, 2.0), (300, 12.0), (900, 1.0)], 1200)
    assert main(["simulate", str(stack), "--trace", str(trace), "--json",
                 "--set", f"models[{SERVICE}].autoscaling.min_replicas=2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    first, second = (run["services"][0] for run in printed["runs"])
    assert second["usd"] > first["usd"]
    recommendation = printed["recommendations"][0]
    assert recommendation["min_replicas"] in (1, 2)
    assert recommendation["slo_attainment"] >= 0.99


def test_against_a_second_stack_prints_both_side_by_side(tmp_path, capsys):
    stack = small_stack_file(tmp_path)
    other = tmp_path / "bigger.json"
    other.write_text(json.dumps({**small_document(min_replicas=2, max_replicas=3), "environment": "bigger"}))
    trace = write_trace(tmp_path / "t.csv", [(0, 2.0), (300, 12.0), (900, 1.0)], 1200)
    assert main(["simulate", str(stack), "--trace", str(trace), "--against", str(other)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split()[:2] for line in lines if line.startswith(f"{SERVICE} ")]
    assert rows == [[SERVICE, "[prod]"], [SERVICE, "[bigger]"]]


@pytest.mark.parametrize(
    ("rows", "extra", "named"),
    [
        (None, [], "missing.csv"),
        ("time_s,service,requests_per_second\n0,llama-8b-fp8,1\nabc,llama-8b-fp8,1\n", [], "t.csv:3 time_s"),
        ("time_s,service,requests_per_second\n0,llama-8b-fp8,1\n15,nobody,1\n", [], "t.csv:3 service"),
        ("time_s,service,requests_per_second\n0,llama-8b-fp8,1\n15,llama-8b-fp8,-2\n", [],
         "t.csv:3 requests_per_second"),
        ("time,service,rps\n0,llama-8b-fp8,1\n", [], "t.csv:1"),
        ("time_s,service,requests_per_second,mean_input_tokens,mean_output_tokens\n0,llama-8b-fp8,1,9000,10\n"
         "15,llama-8b-fp8,1,,\n", [], "t.csv llama-8b-fp8 at time_s 0"),
        ("time_s,service,requests_per_second\n0,llama-8b-fp8,1\n15,llama-8b-fp8,1\n",
         ["--set", "models[0].autoscaling.min_replicas=-1"], "--set"),
        ("time_s,service,requests_per_second\n0,llama-8b-fp8,1\n15,llama-8b-fp8,1\n",
         ["--set", "models[7].autoscaling.min_replicas=1"], "--set"),
        ("time_s,service,requests_per_second\n0,llama-8b-fp8,1\n15,llama-8b-fp8,1\n",
         ["--attainment", "1.5"], "--attainment"),
    ],
)
def test_bad_input_is_one_line_naming_it_and_exit_2(tmp_path, capsys, rows, extra, named):
    stack = small_stack_file(tmp_path)
    trace = tmp_path / ("missing.csv" if rows is None else "t.csv")
    if rows is not None:
        trace.write_text(rows)
    assert main(["simulate", str(stack), "--trace", str(trace), *extra]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == ""
    message = captured.err.strip()
    assert "Traceback" not in message and message.count("\n") == 0, message
    assert message.startswith("inferstack: ") and "To fix:" in message and named in message, message
