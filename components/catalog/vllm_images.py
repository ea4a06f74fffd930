"""vLLM images and what each one carries, kept as data (vllm_images.json, every fact with its source).

Two facts matter to a pod spec: whether the image holds the EFA userspace stack (libfabric and the
aws-ofi-nccl NCCL plugin; without them NCCL falls back to TCP sockets while the pod holds the node's
EFA devices), and which non-root user the image defines (a uid with a passwd entry, so nothing in
the process tree fails a `getpwuid` lookup).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from types import MappingProxyType
from typing import Any, Mapping

_RAW = json.loads(files("inferstack.catalog").joinpath("vllm_images.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class ImageUser:
    uid: int
    gid: int
    name: str
    home: str


@dataclass(frozen=True)
class EfaStack:
    """The EFA userspace an image ships and the environment that routes NCCL through it."""

    efa_installer: str
    libfabric_prefix: str
    nccl_net_plugin: str
    env: Mapping[str, str]


@dataclass(frozen=True)
class VllmImage:
    reference: str
    vllm_version: str
    user: ImageUser
    efa: EfaStack | None
    source: str


def _image(reference: str, raw: Mapping[str, Any]) -> VllmImage:
    efa = raw["efa"]
    return VllmImage(
        reference=reference,
        vllm_version=raw["vllm_version"],
        user=ImageUser(**raw["user"]),
        efa=None if efa is None else EfaStack(**{**efa, "env": MappingProxyType(dict(efa["env"]))}),
        source=raw["source"],
    )


VLLM_IMAGES: Mapping[str, VllmImage] = MappingProxyType(
    {reference: _image(reference, raw) for reference, raw in _RAW["images"].items()}
)
DEFAULT_VLLM_IMAGE: str = _RAW["defaults"]["serving"]
DEFAULT_EFA_VLLM_IMAGE: str = _RAW["defaults"]["efa"]


# Docker Hub's own spellings of a reference: `docker.io/vllm/x` and `index.docker.io/vllm/x` are `vllm/x`.
DOCKER_HUB_PREFIXES = ("docker.io/", "index.docker.io/", "registry-1.docker.io/")


def vllm_image(reference: str) -> VllmImage | None:
    """What the catalog knows of an image; None for an image it does not list (a team's own build)."""
    for prefix in DOCKER_HUB_PREFIXES:
        if reference.startswith(prefix):
            reference = reference.removeprefix(prefix)
            break
    return VLLM_IMAGES.get(reference)


def efa_images() -> list[str]:
    return sorted(ref for ref, image in VLLM_IMAGES.items() if image.efa is not None)
