"""`inferstack simulate`: the replay against cases worked by hand, its determinism and its refusals.

The small stack is prod's llama-8b-fp8 alone on an on-demand L40S pool (one GPU a node, one replica a node),
scaled by KEDA on queue depth (target 8, polling 15 s). Its figures come from the functions the plan uses: c, one
replica's full-load request rate (load.at_concurrency at the admission limit), and S, a pod's start on a new node
(creation_times.replica_parts). The controllers act every 15 s (the HPA's sync and KEDA's polling interval).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
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


@pytest.mark.parametrize("polling", [15, 60])
def test_a_step_above_one_replica_scales_up_after_the_hpa_sync_and_start_and_counts_the_wait_late(tmp_path, polling):
    """Worked by hand, rate R = 1.5c from t = 0, no SLO (a request is late when it waited at all). The queue is a
    fluid served first in, first out:
    - the HPA's sync at 0 reads an empty queue; from 0 one replica serves c against 1.5c arriving, so the queue grows
      0.5c a second and every request from 0 on waits;
    - the sync at 15 reads 7.5c waiting (> 8 x 1.1 per replica): the HPA asks ceil(7.5c / 8) > 2, KEDA's
      maxReplicaCount 2 caps it; the pod needs a second node and serves at T = 15 + S;
    - the queue peaks at 0.5c x T; from T two replicas serve 2c against 1.5c and it drains by 0.5c a second, empty
      at 2T; every request from 2T on is served as it arrives.
    So the met share is (E - 2T) / E over a trace of E seconds, and the replicas served late requests without pause
    from 0 to 2T: 2T seconds below the SLO. The trace ends 150 s after 2T, before the scale-down stabilization window
    (>= 300 s) could act (Kubernetes horizontal-pod-autoscale, "Algorithm details" and "Stabilization window").
    KEDA's pollingInterval does not delay it: from one replica up the HPA reads the metric at its own 15 s sync
    (kube-controller-manager --horizontal-pod-autoscaler-sync-period; KEDA v2.20.2
    apis/keda/v1alpha1/scaledobject_webhook.go:340 warns "PollingInterval is only relevant when minReplicaCount = 0 or
    idleReplicaCount = 0 or useCachedMetrics is enabled"), so polling every 60 s replays the same."""
    validated = small(polling_interval_seconds=polling)
    c = one_replica_rate(validated)
    ready = STEP + start_seconds(validated, new_node=True)
    end = math.ceil(2 * ready / STEP) * STEP + 150
    result = replay(validated, write_trace(tmp_path / "t.csv", [(0, 1.5 * c)], end))
    assert (result.scale_ups, result.cold_starts) == (1, 1)
    assert result.peak_queue == pytest.approx(0.5 * c * ready, abs=0.1)
    assert result.slo_attainment == pytest.approx((end - 2 * ready) / end, abs=1e-6)
    assert result.seconds_below_slo == round(2 * ready)


def resample(changes: list[tuple[int, float]], end: int, spacing: int) -> str:
    rows = [(t, next(r for at, r in reversed(changes) if at <= t)) for t in range(0, end, spacing)]
    return "time_s,service,requests_per_second\n" + "".join(f"{t},{SERVICE},{r!r}\n" for t, r in rows)


@pytest.mark.parametrize("spacing", [60, 3, 1])
def test_the_same_traffic_at_any_row_spacing_replays_the_same(tmp_path, spacing):
    """The controllers act at their own intervals (the HPA's 15 s sync, KEDA's pollingInterval), not at the trace's
    rows, and the queue is a fluid whose waits are continuous: traffic written as 5-minute rows and the same
    piecewise rates as 1-minute, 3-second or 1-second rows give the same attainment, cost and TTFT percentiles (the
    steady state is looked up per stretch, so TTFT may move by a rounding of the rate bucket)."""
    validated = small(max_replicas=3)
    c = one_replica_rate(validated)
    changes = [(0, 0.5 * c), (300, 2.2 * c), (1200, 0.3 * c), (2100, 1.4 * c)]
    coarse, fine = tmp_path / "coarse.csv", tmp_path / "fine.csv"
    coarse.write_text(resample(changes, 3000, 300))
    fine.write_text(resample(changes, 3000, spacing))
    one, other = replay(validated, coarse), replay(validated, fine)
    assert other.slo_attainment == pytest.approx(one.slo_attainment, abs=1e-4)
    assert (other.usd, other.scale_ups, other.cold_starts) == (one.usd, one.scale_ups, one.cold_starts)
    assert other.ttft_p95_ms == pytest.approx(one.ttft_p95_ms, rel=0.01)
    assert other.peak_queue == pytest.approx(one.peak_queue, abs=0.5)


def test_a_wait_is_the_backlog_ahead_over_the_serving_rate(tmp_path):
    """The fluid queue by hand, one replica capped at max 1, no SLO: a 60-s burst at 2c grows the backlog by c a
    second to 60c (its peak); then 0.5c arriving drains it by 0.5c a second, empty at 180 s. Every request that
    arrived before 180 s waited (the one at position x of the burst arrives at x / 2c and gets its turn at x / c);
    every later one is served as it arrives, so the met share is (600 - 180) x 0.5c of 120c + 540 x 0.5c."""
    validated = small(max_replicas=1)
    c = one_replica_rate(validated)
    result = replay(validated, write_trace(tmp_path / "t.csv", [(0, 2 * c), (60, 0.5 * c)], 600))
    assert result.peak_queue == pytest.approx(60 * c, abs=0.1)
    assert result.slo_attainment == pytest.approx((600 - 180) * 0.5 * c / (120 * c + 540 * 0.5 * c), abs=1e-6)


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


def test_the_last_step_is_charged_only_up_to_the_trace_end(tmp_path):
    """Worked by hand: rows at 0, 1 and 3600 s make a 1-s spacing, so the trace ends at 3601 s, 1 s into a 15-s
    controller step. The two min replicas are charged those 3601 s, not the 3615 s to that step's end: 2 x 3601 /
    3600 GPU hours and the plan's min-scale $/h (presentation/summary.engine_cost 'min', two replicas at the
    replica's on-demand price) x 3601 / 3600."""
    validated = small(min_replicas=2, max_replicas=3)
    trace = tmp_path / "t.csv"
    trace.write_text(f"time_s,service,requests_per_second\n0,{SERVICE},0\n1,{SERVICE},0\n3600,{SERVICE},0\n")
    result = replay(validated, trace)
    replica_usd_per_hour = report.setups(validated)[0][0].replica_usd_per_hour
    plan = engine_cost(validated.stack.models[0], validated.pools["l40s"], validated.stack)
    assert result.gpu_hours == round(2 * 3601 / 3600, 3)
    assert result.usd == round(2 * replica_usd_per_hour * 3601 / 3600, 2)
    assert result.usd == pytest.approx(plan["min"] * 3601 / 3600, abs=0.01)   # the plan rounds its $/h to cents


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
    window, exclusive); KEDA idles the service at I, the first poll more than cooldownPeriod after 1170, and the node
    is empty from then. The serving NodePool consolidates an empty node after consolidateAfter 30m
    (platform/karpenter_pools.py SERVING_CONSOLIDATE_AFTER; Karpenter docs "Disruption", consolidationPolicy
    WhenEmpty): requests back at I + 900 find the node and its cached weights (a warm start, one cold start in
    all); at I + 2700 it is gone and the wake launches a new node (two cold starts)."""
    document = small_document(min_replicas=0, scale_to_zero=True)
    document["platform"] = {**document.get("platform", {}), "node_autoscaler": "karpenter"}
    document["node_pools"][0].update(min_nodes=0, capacity={"on_demand_base": 0, "spot": False})
    validated = validate(StackSpec.model_validate(document))
    cooldown = report.setups(validated)[0][0].scaler.cooldown
    idle = 1170 + (cooldown // STEP + 1) * STEP   # KEDA idles at the first poll after lastActive + cooldown
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
    assert sim.metric_replicas(average, 40, 2, 2, 10) == 5      # 40 waiting over 2 replicas, 8 each: 5
    assert sim.metric_replicas(average, 17, 2, 2, 10) == 2      # 8.5 each: within 10% of 8
    assert sim.metric_replicas(value, 0.96, 3, 3, 10) == 4      # ceil(3 x 0.96 / 0.8) = ceil(3.6)
    assert sim.metric_replicas(value, 0.2, 4, 4, 10) == 1
    assert sim.metric_replicas(average, 1e300, 2, 2, 10) == 10  # capped at maxReplicaCount before rounding


def test_a_value_target_scales_the_ready_pods_and_an_average_value_target_every_pod():
    """kubernetes/kubernetes pkg/controller/podautoscaler/replica_calculator.go: for a Value target
    GetExternalMetricReplicas -> getUsageRatioReplicaCount keeps the spec replicas within the tolerance, else asks
    ceil(usageRatio x readyPodCount); for AverageValue GetExternalPerPodMetricReplicas takes the status replicas
    (every pod the Deployment made, ready or starting), compares usage / (target x replicas) and asks
    ceil(usage / target). Worked by hand with 4 replicas of which 2 are ready."""
    value = sim.Trigger("kv-cache", "Value", 0.8, 0)
    average = sim.Trigger("queue-depth", "AverageValue", 8, 0)
    assert sim.metric_replicas(value, 1.2, 4, 2, 10) == 3       # ratio 1.5 x 2 ready, not x 4 asked
    assert sim.metric_replicas(value, 0.84, 4, 2, 10) == 4      # ratio 1.05: within the tolerance, the 4 stay
    assert sim.metric_replicas(value, 0.2, 4, 0, 10) == 0       # no ready pod: the HPA's minimum takes over
    assert sim.metric_replicas(average, 40, 4, 2, 10) == 5      # 40 / (8 x 4) = 1.25: ceil(40 / 8)
    assert sim.metric_replicas(average, 34, 4, 2, 10) == 4      # 34 / 32 = 1.06: within the tolerance


def scaler(down: dict | None = None, up: dict | None = None, **fields) -> sim.Scaler:
    """A ScaledObject on queue depth (target 8 a replica, min 1, max 10, polling 15 s) with these HPA behaviours."""
    behavior = {key: rules for key, rules in (("scaleDown", down), ("scaleUp", up)) if rules is not None}
    body = {"minReplicaCount": 1, "maxReplicaCount": 10, "pollingInterval": 15, "cooldownPeriod": 300, **fields,
            "triggers": [{"name": "queue-depth", "metadata": {"threshold": "8"}}],
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}}}
    return sim.scaler_from_scaled_object(body, SERVICE)


def controlled(scaled_by: sim.Scaler, replicas: int) -> sim._Service:
    """The small stack's service under `scaled_by` at `replicas`, every pod ready: the controllers alone, the test
    setting the queue."""
    setup = replace(report.setups(small())[0][0], scaler=scaled_by)
    return sim._Service(setup, sim._SteadyStates(setup), (), replicas, [sim._Pod(0) for _ in range(replicas)])


def test_scale_down_lands_the_sync_the_stabilization_window_lets_go_of_the_higher_recommendation():
    """kubernetes/kubernetes pkg/controller/podautoscaler/horizontal.go stabilizeRecommendationWithBehaviors applies
    the highest recommendation whose timestamp.After(now - window). Worked by hand, window 300 s, 3 replicas: the
    sync at 0 reads 24 waiting (8 a replica: 3 recommended), every later sync an empty queue (1). At 285 the window
    holds the 3 of 0; at 300 that sample is exactly 300 s old, not after now - 300, so the HPA scales down to 1 then
    (the default Percent 100 policy allows it), not a sync later."""
    service = controlled(scaler(down={"stabilizationWindowSeconds": 300}), 3)
    service.queued = 24.0
    assert sim._hpa(service, 0, service.setup.scaler) == 3
    service.queued = 0.0
    decided = {now: sim._hpa(service, now, service.setup.scaler) for now in range(15, 301, 15)}
    assert decided[285] == 3 and decided[300] == 1


def test_a_percent_policy_rounds_as_the_hpa_does():
    """horizontal.go calculateScaleDownLimitWithBehaviors allows int32(start x (1 - value/100)), the conversion
    truncating, and calculateScaleUpLimitWithScalingRules int32(math.Ceil(start x (1 + value/100))). From 5 at 50%:
    down to int(2.5) = 2, up to ceil(7.5) = 8; through the HPA, an empty queue (1 asked) with no stabilization
    window lands on 2."""
    policy = (("Percent", 50.0, 60),)
    assert sim._rate_limit([], 0, 5, policy, "Max", up=False) == 2
    assert sim._rate_limit([], 0, 5, policy, "Max", up=True) == 8
    halving = scaler(down={"stabilizationWindowSeconds": 0,
                           "policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}]})
    assert sim._hpa(controlled(halving, 5), 0, halving) == 2


def test_select_policy_disabled_stops_scaling_that_way_only():
    """horizontal.go calculateScaleDownLimitWithBehaviors and calculateScaleUpLimitWithScalingRules return the current
    replicas when selectPolicy is Disabled (Kubernetes docs, "Horizontal Pod Autoscaling", "Disable scale down").
    Worked by hand from 4 replicas: scale-down disabled, an empty queue (1 asked) keeps 4 and 400 waiting (50 asked)
    still scales up by the default policies to 8 (100% or 4 pods); scale-up disabled, 400 waiting keeps 4."""
    no_down = scaler(down={"stabilizationWindowSeconds": 0, "selectPolicy": "Disabled"})
    service = controlled(no_down, 4)
    assert sim._hpa(service, 0, no_down) == 4
    service.queued = 400.0
    assert sim._hpa(service, 15, no_down) == 8
    no_up = scaler(up={"selectPolicy": "Disabled"})
    service = controlled(no_up, 4)
    service.queued = 400.0
    assert sim._hpa(service, 0, no_up) == 4


def test_keda_idles_only_after_the_cooldown_has_passed():
    """kedacore/keda v2.20.2 pkg/scaling/executor/scale_scaledobjects.go scaleToZeroOrIdle scales to idleReplicaCount
    when LastActiveTime.Add(cooldownPeriod).Before(time.Now()), strictly after. Worked by hand, cooldownPeriod 300,
    polling 15, the trigger last active at 0: the poll at 300 keeps the replica, the poll at 315 idles it at 0."""
    idling = scaler(idleReplicaCount=0)
    service = controlled(idling, 1)
    service.last_active = 0
    sim._control(service, 300)
    assert service.replicas == 1
    sim._control(service, 315)
    assert service.replicas == 0


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
        ("time_s,service,requests_per_second\n0,llama-8b-fp8,1\n1000000000000,llama-8b-fp8,1\n", [],
         "t.csv:3 time_s"),
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


def test_the_recommendation_tries_each_min_replicas_at_each_target_and_keeps_the_stack_on_a_tie(tmp_path):
    """Worked by hand: at c/2 one replica never queues, so every candidate meets the SLO and costs one replica: the
    cheapest is min_replicas 1, and among equal costs the stack's own target (nothing to change). Every
    min_replicas from 1 to max_replicas is tried at each of TARGET_SCALES times the target."""
    validated = small(max_replicas=2)
    c = one_replica_rate(validated)
    trace = report.read_trace(write_trace(tmp_path / "t.csv", [(0, c / 2)], 1800), validated)
    (found,) = report.recommend(validated, trace, 0.99)
    assert (found["min_replicas"], found["target"], found["target_now"]) == (1, 8.0, 8.0)
    assert found["metric"] == "queue_depth" and found["target_source"] == "stated"
    tried = {(t["min_replicas"], t["target"]) for t in found["tried"]}
    assert tried == {(m, 8.0 * scale) for m in (1, 2) for scale in report.TARGET_SCALES}
    assert all(t["slo_attainment"] == 1.0 for t in found["tried"])


def test_a_trace_row_at_an_absurd_rate_or_with_a_byte_order_mark(tmp_path, capsys):
    """A rate above MAX_REQUESTS_PER_SECOND is refused at its row (no float overflow in the replicas the HPA would
    ask); a spreadsheet's UTF-8 export with a byte-order mark reads as the same header."""
    stack = small_stack_file(tmp_path)
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,service,requests_per_second\n0,llama-8b-fp8,1\n15,llama-8b-fp8,1e308\n")
    assert main(["simulate", str(stack), "--trace", str(trace)]) == EXIT_BAD_INPUT
    assert "t.csv:3 requests_per_second" in capsys.readouterr().err
    trace.write_bytes(b"\xef\xbb\xbftime_s,service,requests_per_second\n0,llama-8b-fp8,1\n15,llama-8b-fp8,1\n")
    assert main(["simulate", str(stack), "--trace", str(trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["services"][0]["requests"] == 30.0


def test_a_trace_row_past_31_days_is_refused_at_its_row(tmp_path):
    """A time_s beyond MAX_TRACE_SECONDS (31 days) would have the replay step through it for hours: refused at its
    row with the bound; a row at the bound reads."""
    trace = tmp_path / "t.csv"
    trace.write_text(f"time_s,service,requests_per_second\n0,{SERVICE},1\n{sim.MAX_TRACE_SECONDS + 1},{SERVICE},1\n")
    with pytest.raises(SpecError) as refused:
        sim.read_trace(trace, [SERVICE])
    assert refused.value.path == "t.csv:3 time_s"
    assert "above 2,678,400 (31 days" in refused.value.problem and "at most 2,678,400" in refused.value.fix
    trace.write_text(f"time_s,service,requests_per_second\n0,{SERVICE},1\n{sim.MAX_TRACE_SECONDS},{SERVICE},1\n")
    assert sim.read_trace(trace, [SERVICE]).rows[SERVICE][-1].time == sim.MAX_TRACE_SECONDS


def test_an_embedding_service_without_traffic_takes_one_output_token_within_its_context(tmp_path):
    """An embedding (pooling) model generates no token after the prompt: where neither the trace row nor the service
    states tokens, it takes one output token and a prompt cut to its max_model_len (prod's bge-embed: 512)."""
    stack = load_validated(REPO / "stacks", "prod").stack
    embed = next(m for m in stack.models if m.resolved_architecture.task != "generate")
    assert report.default_tokens(embed) == (min(1024, embed.max_model_len - 1), 1)


PD = "qwen-32b-pd"


def pd_document(**traffic) -> dict:
    """The serving stack's prefill/decode service alone on its H100 pool, no SLO."""
    serving = load_validated(REPO / "stacks", "serving").written.model_dump(mode="json", exclude_unset=True)
    model = next(m for m in serving["models"] if m["name"] == PD)
    model["traffic"] = {**model["traffic"], **traffic}
    serving["models"] = [model]
    serving["node_pools"] = [p for p in serving["node_pools"] if p["name"] == model["pool"]]
    return serving


def pd_roles(validated) -> dict[str, sim.ServiceSetup]:
    return {s.model.pd_role: s for s in report.setups(validated)[0]}


def role_rate(setup: sim.ServiceSetup, tokens: tuple[int, int]) -> float:
    """One replica's full-load request rate on the part of the request its role computes."""
    states = sim._SteadyStates(setup)
    return states.capacity(tokens)


def test_a_prefill_decode_service_runs_its_requests_through_both_engines_in_tandem(tmp_path):
    """Worked by hand, a P/D service at half of what one replica of either role carries, no SLO: every request
    prefills on the prefill engine and goes on to the decode engine (its 8000-token prompt is above non_cached_tokens
    256, llm-d-router pd-profile-handler), so both engines see every request and neither queues; the first token is
    the prefill engine's time to first token F plus one decode step of the decode engine (vLLM's NIXL connector loads
    the prompt's KV, disaggregation.role_workload). A request reaches the decode engine F after its prefill turn, so
    those whose turn came in the trace's last F seconds are still on their way at its end: missed, attainment
    1 - F / 1800."""
    base = validate(StackSpec.model_validate(pd_document()))
    roles = pd_roles(base)
    tokens = base.stack.models[0].traffic.mean_input_tokens, base.stack.models[0].traffic.mean_output_tokens
    rate = 0.5 * min(role_rate(roles["prefill"], (tokens[0], roles["prefill"].default_tokens[1])),
                     role_rate(roles["decode"], tokens))
    validated = validate(StackSpec.model_validate(pd_document(requests_per_second=rate)))
    trace = tmp_path / "t.csv"
    trace.write_text(resample([(0, rate)], 1800, 300).replace(SERVICE, PD))
    result = report.run(validated, report.read_trace(trace, validated))
    decode, prefill = (next(r for r in result.services if r.service == name) for name in (PD, f"{PD}-prefill"))
    assert prefill.requests == decode.requests == pytest.approx(rate * 1800, abs=0.1)
    first = sim._SteadyStates(roles["prefill"]).point((tokens[0], 2), rate).ttft
    assert prefill.slo_attainment is None and decode.slo_attainment == pytest.approx(1 - first / 1800, abs=1e-6)
    assert (decode.scale_ups, prefill.scale_ups, decode.peak_queue, prefill.peak_queue) == (0, 0, 0.0, 0.0)
    step = sim._SteadyStates(roles["decode"]).point(tokens, rate).itl
    assert decode.ttft_p50_ms == pytest.approx((first + step) * 1000, rel=0.02)
    assert result.total()["requests"] == decode.requests   # a request counted once, where it answers


def test_a_short_prompt_skips_the_prefill_engine(tmp_path):
    """A prompt below non_cached_tokens uncached tokens stays on the decode engine, which prefills it (llm-d-router
    pd-profile-handler `nonCachedTokens`): the prefill engine gets none of the trace's requests."""
    validated = validate(StackSpec.model_validate(pd_document()))
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,service,requests_per_second,mean_input_tokens,mean_output_tokens\n"
                     f"0,{PD},0.5,200,100\n300,{PD},0.5,200,100\n")
    result = report.run(validated, report.read_trace(trace, validated))
    decode, prefill = (next(r for r in result.services if r.service == name) for name in (PD, f"{PD}-prefill"))
    assert prefill.requests == 0.0 and decode.requests == pytest.approx(300.0)
    assert decode.slo_attainment == 1.0


def test_a_prefill_engine_hands_a_request_on_when_its_prompt_is_computed():
    """The module's rule: a request joins the decode engine's queue when the prefill engine has computed its prompt,
    the prefill engine's time to first token F after its turn, with F behind it. Worked by hand: 5 requests arriving
    evenly from 10 s to 20 s, served as they arrive (one every 2 s, under one replica's full-load rate), reach the
    decode engine from 10 + F to 20 + F."""
    roles = pd_roles(validate(StackSpec.model_validate(pd_document())))
    prefill, decode = (sim._Service(roles[r], sim._SteadyStates(roles[r]), (), 1) for r in ("prefill", "decode"))
    prefill.decode = decode
    tokens = prefill.tokens()
    speed = prefill.states.capacity(tokens)
    prefill.point = prefill.states.point(tokens, 0.5)
    piece = sim._Piece(10.0, 20.0, 5.0)
    sim._book(prefill, piece, 5.0, 10.0, 1 / speed - piece.spacing, speed)
    (handed,) = decode.queue
    first = prefill.point.ttft
    assert (handed.first, handed.last, handed.requests) == pytest.approx((10 + first, 20 + first, 5.0))
    assert (handed.base, handed.wait_first, handed.wait_last) == pytest.approx((first, 0.0, 0.0))


def test_requests_left_at_the_prefill_engine_count_as_missed_on_the_service_row(tmp_path):
    """Worked by hand, the P/D service with no SLO: 1500 s at half of what one replica of either engine carries (no
    request waits: all met), then 300 s at three times what the prefill engine's max_replicas carry, so every request
    of the burst waits at the prefill engine and most are still queued there at the end. The service's row (the
    decode engine's) and the total count every request of the trace, the queued ones missed: attainment =
    the first 1500 s's requests over all of them."""
    validated = validate(StackSpec.model_validate(pd_document()))
    roles = pd_roles(validated)
    model = validated.stack.models[0]
    tokens = model.traffic.mean_input_tokens, model.traffic.mean_output_tokens
    prefill_rate = role_rate(roles["prefill"], (tokens[0], roles["prefill"].default_tokens[1]))
    calm = 0.5 * min(prefill_rate, role_rate(roles["decode"], tokens))
    burst = 3 * prefill_rate * roles["prefill"].model.autoscaling.max_replicas
    trace = tmp_path / "t.csv"
    trace.write_text(resample([(0, calm), (1500, burst)], 1800, 300).replace(SERVICE, PD))
    result = report.run(validated, report.read_trace(trace, validated))
    decode, prefill = (next(r for r in result.services if r.service == name) for name in (PD, f"{PD}-prefill"))
    sent = calm * 1500 + burst * 300
    assert decode.requests == prefill.requests == result.total()["requests"] == pytest.approx(sent, abs=0.1)
    assert decode.slo_attainment == pytest.approx(calm * 1500 / sent, abs=1e-5)
    assert result.total()["slo_attainment"] == decode.slo_attainment


def test_the_readme_prints_what_simulate_prints_for_the_shipped_day():
    """The README's worked example is the replay's table for stacks/traces/prod-day.csv, byte for byte (the
    recommendation lines after it are re-simulations this test leaves to the CLI tests)."""
    readme = (REPO / "README.md").read_text()
    command = "    $ inferstack simulate prod --trace stacks/traces/prod-day.csv\n"
    shown = readme.split(command, 1)[1].split("\n\n", 1)[0].splitlines()
    validated = load_validated(REPO / "stacks", "prod")
    trace_path = REPO / "stacks" / "traces" / "prod-day.csv"
    printed = report.as_text([report.report("prod", trace_path, report.run(validated, report.read_trace(
        trace_path, validated)))], []).splitlines()
    assert [line.removeprefix("    ") for line in shown[:len(printed)]] == printed
