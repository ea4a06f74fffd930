"""What the placement planner is measured against: `exhaustive_placement`, the exact optimum for small
mixes (the yardstick), and `naive_placement`, one model per whole GPU of the cheapest GPU that fits
(the baseline). Both use the planner's problem and cost model.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from inferstack.planning.demand import Demand, Placement, PoolOption
from inferstack.planning.mig_packing import mig_exact, mig_table
from inferstack.planning.placement_problem import OVER, Problem, build_problem, concrete_placement, no_room, option_value

# exhaustive_placement runs a dynamic programme of pools x 3^n steps over n replicas, so n stays small.
EXHAUSTIVE_MAX_REPLICAS = 9
# The objective of a set of replicas no choice of pools has reached yet.
_INFEASIBLE = 10**30


def _best_block(problem: Problem, o: int, members: Sequence[int]) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    """(objective, shape per member) of the cheapest way option o holds exactly these units; None if one cannot go there."""
    option = problem.options[o]
    choices = [problem.shapes[problem.units[u][0]].get(o) for u in members]
    if not all(choices):
        return None
    if not option.mig:
        picks = tuple(c[0] for c in choices)
        return option_value(option, sum(t for _, t in picks)), picks
    # every reachable profile-count vector, with one choice of profiles that reaches it
    reach: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {(0,) * len(mig_table(option.gpu.name).profiles): ()}
    for shapes in choices:
        grown: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {}
        for vector, picks in reach.items():
            for shape in shapes:
                v = list(vector)
                v[shape[1]] += 1
                grown.setdefault(tuple(v), picks + (shape,))
        reach = grown
    return min(((option_value(option, mig_exact(option.gpu.name, v)[0]), p) for v, p in reach.items()), key=lambda vp: vp[0])


def exhaustive_placement(demands: Sequence[Demand], pools: Sequence[PoolOption]) -> Placement:
    """The exact optimum for small mixes: every partition of the replicas into pools, every MIG profile choice.

    A pool's cost depends only on the set of replicas it holds, so the best way each pool holds each set
    is computed once; a dynamic programme then gives the pools one set each, in turn (one set per pool,
    so max_nodes bounds all of a pool's nodes).
    """
    problem = build_problem(demands, pools)
    n = len(problem.units)
    if n > EXHAUSTIVE_MAX_REPLICAS:
        raise ValueError(f"exhaustive_placement handles at most {EXHAUSTIVE_MAX_REPLICAS} replicas, got {n}")
    full = (1 << n) - 1
    members = [[u for u in range(n) if mask >> u & 1] for mask in range(full + 1)]
    best = [0] + [_INFEASIBLE] * full          # objective of the units in mask on the options so far
    taken: list[list[int]] = []                # per option: the set it takes, for each mask
    for o in range(len(problem.options)):
        blocks = [(0, ())] + [_best_block(problem, o, members[mask]) for mask in range(1, full + 1)]
        after, took = list(best), [0] * (full + 1)
        for mask in range(1, full + 1):
            sub = mask
            while sub:
                block = blocks[sub]
                if block is not None and best[mask ^ sub] + block[0] < after[mask]:
                    after[mask], took[mask] = best[mask ^ sub] + block[0], sub
                sub = (sub - 1) & mask
        best = after
        taken.append(took)
    if best[full] >= OVER:
        raise no_room(problem)
    chosen: list[tuple[int, tuple[int, int]]] = [(-1, (0, 0))] * n
    mask = full
    for o in reversed(range(len(problem.options))):
        sub = taken[o][mask]
        if sub:
            _, picks = _best_block(problem, o, members[sub])
            for u, shape in zip(members[sub], picks):
                chosen[u] = (o, shape)
            mask ^= sub
    return concrete_placement(problem, chosen)


def naive_placement(demands: Sequence[Demand], pools: Sequence[PoolOption]) -> Placement:
    """One replica per whole GPU(s) of the cheapest GPU it fits (lowest price per GPU), no MIG, no sharing of a GPU."""
    demands = [replace(d, mig_profile=None) for d in demands]
    whole: list[PoolOption] = []
    for pool in pools:
        if not pool.mig:
            whole.append(pool)
        elif not any(o.instance_type == pool.instance_type and not o.mig for o in pools):
            whole.append(replace(pool, mig=False))
    problem = build_problem(demands, whole)
    chosen = []
    for d, _ in problem.units:
        shapes = problem.shapes[d]
        o = min(shapes, key=lambda o: (problem.options[o].price_units / problem.options[o].gpus_per_node, o))
        chosen.append((o, shapes[o][0]))
    return concrete_placement(problem, chosen)
