"""Pod-spec pieces every serving workload shares: labels, placement on a pool, host resources, security
contexts, the weights pre-fetch init container and its volumes, the Kueue queue a workload joins.

Plain dicts in the Kubernetes API's own (camelCase) shape, so tests read them as `kubectl` would.

Security choices, once for all serving pods:
* vLLM runs as the image's own non-root user (`vllm`, uid 2000, gid 0 in vLLM 0.33's images: the
  catalog's `vllm_images.json`), with HOME on an emptyDir and vLLM's compile cache (VLLM_CACHE_ROOT) on a
  per-service hostPath beside the weights cache, opened to its group by a root init container that drops every
  capability: the upstream image runs as root, but nothing it does needs root. USER and LOGNAME name that user, so
  `getpass.getuser()` never falls back to a passwd lookup, which raises KeyError for a uid the image
  does not list (a team's own image run as this uid). Its root filesystem stays writable because
  FlashInfer and others write JIT caches under paths we do not control.
* The pre-fetch init container runs as uid 0 with every capability dropped and no privilege
  escalation: it must create files in the root-owned NVMe cache directory on the node. The hostPath
  volume already keeps these pods out of the Pod Security "baseline" level, so the serving and batch
  namespaces cannot enforce it. Every container drops all capabilities, forbids privilege escalation and
  runs under the RuntimeDefault seccomp profile; all but the pre-fetch container run as non-root.
* `automountServiceAccountToken: false`: no serving container talks to the Kubernetes API. The
  init container's S3 access comes from EKS Pod Identity, whose webhook projects its own token
  (audience `pods.eks.amazonaws.com`, usable only to fetch the model-reader role's credentials),
  independent of the API token.
"""

from __future__ import annotations

import math
from typing import Any

from inferstack.catalog.charts import IMAGES
from inferstack.catalog.vllm_images import DEFAULT_VLLM_IMAGE, VLLM_IMAGES, ImageUser, vllm_image
from inferstack.conventions import (
    CAPACITY_LABEL,
    GPU_TAINT_KEY,
    MANAGED_BY,
    MODEL_CACHE_HOST_PATH,
    MODEL_CACHE_MOUNT,
    NVME_MOUNT,
    POOL_LABEL,
)
from inferstack.planning.device_claims import pod_claims, uses_dra
from inferstack.planning.pool_capacity import efa_requests, gpu_requests
from inferstack.spec import MigSharing, ModelServiceSpec, MpsSharing, QueuesSpec, StackSpec, TimeSlicing
from inferstack.spec.pools import PoolHardware
from inferstack.weights.prefetch import PIN_SCRIPT

COMPONENT = "vllm"
PART_OF = {"app.kubernetes.io/part-of": "inferstack"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ROLE_LABEL = "inferstack.dev/role"  # leader | worker, on the pods of a multi-node replica

WEIGHTS_SCRIPTS_MOUNT = "/opt/inferstack"  # the pre-fetch ConfigMap, in the vLLM container
# vLLM's compile cache (VLLM_CACHE_ROOT) on the node's NVMe, one directory per model service: beside the
# weights cache, not in it, so the pre-fetch's budget and eviction never see it.
COMPILE_CACHE_HOST_DIR = f"{NVME_MOUNT}/compile-cache"
COMPILE_CACHE_MOUNT = "/compile-cache"
# Host share a pod may request: the rest of the node goes to the kubelet, system reserve and DaemonSets.
HOST_SHARE = 0.75
MAX_SHM_BYTES = 16 * 1024**3
GIB = 1024**3

RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
POD_SECURITY = {"seccompProfile": {"type": "RuntimeDefault"}}


# ---------------------------------------------------------------------------------------------- labels


def selector_labels(service: str, component: str = COMPONENT) -> dict[str, str]:
    return {"app.kubernetes.io/name": service, "app.kubernetes.io/component": component}


def object_labels(service: str, component: str = COMPONENT) -> dict[str, str]:
    return {**selector_labels(service, component), **PART_OF, **MANAGED_BY}


def local_queue(spec: StackSpec, role: str, pool: str) -> str | None:
    """The LocalQueue (named after its ClusterQueue) for a workload of this role on this pool.

    The queue that owns the pool (its `pools`, else every pool of its role) comes first; any queue of
    the role will do otherwise, since cohort queues borrow each other's GPUs. None without Kueue.
    """
    if not spec.queues.enabled:
        return None
    pool_role = spec.pool(pool).role
    queues = [q for q in spec.queues.cluster_queues if q.role == role]
    for queue in queues:
        if (queue.pools is None and pool_role == role) or (queue.pools is not None and pool in queue.pools):
            return queue.name
    return queues[0].name if queues else None


def kueue_labels(spec: StackSpec, role: str, pool: str, priority: str) -> dict[str, str]:
    queue = local_queue(spec, role, pool)
    if queue is None:
        return {}
    labels = {QUEUE_LABEL: queue}
    if priority in {p.name for p in spec.queues.priorities}:
        labels[PRIORITY_LABEL] = priority
    return labels


def priority_value(spec: StackSpec, tier: str) -> int:
    """The numeric priority of a tier, from the stack's WorkloadPriorityClasses (their defaults without Kueue)."""
    for priorities in (spec.queues.priorities, QueuesSpec().priorities):
        for priority in priorities:
            if priority.name == tier:
                return priority.value
    return 0


# ------------------------------------------------------------------------------------------- placement


def tolerations(hardware: PoolHardware) -> list[dict[str, Any]]:
    """The GPU taint every pool carries, and the pool's own taints."""
    result: list[dict[str, Any]] = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    for taint in hardware.spec.taints:
        if taint.value is None:
            result.append({"key": taint.key, "operator": "Exists", "effect": taint.effect})
        else:
            result.append({"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect})
    return result


def placement(hardware: PoolHardware, *, prefer_capacity: list[str], spread_labels: dict[str, str] | None) -> dict[str, Any]:
    """nodeSelector on the pool, its tolerations, a preferred capacity type and (optionally) replicas
    spread across nodes, preferred rather than required so small pools still pack several replicas."""
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [{"key": CAPACITY_LABEL, "operator": "In", "values": prefer_capacity}]
                    },
                }
            ]
        }
    }
    if spread_labels:
        affinity["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": dict(spread_labels)},
                    },
                }
            ]
        }
    return {"nodeSelector": {POOL_LABEL: hardware.spec.name}, "tolerations": tolerations(hardware), "affinity": affinity}


def preferred_capacity(tier: str) -> list[str]:
    """SLO-bound services prefer the on-demand (or reserved) baseline; the rest prefer spot."""
    return ["on-demand", "reserved"] if tier == "online" else ["spot"]


# ------------------------------------------------------------------------------------------- resources


def node_share(model: ModelServiceSpec, hardware: PoolHardware) -> float:
    """The fraction of a node's GPU capacity one pod takes; host CPU and memory follow the same share."""
    sharing = hardware.spec.gpu_sharing
    gpus = hardware.gpus_per_node
    if isinstance(sharing, MigSharing):
        profile = hardware.gpu.mig_profile(model.mig_profile or next(iter(sharing.layout)))
        return profile.memory_slices / hardware.gpu.mig_memory_slices / gpus
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        return 1 / (sharing.replicas * gpus)
    return model.gpus_per_pod / gpus


def host_resources(model: ModelServiceSpec, hardware: PoolHardware) -> tuple[int, int]:
    """(CPU millicores, memory bytes) for one pod, sized on the pool's smallest instance type so the
    pod fits on any of them; requests equal limits (Guaranteed QoS, the last to be evicted)."""
    share = node_share(model, hardware)
    vcpus = min(t.vcpus for t in hardware.instance_types)
    memory_mib = min(t.memory_mib for t in hardware.instance_types)
    millicores = max(500, math.floor(vcpus * 1000 * share * HOST_SHARE / 100) * 100)
    memory = max(2 * GIB, math.floor(memory_mib * 1024**2 * share * HOST_SHARE / GIB) * GIB)
    return millicores, memory


def cpu_quantity(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(size: int) -> str:
    return f"{size // GIB}Gi" if size % GIB == 0 else f"{size // 1024**2}Mi"


def resources(millicores: int, memory: int, extended: dict[str, int] | None = None) -> dict[str, Any]:
    """Requests equal to limits; extended resources (GPUs, slices, EFA) as whole counts."""
    amounts = {
        "cpu": cpu_quantity(millicores),
        "memory": memory_quantity(memory),
        **{k: str(v) for k, v in (extended or {}).items()},
    }
    return {"requests": dict(amounts), "limits": dict(amounts)}


def device_resources(
    model: ModelServiceSpec, hardware: PoolHardware, millicores: int, memory: int, claim_template: str
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """(the GPU container's resources, the pod's resourceClaims). On a device-plugin pool the GPUs (or slice, or
    share) and the EFA interfaces are extended resources; on a DRA pool the container names the pod's claims,
    one per rank group, each generated from `claim_template` (a template yields a new claim per pod entry)."""
    if not uses_dra(hardware):
        return resources(millicores, memory, {**gpu_requests(model, hardware), **efa_requests(model, hardware)}), []
    names = pod_claims(model, hardware).claim_names()
    container = {**resources(millicores, memory), "claims": [{"name": name} for name in names]}
    return container, [{"name": name, "resourceClaimTemplateName": claim_template} for name in names]


def shm_bytes(memory: int) -> int:
    """/dev/shm for NCCL and vLLM's shared-memory queues; it counts against the memory limit."""
    return min(MAX_SHM_BYTES, memory // 4)


# ------------------------------------------------------------------------------ security and volumes


def vllm_user(image: str) -> ImageUser:
    """The image's non-root user; for an image the catalog does not list, the stock image's."""
    return (vllm_image(image) or VLLM_IMAGES[DEFAULT_VLLM_IMAGE]).user


def vllm_security_context(image: str) -> dict[str, Any]:
    user = vllm_user(image)
    return {**RESTRICTED, "runAsNonRoot": True, "runAsUser": user.uid, "runAsGroup": user.gid}


def root_init_security_context() -> dict[str, Any]:
    """uid 0 without capabilities: enough to write the root-owned cache directory, nothing more."""
    return {**RESTRICTED, "runAsNonRoot": False, "runAsUser": 0, "readOnlyRootFilesystem": True}


def model_key(model: ModelServiceSpec) -> str:
    """The model's directory in the node cache: one per weights location, shared by services that use it."""
    source = model.weights.removeprefix("s3://").rstrip("/") if model.weights else model.model
    return source.replace("/", "--")


def s3_location(uri: str) -> tuple[str, str]:
    """'s3://bucket/key/prefix' -> ('bucket', 'key/prefix') (the spec checks both parts are there)."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix


def weights_location(model: ModelServiceSpec) -> tuple[str | None, str]:
    """(bucket, key prefix) of the weights; bucket None means the stack's weights bucket."""
    if model.weights is None:
        return None, f"models/{model.model}"
    bucket, prefix = s3_location(model.weights)
    if not prefix.strip("/"):
        raise ValueError(
            f"{model.name}: weights {model.weights!r} names a bucket but no key prefix. "
            "To fix: point weights at the folder holding the model's files"
        )
    return bucket, prefix.strip("/")


def model_path(model: ModelServiceSpec) -> str:
    return f"{MODEL_CACHE_MOUNT}/{model_key(model)}"


def s3_weights_uri(model: ModelServiceSpec, weights_bucket: str) -> str:
    """The weights prefix as the s3:// URI vLLM streams from (weight_loader s3_stream); `weights_bucket` is the
    stack's, used when the spec names none."""
    bucket, prefix = weights_location(model)
    return f"s3://{bucket or weights_bucket}/{prefix}"


def compile_cache_dir(model: ModelServiceSpec) -> str:
    """The service's compile-cache directory on the node. Per service, not per weights location: vLLM hashes its
    config, code and environment into `torch_compile_cache/<hash>` (vllm/compilation/backends.py), so services
    could share one root safely, but per service only its pods (one uid) write there and no service can plant
    artifacts another loads. Without the NVMe cache (`nvme_cache.enabled: false`) the path lies on the root EBS
    volume: it still survives pod restarts on the node, read at EBS speed."""
    return f"{COMPILE_CACHE_HOST_DIR}/{model.name}"


def cache_volumes(
    prefetch_config_map: str | None, memory: int, *, compile_cache: str | None = None, local_weights: bool = True,
) -> list[dict[str, Any]]:
    """The pod's volumes: the NVMe cache and the pre-fetch scripts (when anything is pre-fetched: the weights
    unless vLLM streams them from S3, LoRA adapters, a draft model), the compile cache when given (a hostPath, kept across
    pod restarts), shared memory, HOME and /tmp."""
    volumes: list[dict[str, Any]] = []
    if local_weights or prefetch_config_map is not None:
        volumes.append({"name": "model-cache", "hostPath": {"path": MODEL_CACHE_HOST_PATH, "type": "DirectoryOrCreate"}})
    if prefetch_config_map is not None:
        volumes.append({"name": "prefetch", "configMap": {"name": prefetch_config_map, "defaultMode": 0o555}})
    if compile_cache is not None:
        volumes.append({"name": "compile-cache", "hostPath": {"path": compile_cache, "type": "DirectoryOrCreate"}})
    return volumes + [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": memory_quantity(shm_bytes(memory))}},
        {"name": "home", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
    ]


def compile_cache_init_container(image: str) -> dict[str, Any]:
    """Opens the compile-cache directory (created root:root 0755 by the kubelet) to group 0, vLLM's group in every
    catalogued image (`vllm_images.json`: uid 2000, gid 0): uid 0 as the directory's owner needs no capability to
    chmod it, so this container drops them all like every other. The vLLM image, which the pod pulls anyway."""
    user = vllm_user(image)
    if user.gid != 0:
        raise ValueError(f"image {image!r} runs vLLM as gid {user.gid}: the compile cache is opened to group 0 only")
    return {
        "name": "compile-cache-access",
        "image": image,
        "command": ["chmod", "0770", COMPILE_CACHE_MOUNT],
        "resources": resources(100, 64 * 1024**2),
        "securityContext": root_init_security_context(),
        "volumeMounts": [{"name": "compile-cache", "mountPath": COMPILE_CACHE_MOUNT}],
    }


def prefetch_init_container(
    region: str, millicores: int, memory: int, *, name: str = "prefetch-weights", script: str = "prefetch.sh"
) -> dict[str, Any]:
    """Copies the weights (or a LoRA adapter) from S3 to the node's NVMe cache (a no-op on a warm node) before
    vLLM starts."""
    return {
        "name": name,
        "image": IMAGES["aws-cli"],
        "command": ["/bin/bash", f"/scripts/{script}"],
        "env": [{"name": "AWS_REGION", "value": region}, {"name": "HOME", "value": "/tmp"}],
        "resources": resources(millicores, memory),
        "securityContext": root_init_security_context(),
        "volumeMounts": [
            {"name": "model-cache", "mountPath": MODEL_CACHE_MOUNT},
            {"name": "prefetch", "mountPath": "/scripts", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def vllm_env(
    model: ModelServiceSpec, image: str, *, compile_cache: bool = False, region: str | None = None
) -> list[dict[str, Any]]:
    """HOME on an emptyDir for the non-root user, who is named in USER/LOGNAME; the compile caches on the
    node's compile-cache volume (`compile_cache`) or on that emptyDir; the AWS region for the S3 streamer
    (`region`, weight_loader s3_stream); no telemetry; the Hugging Face token only from a Secret.

    With the compile-cache volume, VLLM_CACHE_ROOT points at it (vllm/envs.py: default ~/.cache/vllm) and
    TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR are left unset: vLLM sets both under
    `torch_compile_cache/<hash>` itself, but keeps a TRITON_CACHE_DIR the caller sets
    (vllm/compilation/compiler_interface.py initialize_inductor_cache), which would leave Triton's kernels
    on the emptyDir. Weights come from the local cache or S3, so without a token the Hub is never contacted.
    """
    user = vllm_user(image)
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": user.home},
        {"name": "USER", "value": user.name},
        {"name": "LOGNAME", "value": user.name},
        {"name": "HF_HOME", "value": f"{user.home}/.cache/huggingface"},
    ]
    if compile_cache:
        env.append({"name": "VLLM_CACHE_ROOT", "value": COMPILE_CACHE_MOUNT})
    else:
        env += [
            {"name": "TORCHINDUCTOR_CACHE_DIR", "value": f"{user.home}/.cache/torchinductor"},
            {"name": "TRITON_CACHE_DIR", "value": f"{user.home}/.cache/triton"},
        ]
    if region is not None:
        # The streamer's S3 client (AWS SDK) takes the region from the environment; credentials come from
        # EKS Pod Identity, which injects its container-credentials variables into every container.
        env += [{"name": "AWS_REGION", "value": region}, {"name": "AWS_DEFAULT_REGION", "value": region}]
    env += [
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        {"name": "DO_NOT_TRACK", "value": "1"},
    ]
    if model.hf_token_secret is None:
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    else:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": model.hf_token_secret, "key": "HF_TOKEN"}}})
    return env


def pinned_weights(argv: list[str]) -> list[str]:
    """`argv` run through the pre-fetch ConfigMap's pin-weights.sh: vLLM gets the weights version the
    cache's symlink points at when the container starts, not a path that may switch while it loads."""
    return ["/bin/bash", f"{WEIGHTS_SCRIPTS_MOUNT}/{PIN_SCRIPT}", *argv]


def vllm_mounts(
    image: str, *, local_weights: bool = True, compile_cache: bool = False, side_loads: bool = False
) -> list[dict[str, Any]]:
    """The NVMe cache (for local weights, LoRA adapters or a draft model) and the pin script (local weights), the
    compile cache when the pod has one, shared memory and HOME."""
    mounts: list[dict[str, Any]] = []
    if local_weights or side_loads:
        mounts.append({"name": "model-cache", "mountPath": MODEL_CACHE_MOUNT, "readOnly": True})
    if local_weights:
        mounts.append({"name": "prefetch", "mountPath": WEIGHTS_SCRIPTS_MOUNT, "readOnly": True})
    if compile_cache:
        mounts.append({"name": "compile-cache", "mountPath": COMPILE_CACHE_MOUNT})
    return mounts + [
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "home", "mountPath": vllm_user(image).home},  # an emptyDir over the image's own home
    ]
