"""The plan: what a team reads before it spends money — resources by layer, pools, placements, cost,
dollars per million output tokens at the stated traffic, and time from an empty account to serving."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any, Mapping

from inferstack.conventions import MODEL_READER_SERVICE_ACCOUNT, POOL_LABEL
from inferstack.engine.recorder import Recording
from inferstack.planning.cost import (
    PoolCost, Price, node_price, nodes_at_min_scale, prices_note, replica_node_price, stack_costs,
)
from inferstack.planning.node_groups import capacity_block_lifecycle, nodes_at
from inferstack.planning.interruption import interruption_plan
from inferstack.planning.node_health import node_health_plan
from inferstack.planning.pool_capacity import advertised_per_node, nodes_for_replicas
from inferstack.planning.sizing import GIB, Fit, fit, kv_formula, parallel_layout
from inferstack.presentation.pool_drawing import pack
from inferstack.serving import names
from inferstack.serving.transport import transport
from inferstack.spec import ModelServiceSpec, StackSpec
from inferstack.spec.pool_checks import zone_offering_doubt
from inferstack.spec.pools import PoolHardware
from inferstack.validation import ValidatedStack, as_validated


def layers(recording: Recording) -> dict[str, dict[str, int]]:
    """Resource counts by type under each top-level component (a layer of the platform)."""
    parents = {r.name: r.parent for r in recording.resources}
    kinds = {r.name: r.type for r in recording.resources}
    counts: dict[str, Counter] = defaultdict(Counter)
    for registration in recording.resources:
        if not registration.custom:
            continue
        top = registration.name
        while parents.get(top) is not None:
            top = parents[top]
        layer = kinds.get(top, registration.type) if top != registration.name else "(top level)"
        counts[layer][registration.type] += 1
    return {layer: dict(sorted(c.items())) for layer, c in sorted(counts.items())}


def node_pools(spec: StackSpec) -> list[dict[str, Any]]:
    from inferstack.platform.karpenter_pools import disruption_summary

    costs = {c.pool: c for c in stack_costs(spec)}
    karpenter = spec.platform.karpenter
    rows = []
    for pool in spec.node_pools:
        hardware = PoolHardware(pool)
        cost = costs[pool.name]
        baseline = nodes_at_min_scale(spec, hardware)
        rows.append(
            {
                "name": pool.name,
                "role": pool.role,
                "instance_types": list(pool.instance_types),
                "gpu": hardware.gpu.name,
                "gpus_per_node": hardware.gpus_per_node,
                "nodes": {"min": pool.min_nodes, "max": pool.max_nodes, "on_demand_base": pool.capacity.on_demand_base},
                "capacity": "on-demand" if not pool.capacity.spot else (
                    "spot" if pool.capacity.on_demand_base == 0 else "on-demand baseline + spot"
                ),
                "efa_interfaces": hardware.efa_interfaces,
                "gpu_sharing": pool.gpu_sharing.mode,
                "devices": device_mechanism(hardware),
                "advertises_per_node": advertised_per_node(hardware),
                **pool_prices(spec, hardware, cost),
                "at_scale": {
                    scale: dict(zip(("on_demand_nodes", "spot_nodes"), nodes_at(pool, nodes)))
                    for scale, nodes in (("min", baseline), ("max", pool.max_nodes))
                },
                "usd_per_hour": {"min": cost.min_usd_per_hour, "max": cost.max_usd_per_hour},
                # A Capacity Block's nodes are paid at its rate inside its window only; outside it they are gone.
                "outside_capacity_block": None if cost.outside_block is None
                else dict(zip(("min", "max"), cost.outside_block)),
                # Its services all at max replicas: beyond max_nodes they cannot all be there at once.
                "nodes_for_max_replicas": nodes_for_replicas(
                    [(m, m.autoscaling.max_replicas) for m in spec.models if m.pool == pool.name], hardware
                ),
                **gpu_slots(hardware),
                # Its services all at min replicas: beyond its min-scale nodes some wait for a scale-up.
                "nodes_for_min_replicas": nodes_for_replicas(
                    [(m, m.autoscaling.min_replicas) for m in spec.models if m.pool == pool.name], hardware
                ),
                # How Karpenter may take the pool's nodes away (consolidation, drift window, expiry); None for
                # node groups, which change only on updates (see rollouts).
                "karpenter_disruption": disruption_summary(pool, spec.platform.maintenance_window) if karpenter else None,
                "capacity_block": capacity_block_lifecycle(pool, karpenter),
                "zone_doubt": zone_offering_doubt(spec, pool),
            }
        )
    return rows


def device_mechanism(hardware: PoolHardware) -> dict[str, Any]:
    """What hands the pool's GPUs and EFA devices to pods (one mechanism per node): the device plugins, or the DRA
    drivers with the DeviceClasses claims name there."""
    from inferstack.catalog.charts import chart
    from inferstack.planning.device_claims import pool_device_classes

    pool = hardware.spec
    efa = bool(hardware.efa_interfaces)
    if pool.device_mode == "device_plugin":
        charts = [GPU_OPERATOR, *([EFA_PLUGIN] if efa else [])]
        return {"mode": "device_plugin", "releases": [f"{c} {chart(c).version}" for c in charts], "device_classes": [],
                "gpu_selector": None}
    charts = [GPU_DRA_DRIVER, *([EFA_DRA_DRIVER] if efa else [])]
    selector = pool.gpu_selector.model_dump(exclude_none=True) if pool.gpu_selector is not None else None
    return {"mode": "dra", "releases": [f"{c} {chart(c).version}" for c in charts],
            "device_classes": [c.name for c in pool_device_classes(pool)], "gpu_selector": selector or None}


def price_row(instance_type: str, purchase: str, price: Price) -> dict[str, Any]:
    return {"instance_type": instance_type, "purchase": purchase, "usd_per_node_hour": price.usd_per_hour,
            "spot_discount": price.spot_discount, "source": price.source}


def pool_prices(spec: StackSpec, hardware: PoolHardware, cost: PoolCost) -> dict[str, Any]:
    """Every price the pool's nodes are bought at with its source, what nothing prices and why, and the figures
    a reader compares at a glance: the dearest type's on-demand price and its spot price."""
    pool = hardware.spec
    on_demand = [node_price(spec.budget, spec.region, name, "on_demand") for name in pool.instance_types]
    spot_types = [t for t, purchase, _ in cost.prices if purchase == "spot"]
    spot = max((cost.price(t, "spot") for t in spot_types), key=lambda p: p.usd_per_hour, default=None)
    return {
        "on_demand_usd_per_node_hour": None if None in on_demand else max(p.usd_per_hour for p in on_demand),
        "prices": [price_row(t, purchase, price) for t, purchase, price in cost.prices],
        "unpriced": [{"instance_type": u.instance_type, "purchase": u.purchase, "reason": u.reason}
                     for u in cost.unpriced],
        # What each scale pays for: on-demand nodes first (the baseline), spot at its discount (the dearest type's).
        "spot": None if not pool.capacity.spot else {
            "assumed_discount": None if spot is None else spot.spot_discount,
            "usd_per_node_hour": None if spot is None else spot.usd_per_hour,
            "source": None if spot is None else spot.source,
        },
    }


def gpu_slots(hardware: PoolHardware) -> dict[str, Any]:
    """What one GPU of the pool is split into for pods: MIG slices (width in compute slices), time-sliced or
    MPS shares, or the whole GPU; `gpu_width` is the GPU's full width in the same units."""
    from inferstack.spec import MigSharing

    sharing, gpu = hardware.spec.gpu_sharing, hardware.gpu
    if isinstance(sharing, MigSharing):
        slots = [
            {"device": profile, "width": gpu.mig_profile(profile).compute_slices}
            for profile, count in sharing.layout.items() for _ in range(count)
        ]
        return {"gpu_slots": sorted(slots, key=lambda slot: -slot["width"]), "gpu_width": gpu.mig_compute_slices}
    shares = getattr(sharing, "replicas", 1)
    return {"gpu_slots": [{"device": gpu.name, "width": 1}] * shares, "gpu_width": shares}


def weights_format(model, hardware: PoolHardware) -> dict[str, Any]:
    """How the checkpoint stores the weights, what the GPU holds, what is downloaded and the kernel it implies."""
    from inferstack.planning.quantization import describe, is_online, kernel, served_format
    from inferstack.planning.sizing import checkpoint_bytes

    return {
        "stored": describe(model.stored_format),
        "held": describe(served_format(model)) + (" (quantized online)" if is_online(model) else ""),
        "download_gib": round(checkpoint_bytes(model) / GIB, 2),
        "kernel": kernel(model, hardware.gpu),
    }


def placements(spec: StackSpec, auto_reasons: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per engine of the stack as it deploys; `auto_reasons` says, per service auto placement placed, which
    pool it chose and why."""
    rows = []
    for model in spec.models:
        hardware = PoolHardware(spec.pool(model.pool))
        result = fit(model, hardware)
        route = transport(model, hardware)
        features = serving_features(model, result)
        if (line := disaggregation_line(spec, model)) is not None:
            features.insert(0, line)
        rows.append(
            {
                "model": model.name,
                "role": model.pd_role,
                "pool": model.pool,
                "auto_placed": model.name in auto_reasons,
                "auto_reason": auto_reasons.get(model.name),
                "device": model.mig_profile or hardware.gpu.name,
                "devices_per_replica": result.devices,
                "layout": parallel_layout(model),
                "weights_gib_per_device": round(result.weights_bytes_per_device / GIB, 2),
                "replicas": {"min": model.autoscaling.min_replicas, "max": model.autoscaling.max_replicas},
                "weights_gib": round(result.weights_bytes / GIB, 2),
                "weights": weights_format(model, hardware),
                "kv_formula": kv_formula(model),
                "kv_cache_gib": round(result.kv_cache_bytes / GIB, 2),
                "memory_gib": round(result.memory_bytes / GIB, 2),
                "kv_tokens": result.kv_tokens,
                "max_model_len": model.max_model_len,
                "max_concurrency_at_full_length": result.max_concurrency,
                "sequences_stated": result.stated_sequences,
                "fits": result.fits,
                "image": route.image,
                "transport": route.kind,
                "transport_detail": route.describe(),
                "claims": pod_claim_summary(model, hardware),
                "features": features,
                # The engine's own share of its pool's on-demand price, per replica and at its replica range.
                "usd_per_hour": engine_cost(model, hardware, spec),
            }
        )
    return rows


def pod_claim_summary(model: ModelServiceSpec, hardware: PoolHardware) -> dict[str, Any] | None:
    """On a DRA pool, what each pod of the engine claims (planning/device_claims.py); None under the device plugin."""
    from inferstack.catalog.dra import PCIE_ROOT_ATTRIBUTE
    from inferstack.planning.device_claims import pod_claims, uses_dra

    if not uses_dra(hardware):
        return None
    claims = pod_claims(model, hardware)
    return {"template": names.claim_template(model.name), "per_pod": claims.count, "gpus_per_claim": claims.claim.gpus,
            "efa_per_claim": claims.claim.efa, "paired_by": PCIE_ROOT_ATTRIBUTE if claims.claim.paired else None,
            "describe": claims.describe()}


def engine_cost(model: ModelServiceSpec, hardware: PoolHardware, spec: StackSpec) -> dict[str, float] | None:
    """On-demand $/h of the engine's devices (a stated on-demand or Savings Plan rate first), the throughput
    table's replica price (service_performance), at its replica range."""
    from inferstack.planning.service_performance import replica_usd_per_hour

    price = replica_node_price(spec, hardware)
    if price is None:
        return None
    per_replica = replica_usd_per_hour(model, hardware, price.usd_per_hour)
    scaling = model.autoscaling
    return {"replica": round(per_replica, 2), "min": round(per_replica * scaling.min_replicas, 2),
            "max": round(per_replica * scaling.max_replicas, 2)}


def disaggregation_line(spec: StackSpec, model: ModelServiceSpec) -> str | None:
    """A disaggregated service's roles side by side: engines, GPUs, cost, what moves between them, and what both
    must agree on for NIXL's handshake (planning/disaggregation.py)."""
    from inferstack.planning.attention import default_backend
    from inferstack.planning.disaggregation import HASHED_SPECULATIVE_METHODS, NIXL_BACKENDS, prefill_name
    from inferstack.planning.sizing import kv_bytes_per_token

    if model.disaggregation is None:
        return None
    engines = {m.name: m for m in spec.models}
    roles, gpus = [], {}
    for role, engine in (("prefill", engines[prefill_name(model.name)]), ("decode", model)):
        hardware = PoolHardware(spec.pool(engine.pool))
        gpus[role] = hardware.gpu
        cost = engine_cost(engine, hardware, spec)
        price = f", ${cost['min']:.2f}-{cost['max']:.2f}/h" if cost else ""
        roles.append(f"{role} {engine.autoscaling.min_replicas}-{engine.autoscaling.max_replicas} x "
                     f"{engine.gpus_per_replica} {hardware.gpu.name} on {engine.pool}{price}")
    defaults = {role: default_backend(model.model_copy(update={"attention_backend": None}), gpu)
                for role, gpu in gpus.items()}
    if model.attention_backend is None:
        backend = f"attention {defaults['decode']}, vLLM's choice on both GPUs"
    elif len(set(defaults.values())) > 1:
        backend = (f"attention {model.attention_backend} pinned on both roles ({gpus['prefill'].name} would pick "
                   f"{defaults['prefill']}, {gpus['decode'].name} {defaults['decode']})")
    else:
        backend = f"attention {model.attention_backend} as the spec names it"
    speculative = model.speculative
    draft = (f"; the {speculative.method} draft runs on both roles" if speculative is not None
             and speculative.method in HASHED_SPECULATIVE_METHODS else "")
    return (f"prefill/decode: {'; '.join(roles)}; a prompt with {model.disaggregation.non_cached_tokens}+ tokens "
            f"uncached on its decode pod is prefilled apart, its KV cache ({kv_bytes_per_token(model) / 1024:.0f} KiB "
            f"a token) pulled by the decode engine over EFA (NIXL {'/'.join(NIXL_BACKENDS)}); both roles hash alike "
            f"for NIXL: {backend}{draft}")


def serving_features(model: ModelServiceSpec, result: Fit) -> list[str]:
    """What the engine features take and do, one line each: LoRA slots, the speculative draft, the host KV tier."""
    from inferstack.planning import kv_offload, lora, speculative

    lines = []
    if model.lora_adapters:
        lines.append(
            f"LoRA: {len(model.lora_adapters)} adapters ({', '.join(a.name for a in model.lora_adapters)}) routed by "
            f"name, {lora.max_loras(model)} on the GPU at once at rank {lora.max_lora_rank(model)}: "
            f"{result.adapter_bytes_per_device / GIB:.2f} GiB per GPU taken from the KV cache"
        )
    if model.speculative is not None:
        draft = (f"a {result.draft_bytes_per_device / GIB:.2f} GiB draft per GPU" if result.draft_bytes_per_device
                 else "no draft weights")
        if model.pd_role == "prefill":
            lines.append(f"speculative decoding: {draft}, decode's draft run over each prompt so its KV cache moves "
                         "to decode with the model's (NIXL hashes the draft into the handshake)")
        else:
            lines.append(f"speculative decoding: {draft}; "
                         f"{speculative.latency_note(model, model.autoscaling.max_replicas)}")
    if model.kv_offload is not None:
        lines.append(
            f"host KV tier: {model.kv_offload.cpu_gib:g} GiB of pod memory, {kv_offload.tier_tokens(model)} tokens "
            f"({kv_offload.tier_tokens(model) / max(1, result.kv_tokens):.1f}x the GPU's), scored by the endpoint "
            f"picker's second prefix index of {kv_offload.tier_blocks(model)} {kv_offload.INDEX_BLOCK_TOKENS}-token blocks"
        )
    return lines


def rollouts(spec: StackSpec) -> dict[str, Any]:
    """Per service: the update strategy its pool's room at max size allows (inferstack.planning.rollout), what an
    update costs in serving, and how to wait for it, since `pulumi up` does not."""
    from inferstack.planning.rollout import rollout

    rows = []
    for model in spec.models:
        plan = rollout(spec, model)
        kind = "leaderworkerset" if model.multi_node else "deployment"
        workload = f"{kind}/{names.workload(model)}"
        timeout = f"--timeout={plan.check_timeout_seconds}s"
        check = (   # LWS conditions: api/leaderworkerset/v1/leaderworkerset_types.go (UpdateInProgress)
            f"kubectl -n {spec.serving_namespace} wait {workload} --for=condition=UpdateInProgress=False {timeout}"
            if model.multi_node
            else f"kubectl -n {spec.serving_namespace} rollout status {workload} {timeout}"
        )
        rows.append(
            {
                "model": model.name,
                "pool": model.pool,
                "workload": workload,
                "strategy": plan.kind,
                "max_surge": plan.max_surge,
                "max_unavailable": plan.max_unavailable,
                "spare_replica_fits_at_max": plan.spare_replica_fits,
                "replica_needs": plan.replica_needs,
                "pool_free_at_max": plan.free_at_max,
                "load_seconds": plan.load_seconds,
                "downtime_seconds": plan.downtime_seconds,
                "check": check,
                "check_timeout_seconds": plan.check_timeout_seconds,
            }
        )
    return {
        "pulumi_up_waits": False,
        "why": (
            "workloads carry pulumi.com/skipAwait: a replacement may first wait for a GPU node scale-up and "
            "then loads the model, so a rollout at max replicas can outlast a CI job; check it with the "
            "command per service (timeout sized from its load time and max replicas)"
        ),
        "models": rows,
    }


def _load_figures(point: Any) -> dict[str, Any]:
    """One replica's steady state as the plan prints it."""
    return {
        "running": round(point.running, 1),
        "limit": point.limit,
        "tokens_per_second": round(point.output_tokens_per_second, 1),
        "ttft_ms": None if math.isinf(point.first_token_seconds) else round(point.first_token_seconds * 1000, 1),
        "itl_ms": None if point.inter_token_seconds is None else round(point.inter_token_seconds * 1000, 2),
        "bound": (point.steps.decode_step if point.decoding else point.steps.chunk_step).bound,
    }


def throughput(spec: StackSpec) -> dict[str, Any]:
    """Per service that states its traffic: throughput, latency, replicas and $/1M output tokens, with the
    model's assumptions and its stated accuracy against published measurements."""
    from inferstack.planning.accuracy import service_confidence
    from inferstack.planning.service_performance import ASSUMPTIONS, service_estimate

    rows = []
    for model in spec.models:
        if model.traffic is None:
            continue
        traffic = model.traffic
        row: dict[str, Any] = {
            "model": model.name,
            "pool": model.pool,
            "traffic": traffic.model_dump(),
            "slo": None if model.slo is None else model.slo.model_dump(),
        }
        if model.disaggregation is not None:
            # The service's throughput and $/token would add two engines' figures the one-engine estimate does not
            # split; each role's replicas within its part of the SLO are modelled (scaling_thresholds.role_of).
            rows.append({**row, "error": "throughput and cost per token not modelled for a prefill/decode service "
                         "(their sizing and cost are in the placements); each role's replicas within the SLO are in "
                         "roles[]", "roles": _role_capacities(spec, model)})
            continue
        try:
            hardware = PoolHardware(spec.pool(model.pool))
            price = replica_node_price(spec, hardware)
            estimate = service_estimate(model, hardware, region=spec.region,
                                        node_usd_per_hour=None if price is None else price.usd_per_hour)
        except ValueError as error:   # no catalog price, or the KV cache cannot hold one request
            rows.append({**row, "error": str(error)})
            continue
        rows.append(
            {
                **row,
                "at_traffic": _load_figures(estimate.at_traffic),
                "full_load": _load_figures(estimate.full_load),
                "confidence": _confidence(service_confidence(model, hardware, estimate)),
                "traffic_tokens_per_second": round(estimate.traffic_output_tokens_per_second, 1),
                "replicas_for_traffic": estimate.replicas_for_traffic,
                "replicas_for_slo": estimate.replicas_for_slo,
                "slo_unreachable": estimate.slo_unreachable,
                "replicas_needed": estimate.replicas,
                "max_replicas": model.autoscaling.max_replicas,
                "capacity_requests_per_minute": round(estimate.capacity_requests_per_second * 60, 1),
                "slo_capacity": slo_capacity_of(model, model, hardware),
                "usd_per_hour": round(estimate.usd_per_hour, 2),
                "usd_per_million_output_tokens": round(estimate.usd_per_million_output_tokens, 4),
                "usd_per_million_output_tokens_at_full_load": round(
                    estimate.usd_per_million_output_tokens_at_full_load, 4
                ),
                "priced_at": "on-demand",
            }
        )
    if not rows:
        return {"models": [], "assumptions": [], "accuracy": None}
    return {
        "models": rows,
        "assumptions": [{"name": a.name, "value": a.value, "why": a.why} for a in ASSUMPTIONS],
        "accuracy": model_accuracy(),
    }


def slo_capacity_of(engine: ModelServiceSpec, service: ModelServiceSpec, hardware: PoolHardware) -> dict[str, Any] | None:
    """Replicas the stated traffic needs within the SLO beside max_replicas, as CI reads it (and the slo-capacity
    policy is configured with)."""
    from inferstack.planning.scaling_thresholds import slo_capacity

    found = slo_capacity(engine, service, hardware)
    return None if found is None else found.as_dict()


def _role_capacities(spec: StackSpec, service: ModelServiceSpec) -> list[dict[str, Any]]:
    """Each engine of a prefill/decode service: its role and replicas within its part of the SLO."""
    return [{"engine": engine.name, "role": engine.pd_role,
             "slo_capacity": slo_capacity_of(engine, service, PoolHardware(spec.pool(engine.pool)))}
            for engine in spec.models if engine.pd_service == service.name]


def scalers(spec: StackSpec) -> list[dict[str, Any]]:
    """Each engine's KEDA trigger and threshold as the ScaledObject states them, and where the figure came from."""
    from inferstack.planning.disaggregation import service_of
    from inferstack.serving.autoscaling import needs_scaler, scaler_metric

    rows = []
    for model in spec.models:
        if not needs_scaler(spec, model):
            continue
        chosen = scaler_metric(spec, model)
        rows.append({"engine": model.name, "service": service_of(spec.models, model).name,
                     "trigger": chosen.trigger, "metric": chosen.metric,
                     "threshold": chosen.threshold, "derivation": chosen.derivation})
    return rows


def edge(spec: StackSpec, estimates: dict[str, Any]) -> dict[str, Any] | None:
    """How clients reach the gateway, who gets through, and each tenant's limit per model service beside what the
    service's max replicas carry within its SLO (from `estimates`, the throughput section); None without a gateway."""
    from inferstack.serving.gateway import edge_summary

    if not spec.gateway.enabled:
        return None
    transport_words, authentication = edge_summary(spec.gateway)
    from inferstack.serving.gateway import GATEWAY_PODS, tenant_service_limits

    capacity = {row["model"]: row.get("capacity_requests_per_minute") for row in estimates["models"]}
    pairs = tenant_service_limits(spec)
    limits = [
        {"tenant": tenant.name, "model": model.name, "requests_per_minute": tenant.requests_per_minute,
         "tokens_per_minute": tenant.tokens_per_minute, "capacity_requests_per_minute": capacity.get(model.name)}
        for tenant, model in pairs
    ]
    services = []
    for name in dict.fromkeys(model.name for _, model in pairs):
        # What the gateway admits: every tenant's limit together, on each gateway pod.
        admitted = sum(t.requests_per_minute for t, m in pairs if m.name == name) * GATEWAY_PODS
        held = capacity.get(name)
        services.append({"model": name, "admitted_requests_per_minute": admitted, "gateway_pods": GATEWAY_PODS,
                         "capacity_requests_per_minute": held,
                         "exceeds_capacity": held is not None and admitted > held})
    return {"transport": transport_words, "tls_mode": spec.gateway.tls.mode, "authentication": authentication,
            "tenants": [{"name": t.name, "models": list(t.models)} for t in spec.gateway.auth.tenants],
            "limits": limits, "services": services, "fairness": fairness_summary(spec)}


def fairness_summary(spec: StackSpec) -> str:
    """How a saturated service shares its queue between tenants, in words."""
    if not spec.gateway.auth.tenants:
        return "one queue: no tenant is named"
    return ("each tenant queues apart in the endpoint picker (flow control, round-robin between tenants, by "
            f"priority within; a request waits at most {spec.gateway.request_timeout_seconds} s)")


def _figures(accuracy: Any) -> dict[str, Any]:
    return {
        "points": accuracy.points,
        "median_error": round(accuracy.median_error, 4),
        "worst_factor": round(accuracy.worst_factor, 3),
        "worst_point": accuracy.worst_point,
        "short": accuracy.short(),
    }


def _confidence(confidence: Any) -> dict[str, Any]:
    return {"basis": confidence.label, **_figures(confidence.accuracy), "text": confidence.text()}


def model_accuracy() -> dict[str, Any]:
    """The throughput model's accuracy as the plan states it: out of sample (leave one publisher out), with the
    in-sample error and the other engines' beside it, never in its place."""
    from inferstack.planning.accuracy import in_sample, other_engines, out_of_sample

    stored = out_of_sample()
    return {
        "method": stored.method,
        "stated": stored.stated(),
        "out_of_sample": _figures(stored.over(stored.ratios)),
        "by_architecture": {kind: _figures(a) for kind, a in stored.by_architecture().items()},
        "in_sample": _figures(in_sample()),
        "other_engines": {**_figures(other_engines()),
                          "what": "the vLLM model against TensorRT-LLM, NIM and SGLang runs, never fitted"},
    }


# Charts of the releases a pod of a model waits for once it exists (dependency_rule.installer names them).
GPU_OPERATOR, EFA_PLUGIN, CLUSTER_AUTOSCALER = "gpu-operator", "aws-efa-k8s-device-plugin", "cluster-autoscaler"
GPU_DRA_DRIVER, EFA_DRA_DRIVER = "dra-driver-nvidia-gpu", "aws-dranet"
KARPENTER = "karpenter"
# What holds a pool's nodes: its managed node groups, or under Karpenter its NodePools (labelled alike).
POOL_NODE_TYPES = ("aws:eks/nodeGroup:NodeGroup", "kubernetes:karpenter.sh/v1:NodePool")
WORKLOAD_TYPES = ("kubernetes:apps/v1:Deployment", "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
REPLICA_TYPE = "inferstack:serving:FirstReplica"   # not a resource: the moment a model's first replica is ready


def _pool_label(resource: Mapping[str, Any]) -> str | None:
    """The pool a node group (its labels) or a Karpenter NodePool (its node template's labels) holds nodes for."""
    inputs = resource["inputs"]
    labels = inputs.get("labels") or ((inputs.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels")
    return (labels or {}).get(POOL_LABEL)


def graph_resources(recording: Recording) -> list[dict[str, Any]]:
    """resources.json entries plus what the time-to-serving graph also reads: provider and input dependencies."""
    return [
        {**r.as_dict(), "provider": r.provider, "input_dependencies": r.input_dependencies} for r in recording.resources
    ]


def start_parts(parts: tuple[tuple[str, str, float], ...]) -> list[dict[str, Any]]:
    """A replica's start (creation_times.replica_parts) as plan rows: the phase, its CREATION_TIMES entry (the
    source), the seconds."""
    return [{"part": key, "phase": phase, "seconds": round(seconds, 1)} for phase, key, seconds in parts]


def time_to_serving(
    spec: StackSpec, recording: Recording, pools: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """From an empty account to each model's first ready replica: the program's longest chain of waits and
    its lower bound without needless ones (dependency_rule.DependencyRule), plus the waits a pod has in the
    cluster (its pool's nodes, the GPU operator, the EFA plugin, a scale-up, KEDA, its S3 credentials)."""
    from inferstack.planning import serving_time as st
    from inferstack.planning.creation_times import CREATION_TIMES, creation_key, replica_parts, typical_seconds
    from inferstack.planning.dependency_rule import DependencyRule, installer
    from inferstack.planning.sizing import checkpoint_bytes

    resources = graph_resources(recording)
    karpenter = spec.platform.karpenter
    by_chart: dict[str, str] = {}
    workloads: dict[tuple[str | None, str | None], str] = {}
    pool_groups: dict[str, list[str]] = defaultdict(list)
    scalers: dict[str, str] = {}
    readers: list[str] = []
    reader = (spec.serving_namespace, MODEL_READER_SERVICE_ACCOUNT)
    for r in resources:
        inputs = r["inputs"]
        if (chart := installer(r)) is not None:
            by_chart.setdefault(chart, r["name"])
        if r["type"] in WORKLOAD_TYPES:
            metadata = inputs.get("metadata") or {}
            workloads[(metadata.get("namespace"), metadata.get("name"))] = r["name"]
        elif r["type"] in POOL_NODE_TYPES and (pool_label := _pool_label(r)):
            pool_groups[pool_label].append(r["name"])
        elif r["type"] == "kubernetes:keda.sh/v1alpha1:ScaledObject":
            scalers[((inputs.get("spec") or {}).get("scaleTargetRef") or {}).get("name", "")] = r["name"]
        elif r["type"] == "aws:eks/podIdentityAssociation:PodIdentityAssociation" and (
            (inputs.get("namespace"), inputs.get("serviceAccount")) == reader
        ):
            readers.append(r["name"])

    # Models whose first replica lands on a node beyond min scale (in pack's packing): it waits for a scale-up.
    scaled = {
        cell.model for pool in pools for node in pack({"placements": rows}, pool) if node.scaled
        for gpu in node.gpus for cell in gpu if cell.model and cell.replica == 1
    }
    targets, runtime, replicas = {}, [], {}
    for model in spec.models:
        target = workloads.get((spec.serving_namespace, names.workload(model)))
        if target is None:
            continue
        pool = spec.pool(model.pool)
        # Karpenter keeps no node running: every first replica waits for one it launches.
        scale_up = karpenter or model.name in scaled
        waits = [*pool_groups[model.pool], by_chart.get(GPU_OPERATOR), *readers]
        # Under DRA the pod's claims wait for the drivers' ResourceSlices; else its limits for the device plugins'.
        dra = pool.device_mode == "dra"
        waits += [by_chart.get(GPU_DRA_DRIVER)] if dra else []
        waits += [by_chart.get(EFA_DRA_DRIVER if dra else EFA_PLUGIN)] if PoolHardware(pool).efa_interfaces else []
        waits += [by_chart.get(KARPENTER if karpenter else CLUSTER_AUTOSCALER)] if scale_up else []
        waits += [scalers.get(names.workload(model))] if model.autoscaling.min_replicas == 0 else []
        # The first replica is its own node of the graph: it follows the workload's creation and those waits.
        replica = f"{model.name}: first ready replica"
        resources.append({"type": REPLICA_TYPE, "name": replica, "custom": True, "parent": None, "depends_on": [],
                          "inputs": {}})
        runtime += [st.Edge(replica, wait, "runtime") for wait in [target, *waits] if wait is not None]
        targets[model.name] = replica
        weights = checkpoint_bytes(model)  # as stored: online FP8 still downloads 16-bit files
        replicas[replica] = {
            "model": model,
            "new_node": scale_up,
            "parts": replica_parts(weights, model.weight_loader, new_node=scale_up),
            "cold_start": replica_parts(weights, model.weight_loader, new_node=True),
            "warm_restart": replica_parts(weights, model.weight_loader, warm=True),
            "weights_seconds": {
                source: round(weights / (CREATION_TIMES[f"weights_{source}_gb_per_s"].seconds * 1e9), 1)
                for source in ("s3", "nvme")
            },
        }

    def seconds(resource: st.Resource) -> float:
        replica = replicas.get(resource["name"])
        return sum(s for _, _, s in replica["parts"]) if replica else typical_seconds(resource)

    rule = DependencyRule(resources)
    result = st.time_to_serving(resources, targets, required=rule, seconds=seconds, runtime=runtime)
    by_name = {r["name"]: r for r in resources}

    def chain(found: st.Chain) -> list[dict[str, Any]]:
        return [
            {
                "name": step.name, "type": step.type, "seconds": round(step.seconds, 1),
                "start": round(step.finish - step.seconds, 1), "finish": round(step.finish, 1),
                "creation_time": "first_replica" if step.name in replicas else creation_key(by_name[step.name]),
            }
            for step in found.steps
        ]

    models = []
    for timing in result.models:
        replica = replicas[timing.target]
        model = replica["model"]
        models.append(
            {
                "model": timing.model,
                "workload": workloads[(spec.serving_namespace, names.workload(model))],
                "seconds": round(timing.program.seconds, 1),
                "lower_bound_seconds": round(timing.lower_bound.seconds, 1),
                "critical_path": chain(timing.program),
                "lower_bound_path": chain(timing.lower_bound),
                "first_replica": start_parts(replica["parts"]),
                # The same replica on a new node, and restarted on the node it ran on (weights, compile cache kept).
                "weight_loader": model.weight_loader,
                "cold_start": start_parts(replica["cold_start"]),
                "warm_restart": start_parts(replica["warm_restart"]),
                "weights_load_seconds": replica["weights_seconds"],
                "new_node": replica["new_node"],   # its first replica waits for a node beyond min scale
                "scale_from_zero": model.autoscaling.min_replicas == 0,
            }
        )
    used = {step["creation_time"] for m in models for step in m["critical_path"]}
    used |= {part["part"] for m in models for key in ("first_replica", "cold_start", "warm_restart") for part in m[key]}
    used |= {"weights_nvme_gb_per_s"}
    return {
        "models": models,
        "needless_edges": [
            {"dependent": e.dependent, "dependency": e.dependency, "kind": e.kind} for e in result.needless
        ],
        "creation_times": [
            {"key": t.key, "seconds": t.seconds, "measured": t.measured, "source": t.source}
            for t in CREATION_TIMES.values() if t.key in used
        ],
    }


def policy_results(spec: StackSpec, recording: Recording) -> list[dict[str, Any]]:
    """The policy pack over what the program registered, as `inferstack check` reports it."""
    from inferstack.policies.runner import run_policies, spec_policy_config

    resources = [r.as_dict() for r in recording.resources]
    return [r.as_dict() for r in run_policies(resources, spec.environment, spec_policy_config(spec))]


def karpenter_plan(spec: StackSpec) -> dict[str, Any] | None:
    """Under Karpenter: what the account needs for spot launches, and where system pods find CPU room."""
    if not spec.platform.karpenter:
        return None
    from inferstack.aws.karpenter import spot_service_linked_role_note
    from inferstack.platform.karpenter_pools import cpu_pool_note

    return {
        "spot_service_linked_role": spot_service_linked_role_note(spec),
        "spot_service_linked_role_created": spec.platform.create_spot_service_linked_role,
        "system_capacity": cpu_pool_note(spec),
    }


def build_plan(stack: StackSpec | ValidatedStack, recording: Recording) -> dict[str, Any]:
    validated = as_validated(stack)
    spec = validated.stack   # the placements the program deployed, `auto` ones decided
    pools = node_pools(spec)
    rows = placements(spec, validated.auto_reasons)
    estimates = throughput(spec)
    priced = [p["usd_per_hour"] for p in pools if p["usd_per_hour"]["max"] is not None]
    return {
        "stack": spec.environment,
        "region": spec.region,
        "resources": {
            "total": sum(1 for r in recording.resources if r.custom),
            "components": sum(1 for r in recording.resources if not r.custom),
            "by_layer": layers(recording),
            # Outputs the program read that the embedded engine could not answer as AWS would: a figure
            # built on one of them is not what `pulumi up` would see.
            "unanswered_outputs": list(recording.unanswered),
        },
        "node_pools": pools,
        "karpenter": karpenter_plan(spec),
        "placements": rows,
        "totals": {
            "gpus_max": sum(p["gpus_per_node"] * p["nodes"]["max"] for p in pools),
            "usd_per_hour_min": round(sum(p["min"] for p in priced), 2),
            "usd_per_hour_max": round(sum(p["max"] for p in priced), 2),
            "unpriced_pools": [p["name"] for p in pools if p["usd_per_hour"]["max"] is None],
            "budget_usd_per_hour": spec.budget.max_usd_per_hour,
            # Whose prices the figures use; the spec's own (the policy pack is configured with them too).
            "prices": prices_note(spec.region, spec.budget),
            "spot_discount_override": spec.budget.spot_discount,
            "stated_prices": [p.model_dump() for p in spec.budget.prices],
            # What runs at min scale (planning/cost.nodes_at_min_scale), said the way the plan prints it.
            "min_scale": "at min scale Karpenter runs only what the minimum replicas need (a reservation is paid in full)"
            if spec.platform.karpenter else "min scale runs the on-demand baseline",
        },
        "edge": edge(spec, estimates),
        "throughput": estimates,
        "scalers": scalers(spec),
        "rollouts": rollouts(spec),
        "interruption": interruption_plan(spec),
        "node_health": node_health_plan(spec),
        "time_to_serving": time_to_serving(spec, recording, pools, rows),
        "outputs": sorted(recording.outputs),
        "policies": policy_results(spec, recording),
    }
