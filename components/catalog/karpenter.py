"""Karpenter facts kept as data (karpenter.json, each with its source): the pinned release and the Kubernetes
versions it supports, AMI alias versions per AMI type, the OS volumes the families keep, instance-store policies,
NodePool weights."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any, Mapping

FACTS: Mapping[str, Any] = json.loads(files("inferstack.catalog").joinpath("karpenter.json").read_text(encoding="utf-8"))
NEWEST_KUBERNETES: str = FACTS["karpenter"]["newest_kubernetes"]
