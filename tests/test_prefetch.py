"""The weights pre-fetch script, rendered and run with bash + the AWS CLI against a local moto_server.

Upstream behaviour these tests encode (each named where it is relied on):
* S3 ListObjectsV2 lists every key under a prefix with its ETag and size, and an object's ETag changes
  when its content is rewritten, not when identical bytes are uploaded again (Amazon S3 API reference,
  API_ListObjectsV2.html and the `Object` data type, API_Object.html). moto_server implements both.
* The AWS CLI follows ListObjectsV2 continuation tokens by itself ("Using the AWS CLI pagination
  options", docs.aws.amazon.com/cli/latest/userguide/cli-usage-pagination.html), and
  `aws s3 cp --recursive` creates no file for a zero-byte "folder" key (AWS CLI `s3 cp` reference).
* flock(1) from util-linux serialises the pods of a node; without it an atomic mkdir(2) does.
* rename(2) replaces the published symlink atomically; a relative symlink resolves inside whichever
  mount shows the cache (man7 rename(2), symlink(7)).
"""

from __future__ import annotations

import hashlib
import itertools
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

from inferstack.spec import NodePoolSpec
from inferstack.spec.pools import PoolHardware
from inferstack.planning.pool_capacity import pool_cache_budget_bytes
from inferstack.weights.prefetch import load_template, render_prefetch_script

BUCKET = "inferstack-weights"
PREFIX = "models/Llama 3 8B"
_rng = random.Random(0)
# A small fake model: one file large enough for ranged (multipart) GETs at 5 MiB parts, nested keys,
# a dotfile, a key with a space and a console "folder" placeholder.
MODEL_FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"]}\n',
    ".gitattributes": b"*.safetensors filter=lfs\n",
    "model-00001-of-00002.safetensors": _rng.randbytes(12 * 1024 * 1024 + 17),
    "model-00002-of-00002.safetensors": _rng.randbytes(1024 * 1024),
    "tokenizer/tokenizer.json": b'{"version": "1.0"}\n',
    "tokenizer/extra/special tokens.txt": b"<s>\n</s>\n",
}
FOLDER_KEY = "tokenizer/"
# Keys that must not be copied: a sibling whose name starts with the same characters, and another model.
OTHER_FILES = {"models/Llama 3 8B-v2/config.json": b"{}", "models/other/weights.bin": b"x" * 10}
HUGE_BUDGET = 10**12
SMALL_MODEL_BYTES = 1000  # what small_model() uploads

BASH = shutil.which("bash")
AWS = shutil.which("aws", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
needs_cli = pytest.mark.skipif(not (BASH and AWS), reason="needs bash and the aws CLI")
_prefixes = itertools.count()


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
def s3(moto):
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=moto.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture(scope="session")
def bucket(s3):
    """The fake model uploaded under s3://BUCKET/PREFIX/, plus objects that must not be copied."""
    upload(s3, PREFIX, MODEL_FILES)
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{FOLDER_KEY}", Body=b"")
    for key, body in OTHER_FILES.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    return BUCKET


def upload(s3, prefix: str, files: dict[str, bytes]) -> None:
    """Make `prefix` hold exactly `files`, as a re-upload under the same prefix would."""
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/").get("Contents", [])
    for stale in {o["Key"] for o in listed} - {f"{prefix}/{k}" for k in files}:
        s3.delete_object(Bucket=BUCKET, Key=stale)
    for key, body in files.items():
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=body)


def small_model(tag: str) -> dict[str, bytes]:
    """SMALL_MODEL_BYTES of weights whose content depends on `tag`: a re-upload with another tag has
    the same keys and sizes, so only the ETags tell the versions apart."""
    config = b'{"model_type": "llama"}\n'
    weights = hashlib.sha256(tag.encode()).digest() * (SMALL_MODEL_BYTES // 32 + 1)
    return {"config.json": config, "model.safetensors": weights[: SMALL_MODEL_BYTES - len(config)]}


@pytest.fixture
def new_prefix(s3):
    """A prefix no other test uses, so a test may re-upload under it."""
    return f"models/t{next(_prefixes)}"


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


def write_script(
    tmp_path: Path, prefix: str = PREFIX, model_key: str = "llama-3-8b", budget: int = HUGE_BUDGET
) -> tuple[Path, Path]:
    """Render the script into tmp_path (one file per model key); return (script, cache_dir)."""
    cache_dir = tmp_path / "nvme-cache"
    script = tmp_path / f"prefetch-{model_key}.sh"
    script.write_text(
        render_prefetch_script(
            bucket=BUCKET,
            prefix=prefix,
            cache_dir=str(cache_dir),
            model_key=model_key,
            cache_budget_bytes=budget,
            multipart_chunk_mb=5,
        )
    )
    return script, cache_dir


def run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BASH, str(script)], env=env, capture_output=True, text=True, timeout=120)


def run_ok(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = run(script, env)
    assert result.returncode == 0, result.stderr
    return result


def write_shim(directory: Path, body: str) -> Path:
    """An `aws` earlier on PATH than the real one, to observe or stall the script's S3 calls."""
    directory.mkdir()
    shim = directory / "aws"
    shim.write_text(f"#!/usr/bin/env bash\n{body}\n")
    shim.chmod(0o755)
    return directory


def on_copy(then: str) -> str:
    """Shim body: run every call for real; after `s3 cp` (not the listings) also run `then`."""
    return f'{shlex.quote(AWS)} "$@"; rc=$?; case " $* " in *" s3 cp "*) {then};; esac; exit $rc'


def content_digest(s3, prefix: str) -> str:
    """The version the script must compute, from boto3's own listing: sha256 of the sorted
    key<TAB>ETag<TAB>size lines, each ending in a newline."""
    rows = [
        f"{o['Key']}\t{o['ETag']}\t{o['Size']}"
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/")
        for o in page.get("Contents", [])
    ]
    return hashlib.sha256("".join(f"{row}\n" for row in sorted(rows)).encode()).hexdigest()


def published(cache_dir: Path, model_key: str) -> str:
    """The digest the stable path points at; the link must be relative and stay inside the cache."""
    link = cache_dir / model_key
    target = os.readlink(link)
    assert target.startswith(f".versions/{model_key}/"), target
    assert link.resolve().parent.parent.parent == cache_dir.resolve()
    return Path(target).name


def versions(cache_dir: Path, model_key: str) -> set[str]:
    root = cache_dir / ".versions" / model_key
    return {p.name for p in root.iterdir() if not p.name.startswith(".")} if root.exists() else set()


def files_under(model_dir: Path) -> dict[str, bytes]:
    return {
        p.relative_to(model_dir).as_posix(): p.read_bytes()
        for p in model_dir.rglob("*")
        if p.is_file() and not p.name.startswith(".inferstack-")
    }


def assert_cache_matches(model_dir: Path, files: dict[str, bytes]) -> None:
    assert files_under(model_dir) == files
    manifest = dict(line.split("=", 1) for line in (model_dir / ".inferstack-manifest").read_text().splitlines())
    assert (manifest["objects"], manifest["bytes"]) == (str(len(files)), str(sum(len(b) for b in files.values())))


def leftovers(cache_dir: Path) -> list[str]:
    """Temporary entries that a finished run must not leave behind (lock files may stay)."""
    entries = [*cache_dir.iterdir(), *cache_dir.glob(".versions/*"), *cache_dir.glob(".versions/*/*")]
    temporary = (".partial", ".evicting", ".legacy", ".aws-config", ".link")
    return sorted(p.name for p in entries if any(t in p.name for t in temporary))


def object_gets(moto: MotoServer, prefix: str) -> int:
    """GETs of objects (not listings) under `prefix` in moto's request log so far."""
    path = urllib.parse.quote(f"/{BUCKET}/{prefix}/")
    return sum(1 for line in moto.log.read_text().splitlines() if f'"GET {path}' in line)


# --- rendering -------------------------------------------------------------------------------


def test_a_missing_template_variable_raises():
    with pytest.raises(jinja2.UndefinedError, match="model_key"):
        load_template().render(
            bucket=BUCKET,
            prefix=PREFIX,
            cache_dir="/cache",
            cache_budget_bytes=1,
            max_concurrent_requests=8,
            multipart_chunk_mb=8,
        )


def test_values_are_shell_quoted():
    hostile = "models/Llama 3 8B; touch /tmp/pwned $(id) `id` 'x'"
    script = render_prefetch_script(
        bucket=BUCKET, prefix=hostile, cache_dir="/mnt/k8s-disks/0/models", model_key="m", cache_budget_bytes=1
    )
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
        ("model_key", ".versions", "single safe directory name"),
        ("cache_dir", "relative/cache", "not absolute"),
        ("cache_budget_bytes", 0, "not positive"),
        ("multipart_chunk_mb", 1, "S3 part size"),
    ],
)
def test_invalid_inputs_are_refused(field, value, message):
    args = {"bucket": BUCKET, "prefix": PREFIX, "cache_dir": "/cache", "model_key": "m", "cache_budget_bytes": 1}
    with pytest.raises(ValueError, match=message):
        render_prefetch_script(**args | {field: value})


@pytest.mark.parametrize(
    ("pool", "volume_bytes"),
    [
        ({"instance_types": ["g6.xlarge"]}, 250 * 10**9),  # 1 x 250 GB
        ({"instance_types": ["g6.2xlarge", "g6.xlarge"]}, 250 * 10**9),  # a pod may land on the smaller
        ({"instance_types": ["p5.48xlarge"]}, 8 * 3800 * 10**9),  # RAID0 stripes all 8 disks
        ({"instance_types": ["p5.48xlarge"], "nvme_cache": {"raid": "RAID10"}}, 4 * 3800 * 10**9),  # mirrored
        ({"instance_types": ["g6.xlarge"], "nvme_cache": False, "disk_size_gib": 300}, 300 * 1024**3),
    ],
    ids=["one-disk", "smallest-type", "raid0", "raid10", "root-volume"],
)
def test_cache_budget_is_a_share_of_the_volume_under_the_cache(pool, volume_bytes):
    """nodeadm's setup-local-disks builds one md array over every instance-store disk, striped (RAID0)
    or mirrored in pairs (RAID10), and mounts it at /mnt/k8s-disks/0 (awslabs/amazon-eks-ami @81fec2e,
    templates/al2023/runtime/bin/setup-local-disks); EC2 gives instance-store sizes in decimal GB."""
    spec = NodePoolSpec(name="p", max_nodes=1, **pool)
    assert pool_cache_budget_bytes(PoolHardware(spec)) == volume_bytes * 80 // 100
    narrower = spec.model_copy(update={"nvme_cache": spec.nvme_cache.model_copy(update={"budget_percent": 50})})
    assert pool_cache_budget_bytes(PoolHardware(narrower)) == volume_bytes // 2


@pytest.mark.parametrize("percent", [5, 99])
def test_budget_percent_outside_its_range_is_refused(percent):
    with pytest.raises(ValueError, match="budget_percent"):
        NodePoolSpec(name="p", max_nodes=1, instance_types=["g6.xlarge"], nvme_cache={"budget_percent": percent})


# --- running against moto_server -------------------------------------------------------------


@needs_cli
@pytest.mark.parametrize("user_config", [None, "[default]\nregion = us-east-1\n"], ids=["no-config", "user-config"])
def test_cold_copy_publishes_a_content_version(bucket, s3, moto, env, tmp_path, user_config):
    config_file = Path(env["HOME"]) / ".aws" / "config"
    if user_config:
        config_file.parent.mkdir()
        config_file.write_text(user_config)
    script, cache_dir = write_script(tmp_path)  # 5 MiB parts
    big_file = urllib.parse.quote(f"/{BUCKET}/{PREFIX}/model-00001-of-00002.safetensors")
    ranged_get = f'"GET {big_file} HTTP/1.1" 206'
    ranged_gets_before = moto.log.read_text().count(ranged_get)

    result = run_ok(script, env)

    assert published(cache_dir, "llama-3-8b") == content_digest(s3, PREFIX)
    assert_cache_matches(cache_dir / "llama-3-8b", MODEL_FILES)  # the folder key made no file
    assert leftovers(cache_dir) == []
    assert f"copied {len(MODEL_FILES)} objects" in result.stdout
    # 12 MiB in 5 MiB parts (the CLI's default is 8 MiB): the transfer settings reached the CLI.
    assert moto.log.read_text().count(ranged_get) - ranged_gets_before == 3
    if user_config:
        assert config_file.read_text() == user_config  # settings went into a private copy
    else:
        assert not config_file.exists()


@needs_cli
def test_the_published_path_resolves_wherever_the_cache_is_mounted(bucket, env, tmp_path):
    """vLLM mounts the same hostPath read-only: the relative link must resolve inside any mount of it."""
    script, cache_dir = write_script(tmp_path)
    run_ok(script, env)
    elsewhere = tmp_path / "mounted-elsewhere"
    cache_dir.rename(elsewhere)
    assert files_under(elsewhere / "llama-3-8b") == MODEL_FILES


@needs_cli
def test_warm_node_with_unchanged_content_copies_nothing(bucket, moto, env, tmp_path):
    script, cache_dir = write_script(tmp_path)
    run_ok(script, env)
    model_dir = cache_dir / "llama-3-8b"
    before = {p: p.stat().st_mtime_ns for p in model_dir.resolve().rglob("*") if p.name != ".inferstack-used"}
    gets_before = object_gets(moto, PREFIX)

    result = run_ok(script, env)

    assert "cache hit" in result.stdout and "cache miss" not in result.stdout
    assert object_gets(moto, PREFIX) == gets_before  # only the listing was asked for
    assert {p: p.stat().st_mtime_ns for p in before} == before


@needs_cli
@pytest.mark.parametrize("budget", [HUGE_BUDGET, SMALL_MODEL_BYTES * 3 // 2], ids=["room-for-both", "room-for-one"])
def test_reupload_under_the_same_prefix_is_fetched_and_published(s3, env, tmp_path, new_prefix, budget):
    upload(s3, new_prefix, small_model("v1"))
    script, cache_dir = write_script(tmp_path, prefix=new_prefix, model_key="m", budget=budget)
    run_ok(script, env)
    first = published(cache_dir, "m")

    upload(s3, new_prefix, small_model("v2"))  # same keys, same sizes, new bytes
    result = run_ok(script, env)

    second = published(cache_dir, "m")
    assert second == content_digest(s3, new_prefix) != first
    assert "cache miss" in result.stdout
    assert_cache_matches(cache_dir / "m", small_model("v2"))
    if budget == HUGE_BUDGET:
        assert versions(cache_dir, "m") == {first, second}
    else:
        assert versions(cache_dir, "m") == {second}
        assert f"evicted .versions/m/{first}" in result.stdout
    assert leftovers(cache_dir) == []


@needs_cli
def test_identical_bytes_uploaded_again_are_the_same_version(s3, env, tmp_path, new_prefix):
    """S3 derives the ETag from the content, so uploading the same bytes again changes nothing."""
    upload(s3, new_prefix, small_model("v1"))
    script, cache_dir = write_script(tmp_path, prefix=new_prefix, model_key="m")
    run_ok(script, env)
    upload(s3, new_prefix, small_model("v1"))

    result = run_ok(script, env)

    assert "cache hit" in result.stdout
    assert len(versions(cache_dir, "m")) == 1


@needs_cli
def test_the_version_covers_every_page_of_the_listing(s3, env, tmp_path, new_prefix):
    """ListObjectsV2 returns at most 1,000 keys per call; a change on the second page is a new version."""
    files = {f"shard-{i:04d}.bin": b"x" for i in range(1001)}
    upload(s3, new_prefix, files)
    calls = tmp_path / "aws-calls.log"
    # Stop at the copy: the log line that announces it names the version computed from the listing.
    shim = write_shim(
        tmp_path / "shim",
        f'echo "$*" >> {shlex.quote(str(calls))}; case " $* " in *" s3 cp "*) exit 1;; esac; {shlex.quote(AWS)} "$@"',
    )
    script, _ = write_script(tmp_path, prefix=new_prefix, model_key="m")

    result = run(script, env | {"PATH": f"{shim}{os.pathsep}{env['PATH']}"})

    assert result.returncode != 0
    assert f"copying version {content_digest(s3, new_prefix)} " in result.stdout
    assert "(1001 objects, 1001 bytes," in result.stdout


@needs_cli
def test_an_unreachable_s3_serves_the_published_version(bucket, env, tmp_path):
    script, cache_dir = write_script(tmp_path)
    run_ok(script, env)
    shim = write_shim(tmp_path / "shim", 'echo "Could not connect to the endpoint URL" >&2; exit 255')
    offline = env | {"PATH": f"{shim}{os.pathsep}{env['PATH']}"}

    result = run_ok(script, offline)

    assert "Could not connect to the endpoint URL" in result.stdout
    assert "which may be stale" in result.stdout
    assert files_under(cache_dir / "llama-3-8b") == MODEL_FILES


@needs_cli
def test_leftover_partial_and_unversioned_copy_are_replaced(bucket, s3, env, tmp_path):
    script, cache_dir = write_script(tmp_path)
    partial = cache_dir / ".versions" / "llama-3-8b" / f".partial-{content_digest(s3, PREFIX)}"
    partial.mkdir(parents=True)
    (partial / "model-00001-of-00002.safetensors").write_bytes(b"truncated")
    (partial / "model-00003-of-00002.safetensors").write_bytes(b"not in S3")
    (cache_dir / "llama-3-8b").mkdir()  # the layout before versions: a plain directory
    (cache_dir / "llama-3-8b" / "stale.bin").write_bytes(b"from an older copy")

    result = run_ok(script, env)

    assert "removed the unversioned copy" in result.stdout
    assert (cache_dir / "llama-3-8b").is_symlink()
    assert_cache_matches(cache_dir / "llama-3-8b", MODEL_FILES)
    assert leftovers(cache_dir) == []


@needs_cli
def test_copy_killed_before_it_is_published_is_redone(bucket, env, tmp_path, lock_kind):
    script, cache_dir = write_script(tmp_path)
    copied = tmp_path / "copied"
    shim = write_shim(tmp_path / "shim", on_copy(f"touch {shlex.quote(str(copied))}; sleep 60"))
    stalled = env | {"PATH": f"{shim}{os.pathsep}{env['PATH']}"}
    proc = subprocess.Popen(
        [BASH, str(script)],
        env=stalled,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not copied.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole init container dies: script, aws, heartbeat
    proc.wait()
    assert copied.exists()
    (partial,) = (cache_dir / ".versions" / "llama-3-8b").glob(".partial-*")
    assert (partial / "config.json").is_file()  # killed with the data on disk
    assert not (cache_dir / "llama-3-8b").exists()  # nothing was published
    if lock_kind == "mkdir":  # the killed pod's lock is left behind; pretend its heartbeat stopped long ago
        lock_dir = cache_dir / ".lock.d"
        past = time.time() - 600
        os.utime(lock_dir, (past, past))

    result = run_ok(script, env)

    assert_cache_matches(cache_dir / "llama-3-8b", MODEL_FILES)
    assert leftovers(cache_dir) == []
    if lock_kind == "mkdir":
        assert "removed stale lock" in result.stdout


@needs_cli
def test_two_pods_on_one_node_copy_once(bucket, s3, env, tmp_path, lock_kind):
    script, cache_dir = write_script(tmp_path)
    copied = tmp_path / "copied"
    shim = write_shim(tmp_path / "shim", on_copy(f"touch {shlex.quote(str(copied))}; sleep 1"))
    first = subprocess.Popen(
        [BASH, str(script)],
        env=env | {"PATH": f"{shim}{os.pathsep}{env['PATH']}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not copied.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert copied.exists(), "the first pod never reached its copy"

    second = run(script, env)  # starts while the first pod holds the lock
    first_out, first_err = first.communicate(timeout=60)

    assert (first.returncode, second.returncode) == (0, 0), first_err + second.stderr
    assert "cache miss" in first_out
    assert "cache hit after waiting" in second.stdout
    assert "download:" not in second.stdout
    assert published(cache_dir, "llama-3-8b") == content_digest(s3, PREFIX)
    assert len(versions(cache_dir, "llama-3-8b")) == 1
    assert_cache_matches(cache_dir / "llama-3-8b", MODEL_FILES)


def _stamp(cache_dir: Path, model_key: str, digest: str, seconds_ago: int) -> None:
    used = cache_dir / ".versions" / model_key / digest / ".inferstack-used"
    when = time.time() - seconds_ago
    os.utime(used, (when, when))


@needs_cli
def test_superseded_versions_of_the_same_model_go_first(s3, env, tmp_path):
    prefixes = {key: f"models/t{next(_prefixes)}" for key in "ab"}
    budget = SMALL_MODEL_BYTES * 9 // 2  # four versions fit, five do not
    scripts = {}
    for key, prefix in prefixes.items():
        scripts[key], cache_dir = write_script(tmp_path, prefix=prefix, model_key=key, budget=budget)
    superseded = {}
    for key in "ab":  # each model: version 1 superseded by version 2
        upload(s3, prefixes[key], small_model(f"{key}1"))
        run_ok(scripts[key], env)
        superseded[key] = published(cache_dir, key)
        upload(s3, prefixes[key], small_model(f"{key}2"))
        run_ok(scripts[key], env)
    a2 = published(cache_dir, "a")
    _stamp(cache_dir, "a", superseded["a"], seconds_ago=86400)  # the least recently used version on the node

    upload(s3, prefixes["b"], small_model("b3"))
    result = run_ok(scripts["b"], env)

    assert f"evicted .versions/b/{superseded['b']}" in result.stdout
    assert versions(cache_dir, "a") == {superseded["a"], a2}
    assert len(versions(cache_dir, "b")) == 2 and superseded["b"] not in versions(cache_dir, "b")
    assert_cache_matches(cache_dir / "b", small_model("b3"))


@needs_cli
def test_other_models_lose_their_least_recently_used_superseded_version(s3, env, tmp_path):
    older, newer = "b", "a"  # against the order of names and of the runs: only the last use decides
    prefixes = {key: f"models/t{next(_prefixes)}" for key in "abc"}
    budget = SMALL_MODEL_BYTES * 9 // 2  # four versions fit, five do not
    scripts = {}
    for key, prefix in prefixes.items():
        scripts[key], cache_dir = write_script(tmp_path, prefix=prefix, model_key=key, budget=budget)
    superseded = {}
    for key in "ab":
        upload(s3, prefixes[key], small_model(f"{key}1"))
        run_ok(scripts[key], env)
        superseded[key] = published(cache_dir, key)
        upload(s3, prefixes[key], small_model(f"{key}2"))
        run_ok(scripts[key], env)
    current = {key: published(cache_dir, key) for key in "ab"}
    for key in "ab":
        _stamp(cache_dir, key, superseded[key], seconds_ago=7200 if key == older else 60)
    upload(s3, prefixes["c"], small_model("c1"))

    result = run_ok(scripts["c"], env)

    assert f"evicted .versions/{older}/{superseded[older]}" in result.stdout
    assert versions(cache_dir, older) == {current[older]}
    assert versions(cache_dir, newer) == {superseded[newer], current[newer]}
    assert_cache_matches(cache_dir / "c", small_model("c1"))


@needs_cli
def test_a_model_larger_than_the_budget_fails_clearly(s3, env, tmp_path, new_prefix):
    upload(s3, new_prefix, small_model("v1"))
    script, cache_dir = write_script(tmp_path, prefix=new_prefix, model_key="m", budget=SMALL_MODEL_BYTES - 1)

    result = run(script, env)

    assert result.returncode != 0
    assert (
        f"prefetch: s3://{BUCKET}/{new_prefix}/ holds {SMALL_MODEL_BYTES} bytes, more than the node's model cache "
        f"budget of {SMALL_MODEL_BYTES - 1} bytes: raise node_pools[].nvme_cache.budget_percent or choose "
        "instance types with more instance store"
    ) in result.stderr.splitlines()
    assert not (cache_dir / "m").exists()
    assert versions(cache_dir, "m") == set()
    assert leftovers(cache_dir) == []


@needs_cli
def test_published_versions_are_never_evicted(s3, env, tmp_path):
    prefixes = {key: f"models/t{next(_prefixes)}" for key in "ab"}
    budget = SMALL_MODEL_BYTES * 3 // 2  # one version fits
    script_a, cache_dir = write_script(tmp_path, prefix=prefixes["a"], model_key="a", budget=budget)
    script_b, _ = write_script(tmp_path, prefix=prefixes["b"], model_key="b", budget=budget)
    for key in "ab":
        upload(s3, prefixes[key], small_model(key))
    run_ok(script_a, env)

    result = run(script_b, env)

    assert result.returncode != 0
    assert f"the versions published on this node hold {SMALL_MODEL_BYTES} bytes (.versions/a/" in result.stderr
    assert_cache_matches(cache_dir / "a", small_model("a"))
    assert not (cache_dir / "b").exists()
    assert leftovers(cache_dir) == []


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
        render_prefetch_script(
            bucket="no-such-bucket", prefix="m", cache_dir=str(cache_dir), model_key="m", cache_budget_bytes=1
        )
    )

    result = run(script, env)

    assert result.returncode != 0
    assert "prefetch: cannot list s3://no-such-bucket/m/ (" in result.stderr
    assert "NoSuchBucket" in result.stderr
    assert not (cache_dir / "m").exists()
    assert leftovers(cache_dir) == []
