"""Which grouped-GEMM kernel family vLLM 0.33 runs routed experts with, by the experts' served format and the GPU
generation, as data (moe_kernels.json, each with its source): the step model times the experts on that family's
share of the throughput it draws on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files

from inferstack.catalog import Gpu, parse_capability

_RAW = json.loads(files("inferstack.catalog").joinpath("moe_kernels.json").read_text(encoding="utf-8"))

MOE_FAMILIES: dict[str, str] = dict(_RAW["families"])


@dataclass(frozen=True)
class MoeKernel:
    family: str      # a key of MOE_FAMILIES
    peak: str        # 'bf16' or 'fp8': the GPU throughput the kernel draws on
    source: str


def moe_kernel_for(served_format: str, gpu: Gpu) -> MoeKernel:
    """The kernel for experts served as `served_format` ('16-bit', 'fp8', 'mxfp4', 'nvfp4', 'int4', 'int8')."""
    rules = [r for r in _RAW["formats"][served_format] if parse_capability(r["min_capability"]) <= gpu.capability]
    if not rules:
        raise ValueError(f"vLLM runs no {served_format} MoE kernel on {gpu.name} (compute capability "
                         f"{gpu.compute_capability})")
    rule = rules[-1]
    return MoeKernel(rule["family"], rule["peak"], _RAW["sources"][rule["source"]])
