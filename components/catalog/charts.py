"""Pinned Helm charts, release manifests and images, kept as data (charts.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from importlib.resources import files
from types import MappingProxyType
from typing import Any, Mapping

_RAW = json.loads(files("inferstack.catalog").joinpath("charts.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Chart:
    key: str
    chart: str                  # chart name, or an oci:// reference
    repository: str | None      # HTTP repository; None for OCI charts
    version: str
    namespace: str | None       # the upstream's conventional namespace; None = install beside its workload
    app_version: str
    extra: Mapping[str, Any]


CHARTS: Mapping[str, Chart] = MappingProxyType(
    {
        key: Chart(
            key=key,
            chart=raw["chart"],
            repository=raw["repository"],
            version=raw["version"],
            namespace=raw["namespace"],
            app_version=raw["app_version"],
            extra=MappingProxyType({k: v for k, v in raw.items() if k not in Chart.__dataclass_fields__}),
        )
        for key, raw in _RAW["charts"].items()
    }
)
MANIFESTS: Mapping[str, Mapping[str, str]] = MappingProxyType(_RAW["manifests"])
IMAGES: Mapping[str, str] = MappingProxyType(_RAW["images"])


def chart(key: str) -> Chart:
    return CHARTS[key]


def cluster_autoscaler_image_tags() -> Mapping[str, str]:
    """Kubernetes minor -> the cluster-autoscaler image tag released for it (the autoscaler follows the
    cluster's minor version)."""
    return chart("cluster-autoscaler").extra["image_tag_by_kubernetes"]


_EKS_ADDONS = json.loads(files("inferstack.catalog").joinpath("eks_addons.json").read_text(encoding="utf-8"))


def eks_addon_versions() -> Mapping[str, Mapping[str, str]]:
    """Kubernetes minor -> EKS managed add-on -> pinned version (eks_addons.json): an unrelated update never
    moves an add-on, which `most_recent` would."""
    return MappingProxyType({minor: MappingProxyType(pins) for minor, pins in _EKS_ADDONS["addons"].items()})


@dataclass(frozen=True)
class SupportWindow:
    """One minor's row of the EKS release calendar; None where the calendar has no date yet."""
    end_of_standard_support: date | None
    end_of_extended_support: date | None

    def supported_on(self, day: date) -> bool:
        """EKS creates clusters on a minor until its end of extended support: "On the end of extended support
        date, you can no longer create new Amazon EKS clusters with the unsupported version" (EKS User Guide,
        kubernetes-versions.adoc, extended support FAQ)."""
        return self.end_of_extended_support is None or day < self.end_of_extended_support


def _day(text: str | None) -> date | None:
    return None if text is None else date.fromisoformat(text)


def eks_support_calendar() -> Mapping[str, SupportWindow]:
    """Kubernetes minor -> its EKS support window (eks_addons.json "calendar", from the EKS User Guide's
    release calendar), so a refusal can say when a minor left support."""
    return MappingProxyType({
        minor: SupportWindow(_day(row["end_of_standard_support"]), _day(row["end_of_extended_support"]))
        for minor, row in _EKS_ADDONS["calendar"].items()
    })
