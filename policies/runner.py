"""Run the policy pack offline: the policy objects `pulumi preview --policy-pack policies` serves, over
what the embedded engine registered or over a resources.json written by `inferstack render`.

Arguments are built the way pulumi_policy's analyzer builds them: the recorded inputs (which keep
Pulumi's wire secret markers) travel through a protobuf Struct (every number becomes a float),
`deserialize_properties` (Pulumi secrets unwrapped) and
`unknown_checking_proxy`; resource policies see one resource at a time, stack policies every
resource with parents and dependencies resolved; config and enforcement levels follow the pack
config format of `pulumi preview --policy-pack-config`. The analyzer rebuilds those props for every
policy call; here each resource's are built once and shared by every policy, as validate policies
only read them (the same values, at a seventeenth of the cost on a large stack).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from inspect import isawaitable
from pathlib import Path
from typing import Any

from pulumi.output import Unknown
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.policy import _NotApplicableError  # what `args.not_applicable()` raises; the analyzer catches it too
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError, unknown_checking_proxy

from inferstack.engine.recorder import PROJECT, rare_collections
from inferstack.policies.budget import MAX_USD_PER_HOUR, SPOT_DISCOUNT, STATED_PRICES, budget_at_max_scale
from inferstack.policies.rules import PACK_ENFORCEMENT, PACK_NAME, POLICIES
from inferstack.policies.slo_capacity import plan_config as slo_plan_config, slo_capacity, spec_config as slo_spec_config
from inferstack.spec import StackSpec

ALL_POLICIES = "all"  # the pack-config key that sets every policy's level


class CheckInputError(ValueError):
    """A resources.json, plan.json or policy config the runner cannot use."""


@dataclass(frozen=True)
class Violation:
    resource: str | None  # the resource's name; None for the stack as a whole
    message: str


@dataclass
class PolicyResult:
    name: str
    description: str
    enforcement: str
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # not applicable / can't run during preview

    @property
    def blocking(self) -> bool:
        return self.enforcement == EnforcementLevel.MANDATORY.value and bool(self.violations)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "enforcement": self.enforcement,
            "description": self.description,
            "violations": [{"resource": v.resource, "message": v.message} for v in self.violations],
            "notes": self.notes,
        }


# ----------------------------------------------------------------------------------------- inputs


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # ValueError: not JSON, or not UTF-8 text
        raise CheckInputError(f"cannot read {what}: {error}") from None


def load_resources(path: Path) -> list[dict[str, Any]]:
    """The registrations of a resources.json: a list of {type, name, parent, inputs, depends_on, options}."""
    data = _read_json(path, f"{path}")
    if not isinstance(data, list):
        raise CheckInputError(f"{path} holds {type(data).__name__}, not the list of resources `inferstack render` writes")
    for index, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str) or not isinstance(entry.get("name"), str):
            raise CheckInputError(f"{path} entry {index} is not an object with string 'type' and 'name'")
        if not isinstance(entry.get("inputs", {}), dict):
            raise CheckInputError(f"{path} entry {index} ({entry['name']}) has inputs that are not an object")
        if not isinstance(entry.get("options", {}), dict):
            raise CheckInputError(f"{path} entry {index} ({entry['name']}) has options that are not an object")
    return data


def load_plan(path: Path) -> dict[str, Any]:
    """A plan.json written by `inferstack render` (its stack name and budget)."""
    data = _read_json(path, f"{path}")
    if not isinstance(data, dict):
        raise CheckInputError(f"{path} is not the plan object `inferstack render` writes")
    return data


def load_policy_config(path: Path) -> dict[str, Any]:
    data = _read_json(path, f"policy config {path}")
    if not isinstance(data, dict):
        raise CheckInputError(f"policy config {path} is not an object of policy name -> settings")
    return data


def spec_policy_config(spec: StackSpec) -> dict[str, Any]:
    """The pack config a stack implies: its budget, and the replicas each service's SLO needs."""
    budget = spec.budget
    stated = [p.model_dump(exclude_none=True) for p in budget.prices]
    config = {budget_at_max_scale.name: _budget_config(budget.max_usd_per_hour, budget.spot_discount, stated)}
    return config | ({slo_capacity.name: services} if (services := slo_spec_config(spec)) else {})


def plan_policy_config(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The same config from a plan.json written by `inferstack render` beside resources.json."""
    totals = plan.get("totals")
    totals = totals if isinstance(totals, Mapping) else {}
    stated = totals.get("stated_prices")
    config = {budget_at_max_scale.name: _budget_config(
        _number(totals.get("budget_usd_per_hour")), _number(totals.get("spot_discount_override")),
        [{k: v for k, v in p.items() if v is not None} for p in stated if isinstance(p, Mapping)]
        if isinstance(stated, list) else [],
    )}
    return config | ({slo_capacity.name: services} if (services := slo_plan_config(plan)) else {})


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _budget_config(
    max_usd_per_hour: float | None, spot_discount: float | None, stated_prices: list[dict[str, Any]]
) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if max_usd_per_hour is not None:
        config[MAX_USD_PER_HOUR] = max_usd_per_hour
    if spot_discount is not None:
        config[SPOT_DISCOUNT] = spot_discount
    if stated_prices:
        config[STATED_PRICES] = stated_prices
    return config


# ------------------------------------------------------------------------------ analyzer-shaped args


def _wire(value: Any) -> Any:
    """Recorded inputs -> what `json_format.MessageToDict(request.properties)` gives the analyzer: the
    engine's wire form after a protobuf Struct, where every number is a double. Recordings keep
    Pulumi's secret markers already; an in-memory recording may still hold Unknown outputs, which the
    engine sends as the unknown sentinel. (Built directly rather than through a Struct: the same
    values, at a fraction of the cost on a large stack; a test compares both.)"""
    if isinstance(value, Unknown):
        return UNKNOWN_STRING_VALUE
    if isinstance(value, Mapping):
        return {str(k): _wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_wire(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    raise CheckInputError(f"{value!r} ({type(value).__name__}) is not a value a Pulumi engine sends")


def _props(name: str, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    """Proxied props, built as the analyzer builds them from its request."""
    try:
        return unknown_checking_proxy(deserialize_properties(_wire(inputs)))
    except (AssertionError, CheckInputError) as error:  # hand-edited values the engine would never send
        raise CheckInputError(f"resource {name}: {error}") from None


@dataclass(frozen=True)
class _Entry:
    type: str
    name: str
    urn: str
    parent_urn: str | None
    dependency_urns: tuple[str, ...]
    props: Mapping[str, Any]
    protect: bool  # as the engine sends it: recorded, else false

    def options(self) -> PolicyResourceOptions:
        return PolicyResourceOptions(
            protect=self.protect,
            ignore_changes=[],
            delete_before_replace=None,
            aliases=[],
            custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
            additional_secret_outputs=[],
            parent=self.parent_urn,
        )


def _entries(resources: Sequence[Mapping[str, Any]], stack: str, project: str) -> list[_Entry]:
    """URNs as the engine forms them: the parent chain's types joined by '$' (the Stack itself excluded)."""
    by_name: dict[str, Mapping[str, Any]] = {}
    for resource in resources:
        by_name.setdefault(resource["name"], resource)

    def qualified_type(resource: Mapping[str, Any], seen: frozenset[str] = frozenset()) -> str:
        parent = by_name.get(resource.get("parent") or "")
        if parent is None or parent["name"] in seen or parent is resource:
            return resource["type"]
        return f"{qualified_type(parent, seen | {resource['name']})}${resource['type']}"

    def urn(resource: Mapping[str, Any]) -> str:
        return f"urn:pulumi:{stack}::{project}::{qualified_type(resource)}::{resource['name']}"

    entries = []
    for resource in resources:
        parent = by_name.get(resource.get("parent") or "")
        entries.append(
            _Entry(
                type=resource["type"],
                name=resource["name"],
                urn=urn(resource),
                parent_urn=urn(parent) if parent is not None else None,
                dependency_urns=tuple(urn(by_name[d]) for d in resource.get("depends_on") or () if d in by_name),
                props=_props(resource["name"], resource.get("inputs") or {}),
                protect=bool((resource.get("options") or {}).get("protect", False)),
            )
        )
    return entries


def _stack_resources(entries: Sequence[_Entry]) -> list[PolicyResource]:
    """PolicyResources with parent and dependencies pointing at each other, as AnalyzeStack resolves them."""
    resources = [PolicyResource(e.type, e.props, e.urn, e.name, e.options(), None, None, [], {}) for e in entries]
    by_urn = {r.urn: r for r in resources}
    for entry, resource in zip(entries, resources):
        resource.parent = by_urn.get(entry.parent_urn or "")
        resource.dependencies.extend(by_urn[u] for u in entry.dependency_urns if u in by_urn)
    return resources


# ------------------------------------------------------------------------------------------- config


def _level(value: Any) -> EnforcementLevel:
    try:
        return EnforcementLevel(value.value if isinstance(value, EnforcementLevel) else value)
    except (ValueError, TypeError):
        known = ", ".join(level.value for level in EnforcementLevel)
        raise CheckInputError(f"enforcement level {value!r} is not one of {known}") from None


def _normalize(config: Mapping[str, Any]) -> dict[str, tuple[EnforcementLevel | None, dict[str, Any]]]:
    """policy -> (level, properties) from {"policy": "advisory"} or {"policy": {"enforcementLevel": ..., ...}}."""
    normalized = {}
    for name, value in config.items():
        if isinstance(value, Mapping):
            level = _level(value["enforcementLevel"]) if "enforcementLevel" in value else None
            normalized[name] = (level, {k: v for k, v in value.items() if k != "enforcementLevel"})
        else:
            normalized[name] = (_level(value), {})
    return normalized


# ------------------------------------------------------------------------------------------- running


def _run(policy: Policy, args: Any, result: PolicyResult, report: Any) -> None:
    try:
        outcome = policy.validate(args, report)
        if isawaitable(outcome):
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(outcome)
            finally:
                loop.close()
    except UnknownValueError as error:
        _note(result, f"can't run policy '{policy.name}' from policy pack '{PACK_NAME}' during preview: {error.message}")
    except _NotApplicableError as error:
        _note(result, f"not applicable: {error.reason or 'Policy does not apply'}")


def _note(result: PolicyResult, note: str) -> None:
    if note not in result.notes:
        result.notes.append(note)


@rare_collections()  # it builds a proxy tree per resource over a heap that holds the whole run
def run_policies(
    resources: Sequence[Mapping[str, Any]],
    stack: str,
    config: Mapping[str, Any] | None = None,
    policies: Sequence[Policy] = POLICIES,
    project: str = PROJECT,
) -> list[PolicyResult]:
    """Every policy's result over these registrations; disabled policies are listed without running."""
    normalized = _normalize(config or {})
    all_level = normalized.get(ALL_POLICIES, (None, {}))[0]
    entries = _entries(resources, stack, project)
    names = {e.urn: e.name for e in entries}
    stack_resources: list[PolicyResource] | None = None  # built when the first stack policy runs
    results = []
    for policy in policies:
        level, properties = normalized.get(policy.name, (None, {}))
        level = level or all_level or policy.enforcement_level or PACK_ENFORCEMENT
        if level == EnforcementLevel.REMEDIATE:
            level = EnforcementLevel.MANDATORY  # a violation left after remediation is reported as mandatory
        result = PolicyResult(policy.name, policy.description, level.value)
        results.append(result)
        if level == EnforcementLevel.DISABLED:
            continue
        policy_config = dict(properties) or None
        if isinstance(policy, ResourceValidationPolicy):
            for entry in entries:
                args = ResourceValidationArgs(
                    entry.type, entry.props, entry.urn, entry.name, entry.options(), None, policy_config, {}
                )
                _run(policy, args, result, _reporter(result, names, entry.name))
        elif isinstance(policy, StackValidationPolicy):
            if stack_resources is None:
                stack_resources = _stack_resources(entries)
            args = StackValidationArgs(list(stack_resources), policy_config, {})
            _run(policy, args, result, _reporter(result, names, None))
    return results


def _reporter(result: PolicyResult, names: Mapping[str, str], subject: str | None):
    """report_violation(message, urn=None): the URN (else the analyzed resource) names the resource."""

    def report(message: str, urn: str | None = None) -> None:
        resource = names.get(urn, urn) if urn else subject
        result.violations.append(Violation(resource, message))

    return report


def blocking(results: Sequence[PolicyResult]) -> bool:
    """Whether any mandatory policy was violated (`pulumi up` would stop)."""
    return any(r.blocking for r in results)


def as_json(results: Sequence[PolicyResult]) -> dict[str, Any]:
    return {"policies": [r.as_dict() for r in results]}
