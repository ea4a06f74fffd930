"""vLLM serving workloads are safe to roll and to evict, and use the engine features that pay for themselves.

Loading weights takes minutes: without a startup probe the kubelet kills a loading server, without
a readiness probe traffic reaches it before the model is loaded, without a PodDisruptionBudget a
node drain takes every replica at once, and without CPU/memory requests the scheduler packs the
tokenizer and the HTTP server onto a node with no room for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from inferstack.catalog import GPUS
from inferstack.catalog.vllm_recipes import fp8_kv_left_out
from inferstack.conventions import MODEL_ANNOTATION
from inferstack.policies.pools import GPU_CLASS, MIG_CLASS, RegisteredWorkload, candidates, node_groups, workloads
from inferstack.policies.props import check_each, dig, items, mapping, text
from inferstack.policies.workloads import (
    PodTemplate,
    is_gpu_fraction,
    command_tokens,
    device_resources,
    flag_value,
    is_pooling_model,
    is_vllm,
    kind_of,
    selector_matches,
    workload,
)
from inferstack.spec.architecture import catalog_stored_format
from inferstack.spec.pools import WHOLE_GPU

PROBES = ("startupProbe", "readinessProbe")
REQUESTS = ("cpu", "memory")
PDB = "PodDisruptionBudget"
FP8_KV_FROM_COMPUTE_CAPABILITY = (9, 0)  # Hopper and newer have FP8 tensor cores


def _has_request(container: Mapping[str, Any], name: str) -> bool:
    """Set as a request, or as a limit (the API server then copies it into requests)."""
    resources = mapping(container.get("resources"))
    return any(dig(resources, section, name) not in (None, "", 0) for section in ("requests", "limits"))


def _probes_and_requests(args: ResourceValidationArgs, report: ReportViolation) -> None:
    found = workload(args.resource_type, args.props, args.name)
    if found is None or not found.is_serving or not found.runs_vllm:
        return
    # A LeaderWorkerSet serves from its leader; headless workers have no HTTP server to probe.
    has_leader = any(t.role == "leader" for t in found.templates)
    for template in found.templates:
        probed = not has_leader or template.role == "leader"
        for container in template.containers(init=False):
            name = text(container.get("name"), "?")
            where = f"{found} container {name!r}" + ("" if template.role == "pod" else f" ({template.role})")
            if probed and is_vllm(container):
                missing = [p for p in PROBES if not mapping(container.get(p))]
                if missing:
                    report(
                        f"{where} has no {' or '.join(missing)}. To fix: add a startupProbe that allows for weight "
                        "loading (httpGet /health with a failureThreshold x periodSeconds of several minutes) and a "
                        "readinessProbe on /health."
                    )
            missing = [r for r in REQUESTS if not _has_request(container, r)]
            if missing:
                report(f"{where} requests no {' or '.join(missing)}. To fix: set resources.requests.{missing[0]}.")


vllm_probes_and_requests = ResourceValidationPolicy(
    name="vllm-probes-and-requests",
    description="vLLM serving pods have startup and readiness probes and CPU/memory requests.",
    validate=_probes_and_requests,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _disruption_budget(args: StackValidationArgs, report: ReportViolation) -> None:
    budgets = [
        (text(dig(r.props, "metadata", "namespace")) or "default", mapping(dig(r.props, "spec", "selector")))
        for r in args.resources
        if kind_of(r.resource_type) == PDB
    ]
    for registered in workloads(args.resources):
        found = registered.workload
        if not found.is_serving or not found.runs_vllm:
            continue
        covered = any(
            namespace == found.namespace and selector_matches(selector, template.labels)
            for namespace, selector in budgets
            for template in found.templates
        )
        if not covered:
            report(
                f"{found} has no PodDisruptionBudget selecting its pods in namespace {found.namespace}. To fix: add "
                "a policy/v1 PodDisruptionBudget with maxUnavailable 1 whose selector matches the pod labels.",
                registered.resource.urn,
            )


vllm_disruption_budget = StackValidationPolicy(
    name="vllm-disruption-budget",
    description="Every vLLM serving workload has a PodDisruptionBudget.",
    validate=_disruption_budget,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _prefix_caching(args: ResourceValidationArgs, report: ReportViolation) -> None:
    found = workload(args.resource_type, args.props, args.name)
    if found is None:
        return
    for _template, container in found.vllm_containers():
        if is_pooling_model(container):
            continue
        tokens = command_tokens(container)
        explicit = flag_value(tokens, "--enable-prefix-caching")
        if {"--no-enable-prefix-caching", "--disable-prefix-caching"} & set(tokens) or (explicit or "").lower() in ("false", "0"):
            report(
                f"{found} container {text(container.get('name'), '?')!r} turns prefix caching off. To fix: set "
                "enable_prefix_caching true; shared system prompts and multi-turn chats then skip their prefill."
            )


vllm_prefix_caching = ResourceValidationPolicy(
    name="vllm-prefix-caching",
    description="vLLM generation servers keep prefix caching on (advisory).",
    validate=_prefix_caching,
    enforcement_level=EnforcementLevel.ADVISORY,
)


# vLLM 0.33's parallel-size flags and their short aliases (EngineArgs.add_cli_args, vllm/engine/arg_utils.py).
PARALLEL_FLAGS = {
    "tp": ("--tensor-parallel-size", "-tp"), "pp": ("--pipeline-parallel-size", "-pp"),
    "dp": ("--data-parallel-size", "-dp"), "local": ("--data-parallel-size-local", "-dpl"), "nnodes": ("--nnodes", "-n"),
}
UNREADABLE = -1


def _parallel_sizes(tokens: list[str], group_size: int) -> dict[str, int | None]:
    """Each parallel flag's number, None when absent; `$(LWS_GROUP_SIZE)` is the group's size, anything else that
    is not a plain number UNREADABLE."""
    sizes: dict[str, int | None] = {}
    for name, (flag, alias) in PARALLEL_FLAGS.items():
        value = flag_value(tokens, flag)
        value = flag_value(tokens, alias) if value is None else value
        if value is None:
            sizes[name] = None
        elif value == "$(LWS_GROUP_SIZE)":
            sizes[name] = group_size
        else:
            sizes[name] = int(value) if value.isdigit() else UNREADABLE
    return sizes


def _local_gpus(tokens: list[str], group_size: int) -> tuple[int, str] | None:
    """The GPUs one vLLM process of these flags drives on its node, and how, by vLLM 0.33's rules
    (`EngineArgs.create_engine_config`): with `--nnodes` the world (tp x pp x dp) is split evenly over the
    nodes, else a node runs `--data-parallel-size-local` ranks (default all of them) of tp x pp GPUs.
    None when a size cannot be read."""
    sizes = _parallel_sizes(tokens, group_size)
    if UNREADABLE in sizes.values():
        return None
    tp, pp, dp, nnodes = (sizes[name] or 1 for name in ("tp", "pp", "dp", "nnodes"))
    world = tp * pp * dp
    if nnodes > 1:
        if world % nnodes:
            return 0, f"a world of {world} GPUs (tensor {tp} x pipeline {pp} x data {dp}) {nnodes} nodes cannot split"
        return world // nnodes, f"{world} GPUs (tensor {tp} x pipeline {pp} x data {dp}) over {nnodes} nodes"
    ranks = sizes["local"] or dp
    return tp * pp * ranks, f"tensor {tp} x pipeline {pp} x {ranks} data-parallel rank(s) on the node"


def _claim_sources(template: PodTemplate, container: Mapping[str, Any]) -> str:
    """' through ResourceClaimTemplate inference/x-devices' for a container that uses claims, else ''."""
    named = {text(mapping(entry).get("name")) for entry in items(dig(container, "resources", "claims"))}
    sources = sorted({f"{c.kind} {template.namespace}/{c.source}" for c in template.claims() if c.name in named})
    return f" through {len(named)} claims of {', '.join(sources)}" if sources else ""


def _visible_gpus(template: PodTemplate, container: Mapping[str, Any], registered: RegisteredWorkload) -> float | None:
    """Whole GPUs the container sees, 0 when it sees none; None when it holds one MIG slice or a GPU share (its
    device count says nothing of the parallel layout)."""
    limits = device_resources(container)
    claimed = template.container_claimed(container, registered.claims)
    if MIG_CLASS in claimed or any(is_gpu_fraction(name) for name in limits):
        return None
    return limits.get(WHOLE_GPU, 0) + claimed.get(GPU_CLASS, 0)


def _check_layout(registered: RegisteredWorkload, report: ReportViolation) -> None:
    found = registered.workload
    group_size = sum(t.copies for t in found.templates) if found.kind == "LeaderWorkerSet" else 1
    for template, container in found.vllm_containers():
        if template.unresolved_claims(registered.claims):
            continue  # gpu-requests-advertised reports claims that do not resolve
        gpus = _visible_gpus(template, container, registered)
        if gpus is None:
            continue
        local = _local_gpus(command_tokens(container), group_size)
        if local is None or local[0] == gpus:
            continue
        where = f"{found} container {text(container.get('name'), '?')!r}" + (
            "" if template.role == "pod" else f" ({template.role})"
        )
        needs, how = local
        report(
            f"{where} requests {gpus:g} nvidia.com/gpu{_claim_sources(template, container)} but its vLLM flags "
            f"need {needs} ({how}): with fewer vLLM fails at start, with more they sit idle. To fix: make the GPU "
            "request equal tensor_parallel x data-parallel ranks per node (on a device_mode 'dra' pool: the "
            "GPUs of the claims the container names in resources.claims), or change the parallel sizes.",
            registered.resource.urn,
        )


def _parallel_layout(args: StackValidationArgs, report: ReportViolation) -> None:
    """The GPUs a vLLM container sees are its nvidia.com/gpu limit and the GPUs of the claims it names (a claim's
    devices reach only the containers that list it in resources.claims: kubernetes KEP-4381, the kubelet's DRA
    manager prepares them per container)."""
    check_each(workloads(args.resources), lambda registered: _check_layout(registered, report))


vllm_parallel_layout = StackValidationPolicy(
    name="vllm-parallel-layout",
    description="Each vLLM pod requests exactly the GPUs its tensor, pipeline and data-parallel flags run on its node.",
    validate=_parallel_layout,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _hopper_or_newer(group_gpu: str | None) -> bool:
    gpu = GPUS.get(group_gpu or "")
    return gpu is not None and gpu.capability >= FP8_KV_FROM_COMPUTE_CAPABILITY


def _auto_kv_cache_dtype(model: str) -> str:
    """What vLLM runs for an unset --kv-cache-dtype: the KV format a catalog checkpoint stores (a ModelOpt
    kv_cache_quant_algo FP8), else auto."""
    stored = catalog_stored_format(model)
    return "auto" if stored is None else stored.kv_cache_dtype


def _fp8_kv_cache(args: StackValidationArgs, report: ReportViolation) -> None:
    groups = node_groups(args.resources)
    for registered in workloads(args.resources):
        found = registered.workload
        for template, container in found.vllm_containers():
            if is_pooling_model(container) or (template.role == "worker" and len(found.templates) > 1):
                continue
            eligible = candidates(groups, template)
            hopper = [g for g in eligible if _hopper_or_newer(g.instance.gpu.name if g.instance else None)]
            # vLLM's own recipe for some models keeps a 16-bit KV cache on some generations (gpt-oss on Hopper).
            model = template.annotations.get(MODEL_ANNOTATION, "")
            hopper = [g for g in hopper if fp8_kv_left_out(model, g.instance.gpu) is None]
            dtype = flag_value(command_tokens(container), "--kv-cache-dtype") or _auto_kv_cache_dtype(model)
            if hopper and not dtype.startswith("fp8"):
                report(
                    f"{found} runs on {hopper[0].instance.gpu.name} nodes ({', '.join(g.name for g in hopper)}) with "
                    f"--kv-cache-dtype {dtype}. To fix: set kv_cache_dtype 'fp8'; it halves KV-cache memory, "
                    "doubling the context or batch that fits, at a small accuracy cost.",
                    registered.resource.urn,
                )


vllm_fp8_kv_cache = StackValidationPolicy(
    name="vllm-fp8-kv-cache",
    description="vLLM on Hopper or newer GPUs stores the KV cache in FP8 (advisory).",
    validate=_fp8_kv_cache,
    enforcement_level=EnforcementLevel.ADVISORY,
)
