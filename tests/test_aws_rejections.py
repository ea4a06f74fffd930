"""What the AWS layer refuses, each with the field path, the problem and the fix.

EFA on a type without it and EFA pools mixing network-card counts are proven in test_spec.py.
"""

from __future__ import annotations

import dataclasses

import pytest
from stack_files import rejection

from inferstack.aws.foundation import check_resource_names
from inferstack.aws.network import subnet_layout, subnets_in_zones
from inferstack.catalog import instance_type
from inferstack.spec import NetworkSpec, SpecError, StackSpec
from inferstack.validation import validate


def spec(*pools: dict, **changes) -> dict:
    return {"environment": "test", "node_pools": list(pools), **changes}


def test_nvme_cache_needs_al2023_nodeadm():
    error = rejection(spec({"name": "l4", "instance_types": ["g6.12xlarge"], "max_nodes": 1,
                            "ami_type": "BOTTLEROCKET_x86_64_NVIDIA"}))

    assert error.path == "node_pools[0].nvme_cache"
    assert "BOTTLEROCKET_x86_64_NVIDIA is not supported" in error.problem
    assert "set nvme_cache to false" in error.fix


def test_nvme_cache_needs_an_instance_store(monkeypatch):
    """Every GPU type in the catalog has instance store today, so a type without one is made up."""
    diskless = dataclasses.replace(instance_type("g6.12xlarge"), nvme_count=0, nvme_size_gb=0)
    monkeypatch.setattr("inferstack.spec.pools.instance_type", lambda name: diskless)

    error = rejection(spec({"name": "l4", "instance_types": ["g6.12xlarge"], "max_nodes": 1}))

    assert error.path == "node_pools[0].instance_types[0]"
    assert error.problem == "g6.12xlarge has no NVMe instance store for the model cache"
    assert "set nvme_cache to false" in error.fix


def test_named_placement_group_excludes_creating_one():
    error = rejection(spec({"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 1,
                            "efa": {"enabled": True, "placement_group": "reserved-pg"}}))

    assert error.path == "node_pools[0].efa.placement_group"
    assert "'reserved-pg' is named and create_placement_group is true" in error.problem


@pytest.mark.parametrize(
    ("names", "path", "problem"),
    [
        (["h100", "h100-spot"], "node_pools[1].name", "like the 'spot' resources of pool 'h100'"),
        (["h100", "h100-launch-template-b"], "node_pools[1].name", "like the 'launch-template' resources"),
        (["network"], "node_pools[0].name", "like the stack's own 'network' resources"),
        (["eks-system"], "node_pools[0].name", "like the stack's own 'eks' resources"),
    ],
)
def test_pool_names_that_would_repeat_resource_names(names, path, problem):
    pools = [{"name": n, "instance_types": ["g6.12xlarge"], "max_nodes": 1} for n in names]

    with pytest.raises(SpecError) as caught:
        check_resource_names(StackSpec.model_validate(spec(*pools)))

    assert caught.value.path == path
    assert problem in caught.value.problem


def test_environment_name_too_long_for_iam_role_names():
    document = spec({"name": "l4", "instance_types": ["g6.12xlarge"], "max_nodes": 1}, environment="e" * 32)

    with pytest.raises(SpecError) as caught:
        check_resource_names(StackSpec.model_validate(document))

    assert caught.value.path == "environment"
    assert f"IAM role '{'e' * 32}-platform-autoscaler-role' plus Pulumi's 8-character suffix" in caught.value.problem
    assert caught.value.fix == "shorten the environment name to at most 31 characters"


def test_pool_name_too_long_for_eks_node_group_names():
    document = spec({"name": "p" * 30, "instance_types": ["g6.12xlarge"], "max_nodes": 1}, environment="e" * 20)

    with pytest.raises(SpecError) as caught:
        check_resource_names(StackSpec.model_validate(document))

    assert caught.value.path == "node_pools[0].name"
    assert "longer than EKS's 63 characters" in caught.value.problem
    assert caught.value.fix == "shorten the pool or environment name by 1 character"


def test_distinct_pool_names_sharing_a_prefix_are_fine():
    pools = [{"name": n, "instance_types": ["g6.12xlarge"], "max_nodes": 1} for n in ("a100", "a100-mig", "spot")]

    check_resource_names(validate(StackSpec.model_validate(spec(*pools))).written)


def test_vpc_too_small_for_its_zones():
    with pytest.raises(SpecError) as caught:
        subnet_layout(NetworkSpec(vpc_cidr="10.0.0.0/24"), "us-east-1")

    assert caught.value.path == "cluster.network.vpc_cidr"
    assert "public subnet would be /30, below AWS's /28 minimum" in caught.value.problem


def test_vpc_cidr_with_host_bits():
    with pytest.raises(SpecError, match="clear the host bits"):
        subnet_layout(NetworkSpec(vpc_cidr="10.0.0.1/16"), "us-east-1")


def test_pool_zones_missing_from_existing_subnets():
    with pytest.raises(SpecError) as caught:
        subnets_in_zones(["subnet-0a", "subnet-0b"], ["us-east-1a", "us-east-1b"], ["us-east-1d"],
                         "node_pools[0].availability_zones")

    assert caught.value.path == "node_pools[0].availability_zones"
    assert caught.value.problem == (
        "none of the cluster's subnets is in us-east-1d; they are subnet-0a (us-east-1a), subnet-0b (us-east-1b)"
    )


def test_existing_subnets_are_ordered_by_the_pool_s_zones():
    ids, zones = ["subnet-0a", "subnet-0b", "subnet-0c"], ["us-east-1a", "us-east-1b", "us-east-1c"]

    assert subnets_in_zones(ids, zones, ["us-east-1c", "us-east-1a"], "p") == ["subnet-0c", "subnet-0a"]


def test_an_efa_pool_outside_any_placement_group_is_refused_at_spec_time():
    """policies/network.py efa-placement-and-security-group (mandatory) refuses an EFA launch template with neither a
    placement group nor a capacity reservation; the spec refuses the same pool at the field, so it never gets as far
    as the policy's exit 1."""
    error = rejection(spec({"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 2,
                            "capacity": {"on_demand_base": 0, "spot": True},
                            "efa": {"enabled": True, "create_placement_group": False}}))
    assert error.path == "node_pools[0].efa.create_placement_group"
    assert "efa-placement-and-security-group" in error.problem and "create_placement_group to true" in error.fix


@pytest.mark.parametrize("zones", [[], ["us-east-1a", "us-east-1b"]])
def test_a_reservation_in_another_region_is_refused_before_its_zone_order(zones):
    """A Capacity Reservation is for one instance type in one Availability Zone of one region (EC2 User Guide,
    "Capacity Reservations", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-reservations.html):
    one in us-west-2 backs nothing in a us-east-1 stack, so "list us-west-2b first" is no fix; the fix is a
    reservation in the stack's region, or the stack in the reservation's."""
    error = rejection(spec({"name": "l4", "instance_types": ["g6.12xlarge"], "max_nodes": 2,
                            "availability_zones": zones,
                            "capacity": {"on_demand_base": 1,
                                         "reservation": {"kind": "odcr", "id": "cr-0123456789abcdef0",
                                                         "availability_zone": "us-west-2b"}}}))

    assert error.path == "node_pools[0].capacity.reservation.availability_zone"
    assert "cr-0123456789abcdef0 is in us-west-2b, outside the stack's region us-east-1" in error.problem
    assert "use a reservation in us-east-1" in error.fix and "set region" in error.fix
    assert "first" not in error.fix


def test_a_reservation_zone_the_region_does_not_have_is_refused():
    """Zones of us-east-1 as EC2 DescribeInstanceTypeOfferings lists them (moto 5.2.5,
    moto/ec2/resources/instance_type_offerings/availability-zone/us-east-1.json.gz, in catalog/ec2_offerings.json):
    us-east-1a to us-east-1f; "list us-east-1z first" would only be refused next."""
    error = rejection(spec({"name": "l4", "instance_types": ["g6.12xlarge"], "max_nodes": 2,
                            "capacity": {"on_demand_base": 1,
                                         "reservation": {"kind": "odcr", "id": "cr-0123456789abcdef0",
                                                         "availability_zone": "us-east-1z"}}}))

    assert error.path == "node_pools[0].capacity.reservation.availability_zone"
    assert error.problem == "'us-east-1z' is not an availability zone of us-east-1"
    assert "describe-capacity-reservations --capacity-reservation-ids cr-0123456789abcdef0" in error.fix
    assert "'us-east-1f'" in error.fix
