"""The platform layer as the engine receives it: pinned releases, parallel operators, CRDs before their
custom resources, and Kubernetes objects that the upstream schemas accept."""

from __future__ import annotations

import json

import pytest
import yaml
from kube_validation import assert_valid
from platform_recording import NODE_GROUP, build, objects_of, releases, render, render_stack, stack
from stack_edits import without_node_autoscaler

from inferstack.catalog.charts import chart
from inferstack.engine.render import HELM_RELEASE, kubernetes_objects
from inferstack.platform.autoscaler import autoscaler_policy
from inferstack.platform.gpu_nodes import mig_config_name
from inferstack.spec import SpecError
from inferstack.spec.pools import PoolHardware
from inferstack.validation import validate

# Which release installs the CRDs of each API group the platform creates objects in.
CRD_RELEASE = {"kueue.x-k8s.io": "kueue", "monitoring.coreos.com": "kube-prometheus-stack"}
PINNED = ["gpu-operator", "kueue", "keda", "lws", "aws-efa-k8s-device-plugin", "kube-prometheus-stack"]


@pytest.mark.parametrize("key", PINNED)
def test_prod_releases_are_pinned_catalog_charts(key):
    release = releases(render_stack("prod"))[key].inputs
    pinned = chart(key)
    assert (release["chart"], release["version"]) == (pinned.chart, pinned.version)
    assert (release.get("repositoryOpts") or {}).get("repo") == pinned.repository


def test_operators_install_in_parallel_and_only_gpu_node_agents_wait_for_the_node_pools():
    registered = render_stack("prod").of_type(HELM_RELEASE)
    release_names = {r.name for r in registered}
    for release in registered:
        # Controllers run on the system nodes; the GPU operator's and EFA plugin's DaemonSets on the GPU nodes.
        node_agent = release.inputs["chart"] in ("gpu-operator", "aws-efa-k8s-device-plugin")
        assert (NODE_GROUP in release.depends_on) == node_agent, release.name
        assert not release_names & set(release.depends_on), f"{release.name} waits for another release"


def test_each_custom_resource_waits_for_the_release_with_its_crd_and_no_other():
    recording = render_stack("prod")
    by_key = {key: r.name for key, r in releases(recording).items()}
    custom = [r for r in recording.resources if r.type.split(":")[1].split("/")[0] in CRD_RELEASE]
    kinds = {"ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass", "PodMonitor"}
    assert {r.inputs["kind"] for r in custom} == kinds | {"PrometheusRule"}
    for resource in custom:
        group = resource.inputs["apiVersion"].split("/")[0]
        waits_for = set(resource.depends_on) & set(by_key.values())
        assert waits_for == {by_key[CRD_RELEASE[group]]}, resource.name


@pytest.mark.parametrize("name", ["prod", "dev"])
def test_rendered_objects_validate_against_upstream_schemas(name):
    objects = kubernetes_objects(render_stack(name))
    kueue = [o for o in objects if o["apiVersion"].startswith("kueue.x-k8s.io/")]
    assert kueue and {o["apiVersion"] for o in kueue} == {"kueue.x-k8s.io/v1beta2"}
    assert_valid(objects, stack(name).cluster.kubernetes_version)


def test_prod_mig_layouts_use_only_the_pool_gpus_profiles_under_the_pool_config_name():
    spec = stack("prod")
    values = releases(render_stack("prod"))["gpu-operator"].inputs["values"]
    assert values["mig"]["strategy"] == "mixed"
    mig_manager = values["migManager"]["config"]
    assert mig_manager["default"] == "all-disabled"
    configs = yaml.safe_load(mig_manager["data"]["config.yaml"])["mig-configs"]
    mig_pools = [p for p in spec.node_pools if p.gpu_sharing.mode == "mig"]
    assert set(configs) == {"all-disabled"} | {mig_config_name(p.name) for p in mig_pools}
    for pool in mig_pools:
        gpu = PoolHardware(pool).gpu
        (layout,) = configs[mig_config_name(pool.name)]
        assert layout["devices"] == "all" and layout["mig-enabled"] is True
        assert set(layout["mig-devices"]) <= {p.name for p in gpu.mig_profiles}, gpu.name


def test_gpu_operator_leaves_driver_and_toolkit_to_the_ami_and_tolerates_gpu_nodes():
    values = releases(render_stack("prod"))["gpu-operator"].inputs["values"]
    assert values["driver"]["enabled"] is False and values["toolkit"]["enabled"] is False
    assert values["devicePlugin"]["enabled"] and values["gfd"]["enabled"]
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    gpu_taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert gpu_taint in values["daemonsets"]["tolerations"]
    assert gpu_taint in values["node-feature-discovery"]["worker"]["tolerations"]


def test_dev_time_slices_its_l4s_with_the_spec_replicas():
    values = releases(render_stack("dev"))["gpu-operator"].inputs["values"]["devicePlugin"]["config"]
    config = yaml.safe_load(values["data"]["l4"])
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]
    assert config["sharing"]["timeSlicing"]["renameByDefault"] is True
    assert values["default"] in values["data"]


def test_efa_plugin_runs_on_the_efa_pools_only_and_tolerates_the_gpu_taint():
    """The chart turns each supportedInstanceLabels key into a `key In values` node affinity term (aws/eks-charts
    stable/aws-efa-k8s-device-plugin templates/daemonset.yaml): keyed on the pool label, it runs on prod's h100."""
    values = releases(render_stack("prod"))["aws-efa-k8s-device-plugin"].inputs["values"]
    assert values["supportedInstanceLabels"] == {"keys": ["inferstack.dev/pool"], "values": ["h100"]}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in values["tolerations"]
    assert "aws-efa-k8s-device-plugin" not in releases(render_stack("dev"))


def test_kueue_flavors_follow_pools_and_capacity_types():
    flavors = objects_of(render_stack("prod"), "ResourceFlavor")
    assert set(flavors) == {
        "h100-on-demand", "h100-spot", "a100-mig-on-demand", "l40s-on-demand", "l40s-spot", "l40s-batch-spot"
    }
    assert flavors["h100-spot"]["spec"]["nodeLabels"] == {
        "inferstack.dev/pool": "h100", "eks.amazonaws.com/capacityType": "SPOT"
    }


def quotas(queue: dict) -> dict[str, dict[str, int]]:
    (group,) = queue["spec"]["resourceGroups"]
    return {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}


def test_cluster_queue_quotas_come_from_pool_max_sizes_and_advertised_resources():
    queues = objects_of(render_stack("prod"), "ClusterQueue")
    serving, batch = quotas(queues["serving"]), quotas(queues["batch"])
    assert serving["h100-on-demand"]["nvidia.com/gpu"] == 2 * 8
    assert serving["h100-spot"]["nvidia.com/gpu"] == 5 * 8
    assert serving["h100-spot"]["vpc.amazonaws.com/efa"] == 5 * 32
    assert serving["a100-mig-on-demand"]["nvidia.com/mig-1g.10gb"] == 2 * 8 * 2
    assert batch["l40s-batch-spot"]["nvidia.com/gpu"] == 8
    assert batch["h100-on-demand"]["nvidia.com/gpu"] == 0  # may borrow it, owns none of it
    assert {q["spec"]["cohortName"] for q in queues.values()} == {"inference"}


def test_a_quota_override_fills_the_preferred_flavor_first():
    spec = validate(build(lambda s: s.update(queues={"cluster_queues": [
        {"name": "serving", "role": "serving", "quota_gpus": {"h100": 10}, "borrowing_limit_gpus": 4},
        {"name": "batch", "role": "batch"},
    ]}))).written
    serving = objects_of(render(spec), "ClusterQueue")["serving"]
    assert quotas(serving)["h100-on-demand"]["nvidia.com/gpu"] == 8
    assert quotas(serving)["h100-spot"]["nvidia.com/gpu"] == 2
    first_flavor = serving["spec"]["resourceGroups"][0]["flavors"][0]
    assert {r["name"]: r.get("borrowingLimit") for r in first_flavor["resources"]}["nvidia.com/gpu"] == 4


def test_priority_classes_and_local_queues_come_from_the_spec():
    recording = render_stack("prod")
    priorities = objects_of(recording, "WorkloadPriorityClass")
    assert {name: p["value"] for name, p in priorities.items()} == {"online": 1000, "standard": 500, "batch": 100}
    local = objects_of(recording, "LocalQueue")
    assert {name: (q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for name, q in local.items()} == {
        "serving": ("inference", "serving"),
        "batch": ("batch", "batch"),
    }


def test_metrics_monitor_vllm_and_the_endpoint_picker_with_dashboard_and_alerts():
    recording = render_stack("prod")
    monitors = objects_of(recording, "PodMonitor")
    assert monitors["vllm"]["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/component": "vllm"},
        "matchExpressions": [{"key": "inferstack.dev/role", "operator": "NotIn", "values": ["worker"]}],
    }
    assert monitors["vllm"]["spec"]["podMetricsEndpoints"][0]["portNumber"] == 8000
    assert monitors["endpoint-picker"]["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/component": "endpoint-picker"}
    }
    dashboard = objects_of(recording, "ConfigMap")["inferstack-serving-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    panels = json.loads(dashboard["data"]["inferstack-serving.json"])["panels"]
    exprs = " ".join(target["expr"] for panel in panels for target in panel["targets"])
    for metric in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:kv_cache_usage_perc",
                   "vllm:num_requests_waiting", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
        assert metric in exprs
    (group,) = objects_of(recording, "PrometheusRule")["inferstack-serving"]["spec"]["groups"]
    rules = {r["alert"]: r for r in group["rules"]}
    assert rules["VllmKvCacheNearlyFull"]["expr"].endswith("> 0.9")
    assert rules["GpuIdle"]["for"] == "30m"


def test_an_existing_prometheus_replaces_the_bundled_stack():
    spec = validate(build(lambda s: s.update(observability={"prometheus_url": "http://prometheus.monitoring:9090"}))).written
    recording = render(spec)
    assert "kube-prometheus-stack" not in releases(recording)
    release_names = {r.name for r in recording.of_type(HELM_RELEASE)}
    for monitor in recording.of_type("kubernetes:monitoring.coreos.com/v1:PodMonitor"):
        assert not release_names & set(monitor.depends_on)


def test_autoscaler_discovers_its_cluster_with_a_version_matched_image():
    release = releases(render_stack("prod"))["cluster-autoscaler"].inputs
    assert release["values"]["autoDiscovery"]["clusterName"] == "prod-inference"
    assert release["values"]["image"]["tag"] == chart("cluster-autoscaler").extra["image_tag_by_kubernetes"]["1.36"]


def test_autoscaler_waits_for_its_pod_identity_association():
    recording = render_stack("prod")
    release = next(r for r in recording.of_type(HELM_RELEASE) if r.inputs["name"] == "cluster-autoscaler")
    association = recording.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")[0]
    assert association.inputs["serviceAccount"] == "cluster-autoscaler"
    assert association.name in release.depends_on


def test_autoscaler_policy_scopes_every_write_to_the_clusters_groups():
    policy = autoscaler_policy("prod-inference", "us-east-1", "123456789012", "aws")
    for statement in policy["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert "*" not in actions
        if statement["Resource"] == "*":
            assert all(":Describe" in a or ":Get" in a for a in actions), statement["Sid"]
    (scale,) = [s for s in policy["Statement"] if "autoscaling:SetDesiredCapacity" in s["Action"]]
    assert scale["Condition"] == {
        "StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/prod-inference": "owned"}
    }


def test_a_kubernetes_version_without_an_autoscaler_image_is_rejected_at_spec_time():
    """Before anything registers (the platform layer would otherwise stop the program after the AWS layer)."""
    with pytest.raises(SpecError) as caught:
        validate(build(lambda s: s.update(cluster={"mode": "create", "kubernetes_version": "1.31"})))
    assert caught.value.path == "cluster.kubernetes_version"
    assert "no cluster-autoscaler image for Kubernetes 1.31" in str(caught.value)
    def without_autoscaler(data):
        data["cluster"] = {"mode": "create", "kubernetes_version": "1.31"}
        without_node_autoscaler(data)

    spec = validate(build(without_autoscaler)).written
    assert spec.cluster.kubernetes_version == "1.31"  # no autoscaler, no image needed
