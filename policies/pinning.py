"""Supply chain: every container image and Helm chart names an exact version, so a re-run deploys the same bits."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from inferstack.policies.pools import HELM_RELEASE_TYPES, chart_name
from inferstack.policies.props import dotted, leaves, mapping, text
from inferstack.policies.workloads import image_of, workload
from inferstack.spec.images import FLOATING_TAGS, image_problem

EXACT_CHART_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")


def _explicit_tag(image: str) -> str:
    """The tag an image string spells out ('' when it has none: charts often set the tag separately)."""
    last = image.partition("@")[0].rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else ""


def _container_images(args: ResourceValidationArgs, report: ReportViolation) -> None:
    found = workload(args.resource_type, args.props, args.name)
    if found is None:
        return
    for template in found.templates:
        for container in template.containers():
            image = image_of(container)
            problem = image_problem(image)
            if problem:
                report(
                    f"{found} container {text(container.get('name'), '?')!r} image {image!r} {problem}. "
                    "To fix: pin it to a release tag (e.g. vllm/vllm-openai:v0.33.0) or a digest (@sha256:...)."
                )


def _chart_values_images(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in HELM_RELEASE_TYPES:
        return
    values = mapping(args.props.get("values"))
    for path, value in leaves(values):
        if not path or not isinstance(value, str):
            continue
        key = path[-1]
        if key == "tag" and value.lower() in FLOATING_TAGS:
            report(
                f"Helm release {args.name} sets values.{dotted(path)} = {value!r}, a moving tag. "
                "To fix: set an exact version, or drop the override so the pinned chart's appVersion applies."
            )
        elif key == "image" and _explicit_tag(value).lower() in FLOATING_TAGS:
            report(
                f"Helm release {args.name} sets values.{dotted(path)} = {value!r}, a moving tag. "
                "To fix: pin it to a release tag or a digest."
            )


images_pinned = ResourceValidationPolicy(
    name="images-pinned",
    description="Container images name a version tag or a digest, never latest or no tag.",
    validate=[_container_images, _chart_values_images],
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _is_local_chart(props: Mapping[str, Any]) -> bool:
    chart = text(props.get("chart"))
    return chart.startswith((".", "/")) and not mapping(props.get("repositoryOpts")).get("repo")


def _chart_pinned(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in HELM_RELEASE_TYPES or _is_local_chart(args.props):
        return
    props = args.props
    version = text(props.get("version"))
    chart = chart_name(props) or "?"
    if not version:
        report(
            f"Helm release {args.name} installs chart {chart!r} without a version, so Helm takes whatever is newest. "
            "To fix: set version to an exact chart version (the catalog's charts.json pins each one)."
        )
    elif not EXACT_CHART_VERSION.match(version):
        report(
            f"Helm release {args.name} installs chart {chart!r} at version {version!r}, a range or channel. "
            "To fix: set an exact version such as 1.2.3."
        )
    if props.get("devel") is True:
        report(f"Helm release {args.name} sets devel: true, which admits pre-releases. To fix: remove devel.")


helm_releases_pinned = ResourceValidationPolicy(
    name="helm-releases-pinned",
    description="Helm releases install an exact chart version.",
    validate=_chart_pinned,
    enforcement_level=EnforcementLevel.MANDATORY,
)
