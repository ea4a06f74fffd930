"""The CronJob schedule and time zone rules the Kubernetes API server applies, checked at spec time.

Kubernetes parses `spec.schedule` with robfig/cron v3's standard parser (5 fields: minute, hour, day of
month, month, day of week; `*` or `?`, lists, ranges, `/` steps, JAN-DEC and SUN-SAT names) and documents
the @yearly/@annually, @monthly, @weekly, @daily/@midnight and @hourly macros (robfig's `@every` is not
documented for CronJobs, so it is refused here). A schedule containing `TZ` (`TZ=`/`CRON_TZ=`) is refused in
favour of `spec.timeZone`, which must be an IANA zone name, not "Local". Sources: kubernetes/kubernetes
pkg/apis/batch/validation/validation.go (validateScheduleFormat, validateTimeZone); field bounds and syntax
from robfig/cron v3 parser.go and spec.go (vendored in kubernetes-sigs/kueue v0.19.2 vendor/github.com/robfig/cron/v3).
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from collections.abc import Mapping

MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


GO_INT_MAX = 2**63 - 1


@dataclass(frozen=True)
class CronField:
    name: str
    low: int
    high: int
    names: Mapping[str, int]


_MONTHS = {m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_DAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
FIELDS = (
    CronField("minute", 0, 59, {}),
    CronField("hour", 0, 23, {}),
    CronField("day of month", 1, 31, {}),
    CronField("month", 1, 12, _MONTHS),
    CronField("day of week", 0, 6, _DAYS),
)


def schedule_problem(schedule: str) -> str | None:
    """Why the API server would refuse this CronJob schedule, or None when it accepts it."""
    text = schedule.strip()
    if not text:
        return "the schedule is empty"
    if "TZ" in text:
        return "Kubernetes refuses TZ= or CRON_TZ= in a schedule"
    if text.startswith("@"):
        return None if text in MACROS else f"{text!r} is not one of the macros {', '.join(MACROS)}"
    fields = text.split()
    if len(fields) != len(FIELDS):
        return f"a schedule has 5 fields (minute hour day-of-month month day-of-week), this one has {len(fields)}"
    for value, field in zip(fields, FIELDS):
        for part in value.split(","):
            problem = _range_problem(part, field)
            if problem:
                return f"{field.name} {value!r}: {problem}"
    return None


def _range_problem(part: str, field: CronField) -> str | None:
    span, _, step = part.partition("/")
    if step and not (_decimal(step) and 0 < int(step) <= GO_INT_MAX):  # robfig/cron parses it with strconv.Atoi
        return f"step {step!r} is not a positive number"
    if "/" in step:
        return "more than one '/'"
    if span in ("*", "?"):
        return None
    bounds = span.split("-")
    if len(bounds) > 2:
        return f"{span!r} has more than one '-'"
    numbers = []
    for bound in bounds:
        number = field.names.get(bound.lower(), int(bound) if _decimal(bound) else None)
        if number is None:
            return f"{bound!r} is not a number" + (f" or a name ({'/'.join(field.names).upper()})" if field.names else "")
        if not field.low <= number <= field.high:
            return f"{number} is outside {field.low}-{field.high}"
        numbers.append(number)
    if numbers[0] > numbers[-1]:
        return f"range {span!r} runs backwards"
    return None


def time_zone_problem(name: str) -> str | None:
    """Why the API server would refuse this CronJob time zone, or None when it is an IANA zone."""
    if name.lower() == "local":
        return "'Local' is refused: the zone must be explicit"
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder such as 'Europe', or too long
        return f"{name!r} is not an IANA time zone"
    return None


def _decimal(text: str) -> bool:
    """ASCII digits only, as Go's strconv.Atoi reads them (Python's isdigit also takes other scripts' digits)."""
    return text.isascii() and text.isdigit()
