"""How the GPUs of one replica talk to each other, and the vLLM image that makes it so.

A replica on one node uses NVLink/PCIe inside the node. A replica across nodes (nodes_per_replica > 1)
uses NCCL over the network: through EFA only when the image carries libfabric and the aws-ofi-nccl
plugin, which the stock `vllm/vllm-openai` image does not (vLLM v0.33.0 docker/Dockerfile installs
neither; its EFA build is docker/Dockerfile.efa, published as `vllm/vllm-openai:v<version>-efa`).
Without the plugin NCCL silently picks its socket transport, at a fraction of EFA's bandwidth, while
the pods still hold every EFA device of their nodes. The plan, the spec check and the pod spec all
read this module, so the three cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from inferstack.catalog.vllm_images import DEFAULT_EFA_VLLM_IMAGE, DEFAULT_VLLM_IMAGE, EfaStack, vllm_image
from inferstack.spec import ModelServiceSpec
from inferstack.spec.pools import PoolHardware

TransportKind = Literal["in-node", "efa", "tcp"]


@dataclass(frozen=True)
class Transport:
    kind: TransportKind
    image: str
    efa: EfaStack | None   # the stack the catalog knows the image carries; None when unknown or unused

    def describe(self) -> str:
        if self.kind == "in-node":
            return "NVLink/PCIe within one node"
        if self.kind == "efa":
            origin = "the catalog's EFA build" if self.efa else "an image the spec says carries it"
            return f"NCCL over EFA (libfabric + aws-ofi-nccl, {origin}: {self.image})"
        return "NCCL over TCP sockets (the pool has no EFA)"


def crosses_efa(model: ModelServiceSpec, hardware: PoolHardware) -> bool:
    """A multi-node replica on a pool whose nodes have EFA interfaces."""
    return model.multi_node and hardware.efa_interfaces > 0


def serving_image(model: ModelServiceSpec, hardware: PoolHardware) -> str:
    """The spec's image, else vLLM's EFA build for a replica across EFA nodes or a prefill/decode engine (its
    NIXL has the LIBFABRIC plugin), else the stock image."""
    if model.image is not None:
        return model.image
    return DEFAULT_EFA_VLLM_IMAGE if crosses_efa(model, hardware) or model.pd_role else DEFAULT_VLLM_IMAGE


def image_carries_efa(model: ModelServiceSpec, hardware: PoolHardware) -> bool:
    """What the catalog knows of the image; `image_provides_efa` speaks only for images it does not list."""
    known = vllm_image(serving_image(model, hardware))
    return known.efa is not None if known is not None else model.image_provides_efa


def transport(model: ModelServiceSpec, hardware: PoolHardware) -> Transport:
    """What one replica's GPUs talk over. An EFA pool with an image lacking the stack is refused at spec
    time (`serving/refusals.py`), so "efa" here means NCCL really goes through the plugin."""
    image = serving_image(model, hardware)
    known = vllm_image(image)
    efa = known.efa if known is not None else None
    if not model.multi_node:
        return Transport("in-node", image, None)
    if crosses_efa(model, hardware) and image_carries_efa(model, hardware):
        return Transport("efa", image, efa)
    return Transport("tcp", image, None)
