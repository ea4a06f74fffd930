"""Speculative decoding: vLLM 0.33's --speculative-config for a service, and what the draft costs in GPU memory.

Facts from vLLM 0.33.0 (vllm/config/speculative.py): `draft_tensor_parallel_size` may only be 1 or the target's
tensor parallelism (`_verify_and_get_draft_tp`); ngram defaults `prompt_lookup_min` and `_max` to 5 when neither
is given and refuses min > max; draft_model, eagle and eagle3 need `model`, while ngram and mtp propose from the
prompt or from the model's own MTP layers. With LoRA on, vLLM refuses `max_num_batched_tokens` below
`max_num_seqs x (num_speculative_tokens + 1)` (vllm/engine/arg_utils.py, the LoRA config check).

What the catalog lets inferstack refuse before vLLM does (vLLM 0.33.0):
- a draft_model whose vocab_size differs from the target's: `verify_equal_vocab_size_if_draft_model`
  (vllm/config/speculative.py:2040-2055) raises at start unless `use_heterogeneous_vocab`, which inferstack does
  not set;
- `mtp` on a model without MTP layers: the draft is the target's own config, rewritten to an MTP model type only
  for the classes `hf_config_override` knows (DeepSeek-V3's num_nextn_predict_layers, speculative.py:711-1169);
  any other model type falls through to `NotImplementedError("Unsupported speculative method: 'mtp'")`
  (speculative.py:1469-1501);
- an EAGLE-3 head trained for another hidden size: its `fc` takes `target_hidden_size` (default the head's own
  hidden_size) x 3 auxiliary hidden states (vllm/model_executor/models/llama_eagle3.py:209-249), while the
  target feeds the concatenation of three of its own hidden states (vllm/v1/worker/gpu_model_runner.py:4893),
  so the first drafting step fails (vllm/v1/spec_decode/llm_base_proposer.py:549-552).

A draft model's weights sit beside the target's on every GPU of its tensor-parallel group, so they come out of
the KV cache; its own KV cache (its layers, in the same block pool) does too when the catalog knows its shape.
Drafting pays off when the GPUs are idle between a few sequences' decode steps; at batch sizes where a step is
bound by compute, the verified-but-rejected tokens are throughput lost (vLLM docs, "Speculative Decoding").
"""

from __future__ import annotations

import json
import math

from inferstack.catalog.models import (
    MODEL_CLASSES, MODELS, SPECULATORS, base_model, class_facts, model_facts, speculator_facts, vocabulary_facts,
)
from inferstack.conventions import MODEL_CACHE_MOUNT
from inferstack.planning.parameters import vocabulary
from inferstack.spec import ModelArchitecture, ModelServiceSpec, SpeculativeSpec

DRAFT_BYTES_PER_PARAM = 2  # draft models and EAGLE heads ship in 16 bits
NEEDS_MODEL = frozenset({"draft_model", "eagle", "eagle3"})
# Requests per second per replica past which drafting is more likely to cost throughput than save latency.
LATENCY_ONLY_RPS_PER_REPLICA = 2.0
# llama_eagle3.py: without eagle_aux_hidden_state_layer_ids the head fuses three of the target's hidden states.
EAGLE3_AUX_HIDDEN_STATES = 3


def draft_key(model: ModelServiceSpec) -> str:
    """The draft's directory in the node's NVMe cache, published by its own pre-fetch like the model's weights; one
    per service, so both roles of a prefill/decode pair pass vLLM the same draft path (NIXL hashes it:
    planning/disaggregation.py)."""
    return f"draft--{model.pd_service or model.name}"


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
    found = _mtp_problem(model) or _vocabulary_problem(model) or _eagle3_width_problem(model)
    if found is not None:
        return found
    if spec.method in NEEDS_MODEL and draft_params(spec) is None:
        known = "has no parameter count for" if speculator_facts(spec.model) else "does not list"
        return ("draft_params_billion", f"the model catalog {known} {spec.model!r}, so its memory is unknown",
                "set speculative.draft_params_billion to the draft's size")
    return None


def _mtp_problem(model: ModelServiceSpec) -> tuple[str, str, str] | None:
    """`mtp` drafts with the model's own MTP layers; one the catalog lists without any has nothing to draft with."""
    facts = class_facts(model.model) if model.speculative.method == "mtp" else None
    if facts is None or facts["mtp_layers"] > 0:
        return None
    with_mtp = sorted(name for name, found in MODEL_CLASSES.items() if found["mtp_layers"] > 0)
    return ("method", f"{model.model} ({facts['architecture']}) ships no multi-token-prediction layers (its config.json "
            "has no num_nextn_predict_layers), so vLLM 0.33 finds no MTP draft in it and refuses to start: "
            "\"Unsupported speculative method: 'mtp'\"",
            f"use method 'ngram', or 'draft_model' / 'eagle3' with a draft, or a model with MTP layers "
            f"({', '.join(with_mtp)})")


def _vocabulary_problem(model: ModelServiceSpec) -> tuple[str, str, str] | None:
    """A draft_model must share the target's vocabulary size (the target's from its architecture or the catalog)."""
    spec = model.speculative
    if spec.method != "draft_model":
        return None
    target, draft = vocabulary(model), vocabulary_facts(spec.model)
    if target is None or draft is None or draft["vocab_size"] == target[0]:
        return None
    size, params = target[0], model.resolved_architecture.params_billion
    same = sorted((facts["params_billion"], name) for name, facts in MODELS.items()
                  if facts["task"] == "generate" and facts["params_billion"] < params
                  and name != base_model(model.model) and vocabulary_facts(name)["vocab_size"] == size)
    hint = f" (catalog: {', '.join(name for _, name in same[:2])})" if same else ""
    return ("model", f"the draft {spec.model!r} has vocab_size {draft['vocab_size']} and {model.model} has {size}: "
            "vLLM 0.33 refuses to start (\"Target and draft model should have the same vocabulary size\"), as the "
            "draft's token ids would not be the target's",
            f"draft with a smaller model of the target's tokenizer and vocab_size {size}{hint}, or use method 'ngram'")


def _eagle3_width_problem(model: ModelServiceSpec) -> tuple[str, str, str] | None:
    """An EAGLE-3 head's fc fuses three of the target's hidden states, so it fits one hidden size only."""
    spec = model.speculative
    head = speculator_facts(spec.model) if spec.method == "eagle3" else None
    if head is None or head["method"] != "eagle3":
        return None
    width = head.get("target_hidden_size") or head["hidden_size"]
    hidden = model.resolved_architecture.hidden_size
    if width == hidden:
        return None
    n = EAGLE3_AUX_HIDDEN_STATES
    fitting = sorted(name for name, facts in SPECULATORS.items() if facts["method"] == "eagle3"
                     and (facts.get("target_hidden_size") or facts["hidden_size"]) == hidden)
    hint = f" (catalog: {', '.join(fitting)})" if fitting else ""
    return ("model", f"the EAGLE-3 head {spec.model!r} was trained for {head['trained_for']}: its fc takes {n} x "
            f"{width} = {n * width} values, but {model.model} feeds {n} hidden states of {hidden} ({n * hidden}), so "
            "vLLM 0.33 fails at the head's first drafting step",
            f"use an EAGLE-3 head trained for {model.model}{hint}")


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
