"""Protected state: the cluster and the weights bucket survive an accidental delete or replace, a stack
marked for teardown can be destroyed in one go, and resources.json shows every resource's options.

Sources: Pulumi resource options docs, protect (https://www.pulumi.com/docs/iac/concepts/options/protect/:
a deployment that would delete a protected resource, replacement included, fails; unprotect by setting
protect false and running `pulumi up`, or `pulumi state unprotect`) and retainOnDelete
(https://www.pulumi.com/docs/iac/concepts/options/retainondelete/: the provider's Delete is not called,
the resource only leaves the state); pulumi/pulumi#8158 (destroy of a protected resource fails at preview);
hashicorp/terraform-provider-aws@4c72bcc7dc2f5ace40ce61f2a90e12a62cf4ec9a internal/service/s3/bucket.go
resourceBucketDelete (DeleteBucket on a non-empty bucket fails with BucketNotEmpty unless force_destroy,
which empties every object version and retries); the RegisterResourceRequest fields of pulumi's
proto/pulumi/resource.proto (protect, retainOnDelete, deleteBeforeReplace, replaceOnChanges, ignoreChanges,
customTimeouts) as the installed SDK sends them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pulumi
import pytest
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy

from aws_recording import build, run
from inferstack.engine.mocks import PlanMocks
from inferstack.policies.runner import load_resources, run_policies
from inferstack.engine.recorder import record
from inferstack.engine.render import write_render

README = Path(__file__).resolve().parents[1] / "README.md"
CLUSTER = "prod-eks-cluster"
BUCKET = "prod-weights-bucket"
BUCKET_SETTINGS = (
    "prod-weights-public-access-block",
    "prod-weights-ownership",
    "prod-weights-encryption",
    "prod-weights-versioning",
    "prod-weights-lifecycle",
)


@pytest.fixture(scope="module")
def kept():
    return run(build())


@pytest.fixture(scope="module")
def torn_down():
    return run(build({"teardown": True}))


def test_cluster_and_weights_bucket_are_protected_and_the_bucket_retained(kept):
    assert kept.named(CLUSTER).options == {"protect": True}
    bucket = kept.named(BUCKET)
    assert bucket.options == {"protect": True, "retain_on_delete": True}
    assert bucket.inputs.get("forceDestroy") is False  # a protected bucket is never emptied by the provider


def test_a_retained_bucket_keeps_its_settings(kept):
    """Deleting them would leave the kept bucket without its public access block, encryption and versioning."""
    for name in BUCKET_SETTINGS:
        assert kept.named(name).options == {"retain_on_delete": True}, name


def test_teardown_unprotects_both_and_lets_destroy_empty_the_bucket(torn_down):
    assert torn_down.named(CLUSTER).options == {"protect": False}
    bucket = torn_down.named(BUCKET)
    assert bucket.options == {"protect": False, "retain_on_delete": False}
    assert bucket.inputs["forceDestroy"] is True  # versioned, non-empty: DeleteBucket alone would fail
    for name in BUCKET_SETTINGS:
        assert torn_down.named(name).options == {"retain_on_delete": False}, name


def test_teardown_changes_options_and_force_destroy_only(kept, torn_down):
    """Marking a stack for teardown replaces nothing: the same resources with the same inputs but forceDestroy."""
    assert [(r.type, r.name) for r in kept.resources] == [(r.type, r.name) for r in torn_down.resources]
    changed = {r.name for r, t in zip(kept.resources, torn_down.resources) if r.inputs != t.inputs}
    assert changed == {BUCKET}
    assert {k: v for k, v in kept.named(BUCKET).inputs.items() if k != "forceDestroy"} == {
        k: v for k, v in torn_down.named(BUCKET).inputs.items() if k != "forceDestroy"
    }


class Options(pulumi.ComponentResource):
    """One resource with every lifecycle option set, one with none."""

    def __init__(self, name: str) -> None:
        super().__init__("inferstack:test:Options", name)
        import pulumi_aws as aws

        aws.s3.Bucket(
            f"{name}-all",
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=True,
                retain_on_delete=True,
                delete_before_replace=True,
                replace_on_changes=["bucket"],
                ignore_changes=["tags"],
                custom_timeouts=pulumi.CustomTimeouts(create="30m", delete="1h"),
            ),
        )
        aws.s3.Bucket(f"{name}-none", opts=pulumi.ResourceOptions(parent=self))


@pytest.fixture(scope="module")
def options_render(tmp_path_factory):
    out = tmp_path_factory.mktemp("options")
    write_render(record(lambda: Options("unit"), "unit", PlanMocks("us-east-1")), {"stack": "unit"}, out)
    return out / "resources.json"


def test_resources_json_records_the_options_each_request_set(options_render):
    entries = {e["name"]: e for e in json.loads(options_render.read_text())}
    assert entries["unit-all"]["options"] == {
        "protect": True,
        "retain_on_delete": True,
        "delete_before_replace": True,
        "replace_on_changes": ["bucket"],
        "ignore_changes": ["tags"],
        "custom_timeouts": {"create": "30m", "delete": "1h"},
    }
    assert entries["unit-none"]["options"] == {}


def test_policies_see_the_recorded_protect_flag(options_render):
    seen: dict[str, bool] = {}

    def note(args, report):
        seen[args.name] = args.opts.protect

    probe = ResourceValidationPolicy("protect-probe", "notes each resource's protect flag", note, EnforcementLevel.ADVISORY)
    run_policies(load_resources(options_render), "unit", policies=[probe])
    assert seen == {"unit": False, "unit-all": True, "unit-none": False}


def test_readme_documents_both_ways_to_tear_down_on_purpose():
    deploying = re.search(r"^## Deploying\n(.*?)^## ", README.read_text(encoding="utf-8"), re.S | re.M).group(1)
    assert "teardown=True" in deploying and "pulumi destroy" in deploying
    assert "pulumi state unprotect" in deploying
