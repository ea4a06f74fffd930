"""Pods that take EFA devices run an image that can use them, and on a DRA pool claim them beside their GPUs.

NCCL reaches EFA only through the aws-ofi-nccl plugin on libfabric; when the plugin is missing it
picks its socket transport without an error, while the pod still holds the node's EFA devices. The
stock `vllm/vllm-openai` image ships neither (vLLM v0.33.0 docker/Dockerfile); vLLM's EFA build does
(docker/Dockerfile.efa, published as `vllm/vllm-openai:v<version>-efa`). The catalog lists the images
known to carry the stack; a team's own image passes when its pods carry the annotation the spec's
`image_provides_efa` sets.

A claim that takes EFA devices must bind them to its GPU by `matchAttribute: resource.kubernetes.io/pcieRoot`
(the scheduler's structured allocator then picks only devices whose attribute is equal: k8s.io/
dynamic-resource-allocation structured/allocator.go matchAttributeConstraint); without it any EFA device of the
node may come with the GPU, and NCCL traffic crosses the CPU interconnect (issue 31: 6.04 instead of 11.35 GB/s).
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from inferstack.catalog.dra import PCIE_ROOT_ATTRIBUTE
from inferstack.catalog.vllm_images import efa_images, vllm_image
from inferstack.conventions import IMAGE_PROVIDES_EFA_ANNOTATION
from inferstack.policies.claims import ClaimSpec
from inferstack.policies.pools import RegisteredWorkload, workloads
from inferstack.policies.props import check_each, text
from inferstack.policies.workloads import PodTemplate, image_of, is_vllm
from inferstack.spec.pools import EFA_RESOURCE, WHOLE_GPU


def _unpaired(spec: ClaimSpec) -> list[str]:
    """The EFA requests of a claim that no pcieRoot constraint binds to one of its GPU requests."""
    gpus = [r.name for r in spec.requests_of(WHOLE_GPU)]
    return [
        efa.name for efa in spec.requests_of(EFA_RESOURCE)
        if not any(spec.binds(PCIE_ROOT_ATTRIBUTE, gpu, efa.name) for gpu in gpus)
    ]


def _check_pairing(registered: RegisteredWorkload, template: PodTemplate, report: ReportViolation) -> None:
    pods = f"{registered}" if template.role == "pod" else f"{registered} {template.role} pods"
    seen: set[str] = set()
    for claim in template.claims():
        spec = claim.resolve(registered.claims, template.namespace)
        if spec is None or spec.source in seen:
            continue
        seen.add(spec.source)
        unpaired = _unpaired(spec)
        if unpaired:
            gpus = [r.name for r in spec.requests_of(WHOLE_GPU)]
            report(
                f"{pods} claim EFA devices from {spec.source} (request {', '.join(repr(n) for n in unpaired)}) that no "
                f"constraint `matchAttribute: {PCIE_ROOT_ATTRIBUTE}` pairs with "
                f"{'its GPU request ' + repr(gpus[0]) if gpus else 'a GPU request of the same claim'}, so the "
                "scheduler may hand them EFA devices on another PCIe root than their GPU and NCCL loses about half "
                "its bandwidth. To fix: add constraints [{requests: [gpu, efa], matchAttribute: "
                f"{PCIE_ROOT_ATTRIBUTE}}}] to the template's spec.devices (planning/device_claims.py RankClaim does).",
                registered.resource.urn,
            )


def _check_workload(registered: RegisteredWorkload, report: ReportViolation) -> None:
    found = registered.workload
    for template in found.templates:
        if registered.device_requests(template).get(EFA_RESOURCE, 0) <= 0:
            continue
        _check_pairing(registered, template, report)
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
                    "image_provides_efa on the service if your image has them.",
                    registered.resource.urn,
                )


def _efa_image(args: StackValidationArgs, report: ReportViolation) -> None:
    check_each(workloads(args.resources), lambda registered: _check_workload(registered, report))


efa_capable_image = StackValidationPolicy(
    name="efa-capable-image",
    description="vLLM pods that request EFA devices run an image with libfabric and the aws-ofi-nccl plugin, and "
    "a claim's EFA devices share their GPU's PCIe root.",
    validate=_efa_image,
    enforcement_level=EnforcementLevel.MANDATORY,
)
