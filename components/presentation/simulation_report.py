"""`inferstack simulate`: a stack's services and pools as the replay runs them, overrides, the comparison, the
recommendation and the table.

The ScaledObject each service gets is the one the program renders (serving/autoscaling.scaled_object_spec), the
start times the plan's (creation_times.replica_parts), the prices the plan's (cost.replica_node_price and
node_price for spot), the steady states the throughput model's (service_performance.engine_for).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from pydantic import ValidationError

from inferstack.planning import simulation as sim
from inferstack.planning.cost import node_price, replica_node_price
from inferstack.planning.disaggregation import PREFILL_OUTPUT_TOKENS, service_of
from inferstack.planning.creation_times import replica_parts
from inferstack.planning.node_groups import nodes_at_min, on_demand_node_limit
from inferstack.planning.service_performance import engine_for, replica_usd_per_hour
from inferstack.planning.sizing import checkpoint_bytes
from inferstack.platform.karpenter_pools import SERVING_CONSOLIDATE_AFTER
from inferstack.serving.autoscaling import ACTIVITY_WINDOW, needs_scaler, scaled_object_spec, scaler_metric
from inferstack.serving.model_service import scale_target
from inferstack.spec import ModelServiceSpec, SpecError, StackSpec, TrafficSpec, describe_validation_error
from inferstack.validation import ValidatedStack, validate

# cluster-autoscaler removes a node unneeded for --scale-down-unneeded-time, 10 minutes unless set (kubernetes/
# autoscaler cluster-autoscaler/FAQ.md, "What are the parameters to CA?"); the stack's chart values leave it.
CLUSTER_AUTOSCALER_UNNEEDED_SECONDS = 600
# The recommendation tries each trigger's target at these multiples: lower scales out sooner (more replicas, more
# attainment), higher later.
TARGET_SCALES = (0.5, 0.75, 1.0, 1.25, 1.5)
SET_PATTERN = re.compile(r"^models\[([^\]]+)\]\.autoscaling\.([a-z_]+)=(.+)$")
UNITS = {"s": 1, "m": 60, "h": 3600}


def _seconds(duration: str) -> int:
    """A Kubernetes/Prometheus duration such as 10m, 30m or 1h30m in seconds."""
    return sum(int(amount) * UNITS[unit] for amount, unit in re.findall(r"(\d+)([smh])", duration))


def _scaler(spec: StackSpec, model: ModelServiceSpec) -> sim.Scaler | None:
    if not needs_scaler(spec, model):
        return None
    return sim.scaler_from_scaled_object(scaled_object_spec(spec, model, scale_target(model), ""), model.name)


def _service(spec: StackSpec, validated: ValidatedStack, model: ModelServiceSpec) -> sim.ServiceSetup:
    hardware = validated.pools[model.pool]
    price = replica_node_price(spec, hardware)
    if price is None:
        raise SpecError(f"models[{model.name}].pool", f"{hardware.primary.name} has no on-demand price in "
                        f"{spec.region}, so the replay cannot price {model.name}",
                        f"state it in budget.prices (instance_type {hardware.primary.name!r}, purchase 'on_demand')")
    spot = node_price(spec.budget, spec.region, hardware.primary.name, "spot") or price
    weights, loader = checkpoint_bytes(model), model.weight_loader

    def start(**where: bool) -> float:
        return sum(seconds for _, _, seconds in replica_parts(weights, loader, **where))

    service = service_of(spec.models, model)   # a prefill engine serves its disaggregated service's traffic
    traffic = service.traffic
    tokens = (traffic.mean_input_tokens, traffic.mean_output_tokens) if traffic is not None else default_tokens(model)
    if model.pd_role == "prefill":
        tokens = (tokens[0], PREFILL_OUTPUT_TOKENS)
    return sim.ServiceSetup(
        name=model.name, model=model, hardware=hardware, engine=engine_for(model, hardware),
        shared_prefix_tokens=traffic.shared_prefix_tokens if traffic is not None else 0, default_tokens=tokens,
        slo=service.slo, scaler=_scaler(spec, model), fixed_replicas=model.autoscaling.min_replicas,
        starts=sim.StartTimes(start(new_node=True), start(new_node=False), start(warm=True)),
        replica_usd_per_hour=replica_usd_per_hour(model, hardware, price.usd_per_hour),
        replica_spot_usd_per_hour=replica_usd_per_hour(model, hardware, spot.usd_per_hour),
        # Priced at one dollar a GPU, a replica's price is the GPUs its devices block (a MIG slice's share of one).
        replica_gpus=replica_usd_per_hour(model, hardware, hardware.gpus_per_node),
        activity_window=_seconds(ACTIVITY_WINDOW),
        non_cached_tokens=service.disaggregation.non_cached_tokens if service.disaggregation is not None else None,
    )


def default_tokens(model: ModelServiceSpec) -> tuple[int, int]:
    """A trace row's tokens where neither the row nor the service's traffic states them: TrafficSpec's defaults,
    for a pooling model (an embedding answers with no generated token) one output token, the prompt cut to fit
    max_model_len."""
    defaults = TrafficSpec.model_fields
    output = defaults["mean_output_tokens"].default if model.resolved_architecture.task == "generate" else 1
    return min(defaults["mean_input_tokens"].default, model.max_model_len - output), output


def setups(validated: ValidatedStack) -> tuple[list[sim.ServiceSetup], list[sim.PoolSetup]]:
    spec = validated.stack
    services = [_service(spec, validated, m) for m in spec.models]
    pools = []
    autoscaler = spec.platform.node_autoscaler
    for pool in spec.node_pools:
        if not any(s.model.pool == pool.name for s in services):
            continue
        floor = 0 if autoscaler == "karpenter" else nodes_at_min(pool)
        pools.append(sim.PoolSetup(
            name=pool.name, hardware=validated.pools[pool.name], floor_nodes=floor,
            max_nodes=floor if autoscaler == "none" else pool.max_nodes,
            on_demand_nodes=on_demand_node_limit(pool) if pool.capacity.spot else pool.max_nodes,
            empty_node_seconds=(_seconds(SERVING_CONSOLIDATE_AFTER) if autoscaler == "karpenter"
                                else CLUSTER_AUTOSCALER_UNNEEDED_SECONDS),
        ))
    return services, pools


def read_trace(path: Path, validated: ValidatedStack) -> sim.Trace:
    """The trace file, read once and checked against the stack (check_trace)."""
    trace = sim.read_trace(path, [m.name for m in validated.stack.models])
    check_trace(trace, path.name, validated)
    return trace


def check_trace(trace: sim.Trace, name: str, validated: ValidatedStack) -> None:
    """Every service the trace names is one the replay runs in this stack, and each row's request fits the service's
    max_model_len (a row without tokens takes the service's traffic, else default_tokens)."""
    services = {s.name: s for s in setups(validated)[0] if s.model.pd_role != "prefill"}
    for service, rows in trace.rows.items():
        if service not in services:
            raise SpecError(f"{name} service", f"{service!r} is not a model service of {validated.environment} "
                            f"({', '.join(services)})", "name one of the stack's model services")
        model, (prompt, output) = services[service].model, services[service].default_tokens
        source = "its traffic" if model.traffic is not None else "the defaults for a service without traffic"
        for row in rows:
            tokens = (row.input_tokens or prompt) + (row.output_tokens or output)
            if tokens > model.max_model_len:
                unset = [c for c, v in zip(sim.TOKEN_COLUMNS, (row.input_tokens, row.output_tokens)) if v is None]
                taken = f" ({', '.join(unset)} from {source})" if unset else ""
                raise SpecError(f"{name} {service} at time_s {row.time}", f"a request of {tokens} tokens{taken} is "
                                f"longer than {service}'s max_model_len {model.max_model_len}",
                                "give the row mean_input_tokens and mean_output_tokens that fit max_model_len")


# ----------------------------------------------------------------------------------------------- overrides


def with_overrides(validated: ValidatedStack, assignments: Sequence[str]) -> ValidatedStack:
    """The stack with each `models[i|name].autoscaling.FIELD=VALUE` applied to its spec and validated again as a
    stack file is: a bad value is the same SpecError, named by its --set."""
    document = validated.written.model_dump(mode="json", exclude_unset=True)
    names = [m["name"] for m in document["models"]]
    for assignment in assignments:
        found = SET_PATTERN.match(assignment)
        if found is None:
            raise SpecError(f"--set {assignment}", "is not of the form models[INDEX or NAME].autoscaling.FIELD=VALUE",
                            "write e.g. --set models[0].autoscaling.min_replicas=3")
        which, key, text = found.groups()
        index = int(which) if which.isdigit() else names.index(which) if which in names else None
        if index is None or index >= len(names):
            raise SpecError(f"--set {assignment}", f"{which!r} is no model service of the stack "
                            f"(0-{len(names) - 1}: {', '.join(names)})", "give an index or a service name")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        document["models"][index].setdefault("autoscaling", {})[key] = value
    try:
        return validate(StackSpec.model_validate(document))
    except ValidationError as error:
        located = describe_validation_error(error, StackSpec)
        raise SpecError(f"--set {' '.join(assignments)}: {located.path}", located.problem, located.fix) from None
    except SpecError as error:
        raise error.relocated(lambda at: f"--set {' '.join(assignments)}: {at}") from None


# ---------------------------------------------------------------------------------------------- the replay


def run(validated: ValidatedStack, trace: sim.Trace) -> sim.SimulationResult:
    services, pools = setups(validated)
    return sim.simulate(services, pools, trace)


def recommend(validated: ValidatedStack, trace: sim.Trace, attainment: float) -> list[dict[str, Any]]:
    """Per scaled service, the cheapest (min_replicas, scaler target) that meets `attainment` on the trace: every
    min_replicas up to max_replicas, each with the trigger's target as the stack states or derives it and at the
    TARGET_SCALES of it (the same metric, stated). Each candidate is the stack with those fields validated again (one
    the spec refuses is listed with its reason, never recommended) and replayed with its pool's other services as
    they are (services of other pools do not share its nodes)."""
    services, pools = setups(validated)
    found = []
    for setup in services:
        scaling = setup.model.autoscaling
        if setup.scaler is None or setup.model.pd_role == "prefill":   # --set names services, not prefill engines
            continue
        now = scaler_metric(validated.stack, setup.model)
        mates, pool = _sharing(setup, services, pools)
        tried: list[dict[str, Any]] = []
        for minimum in range(0 if scaling.scale_to_zero else 1, scaling.max_replicas + 1):
            for scale in TARGET_SCALES:
                target = float(now.threshold) * scale
                fields = {"min_replicas": minimum} | ({} if scale == 1 else {"metric": now.metric, "target": target})
                tried.append({"min_replicas": minimum, "metric": now.metric, "target": float(f"{target:.4g}"),
                              **_replayed(validated, setup, mates, pool, trace, fields)})
        meeting = [t for t in tried if t.get("slo_attainment", -1) >= attainment]
        # Ties in cost keep the fewest replicas, then the target nearest the stack's own (no change for nothing).
        best = min(meeting, key=lambda t: (t["usd"], t["min_replicas"], abs(t["target"] - float(now.threshold)))
                   ) if meeting else {}
        found.append({
            "service": setup.name, "attainment_target": attainment, "min_replicas_now": scaling.min_replicas,
            "metric": now.metric, "target_now": float(now.threshold), "target_source": now.derivation if now.derivation in ("stated", "default") else "derived",
            "min_replicas": best.get("min_replicas"), "target": best.get("target"),
            "slo_attainment": best.get("slo_attainment"), "usd": best.get("usd"), "tried": tried,
        })
    return found


def _sharing(setup: sim.ServiceSetup, services: list[sim.ServiceSetup], pools: list[sim.PoolSetup]
             ) -> tuple[list[sim.ServiceSetup], list[sim.PoolSetup]]:
    """What a candidate replays with: the services on its pool and, for a prefill/decode service, its prefill
    engine's pool (each pool's services share its nodes; other pools do not matter)."""
    names = {s.model.pool for s in services if s.model.pd_service and s.model.pd_service == setup.model.pd_service}
    names.add(setup.model.pool)
    return [s for s in services if s.model.pool in names], [p for p in pools if p.name in names]


def _replayed(validated: ValidatedStack, setup: sim.ServiceSetup, mates: list[sim.ServiceSetup],
              pool: list[sim.PoolSetup], trace: sim.Trace, fields: dict[str, Any]) -> dict[str, Any]:
    """One candidate's attainment and cost, or why the spec refuses it."""
    try:
        changed = with_overrides(validated, [f"models[{setup.name}].autoscaling.{key}={json.dumps(value)}"
                                             for key, value in fields.items()])
    except SpecError as error:
        return {"refused": error.problem}
    model = next(m for m in changed.stack.models if m.name == setup.name)
    candidate = replace(setup, model=model, scaler=_scaler(changed.stack, model),
                        fixed_replicas=model.autoscaling.min_replicas)
    result = sim.simulate([candidate if s is setup else s for s in mates], pool, trace)
    row = next(r for r in result.services if r.service == setup.name)
    return {"slo_attainment": row.slo_attainment, "usd": row.usd}


def report(name: str, trace_path: Path, result: sim.SimulationResult) -> dict[str, Any]:
    return {
        "stack": name, "trace": trace_path.name, "seconds": result.seconds, "controller_step_seconds": result.step,
        "services": [s.as_dict() for s in result.services], "total": result.total(),
    }


# ------------------------------------------------------------------------------------------------ the table

COLUMNS = (("slo_attainment", "attain"), ("ttft_p50_ms", "TTFT p50"), ("ttft_p95_ms", "TTFT p95"),
           ("itl_p50_ms", "ITL p50"), ("itl_p95_ms", "ITL p95"), ("gpu_hours", "GPU h"), ("usd", "USD"),
           ("cold_starts", "cold"), ("scale_ups", "ups"), ("peak_queue", "peak q"),
           ("seconds_below_slo", "s below"))


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "slo_attainment":
        return f"{value:.2%}"
    if key == "usd":
        return f"{value:,.2f}"
    if isinstance(value, float):
        return f"{value:,.1f}" if key != "gpu_hours" else f"{value:,.2f}"
    return f"{value:,}"


def _table(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    header = ["service", *(label for _, label in COLUMNS)]
    body = [[label, *(_cell(k, row.get(k)) for k, _ in COLUMNS)] for label, row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def aligned(line: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))

    return [aligned(header), *(aligned(line) for line in body)]


def _recommendation_line(found: dict[str, Any]) -> str:
    target = f"{found['attainment_target']:.0%}"
    replayed = [t for t in found["tried"] if "refused" not in t]
    now = f"now {found['min_replicas_now']}, {found['metric']} {found['target_now']:g} {found['target_source']}"
    if found["min_replicas"] is not None:
        line = (f"{found['service']}: cheapest meeting {target}: min_replicas {found['min_replicas']}, "
                f"{found['metric']} {found['target']:g} ({now}): {found['slo_attainment']:.2%}, "
                f"${found['usd']:,.2f}")
    elif replayed:
        best = max(replayed, key=lambda t: (t["slo_attainment"], -t["usd"]))
        line = (f"{found['service']}: nothing tried meets {target} (best: min_replicas {best['min_replicas']}, "
                f"{found['metric']} {best['target']:g}: {best['slo_attainment']:.2%}, ${best['usd']:,.2f}; {now})")
    else:
        line = f"{found['service']}: the spec refuses every candidate ({now})"
    return line + "".join(f"; the spec refuses {which}: {why}" for which, why in _refusals(found))


def _refusals(found: dict[str, Any]) -> list[tuple[str, str]]:
    """The refused candidates, each group with the first one's reason: the min_replicas values refused at every
    target, then the targets refused at every other min_replicas, then any other pair."""
    tried = found["tried"]
    metric = found["metric"]
    by_minimum: dict[int, list[dict[str, Any]]] = {}
    for t in tried:
        by_minimum.setdefault(t["min_replicas"], []).append(t)
    whole = [m for m, rows in by_minimum.items() if all("refused" in t for t in rows)]
    rest = [t for t in tried if t["min_replicas"] not in whole]
    left = {m for m in by_minimum if m not in whole}
    targets = [v for v in dict.fromkeys(t["target"] for t in rest)
               if all("refused" in t for t in rest if t["target"] == v) and left]
    pairs = [t for t in rest if "refused" in t and t["target"] not in targets]
    grouped = []
    if whole:
        grouped.append(("min_replicas " + ", ".join(map(str, whole)), by_minimum[whole[0]][0]["refused"]))
    if targets:
        first = next(t for t in rest if t["target"] == targets[0])
        grouped.append((f"{metric} " + ", ".join(f"{v:g}" for v in targets), first["refused"]))
    grouped += [(f"min_replicas {t['min_replicas']} with {metric} {t['target']:g}", t["refused"]) for t in pairs]
    return grouped


def as_text(reports: list[dict[str, Any]], recommendations: list[dict[str, Any]]) -> str:
    """One table; with a comparison, each service's rows side by side (one per stack)."""
    first = reports[0]
    lines = [f"simulate {first['stack']} over {first['trace']}: {first['seconds']:,} s, the scalers acting every "
             f"{first['controller_step_seconds']} s"]
    rows = []
    for index, service in enumerate(first["services"]):
        for report_ in reports:
            match = next((s for s in report_["services"] if s["service"] == service["service"]), None)
            if match is not None:
                label = service["service"] if len(reports) == 1 else f"{service['service']} [{report_['stack']}]"
                rows.append((label, match))
    for report_ in reports:
        rows.append(("total" if len(reports) == 1 else f"total [{report_['stack']}]", report_["total"]))
    lines += _table(rows)
    lines += [_recommendation_line(r) for r in recommendations]
    return "\n".join(lines)
