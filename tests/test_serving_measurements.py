"""The throughput model held against published measurements (catalog/serving_measurements.json).

Every point is a benchmark page's figure with its stated conditions, its publisher and the quote it was read
from. The model is of vLLM: only vLLM points are fitted and judged; other engines are a family apart. Its
stated accuracy is out of sample (catalog/model_accuracy.json, leave one publisher out), kept in step with
the table and the constants by these tests.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import replace

import pytest

from inferstack.catalog import INSTANCE_TYPES
from inferstack.catalog.measurements import MEASUREMENTS
from inferstack.catalog.models import model_facts
from inferstack.planning import calibrate
from inferstack.planning.accuracy import (
    class_of, compare, comparisons, counted, in_sample, other_engines, out_of_sample, service_for,
)
from inferstack.planning.quantization import kernel_family

COUNTED = [m for m in MEASUREMENTS if counted(m)]


def test_the_table_spans_gpus_precisions_architectures_publishers_and_loads():
    gpus = {INSTANCE_TYPES[m.instance_type].gpu.name for m in COUNTED}
    assert {"L4", "A10G", "A100-80GB", "H100", "H200", "B200"} <= gpus, gpus
    kernels = {kernel_family(*_model_and_gpu(m)) for m in COUNTED}
    assert {"16-bit", "w8a8-fp8", "w4a16-marlin", "w8a16-marlin"} <= kernels
    classes = [class_of(row) for row in comparisons() if counted(row.measurement)]
    moe = [c for c in classes if c.architecture == "MoE"]
    assert len(moe) >= 100 and {c.precision for c in moe} >= {"16-bit", "FP8", "4-bit"}
    assert {c.load for c in classes} == {"at 1-4 in flight", "mid batch", "at saturation"}
    assert len({m.publisher for m in COUNTED}) >= 10
    assert any(m.tensor_parallel == 8 for m in COUNTED) and any(m.input_tokens >= 30000 for m in COUNTED)
    assert any((m.concurrency or 0) >= 500 for m in COUNTED)


def _model_and_gpu(point):
    model, hardware = service_for(point)
    return model, hardware.gpu


@pytest.mark.parametrize("point", MEASUREMENTS, ids=[m.id for m in MEASUREMENTS])
def test_each_point_is_sourced_and_read_as_published(point):
    source = point.source
    assert source["url"].startswith("https://") and source["where"] and source["quote"] and source["publisher"]
    assert point.instance_type in INSTANCE_TYPES
    assert model_facts(point.model) is not None, point.model
    # A load: requests kept in flight, arrivals per second, or both (a rate capped by --max-concurrency).
    assert point.concurrency is not None or point.request_rate is not None
    # The figure compared appears in the quoted text, to the precision it is stored at.
    figure = point.output_tokens_per_second if point.output_tokens_per_second is not None else point.itl_ms
    quote = source["quote"]
    # Read the quote both with commas as separators (CSV rows) and as thousands separators (tables).
    readings = (quote, re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", quote))
    decimals = len(repr(figure).partition(".")[2].rstrip("0"))
    published = [float(number) for text in readings for number in re.findall(r"\d+(?:\.\d+)?", text)]
    assert any(round(number, decimals) == figure for number in published) or point.derived, quote


def test_only_vllm_points_are_fitted_and_other_engines_are_reported_apart():
    """TensorRT-LLM, NIM and SGLang schedule, batch and run kernels of their own: the model is of vLLM 0.33."""
    fitted = {point.id for point, _ in calibrate.counted_points()}
    assert fitted == {m.id for m in COUNTED}
    assert all(m.engine_family == "vllm" for m in COUNTED)
    others = [m for m in MEASUREMENTS if m.engine_family != "vllm"]
    assert others and not fitted & {m.id for m in others}
    assert other_engines().points == len(others)


def test_held_out_points_say_why_and_are_still_compared():
    held = [row for row in comparisons() if row.measurement.held_out]
    assert held and all(len(row.measurement.held_out) > 40 for row in held)
    counted_h100 = [m for m in COUNTED if m.publisher == "GPUStack" and m.instance_type == "p5.48xlarge"
                    and class_of(compare(m)).architecture == "dense"]
    assert counted_h100 and all(m.concurrency < 100 for m in counted_h100)


def test_a_run_of_fewer_prompts_than_its_rate_would_admit_runs_as_a_batch_of_them():
    """vllm bench serve --num-prompts N --request-rate R: once the replica falls behind, at most N are in flight
    (vllm benchmarks/serve.py issues exactly N requests), so the run is a batch of N, not the replica's full load."""
    point = next(m for m in COUNTED if m.num_prompts == 50 and m.request_rate == 10.0)
    row = compare(point)
    assert row.point.running == pytest.approx(50 / point.data_parallel, rel=1e-6)
    unbounded = compare(replace(point, num_prompts=None))
    assert unbounded.point.running > row.point.running


def test_a_wave_is_every_prompt_sent_at_once():
    """vllm bench serve with --request-rate inf (its default) and no --max-concurrency below --num-prompts sends every
    prompt at once (vllm benchmarks/serve.py): GPUStack's runs, whose quotes give as many successful requests as the
    run's concurrency and no "Maximum request concurrency" line. A --max-concurrency run of more prompts, or an
    open-loop one, is not a wave."""
    point = next(m for m in MEASUREMENTS if m.id == "gpustack-perflab-dsr1-h200-4")
    assert point.wave and point.num_prompts == point.concurrency == 1000
    assert "Successful requests:                     1000" in point.source["quote"]
    assert not replace(point, num_prompts=2000).wave
    assert not replace(point, concurrency=None, request_rate=10.0).wave


def test_a_wave_served_from_its_start_shows_no_idle_start_and_a_stalled_one_its_stall():
    """The bound Measurement.idle_start_seconds rests on: prompts prefilled at a steady rate over P seconds from an
    idle start s, then D seconds of decoding, give a mean TTFT of s + P / 2 over a run of s + P + D, so
    2 x TTFT - duration = s - D: never more than the idle start, and the idle start itself when decoding is short."""
    point = next(m for m in COUNTED if m.wave and m.output_tokens == 4)

    def run(idle: float, prefill: float, decode: float):
        duration = idle + prefill + decode
        return replace(point, ttft_ms=(idle + prefill / 2) * 1000,
                       output_tokens_per_second=point.num_prompts * point.output_tokens / duration)

    assert run(0.0, 10.0, 0.5).idle_start_seconds == 0.0
    assert run(15.0, 4.0, 0.5).idle_start_seconds == pytest.approx(14.5)
    assert run(15.0, 4.0, 0.0).idle_start_seconds == pytest.approx(15.0)
    assert replace(point, num_prompts=None).idle_start_seconds is None


def test_a_wave_idle_for_more_than_half_its_run_is_shown_but_not_counted():
    """GPUStack's 1,000 prompts of 128 tokens with 4-token answers on DeepSeek-R1 (8 x H200) and Qwen3-235B (H100):
    a mean TTFT of 80-92% of the run puts most of it before the pace prefill sets first tokens (why, the page does
    not say; its tuned SGLang ran the DeepSeek wave in 6.40 s, vLLM in 22.07 s). The table keeps them; the
    accuracy does not count them. Every counted wave is at most 44% idle, as the README says."""
    held = {m.id: m for m in MEASUREMENTS if m.held_out and "measures that start" in m.held_out}
    assert set(held) == {"gpustack-perflab-dsr1-h200-4", "gpustack-perflab-q235b-h100-8",
                         "gpustack-perflab-q235b-h100-12"}
    deepseek = held["gpustack-perflab-dsr1-h200-4"]
    duration = 1000 * 4 / 181.27
    assert deepseek.idle_start_seconds == pytest.approx(2 * 19.39211 - duration)
    assert "19.39 s" in deepseek.held_out and "22.07 s" in deepseek.held_out and "16.72 s" in deepseek.held_out
    assert not any(counted(m) for m in held.values())
    idle_shares = [m.idle_start_seconds / m.wave_seconds for m in COUNTED if m.idle_start_seconds is not None]
    assert len(idle_shares) > 50 and max(idle_shares) == pytest.approx(0.444, abs=1e-3)
    assert {row.measurement.id for row in comparisons()} >= set(held)


# ------------------------------------------------------------------------------------- stated accuracy


def test_the_recorded_out_of_sample_accuracy_is_of_this_table_and_these_constants():
    """catalog/model_accuracy.json was computed on the table and the stated constants as they are: the in-sample
    ratios recorded beside it are today's. Change either and rerun `python -m inferstack.planning.calibrate
    --leave-one-source-out --write`."""
    stored = out_of_sample()
    today = calibrate.in_sample_ratios()
    assert set(stored.ratios) == set(stored.in_sample_ratios) == set(today)
    assert stored.in_sample_ratios == pytest.approx({i: round(r, 4) for i, r in today.items()}, abs=1e-4)
    assert stored.publishers == len({m.publisher for m in COUNTED})


def test_out_of_sample_predictions_are_a_refit_without_the_publisher():
    """One publisher's recorded ratios are recomputed: its points under constants refitted on the others' (the
    smallest publisher, to keep the suite fast), and they differ from the in-sample ones."""
    stored = out_of_sample()
    by_publisher: dict[str, list[str]] = {}
    for m in COUNTED:
        by_publisher.setdefault(m.publisher, []).append(m.id)
    publisher = min(by_publisher, key=lambda name: (len(by_publisher[name]), name))
    recomputed = calibrate._held_out_ratios(publisher)
    assert set(recomputed) == set(by_publisher[publisher])
    for point_id, (ratio, _) in recomputed.items():
        assert stored.ratios[point_id] == pytest.approx(ratio, abs=1e-4)


def test_the_stated_accuracy_is_the_out_of_sample_one_and_names_dense_and_moe():
    stored = out_of_sample()
    whole = stored.over(stored.ratios)
    assert whole.points == len(COUNTED)
    assert whole.median_error == pytest.approx(statistics.median(abs(r - 1) for r in stored.ratios.values()))
    text = stored.stated()
    assert text.startswith("out of sample") and whole.short() in text
    for kind, accuracy in stored.by_architecture().items():
        assert f"{kind} {accuracy.short()}" in text
    # The in-sample figure is never the stated one: out of sample is worse, as it must be for a fit.
    assert whole.median_error > in_sample().median_error


def test_out_of_sample_median_error_is_within_a_quarter_and_the_worst_within_twofold_for_dense_and_moe():
    stored = out_of_sample()
    whole = stored.over(stored.ratios)
    assert whole.median_error <= 0.25 and whole.worst_factor <= 2.0
    for kind, accuracy in stored.by_architecture().items():
        assert accuracy.median_error <= 0.25 and accuracy.worst_factor <= 2.0, kind


def test_each_service_is_told_the_error_of_the_points_most_like_it():
    """The plan's per-service figure: the out-of-sample error of the counted points of the same architecture,
    precision, GPU and load; it widens (GPU first, then load, then precision) until five points remain."""
    from inferstack.planning.accuracy import CONFIDENCE_POINTS, PointClass, confidence

    stored = out_of_sample()
    classes = {row.measurement.id: class_of(row) for row in comparisons() if counted(row.measurement)}
    exact = confidence(PointClass("dense", "16-bit", "H100", "mid batch"))
    ids = [i for i, c in classes.items() if c == PointClass("dense", "16-bit", "H100", "mid batch")]
    assert len(ids) >= CONFIDENCE_POINTS and exact.label == "dense 16-bit on H100 mid batch"
    assert exact.accuracy == stored.over(ids)
    # No counted point ran MoE FP8 on an L40S: the figure drops the GPU and says so.
    widened = confidence(PointClass("MoE", "FP8", "L40S", "at saturation"))
    assert widened.label == "MoE FP8 at saturation"
    assert widened.accuracy == stored.over(
        i for i, c in classes.items() if (c.architecture, c.precision, c.load) == ("MoE", "FP8", "at saturation")
    )
    assert widened.text().endswith("(out of sample)")
