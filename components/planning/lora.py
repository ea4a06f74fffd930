"""LoRA adapters: vLLM 0.33's flags for a service's adapters, and the GPU memory their slots take.

vLLM pre-allocates `max_loras` slots of `max_lora_rank` in every wrapped linear layer when it builds the model,
before it measures memory for the KV cache (vllm/lora/model_manager.py `lora_slots`; the layer buffers in
vllm/lora/layers/base_linear.py and column_parallel_linear.py), so the slots come out of the KV cache whether or
not adapters are loaded. Per slot, per layer and tensor rank, with every linear module wrapped (q/k/v, o,
gate/up, down), column-parallel modules keep A whole and split B, row-parallel ones split A and keep B:

    bytes = dtype x r x [7 H + (2 q + 2 kv + 3 I) / tp]

with H the hidden size, q and kv the query and key/value widths, I the MLP's intermediate size. `--max-lora-rank`
accepts only 1, 8, 16, 32, 64, 128, 256, 320 and 512 (vllm/config/lora.py); `--max-cpu-loras` below
`--max-loras` is refused.
"""

from __future__ import annotations

import math

from inferstack.conventions import MODEL_CACHE_MOUNT
from inferstack.planning.parameters import DTYPE_BYTES, embedding_params
from inferstack.spec import VLLM_LORA_RANKS, ModelServiceSpec

# Gateway API v1 HTTPRouteRule.matches maxItems: the model's name and its adapters' share one rule.
MAX_ROUTE_MATCHES = 64


def max_lora_rank(model: ModelServiceSpec) -> int:
    """The smallest rank vLLM accepts that holds every listed adapter."""
    largest = max(adapter.rank for adapter in model.lora_adapters)
    return next(rank for rank in VLLM_LORA_RANKS if rank >= largest)


def max_loras(model: ModelServiceSpec) -> int:
    return model.max_loras or len(model.lora_adapters)


def intermediate_size(model: ModelServiceSpec) -> int:
    """The MLP width a dense model's parameter count implies: per layer, what attention (q, k, v, o) leaves for
    the three MLP matrices (gate, up, down), norms aside. Llama-3.2-3B: 8181 against its 8192."""
    arch = model.resolved_architecture
    q = arch.attention_heads * arch.head_dim
    kv = arch.kv_heads * arch.head_dim
    per_layer = (arch.params_billion * 1e9 - embedding_params(model)) / arch.layers
    attention = 2 * arch.hidden_size * q + 2 * arch.hidden_size * kv
    return round((per_layer - attention) / (3 * arch.hidden_size))


def _layer_bytes(model: ModelServiceSpec, rank: int, tensor_parallel: int) -> float:
    """The module docstring's formula: an adapter of `rank` in one layer, on one of `tensor_parallel` ranks."""
    arch = model.resolved_architecture
    q = arch.attention_heads * arch.head_dim
    kv = arch.kv_heads * arch.head_dim
    split = (2 * q + 2 * kv + 3 * intermediate_size(model)) / tensor_parallel
    return DTYPE_BYTES * rank * (7 * arch.hidden_size + split)


def slot_bytes_per_layer(model: ModelServiceSpec) -> int:
    """One adapter slot in one layer, on one tensor rank."""
    return math.ceil(_layer_bytes(model, max_lora_rank(model), model.tensor_parallel))


def adapter_file_bytes(model: ModelServiceSpec, rank: int) -> int:
    """An adapter's safetensors at its own rank over every layer and linear module, whole (no tensor split):
    what its pre-fetch copies."""
    return model.resolved_architecture.layers * math.ceil(_layer_bytes(model, rank, 1))


def adapter_bytes_per_device(model: ModelServiceSpec) -> int:
    """The adapter slots on one GPU: every slot in each of its pipeline stage's layers."""
    if not model.lora_adapters:
        return 0
    stage_layers = math.ceil(model.resolved_architecture.layers / model.pipeline_parallel)
    return max_loras(model) * stage_layers * slot_bytes_per_layer(model)


def adapter_key(model: ModelServiceSpec, adapter_name: str) -> str:
    """The adapter's directory in the node's NVMe cache, published by its own pre-fetch like a model's weights."""
    return f"lora--{model.name}--{adapter_name}"


def adapter_path(model: ModelServiceSpec, adapter_name: str) -> str:
    return f"{MODEL_CACHE_MOUNT}/{adapter_key(model, adapter_name)}"


def adapter_script(adapter_name: str) -> str:
    """Its pre-fetch script's key in the service's pre-fetch ConfigMap."""
    return f"prefetch-lora-{adapter_name}.sh"


def lora_args(model: ModelServiceSpec) -> list[str]:
    """--enable-lora with slots for the adapters, each served under its name from the NVMe cache."""
    if not model.lora_adapters:
        return []
    args = ["--enable-lora", "--max-loras", str(max_loras(model)), "--max-lora-rank", str(max_lora_rank(model))]
    if max_loras(model) < len(model.lora_adapters):
        # The rest wait in host memory, not on disk: vLLM's LRU holds max_cpu_loras of them.
        args += ["--max-cpu-loras", str(len(model.lora_adapters))]
    args.append("--lora-modules")
    args += [f"{adapter.name}={adapter_path(model, adapter.name)}" for adapter in model.lora_adapters]
    return args


def problem(model: ModelServiceSpec) -> tuple[str, str, str] | None:
    """(field, what is wrong, the fix) for adapters vLLM would refuse or inferstack cannot size."""
    if not model.lora_adapters:
        if model.max_loras is not None:
            return ("max_loras", "is set but the service lists no lora_adapters", "drop max_loras, or list the adapters")
        return None
    names = [adapter.name for adapter in model.lora_adapters]
    if len(set(names)) != len(names) or model.name in names:
        return ("lora_adapters", "adapter names repeat or reuse the service's own name (requests pick a model by name)",
                "give every adapter a name of its own")
    if len(names) >= MAX_ROUTE_MATCHES:
        return ("lora_adapters", f"{len(names)} adapters and the model need {len(names) + 1} matches in the service's "
                f"HTTPRoute rule, which holds {MAX_ROUTE_MATCHES} (Gateway API HTTPRouteRule.matches maxItems)",
                f"serve at most {MAX_ROUTE_MATCHES - 1} adapters per service")
    if model.max_loras is not None and model.max_loras > len(names):
        return ("max_loras", f"{model.max_loras} is more than the {len(names)} adapters listed",
                f"set max_loras to at most {len(names)}")
    arch = model.resolved_architecture
    if arch.experts or arch.attention == "mla":
        return ("lora_adapters", "inferstack sizes adapter memory for dense models with grouped-query attention only",
                "serve the adapters on a dense model, or merge them into the weights")
    return None
