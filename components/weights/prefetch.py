"""Render the init-container script that copies a model's weights from S3 onto the node's NVMe cache.

All values are validated here and shell-quoted by the template, so a spec value can never run as
shell code inside the pod.
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


@cache
def load_template() -> jinja2.Template:
    """The prefetch template; undefined variables raise instead of rendering as empty strings."""
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    source = files("inferstack.templates").joinpath("prefetch.sh.j2").read_text(encoding="utf-8")
    return env.from_string(source)


def render_prefetch_script(
    *,
    bucket: str,
    prefix: str,
    cache_dir: str,
    model_key: str,
    max_concurrent_requests: int = 64,
    multipart_chunk_mb: int = 64,
) -> str:
    """Bash that fills `<cache_dir>/<model_key>/` from `s3://<bucket>/<prefix>/` once per node."""
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
    if not 1 <= max_concurrent_requests <= 1000:
        raise ValueError(f"max_concurrent_requests {max_concurrent_requests} is outside 1..1000")
    if not 5 <= multipart_chunk_mb <= 5120:
        raise ValueError(f"multipart_chunk_mb {multipart_chunk_mb} is outside 5..5120 (S3 part size limits)")
    return load_template().render(
        bucket=bucket,
        prefix=prefix,
        cache_dir=cache_dir.rstrip("/") or "/",
        model_key=model_key,
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
