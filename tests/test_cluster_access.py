"""Who can reach a created cluster: a private API endpoint unless the spec names public CIDRs, and access
entries for the admin and CI roles it names.

Sources: Amazon EKS User Guide, "Control network access to cluster API server endpoint"
(https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html) and "Configure network access to
cluster API server endpoint" (config-cluster-endpoint.html): a public endpoint given no CIDR blocks accepts
every address (0.0.0.0/0), blocks may not include reserved addresses, IPv4 clusters take no IPv6 blocks;
"Review access policy permissions" (access-policy-permissions.html): AmazonEKSViewPolicy is read-only, at
arn:<partition>:eks::aws:cluster-access-policy/AmazonEKSViewPolicy; "Create access entries"
(access-entries.html): one access entry per principal.
"""

from __future__ import annotations

import copy

import pytest

from aws_recording import ADMIN_ROLE, build, prod_spec, run
from inferstack.spec import SpecError, StackSpec
from inferstack.validation import validate

CI_ROLE = "arn:aws:iam::123456789012:role/ci/pulumi-preview"
OFFICE = "52.94.76.0/22"  # a routable public block


def with_cluster(**fields) -> dict:
    spec = copy.deepcopy(prod_spec())
    spec["cluster"].update(fields)
    return spec


def vpc_config(recording) -> dict:
    return recording.named("prod-eks-cluster").inputs["vpcConfig"]


def test_default_endpoint_is_private_and_names_no_public_cidrs():
    spec = build()
    config = vpc_config(run(spec))

    assert spec.cluster.endpoint_public_access is False and spec.cluster.public_access_cidrs == []
    assert config["endpointPrivateAccess"] is True
    assert config["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in config  # never left for EKS to fill with 0.0.0.0/0


def test_public_endpoint_is_open_only_to_the_named_cidrs():
    spec = StackSpec.model_validate(with_cluster(endpoint_public_access=True, public_access_cidrs=[OFFICE]))
    config = vpc_config(run(spec))

    assert config["endpointPublicAccess"] is True and config["endpointPrivateAccess"] is True
    assert config["publicAccessCidrs"] == [OFFICE]


def test_the_whole_internet_only_when_the_spec_acknowledges_it():
    spec = StackSpec.model_validate(
        with_cluster(endpoint_public_access=True, public_access_cidrs=["0.0.0.0/0"], public_access_from_anywhere=True)
    )
    assert vpc_config(run(spec))["publicAccessCidrs"] == ["0.0.0.0/0"]


def test_ci_role_gets_a_read_only_access_entry_at_cluster_scope():
    recording = run(StackSpec.model_validate(with_cluster(ci_role_arns=[CI_ROLE])))
    entry = recording.named("prod-eks-ci-123456789012-ci-pulumi-preview").inputs
    association = recording.named("prod-eks-ci-123456789012-ci-pulumi-preview-policy")

    assert entry["principalArn"] == CI_ROLE and entry["type"] == "STANDARD"
    assert association.inputs["principalArn"] == CI_ROLE
    assert association.inputs["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
    assert association.inputs["accessScope"] == {"type": "cluster"}
    assert "prod-eks-ci-123456789012-ci-pulumi-preview" in association.depends_on
    # The admin role keeps its own entry, with the admin policy.
    admin = recording.named("prod-eks-admin-123456789012-platform-admin-policy").inputs
    assert admin["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")


@pytest.mark.parametrize(
    ("fields", "path", "words"),
    [
        ({"endpoint_public_access": True}, "cluster.public_access_cidrs", "every address (0.0.0.0/0)"),
        ({"public_access_cidrs": [OFFICE]}, "cluster.public_access_cidrs", "endpoint_public_access is false"),
        (
            {"endpoint_public_access": True, "public_access_cidrs": [OFFICE, "0.0.0.0/0"]},
            "cluster.public_access_cidrs[1]",
            "public_access_from_anywhere: true",
        ),
        ({"endpoint_public_access": True, "public_access_cidrs": ["office"]}, "cluster.public_access_cidrs[0]", "not a CIDR"),
        (
            {"endpoint_public_access": True, "public_access_cidrs": ["10.0.0.0/8"]},
            "cluster.public_access_cidrs[0]",
            "reserved or private",
        ),
        (
            {"endpoint_public_access": True, "public_access_cidrs": ["203.0.113.0/24"]},  # documentation range
            "cluster.public_access_cidrs[0]",
            "reserved or private",
        ),
        (
            {"endpoint_public_access": True, "public_access_cidrs": ["2600:1f18::/32"]},
            "cluster.public_access_cidrs[0]",
            "IPv6",
        ),
        (
            {"endpoint_public_access": True, "public_access_cidrs": ["52.94.76.1/22"]},
            "cluster.public_access_cidrs[0]",
            "'52.94.76.0/22'",
        ),
        ({"ci_role_arns": [ADMIN_ROLE]}, "cluster.ci_role_arns[0]", "one access entry per role"),
        ({"ci_role_arns": [CI_ROLE, CI_ROLE]}, "cluster.ci_role_arns[1]", "one access entry per role"),
    ],
)
def test_refuses_endpoints_open_beyond_the_spec_and_entries_eks_would_refuse(fields, path, words):
    with pytest.raises(SpecError) as caught:
        validate(StackSpec.model_validate(with_cluster(**fields)))
    assert caught.value.path == path
    assert words in str(caught.value)
