"""The serving layer rendered for the dev and prod stacks under the embedded engine, checked object by object."""

from __future__ import annotations

import math
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest
from kube_validation import assert_valid

from inferstack.catalog.charts import CHARTS, MANIFESTS, chart
from inferstack.engine.mocks import PlanMocks
from inferstack.engine.recorder import record
from inferstack.engine.render import helm_releases, kubernetes_objects
from inferstack.helm import helm_release
from inferstack.serving.serving import Serving, ServingArgs
from inferstack.planning.sizing import load_seconds
from inferstack.spec import SpecError, StackSpec
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
BUCKET = "acme-weights"
PROMETHEUS = "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
SERVING_METRICS = ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "llm_d_epp_average_queue_size")
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-")


def render(spec: StackSpec):
    """Serving as the program wires it: after the namespaces and the releases that install its CRDs."""

    def program() -> None:
        provider = k8s.Provider("k8s", kubeconfig=pulumi.Output.secret("{}"))
        opts = pulumi.ResourceOptions(provider=provider)
        namespaces = {}
        for role, name in (("serving", spec.serving_namespace), ("batch", spec.batch_namespace)):
            namespaces[role] = k8s.core.v1.Namespace(f"ns-{name}", metadata={"name": name}, opts=opts)
        releases = {
            key: helm_release(key, key, namespace=chart(key).namespace, values={}, opts=opts) for key in ("keda", "lws", "kueue")
        }
        Serving(
            "serving",
            ServingArgs(
                spec=spec,
                weights_bucket=pulumi.Output.from_input(BUCKET),
                prometheus_url=PROMETHEUS,
                crd_dependencies=releases,
                namespaces=namespaces,
            ),
            opts=opts,
        )

    return record(program, spec.environment, PlanMocks(spec.region))


@pytest.fixture(scope="module")
def prod():
    return load_stack(STACKS, "prod")


@pytest.fixture(scope="module")
def prod_render(prod):
    recording = render(prod)
    return recording, kubernetes_objects(recording)


@pytest.fixture(scope="module")
def dev_render():
    recording = render(load_stack(STACKS, "dev"))
    return recording, kubernetes_objects(recording)


def of_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def vllm_workloads(objects):
    return [
        o for o in objects
        if o["kind"] in ("Deployment", "LeaderWorkerSet") and o["metadata"]["labels"].get("app.kubernetes.io/component") == "vllm"
    ]


def service_of(workload):
    """The model service a vLLM workload serves: its name label (an LWS is named `<service>-group`)."""
    return workload["metadata"]["labels"]["app.kubernetes.io/name"]


def group_pods(workload):
    """(pod template, pod count) per template of one replica: a Deployment pod, or an LWS leader and its workers."""
    if workload["kind"] == "Deployment":
        return [(workload["spec"]["template"], 1)]
    template = workload["spec"]["leaderWorkerTemplate"]
    return [(template["leaderTemplate"], 1), (template["workerTemplate"], template["size"] - 1)]


def container(template, name="vllm"):
    return next(c for c in template["spec"]["containers"] if c["name"] == name)


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def gpu_devices(resources):
    return sum(int(v) for k, v in resources["requests"].items() if k.startswith(GPU_RESOURCES))


# --------------------------------------------------------------------------------------- validity


def test_every_rendered_object_validates_against_the_upstream_schemas(prod, prod_render, dev_render):
    assert_valid(prod_render[1], prod.cluster.kubernetes_version)
    assert_valid(dev_render[1], prod.cluster.kubernetes_version)


def test_components_parent_their_children(prod_render):
    recording, _ = prod_render
    types = {r.name: r.type for r in recording.resources}
    for registration in recording.resources:
        if registration.type.startswith("kubernetes:") and registration.name.startswith("serving-"):
            assert types[registration.parent].startswith("inferstack:serving:"), registration.name


# -------------------------------------------------------------------------------------- workloads


def test_prod_has_the_promised_mix_of_vllm_workloads(prod_render):
    workloads = vllm_workloads(prod_render[1])
    assert len(workloads) >= 3
    args = {service_of(w): container(group_pods(w)[0][0])["args"] for w in workloads}
    # prod's quantized services use pre-quantized checkpoints: vLLM reads their method, none is passed.
    assert not any("--quantization" in a for a in args.values())
    assert any(flag(a, "--kv-cache-dtype") == "fp8" for a in args.values())
    assert any(
        any(k.startswith("nvidia.com/mig-") for k in container(group_pods(w)[0][0])["resources"]["requests"]) for w in workloads
    )
    assert [w["metadata"]["name"] for w in workloads if w["kind"] == "LeaderWorkerSet"] == ["llama-70b-long-group"]


def test_parallelism_equals_the_gpus_each_replica_requests(prod_render, dev_render):
    for objects in (prod_render[1], dev_render[1]):
        for workload in vllm_workloads(objects):
            pods = group_pods(workload)
            args = container(pods[0][0])["args"]
            tp, pp = int(flag(args, "--tensor-parallel-size")), int(flag(args, "--pipeline-parallel-size"))
            requested = sum(gpu_devices(container(t)["resources"]) * count for t, count in pods)
            assert tp * pp == requested, workload["metadata"]["name"]


def test_multi_node_replica_is_a_leader_worker_group_on_efa(prod_render):
    lws = of_kind(prod_render[1], "LeaderWorkerSet")[0]
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2 and template["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = container(template["leaderTemplate"]), container(template["workerTemplate"])
    assert "--headless" in worker["args"] and "--headless" not in leader["args"]
    assert "startupProbe" in leader and "startupProbe" not in worker
    for pod in (leader, worker):
        assert pod["resources"]["requests"]["vpc.amazonaws.com/efa"] == "32"  # every card of a p5.48xlarge
        env = {e["name"]: e.get("value") for e in pod["env"]}
        assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1" and env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert {"medium": "Memory", "sizeLimit": "16Gi"} in [
            v["emptyDir"] for v in template["leaderTemplate"]["spec"]["volumes"] if v["name"] == "shm"
        ]
    # A single-node replica on the same EFA pool leaves the interfaces to the groups that need them.
    single = next(w for w in vllm_workloads(prod_render[1]) if w["metadata"]["name"] == "llama-70b")
    assert "vpc.amazonaws.com/efa" not in container(single["spec"]["template"])["resources"]["requests"]


def test_pods_land_on_their_pool_and_start_from_the_nvme_cache(prod, prod_render):
    objects = prod_render[1]
    config_maps = {o["metadata"]["name"]: o for o in of_kind(objects, "ConfigMap")}
    for workload in vllm_workloads(objects):
        model = prod.model_service(service_of(workload))
        for template, _ in group_pods(workload):
            spec = template["spec"]
            assert spec["nodeSelector"] == {"inferstack.dev/pool": model.pool}
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
            assert spec["serviceAccountName"] == "model-reader"
            init = spec["initContainers"][0]
            assert init["command"] == ["/bin/bash", "/scripts/prefetch.sh"]
            script = config_maps[f"{model.name}-prefetch"]["data"]["prefetch.sh"]
            assert f"bucket={BUCKET}" in script and "cache_dir=/models" in script
            cache = next(v for v in spec["volumes"] if v["name"] == "model-cache")
            assert cache["hostPath"]["path"] == "/mnt/k8s-disks/0/model-cache"
            vllm = container(template)
            # vLLM starts through pin-weights.sh, which swaps the published path for the version it resolves to.
            assert vllm["command"] == ["/bin/bash", "/opt/inferstack/pin-weights.sh"]
            assert vllm["args"][:2] == ["vllm", "serve"] and vllm["args"][2].startswith("/models/")
            pin = config_maps[f"{model.name}-prefetch"]["data"]["pin-weights.sh"]
            assert f"published={vllm['args'][2]}" in pin
            assert {"name": "prefetch", "mountPath": "/opt/inferstack", "readOnly": True} in vllm["volumeMounts"]


def test_probes_and_drain_fit_model_load_and_spot_notice(prod, prod_render):
    for workload in vllm_workloads(prod_render[1]):
        model = prod.model_service(service_of(workload))
        template = group_pods(workload)[0][0]
        vllm = container(template)
        startup = vllm["startupProbe"]
        assert startup["httpGet"]["path"] == "/health" and vllm["readinessProbe"]["httpGet"]["path"] == "/health"
        assert startup["periodSeconds"] * startup["failureThreshold"] >= load_seconds(model)
        assert vllm["lifecycle"]["preStop"]["sleep"]["seconds"] < template["spec"]["terminationGracePeriodSeconds"] <= 120


def test_pods_are_restricted_and_carry_no_api_token(prod, prod_render):
    for workload in vllm_workloads(prod_render[1]):
        for template, _ in group_pods(workload):
            spec = template["spec"]
            assert spec["automountServiceAccountToken"] is False
            assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            for c in spec["containers"] + spec["initContainers"]:
                context = c["securityContext"]
                assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
                assert c["resources"]["requests"] == c["resources"]["limits"]
                assert {"cpu", "memory"} <= set(c["resources"]["limits"])
            assert container(template)["securityContext"]["runAsNonRoot"] is True


def test_hugging_face_token_comes_from_a_secret(prod_render):
    lws = of_kind(prod_render[1], "LeaderWorkerSet")[0]
    env = container(lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"])["env"]
    token = next(e for e in env if e["name"] == "HF_TOKEN")
    assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}
    others = [w for w in vllm_workloads(prod_render[1]) if w["kind"] == "Deployment"]
    for workload in others:
        names = {e["name"]: e.get("value") for e in container(workload["spec"]["template"])["env"]}
        assert "HF_TOKEN" not in names and names["HF_HUB_OFFLINE"] == "1"


def test_workloads_join_the_serving_queue_at_their_tier(prod, prod_render):
    for workload in vllm_workloads(prod_render[1]):
        model = prod.model_service(service_of(workload))
        for labels in [workload["metadata"]["labels"], *[t["metadata"]["labels"] for t, _ in group_pods(workload)]]:
            assert labels["kueue.x-k8s.io/queue-name"] == "serving"
            assert labels["kueue.x-k8s.io/priority-class"] == model.tier
            assert labels["app.kubernetes.io/component"] == "vllm" and labels["app.kubernetes.io/name"] == model.name


def test_every_workload_has_a_pdb_and_a_service(prod_render):
    objects = prod_render[1]
    pdbs = {o["metadata"]["name"]: o for o in of_kind(objects, "PodDisruptionBudget")}
    services = {o["metadata"]["name"]: o for o in of_kind(objects, "Service")}
    for workload in vllm_workloads(objects):
        name = service_of(workload)
        selector = pdbs[name]["spec"]["selector"]["matchLabels"]
        assert pdbs[name]["spec"]["maxUnavailable"] == 1
        for template, _ in group_pods(workload):
            assert selector.items() <= template["metadata"]["labels"].items()
        service = services[name]
        assert service["spec"]["type"] == "ClusterIP" and service["spec"]["ports"][0]["port"] == 8000
        assert service["spec"]["selector"].items() <= group_pods(workload)[0][0]["metadata"]["labels"].items()


def test_lws_waits_for_its_crds_and_scalers_for_keda(prod_render):
    recording, _ = prod_render
    by_type = {}
    for r in recording.resources:
        by_type.setdefault(r.type, []).append(r)
    lws = by_type["kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"][0]
    assert {"lws", "kueue"} <= set(lws.depends_on)
    for scaled in by_type["kubernetes:keda.sh/v1alpha1:ScaledObject"]:
        assert "keda" in scaled.depends_on
    job = by_type["kubernetes:batch/v1:CronJob"][0]
    assert "kueue" in job.depends_on


# ---------------------------------------------------------------------------------------- gateway


def test_every_pool_selects_its_serving_pods_and_a_route_reaches_it(prod_render):
    objects = prod_render[1]
    pools = of_kind(objects, "InferencePool")
    routes = of_kind(objects, "HTTPRoute")
    services = {o["metadata"]["name"]: o for o in of_kind(objects, "Service")}
    workloads = {service_of(w): w for w in vllm_workloads(objects)}
    assert sorted(p["metadata"]["name"] for p in pools) == sorted(workloads)
    for pool in pools:
        name = pool["metadata"]["name"]
        selector = pool["spec"]["selector"]["matchLabels"]
        serving_template = group_pods(workloads[name])[0][0]  # the Deployment pod or the LWS leader
        assert selector.items() <= serving_template["metadata"]["labels"].items()
        assert pool["spec"]["targetPorts"] == [{"number": 8000}]
        picker = pool["spec"]["endpointPickerRef"]
        assert picker["port"]["number"] in [p["port"] for p in services[picker["name"]]["spec"]["ports"]]
        reaching = [
            r for r in routes
            for rule in r["spec"]["rules"] for ref in rule["backendRefs"]
            if ref == {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": name}
        ]
        assert len(reaching) == 1
        match = reaching[0]["spec"]["rules"][0]["matches"][0]["headers"][0]
        assert match == {"type": "Exact", "name": "X-Gateway-Model-Name", "value": name}
        assert reaching[0]["spec"]["parentRefs"][0]["name"] == "inference-gateway"
    if any(w["kind"] == "LeaderWorkerSet" for w in workloads.values()):
        lws_pool = next(p for p in pools if workloads[p["metadata"]["name"]]["kind"] == "LeaderWorkerSet")
        worker = workloads[lws_pool["metadata"]["name"]]["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        assert not lws_pool["spec"]["selector"]["matchLabels"].items() <= worker["metadata"]["labels"].items()


def test_objectives_carry_the_tier_priority(prod, prod_render):
    priorities = {p.name: p.value for p in prod.queues.priorities}
    for objective in of_kind(prod_render[1], "InferenceObjective"):
        model = prod.model_service(objective["metadata"]["name"])
        assert objective["apiVersion"] == "llm-d.ai/v1alpha2"
        assert objective["spec"] == {
            "poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": model.name},
            "priority": priorities[model.tier],
        }


def test_endpoint_pickers_watch_their_pool_with_prefix_cache_scoring(prod, prod_render):
    objects = prod_render[1]
    pickers = [d for d in of_kind(objects, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "endpoint-picker"]
    assert len(pickers) == len(prod.models)
    configs = {o["metadata"]["name"]: o for o in of_kind(objects, "ConfigMap")}
    for picker in pickers:
        args = container(picker["spec"]["template"], "epp")["args"]
        pool = flag(args, "--pool-name")
        assert f"{pool}-epp" == picker["metadata"]["name"] and flag(args, "--pool-namespace") == "inference"
        assert "--endpoint-selector" not in args and "--secure-serving=false" in args
        assert "--metrics-endpoint-auth=false" in args  # the platform's PodMonitor sends no token
        assert container(picker["spec"]["template"], "epp")["image"].endswith(f":{CHARTS['llm-d-router-gateway'].app_version}")
        assert "prefix-cache-scorer" in configs[picker["metadata"]["name"]]["data"]["plugins.yaml"]
    roles = {r["metadata"]["name"]: r for r in of_kind(objects, "Role")}
    assert {"apiGroups": ["llm-d.ai"], "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": ["get", "list", "watch"]} in roles["llama-70b-epp"]["rules"]


def test_gateway_crds_implementation_and_body_based_routing(prod_render):
    recording, objects = prod_render
    gateway = of_kind(objects, "Gateway")[0]
    assert gateway["spec"]["gatewayClassName"] == "istio"
    assert gateway["spec"]["infrastructure"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    files = {r.inputs["file"] for r in recording.of_type("kubernetes:yaml/v2:ConfigFile")}
    assert files == {MANIFESTS[k]["url"] for k in ("gateway-api-crds", "inference-extension-crds", "llm-d-router-crds")}
    pool = next(r for r in recording.resources if r.type.endswith(":InferencePool"))
    assert "serving-gateway-inference-extension-crds" in pool.depends_on
    releases = {r["name"]: r for r in helm_releases(recording)}
    istiod = releases["istiod"]
    assert istiod["version"] == CHARTS["istiod"].version
    assert istiod["values"]["pilot"]["env"] == {"ENABLE_GATEWAY_API_INFERENCE_EXTENSION": "true"}
    bbr = releases["inference-gateway-bbr"]
    assert bbr["chart"] == CHARTS["body-based-routing"].chart and bbr["version"] == "v1.5.0"
    assert bbr["values"] == {"provider": {"name": "istio"}, "inferenceGateway": {"name": "inference-gateway"}}


def test_agentgateway_variant(prod):
    spec = validate(StackSpec.model_validate({**prod.model_dump(), "gateway": {"implementation": "agentgateway"}})).stack
    recording = render(spec)
    objects = kubernetes_objects(recording)
    # agentgateway's policy CRD has no schema in ../shared/schemas; everything else is checked.
    policies = of_kind(objects, "AgentgatewayPolicy")
    assert_valid([o for o in objects if o["kind"] != "AgentgatewayPolicy"], spec.cluster.kubernetes_version)
    assert of_kind(objects, "Gateway")[0]["spec"]["gatewayClassName"] == "agentgateway"
    releases = {r["name"]: r for r in helm_releases(recording)}
    assert releases["agentgateway"]["values"] == {"inferenceExtension": {"enabled": True}}
    assert releases["agentgateway-crds"]["version"] == "1.5.0" and "istiod" not in releases
    # One PreRouting transformation: the routing header and the objective from the body's model, the sidecar's
    # routing headers removed.
    assert policies[0]["spec"]["traffic"]["transformation"]["request"]["set"] == [
        {"name": "X-Gateway-Model-Name", "value": "json(request.body).model"},
        {"name": "x-llm-d-inference-objective", "value": "json(request.body).model"},
    ]
    picker = next(d for d in of_kind(objects, "Deployment") if d["metadata"]["name"] == "llama-70b-epp")
    assert "--secure-serving=false" not in container(picker["spec"]["template"], "epp")["args"]


# -------------------------------------------------------------------------------------- autoscaling


def scaled_targets(objects):
    return {(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects}


def test_every_scaled_object_targets_a_rendered_workload_and_reads_a_serving_metric(prod_render, dev_render):
    for objects in (prod_render[1], dev_render[1]):
        rendered = scaled_targets(objects)
        for scaled in of_kind(objects, "ScaledObject"):
            ref = scaled["spec"]["scaleTargetRef"]
            assert (ref["apiVersion"], ref["kind"], scaled["metadata"]["namespace"], ref["name"]) in rendered
            triggers = scaled["spec"]["triggers"]
            if ref["name"] in {w["metadata"]["name"] for w in vllm_workloads(objects)}:
                metric = triggers[0]
                assert metric["type"] == "prometheus" and any(m in metric["metadata"]["query"] for m in SERVING_METRICS)
                assert metric["metadata"]["serverAddress"] == PROMETHEUS
            else:
                assert triggers[0]["type"] == "redis"


def test_scalers_follow_the_spec_and_never_outpace_model_load(prod, prod_render):
    scaled = {o["metadata"]["name"]: o["spec"] for o in of_kind(prod_render[1], "ScaledObject")}
    long = scaled["llama-70b-long"]
    assert long["scaleTargetRef"] == {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "llama-70b-long-group"}
    assert long["triggers"][0]["metadata"]["query"] == 'avg(vllm:kv_cache_usage_perc{namespace="inference",model_name="llama-70b-long"})'
    assert long["triggers"][0]["metricType"] == "Value" and long["triggers"][0]["metadata"]["threshold"] == "0.8"
    queue = scaled["llama-70b"]["triggers"][0]
    assert queue["metricType"] == "AverageValue" and queue["metadata"]["threshold"] == "8"
    assert scaled["llama-8b-fp8"]["triggers"][0]["metadata"]["query"].startswith("max(llm_d_epp_average_queue_size{")
    for name, spec in scaled.items():
        if name not in {m.name for m in prod.models}:
            continue
        model = prod.model_service(name)
        assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (model.autoscaling.min_replicas, model.autoscaling.max_replicas)
        assert "idleReplicaCount" not in spec
        assert spec["pollingInterval"] == model.autoscaling.polling_interval_seconds
        window = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
        assert min(window, spec["cooldownPeriod"], spec["initialCooldownPeriod"]) >= load_seconds(model)


def test_scale_to_zero_only_where_the_spec_allows_it(dev_render):
    recording, objects = dev_render
    spec = of_kind(objects, "ScaledObject")[0]["spec"]
    assert spec["idleReplicaCount"] == 0 and spec["minReplicaCount"] == 1 and spec["maxReplicaCount"] == 2
    assert spec["cooldownPeriod"] == 600
    assert [t["name"] for t in spec["triggers"]] == ["queue-depth", "requests"]
    wake = spec["triggers"][1]["metadata"]
    assert "llm_d_epp_request_total" in wake["query"] and wake["activationThreshold"] == "0"
    deployment = next(r for r in recording.resources if r.type == "kubernetes:apps/v1:Deployment" and r.name == "serving-qwen-7b-deployment")
    assert deployment.inputs["spec"]["replicas"] == 0


# ------------------------------------------------------------------------------- workers and jobs


def test_queue_worker_is_fed_from_redis_and_scaled_on_the_list(prod, prod_render):
    objects = prod_render[1]
    worker = prod.workers[0]
    deployment = next(d for d in of_kind(objects, "Deployment") if d["metadata"]["name"] == worker.name)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == worker.image and pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    program = next(c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"] == f"{worker.name}-program")
    source = program["data"]["worker.py"]
    assert 'MODEL_URL = "http://llama-8b-fp8.inference.svc.cluster.local:8000"' in source
    compile(source, "worker.py", "exec")
    scaled = next(s for s in of_kind(objects, "ScaledObject") if s["metadata"]["name"] == worker.name)["spec"]
    trigger = scaled["triggers"][0]
    assert trigger["type"] == "redis"
    assert trigger["metadata"] == {
        "address": "redis.batch.svc.cluster.local:6379", "listName": "summarizer", "listLength": "5",
        "activationListLength": "0", "databaseIndex": "0",
    }
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"], scaled["cooldownPeriod"]) == (0, 20, 300)
    redis = next(d for d in of_kind(objects, "Deployment") if d["metadata"]["name"] == "redis")
    assert redis["spec"]["template"]["spec"]["containers"][0]["image"] == "redis:7.4.2-alpine"


def test_batch_job_is_admitted_by_kueue_on_spot(prod, prod_render):
    """Kueue admits a CronJob's runs by the queue label on `jobTemplate.metadata` (kubernetes-sigs/kueue v0.19.2
    site/content/en/docs/tasks/run/run_cronjobs.md)."""
    objects = prod_render[1]
    job_spec = prod.batch_jobs[0]
    job = of_kind(objects, "CronJob")[0]["spec"]["jobTemplate"]
    spec = job["spec"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "batch"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "batch"
    assert spec["suspend"] is True and spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == job_spec.parallelism
    assert spec["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == "DisruptionTarget"
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {"inferstack.dev/pool": "l40s-batch"}
    preference = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]
    assert preference["matchExpressions"][0]["values"] == ["spot"]
    assert [c["name"] for c in pod["initContainers"]] == ["prefetch-weights", "fetch-input"]
    vllm = container(job["spec"]["template"])
    assert vllm["resources"]["requests"]["nvidia.com/gpu"] == "1"
    mounted = next(v["configMap"]["name"] for v in pod["volumes"] if v["name"] == "scripts")
    assert mounted.startswith(f"{job_spec.name}-scripts-")  # named by the run's revision
    scripts = next(c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"] == mounted)["data"]
    assert vllm["args"][2:10] == ["vllm", "run-batch", "-i", "/work/input.jsonl", "-o", "/work/output.jsonl",
                                  "--model", "/models/RedHatAI--Meta-Llama-3.1-8B-Instruct-FP8"]
    assert '"$@"' in scripts["run"]   # the run stage runs the container's args
    assert "input_uri=s3://acme-ml-batch/eval/input.jsonl" in scripts["fetch"]


def test_a_batch_job_for_a_multi_node_service_is_rejected(prod):
    data = prod.model_dump()
    data["batch_jobs"][0]["model_service"] = "llama-70b-long"
    data["batch_jobs"][0]["pool"] = "h100"
    with pytest.raises(SpecError, match=r"batch_jobs\[0\].model_service: 'llama-70b-long' spans 2 nodes"):
        validate(StackSpec.model_validate(data))  # refused by validation, before anything registers


def test_a_batch_job_on_a_pool_too_small_for_its_model_is_rejected(prod):
    data = prod.model_dump()
    data["batch_jobs"][0]["model_service"] = "llama-70b"
    with pytest.raises(SpecError, match=r"batch_jobs\[0\].pool: 'llama-70b' needs 4 GPUs on one node but a g6e.xlarge has 1"):
        validate(StackSpec.model_validate(data))  # refused by validation, before anything registers


def test_startup_threshold_is_one_and_a_half_load_times(prod, prod_render):
    deployment = next(w for w in vllm_workloads(prod_render[1]) if w["metadata"]["name"] == "llama-8b-fp8")
    probe = container(deployment["spec"]["template"])["startupProbe"]
    assert probe["failureThreshold"] == math.ceil(load_seconds(prod.model_service("llama-8b-fp8")) * 1.5 / 10)


def test_one_namespace_no_gateway_and_no_kueue(prod):
    data = prod.model_dump()
    data.update(batch_namespace="inference", gateway={"enabled": False}, queues={"enabled": False})
    for model in data["models"]:
        if model["autoscaling"]["metric"] == "epp_queue":
            model["autoscaling"]["metric"] = "queue_depth"
    objects = kubernetes_objects(render(validate(StackSpec.model_validate(data)).stack))
    assert_valid(objects, prod.cluster.kubernetes_version)
    assert not [o for o in objects if o["kind"] in ("Gateway", "HTTPRoute", "InferencePool", "InferenceObjective")]
    accounts = [(a["metadata"]["namespace"], a["metadata"]["name"]) for a in of_kind(objects, "ServiceAccount")]
    assert sorted(accounts) == [("inference", "batch-runner"), ("inference", "model-reader")]
    batch_jobs = [c["spec"]["jobTemplate"] for c in of_kind(objects, "CronJob")]
    for workload in [*vllm_workloads(objects), *batch_jobs]:
        assert not any(k.startswith("kueue.x-k8s.io/") for k in workload["metadata"]["labels"])
    assert batch_jobs[0]["spec"]["suspend"] is False
