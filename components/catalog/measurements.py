"""Published serving measurements as data: each point's model, hardware, workload, engine and measured figures.

`serving_measurements.json` holds points read from benchmark pages, each with its source (publisher,
document and the quote its numbers come from). The throughput model is of vLLM: it is fitted to and
judged on the vLLM points; TensorRT-LLM, NIM and SGLang points are kept as another engine family,
compared and reported apart (inferstack.planning.accuracy). Nothing here is modelled: the one figure computed is
a wave's least idle start, from its own published figures, which holds out a wave that spent most of its run
before its prefill's pace (`idle_start_seconds`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from importlib.resources import files
from typing import Any, Mapping


@dataclass(frozen=True)
class Measurement:
    """One published point: a model served on `gpus` GPUs of an instance type at a stated load."""

    id: str
    model: str                      # catalog model or checkpoint id served
    quantization: str               # the spec's quantization value that serves it ('auto' or online 'fp8')
    kv_cache_dtype: str
    instance_type: str              # a catalog instance type carrying the measured GPU
    tensor_parallel: int
    replicas: int                   # independent copies sharing the load (1 for most points)
    data_parallel: int              # vLLM --data-parallel-size: ranks of one replica sharing its MoE layers
    expert_parallel: bool | None    # --enable-expert-parallel as run; None: vLLM's choice for the layout
    input_tokens: int
    output_tokens: int
    concurrency: int | None         # closed loop: requests in flight (offline runs: every prompt at once)
    request_rate: float | None      # open loop: requests per second
    num_prompts: int | None         # the run's prompts (or its successful requests where only those are quoted)
    output_lengths: str             # 'fixed' (random dataset, --ignore-eos) or 'sharegpt' (the dataset's own lengths)
    # Engine limits the source states for a vLLM run; unstated (and for other engines, whose limits are not
    # vLLM's), the point runs at vLLM 0.33's defaults, as a vLLM service of that setup would.
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    gpu_memory_utilization: float   # the engine's memory share (0.9 before vLLM 0.20 and in TensorRT-LLM)
    engine: str
    engine_version: str | None
    output_tokens_per_second: float | None
    itl_ms: float | None
    ttft_ms: float | None
    source: Mapping[str, Any]
    derived: str | None             # how a figure was computed from published ones, where it was
    held_out: str | None            # why the point is shown but not counted in the stated accuracy

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.data_parallel * self.replicas

    @property
    def publisher(self) -> str:
        """Who published the point: leave-one-source-out holds out every point of a publisher at once."""
        return self.source["publisher"]

    @property
    def wave(self) -> bool:
        """Every prompt sent at once (`vllm bench serve --request-rate inf` with no --max-concurrency below the prompt
        count): the run is one batch that starts empty and drains, not a steady state."""
        return (self.request_rate is None and self.num_prompts is not None and self.concurrency is not None
                and self.num_prompts <= self.concurrency)

    @property
    def idle_start_seconds(self) -> float | None:
        """The least time a wave spent before the pace its prefill sets, from its published figures. Its requests
        get their first tokens as their prompts are prefilled, and a step carries fewer prompt tokens as more
        sequences decode, so an engine prefilling from the start gives first tokens no less densely early than late:
        from `idle` on, the mean first token comes no later than half-way through the rest of the run, mean TTFT <=
        idle + (duration - idle) / 2, so idle >= 2 x mean TTFT - duration (`wave_seconds`). The figures cannot say
        what the engine did meanwhile: stood idle, ran slow first steps (kernels compiled on first use) or computed
        while its first tokens waited to be sent."""
        duration = self.wave_seconds
        if duration is None or not self.ttft_ms:
            return None
        return max(0.0, 2 * self.ttft_ms / 1000 - duration)

    @property
    def wave_seconds(self) -> float | None:
        """A wave's duration: its prompts' output over the output tokens/s (None for other runs)."""
        if not self.wave or not self.output_tokens_per_second:
            return None
        return self.num_prompts * self.output_tokens / self.output_tokens_per_second

    @property
    def engine_family(self) -> str:
        """'vllm', or the other engine the point ran: the model is of vLLM, so only vLLM points are fitted."""
        return self.engine.split()[0]


# A wave whose idle start (Measurement.idle_start_seconds) is more than this share of its run measures its start,
# whatever held it, more than the pace it then served at: it is shown, not counted.
IDLE_SHARE_HELD_OUT = 0.5


def _idle_start(point: Measurement) -> str | None:
    """Why a wave whose published figures put most of its run before its prefill's pace is held out, or None."""
    idle, duration = point.idle_start_seconds, point.wave_seconds
    if idle is None or idle <= IDLE_SHARE_HELD_OUT * duration:
        return None
    return (f"a wave of {point.num_prompts} prompts whose mean TTFT ({point.ttft_ms / 1000:.2f} s) is "
            f"{point.ttft_ms / 1000 / duration:.0%} of its {duration:.2f} s run: at least {idle:.2f} s of it (2 x mean "
            "TTFT - duration, Measurement.idle_start_seconds) passed before the pace its prefill sets its first "
            "tokens, more than half the run; the source does not say why (an idle or slow start, or first tokens "
            "sent late), and the run measures that start more than the rate it then served at")


def _measurement(raw: Mapping[str, Any]) -> Measurement:
    measured = raw["measured"]
    point = Measurement(
        id=raw["id"],
        model=raw["model"],
        quantization=raw.get("quantization", "auto"),
        kv_cache_dtype=raw.get("kv_cache_dtype", "auto"),
        instance_type=raw["instance_type"],
        tensor_parallel=raw.get("tensor_parallel", 1),
        replicas=raw.get("replicas", 1),
        data_parallel=raw.get("data_parallel", 1),
        expert_parallel=raw.get("expert_parallel"),
        input_tokens=raw["input_tokens"],
        output_tokens=raw["output_tokens"],
        concurrency=raw.get("concurrency"),
        request_rate=raw.get("request_rate"),
        num_prompts=raw.get("num_prompts"),
        output_lengths=raw.get("output_lengths", "fixed"),
        max_num_seqs=raw.get("max_num_seqs"),
        max_num_batched_tokens=raw.get("max_num_batched_tokens"),
        gpu_memory_utilization=raw.get("gpu_memory_utilization", 0.92),
        engine=raw["engine"],
        engine_version=raw.get("engine_version"),
        output_tokens_per_second=measured.get("output_tokens_per_second"),
        itl_ms=measured.get("itl_ms"),
        ttft_ms=measured.get("ttft_ms"),
        source=raw["source"],
        derived=raw.get("derived"),
        held_out=raw.get("held_out"),
    )
    return point if point.held_out else replace(point, held_out=_idle_start(point))


_RAW = json.loads(files("inferstack.catalog").joinpath("serving_measurements.json").read_text(encoding="utf-8"))
MEASUREMENTS: tuple[Measurement, ...] = tuple(_measurement(raw) for raw in _RAW["points"])
