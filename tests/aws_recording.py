"""Shared by the AWS layer tests: a valid stack spec to vary, and the AWS layer recorded under the mock engine."""

from __future__ import annotations

import copy
import json
from typing import Any

import pulumi

from inferstack.aws.foundation import AwsFoundation, AwsFoundationArgs
from inferstack.engine.mocks import PlanMocks
from inferstack.engine.recorder import Recording, Registration, record
from inferstack.spec import StackSpec

ADMIN_ROLE = "arn:aws:iam::123456789012:role/platform/Admin"


def prod_spec() -> dict[str, Any]:
    """Every pool shape the AWS layer handles: EFA on 32, 16 and 4 network cards, shared GPUs, a batch pool."""
    return {
        "environment": "prod",
        "tags": {"team": "ml-platform"},
        "cluster": {"mode": "create", "admin_role_arns": [ADMIN_ROLE]},
        "node_pools": [
            {"name": "h100", "instance_types": ["p5.48xlarge"], "min_nodes": 2, "max_nodes": 4, "efa": True,
             "capacity": {"on_demand_base": 1}, "taints": [{"key": "dedicated", "value": "llm"}]},
            {"name": "h200", "instance_types": ["p5en.48xlarge"], "max_nodes": 2, "efa": True,
             "capacity": {"on_demand_base": 2}},
            {"name": "a100", "role": "batch", "instance_types": ["p4d.24xlarge"], "max_nodes": 3, "efa": True,
             "availability_zones": ["us-east-1b", "us-east-1c"]},
            {"name": "l4", "instance_types": ["g6.12xlarge", "g6.24xlarge"], "max_nodes": 6,
             "capacity": {"on_demand_base": 1}, "gpu_sharing": {"mode": "time_slicing", "replicas": 4},
             "labels": {"cost-center": "search"}},
            {"name": "mig", "instance_types": ["p4de.24xlarge"], "max_nodes": 1, "nvme_cache": {"raid": "RAID10"},
             "gpu_sharing": {"mode": "mig", "layout": {"3g.40gb": 2}}},
        ],
    }


def build(changes: dict[str, Any] | None = None) -> StackSpec:
    """prod_spec with top-level fields replaced."""
    spec = copy.deepcopy(prod_spec())
    spec.update(changes or {})
    return StackSpec.model_validate(spec)


def run(spec: StackSpec) -> Recording:
    """Record AwsFoundation for `spec`, exporting what program.py exports plus the cluster security group."""

    def program() -> None:
        aws = AwsFoundation(spec.environment, AwsFoundationArgs(spec=spec))
        pulumi.export("cluster_name", aws.cluster_name)
        pulumi.export("kubeconfig", aws.kubeconfig)
        pulumi.export("node_pools", aws.node_pool_names)
        pulumi.export("weights_bucket", aws.weights_bucket)
        pulumi.export("cluster_security_group_id", aws.cluster.security_group_id)

    return record(program, spec.environment, PlanMocks(spec.region))


def children(recording: Recording, parent: str, type_token: str) -> list[Registration]:
    return [r for r in recording.of_type(type_token) if r.parent == parent]


def policy_documents(recording: Recording) -> list[tuple[str, dict]]:
    """Every IAM policy document the program registers: role trust policies and inline/managed policies."""
    documents = []
    for r in recording.resources:
        for key in ("assumeRolePolicy", "policy"):
            if r.type.startswith("aws:iam/") and key in r.inputs:
                documents.append((f"{r.name}.{key}", json.loads(r.inputs[key])))
    return documents
