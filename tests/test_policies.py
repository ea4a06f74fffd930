"""The policy pack: every rule fails on a case built by spec or by editing a rendered resources.json,
names the resource, the value and the fix, and exits 1; the example stacks pass; nothing crashes on
resources a rule does not know; the offline runner hands policies what the real analyzer would."""

from __future__ import annotations

import functools
import json
import random
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, StackValidationPolicy
from pulumi_policy.policy import _PolicyAnalyzerServicer
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from inferstack.cli import main
from inferstack.engine import run_stack
from inferstack.policies.runner import _wire, run_policies, spec_policy_config
from inferstack.engine.recorder import SECRET_SIG, SIG_KEY
from inferstack.planning.cost import stack_costs
from inferstack.planning.node_groups import plan_node_groups
from inferstack.planning.pool_capacity import advertised_per_node, gpu_requests, replicas_held
from inferstack.policies.budget import max_scale_costs, stack_region
from inferstack.policies.pools import node_groups, workloads
from inferstack.policies.scaling import pool_limit
from inferstack.serving import names
from inferstack.policies.rules import PACK_ENFORCEMENT, PACK_NAME, POLICIES
from inferstack.spec.pools import PoolHardware
from inferstack.stacks import load_stack
from inferstack.validation import validate

REPO = Path(__file__).resolve().parents[1]
STACKS = REPO / "stacks"
HF_TOKEN = "hf_" + "Ab3" * 12  # the shape of a Hugging Face token, not a real one
SECRET_HF_TOKEN = {SIG_KEY: SECRET_SIG, "value": HF_TOKEN}  # as a Pulumi secret, the way recordings keep it
MANDATORY = {p.name for p in POLICIES if p.enforcement_level == EnforcementLevel.MANDATORY}


@functools.cache
def _rendered(stack: str) -> str:
    return json.dumps([r.as_dict() for r in run_stack(load_stack(STACKS, stack)).resources])


def rendered(stack: str = "prod") -> list[dict[str, Any]]:
    """A fresh copy of what the program registers for a repository stack (as `render` writes resources.json)."""
    return json.loads(_rendered(stack))


def find(resources: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The first registration of a type ending in `:kind` (and with this resource or object name)."""
    for resource in resources:
        object_name = (resource["inputs"].get("metadata") or {}).get("name")
        if resource["type"].endswith(f":{kind}") and name in (None, resource["name"], object_name):
            return resource
    raise AssertionError(f"no {kind} {name or ''} registered")


def containers(resource: dict[str, Any]) -> list[dict[str, Any]]:
    spec = resource["inputs"]["spec"]
    if "leaderWorkerTemplate" in spec:
        return spec["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"]
    return spec["template"]["spec"]["containers"]


def check(resources: list[dict[str, Any]], tmp_path: Path, capsys, *args: str) -> tuple[int, dict[str, dict]]:
    """`inferstack check --resources <file> --format json`: the exit code and each policy's entry."""
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(resources), encoding="utf-8")
    code = main(["check", "--resources", str(path), "--format", "json", *args])
    report = json.loads(capsys.readouterr().out)
    return code, {p["name"]: p for p in report["policies"]}


def messages(report: dict[str, dict], policy: str) -> str:
    return "\n".join(v["message"] for v in report[policy]["violations"])


def failing(report: dict[str, dict]) -> set[str]:
    return {name for name, p in report.items() if p["violations"] and p["enforcement"] == "mandatory"}


# ------------------------------------------------------------------------------------ example stacks


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_example_stacks_pass_every_mandatory_rule(stack):
    spec = load_stack(STACKS, stack)
    results = run_policies(rendered(stack), stack, spec_policy_config(spec))
    assert [(r.name, v.resource, v.message) for r in results for v in r.violations if r.blocking] == []
    assert [r.name for r in results] == [p.name for p in POLICIES]


def test_check_a_stack_runs_the_program_and_writes_its_pack_config(tmp_path, capsys):
    config = tmp_path / "policy-config.json"
    assert main(["check", "dev", "--format", "json", "--write-policy-config", str(config)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {p["name"] for p in report["policies"]} == {p.name for p in POLICIES}
    assert all(set(p) >= {"name", "enforcement", "violations"} for p in report["policies"])
    # dev states no spot discount and no prices: the pack prices spot from the catalog's snapshot, as the plan does.
    assert json.loads(config.read_text(encoding="utf-8")) == {"budget-at-max-scale": {"maxUsdPerHour": 5.0}}


def test_plan_shows_the_policy_results(capsys):
    assert main(["plan", "dev", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in plan["policies"]] == [p.name for p in POLICIES]


def test_text_output_lists_each_rule_and_its_violation(tmp_path, capsys):
    resources = rendered()
    find(resources, "Release", "prod-platform-kueue-release")["inputs"]["version"] = "0.19.*"
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(resources), encoding="utf-8")
    assert main(["check", "--resources", str(path)]) == 1
    out = " ".join(capsys.readouterr().out.split())   # a long violation wraps at the terminal's width
    assert "FAIL helm-releases-pinned (mandatory)" in out and "ok images-pinned (mandatory)" in out
    assert "prod-platform-kueue-release: Helm release prod-platform-kueue-release installs chart 'kueue'" in out


# ----------------------------------------------------------------------------- one failing case per rule


def test_images_pinned_rejects_an_untagged_workload_image(tmp_path, capsys):
    resources = rendered()
    containers(find(resources, "Deployment", "llama-8b-fp8"))[0]["image"] = "vllm/vllm-openai"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"images-pinned"}
    assert (
        "Deployment inference/llama-8b-fp8 container 'vllm' image 'vllm/vllm-openai' has no tag (Kubernetes pulls "
        ":latest). To fix: pin it" in messages(report, "images-pinned")
    )


def test_images_pinned_rejects_latest_in_helm_values(tmp_path, capsys):
    resources = rendered()
    find(resources, "Release", "prod-platform-autoscaler-release")["inputs"]["values"]["image"]["tag"] = "latest"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1
    assert "values.image.tag = 'latest', a moving tag. To fix:" in messages(report, "images-pinned")


def test_helm_releases_pinned_rejects_a_version_range(tmp_path, capsys):
    resources = rendered()
    find(resources, "Release", "prod-platform-keda-release")["inputs"]["version"] = "^2.20"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"helm-releases-pinned"}
    assert "installs chart 'keda' at version '^2.20', a range or channel. To fix: set an exact version" in messages(
        report, "helm-releases-pinned"
    )


def test_helm_releases_pinned_rejects_a_missing_version(tmp_path, capsys):
    resources = rendered()
    del find(resources, "Release", "prod-platform-lws-release")["inputs"]["version"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "without a version" in messages(report, "helm-releases-pinned")


def _write_stack(folder: Path, name: str, body: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(textwrap.dedent(body), encoding="utf-8")


def test_online_service_on_a_spot_only_pool_is_refused_at_spec_time(tmp_path, capsys):
    """The spec knows the baseline before anything renders (spec/capacity.py): `check` stops at exit 2."""
    _write_stack(
        tmp_path / "stacks",
        "spotty",
        """
        environment: spotty
        node_pools:
          - {name: l4, instance_types: [g6.xlarge], max_nodes: 2, capacity: {on_demand_base: 0, spot: true}}
        models:
          - {name: qwen, model: Qwen/Qwen2.5-7B-Instruct-AWQ, quantization: awq, pool: l4, tier: online,
             autoscaling: {min_replicas: 1, max_replicas: 2}}
        """,
    )
    assert main(["check", "spotty", "--stacks-dir", str(tmp_path / "stacks"), "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert "node_pools[0].capacity.on_demand_base: pool 'l4' keeps 0 on-demand nodes at minimum scale" in captured.err


def test_baseline_rule_rejects_an_online_service_whose_node_groups_are_all_spot(tmp_path, capsys):
    resources = rendered()
    group = find(resources, "NodeGroup", "prod-h100-on-demand")
    group["inputs"]["capacityType"] = "SPOT"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "serving-on-demand-baseline" in failing(report)
    assert "tier online but every node group it can run on is spot: prod-h100-on-demand (pool h100, SPOT" in messages(
        report, "serving-on-demand-baseline"
    )


def test_baseline_rule_rejects_online_minimum_replicas_that_only_fit_on_spot(tmp_path, capsys):
    resources = rendered()
    find(resources, "ScaledObject", "llama-70b")["inputs"]["spec"]["minReplicaCount"] = 5
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "serving-on-demand-baseline" in failing(report)
    assert (
        "online services llama-70b (5 x 4), llama-8b-fp8" not in messages(report, "serving-on-demand-baseline")
        and "online services llama-70b (5 x 4) need 20 nvidia.com/gpu at minimum scale but the on-demand baseline "
        "holds 16 (prod-h100-on-demand: 2 nodes x 8)" in messages(report, "serving-on-demand-baseline")
    )


def test_gpu_requests_must_name_a_resource_the_pool_advertises(tmp_path, capsys):
    resources = rendered()
    limits = containers(find(resources, "Deployment", "bge-embed"))[0]["resources"]
    for section in ("limits", "requests"):
        limits[section]["nvidia.com/mig-3g.20gb"] = limits[section].pop("nvidia.com/mig-1g.10gb")
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "gpu-requests-advertised" in failing(report)
    text = messages(report, "gpu-requests-advertised")
    assert "Deployment inference/bge-embed request 1 nvidia.com/mig-3g.20gb but no node group they can run on advertises it" in text
    assert "prod-a100-mig-on-demand: nvidia.com/mig-1g.10gb=16, nvidia.com/mig-2g.20gb=8, nvidia.com/mig-3g.40gb=8 per node" in text


def test_a_group_at_zero_needs_its_autoscaler_template_tags(tmp_path, capsys):
    """More cases, and the cluster-autoscaler rule itself, in tests/test_autoscaler_templates.py."""
    resources = [r for r in rendered() if not r["name"].startswith("prod-l40s-batch-spot-")]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "autoscaler-node-templates" in failing(report)
    assert "prod-l40s-batch-spot (pool l40s-batch, SPOT, 0-8 nodes) can be at zero nodes" in messages(
        report, "autoscaler-node-templates"
    )


def test_gpu_requests_follow_the_gpu_operator_config_not_the_spec(tmp_path, capsys):
    """A node label naming a MIG config the operator does not define leaves the pool advertising nothing."""
    resources = rendered()
    for group in resources:
        labels = group["inputs"].get("labels") or {}
        if group["type"] == "aws:eks/nodeGroup:NodeGroup" and "nvidia.com/mig.config" in labels:
            labels["nvidia.com/mig.config"] = "all-balanced-typo"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1
    assert (
        "its nodes select nvidia.com/mig.config=all-balanced-typo but release prod-platform-gpu-operator-release "
        "defines no MIG config of that name" in messages(report, "gpu-requests-advertised")
    )


def test_efa_pool_needs_its_self_referencing_security_group_rule(tmp_path, capsys):
    resources = [r for r in rendered() if r["type"] != "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"efa-placement-and-security-group"}
    assert (
        "launch template prod-h100-on-demand-launch-template (node groups prod-h100-on-demand) attaches 32 EFA "
        "interfaces but none of its security groups allows all ingress traffic from itself. To fix: add a "
        "vpc.SecurityGroupIngressRule" in messages(report, "efa-placement-and-security-group")
    )


def test_efa_pool_needs_a_placement_group_or_a_reservation(tmp_path, capsys):
    resources = rendered()
    del find(resources, "LaunchTemplate", "prod-h100-launch-template")["inputs"]["placement"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1
    assert "attaches 32 EFA interfaces but no placement group and no capacity reservation" in messages(
        report, "efa-placement-and-security-group"
    )
    find(resources, "LaunchTemplate", "prod-h100-launch-template")["inputs"]["capacityReservationSpecification"] = {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}
    }
    _, report = check(resources, tmp_path, capsys)
    assert not report["efa-placement-and-security-group"]["violations"]


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ({"Effect": "Allow", "Action": "*", "Resource": "arn:aws:s3:::b/*"}, "allows Action '*'. To fix: list the actions"),
        ({"Effect": "Allow", "Action": ["s3:*"], "Resource": "arn:aws:s3:::b"}, "allows 's3:*'. To fix: list the S3 actions"),
        (
            {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"},
            "allows data actions s3:GetObject on Resource '*'. To fix: name the bucket, key or secret ARNs",
        ),
    ],
)
def test_iam_rejects_wildcards(tmp_path, capsys, statement, expected):
    resources = rendered()
    policy = find(resources, "RolePolicy")
    policy["inputs"]["policy"] = json.dumps({"Version": "2012-10-17", "Statement": [{"Sid": "Bad", **statement}]})
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"iam-least-privilege"}
    assert f"RolePolicy {policy['name']} policy statement Bad {expected}" in messages(report, "iam-least-privilege")


def test_iam_rejects_attaching_a_broad_managed_policy(tmp_path, capsys):
    resources = rendered()
    attachment = find(resources, "RolePolicyAttachment")
    attachment["inputs"]["policyArn"] = "arn:aws:iam::aws:policy/AmazonS3FullAccess"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "attaches arn:aws:iam::aws:policy/AmazonS3FullAccess, which grants '*' or 's3:*'" in messages(
        report, "iam-least-privilege"
    )


def test_s3_bucket_without_encryption_fails(tmp_path, capsys):
    resources = [r for r in rendered() if "ServerSideEncryption" not in r["type"]]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"s3-buckets-private-encrypted"}
    assert "has no server-side encryption configuration. To fix: add aws.s3.BucketServerSideEncryptionConfiguration" in messages(
        report, "s3-buckets-private-encrypted"
    )


def test_s3_public_access_block_must_set_all_four_flags(tmp_path, capsys):
    resources = rendered()
    find(resources, "BucketPublicAccessBlock")["inputs"]["restrictPublicBuckets"] = False
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "leaves restrictPublicBuckets unset or false. To fix: set all four flags to True" in messages(
        report, "s3-buckets-private-encrypted"
    )


def test_literal_token_in_env_fails_even_as_a_pulumi_secret(tmp_path, capsys):
    """The analyzer unwraps Pulumi secrets, and the value lands in the pod spec in the clear either way."""
    resources = rendered()
    containers(find(resources, "Deployment", "llama-8b-fp8"))[0]["env"].append({"name": "HF_TOKEN", "value": SECRET_HF_TOKEN})
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"no-literal-secrets"}
    assert (
        "Deployment inference/llama-8b-fp8 container 'vllm' env HF_TOKEN contains a Hugging Face token. To fix: put "
        "it in a Kubernetes Secret and use valueFrom.secretKeyRef" in messages(report, "no-literal-secrets")
    )


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda c: c["args"].extend(["--api-key", "s3cr3t-value"]), "--api-key is a literal value under a secret's name"),
        (lambda c: c["env"].append({"name": "DB_PASSWORD", "value": "hunter2hunter2"}), "env DB_PASSWORD is a literal value"),
    ],
)
def test_literal_passwords_and_api_keys_in_args_or_env_fail(tmp_path, capsys, edit: Callable, expected: str):
    resources = rendered()
    edit(containers(find(resources, "Deployment", "llama-8b-fp8"))[0])
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and expected in messages(report, "no-literal-secrets")


def test_credentials_in_helm_values_fail(tmp_path, capsys):
    resources = rendered()
    find(resources, "Release", "prod-platform-keda-release")["inputs"]["values"]["env"] = [{"AWS_ACCESS_KEY_ID": "AKIA" + "Q" * 16}]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "values.env[0].AWS_ACCESS_KEY_ID contains an AWS access key id" in messages(report, "no-literal-secrets")


def test_privileged_serving_container_fails(tmp_path, capsys):
    resources = rendered()
    containers(find(resources, "Deployment", "llama-8b-fp8"))[0]["securityContext"]["privileged"] = True
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"no-privileged-workloads"}
    assert "Deployment inference/llama-8b-fp8 container 'vllm' runs privileged. To fix:" in messages(
        report, "no-privileged-workloads"
    )


def test_unset_privilege_escalation_fails_but_allow_listed_add_ons_may_escalate(tmp_path, capsys):
    resources = rendered()
    del containers(find(resources, "Deployment", "llama-8b-fp8"))[0]["securityContext"]["allowPrivilegeEscalation"]
    find(resources, "Release", "prod-platform-efa-release")["inputs"]["values"]["securityContext"] = {"privileged": True}
    code, report = check(resources, tmp_path, capsys)
    text = messages(report, "no-privileged-workloads")
    assert code == 1 and "leaves allowPrivilegeEscalation unset (Kubernetes then allows escalation)" in text
    assert "prod-platform-efa-release" not in text


def test_privileged_helm_values_of_other_charts_fail(tmp_path, capsys):
    resources = rendered()
    find(resources, "Release", "prod-platform-keda-release")["inputs"]["values"]["securityContext"] = {"privileged": True}
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "(chart 'keda') sets values.securityContext.privileged: true" in messages(report, "no-privileged-workloads")


def test_keda_min_above_max_fails(tmp_path, capsys):
    resources = rendered()
    find(resources, "ScaledObject", "bge-embed")["inputs"]["spec"]["minReplicaCount"] = 9
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "ScaledObject inference/bge-embed minReplicaCount 9 is greater than maxReplicaCount 4" in messages(
        report, "keda-scaling-bounds"
    )


def test_keda_max_beyond_what_the_pool_holds_fails(tmp_path, capsys):
    resources = rendered()
    find(resources, "ScaledObject", "llama-70b")["inputs"]["spec"]["maxReplicaCount"] = 15
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"keda-scaling-bounds"}
    assert (
        "ScaledObject inference/llama-70b maxReplicaCount 15 for Deployment inference/llama-70b is more than its pool "
        "can hold: 14 pods of nvidia.com/gpu=4 (prod-h100-on-demand: 2 nodes x 2 + prod-h100-spot: 5 nodes x 2) / 1 "
        "per replica = 14 replicas. To fix: lower max_replicas to 14" in messages(report, "keda-scaling-bounds")
    )


def test_keda_never_scales_an_online_service_to_zero(tmp_path, capsys):
    resources = rendered()
    find(resources, "ScaledObject", "llama-8b-fp8")["inputs"]["spec"]["idleReplicaCount"] = 0
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "scales online service llama-8b-fp8 to zero (minReplicaCount 2, idleReplicaCount set)" in messages(
        report, "keda-scaling-bounds"
    )


def test_vllm_needs_probes_and_requests(tmp_path, capsys):
    resources = rendered()
    leader = containers(find(resources, "LeaderWorkerSet", "llama-70b-long-group"))[0]
    del leader["startupProbe"]
    del leader["resources"]["requests"]["memory"], leader["resources"]["limits"]["memory"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"vllm-probes-and-requests"}
    text = messages(report, "vllm-probes-and-requests")
    assert "LeaderWorkerSet inference/llama-70b-long-group container 'vllm' (leader) has no startupProbe. To fix:" in text
    assert "container 'vllm' (leader) requests no memory. To fix: set resources.requests.memory" in text


def _vllm(resource: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in containers(resource) if c["name"] == "vllm")


def test_a_pod_must_request_the_gpus_its_vllm_flags_run(tmp_path, capsys):
    """vLLM 0.33 `EngineArgs.create_engine_config` (vllm/engine/arg_utils.py): a process drives tp x pp x
    data-parallel-size-local GPUs of its node, or (tp x pp x dp) / nnodes with --nnodes; with fewer visible GPUs
    it fails to start."""
    resources = rendered()
    vllm = _vllm(find(resources, "Deployment", "llama-70b"))
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "4"                  # tensor_parallel 4
    vllm["resources"]["limits"]["nvidia.com/gpu"] = vllm["resources"]["requests"]["nvidia.com/gpu"] = "2"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"vllm-parallel-layout"}
    text = messages(report, "vllm-parallel-layout")
    assert "Deployment inference/llama-70b container 'vllm' requests 2 nvidia.com/gpu but its vLLM flags need 4" in text
    assert "To fix: make the GPU request equal" in text


def test_a_group_splits_its_world_over_its_nodes(tmp_path, capsys):
    resources = rendered()
    args = _vllm(find(resources, "LeaderWorkerSet", "llama-70b-long-group"))["args"]
    assert args[args.index("--nnodes") + 1] == "$(LWS_GROUP_SIZE)"
    args[args.index("--tensor-parallel-size") + 1] = "3"
    args[args.index("--pipeline-parallel-size") + 1] = "1"          # 3 GPUs over a group of 2 nodes
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "a world of 3 GPUs (tensor 3 x pipeline 1 x data 1) 2 nodes cannot split" in messages(
        report, "vllm-parallel-layout")
    args[args.index("--pipeline-parallel-size") + 1] = "2"
    args[args.index("--tensor-parallel-size") + 1] = "4"             # 4 x 2 over 2 nodes: 4 a node, 8 requested
    code, report = check(resources, tmp_path, capsys)
    assert "(leader) requests 8 nvidia.com/gpu but its vLLM flags need 4 (8 GPUs (tensor 4 x pipeline 2 x data 1) over " \
           "2 nodes)" in messages(report, "vllm-parallel-layout")


# Spot interruptions: EC2 reclaims a spot instance two minutes after its notice, EKS drains a spot managed node
# group's node on it, and the preStop hook runs inside terminationGracePeriodSeconds (Kubernetes "Pod Lifecycle").


def test_a_grace_period_beyond_the_notice_fails_the_policy(tmp_path, capsys):
    resources = rendered()
    lws = find(resources, "LeaderWorkerSet", "llama-70b-long-group")
    lws["inputs"]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["terminationGracePeriodSeconds"] = 300
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"spot-interruption-budget"}
    text = messages(report, "spot-interruption-budget")
    assert "LeaderWorkerSet inference/llama-70b-long-group worker pods can run on spot node groups" in text
    assert "terminationGracePeriodSeconds 300, longer than the 120 s interruption notice" in text


def test_a_pre_stop_that_takes_the_whole_grace_period_fails_the_policy(tmp_path, capsys):
    resources = rendered()
    deployment = find(resources, "Deployment", "llama-70b")
    next(c for c in containers(deployment) if c["name"] == "vllm")["lifecycle"]["preStop"]["sleep"]["seconds"] = 90
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "sleep 90 s in preStop within a 90 s grace period" in messages(report, "spot-interruption-budget")


def test_pods_without_spot_are_not_held_to_the_notice(tmp_path, capsys):
    resources = rendered()
    for group in resources:
        if group["type"].endswith(":NodeGroup") and group["inputs"].get("capacityType") == "SPOT":
            group["inputs"]["capacityType"] = "ON_DEMAND"
    deployment = find(resources, "Deployment", "llama-70b")
    deployment["inputs"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 600
    _, report = check(resources, tmp_path, capsys)
    assert report["spot-interruption-budget"]["violations"] == []


def test_vllm_needs_a_disruption_budget(tmp_path, capsys):
    resources = rendered()
    resources.remove(find(resources, "PodDisruptionBudget", "llama-70b-long"))
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"vllm-disruption-budget"}
    assert "LeaderWorkerSet inference/llama-70b-long-group has no PodDisruptionBudget selecting its pods" in messages(
        report, "vllm-disruption-budget"
    )



def test_efa_pods_on_an_image_without_the_efa_stack_fail(tmp_path, capsys):
    """vLLM v0.33.0's stock image has no libfabric / aws-ofi-nccl (docker/Dockerfile; its EFA build is
    docker/Dockerfile.efa): NCCL would silently use TCP sockets while the pods hold the EFA devices."""
    resources = rendered()
    lws = find(resources, "LeaderWorkerSet", "llama-70b-long-group")["inputs"]["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        lws[role]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.33.0"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "efa-capable-image" in failing(report)
    assert (
        "LeaderWorkerSet inference/llama-70b-long-group container 'vllm' (leader) requests vpc.amazonaws.com/efa but "
        "its image 'vllm/vllm-openai:v0.33.0' is not known to carry libfabric and the aws-ofi-nccl plugin"
        in messages(report, "efa-capable-image")
    )
    for role in ("leaderTemplate", "workerTemplate"):
        lws[role]["metadata"]["annotations"] = {"inferstack.dev/image-provides-efa": "true"}
    code, report = check(resources, tmp_path, capsys)
    assert "efa-capable-image" not in failing(report)


def test_a_service_named_like_a_leaderworkerset_fails_the_controller_names_rule(tmp_path, capsys):
    """The LWS controller creates its headless Service only under a free name (kubernetes-sigs/lws v0.10.0
    pkg/utils/controller/controller_utils.go CreateHeadlessServiceIfNotExists): a Service of ours under the
    LWS's name, as the program once registered, leaves the workers without a leader address."""
    resources = rendered()
    find(resources, "LeaderWorkerSet", "llama-70b-long-group")["inputs"]["metadata"]["name"] = "llama-70b-long"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "controller-created-names" in failing(report)
    assert (
        "Service inference/llama-70b-long takes the name of the headless Service the LeaderWorkerSet controller "
        "creates for LeaderWorkerSet inference/llama-70b-long" in messages(report, "controller-created-names")
    )

    resources = rendered()
    lws = find(resources, "LeaderWorkerSet", "llama-70b-long-group")["inputs"]
    lws["spec"]["networkConfig"] = {"subdomainPolicy": "UniquePerReplica"}
    find(resources, "Service", "llama-70b-long")["inputs"]["metadata"]["name"] = "llama-70b-long-group-0"
    code, report = check(resources, tmp_path, capsys)
    assert "Service inference/llama-70b-long-group-0 takes the name" in messages(report, "controller-created-names")

def test_kueue_quota_above_the_flavor_capacity_fails(tmp_path, capsys):
    resources = rendered()
    queue = find(resources, "ClusterQueue", "serving")
    flavor = queue["inputs"]["spec"]["resourceGroups"][0]["flavors"][0]
    gpus = next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")
    gpus["nominalQuota"] = 17
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"kueue-quotas-within-pools"}
    assert (
        f"nominal quota for nvidia.com/gpu on flavor {flavor['name']} (ClusterQueue serving: 17, ClusterQueue batch: 0) "
        "exceeds what the flavor's node groups can hold at max size: 16 from prod-h100-on-demand (max 2)"
        in messages(report, "kueue-quotas-within-pools")
    )


def test_a_spec_over_its_budget_is_refused_before_the_policy_runs(tmp_path, capsys):
    """The cost at max scale is knowable from the spec (inferstack.planning.cost.check_budget), so `check` stops at spec
    time; the policy itself is exercised on rendered resources below."""
    _write_stack(
        tmp_path / "stacks",
        "tight",
        """
        environment: tight
        node_pools:
          - {name: l40s, instance_types: [g6e.xlarge], min_nodes: 1, max_nodes: 4, capacity: {on_demand_base: 1}}
        budget: {max_usd_per_hour: 1.0, spot_discount: 0.5}
        """,
    )
    assert main(["check", "tight", "--stacks-dir", str(tmp_path / "stacks"), "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "tight.yaml: budget.max_usd_per_hour: at max scale the node pools cost $" in captured.err
    assert "over the budget of $1.00/h" in captured.err


def test_budget_from_plan_json_beside_a_rendered_resources_file(tmp_path, capsys):
    out = tmp_path / "render"
    assert main(["render", "prod", "--out", str(out)]) == 0
    capsys.readouterr()
    plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    plan["totals"]["budget_usd_per_hour"] = 100.0
    (out / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    assert main(["check", "--resources", str(out / "resources.json"), "--format", "json"]) == 1
    report = {p["name"]: p for p in json.loads(capsys.readouterr().out)["policies"]}
    assert failing(report) == {"budget-at-max-scale"}
    # The policy totals what the plan totals: each pool at its dearest type, priced in the stack's region.
    total = plan["totals"]["usd_per_hour_max"]
    assert f"at max scale the node groups cost ${total:,.2f}/h, over the budget of $100.00/h" in messages(
        report, "budget-at-max-scale"
    )
    assert "us-east-1 on-demand prices" in messages(report, "budget-at-max-scale")


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_pack_reads_from_the_render_the_figures_planning_gives_the_plan(stack):
    """One set of figures for `plan`, `check` and the render: what the pack recovers from the registered node
    groups (their sizes, what a node advertises, their cost at max size, the replicas of a service they hold)
    is what inferstack.planning computes from the spec for the AWS layer, the platform, the plan and the
    spec's checks."""
    spec = load_stack(STACKS, stack)
    seen: dict[str, Any] = {}

    def probe(args, report):
        groups = [g for g in node_groups(args.resources) if g.pool is not None]
        region = stack_region(args.resources)
        seen["groups"] = groups
        seen["costs"] = max_scale_costs(groups, region, spec.budget)
        seen["held"] = {w.workload.name: pool_limit(groups, w) for w in workloads(args.resources)}

    run_policies(rendered(stack), stack,
                 policies=[StackValidationPolicy(name="probe", description="node groups", validate=probe)])
    costs = {c.pool: c.max_usd_per_hour for c in stack_costs(spec)}
    for pool in spec.node_pools:
        views = [g for g in seen["groups"] if g.pool == pool.name]
        planned = plan_node_groups(pool)
        assert [(g.capacity_type, g.min_size, g.max_size) for g in views] == [
            (p.capacity_type, p.min_size, p.max_size) for p in planned
        ]
        assert all(g.advertised == advertised_per_node(PoolHardware(pool)) for g in views)
        priced = sum(c.usd_per_hour for c in seen["costs"] if c.group.pool == pool.name)
        assert priced == pytest.approx(costs[pool.name], abs=1e-4)
    for model in validate(spec).stack.models:
        hardware = PoolHardware(spec.pool(model.pool))
        held = replicas_held([(hardware.spec.max_nodes, hardware.resources_per_node)], gpu_requests(model, hardware),
                             model.pipeline_parallel)
        assert seen["held"][names.workload(model)][0] == held


def _budget_config(tmp_path: Path, usd_per_hour: float) -> str:
    path = tmp_path / "pack.json"
    path.write_text(json.dumps({"budget-at-max-scale": {"maxUsdPerHour": usd_per_hour}}), encoding="utf-8")
    return str(path)


def test_budget_policy_refuses_a_node_group_unpriced_in_the_stack_region(tmp_path, capsys):
    """g6e is offered in ap-south-1 (EC2's offerings) but the catalog has no price there: the policy reads the
    region from the recorded AWS provider and refuses a budget it cannot check instead of pricing it at $0."""
    _write_stack(
        tmp_path / "stacks",
        "mumbai",
        """
        environment: mumbai
        region: ap-south-1
        node_pools:
          - {name: l4, instance_types: [g6.xlarge], max_nodes: 1}
          - {name: l40s, instance_types: [g6e.xlarge], max_nodes: 2}
        """,
    )
    spec = load_stack(tmp_path / "stacks", "mumbai")
    resources = [r.as_dict() for r in run_stack(spec).resources]
    code, report = check(resources, tmp_path, capsys, "--policy-config", _budget_config(tmp_path, 1000.0))
    assert code == 1 and failing(report) == {"budget-at-max-scale"}
    text = messages(report, "budget-at-max-scale")
    assert "node group mumbai-l40s-spot: g6e.xlarge has no on-demand price in ap-south-1 in the catalog" in text
    assert "mumbai-l4-" not in text and "budget of $1,000.00/h cannot be checked" in text


def test_budget_policy_without_the_stacks_region_cannot_price_a_group(tmp_path, capsys):
    resources = [r for r in rendered("dev") if r["type"] != "pulumi:providers:aws"]
    code, report = check(resources, tmp_path, capsys, "--policy-config", _budget_config(tmp_path, 1000.0))
    assert code == 1 and failing(report) == {"budget-at-max-scale"}
    assert "g6.xlarge has no spot price (no aws provider states the stack's region)" in messages(
        report, "budget-at-max-scale"
    )


def test_budget_without_config_is_not_applicable(tmp_path, capsys):
    code, report = check(rendered(), tmp_path, capsys)
    assert code == 0 and report["budget-at-max-scale"]["notes"] == [
        "not applicable: no maxUsdPerHour in the policy config (the stack sets no budget)"
    ]


def test_prefix_caching_off_is_advisory(tmp_path, capsys):
    resources = rendered()
    args = containers(find(resources, "Deployment", "llama-8b-fp8"))[0]["args"]
    args[args.index("--enable-prefix-caching")] = "--disable-prefix-caching"
    code, report = check(resources, tmp_path, capsys)
    assert code == 0 and report["vllm-prefix-caching"]["enforcement"] == "advisory"
    assert "Deployment inference/llama-8b-fp8 container 'vllm' turns prefix caching off. To fix:" in messages(
        report, "vllm-prefix-caching"
    )


def test_fp8_kv_cache_on_hopper_is_advisory(tmp_path, capsys):
    resources = rendered()
    args = containers(find(resources, "Deployment", "llama-70b"))[0]["args"]
    del args[args.index("--kv-cache-dtype") : args.index("--kv-cache-dtype") + 2]
    code, report = check(resources, tmp_path, capsys)
    assert code == 0
    assert "Deployment inference/llama-70b runs on H100 nodes (prod-h100-on-demand, prod-h100-spot) with --kv-cache-dtype auto" in messages(
        report, "vllm-fp8-kv-cache"
    )


def test_batch_on_on_demand_only_is_advisory(tmp_path, capsys):
    resources = rendered()
    find(resources, "NodeGroup", "prod-l40s-batch-spot")["inputs"]["capacityType"] = "ON_DEMAND"
    code, report = check(resources, tmp_path, capsys)
    assert "CronJob batch/nightly-eval is batch work but runs only on on-demand capacity" in messages(report, "batch-on-spot")
    assert report["batch-on-spot"]["enforcement"] == "advisory"


# ------------------------------------------------------------------------------------------ pack config


def test_pack_config_sets_levels_like_pulumi_policy_pack_config(tmp_path, capsys):
    resources = rendered()
    find(resources, "Release", "prod-platform-keda-release")["inputs"]["version"] = "2.x"
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"all": "advisory", "vllm-prefix-caching": "disabled"}), encoding="utf-8")
    code, report = check(resources, tmp_path, capsys, "--policy-config", str(config))
    assert code == 0 and report["helm-releases-pinned"]["enforcement"] == "advisory"
    assert report["helm-releases-pinned"]["violations"]
    assert report["vllm-prefix-caching"] == {**report["vllm-prefix-caching"], "enforcement": "disabled", "violations": []}


@pytest.mark.parametrize(
    ("args", "content"),
    [
        ([], None),
        (["prod", "--resources", "x.json"], None),
        (["--resources", "resources.json"], "{not json"),
        (["--resources", "resources.json"], '{"type": "a"}'),
        (["--resources", "resources.json"], '[{"type": "a", "name": "b", "inputs": []}]'),
        (["--resources", "resources.json"], json.dumps([{"type": "a", "name": "b", "inputs": {"x": {SIG_KEY: "bogus"}}}])),
    ],
)
def test_bad_input_exits_2_with_one_message(tmp_path, capsys, args, content):
    if content is not None:
        (tmp_path / "resources.json").write_text(content, encoding="utf-8")
    args = [str(tmp_path / a) if a.endswith(".json") else a for a in args]
    assert main(["check", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inferstack") and "Traceback" not in err


def test_an_unknown_enforcement_level_in_the_pack_config_exits_2(tmp_path, capsys):
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"images-pinned": "loud"}), encoding="utf-8")
    (tmp_path / "resources.json").write_text(json.dumps(rendered("dev")), encoding="utf-8")
    code = main(["check", "--resources", str(tmp_path / "resources.json"), "--policy-config", str(config)])
    assert code == 2
    assert "enforcement level 'loud' is not one of advisory, mandatory, remediate, disabled" in capsys.readouterr().err


# ------------------------------------------------------------------------------- robustness and fidelity


def _garbage(rng: random.Random, depth: int = 0) -> Any:
    """Odd props: wrong types where rules expect maps or lists, unknowns, secrets, NaN-like strings."""
    leaves = [None, True, 0, -3, 2.5, "", "nan", "-1", "latest", "x:y", UNKNOWN_STRING_VALUE, SECRET_HF_TOKEN]
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(leaves)
    if rng.random() < 0.5:
        return [_garbage(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["spec", "template", "containers", "resources", "limits", "nvidia.com/gpu", "labels", "metadata", "name",
            "policy", "Statement", "values", "scalingConfig", "maxSize", "launchTemplate", "networkInterfaces",
            "placement", "resourceGroups", "flavors", "nominalQuota", "env", "args", "image", "securityContext",
            "leaderWorkerTemplate", "workerTemplate", "leaderTemplate", "size", "scaleTargetRef", "selector",
            "instanceTypes", "capacityType", "migManager", "config", "data", "devicePlugin", "bucket", "chart",
            "resourceClaims", "claims", "request", "resourceClaimTemplateName", "resourceClaimName", "devices",
            "requests", "exactly", "count", "deviceClassName", "allocationMode", "firstAvailable", "constraints",
            "matchAttribute", "kubeletPlugin", "affinity", "nodeSelector", "supportedInstanceLabels", "keys",
            "gpus", "enabled"]
    return {rng.choice(keys): _garbage(rng, depth + 1) for _ in range(rng.randint(0, 4))}


FUZZED_TYPES = sorted(
    {
        "aws:eks/nodeGroup:NodeGroup", "aws:ec2/launchTemplate:LaunchTemplate", "aws:iam/role:Role",
        "aws:iam/policy:Policy", "aws:iam/rolePolicy:RolePolicy", "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        "aws:s3/bucket:Bucket", "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "aws:ec2/securityGroup:SecurityGroup",
        "aws:ec2/placementGroup:PlacementGroup", "kubernetes:helm.sh/v3:Release", "kubernetes:apps/v1:Deployment",
        "kubernetes:batch/v1:Job", "kubernetes:batch/v1:CronJob", "kubernetes:core/v1:Pod", "kubernetes:core/v1:ConfigMap",
        "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", "kubernetes:keda.sh/v1alpha1:ScaledObject",
        "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue", "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor",
        "kubernetes:policy/v1:PodDisruptionBudget", "example:unknown/thing:Thing", "pulumi:providers:aws",
        "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate", "kubernetes:resource.k8s.io/v1:ResourceClaim",
        "kubernetes:resource.k8s.io/v1beta1:ResourceClaimTemplate", "kubernetes:resource.k8s.io/v1:DeviceClass",
        "kubernetes:autoscaling/v2:HorizontalPodAutoscaler",
    }
)


def _mutated(value: Any, rng: random.Random) -> Any:
    """A real value with some of its parts swapped for garbage: the shapes rules expect, broken in places."""
    if rng.random() < 0.08:
        return _garbage(rng)
    if isinstance(value, dict) and SIG_KEY in value:
        return value  # a secret marker is one value on the wire
    if isinstance(value, dict):
        return {k: _mutated(v, rng) for k, v in value.items()}
    if isinstance(value, list):
        return [_mutated(v, rng) for v in value]
    return value


def _as_inputs(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"value": value}


@pytest.mark.parametrize("seed", range(4))
def test_no_rule_crashes_on_odd_or_unknown_resources(seed):
    rng = random.Random(seed)
    invented = [
        {"type": kind, "name": f"{kind.rsplit(':', 1)[-1].lower()}-{i}", "parent": None,
         "inputs": {"spec": _garbage(rng), "metadata": _garbage(rng), **_as_inputs(_garbage(rng))}, "depends_on": []}
        for i, kind in enumerate(FUZZED_TYPES * 2)
    ]
    broken = [{**r, "inputs": _as_inputs(_mutated(r["inputs"], rng))} for r in rendered()]
    results = run_policies(invented + broken, "fuzz", {"budget-at-max-scale": {"maxUsdPerHour": 1}})
    assert [r.name for r in results] == [p.name for p in POLICIES]


def test_unknown_values_become_a_preview_note_not_a_verdict():
    resources = rendered("dev")
    release = next(r for r in resources if r["type"] == "kubernetes:helm.sh/v3:Release")
    release["inputs"]["version"] = UNKNOWN_STRING_VALUE
    result = next(r for r in run_policies(resources, "dev") if r.name == "helm-releases-pinned")
    assert result.violations == []
    assert result.notes == [
        "can't run policy 'helm-releases-pinned' from policy pack 'inferstack' during preview: "
        "string value at .version can't be known during preview"
    ]


def test_policies_see_props_exactly_as_the_analyzer_builds_them():
    seen: dict[str, Any] = {}

    def capture(args, _report):
        seen.update(props=args.props, urn=args.urn, opts=args.opts)

    probe = ResourceValidationPolicy(name="probe", description="captures its args", validate=capture)
    resources = [
        {"type": "inferstack:test:Parent", "name": "parent", "parent": None, "inputs": {}, "depends_on": []},
        {"type": "test:index:Thing", "name": "thing", "parent": "parent", "depends_on": [],
         "inputs": {"count": 3, "token": {SIG_KEY: SECRET_SIG, "value": "s"}, "items": [{"a": 1}]}},
    ]
    run_policies(resources, "dev", policies=[probe])
    props = seen["props"]
    assert isinstance(props, Mapping) and not isinstance(props, dict)
    assert (props["count"], props["token"], props["items"][0]["a"]) == (3.0, "s", 1.0)
    assert isinstance(props["count"], float)
    assert seen["urn"] == "urn:pulumi:dev::inferstack::inferstack:test:Parent$test:index:Thing::thing"
    assert seen["opts"].parent == "urn:pulumi:dev::inferstack::inferstack:test:Parent::parent"


def _struct(inputs: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(_wire(inputs))
    return struct


def test_offline_runner_reports_what_the_pulumi_analyzer_reports(tmp_path):
    """The pack's own analyzer servicer (what `pulumi preview --policy-pack` talks to) and the runner agree."""
    resources = rendered()
    find(resources, "Release", "prod-platform-keda-release")["inputs"]["version"] = "^2.20"
    find(resources, "ScaledObject", "llama-70b")["inputs"]["spec"]["maxReplicaCount"] = 15
    find(resources, "RolePolicy")["inputs"]["policy"] = json.dumps({"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
    config = {"budget-at-max-scale": {"maxUsdPerHour": 100.0}}
    offline = run_policies(resources, "prod", config)
    descriptions = {p.name: p.description for p in POLICIES}
    urns = {}

    servicer = _PolicyAnalyzerServicer(PACK_NAME, "0.0.1", POLICIES, PACK_ENFORCEMENT)
    levels = {p.name: analyzer_pb2.MANDATORY if p.enforcement_level == EnforcementLevel.MANDATORY else analyzer_pb2.ADVISORY for p in POLICIES}
    servicer.Configure(
        analyzer_pb2.ConfigureAnalyzerRequest(
            policyConfig={
                name: analyzer_pb2.PolicyConfig(enforcementLevel=level, properties=_struct(config.get(name, {})))
                for name, level in levels.items()
            }
        ),
        None,
    )
    by_name = {r["name"]: r for r in resources}

    def urn(resource: dict[str, Any]) -> str:
        chain, parent = [resource["type"]], by_name.get(resource["parent"] or "")
        while parent is not None:
            chain.insert(0, parent["type"])
            parent = by_name.get(parent["parent"] or "")
        return f"urn:pulumi:prod::inferstack::{'$'.join(chain)}::{resource['name']}"

    analyzer = set()
    stack_resources = []
    for resource in resources:
        urns[urn(resource)] = resource["name"]
        properties = _struct(resource["inputs"])
        parent = urn(by_name[resource["parent"]]) if resource["parent"] else ""
        response = servicer.Analyze(
            analyzer_pb2.AnalyzeRequest(type=resource["type"], properties=properties, urn=urn(resource), name=resource["name"]),
            None,
        )
        analyzer |= {(d.policyName, resource["name"], d.message) for d in response.diagnostics}
        stack_resources.append(
            analyzer_pb2.AnalyzerResource(
                type=resource["type"], properties=properties, urn=urn(resource), name=resource["name"], parent=parent,
                dependencies=[urn(by_name[d]) for d in resource["depends_on"] if d in by_name],
            )
        )
    response = servicer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=stack_resources), None)
    analyzer |= {(d.policyName, urns.get(d.urn), d.message) for d in response.diagnostics}

    runner = {(r.name, v.resource, f"{descriptions[r.name]}\n{v.message}") for r in offline for v in r.violations}
    assert runner == analyzer
    assert {name for name, _, _ in runner} >= {"helm-releases-pinned", "keda-scaling-bounds", "iam-least-privilege", "budget-at-max-scale"}


def test_every_rule_has_a_failing_case_here():
    """Here or in a test module of its own part (tests/test_network_policies_pack.py, test_redis_auth.py, ...)."""
    source = "".join(path.read_text(encoding="utf-8") for path in Path(__file__).parent.glob("test_*.py"))
    untested = [p.name for p in POLICIES if f'"{p.name}"' not in source]
    assert untested == []
    assert all(isinstance(p, (ResourceValidationPolicy, StackValidationPolicy)) for p in POLICIES)
    assert {p.name for p in POLICIES} - MANDATORY == {"vllm-prefix-caching", "vllm-fp8-kv-cache", "batch-on-spot"}


# ------------------------------------------------------------------------------------ Karpenter NodePools
# The rules read a Karpenter NodePool (with its EC2NodeClass) as they read a node group: its template labels, its
# karpenter.sh/capacity-type requirement, its instance types and limits.nodes (shared/reference/karpenter.md 4, 5).


def karpenter_objects(resources, kind):
    return [r for r in resources if r["type"] == f"kubernetes:{'karpenter.sh' if kind == 'NodePool' else 'karpenter.k8s.aws'}/v1:{kind}"]


def test_karpenter_stack_passes_every_rule_as_node_groups_do(tmp_path, capsys):
    code, report = check(rendered("karpenter"), tmp_path, capsys)
    assert code == 0 and failing(report) == set()
    assert report["kueue-quotas-within-pools"]["violations"] == [] and report["gpu-requests-advertised"]["violations"] == []


def test_an_efa_node_class_needs_a_placement_group_or_a_reservation(tmp_path, capsys):
    resources = rendered("karpenter")
    (h100,) = [r for r in karpenter_objects(resources, "EC2NodeClass")
               if r["inputs"]["metadata"]["name"] == "karpenter-h100-reserved"]
    # The reserved NodePool's ODCR keeps its nodes together (it joins no placement group the stack creates): without
    # it, nothing does.
    assert "placementGroupSelector" not in h100["inputs"]["spec"]
    del h100["inputs"]["spec"]["capacityReservationSelectorTerms"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"efa-placement-and-security-group"}
    assert "EC2NodeClass karpenter-h100-reserved attaches 32 EFA interfaces but no placement group and no capacity reservation" in (
        messages(report, "efa-placement-and-security-group"))


def test_a_nodepool_limit_below_the_queues_quota_fails(tmp_path, capsys):
    resources = rendered("karpenter")
    for pool in karpenter_objects(resources, "NodePool"):
        if pool["inputs"]["metadata"]["name"] == "karpenter-l40s-spot":
            pool["inputs"]["spec"]["limits"]["nodes"] = 1
    code, report = check(resources, tmp_path, capsys)
    # KEDA's bounds read the same limit: the service's max replicas no longer fit the pool at max size.
    assert code == 1 and failing(report) == {"kueue-quotas-within-pools", "keda-scaling-bounds"}
    assert "flavor l40s-spot" in messages(report, "kueue-quotas-within-pools")


def test_an_online_service_left_with_only_a_spot_nodepool_fails(tmp_path, capsys):
    resources = rendered("karpenter")
    resources = [r for r in resources if (r["inputs"].get("metadata") or {}).get("name") != "karpenter-h100-reserved"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "serving-on-demand-baseline" in failing(report)
    assert "every node group it can run on is spot" in messages(report, "serving-on-demand-baseline")


def test_a_nodepool_that_may_launch_spot_counts_as_spot(tmp_path, capsys):
    """Section 4.1: a NodePool allowing [spot, on-demand] tries spot first; for the baseline rule it is spot."""
    resources = rendered("karpenter")
    resources = [r for r in resources if (r["inputs"].get("metadata") or {}).get("name") != "karpenter-h100-spot"]
    for pool in karpenter_objects(resources, "NodePool"):
        if pool["inputs"]["metadata"]["name"] == "karpenter-h100-reserved":
            for requirement in pool["inputs"]["spec"]["template"]["spec"]["requirements"]:
                if requirement["key"] == "karpenter.sh/capacity-type":
                    requirement["values"] = ["spot", "on-demand"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "every node group it can run on is spot" in messages(report, "serving-on-demand-baseline")
