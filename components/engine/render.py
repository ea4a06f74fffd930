"""Write what the program registered as files a reviewer (or kubectl / helm) can read."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from inferstack.engine.recorder import SECRET_SIG, SIG_KEY, Recording

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SIG_KEY) == SECRET_SIG


def unwrap_secrets(value: Any) -> Any:
    """The recording keeps Pulumi's secret markers; manifests carry the plain value."""
    if isinstance(value, dict):
        if is_secret(value):
            return unwrap_secrets(value.get("value"))
        return {k: unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(v) for v in value]
    return value


def is_kubernetes_object(type_token: str) -> bool:
    return type_token.startswith("kubernetes:") and type_token != HELM_RELEASE


def kubernetes_objects(recording: Recording) -> list[dict[str, Any]]:
    """Every Kubernetes object the program creates, as `kubectl apply` takes it."""
    return [
        unwrap_secrets(r.inputs)
        for r in recording.resources
        if r.custom and is_kubernetes_object(r.type) and "kind" in r.inputs
    ]


def helm_releases(recording: Recording) -> list[dict[str, Any]]:
    """Every Helm release: chart, repository, version, namespace, values."""
    releases = []
    for r in recording.of_type(HELM_RELEASE):
        inputs = unwrap_secrets(r.inputs)
        releases.append(
            {
                "name": inputs.get("name", r.name),
                "chart": inputs.get("chart"),
                "repository": (inputs.get("repositoryOpts") or {}).get("repo"),
                "version": inputs.get("version"),
                "namespace": inputs.get("namespace"),
                "values": inputs.get("values", {}),
            }
        )
    return releases


def _slug(*parts: str | None) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", "-".join(p for p in parts if p).lower()).strip("-")


def _dump(path: Path, document: Any) -> None:
    path.write_text(yaml.safe_dump(document, sort_keys=False, default_flow_style=False), encoding="utf-8")


def write_render(recording: Recording, plan: dict[str, Any], out: Path) -> dict[str, int]:
    """Write resources.json, kubernetes/*.yaml, helm/*.yaml and plan.json under `out`."""
    (out / "kubernetes").mkdir(parents=True, exist_ok=True)
    (out / "helm").mkdir(parents=True, exist_ok=True)
    for stale in [*(out / "kubernetes").glob("*.yaml"), *(out / "helm").glob("*.yaml")]:
        stale.unlink()
    (out / "resources.json").write_text(
        json.dumps([r.as_dict() for r in recording.resources], indent=2) + "\n", encoding="utf-8"
    )
    objects = kubernetes_objects(recording)
    for index, obj in enumerate(objects):
        meta = obj.get("metadata", {})
        name = _slug(f"{index:04d}", obj["kind"], meta.get("namespace"), meta.get("name"))
        _dump(out / "kubernetes" / f"{name}.yaml", obj)
    releases = helm_releases(recording)
    for release in releases:
        _dump(out / "helm" / f"{_slug(release['namespace'], release['name'])}.yaml", release)
    (out / "plan.json").write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    return {"resources": len(recording.resources), "kubernetes": len(objects), "helm": len(releases)}
