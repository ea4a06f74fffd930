"""The CLI's contract for bad input: one message with the field path and the fix, exit 2, no traceback."""

from __future__ import annotations

import json
import os
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


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (b"from inferstack.spec import StackSpec\nstack = StackSpec(\n", "syn.py:line 2: is not valid Python"),
        (b"import no_such_module_here\n", "syn.py:line 1: raised ModuleNotFoundError"),
        (b"stack = undefined_name\n", "syn.py:line 1: raised NameError"),
        (b'raise RuntimeError("boom")\n', "syn.py:line 1: raised RuntimeError: boom"),
        (b"\xff\xfe\x00 not python", "syn.py:its source: is not valid Python"),
    ],
    ids=["syntax", "import", "name", "raise", "binary"],
)
def test_a_python_stack_that_does_not_run_is_one_line_with_file_and_line(stacks: Path, source: bytes, expected: str):
    (stacks / "syn.py").write_bytes(source)
    result = run_cli("plan", "syn", "--stacks-dir", str(stacks))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and expected in result.stderr and "To fix:" in result.stderr


def test_a_yaml_stack_that_is_not_utf8_is_one_line(stacks: Path):
    (stacks / "bin.yaml").write_bytes(b"\xff\xfeenvironment: x\n")
    result = run_cli("plan", "bin", "--stacks-dir", str(stacks))
    assert result.returncode == 2 and "is not UTF-8 text" in result.stderr and "Traceback" not in result.stderr


def test_render_into_a_file_is_bad_input_not_a_traceback(tmp_path: Path):
    target = tmp_path / "a-file"
    target.write_text("x")
    result = run_cli("render", "dev", "--out", str(target))
    assert result.returncode == 2 and "cannot write the render to" in result.stderr and "Traceback" not in result.stderr


def test_output_into_a_closed_pipe_is_not_an_error():
    """A reader that stops early (`inferstack schema | head -1`) is not a failure of the command."""
    process = subprocess.Popen([sys.executable, "-m", "inferstack.cli", "schema"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0 and b"Traceback" not in stderr


@pytest.mark.parametrize("document", ["[]", '[{"type": "x"}]', '["a"]', "{}", b"\xff\xfe"], ids=["empty", "no-name", "string", "object", "binary"])
def test_diff_against_a_malformed_render_is_bad_input(tmp_path: Path, document):
    folder = tmp_path / "render"
    folder.mkdir()
    (folder / "resources.json").write_bytes(document if isinstance(document, bytes) else document.encode())
    result = run_cli("diff", "dev", "--against", str(folder))
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stderr.strip().count("\n") == 0
    assert "To fix:" in result.stderr


def test_diff_against_a_revision_reads_yaml_stacks_from_the_stacks_dir(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "stacks").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    import yaml as _yaml  # the YAML form of dev, as a team would commit it
    from inferstack.stacks import load_stack

    document = load_stack(REPO / "stacks", "dev").model_dump(mode="json", exclude_unset=True)
    (repo / "stacks" / "ydev.yaml").write_text(_yaml.safe_dump(document))
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "dev as yaml"], check=True, env=env)
    result = run_cli("diff", "ydev", "--stacks-dir", str(repo / "stacks"), "--against", "HEAD", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["replaced"] == []
    missing = run_cli("diff", "ydev", "--stacks-dir", str(repo / "stacks"), "--against", "no-such-rev")
    assert missing.returncode == 2 and "To fix:" in missing.stderr
