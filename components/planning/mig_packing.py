"""MIG packing: how slices of several profiles fill the fewest GPUs, and the layout of each GPU.

A GPU's layout is a profile-count vector within its 7 compute / 8 memory slices and each profile's max
count; the planners ask how many GPUs a vector of slices needs and which layouts reach it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

from inferstack.catalog import MigProfile, gpu as catalog_gpu

# A greedy fill of whole-GPU layouts, kept when it meets the lower bound; otherwise an exact memoised
# search over profile-count vectors while their state space is at most this many vectors.
EXACT_MIG_STATES = 5_000
# The exact search's best GPU count before it has found any packing.
_NO_PACKING = 10**30


@dataclass(frozen=True)
class MigTable:
    """A GPU's plannable profiles (media-extension '+me' variants add nothing for LLMs) and its full-GPU layouts."""

    profiles: tuple[MigProfile, ...]
    layouts: tuple[tuple[int, ...], ...]   # maximal valid profile-count vectors, one per way to fill a GPU
    compute: int
    memory: int


@lru_cache(maxsize=None)
def mig_table(gpu_name: str) -> MigTable:
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
    return MigTable(profiles, tuple(maximal), gpu.mig_compute_slices, gpu.mig_memory_slices)


@lru_cache(maxsize=None)
def _layouts_for(gpu_name: str, needed: tuple[bool, ...]) -> tuple[tuple[int, ...], ...]:
    """The GPU's full layouts cut down to the profiles still needed (slices of others cover nothing), maximal ones only."""
    cut = {tuple(n if keep else 0 for n, keep in zip(layout, needed)) for layout in mig_table(gpu_name).layouts}
    return tuple(sorted(
        v for v in cut if any(v) and not any(w != v and all(a >= b for a, b in zip(w, v)) for w in cut)
    ))


def _covered(vector: tuple[int, ...], layout: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(max(0, v - c) for v, c in zip(vector, layout))


def _mig_lower_bound(gpu_name: str, vector: tuple[int, ...]) -> int:
    """No packing uses fewer GPUs than the compute slices, the memory slices or any profile's max count allow."""
    table = mig_table(gpu_name)
    compute = sum(v * p.compute_slices for v, p in zip(vector, table.profiles))
    memory = sum(v * p.memory_slices for v, p in zip(vector, table.profiles))
    return max(-(-compute // table.compute), -(-memory // table.memory),
               *(-(-v // p.max_count) for v, p in zip(vector, table.profiles)))


@lru_cache(maxsize=None)
def mig_exact(gpu_name: str, vector: tuple[int, ...]) -> tuple[int, tuple[int, ...] | None]:
    """(fewest GPUs, the first GPU's layout) for a profile-count vector: some GPU holds a slice of the
    first profile still needed, so only layouts with one are tried; branches that cannot beat the best
    so far by the lower bound are skipped."""
    first = next((i for i, n in enumerate(vector) if n), None)
    if first is None:
        return 0, None
    bound = _mig_lower_bound(gpu_name, vector)
    best: tuple[int, tuple[int, ...] | None] = (_NO_PACKING, None)
    for layout in _layouts_for(gpu_name, tuple(n > 0 for n in vector)):
        if not layout[first]:
            continue
        rest = _covered(vector, layout)
        if 1 + _mig_lower_bound(gpu_name, rest) >= best[0]:
            continue
        count = 1 + mig_exact(gpu_name, rest)[0]
        if count < best[0]:
            best = (count, layout)
            if count == bound:
                break
    return best


@lru_cache(maxsize=None)
def _slice_weights(gpu_name: str) -> tuple[float, ...]:
    table = mig_table(gpu_name)
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
def mig_layouts(gpu_name: str, vector: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """One layout per GPU covering the vector: the greedy fill when it meets the lower bound or the
    exact search would be too large, else the exact fewest."""
    greedy = _mig_greedy(gpu_name, vector)
    if len(greedy) == _mig_lower_bound(gpu_name, vector) or math.prod(n + 1 for n in vector) > EXACT_MIG_STATES:
        return tuple(greedy)
    layouts = []
    while any(vector):
        _, layout = mig_exact(gpu_name, vector)
        layouts.append(layout)
        vector = _covered(vector, layout)
    return tuple(layouts)


def mig_gpus(gpu_name: str, vector: tuple[int, ...]) -> int:
    return len(mig_layouts(gpu_name, vector))
