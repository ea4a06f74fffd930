"""A render is a pure function of the stack: two renders of the same stack are the same bytes.

Reviews diff renders (`inferstack diff`, CI artefacts) and moving code must not change them, so nothing in a
render may depend on time, process, dict order or the machine: this test renders each shipped stack twice, in
two processes, and compares every file byte for byte.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def render(stack: str, out: Path) -> dict[str, bytes]:
    subprocess.run([sys.executable, "-m", "inferstack.cli", "render", stack, "--out", str(out)], cwd=REPO,
                   check=True, capture_output=True, timeout=300)
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_two_renders_of_a_stack_are_byte_identical(stack, tmp_path):
    first, second = render(stack, tmp_path / "first"), render(stack, tmp_path / "second")
    assert {"resources.json", "plan.json"} <= set(first)
    assert any(name.startswith("kubernetes/") for name in first)
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []
