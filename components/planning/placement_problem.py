"""The placement problem all planners solve: demands expanded to replicas, the options left after
pruning, each replica's shapes on each option (whole GPUs or a MIG slice, as sizing fits them), the
objective a set of replicas costs a pool, and the concrete nodes and GPUs of a chosen solution.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Sequence

from inferstack.catalog import INSTANCE_TYPES
from inferstack.planning.demand import PRICE_SCALE, Assignment, Demand, Placement, PlacementError, PoolOption, PoolUse
from inferstack.planning.mig_packing import mig_layouts, mig_table
from inferstack.planning.sizing import Fit, fit, parallelism_problem
from inferstack.spec import MigSharing, ModelServiceSpec, NodePoolSpec, NoSharing
from inferstack.spec.pools import PoolHardware

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
# Objective per pool as one int: cost first, then GPUs bought (fewer is better on a tie).
_GPU_WEIGHT = 1
_COST_WEIGHT = 10**6
# Each node over a pool's max_nodes costs this much: far above any price, yet graded, so the search
# can tell a placement one node over from one ten nodes over and repair it.
OVER = 10**20


# One node pool spec per (instance type, MIG profile): what sizing needs to see a device.
@lru_cache(maxsize=None)
def _hardware(type_name: str, mig_profile: str | None) -> PoolHardware:
    sharing = NoSharing() if mig_profile is None else MigSharing(mode="mig", layout={mig_profile: 1})
    return PoolHardware(NodePoolSpec(name="placement", instance_types=[type_name], max_nodes=1, gpu_sharing=sharing))


# A representative instance type per GPU: sizing reads only the GPU, so fits are shared across node sizes.
_TYPE_OF_GPU = {it.gpu.name: name for name, it in reversed(INSTANCE_TYPES.items())}


@lru_cache(maxsize=None)
def _fit(model: ModelServiceSpec, gpu_name: str, devices: int, mig_profile: str | None) -> Fit | None:
    """Sizing's fit of one replica (None when vLLM cannot split the model over `devices`)."""
    candidate = model.model_copy(update={"tensor_parallel": devices, "pipeline_parallel": 1, "mig_profile": mig_profile})
    if parallelism_problem(candidate) is not None:
        return None
    return fit(candidate, _hardware(_TYPE_OF_GPU[gpu_name], mig_profile))


def _sizing_key(model: ModelServiceSpec) -> ModelServiceSpec:
    """The spec without its name and pool, so demands that differ only there share their fits, and with
    its architecture resolved once (sizing would look it up again on every call)."""
    return model.model_copy(update={"name": "placement", "pool": "auto", "architecture": model.resolved_architecture})


WHOLE, SLICE = 0, 1


@dataclass(frozen=True)
class Problem:
    """Demands expanded to replicas ("units"), the options left after pruning, and each unit's shapes.

    shapes[d][o] lists (kind, size) choices of demand d on option o: WHOLE with size = GPUs (only the
    fewest that fit: power-of-two groups in power-of-two nodes pack perfectly, so more GPUs never
    help) or SLICE with size = index of a MIG profile of that GPU (every profile that fits, smallest first).
    """

    demands: tuple[Demand, ...]
    keys: tuple[ModelServiceSpec, ...]                        # per demand, for sizing's cached fits
    options: tuple[PoolOption, ...]
    units: tuple[tuple[int, int], ...]                        # (demand index, replica)
    shapes: tuple[Mapping[int, tuple[tuple[int, int], ...]], ...]

    def fit(self, d: int, option: PoolOption, shape: tuple[int, int]) -> Fit:
        kind, size = shape
        if kind == WHOLE:
            return _fit(self.keys[d], option.gpu.name, size, None)
        return _fit(self.keys[d], option.gpu.name, 1, mig_table(option.gpu.name).profiles[size].name)


def _holds(demand: Demand, result: Fit | None) -> bool:
    return result is not None and result.max_concurrency >= demand.concurrency


def _shapes(demand: Demand, key: ModelServiceSpec, option: PoolOption) -> tuple[tuple[int, int], ...]:
    if demand.allowed is not None and option.name not in demand.allowed:
        return ()
    gpu = option.gpu.name
    if option.mig:
        if demand.tensor_parallel not in (None, 1):
            return ()
        table = mig_table(gpu)
        # Sizing sees only a slice's memory, so profiles of equal memory fit alike: ask once per size.
        holds: dict[int, bool] = {}
        for p in table.profiles:
            if p.memory_gb not in holds and demand.mig_profile in (None, p.name):
                holds[p.memory_gb] = _holds(demand, _fit(key, gpu, 1, p.name))
        fitting = [
            (p.memory_slices, p.compute_slices, i) for i, p in enumerate(table.profiles)
            if demand.mig_profile in (None, p.name) and holds[p.memory_gb]
        ]
        return tuple((SLICE, i) for *_, i in sorted(fitting))
    if demand.mig_profile is not None:
        return ()
    sizes = [demand.tensor_parallel] if demand.tensor_parallel else TENSOR_PARALLEL_SIZES
    for t in sizes:
        if t <= option.gpus_per_node and option.gpus_per_node % t == 0 and _holds(demand, _fit(key, gpu, t, None)):
            return ((WHOLE, t),)
    return ()


def _prune(options: Sequence[PoolOption], demands: Sequence[Demand]) -> list[PoolOption]:
    """Drop an option another one beats on price with the same hardware, unless a demand names it."""
    named = set().union(*(d.allowed for d in demands if d.allowed is not None))

    def beats(b: PoolOption, a: PoolOption, b_first: bool) -> bool:
        same = (b.gpu.name, b.mig, b.gpus_per_node) == (a.gpu.name, a.mig, a.gpus_per_node)
        roomy = b.max_nodes is None or (a.max_nodes is not None and b.max_nodes >= a.max_nodes)
        cheaper = b.price_units < a.price_units or (b.price_units == a.price_units and b_first)
        return same and roomy and cheaper

    return [
        a for i, a in enumerate(options)
        if a.name in named or not any(beats(b, a, j < i) for j, b in enumerate(options) if j != i)
    ]


def _fits_nowhere(demand: Demand, key: ModelServiceSpec, options: Sequence[PoolOption]) -> PlacementError:
    """The error for a demand no option holds: its need, and what the largest option offers."""
    offers = []
    for o in options:
        if o.mig:
            profile = max(mig_table(o.gpu.name).profiles, key=lambda p: p.memory_gb)
            result, shape = _fit(key, o.gpu.name, 1, profile.name), f"MIG slice {profile.name}"
        else:
            tps = [t for t in TENSOR_PARALLEL_SIZES if o.gpus_per_node % t == 0 and t <= o.gpus_per_node]
            results = [(r, t) for t in tps if (r := _fit(key, o.gpu.name, t, None)) is not None]
            result, t = max(results, key=lambda rt: rt[0].memory_bytes)
            shape = f"tensor parallel {t} over {o.gpu.name}s"
        offers.append((result.memory_bytes, o, shape, result))
    _, option, shape, result = max(offers, key=lambda offer: offer[0])
    weights, kv = demand.memory_need_bytes
    context = demand.model.max_model_len
    return PlacementError(
        f"model service {demand.name!r} fits nowhere: it needs {weights / 1e9:.1f} GB of weights + {kv / 1e9:.1f} GB "
        f"of KV cache ({context} tokens x {demand.concurrency} sequences) = {(weights + kv) / 1e9:.1f} GB; "
        f"the largest option, pool {option.name!r} ({option.instance_type}, {shape}: "
        f"{result.memory_bytes / 1e9:.1f} GB), holds {result.kv_tokens} tokens of KV cache after weights and "
        f"runtime reserve, {result.max_concurrency} of the {demand.concurrency} sequences needed. To fix: lower "
        "max_model_len or max_num_seqs, quantize the weights or the KV cache, or add a pool with larger GPUs."
    )


def build_problem(demands: Sequence[Demand], pools: Sequence[PoolOption]) -> Problem:
    if not pools:
        raise PlacementError("no pool to place models on. To fix: add a node pool.")
    names = [d.name for d in demands]
    if len(set(names)) != len(names):
        raise PlacementError(f"demand names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")
    known = {p.name for p in pools}
    options = tuple(_prune(pools, demands))
    keys = tuple(_sizing_key(d.model) for d in demands)
    shapes = []
    for d, key in zip(demands, keys):
        unknown = sorted((d.allowed or frozenset()) - known)
        if unknown:
            raise PlacementError(f"model service {d.name!r} names pools {unknown} that are not options: {sorted(known)}")
        per_option = {o: s for o, option in enumerate(options) if (s := _shapes(d, key, option))}
        if not per_option:
            raise _fits_nowhere(d, key, [p for p in pools if d.allowed is None or p.name in d.allowed])
        shapes.append(per_option)
    units = tuple((d, r) for d, demand in enumerate(demands) for r in range(demand.replicas))
    return Problem(tuple(demands), keys, options, units, tuple(shapes))


def objective(gpus: int, per_node: int, node_value: int, max_nodes: int | None) -> int:
    """One pool's objective for `gpus` GPUs in use: its node cost, then the GPUs bought, plus OVER per node too many."""
    nodes = -(-gpus // per_node)
    over = 0 if max_nodes is None else max(0, nodes - max_nodes)
    return nodes * node_value + over * OVER


def node_value(option: PoolOption) -> int:
    """What one node of the option adds to the objective: its price, then its GPUs."""
    return option.price_units * _COST_WEIGHT + option.gpus_per_node * _GPU_WEIGHT


def option_value(option: PoolOption, gpus: int) -> int:
    """The option's objective with `gpus` GPUs in use."""
    return objective(gpus, option.gpus_per_node, node_value(option), option.max_nodes)


def no_room(problem: Problem) -> PlacementError:
    limits = ", ".join(f"{o.name} {o.max_nodes}" for o in problem.options if o.max_nodes is not None)
    return PlacementError(
        f"the pools' max_nodes ({limits}) leave no room for all {len(problem.units)} replicas. "
        "To fix: raise max_nodes or add a pool."
    )


def concrete_placement(problem: Problem, chosen: Sequence[tuple[int, tuple[int, int]]]) -> Placement:
    """Concrete nodes and GPUs for each unit's (option, shape)."""
    assignments: list[Assignment] = []
    uses: list[PoolUse] = []
    for o, option in enumerate(problem.options):
        mine = [(u, shape) for u, (oo, shape) in enumerate(chosen) if oo == o]
        if not mine:
            continue
        layouts: list[dict[str, int]] = []
        if option.mig:
            table = mig_table(option.gpu.name)
            vector = [0] * len(table.profiles)
            for _, (_, p) in mine:
                vector[p] += 1
            slots = [[p for p, n in enumerate(layout) for _ in range(n)] for layout in mig_layouts(option.gpu.name, tuple(vector))]
            used: list[list[int]] = [[] for _ in slots]
            for u, (_, p) in mine:
                g = next(g for g, s in enumerate(slots) if p in s)
                slots[g].remove(p)
                used[g].append(p)
                d, r = problem.units[u]
                assignments.append(Assignment(problem.demands[d].name, r, option.name, g // option.gpus_per_node,
                                              (g % option.gpus_per_node,), 1, table.profiles[p].name,
                                              problem.fit(d, option, (SLICE, p))))
            layouts = [{table.profiles[p].name: ps.count(p) for p in sorted(set(ps))} for ps in used]
            gpus = len(slots)
        else:
            cursor = 0
            for u, (_, t) in sorted(mine, key=lambda m: -m[1][1]):
                d, r = problem.units[u]
                node, first = divmod(cursor, option.gpus_per_node)
                assignments.append(Assignment(problem.demands[d].name, r, option.name, node,
                                              tuple(range(first, first + t)), t, None, problem.fit(d, option, (WHOLE, t))))
                cursor += t
            gpus = cursor
        nodes = -(-gpus // option.gpus_per_node)
        uses.append(PoolUse(option.name, option.instance_type, option.gpu.name, option.gpus_per_node, nodes,
                            nodes * option.price_units / PRICE_SCALE, tuple(layouts)))
    order = {d.name: i for i, d in enumerate(problem.demands)}
    return Placement(tuple(sorted(assignments, key=lambda a: (order[a.demand], a.replica))), tuple(uses))
