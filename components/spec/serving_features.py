"""Engine features a model service may add: LoRA adapters, speculative decoding, a host KV tier and
prefill/decode disaggregation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inferstack.spec.autoscaling import AutoscalingSpec
from inferstack.spec.base import Model, Name, S3Uri

# vLLM 0.33's choices for --max-lora-rank (vllm/config/lora.py MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class LoraAdapterSpec(Model):
    """A LoRA adapter served beside its base model: requests name it as their model."""

    name: Name = Field(description="Served model name of the adapter (what requests send as `model`). Required.")
    weights: S3Uri = Field(description="S3 prefix of the adapter (adapter_config.json and its safetensors). Required.")
    rank: int = Field(ge=1, le=max(VLLM_LORA_RANKS), description="The adapter's LoRA rank r. Required.")


class SpeculativeSpec(Model):
    """Speculative decoding (vLLM --speculative-config): a proposer drafts tokens the model verifies in one step."""

    method: Literal["ngram", "draft_model", "eagle", "eagle3", "mtp"] = Field(
        description="ngram (prompt lookup, no model), draft_model (a small model of the same vocabulary), eagle / "
        "eagle3 (an EAGLE head trained for the model), or mtp (the model's own multi-token-prediction layers). "
        "Required.",
    )
    model: str | None = Field(
        None, description="Hugging Face id of the draft model or EAGLE head. Required for draft_model, eagle, eagle3."
    )
    weights: S3Uri | None = Field(
        None, description="S3 prefix holding the draft's files, pre-fetched to the NVMe cache beside the model's "
        "(serving pods reach no model hub). Required with model.",
    )
    draft_params_billion: float | None = Field(
        None, gt=0, description="Draft model size, for sizing, when the catalog does not list it. Defaults to the "
        "catalog's.",
    )
    num_speculative_tokens: int = Field(3, ge=1, le=16, description="Tokens drafted per step. Defaults to 3.")
    draft_tensor_parallel: int | None = Field(
        None, ge=1, description="Tensor parallelism of the draft model: 1 or the service's. Defaults to the service's.",
    )
    prompt_lookup_max: int | None = Field(
        None, ge=1, description="ngram: longest n-gram matched. Defaults to prompt_lookup_min, or 5 when neither is set."
    )
    prompt_lookup_min: int | None = Field(
        None, ge=1, description="ngram: shortest n-gram matched. Defaults to prompt_lookup_max, or 5 when neither is set."
    )


class KvOffloadSpec(Model):
    """A second KV-cache tier in host memory (vLLM's native OffloadingConnector, --kv-offloading-size)."""

    cpu_gib: float = Field(
        gt=0, allow_inf_nan=False, description="Host memory per replica for offloaded KV blocks, in GiB (vLLM "
        "shares it over the replica's ranks). Required.",
    )


class PrefillSpec(Model):
    """The prefill role of a disaggregated service: engines of its own that compute prompts and hand the KV
    cache to the service's decode engines."""

    tensor_parallel: int = Field(1, ge=1, le=8, description="Tensor parallelism of a prefill engine. Defaults to 1.")
    pool: str | None = Field(None, description="Node pool of the prefill engines. Defaults to the service's pool.")
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec, description="Prefill replica scaling. Defaults to exactly one replica."
    )
    max_num_seqs: int | None = Field(
        None, ge=1, description="Prompts a prefill engine computes at once (--max-num-seqs). Defaults to vLLM's.",
    )


class DisaggregationSpec(Model):
    """Prefill/decode disaggregation: the service's own replicas decode, the prefill role computes prompts, and
    vLLM's NIXL connector moves the KV cache between them over EFA."""

    prefill: PrefillSpec = Field(default_factory=PrefillSpec, description="The prefill role. Defaults to one TP-1 engine.")
    non_cached_tokens: int = Field(
        16, ge=1, description="A prompt goes to a prefill engine when at least this many of its tokens are not "
        "cached on the decode pod the picker chose (llm-d's prefix-based-pd-decider nonCachedTokens). Defaults to 16.",
    )
