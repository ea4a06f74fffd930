"""Which input changes replace a resource instead of updating it, and which Karpenter changes replace the nodes
it launched (replacement.json, each rule with its upstream source): the data `inferstack diff` judges a change by."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

_RAW: dict[str, Any] = json.loads(files("inferstack.catalog").joinpath("replacement.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class ReplacementRule:
    type: str
    replace_on: tuple[str, ...]
    unordered: tuple[str, ...]
    rolls_on: tuple[str, ...]
    new_version_on_update: bool
    stateful: bool
    source: str


def _rule(type_: str, entry: dict[str, Any]) -> ReplacementRule:
    inherited = _RAW["kubernetes_default"]["replace_on"] if type_.startswith("kubernetes:") else []
    return ReplacementRule(
        type=type_,
        replace_on=tuple(inherited) + tuple(entry["replace_on"]),
        unordered=tuple(entry.get("unordered", ())),
        rolls_on=tuple(entry.get("rolls_on", ())),
        new_version_on_update=bool(entry.get("new_version_on_update", False)),
        stateful=bool(entry.get("stateful", False)),
        source=entry["source"],
    )


RULES: dict[str, ReplacementRule] = {t: _rule(t, e) for t, e in _RAW["resources"].items()}


def rule_for(type_: str) -> ReplacementRule | None:
    """The catalog's rule for a Pulumi type token, or None when the catalog does not know the type."""
    return RULES.get(type_)


@dataclass(frozen=True)
class DriftRule:
    """Which fields of a Karpenter object drift the nodes launched from it (replacement.json karpenter_drift)."""

    type: str
    hashed: str
    hash_ignored: tuple[str, ...]
    dynamic: dict[str, str]
    behavioral: tuple[str, ...]
    deleted: str
    source: str


DRIFT_RULES: dict[str, DriftRule] = {
    t: DriftRule(
        type=t,
        hashed=e["hashed"],
        hash_ignored=tuple(e["hash_ignored"]),
        dynamic=dict(e["dynamic"]),
        behavioral=tuple(e["behavioral"]),
        deleted=e["deleted"],
        source=e["source"],
    )
    for t, e in _RAW["karpenter_drift"].items()
    if not t.startswith("_")
}


def drift_rule_for(type_: str) -> DriftRule | None:
    """The drift rule for a Karpenter type token, or None for types whose changes drift no node."""
    return DRIFT_RULES.get(type_)
