"""The VPC the cluster lives in: private subnets for nodes, public subnets for NAT and load balancers.

One NAT gateway per zone: GPU nodes pull multi-gigabyte images, and a zone-local NAT keeps that
traffic off cross-zone links and keeps a zone's nodes working when another zone fails; at roughly
$0.05/h each, three NAT gateways cost less than a minute of a p5 node per hour. Model weights do not
touch NAT at all: an S3 gateway endpoint on the private route tables carries them for free.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
from pulumi_aws import ec2

from inferstack.spec import NetworkSpec, SpecError

MIN_SUBNET_PREFIX = 28  # AWS refuses subnets smaller than /28


def default_zones(region: str) -> list[str]:
    return [f"{region}{letter}" for letter in "abc"]


def subnet_layout(vpc_cidr: str, zone_count: int) -> tuple[list[str], list[str]]:
    """(private, public) CIDRs: equal large private blocks, public subnets carved from the last block."""
    try:
        vpc = ipaddress.ip_network(vpc_cidr)
    except ValueError as error:
        raise SpecError("cluster.network.vpc_cidr", f"{vpc_cidr!r} is not a network address ({error})",
                        "clear the host bits, e.g. 10.0.0.0/16") from None
    bits = max(1, math.ceil(math.log2(zone_count + 1)))
    blocks = list(vpc.subnets(prefixlen_diff=bits))
    public = list(blocks[-1].subnets(prefixlen_diff=math.ceil(math.log2(zone_count))))[:zone_count]
    if public[0].prefixlen > MIN_SUBNET_PREFIX:
        raise SpecError(
            "cluster.network.vpc_cidr",
            f"{vpc_cidr} is too small for {zone_count} zones: public subnets would be /{public[0].prefixlen}, "
            f"below AWS's /{MIN_SUBNET_PREFIX} minimum",
            "use a larger VPC such as a /20 or list fewer availability_zones",
        )
    return [str(b) for b in blocks[:zone_count]], [str(p) for p in public]


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
        zones = args.spec.availability_zones or default_zones(args.region)
        private_cidrs, public_cidrs = subnet_layout(args.spec.vpc_cidr, len(zones))

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
        for zone, private_cidr, public_cidr in zip(zones, private_cidrs, public_cidrs):
            public = ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=vpc.id,
                cidr_block=public_cidr,
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
                cidr_block=private_cidr,
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
