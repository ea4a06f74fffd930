"""End to end: render the example stacks through the CLI and check every file a reviewer would read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kube_validation import assert_valid

from inferstack.cli import main
from inferstack.stacks import load_stack

STACKS = Path(__file__).resolve().parents[1] / "stacks"


@pytest.fixture(scope="module")
def render_stack(tmp_path_factory):
    """Render each stack once per module through the CLI, as a user would."""
    outputs: dict[str, Path] = {}

    def render(stack: str) -> Path:
        if stack not in outputs:
            out = tmp_path_factory.mktemp(stack)
            assert main(["render", stack, "--stacks-dir", str(STACKS), "--out", str(out)]) == 0
            outputs[stack] = out
        return outputs[stack]

    return render


@pytest.fixture(params=["dev", "prod", "karpenter", "serving"])
def rendered(request, render_stack) -> tuple[str, Path]:
    return request.param, render_stack(request.param)


def test_render_writes_all_four_outputs(rendered):
    _, out = rendered
    assert (out / "resources.json").is_file() and (out / "plan.json").is_file()
    assert list((out / "kubernetes").glob("*.yaml")) and list((out / "helm").glob("*.yaml"))


def test_resources_json_is_one_entry_per_registration_with_resolvable_names(rendered):
    _, out = rendered
    resources = json.loads((out / "resources.json").read_text())
    names = [r["name"] for r in resources]
    assert len(names) == len(set(names)), "logical names are unique, so depends_on and parent are unambiguous"
    known = set(names)
    for r in resources:
        assert set(r) == {"type", "name", "custom", "parent", "inputs", "depends_on", "options"}
        assert r["parent"] is None or r["parent"] in known
        assert set(r["depends_on"]) <= known
        assert r["type"].count(":") >= 2


def test_every_kubernetes_object_validates(rendered):
    stack, out = rendered
    version = load_stack(STACKS, stack).cluster.kubernetes_version
    objects = [yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))]
    assert_valid(objects, version)


def test_every_helm_release_is_pinned(rendered):
    _, out = rendered
    for path in (out / "helm").glob("*.yaml"):
        release = yaml.safe_load(path.read_text())
        assert release["chart"] and release["version"] and release["version"][0] in "v0123456789", path.name
        assert release["namespace"], path.name
        assert release["repository"] or release["chart"].startswith("oci://"), path.name


def test_plan_json_summarises_pools_placements_and_cost(rendered):
    stack, out = rendered
    plan = json.loads((out / "plan.json").read_text())
    spec = load_stack(STACKS, stack)
    assert plan["stack"] == stack
    assert [p["name"] for p in plan["node_pools"]] == [p.name for p in spec.node_pools]
    assert all(row["fits"] for row in plan["placements"])
    assert plan["totals"]["usd_per_hour_max"] >= plan["totals"]["usd_per_hour_min"] > 0 or stack == "dev"
    assert set(plan["resources"]["by_layer"]) >= {"inferstack:aws:Foundation"}


def test_prod_renders_every_layer(render_stack):
    out = render_stack("prod")
    kinds = {yaml.safe_load(p.read_text())["kind"] for p in (out / "kubernetes").glob("*.yaml")}
    assert {"LeaderWorkerSet", "Deployment", "InferencePool", "HTTPRoute", "ScaledObject", "ClusterQueue",
            "ResourceFlavor", "PodDisruptionBudget"} <= kinds
    charts = {yaml.safe_load(p.read_text())["name"] for p in (out / "helm").glob("*.yaml")}
    assert {"gpu-operator", "kueue", "keda", "lws", "aws-efa-k8s-device-plugin", "kube-prometheus-stack"} <= charts
