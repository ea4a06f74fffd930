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
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", {"auto", "int4"}),
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
