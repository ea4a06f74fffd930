"""Subnet addresses that survive zone changes, and the network specs refused before anything is created.

A subnet's `cidr_block` (and its `availability_zone`) is ForceNew in terraform-provider-aws
(hashicorp/terraform-provider-aws@00cda125a19d31754cb0d073cf551264c57955cb:internal/service/ec2/vpc_subnet.go,
which pulumi-aws bridges): a new CIDR replaces the subnet, and a replacement created before the old one is
deleted overlaps it, which EC2 refuses ("A subnet CIDR block must not overlap the CIDR block of an existing
subnet", EC2 API Reference, CreateSubnet: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateSubnet.html,
which also sets the /28 to /16 subnet size limits). So a zone's CIDRs must depend on that zone alone.
Zone names map to physical zones per account in the oldest regions (AWS "AZ IDs",
https://docs.aws.amazon.com/global-infrastructure/latest/regions/az-ids.html); the mapping never changes within
an account, which is why slots by name are stable (network.subnet_layout says why not by AZ ID).
"""

from __future__ import annotations

import copy
import ipaddress
from itertools import combinations
from typing import Any

import pytest

from aws_recording import prod_spec, run
from inferstack.aws.network import ZONE_LETTERS, subnet_layout
from inferstack.spec import NetworkSpec, SpecError, StackSpec
from inferstack.validation import validate

REGION = "us-east-1"
# The addresses the zone-count layout gave a default three-zone /16 before zone slots.
PRE_SLOT_CIDRS = {
    "us-east-1a": {"private": "10.0.0.0/18", "public": "10.0.192.0/20"},
    "us-east-1b": {"private": "10.0.64.0/18", "public": "10.0.208.0/20"},
    "us-east-1c": {"private": "10.0.128.0/18", "public": "10.0.224.0/20"},
}


def zones(letters: str) -> list[str]:
    return [f"{REGION}{letter}" for letter in letters]


def stack_with_network(**network: Any) -> StackSpec:
    spec = copy.deepcopy(prod_spec())
    spec["cluster"]["network"] = network
    return validate(StackSpec.model_validate(spec)).written


def subnet_cidrs(network: dict[str, Any]) -> dict[str, str]:
    """Subnet resource name -> its cidrBlock input, as the program registers them under the mock engine."""
    recording = run(stack_with_network(**network))
    return {s.name: s.inputs["cidrBlock"] for s in recording.of_type("aws:ec2/subnet:Subnet")}


def layout(letters: str, **network: Any) -> dict[str, tuple[str, str]]:
    found = subnet_layout(NetworkSpec(availability_zones=zones(letters), **network), REGION)
    return {zone: (subnets.private, subnets.public) for zone, subnets in found.items()}


def test_adding_a_zone_keeps_every_subnet_address():
    before = subnet_cidrs({"availability_zones": zones("abc")})
    after = subnet_cidrs({"availability_zones": zones("abcd")})

    assert len(before) == 6 and len(after) == 8
    assert {name: after[name] for name in before} == before
    assert after["prod-network-private-us-east-1d"] == "10.0.96.0/19"
    assert after["prod-network-public-us-east-1d"] == "10.0.236.0/22"


def test_removing_a_zone_keeps_the_other_subnets_addresses():
    before = subnet_cidrs({"availability_zones": zones("abcd")})
    after = subnet_cidrs({"availability_zones": zones("bcd")})

    assert set(before) - set(after) == {"prod-network-private-us-east-1a", "prod-network-public-us-east-1a"}
    assert {name: before[name] for name in after} == after


def test_zone_order_in_the_spec_does_not_move_addresses():
    assert layout("cab") == layout("abc")
    assert layout("dbf") == {zone: layout("abcdef")[zone] for zone in zones("dbf")}


def test_default_vpc_gives_each_zone_a_large_private_and_a_small_public_subnet():
    assert layout("abc") == {
        "us-east-1a": ("10.0.0.0/19", "10.0.224.0/22"),
        "us-east-1b": ("10.0.32.0/19", "10.0.228.0/22"),
        "us-east-1c": ("10.0.64.0/19", "10.0.232.0/22"),
    }
    assert subnet_layout(NetworkSpec(), REGION) == subnet_layout(NetworkSpec(availability_zones=zones("abc")), REGION)


@pytest.mark.parametrize("prefix", range(16, 23))
def test_slots_fit_the_vpc_never_overlap_and_depend_on_their_zone_alone(prefix):
    """Every set of zone letters, on every VPC size slots support: inside the VPC, at least /28, disjoint,
    and each zone's blocks the same as when it is the only zone."""
    vpc = ipaddress.ip_network(f"10.0.0.0/{prefix}")
    alone = {letter: layout(letter, vpc_cidr=str(vpc))[f"{REGION}{letter}"] for letter in ZONE_LETTERS}
    for count in range(1, len(ZONE_LETTERS) + 1):
        for letters in combinations(ZONE_LETTERS, count):
            found = layout("".join(letters), vpc_cidr=str(vpc))
            blocks = [ipaddress.ip_network(cidr) for pair in found.values() for cidr in pair]

            assert found == {f"{REGION}{letter}": alone[letter] for letter in letters}
            assert all(b.subnet_of(vpc) and b.prefixlen <= 28 for b in blocks)
            assert not any(a.overlaps(b) for a, b in combinations(blocks, 2))


def test_explicit_cidrs_keep_the_addresses_a_stack_already_has():
    """Pinning the pre-slot addresses keeps a deployed VPC's subnets; a new zone then needs free blocks too."""
    pinned = subnet_cidrs({"availability_zones": zones("abc"), "subnet_cidrs": PRE_SLOT_CIDRS})
    grown = {**PRE_SLOT_CIDRS, "us-east-1d": {"private": "10.0.240.0/21", "public": "10.0.248.0/24"}}
    added = subnet_cidrs({"availability_zones": zones("abcd"), "subnet_cidrs": grown})

    assert pinned == {
        f"prod-network-{role}-{zone}": cidrs[role] for zone, cidrs in PRE_SLOT_CIDRS.items() for role in cidrs
    }
    assert {name: added[name] for name in pinned} == pinned
    assert added["prod-network-private-us-east-1d"] == "10.0.240.0/21"


def test_explicit_and_slot_zones_mix():
    found = layout("abc", subnet_cidrs={"us-east-1b": {"private": "10.0.128.0/19", "public": "10.0.240.0/24"}})

    assert found == {
        "us-east-1a": ("10.0.0.0/19", "10.0.224.0/22"),
        "us-east-1b": ("10.0.128.0/19", "10.0.240.0/24"),
        "us-east-1c": ("10.0.64.0/19", "10.0.232.0/22"),
    }


def test_a_small_vpc_works_when_every_zone_has_explicit_cidrs():
    explicit = {
        "us-east-1a": {"private": "10.0.0.0/25", "public": "10.0.1.0/28"},
        "us-east-1b": {"private": "10.0.0.128/25", "public": "10.0.1.16/28"},
    }

    found = layout("ab", vpc_cidr="10.0.0.0/23", subnet_cidrs=explicit)

    assert found["us-east-1b"] == ("10.0.0.128/25", "10.0.1.16/28")


def test_existing_subnets_create_no_network():
    spec = stack_with_network(existing_subnet_ids=["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"])
    recording = run(spec)

    assert recording.of_type("aws:ec2/subnet:Subnet") == []
    assert recording.of_type("aws:ec2/vpc:Vpc") == []


REJECTIONS = {
    "VPC too small for the slots": (
        {"vpc_cidr": "10.0.0.0/23"},
        "cluster.network.vpc_cidr",
        "10.0.0.0/23 is too small for zone slots: us-east-1a's public subnet would be /29, below AWS's /28 minimum",
        "use a /22 or larger VPC",
    ),
    "VPC address with host bits": (
        {"vpc_cidr": "10.0.0.1/16"},
        "cluster.network.vpc_cidr",
        "'10.0.0.1/16' is not a network address",
        "clear the host bits, e.g. 10.0.0.0/16",
    ),
    "zone letter the region does not have": (  # refused as a zone that does not exist, before its address slot
        {"availability_zones": zones("abch")},
        "cluster.network.availability_zones[3]",
        "'us-east-1h' is not an availability zone of us-east-1",
        "use one of 'us-east-1a'",
    ),
    "explicit block outside the VPC": (
        {"subnet_cidrs": {"us-east-1a": {"private": "10.1.0.0/19", "public": "10.0.240.0/24"}}},
        "cluster.network.subnet_cidrs.us-east-1a.private",
        "10.1.0.0/19 is not inside the VPC 10.0.0.0/16",
        "inside cluster.network.vpc_cidr",
    ),
    "explicit block with host bits": (
        {"subnet_cidrs": {"us-east-1a": {"private": "10.0.0.0/19", "public": "10.0.240.1/24"}}},
        "cluster.network.subnet_cidrs.us-east-1a.public",
        "'10.0.240.1/24' is not a network address",
        "clear the host bits, e.g. 10.0.240.0/24",
    ),
    "explicit block below the AWS minimum": (
        {"subnet_cidrs": {"us-east-1a": {"private": "10.0.0.0/19", "public": "10.0.240.0/29"}}},
        "cluster.network.subnet_cidrs.us-east-1a.public",
        "10.0.240.0/29 is smaller than AWS's /28 subnet minimum",
        "use a /28 or larger block",
    ),
    "explicit blocks for a zone the network does not use": (
        {"subnet_cidrs": {"us-east-1d": {"private": "10.0.96.0/19", "public": "10.0.236.0/22"}}},
        "cluster.network.subnet_cidrs.us-east-1d",
        "us-east-1d is not one of the network's zones (us-east-1a, us-east-1b, us-east-1c)",
        "add it to cluster.network.availability_zones",
    ),
    "explicit block over another zone's slot": (
        {"availability_zones": zones("abcd"), "subnet_cidrs": PRE_SLOT_CIDRS},
        "cluster.network.subnet_cidrs.us-east-1b.private",
        "10.0.64.0/18 overlaps 10.0.96.0/19, us-east-1d's private slot",
        "overlaps no other subnet",
    ),
    "two explicit blocks that overlap": (
        {"subnet_cidrs": {"us-east-1a": {"private": "10.0.0.0/19", "public": "10.0.16.0/24"}}},
        "cluster.network.subnet_cidrs.us-east-1a.public",
        "10.0.16.0/24 overlaps 10.0.0.0/19, us-east-1a's private block",
        "overlaps no other subnet",
    ),
    "explicit CIDRs with existing subnets": (
        {"existing_subnet_ids": ["subnet-0123456789abcdef0"], "subnet_cidrs": PRE_SLOT_CIDRS},
        "cluster.network.subnet_cidrs",
        "sets CIDRs for us-east-1a, us-east-1b, us-east-1c, but existing_subnet_ids means no subnet is created",
        "remove subnet_cidrs",
    ),
}


@pytest.mark.parametrize("case", list(REJECTIONS), ids=list(REJECTIONS))
def test_bad_networks_are_refused_when_the_spec_is_read(case):
    network, path, problem, fix = REJECTIONS[case]
    with pytest.raises(SpecError) as caught:
        stack_with_network(**network)

    assert caught.value.path == path
    assert problem in caught.value.problem
    assert fix in caught.value.fix
