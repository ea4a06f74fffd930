"""Containers run unprivileged and cannot gain privileges, except the system add-ons that drive hardware.

The GPU operator (driver, toolkit, device plugin, DCGM, MIG manager) and the EFA device plugin need
host access by design; they are allowed by chart (Helm releases) or by image (raw workloads).
Everything else sets allowPrivilegeEscalation: false explicitly, because Kubernetes allows
escalation when the field is unset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from inferstack.policies.pools import HELM_RELEASE_TYPES, chart_name
from inferstack.policies.props import dotted, items, leaves, mapping, text
from inferstack.policies.workloads import image_of, workload

ALLOWED_CHARTS = ("gpu-operator", "aws-efa-k8s-device-plugin", "dcgm-exporter", "nvidia-device-plugin")
ALLOWED_IMAGE_PREFIXES = (
    "nvcr.io/nvidia/",                 # GPU operator operands, device plugin, DCGM and its exporter
)
ALLOWED_IMAGE_NAMES = ("aws-efa-k8s-device-plugin",)  # ECR repositories differ per region
ESCALATING_CAPABILITIES = ("SYS_ADMIN", "ALL")


def allowed_image(image: str) -> bool:
    repository = image.split("@")[0]
    name = repository.rsplit("/", 1)[-1].split(":")[0]
    return repository.startswith(ALLOWED_IMAGE_PREFIXES) or name in ALLOWED_IMAGE_NAMES


def container_problems(container: Mapping[str, Any]) -> list[str]:
    context = mapping(container.get("securityContext"))
    problems = []
    if context.get("privileged") is True:
        problems.append("runs privileged")
    escalation = context.get("allowPrivilegeEscalation")
    if escalation is True:
        problems.append("sets allowPrivilegeEscalation: true")
    elif escalation is None:
        problems.append("leaves allowPrivilegeEscalation unset (Kubernetes then allows escalation)")
    added = [c for c in items(mapping(context.get("capabilities")).get("add")) if c in ESCALATING_CAPABILITIES]
    if added:
        problems.append(f"adds capabilities {', '.join(added)}")
    return problems


def _workload_privilege(args: ResourceValidationArgs, report: ReportViolation) -> None:
    found = workload(args.resource_type, args.props, args.name)
    if found is None:
        return
    for template in found.templates:
        for container in template.containers():
            if allowed_image(image_of(container)):
                continue
            for problem in container_problems(container):
                report(
                    f"{found} container {text(container.get('name'), '?')!r} {problem}. To fix: set "
                    "securityContext.privileged: false and allowPrivilegeEscalation: false; only system add-ons "
                    f"({', '.join(ALLOWED_CHARTS)}) may need host privileges."
                )


def _chart_privilege(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in HELM_RELEASE_TYPES or chart_name(args.props) in ALLOWED_CHARTS:
        return
    for path, value in leaves(mapping(args.props.get("values"))):
        if path and path[-1] in ("privileged", "allowPrivilegeEscalation") and value is True:
            report(
                f"Helm release {args.name} (chart {chart_name(args.props)!r}) sets values.{dotted(path)}: true. "
                f"To fix: remove it; privileged pods are reserved for {', '.join(ALLOWED_CHARTS)}."
            )


no_privileged_workloads = ResourceValidationPolicy(
    name="no-privileged-workloads",
    description="Workloads are not privileged and do not allow privilege escalation (system add-ons excepted).",
    validate=[_workload_privilege, _chart_privilege],
    enforcement_level=EnforcementLevel.MANDATORY,
)
