"""`inferstack simulate`: a deterministic replay of a traffic trace through what a stack deploys.

The controllers act in fixed steps (the greatest common divisor of the HPA's sync period and the scalers' polling
intervals), independent of the trace's resolution; a cooldown ends at the first poll after it.
Between controller actions the queue is a fluid: within each stretch of constant arrival rate and ready replicas
(split at trace rows and at the moment a pod becomes ready, to the second it does), requests arrive evenly, the ready replicas serve at
most their full-load rate (load.at_concurrency at the admission limit), first in, first out, and a request's wait
is the backlog ahead of it over that rate, so waits are continuous and the same traffic written at any row spacing
replays the same. A request's time to first token is the steady state of a replica at the stretch's served rate
(load.at_request_rate, looked up per (workload, rate bucket of 1/RATE_BUCKETS of full load, rounded up)) plus its
wait. Per step and service:

* the HPA evaluates every HPA_SYNC_SECONDS and turns each trigger into replicas (metric_replicas); scale-down
  waits for the stabilization window and its policies, scale-up takes the HPA's default policies (HPA_SCALE_UP);
* KEDA polls every pollingInterval for activation: at zero, any trigger above its activationThreshold wakes the
  service, and it idles at idleReplicaCount once every trigger has stayed at or below activation for longer than
  cooldownPeriod (kedacore/keda pkg/scaling/executor/scale_scaledobjects.go: lastActiveTime + cooldownPeriod before
  now; KEDA docs, "ScaledObject specification", https://keda.sh/docs/2.20/reference/scaledobject-spec/: the KEDA
  catalog/charts.json pins, 2.20.2; KEDA's admission webhook warns "PollingInterval is only relevant when
  minReplicaCount = 0 or idleReplicaCount = 0 or useCachedMetrics is enabled": 1 <-> N is the HPA's, which reads
  the metric afresh at each sync);
* a new pod starts on a node of its pool with room (warm when that node cached its weights, else a cold start
  without node boot) or on a node the node autoscaler adds, up to the pool's max_nodes (creation_times.replica_parts
  with new_node=True); past max_nodes it pends. A node no replica needs leaves after the autoscaler's empty-node
  delay, down to the pool's floor, and takes its cached weights with it;
* each pod pays its devices from creation (service_performance.replica_usd_per_hour at the plan's on-demand node
  price, cost.replica_node_price); while the pool runs nodes beyond its on-demand limit, that share of every pod
  of the pool pays the spot price (pro rata: the replay does not pin pods to nodes).

A request meets the SLO when its modelled time to first token (queue wait included) and inter-token latency are
within the service's slo; a service without one counts a request as met unless it waited in the queue.
`seconds_below_slo` counts the seconds the replicas spent serving requests outside that rule. The replay starts with
every service at its idle state (min replicas, or idleReplicaCount for a scale-to-zero one) on warm nodes, past
KEDA's initialCooldownPeriod.

A prefill/decode service is two engines in tandem, each with its own scaler, pods and pool: a request whose prompt
goes to a prefill engine (ServiceSetup.rate) queues there, and when its prompt is computed (the prefill engine's
time to first token) it joins the decode engine's queue in the order it left, its waits carried with it; the
decode engine's row holds the service's latency and attainment over every request sent to the service (one still
queued at either engine, or on its way between them, at the trace's end counts as missed).
"""

from __future__ import annotations

import csv
import math
from collections import deque
from dataclasses import dataclass, field, replace
from functools import reduce
from pathlib import Path
from typing import Any, Mapping, Sequence

from inferstack.planning.disaggregation import role_workload
from inferstack.planning.load import Engine, Workload, admission_limit, at_concurrency, at_request_rate, kv_share
from inferstack.planning.pool_capacity import nodes_for_replicas
from inferstack.planning.scaling_thresholds import HPA_TOLERANCE
from inferstack.planning.sizing import GIB
from inferstack.spec import LatencySlo, ModelServiceSpec, SpecError
from inferstack.spec.pools import PoolHardware

RATE_BUCKETS = 200   # steady states looked up per 1/200 of a replica's full-load rate
# The most requests a second a trace row may state: far above any cluster the stack describes, and small enough
# that every count derived from it stays a finite float.
MAX_REQUESTS_PER_SECOND = 1e6
# The latest time_s a trace row may state, 31 days: a month of traffic, and few enough controller steps that the
# replay ends in minutes.
MAX_TRACE_SECONDS = 31 * 24 * 3600
# The HPA controller evaluates each HPA every sync period: kube-controller-manager
# --horizontal-pod-autoscaler-sync-period, default 15 s (Kubernetes docs, "Horizontal Pod Autoscaling", "How does a
# HorizontalPodAutoscaler work?").
HPA_SYNC_SECONDS = 15
SECONDS_PER_HOUR = 3600
# The HPA's defaults where the ScaledObject sets no behaviour (Kubernetes docs, "Horizontal Pod Autoscaling",
# section "Default Behavior": https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/; the code:
# kubernetes/kubernetes pkg/apis/autoscaling/v2/defaults.go scaleUpLimitPercent 100, scaleUpLimitMinimumPods 4,
# scaleUpPeriod 15, scaleUpStabilizationSeconds 0, MaxChangePolicySelect): scale up with no stabilization by the
# larger of 100% or 4 pods every 15 s; a ratio within 10% of 1 changes nothing (the same page, "Algorithm details":
# --horizontal-pod-autoscaler-tolerance, default 0.1).
HPA_SCALE_UP = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15},
                             {"type": "Pods", "value": 4, "periodSeconds": 15}]}
# Without scaleDown policies the HPA may remove every pod above the minimum each 15 s (defaults.go
# scaleDownLimitPercent 100, scaleDownPeriod 15), after the controller's 300 s stabilization window.
HPA_SCALE_DOWN = {"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
                  "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
# Signals by trigger name (the ScaledObject contract of serving/autoscaling.py) and how each is read.
SIGNALS = ("queue-depth", "kv-cache", "epp-queue", "requests", "prompt-tokens", "running-sequences")
TRACE_COLUMNS = ("time_s", "service", "requests_per_second")
TOKEN_COLUMNS = ("mean_input_tokens", "mean_output_tokens")


# ------------------------------------------------------------------------------------------------- the trace


@dataclass(frozen=True)
class TraceRow:
    time: int
    requests_per_second: float
    input_tokens: int | None
    output_tokens: int | None


@dataclass(frozen=True)
class Trace:
    """Per service its rows in time order; each holds until the service's next row, the last until `end`: the
    trace's last time plus its spacing."""

    rows: Mapping[str, tuple[TraceRow, ...]]
    spacing: int   # the trace's resolution: the greatest common divisor of its times' gaps
    end: int


def _bound(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"


def _number(text: str, where: str, column: str, kind: type, least: float, most: float = math.inf,
            most_means: str = "") -> Any:
    """A cell as `kind` within [least, most]; `most_means` says why the bound (added to the refusal)."""
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise SpecError(f"{where} {column}", f"{text!r} is not a{'n integer' if kind is int else ' number'}",
                        f"write {column} as a{' whole' if kind is int else ''} number") from None
    finite = kind is int or math.isfinite(value)   # an int of any size compares exactly, never overflows
    if not finite or not least <= value <= most:
        problem = (f"{text!r} is not finite" if not finite
                   else f"{text!r} is below {_bound(least)}" if value < least
                   else f"{text!r} is above {_bound(most)}{most_means}")
        bounds = f"at least {_bound(least)}" + (f" and at most {_bound(most)}" if math.isfinite(most) else "")
        raise SpecError(f"{where} {column}", problem, f"write {column} as a number {bounds}")
    return value


def read_trace(path: Path, services: Sequence[str]) -> Trace:
    """The CSV trace `time_s,service,requests_per_second[,mean_input_tokens,mean_output_tokens]`; a bad file or row
    is a SpecError naming file:line, the column, the value and the fix."""
    try:
        text = path.read_text(encoding="utf-8-sig")   # a spreadsheet's export may start with a byte-order mark
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(str(path), f"cannot be read ({error})", "give --trace a readable UTF-8 CSV file") from None
    reader = csv.reader(text.splitlines())
    header = [name.strip() for name in next(reader, [])]
    if tuple(header[:3]) != TRACE_COLUMNS or any(name not in TOKEN_COLUMNS for name in header[3:]):
        raise SpecError(f"{path.name}:1", f"the header is {','.join(header)!r}",
                        f"start the file with {','.join(TRACE_COLUMNS)} (optionally {','.join(TOKEN_COLUMNS)})")
    rows: dict[str, list[TraceRow]] = {}
    for line, cells in enumerate(reader, start=2):
        if not any(cell.strip() for cell in cells):
            continue
        where = f"{path.name}:{line}"
        if len(cells) != len(header):
            raise SpecError(where, f"has {len(cells)} cells, the header {len(header)}",
                            f"give each row {','.join(header)}")
        values = dict(zip(header, (cell.strip() for cell in cells)))
        service = values["service"]
        if service not in services:
            raise SpecError(f"{where} service", f"{service!r} is not a model service of the stack "
                            f"({', '.join(services)})", "name one of the stack's model services")
        time = _number(values["time_s"], where, "time_s", int, 0, MAX_TRACE_SECONDS,
                       " (31 days, the longest trace the replay runs)")
        rate = _number(values["requests_per_second"], where, "requests_per_second", float, 0,
                       MAX_REQUESTS_PER_SECOND)
        tokens = [_number(values[c], where, c, int, 1) if values.get(c) else None for c in TOKEN_COLUMNS]
        earlier = rows.setdefault(service, [])
        if earlier and time <= earlier[-1].time:
            raise SpecError(f"{where} time_s", f"{time} is not after {service}'s previous row at "
                            f"{earlier[-1].time}", "list each service's rows in increasing time_s")
        earlier.append(TraceRow(time, rate, *tokens))
    times = sorted({row.time for service_rows in rows.values() for row in service_rows})
    if len(times) < 2:
        raise SpecError(path.name, "holds fewer than two distinct times, so it has no length",
                        "give rows at two or more time_s values (each holds until the next)")
    spacing = reduce(math.gcd, (b - a for a, b in zip(times, times[1:])))
    return Trace({name: tuple(r) for name, r in rows.items()}, spacing, times[-1] + spacing)


# ------------------------------------------------------------------------------------------- the scalers


@dataclass(frozen=True)
class Trigger:
    name: str
    metric_type: str      # AverageValue or Value
    threshold: float
    activation: float


@dataclass(frozen=True)
class Scaler:
    """What the replay needs of a rendered ScaledObject (and the HPA it creates)."""

    polling: int
    cooldown: int
    min_replicas: int
    max_replicas: int
    idle_replicas: int | None
    triggers: tuple[Trigger, ...]
    down_window: int
    down_policies: tuple[tuple[str, float, int], ...]   # (type, value, periodSeconds)
    down_select: str
    up_window: int
    up_policies: tuple[tuple[str, float, int], ...]
    up_select: str


def _policies(rules: Mapping[str, Any]) -> tuple[tuple[str, float, int], ...]:
    return tuple((p["type"], float(p["value"]), int(p["periodSeconds"])) for p in rules.get("policies", ()))


def scaler_from_scaled_object(body: Mapping[str, Any], service: str) -> Scaler:
    """The ScaledObject spec as serving/autoscaling.py renders it; a trigger whose name the replay has no signal for
    is refused by name."""
    triggers = []
    for trigger in body["triggers"]:
        if trigger["name"] not in SIGNALS:
            raise SpecError(f"models[{service}].autoscaling", f"its ScaledObject has a trigger named "
                            f"{trigger['name']!r}, which the simulator has no signal for (it knows {', '.join(SIGNALS)})",
                            "teach planning/simulation.py the signal, or simulate without that trigger")
        metadata = trigger["metadata"]
        triggers.append(Trigger(trigger["name"], trigger.get("metricType", "AverageValue"),
                                float(metadata["threshold"]), float(metadata.get("activationThreshold", 0))))
    behavior = body.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {})
    down, up = behavior.get("scaleDown", HPA_SCALE_DOWN), behavior.get("scaleUp", HPA_SCALE_UP)
    return Scaler(
        polling=int(body.get("pollingInterval", 30)), cooldown=int(body.get("cooldownPeriod", 300)),
        min_replicas=int(body.get("minReplicaCount", 0)), max_replicas=int(body.get("maxReplicaCount", 100)),
        idle_replicas=body.get("idleReplicaCount"), triggers=tuple(triggers),
        down_window=int(down.get("stabilizationWindowSeconds", HPA_SCALE_DOWN["stabilizationWindowSeconds"])),
        down_policies=_policies(down) or _policies(HPA_SCALE_DOWN),
        down_select=down.get("selectPolicy", "Max"),
        up_window=int(up.get("stabilizationWindowSeconds", 0)), up_policies=_policies(up) or _policies(HPA_SCALE_UP),
        up_select=up.get("selectPolicy", "Max"),
    )


def metric_replicas(trigger: Trigger, metric: float, current: int, ready: int, most: int) -> int:
    """Replicas the HPA asks for on one trigger of a KEDA external metric, at most `most` (maxReplicaCount), as
    kubernetes/kubernetes pkg/controller/podautoscaler/replica_calculator.go computes them, nothing within the
    tolerance: AverageValue (GetExternalPerPodMetricReplicas, given the target's status replicas: every pod the
    Deployment made, `current`) compares metric / (current x target) and asks ceil(metric / target); Value
    (GetExternalMetricReplicas, getUsageRatioReplicaCount) compares metric / target and asks ceil(ratio x the ready
    pods)."""
    average = trigger.metric_type == "AverageValue"
    if not current:   # from zero KEDA's activation hands the HPA minReplicaCount; the metric sizes beyond it
        return math.ceil(min(metric / trigger.threshold, most)) if average else 1
    ratio = metric / (trigger.threshold * current) if average else metric / trigger.threshold
    if abs(ratio - 1) <= HPA_TOLERANCE:
        return current
    return math.ceil(min(metric / trigger.threshold if average else ratio * ready, most))


# ------------------------------------------------------------------------------------------ the services


@dataclass(frozen=True)
class StartTimes:
    """Seconds from pod creation to serving (creation_times.replica_parts): on a node the autoscaler adds, on a node
    that runs without its weights, on a node that cached them."""

    new_node: float
    existing_node: float
    warm: float


@dataclass(frozen=True)
class ServiceSetup:
    """One model service as the replay runs it, every figure from the plan's functions."""

    name: str
    model: ModelServiceSpec
    hardware: PoolHardware
    engine: Engine
    shared_prefix_tokens: int
    default_tokens: tuple[int, int]
    slo: LatencySlo | None
    scaler: Scaler | None          # None: fixed at min_replicas (no ScaledObject rendered)
    fixed_replicas: int
    starts: StartTimes
    replica_usd_per_hour: float     # on the pool's on-demand node price
    replica_spot_usd_per_hour: float
    replica_gpus: float             # GPU equivalents a replica's devices block
    activity_window: int            # seconds the `requests` trigger remembers a request
    non_cached_tokens: int | None = None   # a prefill/decode engine's: the prompts that go to a prefill engine


@dataclass(frozen=True)
class PoolSetup:
    name: str
    hardware: PoolHardware
    floor_nodes: int                # nodes the autoscaler never removes
    max_nodes: int
    on_demand_nodes: int            # nodes beyond this run on spot (when the pool buys spot)
    empty_node_seconds: int         # how long an unneeded node stays


@dataclass(frozen=True)
class _Point:
    ttft: float
    itl: float | None      # None for one-token outputs: no token follows the first
    running: float


class _SteadyStates:
    """A replica's steady state per (workload, rate bucket), computed once."""

    def __init__(self, setup: ServiceSetup) -> None:
        self.setup = setup
        self.full: dict[tuple[int, int], float] = {}
        self.points: dict[tuple[int, int, int], _Point] = {}

    def request(self, tokens: tuple[int, int]) -> Workload:
        """The request as the service gets it."""
        prefix = self.setup.shared_prefix_tokens if self.setup.shared_prefix_tokens < tokens[0] else 0
        return Workload(tokens[0], tokens[1], prefix)

    def workload(self, tokens: tuple[int, int]) -> Workload:
        """What this engine computes of it (a prefill/decode role its part)."""
        return role_workload(self.setup.model.pd_role, self.request(tokens), self.setup.non_cached_tokens)

    def capacity(self, tokens: tuple[int, int]) -> float:
        """Requests/s one replica carries at full load."""
        if tokens not in self.full:
            engine, workload = self.setup.engine, self.workload(tokens)
            cap, _ = admission_limit(engine, workload)
            if cap < 1:
                raise SpecError(f"models[{self.setup.name}]", f"the KV cache ({engine.kv_cache_bytes / GIB:.2f} GiB a "
                                f"GPU) holds no {tokens[0]}+{tokens[1]}-token request of the trace",
                                "shorten the trace's requests or give the service more KV cache")
            point = at_concurrency(engine, workload, cap)
            self.full[tokens] = point.requests_per_second * self.setup.model.data_parallel
        return self.full[tokens]

    def point(self, tokens: tuple[int, int], per_replica_rate: float) -> _Point:
        capacity = self.capacity(tokens)
        bucket = min(RATE_BUCKETS, math.ceil(per_replica_rate / capacity * RATE_BUCKETS - 1e-9))
        key = (*tokens, bucket)
        if key not in self.points:
            ranks = self.setup.model.data_parallel
            state = at_request_rate(self.setup.engine, self.workload(tokens), capacity * bucket / RATE_BUCKETS / ranks)
            self.points[key] = _Point(state.first_token_seconds, state.inter_token_seconds,
                                      state.running * ranks)
        return self.points[key]


# -------------------------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class ServiceResult:
    """One engine's replay. A prefill engine's requests go on to its decode engine, whose row holds their latency and
    attainment: the prefill row has none."""

    service: str
    requests: float
    slo_attainment: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    gpu_hours: float
    usd: float
    cold_starts: int
    scale_ups: int
    peak_queue: float
    seconds_below_slo: int | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SimulationResult:
    seconds: int
    step: int
    services: tuple[ServiceResult, ...]

    def total(self) -> dict[str, Any]:
        answered = [s for s in self.services if s.slo_attainment is not None]
        requests = sum(s.requests for s in answered)
        met = sum(s.requests * s.slo_attainment for s in answered)
        return {
            "requests": round(requests, 1),
            "slo_attainment": round(met / requests, 6) if requests else 1.0,
            "gpu_hours": round(sum(s.gpu_hours for s in self.services), 3),
            "usd": round(sum(s.usd for s in self.services), 2),
            "cold_starts": sum(s.cold_starts for s in self.services),
            "scale_ups": sum(s.scale_ups for s in self.services),
        }


def _weighted_percentile(samples: list[tuple[float, float, float]], share: float) -> float | None:
    """The percentile of (low, high, weight) samples, each weight spread evenly from low to high (a stretch of the
    fluid queue, whose waits run linearly), found by sweeping the piecewise-linear distribution."""
    total = sum(weight for _, _, weight in samples)
    if total <= 0:
        return None
    wanted = share * total - 1e-9
    jumps: dict[float, float] = {}
    slopes: dict[float, float] = {}
    for low, high, weight in samples:
        if high - low <= 1e-9:
            jumps[low] = jumps.get(low, 0.0) + weight
        else:
            slopes[low] = slopes.get(low, 0.0) + weight / (high - low)
            slopes[high] = slopes.get(high, 0.0) - weight / (high - low)
    seen, slope, last = 0.0, 0.0, None
    for at in sorted(jumps.keys() | slopes.keys()):
        if last is not None and slope > 0 and seen + slope * (at - last) >= wanted:
            return last + (wanted - seen) / slope
        seen += slope * (at - last) if last is not None else 0.0
        if seen + jumps.get(at, 0.0) >= wanted:
            return at
        seen += jumps.get(at, 0.0)
        slope += slopes.get(at, 0.0)
        last = at
    return last


# ------------------------------------------------------------------------------------------- the replay


@dataclass(frozen=True)
class _Piece:
    """Requests that joined a queue evenly from `first` to `last`, oldest first. A decode engine's come from its
    prefill engine, with the prefill's queue waits (linear from wait_first to wait_last) and its time to first token
    (`base`) behind them."""

    first: float
    last: float
    requests: float
    wait_first: float = 0.0
    wait_last: float = 0.0
    base: float = 0.0
    handed: bool = False     # from a prefill engine: the decode engine only sends the first token

    @property
    def spacing(self) -> float:
        """Seconds between two arrivals."""
        return (self.last - self.first) / self.requests

    def waited(self, position: float) -> float:
        """The earlier queue wait of the request at `position`."""
        return self.wait_first + (self.wait_last - self.wait_first) * position / self.requests

    def after(self, taken: float) -> "_Piece":
        """The piece less its first `taken` requests."""
        return replace(self, first=self.first + taken * self.spacing, requests=self.requests - taken,
                       wait_first=self.waited(taken))


@dataclass
class _Pod:
    ready_at: float


@dataclass
class _Service:
    setup: ServiceSetup
    states: _SteadyStates
    rows: tuple[TraceRow, ...]
    replicas: int                                 # what the HPA (or KEDA at zero) asks for
    pods: list[_Pod] = field(default_factory=list)
    cached: int = 0                               # replica places whose node holds the weights
    queue: deque = field(default_factory=deque)   # _Piece, oldest first
    decode: "_Service | None" = None              # a prefill engine's decode engine, which its requests go on to
    queued: float = 0.0
    row: int = -1
    last_request: float = -math.inf
    last_active: float = -math.inf
    history: list[tuple[int, int]] = field(default_factory=list)     # (time, recommendation)
    changes: list[tuple[int, int]] = field(default_factory=list)     # (time, replicas before)
    point: _Point | None = None
    arrived: float = 0.0
    met: float = 0.0
    ttft: list[tuple[float, float, float]] = field(default_factory=list)   # (low ms, high ms, requests)
    itl: list[tuple[float, float, float]] = field(default_factory=list)
    pod_seconds_on_demand: float = 0.0
    pod_seconds_spot: float = 0.0
    cold_starts: int = 0
    scale_ups: int = 0
    peak_queue: float = 0.0
    seconds_below: float = 0.0

    def tokens(self) -> tuple[int, int]:
        """The current row's request; a prefill engine computes its prompt and one token (its default output)."""
        row = self.rows[self.row] if self.row >= 0 else None
        default = self.setup.default_tokens
        if row is None:
            return default
        output = default[1] if self.setup.model.pd_role == "prefill" else row.output_tokens or default[1]
        return (row.input_tokens or default[0], output)

    def rate(self) -> float:
        """The trace's arrivals. Under prefill/decode the picker sends a prompt with at least non_cached_tokens
        uncached tokens to a prefill engine, whose requests then go on to the decode engine; a shorter one the
        decode engine prefills itself (llm-d-router pd-profile-handler `nonCachedTokens`, serving/gateway.py)."""
        if self.row < 0:
            return 0.0
        role = self.setup.model.pd_role
        if role is not None:
            remote = self.states.request(self.tokens()).computed_prompt_tokens >= self.setup.non_cached_tokens
            if remote != (role == "prefill"):
                return 0.0
        return self.rows[self.row].requests_per_second

    def ready(self, now: float) -> int:
        return sum(1 for pod in self.pods if pod.ready_at <= now)


@dataclass
class _Pool:
    setup: PoolSetup
    nodes: int
    empty_since: int | None = None


def _step_of(services: Sequence[ServiceSetup]) -> int:
    pollings = [s.scaler.polling for s in services if s.scaler is not None]
    return reduce(math.gcd, pollings, HPA_SYNC_SECONDS)


def _signal(name: str, service: _Service, now: int) -> float:
    """A trigger's metric as Prometheus would return it at `now` (serving/autoscaling.py names the queries)."""
    ready = service.ready(now)
    if name == "requests":
        return 1.0 if now - service.last_request < service.setup.activity_window else 0.0
    if not ready:   # no pod exports the vLLM or picker metrics
        return 0.0
    point = service.point or service.states.point(service.tokens(), 0.0)
    tokens = service.tokens()
    queued = _waiting(service, now)   # a decode engine's queue holds prompts its prefill engine still computes
    if name == "queue-depth":
        return queued
    if name == "epp-queue":
        return queued / ready
    if name == "running-sequences":
        return ready * point.running
    if name == "prompt-tokens":
        # The rendered query: running plus waiting requests times the spec's computed prompt (on a prefill role every
        # running request is prefilling, so these are its outstanding prompt tokens).
        prompt = service.setup.default_tokens[0] - service.setup.shared_prefix_tokens
        return (queued + ready * point.running) * prompt
    workload = service.states.workload(tokens)   # kv-cache: the mean share of each replica's KV cache in use
    return min(1.0, kv_share(service.setup.engine, workload, point.running) / service.setup.model.data_parallel)


def _rate_limit(changes: list[tuple[int, int]], now: int, current: int, policies, select: str, up: bool) -> int:
    """The most (up) or fewest (down) replicas the HPA's policies allow now, from the replicas at the start of each
    policy's period, as kubernetes/kubernetes pkg/controller/podautoscaler/horizontal.go
    calculateScaleUpLimitWithScalingRules and calculateScaleDownLimitWithBehaviors compute it: Pods adds or removes
    its value; Percent up is int32(math.Ceil(start x (1 + value/100))), down int32(start x (1 - value/100)), the
    conversion truncating; selectPolicy Disabled allows no change."""
    if select == "Disabled":
        return current
    limits = []
    for kind, value, period in policies:
        start = next((before for at, before in changes if at > now - period), current)
        if kind == "Pods":
            limits.append(start + value if up else start - value)
        else:
            limits.append(math.ceil(start * (1 + value / 100)) if up else int(start * (1 - value / 100)))
    pick = max if (select == "Max") == up else min
    return int(pick(limits))


def _hpa(service: _Service, now: int, scaler: Scaler) -> int:
    """Replicas after one HPA evaluation at `now` with the service active."""
    current = service.replicas
    ready = service.ready(now)
    wanted = max(metric_replicas(t, _signal(t.name, service, now), current, ready, scaler.max_replicas)
                 for t in scaler.triggers)
    wanted = min(scaler.max_replicas, max(scaler.min_replicas, wanted))
    service.history.append((now, wanted))
    horizon = now - max(scaler.down_window, scaler.up_window)
    while service.history and service.history[0][0] < horizon:
        service.history.pop(0)
    # Stabilization (horizontal.go stabilizeRecommendationWithBehaviors): the recommendations of the window, those
    # with timestamp.After(now - window), this one included.
    if wanted > current:
        floor = min(r for at, r in service.history if at > now - scaler.up_window) if scaler.up_window else wanted
        wanted = min(floor, _rate_limit(service.changes, now, current, scaler.up_policies, scaler.up_select, True))
        return max(current, wanted)
    ceiling = max(r for at, r in service.history if at > now - scaler.down_window or at == now)
    wanted = max(ceiling, _rate_limit(service.changes, now, current, scaler.down_policies, scaler.down_select, False))
    return min(current, wanted)


def _control(service: _Service, now: int) -> None:
    """KEDA's poll (every pollingInterval: activation from and to idleReplicaCount) and the HPA's sync (every
    HPA_SYNC_SECONDS while the service is active)."""
    scaler = service.setup.scaler
    idle = scaler.idle_replicas
    target = service.replicas
    if idle is not None and now % scaler.polling == 0:
        active = any(_signal(t.name, service, now) > t.activation for t in scaler.triggers)
        if active:
            service.last_active = now
        if service.replicas == idle:
            target = max(scaler.min_replicas, _hpa(service, now, scaler)) if active else idle
        elif not active and now - service.last_active > scaler.cooldown:   # KEDA: lastActive + cooldown before now
            target = idle
    if target == service.replicas != idle and now % HPA_SYNC_SECONDS == 0:
        target = _hpa(service, now, scaler)
    if target != service.replicas:
        if target > service.replicas:
            service.scale_ups += 1
        service.changes.append((now, service.replicas))
        service.changes = [c for c in service.changes if c[0] > now - 3600]
        service.replicas = target


def _pool_replicas(services: Sequence[_Service], extra: _Service | None = None) -> list[tuple[ModelServiceSpec, int]]:
    return [(s.setup.model, len(s.pods) + (1 if s is extra else 0)) for s in services]


def _reconcile(pool: _Pool, services: Sequence[_Service], now: int) -> None:
    """Pods follow the replicas asked: surplus pods go (the newest first), missing ones start where they fit."""
    hardware = pool.setup.hardware
    for service in services:
        while len(service.pods) > service.replicas:
            service.pods.pop()
    for service in services:
        while len(service.pods) < service.replicas:
            needed = nodes_for_replicas(_pool_replicas(services, service), hardware)
            if needed > pool.nodes:
                if needed > pool.setup.max_nodes:
                    break   # pending: the pool is at max_nodes
                pool.nodes = needed
                seconds, cold = service.setup.starts.new_node, True
            elif len(service.pods) < service.cached:
                seconds, cold = service.setup.starts.warm, False
            else:
                seconds, cold = service.setup.starts.existing_node, True
            service.pods.append(_Pod(now + seconds))
            service.cached = max(service.cached, len(service.pods))
            service.cold_starts += cold
    needed = max(pool.setup.floor_nodes, nodes_for_replicas(_pool_replicas(services), hardware))
    if needed >= pool.nodes:
        pool.empty_since = None
    elif pool.empty_since is None:
        pool.empty_since = now
    elif now - pool.empty_since >= pool.setup.empty_node_seconds:
        pool.nodes, pool.empty_since = needed, None
        for service in services:   # the nodes left keep the weights of what they can hold
            held = _held_on(service.setup.model, hardware, pool.nodes)
            service.cached = min(service.cached, max(len(service.pods), held))


def _held_on(model: ModelServiceSpec, hardware: PoolHardware, nodes: int) -> int:
    """Replicas of one service `nodes` nodes hold alone."""
    count = 0
    while nodes_for_replicas([(model, count + 1)], hardware) <= nodes:
        count += 1
    return count


def _serve(service: _Service, now: int, until: int) -> None:
    """Arrivals and service from `now` to `until`, in stretches of constant arrival rate and ready replicas: split
    at the service's trace rows and at the moments its pods become ready."""
    cuts = {until}
    following = service.row + 1
    while following < len(service.rows) and service.rows[following].time < until:
        if service.rows[following].time > now:
            cuts.add(service.rows[following].time)
        following += 1
    cuts.update(pod.ready_at for pod in service.pods if now < pod.ready_at < until)
    start: float = now
    for end in sorted(cuts):
        while service.row + 1 < len(service.rows) and service.rows[service.row + 1].time <= start:
            service.row += 1
        _serve_stretch(service, start, end)
        start = end


def _serve_stretch(service: _Service, start: float, end: float) -> None:
    """The fluid first-in-first-out queue over one stretch. The trace's requests arrive evenly over it and join the
    tail (a decode engine's come from its prefill engine instead); the ready replicas drain the head at their
    full-load rate `speed`. With both constant over a queued piece, the request at position u of the piece gets its
    turn at max(its arrival, free + u / speed), `free` being when the request before the piece got its turn, so its
    wait is linear in u, cut at zero (_segments)."""
    rate = service.rate()
    backlog = _waiting(service, start)
    if rate > 0:
        piece = _Piece(start, end, rate * (end - start))
        _arrive(service, piece)
        service.arrived += piece.requests
        if service.decode is not None:   # the service's row counts every request sent to it, wherever it waits
            service.decode.arrived += piece.requests
    ready = service.ready(start)
    tokens = service.tokens()
    speed = ready * service.states.capacity(tokens) if ready else 0.0
    service.point = None
    if speed:
        taken = _take(service, start, end, speed)
        served = sum(count for _, count, _, _ in taken)
        service.point = service.states.point(tokens, served / (end - start) / ready)
        for piece, count, free, slope in taken:
            _book(service, piece, count, free, slope, speed)
    service.peak_queue = max(service.peak_queue, backlog, _waiting(service, end))


def _waiting(service: _Service, at: float) -> float:
    """Requests queued at `at`: a decode engine's queue already holds what its prefill engine hands on later in
    the step."""
    later = 0.0
    for piece in reversed(service.queue):
        if piece.last <= at:
            break
        later += piece.requests if piece.first >= at else (piece.last - at) / piece.spacing
    return max(0.0, service.queued - later)


def _arrive(service: _Service, piece: _Piece) -> None:
    service.queue.append(piece)
    service.queued += piece.requests
    service.last_request = max(service.last_request, piece.last)


def _take(service: _Service, start: float, end: float, speed: float) -> list[tuple[_Piece, float, float, float]]:
    """Drain the queue's head up to `end`: per piece (the piece as it was, the requests taken, when the server was
    free for its first, the wait's change per request)."""
    taken = []
    free = start
    while service.queue and free < end - 1e-12:
        piece = service.queue[0]
        if piece.first >= end:
            break
        spacing = piece.spacing
        free = max(free, piece.first)
        count = min(piece.requests, (end - free) * speed)
        if piece.last > end and spacing > 0:   # only the requests that arrived by `end`
            count = min(count, (end - piece.first) / spacing)
        if count <= 0:
            break
        taken.append((piece, count, free, 1 / speed - spacing))
        free = max(piece.first + count * spacing, free + count / speed)
        service.queued -= count
        if piece.requests - count <= 1e-9 * max(1.0, piece.requests):
            service.queued -= piece.requests - count
            service.queue.popleft()
        else:
            service.queue[0] = piece.after(count)
            break
    service.queued = max(0.0, service.queued) if service.queue else 0.0   # no rounding residue in an empty queue
    return taken


def _segments(wait_at: float, slope: float, count: float) -> list[tuple[float, float, float, float]]:
    """(from, to, wait at from, wait at to) over `count` requests whose unclamped wait runs from wait_at by `slope`
    per request, split where it crosses zero: below, a request was served as it arrived."""
    end_wait = wait_at + slope * count
    if (wait_at >= 0) == (end_wait >= 0) or slope == 0:
        return [(0.0, count, max(0.0, wait_at), max(0.0, end_wait))]
    zero = -wait_at / slope
    return [(0.0, zero, max(0.0, wait_at), 0.0), (zero, count, 0.0, max(0.0, end_wait))]


def _book(service: _Service, piece: _Piece, count: float, free: float, slope: float, speed: float) -> None:
    """The `count` requests taken from the head of `piece`: a prefill engine hands them to its decode engine when
    their prompt is computed, a time to first token after their turn (their first token is not out yet), any other
    engine books them."""
    point = service.point
    for low, high, wait_low, wait_high in _segments(free - piece.first, slope, count):
        if high - low <= 0:
            continue
        before_low, before_high = piece.waited(low), piece.waited(high)
        if service.decode is not None:
            leave_low = piece.first + low * piece.spacing + wait_low + point.ttft
            leave_high = piece.first + high * piece.spacing + wait_high + point.ttft
            _arrive(service.decode, _Piece(leave_low, max(leave_high, leave_low + 1e-9), high - low,
                                           before_low + wait_low, before_high + wait_high, piece.base + point.ttft,
                                           handed=True))
        else:
            _count(service, before_low + wait_low, before_high + wait_high, piece, high - low, speed)


def _count(service: _Service, wait_from: float, wait_to: float, piece: _Piece, requests: float, speed: float) -> None:
    """Book `requests` whose queue waits run linearly from wait_from to wait_to at the stretch's steady state: their
    TTFT and ITL samples, the share within the SLO and the seconds of first tokens outside it (a request that waited
    got its turn while the replicas were busy, one every 1 / speed seconds). A request a prefill engine handed on
    has its time to first token there behind it (piece.base), and the decode engine adds one decode step for the
    first token it sends."""
    point, slo = service.point, service.setup.slo
    first_token = piece.base + (point.itl or point.ttft) if piece.handed else point.ttft
    low, high = min(wait_from, wait_to), max(wait_from, wait_to)
    if slo is None:
        share = 1.0 if high <= 1e-9 else 0.0
    elif slo.itl_ms is not None and point.itl is not None and point.itl * 1000 > slo.itl_ms:
        share = 0.0
    elif slo.ttft_ms is None:
        share = 1.0
    else:
        limit = slo.ttft_ms / 1000 - first_token   # the longest wait within the SLO
        share = 1.0 if high <= limit else 0.0 if low > limit else (limit - low) / (high - low)
    service.met += requests * share
    service.seconds_below += requests * (1 - share) / speed
    service.ttft.append(((first_token + low) * 1000, (first_token + high) * 1000, requests))
    if point.itl is not None:
        service.itl.append((point.itl * 1000, point.itl * 1000, requests))


def simulate(services: Sequence[ServiceSetup], pools: Sequence[PoolSetup], trace: Trace) -> SimulationResult:
    """Replay `trace` through the services on their pools (every service of the stack: one the trace does not name
    gets no requests)."""
    step = _step_of(services)
    state = []
    for setup in services:
        scaler = setup.scaler
        start = setup.fixed_replicas if scaler is None else (
            scaler.idle_replicas if scaler.idle_replicas is not None else scaler.min_replicas)
        state.append(_Service(setup, _SteadyStates(setup), trace.rows.get(setup.model.pd_service or setup.name, ()),
                              start, [_Pod(0) for _ in range(start)], start))
    for service in state:
        if service.setup.model.pd_role == "prefill":
            service.decode = next(s for s in state if s.setup.name == service.setup.model.pd_service)
    # Prefill engines serve first in each step: their requests reach the decode engines within it.
    order = sorted(state, key=lambda s: s.setup.model.pd_role != "prefill")
    by_pool = {pool.name: [s for s in state if s.setup.model.pool == pool.name] for pool in pools}
    pool_state = {}
    for pool in pools:
        held = nodes_for_replicas(_pool_replicas(by_pool[pool.name]), pool.hardware)
        pool_state[pool.name] = _Pool(pool, max(pool.floor_nodes, held))
    for now in range(0, trace.end, step):
        seconds = min(step, trace.end - now)   # the last step stops at the trace's end
        for service in state:
            while service.row + 1 < len(service.rows) and service.rows[service.row + 1].time <= now:
                service.row += 1
            if service.setup.scaler is not None:
                _control(service, now)
        for name, members in by_pool.items():
            pool = pool_state[name]
            _reconcile(pool, members, now)
            spot = max(0, pool.nodes - pool.setup.on_demand_nodes) / pool.nodes if pool.nodes else 0.0
            for service in members:
                service.pod_seconds_on_demand += len(service.pods) * seconds * (1 - spot)
                service.pod_seconds_spot += len(service.pods) * seconds * spot
        for service in order:
            _serve(service, now, now + seconds)
    return SimulationResult(trace.end, step, tuple(_result(s) for s in state))


def _result(service: _Service) -> ServiceResult:
    setup = service.setup
    # Requests still queued at the end (a prefill/decode service's at either engine, or on their way between them)
    # never got their first token in the replay: they count as missed.
    attainment = service.met / service.arrived if service.arrived else 1.0
    hands_on = service.decode is not None
    pod_hours = (service.pod_seconds_on_demand + service.pod_seconds_spot) / SECONDS_PER_HOUR

    def percentile(samples: list[tuple[float, float, float]], share: float) -> float | None:
        value = _weighted_percentile(samples, share)
        return None if value is None or math.isinf(value) else round(value, 1)

    return ServiceResult(
        service=setup.name,
        requests=round(service.arrived, 1),
        slo_attainment=None if hands_on else round(attainment, 6),
        ttft_p50_ms=percentile(service.ttft, 0.5), ttft_p95_ms=percentile(service.ttft, 0.95),
        itl_p50_ms=percentile(service.itl, 0.5), itl_p95_ms=percentile(service.itl, 0.95),
        gpu_hours=round(pod_hours * setup.replica_gpus, 3),
        usd=round((service.pod_seconds_on_demand * setup.replica_usd_per_hour
                   + service.pod_seconds_spot * setup.replica_spot_usd_per_hour) / SECONDS_PER_HOUR, 2),
        cold_starts=service.cold_starts,
        scale_ups=service.scale_ups,
        peak_queue=round(service.peak_queue, 1),
        seconds_below_slo=None if hands_on else round(service.seconds_below),
    )
