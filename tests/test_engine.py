"""The embedded engine records what a real engine would receive: types, names, parents, inputs, deps."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pulumi
import pytest

from inferstack.engine import run_stack
from inferstack.engine.mocks import PlanMocks, UnmockedInvoke
from inferstack.engine.recorder import record
from inferstack.engine.render import is_secret, helm_releases, kubernetes_objects, write_render
from inferstack.program import deploy
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack, load_validated
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"


class Layer(pulumi.ComponentResource):
    def __init__(self, name: str) -> None:
        super().__init__("inferstack:test:Layer", name)
        from pulumi_kubernetes.core.v1 import ConfigMap, Namespace
        from pulumi_kubernetes.helm.v3 import Release

        import pulumi_aws as aws

        provider = __import__("pulumi_kubernetes").Provider(f"{name}-k8s", kubeconfig=pulumi.Output.secret("{}"))
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        self.role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=json.dumps({"Version": "2012-10-17", "Statement": []}),
            opts=pulumi.ResourceOptions(parent=self),
        )
        namespace = Namespace(f"{name}-ns", metadata={"name": "inference"}, opts=child)
        ConfigMap(
            f"{name}-config",
            metadata={"name": "settings", "namespace": namespace.metadata["name"]},
            data={"role": self.role.arn, "token": pulumi.Output.secret("s3cr3t")},
            opts=child,
        )
        Release(f"{name}-keda", chart="keda", version="2.20.2", namespace="keda", values={"a": 1}, opts=child)
        self.register_outputs({"role_arn": self.role.arn})


def program() -> None:
    layer = Layer("unit")
    pulumi.export("role_arn", layer.role.arn)


@pytest.fixture(scope="module")
def recording():
    return record(program, "unit", PlanMocks("us-east-1"))


def test_registrations_carry_type_parent_and_dependencies(recording):
    by_name = {r.name: r for r in recording.resources}
    assert by_name["unit"].type == "inferstack:test:Layer" and by_name["unit"].custom is False
    assert by_name["unit"].parent is None
    assert by_name["unit-role"].parent == "unit"
    config = by_name["unit-config"]
    assert config.type == "kubernetes:core/v1:ConfigMap" and config.custom
    assert set(config.depends_on) >= {"unit-ns", "unit-role"}


def test_mocks_return_realistic_outputs(recording):
    manifest = next(o for o in kubernetes_objects(recording) if o["kind"] == "ConfigMap")
    assert manifest["data"]["role"].startswith("arn:aws:iam::123456789012:role/unit-role")
    assert recording.outputs["role_arn"] == manifest["data"]["role"]


def test_secrets_stay_marked_in_the_recording_and_are_plain_in_manifests(recording):
    # a map holding a secret is secret as a whole, as the real engine sees it
    data = recording.named("unit-config").inputs["data"]
    assert is_secret(data) and data["value"]["token"] == "s3cr3t"
    manifest = next(o for o in kubernetes_objects(recording) if o["kind"] == "ConfigMap")
    assert manifest["data"]["token"] == "s3cr3t"


def test_render_writes_the_four_outputs(recording, tmp_path):
    counts = write_render(recording, {"stack": "unit"}, tmp_path)
    resources = json.loads((tmp_path / "resources.json").read_text())
    assert [set(r) for r in resources] == [{"type", "name", "custom", "parent", "inputs", "depends_on", "options"}] * len(resources)
    assert counts == {"resources": len(resources), "kubernetes": 2, "helm": 1}
    assert len(list((tmp_path / "kubernetes").glob("*.yaml"))) == 2
    assert helm_releases(recording)[0]["version"] == "2.20.2"
    assert json.loads((tmp_path / "plan.json").read_text()) == {"stack": "unit"}


def test_runs_are_independent_and_list_resources_in_program_order():
    first = record(program, "one", PlanMocks("us-east-1"))
    second = record(program, "two", PlanMocks("eu-west-1"))
    assert [r.name for r in first.resources] == [r.name for r in second.resources] == [
        "unit", "unit-k8s", "unit-role", "unit-ns", "unit-config", "unit-keda"
    ]


def test_a_failed_run_leaves_nothing_behind_for_the_next():
    def fails_in_apply() -> None:
        import pulumi_aws as aws

        role = aws.iam.Role("broken", assume_role_policy="{}")
        role.arn.apply(lambda _: 1 / 0)

    with pytest.raises(ZeroDivisionError):
        record(fails_in_apply, "broken", PlanMocks("us-east-1"))
    assert [r.name for r in record(program, "after", PlanMocks("us-east-1")).resources][0] == "unit"


def test_an_unanswered_invoke_fails_loudly():
    def calls_unknown() -> None:
        pulumi.runtime.invoke("aws:ec2/getAmi:getAmi", {})

    with pytest.raises(Exception, match="no answer for invoke 'aws:ec2/getAmi:getAmi'"):
        record(calls_unknown, "unit", PlanMocks("us-east-1"))
    assert issubclass(UnmockedInvoke, Exception)


# ------------------------------------------------------------------------- outputs the program reads
#
# During an update the SDK resolves an output the engine did not return to None (pulumi 3.272.0,
# pulumi/runtime/rpc.py `resolve_properties`), and an input set to None is dropped from the request with
# its dependency. So a mock that forgets an output the program reads silently removes inputs from the
# render (the NAT gateways lost their Elastic IP so). The recorder logs every output property the program
# reads through the generated SDKs' `pulumi.get`, and the mocks must answer each one, with the names of
# the pulumi-aws schema (allocationId, arn, resources[].autoscalingGroups[].name, ...).

EXISTING_POOLS = [
    {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 4, "efa": True,
     "availability_zones": ["us-east-1b"],
     "capacity": {"on_demand_base": 2, "reservation": {"kind": "capacity_block", "id": "cr-0123456789abcdef0"}}},
    {"name": "l40s", "instance_types": ["g6e.xlarge"], "max_nodes": 3,
     "capacity": {"on_demand_base": 1, "reservation": {"kind": "odcr", "id": "cr-0fedcba9876543210"}}},
]
EXISTING_MODELS = [
    {"name": "small", "model": "meta-llama/Llama-3.2-3B-Instruct", "pool": "l40s", "max_model_len": 4096, "max_num_seqs": 4},
]
MODE_STACKS = {
    "existing VPC, bucket, EFA and reservations": {
        "environment": "byovpc",
        "cluster": {"mode": "create", "network": {"existing_subnet_ids": [
            "subnet-0123456789abcdef0", "subnet-0123456789abcdef1", "subnet-0123456789abcdef2"]}},
        "weights": {"existing_bucket": "acme-weights"},
    },
    "existing cluster, EFA and reservations": {"environment": "byocluster", "cluster": {"mode": "existing", "name": "shared-gpu"}},
}


def _stack(case: str) -> StackSpec:
    if case in ("dev", "prod"):
        return load_stack(STACKS, case)
    return validate(StackSpec.model_validate(
        {"node_pools": EXISTING_POOLS, "models": EXISTING_MODELS, **MODE_STACKS[case]}
    )).stack


@pytest.mark.parametrize("case", ["dev", "prod", *MODE_STACKS])
def test_the_mocks_answer_every_output_the_program_reads(case):
    assert run_stack(_stack(case)).unanswered == []


class ForgetfulMocks(PlanMocks):
    """PlanMocks that leave one key out of one resource type's (or invoke's) answer."""

    def __init__(self, region: str, token: str, path: tuple[str | int, ...]) -> None:
        super().__init__(region)
        self.token, self.path = token, path

    def _forget(self, state: dict) -> dict:
        *inner, last = self.path
        target = state
        for step in inner:
            target = target[step]
        del target[last]
        return state

    def new_resource(self, args):
        rid, state = super().new_resource(args)
        return rid, (self._forget(state) if args.typ == self.token else state)

    def call(self, args):
        answer, failures = super().call(args)
        return (self._forget(answer) if args.token == self.token else answer), failures


@pytest.mark.parametrize(
    ("token", "path", "expected"),
    [
        pytest.param("aws:ec2/eip:Eip", ("allocationId",), "aws:ec2/eip:Eip dev-network-nat-us-east-1a-eip .allocation_id",
                     id="a resource output"),
        pytest.param("aws:eks/nodeGroup:NodeGroup", ("resources", 0, "autoscalingGroups", 0, "name"),
                     "NodeGroupResourceAutoscalingGroup .name", id="a nested output"),
        pytest.param("aws:index/getCallerIdentity:getCallerIdentity", ("accountId",), "GetCallerIdentityResult .account_id",
                     id="an invoke result"),
    ],
)
def test_an_output_the_mocks_forget_is_caught(token, path, expected):
    spec = load_stack(STACKS, "dev")
    found = record(lambda: deploy(spec), "dev", ForgetfulMocks(spec.region, token, path))
    assert expected in found.unanswered


def test_nat_gateways_carry_their_elastic_ip_and_wait_for_it():
    """aws:ec2/natGateway allocationId is the Elastic IP's allocation id (eipalloc-...), so each NAT gateway
    depends on its zone's address through its inputs."""
    recording = run_stack(load_stack(STACKS, "prod"))
    gateways = recording.of_type("aws:ec2/natGateway:NatGateway")
    assert gateways
    for gateway in gateways:
        address = f"{gateway.name}-eip"
        assert gateway.inputs["allocationId"].startswith("eipalloc-")
        assert address in gateway.depends_on and address in gateway.input_dependencies


def _sdk_class(token: str, suffix: str = ""):
    """'aws:ec2/eip:Eip' -> pulumi_aws.ec2.Eip; with suffix 'Result', an invoke's result type."""
    _, module, name = token.split(":")
    package = module.split("/")[0]
    found = importlib.import_module("pulumi_aws" if package == "index" else f"pulumi_aws.{package}")
    return getattr(found, name[0].upper() + name[1:] + suffix)


def _schema_names(cls) -> set[str]:
    """The schema (wire) names of a generated class's output properties."""
    return {
        getattr(member.fget, "_pulumi_name")
        for klass in cls.__mro__
        for member in vars(klass).values()
        if isinstance(member, property) and hasattr(member.fget, "_pulumi_name")
    }


@pytest.mark.parametrize("token", sorted(t for t in PlanMocks("us-east-1")._resources if t.startswith("aws:")))
def test_the_mocks_answer_with_pulumi_aws_schema_names(token):
    """Each key a mock returns is an output property of the installed pulumi-aws SDK class (its generated
    `@pulumi.getter(name=...)` names, from the provider schema bridged from the Terraform AWS provider)."""
    _, state = PlanMocks("us-east-1")._resources[token]("unit", {"clusterName": "c", "bucket": "b"})
    assert set(state) - {"clusterName", "bucket"} <= _schema_names(_sdk_class(token))


INVOKE_ARGS = {"name": "c", "id": "subnet-0123456789abcdef0", "addonName": "vpc-cni", "kubernetesVersion": "1.36"}


@pytest.mark.parametrize("token", sorted(PlanMocks("us-east-1")._calls))
def test_invoke_answers_use_pulumi_aws_schema_names(token):
    """Each key an invoke mock returns is a property of the installed pulumi-aws SDK's result class."""
    answer = PlanMocks("us-east-1")._calls[token](dict(INVOKE_ARGS))
    assert set(answer) <= _schema_names(_sdk_class(token, "Result"))


def test_resources_pulumi_tells_apart_by_urn_get_distinct_names_in_the_recording():
    """Pulumi identifies a resource by its URN, whose qualified type includes its parent's type
    (pulumi/pulumi sdk/python/lib/pulumi/resource.py, the URN a resource registers with), so a model
    service and a queue-fed worker both named `foo` may each own a Deployment `...-foo-deployment`.
    The recording, resources.json and the time-to-serving graph name resources uniquely all the same."""
    spec = StackSpec.model_validate({
        "environment": "twins",
        "node_pools": [{"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 2, "capacity": {"on_demand_base": 1}}],
        "models": [{"name": "foo", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "pool": "l4", "max_model_len": 4096}],
        "workers": [{"name": "foo", "model_service": "foo", "image": "python:3.13.1-slim"}],
    })
    recording = run_stack(spec)
    names = [r.name for r in recording.resources]
    assert len(names) == len(set(names))
    twins = sorted(r.name for r in recording.resources if r.name.startswith("twins-serving-foo-deployment"))
    assert twins == [  # both named with their qualified type, whichever the engine saw first
        "twins-serving-foo-deployment (inferstack:serving:ModelService$kubernetes:apps/v1:Deployment)",
        "twins-serving-foo-deployment (inferstack:serving:QueueWorker$kubernetes:apps/v1:Deployment)",
    ]
    parents = {r.parent for r in recording.resources if r.name in twins}
    assert parents == {
        "twins-serving-foo (inferstack:serving:Serving$inferstack:serving:ModelService)",
        "twins-serving-foo (inferstack:serving:Serving$inferstack:serving:QueueWorker)",
    }
    assert "twins-serving-foo-service" in names  # names nothing else shares stay as the program gave them

    from inferstack.presentation.summary import node_pools, placements, time_to_serving

    validated = validate(spec)
    pools, rows = node_pools(validated.stack), placements(validated.stack, {})
    assert [m["model"] for m in time_to_serving(validated.stack, recording, pools, rows)["models"]] == ["foo"]


def test_the_plan_lists_outputs_the_engine_left_unanswered(capsys):
    """A read the mocks cannot answer is not silent in the plan either (the tests above keep the list empty)."""
    from inferstack.presentation.terminal import print_plan
    from inferstack.presentation.summary import build_plan

    spec = load_validated(STACKS, "dev")
    recording = run_stack(spec)
    assert build_plan(spec, recording)["resources"]["unanswered_outputs"] == []
    recording.unanswered = ["aws:ec2/eip:Eip dev-network-nat-eip .allocation_id"]
    plan = build_plan(spec, recording)
    print_plan(plan)
    assert "left 1 outputs the program reads unanswered" in capsys.readouterr().out.replace("\n", " ")
