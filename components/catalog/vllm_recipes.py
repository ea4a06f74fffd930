"""What vLLM's own recipes (vllm-project/recipes) choose per model and GPU generation where it differs from the
general advice, as data (vllm_recipes.json, each with its source): the models whose recipe keeps a 16-bit KV cache
on a generation where FP8 would otherwise be advised."""

from __future__ import annotations

import json
from importlib.resources import files

from inferstack.catalog import Gpu

_RAW = json.loads(files("inferstack.catalog").joinpath("vllm_recipes.json").read_text(encoding="utf-8"))


def fp8_kv_left_out(model: str, gpu: Gpu) -> str | None:
    """The recipe that serves `model` on this GPU's generation without an FP8 KV cache, or None."""
    for entry in _RAW["fp8_kv_cache_left_out"]:
        if model.startswith(entry["model_prefix"]) and gpu.capability[0] == entry["compute_capability_major"]:
            return _RAW["sources"][entry["source"]]
    return None
