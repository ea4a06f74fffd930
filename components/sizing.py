"""GPU memory sizing for a model service: weights, KV cache per token, and what fits.

Pure functions over the spec and the catalog. The model: vLLM takes `gpu_memory_utilization` of
each device, keeps the weight shard and a fixed activation/CUDA-graph reserve, and gives the rest
to the KV cache, which is shared by every token of every running sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.spec import MigSharing, ModelServiceSpec, MpsSharing, TimeSlicing
from inferstack.spec.pools import PoolHardware

GIB = 1024**3

# Bytes per parameter of the stored weights. 4-bit formats carry per-group scales (and zeros) in
# 16 bits for every 128 weights: 0.5 + 4/128 bytes.
BYTES_PER_PARAM = {
    "none": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 4 / 128,
    "awq": 0.5 + 4 / 128,
    "gptq": 0.5 + 4 / 128,
}
KV_BYTES = {"auto": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# Activations, CUDA graphs and the sampler's buffers per device, outside the KV cache (vLLM profiles
# this at start-up; 1.5 GiB is typical for 7-70B models at the default batch sizes).
RUNTIME_RESERVE_BYTES = int(1.5 * GIB)


@dataclass(frozen=True)
class Fit:
    """How one replica of a model sits on its devices."""

    devices: int                 # GPUs, slices or shares the replica occupies
    device_memory_bytes: int     # memory of one such device
    weights_bytes: int           # whole model
    kv_bytes_per_token: int      # all layers, K and V
    kv_cache_bytes: int          # KV cache across the replica's devices
    max_model_len: int

    @property
    def kv_tokens(self) -> int:
        return max(0, self.kv_cache_bytes // self.kv_bytes_per_token)

    @property
    def max_concurrency(self) -> int:
        """Full-length sequences the KV cache holds at once."""
        return self.kv_tokens // self.max_model_len

    @property
    def fits(self) -> bool:
        return self.max_concurrency >= 1

    @property
    def memory_bytes(self) -> int:
        return self.devices * self.device_memory_bytes


def weights_bytes(model: ModelServiceSpec) -> int:
    return int(model.resolved_architecture.params_billion * 1e9 * BYTES_PER_PARAM[model.quantization])


def kv_bytes_per_token(model: ModelServiceSpec) -> int:
    arch = model.resolved_architecture
    return 2 * arch.layers * arch.kv_heads * arch.head_dim * KV_BYTES[model.kv_cache_dtype]


def device_memory_bytes(model: ModelServiceSpec, hardware: PoolHardware) -> int:
    """Memory of the device one shard of the replica gets: a GPU, a MIG slice or a GPU share."""
    sharing = hardware.spec.gpu_sharing
    gpu_bytes = hardware.gpu.memory_mib * 1024 * 1024
    if isinstance(sharing, MigSharing):
        profile_name = model.mig_profile or next(iter(sharing.layout))
        return hardware.gpu.mig_profile(profile_name).memory_gb * 10**9
    if isinstance(sharing, (TimeSlicing, MpsSharing)):
        return gpu_bytes // sharing.replicas
    return gpu_bytes


def fit(model: ModelServiceSpec, hardware: PoolHardware) -> Fit:
    devices = model.gpus_per_replica
    memory = device_memory_bytes(model, hardware)
    weights = weights_bytes(model)
    usable = memory * model.gpu_memory_utilization - weights / devices - RUNTIME_RESERVE_BYTES
    return Fit(
        devices=devices,
        device_memory_bytes=memory,
        weights_bytes=weights,
        kv_bytes_per_token=kv_bytes_per_token(model),
        kv_cache_bytes=int(max(0, usable) * devices),
        max_model_len=model.max_model_len,
    )
