"""A host-memory KV-cache tier: vLLM 0.33's native offloading, sized inside the pod's memory.

`--kv-offloading-size` is in GiB for the whole engine, shared by its tensor-parallel workers, and selects the
native backend's OffloadingConnector with `cpu_bytes_to_use` = size x 2^30 (vllm/config/cache.py;
VllmConfig._post_init_kv_transfer_config in vllm/config/vllm.py). That same step overwrites any connector a
--kv-transfer-config names, so a service that also transfers KV (prefill/decode) needs a MultiConnector instead.

The offloaded blocks are pinned host memory in the vLLM container, so they count against the pod's memory
limit, which is already the pod's share of the node after the system reserve (serving/pods.host_resources).
vLLM's own process (tokenizers, the API server, CUDA context, loader buffers) keeps the rest.

The endpoint picker learns which pod holds a prefix from its own record of the prompts it routed (llm-d-router's
approx-prefix-cache-producer, one least-recently-used index per pod). The GPU tier's index tunes itself from the
pods' KV-cache metrics; the host tier gets a second index sized to the blocks the tier holds
(llm-d-router v0.10.0 pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/types.go
`lruCapacityPerServer`, `autoTune`; the llm-d guide tiered-prefix-cache-cpu uses two producers the same way).
"""

from __future__ import annotations

from inferstack.planning.sizing import GIB, kv_bytes_per_token_per_device
from inferstack.spec import ModelServiceSpec

# What the vLLM process keeps in host memory beside the tier: an estimate (no published figure).
VLLM_HOST_RESERVE_BYTES = 16 * GIB
# The picker's index hashes prompts in blocks of at least 64 tokens, whatever it is told (llm-d-router v0.10.0
# approximateprefix/plugin.go minBlockSizeTokens, GetBlockSize), so the host tier is counted in those blocks.
INDEX_BLOCK_TOKENS = 64


def kv_offload_args(model: ModelServiceSpec) -> list[str]:
    if model.kv_offload is None:
        return []
    return ["--kv-offloading-size", f"{model.kv_offload.cpu_gib:g}"]


def tier_bytes(model: ModelServiceSpec) -> int:
    return 0 if model.kv_offload is None else int(model.kv_offload.cpu_gib * GIB)


def host_room_bytes(pod_memory: int, shm: int) -> int:
    """Pod memory the tier may take: the limit less /dev/shm (it counts against the limit) and vLLM's own use."""
    return max(0, pod_memory - shm - VLLM_HOST_RESERVE_BYTES)


def tier_tokens(model: ModelServiceSpec) -> int:
    """Tokens the tier holds: every tensor rank's slice of a token is offloaded (one copy for MLA)."""
    ranks = 1 if model.resolved_architecture.attention == "mla" else model.tensor_parallel
    return tier_bytes(model) // (kv_bytes_per_token_per_device(model) * ranks)


def tier_blocks(model: ModelServiceSpec) -> int:
    """The picker's blocks the tier holds: its index's capacity per pod."""
    return tier_tokens(model) // INDEX_BLOCK_TOKENS


def problem(model: ModelServiceSpec, pod_memory: int, shm: int) -> tuple[str, str, str] | None:
    """(field, what is wrong, the fix) when the tier cannot be placed as the spec asks."""
    if model.kv_offload is None:
        return None
    if model.nodes_per_replica > 1 or model.data_parallel > 1:
        return ("kv_offload", "a host tier is sized per engine on one node; this replica spans nodes or data-parallel "
                "engines", "drop kv_offload, or serve the model with one engine per replica")
    room = host_room_bytes(pod_memory, shm)
    if tier_bytes(model) > room:
        return ("kv_offload.cpu_gib", f"{model.kv_offload.cpu_gib:g} GiB does not fit the pod's memory: "
                f"{pod_memory / GIB:.0f} GiB less {shm / GIB:.0f} GiB of /dev/shm and "
                f"{VLLM_HOST_RESERVE_BYTES // GIB} GiB for vLLM leaves {room / GIB:.0f} GiB",
                f"set cpu_gib to at most {room // GIB}")
    return None
