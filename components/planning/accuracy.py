"""The throughput model held against published measurements: its error on each point, and in sum.

Each point of catalog/serving_measurements.json becomes the service a platform team would write for
it (model, precision, instance type, parallelism, engine limits), sized by the same functions the
plan uses; the load model then runs the point's workload at its concurrency or request rate. The
figure compared is output tokens/s for closed-loop and offline points, and inter-token latency for
open-loop ones below saturation (where throughput is just the offered rate) and for points that publish
only their latency.

The model is of vLLM, so only vLLM points count. Its stated accuracy is out of sample: each
publisher's points predicted by constants refitted without that publisher (leave one source out,
planning/calibrate.py), as catalog/model_accuracy.json records them; the in-sample error, on the
constants fitted to every point, is reported beside it and never stated alone. TensorRT-LLM, NIM and
SGLang points form another engine family: shown and summed apart, never fitted.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Iterable, Mapping

from inferstack.catalog.measurements import MEASUREMENTS, Measurement
from inferstack.planning.engine_step import step_time
from inferstack.planning.load import Engine, LoadPoint, Workload, admission_limit, at_concurrency, at_request_rate
from inferstack.planning.quantization import served_format
from inferstack.planning.service_performance import ServiceEstimate, engine_for
from inferstack.spec import ModelServiceSpec, NodePoolSpec
from inferstack.spec.pools import PoolHardware

VLLM = "vllm"
# Fewest points a per-service confidence figure rests on before it widens to a coarser class.
CONFIDENCE_POINTS = 5


@dataclass(frozen=True)
class Comparison:
    """The model's figure next to a measured one; ratio = modelled / measured."""

    measurement: Measurement
    figure: str                  # 'output tokens/s' or 'inter-token latency'
    measured: float
    modelled: float
    point: LoadPoint
    admitted: float              # most sequences the replica admits for the point's workload

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
    """The compared figure's error over a set of points, and inter-token latency's where published."""

    points: int
    median_error: float
    worst_factor: float
    worst_point: str
    latency_points: int
    latency_median_error: float | None
    latency_worst_factor: float | None

    def short(self) -> str:
        return f"median error {self.median_error:.0%}, worst {self.worst_factor:.2f}x over {self.points} points"


def summarize(ratios: Mapping[str, float], latency_ratios: Mapping[str, float]) -> Accuracy:
    """Median error and worst factor of modelled / measured ratios, by point id."""
    worst = max(ratios, key=lambda point_id: _factor(ratios[point_id]))
    latency = list(latency_ratios.values())
    return Accuracy(
        points=len(ratios),
        median_error=statistics.median(abs(r - 1) for r in ratios.values()),
        worst_factor=_factor(ratios[worst]),
        worst_point=worst,
        latency_points=len(latency),
        latency_median_error=statistics.median(abs(r - 1) for r in latency) if latency else None,
        latency_worst_factor=max(map(_factor, latency)) if latency else None,
    )


def _factor(ratio: float) -> float:
    return max(ratio, 1 / ratio)


def service_for(point: Measurement) -> tuple[ModelServiceSpec, PoolHardware]:
    """The service spec and pool a platform team would write to serve the measured setup."""
    pool = NodePoolSpec(name="measured", instance_types=[point.instance_type], max_nodes=1)
    context = math.ceil(point.input_tokens + point.output_tokens)
    model = ModelServiceSpec(
        name="measured",
        model=point.model,
        pool="measured",
        quantization=point.quantization,
        kv_cache_dtype=point.kv_cache_dtype,
        tensor_parallel=point.tensor_parallel,
        data_parallel=point.data_parallel,
        expert_parallel=point.expert_parallel,
        max_model_len=max(context, 2048),
        max_num_seqs=point.max_num_seqs,
        max_num_batched_tokens=point.max_num_batched_tokens,
        gpu_memory_utilization=point.gpu_memory_utilization,
    )
    return model, PoolHardware(pool)


def engine_of(point: Measurement) -> Engine:
    """The load model's replica (or data-parallel rank) for the measured setup, with the stated constants."""
    return engine_for(*service_for(point))


# A wave's decode phase is integrated over this many batch sizes, spaced evenly in log(batch).
WAVE_STEPS = 12


def wave_output_tokens_per_second(engine: Engine, workload: Workload, prompts: float) -> tuple[float, float]:
    """(output tokens/s, first batch) of one wave: `prompts` requests sent at once (`vllm bench serve --request-rate
    inf`), whose outputs end at the dataset's own lengths (ShareGPT: its completions, as benchmarks/datasets.py
    samples them), taken as exponential with the run's mean. The engine prefills the admitted prompts, decodes them
    at its full batch while the queue lasts, then drains: with exponential lengths the batch falls as
    b(t) = b0 e^(-t / mean), so the drain takes mean x the integral of ITL(b) / b from 1 to b0 (a tail of
    single long answers that a steady state never has)."""
    cap, _ = admission_limit(engine, workload)
    first = max(1.0, min(prompts, cap))
    mean = workload.output_tokens
    context = workload.input_tokens + mean / 2
    pp = engine.pipeline_parallel

    def itl(batch: float) -> float:
        step = step_time(engine.shard, engine.device, engine.constants, decoding=batch / pp, mean_context=context,
                         prompt_tokens=0.0, prompt_attended_context=0.0, running=batch / pp)
        return pp * step.seconds

    budget = engine.max_num_batched_tokens
    chunk = step_time(engine.shard, engine.device, engine.constants, decoding=0.0, mean_context=context,
                      prompt_tokens=float(budget), prompt_attended_context=workload.input_tokens / 2,
                      running=budget / workload.input_tokens)
    prefill = prompts * workload.input_tokens / budget * chunk.seconds
    queued = (prompts - first) * mean / first * itl(first)
    drain = 0.0
    edges = [first ** (k / WAVE_STEPS) for k in range(WAVE_STEPS + 1)]
    for low, high in zip(edges, edges[1:]):
        drain += itl(math.sqrt(low * high)) * math.log(high / low)
    drain = mean * (drain + itl(1.0))   # the last answer's own tokens beyond the integral's lower end
    return prompts * mean / (prefill + queued + drain), first


def compare(point: Measurement, engine: Engine | None = None) -> Comparison:
    """The model's figure beside the measured one, on `engine` (by default the point's, as stated)."""
    engine = engine or engine_of(point)
    workload = Workload(point.input_tokens, point.output_tokens)
    ranks = point.replicas * point.data_parallel   # engines sharing the load evenly
    if point.output_lengths == "sharegpt" and point.num_prompts and point.output_tokens_per_second is not None:
        rate, first = wave_output_tokens_per_second(engine, workload, point.num_prompts / ranks)
        state = at_concurrency(engine, workload, first)
        admitted, _ = admission_limit(engine, workload)
        return Comparison(point, "output tokens/s", point.output_tokens_per_second, rate * ranks, state, admitted)
    if point.concurrency is not None:
        state = at_concurrency(engine, workload, point.concurrency / ranks)
    else:
        state = at_request_rate(engine, workload, point.request_rate / ranks)
        if point.num_prompts and (state.saturated or state.running > point.num_prompts / ranks):
            # A run of N prompts offered faster than they finish never holds more than N in flight: it runs
            # as a batch of N, not at the replica's full load.
            state = at_concurrency(engine, workload, point.num_prompts / ranks)
    admitted, _ = admission_limit(engine, workload)
    open_loop_below_saturation = point.concurrency is None and not state.saturated
    latency_only = point.output_tokens_per_second is None
    if (open_loop_below_saturation or latency_only) and point.itl_ms is not None and state.inter_token_seconds:
        return Comparison(point, "inter-token latency", point.itl_ms, state.inter_token_seconds * 1000, state, admitted)
    if latency_only:
        raise ValueError(f"measurement {point.id!r} states no figure the model can be compared with")
    return Comparison(
        point, "output tokens/s", point.output_tokens_per_second, state.output_tokens_per_second * ranks, state,
        admitted,
    )


def counted(point: Measurement) -> bool:
    """Whether a point is fitted and judged: a vLLM run not held out."""
    return point.engine_family == VLLM and point.held_out is None


@cache
def comparisons() -> tuple[Comparison, ...]:
    return tuple(compare(point) for point in MEASUREMENTS)


def _accuracy_of(rows: Iterable[Comparison]) -> Accuracy:
    rows = list(rows)
    return summarize(
        {row.measurement.id: row.ratio for row in rows},
        {row.measurement.id: row.latency_ratio for row in rows if row.latency_ratio is not None},
    )


def in_sample() -> Accuracy:
    """The error on the constants fitted to every counted point: reported beside the out-of-sample figure."""
    return _accuracy_of(row for row in comparisons() if counted(row.measurement))


def other_engines() -> Accuracy:
    """The vLLM model against TensorRT-LLM, NIM and SGLang runs: another engine family, never fitted."""
    return _accuracy_of(row for row in comparisons() if row.measurement.engine_family != VLLM)


# ------------------------------------------------------------------------------------- out of sample


@dataclass(frozen=True)
class PointClass:
    """What a point's (or a service's) error depends on most: its model class, precision, GPU and load."""

    architecture: str   # 'dense' or 'MoE'
    precision: str      # '16-bit', 'FP8', 'INT8' or '4-bit'
    gpu: str
    load: str           # 'at 1-4 in flight', 'mid batch' or 'at saturation'


def point_class(model: ModelServiceSpec, gpu: str, running: float, limit: str, admitted: float) -> PointClass:
    """A service's class with `running` sequences per engine (`limit` binding them) out of `admitted` at most."""
    served = served_format(model)
    if served.weight_bits == 16:
        precision = "16-bit"
    elif served.weight_bits == 4:
        precision = "4-bit"
    else:
        precision = "FP8" if served.weight_type == "float" else "INT8"
    if running <= 4:
        load = "at 1-4 in flight"
    elif limit != "load" or running >= 0.8 * admitted:
        load = "at saturation"
    else:
        load = "mid batch"
    architecture = "MoE" if model.resolved_architecture.experts else "dense"
    return PointClass(architecture, precision, gpu, load)


def class_of(row: Comparison) -> PointClass:
    model, hardware = service_for(row.measurement)
    return point_class(model, hardware.gpu.name, row.point.running, row.point.limit, row.admitted)


@dataclass(frozen=True)
class OutOfSample:
    """catalog/model_accuracy.json: each counted point's ratio under constants fitted without its publisher."""

    method: str
    ratios: Mapping[str, float]
    latency_ratios: Mapping[str, float]
    in_sample_ratios: Mapping[str, float]   # the stated constants' ratios when it was computed (kept in step)
    publishers: int

    def over(self, point_ids: Iterable[str]) -> Accuracy:
        ids = list(point_ids)
        return summarize(
            {i: self.ratios[i] for i in ids}, {i: self.latency_ratios[i] for i in ids if i in self.latency_ratios}
        )

    def by_architecture(self) -> dict[str, Accuracy]:
        return {kind: self.over(ids) for kind, ids in by_architecture(self.ratios).items()}

    def stated(self) -> str:
        """The accuracy the plan prints beside every throughput and $/1M figure."""
        whole = self.over(self.ratios)
        parts = "; ".join(f"{kind} {acc.short()}" for kind, acc in self.by_architecture().items())
        return (
            f"out of sample (each of {self.publishers} publishers predicted from a fit on the others): "
            f"{whole.short()} ({parts})"
        )


@cache
def out_of_sample() -> OutOfSample:
    raw = json.loads(files("inferstack.catalog").joinpath("model_accuracy.json").read_text(encoding="utf-8"))
    return OutOfSample(
        method=raw["method"],
        ratios=raw["leave_one_publisher_out"]["ratios"],
        latency_ratios=raw["leave_one_publisher_out"]["latency_ratios"],
        in_sample_ratios=raw["in_sample_ratios"],
        publishers=raw["publishers"],
    )


@cache
def point_classes() -> dict[str, PointClass]:
    """Each counted point's class, by id."""
    return {row.measurement.id: class_of(row) for row in comparisons() if counted(row.measurement)}


def by_architecture(point_ids: Iterable[str]) -> dict[str, list[str]]:
    """Counted point ids split into dense and MoE."""
    classes = point_classes()
    ids = list(point_ids)
    return {kind: [i for i in ids if classes[i].architecture == kind] for kind in ("dense", "MoE")}


@dataclass(frozen=True)
class Confidence:
    """The out-of-sample error of the table points nearest a service: same class, widened until enough."""

    label: str
    accuracy: Accuracy

    def text(self) -> str:
        return f"{self.label}: {self.accuracy.short()} (out of sample)"


def confidence(wanted: PointClass) -> Confidence:
    """The out-of-sample error over the points most like `wanted`: its architecture, precision, GPU and load,
    dropping the GPU, then the load, then the precision until at least CONFIDENCE_POINTS points remain."""
    stored = out_of_sample()
    classes = point_classes()
    for fields in (("architecture", "precision", "gpu", "load"), ("architecture", "precision", "load"),
                   ("architecture", "precision"), ("architecture",)):
        ids = [i for i, c in classes.items() if all(getattr(c, f) == getattr(wanted, f) for f in fields)]
        if len(ids) >= CONFIDENCE_POINTS:
            label = " ".join(
                str(getattr(wanted, f)) if f != "gpu" else f"on {wanted.gpu}" for f in fields
            )
            return Confidence(label, stored.over(ids))
    return Confidence("all vLLM points", stored.over(stored.ratios))


def service_confidence(model: ModelServiceSpec, hardware: PoolHardware, estimate: ServiceEstimate) -> Confidence:
    """How sure the plan is of a service's figures at its stated traffic: the class of one engine at that load,
    out of the sequences it admits (its full load)."""
    ranks = model.data_parallel
    at_traffic = estimate.at_traffic
    return confidence(point_class(
        model, hardware.gpu.name, at_traffic.running / ranks, at_traffic.limit, estimate.full_load.running / ranks
    ))
