"""A model's architecture and stored format read from its Hugging Face config.json, offline.

The keys are those the transformers configuration classes define (huggingface/transformers
src/transformers/models/<family>/configuration_<family>.py: llama, qwen3, qwen3_moe, deepseek_v3,
gpt_oss, mixtral, gemma3, phi3); a vision-language config nests its text model under `text_config`
(Gemma 3, Llama 4). Unknown keys are ignored; missing required ones are one error naming them all and the file.
Llama 4's layers are read as vLLM 0.33.0 builds them (model_executor/models/llama4.py); the stored format comes
from config.json's quantization_config, else from hf_quant_config.json beside it (ModelOpt 0.29 and before),
as vLLM reads them. The vision encoder of a multimodal config is not counted: `params_billion` is the text model's.

config.json holds no parameter count, so `params_billion` is computed from the shapes:

    embeddings   vocab x hidden, and the same again for the LM head unless tie_word_embeddings
                 (an embedding model has no LM head)
    attention    GQA: hidden x head_dim x (heads + 2 x kv_heads) for Q, K, V plus heads x head_dim x hidden (O)
                 MLA: Q (hidden x q_lora_rank + q_lora_rank x heads x (qk_nope + qk_rope), or hidden x heads x
                 (qk_nope + qk_rope) without q_lora_rank), KV down-projection hidden x (kv_lora_rank + qk_rope),
                 KV up-projection kv_lora_rank x heads x (qk_nope + v_head_dim), O heads x v_head_dim x hidden,
                 and the q_lora_rank and kv_lora_rank norms
    MLP          dense layer: 3 x hidden x intermediate (gate, up, down; 2 x for the ungated BERT family)
                 MoE layer: (experts + shared_experts) x 3 x hidden x expert_intermediate, plus the router
                 hidden x experts (Llama 4: dense layers are intermediate_size_mlp wide, experts intermediate_size)
    norms        2 x hidden per layer and the final hidden
Biases, attention sinks and Qwen3's per-head q/k norms are under 0.1% and left out.

`active_params_billion` (MoE only) is what one token multiplies with: everything above but the
routed experts it is not sent to and the input embedding, which is a row lookup, not a matmul
(gpt-oss's model card counts it so; Qwen's card counts the input embedding as active too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from inferstack.spec.architecture import CheckpointFormat, ModelArchitecture
from inferstack.spec.errors import SpecError, describe_validation_error

CONFIG_FILE = "config.json"
# ModelOpt 0.29 and before keep the quantization config in this file beside config.json, which vLLM reads when
# config.json has no quantization_config (vLLM 0.33.0 transformers_utils/config.py:951-962).
MODELOPT_QUANT_FILE = "hf_quant_config.json"

# Present in every config these families write; everything else has a default or is optional.
REQUIRED_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "max_position_embeddings", "vocab_size")
MLA_KEYS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")

# tie_word_embeddings when a config leaves it out: the family's class default (Gemma's is true, Llama's,
# Qwen3's, DeepSeek's, gpt-oss's, Mixtral's and Phi-3's are false).
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
# Encoder families whose MLP is two matrices (up, down) rather than a gated three.
UNGATED_MLP = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "electra", "mpnet"})
# Llama 4's text model (vLLM 0.33.0 model_executor/models/llama4.py): every interleave_moe_layer_step-th
# layer is MoE with one shared expert beside the routed ones, the others dense of intermediate_size_mlp;
# layers whose no_rope_layers entry is 1 use chunked local attention of attention_chunk_size.
LLAMA4 = frozenset({"llama4", "llama4_text"})
# transformers' Llama4TextConfig defaults for the keys a config.json may leave out.
LLAMA4_DEFAULTS = {"interleave_moe_layer_step": 1, "no_rope_layer_interval": 4, "attention_chunk_size": 8192}
# architectures[0] suffixes of models that generate text; any other named head (BertModel,
# XLMRobertaModel, *ForSequenceClassification) serves embeddings or scores.
GENERATING_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")


def architecture_from_config(path: str | Path) -> ModelArchitecture:
    """The architecture a config.json (or a snapshot directory holding one) describes."""
    file = config_file(path)
    return architecture_from_mapping(read_config(file), file)


def checkpoint_format_from_config(path: str | Path) -> CheckpointFormat | None:
    """The stored format its `quantization_config` states; None for a 16-bit checkpoint (no such key)."""
    file = config_file(path)
    return checkpoint_format_from_mapping(read_config(file), file)


def service_fields_from_config(path: str | Path) -> dict[str, Any]:
    """A model service's `architecture` and, for a quantized checkpoint, `checkpoint_format`, as plain fields
    (defaults left out), from one reading of the config.json."""
    file = config_file(path)
    config = read_config(file)
    fields: dict[str, Any] = {"architecture": architecture_from_mapping(config, file).model_dump(exclude_defaults=True)}
    stored = checkpoint_format_from_mapping(config, file)
    if stored is not None:
        fields["checkpoint_format"] = stored.model_dump(exclude_defaults=True)
    return fields


def config_file(path: str | Path) -> Path:
    """The config.json itself, or the one inside a snapshot directory."""
    given = Path(path)
    file = given / CONFIG_FILE if given.is_dir() else given
    if not file.is_file():
        where = f"{given} holds no {CONFIG_FILE}" if given.is_dir() else f"{given} does not exist"
        raise SpecError(str(given), where, "give a config.json or a snapshot directory that holds one")
    return file


def read_config(file: Path) -> dict[str, Any]:
    """The parsed JSON object; a syntax error is reported at file:line:column."""
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise SpecError(
            f"{file}:{error.lineno}:{error.colno}", f"not valid JSON ({error.msg})", "correct the JSON at that position"
        ) from None
    if not isinstance(config, dict):
        raise SpecError(str(file), f"holds a JSON {type(config).__name__}, not an object", "give a model's config.json")
    return config


def architecture_from_mapping(config: dict[str, Any], file: Path) -> ModelArchitecture:
    text = _text_config(config)
    model_type = text.get("model_type") or config.get("model_type") or ""
    mla = text.get("kv_lora_rank") is not None
    missing = [key for key in REQUIRED_KEYS if text.get(key) is None]
    if mla:
        missing += [key for key in MLA_KEYS if text.get(key) is None]
    moe = _moe(text, model_type)
    dense_key = _dense_intermediate_key(model_type)
    if text.get(dense_key) is None and (moe is None or moe["dense_layers"]):
        missing.append(dense_key)
    if moe is not None and moe["size"] is None and "intermediate_size" not in missing:
        missing.append("intermediate_size")
    if moe is not None and moe["per_token"] is None:
        missing.append("num_experts_per_tok")
    if missing:
        raise SpecError(
            str(file),
            f"config.json misses {', '.join(missing)}" + (" (read under text_config)" if text is not config else ""),
            "use the model's own config.json, or write `architecture` in the stack by hand",
        )
    task = _task(config)
    shapes = _shapes(text, model_type, mla, moe, generates=task == "generate")
    fields: dict[str, Any] = {
        "params_billion": round(_total_params(shapes) / 1e9, 3),
        "layers": shapes["layers"],
        "hidden_size": shapes["hidden"],
        "attention_heads": shapes["heads"],
        "kv_heads": shapes["kv_heads"],
        "head_dim": shapes["head_dim"],
        "max_context": text["max_position_embeddings"],
        "task": task,
        "vocab_size": shapes["vocab"],
        "tied_embeddings": shapes["tied"],
        **_window(text, model_type, shapes["layers"]),
        **_chunked(text, model_type, shapes["layers"]),
    }
    if moe is None or moe["dense_layers"]:
        fields["intermediate_size"] = shapes["intermediate"]
    if mla:
        fields |= {"attention": "mla", "kv_lora_rank": text["kv_lora_rank"], "qk_rope_head_dim": text["qk_rope_head_dim"]}
    if moe is not None:
        fields |= {
            "active_params_billion": round(_active_params(shapes) / 1e9, 3),
            "experts": moe["experts"],
            "experts_per_token": moe["per_token"],
            "shared_experts": moe["shared"],
            "moe_layers": moe["layers"],
            "moe_intermediate_size": moe["size"],
        }
    try:
        return ModelArchitecture(**fields)
    except ValidationError as error:
        problem = describe_validation_error(error, ModelArchitecture)
        raise SpecError(str(file), f"it reads as an architecture whose {problem.path}: {problem.problem}",
                        problem.fix) from None


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's keys: a multimodal config (Gemma 3, Llama 4) nests them under text_config."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def _task(config: dict[str, Any]) -> str:
    architectures = config.get("architectures") or []
    if not architectures or str(architectures[0]).endswith(GENERATING_SUFFIXES):
        return "generate"
    return "embed"


def _dense_intermediate_key(model_type: str) -> str:
    """The key sizing a dense layer's MLP: Llama 4's dense layers are intermediate_size_mlp wide, its
    intermediate_size is one expert's."""
    return "intermediate_size_mlp" if model_type in LLAMA4 else "intermediate_size"


def _moe(text: dict[str, Any], model_type: str) -> dict[str, Any] | None:
    """Experts and MoE layers, or None for a dense model. The keys differ by family: num_local_experts
    (Mixtral, gpt-oss, Llama 4), num_experts (Qwen3-MoE), n_routed_experts with first_k_dense_replace dense
    layers (DeepSeek-V3), mlp_only_layers and decoder_sparse_step (Qwen3-MoE's modeling_qwen3_moe.py),
    interleave_moe_layer_step (Llama 4, as vLLM's llama4.py builds its layers: layer i is MoE when
    (i + 1) % step == 0, with one shared expert)."""
    experts = next((text[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if text.get(k)), None)
    if not experts or experts < 2:
        return None
    layers = text.get("num_hidden_layers") or 0
    shared = text.get("n_shared_experts") or 0
    if model_type in LLAMA4:
        step = text.get("interleave_moe_layer_step", LLAMA4_DEFAULTS["interleave_moe_layer_step"])
        moe_layers = sum(1 for i in range(layers) if step > 0 and (i + 1) % step == 0)
        shared = 1
        if not moe_layers:
            return None
    elif text.get("first_k_dense_replace") is not None:
        moe_layers = max(0, layers - text["first_k_dense_replace"])
    else:
        dense_only = set(text.get("mlp_only_layers") or [])
        step = text.get("decoder_sparse_step") or 1
        moe_layers = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
    return {
        "experts": experts,
        "per_token": text.get("num_experts_per_tok"),
        "shared": shared,
        "layers": moe_layers,
        "dense_layers": layers - moe_layers,
        # Mixtral, gpt-oss and Llama 4 size each expert by intermediate_size; DeepSeek and Qwen3-MoE say
        # moe_intermediate_size.
        "size": text.get("moe_intermediate_size") or text.get("intermediate_size"),
    }


def _shapes(
    text: dict[str, Any], model_type: str, mla: bool, moe: dict[str, Any] | None, generates: bool
) -> dict[str, Any]:
    heads = text["num_attention_heads"]
    hidden = text["hidden_size"]
    if text.get("head_dim") is not None:
        head_dim = text["head_dim"]
    else:  # MLA: a query/key head is its non-rotary and rotary parts (DeepseekV3Config's qk_head_dim)
        head_dim = text["qk_nope_head_dim"] + text["qk_rope_head_dim"] if mla else hidden // heads
    tied = text.get("tie_word_embeddings")
    return {
        "layers": text["num_hidden_layers"],
        "hidden": hidden,
        "heads": heads,
        "kv_heads": text.get("num_key_value_heads") or heads,
        "head_dim": head_dim,
        "vocab": text["vocab_size"],
        "tied": model_type in TIED_BY_DEFAULT if tied is None else bool(tied),
        "lm_head": generates,
        "intermediate": text.get(_dense_intermediate_key(model_type)),
        "gated": model_type not in UNGATED_MLP,
        "mla": {k: text.get(k) for k in ("q_lora_rank", *MLA_KEYS)} if mla else None,
        "moe": moe,
    }


def _attention_params(s: dict[str, Any]) -> int:
    hidden, heads = s["hidden"], s["heads"]
    mla = s["mla"]
    if mla is None:
        return hidden * s["head_dim"] * (heads + 2 * s["kv_heads"]) + heads * s["head_dim"] * hidden
    qk = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    q_rank = mla["q_lora_rank"]
    q = hidden * heads * qk if q_rank is None else hidden * q_rank + q_rank + q_rank * heads * qk
    kv_down = hidden * (mla["kv_lora_rank"] + mla["qk_rope_head_dim"]) + mla["kv_lora_rank"]
    kv_up = mla["kv_lora_rank"] * heads * (mla["qk_nope_head_dim"] + mla["v_head_dim"])
    return q + kv_down + kv_up + heads * mla["v_head_dim"] * hidden


def _mlp_params(s: dict[str, Any], intermediate: int) -> int:
    return (3 if s["gated"] else 2) * s["hidden"] * intermediate


def _parts(s: dict[str, Any]) -> dict[str, int]:
    """Parameters by part: what the total adds and what the active count picks from."""
    moe = s["moe"]
    embedding = s["vocab"] * s["hidden"]
    dense_layers = s["layers"] if moe is None else moe["dense_layers"]
    expert = 0 if moe is None else _mlp_params(s, moe["size"])
    return {
        "embedding": embedding,
        "lm_head": embedding if s["lm_head"] and not s["tied"] else 0,
        "attention": s["layers"] * _attention_params(s),
        "dense_mlp": dense_layers * _mlp_params(s, s["intermediate"]) if dense_layers else 0,
        "expert": expert,
        "moe_layers": 0 if moe is None else moe["layers"],
        "router": 0 if moe is None else moe["layers"] * s["hidden"] * moe["experts"],
        "norms": (2 * s["layers"] + 1) * s["hidden"],
    }


def _total_params(s: dict[str, Any]) -> int:
    p = _parts(s)
    experts = 0 if s["moe"] is None else s["moe"]["experts"] + s["moe"]["shared"]
    return (p["embedding"] + p["lm_head"] + p["attention"] + p["dense_mlp"] + p["router"] + p["norms"]
            + p["moe_layers"] * experts * p["expert"])


def _active_params(s: dict[str, Any]) -> int:
    p = _parts(s)
    used = s["moe"]["per_token"] + s["moe"]["shared"]
    # The tied LM head is the embedding matrix: a token multiplies with it once, at the end.
    head = p["lm_head"] or (p["embedding"] if s["lm_head"] else 0)
    return head + p["attention"] + p["dense_mlp"] + p["router"] + p["norms"] + p["moe_layers"] * used * p["expert"]


def _window(text: dict[str, Any], model_type: str, layers: int) -> dict[str, Any]:
    """sliding_window and how many layers use it. layer_types names each layer (gpt-oss, newer Gemma 3);
    sliding_window_pattern makes every pattern-th layer full (Gemma 3: 5 local, 1 global); gpt-oss
    without layer_types alternates, sliding first (GptOssConfig); Qwen's families apply the window only
    with use_sliding_window; otherwise a window covers every layer (Mistral 7B v0.1, Phi-3)."""
    window = text.get("sliding_window")
    if window is None or text.get("use_sliding_window") is False:
        return {}
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        windowed = sum(1 for kind in layer_types if kind == "sliding_attention")
    elif text.get("sliding_window_pattern"):
        windowed = layers - layers // text["sliding_window_pattern"]
    elif model_type == "gpt_oss":
        windowed = (layers + 1) // 2
    else:
        windowed = layers
    return {"sliding_window": window, "sliding_window_layers": windowed} if windowed else {}


def _chunked(text: dict[str, Any], model_type: str, layers: int) -> dict[str, Any]:
    """Llama 4's chunked local attention: vLLM builds ChunkedLocalAttention on each layer whose no_rope_layers
    entry is 1 (RoPE layers) when attention_chunk_size is set; transformers fills an absent or empty
    no_rope_layers with a NoPE layer every no_rope_layer_interval layers."""
    if model_type not in LLAMA4:
        return {}
    chunk = text.get("attention_chunk_size", LLAMA4_DEFAULTS["attention_chunk_size"])
    interval = text.get("no_rope_layer_interval") or LLAMA4_DEFAULTS["no_rope_layer_interval"]
    rope_layers = text.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
    chunked = sum(1 for flag in rope_layers[:layers] if flag)
    return {"attention_chunk_size": chunk, "chunked_layers": chunked} if chunk and chunked else {}


# ------------------------------------------------------------------------------------- stored format

# vLLM's quantization_config names for the formats CheckpointFormat expresses.
EXPRESSED_METHODS = ("awq", "gptq", "fp8", "compressed-tensors", "mxfp4", "modelopt")
# ModelOpt's quant_algo values (vllm/model_executor/layers/quantization/modelopt.py LINEAR_ALGOS, vLLM 0.33) as
# weight bits and activation bits: FP8 per tensor or channel quantizes activations too, FP8_PB_WO (128x128
# blocks) is weight-only; NVFP4 is W4A4, W4A16_NVFP4 weight-only.
MODELOPT_ALGOS = {
    "FP8": (8, 8), "FP8_PER_CHANNEL_PER_TOKEN": (8, 8), "FP8_PB_WO": (8, 16), "NVFP4": (4, 4), "W4A16_NVFP4": (4, 16),
}
NVFP4 = {"weight_bits": 4, "weight_type": "float", "group_size": 16, "scale_bits": 8}


def checkpoint_format_from_mapping(config: dict[str, Any], file: Path) -> CheckpointFormat | None:
    quant, where = _quantization_config(config, file)
    if quant is None:
        return None
    method = _quant_method(quant)
    path = f"{where}: {'quantization_config' if where == file else 'quantization'}.quant_method"
    if method not in EXPRESSED_METHODS:
        raise SpecError(path, f"{method!r} is a stored format inferstack cannot size",
                        f"serve a checkpoint stored as one of {', '.join(EXPRESSED_METHODS)}, or the 16-bit model")
    fields = _format_fields(method, quant, path)
    try:
        return CheckpointFormat(**fields)
    except ValidationError as error:
        problem = describe_validation_error(error, CheckpointFormat)
        raise SpecError(path, f"{method!r} as stored here cannot be expressed ({problem.path}: {problem.problem})",
                        "serve a checkpoint of a format CheckpointFormat lists") from None


def _quantization_config(config: dict[str, Any], file: Path) -> tuple[dict[str, Any] | None, Path]:
    """The quantization config vLLM reads, and its file: config.json's quantization_config, else its
    text_config's (a vision-language model's; vLLM 0.33.0 model_executor/model_loader/weight_utils.py:240-244),
    else hf_quant_config.json beside it."""
    for quant in (config.get("quantization_config"), _text_config(config).get("quantization_config")):
        if isinstance(quant, dict):
            return quant, file
    beside = file.parent / MODELOPT_QUANT_FILE
    if beside.is_file():
        return read_config(beside), beside
    return None, file


def _quant_method(quant: dict[str, Any]) -> Any:
    """quant_method as vLLM normalises it: a ModelOpt config names its producer instead (hf_quant_config.json),
    and modelopt_fp4 / modelopt_mixed are ModelOpt too (vLLM 0.33.0
    transformers_utils/model_arch_config_convertor.py:241-281)."""
    producer = quant.get("producer")
    if isinstance(producer, dict) and producer.get("name") == "modelopt":
        return "modelopt"
    method = quant.get("quant_method")
    if isinstance(method, str):
        method = method.lower().replace("compressed_tensors", "compressed-tensors")
        return "modelopt" if method.startswith("modelopt") else method
    return method


def _block(size: Any) -> tuple[int, int] | None:
    """[block_n, block_k] of block-wise FP8 scales; None for per-tensor or per-channel ones."""
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(n, int) and n > 0 for n in size):
        return (size[0], size[1])
    return None


def _group(size: Any) -> int | None:
    """-1 (GPTQ) or null means one scale per output channel: no groups."""
    return size if isinstance(size, int) and size > 0 else None


def _format_fields(method: str, quant: dict[str, Any], path: str) -> dict[str, Any]:
    """CheckpointFormat fields per method, as each writer stores them: AutoAWQ (bits or w_bit, group_size or
    q_group_size, zero_point), GPTQ (bits, group_size; qzeros stored whatever `sym` says), FP8 (block or
    per-tensor scales, activations quantized dynamically or statically), compressed-tensors
    (config_groups.*.weights / input_activations; NVFP4 as 4-bit float in groups of 16), MXFP4 (4-bit float
    experts, one 8-bit scale per 32), ModelOpt (quant_algo, flat or under `quantization` as hf_quant_config.json
    writes it)."""
    if method == "awq":
        group = _group(quant.get("group_size", quant.get("q_group_size")))
        return {"quant_method": "awq", "weight_bits": quant.get("bits", quant.get("w_bit", 4)), "weight_type": "int",
                "group_size": group, "zero_points": bool(quant.get("zero_point", True)) and group is not None}
    if method == "gptq":
        group = _group(quant.get("group_size"))
        return {"quant_method": "gptq", "weight_bits": quant.get("bits", 4), "weight_type": "int",
                "group_size": group, "zero_points": group is not None}
    if method == "fp8":
        return {"quant_method": "fp8", "weight_bits": 8, "weight_type": "float", "activation_bits": 8,
                "weight_block_size": _block(quant.get("weight_block_size"))}
    if method == "mxfp4":
        return {"quant_method": "mxfp4", "weight_bits": 4, "weight_type": "float", "group_size": 32,
                "scale_bits": 8, "applies_to": "experts"}
    if method == "modelopt":
        return _modelopt_fields(quant, path)
    groups = quant.get("config_groups") or {}
    if not groups:
        raise SpecError(path, "'compressed-tensors' without config_groups", "use the checkpoint's own config.json")
    scheme = next(iter(groups.values()))
    weights = scheme.get("weights") or {}
    activations = scheme.get("input_activations") or {}
    fields = {
        "quant_method": "compressed-tensors",
        "weight_bits": weights.get("num_bits"),
        "weight_type": weights.get("type", "int"),
        "activation_bits": activations.get("num_bits", 16) if activations else 16,
        "group_size": _group(weights.get("group_size")) if weights.get("strategy") == "group" else None,
        "weight_block_size": _block(weights.get("block_structure")) if weights.get("strategy") == "block" else None,
    }
    fields["zero_points"] = fields["group_size"] is not None and weights.get("symmetric") is False
    if fields["weight_type"] == "float" and fields["weight_bits"] == 4:
        # nvfp4-pack-quantized: strategy tensor_group, 16 weights per FP8 scale (plus one global scale).
        return {"quant_method": "compressed-tensors", **NVFP4, "activation_bits": fields["activation_bits"]}
    return fields


def _modelopt_fields(quant: dict[str, Any], path: str) -> dict[str, Any]:
    nested = quant.get("quantization")
    inner = nested if isinstance(nested, dict) else quant
    algo = str(inner.get("quant_algo", "")).upper()
    if algo not in MODELOPT_ALGOS:
        raise SpecError(f"{path.rsplit('.', 1)[0]}.quant_algo", f"ModelOpt's {algo or 'missing'!r} is a quant_algo "
                        "inferstack cannot size", f"serve a ModelOpt checkpoint of {', '.join(MODELOPT_ALGOS)}")
    weight_bits, activation_bits = MODELOPT_ALGOS[algo]
    kv = {"kv_cache_dtype": _modelopt_kv_cache_dtype(quant, inner)}
    if weight_bits == 4:
        return {"quant_method": "modelopt", **NVFP4, "activation_bits": activation_bits, **kv}
    block = (128, 128) if algo == "FP8_PB_WO" else None
    return {"quant_method": "modelopt", "weight_bits": 8, "weight_type": "float", "activation_bits": activation_bits,
            "weight_block_size": block, **kv}


def _modelopt_kv_cache_dtype(quant: dict[str, Any], inner: dict[str, Any]) -> str:
    """The KV format vLLM runs for --kv-cache-dtype auto on a ModelOpt checkpoint: fp8 for kv_cache_quant_algo
    FP8 or a static 8-bit float kv_cache_scheme (vLLM 0.33.0 utils/torch_utils.py get_kv_cache_quant_algo_string,
    443-491); anything else leaves the activation dtype."""
    algo = inner.get("kv_cache_scheme") or quant.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo") \
        or quant.get("kv_cache_quant_algo")
    if isinstance(algo, dict):
        static_fp8 = algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float"
        return "fp8" if static_fp8 else "auto"
    return "fp8" if isinstance(algo, str) and algo.lower() == "fp8" else "auto"
