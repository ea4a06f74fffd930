"""Model architecture facts (layers, KV heads, head dim, ...) that sizing needs, kept as data.

Quantized checkpoints share their base model's architecture; `models.json` maps them to it.
"""

from __future__ import annotations

import json
from importlib.resources import files
from types import MappingProxyType
from typing import Any, Mapping

_RAW = json.loads(files("inferstack.catalog").joinpath("models.json").read_text(encoding="utf-8"))

MODELS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(facts) for name, facts in _RAW["models"].items()}
)
QUANTIZED_CHECKPOINTS: Mapping[str, str] = MappingProxyType(_RAW["quantized_checkpoints"])
# The quant_method each pre-quantized checkpoint declares: vLLM refuses a --quantization that differs.
CHECKPOINT_QUANTIZATION: Mapping[str, str] = MappingProxyType(_RAW["checkpoint_quantization"])
# Token embedding facts, kept apart from the architecture: quantized checkpoints leave the embedding
# and LM-head matrices in 16 bits, which sizing must count separately.
VOCABULARY: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(facts) for name, facts in _RAW["vocabulary"].items()}
)


def model_facts(model_id: str) -> Mapping[str, Any] | None:
    """Architecture facts for a model id or a quantized checkpoint of one; None when unknown."""
    return MODELS.get(QUANTIZED_CHECKPOINTS.get(model_id, model_id))


def vocabulary_facts(model_id: str) -> Mapping[str, Any] | None:
    """vocab_size and tied_embeddings for a model id or a quantized checkpoint of one; None when unknown."""
    return VOCABULARY.get(QUANTIZED_CHECKPOINTS.get(model_id, model_id))


def checkpoint_quantization(model_id: str) -> str | None:
    """The vLLM quantization method a checkpoint declares in its config; None for unquantized or unknown ones."""
    return CHECKPOINT_QUANTIZATION.get(model_id)


def known_model_ids() -> list[str]:
    return sorted([*MODELS, *QUANTIZED_CHECKPOINTS])
