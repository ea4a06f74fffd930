"""`inferstack diff` on the edits a platform team makes every week. Each test renders the dev or prod
stack before and after one edit on the embedded engine and checks what the diff reports against the
catalog's replacement rules (components/catalog/replacement.json), whose sources are
hashicorp/terraform-provider-aws internal/service/<svc>/<resource>.go (`ForceNew: true`; node_group.go read at
012e0a32f0686212f447447fd3d81c3d0ce256ad, vpc_subnet.go at 00cda125a19d31754cb0d073cf551264c57955cb, cluster.go
at 00555dc5b38f92abbfa230badea0ed0754cea81e) and pulumi/pulumi-kubernetes@v4.32.0
provider/pkg/provider/diff.go (`forceNew`)."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path

import pytest
from stack_edits import without_node_autoscaler

from inferstack import cli
from inferstack.catalog.replacement import RULES, rule_for
from inferstack.presentation import diff
from inferstack.spec import StackSpec
from inferstack.stacks import load_stack

ROOT = Path(__file__).resolve().parents[1]
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


@cache
def _spec(stack: str) -> StackSpec:
    return load_stack(ROOT / "stacks", stack)


def _edited(stack: str, edit) -> StackSpec:
    data = _spec(stack).model_dump(mode="json")
    edit(data)
    return StackSpec.model_validate(data)


@cache
def _side(stack: str, spec_json: str):
    return diff.run_spec(StackSpec.model_validate_json(spec_json))


def _diff(stack: str, before_edit, after_edit) -> dict:
    before = _edited(stack, before_edit)
    after = _edited(stack, after_edit)
    return diff.diff(_side(stack, before.model_dump_json()), _side(stack, after.model_dump_json()), "test")


def _names(result: dict, action: str, type_: str | None = None) -> set[str]:
    return {c["name"] for c in result[action] if type_ is None or c["type"] == type_}


def _unchanged(_data) -> None:
    return None


def _assert_matches_catalog(result: dict) -> None:
    """A replacement is reported exactly when a changed path falls under one of the type's replace_on
    fields, and the fields it names are those."""
    for entry in result["replaced"]:
        rule = rule_for(entry["type"])
        assert entry["forced_by"] == diff.forcing_fields(entry["changed"], rule.replace_on)
        assert entry["source"] == rule.source
    for entry in result["updated"]:
        rule = rule_for(entry["type"])
        assert rule is None or not diff.forcing_fields(entry["changed"], rule.replace_on)


def test_every_registered_type_has_a_replacement_rule_with_a_source():
    """Every custom resource type the dev, prod and dra programs register has a catalog entry naming its upstream
    source (terraform-provider-aws or -random file, or pulumi-kubernetes diff.go / helm_release.go)."""
    for stack in ("dev", "prod", "dra"):
        resources, _plan = _side(stack, _spec(stack).model_dump_json())
        types = {r["type"] for r in resources if r["custom"]}
        assert types - set(RULES) == set(), stack
    for rule in RULES.values():
        assert any(origin in rule.source for origin in
                   ("terraform-provider-aws", "terraform-provider-random", "pulumi-kubernetes", "not read upstream"))


def test_rules_follow_the_provider_fields_read_upstream():
    """terraform-provider-aws node_group.go: instance_types, subnet_ids, ami_type, capacity_type, disk_size,
    launch_template.id ForceNew; launch_template.version and version roll the nodes. ec2_launch_template.go:
    only name/name_prefix ForceNew. pulumi-kubernetes diff.go: Job .spec.template, Deployment .spec.selector,
    Service .spec.clusterIP, and every object's .metadata.name/.namespace."""
    group = rule_for(diff.NODE_GROUP)
    assert {"instanceTypes", "subnetIds", "amiType", "capacityType", "diskSize", "launchTemplate.id"} <= set(group.replace_on)
    assert {"launchTemplate.version", "version"} <= set(group.rolls_on) and "launchTemplate.version" not in group.replace_on
    template = rule_for("aws:ec2/launchTemplate:LaunchTemplate")
    assert template.replace_on == ("name", "namePrefix") and template.new_version_on_update
    assert "spec.template" in rule_for("kubernetes:batch/v1:Job").replace_on
    assert "spec.selector" in rule_for("kubernetes:apps/v1:Deployment").replace_on
    assert "spec.clusterIP" in rule_for("kubernetes:core/v1:Service").replace_on
    assert {"metadata.name", "metadata.namespace"} <= set(rule_for("kubernetes:core/v1:Namespace").replace_on)
    assert "vpcConfig.subnetIds" not in rule_for("aws:eks/cluster:Cluster").replace_on


def test_changed_paths_treat_sets_as_unordered_and_lists_as_ordered():
    assert diff.changed_paths({"subnetIds": ["a", "b"]}, {"subnetIds": ["b", "a"]}, ("subnetIds",)) == []
    assert diff.changed_paths({"instanceTypes": ["a", "b"]}, {"instanceTypes": ["b", "a"]}) == [
        "instanceTypes[0]", "instanceTypes[1]"
    ]


def test_adding_a_zone_adds_subnets_and_reports_existing_subnets_as_the_catalog_says():
    """cidrBlock and availabilityZone are ForceNew on aws_subnet (vpc_subnet.go): with a fixed slot per zone
    no existing subnet is replaced. subnetIds is ForceNew on aws_eks_node_group, so a group spanning every
    zone is replaced when the zone joins it, and the diff says so (set a pool's availability_zones to keep
    its groups where they are)."""
    def three(data):
        data["cluster"]["network"]["availability_zones"] = ZONES

    def four(data):
        data["cluster"]["network"]["availability_zones"] = ZONES + ["us-east-1d"]

    result = _diff("dev", three, four)
    _assert_matches_catalog(result)
    for entry in result["replaced"] + result["updated"]:
        if entry["type"] == diff.NODE_GROUP and "subnetIds" in entry["changed"]:
            assert entry in result["replaced"] and "subnetIds" in entry["forced_by"]
    subnet = "aws:ec2/subnet:Subnet"
    assert any(name.endswith("us-east-1d") for name in _names(result, "added", subnet))
    for entry in result["replaced"]:
        if entry["type"] == subnet:
            assert entry["forced_by"] == ["cidrBlock"]
    assert _names(result, "replaced", subnet) == set()  # every zone keeps its slot (aws/network.py)
    assert all("us-east-1d" not in n for n in _names(result, "updated", subnet))
    assert result["deleted"] == []


def test_changing_a_tag_replaces_nothing():
    def tagged(data):
        data["tags"] = {**data["tags"], "cost-centre": "ml-42"}

    result = _diff("dev", _unchanged, tagged)
    _assert_matches_catalog(result)
    assert result["replaced"] == [] and result["deleted"] == []
    assert result["updated"]


def test_reordering_instance_types_replaces_no_node_group():
    """instance_types is a ForceNew ordered list on aws_eks_node_group (node_group.go): the program keeps the
    pool's primary type (instance_types[0], the one baselines run and prices quote) first and sorts the rest,
    so reordering the others changes no node group input."""
    def reordered(data):
        primary, *others = data["node_pools"][0]["instance_types"]
        data["node_pools"][0]["instance_types"] = [primary, *reversed(others)]

    result = _diff("dev", _unchanged, reordered)
    _assert_matches_catalog(result)
    assert [c for c in result["replaced"] + result["updated"] if c["type"] == diff.NODE_GROUP] == []
    assert result["node_groups_rolling"] == [] and result["blocking_replacements"] == []


def test_choosing_another_primary_type_is_reported_as_the_node_group_provider_treats_it():
    """A different first type is a real change (what baselines run and what a group is priced at): the
    group whose instanceTypes change is replaced, forced by instanceTypes, and it rolls."""
    def new_primary(data):
        data["node_pools"][0]["instance_types"] = list(reversed(data["node_pools"][0]["instance_types"]))

    result = _diff("dev", _unchanged, new_primary)
    _assert_matches_catalog(result)
    groups = [c for c in result["replaced"] + result["updated"] if c["type"] == diff.NODE_GROUP]
    changed = {g["name"] for g in groups if any(p.startswith("instanceTypes") for p in g["changed"])}
    assert changed and _names(result, "replaced", diff.NODE_GROUP) == changed
    for group in groups:
        if group["name"] in changed:
            assert group["forced_by"] == ["instanceTypes"]
            assert {"type": group["type"], "name": group["name"]} in result["blocking_replacements"]
    assert changed <= {r["name"] for r in result["node_groups_rolling"]}


def test_bumping_the_kubernetes_version_updates_the_cluster_in_place():
    """aws_eks_cluster.version is not ForceNew (cluster.go): an upgrade in place. The only other minor the
    add-on catalog pins today (1.31) has no cluster-autoscaler image, so both sides run without it."""
    def older(data):
        without_node_autoscaler(data)
        data["cluster"]["kubernetes_version"] = "1.31"

    result = _diff("dev", older, without_node_autoscaler)
    _assert_matches_catalog(result)
    cluster = [c for c in result["updated"] if c["type"] == "aws:eks/cluster:Cluster"]
    assert cluster and "version" in cluster[0]["changed"]
    assert _names(result, "replaced", "aws:eks/cluster:Cluster") == set()
    rolled = {r["name"] for r in result["node_groups_rolling"]}
    for group in result["updated"]:
        if group["type"] == diff.NODE_GROUP and "version" in group["changed"]:
            assert group["name"] in rolled


def test_changing_max_model_len_updates_the_deployment_and_says_when_it_means_downtime():
    def longer(data):
        data["models"][0]["max_model_len"] = 4096

    result = _diff("dev", _unchanged, longer)
    _assert_matches_catalog(result)
    deployments = [c for c in result["updated"] if c["type"] == "kubernetes:apps/v1:Deployment"]
    assert deployments and any(p.startswith("spec.template") for p in deployments[0]["changed"])
    assert _names(result, "replaced", "kubernetes:apps/v1:Deployment") == set()
    assert result["capacity"]["before"] == result["capacity"]["after"]


def test_adding_a_pool_adds_resources_and_raises_the_cost_without_touching_the_first_pool():
    def added(data):
        pool = json.loads(json.dumps(data["node_pools"][0]))
        pool["name"] = "l4b"
        data["node_pools"].append(pool)

    result = _diff("dev", _unchanged, added)
    _assert_matches_catalog(result)
    assert _names(result, "added", diff.NODE_GROUP)
    assert not any(r["name"].startswith("dev-l4-") for r in result["node_groups_rolling"])
    before, after = result["capacity"]["before"], result["capacity"]["after"]
    assert after["gpus"]["max"] > before["gpus"]["max"]
    assert after["usd_per_hour"]["max"] > before["usd_per_hour"]["max"]


def test_raising_max_nodes_updates_scaling_only():
    def bigger(data):
        data["node_pools"][0]["max_nodes"] = data["node_pools"][0]["max_nodes"] + 2

    result = _diff("dev", _unchanged, bigger)
    _assert_matches_catalog(result)
    assert result["replaced"] == [] and result["node_groups_rolling"] == [] and result["downtime"] == []
    groups = [c for c in result["updated"] if c["type"] == diff.NODE_GROUP]
    assert groups and all(p.startswith("scalingConfig") or p.startswith("tags") for g in groups for p in g["changed"])
    assert result["capacity"]["after"]["gpus"]["max"] > result["capacity"]["before"]["gpus"]["max"]


def test_cli_diff_on_renders_and_revisions(tmp_path, capsys):
    """Two renders: no change exits 0; a render of another state with a GPU node group replaced exits 3;
    a missing folder or unknown revision exits 2 with one line; a revision renders the old stack file."""
    assert cli.main(["render", "dev", "--out", str(tmp_path / "now")]) == 0
    capsys.readouterr()
    assert cli.main(["diff", "dev", "--against", str(tmp_path / "now"), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["replaced"] == [] and result["updated"] == []
    resources = json.loads((tmp_path / "now" / "resources.json").read_text())
    for resource in resources:
        if resource["type"] == diff.NODE_GROUP and diff.is_gpu_node_group(resource):
            resource["inputs"]["amiType"] = "AL2023_x86_64_STANDARD"
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "resources.json").write_text(json.dumps(resources))
    assert cli.main(["diff", "dev", "--against", str(tmp_path / "old")]) == 3
    assert "forced by amiType" in capsys.readouterr().out
    assert cli.main(["diff", "dev", "--against", "no-such-revision-xyz"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert cli.main(["diff", "dev", "--against", "HEAD", "--format", "json"]) in (0, 3)
        assert "today's program code" in json.loads(capsys.readouterr().out)["note"]


@pytest.mark.parametrize("bad", ["missing-dir/"])
def test_a_folder_without_resources_is_bad_input(tmp_path, bad, capsys):
    (tmp_path / bad).mkdir()
    assert cli.main(["diff", "dev", "--against", str(tmp_path / bad)]) == 2
    assert "resources.json" in capsys.readouterr().err
