"""Edits of a stack's dict form that several test modules make the same way."""

from __future__ import annotations


def without_node_autoscaler(data: dict) -> None:
    """No node autoscaler: nothing adds nodes, so every pool starts with at least one (spec/capacity.py)."""
    data.setdefault("platform", {})["node_autoscaler"] = "none"
    for pool in data["node_pools"]:
        pool["min_nodes"] = max(pool.get("min_nodes", 0), 1)
