"""A batch job's model: its model service's base engine moved onto the job's pool, checked to fit there on one node.

The engine keeps the service's whole parallel layout: its tensor-parallel size, and its data-parallel ranks and
expert parallelism, all on the one node a batch pod runs on; the pod requests exactly the GPUs those ranks run
on (tensor_parallel x data_parallel). A service whose ranks are spread over nodes by data_parallel_local runs
them all on one node of the job's pool when one holds them. Pipeline stages are one per node
(ModelServiceSpec.nodes_per_replica), which an Indexed Job's independent pods cannot be: a job on a
pipeline-parallel service is refused.

Pure (no Pulumi): the spec check runs it for every job before anything registers, and the batch job
component uses the same result.
"""

from __future__ import annotations

from inferstack.planning.fit_refusal import check_fit
from inferstack.spec import MigSharing, ModelServiceSpec, MpsSharing, StackSpec, TimeSlicing
from inferstack.spec.errors import SpecError
from inferstack.spec.pools import PoolHardware


# A batch job runs its service's base engine: adapters and a draft are pre-fetched by serving pods only, a host KV
# tier is sized inside a serving pod's memory, and a prefill/decode split needs the other role's engines. Its
# data-parallel ranks all run on its one node (data_parallel_local defaults to data_parallel).
BASE_ENGINE = {
    "lora_adapters": (), "max_loras": None, "speculative": None, "kv_offload": None, "disaggregation": None,
    "data_parallel_local": None,
}


def _layout(model: ModelServiceSpec) -> str:
    """The parallel sizes a batch engine runs, as the refusals name them."""
    sizes = f"tensor_parallel {model.tensor_parallel}"
    if model.data_parallel > 1:
        sizes += f" x data_parallel {model.data_parallel}"
    return sizes


def batch_model(spec: StackSpec, index: int) -> tuple[ModelServiceSpec, PoolHardware]:
    """The job's model service moved onto the job's pool as its base engine, checked to fit there on one node."""
    job = spec.batch_jobs[index]
    path = f"batch_jobs[{index}]"
    service = spec.model_service(job.model_service)
    if service.pipeline_parallel > 1:
        raise SpecError(
            f"{path}.model_service",
            f"{service.name!r} spans {service.nodes_per_replica} nodes; a batch job runs on one node, and the "
            f"service's {service.pipeline_parallel} pipeline stages each take a node of their own",
            "point the job at a single-node model service",
        )
    hardware = PoolHardware(spec.pool(job.pool))
    model = service.model_copy(update={"pool": job.pool, **BASE_ENGINE})
    sharing = hardware.spec.gpu_sharing
    gpus = model.gpus_per_pod  # tensor_parallel x data_parallel: every rank of the replica on this node
    if gpus > 1 and isinstance(sharing, (MigSharing, TimeSlicing, MpsSharing)):
        device = "a MIG slice" if isinstance(sharing, MigSharing) else "a shared GPU"
        raise SpecError(
            f"{path}.pool",
            f"pool {job.pool!r} offers {device} per pod ({sharing.mode}) but {service.name!r} runs on {gpus} GPUs "
            f"({_layout(model)}); {device} cannot be tensor or data parallel",
            "run the job on a pool with whole GPUs and no gpu_sharing",
        )
    resource = hardware.resource_for_slice(model.mig_profile)
    if resource.startswith("nvidia.com/mig-") and resource not in hardware.resources_per_node:
        raise SpecError(
            f"{path}.pool",
            f"pool {job.pool!r} has no {model.mig_profile or 'MIG'} slices for {service.name!r}",
            "run the job on a pool with whole GPUs or with the service's MIG profile",
        )
    if model.mig_profile is None and gpus > hardware.gpus_per_node:
        if service.multi_node:
            raise SpecError(
                f"{path}.model_service",
                f"{service.name!r} spans {service.nodes_per_replica} nodes; a batch job runs on one node, and its "
                f"{service.data_parallel} data-parallel ranks need {gpus} GPUs ({_layout(model)}) but a "
                f"{hardware.primary.name} of pool {job.pool!r} has {hardware.gpus_per_node}",
                f"run the job on a pool whose nodes hold {gpus} GPUs, or point it at a model service of at most "
                f"{hardware.gpus_per_node} GPUs per replica",
            )
        layout = f" ({_layout(model)})" if model.data_parallel > 1 else ""
        raise SpecError(
            f"{path}.pool",
            f"{service.name!r} needs {gpus} GPUs on one node{layout} but a {hardware.primary.name} has "
            f"{hardware.gpus_per_node}",
            "run the job on a pool with larger nodes",
        )
    check_fit(path, model, hardware)
    return model, hardware
