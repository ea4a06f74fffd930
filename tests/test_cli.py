"""The CLI's contract for bad input: one message with the field path and the fix, exit 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from inferstack.cli import main

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "inferstack.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def stacks(tmp_path: Path) -> Path:
    folder = tmp_path / "stacks"
    folder.mkdir()
    return folder


def test_schema_prints_the_spec_json_schema(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "StackSpec" and "node_pools" in schema["required"]


def test_bad_python_stack_names_file_line_model_and_field(stacks: Path):
    (stacks / "bad.py").write_text(
        textwrap.dedent(
            """
            from inferstack.spec import NodePoolSpec, StackSpec

            stack = StackSpec(
                environment="bad",
                node_pools=[
                    NodePoolSpec(name="gpu", instance_types=["g6.xlarge"], max_nodes=2, maxnodes=3),
                ],
            )
            """
        )
    )
    result = run_cli("plan", "bad", "--stacks-dir", str(stacks))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    message = result.stderr.strip()
    assert message.count("\n") == 0
    assert "bad.py:line 7: NodePoolSpec.maxnodes" in message and "did you mean 'max_nodes'" in message
    assert "To fix:" in message


def test_cross_field_error_from_a_yaml_stack(stacks: Path):
    (stacks / "bad.yaml").write_text(
        textwrap.dedent(
            """
            environment: bad
            node_pools:
              - {name: gpu, instance_types: [g6.xlarge], max_nodes: 2}
            models:
              - {name: m, model: Qwen/Qwen3-8B, pool: gpus}
            """
        )
    )
    result = run_cli("render", "bad", "--stacks-dir", str(stacks), "--out", str(stacks / "out"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "inferstack: bad.yaml: models[0].pool: 'gpus' is not a node pool (did you mean 'gpu'?); defined pools: "
        "'gpu'. To fix: set pool to one of them, to 'auto', or add a node pool with that name"
    )
    assert not (stacks / "out").exists(), "nothing is rendered for an invalid spec"


def test_unknown_stack_lists_the_known_ones(stacks: Path):
    (stacks / "dev.yaml").write_text("environment: dev\nnode_pools: []\n")
    result = run_cli("plan", "prod", "--stacks-dir", str(stacks))
    assert result.returncode == 2
    assert "no stack 'prod'" in result.stderr and "stacks: dev" in result.stderr


def test_malformed_yaml_is_a_clear_error(stacks: Path):
    (stacks / "broken.yaml").write_text("environment: [unclosed\n")
    result = run_cli("plan", "broken", "--stacks-dir", str(stacks))
    assert result.returncode == 2 and "is not valid YAML" in result.stderr and "Traceback" not in result.stderr
