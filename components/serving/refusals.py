"""The serving layer's refusals: names its objects would clash on, an image that cannot carry a replica over
EFA, a host KV tier beyond the pod's memory, the endpoint picker a feature reads, prefill/decode layouts NIXL
cannot pair, and batch jobs whose base engine would not run on their pool."""

from __future__ import annotations

from inferstack.aws.network import pool_zones
from inferstack.catalog.vllm_images import efa_images, vllm_image
from inferstack.planning import kv_offload
from inferstack.planning.disaggregation import prefill_engine, problem as problem_of_disaggregation
from inferstack.planning.refusals import check_cache_budget
from inferstack.serving.batch_model import batch_model
from inferstack.serving.names import check_object_names
from inferstack.serving.pods import host_resources, shm_bytes
from inferstack.serving.transport import crosses_efa, image_carries_efa
from inferstack.spec import NAME_MAX_LENGTH, ModelServiceSpec, StackSpec
from inferstack.spec.errors import SpecError, quoted, refusals_of
from inferstack.spec.pools import PoolHardware


def name_refusals(spec: StackSpec) -> list[SpecError]:
    """Kubernetes names derived from the spec's names, ours and those controllers derive, never clash."""
    return refusals_of(lambda: check_object_names(spec))


def check_model(spec: StackSpec, path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """A placed engine's pods, first problem first: the host KV tier inside the pod's memory, the image a
    replica across EFA nodes needs, and the gateway a picker-fed scaler reads."""
    _, memory = host_resources(model, hardware)
    found = kv_offload.problem(model, memory, shm_bytes(memory))
    if found is not None:
        field, what, fix = found
        raise SpecError(f"{path}.{field}", what, fix)
    _check_efa_image(path, model, hardware)
    if model.autoscaling.metric == "epp_queue" and not spec.gateway.enabled:
        raise SpecError(
            f"{path}.autoscaling.metric",
            "'epp_queue' reads the endpoint picker's queue but the gateway is disabled",
            "use metric 'queue_depth' or enable the gateway",
        )


def _check_efa_image(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """A replica across EFA nodes needs an image with libfabric and aws-ofi-nccl, or NCCL silently uses TCP."""
    known = vllm_image(model.image) if model.image is not None else None
    if model.image_provides_efa and known is not None and known.efa is None:
        raise SpecError(
            f"{path}.image_provides_efa",
            f"image {model.image!r} is in the catalog, which knows it carries no libfabric or aws-ofi-nccl plugin",
            f"use {quoted(efa_images())} (vLLM's EFA build), or drop image_provides_efa",
        )
    if crosses_efa(model, hardware) and not image_carries_efa(model, hardware):
        raise SpecError(
            f"{path}.image",
            f"{model.image!r} is not known to carry libfabric and the aws-ofi-nccl plugin, so NCCL between the "
            f"{model.nodes_per_replica} nodes of a replica would fall back to TCP sockets on EFA pool "
            f"{hardware.spec.name!r}",
            f"use {quoted(efa_images())} (vLLM's EFA build; or leave image unset), or set image_provides_efa "
            "true if your image has them",
        )


def check_disaggregation(spec: StackSpec, path: str, model: ModelServiceSpec, pools: dict[str, PoolHardware]) -> None:
    """A disaggregated service: a prefill pool that exists, a name its prefill engines can take, the gateway's
    picker to split requests, and none of the layouts under which NIXL fails or falls back to TCP
    (planning/disaggregation.py names the upstream rules); both roles in one zone, where EFA reaches."""
    role = model.disaggregation.prefill
    if role.pool is not None and role.pool not in pools:
        raise SpecError(f"{path}.disaggregation.prefill.pool", f"no node pool is named {role.pool!r}",
                        f"use one of {quoted(sorted(pools))}")
    engine = prefill_engine(model)
    if len(engine.name) > NAME_MAX_LENGTH or engine.name in {m.name for m in spec.models}:
        raise SpecError(f"{path}.name", f"its prefill engines would be named {engine.name!r}, which is "
                        f"{'taken' if len(engine.name) <= NAME_MAX_LENGTH else f'over {NAME_MAX_LENGTH} characters'}",
                        "give the service a shorter name of its own")
    if not spec.gateway.enabled:
        raise SpecError(f"{path}.disaggregation", "prefill/decode needs the gateway's endpoint picker to send "
                        "prompts to prefill engines, and the gateway is disabled", "enable the gateway")
    if role.autoscaling.metric == "epp_queue":
        raise SpecError(f"{path}.disaggregation.prefill.autoscaling.metric", "'epp_queue' is the service's picker "
                        "queue, which the decode role scales on; prefill engines have none of their own",
                        "scale the prefill role on 'queue_depth' or 'kv_cache'")
    decode, prefill = pools[model.pool], pools[engine.pool]
    found = problem_of_disaggregation(model, decode, prefill, image_carries_efa(model, decode))
    if found is not None:
        field, what, fix = found
        raise SpecError(f"{path}.{field}", what, fix)
    zones = {hardware.spec.name: pool_zones(spec, hardware.spec) for hardware in (decode, prefill)}
    if all(zones.values()) and zones[decode.spec.name][0] != zones[prefill.spec.name][0]:
        raise SpecError(
            f"{path}.disaggregation.prefill.pool",
            f"the prefill role's EFA pool {prefill.spec.name!r} is in {zones[prefill.spec.name][0]} and the decode "
            f"role's {decode.spec.name!r} in {zones[decode.spec.name][0]}: EFA does not cross zones, so the KV cache "
            "would move over TCP",
            "give both pools the same first availability zone, or put both roles on one pool",
        )


def batch_job_refusals(stack: StackSpec) -> list[SpecError]:
    """Each batch job's base engine runs on one node of its pool and its pre-fetch fits that node's cache
    (`stack` lists the services as placed)."""
    services, pools = {m.name for m in stack.models}, {p.name for p in stack.node_pools}
    found = []
    for i, job in enumerate(stack.batch_jobs):
        if job.model_service in services and job.pool in pools:
            found += refusals_of(lambda i=i: check_cache_budget(f"batch_jobs[{i}]", *batch_model(stack, i)))
    return found
