"""What each stored format and request implies in vLLM 0.33: what the GPU holds and which kernel runs it.

Source: vLLM 0.33.0 (PyPI sdist vllm-0.33.0.tar.gz), files named per test.
"""

from __future__ import annotations

import pytest

from inferstack.catalog import gpu
from inferstack.catalog.models import CHECKPOINTS
from inferstack.planning.quantization import ONLINE_FP8, describe, is_online, kernel, satisfies, served_format
from inferstack.spec import CheckpointFormat, ModelServiceSpec


def service(model: str, quantization: str = "auto") -> ModelServiceSpec:
    return ModelServiceSpec(name="m", model=model, quantization=quantization, pool="p")


def test_every_catalog_checkpoint_states_a_loadable_format_and_its_source():
    for name, facts in CHECKPOINTS.items():
        stored = CheckpointFormat(**facts["format"])
        assert stored.weight_bits < 16, name
        assert facts["source"], name


def test_online_fp8_holds_fp8_only_for_a_16_bit_checkpoint():
    online = service("meta-llama/Llama-3.1-8B-Instruct", "fp8")
    assert is_online(online) and served_format(online) == ONLINE_FP8
    stored_fp8 = service("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "fp8")
    assert not is_online(stored_fp8) and served_format(stored_fp8) == stored_fp8.stored_format


def test_fp8_on_ampere_runs_as_weight_only_marlin():
    """vLLM 0.33 quantization/online/fp8.py: Fp8PerTensorOnlineLinearMethod takes the kernel
    init_fp8_linear_kernel picks (kernels/linear/__init__.py `_POSSIBLE_FP8_KERNELS`, Marlin last); CUTLASS,
    FlashInfer and torch scaled-mm need FP8 hardware, so A10G/A100 get MarlinFP8ScaledMMLinearKernel (W8A16).
    compressed_tensors.py likewise falls back to CompressedTensorsW8A16Fp8 below capability 8.9."""
    online = service("meta-llama/Llama-3.1-8B-Instruct", "fp8")
    assert kernel(online, gpu("A100-80GB")).startswith("weight-only FP8 Marlin (W8A16, quantized online at load)")
    assert "no FP8 tensor cores" in kernel(online, gpu("A10G"))
    assert kernel(online, gpu("H100")) == "FP8 W8A8 on FP8 tensor cores (quantized online at load)"
    stored = service("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8")
    assert kernel(stored, gpu("L40S")) == "FP8 W8A8 on FP8 tensor cores (as stored)"


def test_four_bit_checkpoints_run_on_marlin():
    """vLLM 0.33 quantization/auto_awq.py and auto_gptq.py `get_quant_method`: Marlin when
    check_marlin_supported(quant_type, group_size, zero_point) holds (capability >= 7.5, group -1/32/64/128)."""
    assert kernel(service("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"), gpu("L4")) == (
        "4-bit weight-only Marlin (W4A16)"
    )
    assert kernel(service("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8"), gpu("A10G")) == (
        "INT8 W8A8 (CUTLASS scaled-mm)"
    )


@pytest.mark.parametrize(
    ("checkpoint", "accepted"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", {"auto", "none"}),
        ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", {"auto", "awq", "int4"}),
        ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", {"auto", "gptq", "int4"}),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", {"auto", "gptq", "int4"}),   # a GPTQ checkpoint
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", {"auto", "int8"}),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", {"auto", "fp8"}),
    ],
)
def test_which_requests_each_stored_format_satisfies(checkpoint, accepted):
    """vLLM 0.33 config/model.py `_verify_quantization`: the checkpoint's method must equal the request
    (after the AWQ/GPTQ overrides); online quantization (fp8 on 16-bit) is separate, see is_online."""
    stored = service(checkpoint).stored_format
    requests = {"auto", "none", "fp8", "int8", "int4", "awq", "gptq"}
    assert {r for r in requests if satisfies(stored, r)} == accepted


def test_formats_have_short_names():
    assert describe(service("Qwen/Qwen2.5-7B-Instruct-AWQ").stored_format) == "AWQ 4-bit group-128"
    assert describe(service("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8").stored_format) == (
        "compressed-tensors W8A8 INT8"
    )


def test_nvfp4_runs_on_fp4_tensor_cores_only_on_blackwell():
    """vLLM 0.33 kernels/linear/nvfp4/: CUTLASS and FlashInfer NVFP4 GEMMs need compute capability 10
    (`is_device_capability_family(100)`); below it MarlinNvFp4LinearKernel dequantizes to 16 bits ("Your GPU does
    not have native support for FP4 computation", any GPU from 7.5, utils/marlin_utils_fp4.py)."""
    nvfp4 = service("nvidia/Llama-3.3-70B-Instruct-FP4")
    assert describe(nvfp4.stored_format) == "NVFP4 W4A4 (ModelOpt; FP4 with an FP8 scale per 16)"
    assert kernel(nvfp4, gpu("B200")) == "NVFP4 on FP4 tensor cores (B200)"
    assert kernel(nvfp4, gpu("H100")).startswith("NVFP4 weight-only (W4A16): H100 has no FP4 tensor cores")
    assert "4.5 bits" in kernel(nvfp4, gpu("H100"))          # 4 bits + an 8-bit scale per 16 weights


def test_weight_only_nvfp4_is_marlin_on_every_gpu():
    """modelopt.py LINEAR_ALGOS: 'W4A16_NVFP4 -> W4A16: FP4 Marlin GEMM with bf16/fp16 activations'."""
    w4a16 = CheckpointFormat(quant_method="modelopt", weight_bits=4, weight_type="float", group_size=16, scale_bits=8)
    model = ModelServiceSpec(name="m", model="meta-llama/Llama-3.3-70B-Instruct", pool="p", checkpoint_format=w4a16)
    assert kernel(model, gpu("B200")).startswith("NVFP4 weight-only (W4A16 FP4 Marlin, as stored)")


@pytest.mark.parametrize(("fields", "says"), [
    ({"quant_method": "modelopt", "weight_bits": 4, "weight_type": "float", "group_size": 32, "scale_bits": 8},
     "blocks of 16"),
    ({"quant_method": "mxfp4", "weight_bits": 4, "weight_type": "float", "group_size": 16, "scale_bits": 8},
     "blocks of 32"),
    ({"quant_method": "awq", "weight_bits": 4, "weight_type": "int", "group_size": 128, "activation_bits": 4},
     "activation_bits 4 is NVFP4's W4A4"),
])
def test_four_bit_float_formats_state_their_block(fields, says):
    with pytest.raises(ValueError, match=says):
        CheckpointFormat(**fields)
