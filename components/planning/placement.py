"""Auto placement: the cheapest set of nodes that holds every model replica, with small models packed.

A replica either takes whole GPUs of one node (tensor parallel 1, 2, 4 or 8, dividing the node's GPU
count) or one MIG slice of a GPU on a MIG-partitioned pool. It fits when sizing's arithmetic leaves
KV cache for its context x concurrency. Nodes are bought whole, so the cost of a pool is its node
count x node price; GPUs of a node are shared by different models' replicas and a MIG GPU hosts
slices of different profiles as long as they fit in its 7 compute / 8 memory slices and each
profile's max count.

Three planners share one cost model: `plan_placement` (greedy construction + local search, fast on
hundreds of demands), `exhaustive_placement` (exact, for small mixes: the yardstick) and
`naive_placement` (one model per whole GPU of the cheapest GPU that fits: the baseline).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Mapping, Sequence

from inferstack.catalog import INSTANCE_TYPES, Gpu, MigProfile, gpu as catalog_gpu, instance_type, on_demand_price
from inferstack.planning.sizing import Fit, fit, kv_bytes_per_token, parallelism_problem, weights_bytes
from inferstack.spec.models import MigSharing, ModelServiceSpec, NodePoolSpec, NoSharing
from inferstack.spec.pools import PoolHardware

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
# Prices are compared in units of 1/10000 USD so that equal totals compare equal whatever the order
# of the additions.
PRICE_SCALE = 10_000
# Objective per pool as one int: cost first, then GPUs bought (fewer is better on a tie).
_GPU_WEIGHT = 1
_COST_WEIGHT = 10**6
_INFEASIBLE = 10**30
# Each node over a pool's max_nodes costs this much: far above any price, yet graded, so the search
# can tell a placement one node over from one ten nodes over and repair it.
_OVER = 10**20
# MIG packing: a greedy fill of whole-GPU layouts, kept when it meets the lower bound; otherwise an exact
# memoised search over profile-count vectors while their state space is at most this many vectors.
EXACT_MIG_STATES = 5_000
# exhaustive_placement runs a dynamic programme of pools x 3^n steps over n replicas, so n stays small.
EXHAUSTIVE_MAX_REPLICAS = 9


class PlacementError(ValueError):
    """No placement exists: the message names the demand and what would make it fit."""


# --------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Demand:
    """One model service to place: its spec (sizing reads it) and what the planner may choose."""

    model: ModelServiceSpec
    replicas: int = 1
    allowed: frozenset[str] | None = None    # pool names it may use; None = any pool
    tensor_parallel: int | None = None       # fixed GPUs per replica; None = the planner chooses
    mig_profile: str | None = None           # fixed MIG profile (MIG slices only); None = the planner chooses

    @classmethod
    def from_spec(cls, model: ModelServiceSpec, *, replicas: int | None = None) -> Demand:
        """Pool, tensor_parallel and mig_profile are the planner's to choose when left unset or 'auto';
        replicas default to min_replicas (at least 1)."""
        if model.pipeline_parallel > 1:
            raise PlacementError(
                f"model service {model.name!r} uses pipeline_parallel={model.pipeline_parallel}: multi-node "
                "replicas are not auto-placed. To fix: name its pool and tensor_parallel explicitly."
            )

        def chosen(field: str):
            value = getattr(model, field)
            return None if field not in model.model_fields_set or value == "auto" else value

        pool = chosen("pool")
        return cls(
            model=model,
            replicas=max(1, model.autoscaling.min_replicas) if replicas is None else replicas,
            allowed=None if pool is None else frozenset({pool}),
            tensor_parallel=chosen("tensor_parallel"),
            mig_profile=chosen("mig_profile"),
        )

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def concurrency(self) -> int:
        """Full-length sequences the KV cache must hold at once: max_num_seqs, or one."""
        return self.model.max_num_seqs or 1

    @property
    def memory_need_bytes(self) -> tuple[int, int]:
        """(weights, KV cache for max_model_len x concurrency) in bytes."""
        kv = kv_bytes_per_token(self.model) * self.model.max_model_len * self.concurrency
        return weights_bytes(self.model), kv


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


@dataclass(frozen=True)
class PoolOption:
    """A pool the planner may buy nodes of. `mig`: every GPU is MIG-partitioned, the planner choosing each GPU's layout."""

    name: str
    instance_type: str
    gpu: Gpu
    gpus_per_node: int
    usd_per_hour: float
    mig: bool = False
    max_nodes: int | None = None

    @classmethod
    def from_instance_type(
        cls, name: str, type_name: str, *, region: str, mig: bool = False, usd_per_hour: float | None = None,
        max_nodes: int | None = None,
    ) -> PoolOption:
        """An option at the type's on-demand price in `region` unless `usd_per_hour` states one."""
        it = instance_type(type_name)
        price = on_demand_price(type_name, region) if usd_per_hour is None else usd_per_hour
        if price is None:
            raise PlacementError(
                f"pool {name!r}: {type_name} has no price in {region} in the catalog. To fix: pass usd_per_hour."
            )
        if mig and not it.gpu.mig_capable:
            raise PlacementError(f"pool {name!r}: {it.gpu.name} on {type_name} does not support MIG.")
        return cls(name, type_name, it.gpu, it.gpu_count, price, mig, max_nodes)

    @classmethod
    def from_hardware(cls, hardware: PoolHardware, *, region: str, usd_per_hour: float | None = None) -> PoolOption:
        """A stack pool as an option; its current MIG layout is not a constraint: the planner proposes layouts."""
        sharing = hardware.spec.gpu_sharing
        if not isinstance(sharing, (NoSharing, MigSharing)):
            raise PlacementError(
                f"pool {hardware.spec.name!r} shares GPUs by {sharing.mode}, which gives no memory isolation: "
                "it is not an auto-placement target. To fix: use whole GPUs or MIG."
            )
        return cls.from_instance_type(
            hardware.spec.name, hardware.primary.name, region=region, mig=isinstance(sharing, MigSharing),
            usd_per_hour=usd_per_hour, max_nodes=hardware.spec.max_nodes,
        )

    @property
    def price_units(self) -> int:
        return round(self.usd_per_hour * PRICE_SCALE)


def catalog_options(region: str) -> list[PoolOption]:
    """Every instance type the catalog prices in `region`, with whole GPUs, and MIG-partitioned where the GPU allows."""
    options = []
    for name, it in INSTANCE_TYPES.items():
        if on_demand_price(name, region) is None:
            continue
        slug = name.replace(".", "-")
        options.append(PoolOption.from_instance_type(slug, name, region=region))
        if it.gpu.mig_capable:
            options.append(PoolOption.from_instance_type(f"{slug}-mig", name, region=region, mig=True))
    return options


# -------------------------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class Assignment:
    """Where one replica runs: a node of a pool, whole GPUs of it or one MIG slice."""

    demand: str
    replica: int
    pool: str
    node: int                      # index of the node within the pool
    gpus: tuple[int, ...]          # GPU indices on that node (one GPU for a MIG slice)
    tensor_parallel: int           # 1 on a MIG slice
    mig_profile: str | None
    fit: Fit                       # sizing's view: KV tokens and full-length sequences it holds


@dataclass(frozen=True)
class PoolUse:
    """Nodes bought in one pool, and for MIG pools the layout of every GPU (GPU i is on node i // gpus_per_node)."""

    pool: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    nodes: int
    usd_per_hour: float
    mig_layouts: tuple[Mapping[str, int], ...] = ()

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Placement:
    assignments: tuple[Assignment, ...]
    pools: tuple[PoolUse, ...]

    @property
    def usd_per_hour(self) -> float:
        return sum(round(p.usd_per_hour * PRICE_SCALE) for p in self.pools) / PRICE_SCALE

    @property
    def total_gpus(self) -> int:
        """GPUs of the nodes bought (what is paid for), not only those in use."""
        return sum(p.gpus for p in self.pools)

    @property
    def nodes(self) -> dict[str, int]:
        return {p.pool: p.nodes for p in self.pools}

    def of(self, demand: str) -> list[Assignment]:
        return [a for a in self.assignments if a.demand == demand]


# ------------------------------------------------------------------------------------------------ MIG


@dataclass(frozen=True)
class _MigTable:
    """A GPU's plannable profiles (media-extension '+me' variants add nothing for LLMs) and its full-GPU layouts."""

    profiles: tuple[MigProfile, ...]
    layouts: tuple[tuple[int, ...], ...]   # maximal valid profile-count vectors, one per way to fill a GPU
    compute: int
    memory: int


@lru_cache(maxsize=None)
def _mig_table(gpu_name: str) -> _MigTable:
    gpu = catalog_gpu(gpu_name)
    profiles = tuple(p for p in gpu.mig_profiles if not p.name.endswith("+me"))
    valid = []
    for counts in itertools.product(*(range(p.max_count + 1) for p in profiles)):
        compute = sum(n * p.compute_slices for n, p in zip(counts, profiles))
        memory = sum(n * p.memory_slices for n, p in zip(counts, profiles))
        if any(counts) and compute <= gpu.mig_compute_slices and memory <= gpu.mig_memory_slices:
            valid.append(counts)
    maximal = [
        v for v in valid
        if not any(w != v and all(a >= b for a, b in zip(w, v)) for w in valid)
    ]
    return _MigTable(profiles, tuple(maximal), gpu.mig_compute_slices, gpu.mig_memory_slices)


@lru_cache(maxsize=None)
def _layouts_for(gpu_name: str, needed: tuple[bool, ...]) -> tuple[tuple[int, ...], ...]:
    """The GPU's full layouts cut down to the profiles still needed (slices of others cover nothing), maximal ones only."""
    cut = {tuple(n if keep else 0 for n, keep in zip(layout, needed)) for layout in _mig_table(gpu_name).layouts}
    return tuple(sorted(
        v for v in cut if any(v) and not any(w != v and all(a >= b for a, b in zip(w, v)) for w in cut)
    ))


def _covered(vector: tuple[int, ...], layout: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(max(0, v - c) for v, c in zip(vector, layout))


def _mig_lower_bound(gpu_name: str, vector: tuple[int, ...]) -> int:
    """No packing uses fewer GPUs than the compute slices, the memory slices or any profile's max count allow."""
    table = _mig_table(gpu_name)
    compute = sum(v * p.compute_slices for v, p in zip(vector, table.profiles))
    memory = sum(v * p.memory_slices for v, p in zip(vector, table.profiles))
    return max(-(-compute // table.compute), -(-memory // table.memory),
               *(-(-v // p.max_count) for v, p in zip(vector, table.profiles)))


@lru_cache(maxsize=None)
def _mig_exact(gpu_name: str, vector: tuple[int, ...]) -> tuple[int, tuple[int, ...] | None]:
    """(fewest GPUs, the first GPU's layout) for a profile-count vector: some GPU holds a slice of the
    first profile still needed, so only layouts with one are tried; branches that cannot beat the best
    so far by the lower bound are skipped."""
    first = next((i for i, n in enumerate(vector) if n), None)
    if first is None:
        return 0, None
    bound = _mig_lower_bound(gpu_name, vector)
    best: tuple[int, tuple[int, ...] | None] = (_INFEASIBLE, None)
    for layout in _layouts_for(gpu_name, tuple(n > 0 for n in vector)):
        if not layout[first]:
            continue
        rest = _covered(vector, layout)
        if 1 + _mig_lower_bound(gpu_name, rest) >= best[0]:
            continue
        count = 1 + _mig_exact(gpu_name, rest)[0]
        if count < best[0]:
            best = (count, layout)
            if count == bound:
                break
    return best


@lru_cache(maxsize=None)
def _slice_weights(gpu_name: str) -> tuple[float, ...]:
    table = _mig_table(gpu_name)
    return tuple(p.compute_slices / table.compute + p.memory_slices / table.memory for p in table.profiles)


def _mig_greedy(gpu_name: str, vector: tuple[int, ...]) -> list[tuple[int, ...]]:
    """GPU layouts filled with the layout that takes the most slices still needed, as many times as it stays full."""
    weight = _slice_weights(gpu_name)
    layouts: list[tuple[int, ...]] = []
    while any(vector):
        best, best_score = (), -1.0
        for layout in _layouts_for(gpu_name, tuple(v > 0 for v in vector)):
            score = sum((v if v < n else n) * w for v, n, w in zip(vector, layout, weight) if n)
            if score > best_score:
                best, best_score = layout, score
        repeat = max(1, min(v // n for v, n in zip(vector, best) if n))
        layouts += [best] * repeat
        vector = tuple(max(0, v - n * repeat) for v, n in zip(vector, best))
    return layouts


@lru_cache(maxsize=None)
def _mig_layouts(gpu_name: str, vector: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """One layout per GPU covering the vector: the greedy fill when it meets the lower bound or the
    exact search would be too large, else the exact fewest."""
    greedy = _mig_greedy(gpu_name, vector)
    if len(greedy) == _mig_lower_bound(gpu_name, vector) or math.prod(n + 1 for n in vector) > EXACT_MIG_STATES:
        return tuple(greedy)
    layouts = []
    while any(vector):
        _, layout = _mig_exact(gpu_name, vector)
        layouts.append(layout)
        vector = _covered(vector, layout)
    return tuple(layouts)


def _mig_gpus(gpu_name: str, vector: tuple[int, ...]) -> int:
    return len(_mig_layouts(gpu_name, vector))


# ---------------------------------------------------------------------------------------------- shapes


WHOLE, SLICE = 0, 1


@dataclass(frozen=True)
class _Problem:
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
        return _fit(self.keys[d], option.gpu.name, 1, _mig_table(option.gpu.name).profiles[size].name)


def _holds(demand: Demand, result: Fit | None) -> bool:
    return result is not None and result.max_concurrency >= demand.concurrency


def _shapes(demand: Demand, key: ModelServiceSpec, option: PoolOption) -> tuple[tuple[int, int], ...]:
    if demand.allowed is not None and option.name not in demand.allowed:
        return ()
    gpu = option.gpu.name
    if option.mig:
        if demand.tensor_parallel not in (None, 1):
            return ()
        table = _mig_table(gpu)
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
            profile = max(_mig_table(o.gpu.name).profiles, key=lambda p: p.memory_gb)
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


def _problem(demands: Sequence[Demand], pools: Sequence[PoolOption]) -> _Problem:
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
    return _Problem(tuple(demands), keys, options, units, tuple(shapes))


def _objective(gpus: int, per_node: int, node_value: int, max_nodes: int | None) -> int:
    """One pool's objective for `gpus` GPUs in use: its node cost, then the GPUs bought, plus _OVER per node too many."""
    nodes = -(-gpus // per_node)
    over = 0 if max_nodes is None else max(0, nodes - max_nodes)
    return nodes * node_value + over * _OVER


def _value(option: PoolOption, gpus: int) -> int:
    return _objective(gpus, option.gpus_per_node, option.price_units * _COST_WEIGHT + option.gpus_per_node * _GPU_WEIGHT,
                      option.max_nodes)


def _no_room(problem: _Problem) -> PlacementError:
    limits = ", ".join(f"{o.name} {o.max_nodes}" for o in problem.options if o.max_nodes is not None)
    return PlacementError(
        f"the pools' max_nodes ({limits}) leave no room for all {len(problem.units)} replicas. "
        "To fix: raise max_nodes or add a pool."
    )


# ------------------------------------------------------------------------------------------ the layout


def _placement(problem: _Problem, chosen: Sequence[tuple[int, tuple[int, int]]]) -> Placement:
    """Concrete nodes and GPUs for each unit's (option, shape)."""
    assignments: list[Assignment] = []
    uses: list[PoolUse] = []
    for o, option in enumerate(problem.options):
        mine = [(u, shape) for u, (oo, shape) in enumerate(chosen) if oo == o]
        if not mine:
            continue
        layouts: list[dict[str, int]] = []
        if option.mig:
            table = _mig_table(option.gpu.name)
            vector = [0] * len(table.profiles)
            for _, (_, p) in mine:
                vector[p] += 1
            slots = [[p for p, n in enumerate(layout) for _ in range(n)] for layout in _mig_layouts(option.gpu.name, tuple(vector))]
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


# ------------------------------------------------------------------------------------------- heuristic

# Neighbourhoods whose cost grows with the square of the replicas (regret insertion, ejection, moving
# all into one pool) run on mixes up to this size, where one misplaced replica is a large share of the bill.
SMALL_MIX_REPLICAS = 40


class _Tables:
    """What the search reads and never changes: per option its node facts, per demand its shape and
    priced share of a node on each option it fits (the smallest fitting shape: a larger one never packs better)."""

    def __init__(self, problem: _Problem) -> None:
        options = problem.options
        self.demand_of = [d for d, _ in problem.units]
        self.gpu = [o.gpu.name for o in options]
        self.mig = [o.mig for o in options]
        self.per_node = [o.gpus_per_node for o in options]
        self.max_nodes = [o.max_nodes for o in options]
        self.node_value = [o.price_units * _COST_WEIGHT + o.gpus_per_node * _GPU_WEIGHT for o in options]
        self.profiles = [len(_mig_table(o.gpu.name).profiles) if o.mig else 0 for o in options]
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
        table = _mig_table(option.gpu.name)
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
            gpus = _mig_gpus(t.gpu[o], tuple(vector))
            vector[size] -= sign
        else:
            gpus = self.whole[o] + sign * size
        return _objective(gpus, t.per_node[o], t.node_value[o], t.max_nodes[o])

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
        key = (cost >= _OVER, share, cost) if by_share else (cost, share)
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
            regret = costs[1][0] - costs[0][0] if len(costs) > 1 else _OVER
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
    problem = _problem(demands, pools)
    tables = _Tables(problem)
    everyone = range(len(problem.units))
    starts = [_State(tables) for _ in range(3 if len(problem.units) <= SMALL_MIX_REPLICAS else 2)]
    _insert(starts[0], everyone)
    _insert(starts[1], everyone, by_share=True)
    if len(starts) > 2:
        _insert_by_regret(starts[2], everyone)
    best = min((_improve(start) for start in starts), key=lambda s: s.total)
    if best.total >= _OVER:
        raise _no_room(problem)
    return _placement(problem, [(o, tables.home[d][o]) for o, d in zip(best.where, tables.demand_of)])


# ------------------------------------------------------------------------------------------ exhaustive


def _best_block(problem: _Problem, o: int, members: Sequence[int]) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    """(objective, shape per member) of the cheapest way option o holds exactly these units; None if one cannot go there."""
    option = problem.options[o]
    choices = [problem.shapes[problem.units[u][0]].get(o) for u in members]
    if not all(choices):
        return None
    if not option.mig:
        picks = tuple(c[0] for c in choices)
        return _value(option, sum(t for _, t in picks)), picks
    # every reachable profile-count vector, with one choice of profiles that reaches it
    reach: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {(0,) * len(_mig_table(option.gpu.name).profiles): ()}
    for shapes in choices:
        grown: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {}
        for vector, picks in reach.items():
            for shape in shapes:
                v = list(vector)
                v[shape[1]] += 1
                grown.setdefault(tuple(v), picks + (shape,))
        reach = grown
    return min(((_value(option, _mig_exact(option.gpu.name, v)[0]), p) for v, p in reach.items()), key=lambda vp: vp[0])


def exhaustive_placement(demands: Sequence[Demand], pools: Sequence[PoolOption]) -> Placement:
    """The exact optimum for small mixes: every partition of the replicas into pools, every MIG profile choice.

    A pool's cost depends only on the set of replicas it holds, so the best way each pool holds each set
    is computed once; a dynamic programme then gives the pools one set each, in turn (one set per pool,
    so max_nodes bounds all of a pool's nodes).
    """
    problem = _problem(demands, pools)
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
    if best[full] >= _OVER:
        raise _no_room(problem)
    chosen: list[tuple[int, tuple[int, int]]] = [(-1, (0, 0))] * n
    mask = full
    for o in reversed(range(len(problem.options))):
        sub = taken[o][mask]
        if sub:
            _, picks = _best_block(problem, o, members[sub])
            for u, shape in zip(members[sub], picks):
                chosen[u] = (o, shape)
            mask ^= sub
    return _placement(problem, chosen)


# --------------------------------------------------------------------------------------------- naive


def naive_placement(demands: Sequence[Demand], pools: Sequence[PoolOption]) -> Placement:
    """One replica per whole GPU(s) of the cheapest GPU it fits (lowest price per GPU), no MIG, no sharing of a GPU."""
    demands = [replace(d, mig_profile=None) for d in demands]
    whole: list[PoolOption] = []
    for pool in pools:
        if not pool.mig:
            whole.append(pool)
        elif not any(o.instance_type == pool.instance_type and not o.mig for o in pools):
            whole.append(replace(pool, mig=False))
    problem = _problem(demands, whole)
    chosen = []
    for d, _ in problem.units:
        shapes = problem.shapes[d]
        o = min(shapes, key=lambda o: (problem.options[o].price_units / problem.options[o].gpus_per_node, o))
        chosen.append((o, shapes[o][0]))
    return _placement(problem, chosen)


# ----------------------------------------------------------------------------------------- fixed mix


@dataclass(frozen=True)
class Mix:
    """A model mix and the pools it may use, as plain data for tests and the benchmark."""

    models: tuple[Mapping[str, object], ...]         # ModelServiceSpec fields (pool defaults to 'auto')
    pools: tuple[tuple[str, str, bool], ...]          # (pool name, instance type, MIG-partitioned)
    region: str                                       # whose on-demand prices the pools cost

    def demands(self) -> list[Demand]:
        return [Demand.from_spec(ModelServiceSpec(**{"pool": "auto", **m})) for m in self.models]

    def options(self) -> list[PoolOption]:
        return [PoolOption.from_instance_type(name, it, region=self.region, mig=mig) for name, it, mig in self.pools]


# Six services a team might run, on the node types it has: 4 x L40S nodes, and H100s either as 8-GPU
# nodes or single-GPU ones, whole or MIG-partitioned. Big nodes are where packing pays.
FIXED_MIX = Mix(
    models=(
        {"name": "chat-8b-fp8", "model": "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "quantization": "fp8",
         "max_model_len": 8192, "max_num_seqs": 8},
        {"name": "embed-bge", "model": "BAAI/bge-large-en-v1.5", "max_model_len": 512, "max_num_seqs": 64},
        {"name": "embed-qwen", "model": "Qwen/Qwen3-Embedding-0.6B", "max_model_len": 8192, "max_num_seqs": 8},
        {"name": "chat-70b-awq", "model": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
         "quantization": "awq", "max_model_len": 16384, "max_num_seqs": 8},
        {"name": "qwen-7b-awq", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq",
         "max_model_len": 16384, "max_num_seqs": 4},
        {"name": "llama-3b", "model": "meta-llama/Llama-3.2-3B-Instruct", "max_model_len": 8192, "max_num_seqs": 4},
    ),
    pools=(
        ("l40s", "g6e.12xlarge", False),
        ("h100", "p5.48xlarge", False),
        ("h100-mig", "p5.48xlarge", True),
        ("h100-single-mig", "p5.4xlarge", True),
    ),
    region="us-east-1",
)
