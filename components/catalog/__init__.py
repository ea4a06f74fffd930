"""GPU and EC2 instance catalog: typed, read-only views over gpus.json, instances.json and the price files
(prices.json on-demand, spot_prices.json spot snapshot, capacity_block_prices.json Capacity Block rates).

The facts live in the JSON files (checked against EC2's own data in tests/test_catalog.py);
this module only loads them once and offers lookups that suggest close names on a typo.
Prices differ per region, so they are looked up by (instance type, region), never read off a type.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from importlib.resources import files
from types import MappingProxyType
from typing import Any, Mapping

__all__ = [
    "GPUS",
    "INSTANCE_TYPES",
    "Gpu",
    "InstanceType",
    "MigProfile",
    "UnknownGpu",
    "UnknownInstanceType",
    "gpu",
    "instance_type",
    "capacity_block_price",
    "capacity_block_prices_source",
    "on_demand_price",
    "prices_source",
    "spot_prices_source",
    "snapshot_spot_discount",
]


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile, e.g. 3g.40gb: 3 of 7 compute slices, 4 of 8 memory slices."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: int
    max_count: int

    @property
    def resource(self) -> str:
        """Extended resource the NVIDIA device plugin advertises under the "mixed" MIG strategy."""
        return f"nvidia.com/mig-{self.name}"


def parse_capability(text: str) -> tuple[int, int]:
    """A CUDA compute capability "major.minor" as a comparable pair ("8.9" < "9.0" < "10.0", which strings and
    floats get wrong past 9.x)."""
    major, minor = text.split(".")
    return int(major), int(minor)


@dataclass(frozen=True)
class Gpu:
    """A GPU model; memory_mib is what EC2 reports, so it matches the instance data exactly."""

    name: str
    architecture: str
    compute_capability: str
    memory_mib: int
    memory_bandwidth_gbs: float
    bf16_dense_tflops: float | None
    fp8_dense_tflops: float | None      # None without FP8 tensor cores
    int8_dense_tops: float | None
    fp8: bool
    mig_compute_slices: int
    mig_memory_slices: int
    mig_profiles: tuple[MigProfile, ...]

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def capability(self) -> tuple[int, int]:
        return parse_capability(self.compute_capability)

    @property
    def fp4(self) -> bool:
        """FP4 tensor cores (MXFP4, NVFP4): compute capability 10.0 and newer, i.e. Blackwell (NVIDIA Blackwell
        architecture technical brief: fifth-generation tensor cores add FP4; Hopper's stop at FP8)."""
        return self.capability >= (10, 0)

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


@dataclass(frozen=True)
class InstanceType:
    """An EC2 GPU instance type; nvme_size_gb is per disk (0 with nvme_count 0 when there is no instance store)."""

    name: str
    family: str
    gpu: Gpu
    gpu_count: int
    vcpus: int
    memory_mib: int
    nvme_count: int
    nvme_size_gb: int
    efa_supported: bool
    max_efa_interfaces: int
    network_cards: int
    usage_classes: tuple[str, ...]
    gpu_link: str                        # how its GPUs exchange data: 'nvlink' or 'pcie'
    gpu_link_gbs_per_direction: float    # GB/s one GPU sends to its peers

    @property
    def has_instance_store(self) -> bool:
        return self.nvme_count > 0

    @property
    def nvme_total_gb(self) -> int:
        return self.nvme_count * self.nvme_size_gb


class _UnknownName(KeyError):
    """KeyError whose str() is the plain message (KeyError would quote it)."""

    def __init__(self, kind: str, name: str, known: Mapping[str, Any]) -> None:
        close = difflib.get_close_matches(name, list(known), n=3)
        if close:
            hint = f"did you mean {' or '.join(repr(c) for c in close)}?"
        else:
            hint = f"known: {', '.join(sorted(known))}."
        self.message = f"unknown {kind} {name!r}; {hint}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class UnknownInstanceType(_UnknownName):
    pass


class UnknownGpu(_UnknownName):
    pass


def _read(filename: str) -> dict[str, Any]:
    return json.loads(files(__name__).joinpath(filename).read_text(encoding="utf-8"))


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def _gpu(name: str, raw: Mapping[str, Any]) -> Gpu:
    mig = raw["mig"] or {"compute_slices": 0, "memory_slices": 0, "profiles": []}
    return Gpu(
        name=name,
        architecture=raw["architecture"],
        compute_capability=raw["compute_capability"],
        memory_mib=raw["memory_mib"],
        memory_bandwidth_gbs=float(raw["memory_bandwidth_gbs"]),
        bf16_dense_tflops=_number(raw["bf16_dense_tflops"]),
        fp8_dense_tflops=_number(raw["fp8_dense_tflops"]),
        int8_dense_tops=_number(raw["int8_dense_tops"]),
        fp8=raw["fp8"],
        mig_compute_slices=mig["compute_slices"],
        mig_memory_slices=mig["memory_slices"],
        mig_profiles=tuple(MigProfile(**p) for p in mig["profiles"]),
    )


def _instance_type(
    name: str, raw: Mapping[str, Any], gpus: Mapping[str, Gpu], links: Mapping[str, Mapping[str, Any]]
) -> InstanceType:
    nvme = raw["nvme"] or {"count": 0, "size_gb": 0}
    family = name.split(".", 1)[0]
    return InstanceType(
        name=name,
        family=family,
        gpu=gpus[raw["gpu"]],
        gpu_count=raw["gpu_count"],
        vcpus=raw["vcpus"],
        memory_mib=raw["memory_mib"],
        nvme_count=nvme["count"],
        nvme_size_gb=nvme["size_gb"],
        efa_supported=raw["efa_supported"],
        max_efa_interfaces=raw["max_efa_interfaces"],
        network_cards=raw["network_cards"],
        usage_classes=tuple(raw["usage_classes"]),
        gpu_link=links[family]["link"],
        gpu_link_gbs_per_direction=float(links[family]["gbs_per_direction"]),
    )


GPUS: Mapping[str, Gpu] = MappingProxyType(
    {name: _gpu(name, raw) for name, raw in _read("gpus.json")["gpus"].items()}
)
_INSTANCES = _read("instances.json")
INSTANCE_TYPES: Mapping[str, InstanceType] = MappingProxyType(
    {
        name: _instance_type(name, raw, GPUS, _INSTANCES["gpu_interconnect"])
        for name, raw in _INSTANCES["instance_types"].items()
    }
)


_PRICES = _read("prices.json")
_ON_DEMAND: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {name: MappingProxyType(by_region) for name, by_region in _PRICES["on_demand_usd_per_hour"].items()}
)


def on_demand_price(instance_type_name: str, region: str) -> float | None:
    """Linux on-demand USD/h of a type in a region; None where the catalog has no price (unpriced, never $0)."""
    return _ON_DEMAND.get(instance_type_name, {}).get(region)


def prices_source(region: str) -> str:
    """Where a region's prices come from, short enough for the plan's note (prices.json's `source` cites them)."""
    return _PRICES["region_labels"].get(region, _PRICES["label"])


_SPOT = _read("spot_prices.json")
_CAPACITY_BLOCKS = _read("capacity_block_prices.json")


def snapshot_spot_discount(instance_type_name: str, region: str) -> float | None:
    """The spot snapshot's discount off on-demand for a type in a region (spot and on-demand read off the same
    snapshot, spot capped at on-demand); None where the snapshot has no spot figure (never a guessed discount)."""
    pair = _SPOT["spot_and_on_demand_usd_per_hour"].get(instance_type_name, {}).get(region)
    if pair is None:
        return None
    spot, on_demand = pair
    return round(max(0.0, 1 - spot / on_demand), 4)


def spot_prices_source() -> str:
    """Where the spot discounts come from, with the snapshot's date (spot_prices.json's `source` cites it)."""
    return _SPOT["label"]


def capacity_block_price(instance_type_name: str, region: str) -> float | None:
    """A Capacity Block's effective USD/h per instance of a type in a region; None where the catalog has no rate."""
    return _CAPACITY_BLOCKS["usd_per_hour"].get(instance_type_name, {}).get(region)


def capacity_block_prices_source() -> str:
    """Where the Capacity Block rates come from, with their date (capacity_block_prices.json's `source`)."""
    return _CAPACITY_BLOCKS["label"]


def instance_type(name: str) -> InstanceType:
    """Look up an instance type; an unknown name raises UnknownInstanceType with close matches."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        raise UnknownInstanceType("instance type", name, INSTANCE_TYPES) from None


def gpu(name: str) -> Gpu:
    """Look up a GPU by catalog key (e.g. "A100-80GB"); an unknown name raises UnknownGpu with close matches."""
    try:
        return GPUS[name]
    except KeyError:
        raise UnknownGpu("GPU", name, GPUS) from None
