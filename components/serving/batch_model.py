"""A batch job's model: its model service's base engine moved onto the job's pool, checked to fit there on one node.

Pure (no Pulumi): the spec check runs it for every job before anything registers, and the batch job
component uses the same result.
"""

from __future__ import annotations

from inferstack.planning.fit_refusal import check_fit
from inferstack.spec import ModelServiceSpec, StackSpec
from inferstack.spec.errors import SpecError
from inferstack.spec.pools import PoolHardware


# A batch job runs its service's base engine: adapters and a draft are pre-fetched by serving pods only, a host KV
# tier is sized inside a serving pod's memory, and a prefill/decode split needs the other role's engines.
BASE_ENGINE = {"lora_adapters": (), "max_loras": None, "speculative": None, "kv_offload": None, "disaggregation": None}


def batch_model(spec: StackSpec, index: int) -> tuple[ModelServiceSpec, PoolHardware]:
    """The job's model service moved onto the job's pool as its base engine, checked to fit there on one node."""
    job = spec.batch_jobs[index]
    path = f"batch_jobs[{index}]"
    service = spec.model_service(job.model_service)
    if service.multi_node:
        raise SpecError(
            f"{path}.model_service",
            f"{service.name!r} spans {service.nodes_per_replica} nodes; a batch job runs on one node",
            "point the job at a single-node model service",
        )
    hardware = PoolHardware(spec.pool(job.pool))
    model = service.model_copy(update={"pool": job.pool, **BASE_ENGINE})
    resource = hardware.resource_for_slice(model.mig_profile)
    if resource.startswith("nvidia.com/mig-") and resource not in hardware.resources_per_node:
        raise SpecError(
            f"{path}.pool",
            f"pool {job.pool!r} has no {model.mig_profile or 'MIG'} slices for {service.name!r}",
            "run the job on a pool with whole GPUs or with the service's MIG profile",
        )
    if model.mig_profile is None and model.tensor_parallel > hardware.gpus_per_node:
        raise SpecError(
            f"{path}.pool",
            f"{service.name!r} needs {model.tensor_parallel} GPUs on one node but a {hardware.primary.name} has "
            f"{hardware.gpus_per_node}",
            "run the job on a pool with larger nodes",
        )
    check_fit(path, model, hardware)
    return model, hardware
