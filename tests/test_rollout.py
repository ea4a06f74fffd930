"""Rollout strategy from the pool's room at max size (inferstack.planning.rollout), in the workloads and in the plan.

Upstream rules encoded here:
- Kubernetes Deployment RollingUpdate (kubernetes/api@v0.33.0:apps/v1/types.go RollingUpdateDeployment, and
  https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#rolling-update-deployment): maxSurge is
  the pods started above the desired count, maxUnavailable the pods that may be missing; the two cannot both be
  0. A surge pod that cannot be scheduled leaves the rollout Pending until progressDeadlineSeconds.
- LeaderWorkerSet (kubernetes-sigs/lws@v0.10.0:api/leaderworkerset/v1/leaderworkerset_types.go):
  spec.rolloutStrategy {type: RollingUpdate, rollingUpdateConfiguration: {maxSurge, maxUnavailable}} with
  defaults maxSurge 0, maxUnavailable 1, so a group is replaced in place unless a surge is asked for; the
  `UpdateInProgress` condition is true while the leader/worker templates roll.
- pulumi-kubernetes 4.34.2 (sdk/python pulumi_kubernetes/apps/v1/Deployment.py docstring; annotation from
  pulumi/pulumi-kubernetes#417): `pulumi up` waits for a Deployment's Available/NewReplicaSetAvailable for 10
  minutes unless `pulumi.com/skipAwait: "true"`; the plan must then say how to wait.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_validation import assert_valid
from rich.console import Console

from inferstack.engine.render import kubernetes_objects
from inferstack.presentation.terminal import print_rollouts
from inferstack.presentation.summary import rollouts
from inferstack.planning.rollout import rollout
from inferstack.planning.pool_capacity import gpu_requests
from inferstack.planning.sizing import load_seconds
from inferstack.spec import AutoscalingSpec, BatchJobSpec, CapacitySpec, ModelServiceSpec, NodePoolSpec, StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.stacks import load_validated
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def one_pool(max_nodes: int, min_replicas: int, max_replicas: int, batch_parallelism: int = 0) -> StackSpec:
    """One whole-GPU L4 per node, on demand, and one 7B service on it (plus, optionally, a batch job)."""
    jobs = [
        BatchJobSpec(
            name="eval", model_service="qwen-7b", pool="l4", input="s3://acme/in.jsonl", output="s3://acme/out/",
            parallelism=batch_parallelism,
        )
    ] if batch_parallelism else []
    return validate(StackSpec(
        environment="dev",
        node_pools=[
            NodePoolSpec(
                name="l4", instance_types=["g6.xlarge"], max_nodes=max_nodes,
                capacity=CapacitySpec(on_demand_base=max_nodes, spot=False),
            )
        ],
        models=[
            ModelServiceSpec(
                name="qwen-7b", model="Qwen/Qwen2.5-7B-Instruct-AWQ", quantization="awq", pool="l4",
                max_model_len=8192, max_num_seqs=16,
                autoscaling=AutoscalingSpec(min_replicas=min_replicas, max_replicas=max_replicas),
            )
        ],
        batch_jobs=jobs,
    )).written


def test_spare_room_at_max_surges_one_replica():
    spec = one_pool(max_nodes=3, min_replicas=1, max_replicas=2)
    plan = rollout(spec, spec.models[0])
    assert (plan.kind, plan.max_surge, plan.max_unavailable) == ("surge", 1, 0)
    assert plan.deployment_strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert plan.downtime_seconds is None


def test_full_pool_with_two_replicas_replaces_one_at_a_time():
    spec = one_pool(max_nodes=2, min_replicas=2, max_replicas=2)
    plan = rollout(spec, spec.models[0])
    assert (plan.kind, plan.max_surge, plan.max_unavailable) == ("one-at-a-time", 0, 1)
    assert plan.free_at_max == {"nvidia.com/gpu": 0}
    assert plan.downtime_seconds is None


def test_single_replica_on_a_full_pool_reports_one_load_time_of_downtime():
    spec = one_pool(max_nodes=1, min_replicas=1, max_replicas=1)
    model = spec.models[0]
    plan = rollout(spec, model)
    assert (plan.kind, plan.max_surge, plan.max_unavailable) == ("downtime", 0, 1)
    assert plan.downtime_seconds == load_seconds(model)

    section = rollouts(spec)
    row = section["models"][0]
    assert section["pulumi_up_waits"] is False
    assert row["downtime_seconds"] == load_seconds(model)
    assert row["check"] == f"kubectl -n {spec.serving_namespace} rollout status deployment/qwen-7b --timeout={row['check_timeout_seconds']}s"
    console = Console(record=True, width=200)
    print_rollouts(section, console)
    text = console.export_text()
    assert "downtime" in text and "pulumi up does not wait" in text and row["check"] in text


def test_batch_job_pods_take_the_room_a_surge_would_need():
    roomy = one_pool(max_nodes=2, min_replicas=1, max_replicas=1)
    assert rollout(roomy, roomy.models[0]).kind == "surge"
    shared = one_pool(max_nodes=2, min_replicas=1, max_replicas=1, batch_parallelism=1)
    assert rollout(shared, shared.models[0]).kind == "downtime"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_free_at_max_is_the_pools_max_resources_less_every_service_at_max(stack):
    """The same figure auto placement and the Kueue quota check use: PoolHardware.max_resources."""
    spec = load_validated(STACKS, stack).stack
    for model in spec.models:
        hardware = PoolHardware(spec.pool(model.pool))
        expected = dict(hardware.max_resources)
        for other in (m for m in spec.models if m.pool == model.pool):
            ((resource, count),) = gpu_requests(other, hardware).items()
            expected[resource] -= count * other.pipeline_parallel * other.autoscaling.max_replicas
        for index, job in enumerate(spec.batch_jobs):
            if job.pool == model.pool:
                ((resource, count),) = gpu_requests(spec.model_service(job.model_service), hardware).items()
                expected[resource] -= count * job.parallelism
        plan = rollout(spec, model)
        assert plan.free_at_max == expected
        if plan.spare_replica_fits:
            assert all(expected[r] >= n for r, n in plan.replica_needs.items())


@pytest.fixture(scope="module", params=["dev", "prod"])
def rendered(request):
    from test_serving import render

    spec = load_validated(STACKS, request.param).stack
    return spec, kubernetes_objects(render(spec))


def test_workloads_carry_the_derived_strategy_and_are_valid(rendered):
    spec, objects = rendered
    by_name = {o["metadata"]["name"]: o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet")}
    for model in spec.models:
        plan = rollout(spec, model)
        if model.pipeline_parallel > 1:
            workload = by_name[f"{model.name}-group"]
            strategy = workload["spec"]["rolloutStrategy"]
            assert strategy == plan.lws_strategy
            update = strategy["rollingUpdateConfiguration"]
        else:
            workload = by_name[model.name]
            assert workload["spec"]["strategy"] == plan.deployment_strategy
            update = workload["spec"]["strategy"]["rollingUpdate"]
        assert (update["maxSurge"], update["maxUnavailable"]) != (0, 0)   # the API server refuses both at 0
        assert workload["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
        assert_valid([workload])


def test_prod_multi_node_group_states_its_strategy_and_how_to_wait():
    spec = load_validated(STACKS, "prod").stack
    rows = {row["model"]: row for row in rollouts(spec)["models"]}
    long = rows["llama-70b-long"]
    assert long["workload"] == "leaderworkerset/llama-70b-long-group"
    assert "--for=condition=UpdateInProgress=False" in long["check"]
    assert long["max_unavailable"] + long["max_surge"] >= 1
