"""Where EC2 sells what: the regions and zones that exist and the catalog's GPU types offered in each.

The facts live in ec2_offerings.json (EC2's offering data as moto records it, with its source); this
module only answers lookups, so spec checks refuse a region, zone or type AWS would refuse.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from types import MappingProxyType
from typing import Mapping


@cache
def _data() -> dict:
    return json.loads(files(__package__).joinpath("ec2_offerings.json").read_text(encoding="utf-8"))


def ec2_instance_types() -> frozenset[str]:
    """Every EC2 instance type name DescribeInstanceTypes knows (GPU or not)."""
    return frozenset(_data()["ec2_instance_types"])


@cache
def region_zones() -> Mapping[str, Mapping[str, frozenset[str]]]:
    """Region -> zone -> the catalog's GPU instance types offered in that zone."""
    return MappingProxyType(
        {
            region: MappingProxyType({zone: frozenset(types) for zone, types in zones.items()})
            for region, zones in _data()["gpu_offerings_by_zone"].items()
        }
    )


def zone_names_are_shared(region: str) -> bool:
    """Whether a zone name means the same physical zone in every account in the region, so the zone-by-zone
    offerings (one account's view) hold for any account's zone of that name."""
    return region not in _data()["zone_names_mapped_per_account"]["regions"]


def zones_offering(region: str, instance_type: str) -> tuple[str, ...]:
    """The zones of a region that offer a GPU instance type (empty for an unknown region)."""
    return tuple(zone for zone, types in region_zones().get(region, {}).items() if instance_type in types)
