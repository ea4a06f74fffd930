"""vLLM 0.33's CUDA attention backends as data (attention_backends.json, every fact with its source): the order vLLM
tries them in per GPU generation, and what each one runs on.

The backend a vLLM engine picks is part of NIXL's compatibility hash, so a prefill/decode pair on two GPU
generations either resolves the same backend on both or is told one (planning/attention.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from types import MappingProxyType
from typing import Literal, Mapping

from inferstack.catalog import parse_capability

_RAW = json.loads(files("inferstack.catalog").joinpath("attention_backends.json").read_text(encoding="utf-8"))
SOURCES: Mapping[str, str] = MappingProxyType(dict(_RAW["sources"]))


def _capability(text: str | None) -> tuple[int, int] | None:
    return None if text is None else parse_capability(text)


@dataclass(frozen=True)
class AttentionBackend:
    name: str
    attention: Literal["gqa", "mla"]
    min_capability: tuple[int, int] | None
    max_capability: tuple[int, int] | None
    capability_majors: tuple[int, ...] | None     # only these generations, when listed
    head_sizes: tuple[int, ...] | None            # only these head sizes, when listed
    head_size_multiple: int | None
    max_head_size: int | None
    fp8_kv_capability_majors: tuple[int, ...] | None  # generations where it reads an FP8 KV cache, when limited
    source: str


def _backend(name: str, raw: dict) -> AttentionBackend:
    def listed(key: str) -> tuple[int, ...] | None:
        return tuple(raw[key]) if key in raw else None

    return AttentionBackend(
        name=name, attention=raw["attention"],
        min_capability=_capability(raw.get("min_capability")), max_capability=_capability(raw.get("max_capability")),
        capability_majors=listed("capability_majors"), head_sizes=listed("head_sizes"),
        head_size_multiple=raw.get("head_size_multiple"), max_head_size=raw.get("max_head_size"),
        fp8_kv_capability_majors=listed("fp8_kv_capability_majors"), source=SOURCES[raw["source"]],
    )


ATTENTION_BACKENDS: Mapping[str, AttentionBackend] = MappingProxyType(
    {name: _backend(name, raw) for name, raw in _RAW["backends"].items()}
)


def priorities(attention: Literal["gqa", "mla"], capability_major: int) -> tuple[str, ...]:
    """The backends vLLM tries, first to last, on a GPU of this generation."""
    table = _RAW["priorities"][attention]
    return tuple(table.get(str(capability_major), table["other"]))
