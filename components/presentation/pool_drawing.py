"""Where each replica sits on a pool's nodes at min scale, for the plan's drawing and its scale-up waits.

One possible packing (first fit, largest replicas first): the scheduler may place replicas differently, so
no figure the plan states is counted from it; node counts come from `inferstack.planning.pool_capacity`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Cell:
    """One drawable part of a GPU: a MIG slice, a time-sliced share, or the whole GPU."""

    device: str
    x: int          # offset within the GPU, in slot units
    width: int
    model: str | None = None
    replica: int = 0
    on_demand: bool = False   # drawn for a model at zero replicas: where its first replica would go


@dataclass
class Node:
    index: int
    capacity: str            # on-demand | spot
    scaled: bool             # beyond the pool's min scale: added to hold the replicas drawn
    gpus: list[list[Cell]] = field(default_factory=list)

    def free_gpu(self, g: int) -> bool:
        return all(cell.model is None for cell in self.gpus[g])


def _new_node(pool: dict[str, Any], index: int, baseline: int) -> Node:
    on_demand = index < pool["nodes"]["on_demand_base"] or pool["spot"] is None
    node = Node(index, "on-demand" if on_demand else "spot", index >= baseline)
    for _ in range(pool["gpus_per_node"]):
        x, cells = 0, []
        for slot in pool["gpu_slots"]:
            cells.append(Cell(slot["device"], x, slot["width"]))
            x += slot["width"]
        node.gpus.append(cells)
    return node


def _replicas(plan: dict[str, Any], pool: str) -> list[tuple[dict[str, Any], int, bool]]:
    """(placement, replica number, on demand) for every replica drawn on a pool, largest first."""
    found = []
    for row in plan["placements"]:
        if row["pool"] != pool:
            continue
        count = row["replicas"]["min"]
        found += [(row, r + 1, False) for r in range(count)] or [(row, 1, True)]
    return sorted(found, key=lambda item: -item[0]["devices_per_replica"])


def pack(plan: dict[str, Any], pool: dict[str, Any]) -> list[Node]:
    """Nodes of the pool at min scale with each replica in place (first fit, largest replicas first); nodes
    are added (up to max) when the min-scale nodes cannot hold the replicas, or for a model that starts at
    zero replicas. One possible packing: the scheduler may place replicas differently."""
    baseline = pool["at_scale"]["min"]["on_demand_nodes"] + pool["at_scale"]["min"]["spot_nodes"]
    nodes = [_new_node(pool, i, baseline) for i in range(baseline)]
    per_node = pool["gpus_per_node"]
    whole = len(pool["gpu_slots"]) == 1

    def node_at(i: int) -> Node | None:
        while len(nodes) <= i and len(nodes) < pool["nodes"]["max"]:
            nodes.append(_new_node(pool, len(nodes), baseline))
        return nodes[i] if i < len(nodes) else None

    def take(cell: Cell, row: dict[str, Any], number: int, on_demand: bool) -> None:
        cell.model, cell.replica, cell.on_demand = row["model"], number, on_demand

    for row, number, on_demand in _replicas(plan, pool["name"]):
        devices = row["devices_per_replica"]
        if whole and devices > per_node:                   # a multi-node replica takes whole free nodes
            span, start = math.ceil(devices / per_node), 0
            while (group := [node_at(j) for j in range(start, start + span)]) and None not in group:
                if all(n.free_gpu(g) for n in group for g in range(per_node)):
                    for n in group:
                        for gpu in n.gpus:
                            take(gpu[0], row, number, on_demand)
                    break
                start += 1
            continue
        for i in range(pool["nodes"]["max"]):
            node = node_at(i)
            if node is None:
                break
            if whole:
                run = next((g for g in range(per_node - devices + 1)
                            if all(node.free_gpu(k) for k in range(g, g + devices))), None)
                if run is not None:
                    for k in range(run, run + devices):
                        take(node.gpus[k][0], row, number, on_demand)
                    break
            else:
                free = [c for gpu in node.gpus for c in gpu if c.model is None and c.device == row["device"]]
                if len(free) >= devices:
                    for cell in free[:devices]:
                        take(cell, row, number, on_demand)
                    break
    return nodes
