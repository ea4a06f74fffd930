"""Validate rendered Kubernetes objects as strictly as `kubectl apply --validate=strict` would.

Built-in kinds are checked against the OpenAPI schemas that `kubernetes_validate` ships (its strict variant, which
rejects unknown fields); custom resources against the upstream CRD schemas in ``../shared/schemas`` (see the README
there). A plain JSON Schema validator differs from the API server in a few ways that this module evens out:

* unknown fields: the API server's strict field validation rejects them wherever a structural schema node lists
  ``properties`` and does not set ``x-kubernetes-preserve-unknown-fields``, so such nodes get
  ``additionalProperties: false`` (value-only branches under allOf/anyOf/oneOf/not are left open, as they do not
  declare fields);
* defaulting: the API server fills ``default`` values before it validates, so the object is defaulted first;
* Go RE2 patterns of the form ``^(?i)...`` become ``(?i)^...`` for Python's ``re``;
* ``x-kubernetes-int-or-string``, ``x-kubernetes-list-type: set`` and ``x-kubernetes-list-map-keys`` get their
  API-server meaning (integer or string; unique items; unique map keys).

CEL rules (``x-kubernetes-validations``) of a custom resource are evaluated by ``cel_rules`` once the object passes
its schema: the API server runs them only when no schema error blocks them (apiextensions-apiserver
pkg/registry/customresource/strategy.go, hasBlockingErr); this module counts every schema error as blocking.
A rule that cannot be evaluated is reported as a problem, never skipped; transition rules (``oldSelf``) do not run
on create. Formats are only checked for ``ipv4``/``ipv6``: the other
formats in CRDs (int32, int64, date-time, int-or-string, ...) either mean nothing to jsonschema or would need
checkers with different semantics.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.exceptions import best_match
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

import cel_rules

_SCHEMAS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "schemas"
SHARED_SCHEMAS: Path | None = _SCHEMAS_DIR if _SCHEMAS_DIR.is_dir() else None
# Upstream CRD schemas ../shared does not hold, fetched with their provenance (tests/schemas/README.md).
OWN_SCHEMAS = Path(__file__).resolve().parent / "schemas"


def _schema_file(group: str, version: str, kind: str) -> Path | None:
    """The CRD version's schema file: ../shared/schemas's, else tests/schemas's; None when neither has it."""
    name = f"{kind.lower()}_{version}.json"
    for root in (SHARED_SCHEMAS, OWN_SCHEMAS):
        if root is not None and (root / group / name).is_file():
            return root / group / name
    return None

DEFAULT_KUBERNETES_VERSION = "1.34"

# Keys a manifest author may set in metadata; the rest (uid, resourceVersion, managedFields, ...) are server-owned.
OBJECT_META_KEYS = frozenset(
    {"name", "namespace", "labels", "annotations", "generateName", "finalizers", "ownerReferences"}
)

_API_VERSION = re.compile(r"(?:(?P<group>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)/)?(?P<version>v[0-9]+[a-z0-9]*)")
_KIND = re.compile(r"[A-Z][A-Za-z0-9]*")
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LEADING_FLAGS = re.compile(r"\^(\(\?[a-zA-Z]+\))")
_DEFINITIONS_ID = "https://kubernetes.io/api/_definitions.json"
_OBJECT_META_REF = _DEFINITIONS_ID + "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_MAX_MESSAGE = 300


class UnknownKind(Exception):
    """A custom resource whose group/version/kind has no schema file, so it cannot be checked at all."""


def _minor_key(version: str) -> tuple[int, int]:
    match = _VERSION.fullmatch(version)
    if match is None:
        raise ValueError(f"not a Kubernetes version: {version!r} (expected e.g. '1.34')")
    return int(match[1]), int(match[2])


@functools.cache
def resolve_kubernetes_version(requested: str) -> str:
    """The kubernetes_validate schema version (e.g. '1.34.0') nearest to `requested`, warning when not exact.

    The package only ships a window of releases; validating against a neighbour beats failing outright.
    """
    wanted = _minor_key(requested)
    shipped = kv_utils.all_versions()

    def distance(candidate: str) -> tuple[int, tuple[int, int]]:
        major, minor = _minor_key(candidate)
        return abs((major - wanted[0]) * 1000 + minor - wanted[1]), (major, minor)

    best = min(shipped, key=distance)
    if _minor_key(best) != wanted:
        warnings.warn(
            f"kubernetes_validate {kv_utils.__version__} has no schemas for Kubernetes {requested}; "
            f"using the nearest shipped version {best}",
            stacklevel=2,
        )
    return best


@functools.cache
def _definitions(shipped: str) -> dict[str, Any]:
    return kv_utils.schema_contents(f"kubernetes-json-schema/v{shipped}-local-strict/_definitions.json", shipped)


@functools.cache
def _registry(shipped: str) -> Registry:
    return Registry().with_resource(_DEFINITIONS_ID, Resource.from_contents(_definitions(shipped)))


@functools.cache
def builtin_groups(kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> frozenset[str]:
    """API groups served by Kubernetes itself ('' is core), read from the shipped OpenAPI definitions.

    A suffix test would not do: gateway.networking.k8s.io and inference.networking.k8s.io are CRDs.
    """
    defs = _definitions(resolve_kubernetes_version(kubernetes_version))["$defs"]
    return frozenset(gvk["group"] for d in defs.values() for gvk in d.get("x-kubernetes-group-version-kind", ()))


def _group_version(obj: dict) -> tuple[str, str] | None:
    api_version = obj.get("apiVersion")
    match = _API_VERSION.fullmatch(api_version) if isinstance(api_version, str) else None
    if match is None:
        return None
    return match["group"] or "", match["version"]


def is_custom_resource(obj: dict, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> bool:
    """True when the object's API group is not one that Kubernetes serves itself."""
    group_version = _group_version(obj)
    return group_version is not None and group_version[0] not in builtin_groups(kubernetes_version)


@functools.cache
def _builtin_validator(shipped: str, group: str, version: str, kind: str) -> Draft202012Validator | None:
    prefix = group.split(".")[0] + "-" if group else ""
    name = f"kubernetes-json-schema/v{shipped}-local-strict/{kind.lower()}-{prefix}{version}.json"
    try:
        schema = kv_utils.schema_contents(name, shipped)
    except FileNotFoundError:
        return None
    # Files also exist for nested types (jobspec-batch-v1.json); only a top-level kind carries its own GVK.
    if {"group": group, "version": version, "kind": kind} not in schema.get("x-kubernetes-group-version-kind", []):
        return None
    return Draft202012Validator(schema, registry=_registry(shipped))


@functools.cache
def _object_meta_validator(shipped: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": _OBJECT_META_REF}, registry=_registry(shipped))


def _python_pattern(pattern: str) -> str:
    return _LEADING_FLAGS.sub(r"\1^", pattern, count=1) if pattern.startswith("^(?") else pattern


def _prepare(node: dict[str, Any], structural: bool) -> dict[str, Any]:
    """Copy of a CRD schema node with the API server's strict meaning spelt out in plain JSON Schema."""
    out = dict(node)
    if isinstance(out.get("pattern"), str):
        out["pattern"] = _python_pattern(out["pattern"])
    if out.get("x-kubernetes-int-or-string"):
        # Said as a type rather than the usual anyOf, so a wrong value gets one plain error.
        out["type"] = ["integer", "string"]
        if out.get("anyOf") == [{"type": "integer"}, {"type": "string"}]:
            del out["anyOf"]
    if out.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if "properties" in out:
        out["properties"] = {key: _prepare(sub, structural) for key, sub in out["properties"].items()}
        if structural and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _prepare(out[key], structural)
    for key in ("allOf", "anyOf", "oneOf"):
        if key in out:
            out[key] = [_prepare(branch, structural=False) for branch in out[key]]
    if "not" in out:
        out["not"] = _prepare(out["not"], structural=False)
    return out


@functools.cache
def crd_schema(group: str, version: str, kind: str) -> dict[str, Any]:
    """The prepared (strict, Python-regex) openAPIV3Schema of one CRD version; loaded once per file."""
    path = _schema_file(group, version, kind)
    if path is None:
        if SHARED_SCHEMAS is None:
            raise FileNotFoundError("../shared/schemas is absent")
        raise UnknownKind(
            f"no CRD schema for {kind} in {group}/{version} (expected shared/schemas/{group}/"
            f"{kind.lower()}_{version}.json)"
        )
    raw = json.loads(path.read_text(encoding="utf-8"))
    schema = _prepare(raw, structural=True)
    # ObjectMeta is checked on its own (see _metadata_problems); a CRD may only narrow it, never list all its keys.
    if "metadata" in raw.get("properties", {}):
        schema["properties"]["metadata"] = _prepare(raw["properties"]["metadata"], structural=False)
    # apiVersion, kind and metadata exist at the root of every custom resource whether the schema lists them or not
    # (Kubernetes docs, "Specifying a structural schema": they are implicitly specified); Istio's CRDs list neither.
    implicit = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}
    schema["properties"] = {**implicit, **schema.get("properties", {})}
    return schema


def _unique_list_map_keys(validator, keys, instance, schema) -> Iterator[ValidationError]:
    """x-kubernetes-list-map-keys: the API server rejects two list entries with the same key values."""
    if not validator.is_type(instance, "array"):
        return
    seen: dict[str, int] = {}
    for index, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        key = json.dumps([item.get(k) for k in keys])
        if key in seen:
            named = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
            yield ValidationError(f"entries {seen[key]} and {index} have the same key ({named})")
        seen.setdefault(key, index)


_CRDValidator = validators.extend(Draft202012Validator, {"x-kubernetes-list-map-keys": _unique_list_map_keys})


@functools.cache
def _crd_validator(group: str, version: str, kind: str) -> Draft202012Validator:
    return _CRDValidator(crd_schema(group, version, kind), format_checker=FormatChecker(["ipv4", "ipv6"]))


def _apply_defaults(value: Any, schema: dict[str, Any]) -> None:
    """Fill absent fields from `default` in place, as the API server does before validating a custom resource."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, sub in properties.items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _apply_defaults(value[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                if name not in properties:
                    _apply_defaults(item, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _apply_defaults(item, schema["items"])


def _format_path(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "(root)"


def _schema_problems(validator: Draft202012Validator, instance: Any, prefix: tuple = ()) -> list[tuple[str, str]]:
    problems = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        message = error.message
        if error.context:
            # anyOf/oneOf: jsonschema's own message repeats the whole value; name the nearest miss instead.
            closest = error
            while closest.context:
                closest = best_match(closest.context)
            inner = list(closest.absolute_path)[len(error.absolute_path) :]
            where = _format_path(inner) + ": " if inner else ""
            message = f"matches none of the {error.validator} alternatives; closest: {where}{closest.message}"
        if len(message) > _MAX_MESSAGE:
            message = message[: _MAX_MESSAGE - 3] + "..."
        problems.append((_format_path((*prefix, *error.absolute_path)), message))
    return problems


def _metadata_problems(metadata: Any, shipped: str, custom: bool) -> list[tuple[str, str]]:
    """What the API server checks in ObjectMeta that a schema does not: a name, no server-owned keys, label syntax."""
    if not isinstance(metadata, dict):
        return [("metadata", "is required and must be an object with a name")]
    problems = []
    if not any(isinstance(metadata.get(key), str) and metadata[key] for key in ("name", "generateName")):
        problems.append(("metadata", "needs a non-empty name or generateName"))
    for key in sorted(set(metadata) - OBJECT_META_KEYS):
        allowed = sorted(OBJECT_META_KEYS)
        problems.append(("metadata", f"{key!r} is not a field a manifest may set (allowed: {allowed})"))
    if custom:
        # A CRD schema leaves metadata open; the built-in schemas already type-check it for built-in kinds.
        known = {key: value for key, value in metadata.items() if key in OBJECT_META_KEYS}
        problems += _schema_problems(_object_meta_validator(shipped), known, ("metadata",))
    for field in ("labels", "annotations"):
        mapping = metadata.get(field)
        if not isinstance(mapping, dict):
            continue
        for key, value in mapping.items():
            if isinstance(key, str) and not _is_qualified_name(key):
                problems.append((f"metadata.{field}", f"key {key!r} is not a valid qualified name ([prefix/]name)"))
            if field == "labels" and isinstance(value, str) and not _is_label_value(value):
                problems.append((f"metadata.labels.{key}", f"{value!r} is not a valid label value"))
    return problems


def _is_qualified_name(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None


def _is_label_value(value: str) -> bool:
    return len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def validate_object(obj: dict, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> list[str]:
    """Every problem the API server would reject `obj` for, CEL rules included, as "Kind/name: path: message" lines.

    Raises UnknownKind for a custom resource without a schema file; skips the calling test when a custom resource
    needs ../shared/schemas and it is absent.
    """
    shipped = resolve_kubernetes_version(kubernetes_version)
    metadata = obj.get("metadata")
    name = (metadata.get("name") or metadata.get("generateName")) if isinstance(metadata, dict) else None
    label = f"{obj.get('kind') or '?'}/{name or '?'}"
    group_version = _group_version(obj)
    kind = obj.get("kind")
    if group_version is None or not isinstance(kind, str) or not _KIND.fullmatch(kind):
        return [f"{label}: (root): apiVersion and kind must name a Kubernetes type (e.g. apps/v1, Deployment)"]
    group, version = group_version
    custom = is_custom_resource(obj, kubernetes_version)
    problems = _metadata_problems(metadata, shipped, custom)
    if custom:
        if SHARED_SCHEMAS is None and _schema_file(group, version, kind) is None:
            import pytest

            pytest.skip(f"{kind} ({obj['apiVersion']}) is a custom resource and ../shared/schemas is absent")
        validator = _crd_validator(group, version, kind)
        instance = copy.deepcopy(obj)
        _apply_defaults(instance, validator.schema)
        schema_problems = _schema_problems(validator, instance)
        problems += schema_problems
        if not schema_problems:
            problems += [(v.path, v.message) for v in cel_rules.evaluate(validator.schema, instance).violations]
    else:
        validator = _builtin_validator(shipped, group, version, kind)
        if validator is None:
            problems.append(("(root)", f"Kubernetes {shipped} serves no {kind} in {obj['apiVersion']}"))
        else:
            problems += _schema_problems(validator, obj)
    return [f"{label}: {path}: {message}" for path, message in problems]


def assert_valid(objects: Iterable[dict], kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> None:
    """Fail with every problem of every object at once, so one test run shows the whole picture."""
    errors = []
    for obj in objects:
        try:
            errors += validate_object(obj, kubernetes_version)
        except UnknownKind as exc:
            errors.append(f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name', '?')}: (root): {exc}")
    if errors:
        raise AssertionError(f"{len(errors)} problem(s) in rendered Kubernetes objects:\n" + "\n".join(errors))


def cel_outcome(obj: dict) -> cel_rules.Outcome:
    """The CEL rules of a custom resource's CRD run on it as the API server would on create (defaults applied)."""
    group_version = _group_version(obj)
    if group_version is None:
        raise ValueError(f"not a Kubernetes object: {obj!r:.80}")
    schema = crd_schema(*group_version, obj["kind"])
    instance = copy.deepcopy(obj)
    _apply_defaults(instance, schema)
    return cel_rules.evaluate(schema, instance)
