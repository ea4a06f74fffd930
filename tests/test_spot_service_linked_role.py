"""Issue 26 item 5d: Karpenter's spot NodePools need the account's EC2 Spot service-linked role.

Upstream, aws/karpenter-provider-aws tag v1.14.1 under website/content/en/preview/: troubleshooting.md:27-36 (an
account not yet onboarded to EC2 Spot needs the role, else "AuthFailure.ServiceLinkedRoleCreationNotPermitted"; the fix
is `aws iam create-service-linked-role --aws-service-name spot.amazonaws.com`);
getting-started/getting-started-with-karpenter/_index.md:94 and scripts/step06-add-spot-role.sh:1-3 (the same command,
which fails with InvalidInput "Service role name AWSServiceRoleForEC2Spot has been taken in this account" where the
role exists): the role is account-wide, so the stack creates it only when asked.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from inferstack.aws.karpenter import SPOT_ROLE_COMMAND, spot_service_linked_role_note
from inferstack.cli import main
from inferstack.spec import StackSpec, describe_validation_error
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"
ROLE = "aws:iam/serviceLinkedRole:ServiceLinkedRole"


def karpenter_spec(**platform) -> StackSpec:
    spec = load_stack(STACKS, "karpenter").model_dump(mode="json", exclude_unset=True)
    spec["platform"].update(platform)
    return StackSpec.model_validate(spec)


def resources(spec: StackSpec, where: Path) -> list[dict]:
    stacks, out = where / "stacks", where / "out"
    stacks.mkdir(parents=True)
    (stacks / "edited.py").write_text("from inferstack.spec import StackSpec\n"
                                      f"stack = StackSpec.model_validate_json({spec.model_dump_json(exclude_none=True)!r})\n")
    assert main(["render", "edited", "--stacks-dir", str(stacks), "--out", str(out)]) == 0
    return json.loads((out / "resources.json").read_text())


def test_requested_the_role_is_created_and_spot_nodepools_wait_for_it(tmp_path):
    rendered = resources(karpenter_spec(create_spot_service_linked_role=True), tmp_path)
    (role,) = [r for r in rendered if r["type"] == ROLE]
    assert role["inputs"]["awsServiceName"] == "spot.amazonaws.com"
    pools = [r for r in rendered if r["type"] == "kubernetes:karpenter.sh/v1:NodePool"]
    for pool in pools:
        requirement = next(q for q in pool["inputs"]["spec"]["template"]["spec"]["requirements"]
                           if q["key"] == "karpenter.sh/capacity-type")
        assert (role["name"] in pool["depends_on"]) == ("spot" in requirement["values"]), pool["name"]


def test_by_default_no_role_is_created_and_the_plan_gives_the_command(tmp_path):
    spec = karpenter_spec()
    assert not [r for r in resources(spec, tmp_path) if r["type"] == ROLE]
    note = spot_service_linked_role_note(spec)
    assert SPOT_ROLE_COMMAND == "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"
    assert SPOT_ROLE_COMMAND in note and "AWSServiceRoleForEC2Spot" in note
    assert "platform.create_spot_service_linked_role" in note


def test_without_a_spot_nodepool_nothing_is_needed():
    spec = load_stack(STACKS, "karpenter").model_dump(mode="json", exclude_unset=True)
    spec["platform"]["create_spot_service_linked_role"] = True
    for pool in spec["node_pools"]:
        pool.setdefault("capacity", {})["spot"] = False
    assert spot_service_linked_role_note(StackSpec.model_validate(spec)) is None


def test_the_setting_outside_karpenter_is_refused_at_the_field():
    spec = copy.deepcopy(load_stack(STACKS, "karpenter").model_dump(mode="json", exclude_unset=True))
    spec["platform"] = {"create_spot_service_linked_role": True}
    with pytest.raises(ValueError) as caught:
        StackSpec.model_validate(spec)
    error = describe_validation_error(caught.value, StackSpec)
    assert error.path == "platform" and "create_spot_service_linked_role" in str(error)
    assert str(error).count("To fix:") == 1


def test_the_printed_plan_warns_of_the_role_until_the_stack_creates_it(capsys):
    """The plan's words follow the objects: a warning naming the command while the role is the account's to make; a
    plain line once platform.create_spot_service_linked_role makes the stack create it."""
    assert main(["plan", "karpenter", "--stacks-dir", str(STACKS)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert SPOT_ROLE_COMMAND in printed and "spot NodePools" in printed
    assert "System capacity: system pods run only on the system node group" in printed
    from inferstack.presentation.summary import karpenter_plan

    created = karpenter_plan(karpenter_spec(create_spot_service_linked_role=True))
    assert created["spot_service_linked_role"].startswith("the stack creates")
