"""Why a model service does not fit its pool, and the single changes that would make it fit.

`check_fit` refuses at spec time a service vLLM could not start (weights too large, or not one
full-length sequence in the KV cache) with sizing's numbers and the options `fit_options` finds:
lower precision, more GPUs, a node of the same GPU with more of them, a larger slice or share of the GPU,
a shorter context. The refusal lands on the field of the first change inside the pool, else on the pool.
"""

from __future__ import annotations

from inferstack.catalog import INSTANCE_TYPES, InstanceType
from inferstack.catalog.models import checkpoints_of
from inferstack.planning.quantization import describe, served_format, satisfies
from inferstack.planning.sizing import GIB, Fit, device_memory_bytes, fit, parallelism_problem, weights_bytes
from inferstack.spec import MigSharing, ModelServiceSpec, MpsSharing, NoSharing, TimeSlicing, catalog_stored_format
from inferstack.spec.errors import SpecError
from inferstack.spec.pools import PoolHardware


def _gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def device_name(model: ModelServiceSpec, hardware: PoolHardware) -> str:
    sharing = hardware.spec.gpu_sharing
    if isinstance(sharing, MigSharing):
        return f"{hardware.gpu.name} MIG slice {model.mig_profile or next(iter(sharing.layout))}"
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        return f"1/{sharing.replicas} of a {hardware.gpu.name} ({sharing.mode})"
    return hardware.gpu.name


def _valid_tensor_parallel(model: ModelServiceSpec, per_node: int) -> list[int]:
    return [
        tp for tp in range(1, per_node + 1)
        if per_node % tp == 0 and parallelism_problem(model.model_copy(update={"tensor_parallel": tp})) is None
    ]


def _describe(result: Fit) -> str:
    return f"{result.max_concurrency} x {result.max_model_len}-token sequences"


def precision_options(model: ModelServiceSpec) -> list[tuple[dict, str]]:
    """Weight-precision changes vLLM can serve, as (spec update, what it is), fewest bytes given up first:
    online FP8 of a 16-bit checkpoint, then the catalog's checkpoints of the same base model that hold
    fewer bytes (8-bit before 4-bit). Never a quantization the checkpoint cannot satisfy."""
    held = weights_bytes(model)
    options: list[tuple[dict, str]] = []
    if model.stored_format.weight_bits == 16 and model.quantization != "fp8":
        options.append(({"quantization": "fp8"}, "quantized online by vLLM at load"))
    smaller = []
    for name in checkpoints_of(model.model):
        stored = catalog_stored_format(name)
        update = {"model": name} if satisfies(stored, model.quantization) else {"model": name, "quantization": "auto"}
        candidate_bytes = weights_bytes(model.model_copy(update=update))
        if candidate_bytes < held:
            smaller.append((-candidate_bytes, name, update, f"the catalog's checkpoint stored as {describe(stored)}"))
    options += [(update, what) for _, _, update, what in sorted(smaller)]
    return options


def _larger_node_option(model: ModelServiceSpec, hardware: PoolHardware) -> str | None:
    """The catalog instance type of the pool's GPU with the fewest GPUs above the pool's that holds the model at
    a valid tensor_parallel, as a pool change: a layout of the same GPU that fits."""
    smallest_per_count: dict[int, InstanceType] = {}
    for candidate in sorted(INSTANCE_TYPES.values(), key=lambda t: (t.vcpus, t.memory_mib, t.name)):
        if candidate.gpu.name == hardware.gpu.name and candidate.gpu_count > hardware.gpus_per_node:
            smallest_per_count.setdefault(candidate.gpu_count, candidate)
    for instance in (smallest_per_count[count] for count in sorted(smallest_per_count)):
        node = PoolHardware(hardware.spec.model_copy(update={"instance_types": [instance.name],
                                                            "gpu_sharing": NoSharing()}))
        for tp in _valid_tensor_parallel(model, instance.gpu_count):
            if tp * model.data_parallel <= hardware.gpus_per_node:
                continue
            candidate = model.model_copy(update={"tensor_parallel": tp, "pipeline_parallel": 1, "mig_profile": None})
            if candidate.gpus_per_pod > instance.gpu_count:
                continue
            result = fit(candidate, node)
            if result.starts:
                return (f"a node with more GPUs: a pool of {instance.name} ({instance.gpu_count} x "
                        f"{hardware.gpu.name}) at tensor_parallel {tp} gives {_describe(result)}")
    return None


def fit_options(model: ModelServiceSpec, hardware: PoolHardware) -> list[tuple[str, str]]:
    """Single changes that make the model fit, cheapest first within each kind, as (the field the change is
    made on, the change and what it gives)."""
    options: list[tuple[str, str]] = []
    sharing = hardware.spec.gpu_sharing

    # Lower precision: KV cache first (no new checkpoint needed), then the weights.
    # (not where the checkpoint already runs an FP8 KV cache under auto)
    kv = [{"kv_cache_dtype": "fp8"}] if model.resolved_kv_cache_dtype == "auto" else []
    candidates: list[tuple[dict, str | None]] = [(update, None) for update in kv]
    for update, what in precision_options(model):
        candidates += [(update, what)] + [({**update, **extra}, what) for extra in kv]
    for update, what in candidates:
        result = fit(model.model_copy(update=update), hardware)
        if result.starts:
            change = ", ".join(f"{k} {v!r}" for k, v in update.items())
            note = f" ({what})" if what else ""
            field = "kv_cache_dtype" if list(update) == ["kv_cache_dtype"] else "quantization"
            options.append((field, f"lower precision: {change}{note} gives {_describe(result)}"))
            break

    # More GPUs: tensor parallel inside a node, then pipeline stages across nodes (a data-parallel replica
    # keeps its ranks and grows each rank's tensor-parallel group).
    whole = hardware
    if not isinstance(sharing, NoSharing):
        whole = PoolHardware(hardware.spec.model_copy(update={"gpu_sharing": NoSharing()}))
    layouts = sorted(
        ((tp, pp) for tp in _valid_tensor_parallel(model, whole.gpus_per_node)
         for pp in (range(1, max(hardware.spec.max_nodes, 1) + 1) if model.data_parallel == 1 else [1])),
        key=lambda layout: (layout[0] * layout[1], layout[1]),
    )
    for tp, pp in layouts:
        if (tp, pp) == (model.tensor_parallel, model.pipeline_parallel) and whole is hardware:
            continue
        candidate = model.model_copy(update={"tensor_parallel": tp, "pipeline_parallel": pp, "mig_profile": None})
        gpus = candidate.gpus_per_replica
        if gpus < model.gpus_per_replica or candidate.gpus_per_pod > whole.gpus_per_node:
            continue
        result = fit(candidate, whole)
        if result.starts:
            where = "" if whole is hardware else f" on a pool of whole {hardware.gpu.name}s"
            options.append((
                "pool" if whole is not hardware else
                "tensor_parallel" if tp != model.tensor_parallel else "pipeline_parallel",
                f"more GPUs: tensor_parallel {tp}, pipeline_parallel {pp} ({gpus} GPU{'s' if gpus > 1 else ''})"
                f"{where} gives {_describe(result)}",
            ))
            break
    else:
        larger_node = _larger_node_option(model, hardware)
        if larger_node is not None:
            options.append(("pool", larger_node))

    # A larger slice of the GPU.
    if isinstance(sharing, MigSharing):
        size = device_memory_bytes(model, hardware)
        for profile in sorted(hardware.gpu.mig_profiles, key=lambda p: (p.memory_gb, p.compute_slices)):
            if profile.memory_gb * 10**9 <= size or "+" in profile.name:
                continue
            result = fit(model.model_copy(update={"mig_profile": profile.name}), hardware)
            if result.starts:
                layout = "" if profile.name in sharing.layout else " (add it to the pool's MIG layout)"
                options.append(("mig_profile", f"larger slice: mig_profile {profile.name!r}{layout} gives "
                                f"{_describe(result)}"))
                break
    elif isinstance(sharing, (TimeSlicing, MpsSharing)):
        for replicas in range(sharing.replicas - 1, 1, -1):
            fewer = sharing.model_copy(update={"replicas": replicas})
            shared = PoolHardware(hardware.spec.model_copy(update={"gpu_sharing": fewer}))
            result = fit(model, shared)
            if result.starts:
                options.append(("pool", f"larger share: {sharing.mode} replicas {replicas} per GPU gives "
                                f"{_describe(result)}"))
                break

    # A shorter context, when the weights fit at all.
    result = fit(model, hardware)
    if result.weights_fit and result.rank_kv_tokens >= 128 and not result.starts:
        options.append(("max_model_len", f"shorter context: max_model_len {result.rank_kv_tokens} or less (1 "
                        "sequence at a time)"))
    return options


def check_fit(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """Raise SpecError when vLLM could not start this service on its pool, with the numbers and the options."""
    problem = parallelism_problem(model)
    if problem is not None:
        raise SpecError(f"{path}.tensor_parallel", problem, _layout_fix(model, hardware))
    result = fit(model, hardware)
    if result.starts:
        return
    device = device_name(model, hardware)
    budget = (
        f"a {device} gives {_gib(result.budget_bytes_per_device)} at gpu_memory_utilization "
        f"{model.gpu_memory_utilization}"
    )
    # LoRA slots and a speculative draft take their share before the KV cache (sizing.Fit).
    extras = "".join(
        f", {what} {_gib(size)}" for what, size in
        (("LoRA slots", result.adapter_bytes_per_device), ("draft", result.draft_bytes_per_device)) if size
    )
    if not result.weights_fit:
        served = served_format(model)
        precision = model.dtype if served.weight_bits == 16 else describe(served)
        where = f"{precision} weights of {_gib(result.weights_bytes)}"
        problem = (
            f"{model.model} does not fit: {where} over {result.devices} device(s) need "
            f"{_gib(result.weights_bytes_per_device)} each plus {_gib(result.reserve_bytes_per_device)} runtime "
            f"reserve{extras}, but {budget}"
        )
        # What overflows: what the features add to weights that fit alone, else the weights: the change to make.
        alone = result.weights_bytes_per_device + result.reserve_bytes_per_device <= result.budget_bytes_per_device
        field = ("lora_adapters" if result.adapter_bytes_per_device else "speculative") if alone and extras \
            else None
    else:
        problem = (
            f"{model.model} leaves {_gib(result.kv_cache_bytes_per_device)} per device for the KV cache "
            f"({budget}; weights {_gib(result.weights_bytes_per_device)}, reserve "
            f"{_gib(result.reserve_bytes_per_device)}{extras}): {result.rank_kv_tokens} tokens at "
            f"{result.kv_bytes_per_token_per_device} bytes per token per device, fewer than one "
            f"{model.max_model_len}-token sequence"
        )
        field = "max_model_len"
    options = fit_options(model, hardware)
    fix = "; or ".join(text for _, text in options) or (
        f"nothing inferstack knows fits it on a {hardware.gpu.name}: use a GPU with more memory")
    if field is None:
        # A change inside this pool before a move to another one.
        field = next((changed for changed, _ in options if changed != "pool"), "pool")
    raise SpecError(f"{path}.{field}", problem, fix)


def _layout_fix(model: ModelServiceSpec, hardware: PoolHardware) -> str:
    """The layouts vLLM would load: expert parallelism where it removes the expert split, and the valid
    tensor_parallel sizes of the node."""
    fixes = []
    if (model.resolved_architecture.experts and not model.resolved_expert_parallel
            and parallelism_problem(model.model_copy(update={"expert_parallel": True})) is None):
        fixes.append("set expert_parallel true (--enable-expert-parallel: every GPU holds whole experts)")
    valid = _valid_tensor_parallel(model, hardware.gpus_per_node)
    if valid:
        fixes.append(f"use tensor_parallel in {valid}")
    return "; or ".join(fixes) or (
        f"no tensor_parallel of the pool's {hardware.gpus_per_node}-GPU nodes loads it: use another model or a "
        "hand-written architecture that splits")
