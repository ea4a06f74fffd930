"""The weights pre-fetch script, rendered and run with bash + the AWS CLI against a local moto_server."""

from __future__ import annotations

import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import NamedTuple

import jinja2
import pytest

from inferstack.weights.prefetch import load_template, render_prefetch_script

BUCKET = "inferstack-weights"
PREFIX = "models/Llama 3 8B"
_rng = random.Random(0)
# A small fake model: one file large enough for ranged (multipart) GETs at 5 MiB parts, nested keys,
# a dotfile, and a key with a space.
MODEL_FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"]}\n',
    ".gitattributes": b"*.safetensors filter=lfs\n",
    "model-00001-of-00002.safetensors": _rng.randbytes(12 * 1024 * 1024 + 17),
    "model-00002-of-00002.safetensors": _rng.randbytes(1024 * 1024),
    "tokenizer/tokenizer.json": b'{"version": "1.0"}\n',
    "tokenizer/extra/special tokens.txt": b"<s>\n</s>\n",
}
# Keys that must not be copied: a sibling whose name starts with the same characters, and another model.
OTHER_FILES = {"models/Llama 3 8B-v2/config.json": b"{}", "models/other/weights.bin": b"x" * 10}

BASH = shutil.which("bash")
AWS = shutil.which("aws", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
needs_cli = pytest.mark.skipif(not (BASH and AWS), reason="needs bash and the aws CLI")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MotoServer(NamedTuple):
    endpoint: str
    log: Path  # one line per request, with the HTTP status


@pytest.fixture(scope="session")
def moto(tmp_path_factory):
    """A moto_server on 127.0.0.1, stopped at the end of the session."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"moto_server did not answer on {endpoint}")
            time.sleep(0.1)
    yield MotoServer(endpoint, log_path)
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="session")
def bucket(moto):
    """The fake model uploaded under s3://BUCKET/PREFIX/, plus objects that must not be copied."""
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=moto.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket=BUCKET)
    for key, body in MODEL_FILES.items():
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}", Body=body)
    for key, body in OTHER_FILES.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    return BUCKET


@pytest.fixture
def env(moto, tmp_path):
    """Environment for the script: dummy credentials, moto endpoint, aws on PATH, an empty HOME."""
    home = tmp_path / "home"
    home.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return base | {
        "PATH": f"{Path(AWS).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto.endpoint,
    }


@pytest.fixture(params=["flock", "mkdir"])
def lock_kind(request, env, tmp_path):
    """Run with flock, or with flock hidden from PATH so the script's mkdir lock is used."""
    flock = shutil.which("flock", path=env["PATH"])
    if request.param == "flock":
        if not flock:
            pytest.skip("flock is not installed here")
        return "flock"
    if flock:
        flock_dir = Path(flock).parent.resolve()
        no_flock = tmp_path / "no-flock-bin"
        no_flock.mkdir()
        for entry in flock_dir.iterdir():
            if entry.name != "flock":
                (no_flock / entry.name).symlink_to(entry)
        kept = [d for d in env["PATH"].split(os.pathsep) if d and Path(d).resolve() != flock_dir]
        env["PATH"] = os.pathsep.join([*kept, str(no_flock)])
        assert shutil.which("flock", path=env["PATH"]) is None
    return "mkdir"


def write_script(tmp_path: Path, prefix: str = PREFIX, model_key: str = "llama-3-8b") -> tuple[Path, Path]:
    """Render the script into tmp_path; return (script, cache_dir)."""
    cache_dir = tmp_path / "nvme-cache"
    script = tmp_path / "prefetch.sh"
    script.write_text(
        render_prefetch_script(
            bucket=BUCKET, prefix=prefix, cache_dir=str(cache_dir), model_key=model_key, multipart_chunk_mb=5
        )
    )
    return script, cache_dir


def run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BASH, str(script)], env=env, capture_output=True, text=True, timeout=60)


def write_shim(directory: Path, body: str) -> Path:
    """An `aws` earlier on PATH than the real one, to observe or stall the script's S3 calls."""
    directory.mkdir()
    shim = directory / "aws"
    shim.write_text(f"#!/usr/bin/env bash\n{body}\n")
    shim.chmod(0o755)
    return directory


def assert_cache_matches_s3(model_dir: Path) -> None:
    copied = {
        p.relative_to(model_dir).as_posix(): p.read_bytes()
        for p in model_dir.rglob("*")
        if p.is_file() and not p.name.startswith(".inferstack-")
    }
    assert copied == MODEL_FILES
    manifest = dict(line.split("=", 1) for line in (model_dir / ".inferstack-manifest").read_text().splitlines())
    assert (manifest["objects"], manifest["bytes"]) == (
        str(len(MODEL_FILES)),
        str(sum(len(b) for b in MODEL_FILES.values())),
    )
    assert (model_dir / ".inferstack-complete").is_file()


def leftovers(cache_dir: Path) -> list[str]:
    """Temporary entries that a finished run must not leave behind (lock files may stay)."""
    return sorted(p.name for p in cache_dir.iterdir() if ".partial" in p.name or ".aws-config" in p.name)


# --- rendering -------------------------------------------------------------------------------


def test_a_missing_template_variable_raises():
    with pytest.raises(jinja2.UndefinedError, match="model_key"):
        load_template().render(
            bucket=BUCKET, prefix=PREFIX, cache_dir="/cache", max_concurrent_requests=8, multipart_chunk_mb=8
        )


def test_values_are_shell_quoted():
    hostile = "models/Llama 3 8B; touch /tmp/pwned $(id) `id` 'x'"
    script = render_prefetch_script(bucket=BUCKET, prefix=hostile, cache_dir="/mnt/k8s-disks/0/models", model_key="m")
    (line,) = [line for line in script.splitlines() if line.startswith("prefix=")]
    assert shlex.split(line) == [f"prefix={hostile}"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("bucket", "My_Bucket", "not a valid S3 bucket name"),
        ("bucket", "192.168.1.10", "IP address"),
        ("bucket", "weights..bucket", "'..'"),
        ("prefix", "models/../secrets", "contains '..'"),
        ("prefix", "/", "prefix is empty"),
        ("model_key", "../etc", "single safe directory name"),
        ("model_key", "a..b", "single safe directory name"),
        ("cache_dir", "relative/cache", "not absolute"),
        ("multipart_chunk_mb", 1, "S3 part size"),
    ],
)
def test_invalid_inputs_are_refused(field, value, message):
    args = {"bucket": BUCKET, "prefix": PREFIX, "cache_dir": "/cache", "model_key": "m"} | {field: value}
    with pytest.raises(ValueError, match=message):
        render_prefetch_script(**args)


# --- running against moto_server -------------------------------------------------------------


@needs_cli
@pytest.mark.parametrize("user_config", [None, "[default]\nregion = us-east-1\n"], ids=["no-config", "user-config"])
def test_cold_copy_fills_the_cache_byte_for_byte(bucket, moto, env, tmp_path, user_config):
    config_file = Path(env["HOME"]) / ".aws" / "config"
    if user_config:
        config_file.parent.mkdir()
        config_file.write_text(user_config)
    script, cache_dir = write_script(tmp_path)  # 5 MiB parts
    big_file = urllib.parse.quote(f"/{BUCKET}/{PREFIX}/model-00001-of-00002.safetensors")
    ranged_get = f'"GET {big_file} HTTP/1.1" 206'
    ranged_gets_before = moto.log.read_text().count(ranged_get)

    result = run(script, env)

    assert result.returncode == 0, result.stderr
    assert_cache_matches_s3(cache_dir / "llama-3-8b")
    assert leftovers(cache_dir) == []
    assert f"copied {len(MODEL_FILES)} objects" in result.stdout
    # 12 MiB in 5 MiB parts (the CLI's default is 8 MiB): the transfer settings reached the CLI.
    assert moto.log.read_text().count(ranged_get) - ranged_gets_before == 3
    if user_config:
        assert config_file.read_text() == user_config  # settings went into a private copy
    else:
        assert not config_file.exists()


@needs_cli
def test_warm_hit_makes_no_s3_call(bucket, env, tmp_path):
    script, _ = write_script(tmp_path)
    assert run(script, env).returncode == 0
    calls = tmp_path / "aws-calls.log"
    shim = write_shim(tmp_path / "shim", f'echo "$@" >> {shlex.quote(str(calls))}; exit 1')
    env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{_free_port()}"  # nothing listens there

    result = run(script, env)

    assert result.returncode == 0, result.stderr
    assert "cache hit" in result.stdout
    assert not calls.exists()


@needs_cli
def test_leftover_partial_and_unmarked_copy_are_redone(bucket, env, tmp_path):
    script, cache_dir = write_script(tmp_path)
    (cache_dir / ".llama-3-8b.partial").mkdir(parents=True)
    (cache_dir / ".llama-3-8b.partial" / "model-00001-of-00002.safetensors").write_bytes(b"truncated")
    (cache_dir / ".llama-3-8b.partial" / "model-00003-of-00002.safetensors").write_bytes(b"not in S3")
    (cache_dir / "llama-3-8b").mkdir()
    (cache_dir / "llama-3-8b" / "stale.bin").write_bytes(b"from an older copy")

    result = run(script, env)

    assert result.returncode == 0, result.stderr
    assert_cache_matches_s3(cache_dir / "llama-3-8b")
    assert leftovers(cache_dir) == []


@needs_cli
def test_copy_killed_before_the_marker_is_redone(bucket, env, tmp_path, lock_kind):
    script, cache_dir = write_script(tmp_path)
    copied = tmp_path / "copied"
    shim = write_shim(tmp_path / "shim", f'{shlex.quote(AWS)} "$@"; touch {shlex.quote(str(copied))}; sleep 60')
    stalled = env | {"PATH": f"{shim}{os.pathsep}{env['PATH']}"}
    proc = subprocess.Popen(
        [BASH, str(script)],
        env=stalled,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not copied.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole init container dies: script, aws, heartbeat
    proc.wait()
    assert copied.exists()
    assert (cache_dir / ".llama-3-8b.partial" / "config.json").is_file()  # killed with the data on disk
    assert not (cache_dir / "llama-3-8b" / ".inferstack-complete").exists()
    if lock_kind == "mkdir":  # the killed pod's lock is left behind; pretend its heartbeat stopped long ago
        lock_dir = cache_dir / ".llama-3-8b.lock.d"
        past = time.time() - 600
        os.utime(lock_dir, (past, past))

    result = run(script, env)

    assert result.returncode == 0, result.stderr
    assert_cache_matches_s3(cache_dir / "llama-3-8b")
    assert leftovers(cache_dir) == []
    if lock_kind == "mkdir":
        assert "removed stale lock" in result.stdout


@needs_cli
def test_two_pods_on_one_node_copy_once(bucket, env, tmp_path, lock_kind):
    script, cache_dir = write_script(tmp_path)
    copied = tmp_path / "copied"
    shim_body = f'{shlex.quote(AWS)} "$@"; rc=$?; touch {shlex.quote(str(copied))}; sleep 1; exit $rc'
    shim = write_shim(tmp_path / "shim", shim_body)
    first = subprocess.Popen(
        [BASH, str(script)],
        env=env | {"PATH": f"{shim}{os.pathsep}{env['PATH']}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not copied.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert copied.exists(), "the first pod never reached its copy"

    second = run(script, env)  # starts while the first pod holds the lock
    first_out, first_err = first.communicate(timeout=30)

    assert (first.returncode, second.returncode) == (0, 0), first_err + second.stderr
    assert "cache miss" in first_out
    assert "cache hit after waiting" in second.stdout
    assert "cache miss" not in second.stdout
    assert_cache_matches_s3(cache_dir / "llama-3-8b")


@needs_cli
def test_missing_prefix_fails_with_the_fix(bucket, env, tmp_path):
    script, cache_dir = write_script(tmp_path, prefix="models/not-uploaded", model_key="missing")

    result = run(script, env)

    assert result.returncode != 0
    assert (
        f"prefetch: no objects under s3://{BUCKET}/models/not-uploaded/: "
        "upload the weights there or correct models[].weights"
    ) in result.stderr.splitlines()
    assert not (cache_dir / "missing").exists()
    assert leftovers(cache_dir) == []


@needs_cli
def test_missing_bucket_fails_naming_the_source(bucket, env, tmp_path):
    cache_dir = tmp_path / "nvme-cache"
    script = tmp_path / "prefetch.sh"
    script.write_text(
        render_prefetch_script(bucket="no-such-bucket", prefix="m", cache_dir=str(cache_dir), model_key="m")
    )

    result = run(script, env)

    assert result.returncode != 0
    assert "prefetch: copy from s3://no-such-bucket/m/ failed" in result.stderr
    assert not (cache_dir / "m").exists()
    assert leftovers(cache_dir) == []
