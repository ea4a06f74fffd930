"""`inferstack models`: the catalog as a table, one model's facts and where it fits, a config.json read offline.

Every figure it shows comes from the catalog and planning.sizing.fit; these tests recompute them from those
sources, never from numbers written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from inferstack.catalog import INSTANCE_TYPES
from inferstack.catalog import models as model_catalog
from inferstack.cli import EXIT_BAD_INPUT, main
from inferstack.planning.sizing import fit, parallelism_problem
from inferstack.presentation.models import model_report
from inferstack.spec import ModelArchitecture, ModelServiceSpec, NodePoolSpec
from inferstack.spec.hf_config import architecture_from_config
from inferstack.spec.pools import PoolHardware

# Values of huggingface.co/meta-llama/Llama-3.1-8B's config.json (tests/test_hf_config.py names the copy read),
# with an AWQ quantization_config as AutoAWQ writes it.
LLAMA_AWQ_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "tie_word_embeddings": False, "vocab_size": 128256,
    "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
}


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["models", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def sized(model: str, instance_type: str, tensor_parallel: int, context: int):
    service = ModelServiceSpec(name="check", model=model, pool="p", tensor_parallel=tensor_parallel,
                               max_model_len=context)
    return fit(service, PoolHardware(NodePoolSpec(name="p", instance_types=[instance_type], max_nodes=1)))


def test_the_list_has_every_catalog_model_with_its_kind_params_formats_and_context(capsys):
    status, out, _ = run(capsys, "--json")
    assert status == 0
    rows = {row["name"]: row for row in json.loads(out)["models"]}
    assert set(rows) == set(model_catalog.MODELS)
    for name, row in rows.items():
        arch = ModelServiceSpec(name="check", model=name, pool="p").resolved_architecture
        assert row["context"] == arch.max_context and row["params_billion"] == arch.params_billion
        assert row["active_params_billion"] == arch.active_params_billion
        expected_kind = "embed" if arch.task == "embed" else ("MoE" if arch.experts else "dense")
        assert row["kind"] == expected_kind
        assert row["attention"].startswith(arch.attention.upper())
    # Every catalog checkpoint's stored format shows on its base model's row.
    for checkpoint, facts in model_catalog.CHECKPOINTS.items():
        method = facts["format"]["quant_method"]
        assert any(label.startswith(method) for label in rows[facts["base_model"]]["formats"]), checkpoint


def test_the_text_list_is_a_table_naming_each_model(capsys):
    status, out, _ = run(capsys)
    assert status == 0
    header = out.splitlines()[0].split()
    assert header[:2] == ["MODEL", "KIND"] and "CONTEXT" in header
    for name in model_catalog.MODELS:
        assert name in out


def layouts_that_load(model: str, gpu: str, context: int) -> list[tuple[int, str, int, bool]]:
    """Every (GPUs, instance type, tensor_parallel, expert_parallel) of a catalog node of this GPU on which vLLM
    loads the model and holds one full-length sequence: the split rules (sizing.parallelism_problem, with the block
    rules of vLLM 0.33.0 in planning/shard_blocks.py) and sizing.fit, tried over every node type, tensor-parallel
    size and, for an MoE model, with expert parallelism too."""
    found = []
    for instance in INSTANCE_TYPES.values():
        if instance.gpu.name != gpu:
            continue
        hardware = PoolHardware(NodePoolSpec(name="p", instance_types=[instance.name], max_nodes=1))
        for tensor_parallel in (tp for tp in range(1, instance.gpu_count + 1) if instance.gpu_count % tp == 0):
            for expert_parallel in (None, True):
                service = ModelServiceSpec(name="check", model=model, pool="p", tensor_parallel=tensor_parallel,
                                           max_model_len=context, expert_parallel=expert_parallel)
                if expert_parallel and not service.resolved_architecture.experts:
                    continue
                if parallelism_problem(service) is None and fit(service, hardware).starts:
                    found.append((tensor_parallel, instance.name, tensor_parallel, service.resolved_expert_parallel))
    return found


def test_one_model_fits_each_gpu_kind_on_the_fewest_gpus_at_full_context_and_8192(capsys):
    """Llama-3.1-8B in 16 bits: one GPU of the smallest type where that holds it; at 131,072 tokens an A10G or L4
    (22,888 MiB x 0.92 = 20.56 GiB) cannot hold 14.96 GiB of weights plus 16 GiB of KV (131,072 x 131,072 bytes), so
    two GPUs of a 4-GPU node."""
    status, out, _ = run(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--json")
    assert status == 0
    report = json.loads(out)
    gpus = {t.gpu.name for t in INSTANCE_TYPES.values()}
    assert {f["gpu"] for f in report["fits"]} == gpus
    assert {f["context"] for f in report["fits"]} == {131072, 8192}
    for row in report["fits"]:
        expected = sized(report["name"], row["instance_type"], row["tensor_parallel"], row["context"])
        assert (row["fits"], row["sequences"], row["kv_cache_tokens"]) == (
            expected.starts, expected.max_concurrency, expected.kv_tokens)
        # No layout of fewer GPUs loads.
        assert row["tensor_parallel"] == min(layouts_that_load(report["name"], row["gpu"], row["context"]))[0]
        if row["tensor_parallel"] == 1:
            same_gpu = [t for t in INSTANCE_TYPES.values() if t.gpu.name == row["gpu"]]
            assert row["gpus_per_node"] == min(t.gpu_count for t in same_gpu)
    a10g_long = next(r for r in report["fits"] if r["gpu"] == "A10G" and r["context"] == 131072)
    assert (a10g_long["instance_type"], a10g_long["tensor_parallel"]) == ("g5.12xlarge", 2)


def test_a_model_one_gpu_cannot_hold_spans_the_nodes_gpus(capsys):
    """DeepSeek-V3 (671B, FP8: 626.64 GiB of weights) needs several GPUs wherever it fits, and no 8 x H100 node
    holds it (8 x 80 GiB x 0.92 = 588.8 GiB)."""
    status, out, _ = run(capsys, "deepseek-ai/DeepSeek-V3", "--json")
    assert status == 0
    report = json.loads(out)
    assert report["kind"] == "MoE" and report["architecture"]["attention"] == "mla"
    for row in report["fits"]:
        if row["fits"]:
            assert row["tensor_parallel"] > 1
    assert not any(row["fits"] for row in report["fits"] if row["gpu"] == "H100")


def test_gpt_oss_120b_fits_four_a10gs_at_tensor_parallel_4(capsys):
    """Issue 27 item 7: one A10G (20.56 GiB) cannot hold gpt-oss-120b's 60.77 GiB, but the catalog's 4-GPU A10G node
    (g5.12xlarge) does at tensor_parallel 4 (64 heads and 8 KV heads divide by 4; MXFP4 experts are padded, vLLM
    0.33.0 quantization/mxfp4.py:196); the row says so instead of no."""
    status, out, _ = run(capsys, "openai/gpt-oss-120b", "--json")
    assert status == 0
    for row in (r for r in json.loads(out)["fits"] if r["gpu"] == "A10G"):
        assert (row["fits"], row["instance_type"], row["tensor_parallel"]) == (True, "g5.12xlarge", 4)
        expected = sized("openai/gpt-oss-120b", "g5.12xlarge", 4, row["context"])
        assert row["sequences"] == expected.max_concurrency >= 1


@pytest.mark.parametrize("name", sorted(model_catalog.known_model_ids()))
def test_every_row_agrees_with_the_layouts_vllm_loads(name: str):
    """Every catalog entry x GPU: a row says fits exactly when some layout of a node of that GPU loads (the split
    and block rules, then sizing), and then on the fewest GPUs that do; its layout itself passes the rules."""
    for row in model_report(name)["fits"]:
        loads = layouts_that_load(name, row["gpu"], row["context"])
        assert row["fits"] == bool(loads), row
        if row["fits"]:
            assert row["tensor_parallel"] == min(loads)[0], row
            layout = ModelServiceSpec(name="check", model=name, pool="p", tensor_parallel=row["tensor_parallel"],
                                      max_model_len=row["context"], expert_parallel=row["expert_parallel"])
            assert parallelism_problem(layout) is None, row


def test_a_checkpoint_shows_its_base_model_and_stored_format_with_sources(capsys):
    checkpoint = next(iter(model_catalog.CHECKPOINTS))
    status, out, _ = run(capsys, checkpoint, "--json")
    assert status == 0
    report = json.loads(out)
    facts = model_catalog.CHECKPOINTS[checkpoint]
    assert report["base_model"] == facts["base_model"]
    assert report["stored_format"]["quant_method"] == facts["format"]["quant_method"]
    assert report["stored_format_source"] == facts["source"]
    assert report["source"] == model_catalog.model_source(facts["base_model"])


def test_the_text_report_names_the_facts_and_the_fit_table(capsys):
    status, out, _ = run(capsys, "meta-llama/Llama-3.1-8B-Instruct")
    assert status == 0
    assert "kind: dense" in out and "layers: 32" in out and "source:" in out
    assert "GPU" in out and "SEQUENCES" in out and "g6e.xlarge" in out


def test_an_unknown_name_exits_2_with_did_you_mean(capsys):
    status, out, err = run(capsys, "meta-llama/Llama-3.1-8B-Instruc")
    assert status == EXIT_BAD_INPUT and out == ""
    assert "did you mean 'meta-llama/Llama-3.1-8B-Instruct'" in err and "Traceback" not in err


def test_a_short_name_is_matched_on_the_part_after_the_organisation(capsys):
    status, _, err = run(capsys, "gpt-oss-120")
    assert status == EXIT_BAD_INPUT and "did you mean 'openai/gpt-oss-120b'" in err


def test_config_prints_yaml_a_model_service_accepts(tmp_path: Path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_AWQ_CONFIG), encoding="utf-8")
    status, out, _ = run(capsys, "--config", str(tmp_path))
    assert status == 0
    reading = yaml.safe_load(out)
    assert ModelArchitecture(**reading["architecture"]) == architecture_from_config(tmp_path)
    service = ModelServiceSpec(name="mine", model="me/llama-awq", pool="p", **reading)
    assert service.stored_format.quant_method == "awq" and service.resolved_architecture.layers == 32


def test_config_json_output_matches_the_yaml(tmp_path: Path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_AWQ_CONFIG), encoding="utf-8")
    _, as_yaml, _ = run(capsys, "--config", str(path))
    status, as_json, _ = run(capsys, "--config", str(path), "--json")
    assert status == 0 and json.loads(as_json) == yaml.safe_load(as_yaml)


def test_a_malformed_config_exits_2_at_its_line_and_column(tmp_path: Path, capsys):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096,\n "layers" 32}', encoding="utf-8")
    status, _, err = run(capsys, "--config", str(path))
    assert status == EXIT_BAD_INPUT and f"{path}:2:11: not valid JSON" in err


def test_a_name_and_a_config_together_are_refused(tmp_path: Path, capsys):
    status, _, err = run(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--config", str(tmp_path))
    assert status == EXIT_BAD_INPUT and "one of them" in err


@pytest.mark.parametrize("name", sorted(model_catalog.MODELS))
def test_every_catalog_model_has_a_report(capsys, name: str):
    status, out, _ = run(capsys, name, "--json")
    report = json.loads(out)
    assert status == 0 and report["name"] == name and report["source"] == model_catalog.model_source(name)


def test_the_attention_column_names_chunked_local_attention():
    """Llama 4's 36 chunked layers hold one 8192-token chunk (vLLM 0.33.0 model_executor/models/llama4.py builds
    ChunkedLocalAttention where no_rope_layers[i] is 1), which is why its KV is far below 48 full layers': the
    column says so."""
    from inferstack.presentation.models import architecture, attention

    assert attention(architecture("meta-llama/Llama-4-Scout-17B-16E-Instruct")) == "GQA + 8192-token chunks on 36/48 layers"
    assert attention(architecture("openai/gpt-oss-120b")) == "GQA + window 128 on 18/36 layers"
