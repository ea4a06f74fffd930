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

An MoE layer keeps the attention's share, `4 H + (2 q + 2 kv) / tp`, and wraps what replaces the MLP: the router
(a replicated GateLinear, `H + E`), shared experts as a dense MLP of `shared x I_e`, and the fused experts
(vllm/lora/layers/fused_moe.py `FusedMoEWithLoRA._create_lora_a_weights` / `_create_lora_b_weights`): per slot
and local expert, gate and up A (`r x H` each), down A (`r x I_p`), gate and up B (`I_p x r` each) and down B
(`H x r`), so

    experts bytes = dtype x r x E_local x (3 H + 3 I_p)      (2 H + 3 I_p for a fused w13, `FusedMoE3DWithLoRA`)

where the MoE layers' own parallelism decides E_local and I_p (FusedMoEParallelConfig): without expert parallelism
every GPU of the tp x dp group holds all E experts at I_e / (tp x dp); with it E / (tp x dp) whole experts (the
first ones one more) at I_e. vLLM 0.33 serves LoRA on a model class only if it implements SupportsLoRA
(vllm/v1/worker/lora_model_runner_mixin.py:49-50), and with expert parallelism only over the
allgather_reducescatter exchange (fused_moe.py `_ep_check`).
"""

from __future__ import annotations

import math

from inferstack.catalog.models import class_facts
from inferstack.conventions import MODEL_CACHE_MOUNT
from inferstack.planning.parameters import DTYPE_BYTES, embedding_params
from inferstack.spec import VLLM_LORA_RANKS, ModelServiceSpec

# Gateway API v1 HTTPRouteRule.matches maxItems: the model's name and its adapters' share one rule.
MAX_ROUTE_MATCHES = 64
# config.json architectures the catalog names whose vLLM 0.33 class (vllm/model_executor/models/registry.py maps the
# name) implements SupportsLoRA: llama.py:464 LlamaForCausalLM (also for MistralModel), mistral.py:236,
# qwen2.py:458, qwen3.py:280, qwen3_moe.py:543, gpt_oss.py:1369, deepseek_v2.py:1872 (DeepseekV3ForCausalLM:2005),
# mixtral.py:375, phi3.py:10 (a LlamaForCausalLM), gemma3_mm.py:500, mllama4.py:728, mistral3.py:418,
# bert.py:452 BertEmbeddingModel (BertModel; RobertaEmbeddingModel for XLMRobertaModel), roberta.py:271.
SUPPORTS_LORA = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "MistralModel", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM", "GptOssForCausalLM", "DeepseekV3ForCausalLM", "MixtralForCausalLM", "Phi3ForCausalLM",
    "Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration", "Mistral3ForConditionalGeneration",
    "BertModel", "XLMRobertaModel", "XLMRobertaForSequenceClassification",
})
# MoE classes that store gate and up as one w13 tensor (`is_3d_moe_weight`, gpt_oss.py:1372): vLLM wraps their experts
# in FusedMoE3DWithLoRA, whose w13 A is one r x H slice.
FUSED_W13_EXPERTS = frozenset({"GptOssForCausalLM"})
# fused_moe.py `_ep_check`: the one token exchange Fused MoE LoRA runs under expert parallelism.
LORA_EP_ALL2ALL = "allgather_reducescatter"


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


def _moe_width(model: ModelServiceSpec, tensor_parallel: int, group: int, expert_parallel: bool) -> float:
    """What an MoE layer wraps in place of the MLP, per unit of rank (the module docstring): the router, the shared
    experts split over the rank's tensor parallelism, and the local experts over the layer's `group` GPUs."""
    arch = model.resolved_architecture
    hidden, experts, width = arch.hidden_size, arch.experts, arch.moe_intermediate_size
    local, sliced = (math.ceil(experts / group), width) if expert_parallel else (experts, width / group)
    a_slices = 1 if (class_facts(model.model) or {}).get("architecture") in FUSED_W13_EXPERTS else 2
    routed = local * ((a_slices + 1) * hidden + 3 * sliced)
    shared = 3 * hidden + 3 * width * arch.shared_experts / tensor_parallel if arch.shared_experts else 0
    return routed + (hidden + experts) + shared


def _layer_bytes(model: ModelServiceSpec, rank: int, tensor_parallel: int, group: int | None = None,
                 expert_parallel: bool = False) -> float:
    """The module docstring's formulas: an adapter of `rank` in one layer, on one of `tensor_parallel` ranks (an MoE
    layer's experts over `group` GPUs, tensor_parallel by default)."""
    arch = model.resolved_architecture
    q = arch.attention_heads * arch.head_dim
    kv = arch.kv_heads * arch.head_dim
    attention = 4 * arch.hidden_size + (2 * q + 2 * kv) / tensor_parallel
    if arch.experts:
        mlp = _moe_width(model, tensor_parallel, group or tensor_parallel, expert_parallel)
    else:
        mlp = 3 * arch.hidden_size + 3 * intermediate_size(model) / tensor_parallel
    return DTYPE_BYTES * rank * (attention + mlp)


def slot_bytes_per_layer(model: ModelServiceSpec) -> int:
    """One adapter slot in one layer, on one GPU: its tensor rank of the attention (and dense MLP), its share of an
    MoE layer's experts over the replica's tensor x data-parallel GPUs."""
    return math.ceil(_layer_bytes(model, max_lora_rank(model), model.tensor_parallel,
                                  model.tensor_parallel * model.data_parallel, model.resolved_expert_parallel))


def adapter_file_bytes(model: ModelServiceSpec, rank: int) -> int:
    """An adapter's safetensors at its own rank over every layer and linear module (every expert of an MoE layer),
    whole (no tensor split): what its pre-fetch copies."""
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
    declared = (class_facts(model.model) or {}).get("architecture")
    if declared is not None and declared not in SUPPORTS_LORA:
        return ("lora_adapters", f"{model.model} is a {declared}, which is not among the vLLM 0.33 classes known to "
                "implement SupportsLoRA; vLLM refuses such a model at start (\"... does not support LoRA yet\")",
                "merge the adapters into the weights, or serve them on a model whose class supports LoRA")
    if arch.attention == "mla":
        return ("lora_adapters", "vLLM 0.33 serves LoRA on MLA models (DeepseekV2ForCausalLM implements SupportsLoRA), "
                f"but inferstack cannot size the adapter slots of {model.model}'s multi-head latent attention "
                "(q_lora_rank and v_head_dim are no architecture fields)",
                "merge the adapters into the weights, or serve them on a grouped-query-attention model")
    if arch.experts and arch.moe_layers is not None and arch.moe_layers < arch.layers:
        return ("lora_adapters", f"{arch.layers - arch.moe_layers} of {model.model}'s {arch.layers} layers are dense, "
                "and inferstack cannot size their MLP's adapter slots (their intermediate size is no architecture "
                "field)", "merge the adapters into the weights, or serve them on a model whose layers are all MoE")
    if arch.experts and model.resolved_expert_parallel and model.all2all_exchange != LORA_EP_ALL2ALL:
        return ("all2all_backend", f"LoRA on expert-parallel MoE layers runs only over {LORA_EP_ALL2ALL}, and vLLM 0.33 "
                f"refuses {model.all2all_exchange} at start (\"Fused MoE LoRA with EP currently only supports "
                f"all2all_backend='{LORA_EP_ALL2ALL}'\")",
                f"drop all2all_backend (vLLM's default is {LORA_EP_ALL2ALL}), or set expert_parallel to false")
    return None
