"""Issue 26 item 2: `pulumi destroy` removes Karpenter's NodePools and EC2NodeClasses while its controller runs,
then the controller, then its Pod Identity association and IAM policies.

Source: Pulumi deletes a resource before what it depends on (pulumi.com/docs/iac/concepts/resources/options/dependson:
dependsOn orders creation, update and deletion); Karpenter's finalizers on its node objects terminate the instances
only while the controller runs (its troubleshooting guide on uninstalling). The order is derived from the recorded
dependency graph (depends_on of resources.json), as Pulumi derives it from the state.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferstack.cli import main

STACKS = Path(__file__).resolve().parents[1] / "stacks"


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    out = tmp_path_factory.mktemp("teardown") / "out"
    assert main(["render", "karpenter", "--stacks-dir", str(STACKS), "--out", str(out)]) == 0
    resources = json.loads((out / "resources.json").read_text())
    return {r["name"]: r for r in resources}


def _deps(graph, name, seen=None):
    """Everything `name` depends on, transitively: all of it is deleted after `name`."""
    seen = set() if seen is None else seen
    for d in graph[name].get("depends_on") or ():
        if d in graph and d not in seen:
            seen.add(d)
            _deps(graph, d, seen)
    return seen


def test_node_objects_go_before_the_controller_and_it_before_its_credentials(graph):
    release = next(n for n, r in graph.items() if r["type"] == "kubernetes:helm.sh/v3:Release"
                   and str((r.get("inputs") or {}).get("chart", "")).endswith("karpenter"))
    objects = [n for n, r in graph.items() if r["type"] in
               ("kubernetes:karpenter.sh/v1:NodePool", "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")]
    assert objects
    for name in objects:
        assert release in _deps(graph, name), name
    after_release = {graph[d]["type"] for d in _deps(graph, release)}
    assert "aws:eks/podIdentityAssociation:PodIdentityAssociation" in after_release
    controller_attachments = {d for d in _deps(graph, release) if graph[d]["type"].endswith("RolePolicyAttachment")}
    assert len(controller_attachments) >= 6   # the six controller policies of karpenter_iam
    assert "aws:sqs/queue:Queue" in after_release
