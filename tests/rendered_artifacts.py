"""Find, in a render, what the outside tools check: shell scripts, PromQL, IAM policy documents and pod templates.

A render is its Kubernetes objects (kubernetes/*.yaml, or a recording's objects) plus its registrations
(resources.json entries or recorded resources: type, name, inputs). Each finder returns (where, payload) pairs so a
failure names the object it came from.
"""

from __future__ import annotations

import base64
import binascii
import email
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from promql_labels import legend_labels, template_labels

SHELLS = ("sh", "bash")
DASHBOARD_LABEL = "grafana_dashboard"  # the Grafana sidecar's label (components/platform/metrics.py)


@dataclass(frozen=True)
class Registration:
    type: str
    name: str
    inputs: dict[str, Any]


def registrations(entries: Iterable[Any]) -> list[Registration]:
    """resources.json dicts or recorder Registrations, as one shape."""
    out = []
    for entry in entries:
        if isinstance(entry, dict):
            out.append(Registration(entry["type"], entry["name"], entry["inputs"]))
        else:
            out.append(Registration(entry.type, entry.name, entry.inputs))
    return out


def _label(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{obj.get('kind')}/{metadata.get('namespace', '-')}/{metadata.get('name')}"


def _is_shell_script(text: str) -> bool:
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    if not first.startswith("#!"):
        return False
    words = first[2:].replace("/", " ").split()
    return any(word in SHELLS for word in words)


def _containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod_spec.get("initContainers") or ()
    yield from pod_spec.get("containers") or ()


def _inline_shell(container: dict[str, Any]) -> str | None:
    """The script of `sh -c '<script>'` / `bash -c` in a container's command and args."""
    argv = [*(container.get("command") or ()), *(container.get("args") or ())]
    for index, word in enumerate(argv[:-1]):
        if word == "-c" and index > 0 and argv[index - 1].rsplit("/", 1)[-1] in SHELLS:
            return argv[index + 1]
    return None


def _user_data_scripts(encoded: str) -> Iterator[tuple[str, str]]:
    """Shell parts of EC2 user data: a bare script, or text/x-shellscript parts of a MIME multipart."""
    try:
        text = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        text = encoded
    if _is_shell_script(text):
        yield "script", text
        return
    message = email.message_from_string(text)
    if not message.is_multipart():
        return
    for index, part in enumerate(message.walk()):
        if part.get_content_type() == "text/x-shellscript":
            yield f"part {index}", part.get_payload(decode=True).decode()


def shell_scripts(objects: Iterable[dict], resources: Iterable[Registration]) -> list[tuple[str, str]]:
    """Every shell script the render ships: ConfigMap files with a sh/bash shebang, `sh -c` container commands,
    and shell parts of launch template user data."""
    found = []
    for obj in objects:
        if obj.get("kind") == "ConfigMap":
            for key, value in (obj.get("data") or {}).items():
                if isinstance(value, str) and _is_shell_script(value):
                    found.append((f"{_label(obj)} data.{key}", value))
        for pod in pod_templates([obj]):
            for container in _containers(pod.template.get("spec") or {}):
                script = _inline_shell(container)
                if script is not None:
                    found.append((f"{pod.where} container {container.get('name')}", script))
    for resource in resources:
        user_data = resource.inputs.get("userData")
        if resource.type.startswith("aws:ec2/launchTemplate") and isinstance(user_data, str):
            for part, script in _user_data_scripts(user_data):
                found.append((f"{resource.name} userData {part}", script))
    return found


@dataclass(frozen=True)
class PromQL:
    """One expression and the label names the text around it reads from its result."""

    where: str
    expr: str
    reads_labels: tuple[str, ...] = ()


def _dashboard_panels(panels: Iterable[dict]) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _dashboard_panels(panel.get("panels") or ())  # rows nest their panels


def promql_expressions(objects: Iterable[dict]) -> list[PromQL]:
    """Alert and recording rules, Grafana dashboard targets, KEDA prometheus triggers."""
    found = []
    for obj in objects:
        kind, label = obj.get("kind"), _label(obj)
        if kind == "PrometheusRule":
            for group in obj["spec"].get("groups", ()):
                for rule in group.get("rules", ()):
                    name = rule.get("alert") or rule.get("record")
                    texts = [*(rule.get("annotations") or {}).values(), *(rule.get("labels") or {}).values()]
                    reads = tuple(label_name for text in texts for label_name in template_labels(text))
                    found.append(PromQL(f"{label} rule {name}", rule["expr"], reads))
        elif kind == "ConfigMap" and (obj.get("metadata", {}).get("labels") or {}).get(DASHBOARD_LABEL):
            for key, text in (obj.get("data") or {}).items():
                dashboard = json.loads(text)
                for panel in _dashboard_panels(dashboard.get("panels") or ()):
                    for target in panel.get("targets") or ():
                        if "expr" in target:
                            reads = tuple(legend_labels(target.get("legendFormat", "")))
                            found.append(PromQL(f"{label} {key} panel {panel.get('title')!r}", target["expr"], reads))
        elif kind in ("ScaledObject", "ScaledJob"):
            for trigger in obj["spec"].get("triggers", ()):
                if trigger.get("type") == "prometheus":
                    found.append(PromQL(f"{label} trigger {trigger.get('name')}", trigger["metadata"]["query"]))
    return found


@dataclass(frozen=True)
class PolicyDocument:
    where: str
    document: dict[str, Any]
    trust_policy_of: str | None  # the role's name for an assume-role (trust) policy, else None


def _as_document(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str) and '"Statement"' in value:
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) and "Statement" in value else None


def policy_documents(resources: Iterable[Registration]) -> list[PolicyDocument]:
    """Every IAM policy document registered: role trust policies, inline and managed policies, resource policies."""
    found = []
    for resource in resources:
        for key, value in resource.inputs.items():
            document = _as_document(value)
            if document is None:
                continue
            role = resource.inputs.get("name") or resource.name if key == "assumeRolePolicy" else None
            found.append(PolicyDocument(f"{resource.type} {resource.name}.{key}", document, role))
    return found


@dataclass(frozen=True)
class PodTemplate:
    where: str  # "Kind/namespace/name" plus the role within a LeaderWorkerSet
    namespace: str
    template: dict[str, Any]


def pod_templates(objects: Iterable[dict]) -> list[PodTemplate]:
    """Pod templates of the workload kinds the program renders.

    A LeaderWorkerSet without a leaderTemplate starts its leaders from the workerTemplate (kubernetes-sigs/lws
    v0.10.0 pkg/controllers/leaderworkerset_controller.go, constructLeaderStatefulSetApplyConfiguration).
    """
    found = []
    for obj in objects:
        kind, spec, label = obj.get("kind"), obj.get("spec") or {}, _label(obj)
        namespace = (obj.get("metadata") or {}).get("namespace", "default")
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            found.append(PodTemplate(label, namespace, spec["template"]))
        elif kind == "CronJob":
            found.append(PodTemplate(label, namespace, spec["jobTemplate"]["spec"]["template"]))
        elif kind == "ScaledJob":
            found.append(PodTemplate(label, namespace, spec["jobTargetRef"]["template"]))
        elif kind == "LeaderWorkerSet":
            templates = spec["leaderWorkerTemplate"]
            worker = templates["workerTemplate"]
            found.append(PodTemplate(f"{label} leader", namespace, templates.get("leaderTemplate") or worker))
            found.append(PodTemplate(f"{label} worker", namespace, worker))
    return found
