"""Prefill/decode disaggregation: the engines a disaggregated service runs, vLLM 0.33's KV-transfer config, and the
layouts under which the transfer fails or silently slows.

A service with `disaggregation` decodes on its own replicas and gets a second set of engines, `<name>-prefill`, with
the prefill role's parallelism, pool and scaling; everything that sizes, places, prices or renders engines sees
both (validation expands them). Both sides run vLLM's NixlConnector (the pull variant: the decode engine reads
the prefill engine's KV blocks, vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py) with NIXL's
LIBFABRIC backend, which on AWS rides EFA (`kv_connector_extra_config.backends`, default ["UCX"];
nixl/base_worker.py). The producer/consumer roles are explicit: kv_both is deprecated (connector.py).

What breaks a transfer, from the same sources:
- tensor parallel sizes that do not divide one another (kv_connector/utils.py `tp_ratio` asserts);
- a prefill engine wider than its decode engine for a non-MLA model, whose heads the decode side cannot regroup
  (nixl/base_worker.py; llm-d docs/operations/disaggregation/vllm.md: decode TP >= prefill TP);
- pipeline parallelism on the decode side (NotImplementedError for kv_consumer, nixl/base_worker.py);
- --kv-offloading-size, which replaces any --kv-transfer-config connector without a word (config/vllm.py
  `_post_init_kv_transfer_config`);
- and, silently, a transfer path without EFA: NIXL then moves the KV cache over TCP (the issue's 1 s vs 98 s TTFT),
  which is why both roles sit on EFA pools, in one zone, with an image whose NIXL carries the LIBFABRIC plugin.
"""

from __future__ import annotations

import json

from inferstack.spec import ModelServiceSpec
from inferstack.spec.pools import PoolHardware

PREFILL_SUFFIX = "-prefill"
CONNECTOR = "NixlConnector"
NIXL_BACKENDS = ("LIBFABRIC",)
# vLLM's NIXL handshake listener (envs.py VLLM_NIXL_SIDE_CHANNEL_PORT default); the host is the pod's own IP.
SIDE_CHANNEL_PORT = 5600
ROLE_LABEL = "llm-d.ai/role"  # llm-d-router v0.10.0 scheduling/filter/bylabel/roles.go: prefill | decode
# The pod label as the vLLM PodMonitor copies it onto series (prometheus-operator promcfg.go sanitizeLabelName).
ROLE_METRIC_LABEL = "llm_d_ai_role"


def served_name(model: ModelServiceSpec) -> str:
    """The model name an engine answers to: a prefill engine takes the service's requests, so the service's."""
    return model.pd_service or model.name


def metric_labels(model: ModelServiceSpec) -> dict[str, str]:
    """Labels that pick one engine's vLLM series: its served name, and for a prefill/decode role the role."""
    labels = {"model_name": served_name(model)}
    if model.pd_role is not None:
        labels[ROLE_METRIC_LABEL] = model.pd_role
    return labels


def prefill_name(service: str) -> str:
    return f"{service}{PREFILL_SUFFIX}"


def prefill_engine(model: ModelServiceSpec) -> ModelServiceSpec:
    """The service's prefill role as an engine of its own: the same model, precision and adapters, the role's
    parallelism, pool and scaling; no drafting (decode's) and no traffic or SLO (the service's)."""
    assert model.disaggregation is not None
    role = model.disaggregation.prefill
    engine = model.model_copy(update={
        "name": prefill_name(model.name),
        "tensor_parallel": role.tensor_parallel,
        "pool": role.pool or model.pool,
        "autoscaling": role.autoscaling,
        "max_num_seqs": role.max_num_seqs,
        "disaggregation": None,
        "speculative": None,
        "traffic": None,
        "slo": None,
    })
    engine._prefill_for = model.name
    return engine


def expand(models: tuple[ModelServiceSpec, ...] | list[ModelServiceSpec]) -> tuple[ModelServiceSpec, ...]:
    """Every engine: each service, and right after a disaggregated one its prefill engine."""
    engines: list[ModelServiceSpec] = []
    for model in models:
        engines.append(model)
        if model.disaggregation is not None:
            engines.append(prefill_engine(model))
    return tuple(engines)


def kv_transfer_config(model: ModelServiceSpec) -> dict | None:
    if model.pd_role is None:
        return None
    return {
        "kv_connector": CONNECTOR,
        "kv_role": "kv_producer" if model.pd_role == "prefill" else "kv_consumer",
        "kv_connector_extra_config": {"backends": list(NIXL_BACKENDS)},
    }


def kv_transfer_args(model: ModelServiceSpec) -> list[str]:
    config = kv_transfer_config(model)
    if config is None:
        return []
    return ["--kv-transfer-config", json.dumps(config, separators=(",", ":"), sort_keys=True)]


def problem(
    model: ModelServiceSpec, decode: PoolHardware, prefill: PoolHardware, provides_efa: bool
) -> tuple[str, str, str] | None:
    """(field under the service, what is wrong, the fix) for a disaggregated layout NIXL refuses or slows."""
    spec = model.disaggregation
    assert spec is not None
    tp_prefill, tp_decode = spec.prefill.tensor_parallel, model.tensor_parallel
    if max(tp_prefill, tp_decode) % min(tp_prefill, tp_decode):
        return ("disaggregation.prefill.tensor_parallel", f"prefill tensor_parallel {tp_prefill} and decode "
                f"{tp_decode} do not divide one another, which NIXL's handshake refuses",
                f"use a divisor or a multiple of {tp_decode}")
    if tp_prefill > tp_decode and model.resolved_architecture.attention != "mla":
        return ("disaggregation.prefill.tensor_parallel", f"prefill tensor_parallel {tp_prefill} is wider than "
                f"decode's {tp_decode}; NIXL regroups KV heads only from narrower prefill engines",
                f"set it to {tp_decode} or less")
    if model.pipeline_parallel > 1:
        return ("pipeline_parallel", "the decode role cannot take KV blocks into pipeline stages (vLLM's NIXL "
                "consumer refuses pipeline_parallel > 1)", "set pipeline_parallel to 1")
    if model.nodes_per_replica > 1 or model.data_parallel > 1:
        return ("disaggregation", "inferstack renders each role as one-pod engines; this replica spans nodes or "
                "data-parallel ranks", "fit a decode engine on one node with tensor_parallel alone")
    if model.kv_offload is not None:
        return ("kv_offload", "vLLM's --kv-offloading-size replaces the NIXL connector, so no KV would reach the "
                "decode engines", "drop kv_offload from a disaggregated service")
    for role, hardware in (("decode", decode), ("prefill", prefill)):
        if not hardware.efa_interfaces:
            field = "pool" if role == "decode" else "disaggregation.prefill.pool"
            return (field, f"the {role} role's pool {hardware.spec.name!r} has no EFA, so NIXL would move the KV "
                    "cache over TCP (a first token in tens of seconds instead of about one)",
                    "put both roles on EFA pools")
    if not provides_efa:
        return ("image", "the image carries no libfabric, so NIXL cannot load its LIBFABRIC backend",
                "use the catalog's EFA image (leave image unset) or set image_provides_efa for one that has it")
    return None
