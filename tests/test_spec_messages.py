"""Messages a person can act on: the path as written, "did you mean" at every depth with the fields of the
object the typo sits in, a missing field reported with the misspelt one beside it, sentences not regexes.

Pydantic's error locations name union members (a `Tag`, the discriminator's value, or the class name)
between the field and its contents: pydantic v2 docs, "Unions > Discriminated unions" and the error
`loc` description in pydantic-core (pydantic/pydantic-core src/errors/location.rs).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from inferstack.spec import (
    AutoscalingSpec, CreateCluster, NetworkSpec, NodePoolSpec, SpecError, StackSpec, TimeSlicing,
    describe_validation_error,
)
from inferstack.spec.errors import PATTERN_SENTENCES

REPO = Path(__file__).resolve().parents[1]


def base() -> dict:
    return {
        "environment": "msgs",
        "node_pools": [
            {"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 2,
             "gpu_sharing": {"mode": "time_slicing", "replicas": 2}},
        ],
        "models": [{"name": "qwen", "model": "Qwen/Qwen3-8B", "pool": "l4"}],
    }


def rejection(document: dict) -> SpecError:
    with pytest.raises(ValidationError) as caught:
        StackSpec.model_validate(document)
    return describe_validation_error(caught.value, StackSpec)


def with_(**changes) -> dict:
    document = base()
    document.update(changes)
    return document


@pytest.mark.parametrize(
    ("document", "path"),
    [
        (with_(cluster={"network": {"vpc_cidr": "10.0.0.0/8"}}), "cluster.network.vpc_cidr"),
        (with_(cluster={"mode": "create", "network": {"vpc_cidr": "banana"}}), "cluster.network.vpc_cidr"),
        (with_(cluster={"mode": "existing", "name": "-bad"}), "cluster.name"),
        (with_(node_pools=[{**base()["node_pools"][0], "gpu_sharing": {"mode": "time_slicing", "replicas": "x"}}]),
         "node_pools[0].gpu_sharing.replicas"),
    ],
)
def test_the_path_is_the_one_the_user_wrote_without_union_member_names(document, path):
    error = rejection(document)
    assert error.path == path
    for internal in ("create", "existing", "time_slicing", "CreateCluster", "NetworkSpec"):
        assert internal not in error.path.split(".")


@pytest.mark.parametrize(
    ("change", "path", "meant", "owner"),
    [
        ({"budgt": {"max_usd_per_hour": 3}}, "budgt", "budget", StackSpec),
        ({"cluster": {"system_nodes": {"max_node": 3}}}, "cluster.system_nodes.max_node", "max_nodes", None),
        ({"cluster": {"network": {"vpc_cdir": "10.0.0.0/16"}}}, "cluster.network.vpc_cdir", "vpc_cidr", NetworkSpec),
        ({"node_pools": [{**base()["node_pools"][0], "maxNodes": 3}]}, "node_pools[0].maxNodes", "max_nodes",
         NodePoolSpec),
        ({"node_pools": [{**base()["node_pools"][0], "gpu_sharing": {"mode": "time_slicing", "replica": 2}}]},
         "node_pools[0].gpu_sharing.replica", "replicas", TimeSlicing),
        ({"models": [{**base()["models"][0], "autoscaling": {"max-replicas": 3}}]},
         "models[0].autoscaling.max-replicas", "max_replicas", AutoscalingSpec),
    ],
)
def test_an_unknown_field_at_any_depth_suggests_the_field_and_lists_its_siblings(change, path, meant, owner):
    error = rejection(with_(**change))
    assert error.path == path
    assert f"did you mean {meant!r}?" in error.problem
    assert f"rename it to {meant!r}" in error.fix
    if owner is not None:
        assert f"the fields allowed here are {', '.join(repr(f) for f in owner.model_fields)}" in error.fix


def test_an_unknown_field_in_an_existing_cluster_lists_that_kinds_fields():
    error = rejection(with_(cluster={"mode": "existing", "name": "prod", "vpc_cidr": "10.0.0.0/16"}))
    assert error.path == "cluster.vpc_cidr"
    assert "'kubeconfig'" in error.fix
    assert "network" in CreateCluster.model_fields
    assert "'network'" not in error.fix, "the fields of an existing cluster, not of one to create"


@pytest.mark.parametrize(
    ("document", "path", "unknown", "required"),
    [
        ({**base(), "node_pools": [{"name": "l4", "instance_type": ["g6.xlarge"], "max_nodes": 2}]},
         "node_pools[0].instance_type", "instance_type", "instance_types"),
        ({k: v for k, v in base().items() if k != "environment"} | {"enviroment": "msgs"},
         "enviroment", "enviroment", "environment"),
        (with_(cluster={"mode": "existing", "cluster_name": "prod"}), "cluster.cluster_name", "cluster_name", "name"),
    ],
)
def test_a_missing_field_is_reported_with_the_unknown_field_probably_meant(document, path, unknown, required):
    error = rejection(document)
    assert error.path == path
    assert error.problem == f"unknown field {unknown!r}, and the required field {required!r} is missing"
    assert error.fix == f"rename {unknown!r} to {required!r}", "the pair counts as one problem"


def test_a_missing_field_alone_says_what_to_set():
    document = base()
    del document["node_pools"][0]["instance_types"]
    error = rejection(document)
    assert error.path == "node_pools[0].instance_types"
    assert error.problem == "is required but missing"
    assert NodePoolSpec.model_fields["instance_types"].description in error.fix


def test_every_pattern_of_the_spec_has_a_sentence():
    patterns: set[str] = set()

    def collect(node) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.add(node["pattern"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(StackSpec.model_json_schema())
    assert patterns and patterns <= set(PATTERN_SENTENCES), patterns - set(PATTERN_SENTENCES)


@pytest.mark.parametrize(
    ("document", "path", "sentence", "fix"),
    [
        ({**base(), "models": [{**base()["models"][0], "name": "Llama_8B"}]}, "models[0].name",
         "is not a DNS label: lower-case letters, digits and '-'", "write it as 'llama-8b'"),
        (with_(region="useast1"), "region", "is not an AWS region name; e.g. 'us-east-1'", "write the value in that form"),
        (with_(cluster={"network": {"availability_zones": ["us-east-1"]}}), "cluster.network.availability_zones[0]",
         "is not an availability zone name", "write the value in that form"),
    ],
)
def test_a_pattern_mismatch_is_a_sentence_not_a_regex(document, path, sentence, fix):
    error = rejection(document)
    assert error.path == path
    assert sentence in error.problem and error.fix == fix
    assert "should match pattern" not in str(error) and "^" not in str(error)


@pytest.mark.parametrize(
    ("yaml", "expected"),
    [
        ("cluster: {network: {vpc_cdir: 10.0.0.0/16}}",
         "msgs.yaml: cluster.network.vpc_cdir: unknown field 'vpc_cdir' (did you mean 'vpc_cidr'?)"),
        ("cluster: {network: {vpc_cidr: 10.0.0.0/8}}",
         "msgs.yaml: cluster.network.vpc_cidr: '10.0.0.0/8' is not an IPv4 CIDR with a prefix from /16 to /24"),
    ],
)
def test_the_cli_prints_the_message_as_one_line_and_renders_nothing(tmp_path: Path, yaml: str, expected: str):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "msgs.yaml").write_text(textwrap.dedent(
        """
        environment: msgs
        node_pools:
          - {name: l4, instance_types: [g6.xlarge], max_nodes: 2}
        """
    ) + yaml + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "inferstack.cli", "render", "msgs", "--stacks-dir", str(stacks),
         "--out", str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.strip().count("\n") == 0
    assert expected in result.stderr and "To fix:" in result.stderr
    assert not (tmp_path / "out").exists()


def _pool(**fields) -> dict:
    return with_(node_pools=[{**base()["node_pools"][0], **fields}])


@pytest.mark.parametrize(
    ("document", "path", "fix"),
    [
        (_pool(max_nodes="two"), "node_pools[0].max_nodes", "write a whole number without quotes, e.g. 2"),
        (_pool(max_nodes=2.5), "node_pools[0].max_nodes", "write a whole number without quotes, e.g. 2"),
        (_pool(instance_types="g6.xlarge"), "node_pools[0].instance_types", "write it as a list: [g6.xlarge]"),
        (_pool(instance_types=[]), "node_pools[0].instance_types", "give at least 1 item"),
        (_pool(disk_size_gib=10), "node_pools[0].disk_size_gib", "use 50 or more"),
        (with_(budget={"max_usd_per_hour": -3}), "budget.max_usd_per_hour", "use a value greater than 0"),
        (with_(models=[{"name": "qwen", "model": "Qwen/Qwen3-8B", "pool": "l4", "gpu_memory_utilization": 1.5}]),
         "models[0].gpu_memory_utilization", "use 1 or less"),
        (with_(platform={"keda": "sometimes"}), "platform.keda", "write true or false"),
    ],
)
def test_a_wrong_type_or_range_says_what_to_write(document, path, fix):
    """pydantic's message says what is wrong; the fix says what to write instead, with the bound to meet."""
    error = rejection(document)
    assert error.path == path
    assert error.fix.startswith(fix), error.fix
