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
- a prefill engine wider than its decode engine whose ranks replicate KV heads (prefill tensor_parallel above the
  model's KV heads): a decode rank reads its heads from several prefill ranks (nixl/tp_mapping.py:104-127
  compute_tp_mapping, "P (remote TP) > D (local TP)"), which holds when each prefill rank owns distinct heads;
  an MLA cache is whole on every rank, so any width reads;
- pipeline parallelism on the decode side (NotImplementedError for kv_consumer, nixl/base_worker.py);
- --kv-offloading-size, which replaces any --kv-transfer-config connector without a word (config/vllm.py
  `_post_init_kv_transfer_config`);
- and, silently, a transfer path without EFA: NIXL then moves the KV cache over TCP (the issue's 1 s vs 98 s TTFT),
  which is why both roles sit on EFA pools, in one zone, with an image whose NIXL carries the LIBFABRIC plugin.

What both roles must agree on: NIXL's handshake compares a hash of each side's configuration and refuses a peer
whose hash differs (vLLM 0.33.0 nixl/metadata.py:146-203 compute_nixl_compatibility_hash, checked in
nixl/base_worker.py:1192-1205). It covers the vLLM version, the model path, dtype, KV heads, head size, layers, the
attention backend, the KV cache dtype, the hybrid KV manager and, for the speculative methods that run on the
target's hidden states (eagle, eagle3, mtp: SpeculativeConfig.use_eagle, config/speculative.py:2116-2120), the
draft's method, path and KV dtype (metadata.py:103-143). Both roles are one model copied, so most of these match by
construction; the prefill engine keeps such a draft (sized in its memory), both roles read it from one cache path,
and the attention backend is pinned on both when their GPUs would choose differently (planning/attention.py).
The model path is the weights version the node's cache published (templates/pin-weights.sh.j2), so after a
re-upload under the same prefix a new pod of one role may hold a version an old pod of the other does not: the
decode role recomputes a prompt whose KV it cannot load (kv_load_failure_policy "recompute", default "fail",
config/kv_transfer.py:88; v1/core/sched/scheduler.py:186-187) rather than failing the request.
"""

from __future__ import annotations

import json

from collections.abc import Mapping, Sequence

from dataclasses import replace

from inferstack.planning.attention import paired_backend
from inferstack.planning.load import Workload
from inferstack.spec import ModelServiceSpec
from inferstack.spec.pools import PoolHardware

PREFILL_SUFFIX = "-prefill"
PREFILL_OUTPUT_TOKENS = 2   # a prefill engine's request as the load model runs it (role_workload)
CONNECTOR = "NixlConnector"
NIXL_BACKENDS = ("LIBFABRIC",)
# vLLM's NIXL handshake listener (envs.py VLLM_NIXL_SIDE_CHANNEL_PORT default); the host is the pod's own IP.
SIDE_CHANNEL_PORT = 5600
ROLE_LABEL = "llm-d.ai/role"  # llm-d-router v0.10.0 scheduling/filter/bylabel/roles.go: prefill | decode
# The pod label as the vLLM PodMonitor copies it onto series (prometheus-operator promcfg.go sanitizeLabelName).
ROLE_METRIC_LABEL = "llm_d_ai_role"
# Speculative methods whose draft runs on the target's hidden states: NIXL hashes their config (see above).
HASHED_SPECULATIVE_METHODS = frozenset({"eagle", "eagle3", "mtp"})


def served_name(model: ModelServiceSpec) -> str:
    """The model name an engine answers to: a prefill engine takes the service's requests, so the service's."""
    return model.pd_service or model.name


def metric_labels(model: ModelServiceSpec) -> dict[str, str]:
    """Labels that pick one engine's vLLM series: its served name, and for a prefill/decode role the role."""
    labels = {"model_name": served_name(model)}
    if model.pd_role is not None:
        labels[ROLE_METRIC_LABEL] = model.pd_role
    return labels


def service_of(models: Sequence[ModelServiceSpec], engine: ModelServiceSpec) -> ModelServiceSpec:
    """The service whose traffic and SLO an engine serves: a prefill engine's disaggregated service, else itself."""
    return next((m for m in models if m.name == engine.pd_service), engine)


def role_workload(role: str | None, workload: Workload, non_cached_tokens: int | None) -> Workload:
    """What one engine of a prefill/decode service computes of the service's mean request.

    A prefill engine computes the prompt and stops at its first token: modelled with two output tokens, because the
    load model queues prompts for chunk steps only when a token follows the first (its one-token branch is a fluid
    of partial prompts, no queue). A decode engine receives a prompt of at least non_cached_tokens uncached tokens
    as KV: vLLM's NIXL connector loads every prompt token from the prefiller (vllm 0.33.0
    distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py:402, `_get_remote_prefill_token_count`; the
    back-off is for Mamba and multi-token drafts), and the scheduler recomputes the last one to sample the next
    (v1/core/sched/scheduler.py:3515-3516: a full prompt hit sets num_computed_tokens to num_tokens - 1). A
    shorter prompt the picker leaves to the decode engine, which prefills it itself."""
    if role == "prefill":
        return Workload(workload.input_tokens, PREFILL_OUTPUT_TOKENS, workload.cached_prefix_tokens)
    if role == "decode" and non_cached_tokens is not None and workload.computed_prompt_tokens >= non_cached_tokens:
        return replace(workload, transferred_tokens=workload.computed_prompt_tokens - 1)
    return workload


def prefill_name(service: str) -> str:
    return f"{service}{PREFILL_SUFFIX}"


def prefill_engine(model: ModelServiceSpec) -> ModelServiceSpec:
    """The service's prefill role as an engine of its own: the same model, precision, adapters and attention
    backend, the role's parallelism, pool and scaling; no traffic or SLO (the service's). A draft that NIXL hashes
    stays (the prefill engine runs it over the prompt, and its KV cache moves to decode with the model's); any other
    draft is decode's alone."""
    assert model.disaggregation is not None
    role = model.disaggregation.prefill
    speculative = model.speculative
    engine = model.model_copy(update={
        "name": prefill_name(model.name),
        "tensor_parallel": role.tensor_parallel,
        "pool": role.pool or model.pool,
        "autoscaling": role.autoscaling,
        "max_num_seqs": role.max_num_seqs,
        "disaggregation": None,
        "speculative": speculative if speculative is not None and speculative.method in HASHED_SPECULATIVE_METHODS else None,
        "traffic": None,
        "slo": None,
    })
    engine._prefill_for = model.name
    return engine


def with_paired_backend(model: ModelServiceSpec, pools: Mapping[str, PoolHardware]) -> ModelServiceSpec:
    """A disaggregated service with the attention backend both roles must run pinned, when their GPUs would pick
    different ones by default."""
    decode, prefill = pools[model.pool].gpu, pools[model.disaggregation.prefill.pool or model.pool].gpu
    backend, pinned = paired_backend(model, decode, prefill)
    return model.model_copy(update={"attention_backend": backend}) if pinned else model


def expand(
    models: tuple[ModelServiceSpec, ...] | list[ModelServiceSpec], pools: Mapping[str, PoolHardware]
) -> tuple[ModelServiceSpec, ...]:
    """Every engine: each service, and right after a disaggregated one its prefill engine, both roles on one
    attention backend."""
    engines: list[ModelServiceSpec] = []
    for model in models:
        if model.disaggregation is None:
            engines.append(model)
            continue
        model = with_paired_backend(model, pools)
        engines += [model, prefill_engine(model)]
    return tuple(engines)


def kv_transfer_config(model: ModelServiceSpec) -> dict | None:
    if model.pd_role is None:
        return None
    config = {
        "kv_connector": CONNECTOR,
        "kv_role": "kv_producer" if model.pd_role == "prefill" else "kv_consumer",
        "kv_connector_extra_config": {"backends": list(NIXL_BACKENDS)},
    }
    if model.pd_role == "decode":
        config["kv_load_failure_policy"] = "recompute"
    return config


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
    arch = model.resolved_architecture
    if tp_prefill > tp_decode and arch.attention != "mla" and tp_prefill > arch.kv_heads:
        return ("disaggregation.prefill.tensor_parallel", f"prefill tensor_parallel {tp_prefill} is wider than "
                f"decode's {tp_decode} and than the model's {arch.kv_heads} KV heads, so prefill ranks replicate "
                "heads and NIXL cannot read a decode rank's heads from them",
                f"set it to {max(tp_decode, arch.kv_heads)} or less")
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
    backend, _ = paired_backend(model, decode.gpu, prefill.gpu)
    if backend is None:
        return ("disaggregation.prefill.pool", f"no attention backend runs {model.model} on both {decode.gpu.name} "
                f"(decode) and {prefill.gpu.name} (prefill), and NIXL refuses roles on different backends",
                "put both roles on one GPU generation")
    return None
