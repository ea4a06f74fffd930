"""Pods that take EFA devices run an image that can use them.

NCCL reaches EFA only through the aws-ofi-nccl plugin on libfabric; when the plugin is missing it
picks its socket transport without an error, while the pod still holds the node's EFA devices. The
stock `vllm/vllm-openai` image ships neither (vLLM v0.33.0 docker/Dockerfile); vLLM's EFA build does
(docker/Dockerfile.efa, published as `vllm/vllm-openai:v<version>-efa`). The catalog lists the images
known to carry the stack; a team's own image passes when its pods carry the annotation the spec's
`image_provides_efa` sets.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from inferstack.catalog.vllm_images import efa_images, vllm_image
from inferstack.conventions import IMAGE_PROVIDES_EFA_ANNOTATION
from inferstack.policies.props import text
from inferstack.policies.workloads import image_of, is_vllm, workload
from inferstack.spec.pools import EFA_RESOURCE


def _efa_image(args: ResourceValidationArgs, report: ReportViolation) -> None:
    found = workload(args.resource_type, args.props, args.name)
    if found is None:
        return
    for template in found.templates:
        if template.device_requests().get(EFA_RESOURCE, 0) <= 0:
            continue
        if template.annotations.get(IMAGE_PROVIDES_EFA_ANNOTATION) == "true":
            continue
        for container in template.containers(init=False):
            image = image_of(container)
            known = vllm_image(image)
            if is_vllm(container) and (known is None or known.efa is None):
                role = "" if template.role == "pod" else f" ({template.role})"
                report(
                    f"{found} container {text(container.get('name'), '?')!r}{role} requests {EFA_RESOURCE} but its "
                    f"image {image!r} is not known to carry libfabric and the aws-ofi-nccl plugin: NCCL would use "
                    f"TCP sockets. To fix: use {', '.join(repr(i) for i in efa_images())}, or set "
                    "image_provides_efa on the service if your image has them."
                )


efa_capable_image = ResourceValidationPolicy(
    name="efa-capable-image",
    description="vLLM pods that request EFA devices run an image with libfabric and the aws-ofi-nccl plugin.",
    validate=_efa_image,
    enforcement_level=EnforcementLevel.MANDATORY,
)
