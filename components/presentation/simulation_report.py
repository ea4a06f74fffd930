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
from inferstack.planning.creation_times import replica_parts
from inferstack.planning.node_groups import nodes_at_min, on_demand_node_limit
from inferstack.planning.service_performance import engine_for, replica_usd_per_hour
from inferstack.planning.sizing import checkpoint_bytes
from inferstack.platform.karpenter_pools import SERVING_CONSOLIDATE_AFTER
from inferstack.serving.autoscaling import ACTIVITY_WINDOW, needs_scaler, scaled_object_spec
from inferstack.serving.model_service import scale_target
from inferstack.spec import ModelServiceSpec, SpecError, StackSpec, TrafficSpec, describe_validation_error
from inferstack.validation import ValidatedStack, validate

# cluster-autoscaler removes a node unneeded for --scale-down-unneeded-time, 10 minutes unless set (kubernetes/
# autoscaler cluster-autoscaler/FAQ.md, "What are the parameters to CA?"); the stack's chart values leave it.
CLUSTER_AUTOSCALER_UNNEEDED_SECONDS = 600
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

    traffic = model.traffic
    defaults = TrafficSpec.model_fields
    tokens = ((traffic.mean_input_tokens, traffic.mean_output_tokens) if traffic is not None
              else (defaults["mean_input_tokens"].default, defaults["mean_output_tokens"].default))
    return sim.ServiceSetup(
        name=model.name, model=model, hardware=hardware, engine=engine_for(model, hardware),
        shared_prefix_tokens=traffic.shared_prefix_tokens if traffic is not None else 0, default_tokens=tokens,
        slo=model.slo, scaler=_scaler(spec, model), fixed_replicas=model.autoscaling.min_replicas,
        starts=sim.StartTimes(start(new_node=True), start(new_node=False), start(warm=True)),
        replica_usd_per_hour=replica_usd_per_hour(model, hardware, price.usd_per_hour),
        replica_spot_usd_per_hour=replica_usd_per_hour(model, hardware, spot.usd_per_hour),
        # Priced at one dollar a GPU, a replica's price is the GPUs its devices block (a MIG slice's share of one).
        replica_gpus=replica_usd_per_hour(model, hardware, hardware.gpus_per_node),
        activity_window=_seconds(ACTIVITY_WINDOW),
    )


def not_modelled(spec: StackSpec) -> dict[str, str]:
    """Services the replay leaves out, and why."""
    return {m.name: "a prefill/decode service: the engine-step model is one engine that prefills and decodes"
            for m in spec.models if m.disaggregation is not None or m.pd_role is not None}


def setups(validated: ValidatedStack) -> tuple[list[sim.ServiceSetup], list[sim.PoolSetup]]:
    spec = validated.stack
    skipped = not_modelled(spec)
    services = [_service(spec, validated, m) for m in spec.models if m.name not in skipped]
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
    skipped = not_modelled(validated.stack)
    trace = sim.read_trace(path, [m.name for m in validated.stack.models])
    services = {s.name: s for s in setups(validated)[0]}
    for name, rows in trace.rows.items():
        if name in skipped:
            raise SpecError(f"{path.name} service", f"{name!r} is {skipped[name]}", "leave it out of the trace")
        model, (prompt, output) = services[name].model, services[name].default_tokens
        for row in rows:
            tokens = (row.input_tokens or prompt) + (row.output_tokens or output)
            if tokens > model.max_model_len:
                raise SpecError(f"{path.name} {name} at time_s {row.time}", f"a request of {tokens} tokens is longer "
                                f"than {name}'s max_model_len {model.max_model_len}",
                                "give the row mean_input_tokens and mean_output_tokens that fit max_model_len")
    return trace


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
    """Per scaled service, the cheapest min_replicas that meets `attainment` on the trace. Each candidate is the stack
    with that min_replicas validated again (one the spec refuses is listed with its reason, never recommended) and
    replayed with its pool's other services as they are (services of other pools do not share its nodes)."""
    services, pools = setups(validated)
    found = []
    for setup in services:
        scaling = setup.model.autoscaling
        if setup.scaler is None:
            continue
        pool = [p for p in pools if p.name == setup.model.pool]
        mates = [s for s in services if s.model.pool == setup.model.pool]
        tried: list[dict[str, Any]] = []
        for minimum in range(0 if scaling.scale_to_zero else 1, scaling.max_replicas + 1):
            try:
                changed = with_overrides(validated, [f"models[{setup.name}].autoscaling.min_replicas={minimum}"])
            except SpecError as error:
                tried.append({"min_replicas": minimum, "refused": error.problem})
                continue
            model = next(m for m in changed.stack.models if m.name == setup.name)
            candidate = replace(setup, model=model, scaler=_scaler(changed.stack, model), fixed_replicas=minimum)
            result = sim.simulate([candidate if s is setup else s for s in mates], pool, trace)
            row = next(r for r in result.services if r.service == setup.name)
            tried.append({"min_replicas": minimum, "slo_attainment": row.slo_attainment, "usd": row.usd})
        meeting = [t for t in tried if t.get("slo_attainment", -1) >= attainment]
        best = min(meeting, key=lambda t: (t["usd"], t["min_replicas"])) if meeting else {}
        found.append({
            "service": setup.name, "attainment_target": attainment, "min_replicas_now": scaling.min_replicas,
            "min_replicas": best.get("min_replicas"), "slo_attainment": best.get("slo_attainment"),
            "usd": best.get("usd"), "tried": tried,
        })
    return found


def report(name: str, trace_path: Path, result: sim.SimulationResult) -> dict[str, Any]:
    return {
        "stack": name, "trace": trace_path.name, "seconds": result.seconds, "step_seconds": result.step,
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
    refused = [t for t in found["tried"] if "refused" in t]
    if found["min_replicas"] is not None:
        line = (f"{found['service']}: cheapest min_replicas meeting {target}: {found['min_replicas']} (now "
                f"{found['min_replicas_now']}): {found['slo_attainment']:.2%}, ${found['usd']:,.2f}")
    else:
        best = max(replayed, key=lambda t: (t["slo_attainment"], -t["usd"]))
        line = (f"{found['service']}: no min_replicas meets {target} (best {best['min_replicas']}: "
                f"{best['slo_attainment']:.2%}, ${best['usd']:,.2f})")
    if refused:
        counts = ", ".join(str(t["min_replicas"]) for t in refused)
        line += f"; the spec refuses {counts}: {refused[0]['refused']}"
    return line


def as_text(reports: list[dict[str, Any]], recommendations: list[dict[str, Any]]) -> str:
    """One table; with a comparison, each service's rows side by side (one per stack)."""
    first = reports[0]
    lines = [f"simulate {first['stack']} over {first['trace']}: {first['seconds']:,} s in steps of "
             f"{first['step_seconds']} s"]
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
