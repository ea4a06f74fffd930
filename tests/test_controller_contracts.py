"""Controllers' own rules, which no mock runs, checked on the render: the headless Service the
LeaderWorkerSet controller creates and the leader address its workers resolve; the spec refusing any
name that would collide with an object of ours or one a controller derives; the endpoint picker
started only once what its health depends on exists.

Upstream (kubernetes-sigs/lws v0.10.0):
* pkg/utils/controller/controller_utils.go `CreateHeadlessServiceIfNotExists`: creates a headless
  (`clusterIP: None`, `publishNotReadyAddresses: true`) Service selecting
  `leaderworkerset.sigs.k8s.io/name: <lws>` only when no Service of that name exists;
* pkg/controllers/leaderworkerset_controller.go `reconcileHeadlessServices`: under the default subdomain
  policy (`Shared`, no `networkConfig`) the Service is named after the LWS;
* pkg/utils/pod/pod_utils.go `AddLWSVariables`: every pod carries the label
  `leaderworkerset.sigs.k8s.io/name` and gets `LWS_LEADER_ADDRESS` = `<lws>-<group>.<subdomain>.<namespace>`,
  the leader pod's hostname under the subdomain the StatefulSets give their pods (that Service's name),
  a DNS record Kubernetes publishes only through a headless Service of the subdomain's name that
  selects the pod (Kubernetes docs, "DNS for Services and Pods", A/AAAA records of pods with
  hostname and subdomain).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from inferstack.bench import generate_stack
from inferstack.engine import run_stack
from inferstack.engine.render import kubernetes_objects
from inferstack.policies.controller_names import lws_headless_services
from inferstack.spec import SpecError, StackSpec
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


def _objects(spec):
    return kubernetes_objects(run_stack(spec))


@pytest.fixture(scope="module", params=["prod", "generated"])
def objects(request):
    spec = load_stack(STACKS, "prod") if request.param == "prod" else generate_stack(10)
    return _objects(spec)


def headless_service_names(lws) -> list[str]:
    """The LWS controller's rule, written from its source: under subdomain policy Shared (the webhook's
    default) one Service named after the LWS; under UniquePerReplica one per leader pod, `<lws>-<group>`."""
    network = lws["spec"].get("networkConfig") or {}
    name = lws["metadata"]["name"]
    if network.get("subdomainPolicy", "Shared") == "UniquePerReplica":
        return [f"{name}-{group}" for group in range(lws["spec"].get("replicas", 1))]
    return [name]


def test_the_policy_pack_knows_the_controllers_rule():
    shared = {"metadata": {"name": "x-group"}, "spec": {"replicas": 2}}
    unique = {"metadata": {"name": "x-group"}, "spec": {"replicas": 2, "networkConfig": {"subdomainPolicy": "UniquePerReplica"}}}
    for lws in (shared, unique):
        assert list(lws_headless_services(lws)) == headless_service_names(lws)


def controller_services(objects) -> dict[tuple[str, str], dict]:
    """The Services that exist once the LWS controller has reconciled: ours, plus the headless Service
    it creates for each LeaderWorkerSet whose Service name is still free."""
    services = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects if o["kind"] == "Service"}
    for lws in (o for o in objects if o["kind"] == "LeaderWorkerSet"):
        namespace = lws["metadata"]["namespace"]
        for name in headless_service_names(lws):
            services.setdefault(
                (namespace, name),
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                             "selector": {LWS_NAME_LABEL: lws["metadata"]["name"]}},
                },
            )
    return services


def test_every_multi_node_leader_address_resolves_through_a_headless_service(objects):
    """The workers' `LWS_LEADER_ADDRESS` is `<leader>.<lws service>.<ns>`: that Service must be headless,
    publish not-ready pods (workers start before the leader is Ready) and select the leader pod."""
    services = controller_services(objects)
    sets = [o for o in objects if o["kind"] == "LeaderWorkerSet"]
    assert sets, "the stack has a multi-node service"
    for lws in sets:
        namespace, name = lws["metadata"]["namespace"], lws["metadata"]["name"]
        leader_labels = {**lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"], LWS_NAME_LABEL: name}
        (subdomain,) = headless_service_names(lws)
        service = services[(namespace, subdomain)]["spec"]
        assert service.get("clusterIP") == "None", f"{namespace}/{subdomain} is not headless: {name}'s leader never resolves"
        assert service.get("publishNotReadyAddresses") is True
        assert service["selector"].items() <= leader_labels.items()


def test_no_service_of_ours_takes_the_name_the_lws_controller_needs(objects):
    taken = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "Service"}
    for lws in (o for o in objects if o["kind"] == "LeaderWorkerSet"):
        for name in headless_service_names(lws):
            assert (lws["metadata"]["namespace"], name) not in taken


def test_clients_workers_and_the_gateway_reach_a_multi_node_service_by_its_own_name(objects):
    """The client Service keeps the model service's name and selects only the leader (the one pod
    serving HTTP); the InferencePool and the LWS are told apart by name."""
    for lws in (o for o in objects if o["kind"] == "LeaderWorkerSet"):
        service_name = lws["metadata"]["labels"]["app.kubernetes.io/name"]
        assert lws["metadata"]["name"] == f"{service_name}-group"
        client = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == service_name)
        assert client["spec"]["type"] == "ClusterIP" and client["spec"]["selector"]["inferstack.dev/role"] == "leader"
        pools = [o for o in objects if o["kind"] == "InferencePool" and o["metadata"]["name"] == service_name]
        assert len(pools) == 1


def test_a_lws_named_like_an_existing_service_would_get_no_headless_service():
    """The simulation itself: with a Service of the LWS's name already there, the controller adds none."""
    objects = _objects(load_stack(STACKS, "prod"))
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    clash = copy.deepcopy(lws)
    clash["metadata"]["name"] = lws["metadata"]["labels"]["app.kubernetes.io/name"]
    services = controller_services([o for o in objects if o is not lws] + [clash])
    assert services[(clash["metadata"]["namespace"], clash["metadata"]["name"])]["spec"].get("clusterIP") != "None"


# ------------------------------------------------------------------------------------- spec time


def base() -> dict:
    return {
        "environment": "test",
        "node_pools": [
            {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 3, "efa": True,
             "capacity": {"on_demand_base": 3}},
        ],
        "models": [
            {"name": "long", "model": "meta-llama/Llama-3.1-70B-Instruct", "pool": "h100", "tensor_parallel": 8,
             "pipeline_parallel": 2, "max_model_len": 32768},
        ],
    }


def rejected(spec: dict) -> SpecError:
    with pytest.raises(SpecError) as caught:
        validate(StackSpec.model_validate(spec))
    return caught.value


def test_a_model_named_like_a_multi_node_services_lws_is_refused():
    spec = base()
    spec["models"].append({"name": "long-group", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100"})
    error = rejected(spec)
    assert error.path == "models[1].name"
    assert "model service 'long-group' and the LeaderWorkerSet controller for model service 'long' would both need " \
           "Service inference/long-group" in error.problem
    assert error.fix == "rename one of them"


def test_a_model_named_like_another_models_endpoint_picker_is_refused():
    spec = base()
    spec["models"].append({"name": "long-epp", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100"})
    error = rejected(spec)
    assert error.path == "models[1].name" and "Deployment inference/long-epp" in error.problem
    assert "the endpoint picker of model service 'long'" in error.problem


def test_a_worker_named_like_the_job_queue_is_refused():
    spec = base()
    spec["workers"] = [{"name": "redis", "model_service": "long", "image": "python:3.13.1-slim"}]
    error = rejected(spec)
    assert error.path == "workers[0].name"
    assert "worker 'redis' and the job queue (Redis) would both need Deployment batch/redis" in error.problem


def test_a_model_named_like_the_job_queue_in_a_shared_namespace_is_refused():
    spec = base()
    spec["batch_namespace"] = "inference"
    spec["models"].append({"name": "redis", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100"})
    spec["workers"] = [{"name": "w", "model_service": "long", "image": "python:3.13.1-slim"}]
    error = rejected(spec)
    assert error.path == "models[1].name" and "Deployment inference/redis" in error.problem


def test_distinct_names_pass():
    spec = base()
    spec["models"].append({"name": "short", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100"})
    assert [m.name for m in validate(StackSpec.model_validate(spec)).written.models] == ["long", "short"]


# -------------------------------------------------------------------------- the endpoint picker


def test_the_endpoint_picker_starts_after_its_inference_pool_and_the_rbac_to_read_it():
    """llm-d/llm-d-router v0.10.0 cmd/epp/runner/health.go `Check`: without leader election the picker's
    liveness and readiness are both `datastore.PoolHasSynced()`, and pkg/epp/controller/pod_reconciler.go
    ignores pods until the InferencePool is known. A picker created before its pool, or before the
    RoleBinding that lets it list the pool, fails its liveness probe and is restarted."""
    recording = run_stack(load_stack(STACKS, "prod"))
    by_name = {r.name: r for r in recording.resources}
    pickers = [r for r in recording.resources if r.type == "kubernetes:apps/v1:Deployment" and r.name.endswith("-epp")]
    assert pickers
    for picker in pickers:
        kinds = {by_name[d].type.rsplit(":", 1)[-1] for d in picker.depends_on}
        assert {"InferencePool", "RoleBinding", "ServiceAccount", "ConfigMap"} <= kinds, picker.name
        pool = next(by_name[d] for d in picker.depends_on if by_name[d].type.endswith(":InferencePool"))
        pool_name = pool.inputs["metadata"]["name"]
        args = picker.inputs["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--pool-name") + 1] == pool_name


def test_a_model_named_like_istios_gateway_deployment_is_refused():
    """Istio provisions a Deployment, Service and ServiceAccount `<Gateway name>-<GatewayClass name>` for each
    Gateway (istio.io, Kubernetes Gateway API task, "Automated Deployment")."""
    spec = base()
    spec["models"].append({"name": "inference-gateway-istio", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100"})
    error = rejected(spec)
    assert error.path == "models[1].name"
    assert "Istio's gateway deployment would both need Deployment inference/inference-gateway-istio" in error.problem


def test_a_model_named_like_the_body_based_router_is_refused():
    """The body-based-routing chart (gateway-api-inference-extension v1.5.0, config/charts/body-based-routing,
    value `bbr.name`) creates its Deployment and Service as `body-based-router`."""
    spec = base()
    spec["models"].append({"name": "body-based-router", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100"})
    assert rejected(spec).path == "models[1].name"


def test_a_service_name_must_start_with_a_letter():
    """Service names are DNS-1035 labels (k8s.io/apimachinery pkg/util/validation IsDNS1035Label; the API
    server's ValidateServiceName)."""
    spec = base()
    spec["models"].append({"name": "8b-chat", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100"})
    error = rejected(spec)
    assert error.path == "models[1].name"
    assert "Service inference/8b-chat, and a Service name must start with a letter (DNS-1035)" in error.problem
    assert "'m-8b-chat'" in error.fix
