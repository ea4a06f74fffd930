"""The AWS layer as the engine sees it: prod's recording under the mock engine, read like the spec."""

from __future__ import annotations

import base64
import email
from collections import Counter

import pytest
import yaml

from aws_recording import ADMIN_ROLE, build, children, policy_documents, run
from inferstack import conventions
from inferstack.aws.node_pool import launch_template_suffix
from inferstack.planning.node_groups import plan_node_groups
from inferstack.catalog.charts import eks_addon_versions
from inferstack.engine.recorder import SECRET_SIG, SIG_KEY

moto = pytest.importorskip("moto", reason="moto (test extra) ships AWS's EC2 instance data")
from moto.ec2.models.instance_types import INSTANCE_TYPES as EC2_INSTANCE_TYPES  # noqa: E402

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
EFA_POOLS = {"h100": "p5.48xlarge", "h200": "p5en.48xlarge", "a100": "p4d.24xlarge"}


@pytest.fixture(scope="module")
def prod():
    return run(build())


def pool_template(recording, pool: str):
    """The launch template of the pool's first node group (each group has its own)."""
    (spec,) = [p for p in build().node_pools if p.name == pool]
    return recording.named(f"prod-{pool}-{launch_template_suffix(plan_node_groups(spec)[0])}")


def node_groups(recording, pool: str) -> dict[str, dict]:
    """The pool's node groups by capacity type."""
    return {g.inputs["capacityType"]: g.inputs for g in children(recording, f"prod-{pool}", NODE_GROUP)}


# ------------------------------------------------------------------------------------------------ EFA


@pytest.mark.parametrize("pool", sorted(EFA_POOLS))
def test_efa_launch_template_has_one_efa_interface_per_network_card(prod, pool):
    cards = EC2_INSTANCE_TYPES[EFA_POOLS[pool]]["NetworkInfo"]["MaximumNetworkCards"]
    interfaces = pool_template(prod, pool).inputs["networkInterfaces"]

    layout = [(i["networkCardIndex"], i["deviceIndex"], i["interfaceType"]) for i in interfaces]
    assert layout[0] == (0, 0, "interface")
    efa = [(card, device) for card, device, kind in layout if kind == "efa-only"]
    assert len(efa) == cards
    assert efa == [(0, 1)] + [(card, 0) for card in range(1, cards)]
    assert all("subnetId" not in i for i in interfaces)


def test_efa_counts_are_aws_data(prod):
    counts = {
        EFA_POOLS[pool]: sum(
            i["interfaceType"] == "efa-only" for i in pool_template(prod, pool).inputs["networkInterfaces"]
        )
        for pool in EFA_POOLS
    }
    assert counts == {"p5.48xlarge": 32, "p5en.48xlarge": 16, "p4d.24xlarge": 4}


@pytest.mark.parametrize("pool", sorted(EFA_POOLS))
def test_efa_security_group_lets_pool_nodes_reach_each_other(prod, pool):
    name = f"prod-{pool}"
    ingress = prod.named(f"{name}-efa-ingress").inputs
    egress = prod.named(f"{name}-efa-egress").inputs
    efa_group = ingress["securityGroupId"]

    for rule in (ingress, egress):
        assert rule["ipProtocol"] == "-1"
        assert rule["securityGroupId"] == rule["referencedSecurityGroupId"] == efa_group
    interfaces = pool_template(prod, pool).inputs["networkInterfaces"]
    cluster_group = prod.outputs["cluster_security_group_id"]
    assert all(i["securityGroups"] == [cluster_group, efa_group] for i in interfaces)


@pytest.mark.parametrize("pool", sorted(EFA_POOLS))
def test_efa_pool_launches_into_its_cluster_placement_group(prod, pool):
    name = f"prod-{pool}"
    group = prod.named(f"{name}-placement")
    template = pool_template(prod, pool)

    assert group.inputs["strategy"] == "cluster"
    assert template.inputs["placement"]["groupName"].startswith(f"{name}-placement")
    assert f"{name}-placement" in template.depends_on


def test_efa_node_groups_stay_in_the_pool_s_first_zone(prod):
    (a100_spot,) = children(prod, "prod-a100", NODE_GROUP)

    for pool in EFA_POOLS:
        for group in children(prod, f"prod-{pool}", NODE_GROUP):
            assert len(group.inputs["subnetIds"]) == 1, group.name
    subnets = [d for d in a100_spot.depends_on if d.startswith("prod-network-")]
    assert subnets == ["prod-network-private-us-east-1b"]


def test_pools_without_efa_have_no_interfaces_and_span_every_zone(prod):
    template = pool_template(prod, "l4").inputs

    assert "networkInterfaces" not in template and "placement" not in template
    assert all(len(g.inputs["subnetIds"]) == 3 for g in children(prod, "prod-l4", NODE_GROUP))
    assert not children(prod, "prod-l4", "aws:ec2/placementGroup:PlacementGroup")


# ------------------------------------------------------------------------------------------- capacity


def test_serving_pool_has_on_demand_baseline_and_spot_above_it(prod):
    groups = node_groups(prod, "h100")

    assert set(groups) == {"ON_DEMAND", "SPOT"}
    assert groups["ON_DEMAND"]["scalingConfig"] == {"minSize": 1, "maxSize": 1, "desiredSize": 1}
    assert groups["SPOT"]["scalingConfig"] == {"minSize": 1, "maxSize": 3, "desiredSize": 1}


def test_spot_group_draws_on_every_instance_type_of_the_pool(prod):
    groups = node_groups(prod, "l4")

    assert groups["SPOT"]["instanceTypes"] == ["g6.12xlarge", "g6.24xlarge"]
    assert groups["ON_DEMAND"]["instanceTypes"] == ["g6.12xlarge"]


def test_pool_with_only_a_baseline_has_no_spot_group(prod):
    assert set(node_groups(prod, "h200")) == {"ON_DEMAND"}


def test_batch_pool_can_be_all_spot(prod):
    groups = node_groups(prod, "a100")

    assert set(groups) == {"SPOT"}
    assert groups["SPOT"]["scalingConfig"] == {"minSize": 0, "maxSize": 3, "desiredSize": 0}


def test_every_gpu_node_group_uses_a_launch_template_of_its_own_and_the_gpu_ami(prod):
    """Each group has its own template: a new template version rolls every group that uses it."""
    templates = {r.name for r in prod.of_type(LAUNCH_TEMPLATE)}
    used = []
    for pool in build().node_pools:
        for plan in plan_node_groups(pool):
            group = prod.named(f"prod-{pool.name}-{plan.suffix}")
            template = f"prod-{pool.name}-{launch_template_suffix(plan)}"
            assert group.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
            assert template in templates & set(group.depends_on)
            used.append(template)
    assert len(used) == len(set(used))


# ------------------------------------------------------------------------------------------ NVMe cache


def decoded_node_config(user_data: str) -> dict:
    message = email.message_from_string(base64.b64decode(user_data).decode())
    assert message.is_multipart()
    (part,) = [p for p in message.walk() if p.get_content_type() == "application/node.eks.aws"]
    return yaml.safe_load(part.get_payload())


@pytest.mark.parametrize(("pool", "strategy"), [("h100", "RAID0"), ("l4", "RAID0"), ("mig", "RAID10")])
def test_user_data_assembles_the_instance_store(prod, pool, strategy):
    config = decoded_node_config(pool_template(prod, pool).inputs["userData"])

    assert config["apiVersion"] == "node.eks.aws/v1alpha1"
    assert config["kind"] == "NodeConfig"
    assert config["spec"]["instance"]["localStorage"] == {"strategy": strategy}


def test_pool_without_nvme_cache_gets_no_user_data():
    spec = build()
    pools = [{**p.model_dump(), "nvme_cache": False} if p.name == "h200" else p.model_dump() for p in spec.node_pools]
    recording = run(build({"node_pools": pools}))

    assert "userData" not in pool_template(recording, "h200").inputs


# -------------------------------------------------------------------------------------- labels, taints


def test_node_labels_name_pool_gpu_capacity_and_sharing(prod):
    groups = node_groups(prod, "h100")

    assert groups["ON_DEMAND"]["labels"] == {
        conventions.POOL_LABEL: "h100",
        conventions.GPU_LABEL: "H100",
        conventions.CAPACITY_LABEL: "on-demand",
        conventions.SHARING_LABEL: "none",
    }
    assert groups["SPOT"]["labels"][conventions.CAPACITY_LABEL] == "spot"


def test_shared_pools_carry_the_config_labels_the_platform_reads(prod):
    l4 = node_groups(prod, "l4")["SPOT"]["labels"]
    mig = node_groups(prod, "mig")["SPOT"]["labels"]

    assert l4[conventions.DEVICE_PLUGIN_CONFIG_LABEL] == "l4"
    assert l4["cost-center"] == "search"
    assert mig[conventions.MIG_CONFIG_LABEL] == "inferstack-mig"
    assert mig[conventions.SHARING_LABEL] == "mig"


def test_gpu_nodes_are_tainted_for_gpu_work_only(prod):
    for group in prod.of_type(NODE_GROUP):
        if group.parent == "prod-eks":
            assert "taints" not in group.inputs
        else:
            assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in group.inputs["taints"]
    assert {"key": "dedicated", "value": "llm", "effect": "NO_SCHEDULE"} in node_groups(prod, "h100")["SPOT"]["taints"]


# ------------------------------------------------------------------------------------------------ IAM


def test_no_iam_statement_allows_a_wildcard(prod):
    documents = policy_documents(prod)
    offending = []
    for where, document in documents:
        for statement in document["Statement"]:
            actions = statement.get("Action", [])
            resources = statement.get("Resource", [])
            actions = [actions] if isinstance(actions, str) else actions
            resources = [resources] if isinstance(resources, str) else resources
            if any("*" in a for a in actions) or "*" in resources:
                offending.append((where, statement))
    # cluster role, node role, model reader (trust) + the reader's S3 policy
    assert len(documents) == 4
    assert offending == []


def test_roles_only_get_the_aws_managed_policies_they_need(prod):
    attached = sorted(r.inputs["policyArn"].rsplit("/", 1)[1] for r in prod.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment"))

    assert attached == sorted(
        ["AmazonEKSClusterPolicy", "AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonEKS_CNI_Policy"]
    )


def test_model_reader_lists_and_reads_only_the_models_prefix(prod):
    bucket = prod.outputs["weights_bucket"]
    (policy,) = [d for where, d in policy_documents(prod) if where == "prod-weights-model-reader-s3.policy"]

    assert policy["Statement"] == [
        {"Sid": "ListWeights0", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}",
         "Condition": {"StringLike": {"s3:prefix": ["models/", "models/*"]}}},
        {"Sid": "GetWeights0", "Effect": "Allow", "Action": "s3:GetObject", "Resource": [f"arn:aws:s3:::{bucket}/models/*"]},
    ]


def test_model_reader_is_assumed_only_through_pod_identity_of_its_service_account(prod):
    (trust,) = [d for where, d in policy_documents(prod) if where == "prod-weights-model-reader.assumeRolePolicy"]
    associations = prod.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")

    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert statement["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-namespace"] == ["batch", "inference"]
    assert sorted((a.inputs["namespace"], a.inputs["serviceAccount"]) for a in associations) == [
        ("batch", conventions.MODEL_READER_SERVICE_ACCOUNT),
        ("inference", conventions.MODEL_READER_SERVICE_ACCOUNT),
    ]


# ----------------------------------------------------------------------------------------- weights


def test_weights_bucket_is_private_encrypted_versioned(prod):
    block = prod.named("prod-weights-public-access-block").inputs
    encryption = prod.named("prod-weights-encryption").inputs["rules"][0]
    versioning = prod.named("prod-weights-versioning").inputs
    ownership = prod.named("prod-weights-ownership").inputs

    assert [block[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")] == [True] * 4
    assert encryption["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    assert versioning["versioningConfiguration"]["status"] == "Enabled"
    assert ownership["rule"]["objectOwnership"] == "BucketOwnerEnforced"


# --------------------------------------------------------------------------------------- cluster


def test_cluster_uses_api_access_entries_and_managed_addons(prod):
    cluster = prod.named("prod-eks-cluster").inputs
    addons = {a.inputs["addonName"]: a.inputs["addonVersion"] for a in prod.of_type("aws:eks/addon:Addon")}
    entry = prod.named("prod-eks-admin-123456789012-platform-admin").inputs
    association = prod.named("prod-eks-admin-123456789012-platform-admin-policy").inputs

    assert cluster["name"] == "prod-inference" and cluster["version"] == build().cluster.kubernetes_version
    assert cluster["accessConfig"]["authenticationMode"] == "API"
    assert cluster["bootstrapSelfManagedAddons"] is False
    assert addons == eks_addon_versions()[build().cluster.kubernetes_version]
    assert entry["principalArn"] == association["principalArn"] == ADMIN_ROLE
    assert association["policyArn"].endswith(":cluster-access-policy/AmazonEKSClusterAdminPolicy")
    assert association["accessScope"] == {"type": "cluster"}


def test_system_node_group_is_on_demand_cpu(prod):
    system = prod.named("prod-eks-system")

    assert system.inputs["capacityType"] == "ON_DEMAND"
    assert system.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    assert system.inputs["scalingConfig"] == {"minSize": 2, "maxSize": 4, "desiredSize": 2}
    assert {"prod-eks-vpc-cni", "prod-eks-kube-proxy"} <= set(system.depends_on)
    assert "prod-eks-system" in prod.named("prod-eks-coredns").depends_on


def test_kubernetes_provider_waits_for_system_nodes_and_addons(prod):
    provider = prod.named("prod-kubernetes")

    assert {"prod-eks-system", "prod-eks-coredns", "prod-eks-vpc-cni"} <= set(provider.depends_on)
    assert provider.inputs["kubeconfig"][SIG_KEY] == SECRET_SIG


def test_kubeconfig_output_is_a_secret_that_runs_aws_eks_get_token(prod):
    kubeconfig = prod.outputs["kubeconfig"]

    assert kubeconfig[SIG_KEY] == SECRET_SIG
    exec_ = yaml.safe_load(kubeconfig["value"])["users"][0]["user"]["exec"]
    assert exec_["command"] == "aws"
    assert exec_["args"] == ["eks", "get-token", "--cluster-name", "prod-inference", "--region", "us-east-1", "--output", "json"]


def test_network_has_tagged_private_subnets_and_a_nat_per_zone(prod):
    private = [s.inputs for s in prod.of_type("aws:ec2/subnet:Subnet") if "-private-" in s.name]
    endpoint = prod.named("prod-network-s3-endpoint").inputs

    assert [s["availabilityZone"] for s in private] == ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert all(s["tags"]["kubernetes.io/role/internal-elb"] == "1" for s in private)
    assert len(prod.of_type("aws:ec2/natGateway:NatGateway")) == 3
    assert endpoint["vpcEndpointType"] == "Gateway" and endpoint["serviceName"] == "com.amazonaws.us-east-1.s3"


def test_every_resource_name_is_unique_and_tags_come_from_the_spec(prod):
    counts = Counter(r.name for r in prod.resources)
    provider = prod.named("prod-aws").inputs

    assert [name for name, n in counts.items() if n > 1] == []
    assert provider["region"] == "us-east-1"
    assert "ml-platform" in provider["defaultTags"]


def test_outputs_name_the_cluster_node_groups_and_bucket(prod):
    assert prod.outputs["cluster_name"] == "prod-inference"
    assert sorted(prod.outputs["node_pools"]) == sorted(
        r.inputs.get("nodeGroupName", r.name) for r in prod.of_type(NODE_GROUP) if r.parent != "prod-eks"
    )
    assert prod.outputs["weights_bucket"].startswith("prod-weights-bucket")


# ------------------------------------------------------------------------------------ existing cluster


@pytest.fixture(scope="module")
def existing():
    return run(build({"cluster": {"mode": "existing", "name": "shared"}, "weights": {"existing_bucket": "acme-weights"}}))


def test_existing_cluster_creates_nothing_of_the_cluster(existing):
    created = {r.type for r in existing.resources}

    for token in ("aws:eks/cluster:Cluster", "aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet", "aws:eks/addon:Addon",
                  "aws:eks/accessEntry:AccessEntry", "aws:s3/bucket:Bucket"):
        assert token not in created
    assert not [r for r in existing.of_type(NODE_GROUP) if r.name.endswith("-system")]


def test_existing_cluster_still_gets_gpu_pools_and_the_reader_role(existing):
    associations = existing.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    (policy,) = [d for where, d in policy_documents(existing) if where.endswith("-s3.policy")]

    assert {r.parent for r in existing.of_type(NODE_GROUP)} == {f"prod-{p}" for p in ("h100", "h200", "a100", "l4", "mig")}
    assert {a.inputs["clusterName"] for a in associations} == {"shared"}
    assert policy["Statement"][1]["Resource"] == ["arn:aws:s3:::acme-weights/models/*"]
    assert existing.outputs["kubeconfig"][SIG_KEY] == SECRET_SIG


def test_existing_cluster_efa_pool_uses_the_subnet_of_its_first_zone(existing):
    """a100 asks for zones b then c; the mock cluster's subnets are in a, b, c in that order."""
    (spot,) = children(existing, "prod-a100", NODE_GROUP)
    l4 = children(existing, "prod-l4", NODE_GROUP)

    assert len(spot.inputs["subnetIds"]) == 1
    assert spot.inputs["subnetIds"][0] == l4[0].inputs["subnetIds"][1]
