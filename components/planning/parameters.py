"""A model's parameters as sizing and the LoRA slots both count them: the 16-bit width, and the token
embedding and LM head (from the architecture, else the model catalog's vocabulary).

sizing.py and lora.py import this module; it imports neither, so the two need not import each other.
"""

from __future__ import annotations

from inferstack.catalog.models import vocabulary_facts
from inferstack.spec import ModelServiceSpec

DTYPE_BYTES = 2  # bfloat16 / float16 weights and activations


def vocabulary(model: ModelServiceSpec) -> tuple[int, bool] | None:
    """(vocab_size, tied embeddings): the architecture's when it states them, else the catalog's; None if unknown."""
    arch = model.resolved_architecture
    if arch.vocab_size is not None:
        return arch.vocab_size, arch.tied_embeddings
    facts = vocabulary_facts(model.model)
    return None if facts is None else (facts["vocab_size"], facts["tied_embeddings"])


def embedding_params(model: ModelServiceSpec) -> int:
    """Parameters of the token embedding and LM head, which quantized checkpoints keep in 16 bits.

    0 when the vocabulary is unknown (a model given only by `architecture` without vocab_size): every
    parameter is then counted at the quantized width.
    """
    known = vocabulary(model)
    if known is None:
        return 0
    vocab_size, tied = known
    matrices = 1 if tied or model.resolved_architecture.task == "embed" else 2
    return vocab_size * model.resolved_architecture.hidden_size * matrices
