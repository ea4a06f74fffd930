"""The EKS-optimized AMI release each GPU node group runs, per AMI type and Kubernetes minor (node_amis.json,
each with its source). EKS otherwise takes the latest release whenever the group is created or its launch
template changes, so an unrelated edit would also move every node to a new AMI, unseen in the diff."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any, Mapping

FACTS: Mapping[str, Any] = json.loads(
    files("inferstack.catalog").joinpath("node_amis.json").read_text(encoding="utf-8")
)


def release_version(ami_type: str, kubernetes_version: str) -> str | None:
    """The pinned EKS release version (e.g. '1.36.2-20260714'), or None where none is pinned (Bottlerocket,
    or a minor the catalog has no release for), which leaves EKS's latest."""
    pinned = FACTS["release_versions"].get(ami_type)
    return pinned["by_kubernetes"].get(kubernetes_version) if pinned else None
