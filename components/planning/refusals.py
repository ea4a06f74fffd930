"""Planning's refusals: what vLLM would refuse to load or start, what would not fit a device, a pool or the
node cache, and a budget the fleet would break. Each reads the same sizing functions the plan and the
components read, so a refused figure is the figure the plan would print."""

from __future__ import annotations

from inferstack.catalog.attention_backends import ATTENTION_BACKENDS
from inferstack.catalog.models import MODELS
from inferstack.planning import attention, lora, speculative
from inferstack.planning.cost import check_budget
from inferstack.planning.fit_refusal import check_fit
from inferstack.planning.pool_capacity import gpu_requests, pool_cache_budget_bytes, replicas_held
from inferstack.planning.quantization import describe, refusal
from inferstack.planning.scaling_thresholds import check_slo_reachable
from inferstack.planning.sizing import GIB, prefetched_bytes, scheduler_defaults
from inferstack.spec import SIXTEEN_BIT, ModelServiceSpec, StackSpec, catalog_stored_format
from inferstack.spec.errors import SpecError, refusals_of
from inferstack.spec.pools import PoolHardware

def quantization_refusals(spec: StackSpec, index: int) -> list[SpecError]:
    """The checkpoint's stored format is a fact; the service's quantization must be one vLLM can serve from it."""
    return refusals_of(lambda: _check_quantization(spec, index))


def _check_quantization(spec: StackSpec, index: int) -> None:
    model = spec.models[index]
    catalog = catalog_stored_format(model.model) or (SIXTEEN_BIT if model.model in MODELS else None)
    if model.checkpoint_format is not None and catalog is not None and model.checkpoint_format != catalog:
        raise SpecError(
            f"models[{index}].checkpoint_format",
            f"{model.model} is in the model catalog as a {describe(catalog)} checkpoint, not "
            f"{describe(model.checkpoint_format)}",
            "drop checkpoint_format: the catalog states how this checkpoint is stored",
        )
    found = refusal(model)
    if found is not None:
        raise SpecError(f"models[{index}].quantization", f"{model.quantization!r}: {found.problem}", found.fix)


def check_model(path: str, model: ModelServiceSpec, service: ModelServiceSpec, hardware: PoolHardware) -> None:
    """A placed engine, first problem first: vLLM's refusals of its draft and adapters, its scheduler limits, its
    fit on the device, what it pre-fetches into the node cache, the replicas the pool can hold, and an SLO one request
    alone can meet (the service's: a prefill engine answers for its service's TTFT)."""
    _check_serving_features(path, model, hardware)
    _check_attention_backend(path, model, hardware)
    _check_engine_limits(path, model, hardware)
    check_fit(path, model, hardware)
    check_cache_budget(path, model, hardware)
    _check_scaling_room(path, model, hardware)
    check_slo_reachable(path, model, service, hardware)


def _check_attention_backend(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """A backend the spec names that vLLM would refuse on this GPU at start (vllm/platforms/cuda.py:420-446: a
    selected backend that is not valid raises; planning/attention.py has the rules)."""
    if model.attention_backend is None:
        return
    reason = attention.unsupported_reason(ATTENTION_BACKENDS[model.attention_backend], model, hardware.gpu)
    if reason is not None:
        usable = [name for name in ATTENTION_BACKENDS if attention.supported(name, model, hardware.gpu)]
        raise SpecError(f"{path}.attention_backend", f"{reason}, and vLLM refuses a backend it cannot run",
                        f"use one of {', '.join(usable)}, or leave attention_backend unset for vLLM's choice")


def budget_refusals(spec: StackSpec) -> list[SpecError]:
    """The stated budget holds at max scale (`spec` lists the resolved engines, whose min scale it prices)."""
    return refusals_of(lambda: check_budget(spec))


def _check_serving_features(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """Speculative decoding and LoRA adapters: what vLLM 0.33 would refuse at start (planning/speculative.py and
    lora.py name the upstream rules)."""
    for prefix, problem in (("speculative", speculative.problem(model)), ("", lora.problem(model))):
        if problem is not None:
            field, what, fix = problem
            raise SpecError(f"{path}.{prefix + '.' if prefix else ''}{field}", what, fix)
    if model.lora_adapters and model.speculative is not None:
        batched, seqs = scheduler_defaults(model, hardware)
        needed = seqs * (model.speculative.num_speculative_tokens + 1)
        if batched < needed:
            raise SpecError(
                f"{path}.max_num_batched_tokens",
                f"{batched} batched tokens are fewer than max_num_seqs {seqs} x (num_speculative_tokens "
                f"{model.speculative.num_speculative_tokens} + 1) = {needed}, which vLLM refuses with LoRA on",
                f"set max_num_batched_tokens to {needed} or more, or lower max_num_seqs",
            )


def _check_engine_limits(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """vLLM 0.33 `SchedulerConfig.verify_max_model_len` (vllm/config/scheduler.py) refuses to start with these."""
    tokens = model.max_num_batched_tokens
    generates = model.resolved_architecture.task == "generate"  # pooling models leave chunked prefill to vLLM
    if tokens is not None and generates and not model.enable_chunked_prefill and tokens < model.max_model_len:
        raise SpecError(
            f"{path}.max_num_batched_tokens",
            f"{tokens} is below max_model_len {model.max_model_len} with enable_chunked_prefill false, so a whole "
            "prompt cannot fit one scheduler step and vLLM refuses to start",
            f"raise max_num_batched_tokens to {model.max_model_len}, lower max_model_len, or enable chunked prefill",
        )
    if model.max_num_seqs is None:
        return  # vLLM lowers its default max_num_seqs to max_num_batched_tokens
    tokens, _ = scheduler_defaults(model, hardware)
    if tokens < model.max_num_seqs:
        stated = "" if model.max_num_batched_tokens is not None else " (vLLM's default on this GPU)"
        raise SpecError(
            f"{path}.max_num_batched_tokens" if model.max_num_batched_tokens is not None else f"{path}.max_num_seqs",
            f"max_num_batched_tokens {tokens}{stated} is below max_num_seqs {model.max_num_seqs}: every running "
            "sequence needs a token of each step, and vLLM refuses to start",
            f"raise max_num_batched_tokens to {model.max_num_seqs} or more, or lower max_num_seqs to {tokens}",
        )


def _check_scaling_room(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """Replicas the service asks for must fit the pool (a replica is nodes_per_replica pods)."""
    scaling, pool = model.autoscaling, hardware.spec
    most = replicas_held(
        [(pool.max_nodes, hardware.resources_per_node)], gpu_requests(model, hardware), model.nodes_per_replica
    )
    if scaling.max_replicas > most:
        raise SpecError(
            f"{path}.autoscaling.max_replicas",
            f"{scaling.max_replicas} replicas, but pool {pool.name!r} holds at most {most} of this service "
            f"({pool.max_nodes} nodes of {hardware.primary.name}), so the rest would stay pending",
            f"lower max_replicas to {most}, or raise the pool's max_nodes",
        )


def check_cache_budget(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """What a pod pre-fetches must fit the node's weights cache, or every pre-fetch on the pool fails at start:
    the checkpoint (unless vLLM streams it from S3), its LoRA adapters and a speculative draft."""
    stored, budget = prefetched_bytes(model), pool_cache_budget_bytes(hardware)
    if stored <= budget:
        return
    pool = hardware.spec
    volume = "NVMe array" if pool.nvme_cache.enabled else f"{pool.disk_size_gib} GiB root volume"
    raise SpecError(
        f"{path}.pool",
        f"{model.name} pre-fetches {stored / GIB:.1f} GiB (weights, adapters, draft) but pool {pool.name!r} may cache "
        f"{budget / GIB:.1f} GiB per node ({pool.nvme_cache.budget_percent}% of the {volume} of a "
        f"{min(hardware.instance_types, key=lambda t: t.nvme_total_gb).name}), so every pre-fetch would fail",
        "raise the pool's nvme_cache.budget_percent, use instance types with more instance storage (or a larger "
        "disk_size_gib without the NVMe cache), or a smaller checkpoint",
    )
