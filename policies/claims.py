"""Dynamic Resource Allocation claims as the rules count them: what a ResourceClaimTemplate (or ResourceClaim)
asks for, in the extended resources its DeviceClasses stand for.

A pod's `spec.resourceClaims` entry names a template of its own namespace; the scheduler generates one
ResourceClaim per entry and allocates every request of it on the pod's node (kubernetes pkg/scheduler/framework/
plugins/dynamicresources, staging/src/k8s.io/dynamic-resource-allocation/structured allocator). A request of
resource.k8s.io/v1 holds `exactly` (v1beta1 keeps its fields on the request itself); only ExactCount with a
count, of a DeviceClass the catalog maps to an extended resource, gives a figure, the same that Kueue counts
(kueue v0.19.2 pkg/dra/claims.go refuses FirstAvailable, allocationMode All and unmapped DeviceClasses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import PolicyResource

from inferstack.catalog.dra import DEVICE_CLASSES
from inferstack.policies.props import dig, items, mapping, text, whole

DRA_GROUP = "kubernetes:resource.k8s.io/"
CLAIM_TEMPLATE_KIND = "ResourceClaimTemplate"
CLAIM_KIND = "ResourceClaim"
EXACT_COUNT = "ExactCount"  # allocationMode's default (resource.k8s.io/v1 ExactDeviceRequest)
# DeviceClass name -> the extended resource each of its devices counts as.
CLASS_RESOURCES: Mapping[str, str] = {device_class.name: device_class.resource for device_class in DEVICE_CLASSES.values()}


@dataclass(frozen=True)
class DeviceRequest:
    name: str
    device_class: str
    count: int | None        # None: no fixed count (allocationMode All, or firstAvailable)
    problem: str | None      # why the request cannot be counted

    @property
    def resource(self) -> str | None:
        return CLASS_RESOURCES.get(self.device_class)


@dataclass(frozen=True)
class ClaimSpec:
    """One ResourceClaimSpec: its device requests and `matchAttribute` constraints."""

    source: str                                           # 'ResourceClaimTemplate inference/x-devices'
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[tuple[tuple[str, ...], str], ...]  # (requests it binds, empty = all; matchAttribute)

    def device_classes(self, request: str | None = None) -> dict[str, int]:
        """DeviceClass -> devices one claim of this spec allocates (of one request when named)."""
        found: dict[str, int] = {}
        for entry in self.requests:
            if request not in (None, entry.name) or entry.problem is not None or entry.resource is None:
                continue
            found[entry.device_class] = found.get(entry.device_class, 0) + (entry.count or 0)
        return found

    @property
    def request_names(self) -> set[str]:
        return {r.name for r in self.requests}

    def requests_of(self, resource: str) -> list[DeviceRequest]:
        return [r for r in self.requests if r.problem is None and r.resource == resource and r.count]

    def binds(self, attribute: str, first: str, second: str) -> bool:
        """Whether a constraint makes the two requests' devices share `attribute` (e.g. one PCIe root)."""
        return any(
            wanted == attribute and (not names or {first, second} <= set(names)) for names, wanted in self.constraints
        )

    def problems(self) -> list[str]:
        return [f"{self.source} request {r.name!r} {r.problem}" for r in self.requests if r.problem is not None]


def _request(raw: Mapping[str, Any]) -> DeviceRequest:
    name = text(raw.get("name"), "?")
    if items(raw.get("firstAvailable")):
        return DeviceRequest(name, "", None, "lists firstAvailable alternatives, which Kueue does not count "
                             "(kueue pkg/dra/claims.go) and whose devices cannot be known before allocation")
    exact = mapping(raw.get("exactly")) or raw  # resource.k8s.io/v1 nests them; v1beta1 keeps them on the request
    device_class = text(exact.get("deviceClassName"))
    mode = text(exact.get("allocationMode")) or EXACT_COUNT
    if mode != EXACT_COUNT:
        return DeviceRequest(name, device_class, None, f"takes allocationMode {mode}: every matching device of "
                             "the node, a count Kueue does not account (kueue pkg/dra/claims.go)")
    if device_class not in CLASS_RESOURCES:
        known = ", ".join(sorted(CLASS_RESOURCES))
        return DeviceRequest(name, device_class, None, f"names DeviceClass {device_class or '(none)'!r}, which the "
                             f"catalog does not map to an extended resource (it knows {known})")
    count = whole(exact.get("count"), 1)
    if count is None or count < 1:
        return DeviceRequest(name, device_class, None, f"asks for {count} devices")
    return DeviceRequest(name, device_class, count, None)


def claim_spec(source: str, spec: Mapping[str, Any]) -> ClaimSpec:
    devices = mapping(spec.get("devices"))
    constraints = tuple(
        (tuple(n for n in items(mapping(c).get("requests")) if isinstance(n, str)), text(mapping(c).get("matchAttribute")))
        for c in items(devices.get("constraints"))
    )
    return ClaimSpec(source, tuple(_request(mapping(r)) for r in items(devices.get("requests"))), constraints)


class ClaimIndex:
    """The stack's ResourceClaimTemplates and ResourceClaims by (kind, namespace, name)."""

    def __init__(self, resources: Sequence[PolicyResource]) -> None:
        self._specs: dict[tuple[str, str, str], ClaimSpec] = {}
        for resource in resources:
            if not resource.resource_type.startswith(DRA_GROUP):
                continue
            kind = resource.resource_type.rsplit(":", 1)[-1]
            if kind not in (CLAIM_TEMPLATE_KIND, CLAIM_KIND):
                continue
            props = resource.props
            name = text(dig(props, "metadata", "name")) or resource.name
            namespace = text(dig(props, "metadata", "namespace")) or "default"
            spec = dig(props, "spec", "spec") if kind == CLAIM_TEMPLATE_KIND else props.get("spec")
            self._specs[(kind, namespace, name)] = claim_spec(f"{kind} {namespace}/{name}", mapping(spec))

    def find(self, kind: str, namespace: str, name: str) -> ClaimSpec | None:
        return self._specs.get((kind, namespace, name))


@dataclass(frozen=True)
class PodClaim:
    """One `spec.resourceClaims` entry: a claim generated from a template, or an existing claim."""

    name: str
    kind: str          # ResourceClaimTemplate | ResourceClaim
    source: str        # the template's or claim's name

    @property
    def shared(self) -> bool:
        """An existing ResourceClaim: allocated once, so every pod naming it lands on its node with its devices."""
        return self.kind == CLAIM_KIND

    def resolve(self, index: ClaimIndex, namespace: str) -> ClaimSpec | None:
        return index.find(self.kind, namespace, self.source)


def pod_claims(spec: Mapping[str, Any]) -> list[PodClaim]:
    found = []
    for entry in items(spec.get("resourceClaims")):
        entry = mapping(entry)
        template = text(entry.get("resourceClaimTemplateName"))
        kind, source = (CLAIM_TEMPLATE_KIND, template) if template else (CLAIM_KIND, text(entry.get("resourceClaimName")))
        found.append(PodClaim(text(entry.get("name"), "?"), kind, source))
    return found
