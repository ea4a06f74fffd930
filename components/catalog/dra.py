"""Dynamic Resource Allocation facts kept as data (dra.json, each with its source): the Kubernetes minors DRA and
the EFA driver need, the DeviceClasses claims name and the extended resource Kueue counts each as, the GPU
attributes a selector may read, the PCIe layout of the instance types whose GPUs pair with EFA devices, and
what the pinned releases cannot do under DRA."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from types import MappingProxyType
from typing import Any, Mapping

FACTS: Mapping[str, Any] = json.loads(files("inferstack.catalog").joinpath("dra.json").read_text(encoding="utf-8"))

MINIMUM_KUBERNETES: str = FACTS["minimum_kubernetes"]["dra"]
MINIMUM_KUBERNETES_EFA: str = FACTS["minimum_kubernetes"]["efa"]
PCIE_ROOT_ATTRIBUTE: str = FACTS["pcie_root_attribute"]
GPU_ATTRIBUTES: Mapping[str, str] = MappingProxyType(
    {key: value for key, value in FACTS["gpu_attributes"].items() if key != "source"}
)
DEVICE_PLUGIN_DEPLOY_LABEL: str = FACTS["gpu_operator"]["device_plugin_label"]
UNSUPPORTED: Mapping[str, str] = MappingProxyType(FACTS["unsupported"])


@dataclass(frozen=True)
class DeviceClass:
    """A DeviceClass a claim names: the driver whose devices it selects, the extended resource Kueue counts
    each device as, and who installs it (a driver chart, or the stack itself)."""

    key: str                 # gpu | mig | efa
    name: str
    driver: str
    resource: str
    installed_by: str
    selector: str | None     # the CEL selector, for a class the stack renders


DEVICE_CLASSES: Mapping[str, DeviceClass] = MappingProxyType(
    {
        key: DeviceClass(key, raw["name"], raw["driver"], raw["resource"], raw["installed_by"], raw.get("selector"))
        for key, raw in FACTS["device_classes"].items()
    }
)


@dataclass(frozen=True)
class PcieLayout:
    """How an instance type's GPUs and EFA devices sit on its PCIe roots: `roots` alike, each with
    `gpus_per_root` GPUs and `efa_per_root` EFA devices."""

    instance_type: str
    roots: int
    gpus_per_root: int
    efa_per_root: int


PCIE_LAYOUTS: Mapping[str, PcieLayout] = MappingProxyType(
    {
        name: PcieLayout(name, raw["roots"], raw["gpus_per_root"], raw["efa_per_root"])
        for name, raw in FACTS["pcie_layouts"].items()
    }
)


def pcie_layout(instance_type: str) -> PcieLayout | None:
    return PCIE_LAYOUTS.get(instance_type)
