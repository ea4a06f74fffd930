"""`python -m inferstack.planning.calibrate`: refit the step model's constants to the measurement table.

The stated constants in engine_step are this fit, rounded: it minimises a robust loss of log(modelled /
measured) over the counted points (soft L1 with scale 0.15, so a few odd points do not steer it), plus a
steep penalty past 1.35x either way, by coordinate descent in multiplicative steps. The prompt-attention
share and NVLink's share of line rate are sourced, not fitted; Marlin W8A16 streams weights at Marlin
W4A16's share and INT8 W8A8 runs as FP8 W8A8, since no published point fixes them apart.
Run it after adding measurements; it prints each constant as stated and as refitted, and both accuracies;
`--leave-one-source-out` also predicts each source from a refit on the others.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from dataclasses import dataclass, replace
from functools import cache
from types import MappingProxyType
from typing import Callable

from inferstack.catalog.measurements import MEASUREMENTS, Measurement
from inferstack.planning.accuracy import compare, engine_of
from inferstack.planning.engine_step import STATED, StepConstants
from inferstack.planning.load import Engine

SOFT_L1_SCALE = 0.15
PENALTY_BEYOND = math.log(1.35)
PENALTY_WEIGHT = 36.0
STEPS = (0.2, 0.1, 0.05, 0.02, 0.01)


def _mapping(constants: StepConstants, field: str, key: str, value: float) -> StepConstants:
    updated = {**getattr(constants, field), key: value}
    return replace(constants, **{field: MappingProxyType(updated)})


@dataclass(frozen=True)
class Parameter:
    """One fitted constant: how to read it and how to set it (with the values tied to it)."""

    name: str
    read: Callable[[StepConstants], float]
    write: Callable[[StepConstants, float], StepConstants]


def _kernel(field: str, kernel: str, *tied: str) -> Parameter:
    def write(constants: StepConstants, value: float) -> StepConstants:
        for name in (kernel, *tied):
            constants = _mapping(constants, field, name, value)
        return constants

    return Parameter(f"{kernel} {field}", lambda c: getattr(c, field)[kernel], write)


def _scalar(field: str) -> Parameter:
    return Parameter(field, lambda c: getattr(c, field), lambda c, v: replace(c, **{field: v}))


def _link(field: str, kind: str) -> Parameter:
    return Parameter(f"{kind} {field}", lambda c: getattr(c, field)[kind], lambda c, v: _mapping(c, field, kind, v))


PARAMETERS = (
    _kernel("bandwidth_share", "16-bit"),
    _kernel("compute_share", "16-bit"),
    _kernel("bandwidth_share", "w8a8-fp8", "w8a8-int8"),
    _kernel("compute_share", "w8a8-fp8", "w8a8-int8"),
    _kernel("compute_share", "w8a16-marlin"),
    _kernel("bandwidth_share", "w4a16-marlin", "w8a16-marlin"),
    _kernel("compute_share", "w4a16-marlin"),
    _scalar("kv_bandwidth_share"),
    _scalar("step_overhead_seconds"),
    _scalar("sequence_overhead_seconds"),
    _link("all_reduce_seconds", "nvlink"),
    _link("all_reduce_seconds", "pcie"),
    _link("link_share", "pcie"),
)


@cache
def _counted() -> Points:
    return tuple((point, engine_of(point)) for point in MEASUREMENTS if point.held_out is None)


Points = tuple[tuple[Measurement, Engine], ...]


def log_ratios(constants: StepConstants, points: Points | None = None) -> list[float]:
    return [
        math.log(compare(point, replace(engine, constants=constants)).ratio) for point, engine in points or _counted()
    ]


def loss(constants: StepConstants, points: Points | None = None) -> float:
    total = 0.0
    ratios = log_ratios(constants, points)
    for r in ratios:
        total += 2 * SOFT_L1_SCALE**2 * (math.sqrt(1 + (r / SOFT_L1_SCALE) ** 2) - 1)
        total += PENALTY_WEIGHT * max(0.0, abs(r) - PENALTY_BEYOND) ** 2
    return total / len(ratios)


def _bounded(parameter: Parameter, value: float) -> bool:
    return value > 0 and not ("share" in parameter.name and value > 1)


def refit(start: StepConstants = STATED, points: Points | None = None) -> StepConstants:
    """Coordinate descent from `start`: each constant moved by shrinking multiplicative steps while it helps."""
    best, best_loss = start, loss(start, points)
    for step in STEPS:
        improved = True
        while improved:
            improved = False
            for parameter in PARAMETERS:
                for factor in (1 + step, 1 - step):
                    value = parameter.read(best) * factor
                    if not _bounded(parameter, value):
                        continue
                    candidate = parameter.write(best, value)
                    candidate_loss = loss(candidate, points)
                    if candidate_loss < best_loss:
                        best, best_loss, improved = candidate, candidate_loss, True
                        break
    return best


def _summary(constants: StepConstants) -> str:
    ratios = [math.exp(r) for r in log_ratios(constants)]
    median = statistics.median(abs(r - 1) for r in ratios)
    return f"median error {median:.1%}, worst {max(max(r, 1 / r) for r in ratios):.3f}x, loss {loss(constants):.5f}"


def source_of(point: Measurement) -> str:
    """A point's source: its id without the trailing index."""
    return re.sub(r"-\d+$", "", point.id)


def leave_one_source_out() -> dict[str, float]:
    """Each counted point's ratio under constants refitted without its source: the out-of-sample error."""
    ratios = {}
    for source in dict.fromkeys(source_of(point) for point, _ in _counted()):
        others = tuple(entry for entry in _counted() if source_of(entry[0]) != source)
        fitted = refit(STATED, others)
        for point, engine in _counted():
            if source_of(point) == source:
                ratios[point.id] = compare(point, replace(engine, constants=fitted)).ratio
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferstack.planning.calibrate", description=__doc__.split("\n")[0])
    parser.add_argument("--leave-one-source-out", action="store_true",
                        help="also predict each source from a refit on the others (minutes)")
    args = parser.parse_args(argv)
    fitted = refit()
    for parameter in PARAMETERS:
        print(f"{parameter.name:36s} stated {parameter.read(STATED):.6g}  refit {parameter.read(fitted):.6g}")
    print(f"stated: {_summary(STATED)}")
    print(f"refit:  {_summary(fitted)}")
    if args.leave_one_source_out:
        ratios = leave_one_source_out()
        within = sum(max(r, 1 / r) <= 1.5 for r in ratios.values())
        for point_id, ratio in ratios.items():
            print(f"  {point_id:40s} {ratio:.3f}")
        print(f"leave one source out: median error {statistics.median(abs(r - 1) for r in ratios.values()):.1%}, "
              f"worst {max(max(r, 1 / r) for r in ratios.values()):.2f}x, {within} of {len(ratios)} within 1.5x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
