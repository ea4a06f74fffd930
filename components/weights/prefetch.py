"""Render the init-container script that keeps a model's weights from S3 in the node's NVMe cache.

All values are validated here and shell-quoted by the template, so a spec value can never run as
shell code inside the pod.

The cache is keyed by content, not by name. At every pod start the script lists the prefix with
`aws s3api list-objects-v2` (the CLI follows continuation tokens itself, AWS CLI user guide
"Using the AWS CLI pagination options", docs.aws.amazon.com/cli/latest/userguide/cli-usage-pagination.html)
and hashes the sorted key, ETag and size of every object: S3 changes an object's ETag whenever its
content is rewritten, not when only its metadata changes (Amazon S3 API reference, `Object` data type,
docs.aws.amazon.com/AmazonS3/latest/API/API_Object.html), so a re-upload under the same prefix gives
a new version and an unchanged prefix the same one. Layout on the node (`cache_dir` in the pod):

    <model_key>                      symlink -> .versions/<model_key>/<digest> (relative: it resolves
                                     inside whichever mount shows the cache, read-only or not)
    .versions/<model_key>/<digest>/  one complete, verified copy per content version
    .lock                            one lock for the whole cache: the budget is shared by all models

A new version is copied into `.versions/<model_key>/.partial-<digest>` (same filesystem), checked
object by object against the listing, renamed into place, and published by renaming a fresh symlink
over `<model_key>`: rename(2) replaces the target atomically, so every path lookup through
`/models/<model_key>` (the one path vLLM is given) finds the old version or the new one complete,
never a half-copied directory or a missing path (man7.org/linux/man-pages/man2/rename.2.html). vLLM
is started through `pin-weights.sh`, which hands it the version the link resolves to at that moment,
so a pod still loading when another pod publishes a new version keeps reading the one it started on.
Runs are serialised with flock(1) from util-linux (man7.org/linux/man-pages/man1/flock.1.html) when
the image has it, else with an atomic mkdir(2) lock and a heartbeat. The pinned AWS CLI image is
built on amazonlinux:2023 and adds findutils and jq (aws/aws-cli@2.31.23:docker/Dockerfile); the
script needs bash, coreutils (sha256sum, stat, readlink, sort) and GNU find.

Eviction keeps the whole cache within `cache_budget_bytes`, also while a copy is under way. Pods
leave no trace on the node while they run, so "in use" is approximated by "published": every
running pod started from its model's symlink target, and a vLLM container the kubelet restarts
reopens that path without re-running the init container, so another model's published version is
never evicted. Superseded versions go first, the same model's before other models', then the least
recently used (each run stamps the version it publishes or finds). As a last resort the version a
run is about to supersede is unpublished and evicted before the copy: its pods have loaded it, new
pods wait on the lock, and only a vLLM container restarting during that copy fails and is retried.
If the model alone exceeds the budget, or other models' published versions leave no room, the
script fails with a message that says which.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from functools import cache
from importlib.resources import files

import jinja2


_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_MODEL_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Names S3 reserves for its own features (access points, directory buckets, table buckets).
_RESERVED_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


PIN_SCRIPT = "pin-weights.sh"  # beside prefetch.sh in the pre-fetch ConfigMap


@cache
def load_template(name: str = "prefetch.sh.j2") -> jinja2.Template:
    """A weights-cache template; undefined variables raise instead of rendering as empty strings."""
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    source = files("inferstack.templates").joinpath(name).read_text(encoding="utf-8")
    return env.from_string(source)


def render_pin_script(published: str) -> str:
    """Bash that execs its arguments with `published` (the cache's stable path) replaced by the version
    it points at now, so vLLM reads a single version however long it loads while another pod publishes."""
    if not published.startswith("/"):
        raise ValueError(f"published path {published!r} is not absolute")
    _check_path("published path", published)
    return load_template("pin-weights.sh.j2").render(published=published)


def render_prefetch_script(
    *,
    bucket: str,
    prefix: str,
    cache_dir: str,
    model_key: str,
    cache_budget_bytes: int,
    max_concurrent_requests: int = 64,
    multipart_chunk_mb: int = 64,
) -> str:
    """Bash that publishes the current content of `s3://<bucket>/<prefix>/` at `<cache_dir>/<model_key>`."""
    _check_bucket(bucket)
    prefix = prefix.strip("/")
    if not prefix:
        raise ValueError("weights prefix is empty. To fix: give the S3 key prefix that holds the model's files")
    _check_path("weights prefix", prefix)
    if not cache_dir.startswith("/"):
        raise ValueError(f"cache_dir {cache_dir!r} is not absolute. To fix: give the mount path inside the pod")
    _check_path("cache_dir", cache_dir)
    if not _MODEL_KEY_RE.fullmatch(model_key) or ".." in model_key:
        raise ValueError(
            f"model_key {model_key!r} is not a single safe directory name. "
            "To fix: use letters, digits, '.', '_' and '-' only, starting with a letter or digit, without '..'"
        )
    if cache_budget_bytes < 1:
        raise ValueError(f"cache_budget_bytes {cache_budget_bytes} is not positive")
    if not 1 <= max_concurrent_requests <= 1000:
        raise ValueError(f"max_concurrent_requests {max_concurrent_requests} is outside 1..1000")
    if not 5 <= multipart_chunk_mb <= 5120:
        raise ValueError(f"multipart_chunk_mb {multipart_chunk_mb} is outside 5..5120 (S3 part size limits)")
    return load_template().render(
        bucket=bucket,
        prefix=prefix,
        cache_dir=cache_dir.rstrip("/") or "/",
        model_key=model_key,
        cache_budget_bytes=cache_budget_bytes,
        max_concurrent_requests=max_concurrent_requests,
        multipart_chunk_mb=multipart_chunk_mb,
    )


def _check_bucket(bucket: str) -> None:
    problem = None
    if not _BUCKET_RE.fullmatch(bucket):
        problem = "must be 3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"
    elif ".." in bucket:
        problem = "must not contain '..'"
    elif _is_ip_address(bucket):
        problem = "must not look like an IP address"
    elif bucket.startswith(_RESERVED_BUCKET_PREFIXES) or bucket.endswith(_RESERVED_BUCKET_SUFFIXES):
        problem = "uses a prefix or suffix that S3 reserves"
    if problem:
        raise ValueError(f"bucket {bucket!r} is not a valid S3 bucket name: it {problem}")


def _check_path(what: str, value: str) -> None:
    if ".." in value.split("/"):
        raise ValueError(f"{what} {value!r} contains '..'. To fix: give the path without parent-directory steps")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"{what} {value!r} contains a control character")


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True
