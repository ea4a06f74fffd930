"""A model service's own rules, from the spec and the model catalog: before placement (a pool of the stack, an
architecture), and once placed on its pool's hardware (context and traffic, its shape on the pool's devices,
its experts layout, its scaling and priority)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from inferstack.catalog.all2all_backends import ALL2ALL_BACKENDS
from inferstack.catalog.models import known_model_ids, model_facts
from inferstack.spec.base import AUTO
from inferstack.spec.checks import min_max
from inferstack.spec.errors import SpecError, did_you_mean, quoted, refusals_of
from inferstack.spec.model_services import ModelServiceSpec
from inferstack.spec.node_pools import MigSharing, MpsSharing, TimeSlicing
from inferstack.spec.pools import PoolHardware
from inferstack.spec.stack import StackSpec


def service_refusals(spec: StackSpec, index: int, pools: Iterable[str]) -> list[SpecError]:
    """What auto placement needs before it runs: a named pool exists, the model has an architecture."""
    return refusals_of(lambda: _check_auto_fields(spec, index, pools))




def _check_auto_fields(spec: StackSpec, index: int, pools: Iterable[str]) -> None:
    model = spec.models[index]
    pools = list(pools)
    if model.disaggregation is not None and AUTO in (model.pool, model.tensor_parallel):
        field = "pool" if model.pool == AUTO else "tensor_parallel"
        raise SpecError(
            f"models[{index}].{field}",
            "'auto' places one engine, but a disaggregated service's decode role is sized against its prefill "
            "role's EFA pool and tensor parallelism",
            f"name the decode role's {field} (an EFA pool, a tensor_parallel the prefill role's divides)",
        )
    if model.pool != AUTO and model.pool not in pools:
        raise SpecError(
            f"models[{index}].pool",
            f"{model.pool!r} is not a node pool{did_you_mean(model.pool, pools)}; defined pools: {quoted(pools)}",
            "set pool to one of them, to 'auto', or add a node pool with that name",
        )
    if model.architecture is None and model_facts(model.model) is None:
        raise SpecError(
            f"models[{index}].model",
            f"{model.model!r} is not in the model catalog{did_you_mean(model.model, known_model_ids())}",
            "add `architecture` (params_billion, layers, hidden_size, attention_heads, kv_heads, head_dim, "
            "max_context) to the service, or use a catalog model",
        )




def check_model(spec: StackSpec, path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """A placed service's own rules, first problem first: its context and traffic, its shape on the pool's
    devices, its experts layout, its scaling and its priority."""
    max_context = model.resolved_architecture.max_context
    if model.max_model_len > max_context:
        raise SpecError(
            f"{path}.max_model_len",
            f"{model.max_model_len} is longer than {model.model}'s context of {max_context} tokens",
            f"set max_model_len to {max_context} or less",
        )
    if model.slo is not None and model.traffic is None:
        raise SpecError(
            f"{path}.slo",
            "an slo is measured at a load, but the service states no traffic",
            "add traffic (requests_per_second and mean token counts) or remove the slo",
        )
    if model.traffic is not None and (
        model.traffic.mean_input_tokens + model.traffic.mean_output_tokens > model.max_model_len
    ):
        traffic = model.traffic
        raise SpecError(
            f"{path}.traffic",
            f"a mean request of {traffic.mean_input_tokens} + {traffic.mean_output_tokens} tokens is longer than "
            f"max_model_len {model.max_model_len}, which vLLM refuses",
            f"raise max_model_len to {traffic.mean_input_tokens + traffic.mean_output_tokens} or more, or state the "
            "traffic's real mean lengths",
        )
    if model.traffic is not None and model.traffic.shared_prefix_tokens and not model.enable_prefix_caching:
        raise SpecError(
            f"{path}.traffic.shared_prefix_tokens",
            f"{model.traffic.shared_prefix_tokens} shared tokens are recomputed for every request with "
            "enable_prefix_caching false",
            "set enable_prefix_caching to true, or shared_prefix_tokens to 0",
        )
    _check_placement(path, model, hardware)
    _check_experts_layout(path, model)
    _check_scaling(spec, path, model)


def _check_scaling(spec: StackSpec, path: str, model: ModelServiceSpec) -> None:
    scaling = model.autoscaling
    min_max(f"{path}.autoscaling", "min_replicas", scaling.min_replicas, "max_replicas", scaling.max_replicas)
    if scaling.min_replicas == 0 and not scaling.scale_to_zero:
        raise SpecError(
            f"{path}.autoscaling.min_replicas",
            "min_replicas is 0 but scale_to_zero is false",
            "set min_replicas to 1 or more, or set scale_to_zero to true",
        )
    if scaling.scale_to_zero and scaling.min_replicas > 0:
        raise SpecError(
            f"{path}.autoscaling.scale_to_zero",
            f"scale_to_zero is true but min_replicas is {scaling.min_replicas}",
            "set min_replicas to 0, or scale_to_zero to false",
        )
    if model.tier == "online" and scaling.scale_to_zero:
        raise SpecError(
            f"{path}.autoscaling.scale_to_zero",
            "an online service must answer at once, but scaling to zero makes the first request wait for a node "
            "and a model load",
            "set scale_to_zero false with min_replicas 1 or more, or make the service's tier 'standard' or 'batch'",
        )
    if scaling.metric == "kv_cache" and scaling.target is not None and scaling.target > 1:
        raise SpecError(
            f"{path}.autoscaling.target",
            f"{scaling.target:g} is above 1, but vllm:kv_cache_usage_perc is a fraction (1 means 100 percent), so the "
            "service would never scale out",
            f"give the target as a fraction, e.g. {min(scaling.target / 100, 1):g} for {scaling.target:g} percent",
        )
    if scaling.metric in ("prompt_tokens", "running_sequences") and scaling.target is None:
        raise SpecError(
            f"{path}.autoscaling.target",
            f"metric {scaling.metric!r} has no default target: its right figure depends on the model, the GPU and "
            "the traffic",
            "state a target per replica, or leave metric and target unset with an slo so the plan derives them",
        )
    if scaling.metric == "prompt_tokens" and model.pd_role != "prefill":
        raise SpecError(
            f"{path}.autoscaling.metric",
            "'prompt_tokens' counts a prefill engine's requests as prompts, but this engine also decodes, so its "
            "running requests are not prompts",
            "use 'running_sequences' (or another metric) here, or 'prompt_tokens' under disaggregation.prefill",
        )
    prefill = model.disaggregation.prefill.autoscaling if model.disaggregation is not None else None
    if prefill is not None and prefill.metric == "prompt_tokens" and model.traffic is None:
        raise SpecError(
            f"{path}.disaggregation.prefill.autoscaling.metric",
            "'prompt_tokens' multiplies the prefill requests by the traffic's prompt tokens, but the service states "
            "no traffic",
            "add traffic (mean_input_tokens) to the service, or use another metric",
        )
    if model.tier not in {p.name for p in spec.queues.priorities} and spec.queues.enabled:
        raise SpecError(
            f"{path}.tier",
            f"tier {model.tier!r} has no WorkloadPriorityClass of that name in queues.priorities",
            f"add a priority named {model.tier!r} to queues.priorities",
        )


def _check_experts_layout(path: str, model: ModelServiceSpec) -> None:
    """Expert parallelism only means something for MoE layers (data parallelism serves dense models too), and its
    token exchange must reach every GPU of the replica (all2all_backends.json says which backend reaches how far:
    between EFA nodes only allgather_reducescatter)."""
    # data_parallel on a dense model is served: vLLM 0.33 runs each rank as an independent engine holding the whole
    # model behind the replica's one API server (vllm/v1/engine/core.py:1546-1555, "Non-MoE DP ranks are completely
    # independent"; docs/serving/data_parallel_deployment.md: "This will work with both dense and MoE models").
    experts = model.resolved_architecture.experts
    # Expert parallelism asked for: stated, or by a stated all2all_backend with expert_parallel unset (auto turns on
    # only where the layout allows it, ModelServiceSpec.expert_parallel_basis).
    by_backend = model.expert_parallel is None and model.all2all_backend is not None
    if model.expert_parallel or by_backend:
        field, off = (
            (f"{path}.all2all_backend", "drop all2all_backend")
            if by_backend else (f"{path}.expert_parallel", "set expert_parallel to false")
        )
        if not experts:
            raise SpecError(field, f"{model.model} is a dense model with no experts to split", off)
        group = model.tensor_parallel * model.data_parallel
        if group == 1:
            raise SpecError(
                field,
                "expert parallelism splits the experts over a replica's GPUs, and this replica has one",
                f"raise tensor_parallel or data_parallel, or {off}",
            )
        if group > experts:
            raise SpecError(
                field,
                f"{group} GPUs (tensor_parallel x data_parallel) share {experts} experts, so some would hold none",
                f"keep tensor_parallel x data_parallel at {experts} or less",
            )
    if not model.resolved_expert_parallel:
        return
    backend = model.all2all_exchange
    reach = ALL2ALL_BACKENDS[backend]
    if model.multi_node and not (reach.crosses_nodes and reach.crosses_efa):
        where = (
            f"exchanges tokens over one node's NVLink, but a replica spans {model.nodes_per_replica} nodes"
            if not reach.crosses_nodes
            else f"does not run between nodes over EFA, and a replica spans {model.nodes_per_replica} nodes: "
            f"{reach.efa_refusal}"
        )
        # vLLM checks deepep_v2's NCCL GIN on one node too (all2all.py _check_gin_support): one node is no fix for it.
        one_node = "" if backend == "deepep_v2" else ", or fit the replica on one node"
        raise SpecError(
            f"{path}.all2all_backend",
            f"{backend} {where}",
            "use 'allgather_reducescatter', the backend that runs between EFA nodes (or drop all2all_backend: it is "
            f"vLLM's default){one_node}",
        )


def _check_placement(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    sharing = hardware.spec.gpu_sharing
    pool_name = hardware.spec.name
    if model.mig_profile is not None:
        if not isinstance(sharing, MigSharing):
            raise SpecError(
                f"{path}.mig_profile",
                f"pool {pool_name!r} is not partitioned with MIG (gpu_sharing is {sharing.mode!r})",
                "drop mig_profile, or place the model on a pool with gpu_sharing mode 'mig'",
            )
        if hardware.gpu.mig_profile(model.mig_profile) is None:
            raise SpecError(
                f"{path}.mig_profile",
                f"{model.mig_profile!r} is not a MIG profile of {hardware.gpu.name}"
                f"{did_you_mean(model.mig_profile, [p.name for p in hardware.gpu.mig_profiles])}",
                f"use one of {quoted(sharing.layout)} (the pool's layout)",
            )
        if model.mig_profile not in sharing.layout:
            raise SpecError(
                f"{path}.mig_profile",
                f"pool {pool_name!r} has no {model.mig_profile} slices; its layout is {quoted(sharing.layout)}",
                f"use one of {quoted(sharing.layout)} or add {model.mig_profile} to the pool's layout",
            )
        if model.gpus_per_replica > 1:
            raise SpecError(
                f"{path}.tensor_parallel",
                "a MIG slice cannot be combined with tensor, pipeline or data parallelism",
                "set tensor_parallel, pipeline_parallel and data_parallel to 1, or use whole GPUs",
            )
        return
    if isinstance(sharing, MigSharing) and sharing.strategy == "mixed":
        raise SpecError(
            f"{path}.mig_profile",
            f"pool {pool_name!r} only offers MIG slices {quoted(sharing.layout)}",
            "set mig_profile to one of them",
        )
    if isinstance(sharing, (TimeSlicing, MpsSharing)) and model.gpus_per_replica > 1:
        raise SpecError(
            f"{path}.tensor_parallel",
            f"pool {pool_name!r} shares GPUs ({sharing.mode}); a shared GPU cannot be tensor/pipeline/data parallel",
            "use a pool without gpu_sharing for parallel models",
        )
    per_node = hardware.gpus_per_node
    if model.tensor_parallel > per_node:
        raise SpecError(
            f"{path}.tensor_parallel",
            f"tensor_parallel {model.tensor_parallel} exceeds the {per_node} GPUs of a {hardware.primary.name} node",
            f"use tensor_parallel <= {per_node} and pipeline_parallel for more GPUs, or a larger instance type",
        )
    if per_node % model.tensor_parallel:
        raise SpecError(
            f"{path}.tensor_parallel",
            f"tensor_parallel {model.tensor_parallel} does not divide the {per_node} GPUs of a node",
            f"use a divisor of {per_node}",
        )
    if model.gpus_per_pod > per_node:
        ranks = per_node // model.tensor_parallel
        raise SpecError(
            f"{path}.data_parallel_local",
            f"{model.data_parallel_per_node} data-parallel ranks of tensor_parallel {model.tensor_parallel} on one node "
            f"need {model.gpus_per_pod} GPUs, but a {hardware.primary.name} node has {per_node}",
            f"set data_parallel_local to {ranks} ({ranks} ranks per node, "
            f"{math.ceil(model.data_parallel / ranks)} nodes per replica) with data_parallel a multiple of it",
        )
    if model.multi_node:
        field = "pipeline_parallel" if model.pipeline_parallel > 1 else "data_parallel_local"
        nodes = model.nodes_per_replica
        if nodes > hardware.spec.max_nodes:
            raise SpecError(
                f"{path}.{field}",
                f"a replica takes {nodes} nodes but pool {pool_name!r} has max_nodes {hardware.spec.max_nodes}",
                f"raise the pool's max_nodes to {nodes} or more, or lower {field.removesuffix('_local')}",
            )
