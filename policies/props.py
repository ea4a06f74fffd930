"""Reading resource props the way the policy analyzer hands them over.

The analyzer gives policies read-only proxies (a Mapping, not a dict; a Sequence, not a list),
every number as a float, and raises `UnknownValueError` when a value is not known yet during
preview. These helpers walk such values without crashing on missing keys or odd types. Unknown
values still raise, so the analyzer reports "can't run during preview" rather than a wrong verdict.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from pulumi_policy.proxy import UnknownValueError

EMPTY: Mapping[str, Any] = {}
Checked = TypeVar("Checked")


class UncheckedDuringPreview(UnknownValueError):
    """Some items of a stack policy held values unknown during preview: the analyzer notes them as it notes any
    unknown value (pulumi_policy policy.py: "can't run policy ... during preview: <message>"), after the
    violations already reported for the rest."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.message = message


def check_each(found: Iterable[Checked], check: Callable[[Checked], None]) -> None:
    """`check` on every item; one that reads a value unknown during preview is left out and the others checked,
    so one workload's unknown output does not hide another's violation."""
    skipped = []
    for item in found:
        try:
            check(item)
        except UnknownValueError as error:
            skipped.append(f"{item} was not checked ({error.message})")
    if skipped:
        raise UncheckedDuringPreview("; ".join(skipped))


def is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def mapping(value: Any) -> Mapping[str, Any]:
    """The value if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else EMPTY


def items(value: Any) -> Sequence[Any]:
    """The value if it is a list, else an empty one."""
    return value if is_list(value) else ()


def dig(value: Any, *path: str | int, default: Any = None) -> Any:
    """value[path[0]][path[1]]..., or `default` where a key is missing or a step has the wrong type."""
    for key in path:
        if isinstance(key, int):
            if not is_list(value) or not -len(value) <= key < len(value):
                return default
            value = value[key]
        else:
            if not isinstance(value, Mapping) or key not in value:
                return default
            value = value[key]
    return value


def text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def number(value: Any) -> float | None:
    """A finite number (the analyzer's floats, ints, or a numeric string), else None; booleans are not numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        found = float(value)
    except (ValueError, OverflowError):
        return None
    return found if math.isfinite(found) else None


def whole(value: Any, default: int | None = None) -> int | None:
    found = number(value)
    return default if found is None else int(found)


def string_map(value: Any) -> dict[str, str]:
    """A label-like map as plain str -> str (non-string values dropped)."""
    return {k: v for k, v in mapping(value).items() if isinstance(k, str) and isinstance(v, str)}


def leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every scalar under `value` with the key path that leads to it (list indexes as '[i]')."""
    if isinstance(value, Mapping):
        for key in value:
            yield from leaves(value[key], (*path, str(key)))
    elif is_list(value):
        for index, element in enumerate(value):
            yield from leaves(element, (*path, f"[{index}]"))
    else:
        yield path, value


def dotted(path: Sequence[str]) -> str:
    return ".".join(path).replace(".[", "[")


_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    None: 1,
}


def quantity(value: Any) -> float | None:
    """A Kubernetes quantity ('8', 8.0, '500m', '2Ti') as a number, else None."""
    found = number(value)
    if found is not None:
        return found
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    found = float(match.group(1)) * _SUFFIX[match.group(2)]
    return found if math.isfinite(found) else None


def count(value: float) -> str:
    """8.0 -> '8', 0.5 -> '0.5': numbers in messages as people write them."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
