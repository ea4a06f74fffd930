"""Shared by the platform tests: a small valid spec to vary, the repository's stacks, and the platform layer
recorded under the mock engine with its own providers (no AWS layer needed)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws
import pulumi_kubernetes

from inferstack.engine.mocks import PlanMocks
from inferstack.engine.recorder import Recording, Registration, record
from inferstack.engine.render import HELM_RELEASE
from inferstack.platform import ClusterPlatform, ClusterPlatformArgs
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"
NODE_GROUP = "gpu-node-group"  # stands in for the AWS layer's node groups


def base() -> dict[str, Any]:
    """EFA whole GPUs for serving, an A100 split by MIG, time-sliced L4s for batch; each test changes one thing."""
    return {
        "environment": "test",
        "node_pools": [
            {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 2, "efa": True,
             "capacity": {"on_demand_base": 1}},
            {"name": "a100-mig", "instance_types": ["p4de.24xlarge"], "max_nodes": 1,
             "gpu_sharing": {"mode": "mig", "layout": {"3g.40gb": 2}}},
            {"name": "l4", "role": "batch", "instance_types": ["g6.xlarge"], "max_nodes": 3,
             "gpu_sharing": {"mode": "time_slicing", "replicas": 3}},
        ],
    }


def build(change=None) -> StackSpec:
    """`base()` after `change(spec_dict)`, validated."""
    spec = copy.deepcopy(base())
    if change is not None:
        change(spec)
    return StackSpec.model_validate(spec)


@functools.cache
def stack(name: str) -> StackSpec:
    return load_stack(STACKS, name)


def render(spec: StackSpec) -> Recording:
    """Record ClusterPlatform for `spec`, behind one stand-in GPU node group."""

    def program() -> None:
        kubernetes = pulumi_kubernetes.Provider("k8s", kubeconfig="{}")
        aws = pulumi_aws.Provider("aws", region=spec.region)
        node_group = pulumi_aws.eks.NodeGroup(
            NODE_GROUP,
            cluster_name=spec.cluster_name,
            node_role_arn="arn:aws:iam::123456789012:role/nodes",
            subnet_ids=["subnet-0123456789abcdef0"],
            scaling_config=pulumi_aws.eks.NodeGroupScalingConfigArgs(min_size=0, max_size=1, desired_size=0),
            opts=pulumi.ResourceOptions(provider=aws),
        )
        ClusterPlatform(
            "platform",
            ClusterPlatformArgs(spec=spec, cluster_name=spec.cluster_name, node_pool_dependencies=[node_group]),
            pulumi.ResourceOptions(providers={"kubernetes": kubernetes, "aws": aws}),
        )

    return record(program, spec.environment, PlanMocks(spec.region))


@functools.cache
def render_stack(name: str) -> Recording:
    return render(stack(name))


def releases(recording: Recording) -> dict[str, Registration]:
    """Helm releases by chart key (their release name)."""
    return {r.inputs["name"]: r for r in recording.of_type(HELM_RELEASE)}


def objects_of(recording: Recording, kind: str) -> dict[str, dict]:
    """Kubernetes objects of one kind by metadata.name."""
    return {
        r.inputs["metadata"]["name"]: r.inputs
        for r in recording.resources
        if r.type.startswith("kubernetes:") and r.inputs.get("kind") == kind
    }
