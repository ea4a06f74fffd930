"""Prefill/decode disaggregation over EFA (issue 16, item 1).

Upstream rules encoded here:
- vLLM 0.33.0 vllm/config/kv_transfer.py: kv_role in kv_producer | kv_consumer | kv_both, required with a
  connector; nixl/connector.py: NixlConnector is the pull variant, kv_both deprecated; nixl/base_worker.py:
  kv_connector_extra_config.backends (default ["UCX"]), PP > 1 refused on a kv_consumer; envs.py:
  VLLM_NIXL_SIDE_CHANNEL_HOST defaults to localhost, VLLM_NIXL_SIDE_CHANNEL_PORT to 5600.
- vllm/distributed/kv_transfer/kv_connector/utils.py (tp_ratio): one tensor parallel size divides the other;
  llm-d docs/operations/disaggregation/vllm.md: decode TP >= prefill TP for non-MLA models.
- vllm/config/vllm.py _post_init_kv_transfer_config: --kv-offloading-size replaces the KV-transfer connector.
- llm-d-router v0.10.0 deploy/config/pd-epp-config.yaml and profilehandler/disagg/README.md: disagg-profile-handler
  with deciders.prefill = prefix-based-pd-decider (nonCachedTokens), prefill-filter / decode-filter on llm-d.ai/role,
  profiles named prefill and decode; deploy/components/vllm-decode/deployment.yaml: the routing sidecar as an init
  container with restartPolicy Always on port 8000, vLLM on 8200; pkg/sidecar/proxy/options.go: --port,
  --model-server-port, --kv-connector nixlv2, --secure-proxy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from test_serving_features import edited, refusal  # noqa: E402

from inferstack.cli import main
from inferstack.planning.disaggregation import prefill_engine
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
SERVICE = "qwen-32b-pd"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("pd") / "out"
    assert main(["render", "serving", "--stacks-dir", str(STACKS), "--out", str(out)]) == 0
    objects = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))]
    return objects, json.loads((out / "plan.json").read_text())


@pytest.fixture(scope="module")
def stack() -> StackSpec:
    return load_stack(STACKS, "serving")


def named(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def vllm(pod):
    return next(c for c in pod["containers"] if c["name"] == "vllm")


def arg(container, flag):
    return container["args"][container["args"].index(flag) + 1]


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_both_roles_run_nixl_over_libfabric_with_explicit_roles(rendered):
    objects, _ = rendered
    for name, role, port in ((SERVICE, "kv_consumer", "8200"), (f"{SERVICE}-prefill", "kv_producer", "8000")):
        pod = named(objects, "Deployment", name)["spec"]["template"]["spec"]
        container = vllm(pod)
        # A decode engine recomputes a prompt whose KV it cannot load (config/kv_transfer.py:88, default "fail").
        recompute = {"kv_load_failure_policy": "recompute"} if role == "kv_consumer" else {}
        assert json.loads(arg(container, "--kv-transfer-config")) == {
            "kv_connector": "NixlConnector", "kv_role": role, "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
            **recompute,
        }
        assert arg(container, "--port") == port
        env = {e["name"]: e for e in container["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert {"name": "nixl", "containerPort": 5600, "protocol": "TCP"} in container["ports"]
        limits = container["resources"]["limits"]
        assert int(limits["vpc.amazonaws.com/efa"]) >= 1, name        # the KV cache rides EFA
        assert container["image"].endswith("-efa")                     # NIXL's LIBFABRIC plugin is in vLLM's EFA build


def test_the_decode_pod_puts_the_routing_sidecar_in_front_of_vllm(rendered):
    objects, _ = rendered
    pod = named(objects, "Deployment", SERVICE)["spec"]["template"]["spec"]
    (sidecar,) = [c for c in pod["initContainers"] if c["name"] == "routing-sidecar"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["args"] == ["--port=8000", "--model-server-port=8200", "--kv-connector=nixlv2", "--secure-proxy=false",
                               "--enable-ssrf-protection=true", f"--inference-pool=inference/{SERVICE}-prefill",
                               "--pool-group=inference.networking.k8s.io"]
    assert sidecar["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert vllm(pod)["readinessProbe"]["httpGet"]["port"] == "engine"
    assert {"name": "engine", "containerPort": 8200, "protocol": "TCP"} in vllm(pod)["ports"]
    prefill = named(objects, "Deployment", f"{SERVICE}-prefill")["spec"]["template"]["spec"]
    assert not any(c["name"] == "routing-sidecar" for c in prefill.get("initContainers", []))
    service = named(objects, "Service", SERVICE)
    assert service["spec"]["ports"][0]["targetPort"] == 8000


def test_one_pool_and_one_route_serve_both_roles(rendered):
    objects, _ = rendered
    pool = named(objects, "InferencePool", SERVICE)
    for name, role in ((SERVICE, "decode"), (f"{SERVICE}-prefill", "prefill")):
        labels = named(objects, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert labels["llm-d.ai/role"] == role and matches(pool["spec"]["selector"], labels)
    routes = [o for o in objects if o["kind"] == "HTTPRoute"]
    assert not any(r["metadata"]["name"].startswith(f"{SERVICE}-prefill") for r in routes)
    # The prefill pods' own InferencePool is the sidecars' SSRF allowlist: no route sends traffic to it.
    backends = {ref["name"] for r in routes for rule in r["spec"]["rules"] for ref in rule["backendRefs"]}
    assert f"{SERVICE}-prefill" not in backends


def test_the_picker_runs_llm_d_p_d_scheduling(rendered, stack):
    objects, _ = rendered
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(f"{SERVICE}-epp")]
    config = yaml.safe_load(config_map["data"]["plugins.yaml"])
    types = {p.get("name", p["type"]): p for p in config["plugins"]}
    assert types["disagg-profile-handler"]["parameters"] == {"deciders": {"prefill": "prefix-based-pd-decider"}}
    assert types["prefix-based-pd-decider"]["parameters"] == {"nonCachedTokens": 256}
    profiles = {p["name"]: [ref["pluginRef"] for ref in p["plugins"]] for p in config["schedulingProfiles"]}
    assert set(profiles) == {"prefill", "decode"}
    assert profiles["prefill"][:2] == ["prefill-filter", "max-score-picker"]
    assert profiles["decode"][:2] == ["decode-filter", "max-score-picker"]
    # Every plugin is named by a profile, the handler or its decider, or flow control (fairness policy, detector).
    flow = config["flowControl"]
    controls = {flow["defaultPriorityBand"]["fairnessPolicyRef"], flow["saturationDetector"]["pluginRef"]}
    referenced = {ref for refs in profiles.values() for ref in refs} | {"prefix-based-pd-decider", "disagg-profile-handler"}
    assert referenced | controls == set(types)
    assert "&id" not in config_map["data"]["plugins.yaml"]


def test_the_stack_validates_and_passes_every_policy(rendered):
    from kube_validation import assert_valid

    objects, plan = rendered
    assert_valid(objects)
    assert [p["name"] for p in plan["policies"] if p["violations"]] == []


def test_the_plan_sizes_and_prices_each_role(rendered, stack):
    _, plan = rendered
    rows = {row["model"]: row for row in plan["placements"]}
    decode, prefill = rows[SERVICE], rows[f"{SERVICE}-prefill"]
    assert (decode["role"], prefill["role"]) == ("decode", "prefill")
    assert (decode["devices_per_replica"], prefill["devices_per_replica"]) == (2, 1)
    # p5.48xlarge's on-demand price spread over its 8 GPUs, times each role's GPUs and replicas.
    node = next(p for p in plan["node_pools"] if p["name"] == "h100")["on_demand_usd_per_node_hour"]
    assert prefill["usd_per_hour"]["max"] == pytest.approx(round(node / 8 * 1 * 4, 2))
    assert decode["usd_per_hour"]["min"] == pytest.approx(round(node / 8 * 2 * 1, 2))
    line = decode["features"][0]
    assert line.startswith("prefill/decode: prefill 1-4 x 1 H100 on h100") and "decode 1-2 x 2 H100" in line
    assert "over EFA (NIXL LIBFABRIC)" in line


def test_the_prefill_engine_keeps_the_model_and_takes_the_roles_shape(stack):
    service = next(m for m in stack.models if m.name == SERVICE)
    engine = prefill_engine(service)
    assert (engine.name, engine.tensor_parallel, engine.pool, engine.pd_role, engine.pd_service) == (
        f"{SERVICE}-prefill", 1, "h100", "prefill", SERVICE)
    assert (engine.model, engine.kv_cache_dtype, engine.max_model_len) == (service.model, service.kv_cache_dtype, service.max_model_len)
    assert service.pd_role == "decode" and engine.disaggregation is None and engine.speculative is None
    assert [m.name for m in validate(stack).stack.models].count(f"{SERVICE}-prefill") == 1


# ------------------------------------------------------------------------------------------ refusals


def changed(stack: StackSpec, **changes) -> dict:
    return edited(stack, SERVICE, **changes)


def prefill(**role) -> dict:
    return {"prefill": role, "non_cached_tokens": 256}


@pytest.mark.parametrize("changes, path, words", [
    ({"tensor_parallel": 2, "disaggregation": prefill(tensor_parallel=3)}, "disaggregation.prefill.tensor_parallel",
     "do not divide"),
    ({"model": "Qwen/Qwen2.5-7B-Instruct", "tensor_parallel": 1, "disaggregation": prefill(tensor_parallel=8)},
     "disaggregation.prefill.tensor_parallel", "replicate heads"),
    ({"pipeline_parallel": 2}, "pipeline_parallel", "pipeline_parallel > 1"),
    ({"disaggregation": prefill(pool="l40s")}, "disaggregation.prefill.pool", "no EFA"),
    ({"image": "vllm/vllm-openai:v0.33.0"}, "image", "LIBFABRIC"),
    ({"kv_offload": {"cpu_gib": 8}}, "kv_offload", "replaces the NIXL connector"),
    ({"disaggregation": prefill(pool="nowhere")}, "disaggregation.prefill.pool", "no node pool"),
    ({"disaggregation": prefill(autoscaling={"min_replicas": 1, "max_replicas": 2, "metric": "epp_queue"})},
     "disaggregation.prefill.autoscaling.metric", "picker"),
    ({"name": "q" * 34}, "name", "over 40 characters"),
])
def test_layouts_that_fail_or_fall_back_to_tcp_are_refused(stack, changes, path, words):
    error = refusal(changed(stack, **changes))
    assert error.path == f"models[0].{path}" and words in str(error), str(error)


def test_roles_in_two_zones_are_refused(stack):
    data = changed(stack, disaggregation=prefill(pool="h100-b"))
    h100 = next(p for p in data["node_pools"] if p["name"] == "h100")
    data["node_pools"].append({**h100, "name": "h100-b", "availability_zones": ["us-east-1b"]})
    h100["availability_zones"] = ["us-east-1a"]
    error = refusal(data)
    assert error.path == "models[0].disaggregation.prefill.pool" and "does not cross zones" in str(error)


def test_the_gateway_must_split_the_requests(stack):
    data = changed(stack)
    data["gateway"] = {**data.get("gateway", {}), "enabled": False}
    for model in data["models"]:
        if model["autoscaling"].get("metric") == "epp_queue":
            model["autoscaling"]["metric"] = "queue_depth"
    assert refusal(data).path == "models[0].disaggregation"


# vLLM 0.33.0 vllm/config/kv_transfer.py KVTransferConfig fields (lines 60-88) and kv_role choices (11-13); the keys
# NIXL reads from kv_connector_extra_config (nixl/base_worker.py 624-742, base_scheduler.py 82-184).
KV_TRANSFER_FIELDS = {"kv_connector", "engine_id", "kv_buffer_device", "kv_role", "kv_port", "kv_connector_extra_config",
                      "kv_connector_module_path", "enable_permute_local_kv", "kv_load_failure_policy"}
KV_ROLES = {"kv_producer", "kv_consumer", "kv_both"}
NIXL_EXTRA_KEYS = {"backends", "num_threads", "kv_lease_duration", "kv_recompute_threshold", "bidirectional_kv_xfer",
                   "decoder_kv_blocks_ttl", "engine_ttl", "enforce_handshake_compat"}
# distributed/kv_transfer/kv_connector/factory.py 153-249 registers NixlConnector; NIXL names its libfabric
# backend LIBFABRIC (the llm-d AWS overlay's kv_connector_extra_config).
NIXL_BACKENDS = {"UCX", "LIBFABRIC"}


def test_the_kv_transfer_config_is_one_vllm_accepts(rendered):
    objects, _ = rendered
    for name in (SERVICE, f"{SERVICE}-prefill"):
        config = json.loads(arg(vllm(named(objects, "Deployment", name)["spec"]["template"]["spec"]), "--kv-transfer-config"))
        assert set(config) <= KV_TRANSFER_FIELDS and config["kv_role"] in KV_ROLES - {"kv_both"}
        assert set(config["kv_connector_extra_config"]) <= NIXL_EXTRA_KEYS
        assert set(config["kv_connector_extra_config"]["backends"]) <= NIXL_BACKENDS


def test_the_prefill_engine_answers_to_the_services_name_and_scales_on_its_own_series(rendered):
    """The sidecar forwards the client's request, `model` unchanged, to the prefill pod (llm-d-router v0.10.0
    docs/disaggregation.md), and vLLM answers only to its --served-model-name; the vLLM PodMonitor copies the
    llm-d.ai/role pod label as llm_d_ai_role (prometheus-operator v0.93.0 promcfg.go sanitizeLabelName), so each
    role's KEDA query sees only its own engines."""
    objects, _ = rendered
    for name, role in ((SERVICE, "decode"), (f"{SERVICE}-prefill", "prefill")):
        container = vllm(named(objects, "Deployment", name)["spec"]["template"]["spec"])
        assert arg(container, "--served-model-name") == SERVICE
        scaled = named(objects, "ScaledObject", name)
        (query,) = [t["metadata"]["query"] for t in scaled["spec"]["triggers"] if "vllm:" in t["metadata"]["query"]]
        assert f'model_name="{SERVICE}"' in query and f'llm_d_ai_role="{role}"' in query
    from promql_labels import catalog

    (monitor,) = [o for o in objects if o["kind"] == "PodMonitor" and o["spec"].get("podTargetLabels")]
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "vllm"
    # The PromQL checks count exactly the labels the monitor copies.
    assert monitor["spec"]["podTargetLabels"] == catalog()["exporters"]["vllm"]["pod_target_labels"] == ["llm-d.ai/role"]


def test_both_roles_stay_in_one_zone_and_prefill_keeps_connections_open(rendered):
    """Required zone affinity to the service's engines (the first matches itself, Kubernetes inter-pod affinity);
    prefill engines keep idle HTTP connections past the sidecar's 90 s (llm-d-router v0.10.0 pkg/sidecar/proxy/
    proxy.go IdleConnTimeout) instead of vLLM's 5 s (vllm/envs.py VLLM_HTTP_TIMEOUT_KEEP_ALIVE)."""
    objects, _ = rendered
    for name in (SERVICE, f"{SERVICE}-prefill"):
        template = named(objects, "Deployment", name)["spec"]["template"]
        (term,) = template["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "topology.kubernetes.io/zone"
        assert matches(term["labelSelector"], template["metadata"]["labels"])
    for name in (SERVICE, f"{SERVICE}-prefill"):   # both sit behind a sidecar: decode behind its own
        env = {e["name"]: e.get("value") for e in vllm(named(objects, "Deployment", name)["spec"]["template"]["spec"])["env"]}
        assert int(env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) > 90, name


@pytest.mark.parametrize("field", ["pool", "tensor_parallel"])
def test_auto_placement_is_refused_for_a_disaggregated_service(stack, field):
    error = refusal(changed(stack, **{field: "auto"}))
    assert error.path == f"models[0].{field}" and "sized against its prefill role" in str(error)


def test_a_prefill_engine_refusal_lands_on_the_field_the_spec_holds(stack):
    """The role's own shape is reported under disaggregation.prefill; what it shares with the service (here its
    16-bit weights, which one H100 at gpu_memory_utilization 0.5 cannot hold) on the service."""
    error = refusal(changed(stack, gpu_memory_utilization=0.5, max_model_len=40960))
    assert error.path == "models[0].quantization" and error.problem.startswith("its prefill engine: ")
    error = refusal(changed(stack, disaggregation=prefill(tensor_parallel=1, pool="l40s")))
    assert error.path == "models[0].disaggregation.prefill.pool"


def test_a_wider_prefill_serves_a_gqa_model_whose_heads_it_splits(stack):
    """vLLM 0.33.0 nixl/tp_mapping.py:104-127 compute_tp_mapping: with a wider prefill (P TP > D TP) each decode rank
    reads its KV heads from several prefill ranks; Qwen3-32B's 8 KV heads split over 4 prefill ranks unreplicated."""
    data = changed(stack, tensor_parallel=2, disaggregation=prefill(
        tensor_parallel=4, autoscaling={"min_replicas": 1, "max_replicas": 1}))
    data["models"] = [m for m in data["models"] if m["pool"] != "h100" or m["name"] == SERVICE]   # room on the node
    validated = validate(StackSpec.model_validate(data))
    engine = next(m for m in validated.stack.models if m.name == f"{SERVICE}-prefill")
    assert engine.tensor_parallel == 4 and engine.resolved_architecture.kv_heads == 8
