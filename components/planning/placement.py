"""Auto placement: the cheapest set of nodes that holds every model replica, with small models packed.

A replica either takes whole GPUs of one node (tensor parallel 1, 2, 4 or 8, dividing the node's GPU
count) or one MIG slice of a GPU on a MIG-partitioned pool. It fits when sizing's arithmetic leaves
KV cache for its context x concurrency. Nodes are bought whole, so the cost of a pool is its node
count x node price; GPUs of a node are shared by different models' replicas and a MIG GPU hosts
slices of different profiles as long as they fit in its 7 compute / 8 memory slices and each
profile's max count.

`plan_placement` is the planner: greedy construction + local search, fast on hundreds of demands.
Its yardstick (the exact optimum) and its baseline share its cost model: placement_yardsticks.
"""

from __future__ import annotations

import itertools
from typing import Sequence

from inferstack.planning.demand import Demand, Placement, PoolOption
from inferstack.planning.mig_packing import mig_gpus, mig_table
from inferstack.planning.placement_problem import (
    OVER, WHOLE, Problem, build_problem, concrete_placement, no_room, node_value, objective,
)

# Neighbourhoods whose cost grows with the square of the replicas (regret insertion, ejection, moving
# all into one pool) run on mixes up to this size, where one misplaced replica is a large share of the bill.
SMALL_MIX_REPLICAS = 40


class _Tables:
    """What the search reads and never changes: per option its node facts, per demand its shape and
    priced share of a node on each option it fits (the smallest fitting shape: a larger one never packs better)."""

    def __init__(self, problem: Problem) -> None:
        options = problem.options
        self.demand_of = [d for d, _ in problem.units]
        self.gpu = [o.gpu.name for o in options]
        self.mig = [o.mig for o in options]
        self.per_node = [o.gpus_per_node for o in options]
        self.max_nodes = [o.max_nodes for o in options]
        self.node_value = [node_value(o) for o in options]
        self.profiles = [len(mig_table(o.gpu.name).profiles) if o.mig else 0 for o in options]
        self.home = [{o: shapes[0] for o, shapes in per_option.items()} for per_option in problem.shapes]
        self.share = [{o: _fraction(options[o], shape) for o, shape in home.items()} for home in self.home]
        # Largest first: by the cheapest priced share of a node the unit can take.
        self.size = [min(share.values()) for share in self.share]


def _fraction(option: PoolOption, shape: tuple[int, int]) -> float:
    """Share of a node the shape takes, priced: the tie-breaker that prefers cheap capacity per GPU."""
    kind, size = shape
    if kind == WHOLE:
        share = size
    else:
        table = mig_table(option.gpu.name)
        profile = table.profiles[size]
        share = max(profile.compute_slices / table.compute, profile.memory_slices / table.memory)
    return option.price_units * share / option.gpus_per_node


class _State:
    """Units assigned to options, with each option's GPUs-in-use aggregate (whole GPUs, or a MIG
    profile-count vector) and its objective value."""

    def __init__(self, tables: _Tables) -> None:
        self.t = tables
        self.where = [-1] * len(tables.demand_of)
        self.whole = [0] * len(tables.gpu)
        self.vector = [[0] * n for n in tables.profiles]
        self.value = [0] * len(tables.gpu)

    def copy(self) -> _State:
        other = _State.__new__(_State)
        other.t, other.where, other.whole = self.t, list(self.where), list(self.whole)
        other.vector, other.value = [list(v) for v in self.vector], list(self.value)
        return other

    @property
    def total(self) -> int:
        return sum(self.value)

    def value_with(self, o: int, d: int, sign: int) -> int:
        """Option o's value with one more (sign +1) or one fewer (-1) unit of demand d."""
        t = self.t
        _, size = t.home[d][o]
        if t.mig[o]:
            vector = self.vector[o]
            vector[size] += sign
            gpus = mig_gpus(t.gpu[o], tuple(vector))
            vector[size] -= sign
        else:
            gpus = self.whole[o] + sign * size
        return objective(gpus, t.per_node[o], t.node_value[o], t.max_nodes[o])

    def _apply(self, o: int, d: int, sign: int) -> None:
        self.value[o] = self.value_with(o, d, sign)
        _, size = self.t.home[d][o]
        if self.t.mig[o]:
            self.vector[o][size] += sign
        else:
            self.whole[o] += sign * size

    def remove(self, u: int) -> None:
        self._apply(self.where[u], self.t.demand_of[u], -1)
        self.where[u] = -1

    def add(self, u: int, o: int) -> None:
        self._apply(o, self.t.demand_of[u], +1)
        self.where[u] = o

    def move(self, u: int, o: int) -> None:
        self.remove(u)
        self.add(u, o)

    def used(self) -> list[int]:
        return [o for o, v in enumerate(self.value) if v]


def _best_home(state: _State, u: int, banned: frozenset[int] = frozenset(), by_share: bool = False) -> tuple[int, int] | None:
    """(added value, option) of the place an unplaced unit adds least to, or (by_share) of the cheapest
    share of a node it can take, whatever buying that node costs now."""
    d = state.t.demand_of[u]
    best, best_key = None, None
    for o, share in state.t.share[d].items():
        if o in banned:
            continue
        cost = state.value_with(o, d, +1) - state.value[o]
        key = (cost >= OVER, share, cost) if by_share else (cost, share)
        if best_key is None or key < best_key:
            best, best_key = (cost, o), key
    return best


def _by_size(tables: _Tables, units) -> list[int]:
    return sorted(units, key=lambda u: (-tables.size[tables.demand_of[u]], u))


def _insert(state: _State, units, banned: frozenset[int] = frozenset(), by_share: bool = False) -> bool:
    """Place units largest first, each where it adds least (or takes the cheapest share); False if one has
    nowhere to go but banned options."""
    for u in _by_size(state.t, units):
        home = _best_home(state, u, banned, by_share)
        if home is None:
            return False
        state.add(u, home[1])
    return True


def _insert_by_regret(state: _State, units) -> None:
    """Place first the unit that loses most if it misses its best place (best vs second-best added value)."""
    waiting = set(units)
    while waiting:
        pick, pick_key = None, None
        for u in waiting:
            d = state.t.demand_of[u]
            costs = sorted((state.value_with(o, d, +1) - state.value[o], state.t.share[d][o], o) for o in state.t.home[d])
            regret = costs[1][0] - costs[0][0] if len(costs) > 1 else OVER
            key = (-regret, costs[0][0], -state.t.size[d], u)
            if pick_key is None or key < pick_key:
                pick, pick_key = (u, costs[0]), key
        u, (_, _, o) = pick
        state.add(u, o)
        waiting.remove(u)


def _relocate(state: _State, steepest: bool = False) -> bool:
    """Move single units while that lowers the objective; True if anything moved. Steepest: each time
    the move that lowers it most (slower, but the first improving move may be the wrong one)."""
    t = state.t
    moved_any = False
    while True:
        moved, pick, pick_key = False, None, None
        for u, here in enumerate(state.where):
            d = t.demand_of[u]
            gain = state.value[here] - state.value_with(here, d, -1)
            if gain <= 0:
                continue
            best, best_key = None, None
            for o, share in t.share[d].items():
                if o == here:
                    continue
                cost = state.value_with(o, d, +1) - state.value[o]
                if cost < gain and (best_key is None or (cost - gain, share) < best_key):
                    best, best_key = o, (cost - gain, share)
            if best is None:
                continue
            if not steepest:
                state.move(u, best)
                moved = moved_any = True
            elif pick_key is None or best_key < pick_key:
                pick, pick_key = (u, best), best_key
        if pick is not None:
            state.move(*pick)
            moved = moved_any = True
        if not moved:
            return moved_any


def _eject(state: _State) -> bool:
    """Move a unit whose leaving frees a node into a pool where it only fits by pushing another unit
    out to that one's best other home (which may be the first unit's old place: a swap)."""
    t = state.t
    before = state.total
    for v, here in enumerate(state.where):
        d = t.demand_of[v]
        if state.value[here] - state.value_with(here, d, -1) <= 0:
            continue
        for o in t.home[d]:
            if o == here:
                continue
            for w in [w for w, at in enumerate(state.where) if at == o]:
                state.remove(v)
                state.remove(w)
                state.add(v, o)
                home = _best_home(state, w, frozenset({o}))
                if home is not None:
                    state.add(w, home[1])
                    if state.total < before:
                        return True
                    state.remove(w)
                state.move(v, here)
                state.add(w, o)
    return False


def _chain(state: _State, o: int, by_gain: bool) -> _State | None:
    """Move units into option o one at a time and keep the best prefix: opening a node pays only once
    several units fill it, which no single move sees. Order: those saving most per share of a node
    first, or (by_gain) those whose leaving frees most first."""
    t = state.t

    def order(u: int) -> float:
        d, here = t.demand_of[u], state.where[u]
        if by_gain:
            return state.value_with(here, d, -1) - state.value[here]
        return t.share[d][o] - t.share[d][here]

    movers = sorted((u for u, at in enumerate(state.where) if at != o and o in t.home[t.demand_of[u]]), key=order)
    trial, best, best_k = state.copy(), state.total, 0
    for k, u in enumerate(movers, 1):
        trial.move(u, o)
        if trial.total < best:
            best, best_k = trial.total, k
    if not best_k:
        return None
    trial = state.copy()
    for u in movers[:best_k]:
        trial.move(u, o)
    return trial


def _drain(state: _State, o: int, cheapest_first: bool) -> _State | None:
    """Take units off option o one at a time, each to its best home elsewhere, and keep the best prefix:
    a node is freed only once several units leave it. Order: largest share of a node first, or those
    cheapest to re-home first."""
    t = state.t
    banned = frozenset({o})
    if cheapest_first:
        order = {u: _best_home(state, u, banned) for u, at in enumerate(state.where) if at == o}
        movers = sorted(order, key=lambda u: (order[u] is None, order[u] and order[u][0]))
    else:
        movers = sorted((u for u, at in enumerate(state.where) if at == o), key=lambda u: -t.share[t.demand_of[u]][o])
    trial, best, best_k, homes = state.copy(), state.total, 0, []
    for k, u in enumerate(movers, 1):
        trial.remove(u)
        home = _best_home(trial, u, banned)
        if home is None:
            break
        trial.add(u, home[1])
        homes.append(home[1])
        if trial.total < best:
            best, best_k = trial.total, k
    if not best_k:
        return None
    trial = state.copy()
    for u, home in zip(movers, homes[:best_k]):
        trial.move(u, home)
    return trial


def _attract(state: _State, o: int) -> _State | None:
    """Move every unit that can run on option o there, then let the units that fit better elsewhere leave
    it, by relocation and by draining (the chain stops before a unit that overflows o): opens a shared node."""
    crowded = state.copy()
    movers = [u for u, at in enumerate(crowded.where) if at != o and o in crowded.t.home[crowded.t.demand_of[u]]]
    if not movers:
        return None
    for u in movers:
        crowded.move(u, o)
    relocated = crowded.copy()
    _relocate(relocated, steepest=True)
    drained = [d for s in (crowded, relocated) for cheapest in (False, True) if (d := _drain(s, o, cheapest)) is not None]
    return min(drained + [relocated], key=lambda s: s.total)


def _repack(state: _State, options: Sequence[int], ban: bool, by_share: bool = False) -> _State | None:
    """Take every unit off the given options and put them back greedily (elsewhere when `ban`)."""
    trial = state.copy()
    units = [u for u, at in enumerate(trial.where) if at in options]
    for u in units:
        trial.remove(u)
    if not _insert(trial, units, frozenset(options) if ban else frozenset(), by_share):
        return None
    return trial


def _improve(state: _State) -> _State:
    """Small moves (relocate; eject on small mixes), then the first large move that lowers the objective
    (fill one pool; on small mixes also move all into one and relocate; drain one; close one; re-pack two),
    until none does."""
    small = len(state.where) <= SMALL_MIX_REPLICAS
    while True:
        while _relocate(state) or (small and _eject(state)):
            pass
        used = state.used()
        options = range(len(state.value))
        trials = [lambda o=o, g=g: _chain(state, o, g) for g in (False, True) for o in options]
        if small:
            trials += [lambda o=o: _attract(state, o) for o in options]
        trials += [lambda o=o, c=c: _drain(state, o, c) for c in (False, True) for o in used]
        trials += [lambda o=o: _repack(state, [o], True) for o in used]
        trials += [
            lambda a=a, b=b, by_share=by_share: _repack(state, [a, b], False, by_share)
            for a, b in itertools.combinations(used, 2) for by_share in (False, True)
        ]
        better = next((c for trial in trials if (c := trial()) is not None and c.total < state.total), None)
        if better is None:
            return state
        state = better


def plan_placement(demands: Sequence[Demand], pools: Sequence[PoolOption]) -> Placement:
    """The cheapest placement the heuristic finds: greedy starts (where a replica adds least, where capacity
    is cheapest per GPU and, on small mixes, by regret), each improved by local search."""
    problem = build_problem(demands, pools)
    tables = _Tables(problem)
    everyone = range(len(problem.units))
    starts = [_State(tables) for _ in range(3 if len(problem.units) <= SMALL_MIX_REPLICAS else 2)]
    _insert(starts[0], everyone)
    _insert(starts[1], everyone, by_share=True)
    if len(starts) > 2:
        _insert_by_regret(starts[2], everyone)
    best = min((_improve(start) for start in starts), key=lambda s: s.total)
    if best.total >= OVER:
        raise no_room(problem)
    return concrete_placement(problem, [(o, tables.home[d][o]) for o, d in zip(best.where, tables.demand_of)])
