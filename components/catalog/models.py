"""Model facts as data: the architecture sizing needs, and how each pre-quantized checkpoint stores its weights.

A pre-quantized checkpoint shares its base model's architecture and vocabulary; `models.json` maps
it to that base model and states its stored format (the checkpoint's `quantization_config`), with
where each fact was read: `model_sources` for a base model (its config.json and model card), the
checkpoint's own `source` for a checkpoint. `model_classes` names the class each base model's
config.json declares and how many multi-token-prediction layers it ships; `speculators` holds the
published EAGLE heads a service may draft with, by their config.json and the model each was trained for.
"""

from __future__ import annotations

import json
from importlib.resources import files
from types import MappingProxyType
from typing import Any, Mapping

_RAW = json.loads(files("inferstack.catalog").joinpath("models.json").read_text(encoding="utf-8"))
_SECTIONS = {"sources", "models", "model_sources", "checkpoints", "vocabulary", "model_classes", "speculators"}
if set(_RAW) != _SECTIONS:
    raise ValueError(f"models.json has sections {sorted(_RAW)}, expected exactly {sorted(_SECTIONS)}")

MODELS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(facts) for name, facts in _RAW["models"].items()}
)
# Base model id -> where its architecture, vocabulary and parameter counts were read.
MODEL_SOURCES: Mapping[str, str] = MappingProxyType(dict(_RAW["model_sources"]))
# Pre-quantized checkpoint id -> {"base_model", "format" (CheckpointFormat fields), optional "download_gb" (the
# repository's files, where they hold more than the served weights), optional "intermediate_size" (the dense MLP
# width its config.json states where the quantizer padded it for tensor parallelism), "source"}.
CHECKPOINTS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(facts) for name, facts in _RAW["checkpoints"].items()}
)
# Token embedding facts, kept apart from the architecture: quantized checkpoints leave the embedding
# and LM-head matrices in 16 bits, which sizing must count separately.
VOCABULARY: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(facts) for name, facts in _RAW["vocabulary"].items()}
)
# Base model id -> {"architecture" (config.json architectures[0]), "mtp_layers" (num_nextn_predict_layers, 0 when
# the key is absent), "source"}.
MODEL_CLASSES: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(facts) for name, facts in _RAW["model_classes"].items()}
)
# EAGLE head id -> {"method", "trained_for", "hidden_size", optional "target_hidden_size", "layers", "vocab_size",
# "draft_vocab_size", "source"}: heads are no servable model, so they are kept apart from MODELS.
SPECULATORS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {name: MappingProxyType(facts) for name, facts in _RAW["speculators"].items()}
)


def base_model(model_id: str) -> str:
    """The base model a catalog checkpoint was quantized from; the id itself otherwise."""
    checkpoint = CHECKPOINTS.get(model_id)
    return model_id if checkpoint is None else checkpoint["base_model"]


def model_facts(model_id: str) -> Mapping[str, Any] | None:
    """Architecture facts for a model id or a quantized checkpoint of one; None when unknown. A checkpoint whose
    config.json pads the dense intermediate size (Qwen's 72B AWQ and GPTQ) states it over its base model's."""
    facts = MODELS.get(base_model(model_id))
    padded = CHECKPOINTS.get(model_id, {}).get("intermediate_size")
    if facts is None or padded is None:
        return facts
    return MappingProxyType({**facts, "intermediate_size": padded})


def vocabulary_facts(model_id: str) -> Mapping[str, Any] | None:
    """vocab_size and tied_embeddings for a model id or a quantized checkpoint of one; None when unknown."""
    return VOCABULARY.get(base_model(model_id))


def class_facts(model_id: str) -> Mapping[str, Any] | None:
    """architecture and mtp_layers for a model id or a quantized checkpoint of one; None when unknown."""
    return MODEL_CLASSES.get(base_model(model_id))


def speculator_facts(head_id: str) -> Mapping[str, Any] | None:
    """A published EAGLE head's config.json facts; None for a head the catalog does not list."""
    return SPECULATORS.get(head_id)


def checkpoint_format(model_id: str) -> Mapping[str, Any] | None:
    """The stored format of a catalog checkpoint (CheckpointFormat fields); None for 16-bit or unknown ids."""
    checkpoint = CHECKPOINTS.get(model_id)
    return None if checkpoint is None else checkpoint["format"]


def download_bytes(model_id: str) -> int | None:
    """The bytes a catalog checkpoint's repository holds, where recorded: DeepSeek's files carry the
    multi-token-prediction module the served weights leave out. None when the format's width gives the size."""
    checkpoint = CHECKPOINTS.get(model_id)
    if checkpoint is None or "download_gb" not in checkpoint:
        return None
    return round(checkpoint["download_gb"] * 1e9)


def checkpoints_of(model_id: str) -> list[str]:
    """The catalog's pre-quantized checkpoints of the same base model, other than `model_id` itself."""
    base = base_model(model_id)
    return [name for name, facts in CHECKPOINTS.items() if facts["base_model"] == base and name != model_id]


def model_source(model_id: str) -> str:
    """Where the catalog read a model's facts (a checkpoint's own source); KeyError for an id not in the catalog."""
    checkpoint = CHECKPOINTS.get(model_id)
    if checkpoint is not None:
        return checkpoint["source"]
    if model_id not in MODEL_SOURCES:
        raise KeyError(f"{model_id!r} is not in the model catalog")
    return MODEL_SOURCES[model_id]


def known_model_ids() -> list[str]:
    return sorted([*MODELS, *CHECKPOINTS])
