"""A pool pinned to a zone that offers none of its instance types, refused only where a zone name is the same zone
in every account."""

from __future__ import annotations

import pytest
from stack_files import rejection

from inferstack.catalog.offerings import zone_names_are_shared, zones_offering
from inferstack.spec import StackSpec
from inferstack.validation import validate


def a100_pool_in(region: str, *zones: str) -> dict:
    return {"environment": "test", "region": region,
            "node_pools": [{"name": "a100", "instance_types": ["p4d.24xlarge"], "max_nodes": 1,
                            "availability_zones": list(zones)}]}


def test_a_zone_that_does_not_offer_the_pools_type_is_refused_where_zone_names_are_shared():
    """EC2 DescribeInstanceTypeOfferings (LocationType availability-zone) as moto 5.2.5 records it
    (moto/ec2/resources/instance_type_offerings/availability-zone/eu-west-2.json.gz): p4d.24xlarge in
    eu-west-2a and eu-west-2b only. eu-west-2 maps zone names alike in every account (AWS Regions and Availability
    Zones, "AZ IDs", https://docs.aws.amazon.com/global-infrastructure/latest/regions/az-ids.html, "Regions with
    independently mapped Availability Zones" does not list it), so eu-west-2c offers it in no account."""
    assert zones_offering("eu-west-2", "p4d.24xlarge") == ("eu-west-2a", "eu-west-2b")

    error = rejection(a100_pool_in("eu-west-2", "eu-west-2a", "eu-west-2c"))

    assert error.path == "node_pools[0].availability_zones[1]"
    assert "offers p4d.24xlarge in eu-west-2 only in eu-west-2a, eu-west-2b, not in eu-west-2c" in error.problem
    assert "the same zone in every account" in error.problem
    assert error.fix == "use eu-west-2a or eu-west-2b instead, or an instance type that eu-west-2c offers"


def test_a_zone_offering_one_of_the_pools_types_passes():
    """A pool's interchangeable types launch in any zone that offers one of them (the same moto data for
    ap-southeast-3: p5e.48xlarge not in ap-southeast-3b, p5en.48xlarge not in ap-southeast-3a)."""
    document = a100_pool_in("ap-southeast-3", "ap-southeast-3a", "ap-southeast-3b")
    document["node_pools"][0]["instance_types"] = ["p5e.48xlarge", "p5en.48xlarge"]
    assert "ap-southeast-3b" not in zones_offering("ap-southeast-3", "p5e.48xlarge")
    assert "ap-southeast-3a" not in zones_offering("ap-southeast-3", "p5en.48xlarge")

    validate(StackSpec.model_validate(document))


def test_a_zone_name_is_not_refused_where_names_map_per_account():
    """eu-west-1 maps zone names to physical zones independently for each account ("AZ IDs", the list of Regions
    with independently mapped Availability Zones): moto's account offers p4d.24xlarge only in eu-west-1c, but
    another account's eu-west-1a may be that zone, so the name is not refused."""
    assert not zone_names_are_shared("eu-west-1")
    assert zones_offering("eu-west-1", "p4d.24xlarge") == ("eu-west-1c",)

    validate(StackSpec.model_validate(a100_pool_in("eu-west-1", "eu-west-1a")))


@pytest.mark.parametrize("region", ["us-east-1", "us-west-1", "us-west-2", "ap-southeast-1", "ap-southeast-2",
                                    "ap-northeast-1", "eu-west-1", "sa-east-1"])
def test_the_regions_that_map_zone_names_per_account(region):
    """The regions "AZ IDs" (https://docs.aws.amazon.com/global-infrastructure/latest/regions/az-ids.html) lists
    under "Regions with independently mapped Availability Zones", among those the offering data covers."""
    assert not zone_names_are_shared(region)
    assert zone_names_are_shared("eu-west-2") and zone_names_are_shared("us-east-2")


def test_where_zone_names_map_per_account_the_plan_warns_and_names_the_command(tmp_path, capsys):
    """The issue's own case, p4d in eu-west-1a: the recorded account's eu-west-1 offers p4d.24xlarge only in
    eu-west-1c, but eu-west-1 maps zone names per account (az-ids.html), so the zone may offer it in the user's
    account. Accepted, and the printed plan says what the data shows and the command that settles it."""
    from inferstack.cli import main
    from inferstack.spec.pool_checks import zone_offering_doubt

    document = a100_pool_in("eu-west-1", "eu-west-1a")
    spec = validate(StackSpec.model_validate(document)).written
    doubt = zone_offering_doubt(spec, spec.node_pools[0])
    assert doubt.startswith("eu-west-1a offers no p4d.24xlarge in the account") and "eu-west-1c" in doubt
    assert "aws ec2 describe-instance-type-offerings --region eu-west-1" in doubt
    assert zone_offering_doubt(spec.model_copy(update={"node_pools": [spec.node_pools[0].model_copy(
        update={"availability_zones": ["eu-west-1c"]})]}), spec.node_pools[0].model_copy(
        update={"availability_zones": ["eu-west-1c"]})) is None

    (tmp_path / "euw1.py").write_text("from inferstack.spec import StackSpec\n"
                                      f"stack = StackSpec.model_validate({document!r})\n")
    assert main(["plan", "euw1", "--stacks-dir", str(tmp_path)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "node pool a100" in printed and "zone names map to zones per account in eu-west-1" in printed
