"""The embedded engine records what a real engine would receive: types, names, parents, inputs, deps."""

from __future__ import annotations

import json

import pulumi
import pytest

from inferstack.engine.mocks import PlanMocks, UnmockedInvoke
from inferstack.engine.recorder import record
from inferstack.engine.render import is_secret, helm_releases, kubernetes_objects, write_render


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
    assert [set(r) for r in resources] == [{"type", "name", "custom", "parent", "inputs", "depends_on"}] * len(resources)
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
