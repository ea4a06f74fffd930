"""Every Kubernetes minor EKS supports plans and renders with its pinned add-ons and autoscaler.

The rule, from the EKS User Guide (awsdocs/amazon-eks-user-guide latest/ug/versioning/kubernetes-versions.adoc
@013856044148d6eeed4723027a45aa2180536bcb, "Amazon EKS Kubernetes release calendar" and the extended support FAQ):
a minor gets 14 months of standard then 12 of extended support, clusters can be created on any minor in either,
and "on the end of extended support date, you can no longer create new Amazon EKS clusters" on it. The add-on
versions per minor come from managing-vpc-cni.adoc / managing-coredns.adoc @057948d9 and managing-kube-proxy.adoc
@d9a9cba5 up to 1.32, and from public configs that pin them for one named minor from 1.33 on (cookpad/terraform-aws-eks
versions.tf, GlueOps/terraform-module-cloud-aws-kubernetes-cluster glueops-tests/main.tf, ...;
components/catalog/eks_addons.json names the source of each); the cluster-autoscaler image follows the cluster's
minor (kubernetes/autoscaler cluster-autoscaler/README.md, "Releases"; tags cluster-autoscaler-<minor>.<patch>).
"""

from __future__ import annotations

from datetime import date

import pytest
from aws_recording import run
from platform_recording import releases, render, stack
from stack_files import rendered_objects

from inferstack.catalog.charts import cluster_autoscaler_image_tags, eks_addon_versions, eks_support_calendar
from inferstack.catalog.karpenter import NEWEST_KUBERNETES
from inferstack.spec import SpecError, StackSpec
from inferstack.validation import validate

CALENDAR_DAY = date(2026, 12, 2)


def supported_minors(day: date) -> list[str]:
    return [minor for minor, window in eks_support_calendar().items() if window.supported_on(day)]


def on_minor(minor: str) -> StackSpec:
    data = stack("prod").model_dump(mode="json", exclude_unset=True)
    data.setdefault("cluster", {})["kubernetes_version"] = minor
    return StackSpec.model_validate(data)


def test_the_calendar_supports_1_32_to_1_36_on_the_day_1_31_left_extended_support():
    """kubernetes-versions.adoc: 1.31's extended support ended on 2026-11-26, 1.32's ends 2027-03-23; 1.34
    enters extended support on 2026-12-02 (its end of standard), still supported."""
    assert supported_minors(CALENDAR_DAY) == ["1.32", "1.33", "1.34", "1.35", "1.36"]
    assert eks_support_calendar()["1.31"].end_of_extended_support == date(2026, 11, 26)
    assert "1.31" in supported_minors(date(2026, 11, 25)) and "1.31" not in supported_minors(date(2026, 11, 26))


@pytest.mark.parametrize("minor", supported_minors(CALENDAR_DAY))
def test_every_supported_minor_has_every_add_on_pinned(minor):
    """One version per add-on and minor (eks_addons.json "rule"), for each minor the calendar supports."""
    assert set(eks_addon_versions()[minor]) == {
        "vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent", "eks-node-monitoring-agent"}
    assert eks_addon_versions()[minor]["kube-proxy"].startswith(f"v{minor}.")  # kube-proxy matches the minor


def test_a_cluster_bump_moves_vpc_cni_by_one_minor_at_most():
    """awsdocs/amazon-eks-user-guide latest/ug/networking/managing-vpc-cni.adoc @e08cb9ea: "We recommend that you
    update one minor version at a time"; a cluster bump is what moves the pin (eks_addons.json "rule"), so
    neighbouring supported minors pin VPC CNI releases at most one minor apart."""
    def cni_minor(kubernetes_minor: str) -> int:
        return int(eks_addon_versions()[kubernetes_minor]["vpc-cni"].lstrip("v").split(".")[1])

    minors = supported_minors(CALENDAR_DAY)
    assert all(abs(cni_minor(new) - cni_minor(old)) <= 1 for old, new in zip(minors, minors[1:]))


def add_on_version_order(version: str) -> tuple[int, ...]:
    """v1.13.2-eksbuild.31 -> (1, 13, 2, 31): compared as numbers, so eksbuild.31 sorts above eksbuild.11."""
    release, build = version.removeprefix("v").split("-eksbuild.")
    return (*map(int, release.split(".")), int(build))


def test_add_on_versions_compare_as_numbers():
    assert add_on_version_order("v1.13.2-eksbuild.31") > add_on_version_order("v1.13.2-eksbuild.11")
    assert add_on_version_order("v1.13.2-eksbuild.11") > add_on_version_order("v1.12.4-eksbuild.1")
    assert add_on_version_order("v1.3.10-eksbuild.3") > add_on_version_order("v1.3.9-eksbuild.3")


def test_a_cluster_bump_never_moves_an_add_on_to_an_older_version():
    """awsdocs/amazon-eks-user-guide latest/ug/workloads/updating-an-add-on.adoc @abdfb5e0: EKS "doesn't
    automatically update an add-on ... after you update your cluster to a new Kubernetes minor version", the
    update is an UpdateAddon to a version DescribeAddonVersions lists (APIReference API_UpdateAddon). EKS does
    accept an older version, but the guide documents what that leaves behind: latest/ug/networking/
    eks-networking-add-ons.adoc @4d52b4d0 "if you edit the add-on to use an older version of the add-on
    (downgrade the add-on) ... the PodDisruptionBudget isn't removed" (CoreDNS), and on IPv6 the VPC CNI
    "can't downgrade ... to a version lower than 1.10.1 without first removing all nodes". A bump to the next minor updates each add-on to that
    minor's pin (eks_addons.json "rule"), so no pin may be lower than the previous minor's."""
    pins = eks_addon_versions()
    minors = supported_minors(CALENDAR_DAY)
    downgrades = [
        f"{addon} {pins[old][addon]} on {old} -> {pins[new][addon]} on {new}"
        for old, new in zip(minors, minors[1:])
        for addon in pins[old]
        if add_on_version_order(pins[new][addon]) < add_on_version_order(pins[old][addon])
    ]
    assert downgrades == []


@pytest.fixture(scope="module", params=supported_minors(CALENDAR_DAY))
def planned(request):
    minor = request.param
    return minor, validate(on_minor(minor)).written


def test_prod_on_each_supported_minor_carries_that_minors_add_on_pins(planned):
    minor, spec = planned
    addons = {a.inputs["addonName"]: a.inputs["addonVersion"] for a in run(spec).of_type("aws:eks/addon:Addon")}
    assert addons == eks_addon_versions()[minor]


def test_prod_on_each_supported_minor_runs_the_autoscaler_of_that_minor(planned):
    """cluster-autoscaler README: run the release whose minor matches the cluster's (v1.32.x on 1.32)."""
    minor, spec = planned
    tag = releases(render(spec))["cluster-autoscaler"].inputs["values"]["image"]["tag"]
    assert tag == cluster_autoscaler_image_tags()[minor] and tag.startswith(f"v{minor}.")


def test_the_pinned_karpenter_supports_every_supported_minor():
    """shared/reference/karpenter.md section 1 (karpenter.sh upgrading/compatibility): 1.36 needs >=1.13, 1.35
    >=1.9, 1.34 >=1.6, 1.33 >=1.5; the table sets no upper Karpenter bound for older minors, so the pinned 1.14.1
    covers every supported minor up to its newest."""
    newest = tuple(int(part) for part in NEWEST_KUBERNETES.split("."))
    assert all(tuple(int(part) for part in m.split(".")) <= newest for m in supported_minors(CALENDAR_DAY))


def test_prod_on_each_supported_minor_renders(planned, tmp_path):
    _, spec = planned
    code, objects = rendered_objects(spec, tmp_path)
    assert code == 0 and objects


def test_a_minor_past_extended_support_is_refused_naming_the_pinned_ones():
    """1.29 left extended support on 2026-03-23 (kubernetes-versions.adoc): a SpecError at the field, no trace."""
    with pytest.raises(SpecError) as caught:
        validate(on_minor("1.29"))
    assert caught.value.path == "cluster.kubernetes_version"
    message = str(caught.value)
    assert "1.29 left EKS extended support on 2026-03-23" in message
    assert ", ".join(eks_addon_versions()) in message


def test_a_minor_the_calendar_does_not_list_is_refused_with_how_to_pin_it():
    """kubernetes-versions.adoc has no 1.37 row: the refusal says the calendar does not know it, and its fix names
    the EKS call that lists a minor's add-on versions."""
    with pytest.raises(SpecError) as caught:
        validate(on_minor("1.37"))
    message = str(caught.value)
    assert "the EKS release calendar in the catalog has no row for it" in message
    assert "aws eks describe-addon-versions --kubernetes-version <minor>" in message


def test_the_vpc_cni_enforces_the_serving_namespaces_network_policies(planned):
    """EKS User Guide networking/eks-networking-add-ons.adoc: the VPC CNI add-on enforces NetworkPolicies only with
    "enableNetworkPolicy": "true" in its configuration values, from v1.14.0-eksbuild.3; without it the policies the
    stack renders are accepted and filter nothing."""
    import json

    minor, spec = planned
    (cni,) = [a for a in run(spec).of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == "vpc-cni"]
    assert json.loads(cni.inputs["configurationValues"]) == {"enableNetworkPolicy": "true"}
    assert add_on_version_order(cni.inputs["addonVersion"]) >= add_on_version_order("v1.14.0-eksbuild.3")
