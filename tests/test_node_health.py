"""GPU node health: the EKS node monitoring agent add-on and what repairs a sick node (issue 15, item 5).

Upstream rules encoded here:
- aws/eks-node-monitoring-agent v1.7.0 charts/configuration.schema.json: the add-on's configuration values
  (tests/data holds its structure); charts/eks-node-monitoring-agent/values.yaml: nodeAgent.affinity and
  dcgmAgent.affinity exclude Fargate, Auto Mode, hybrid and HyperPod nodes and name the architectures
  (amd64 and arm64 for the agent, amd64 for the engine), dcgmAgent.tolerations defaults to none.
- monitors/nvidia/dcgm/dcgm_client.go: the agent watches clock-event reasons, NVSwitch errors and fabric
  state, no profiling (DCGM_FI_PROF_*) field; the profiling module is what one engine holds per GPU (agent #256).
- NVIDIA gpu-operator v26.7.0 controllers/object_controls.go TransformDCGMExporter: with dcgm.enabled off and no
  DCGM_REMOTE_HOSTENGINE_INFO, dcgm-exporter runs its embedded engine.
- monitors/nvidia/dcgm/dcgm_reconcile.go + pkg/reasons/reasons.yaml: no host engine -> Fatal DCGMError, which
  never clears (agent #266); mig-parted #181: a GPU reset fails while a monitoring process holds the GPU.
- Kubernetes node affinity: NotIn and DoesNotExist match a node without the label; a toleration with no key and
  operator Exists tolerates every taint (core/v1 Toleration).
- EKS User Guide node-health.adoc: EKS waits 10 minutes before acting on AcceleratedHardwareReady, 30 for the
  other conditions; Karpenter RepairPolicies (shared/reference/karpenter.md section 8) use the same figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from jsonschema import Draft7Validator

sys.path.insert(0, str(Path(__file__).parent))
from aws_recording import build, prod_spec, run  # noqa: E402
from kube_validation import validate_object  # noqa: E402

from inferstack.catalog.charts import eks_addon_versions
from inferstack.conventions import GPU_TAINT_KEY, POOL_LABEL, SHARING_LABEL
from inferstack.planning import node_health
from inferstack.platform.gpu_operator import gpu_operator_values
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack

SCHEMA = json.loads((Path(__file__).parent / "data" / "eks-node-monitoring-agent.configuration.schema.json").read_text())
UPSTREAM_AGENT_TERMS = [
    {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate", "auto", "hybrid"]},
    {"key": "sagemaker.amazonaws.com/compute-type", "operator": "NotIn", "values": ["hyperpod"]},
    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
]
UPSTREAM_ENGINE_TERMS = [*UPSTREAM_AGENT_TERMS[:2], {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]


def matches(affinity: dict, labels: dict[str, str]) -> bool:
    """Kubernetes required node affinity: any term whose every expression holds."""
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    def holds(expression):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        return {
            "In": lambda: labels.get(key) in values,
            "NotIn": lambda: labels.get(key) not in values,
            "Exists": lambda: key in labels,
            "DoesNotExist": lambda: key not in labels,
        }[operator]()

    return any(all(holds(e) for e in term["matchExpressions"]) for term in terms)


def tolerated(tolerations: list[dict], taint: dict) -> bool:
    """core/v1 Toleration.ToleratesTaint: empty key with Exists matches every taint."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if not t.get("key") and t.get("operator") == "Exists":
            return True
        if t.get("key") == taint["key"] and (t.get("operator") == "Exists" or t.get("value") == taint.get("value")):
            return True
    return False


@pytest.fixture(scope="module")
def prod():
    return build()


@pytest.fixture(scope="module")
def configuration(prod):
    return node_health.agent_configuration()


def node(pool: str | None = None, arch: str = "amd64", **extra) -> dict[str, str]:
    labels = {"kubernetes.io/arch": arch, "kubernetes.io/os": "linux", **extra}
    if pool:
        labels[POOL_LABEL] = pool
    return labels


def test_the_configuration_passes_the_add_on_schema(configuration):
    errors = sorted(Draft7Validator(SCHEMA).iter_errors(configuration), key=str)
    assert errors == []


def test_placement_and_tolerations_are_valid_pod_fields(configuration):
    """The schema only says 'object' for affinity: check both halves as a Pod's spec would be."""
    for half in ("nodeAgent", "dcgmAgent"):
        values = configuration[half]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent"},
               "spec": {"containers": [{"name": "agent", "image": "agent"}], "affinity": values["affinity"],
                        "tolerations": values.get("tolerations", [])}}
        assert validate_object(pod) == [], half


def test_overrides_keep_every_upstream_placement_term(configuration):
    for half, upstream in (("nodeAgent", UPSTREAM_AGENT_TERMS), ("dcgmAgent", UPSTREAM_ENGINE_TERMS)):
        (term,) = configuration[half]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        for expression in upstream:
            assert expression in term["matchExpressions"], (half, expression)


def test_the_agent_and_its_engine_run_where_they_should(prod, configuration):
    """Evaluated on the labels each pool's nodes register with (aws/node_pool.node_labels, both modes)."""
    from inferstack.aws.node_pool import node_labels
    from inferstack.spec.pools import PoolHardware

    agent, engine = configuration["nodeAgent"]["affinity"], configuration["dcgmAgent"]["affinity"]
    # System nodes: the agent (kernel, network, storage, runtime), no GPU engine.
    assert matches(agent, node()) and not matches(engine, node())
    for pool in prod.node_pools:
        labels = node(**node_labels(pool, PoolHardware(pool), "on-demand"))
        # MIG nodes get neither (the engine would block mig-manager's GPU reset; the agent alone latches
        # DCGMError); every other GPU node both.
        watched = pool.gpu_sharing.mode != "mig"
        assert matches(agent, labels) == watched and matches(engine, labels) == watched, pool.name
    # Upstream exclusions hold: Fargate never, arm64 GPU nodes get no engine.
    assert not matches(agent, node(**{"eks.amazonaws.com/compute-type": "fargate"}))
    assert not matches(engine, node("h100", arch="arm64"))


def test_the_engine_tolerates_every_gpu_pool_taint(prod, configuration):
    tolerations = configuration["dcgmAgent"]["tolerations"]
    assert tolerated(tolerations, {"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"})
    for pool in prod.node_pools:
        for taint in pool.taints:
            assert tolerated(tolerations, {"key": taint.key, "value": taint.value, "effect": taint.effect}), pool.name


def test_the_values_select_by_label_not_by_pool_name(configuration):
    """Beyond the chart's own terms, only the labels every GPU node carries: adding or renaming a pool leaves the
    add-on's values, so no DCGM engine restarts (and no agent latches DCGMError) because another pool changed."""
    def ours(half, upstream):
        (term,) = configuration[half]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        return [e for e in term["matchExpressions"] if e not in upstream]

    not_mig = {"key": SHARING_LABEL, "operator": "NotIn", "values": ["mig"]}
    assert ours("nodeAgent", UPSTREAM_AGENT_TERMS) == [not_mig]
    assert ours("dcgmAgent", UPSTREAM_ENGINE_TERMS) == [{"key": POOL_LABEL, "operator": "Exists"}, not_mig]
    assert json.loads(node_health.agent_configuration_json()) == configuration


def test_two_host_engines_share_no_profiling_module():
    """The agent's engine sits beside dcgm-exporter's embedded one: safe only while the agent watches no
    DCGM_FI_PROF_* field and the GPU operator is not pointed at another engine."""
    assert node_health.FACTS["watched_fields"]
    assert not any(field.startswith("DCGM_FI_PROF_") for field in node_health.FACTS["watched_fields"])
    values = gpu_operator_values(build())
    assert not values.get("dcgm", {}).get("enabled", False)
    env = {e["name"] for e in values["dcgmExporter"].get("env", [])}
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in env


def test_the_add_on_is_pinned_configured_and_waits_for_the_system_nodes(prod):
    recording = run(prod)
    (addon,) = [a for a in recording.of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == node_health.ADDON]
    assert addon.inputs["addonVersion"] == eks_addon_versions()[prod.cluster.kubernetes_version][node_health.ADDON]
    assert json.loads(addon.inputs["configurationValues"]) == node_health.agent_configuration()
    system = recording.named("prod-eks-system")
    assert system.urn in addon.depends_on or system.name in addon.depends_on


@pytest.mark.parametrize("change", [
    {"platform": {"node_monitoring_agent": False}},
    {"cluster": {"mode": "existing", "name": "shared"}},
])
def test_no_add_on_when_off_or_the_cluster_is_not_ours(change):
    spec = build(change)
    names = {a.inputs["addonName"] for a in run(spec).of_type("aws:eks/addon:Addon")}
    assert node_health.ADDON not in names
    assert node_health.node_health_plan(spec)["agent"] is None
    assert not any(p["gpu_monitored"] for p in node_health.node_health_plan(spec)["pools"])


def test_the_plan_says_what_watches_and_repairs_each_pool(prod):
    health = {p["pool"]: p for p in node_health.node_health_plan(prod)["pools"]}
    assert health["h100"]["gpu_monitored"] and "AcceleratedHardwareReady" in health["h100"]["why"]
    assert "diagnostics" not in health["h100"]["why"]   # the agent runs none unless DCGM_DIAG_LEVEL is set
    assert health["h100"]["repair"].startswith("EKS node auto repair replaces a node 10 min after")
    assert not health["mig"]["gpu_monitored"] and "mig-manager" in health["mig"]["why"]
    assert health["mig"]["repair"] == "EKS node auto repair replaces a node 30 min after it stops being Ready"


def test_repair_off_is_stated():
    data = prod_spec()
    data["node_pools"][3]["auto_repair"] = False
    health = {p["pool"]: p for p in node_health.node_health_plan(StackSpec.model_validate(data))["pools"]}
    assert health["l4"]["repair"] == "off" and health["l4"]["gpu_monitored"]


def test_karpenter_repairs_with_its_own_gate():
    spec = load_stack(Path(__file__).parents[1] / "stacks", "karpenter")
    health = node_health.node_health_plan(spec)["pools"]
    watched = [p for p in health if p["gpu_monitored"]]
    assert watched and all(p["repair"].startswith("Karpenter (NodeRepair) replaces a node 10 min after") for p in watched)
    assert [p["pool"] for p in health if not p["gpu_monitored"]] == [
        pool.name for pool in spec.node_pools if pool.gpu_sharing.mode == "mig"
    ]
