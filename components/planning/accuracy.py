"""The throughput model held against published measurements: its error on each point, and in sum.

Each point of catalog/serving_measurements.json becomes the service a platform team would write for
it (model, precision, instance type, tensor parallelism, engine limits), sized by the same functions
the plan uses; the load model then runs the point's workload at its concurrency or request rate.
The figure compared is output tokens/s for closed-loop and offline points, and inter-token latency
for open-loop ones below saturation (where throughput is just the offered rate).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import cache

from inferstack.catalog.measurements import MEASUREMENTS, Measurement
from inferstack.planning.load import Engine, LoadPoint, Workload, at_concurrency, at_request_rate
from inferstack.planning.service_performance import engine_for
from inferstack.spec import ModelServiceSpec, NodePoolSpec
from inferstack.spec.pools import PoolHardware


@dataclass(frozen=True)
class Comparison:
    """The model's figure next to a measured one; ratio = modelled / measured."""

    measurement: Measurement
    figure: str                  # 'output tokens/s' or 'inter-token latency'
    measured: float
    modelled: float
    point: LoadPoint

    @property
    def ratio(self) -> float:
        return self.modelled / self.measured

    @property
    def error(self) -> float:
        """Relative error against the measured figure."""
        return abs(self.ratio - 1)

    @property
    def factor(self) -> float:
        """How many times off, either way (1.0 = exact)."""
        return max(self.ratio, 1 / self.ratio)

    @property
    def latency_ratio(self) -> float | None:
        """Modelled / measured inter-token latency, where the point publishes it."""
        if not self.measurement.itl_ms or self.point.inter_token_seconds is None:
            return None
        return self.point.inter_token_seconds * 1000 / self.measurement.itl_ms

    @property
    def first_token_ratio(self) -> float | None:
        """Modelled / measured time to first token, where the point publishes it and the model bounds it."""
        if not self.measurement.ttft_ms or math.isinf(self.point.first_token_seconds):
            return None
        return self.point.first_token_seconds * 1000 / self.measurement.ttft_ms


@dataclass(frozen=True)
class Accuracy:
    """The compared figure's error over the counted points, and inter-token latency's where published (what an
    SLO-sized estimate rests on)."""

    points: int
    median_error: float
    worst_factor: float
    worst_point: str
    held_out: int
    latency_points: int
    latency_median_error: float
    latency_worst_factor: float

    def short(self) -> str:
        return f"median error {self.median_error:.0%}, worst {self.worst_factor:.2f}x"

    def stated(self) -> str:
        return (
            f"{self.short()}, over {self.points} published measurements ({self.held_out} more held out); "
            f"inter-token latency median error {self.latency_median_error:.0%}, worst "
            f"{self.latency_worst_factor:.1f}x over {self.latency_points}"
        )


def service_for(point: Measurement) -> tuple[ModelServiceSpec, PoolHardware]:
    """The service spec and pool a platform team would write to serve the measured setup."""
    pool = NodePoolSpec(name="measured", instance_types=[point.instance_type], max_nodes=1)
    context = point.input_tokens + point.output_tokens
    model = ModelServiceSpec(
        name="measured",
        model=point.model,
        pool="measured",
        quantization=point.quantization,
        kv_cache_dtype=point.kv_cache_dtype,
        tensor_parallel=point.tensor_parallel,
        max_model_len=max(context, 2048),
        max_num_seqs=point.max_num_seqs,
        max_num_batched_tokens=point.max_num_batched_tokens,
        gpu_memory_utilization=point.gpu_memory_utilization,
    )
    return model, PoolHardware(pool)


def engine_of(point: Measurement) -> Engine:
    """The load model's replica for the measured setup, with the stated constants."""
    return engine_for(*service_for(point))


def compare(point: Measurement, engine: Engine | None = None) -> Comparison:
    """The model's figure beside the measured one, on `engine` (by default the point's, as stated)."""
    engine = engine or engine_of(point)
    workload = Workload(point.input_tokens, point.output_tokens)
    if point.concurrency is not None:
        state = at_concurrency(engine, workload, point.concurrency / point.replicas)
    else:
        state = at_request_rate(engine, workload, point.request_rate / point.replicas)
    open_loop_below_saturation = point.concurrency is None and not state.saturated
    if open_loop_below_saturation and point.itl_ms is not None:
        return Comparison(point, "inter-token latency", point.itl_ms, state.inter_token_seconds * 1000, state)
    if point.output_tokens_per_second is None:
        raise ValueError(f"measurement {point.id!r} states no figure the model can be compared with")
    return Comparison(
        point, "output tokens/s", point.output_tokens_per_second,
        state.output_tokens_per_second * point.replicas, state,
    )


@cache
def comparisons() -> tuple[Comparison, ...]:
    return tuple(compare(point) for point in MEASUREMENTS)


@cache
def accuracy() -> Accuracy:
    """The model's stated accuracy over the measurement table (printed beside every $/1M figure); held-out
    points are compared and shown, not counted."""
    rows = [row for row in comparisons() if row.measurement.held_out is None]
    worst = max(rows, key=lambda row: row.factor)
    latency = [row.latency_ratio for row in rows if row.latency_ratio is not None]
    return Accuracy(
        points=len(rows),
        median_error=statistics.median(row.error for row in rows),
        worst_factor=worst.factor,
        worst_point=worst.measurement.id,
        held_out=len(comparisons()) - len(rows),
        latency_points=len(latency),
        latency_median_error=statistics.median(abs(ratio - 1) for ratio in latency),
        latency_worst_factor=max(max(ratio, 1 / ratio) for ratio in latency),
    )
