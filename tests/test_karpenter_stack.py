"""stacks/karpenter.py end to end: GPU nodes from Karpenter (issue 15).

An EFA H100 pool on an ODCR with spot above it, a spot L40S pool above one on-demand node and an A100 MIG pool
plan, render and pass every policy; the objects validate against the upstream schemas; the interruption queue
and its five EventBridge rules exist and the controller reads that queue; no GPU managed node group is left; and
what cannot work under Karpenter is refused at spec time.

Upstream rules (shared/reference/karpenter.md): the controller reads the queue named by Helm
`settings.interruptionQueue` (section 6); Karpenter sizes nodes from the instance type's own resources, so a pod
asking for a MIG profile or a renamed share never gets a node (sections 2, 5); a dynamic NodePool keeps no idle
node (section 5); Kueue's flavors must select labels Karpenter's nodes carry: karpenter.sh/capacity-type, not
EKS's eks.amazonaws.com/capacityType (section 4.1).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from kube_validation import assert_valid

from inferstack.cli import main
from inferstack.spec import SpecError, StackSpec, describe_validation_error
from inferstack.stacks import load_stack
from inferstack.validation import validate

REPO = Path(__file__).resolve().parents[1]
STACKS = REPO / "stacks"
EVENT_TYPES = {
    ("aws.health", "AWS Health Event"),
    ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("aws.ec2", "EC2 Instance State-change Notification"),
    ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("karpenter") / "out"
    assert main(["render", "karpenter", "--stacks-dir", str(STACKS), "--out", str(out)]) == 0
    resources = json.loads((out / "resources.json").read_text())
    objects = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))]
    return resources, objects, json.loads((out / "plan.json").read_text())


def of_type(resources, type_):
    return [r for r in resources if r["type"] == type_]


def test_the_stack_passes_every_policy_and_validates(rendered):
    resources, objects, plan = rendered
    assert [p["name"] for p in plan["policies"] if p["violations"]] == []
    assert_valid(objects)
    kinds = {(o["apiVersion"], o["kind"]) for o in objects}
    assert {("karpenter.k8s.aws/v1", "EC2NodeClass"), ("karpenter.sh/v1", "NodePool")} <= kinds


def test_karpenter_launches_every_gpu_node(rendered):
    resources, objects, _ = rendered
    groups = of_type(resources, "aws:eks/nodeGroup:NodeGroup")
    assert [g["name"] for g in groups] == ["karpenter-eks-system"]          # the controller's nodes only
    assert of_type(resources, "aws:ec2/launchTemplate:LaunchTemplate") == []
    classes = {o["metadata"]["name"] for o in objects if o["kind"] == "EC2NodeClass"}
    # The ODCR's NodePool has a class of its own, outside the placement group its spot nodes share (item 5c).
    assert classes == {"karpenter-h100", "karpenter-h100-reserved", "karpenter-l40s", "karpenter-a100-mig"}
    pools = {o["metadata"]["name"]: o for o in objects if o["kind"] == "NodePool"}
    assert set(pools) == {"karpenter-h100-reserved", "karpenter-h100-spot", "karpenter-l40s-on-demand",
                          "karpenter-l40s-spot", "karpenter-a100-mig-on-demand"}
    reserved = pools["karpenter-h100-reserved"]["spec"]
    assert int(reserved["limits"]["nodes"]) == 2 and reserved["weight"] > pools["karpenter-h100-spot"]["spec"]["weight"]


def test_the_interruption_queue_feeds_the_controller(rendered):
    resources, _, _ = rendered
    (queue,) = of_type(resources, "aws:sqs/queue:Queue")
    rules = of_type(resources, "aws:cloudwatch/eventRule:EventRule")
    patterns = [json.loads(r["inputs"]["eventPattern"]) for r in rules]
    assert {(p["source"][0], p["detail-type"][0]) for p in patterns} == EVENT_TYPES
    targets = of_type(resources, "aws:cloudwatch/eventTarget:EventTarget")
    assert len(targets) == 5 and all(t["name"].startswith("karpenter-karpenter-") for t in targets)
    assert all("karpenter-karpenter-interruption-queue" in t["depends_on"] for t in targets)
    (release,) = [r for r in of_type(resources, "kubernetes:helm.sh/v3:Release") if r["name"].endswith("karpenter-release")]
    assert release["inputs"]["values"]["settings"]["interruptionQueue"] == queue["inputs"]["name"]
    assert release["inputs"]["values"]["settings"]["clusterName"] == load_stack(STACKS, "karpenter").cluster_name
    assert release["inputs"]["namespace"] == "kube-system"


def test_kueue_flavors_select_karpenter_capacity_labels(rendered):
    _, objects, _ = rendered
    flavors = {o["metadata"]["name"]: o["spec"]["nodeLabels"] for o in objects if o["kind"] == "ResourceFlavor"}
    assert flavors["h100-reserved"]["karpenter.sh/capacity-type"] == "reserved"
    assert flavors["l40s-spot"]["karpenter.sh/capacity-type"] == "spot"
    assert not any("eks.amazonaws.com/capacityType" in labels for labels in flavors.values())
    node_labels = [o["spec"]["template"]["metadata"]["labels"] for o in objects if o["kind"] == "NodePool"]
    for name, labels in flavors.items():
        pool = labels["inferstack.dev/pool"]
        assert any(n["inferstack.dev/pool"] == pool for n in node_labels), name


def test_the_plan_says_every_first_replica_waits_for_a_new_node(rendered):
    _, _, plan = rendered
    assert {m["model"]: m["new_node"] for m in plan["time_to_serving"]["models"]} == {
        "llama-70b": True, "llama-8b": True, "embed": True,
    }
    assert plan["interruption"]["handled_by"].startswith("Karpenter")


def test_migrating_from_node_groups_names_the_reloads(tmp_path, capsys):
    """`inferstack diff` on the same stack rendered with managed node groups first: the GPU node groups are deleted
    while services serve, so the change is blocking (exit 3) and names them (issue 26, item 8)."""
    stacks = tmp_path / "before"
    stacks.mkdir()
    source = (STACKS / "karpenter.py").read_text().replace('    platform=PlatformSpec(node_autoscaler="karpenter"),\n', "")
    (stacks / "karpenter.py").write_text(source)
    assert main(["render", "karpenter", "--stacks-dir", str(stacks), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["diff", "karpenter", "--stacks-dir", str(STACKS), "--against", str(tmp_path / "out"),
                 "--format", "json"]) == 3
    result = json.loads(capsys.readouterr().out)
    assert result["gpu_capacity_deleted"]
    deleted = {d["type"] for d in result["deleted"]}
    added = {a["type"] for a in result["added"]}
    assert "aws:eks/nodeGroup:NodeGroup" in deleted and "kubernetes:karpenter.sh/v1:NodePool" in added
    assert {d["name"] for d in result["downtime"]} == {
        "karpenter-serving-llama-70b-deployment", "karpenter-serving-llama-8b-deployment",
        "karpenter-serving-embed-deployment",
    }


# ---------------------------------------------------------------------------------------------- refusals


def karpenter_spec() -> dict:
    return load_stack(STACKS, "karpenter").model_dump(mode="json", exclude_unset=True)


def refusal(change) -> SpecError:
    spec = copy.deepcopy(karpenter_spec())
    change(spec)
    with pytest.raises((SpecError, ValueError)) as caught:
        validate(StackSpec.model_validate(spec))
    error = caught.value
    return error if isinstance(error, SpecError) else describe_validation_error(error, StackSpec)


def pool(index: int, **fields):
    return lambda spec: spec["node_pools"][index].update(fields)


REFUSALS = {
    "min nodes": (pool(1, min_nodes=1), "node_pools[1].min_nodes", "Karpenter launches nodes for pending pods"),
    # settings.featureGates.nodeRepair is one gate for the controller (shared/reference/karpenter.md section 8).
    "repair on some pools": (pool(0, auto_repair=False), "node_pools[0].auto_repair", "one switch for the controller"),
    "mixed MIG": (pool(2, gpu_sharing={"mode": "mig", "strategy": "mixed", "layout": {"3g.40gb": 2}}),
                  "node_pools[2].gpu_sharing", "which Karpenter cannot see"),
    "shared GPUs": (pool(1, gpu_sharing={"mode": "time_slicing", "replicas": 2}), "node_pools[1].gpu_sharing",
                    "nvidia.com/gpu.shared"),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_what_karpenter_cannot_launch_is_refused(case):
    change, path, says = REFUSALS[case]
    error = refusal(change)
    assert error.path == path and says in str(error) and str(error).count("To fix:") == 1


def test_the_same_pools_pass_under_the_cluster_autoscaler():
    spec = karpenter_spec()
    spec["platform"]["node_autoscaler"] = "cluster-autoscaler"
    spec["node_pools"][2]["gpu_sharing"]["strategy"] = "mixed"
    spec["models"][2]["mig_profile"] = "3g.40gb"
    validate(StackSpec.model_validate(spec))


def test_the_spec_names_the_window_for_drift_replacements():
    """Section 5: when budgets overlap the most restrictive wins, so a 0-node budget for Drifted from the window's
    end for the rest of the day leaves drift replacements to the window."""
    from inferstack.platform.karpenter_pools import node_pools

    spec = karpenter_spec()
    spec["platform"]["maintenance_window"] = {"start_hour_utc": 22, "hours": 4}
    stack = validate(StackSpec.model_validate(spec)).written
    (pool,) = [p for p in stack.node_pools if p.name == "l40s"]
    for body in node_pools(pool, environment="karpenter", maintenance_window=stack.platform.maintenance_window):
        closed = [b for b in body["spec"]["disruption"]["budgets"] if b["nodes"] == "0"]
        assert closed == [{"nodes": "0", "reasons": ["Drifted"], "schedule": "0 2 * * *",
                           "duration": "20h"}]


def test_serving_pods_keep_consolidation_off_and_are_drained_on_interruption_and_drift(rendered):
    """karpenter.sh/do-not-disrupt keeps consolidation (graceful) off a serving node; a NodePool's
    terminationGracePeriod lets interruption and drift (eventual) drain those pods anyway, deleting each at the
    node's grace less the pod's (kubernetes-sigs/karpenter v1.14.1 pkg/apis/v1/nodeclaim.go:57-73,
    pkg/controllers/disruption/types.go:49-50 and 189-192, node/termination/terminator/terminator.go:140-176), so a
    serving pod stops within the spot notice (planning/interruption.py SERVING_BUDGET)."""
    from inferstack.planning.interruption import SERVING_BUDGET

    resources, objects, _ = rendered
    deployments = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["namespace"] == "inference"
                   and any(c["name"] == "vllm" for c in o["spec"]["template"]["spec"]["containers"])]
    assert len(deployments) == 3
    for deployment in deployments:
        assert deployment["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
        pod_grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        pool_name = deployment["spec"]["template"]["spec"]["nodeSelector"]["inferstack.dev/pool"]
        pools = [o for o in objects if o["kind"] == "NodePool"
                 and o["spec"]["template"]["metadata"]["labels"]["inferstack.dev/pool"] == pool_name]
        assert pools, deployment["metadata"]["name"]
        for pool in pools:
            grace = pool["spec"]["template"]["spec"]["terminationGracePeriod"]
            seconds = int(grace.removesuffix("s"))
            assert pod_grace <= seconds <= SERVING_BUDGET.notice_seconds, (pool["metadata"]["name"], grace)


def test_node_objects_wait_for_the_nodes_access_entry(rendered):
    """Section 7.2: a node whose role has no access entry cannot join the cluster."""
    resources, _, _ = rendered
    (entry,) = [r for r in resources if r["type"] == "aws:eks/accessEntry:AccessEntry" and r["inputs"]["type"] == "EC2_LINUX"]
    karpenter = [r for r in resources if r["type"].startswith(("kubernetes:karpenter.sh/", "kubernetes:karpenter.k8s.aws/"))]
    assert karpenter and all(entry["name"] in r["depends_on"] for r in karpenter)


def test_min_scale_cost_counts_what_karpenter_runs_and_the_reservation_it_pays_for():
    """Karpenter keeps no idle node: at min scale it runs what the services' minimum replicas need (reserved and
    on-demand NodePools first, by weight); an ODCR is billed whether its instances run or not (EC2 User Guide,
    "Capacity Reservation pricing and billing"), so a reserved pool costs at least its reservation."""
    from inferstack.planning.cost import nodes_at_min_scale, stack_costs
    from inferstack.planning.pool_capacity import nodes_for_replicas
    from inferstack.spec.pools import PoolHardware
    from inferstack.stacks import load_stack

    spec = load_stack(STACKS, "karpenter")
    costs = {c.pool: c for c in stack_costs(spec)}
    for pool in spec.node_pools:
        hardware = PoolHardware(pool)
        needed = nodes_for_replicas([(m, m.autoscaling.min_replicas) for m in spec.models if m.pool == pool.name], hardware)
        reserved = pool.capacity.on_demand_base if pool.capacity.reservation else 0
        assert nodes_at_min_scale(spec, hardware) == max(needed, reserved), pool.name
    reserved_pool = next(p for p in spec.node_pools if p.capacity.reservation is not None)
    price = costs[reserved_pool.name].price(reserved_pool.instance_types[0], "on_demand").usd_per_hour
    assert costs[reserved_pool.name].min_usd_per_hour >= round(price * reserved_pool.capacity.on_demand_base, 4)


def test_a_reservation_in_another_zone_than_the_pools_first_is_refused():
    """A reservation holds one instance type in one zone (EC2 User Guide, "Capacity Reservations"), and the pool's
    reserved nodes launch in its first zone, in both modes; a zone that matches, or none stated, passes."""
    def reserve_in(zone):
        return lambda spec: spec["node_pools"][0]["capacity"]["reservation"].update(availability_zone=zone)

    error = refusal(reserve_in("us-east-1c"))
    assert error.path == "node_pools[0].capacity.reservation.availability_zone"
    assert "first zone, us-east-1a" in str(error) and "list us-east-1c first in node_pools[0].availability_zones" in str(error)
    spec = copy.deepcopy(karpenter_spec())
    reserve_in("us-east-1a")(spec)
    validate(StackSpec.model_validate(spec))
    # Node groups launch reserved nodes the same way: the pool listing the reservation's zone first passes.
    spec = copy.deepcopy(karpenter_spec())
    spec["platform"]["node_autoscaler"] = "cluster-autoscaler"
    reserve_in("us-east-1b")(spec)
    spec["node_pools"][0]["availability_zones"] = ["us-east-1b"]
    validate(StackSpec.model_validate(spec))


def test_a_budget_with_auto_parallelism_is_checked_on_the_resolved_engines():
    """The budget check prices Karpenter's min scale from the services' minimum replicas, which need the decided
    tensor_parallel: it runs on the resolved engines, not on 'auto'."""
    spec = {
        "environment": "budgeted", "budget": {"max_usd_per_hour": 500},
        "platform": {"node_autoscaler": "karpenter"},
        "node_pools": [{"name": "l40s", "instance_types": ["g6e.4xlarge"], "max_nodes": 4,
                        "capacity": {"on_demand_base": 1}}],
        "models": [{"name": "m", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "l40s", "tensor_parallel": "auto",
                    "max_model_len": 8192, "max_num_seqs": 8}],
    }
    resolved = validate(StackSpec.model_validate(spec)).stack
    assert resolved.models[0].tensor_parallel == 1
    spec["budget"]["max_usd_per_hour"] = 1
    with pytest.raises(SpecError) as caught:
        validate(StackSpec.model_validate(spec))
    assert caught.value.path == "budget.max_usd_per_hour"
