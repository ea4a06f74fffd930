"""Speculative decoding: vLLM 0.33's --speculative-config for a service, and what the draft costs in GPU memory.

Facts from vLLM 0.33.0 (vllm/config/speculative.py): `draft_tensor_parallel_size` may only be 1 or the target's
tensor parallelism (`_verify_and_get_draft_tp`); ngram defaults `prompt_lookup_min` and `_max` to 5 when neither
is given and refuses min > max; draft_model, eagle and eagle3 need `model`, while ngram and mtp propose from the
prompt or from the model's own MTP layers. With LoRA on, vLLM refuses `max_num_batched_tokens` below
`max_num_seqs x (num_speculative_tokens + 1)` (vllm/engine/arg_utils.py, the LoRA config check).

A draft model's weights sit beside the target's on every GPU of its tensor-parallel group, so they come out of
the KV cache; its own KV cache (its layers, in the same block pool) does too when the catalog knows its shape.
Drafting pays off when the GPUs are idle between a few sequences' decode steps; at batch sizes where a step is
bound by compute, the verified-but-rejected tokens are throughput lost (vLLM docs, "Speculative Decoding").
"""

from __future__ import annotations

import json
import math

from inferstack.catalog.models import model_facts
from inferstack.conventions import MODEL_CACHE_MOUNT
from inferstack.spec import ModelArchitecture, ModelServiceSpec, SpeculativeSpec

DRAFT_BYTES_PER_PARAM = 2  # draft models and EAGLE heads ship in 16 bits
NEEDS_MODEL = frozenset({"draft_model", "eagle", "eagle3"})
# Requests per second per replica past which drafting is more likely to cost throughput than save latency.
LATENCY_ONLY_RPS_PER_REPLICA = 2.0


def draft_key(model: ModelServiceSpec) -> str:
    """The draft's directory in the node's NVMe cache, published by its own pre-fetch like the model's weights."""
    return f"draft--{model.name}"


def draft_path(model: ModelServiceSpec) -> str:
    return f"{MODEL_CACHE_MOUNT}/{draft_key(model)}"


def speculative_config(model: ModelServiceSpec) -> dict | None:
    """The --speculative-config document, keys as vLLM's SpeculativeConfig names them; a draft is read from the
    node's cache."""
    spec = model.speculative
    if spec is None:
        return None
    config: dict = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.model is not None:
        config["model"] = draft_path(model)
    if spec.draft_tensor_parallel is not None:
        config["draft_tensor_parallel_size"] = spec.draft_tensor_parallel
    if spec.prompt_lookup_max is not None:
        config["prompt_lookup_max"] = spec.prompt_lookup_max
    if spec.prompt_lookup_min is not None:
        config["prompt_lookup_min"] = spec.prompt_lookup_min
    return config


def speculative_args(model: ModelServiceSpec) -> list[str]:
    config = speculative_config(model)
    if config is None:
        return []
    return ["--speculative-config", json.dumps(config, separators=(",", ":"), sort_keys=True)]


def draft_architecture(spec: SpeculativeSpec) -> ModelArchitecture | None:
    """The draft's shape from the model catalog, when it lists the draft."""
    facts = model_facts(spec.model) if spec.model else None
    return None if facts is None else ModelArchitecture(**facts)


def draft_params(spec: SpeculativeSpec) -> float | None:
    """Billions of draft parameters: the spec's figure, else the catalog's; None for ngram and mtp (no draft)."""
    if spec.method not in NEEDS_MODEL:
        return None
    if spec.draft_params_billion is not None:
        return spec.draft_params_billion
    arch = draft_architecture(spec)
    return None if arch is None else arch.params_billion


def draft_tensor_parallel(model: ModelServiceSpec) -> int:
    assert model.speculative is not None
    return model.speculative.draft_tensor_parallel or model.tensor_parallel


def draft_weights_bytes_per_device(model: ModelServiceSpec) -> int:
    """The draft's weights on one GPU of the replica: split over its own tensor parallelism, or whole when 1."""
    spec = model.speculative
    if spec is None or (params := draft_params(spec)) is None:
        return 0
    return math.ceil(params * 1e9 * DRAFT_BYTES_PER_PARAM / draft_tensor_parallel(model))


def draft_kv_bytes_per_token_per_device(model: ModelServiceSpec, kv_width: int, target_layer_bytes: int) -> int:
    """The draft's KV per token on one GPU: a draft the catalog knows by its GQA layers and KV heads; an EAGLE
    head the catalog does not list as one decoder layer shaped like the target's (vLLM builds the head's
    config.num_hidden_layers decoder layers, vllm/model_executor/models/llama_eagle3.py, and the published
    heads have one)."""
    spec = model.speculative
    if spec is None or spec.method not in NEEDS_MODEL:
        return 0
    arch = draft_architecture(spec)
    if arch is None:
        return target_layer_bytes if spec.method in ("eagle", "eagle3") else 0
    heads = max(1, arch.kv_heads // draft_tensor_parallel(model))
    return arch.layers * 2 * heads * arch.head_dim * kv_width


def problem(model: ModelServiceSpec) -> tuple[str, str, str] | None:
    """(field, what is wrong, the fix) for a speculative config vLLM 0.33 would refuse, or one inferstack cannot
    size."""
    spec = model.speculative
    if spec is None:
        return None
    if spec.method in NEEDS_MODEL and spec.model is None:
        return ("model", f"method {spec.method!r} drafts with a model and names none",
                "set speculative.model to the draft model or EAGLE head's Hugging Face id")
    if spec.method in NEEDS_MODEL and spec.weights is None:
        return ("weights", f"the draft {spec.model!r} has no S3 location, and serving pods reach no model hub",
                "upload the draft's files to S3 and set speculative.weights to their prefix")
    if spec.method not in NEEDS_MODEL and (spec.model is not None or spec.weights is not None):
        source = "the prompt" if spec.method == "ngram" else "the model's own MTP layers"
        field = "model" if spec.model is not None else "weights"
        return (field, f"method {spec.method!r} takes no draft model (it drafts from {source})",
                f"drop speculative.{field}, or use method 'draft_model'")
    if spec.method != "ngram" and (spec.prompt_lookup_max is not None or spec.prompt_lookup_min is not None):
        return ("prompt_lookup_max", "prompt_lookup_min/max only apply to method 'ngram'",
                "drop them, or use method 'ngram'")
    low, high = spec.prompt_lookup_min, spec.prompt_lookup_max
    if low is not None and high is not None and low > high:
        return ("prompt_lookup_min", f"{low} is above prompt_lookup_max {high}", "set prompt_lookup_min <= prompt_lookup_max")
    if spec.draft_tensor_parallel not in (None, 1, model.tensor_parallel):
        allowed = " or ".join(str(tp) for tp in sorted({1, model.tensor_parallel}))
        return ("draft_tensor_parallel", f"{spec.draft_tensor_parallel} is neither 1 nor the service's tensor_parallel "
                f"{model.tensor_parallel}", f"set it to {allowed}")
    if spec.method in NEEDS_MODEL and draft_params(spec) is None:
        return ("draft_params_billion", f"the model catalog does not list {spec.model!r}, so its memory is unknown",
                "set speculative.draft_params_billion to the draft's size")
    return None


def latency_note(model: ModelServiceSpec, replicas: int) -> str | None:
    """The plan's warning when the stated traffic is past where drafting pays."""
    if model.speculative is None:
        return None
    note = (f"speculative decoding ({model.speculative.method}, {model.speculative.num_speculative_tokens} tokens a "
            f"step) trades throughput for latency; past ~{LATENCY_ONLY_RPS_PER_REPLICA:g} requests/s per replica "
            "the rejected drafts cost more than they save")
    if model.traffic is not None and replicas:
        per_replica = model.traffic.requests_per_second / replicas
        if per_replica > LATENCY_ONLY_RPS_PER_REPLICA:
            return f"{note}: the stated traffic is {per_replica:.1f} per replica"
    return note
