"""Stack files run through the real CLI, as a user runs `inferstack`: a child process, so a traceback would show.

Shared by the CLI error tests and the refusal corpus: each refusal is one line on stderr naming the file, the
field and the fix, exit 2, and nothing written under --out. `rejection` and `refusal` give the same error in
process, for tests that read its path, problem and fix.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from inferstack.cli import EXIT_BAD_INPUT, main
from inferstack.spec import SpecError, StackSpec, describe_validation_error
from inferstack.validation import validate

REPO = Path(__file__).resolve().parents[1]


def rejection(document: dict) -> SpecError:
    """The one error a bad spec produces, as the CLI reports it: a field's own check or a spec-time refusal."""
    with pytest.raises((SpecError, ValidationError)) as caught:
        validate(StackSpec.model_validate(document))
    error = caught.value
    return describe_validation_error(error, StackSpec) if isinstance(error, ValidationError) else error


def refusal(document: dict) -> SpecError:
    """The spec-time refusal of a spec whose fields are each valid (a ValidationError fails the test)."""
    with pytest.raises(SpecError) as caught:
        validate(StackSpec.model_validate(document))
    return caught.value

DEV = (REPO / "stacks" / "dev.py").read_text()
PROD = (REPO / "stacks" / "prod.py").read_text()


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "inferstack.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def reader_stops_after_one_line(*args: str) -> tuple[bytes, int, bytes]:
    """Run the CLI into a reader that leaves after the first line, as `inferstack ... | head -1` does: (that line,
    exit status, stderr). The pipe is shrunk to one page (Linux F_SETPIPE_SZ), so the command is still writing when
    the reader leaves and meets the broken pipe, however little it prints."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    process = subprocess.Popen([sys.executable, "-m", "inferstack.cli", *args], cwd=REPO, stdout=write_end,
                               stderr=subprocess.PIPE)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        first = reader.readline()
    _, stderr = process.communicate(timeout=120)
    return first, process.returncode, stderr


def edited(source: str, *replacements: tuple[str, str]) -> str:
    """A shipped stack file with edits, so each case is that stack plus one mistake."""
    for old, new in replacements:
        assert source.count(old) == 1, f"the stack file no longer contains {old!r} exactly once"
        source = source.replace(old, new)
    return source


def dev_with(old: str, new: str) -> str:
    return edited(DEV, (old, new))


def one_line_refusal(output: str) -> str:
    assert "Traceback" not in output
    message = output.strip()
    assert message.count("\n") == 0, message
    assert message.startswith("inferstack: ") and "To fix:" in message, message
    return message


def refused_stack_file(stacks: Path, out: Path, name: str, text: str) -> str:
    """Write a stack file, render it: exit 2, nothing written, and the one-line refusal it printed."""
    (stacks / name).write_text(text)
    result = run_cli("render", Path(name).stem, "--stacks-dir", str(stacks), "--out", str(out))
    assert result.returncode == EXIT_BAD_INPUT
    assert not out.exists()
    return one_line_refusal(result.stderr)


def refused_by_render_and_plan(path: Path, out: Path) -> str:
    """`render <file> --out` and `plan <file>` both exit 2 with the same one line, print no traceback and no plan,
    and nothing is written under --out; returns that line."""
    rendered = run_cli("render", str(path), "--out", str(out))
    planned = run_cli("plan", str(path))
    for result in (rendered, planned):
        assert "Traceback" not in result.stdout + result.stderr
        assert result.returncode == EXIT_BAD_INPUT, result.stdout + result.stderr
        assert result.stdout == ""
    assert not out.exists(), "nothing is rendered for a refused stack"
    message = one_line_refusal(rendered.stderr)
    assert one_line_refusal(planned.stderr) == message
    return message


def rendered_objects(spec: StackSpec, where: Path) -> tuple[int, list[dict]]:
    """A spec built in a test written as a stack file and rendered in-process: the exit status, and the Kubernetes
    objects written (none unless it rendered)."""
    stacks, out = where / "stacks", where / "out"
    stacks.mkdir(parents=True)
    (stacks / "edited.py").write_text("from inferstack.spec import StackSpec\n"
                                      f"stack = StackSpec.model_validate_json({spec.model_dump_json(exclude_none=True)!r})\n")
    code = main(["render", "edited", "--stacks-dir", str(stacks), "--out", str(out)])
    objects = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))] if code == 0 else []
    return code, objects
