"""How vLLM 0.33 pads MXFP4 experts in GPU memory per GPU generation, as data (mxfp4_padding.json, each with its
source): the kernel it picks there and the multiples it rounds each GPU's slice of an expert up to."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files

_RAW = json.loads(files("inferstack.catalog").joinpath("mxfp4_padding.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Mxfp4Padding:
    kernel: str
    intermediate_multiple: int
    hidden_multiple: int
    source: str


MXFP4_PADDING: dict[int, Mxfp4Padding] = {
    int(major): Mxfp4Padding(entry["kernel"], entry["intermediate_multiple"], entry["hidden_multiple"],
                             _RAW["sources"][entry["source"]])
    for major, entry in _RAW["by_capability_major"].items()
}
