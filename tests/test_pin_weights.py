"""pin-weights.sh: vLLM is handed the weights version the cache's symlink points at when it starts.

The pre-fetch script publishes a version by rename(2)-ing a new symlink over the stable path
(templates/prefetch.sh.j2; man7.org/linux/man-pages/man2/rename.2.html): later path lookups see the
new target. vLLM opens its weight files one after another while it loads (vllm-project/vllm v0.33.0
vllm/model_executor/model_loader/weight_utils.py, `safetensors_weights_iterator` over the file list),
so given the stable path it could read old files, then new ones. These tests run the rendered script
with bash and readlink (coreutils) against a real symlinked cache.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from inferstack.weights.prefetch import render_pin_script

ECHO_ARGS = ["python3", "-c", "import sys; print('\\n'.join(sys.argv[1:]))"]


def cache(tmp_path: Path) -> tuple[Path, Path]:
    """A cache with one published version: <tmp>/models/m -> .versions/m/v1 (relative, as published)."""
    version = tmp_path / "models" / ".versions" / "m" / "v1"
    version.mkdir(parents=True)
    (version / "config.json").write_text("{}", encoding="utf-8")
    link = tmp_path / "models" / "m"
    link.symlink_to(Path(".versions") / "m" / "v1")
    return link, version


def run_pinned(tmp_path: Path, link: Path, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "pin-weights.sh"
    script.write_text(render_pin_script(str(link)), encoding="utf-8")
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=dict(os.environ))


def test_the_published_path_becomes_the_version_it_resolves_to(tmp_path):
    link, version = cache(tmp_path)
    result = run_pinned(tmp_path, link, *ECHO_ARGS, "serve", str(link), "--max-model-len", "8192")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["serve", str(version), "--max-model-len", "8192"]


def test_a_version_published_after_the_start_does_not_reach_the_running_process(tmp_path):
    """The process keeps reading the directory it was given while the link moves on."""
    link, version = cache(tmp_path)
    newer = version.parent / "v2"
    newer.mkdir()
    (newer / "config.json").write_text('{"new": true}', encoding="utf-8")
    # Says it has started, waits until the new version is published, then reads its weights.
    reader = "import sys; print('started', flush=True); sys.stdin.readline(); print(open(sys.argv[1] + '/config.json').read())"
    script = tmp_path / "pin-weights.sh"
    script.write_text(render_pin_script(str(link)), encoding="utf-8")
    process = subprocess.Popen(
        ["bash", str(script), "python3", "-c", reader, str(link)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "started"
    staged = link.parent / ".m.link"
    staged.symlink_to(Path(".versions") / "m" / "v2")
    os.rename(staged, link)  # what the pre-fetch script's `mv -T` does
    output, _ = process.communicate("published\n", timeout=30)
    assert process.returncode == 0 and output.strip() == "{}"
    assert run_pinned(tmp_path, link, *ECHO_ARGS, str(link)).stdout.strip() == str(newer)


def test_a_link_to_nothing_fails_before_vllm_starts(tmp_path):
    link = tmp_path / "models" / "m"
    link.parent.mkdir()
    link.symlink_to(Path(".versions") / "m" / "gone")
    result = run_pinned(tmp_path, link, *ECHO_ARGS, str(link))
    assert result.returncode == 1 and result.stdout == ""
    assert f"{link} resolves to no weights on this node" in result.stderr


@pytest.mark.parametrize("bad", ["models/m", "/models/../etc"])
def test_the_published_path_must_be_absolute_and_plain(bad):
    with pytest.raises(ValueError):
        render_pin_script(bad)
