"""Scaler thresholds from the throughput model, what the stated traffic needs of max replicas, and an SLO no
replica count can meet.

A service (or a prefill/decode role) with an `slo` and no stated metric or target scales on the load where its SLO
would break, less headroom for the time a new replica takes to serve:

- the SLO load `r_slo` is the most requests per second one replica carries within the role's SLO
  (service_performance.capacity_at_slo, the figure the plan's capacity and the gateway limits use);
- a new replica serves `reaction` seconds after the load crosses the threshold: KEDA's polling interval plus a
  cold start on a new node (creation_times.replica_parts: node boot, image pull, weight copy, load, warm-up);
- meanwhile the traffic may grow by `autoscaling.traffic_growth_per_minute`, compounded, so by
  `growth = (1 + g) ** (reaction / 60)`;
- the HPA acts only once the metric is more than its tolerance above target (HPA_TOLERANCE).

So the threshold is the metric at `r_trigger = r_slo / growth` per replica, divided by `1 + tolerance`: a ramp at the
stated growth that makes the HPA act reaches the SLO load just as the new replica serves.

The metric per role: a prefill engine on its outstanding prompt tokens (vLLM 0.33 exports no gauge of prompt tokens
still to compute, vllm/v1/metrics/loggers.py:528-548 are request counts; every request in a prefill engine is a
prompt, which stops at its first token, so outstanding prompt tokens are its running plus waiting requests times
the traffic's computed prompt), any other engine on its running sequences (`vllm:num_requests_running`,
loggers.py:528), which grow with both the decode batch and the prompts waiting for a first token. A prefill role is
held to the service's TTFT, its decode role to its ITL, each on the part of the request it computes
(disaggregation.role_workload: a decode engine holds the transferred prompt's KV and computes one token of it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from inferstack.planning.creation_times import replica_parts
from inferstack.planning.disaggregation import role_workload
from inferstack.planning.load import Engine, Workload, admission_limit, at_concurrency, at_request_rate
from inferstack.planning.service_performance import ALONE, capacity_at_slo, engine_for, workload_of
from inferstack.planning.sizing import checkpoint_bytes
from inferstack.spec import LatencySlo, ModelServiceSpec
from inferstack.spec.errors import SpecError
from inferstack.spec.pools import PoolHardware

# Kubernetes' HPA skips a scale whose desired/current ratio is within 10% of 1 (kube-controller-manager
# --horizontal-pod-autoscaler-tolerance, default 0.1; kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale
# "Algorithm details").
HPA_TOLERANCE = 0.1

DerivedMetric = Literal["prompt_tokens", "running_sequences"]



@dataclass(frozen=True)
class Role:
    """One engine as the load model sees it under its service's traffic and the part of the SLO it answers for."""

    engine: Engine
    workload: Workload
    slo: LatencySlo | None
    ranks: int                          # data-parallel engines per replica
    requests_per_second: float          # the service's traffic, which every replica of the role shares


@dataclass(frozen=True)
class DerivedThreshold:
    """A scaler's metric and threshold per replica, with the figures it came from."""

    metric: DerivedMetric
    threshold: float                    # the HPA target: the metric per replica at trigger_rate, less the tolerance
    slo_rate: float                     # requests/s one replica carries within the SLO
    trigger_rate: float                 # requests/s per replica where the HPA acts (the metric passes target x 1.1)
    reaction_seconds: float             # polling interval + a new replica's cold start
    growth: float                       # traffic growth factor over reaction_seconds
    derivation: str                     # how, in words (the plan prints it)


@dataclass(frozen=True)
class SloCapacity:
    """What the stated traffic needs of the service's max replicas, within its SLO (unsaturated without one)."""

    replicas_needed: int
    max_replicas: int

    @property
    def holds(self) -> bool:
        return self.replicas_needed <= self.max_replicas

    def as_dict(self) -> dict[str, int | bool]:
        return {"replicas_needed": self.replicas_needed, "max_replicas": self.max_replicas, "holds": self.holds}


def role_of(engine: ModelServiceSpec, service: ModelServiceSpec, hardware: PoolHardware) -> Role | None:
    """The engine under `service`'s traffic (the engine itself unless it is a prefill engine); None without traffic.
    A prefill engine runs its prompts against the TTFT, a decode role, with the prompts' KV transferred, answers
    for the ITL (disaggregation.role_workload)."""
    traffic = service.traffic
    if traffic is None:
        return None
    workload, slo = workload_of(traffic), service.slo
    workload = role_workload(engine.pd_role, workload,
                             service.disaggregation.non_cached_tokens if service.disaggregation else None)
    if engine.pd_role == "prefill":
        slo = None if slo is None or slo.ttft_ms is None else LatencySlo(ttft_ms=slo.ttft_ms)
    elif engine.pd_role == "decode":
        slo = None if slo is None or slo.itl_ms is None else LatencySlo(itl_ms=slo.itl_ms)
    return Role(engine_for(engine, hardware), workload, slo, engine.data_parallel, traffic.requests_per_second)


def replica_capacity(role: Role) -> float:
    """Requests/s one replica carries within the role's SLO (unsaturated without one); 0 when none meets it."""
    cap, _ = admission_limit(role.engine, role.workload)
    if cap < 1:   # the KV cache holds no whole request (the plan's throughput says so)
        return 0.0
    full = at_concurrency(role.engine, role.workload, cap)
    return capacity_at_slo(role.engine, role.workload, role.slo, role.ranks, full.requests_per_second * role.ranks)


def slo_capacity(engine: ModelServiceSpec, service: ModelServiceSpec, hardware: PoolHardware) -> SloCapacity | None:
    """Replicas of one engine (a service, or one prefill/decode role of it) the service's stated traffic needs within
    the engine's part of the SLO, beside its max_replicas; None without traffic or when no replica count meets the
    SLO (refused)."""
    role = role_of(engine, service, hardware)
    if role is None:
        return None
    capacity = replica_capacity(role)
    if capacity <= 0:
        return None
    return SloCapacity(math.ceil(role.requests_per_second / capacity), engine.autoscaling.max_replicas)


def derived_metric(engine: ModelServiceSpec) -> DerivedMetric:
    return "prompt_tokens" if engine.pd_role == "prefill" else "running_sequences"


def ready_seconds(engine: ModelServiceSpec) -> float:
    """A new replica's cold start on a node added for it: the scale-up the headroom covers."""
    return sum(seconds for _, _, seconds in replica_parts(checkpoint_bytes(engine), engine.weight_loader, new_node=True))


def metric_at(role: Role, metric: DerivedMetric, requests_per_second: float) -> float:
    """The metric per replica at a replica's share of the traffic: running sequences, or for a prefill engine its
    prompts in flight (each still to be computed, Little's law over the time to a first token) times their tokens."""
    point = at_request_rate(role.engine, role.workload, requests_per_second / role.ranks)
    running = point.running * role.ranks
    return running * role.workload.computed_prompt_tokens if metric == "prompt_tokens" else running


def _slo_words(slo: LatencySlo) -> str:
    parts = [f"TTFT {slo.ttft_ms:g} ms" if slo.ttft_ms is not None else "",
             f"ITL {slo.itl_ms:g} ms" if slo.itl_ms is not None else ""]
    return ", ".join(p for p in parts if p)


def derive_threshold(engine: ModelServiceSpec, service: ModelServiceSpec, hardware: PoolHardware) -> DerivedThreshold | None:
    """The engine's threshold from the model when its service states an slo and the engine neither a metric nor a
    target; None otherwise (the stated or default scaler stands) or when no replica meets the SLO (refused)."""
    scaling = engine.autoscaling
    if scaling.metric is not None or scaling.target is not None:
        return None
    role = role_of(engine, service, hardware)
    if role is None or role.slo is None:
        return None
    slo_rate = replica_capacity(role)
    if slo_rate <= 0:
        return None
    start = ready_seconds(engine)
    reaction = scaling.polling_interval_seconds + start
    growth = (1 + scaling.traffic_growth_per_minute) ** (reaction / 60)
    trigger_rate = slo_rate / growth
    metric = derived_metric(engine)
    # The HPA scales once the metric exceeds its target by the tolerance, so the target is the metric at the trigger
    # load less the tolerance. Whole tokens, sequences to a tenth: the figure the ScaledObject states.
    at_trigger = metric_at(role, metric, trigger_rate)
    exact = at_trigger / (1 + HPA_TOLERANCE)
    threshold = float(round(exact)) if metric == "prompt_tokens" else round(exact, 1)
    at_slo = metric_at(role, metric, slo_rate)
    unit = "outstanding prompt tokens" if metric == "prompt_tokens" else "running sequences"
    derivation = (
        f"the SLO ({_slo_words(role.slo)}) breaks at {slo_rate:.3g} req/s per replica ({at_slo:,.0f} {unit}); "
        f"a new replica serves {reaction:,.0f} s later ({scaling.polling_interval_seconds} s polling + "
        f"{start:,.0f} s cold start on a new node), while traffic growing "
        f"{scaling.traffic_growth_per_minute * 100:g}%/min rises x{growth:.2f}: the trigger load is "
        f"{slo_rate:.3g} / {growth:.2f} = {trigger_rate:.3g} req/s per replica ({at_trigger:,.1f} {unit}); the HPA "
        f"acts {HPA_TOLERANCE * 100:g}% above target: target {at_trigger:,.1f} / {1 + HPA_TOLERANCE:g} = "
        f"{threshold:,g} {unit}"
    )
    return DerivedThreshold(metric, threshold, slo_rate, trigger_rate, reaction, growth, derivation)


def check_slo_reachable(path: str, model: ModelServiceSpec, service: ModelServiceSpec, hardware: PoolHardware) -> None:
    """An SLO below what one request alone reaches on the engine's GPUs is refused at its field, with that figure:
    no replica count meets it. Each prefill/decode role answers for its part (role_of): the prefill engine for the
    TTFT, the decode engine for the ITL."""
    role = role_of(model, service, hardware)
    if role is None or role.slo is None:
        return
    slo, traffic = role.slo, service.traffic
    alone = at_request_rate(role.engine, role.workload, traffic.requests_per_second / role.ranks * ALONE)
    gpu = hardware.gpu.name
    first_ms = alone.first_token_seconds * 1000
    if slo.ttft_ms is not None and first_ms > slo.ttft_ms:
        raise SpecError(
            f"{path}.slo.ttft_ms",
            f"{slo.ttft_ms:g} ms is below one request's time to first token alone on {gpu} ({first_ms:.1f} ms for "
            f"{traffic.mean_input_tokens} prompt tokens), so no replica count meets it",
            f"raise ttft_ms to {math.ceil(first_ms * 10) / 10:g} or more, shorten the prompts, or serve on faster "
            "GPUs or a wider tensor_parallel",
        )
    if slo.itl_ms is not None and alone.inter_token_seconds is not None:
        step_ms = alone.inter_token_seconds * 1000
        if step_ms > slo.itl_ms:
            raise SpecError(
                f"{path}.slo.itl_ms",
                f"{slo.itl_ms:g} ms is below one decode step alone on {gpu} ({step_ms:.1f} ms), so no replica count "
                "meets it",
                f"raise itl_ms to {math.ceil(step_ms * 10) / 10:g} or more, or serve on faster GPUs, a wider "
                "tensor_parallel or a smaller checkpoint (quantization)",
            )
    derived = derive_threshold(model, service, hardware)
    if derived is not None and derived.threshold < 1:
        # Kubernetes refuses an HPA target that is not positive (pkg/apis/autoscaling/validation validateMetricTarget),
        # and a target below one sequence or token scales on any load at all.
        raise SpecError(
            f"{path}.autoscaling.traffic_growth_per_minute",
            f"{model.autoscaling.traffic_growth_per_minute:g} compounds to x{derived.growth:.2f} over the "
            f"{derived.reaction_seconds:,.0f} s a new replica takes to serve, which leaves a derived target of "
            f"{derived.threshold:g} (below one)",
            "lower traffic_growth_per_minute, or state autoscaling.metric and target",
        )
