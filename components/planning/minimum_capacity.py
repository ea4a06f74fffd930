"""Capacity at minimum scale: what the node groups run before any autoscaler acts must hold what has to run.

Its rules, each knowable from the spec alone:
- An online service's minimum replicas run on nodes that are never reclaimed: the pool's on-demand (or
  reserved) node groups at their minimum size. A spot reclaim takes every spot node of a type at once, so
  minimum replicas on spot can all vanish together (the `serving-on-demand-baseline` policy checks the same
  on the rendered node groups).
- With no node autoscaler a managed node group stays at its desired size, which inferstack creates at its
  minimum (a Capacity Block group at the block's size, with EKS and operators free to scale it to 0): a pool
  at zero nodes never gets one, and whatever it is meant to run stays pending.
- Karpenter keeps no idle node (a NodePool launches nodes for pending pods, up to its limit), so an online
  service's minimum replicas must fit the pool's on-demand and reserved NodePools' node limits
  (shared/reference/karpenter.md sections 4.1 and 5; platform/refusals.py refuses min_nodes under Karpenter).
The counts are planning's (`planning.node_groups`, `planning.pool_capacity`), the same the AWS layer sizes its
node groups with and the plan reports.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from inferstack.planning.node_groups import nodes_at_min, on_demand_node_limit, on_demand_nodes_at_min
from inferstack.planning.pool_capacity import nodes_for_replicas
from inferstack.spec import ModelServiceSpec, StackSpec
from inferstack.spec.errors import SpecError
from inferstack.spec.pools import PoolHardware


def minimum_capacity_refusals(
    spec: StackSpec, models: tuple[ModelServiceSpec, ...], pools: dict[str, PoolHardware]
) -> list[SpecError]:
    """Each pool whose nodes at minimum scale cannot hold what must run there, once."""
    found = list(_pools_without_start_nodes(spec)) if spec.platform.node_autoscaler == "none" else []
    return found + list(_online_baseline_refusals(spec, models, pools))


def _pools_without_start_nodes(spec: StackSpec) -> Iterator[SpecError]:
    """Without a node autoscaler nothing ever adds a node to a pool, so each must start with its nodes."""
    for index, pool in enumerate(spec.node_pools):
        if nodes_at_min(pool) == 0:
            yield SpecError(
                f"node_pools[{index}].min_nodes",
                f"0 with platform.node_autoscaler 'none': nothing adds nodes to pool {pool.name!r}, so every pod "
                "meant for it would stay pending",
                "set min_nodes (or capacity.on_demand_base) to the nodes the pool must run, or set "
                "platform.node_autoscaler to 'cluster-autoscaler'",
            )


def _online_baseline_refusals(
    spec: StackSpec, models: tuple[ModelServiceSpec, ...], pools: dict[str, PoolHardware]
) -> Iterator[SpecError]:
    """Each pool's on-demand nodes at minimum hold the minimum replicas of every online service on it."""
    karpenter = spec.platform.karpenter

    online: dict[str, list[tuple[ModelServiceSpec, int]]] = defaultdict(list)
    for model in models:
        if model.tier == "online" and model.autoscaling.min_replicas > 0:
            online[model.pool].append((model, model.autoscaling.min_replicas))
    for index, pool in enumerate(spec.node_pools):
        services = online.get(pool.name)
        if not services:
            continue
        hardware = pools[pool.name]
        needed = nodes_for_replicas(services, hardware)
        held = on_demand_node_limit(pool) if karpenter else on_demand_nodes_at_min(pool)
        if needed <= held:
            continue
        listed = ", ".join(f"{m.name} ({n} replica{'s' if n > 1 else ''})" for m, n in services)
        # With spot above the baseline only on_demand_base buys on-demand nodes; without spot min_nodes does.
        field = "capacity.on_demand_base" if pool.capacity.spot else ("max_nodes" if karpenter else "min_nodes")
        rest = (
            "the rest would run on spot, which is reclaimed all at once"
            if pool.capacity.spot
            else "the rest would wait for the autoscaler to add nodes and for the model to load"
        )
        keeps = "may launch" if karpenter else "keeps"
        scale = "in its on-demand NodePools" if karpenter else "at minimum scale"
        yield SpecError(
            f"node_pools[{index}].{field}",
            f"pool {pool.name!r} {keeps} {held} on-demand node{'s' if held != 1 else ''} {scale}, but the "
            f"minimum replicas of its online services {listed} need {needed} node{'s' if needed != 1 else ''} of {hardware.primary.name}: "
            f"{rest}",
            _fix(pool, field, needed, karpenter),
        )


def _fix(pool, field: str, needed: int, karpenter: bool) -> str:
    """Fixes the spec accepts: min_nodes and on_demand_base may not exceed max_nodes (spec/checks.py min_max), so
    raising one past max_nodes names max_nodes too."""
    raise_it = f"raise {field} to {needed}"
    if field != "max_nodes" and needed > pool.max_nodes:
        raise_it = f"raise max_nodes and {field} to {needed} (max_nodes is {pool.max_nodes})"
    return f"{raise_it}, lower those services' autoscaling.min_replicas, or set their tier to 'standard'"
