"""Weight precision: what a checkpoint stores, what a service asks vLLM to run, and what that implies.

A checkpoint's stored format is a fact about its files (`ModelServiceSpec.stored_format`); the
service's `quantization` is a request that must be compatible with it. vLLM 0.33 decides from the
checkpoint's own `quantization_config` (vllm/config/model.py `_verify_quantization`):

- a pre-quantized checkpoint needs no `--quantization`: vLLM reads the method from its config and, for
  AWQ and GPTQ, picks the Marlin kernel itself when the GPU and group size allow it
  (quantization/auto_awq.py, auto_gptq.py `get_quant_method`); a different `--quantization` is
  refused ("Quantization method specified in the model config (...) does not match ...");
- a 16-bit checkpoint can only be quantized online to FP8 here (`--quantization fp8_per_tensor`; plain
  `fp8` still works but is deprecated for online use, model_loader/weight_utils.py `get_quant_config`);
  `awq`, `gptq` and compressed-tensors need the checkpoint's own config and fail at startup with
  "Cannot find the config file for ...";
- without FP8 tensor cores (compute capability below 8.9: A10G, A100) FP8 runs as weight-only FP8
  Marlin (W8A16): the weights still take one byte each, the matmuls run at the 16-bit rate
  (quantization/online/fp8.py, kernels/linear `_POSSIBLE_FP8_KERNELS`, compressed_tensors.py);
- 4-bit floats (MXFP4, NVFP4) run on FP4 tensor cores only on Blackwell (compute capability 10);
  elsewhere vLLM dequantizes them in FP4 Marlin (W4A16, "Your GPU does not have native support for
  FP4 computation", kernels/linear/nvfp4/marlin.py, any GPU from compute capability 7.5), and an
  NVFP4 W4A16 checkpoint runs there on every GPU (modelopt.py LINEAR_ALGOS "W4A16_NVFP4").
"""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.catalog import Gpu
from inferstack.catalog.models import base_model, checkpoints_of
from inferstack.catalog.moe_kernels import MoeKernel, moe_kernel_for
from inferstack.spec import CheckpointFormat, ModelServiceSpec, catalog_stored_format

# What vLLM 0.33 holds on the GPU after `--quantization fp8_per_tensor` on a 16-bit checkpoint:
# FP8 weights with one scale per tensor, activations quantized per token at run time.
ONLINE_FP8 = CheckpointFormat(quant_method="fp8", weight_bits=8, weight_type="float", activation_bits=8)
ONLINE_FP8_ARGUMENT = "fp8_per_tensor"


def describe(stored: CheckpointFormat) -> str:
    """A short name for a stored format, e.g. 'AWQ 4-bit group-128', 'compressed-tensors W8A8 INT8'."""
    if stored.weight_bits == 16:
        return "16-bit"
    group = f" group-{stored.group_size}" if stored.group_size else ""
    if stored.is_nvfp4:
        scheme = "W4A4" if stored.activation_bits == 4 else "W4A16"
        via = "ModelOpt" if stored.quant_method == "modelopt" else stored.quant_method
        return f"NVFP4 {scheme} ({via}; FP4 with an FP8 scale per 16)"
    if stored.quant_method == "modelopt":
        return "FP8 (ModelOpt)" if stored.activation_bits == 8 else "FP8 weight-only (ModelOpt)"
    if stored.quant_method == "compressed-tensors":
        if stored.weight_type == "float":
            return "compressed-tensors FP8 (W8A8)"
        scheme = f"W{stored.weight_bits}A{stored.activation_bits}"
        return f"compressed-tensors {scheme} INT{stored.weight_bits}{group}"
    if stored.quant_method == "mxfp4":
        part = " experts" if stored.applies_to == "experts" else ""
        return f"MXFP4{part} (FP4 with an 8-bit scale per {stored.group_size})"
    if stored.quant_method == "fp8":
        return "FP8"
    return f"{stored.quant_method.upper()} {stored.weight_bits}-bit{group}"


def satisfies(stored: CheckpointFormat, request: str) -> bool:
    """Whether a checkpoint stored this way is served as `request` without online quantization."""
    if request == "auto":
        return True
    if request == "none":
        return stored.weight_bits == 16
    if request == "fp8":
        return stored.weight_bits == 8 and stored.weight_type == "float"
    if request in ("awq", "gptq"):
        return stored.quant_method == request
    bits = {"int4": 4, "int8": 8}[request]
    return stored.weight_type == "int" and stored.weight_bits == bits


def is_online(model: ModelServiceSpec) -> bool:
    """A 16-bit checkpoint that vLLM quantizes to FP8 while loading it."""
    return model.quantization == "fp8" and model.stored_format.weight_bits == 16


def served_format(model: ModelServiceSpec) -> CheckpointFormat:
    """What the GPU holds: the stored format, or FP8 when vLLM quantizes a 16-bit checkpoint online."""
    return ONLINE_FP8 if is_online(model) else model.stored_format


def vllm_quantization(model: ModelServiceSpec) -> str | None:
    """The `--quantization` value: only for online FP8; a pre-quantized checkpoint declares its own method."""
    return ONLINE_FP8_ARGUMENT if is_online(model) else None


def kernel_family(model: ModelServiceSpec, gpu: Gpu) -> str:
    """Which kernels run the served format's matmuls on this GPU: '16-bit', 'w8a8-fp8', 'w8a8-int8',
    'w8a16-marlin' (FP8 without FP8 tensor cores, or 8-bit integer weight-only) or 'w4a16-marlin'."""
    served = served_format(model)
    if served.weight_bits == 16:
        return "16-bit"
    if served.weight_type == "float" and served.weight_bits == 4:
        return "w4a16-marlin"  # MXFP4/NVFP4: weight-only below Blackwell; the step model has no FP4 family yet
    if served.weight_type == "float":
        # The GPU catalog's FP8 hardware flag (compute capability 8.9 and newer).
        return "w8a8-fp8" if gpu.fp8 else "w8a16-marlin"
    if served.activation_bits == 8:
        return "w8a8-int8"
    return f"w{served.weight_bits}a16-marlin"


def dense_kernel_family(model: ModelServiceSpec, gpu: Gpu) -> str:
    """The kernel family of the layers a format leaves out of the routed experts: 16-bit where it covers only the
    experts (gpt-oss's MXFP4), else the format's own."""
    return "16-bit" if served_format(model).applies_to == "experts" else kernel_family(model, gpu)


def moe_kernel(model: ModelServiceSpec, gpu: Gpu) -> MoeKernel:
    """The grouped-GEMM kernel family vLLM 0.33 runs the routed experts with on this GPU
    (catalog/moe_kernels.json), by the experts' served format."""
    served = served_format(model)
    if served.weight_bits == 16:
        name = "16-bit"
    elif served.quant_method == "mxfp4":
        name = "mxfp4"
    elif served.is_nvfp4:
        name = "nvfp4"
    elif served.weight_type == "float":
        name = "fp8"
    else:
        name = f"int{served.weight_bits}"
    return moe_kernel_for(name, gpu)


def kernel(model: ModelServiceSpec, gpu: Gpu) -> str:
    """The kernel family vLLM 0.33 picks for the served format on this GPU, and what it implies."""
    served = served_format(model)
    family = kernel_family(model, gpu)
    how = "quantized online at load" if is_online(model) else "as stored"
    if family == "16-bit":
        return "16-bit weights and matmuls"
    if family == "w8a8-fp8":
        return f"FP8 W8A8 on FP8 tensor cores ({how})"
    if family == "w8a8-int8":
        return "INT8 W8A8 (CUTLASS scaled-mm)"
    if served.weight_type == "float" and served.weight_bits == 4:
        name = "NVFP4" if served.is_nvfp4 else "MXFP4"
        bits = 4 + served.scale_bits / served.group_size
        if served.is_nvfp4 and served.activation_bits == 16:
            return (
                f"NVFP4 weight-only (W4A16 FP4 Marlin, as stored): weights take {bits:g} bits each, matmuls run at "
                "the 16-bit rate"
            )
        if gpu.fp4:
            return f"{name} on FP4 tensor cores ({gpu.name})"
        return (
            f"{name} weight-only (W4A16): {gpu.name} has no FP4 tensor cores, so weights take {bits:g} bits each but "
            "matmuls run at the 16-bit rate"
        )
    if served.weight_type == "float":
        return (
            f"weight-only FP8 Marlin (W8A16, {how}): {gpu.name} has no FP8 tensor cores, so weights take 1 byte "
            "each but matmuls run at the 16-bit rate"
        )
    return f"{served.weight_bits}-bit weight-only Marlin (W{served.weight_bits}A16)"


# ----------------------------------------------------------------------------------------- requests


CHECKPOINT_KIND = {
    "none": "a 16-bit", "fp8": "an FP8", "awq": "an AWQ", "gptq": "a GPTQ",
    "int4": "a 4-bit integer (AWQ, GPTQ or W4A16)", "int8": "an 8-bit integer (W8A8)",
}


@dataclass(frozen=True)
class Refusal:
    """Why vLLM would refuse the request, and a fix that names a real checkpoint or setting."""

    problem: str
    fix: str


def _checkpoints_satisfying(model: ModelServiceSpec, request: str) -> list[str]:
    return [
        name for name in checkpoints_of(model.model)
        if satisfies(catalog_stored_format(name), request)
    ]


def refusal(model: ModelServiceSpec) -> Refusal | None:
    """None when vLLM 0.33 serves this checkpoint as requested, else what it would say and what to do."""
    stored = model.stored_format
    request = model.quantization
    if satisfies(stored, request) or is_online(model):
        return None
    stored_name = describe(stored)
    base = base_model(model.model)
    if stored.weight_bits == 16 and request in ("awq", "gptq"):
        problem = (
            f"{model.model} is a 16-bit checkpoint and vLLM reads {request} weights only from a checkpoint stored "
            f"that way: it would stop at startup (\"Cannot find the config file for {request}\")"
        )
    elif stored.weight_bits == 16:
        problem = (
            f"{model.model} is a 16-bit checkpoint; vLLM reads {request} weights only from a checkpoint stored that "
            "way (online it quantizes dense layers to FP8 only)"
        )
    elif request == "none":
        problem = f"{model.model} stores {stored_name} weights; vLLM serves a pre-quantized checkpoint as stored"
    else:
        problem = (
            f"{model.model} stores {stored_name} weights; vLLM refuses another method (\"Quantization method "
            f"specified in the model config ({stored.quant_method}) does not match the quantization method "
            f"specified in the `quantization` argument ({request})\")"
        )
    fixes = []
    if stored.weight_bits != 16:
        fixes.append(f"set quantization 'auto' to serve it as stored ({stored_name})")
    matching = _checkpoints_satisfying(model, request)
    if matching:
        fixes.append(f"use {CHECKPOINT_KIND[request]} checkpoint of the model such as {matching[0]!r} from the catalog")
    if stored.weight_bits == 16:
        fixes.append("set quantization 'fp8' (quantized online by vLLM at load)")
        if not matching:
            fixes.append(
                f"point model at a checkpoint stored as {request} (with architecture and checkpoint_format when it is not in the catalog)"
            )
    elif base != model.model and request in ("none", "fp8"):
        online = " with quantization 'fp8' (online)" if request == "fp8" else ""
        fixes.append(f"use the 16-bit base model {base!r}{online}")
    return Refusal(problem, "; or ".join(fixes))
