"""`inferstack plan <stack> --html FILE`: the plan as one self-contained page.

The page draws each pool's nodes and GPUs with every model's replicas (at min scale) in place, MIG
slices and time-sliced shares as parts of a GPU, the cost of each pool, and the chain of waits from an
empty account to each model's first ready replica. It reads only the plan dict (plan.json), so what it
shows is what `plan --json` says. Inline CSS and SVG, no script, nothing fetched.

The drawing is pool_drawing.pack's packing (first fit, largest replicas first): the scheduler may place
replicas differently.
"""

from __future__ import annotations

import math
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import jinja2

from inferstack.presentation.terminal import REPLICA_PARTS, duration
from inferstack.presentation.pool_drawing import Cell, pack

# Distinct fills for models (text stays dark on all of them); a model keeps its colour across the page.
PALETTE = (
    "#8ecae6", "#ffb703", "#90be6d", "#f28482", "#b8b8ff", "#f6bd60", "#84dcc6", "#e5989b", "#a3c4f3", "#cdb4db",
)
# Geometry of the pool drawings, in px.
GPU_W, GPU_H, GPU_GAP, NODE_PAD, NODE_HEAD, NODE_GAP, MAX_ROW, MIN_NODE_W = 104, 74, 8, 10, 22, 14, 950, 150
# Geometry of the time-to-serving chart.
CHART_W, LABEL_W, ROW_H = 960, 330, 22


def fit_label(text: str, width: float, font_px: int) -> str:
    """The text cut (with an ellipsis) to what fits in `width` px at about 0.6 em per character."""
    room = int(width / (font_px * 0.6))
    return text if len(text) <= room else (text[: max(room - 1, 0)] + "…" if room > 1 else "")


def _colours(plan: dict[str, Any]) -> dict[str, str]:
    return {row["model"]: PALETTE[i % len(PALETTE)] for i, row in enumerate(plan["placements"])}


def pool_drawing(plan: dict[str, Any], pool: dict[str, Any], colours: dict[str, str]) -> dict[str, Any]:
    """SVG geometry of one pool: node frames, GPU frames and the cells (slices, shares, replica spans)."""
    nodes = pack(plan, pool)
    per_node = pool["gpus_per_node"]
    node_w = max(2 * NODE_PAD + per_node * GPU_W + (per_node - 1) * GPU_GAP, MIN_NODE_W)
    node_h = NODE_HEAD + NODE_PAD + GPU_H
    columns = max(1, MAX_ROW // (node_w + NODE_GAP))
    frames, gpus, cells, spans = [], [], [], []
    unit = (GPU_W - 4) / pool["gpu_width"]
    for n, node in enumerate(nodes):
        left, top = (n % columns) * (node_w + NODE_GAP), (n // columns) * (node_h + NODE_GAP)
        frames.append({
            "x": left, "y": top, "w": node_w, "h": node_h, "dashed": node.scaled,
            "label": f"node {node.index + 1} · {node.capacity}" + (" · scaled up" if node.scaled else ""),
        })
        for g, gpu in enumerate(node.gpus):
            gx, gy = left + NODE_PAD + g * (GPU_W + GPU_GAP), top + NODE_HEAD
            gpus.append({"x": gx, "y": gy, "w": GPU_W, "h": GPU_H, "label": f"GPU {g}"})
            if len(gpu) == 1 and gpu[0].model is not None:
                continue   # a whole GPU in use is drawn by its replica's span below
            for cell in gpu:
                cells.append({
                    "x": round(gx + 2 + cell.x * unit, 1), "y": gy + 14, "w": round(cell.width * unit - 2, 1),
                    "h": GPU_H - 16, "fill": colours.get(cell.model or "", "#eef0f3"), "dashed": cell.on_demand,
                    "label": fit_label(
                        cell.model or cell.device.split(".")[0], cell.width * unit - 4, 10 if cell.model else 9
                    ),
                    "title": (
                        f"{cell.model} replica {cell.replica}{' (on demand)' * cell.on_demand} on {cell.device}"
                        if cell.model else f"{cell.device}: free"
                    ),
                    "model": cell.model,
                })
        runs: list[tuple[int, int, Cell]] = []
        for g, gpu in enumerate(node.gpus):
            if len(gpu) == 1 and gpu[0].model is not None:
                last = runs[-1] if runs else None
                if last and last[2].model == gpu[0].model and last[2].replica == gpu[0].replica and last[1] == g - 1:
                    runs[-1] = (last[0], g, last[2])
                else:
                    runs.append((g, g, gpu[0]))
        for first, last, cell in runs:
            x, w = left + NODE_PAD + first * (GPU_W + GPU_GAP) + 2, (last - first + 1) * (GPU_W + GPU_GAP) - GPU_GAP - 4
            label = f"{cell.model} #{cell.replica}" + (f" · {last - first + 1} GPUs" if last > first else "")
            spans.append({
                "x": x, "y": top + NODE_HEAD + 14, "w": w, "h": GPU_H - 16, "fill": colours[cell.model],
                "dashed": cell.on_demand, "model": cell.model,
                "label": fit_label(label + (" (on demand)" if cell.on_demand else ""), w - 6, 11),
                "title": f"{cell.model} replica {cell.replica}: {last - first + 1} GPU(s) of node {node.index + 1}",
            })
    baseline = pool["at_scale"]["min"]["on_demand_nodes"] + pool["at_scale"]["min"]["spot_nodes"]
    needed = pool["nodes_for_min_replicas"]
    rows = math.ceil(len(nodes) / columns) if nodes else 0
    width = min(len(nodes), columns) * (node_w + NODE_GAP) - NODE_GAP if nodes else node_w
    legend = [
        {"model": row["model"], "fill": colours[row["model"]], "replicas": row["replicas"]["min"],
         "device": f"{row['devices_per_replica']}× {row['device']}"}
        for row in plan["placements"] if row["pool"] == pool["name"]
    ]
    return {
        "legend": legend,
        "width": width, "height": max(rows * (node_h + NODE_GAP) - NODE_GAP, 30), "frames": frames, "gpus": gpus,
        "cells": cells, "spans": spans, "empty": not nodes,
        "min_nodes_short": needed - baseline if needed > baseline else 0, "nodes_needed": needed,
    }


def serving_chart(model: dict[str, Any], horizon: float) -> dict[str, Any]:
    """A Gantt chart of one model's critical path: a bar per step, the first replica split into its parts."""
    scale = (CHART_W - LABEL_W - 70) / horizon
    bars = []
    for i, step in enumerate(model["critical_path"]):
        bar = {
            "y": i * ROW_H, "x": LABEL_W + step["start"] * scale, "w": max(step["seconds"] * scale, 2),
            "label": step["name"], "short": fit_label(step["name"], LABEL_W - 12, 11),
            "time": duration(step["seconds"]), "parts": [],
            "title": f"{step['name']} ({step['type']}): {duration(step['start'])} -> {duration(step['finish'])}",
        }
        if i == len(model["critical_path"]) - 1:
            start = step["start"]
            for part in model["first_replica"]:
                name = REPLICA_PARTS[part["part"]]
                bar["parts"].append({"x": LABEL_W + start * scale, "w": part["seconds"] * scale,
                                     "label": fit_label(name, part["seconds"] * scale - 4, 9),
                                     "title": f"{name}: {duration(part['seconds'])}"})
                start += part["seconds"]
        bars.append(bar)
    ticks = [{"x": LABEL_W + t * scale, "label": f"{t // 60:.0f}m"} for t in range(0, int(horizon) + 1, 300)]
    return {
        "width": CHART_W, "height": len(bars) * ROW_H + 24, "bars": bars, "ticks": ticks, "axis_y": len(bars) * ROW_H,
        "label_x": LABEL_W - 8,
    }


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["usd"] = lambda value: "n/a" if value is None else f"${value:,.2f}"
    env.filters["duration"] = duration
    env.globals["replica_parts"] = REPLICA_PARTS
    return env.from_string(files("inferstack.templates").joinpath("plan.html.j2").read_text(encoding="utf-8"))


def render_html(plan: dict[str, Any]) -> str:
    colours = _colours(plan)
    models = plan["time_to_serving"]["models"]
    horizon = max((m["seconds"] for m in models), default=0) or 1
    return _template().render(
        plan=plan,
        colours=colours,
        pools=[{"pool": pool, "drawing": pool_drawing(plan, pool, colours)} for pool in plan["node_pools"]],
        charts={m["model"]: serving_chart(m, horizon) for m in models},
        estimates={row["model"]: row for row in plan["throughput"]["models"]},
        serving={m["model"]: m for m in models},
    )


def write_html(plan: dict[str, Any], path: Path) -> None:
    path.write_text(render_html(plan), encoding="utf-8")
