"""`python -m inferstack.planning.calibrate`: refit the step model's constants and measure it out of sample.

The stated constants in engine_step are this fit, rounded: it minimises a robust loss of log(modelled /
measured) over the counted vLLM points (soft L1 with scale 0.15, so a few odd points do not steer it), by
Levenberg-Marquardt on the constants' logarithms. Only the
constants some counted point exercises are fitted (a kernel family, a link kind, the MoE kernels);
the others keep their sourced values. The prompt-attention share is sourced, not fitted.

`--leave-one-source-out` refits without each publisher in turn and predicts that publisher's points:
the out-of-sample error the plan states. `--write` records those ratios, with the stated constants'
in-sample ratios they were computed beside, in catalog/model_accuracy.json (a test keeps the two in step:
change the model or the table and rerun this).
"""

from __future__ import annotations

import argparse
import json
import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from importlib.resources import files
from pathlib import Path
from types import MappingProxyType
from typing import Callable

from inferstack.catalog.measurements import MEASUREMENTS, Measurement
from inferstack.catalog.moe_kernels import MOE_FAMILIES
from inferstack.planning.accuracy import by_architecture, compare, counted, engine_of, summarize
from inferstack.planning.engine_step import STATED, StepConstants
from inferstack.planning.load import Engine

SOFT_L1_SCALE = 0.15
METHOD = (
    "leave one publisher out: every counted vLLM point is predicted by the step model with its constants refitted "
    "(planning/calibrate.py) on the points of every other publisher"
)


def _mapping(constants: StepConstants, field: str, key: str, value: float) -> StepConstants:
    updated = {**getattr(constants, field), key: value}
    return replace(constants, **{field: MappingProxyType(updated)})


@dataclass(frozen=True)
class Parameter:
    """One fitted constant: how to read it and how to set it (with the values tied to it), and which points
    exercise it (a constant no counted point exercises keeps its stated value)."""

    name: str
    read: Callable[[StepConstants], float]
    write: Callable[[StepConstants, float], StepConstants]
    exercised: Callable[[Engine], bool]


def _kernel(field: str, kernel: str, *tied: str) -> Parameter:
    def write(constants: StepConstants, value: float) -> StepConstants:
        for name in (kernel, *tied):
            constants = _mapping(constants, field, name, value)
        return constants

    return Parameter(
        f"{kernel} {field}", lambda c: getattr(c, field)[kernel], write,
        lambda engine: engine.shard.kernel.name in (kernel, *tied),
    )


def _scalar(field: str, exercised: Callable[[Engine], bool] = lambda engine: True) -> Parameter:
    return Parameter(field, lambda c: getattr(c, field), lambda c, v: replace(c, **{field: v}), exercised)


def _link(field: str, kind: str) -> Parameter:
    return Parameter(
        f"{kind} {field}", lambda c: getattr(c, field)[kind], lambda c, v: _mapping(c, field, kind, v),
        lambda engine: engine.shard.link is not None and engine.shard.link.kind == kind,
    )


def _moe(engine: Engine) -> bool:
    return engine.shard.experts is not None


def _moe_family(family: str) -> Parameter:
    return Parameter(
        f"{family} moe_compute_share", lambda c: c.moe_compute_share[family],
        lambda c, v: _mapping(c, "moe_compute_share", family, v),
        lambda engine: engine.shard.experts is not None and engine.shard.experts.family == family,
    )


PARAMETERS = (
    _kernel("bandwidth_share", "16-bit", "w8a8-fp8", "w8a8-int8"),
    _kernel("compute_share", "16-bit"),
    _kernel("compute_share", "w8a8-fp8", "w8a8-int8"),
    _kernel("compute_share", "w8a16-marlin"),
    _kernel("bandwidth_share", "w4a16-marlin", "w8a16-marlin"),
    _kernel("compute_share", "w4a16-marlin"),
    _scalar("moe_bandwidth_share", _moe),
    *(_moe_family(family) for family in MOE_FAMILIES),
    _scalar("kv_bandwidth_share"),
    _scalar("moe_layer_overhead_seconds", _moe),
    _scalar("mla_layer_overhead_seconds", lambda engine: engine.shard.latent_attention),
    _scalar("sequence_overhead_seconds"),
    _link("all_reduce_seconds", "nvlink"),
    _link("all_reduce_seconds", "pcie"),
    _link("link_share", "pcie"),
)

Points = tuple[tuple[Measurement, Engine], ...]


@cache
def counted_points() -> Points:
    return tuple((point, engine_of(point)) for point in MEASUREMENTS if counted(point))


def fitted_parameters(points: Points) -> tuple[Parameter, ...]:
    return tuple(p for p in PARAMETERS if any(p.exercised(engine) for _, engine in points))


def log_ratios(constants: StepConstants, points: Points) -> list[float]:
    return [math.log(compare(point, replace(engine, constants=constants)).ratio) for point, engine in points]


def soft_l1(ratios: list[float]) -> float:
    """The robust loss of log ratios: quadratic near 0, linear past SOFT_L1_SCALE."""
    return sum(2 * SOFT_L1_SCALE**2 * (math.sqrt(1 + (r / SOFT_L1_SCALE) ** 2) - 1) for r in ratios) / len(ratios)


def loss(constants: StepConstants, points: Points) -> float:
    return soft_l1(log_ratios(constants, points))


def _upper(parameter: Parameter) -> float:
    """A share cannot pass 1; times have no ceiling."""
    return 1.0 if "share" in parameter.name else math.inf


def _weights(ratios: list[float]) -> list[float]:
    """Iteratively reweighted least squares for soft L1: each point weighs 1 / sqrt(1 + (r / scale)^2)."""
    return [1 / math.sqrt(1 + (r / SOFT_L1_SCALE) ** 2) for r in ratios]


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting: the normal equations of a few dozen constants."""
    n = len(vector)
    rows = [row[:] + [value] for row, value in zip(matrix, vector)]
    for column in range(n):
        pivot = max(range(column, n), key=lambda r: abs(rows[r][column]))
        rows[column], rows[pivot] = rows[pivot], rows[column]
        if rows[column][column] == 0:
            continue
        for r in range(column + 1, n):
            factor = rows[r][column] / rows[column][column]
            for c in range(column, n + 1):
                rows[r][c] -= factor * rows[column][c]
    solution = [0.0] * n
    for r in reversed(range(n)):
        if rows[r][r] == 0:
            continue
        solution[r] = (rows[r][n] - sum(rows[r][c] * solution[c] for c in range(r + 1, n))) / rows[r][r]
    return solution


def _at(parameters: tuple[Parameter, ...], start: StepConstants, logs: list[float]) -> StepConstants:
    constants = start
    for parameter, value in zip(parameters, logs):
        constants = parameter.write(constants, math.exp(value))
    return constants


def refit(points: Points, start: StepConstants = STATED, iterations: int = 40) -> StepConstants:
    """Levenberg-Marquardt on the logarithms of the constants the points exercise, the robust loss by iteratively
    reweighted least squares, the Jacobian by forward differences; shares are kept at or below 1."""
    parameters = fitted_parameters(points)
    logs = [math.log(p.read(start)) for p in parameters]
    ceilings = [math.log(_upper(p)) for p in parameters]
    floors = [value - math.log(1e6) for value in logs]
    base = log_ratios(_at(parameters, start, logs), points)
    best = loss(start, points)
    damping = 1e-2
    for _ in range(iterations):
        weights = _weights(base)
        columns = []
        for j in range(len(parameters)):
            step = 1e-3 if logs[j] + 1e-3 <= ceilings[j] else -1e-3
            moved = logs[:j] + [logs[j] + step] + logs[j + 1:]
            columns.append([(a - b) / step for a, b in zip(log_ratios(_at(parameters, start, moved), points), base)])
        normal = [[sum(w * a * b for w, a, b in zip(weights, ci, cj)) for cj in columns] for ci in columns]
        gradient = [-sum(w * a * r for w, a, r in zip(weights, ci, base)) for ci in columns]
        improved = False
        while damping < 1e6:
            damped = [[value * (1 + damping) if i == j else value for j, value in enumerate(row)]
                      for i, row in enumerate(normal)]
            delta = _solve(damped, gradient)
            # A step moves no constant more than e-fold, and none below a millionth of where the fit began.
            trial = [min(c, max(floor, value + max(-1.0, min(1.0, d))))
                     for value, d, c, floor in zip(logs, delta, ceilings, floors)]
            trial_ratios = log_ratios(_at(parameters, start, trial), points)
            trial_loss = soft_l1(trial_ratios)
            if trial_loss < best:
                improvement = best - trial_loss
                logs, base, best, damping, improved = trial, trial_ratios, trial_loss, max(damping / 3, 1e-6), True
                break
            damping *= 4
        if not improved or improvement < 1e-7:
            break
    return _at(parameters, start, logs)


def _held_out_ratios(publisher: str) -> dict[str, tuple[float, float | None]]:
    """The publisher's points under constants refitted on every other publisher's."""
    others = tuple(entry for entry in counted_points() if entry[0].publisher != publisher)
    fitted = refit(others)
    ratios = {}
    for point, engine in counted_points():
        if point.publisher == publisher:
            row = compare(point, replace(engine, constants=fitted))
            ratios[point.id] = (row.ratio, row.latency_ratio)
    return ratios


def publishers() -> list[str]:
    return list(dict.fromkeys(point.publisher for point, _ in counted_points()))


def leave_one_source_out(workers: int = 2) -> dict[str, tuple[float, float | None]]:
    """Each counted point's (ratio, latency ratio) under constants refitted without its publisher."""
    ratios: dict[str, tuple[float, float | None]] = {}
    with ProcessPoolExecutor(workers) as pool:
        for part in pool.map(_held_out_ratios, publishers()):
            ratios.update(part)
    return {point.id: ratios[point.id] for point, _ in counted_points()}


def in_sample_ratios(constants: StepConstants = STATED) -> dict[str, float]:
    return {point.id: compare(point, replace(engine, constants=constants)).ratio for point, engine in counted_points()}


def write_accuracy(held_out: dict[str, tuple[float, float | None]], path: Path) -> None:
    record = {
        "what": "The throughput model's out-of-sample accuracy, as `python -m inferstack.planning.calibrate "
                "--leave-one-source-out --write` computed it; the plan states it (planning/accuracy.py).",
        "method": METHOD,
        "publishers": len(publishers()),
        "leave_one_publisher_out": {
            "ratios": {i: round(r, 4) for i, (r, _) in held_out.items()},
            "latency_ratios": {i: round(lr, 4) for i, (_, lr) in held_out.items() if lr is not None},
        },
        "in_sample_ratios": {i: round(r, 4) for i, r in in_sample_ratios().items()},
    }
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def _summary(ratios: dict[str, float]) -> str:
    accuracy = summarize(ratios, {})
    within = sum(max(r, 1 / r) <= 1.5 for r in ratios.values())
    return (f"median error {accuracy.median_error:.1%}, worst {accuracy.worst_factor:.2f}x "
            f"({accuracy.worst_point}), {within} of {len(ratios)} within 1.5x")


def _by_class(ratios: dict[str, float]) -> None:
    for kind, ids in by_architecture(ratios).items():
        if ids:
            print(f"    {kind:5s}: {_summary({i: ratios[i] for i in ids})}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferstack.planning.calibrate", description=__doc__.split("\n")[0])
    parser.add_argument("--leave-one-source-out", action="store_true",
                        help="also predict each publisher's points from a refit on the others (minutes)")
    parser.add_argument("--write", action="store_true",
                        help="with --leave-one-source-out: record the result in catalog/model_accuracy.json")
    args = parser.parse_args(argv)
    points = counted_points()
    fitted = refit(points)
    for parameter in PARAMETERS:
        note = "" if parameter in fitted_parameters(points) else "  (no counted point exercises it: stated)"
        print(f"{parameter.name:36s} stated {parameter.read(STATED):.6g}  refit {parameter.read(fitted):.6g}{note}")
    stated, refitted = in_sample_ratios(), in_sample_ratios(fitted)
    print(f"in sample, stated: {_summary(stated)}")
    _by_class(stated)
    print(f"in sample, refit:  {_summary(refitted)}")
    if args.leave_one_source_out:
        held_out = leave_one_source_out()
        for point_id, (ratio, _) in held_out.items():
            print(f"  {point_id:44s} in sample {stated[point_id]:.3f}  out of sample {ratio:.3f}")
        ratios = {i: r for i, (r, _) in held_out.items()}
        print(f"out of sample ({len(publishers())} publishers, each left out in turn): {_summary(ratios)}")
        _by_class(ratios)
        if args.write:
            write_accuracy(held_out, Path(str(files("inferstack.catalog").joinpath("model_accuracy.json"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
