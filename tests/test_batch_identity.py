"""Batch jobs get their own identity: the weights, their input objects, writes under their output prefix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferstack.engine import run_stack
from inferstack.engine.render import kubernetes_objects
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"


@pytest.fixture(scope="module")
def prod():
    return run_stack(load_stack(STACKS, "prod"))


def test_batch_runner_role_reads_inputs_and_writes_only_under_the_output_prefix(prod):
    policy = json.loads(prod.named("prod-weights-batch-runner-s3").inputs["policy"])
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["GetBatchInput"]["Resource"] == ["arn:aws:s3:::acme-ml-batch/eval/input.jsonl"]
    assert by_sid["PutBatchOutput"]["Action"] == ["s3:PutObject", "s3:AbortMultipartUpload"]
    assert by_sid["PutBatchOutput"]["Resource"] == ["arn:aws:s3:::acme-ml-batch/eval/output/*"]
    for statement in policy["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert "*" not in actions and "s3:*" not in actions
        assert statement["Resource"] != "*"


def test_batch_runner_is_bound_to_the_batch_namespace_only(prod):
    association = prod.named("prod-weights-batch-batch-runner").inputs
    assert (association["namespace"], association["serviceAccount"]) == ("batch", "batch-runner")
    trust = json.loads(prod.named("prod-weights-batch-runner").inputs["assumeRolePolicy"])
    tags = trust["Statement"][0]["Condition"]["StringEquals"]
    assert tags["aws:RequestTag/kubernetes-namespace"] == ["batch"]
    assert tags["aws:RequestTag/kubernetes-service-account"] == "batch-runner"


def test_batch_jobs_run_as_the_batch_runner_and_serving_pods_do_not(prod):
    objects = kubernetes_objects(prod)
    jobs = [o["spec"]["jobTemplate"] for o in objects if o["kind"] == "CronJob"]
    assert jobs and all(j["spec"]["template"]["spec"]["serviceAccountName"] == "batch-runner" for j in jobs)
    deployments = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["namespace"] == "inference"]
    assert all(d["spec"]["template"]["spec"].get("serviceAccountName") != "batch-runner" for d in deployments)


def test_pods_start_only_once_their_pod_identity_exists(prod):
    """EKS injects Pod Identity credentials when a pod is created: the association must come first."""
    assert "prod-weights-inference-model-reader" in prod.named("prod-serving-llama-70b-deployment").depends_on
    job = next(r for r in prod.resources if r.type == "kubernetes:batch/v1:CronJob")
    assert "prod-weights-batch-batch-runner" in job.depends_on
