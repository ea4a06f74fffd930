"""Which attention backend a vLLM engine runs, and the one both roles of a prefill/decode pair must run.

vLLM tries its backends in a per-generation order and takes the first one valid for the model
(vllm/platforms/cuda.py:377-417 get_valid_backends); a backend given with --attention-backend is used if it is
valid and refused at start otherwise (cuda.py:420-446). NIXL hashes the backend's name into the handshake both
roles must agree on (vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py:146-203,
compute_nixl_compatibility_hash; base_worker.py:1192-1205 raises on a mismatch), so a decode engine on B200
(FLASHINFER by default) cannot read KV from a prefill engine on H100 (FLASH_ATTN) unless both are told one backend.
"""

from __future__ import annotations

from inferstack.catalog import Gpu
from inferstack.catalog.attention_backends import ATTENTION_BACKENDS, AttentionBackend, priorities
from inferstack.spec import ModelServiceSpec

FP8_KV = ("fp8", "fp8_e4m3", "fp8_e5m2")


def unsupported_reason(backend: AttentionBackend, model: ModelServiceSpec, gpu: Gpu) -> str | None:
    """Why `backend` cannot run this model on this GPU, or None when it can."""
    capability = gpu.capability
    arch = model.resolved_architecture
    if backend.attention != arch.attention:
        return f"{backend.name} is for {backend.attention.upper()} models and {model.model} uses {arch.attention.upper()}"
    if backend.capability_majors is not None and capability[0] not in backend.capability_majors:
        return f"{backend.name} does not run on {gpu.name} (compute capability {gpu.compute_capability})"
    if backend.min_capability is not None and capability < backend.min_capability:
        return f"{backend.name} needs compute capability {'.'.join(map(str, backend.min_capability))} or newer"
    if backend.max_capability is not None and capability > backend.max_capability:
        return f"{backend.name} runs up to compute capability {'.'.join(map(str, backend.max_capability))}"
    head = arch.head_dim
    if backend.head_sizes is not None and head not in backend.head_sizes:
        return f"{backend.name} takes head sizes {', '.join(map(str, backend.head_sizes))}, not {head}"
    if backend.head_size_multiple is not None and head % backend.head_size_multiple:
        return f"{backend.name} takes head sizes in multiples of {backend.head_size_multiple}, not {head}"
    if backend.max_head_size is not None and head > backend.max_head_size:
        return f"{backend.name} takes head sizes up to {backend.max_head_size}, not {head}"
    kv_dtype = model.resolved_kv_cache_dtype  # a ModelOpt checkpoint's stored FP8 KV under auto
    if kv_dtype in FP8_KV and backend.fp8_kv_capability_majors is not None and (
        kv_dtype == "fp8_e5m2" or capability[0] not in backend.fp8_kv_capability_majors
    ):
        return f"{backend.name} reads no {kv_dtype} KV cache on {gpu.name}"
    return None


def supported(name: str, model: ModelServiceSpec, gpu: Gpu) -> bool:
    return unsupported_reason(ATTENTION_BACKENDS[name], model, gpu) is None


def default_backend(model: ModelServiceSpec, gpu: Gpu) -> str | None:
    """The backend vLLM picks for this model on this GPU when none is given (None: none the catalog knows fits)."""
    arch = model.resolved_architecture
    return next((name for name in priorities(arch.attention, gpu.capability[0]) if supported(name, model, gpu)), None)


def paired_backend(model: ModelServiceSpec, decode: Gpu, prefill: Gpu) -> tuple[str | None, bool]:
    """(backend, pinned) for both roles of a disaggregated service. Unpinned when both GPUs pick the same backend
    by default (or the spec names one); otherwise the first backend of the decode GPU's order that both run, pinned
    on both roles so they hash alike. (None, True) when no backend runs on both."""
    if model.attention_backend is not None:
        return model.attention_backend, False
    defaults = default_backend(model, decode), default_backend(model, prefill)
    if defaults[0] == defaults[1]:
        return defaults[0], False
    order = priorities(model.resolved_architecture.attention, decode.capability[0])
    common = next((n for n in order if supported(n, model, decode) and supported(n, model, prefill)), None)
    return common, True
