"""One clear message per bad spec: the field path, what is wrong, and the fix.

Cross-field checks raise `SpecError` (pydantic lets exceptions other than ValueError pass through
untouched, so the path we computed survives); pydantic's own errors are turned into the same shape
by `describe_validation_error`.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field as dc_field

from pydantic import BaseModel, Tag, ValidationError
from pydantic.fields import FieldInfo


class SpecError(Exception):
    """A stack spec that cannot be deployed, located by its field path."""

    def __init__(self, path: str, problem: str, fix: str) -> None:
        self.path = path
        self.problem = problem
        self.fix = fix
        super().__init__(f"{path}: {problem}. To fix: {fix}")

    @property
    def refusals(self) -> tuple[SpecError, ...]:
        """Each refusal this error reports, one per line of its message."""
        return (self,)

    def relocated(self, path_of: Callable[[str], str]) -> SpecError:
        """The same refusal with its path rewritten (e.g. prefixed with the stack file that holds the field)."""
        return SpecError(path_of(self.path), self.problem, self.fix)


class SpecErrors(SpecError):
    """Several independent refusals of one stack, found in one validation run, in the order the checks ran.

    It reads as its first refusal (path, problem, fix) where one is expected; its message has one line each.
    """

    def __init__(self, refusals: Sequence[SpecError], hidden: int = 0) -> None:
        self._refusals = tuple(refusals)
        self.hidden = max(hidden, 0)  # found beyond the ones reported
        first = self._refusals[0]
        self.path, self.problem, self.fix = first.path, first.problem, first.fix
        lines = [str(refusal) for refusal in self._refusals]
        if self.hidden:
            lines.append(f"{self.hidden} more problem{'s' if self.hidden > 1 else ''} not shown. To fix: mend these "
                         "and run again")
        Exception.__init__(self, "\n".join(lines))

    @property
    def refusals(self) -> tuple[SpecError, ...]:
        return self._refusals

    def relocated(self, path_of: Callable[[str], str]) -> SpecError:
        return SpecErrors([refusal.relocated(path_of) for refusal in self._refusals], self.hidden)


def refused(refusals: Sequence[SpecError], hidden: int = 0) -> SpecError:
    """One refusal as itself, several as one SpecErrors."""
    return refusals[0] if len(refusals) == 1 and hidden <= 0 else SpecErrors(refusals, hidden)


def refusals_of(*checks: Callable[[], object]) -> list[SpecError]:
    """Run independent checks, each raising SpecError at its first problem: every refusal they raise, in order."""
    found: list[SpecError] = []
    for check in checks:
        try:
            check()
        except SpecError as error:
            found.extend(error.refusals)
    return found


def format_path(loc: Sequence[str | int]) -> str:
    """('node_pools', 0, 'max_nodes') -> 'node_pools[0].max_nodes'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(spec)"


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix when a close match exists, else ''."""
    matches = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""


def quoted(values: Iterable[str]) -> str:
    return ", ".join(repr(v) for v in values) or "(none)"


# Pydantic names union members and wrapped validators in error locations ("constrained-int",
# "literal['auto']", "function-after[...]"); they are not fields the user wrote.
_UNION_MEMBER = re.compile(r"^(constrained-\w+|literal\[.*\]|int|str|float|bool|none|(function|nullable|lax-or-strict)[-\w]*\[.*\])$")

# What each string pattern of the spec means, said as a person would (the schema keeps the regex).
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
PATTERN_SENTENCES: dict[str, str] = {
    DNS_LABEL_PATTERN:
        "a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit; e.g. 'llama-8b'",
    r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$":
        "an S3 bucket name: 3 to 63 lower-case letters, digits, '.' and '-', starting and ending with a letter "
        "or digit; e.g. 'acme-model-weights'",
    r"^s3://\S*$": "an S3 URI: 's3://', a bucket name and a key prefix, without spaces; e.g. "
                    "'s3://acme-model-weights/llama-8b'",
    r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}|@sha256:[a-f0-9]{64})$":
        "an image reference pinned to a tag or a digest, in lower case; e.g. 'python:3.13.1-slim' or "
        "'python@sha256:' followed by 64 hex digits",
    r"^[a-z]{2}(-gov)?-[a-z]+-\d$": "an AWS region name; e.g. 'us-east-1'",
    r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$": "an availability zone name: a region and a letter; e.g. 'us-east-1a'",
    r"^\d{1,3}(\.\d{1,3}){3}/(1[6-9]|2[0-4])$": "an IPv4 CIDR with a prefix from /16 to /24; e.g. '10.0.0.0/16'",
    r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$": "an IPv4 CIDR: an address and a prefix length; e.g. '10.0.32.0/19'",
    r"^subnet-[0-9a-f]{8,17}$": "a subnet id: 'subnet-' and 8 to 17 hex digits; e.g. 'subnet-0123456789abcdef0'",
    r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$":
        "an IAM role ARN: an account of 12 digits and a role name; e.g. 'arn:aws:iam::123456789012:role/ci-deploy'",
    r"^cr-[0-9a-f]{8,17}$": "a capacity reservation id: 'cr-' and 8 to 17 hex digits; e.g. 'cr-0123456789abcdef0'",
    r"^1\.\d{2}$": "a Kubernetes minor version, as a string; e.g. '1.36'",
    r"^\d+\.\d+$": "a CUDA compute capability: major.minor, as a string; e.g. '9.0'",
    r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$":
        "an EKS cluster name: up to 100 letters, digits, '-' and '_', starting with a letter or digit; e.g. 'prod-eks'",
    r"^https?://": "an http:// or https:// URL; e.g. 'http://prometheus.monitoring:9090'",
}


def _models_in(annotation) -> list[type[BaseModel]]:
    """Every model class an annotation can hold (through Optional, Union, list, dict and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += [m for m in _models_in(arg) if m not in found]
    return found


def _member_labels(field: FieldInfo | None, members: list[type[BaseModel]]) -> dict[str, type[BaseModel]]:
    """The names pydantic gives union members in locations: their Tag, discriminator value or class name."""
    labels = {m.__name__: m for m in members}
    if field is None:
        return labels

    def tags(annotation) -> None:
        if typing.get_origin(annotation) is typing.Annotated:
            inner, *metadata = typing.get_args(annotation)
            for item in metadata:
                if isinstance(item, Tag) and _models_in(inner):
                    labels[item.tag] = _models_in(inner)[0]
            tags(inner)
        for arg in typing.get_args(annotation):
            tags(arg)

    tags(field.annotation)
    discriminator = field.discriminator if isinstance(field.discriminator, str) else "mode"
    for member in members:
        tag_field = member.model_fields.get(discriminator)
        if tag_field is not None and typing.get_origin(tag_field.annotation) is typing.Literal:
            labels.update({str(value): member for value in typing.get_args(tag_field.annotation)})
    return labels


@dataclass
class _Place:
    """A pydantic location read against the models: the path the user wrote and what sits there."""

    path: list[str | int] = dc_field(default_factory=list)
    owners: list[type[BaseModel]] = dc_field(default_factory=list)  # models the last part is a field of
    field: FieldInfo | None = None                                   # the last part's field, when it is one


def _locate(root: type[BaseModel] | None, loc: Sequence[str | int]) -> _Place:
    """Drop union member names and tags from `loc`, following the member they select."""
    place = _Place()
    candidates: list[type[BaseModel]] = [root] if root is not None else []
    field: FieldInfo | None = None
    for part in loc:
        if isinstance(part, int):
            place.path.append(part)
            continue
        owner = next((m for m in candidates if part in m.model_fields), None)
        if owner is not None:
            field = owner.model_fields[part]
            place.path.append(part)
            place.owners, place.field = [owner], field
            candidates = _models_in(field.annotation)
            continue
        member = _member_labels(field, candidates).get(part)
        if member is not None:
            candidates = [member]
            continue
        if _UNION_MEMBER.match(part):
            continue
        place.path.append(part)  # a key of a mapping, or a field no model here has
        place.owners, place.field = candidates, None
    return place


def _normal(name: str) -> str:
    """'maxNodes', 'max-nodes' and 'Max_Nodes' all read as 'max_nodes'."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).replace("-", "_").lower()


def closest_field(name: str, fields: Sequence[str]) -> str | None:
    """The field a misspelt name most likely meant: same words in another case, a close spelling, or a prefix."""
    by_normal = {_normal(f): f for f in fields}
    if _normal(name) in by_normal:
        return by_normal[_normal(name)]
    matches = difflib.get_close_matches(_normal(name), list(by_normal), n=1, cutoff=0.6)
    if matches:
        return by_normal[matches[0]]
    prefixed = [f for f in fields if len(name) >= 3 and _normal(f).startswith(_normal(name))]
    return prefixed[0] if len(prefixed) == 1 else None


def _pattern_problem(value: object, pattern: str, field: FieldInfo | None) -> tuple[str, str]:
    sentence = PATTERN_SENTENCES.get(pattern)
    if sentence is None:
        described = field.description if field is not None and field.description else "see `inferstack schema`"
        return f"{value!r} is not in the form this field takes", f"write it as the field describes: {described}"
    suggestion = re.sub(r"[^a-z0-9]+", "-", str(value).lower()).strip("-") if pattern == DNS_LABEL_PATTERN else ""
    if suggestion and re.fullmatch(pattern, suggestion):
        return f"{value!r} is not {sentence}", f"write it as {suggestion!r}"
    return f"{value!r} is not {sentence}", "write the value in that form"


# What to write instead, per pydantic error type (pydantic_core's ErrorType names).
_TYPE_FIXES = {
    ("int_parsing", "int_type", "int_from_float"): "write a whole number without quotes, e.g. 2",
    ("float_parsing", "float_type"): "write a number without quotes, e.g. 0.8",
    ("bool_parsing", "bool_type"): "write true or false",
    ("string_type",): "write it as text, in quotes",
    ("dict_type", "model_type", "model_attributes_type"): "write it as a mapping of its fields (see `inferstack schema`)",
    ("finite_number",): "write a finite number",
}
_RANGE_FIXES = {
    "greater_than": ("gt", "use a value greater than {}"),
    "greater_than_equal": ("ge", "use {} or more"),
    "less_than": ("lt", "use a value less than {}"),
    "less_than_equal": ("le", "use {} or less"),
    "too_short": ("min_length", "give at least {} item"),
    "too_long": ("max_length", "give at most {} item"),
    "string_too_short": ("min_length", "use at least {} character"),
    "string_too_long": ("max_length", "use at most {} character"),
}


def _type_or_range_fix(kind: str, ctx: dict, value: object) -> str:
    """The change that makes a value of the wrong type or out of range valid, with the bound it must meet."""
    if kind == "list_type":
        return f"write it as a list: [{value}]" if isinstance(value, (str, int, float)) else "write it as a list"
    if kind in _RANGE_FIXES:
        key, text = _RANGE_FIXES[kind]
        bound = ctx.get(key)
        fix = text.format(f"{bound:g}" if isinstance(bound, float) else bound)
        return fix + "s" if fix.endswith(("item", "character")) and bound != 1 else fix
    for kinds, fix in _TYPE_FIXES.items():
        if kind in kinds:
            return fix
    return "correct the value (`inferstack schema` describes the field)"


def describe_validation_error(error: ValidationError, root: type[BaseModel] | None = None) -> SpecError:
    """Turn pydantic's first error into a SpecError; the count of further errors is appended.

    A missing required field and an unknown field beside it that is probably the same field misspelt are
    reported together, as one problem.
    """
    errors = error.errors(include_url=False)
    places = [_locate(root, e["loc"]) for e in errors]
    first, place = errors[0], places[0]
    kind = first["type"]
    path = list(place.path)
    paired: tuple[str, str] | None = None  # (unknown field, required field it probably means)
    if kind in ("missing", "extra_forbidden"):
        paired = _misspelt_required(errors, places, 0)
    if paired is not None:
        unknown, required = paired
        path = path[:-1] + [unknown]
        problem = f"unknown field {unknown!r}, and the required field {required!r} is missing"
        fix = f"rename {unknown!r} to {required!r}"
    elif kind == "extra_forbidden":
        owner = place.owners[0] if len(place.owners) == 1 else None
        known = list(owner.model_fields) if owner is not None else []
        name = str(path[-1])
        meant = closest_field(name, known)
        problem = f"unknown field {name!r}" + (f" (did you mean {meant!r}?)" if meant else "")
        fix = f"remove it; the fields allowed here are {quoted(known)}" if known else "remove it"
        if meant:
            fix = f"rename it to {meant!r}, or remove it; the fields allowed here are {quoted(known)}"
    elif kind == "missing":
        problem = "is required but missing"
        described = place.field.description if place.field is not None else None
        fix = f"set it: {described}" if described else "set it (see `inferstack schema` for its description)"
    elif kind == "string_pattern_mismatch":
        problem, fix = _pattern_problem(first.get("input"), first.get("ctx", {}).get("pattern", ""), place.field)
    elif kind in ("literal_error", "enum"):
        allowed = first.get("ctx", {}).get("expected", "")
        problem = f"{first.get('input')!r} is not allowed"
        fix = f"use one of {allowed}"
    elif kind == "union_tag_invalid":
        ctx = first.get("ctx", {})
        field = str(ctx.get("discriminator"))
        if field.endswith("()"):  # a callable discriminator, named after the field it reads
            field = repr(field.removesuffix("()"))
        problem = f"{ctx.get('tag')!r} is not a known {field}"
        fix = f"use one of {ctx.get('expected_tags')}"
    elif kind == "value_error":
        text = first["msg"].removeprefix("Value error, ")
        problem, _, fix = text.partition(". To fix: ")
        fix = fix or "correct the value"
    else:
        problem = f"{first['msg']} (got {first.get('input')!r})"
        fix = _type_or_range_fix(kind, first.get("ctx", {}), first.get("input"))
    seen = {tuple(p.path) for p in places}
    more = len(seen) - 1 - (1 if paired is not None else 0)
    if more > 0:
        fix += f" ({more} more problem{'s' if more > 1 else ''} after this one)"
    return SpecError(format_path(path), problem, fix)


def _misspelt_required(errors: list[dict], places: list[_Place], index: int) -> tuple[str, str] | None:
    """For a missing or unknown field at `index`: the (unknown, required) pair in the same object that is
    probably one field misspelt: a close spelling, or the only unknown and the only missing field there."""
    parent = tuple(places[index].path[:-1])

    def names(kind: str) -> list[str]:
        return [
            str(p.path[-1]) for e, p in zip(errors, places)
            if e["type"] == kind and p.path and tuple(p.path[:-1]) == parent
        ]

    missing, unknown = names("missing"), names("extra_forbidden")
    if not missing or not unknown:
        return None
    mine = str(places[index].path[-1])
    if errors[index]["type"] == "missing":
        meant = closest_field(mine, unknown) or (unknown[0] if len(missing) == len(unknown) == 1 else None)
        return (meant, mine) if meant else None
    meant = closest_field(mine, missing) or (missing[0] if len(missing) == len(unknown) == 1 else None)
    return (mine, meant) if meant else None
