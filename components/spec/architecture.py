"""Facts about a model and its checkpoint: the architecture sizing reads and the checkpoint's stored format."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inferstack.catalog.models import checkpoint_format as catalog_checkpoint_format
from inferstack.spec.base import Model

class ModelArchitecture(Model):
    """What sizing needs to know about a model; the model catalog supplies it for known models."""

    params_billion: float = Field(gt=0, description="Parameter count in billions. Required.")
    layers: int = Field(ge=1, description="Transformer layers. Required.")
    hidden_size: int = Field(ge=1, description="Hidden size. Required.")
    attention_heads: int = Field(ge=1, description="Query heads. Required.")
    kv_heads: int = Field(ge=1, description="Key/value heads (GQA). Required.")
    head_dim: int = Field(ge=1, description="Dimension per head. Required.")
    max_context: int = Field(ge=1, description="Longest context the model supports. Required.")
    task: Literal["generate", "embed"] = Field("generate", description="Text generation or embeddings. Defaults to generate.")
    vocab_size: int | None = Field(
        None, ge=1, description="Vocabulary size (config.json vocab_size). Defaults to the model catalog's, if any."
    )
    tied_embeddings: bool = Field(
        False, description="The LM head shares the token embedding (config.json tie_word_embeddings). Defaults to false."
    )
    vision_params_billion: float | None = Field(
        None, gt=0, description="Parameters of a multimodal model's vision encoder and projector, part of "
        "params_billion: quantized checkpoints leave them in 16 bits (their quantization ignore lists). Defaults to "
        "none (a text-only model).",
    )
    # Mixture of experts (config.json num_local_experts / n_routed_experts, num_experts_per_tok, ...).
    active_params_billion: float | None = Field(
        None, gt=0, description="Parameters a token uses (MoE: shared weights plus its experts). Defaults to all."
    )
    experts: int | None = Field(None, ge=2, description="Routed experts per MoE layer. Defaults to none: dense.")
    experts_per_token: int | None = Field(None, ge=1, description="Routed experts a token uses. Required with experts.")
    shared_experts: int = Field(0, ge=0, description="Experts every token uses (DeepSeek, Qwen2-MoE). Defaults to 0.")
    moe_layers: int | None = Field(
        None, ge=1, description="Layers whose MLP is MoE (DeepSeek keeps its first 3 dense). Defaults to every layer."
    )
    moe_intermediate_size: int | None = Field(
        None, ge=1, description="Intermediate size of one expert's gated MLP. Required with experts."
    )
    intermediate_size: int | None = Field(
        None, ge=1, description="Intermediate size of the dense layers' MLP (config.json intermediate_size; Llama "
        "4's intermediate_size_mlp): vLLM splits it over tensor_parallel, so a quantized checkpoint's blocks must "
        "divide each rank's share. None for a model with no dense layer. Defaults to none (not checked).",
    )
    # Attention: grouped-query (K and V per KV head) or multi-head latent (one compressed latent per token).
    attention: Literal["gqa", "mla"] = Field(
        "gqa", description="'gqa' (multi-head and grouped-query) or 'mla' (multi-head latent attention). Defaults to gqa."
    )
    kv_lora_rank: int | None = Field(None, ge=1, description="MLA latent dimension (config.json kv_lora_rank). Required with mla.")
    qk_rope_head_dim: int | None = Field(
        None, ge=1, description="MLA decoupled RoPE key dimension (config.json qk_rope_head_dim). Required with mla."
    )
    sliding_window: int | None = Field(None, ge=1, description="Tokens a sliding-window layer attends. Defaults to none.")
    sliding_window_layers: int | None = Field(
        None, ge=0, description="Layers that use the sliding window; the rest attend the full context. Defaults to all "
        "layers when sliding_window is set.",
    )
    attention_chunk_size: int | None = Field(
        None, ge=1, description="Tokens a chunked local-attention layer attends: its own chunk (Llama 4's "
        "config.json attention_chunk_size, 8192). Defaults to none.",
    )
    chunked_layers: int = Field(
        0, ge=0, description="Layers that use chunked local attention (Llama 4: those whose no_rope_layers entry is "
        "1, 36 of 48); the rest attend the full context. Defaults to 0.",
    )

    @model_validator(mode="after")
    def _kinds_complete(self) -> "ModelArchitecture":
        needs = []
        if self.experts is not None:
            needs += [f for f in ("experts_per_token", "moe_intermediate_size") if getattr(self, f) is None]
        if self.attention == "mla":
            needs += [f for f in ("kv_lora_rank", "qk_rope_head_dim") if getattr(self, f) is None]
        if needs:
            raise ValueError(
                f"{'an MoE' if self.experts is not None else 'an MLA'} architecture needs {', '.join(needs)}. To fix: "
                "set them from the model's config.json"
            )
        if self.experts is not None and self.experts_per_token > self.experts:
            raise ValueError(
                f"experts_per_token {self.experts_per_token} is more than experts {self.experts}. To fix: use the "
                "config.json's num_experts_per_tok"
            )
        if self.attention_heads % self.kv_heads:
            # vLLM asserts it building each attention layer (vLLM 0.33.0 model_executor/layers/attention/attention.py:329).
            divisors = [n for n in range(1, self.attention_heads + 1) if self.attention_heads % n == 0]
            raise ValueError(
                f"kv_heads {self.kv_heads} does not divide attention_heads {self.attention_heads}: each KV head serves "
                f"a whole group of query heads. To fix: use the config.json's num_key_value_heads (one of "
                f"{', '.join(map(str, divisors))})"
            )
        if self.chunked_layers and self.attention_chunk_size is None:
            raise ValueError(
                f"chunked_layers {self.chunked_layers} needs attention_chunk_size. To fix: set it from the model's "
                "config.json attention_chunk_size, or chunked_layers 0"
            )
        if self.vision_params_billion is not None and self.vision_params_billion >= self.params_billion:
            raise ValueError(
                f"vision_params_billion {self.vision_params_billion} is not less than params_billion "
                f"{self.params_billion}, which holds it. To fix: give the vision encoder's share of the total"
            )
        for name in ("moe_layers", "sliding_window_layers", "chunked_layers"):
            value = getattr(self, name)
            if value is not None and value > self.layers:
                raise ValueError(f"{name} {value} is more than layers {self.layers}. To fix: at most {self.layers}")
        return self

    @property
    def expert_params(self) -> int:
        """Routed-expert weights across the MoE layers: gate, up and down projections of each expert."""
        if self.experts is None:
            return 0
        layers = self.layers if self.moe_layers is None else self.moe_layers
        return layers * self.experts * 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def dense_layers(self) -> int:
        """Layers whose MLP is dense: all of a dense model's, the non-MoE ones of an MoE model."""
        if self.experts is None:
            return self.layers
        return self.layers - (self.layers if self.moe_layers is None else self.moe_layers)

    @property
    def windowed_layers(self) -> int:
        if self.sliding_window is None:
            return 0
        return self.layers if self.sliding_window_layers is None else self.sliding_window_layers


class CheckpointFormat(Model):
    """How a checkpoint stores its linear-layer weights, as its config.json's `quantization_config` says.

    vLLM reads this from the checkpoint itself, so it is a fact about the files, not a choice: sizing
    counts these bytes on disk, and what vLLM may be asked to run depends on it. Token embeddings and
    the LM head stay 16-bit in every format here.
    """

    quant_method: Literal["none", "awq", "gptq", "fp8", "compressed-tensors", "mxfp4", "modelopt"] = Field(
        "none",
        description="`quantization_config.quant_method` of the checkpoint's config.json (modelopt: NVIDIA "
        "ModelOpt's FP8 or NVFP4); none for a 16-bit checkpoint (no quantization_config). Defaults to none.",
    )
    weight_bits: Literal[4, 8, 16] = Field(16, description="Bits per stored weight. Defaults to 16.")
    weight_type: Literal["int", "float"] = Field(
        "float", description="Integer (AWQ, GPTQ, W4A16, W8A8-INT8) or float (FP8, 16-bit) weights. Defaults to float."
    )
    activation_bits: Literal[4, 8, 16] = Field(
        16, description="8 when activations are quantized too (W8A8 INT8 or FP8), 4 for NVFP4 W4A4, 16 for "
        "weight-only. Defaults to 16.",
    )
    group_size: int | None = Field(
        None,
        ge=1,
        description="Weights per 16-bit scale for group-wise formats (AWQ, GPTQ, W4A16: usually 128); none for "
        "per-channel, per-tensor or 128x128-block scales. Defaults to none.",
    )
    zero_points: bool = Field(
        False, description="A 4-bit zero point is stored per group (AWQ, GPTQ). Defaults to false."
    )
    scale_bits: Literal[8, 16] = Field(
        16, description="Bits of each group's scale: 16 (AWQ, GPTQ), 8 (MXFP4's E8M0 per 32 weights, NVFP4's E4M3 "
        "per 16). Defaults to 16."
    )
    weight_block_size: tuple[int, int] | None = Field(
        None, description="[block_n, block_k] of FP8 block-wise scales (quantization_config.weight_block_size, e.g. "
        "[128, 128]); none for per-tensor or per-channel scales. Defaults to none.",
    )
    kv_cache_dtype: Literal["auto", "fp8"] = Field(
        "auto", description="The KV-cache format the checkpoint stores scales for, which vLLM runs for "
        "--kv-cache-dtype auto: fp8 for a ModelOpt kv_cache_quant_algo FP8 (vLLM resolves auto only for ModelOpt "
        "checkpoints). Defaults to auto (the activation dtype).",
    )
    applies_to: Literal["linear", "experts"] = Field(
        "linear",
        description="Which weights the format covers: every linear layer, or only the MoE experts (gpt-oss's MXFP4, "
        "with attention and the router in 16 bits). Defaults to linear.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "CheckpointFormat":
        kinds = {
            "none": {(16, "float")},
            "awq": {(4, "int")},
            "gptq": {(4, "int"), (8, "int")},
            "fp8": {(8, "float")},
            "compressed-tensors": {(4, "int"), (8, "int"), (8, "float"), (4, "float")},
            "mxfp4": {(4, "float")},
            "modelopt": {(8, "float"), (4, "float")},
        }
        if (self.weight_bits, self.weight_type) not in kinds[self.quant_method]:
            allowed = ", ".join(f"{bits}-bit {kind}" for bits, kind in sorted(kinds[self.quant_method]))
            raise ValueError(
                f"quant_method {self.quant_method!r} stores {allowed} weights, not {self.weight_bits}-bit "
                f"{self.weight_type}. To fix: set weight_bits and weight_type to one of those, or the quant_method "
                "the checkpoint's quantization_config names"
            )
        if self.activation_bits == 8 and self.weight_bits != 8:
            raise ValueError(
                "activation_bits 8 (W8A8) needs weight_bits 8. To fix: set weight_bits 8, or drop activation_bits "
                "for a weight-only checkpoint"
            )
        if (self.weight_bits, self.weight_type) == (4, "float"):
            block = 32 if self.quant_method == "mxfp4" else 16
            if (self.group_size, self.scale_bits) != (block, 8):
                raise ValueError(
                    f"4-bit float weights under {self.quant_method!r} come in blocks of {block} sharing an 8-bit scale "
                    f"({'MXFP4' if block == 32 else 'NVFP4'}). To fix: set group_size {block} and scale_bits 8"
                )
        if self.activation_bits == 4 and not self.is_nvfp4:
            raise ValueError(
                "activation_bits 4 is NVFP4's W4A4: 4-bit float weights in groups of 16 with 8-bit scales. To fix: "
                "state that format, or drop activation_bits for a weight-only checkpoint"
            )
        if self.group_size is None and self.zero_points:
            raise ValueError(
                "zero_points are stored per group. To fix: set group_size (e.g. 128, as the checkpoint's "
                "quantization_config states), or zero_points false"
            )
        return self

    @property
    def is_nvfp4(self) -> bool:
        """NVIDIA's FP4: E2M1 weights in blocks of 16 sharing an FP8 (E4M3) scale, plus one FP32 scale per tensor."""
        return self.weight_bits == 4 and self.weight_type == "float" and self.group_size == 16 and self.scale_bits == 8


SIXTEEN_BIT = CheckpointFormat()


def catalog_stored_format(model_id: str) -> CheckpointFormat | None:
    """A catalog checkpoint's stored format, typed; None for ids the catalog lists no format for."""
    stored = catalog_checkpoint_format(model_id)
    return None if stored is None else CheckpointFormat(**stored)
