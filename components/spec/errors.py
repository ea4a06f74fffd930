"""One clear message per bad spec: the field path, what is wrong, and the fix.

Cross-field checks raise `SpecError` (pydantic lets exceptions other than ValueError pass through
untouched, so the path we computed survives); pydantic's own errors are turned into the same shape
by `describe_validation_error`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ValidationError


class SpecError(Exception):
    """A stack spec that cannot be deployed, located by its field path."""

    def __init__(self, path: str, problem: str, fix: str) -> None:
        self.path = path
        self.problem = problem
        self.fix = fix
        super().__init__(f"{path}: {problem}. To fix: {fix}")


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


def _model_at(root: type[BaseModel] | None, loc: Sequence[str | int]) -> type[BaseModel] | None:
    """Walk the model classes along `loc` to find the model that owns the last field."""
    model = root
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return model
        model = _first_model(field.annotation)
    return model


def _first_model(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


# Pydantic names union members and wrapped validators in error locations ("constrained-int",
# "literal['auto']", "function-after[...]"); they are not fields the user wrote.
_UNION_MEMBER = re.compile(r"^(constrained-\w+|literal\[.*\]|int|str|float|bool|none|(function|nullable|lax-or-strict)[-\w]*\[.*\])$")


def _field_loc(loc: Sequence[str | int]) -> list[str | int]:
    return [p for p in loc if not (isinstance(p, str) and _UNION_MEMBER.match(p))]


def describe_validation_error(error: ValidationError, root: type[BaseModel] | None = None) -> SpecError:
    """Turn pydantic's first error into a SpecError; the count of further errors is appended."""
    errors = error.errors(include_url=False)
    first = errors[0]
    loc = _field_loc(first["loc"])
    kind = first["type"]
    message = first["msg"]
    if kind == "extra_forbidden":
        owner = _model_at(root, loc[:-1]) if root is not None else None
        known = list(owner.model_fields) if owner is not None else []
        name = str(loc[-1])
        problem = f"unknown field {name!r}{did_you_mean(name, known)}"
        fix = f"remove it; the fields allowed here are {quoted(known)}" if known else "remove it"
    elif kind == "missing":
        problem = "is required but missing"
        fix = "set it (see `inferstack schema` for its description)"
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
        text = message.removeprefix("Value error, ")
        problem, _, fix = text.partition(". To fix: ")
        fix = fix or "correct the value"
    else:
        problem = f"{message} (got {first.get('input')!r})"
        fix = "correct the value's type or range"
    more = len({tuple(_field_loc(e["loc"])) for e in errors}) - 1
    if more:
        fix += f" ({more} more problem{'s' if more > 1 else ''} after this one)"
    return SpecError(format_path(loc), problem, fix)
