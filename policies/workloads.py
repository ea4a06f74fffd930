"""Kubernetes workloads as the rules see them: pod templates, containers, device requests, tier.

A Deployment, a Job and a LeaderWorkerSet keep their pods in different places; every rule that
looks at pods goes through `workload()` so it handles all kinds the same way.

A pod asks for devices two ways: extended resources in its containers' limits (a device plugin's), or
Dynamic Resource Allocation claims (`spec.resourceClaims`, each generated from a ResourceClaimTemplate of the
pod's namespace). A pod template keeps both apart (what its limits ask of a device plugin, what its claims ask
per DeviceClass) for the rule that checks each against its own mechanism; for counting, claimed devices count as
the extended resource their DeviceClass stands for (catalog/dra.py, the figures Kueue's deviceClassMappings count:
kueue v0.19.2 pkg/dra/claims.go), so the capacity rules compare one kind of figure whichever way a pod asks.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inferstack import conventions
from inferstack.policies.claims import CLASS_RESOURCES, ClaimIndex, PodClaim, pod_claims
from inferstack.policies.props import EMPTY, dig, items, mapping, quantity, string_map, text, whole
from inferstack.spec.pools import EFA_RESOURCE, WHOLE_GPU

# A workload's tier (online | standard | batch): its own label, else its Kueue priority class, which the
# serving layer names after the tier (the spec requires a WorkloadPriorityClass per tier).
TIER_LABEL = conventions.TIER_LABEL
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # LWS adds it to every pod of the set

SERVING_KINDS = ("Deployment", "StatefulSet", "LeaderWorkerSet")
BATCH_KINDS = ("Job", "CronJob")
_TEMPLATE_PATHS: Mapping[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


def kind_of(resource_type: str) -> str | None:
    """'kubernetes:apps/v1:Deployment' -> 'Deployment'; None for anything that is not a Kubernetes object."""
    parts = resource_type.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes":
        return None
    return parts[2]


def is_device_resource(name: str) -> bool:
    """Extended resources a device plugin advertises: GPUs, MIG slices, shared GPUs, EFA."""
    return name.startswith("nvidia.com/") or name == EFA_RESOURCE


def is_gpu_fraction(name: str) -> bool:
    """A MIG slice (nvidia.com/mig-<profile>) or a GPU share (nvidia.com/gpu.shared, a renamed replica)."""
    return name.startswith("nvidia.com/") and name != WHOLE_GPU


@dataclass(frozen=True)
class PodTemplate:
    role: str                 # "pod", or "leader" / "worker" for a LeaderWorkerSet
    labels: Mapping[str, str]
    spec: Mapping[str, Any]
    copies: int               # pods of this template per replica (LWS: 1 leader, size-1 workers)
    annotations: Mapping[str, str] = field(default_factory=dict)
    namespace: str = "default"  # where its claim templates must live

    def containers(self, init: bool = True) -> list[Mapping[str, Any]]:
        found = [mapping(c) for c in items(self.spec.get("containers"))]
        if init:
            found += [mapping(c) for c in items(self.spec.get("initContainers"))]
        return found

    def claims(self) -> list[PodClaim]:
        return pod_claims(self.spec)

    def plugin_requests(self) -> dict[str, float]:
        """Extended resources one pod asks device plugins for: regular containers add up, init containers run one
        at a time."""
        total: dict[str, float] = {}
        for container in self.containers(init=False):
            for name, amount in device_resources(container).items():
                total[name] = total.get(name, 0) + amount
        for container in items(self.spec.get("initContainers")):
            for name, amount in device_resources(mapping(container)).items():
                total[name] = max(total.get(name, 0), amount)
        return total

    def claimed(self, index: ClaimIndex, shared: bool = True) -> dict[str, int]:
        """DeviceClass -> devices the pod's claims allocate, each claim for the pod as a whole; `shared` False leaves
        out existing ResourceClaims (allocated once, not per pod)."""
        total: dict[str, int] = {}
        for claim in self.claims():
            spec = claim.resolve(index, self.namespace) if shared or not claim.shared else None
            for name, amount in (spec.device_classes() if spec is not None else {}).items():
                total[name] = total.get(name, 0) + amount
        return total

    def device_requests(self, index: ClaimIndex, shared: bool = True) -> dict[str, float]:
        """Device resources one pod takes whichever way it asks: claimed devices count as the extended resource
        of their DeviceClass (the figures Kueue counts)."""
        total = self.plugin_requests()
        for device_class, amount in self.claimed(index, shared).items():
            resource = CLASS_RESOURCES[device_class]
            total[resource] = total.get(resource, 0) + amount
        return total

    def container_claimed(self, container: Mapping[str, Any], index: ClaimIndex) -> dict[str, int]:
        """DeviceClass -> devices of the claims (or claim requests) one container names: only those reach it."""
        found: dict[str, int] = {}
        by_name = {claim.name: claim for claim in self.claims()}
        for entry in items(dig(container, "resources", "claims")):
            entry = mapping(entry)
            claim = by_name.get(text(entry.get("name")))
            spec = claim.resolve(index, self.namespace) if claim is not None else None
            for name, amount in (spec.device_classes(text(entry.get("request")) or None) if spec is not None else {}).items():
                found[name] = found.get(name, 0) + amount
        return found

    def shared_claims(self) -> list[PodClaim]:
        return [claim for claim in self.claims() if claim.shared]

    def unresolved_claims(self, index: ClaimIndex) -> list[str]:
        """Why some of the pod's claims cannot be allocated or counted; empty when every one resolves."""
        problems = []
        for claim in self.claims():
            spec = claim.resolve(index, self.namespace)
            if spec is None:
                problems.append(
                    f"claim {claim.name!r} names {claim.kind} {self.namespace}/{claim.source or '(none)'}, which the "
                    "stack does not create, so the pod never schedules"
                )
            else:
                problems += [f"claim {claim.name!r}: {problem}" for problem in spec.problems()]
        return problems

    def claim_problems(self, index: ClaimIndex) -> list[str]:
        """The unresolved claims, and container claim entries that name no claim of the pod or no request of it."""
        problems = self.unresolved_claims(index)
        by_name = {claim.name: claim for claim in self.claims()}
        for container in self.containers():
            for entry in items(dig(container, "resources", "claims")):
                wanted = text(mapping(entry).get("name"))
                request = text(mapping(entry).get("request"))
                where = f"container {text(container.get('name'), '?')!r}"
                if wanted not in by_name:
                    problems.append(
                        f"{where} uses claim {wanted!r}, which the pod's spec.resourceClaims does not list (the API "
                        "server refuses the pod)"
                    )
                    continue
                spec = by_name[wanted].resolve(index, self.namespace)
                if request and spec is not None and request not in spec.request_names:
                    known = ", ".join(repr(n) for n in sorted(spec.request_names)) or "none"
                    problems.append(
                        f"{where} uses request {request!r} of claim {wanted!r}, which {spec.source} does not define "
                        f"(its requests: {known}), so the kubelet cannot give the container its devices"
                    )
        return problems

    def node_selector(self) -> dict[str, str]:
        return string_map(self.spec.get("nodeSelector"))

    def required_node_terms(self) -> list[list[Mapping[str, Any]]]:
        """matchExpressions of each required node-affinity term (a node must satisfy one term)."""
        terms = dig(self.spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                    "nodeSelectorTerms", default=())
        return [[mapping(e) for e in items(dig(term, "matchExpressions", default=()))] for term in items(terms)]


@dataclass(frozen=True)
class Workload:
    kind: str
    name: str
    namespace: str
    labels: Mapping[str, str]
    templates: tuple[PodTemplate, ...]
    replicas: int | None      # spec.replicas when set (LWS: groups)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def tier(self) -> str | None:
        for key in (TIER_LABEL, PRIORITY_CLASS_LABEL):
            for labels in (self.labels, *(t.labels for t in self.templates)):
                if key in labels:
                    return labels[key]
        return None

    @property
    def is_serving(self) -> bool:
        return self.kind in SERVING_KINDS

    @property
    def is_batch(self) -> bool:
        return self.kind in BATCH_KINDS or self.tier == "batch"

    def device_requests_per_replica(self, index: ClaimIndex, shared: bool = True) -> dict[str, float]:
        total: dict[str, float] = {}
        for template in self.templates:
            for name, amount in template.device_requests(index, shared).items():
                total[name] = total.get(name, 0) + amount * template.copies
        return total

    def gpu_template(self, index: ClaimIndex, shared: bool = True) -> PodTemplate | None:
        """The first template that requests devices (its node selection decides where the replica runs)."""
        return next((t for t in self.templates if t.device_requests(index, shared)), None)

    def claim_problems(self, index: ClaimIndex) -> list[str]:
        return [problem for template in self.templates for problem in template.claim_problems(index)]

    def shared_claims(self) -> list[PodClaim]:
        return [claim for template in self.templates for claim in template.shared_claims()]

    def vllm_containers(self) -> list[tuple[PodTemplate, Mapping[str, Any]]]:
        return [(t, c) for t in self.templates for c in t.containers(init=False) if is_vllm(c)]

    @property
    def runs_vllm(self) -> bool:
        return bool(self.vllm_containers())


# Every policy reads the same resources' workloads; the offline runner hands each resource's props to
# all of them, so a view is parsed once per props object. Entries keep their props alive, so an id is
# never reused while it is cached; the cache is dropped when it outgrows a large stack.
_VIEW_CACHE_LIMIT = 20_000
_views: dict[int, tuple[Mapping[str, Any], str, str, Workload | None]] = {}


def workload(resource_type: str, props: Mapping[str, Any], resource_name: str) -> Workload | None:
    """The workload a Kubernetes object describes, or None for objects without pods."""
    cached = _views.get(id(props))
    if cached is not None and cached[0] is props and cached[1:3] == (resource_type, resource_name):
        return cached[3]
    if len(_views) >= _VIEW_CACHE_LIMIT:
        _views.clear()
    view = _parse_workload(resource_type, props, resource_name)
    _views[id(props)] = (props, resource_type, resource_name, view)
    return view


def _parse_workload(resource_type: str, props: Mapping[str, Any], resource_name: str) -> Workload | None:
    kind = kind_of(resource_type)
    if kind is None:
        return None
    metadata = mapping(props.get("metadata"))
    name = text(metadata.get("name")) or resource_name
    namespace = text(metadata.get("namespace")) or "default"
    labels = string_map(metadata.get("labels"))
    replicas = whole(dig(props, "spec", "replicas"))
    if kind == "LeaderWorkerSet":
        templates = _lws_templates(props, name, namespace)
    elif kind in _TEMPLATE_PATHS:
        template = mapping(dig(props, *_TEMPLATE_PATHS[kind], default=EMPTY))
        spec = mapping(template.get("spec"))
        if not spec:
            return None
        templates = (
            PodTemplate(
                "pod", string_map(dig(template, "metadata", "labels")), spec, 1,
                string_map(dig(template, "metadata", "annotations")), namespace,
            ),
        )
    else:
        return None
    if not templates:
        return None
    return Workload(kind, name, namespace, labels, templates, replicas)


def _lws_templates(props: Mapping[str, Any], name: str, namespace: str) -> tuple[PodTemplate, ...]:
    lws = mapping(dig(props, "spec", "leaderWorkerTemplate"))
    size = max(1, whole(lws.get("size"), 1))
    worker = mapping(lws.get("workerTemplate"))
    leader = mapping(lws.get("leaderTemplate"))
    set_label = {LWS_NAME_LABEL: name}

    def template(role: str, raw: Mapping[str, Any], copies: int) -> PodTemplate:
        labels = {**string_map(dig(raw, "metadata", "labels")), **set_label}
        return PodTemplate(
            role, labels, mapping(raw.get("spec")), copies, string_map(dig(raw, "metadata", "annotations")), namespace
        )

    if not mapping(worker.get("spec")):
        return ()
    if mapping(leader.get("spec")):
        found = [template("leader", leader, 1)]
        if size > 1:
            found.append(template("worker", worker, size - 1))
        return tuple(found)
    return (template("worker", worker, size),)  # without a leader template the leader uses the worker's


def device_resources(container: Mapping[str, Any]) -> dict[str, float]:
    """The extended device resources a container's limits (or requests) ask a device plugin for."""
    resources = mapping(container.get("resources"))
    found: dict[str, float] = {}
    for section in ("limits", "requests"):
        for name, value in mapping(resources.get(section)).items():
            amount = quantity(value)
            if isinstance(name, str) and is_device_resource(name) and amount is not None and amount > 0:
                found[name] = max(found.get(name, 0), amount)
    return found


# ----------------------------------------------------------------------------------------- containers


def image_of(container: Mapping[str, Any]) -> str:
    return text(container.get("image"))


def command_tokens(container: Mapping[str, Any]) -> list[str]:
    """command + args as one token list; a `sh -c "..."` script is split into its words."""
    tokens: list[str] = []
    for part in (*items(container.get("command")), *items(container.get("args"))):
        if not isinstance(part, str):
            continue
        if " " in part.strip():
            try:
                tokens.extend(shlex.split(part))
            except ValueError:
                tokens.extend(part.split())
        else:
            tokens.append(part)
    return tokens


def flag_value(tokens: Sequence[str], flag: str) -> str | None:
    """The value of `--flag value` or `--flag=value`; '' for a bare `--flag`; None when absent."""
    for index, token in enumerate(tokens):
        if token == flag:
            following = tokens[index + 1] if index + 1 < len(tokens) else ""
            return "" if following.startswith("--") else following
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    return None


def is_vllm(container: Mapping[str, Any]) -> bool:
    """A container that runs vLLM: a vLLM image, or a `vllm serve` / `vllm.entrypoints` command."""
    repository = image_of(container).split("@")[0].rsplit(":", 1)[0]
    if "vllm" in repository.rsplit("/", 1)[-1]:
        return True
    tokens = command_tokens(container)
    return any(t == "vllm" or t.startswith("vllm.entrypoints") for t in tokens)


def is_pooling_model(container: Mapping[str, Any]) -> bool:
    """Embedding / classification servers: prefix caching and KV-cache dtype do not apply to them."""
    tokens = command_tokens(container)
    return (
        flag_value(tokens, "--runner") == "pooling"
        or flag_value(tokens, "--convert") in ("embed", "classify")
        or flag_value(tokens, "--task") in ("embed", "embedding", "classify", "score", "reward")
    )


# ----------------------------------------------------------------------------------------- selectors


def expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One matchExpressions entry against a label set (Gt/Lt and unknown operators match: they are not judged)."""
    key = text(expression.get("key"))
    operator = text(expression.get("operator"))
    values = [v for v in items(expression.get("values")) if isinstance(v, str)]
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return True


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against pod labels; an empty selector matches all."""
    wanted = string_map(selector.get("matchLabels"))
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    return all(expression_matches(mapping(e), labels) for e in items(selector.get("matchExpressions")))

