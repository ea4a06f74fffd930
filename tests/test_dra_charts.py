"""The DRA pools' Helm releases, DeviceClasses, claims and Kueue mappings against the pinned upstream charts
(issue 31).

tests/data/dra holds the chart files verbatim (provenance in its README.md): NVIDIA/k8s-dra-driver-gpu v0.4.0
deployments/helm/dra-driver-nvidia-gpu/, aws/eks-charts stable/aws-dranet/ and stable/aws-efa-k8s-device-plugin/.
The stack is stacks/dra.py rendered by the program (inferstack.engine.run_stack), as `inferstack render` does.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_validation import assert_valid, is_custom_resource, validate_object

from inferstack.catalog.charts import chart
from inferstack.catalog.dra import DEVICE_CLASSES
from inferstack.engine import run_stack
from inferstack.engine.render import helm_releases, kubernetes_objects
from inferstack.platform.dra_drivers import EFA_DRIVER_CHART, GPU_DRIVER_CHART
from inferstack.platform.efa import CHART as EFA_PLUGIN_CHART
from inferstack.platform.efa import efa_plugin_values
from inferstack.platform.kueue import CHART as KUEUE_CHART
from inferstack.stacks import load_stack

DATA = Path(__file__).resolve().parent / "data" / "dra"
STACKS = Path(__file__).resolve().parents[1] / "stacks"
CHARTS = (GPU_DRIVER_CHART, EFA_DRIVER_CHART, EFA_PLUGIN_CHART)
RESOURCE_API = "resource.k8s.io/v1"


@functools.cache
def _rendered():
    return run_stack(load_stack(STACKS, "dra"))


def objects() -> list[dict[str, Any]]:
    return kubernetes_objects(_rendered())


def objects_of(kind: str) -> list[dict[str, Any]]:
    return [o for o in objects() if o["kind"] == kind]


def release(key: str) -> dict[str, Any]:
    """The rendered Helm release of one chart (releases are named after their chart key)."""
    found = [r for r in helm_releases(_rendered()) if r["name"] == key]
    assert len(found) == 1, f"stacks/dra.py renders {len(found)} {key} releases"
    return found[0]


def our_values(key: str) -> dict[str, Any]:
    """What the stack sets: the rendered release's values; for the EFA device plugin, which the DRA stack does not
    install (its only EFA pool is a DRA pool), the values the same pools give it with h100 on the device plugin."""
    if key != EFA_PLUGIN_CHART:
        return release(key)["values"]
    pools = [p.model_copy(update={"device_mode": "device_plugin"}) if p.efa.enabled else p
             for p in load_stack(STACKS, "dra").node_pools]
    return efa_plugin_values(pools)


def chart_file(key: str, path: str) -> str:
    return (DATA / key / path).read_text(encoding="utf-8")


def chart_values(key: str) -> dict[str, Any]:
    return yaml.safe_load(chart_file(key, "values.yaml"))


def templates(key: str) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((DATA / key / "templates").glob("*.yaml")))


def coalesced(defaults: Any, overrides: Any) -> Any:
    """Helm's merge of user values over a chart's (helm pkg/chartutil/coalesce.go): mappings merge key by key,
    anything else (lists included) is replaced, and null deletes the chart's key."""
    if not (isinstance(defaults, dict) and isinstance(overrides, dict)):
        return overrides
    merged = dict(defaults)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = coalesced(defaults.get(key), value)
    return merged


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return "scalar"


def key_path_problems(ours: dict[str, Any], upstream: dict[str, Any], prefix: str = "") -> list[str]:
    """Each key path we set that the chart's values.yaml lacks, or holds as another kind of value. Below an empty
    mapping (a free-form one such as nodeSelector: {}) and inside lists any key is the user's to choose."""
    problems = []
    for key, value in ours.items():
        path = f"{prefix}{key}"
        if key not in upstream:
            problems.append(f"{path}: not a key of the chart's values.yaml")
            continue
        theirs = upstream[key]
        if theirs is not None and _kind(value) != _kind(theirs):
            problems.append(f"{path}: we set a {_kind(value)}, the chart has a {_kind(theirs)}")
        elif isinstance(value, dict) and theirs:
            problems += key_path_problems(value, theirs, f"{path}.")
    return problems


def leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in values.items():
        if isinstance(value, dict) and value:
            paths += leaf_paths(value, f"{prefix}{key}.")
        else:
            paths.append(f"{prefix}{key}")
    return paths


@pytest.mark.parametrize("key", CHARTS)
def test_every_value_we_set_is_a_key_of_the_pinned_chart_with_its_kind(key):
    """Helm ignores a misspelt key silently: each path must exist in values.yaml as a list, mapping or scalar alike."""
    assert key_path_problems(our_values(key), chart_values(key)) == []


@pytest.mark.parametrize("key", CHARTS)
def test_every_value_we_set_is_read_by_a_template(key):
    """A key the templates never read does nothing: each leaf we set is read (itself or a parent given whole to
    toYaml/with) as .Values.<path> in the chart's templates."""
    read = set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", templates(key)))
    unread = [path for path in leaf_paths(our_values(key))
              if not any(path == used or path.startswith(used + ".") for used in read)]
    assert unread == []


def test_kubelet_plugin_runs_only_on_dra_pools_tolerating_the_gpu_taint():
    """Helm replaces lists, so our one pool term replaces the chart's five NFD terms (values.yaml
    kubeletPlugin.affinity) and our tolerations replace the chart's: they must keep its nvidia.com/gpu toleration."""
    merged = coalesced(chart_values(GPU_DRIVER_CHART), our_values(GPU_DRIVER_CHART))["kubeletPlugin"]
    dra_pools = sorted(p.name for p in load_stack(STACKS, "dra").node_pools if p.device_mode == "dra")
    terms = merged["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "inferstack.dev/pool", "operator": "In", "values": dra_pools}]}]
    assert set(merged["affinity"]) == {"nodeAffinity"}
    for toleration in chart_values(GPU_DRIVER_CHART)["kubeletPlugin"]["tolerations"]:
        assert toleration in merged["tolerations"]


@pytest.mark.parametrize("key", [EFA_DRIVER_CHART, EFA_PLUGIN_CHART])
def test_efa_daemonsets_select_their_pools_by_label(key):
    """Both eks-charts templates/daemonset.yaml make one `key In values` term per supportedInstanceLabels key:
    ours replace the chart's list of instance types with the pool label and the pools of that mechanism."""
    assert "{{- range .Values.supportedInstanceLabels.keys }}" in chart_file(key, "templates/daemonset.yaml")
    merged = coalesced(chart_values(key), our_values(key))["supportedInstanceLabels"]
    spec = load_stack(STACKS, "dra")
    efa_pools = [p.name for p in spec.node_pools if p.efa.enabled]
    assert merged == {"keys": ["inferstack.dev/pool"], "values": efa_pools}


def test_the_dra_stack_installs_no_efa_device_plugin_beside_the_efa_driver():
    """One mechanism per device: the EFA pool is a DRA pool, so only aws-dranet hands out its EFA devices."""
    names = {r["name"] for r in helm_releases(_rendered())}
    assert {GPU_DRIVER_CHART, EFA_DRIVER_CHART} <= names
    assert EFA_PLUGIN_CHART not in names


def test_gpu_driver_values_pass_the_charts_validation_template():
    """templates/validation.yaml fails the install when resources.gpus.enabled without gpuResourcesEnabledOverride,
    in the default namespace (unless allowed), with a 'namespace' value, or with nvidiaCtkPath set."""
    validation = chart_file(GPU_DRIVER_CHART, "templates/validation.yaml")
    assert "{{- if and .Values.resources.gpus.enabled (not .Values.gpuResourcesEnabledOverride) }}" in validation
    assert ('{{- if and (eq (include "dra-driver-nvidia-gpu.namespace" .) "default") '
            '( eq .Values.namespaceOverride "") (not .Values.allowDefaultNamespace) }}') in validation
    assert "{{- if .Values.namespace }}" in validation and "{{- if .Values.nvidiaCtkPath }}" in validation
    assert "{{- if .Values.webhook.enabled }}" in validation
    values = coalesced(chart_values(GPU_DRIVER_CHART), our_values(GPU_DRIVER_CHART))
    assert values["resources"]["gpus"]["enabled"] is True and values["gpuResourcesEnabledOverride"] is True
    namespace = release(GPU_DRIVER_CHART)["namespace"]
    assert namespace == chart(GPU_DRIVER_CHART).namespace and namespace != "default"
    assert values["namespaceOverride"] == "" and not values["allowDefaultNamespace"]
    assert "namespace" not in values and "nvidiaCtkPath" not in values
    assert values["webhook"]["enabled"] is False  # the TLS checks apply only with the webhook


def test_cluster_serves_the_resource_api_the_charts_render():
    """validation.yaml fails without resource.k8s.io v1/v1beta2/v1beta1; aws-dranet's DeviceClass is hard-coded v1."""
    assert f"apiVersion: {RESOURCE_API}" in chart_file(EFA_DRIVER_CHART, "templates/deviceclass.yaml")
    minor = tuple(int(part) for part in load_stack(STACKS, "dra").cluster.kubernetes_version.split(".")[:2])
    assert minor >= (1, 34)  # resource.k8s.io/v1 is served from Kubernetes 1.34


def rendered_device_class(key: str, path: str) -> dict[str, Any]:
    """A chart's DeviceClass template with its default values: directives dropped, values substituted."""
    values = chart_values(key)
    lines = []
    for line in chart_file(key, path).splitlines():
        if re.fullmatch(r"\s*\{\{-? (if|end|\$|include).*\}\}\s*", line) or "| nindent" in line:
            continue
        line = re.sub(r"\{\{ \.Values\.([A-Za-z0-9_.]+) \}\}",
                      lambda m: str(functools.reduce(lambda node, k: node[k], m[1].split("."), values)), line)
        line = re.sub(r"\{\{ (\$resourceApiVersion|include \"dra-driver-nvidia-gpu.resourceApiVersion\" \.) \}\}",
                      RESOURCE_API, line)
        assert "{{" not in line, f"{path}: unrendered directive {line!r}"
        lines.append(line)
    return yaml.safe_load("\n".join(lines))


def normalised(expression: str) -> str:
    return " ".join(expression.split())


@pytest.mark.parametrize(("key", "path", "device_type"), [
    ("gpu", "templates/deviceclass-gpu.yaml", "gpu"),
    ("mig", "templates/deviceclass-mig.yaml", "mig"),
])
def test_catalog_gpu_classes_are_the_ones_the_nvidia_chart_installs(key, path, device_type):
    """dra-driver-nvidia-gpu v0.4.0 renders gpu.nvidia.com and mig.nvidia.com (when resources.gpus.enabled), each
    selecting its driver's devices of one type; the stack renders neither (the chart owns them)."""
    catalog = DEVICE_CLASSES[key]
    upstream = rendered_device_class(GPU_DRIVER_CHART, path)
    assert upstream["kind"] == "DeviceClass" and upstream["metadata"]["name"] == catalog.name
    assert catalog.installed_by == GPU_DRIVER_CHART
    assert [s["cel"]["expression"] for s in upstream["spec"]["selectors"]] == [
        f"device.driver == '{catalog.driver}' && device.attributes['{catalog.driver}'].type == '{device_type}'"
    ]
    assert "{{- if .Values.resources.gpus.enabled }}" in chart_file(GPU_DRIVER_CHART, path)
    assert catalog.name not in {o["metadata"]["name"] for o in objects_of("DeviceClass")}


def test_gpu_class_extended_resource_is_the_one_kueue_counts():
    """On resource.k8s.io/v1 the chart's gpu.nvidia.com names extendedResourceName nvidia.com/gpu: the same name
    the catalog maps the class to in Kueue, so quotas count one resource either way."""
    upstream = rendered_device_class(GPU_DRIVER_CHART, "templates/deviceclass-gpu.yaml")
    assert upstream["spec"]["extendedResourceName"] == DEVICE_CLASSES["gpu"].resource


def test_efa_device_class_is_aws_dranets_with_one_owner():
    """aws-dranet templates/deviceclass.yaml (name from values deviceClass.name) is switched off in our values and
    rendered by the stack with the same name and CEL selector (whitespace aside)."""
    upstream = rendered_device_class(EFA_DRIVER_CHART, "templates/deviceclass.yaml")
    classes = objects_of("DeviceClass")
    assert len(classes) == 1
    ours = classes[0]
    assert ours["apiVersion"] == upstream["apiVersion"] == RESOURCE_API
    assert ours["metadata"]["name"] == upstream["metadata"]["name"] == DEVICE_CLASSES["efa"].name
    expressions = [[normalised(s["cel"]["expression"]) for s in c["spec"]["selectors"]] for c in (ours, upstream)]
    assert expressions[0] == expressions[1] == [normalised(DEVICE_CLASSES["efa"].selector)]
    assert "{{- if .Values.deviceClass.create }}" in chart_file(EFA_DRIVER_CHART, "templates/deviceclass.yaml")
    assert our_values(EFA_DRIVER_CHART)["deviceClass"] == {"create": False, "name": upstream["metadata"]["name"]}


@pytest.mark.parametrize("key", CHARTS)
def test_chart_files_are_the_pinned_versions(key):
    """tests/data/dra holds the charts at the versions components/catalog/charts.json installs."""
    upstream = yaml.safe_load(chart_file(key, "Chart.yaml"))
    assert (upstream["name"], str(upstream["version"]), str(upstream["appVersion"])) == (
        key, chart(key).version, chart(key).app_version)


def test_every_rendered_object_validates():
    """Every object of stacks/dra.py against the Kubernetes 1.36 schemas and the CRD schemas (../shared/schemas)."""
    rendered = objects()
    assert {o["kind"] for o in rendered} >= {"DeviceClass", "ResourceClaimTemplate", "LeaderWorkerSet"}
    assert_valid(rendered, load_stack(STACKS, "dra").cluster.kubernetes_version)


@pytest.mark.parametrize("kind", ["DeviceClass", "ResourceClaimTemplate"])
def test_dra_objects_validate_against_the_core_resource_v1_schemas(kind):
    """DeviceClass and ResourceClaimTemplate are built-in resource.k8s.io/v1 kinds (served from 1.34): checked
    against kubernetes-validate's strict schemas, not a CRD."""
    found = objects_of(kind)
    assert found
    version = load_stack(STACKS, "dra").cluster.kubernetes_version
    for obj in found:
        assert obj["apiVersion"] == RESOURCE_API and not is_custom_resource(obj, version)
        assert validate_object(obj, version) == []


def kueue_config() -> dict[str, Any]:
    return yaml.safe_load(release(KUEUE_CHART)["values"]["managerConfig"]["controllerManagerConfigYaml"])


def claim_requests() -> list[tuple[str, dict[str, Any]]]:
    """(template name, request) for every request of every rendered ResourceClaimTemplate."""
    return [(t["metadata"]["name"], request)
            for t in objects_of("ResourceClaimTemplate") for request in t["spec"]["spec"]["devices"]["requests"]]


def test_kueue_maps_every_device_class_a_claim_names():
    """kueue v0.19.2 pkg/dra/claims.go:217 refuses a workload whose claim names a DeviceClass no
    resources.deviceClassMappings entry lists ("DeviceClass %s is not mapped in DRA configuration"); each class
    counts as the extended resource the catalog gives it (apis/config/v1beta2 DeviceClassMapping)."""
    mapped = {name: mapping["name"] for mapping in kueue_config()["resources"]["deviceClassMappings"]
              for name in mapping["deviceClassNames"]}
    used = {request["exactly"]["deviceClassName"] for _, request in claim_requests()}
    assert used == {DEVICE_CLASSES["gpu"].name, DEVICE_CLASSES["efa"].name}
    by_name = {c.name: c.resource for c in DEVICE_CLASSES.values()}
    assert {name: mapped.get(name) for name in used} == {name: by_name[name] for name in used}


def test_claims_use_only_the_request_form_kueue_accounts():
    """kueue v0.19.2 pkg/dra/claims.go countDevicesPerClass (lines 73-108) refuses FirstAvailable, AdminAccess and
    allocationMode All: every request is `exactly` with ExactCount and a positive count."""
    requests = claim_requests()
    assert requests
    for template, request in requests:
        assert set(request) == {"name", "exactly"}, template
        exactly = request["exactly"]
        assert exactly["allocationMode"] == "ExactCount" and exactly["count"] >= 1, template
        assert not exactly.get("adminAccess"), template
