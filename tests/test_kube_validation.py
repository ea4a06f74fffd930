"""Prove that tests/kube_validation.py accepts real manifests and rejects the mistakes the API server would reject."""

from __future__ import annotations

import copy
import re
import warnings

import pytest

import kube_validation
from kube_validation import (
    SHARED_SCHEMAS,
    UnknownKind,
    assert_valid,
    crd_schema,
    is_custom_resource,
    resolve_kubernetes_version,
    validate_object,
)

needs_schemas = pytest.mark.skipif(SHARED_SCHEMAS is None, reason="../shared/schemas is absent")

LABELS = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/part-of": "inferstack"}

POD_SPEC = {
    "serviceAccountName": "vllm",
    "nodeSelector": {"karpenter.sh/nodepool": "gpu"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "containers": [
        {
            "name": "vllm",
            "image": "vllm/vllm-openai:v0.11.0",
            "args": ["--model", "/models/llama", "--port", "8000"],
            "ports": [{"name": "http", "containerPort": 8000}],
            "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "64Gi"}, "requests": {"cpu": "8"}},
            "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
        }
    ],
}

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "vllm", "namespace": "serving", "labels": LABELS},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": LABELS},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
        "template": {"metadata": {"labels": LABELS}, "spec": POD_SPEC},
    },
}

CORE_OBJECTS = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "serving", "labels": LABELS}},
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "vllm", "namespace": "serving"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "serving"}, "data": {"a": "b"}},
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf-token", "namespace": "serving"},
        "type": "Opaque",
        "stringData": {"token": "x"},
    },
    {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "vllm", "namespace": "serving"},
        "spec": {"selector": LABELS, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    },
    {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "vllm", "namespace": "serving"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": LABELS}},
    },
    {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "fetch-weights-", "namespace": "serving"},
        "spec": {
            "backoffLimit": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "fetch", "image": "amazon/aws-cli:2.17.0", "args": ["s3", "sync"]}],
                }
            },
        },
    },
]

CLUSTER_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {"name": "gpu-inference"},
    "spec": {
        "cohortName": "platform",
        "namespaceSelector": {"matchLabels": {"inferstack.io/tenant": "true"}},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "g6e-on-demand",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 96},
                            {"name": "memory", "nominalQuota": "768Gi", "borrowingLimit": "128Gi"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4, "lendingLimit": 2},
                        ],
                    }
                ],
            }
        ],
    },
}

RESOURCE_FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {"name": "g6e-on-demand"},
    "spec": {
        "nodeLabels": {"karpenter.sh/capacity-type": "on-demand", "node.kubernetes.io/instance-type": "g6e.12xlarge"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}

SCALED_OBJECT = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObject",
    "metadata": {"name": "vllm", "namespace": "serving"},
    "spec": {
        "scaleTargetRef": {"name": "vllm"},
        "minReplicaCount": 1,
        "maxReplicaCount": 4,
        "cooldownPeriod": 300,
        "triggers": [
            {
                "type": "prometheus",
                "metadata": {
                    "serverAddress": "http://prometheus.monitoring:9090",
                    "query": "sum(vllm:num_requests_waiting)",
                    "threshold": "10",
                },
            }
        ],
    },
}

INFERENCE_POOL = {
    "apiVersion": "inference.networking.k8s.io/v1",
    "kind": "InferencePool",
    "metadata": {"name": "llama", "namespace": "serving"},
    "spec": {
        "selector": {"matchLabels": {"app.kubernetes.io/name": "vllm"}},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {"name": "llama-epp", "port": {"number": 9002}, "failureMode": "FailOpen"},
    },
}

LEADER_WORKER_SET = {
    "apiVersion": "leaderworkerset.x-k8s.io/v1",
    "kind": "LeaderWorkerSet",
    "metadata": {"name": "llama-405b", "namespace": "serving"},
    "spec": {
        "replicas": 1,
        # `type` is left out on purpose: the API server defaults it, and `required` must see the default.
        "rolloutStrategy": {"rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": "50%"}},
        "leaderWorkerTemplate": {
            "size": 2,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": {"metadata": {"labels": {"role": "leader"}}, "spec": copy.deepcopy(POD_SPEC)},
            "workerTemplate": {"metadata": {"labels": {"role": "worker"}}, "spec": copy.deepcopy(POD_SPEC)},
        },
    },
}


def _with(obj: dict, path: str, value) -> dict:
    """A deep copy of obj with the dotted path (list indices as numbers) set to value."""
    result = copy.deepcopy(obj)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = result
    for part in parents:
        node = node[part]
    node[last] = value
    return result


def test_valid_deployment_passes():
    assert validate_object(DEPLOYMENT) == []


@pytest.mark.parametrize("obj", CORE_OBJECTS, ids=lambda o: o["kind"])
def test_valid_core_objects_pass(obj):
    assert validate_object(obj) == []


def test_unknown_field_in_pod_spec_is_rejected_with_its_path():
    broken = _with(DEPLOYMENT, "spec.template.spec.containers.0.imagePullPolicyy", "Always")
    errors = validate_object(broken)
    assert len(errors) == 1
    assert errors[0].startswith("Deployment/vllm: spec.template.spec.containers[0]: ")
    assert "'imagePullPolicyy' was unexpected" in errors[0]


def test_wrong_type_in_core_object_is_rejected():
    errors = validate_object(_with(DEPLOYMENT, "spec.replicas", "two"))
    assert errors and errors[0].startswith("Deployment/vllm: spec.replicas: ")


def test_api_version_removed_from_kubernetes_is_reported():
    old_pdb = dict(CORE_OBJECTS[5], apiVersion="policy/v1beta1")
    assert validate_object(old_pdb) == [
        "PodDisruptionBudget/vllm: (root): Kubernetes 1.34.0 serves no PodDisruptionBudget in policy/v1beta1"
    ]


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"namespace": "serving"}, "metadata: needs a non-empty name or generateName"),
        ({"name": "x", "resourceVersion": "12"}, "metadata: 'resourceVersion' is not a field a manifest may set"),
        ({"name": "x", "labels": {"version": "1.2+cu128"}}, "metadata.labels.version: '1.2+cu128' is not a valid"),
        ({"name": "x", "annotations": {"bad key": "v"}}, "metadata.annotations: key 'bad key' is not a valid"),
    ],
)
def test_metadata_problems_are_reported_for_core_objects(metadata, expected):
    errors = validate_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata})
    assert any(expected in e for e in errors), errors


def test_object_without_metadata_is_rejected():
    assert validate_object({"apiVersion": "v1", "kind": "ConfigMap"}) == [
        "ConfigMap/?: metadata: is required and must be an object with a name"
    ]


def test_custom_resource_detection_uses_served_groups_not_suffixes():
    assert not is_custom_resource(DEPLOYMENT)
    assert not is_custom_resource(CORE_OBJECTS[0])
    assert not is_custom_resource({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress"})
    assert is_custom_resource(INFERENCE_POOL)
    assert is_custom_resource({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway"})
    assert is_custom_resource(CLUSTER_QUEUE)


def test_kubernetes_version_resolves_to_nearest_shipped_schema_set():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_kubernetes_version("1.34") == "1.34.0"
        assert resolve_kubernetes_version("v1.34.2") == "1.34.0"
    with pytest.warns(UserWarning, match="nearest shipped version 1.37.0"):
        assert resolve_kubernetes_version("1.99") == "1.37.0"
    with pytest.warns(UserWarning, match="nearest shipped version 1.25.0"):
        assert resolve_kubernetes_version("1.19") == "1.25.0"
    with pytest.raises(ValueError):
        resolve_kubernetes_version("latest")


def test_kubernetes_version_changes_the_schema_used():
    # Deployment has been apps/v1 for years; the same object is valid against the oldest shipped schemas too.
    assert validate_object(DEPLOYMENT, kubernetes_version="1.25") == []


@needs_schemas
def test_valid_kueue_cluster_queue_and_resource_flavor_pass():
    assert_valid([RESOURCE_FLAVOR, CLUSTER_QUEUE])


@needs_schemas
def test_misspelt_cluster_queue_field_is_rejected():
    broken = copy.deepcopy(CLUSTER_QUEUE)
    resource = broken["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    resource["nominalQuotas"] = resource.pop("nominalQuota")
    errors = validate_object(broken)
    path = "ClusterQueue/gpu-inference: spec.resourceGroups[0].flavors[0].resources[0]: "
    assert path + "'nominalQuota' is a required property" in errors
    assert any(e.startswith(path) and "'nominalQuotas' was unexpected" in e for e in errors), errors


@needs_schemas
@pytest.mark.parametrize(("quota", "valid"), [(8, True), ("8", True), ("500m", True), (1.5, False), ("8 GPUs", False)])
def test_int_or_string_quantities(quota, valid):
    obj = _with(CLUSTER_QUEUE, "spec.resourceGroups.0.flavors.0.resources.2.nominalQuota", quota)
    assert (validate_object(obj) == []) is valid


@needs_schemas
def test_duplicate_list_map_key_is_rejected():
    flavors = CLUSTER_QUEUE["spec"]["resourceGroups"][0]["flavors"]
    broken = _with(CLUSTER_QUEUE, "spec.resourceGroups.0.flavors", flavors + copy.deepcopy(flavors))
    errors = validate_object(broken)
    assert any("spec.resourceGroups[0].flavors: entries 0 and 1 have the same key (name='g6e-on-demand')" in e
               for e in errors), errors


@needs_schemas
def test_keda_scaled_object_passes_and_unknown_spec_key_fails():
    assert validate_object(SCALED_OBJECT) == []
    errors = validate_object(_with(SCALED_OBJECT, "spec.maxReplicas", 4))
    assert len(errors) == 1
    assert errors[0].startswith("ScaledObject/vllm: spec: ") and "'maxReplicas' was unexpected" in errors[0]


@needs_schemas
def test_inference_pool_v1_passes_and_bad_port_fails():
    assert validate_object(INFERENCE_POOL) == []
    errors = validate_object(_with(INFERENCE_POOL, "spec.targetPorts.0.number", 70000))
    assert errors == ["InferencePool/llama: spec.targetPorts[0].number: 70000 is greater than the maximum of 65535"]


@needs_schemas
def test_leader_worker_set_passes_with_server_defaults_applied():
    assert validate_object(LEADER_WORKER_SET) == []
    # Embedded pod templates are strict too (the CRD spells out PodSpec).
    broken = _with(LEADER_WORKER_SET, "spec.leaderWorkerTemplate.workerTemplate.spec.gpus", 8)
    errors = validate_object(broken)
    assert len(errors) == 1 and "spec.leaderWorkerTemplate.workerTemplate.spec: " in errors[0]


@needs_schemas
def test_defaults_decide_one_of_and_ip_formats_are_checked():
    gateway = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "inference", "namespace": "serving"},
        "spec": {
            "gatewayClassName": "istio",
            # type defaults to IPAddress; without defaulting both oneOf branches would match.
            "addresses": [{"value": "10.0.0.10"}],
            "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}],
        },
    }
    assert validate_object(gateway) == []
    assert validate_object(_with(gateway, "spec.addresses.0.value", "fd00::10")) == []
    assert validate_object(_with(gateway, "spec.addresses.0.value", "not-an-ip")) == [
        "Gateway/inference: spec.addresses[0]: matches none of the oneOf alternatives; "
        "closest: value: 'not-an-ip' is not a 'ipv4'"
    ]


@needs_schemas
def test_http_route_to_inference_pool_passes_and_set_lists_must_be_unique():
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "llama", "namespace": "serving"},
        "spec": {
            "parentRefs": [{"name": "inference"}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                    "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": ["x-debug"]}}],
                    "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama"}],
                }
            ],
        },
    }
    assert validate_object(route) == []
    # x-kubernetes-list-type: set
    twice = _with(route, "spec.rules.0.filters.0.requestHeaderModifier.remove", ["x-debug", "x-debug"])
    assert validate_object(twice) == [
        "HTTPRoute/llama: spec.rules[0].filters[0].requestHeaderModifier.remove: "
        "['x-debug', 'x-debug'] has non-unique elements"
    ]


@needs_schemas
def test_preserve_unknown_fields_leaves_only_that_node_open():
    scaled_job = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledJob",
        "metadata": {"name": "batch", "namespace": "serving"},
        "spec": {
            "jobTargetRef": {
                "template": {
                    # The CRD marks this metadata x-kubernetes-preserve-unknown-fields, so generateName is kept.
                    "metadata": {"labels": {"app": "batch"}, "generateName": "batch-"},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "run", "image": "busybox:1.36"}]},
                }
            },
            "triggers": SCALED_OBJECT["spec"]["triggers"],
        },
    }
    assert validate_object(scaled_job) == []
    errors = validate_object(_with(scaled_job, "spec.jobTargetRef.template.spec.gpus", 1))
    assert errors == [
        "ScaledJob/batch: spec.jobTargetRef.template.spec: "
        "Additional properties are not allowed ('gpus' was unexpected)"
    ]


@needs_schemas
def test_custom_resource_metadata_allows_only_object_meta_keys():
    errors = validate_object(_with(RESOURCE_FLAVOR, "metadata.uid", "1234"))
    assert errors == [
        "ResourceFlavor/g6e-on-demand: metadata: 'uid' is not a field a manifest may set (allowed: "
        "['annotations', 'finalizers', 'generateName', 'labels', 'name', 'namespace', 'ownerReferences'])"
    ]
    errors = validate_object(_with(RESOURCE_FLAVOR, "metadata.labels", {"tier": 3}))
    assert errors == ["ResourceFlavor/g6e-on-demand: metadata.labels.tier: 3 is not of type 'string', 'null'"]
    assert validate_object(_with(RESOURCE_FLAVOR, "metadata", {"labels": LABELS})) == [
        "ResourceFlavor/?: metadata: needs a non-empty name or generateName"
    ]


@needs_schemas
@pytest.mark.parametrize(("kind_value", "valid"), [("ProvisioningRequestConfig", True), ("Bad_Kind", False)])
def test_go_case_insensitive_pattern_works(kind_value, valid):
    check = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": "prov"},
        "spec": {
            "controllerName": "kueue.x-k8s.io/provisioning-request",
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": kind_value, "name": "prov-config"},
        },
    }
    assert (validate_object(check) == []) is valid


@needs_schemas
def test_every_shared_schema_prepares_and_its_patterns_compile():
    def patterns(node):
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                yield node["pattern"]
            for key, value in node.items():
                if key not in ("enum", "default", "example", "x-kubernetes-validations"):
                    yield from patterns(value)
        elif isinstance(node, list):
            for item in node:
                yield from patterns(item)

    files = sorted(SHARED_SCHEMAS.glob("*/*.json"))
    assert files
    for path in files:
        kind, _, version = path.stem.rpartition("_")
        schema = crd_schema(path.parent.name, version, kind)
        assert schema["additionalProperties"] is False, path
        for pattern in patterns(schema):
            re.compile(pattern)


@needs_schemas
def test_unknown_custom_kind_raises_and_assert_valid_lists_it():
    widget = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Widget", "metadata": {"name": "w"}}
    with pytest.raises(UnknownKind, match="no CRD schema for Widget"):
        validate_object(widget)
    with pytest.raises(UnknownKind):
        validate_object({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}})
    with pytest.raises(AssertionError) as failure:
        assert_valid([widget, _with(DEPLOYMENT, "spec.replicas", "two"), DEPLOYMENT])
    report = str(failure.value)
    assert report.startswith("2 problem(s) in rendered Kubernetes objects:")
    assert "Widget/w: (root): no CRD schema for Widget" in report
    assert "Deployment/vllm: spec.replicas: " in report


def test_missing_api_version_or_kind_is_an_error():
    assert validate_object({"kind": "ConfigMap", "metadata": {"name": "c"}}) == [
        "ConfigMap/c: (root): apiVersion and kind must name a Kubernetes type (e.g. apps/v1, Deployment)"
    ]


def test_custom_resource_skips_cleanly_without_shared_schemas(monkeypatch):
    monkeypatch.setattr(kube_validation, "SHARED_SCHEMAS", None)
    with pytest.raises(pytest.skip.Exception, match="ClusterQueue .* ../shared/schemas is absent"):
        validate_object(CLUSTER_QUEUE)
    assert validate_object(DEPLOYMENT) == []
