"""The VPC the cluster lives in: private subnets for nodes, public subnets for NAT and load balancers.

One NAT gateway per zone: GPU nodes pull multi-gigabyte images, and a zone-local NAT keeps that
traffic off cross-zone links and keeps a zone's nodes working when another zone fails; at roughly
$0.05/h each, three NAT gateways cost less than a minute of a p5 node per hour. Model weights do not
touch NAT at all: an S3 gateway endpoint on the private route tables carries them for free.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import pulumi
from pulumi_aws import ec2

from inferstack.spec import CreateCluster, NetworkSpec, NodePoolSpec, SpecError, StackSpec

MIN_SUBNET_PREFIX = 28  # AWS refuses subnets smaller than /28 (EC2 API Reference, CreateSubnet)
SLOT_BITS = 3  # the VPC in eighths: one private eighth per zone letter, the last eighth holds the public subnets
ZONE_LETTERS = "abcdefg"  # one slot each; us-east-1, the largest region, has zones a to f
NETWORK_PATH = "cluster.network"


def default_zones(region: str) -> list[str]:
    return [f"{region}{letter}" for letter in "abc"]


def cluster_zones(spec: StackSpec) -> list[str] | None:
    """The zones a created cluster's subnets are in (None when subnets exist already: the AWS layer reads those)."""
    cluster = spec.cluster
    if not isinstance(cluster, CreateCluster) or cluster.network.existing_subnet_ids:
        return None
    return cluster.network.availability_zones or default_zones(spec.region)


def pool_zones(spec: StackSpec, pool: NodePoolSpec) -> list[str] | None:
    """A pool's zones, its first one first (the one an EFA or reserved pool uses); None when the subnets exist
    already."""
    return list(pool.availability_zones) or cluster_zones(spec)


@dataclass(frozen=True)
class ZoneSubnets:
    """The CIDRs of one zone's private and public subnet."""

    private: str
    public: str


def check_network(spec: NetworkSpec, region: str) -> None:
    """The subnets the program will create fit the VPC and each other; explicit CIDRs need a VPC of our own."""
    if not spec.existing_subnet_ids:
        subnet_layout(spec, region)
    elif spec.subnet_cidrs:
        raise SpecError(
            f"{NETWORK_PATH}.subnet_cidrs",
            f"sets CIDRs for {', '.join(spec.subnet_cidrs)}, but existing_subnet_ids means no subnet is created",
            "remove subnet_cidrs, or existing_subnet_ids to create the VPC",
        )


def subnet_layout(spec: NetworkSpec, region: str) -> dict[str, ZoneSubnets]:
    """Zone -> its subnets' CIDRs, each zone in the fixed slot of its letter unless `subnet_cidrs` names its blocks.

    A subnet's `cidr_block` forces replacement (terraform-provider-aws internal/service/ec2/vpc_subnet.go), so a
    zone's addresses depend on nothing but the VPC and the zone itself: adding, removing or reordering zones leaves
    every other subnet alone. Zone a's private subnet is the VPC's first eighth, b's the second, up to g's seventh;
    the last eighth is cut into eighths again for the public subnets. Private subnets get the room: vpc-cni gives
    every pod a VPC address, so a /16 gives each zone 8,187 node and pod addresses and 1,019 for NAT and load
    balancers.

    Slots go by zone name, not AZ ID: an account's name-to-zone mapping never changes, so a name's slot is as stable
    as an ID's, and names are known from the spec alone, so spec checks and an offline diff see the real CIDRs,
    while AZ IDs are only known by asking the account. Zone names differ between accounts only in the oldest
    regions, for accounts created before November 2025 (AWS "AZ IDs"), which matters when matching physical zones
    across accounts; this program places one account's VPC.
    """
    vpc = _network(spec.vpc_cidr, f"{NETWORK_PATH}.vpc_cidr")
    zones = spec.availability_zones or default_zones(region)
    for zone in spec.subnet_cidrs:
        if zone not in zones:
            raise SpecError(
                f"{NETWORK_PATH}.subnet_cidrs.{zone}",
                f"{zone} is not one of the network's zones ({', '.join(zones)})",
                "add it to cluster.network.availability_zones or remove its subnet_cidrs entry",
            )
    layout = {
        zone: _explicit(spec, zone, vpc) if zone in spec.subnet_cidrs else _slot(vpc, zone, j)
        for j, zone in enumerate(zones)
    }
    _refuse_overlaps(spec, layout)
    return layout


def _network(cidr: str, path: str) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(cidr)
    except ValueError as error:
        try:
            fix = f"clear the host bits, e.g. {ipaddress.IPv4Interface(cidr).network}"
        except ValueError:
            fix = "write an IPv4 network such as 10.0.0.0/16"
        raise SpecError(path, f"{cidr!r} is not a network address ({error})", fix) from None


def _slot(vpc: ipaddress.IPv4Network, zone: str, index: int) -> ZoneSubnets:
    letter = zone[-1]
    if letter not in ZONE_LETTERS:
        raise SpecError(
            f"{NETWORK_PATH}.availability_zones[{index}]",
            f"{zone} has no address slot: slots exist for zone letters {ZONE_LETTERS[0]} to {ZONE_LETTERS[-1]}",
            f"give it explicit blocks in cluster.network.subnet_cidrs.{zone}",
        )
    public_prefix = vpc.prefixlen + 2 * SLOT_BITS
    if public_prefix > MIN_SUBNET_PREFIX:
        raise SpecError(
            f"{NETWORK_PATH}.vpc_cidr",
            f"{vpc} is too small for zone slots: {zone}'s public subnet would be /{public_prefix}, "
            f"below AWS's /{MIN_SUBNET_PREFIX} minimum",
            f"use a /{MIN_SUBNET_PREFIX - 2 * SLOT_BITS} or larger VPC (a /16 gives each zone a /19 private and a /22 "
            f"public subnet), or set cluster.network.subnet_cidrs for every zone",
        )
    slot = ZONE_LETTERS.index(letter)
    eighths = list(vpc.subnets(prefixlen_diff=SLOT_BITS))
    publics = list(eighths[-1].subnets(prefixlen_diff=SLOT_BITS))
    return ZoneSubnets(private=str(eighths[slot]), public=str(publics[slot]))


def _explicit(spec: NetworkSpec, zone: str, vpc: ipaddress.IPv4Network) -> ZoneSubnets:
    blocks = spec.subnet_cidrs[zone]
    for role in ("private", "public"):
        path = f"{NETWORK_PATH}.subnet_cidrs.{zone}.{role}"
        block = _network(getattr(blocks, role), path)
        if block.prefixlen > MIN_SUBNET_PREFIX:
            raise SpecError(path, f"{block} is smaller than AWS's /{MIN_SUBNET_PREFIX} subnet minimum",
                            f"use a /{MIN_SUBNET_PREFIX} or larger block")
        if not block.subnet_of(vpc):
            raise SpecError(
                path, f"{block} is not inside the VPC {vpc}", "pick a block inside cluster.network.vpc_cidr"
            )
    return ZoneSubnets(private=blocks.private, public=blocks.public)


class _Block(NamedTuple):
    network: ipaddress.IPv4Network
    zone: str
    role: str  # private or public
    explicit: bool  # from subnet_cidrs, not the zone's slot

    def describe(self) -> str:
        return f"{self.network}, {self.zone}'s {self.role} {'block' if self.explicit else 'slot'}"


def _refuse_overlaps(spec: NetworkSpec, layout: dict[str, ZoneSubnets]) -> None:
    """No two subnets share an address: EC2 refuses a subnet that overlaps another in its VPC.

    Slots never overlap each other, so of two overlapping blocks one is explicit: the error points at it (the later one
    when both are).
    """
    blocks = [
        _Block(ipaddress.IPv4Network(getattr(subnets, role)), zone, role, zone in spec.subnet_cidrs)
        for zone, subnets in layout.items()
        for role in ("private", "public")
    ]
    for i, first in enumerate(blocks):
        for second in blocks[i + 1:]:
            if first.network.overlaps(second.network):
                mine, theirs = (second, first) if second.explicit else (first, second)
                raise SpecError(
                    f"{NETWORK_PATH}.subnet_cidrs.{mine.zone}.{mine.role}",
                    f"{mine.network} overlaps {theirs.describe()}",
                    "pick a block that overlaps no other subnet (a zone's slot is free while that zone is "
                    "absent or has subnet_cidrs of its own)",
                )


@dataclass(frozen=True)
class NetworkArgs:
    spec: NetworkSpec
    region: str
    cluster_name: str


class Network(pulumi.ComponentResource):
    """VPC, per-zone public and private subnets, NAT gateways, route tables and an S3 gateway endpoint."""

    vpc_id: pulumi.Output[str]
    private_subnets: dict[str, pulumi.Output[str]]  # zone -> subnet id, in zone order

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        layout = subnet_layout(args.spec, args.region)

        vpc = ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.spec.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": f"{name}-vpc"},
            opts=child,
        )
        gateway = ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={"Name": f"{name}-igw"}, opts=child)
        public_routes = ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=vpc.id,
            routes=[ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=gateway.id)],
            tags={"Name": f"{name}-public"},
            opts=child,
        )

        self.private_subnets = {}
        private_route_tables = []
        for zone, cidrs in layout.items():
            public = ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=vpc.id,
                cidr_block=cidrs.public,
                availability_zone=zone,
                tags={"Name": f"{name}-public-{zone}", "kubernetes.io/role/elb": "1"},
                opts=child,
            )
            ec2.RouteTableAssociation(
                f"{name}-public-{zone}-rta", subnet_id=public.id, route_table_id=public_routes.id, opts=child
            )
            address = ec2.Eip(f"{name}-nat-{zone}-eip", domain="vpc", tags={"Name": f"{name}-nat-{zone}"}, opts=child)
            nat = ec2.NatGateway(
                f"{name}-nat-{zone}",
                allocation_id=address.allocation_id,
                subnet_id=public.id,
                tags={"Name": f"{name}-nat-{zone}"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]),
            )
            routes = ec2.RouteTable(
                f"{name}-private-{zone}-rt",
                vpc_id=vpc.id,
                routes=[ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                tags={"Name": f"{name}-private-{zone}"},
                opts=child,
            )
            private = ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                cidr_block=cidrs.private,
                availability_zone=zone,
                tags={
                    "Name": f"{name}-private-{zone}",
                    "kubernetes.io/role/internal-elb": "1",
                    f"kubernetes.io/cluster/{args.cluster_name}": "shared",
                },
                opts=child,
            )
            ec2.RouteTableAssociation(
                f"{name}-private-{zone}-rta", subnet_id=private.id, route_table_id=routes.id, opts=child
            )
            private_route_tables.append(routes.id)
            self.private_subnets[zone] = private.id

        ec2.VpcEndpoint(
            f"{name}-s3-endpoint",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=private_route_tables,
            tags={"Name": f"{name}-s3"},
            opts=child,
        )

        self.vpc_id = vpc.id
        self.register_outputs({"vpc_id": self.vpc_id, "private_subnet_ids": list(self.private_subnets.values())})

    def subnets_for(self, zones: Sequence[str]) -> list[pulumi.Output[str]]:
        """Private subnet ids of these zones, in the given order (all zones when none are given)."""
        if not zones:
            return list(self.private_subnets.values())
        return [self.private_subnets[zone] for zone in zones]


def subnets_in_zones(ids: Sequence[str], subnet_zones: Sequence[str], zones: Sequence[str], path: str) -> list[str]:
    """The subnets whose zone is one of `zones`, ordered by `zones`; none at all is a spec error at `path`."""
    chosen = [subnet for zone in zones for subnet, z in zip(ids, subnet_zones) if z == zone]
    if not chosen:
        found = ", ".join(f"{subnet} ({z})" for subnet, z in zip(ids, subnet_zones))
        raise SpecError(
            path,
            f"none of the cluster's subnets is in {', '.join(zones)}; they are {found}",
            "pick zones the existing subnets cover, or drop availability_zones",
        )
    return chosen


def existing_subnets_in_zones(
    subnet_ids: pulumi.Input[Sequence[str]], zones: Sequence[str], path: str, parent: pulumi.Resource
) -> pulumi.Output[list[str]]:
    """Existing subnets in `zones`, ordered by `zones` (every subnet when no zones are given).

    Zones of subnets we did not create are read with ec2:DescribeSubnets, one lookup per subnet.
    """
    if not zones:
        return pulumi.Output.from_input(subnet_ids).apply(list)

    def pick(ids: Sequence[str]) -> pulumi.Output[list[str]]:
        lookups = [ec2.get_subnet_output(id=i, opts=pulumi.InvokeOutputOptions(parent=parent)) for i in ids]
        return pulumi.Output.all(*[lookup.availability_zone for lookup in lookups]).apply(
            lambda found: subnets_in_zones(ids, found, zones, path)
        )

    return pulumi.Output.from_input(subnet_ids).apply(pick)
