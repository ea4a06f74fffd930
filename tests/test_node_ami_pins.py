"""GPU node groups run a pinned EKS AMI release, so an AMI moves only when the catalog does (issue 26, item 6a).

Upstream rules encoded here:
- EKS API CreateNodegroup / UpdateNodegroupVersion `releaseVersion` (docs.aws.amazon.com/cli/latest/reference/eks/
  update-nodegroup-version.html): by default the latest AMI version for the group's Kubernetes version; not to be
  given when the launch template names a custom AMI; a group never rolls back to an earlier AMI version.
- awslabs/amazon-eks-ami tag v20260724 (commit 81fec2e8) CHANGELOG.md "AMI Release v20260714": an AL2023 release
  version is `<Kubernetes patch of the minor>-<YYYYMMDD of the release>`, e.g. 1.36.2-20260714.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_policies import rendered  # noqa: E402

from inferstack.catalog.node_amis import FACTS, release_version

AL2023 = "AL2023_x86_64_NVIDIA"
SUPPORTED = ["1.31", "1.32", "1.33", "1.34", "1.35", "1.36"]


def gpu_node_groups(stack: str) -> list[dict]:
    return [r for r in rendered(stack) if r["type"].endswith(":NodeGroup") and not r["name"].endswith("-eks-system")]


@pytest.mark.parametrize("minor", SUPPORTED)
def test_each_supported_minor_pins_a_release_of_that_minor_in_the_eks_format(minor):
    pinned = FACTS["release_versions"][AL2023]
    version = release_version(AL2023, minor)
    date = pinned["release"].removeprefix("v")
    assert re.fullmatch(rf"{re.escape(minor)}\.\d+-{date}", version), version
    assert pinned["source"] in FACTS["sources"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_gpu_node_group_runs_the_pinned_release_of_its_kubernetes_version(stack):
    for group in gpu_node_groups(stack):
        inputs = group["inputs"]
        assert inputs["amiType"] == AL2023
        assert inputs["releaseVersion"] == release_version(AL2023, inputs["version"]), group["name"]


def test_the_launch_templates_name_no_image_so_the_release_version_applies():
    templates = [r for r in rendered("prod") if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate"]
    assert templates
    assert all("imageId" not in t["inputs"] for t in templates)


def test_an_unpinned_ami_type_or_minor_leaves_eks_its_default():
    assert release_version("BOTTLEROCKET_x86_64_NVIDIA", "1.36") is None
    assert release_version(AL2023, "1.29") is None


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_system_node_group_runs_the_same_release_of_the_standard_ami(stack):
    """The CHANGELOG's per-minor table gives one release version to every AL2023 AMI of a release (the standard AMI
    shares the NVIDIA one's row), so the system group moves with the GPU groups, and only when the catalog does."""
    (system,) = [r for r in rendered(stack) if r["type"].endswith(":NodeGroup") and r["name"].endswith("-eks-system")]
    inputs = system["inputs"]
    assert inputs["amiType"] == "AL2023_x86_64_STANDARD"
    assert inputs["releaseVersion"] == release_version(AL2023, inputs["version"])
