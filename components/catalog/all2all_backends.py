"""Where each expert-parallel all-to-all backend of vLLM 0.33 can carry tokens, kept as data
(all2all_backends.json, every fact with its source).

Two facts decide whether a layout works: whether the backend reaches beyond one node's NVLink at all
(moonep and the FlashInfer NVLink kernels do not, and no catalog instance joins nodes by NVLink), and
whether it runs over AWS EFA between nodes here. Only allgather_reducescatter (NCCL's own collectives over
aws-ofi-nccl) does: DeepEP's first kernels need InfiniBand GPU-initiated RDMA, and deepep_v2 needs NCCL GIN,
which over EFA needs GDRCopy's gdrdrv kernel module that the EKS NVIDIA AMIs do not load. `efa_refusal`
says why, for the refusal message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from types import MappingProxyType
from typing import Mapping

_RAW = json.loads(files("inferstack.catalog").joinpath("all2all_backends.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class All2AllReach:
    name: str
    crosses_nodes: bool     # beyond one node's NVLink
    crosses_efa: bool       # between nodes over EFA
    source: str
    efa_refusal: str | None = None  # why it does not run between nodes over EFA, when it reaches beyond a node


ALL2ALL_BACKENDS: Mapping[str, All2AllReach] = MappingProxyType({
    name: All2AllReach(
        name, raw["crosses_nodes"], raw["crosses_efa"], _RAW["sources"][raw["source"]], raw.get("efa_refusal")
    )
    for name, raw in _RAW["backends"].items()
})
