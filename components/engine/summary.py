"""The plan: what a team reads before it spends money — resources by layer, pools, placements, cost."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from inferstack.cost import stack_costs
from inferstack.engine.recorder import Recording
from inferstack.sizing import GIB, fit
from inferstack.spec import StackSpec
from inferstack.spec.pools import PoolHardware


def layers(recording: Recording) -> dict[str, dict[str, int]]:
    """Resource counts by type under each top-level component (a layer of the platform)."""
    parents = {r.name: r.parent for r in recording.resources}
    kinds = {r.name: r.type for r in recording.resources}
    counts: dict[str, Counter] = defaultdict(Counter)
    for registration in recording.resources:
        if not registration.custom:
            continue
        top = registration.name
        while parents.get(top) is not None:
            top = parents[top]
        layer = kinds.get(top, registration.type) if top != registration.name else "(top level)"
        counts[layer][registration.type] += 1
    return {layer: dict(sorted(c.items())) for layer, c in sorted(counts.items())}


def node_pools(spec: StackSpec) -> list[dict[str, Any]]:
    costs = {c.pool: c for c in stack_costs(spec)}
    rows = []
    for pool in spec.node_pools:
        hardware = PoolHardware(pool)
        cost = costs[pool.name]
        rows.append(
            {
                "name": pool.name,
                "role": pool.role,
                "instance_types": list(pool.instance_types),
                "gpu": hardware.gpu.name,
                "gpus_per_node": hardware.gpus_per_node,
                "nodes": {"min": pool.min_nodes, "max": pool.max_nodes, "on_demand_base": pool.capacity.on_demand_base},
                "capacity": "on-demand" if not pool.capacity.spot else (
                    "spot" if pool.capacity.on_demand_base == 0 else "on-demand baseline + spot"
                ),
                "efa_interfaces": hardware.efa_interfaces,
                "gpu_sharing": pool.gpu_sharing.mode,
                "advertises_per_node": hardware.resources_per_node,
                "on_demand_usd_per_node_hour": cost.on_demand_usd_per_node,
                "spot_discount": cost.spot_discount,
                "usd_per_hour": {"min": cost.min_usd_per_hour, "max": cost.max_usd_per_hour},
            }
        )
    return rows


def placements(spec: StackSpec) -> list[dict[str, Any]]:
    rows = []
    for model in spec.models:
        hardware = PoolHardware(spec.pool(model.pool))
        result = fit(model, hardware)
        rows.append(
            {
                "model": model.name,
                "pool": model.pool,
                "device": model.mig_profile or hardware.gpu.name,
                "devices_per_replica": result.devices,
                "replicas": {"min": model.autoscaling.min_replicas, "max": model.autoscaling.max_replicas},
                "weights_gib": round(result.weights_bytes / GIB, 2),
                "kv_cache_gib": round(result.kv_cache_bytes / GIB, 2),
                "memory_gib": round(result.memory_bytes / GIB, 2),
                "kv_tokens": result.kv_tokens,
                "max_model_len": model.max_model_len,
                "max_concurrency_at_full_length": result.max_concurrency,
                "fits": result.fits,
            }
        )
    return rows


def policy_results(spec: StackSpec, recording: Recording) -> list[dict[str, Any]]:
    """The policy pack over what the program registered, as `inferstack check` reports it."""
    from inferstack.engine.policy_runner import run_policies, spec_policy_config

    resources = [r.as_dict() for r in recording.resources]
    return [r.as_dict() for r in run_policies(resources, spec.environment, spec_policy_config(spec))]


def build_plan(spec: StackSpec, recording: Recording) -> dict[str, Any]:
    pools = node_pools(spec)
    priced = [p["usd_per_hour"] for p in pools if p["usd_per_hour"]["max"] is not None]
    return {
        "stack": spec.environment,
        "region": spec.region,
        "resources": {
            "total": sum(1 for r in recording.resources if r.custom),
            "components": sum(1 for r in recording.resources if not r.custom),
            "by_layer": layers(recording),
        },
        "node_pools": pools,
        "placements": placements(spec),
        "totals": {
            "gpus_max": sum(p["gpus_per_node"] * p["nodes"]["max"] for p in pools),
            "usd_per_hour_min": round(sum(p["min"] for p in priced), 2),
            "usd_per_hour_max": round(sum(p["max"] for p in priced), 2),
            "unpriced_pools": [p["name"] for p in pools if p["usd_per_hour"]["max"] is None],
            "budget_usd_per_hour": spec.budget.max_usd_per_hour,
        },
        "outputs": sorted(recording.outputs),
        "policies": policy_results(spec, recording),
    }
