"""vLLM runs as a non-root user that nothing in its process tree fails to look up.

What the pinned image does, read from upstream:
* vllm-project/vllm v0.33.0 docker/Dockerfile: the image keeps USER root and adds a `vllm` user (uid 2000,
  gid 0, home /home/vllm) for `--user 2000:0` (docs/deployment/docker.md, "Run as a non-root user");
  docker/entrypoints/vllm-nonroot-entrypoint.sh sets USER for uids the image does not list, because
  `getpass.getuser()` otherwise falls back to `pwd.getpwuid()`.
* torch 2.14 (the image's pin, requirements/cuda.txt `torch==2.14.0`; read in the 2.13.0 and 2.14.1 wheels
  either side of it): importing torch calls no `getpass.getuser()`. torch/_inductor/runtime/cache_dir_utils.py
  `default_cache_dir` catches its KeyError (and is skipped when TORCHINDUCTOR_CACHE_DIR is set), but
  torch/_vendor/quack/cache/jit.py `get_cache_path` and torch/_dynamo/debug_utils.py call it unguarded,
  as does vLLM's vllm/config/vllm.py under VLLM_TRACE_FUNCTION.
* CPython Lib/getpass.py `getuser`: LOGNAME, USER, LNAME, USERNAME are read first; only when all are
  unset does it call `pwd.getpwuid(os.getuid())`, which raises KeyError (OSError from 3.13) for a uid
  with no passwd entry.
So every vLLM container runs as the image's listed user, names it in USER and LOGNAME (which also covers a
team's own image that lacks the entry), and keeps the compile caches on its writable HOME volume.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferstack.catalog.vllm_images import vllm_image
from inferstack.engine import run_stack
from inferstack.engine.render import kubernetes_objects
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def vllm_containers(objects):
    """Every vLLM container with its pod spec: Deployments, LWS leaders and workers, batch Jobs."""
    for o in objects:
        spec = o.get("spec") or {}
        templates = [spec.get("template")]
        if o["kind"] == "LeaderWorkerSet":
            lws = spec["leaderWorkerTemplate"]
            templates = [lws["leaderTemplate"], lws["workerTemplate"]]
        for template in filter(None, templates):
            pod = template.get("spec") or {}
            for container in pod.get("containers", []):
                if container["name"] == "vllm":
                    yield pod, container


@pytest.fixture(scope="module", params=["dev", "prod"])
def containers(request):
    found = list(vllm_containers(kubernetes_objects(run_stack(load_stack(STACKS, request.param)))))
    assert found
    return found


def env_of(container) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_vllm_runs_as_the_images_own_user_named_in_user_and_logname(containers):
    for _pod, container in containers:
        user = vllm_image(container["image"]).user
        context = container["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (user.uid, user.gid, True)
        env = env_of(container)
        assert env["USER"] == env["LOGNAME"] == user.name


def test_caches_live_on_writable_volumes(containers):
    """HOME (and HF_HOME under it) on an emptyDir; vLLM's compile cache (VLLM_CACHE_ROOT, vllm/envs.py) on a
    writable hostPath kept across restarts. TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR stay unset: vLLM puts
    both under its own cache, and would keep a TRITON_CACHE_DIR the caller set (compilation/compiler_interface.py)."""
    for pod, container in containers:
        env = env_of(container)
        home = next(m for m in container["volumeMounts"] if m["mountPath"] == env["HOME"])
        volume = next(v for v in pod["volumes"] if v["name"] == home["name"])
        assert "emptyDir" in volume and not home.get("readOnly")
        assert env["HF_HOME"].startswith(env["HOME"] + "/")
        cache = next(m for m in container["volumeMounts"] if m["mountPath"] == env["VLLM_CACHE_ROOT"])
        volume = next(v for v in pod["volumes"] if v["name"] == cache["name"])
        assert "hostPath" in volume and not cache.get("readOnly")
        assert not {"TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"} & set(env)


GETUSER_WITHOUT_PASSWD_ENTRY = """
import getpass, pwd
def missing(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")
pwd.getpwuid = missing  # a uid the image's /etc/passwd does not list
try:
    print(getpass.getuser())
except (KeyError, OSError) as error:
    print("failed:", type(error).__name__)
"""


def _getuser(env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("LOGNAME", "USER", "LNAME", "USERNAME")}
    result = subprocess.run(
        [sys.executable, "-c", GETUSER_WITHOUT_PASSWD_ENTRY], env={**clean, **env},
        capture_output=True, text=True, check=True,
    )
    return result.stdout.strip()


def test_getuser_succeeds_in_the_pods_environment_even_without_a_passwd_entry(containers):
    """Run Python's own getpass.getuser() with the container's USER/LOGNAME and no passwd entry."""
    _pod, container = containers[0]
    env = env_of(container)
    assert _getuser({"USER": env["USER"], "LOGNAME": env["LOGNAME"]}) == env["USER"]
    assert _getuser({}).startswith("failed:")  # what torch's quack cache / vLLM's tracer would hit without them
