"""Time to serving along the resource graph: the longest chain of waits, and its bound without needless ones."""

from __future__ import annotations

import pytest

from inferstack.planning.creation_times import CREATION_TIMES, creation_key, replica_parts, typical_seconds
from inferstack.planning.serving_time import Edge, time_to_serving

SECONDS = {"cluster": 900, "gpu-nodes": 180, "ns": 2, "gpu-operator": 180, "monitoring": 300, "llama": 600}


def resource(name: str, type_: str, *, parent: str | None = None, depends_on=(), custom: bool = True, **inputs) -> dict:
    return {"type": type_, "name": name, "custom": custom, "parent": parent, "depends_on": list(depends_on), "inputs": inputs}


def platform(*, llama_waits_for_monitoring: bool) -> list[dict]:
    """Cluster, GPU nodes, a namespace, two Helm releases and a model; the model may wait for monitoring."""
    llama_deps = ["ns", "gpu-operator"] + (["monitoring"] if llama_waits_for_monitoring else [])
    return [
        resource("cluster", "aws:eks/cluster:Cluster"),
        resource("gpu-nodes", "aws:eks/nodeGroup:NodeGroup", depends_on=["cluster"]),
        resource("ns", "kubernetes:core/v1:Namespace", depends_on=["cluster"]),
        resource("gpu-operator", "kubernetes:helm.sh/v3:Release", depends_on=["cluster"], chart="gpu-operator"),
        resource("monitoring", "kubernetes:helm.sh/v3:Release", depends_on=["cluster"], chart="kube-prometheus-stack"),
        resource("llama", "kubernetes:apps/v1:Deployment", depends_on=llama_deps),
    ]


def only_real_needs(dependent, dependency, kind) -> bool:
    """A model needs its namespace and the GPU operator, not the monitoring stack."""
    return not (dependent["name"] == "llama" and dependency["name"] == "monitoring")


def seconds(r) -> float:
    return SECONDS.get(r["name"], 0)


def test_a_needless_edge_makes_the_program_slower_than_its_lower_bound():
    times = time_to_serving(platform(llama_waits_for_monitoring=True), {"llama": "llama"},
                            required=only_real_needs, seconds=seconds)
    (llama,) = times.models
    # 900 (cluster) + 300 (monitoring) + 600 (model) against 900 + 180 (GPU operator) + 600.
    assert llama.program.seconds == 1800 and [s.name for s in llama.program.steps] == ["cluster", "monitoring", "llama"]
    assert llama.lower_bound.seconds == 1680
    assert [s.name for s in llama.lower_bound.steps] == ["cluster", "gpu-operator", "llama"]
    assert times.needless == (Edge("llama", "monitoring", "depends_on"),)


def test_without_needless_edges_the_program_meets_its_lower_bound():
    times = time_to_serving(platform(llama_waits_for_monitoring=False), {"llama": "llama"},
                            required=only_real_needs, seconds=seconds)
    (llama,) = times.models
    assert llama.program == llama.lower_bound and times.needless == ()


def test_depending_on_a_component_waits_for_everything_under_it_and_a_child_for_its_parent():
    resources = [
        resource("net", "inferstack:aws:Network", custom=False),
        resource("vpc", "aws:ec2/vpc:Vpc", parent="net"),
        resource("nat", "aws:ec2/natGateway:NatGateway", parent="net", depends_on=["vpc"]),
        resource("cluster", "aws:eks/cluster:Cluster", depends_on=["net"]),
        resource("addon", "aws:eks/addon:Addon", parent="cluster"),
    ]
    times = time_to_serving(resources, {"m": "addon"}, required=lambda *_: True)
    (m,) = times.models
    # vpc 5 s, then the NAT gateway 120 s, then the cluster 870 s, then its child add-on 60 s.
    assert m.program.seconds == 5 + 120 + 870 + 60
    assert [s.name for s in m.program.steps] == ["vpc", "nat", "cluster", "addon"]


def test_a_dropped_parent_edge_lets_a_child_start_at_once():
    resources = [resource("cluster", "aws:eks/cluster:Cluster"), resource("addon", "aws:eks/addon:Addon", parent="cluster")]
    times = time_to_serving(resources, {"m": "addon"}, required=lambda _a, _b, kind: kind != "parent")
    assert (times.models[0].program.seconds, times.models[0].lower_bound.seconds) == (930, 60)


def test_typical_times_come_from_the_table_with_a_source_each():
    assert all(entry.source for entry in CREATION_TIMES.values())
    assert creation_key(resource("c", "aws:eks/cluster:Cluster")) == "eks_cluster"
    assert creation_key(resource("g", "kubernetes:helm.sh/v3:Release", chart="gpu-operator")) == "gpu_operator"
    assert creation_key(resource("r", "aws:iam/role:Role")) == "aws_resource"
    assert creation_key(resource("q", "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue")) == "kubernetes_object"
    assert typical_seconds(resource("x", "inferstack:serving:ModelService", custom=False)) == 0
    assert 13 * 60 <= typical_seconds(resource("c", "aws:eks/cluster:Cluster")) <= 16 * 60


def replica_ready_seconds(weights: int, loader: str, warm: bool = False) -> float:
    return sum(seconds for _, _, seconds in replica_parts(weights, loader, warm=warm))


def test_a_first_replica_copies_then_loads_and_a_warm_restart_only_loads():
    weights = 16 * 10**9
    fixed = 240 + 334 + 135   # GPU node, image pull, cold warm-up (empty compile cache)
    assert replica_ready_seconds(weights, "local") == pytest.approx(fixed + 16 / 0.58 + 16 / 7.0)
    assert replica_ready_seconds(weights, "s3_stream") == pytest.approx(fixed + 16 / 0.58)
    assert replica_ready_seconds(weights, "local", warm=True) == pytest.approx(16 / 7.0 + 75)


def test_a_cycle_or_an_unknown_dependency_is_an_error():
    loop = [resource("a", "aws:iam/role:Role", depends_on=["b"]), resource("b", "aws:iam/role:Role", depends_on=["a"])]
    with pytest.raises(ValueError, match="cycle"):
        time_to_serving(loop, {"m": "a"}, required=lambda *_: True)
    with pytest.raises(ValueError, match="'a' waits for 'ghost'"):
        time_to_serving([resource("a", "aws:iam/role:Role", depends_on=["ghost"])], {"m": "a"}, required=lambda *_: True)
