"""Karpenter objects of realistic pools, validated against the upstream CRD schemas (shared/schemas, strict, CEL
evaluated) and held to the rules of shared/reference/karpenter.md, each test naming its section."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from kube_validation import SHARED_SCHEMAS, assert_valid, crd_schema

from inferstack import conventions
from inferstack.aws.node_pool import efa_interface_layout, node_labels
from inferstack.planning.node_groups import plan_node_groups
from inferstack.platform.karpenter_pools import (
    AMI_ALIASES,
    NODEPOOL_WEIGHTS,
    disruption_summary,
    ec2_node_classes,
    node_pools,
)
from inferstack.catalog.karpenter import FACTS
from inferstack.spec import MaintenanceWindowSpec, NodePoolSpec
from inferstack.spec.pools import PoolHardware

ENV = "prod"
WINDOW = MaintenanceWindowSpec()  # 02:00-06:00 UTC
ODCR = "cr-0123456789abcdef0"
BLOCK = "cr-0fedcba9876543210"


def pool(**fields) -> NodePoolSpec:
    return NodePoolSpec.model_validate(fields)


POOLS = {
    "efa-h100-odcr": pool(
        name="h100", instance_types=["p5.48xlarge"], min_nodes=2, max_nodes=6, efa=True,
        capacity={"on_demand_base": 2, "spot": True, "reservation": {"kind": "odcr", "id": ODCR}},
    ),
    "efa-h100-on-demand": pool(
        name="h100od", instance_types=["p5.48xlarge"], max_nodes=4, efa=True, capacity={"on_demand_base": 1},
    ),
    "spot-l40s": pool(name="l40s", instance_types=["g6e.xlarge", "g6e.2xlarge", "g6e.4xlarge"], max_nodes=8),
    "a100-mig": pool(
        name="a100", instance_types=["p4de.24xlarge"], max_nodes=3,
        capacity={"on_demand_base": 1, "spot": False},
        gpu_sharing={"mode": "mig", "layout": {"3g.40gb": 2}},
    ),
    "bottlerocket-l4": pool(
        name="l4", instance_types=["g6.xlarge", "g6.2xlarge"], max_nodes=4, ami_type="BOTTLEROCKET_x86_64_NVIDIA",
        capacity={"on_demand_base": 1}, taints=[{"key": "team", "value": "search", "effect": "NoSchedule"}],
    ),
    "batch-l40s": pool(name="batch", role="batch", instance_types=["g6e.xlarge"], max_nodes=10),
    "al2023-raid10": pool(name="raid", instance_types=["p5.48xlarge"], max_nodes=2, nvme_cache={"raid": "RAID10"}),
    "capacity-block": pool(
        name="block", instance_types=["p5.48xlarge"], max_nodes=2, efa=True,
        capacity={"on_demand_base": 2, "reservation": {"kind": "capacity_block", "id": BLOCK}},
    ),
}


def node_classes(p: NodePoolSpec) -> list[dict]:
    return ec2_node_classes(
        p,
        environment=ENV,
        node_role_name="prod-inference-gpu-node",
        subnet_ids=["subnet-0aaa1111", "subnet-0bbb2222"],
        security_group_ids=["sg-0cluster1", "sg-0efa2222"],
        placement_group_name="prod-h100-placement" if p.efa.enabled else None,
        tags={"team": "ml-platform"},
    )


def node_class(p: NodePoolSpec) -> dict:
    """The class of the pool's first plan: its reserved one when it has a reservation."""
    return node_classes(p)[0]


def objects(p: NodePoolSpec) -> tuple[dict, list[dict]]:
    return node_class(p), node_pools(p, environment=ENV, maintenance_window=WINDOW)


@pytest.mark.parametrize("name", POOLS)
def test_objects_pass_the_upstream_crd_schemas_and_cel_rules(name):
    """karpenter.k8s.aws EC2NodeClass and karpenter.sh NodePool v1 (v1.14.1 CRDs, shared/schemas): strict, CEL run."""
    assert_valid([*node_classes(POOLS[name]), *node_pools(POOLS[name], environment=ENV, maintenance_window=WINDOW)])


@pytest.mark.parametrize("name", POOLS)
def test_ami_selection_is_one_pinned_alias_of_the_pools_family(name):
    """Section 3.1: an alias term is the only term; its family is al2023 or bottlerocket (no NVIDIA family)
    and it is pinned, never `latest` (section 9)."""
    p = POOLS[name]
    terms = node_class(p)["spec"]["amiSelectorTerms"]
    assert len(terms) == 1 and set(terms[0]) == {"alias"}
    family, version = terms[0]["alias"].split("@")
    assert family == ("bottlerocket" if p.ami_type.startswith("BOTTLEROCKET") else "al2023")
    assert version != "latest"


def test_alias_versions_have_the_upstream_tag_formats():
    """Section 3.1: AL2023 pins are amazon-eks-ami release tags vYYYYMMDD, Bottlerocket pins its vX.Y.Z tags; and
    Bottlerocket sets up RAID0 itself only from v1.22.0 (section 3.5)."""
    al2023 = AMI_ALIASES["AL2023_x86_64_NVIDIA"]["version"]
    assert re.fullmatch(r"v\d{8}", al2023)
    datetime.strptime(al2023[1:], "%Y%m%d")
    bottlerocket = AMI_ALIASES["BOTTLEROCKET_x86_64_NVIDIA"]["version"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+", bottlerocket)
    since = FACTS["bottlerocket_raid0_since"]["version"]
    assert tuple(map(int, bottlerocket[1:].split("."))) >= tuple(map(int, since[1:].split(".")))
    for fact in AMI_ALIASES.values():
        assert fact["source"] in FACTS["sources"]
        assert len(f"{fact['family']}@{fact['version']}") <= 30  # the alias field's maxLength


@pytest.mark.parametrize("name", ["efa-h100-odcr", "efa-h100-on-demand", "capacity-block"])
def test_efa_interfaces_obey_the_cel_rules(name):
    """Section 4.5: one primary interface (card 0, device 0, `interface`), each (card, device) once, at most one
    efa-only interface per network card; one per card the pool's type has."""
    p = POOLS[name]
    interfaces = node_class(p)["spec"]["networkInterfaces"]
    pairs = [(i["networkCardIndex"], i["deviceIndex"]) for i in interfaces]
    assert len(pairs) == len(set(pairs))
    assert [i for i in interfaces if i["interfaceType"] == "interface"] == [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}
    ]
    efa_cards = [i["networkCardIndex"] for i in interfaces if i["interfaceType"] == "efa-only"]
    assert len(efa_cards) == len(set(efa_cards)) == PoolHardware(p).efa_interfaces


def test_the_validator_refuses_two_efa_only_interfaces_on_one_card():
    """Section 4.5 CEL rule, as the API server runs it: a second efa-only interface on card 0 is rejected."""
    nc = node_class(POOLS["efa-h100-odcr"])
    nc["spec"]["networkInterfaces"].append({"networkCardIndex": 0, "deviceIndex": 2, "interfaceType": "efa-only"})
    with pytest.raises(AssertionError, match="at most one efa device per network card"):
        assert_valid([nc])


def test_efa_pool_launches_into_its_placement_group_in_one_zone():
    """Section 4.4: one placement group per EC2NodeClass, by name; a cluster group lives in one zone."""
    spec = node_class(POOLS["efa-h100-on-demand"])["spec"]
    assert spec["placementGroupSelector"] == {"name": "prod-h100-placement"}
    assert spec["subnetSelectorTerms"] == [{"id": "subnet-0aaa1111"}]


def test_an_odcr_pool_joins_no_placement_group_the_stack_creates():
    """EC2 user guide, "Capacity Reservations for cluster placement groups": an ODCR serves a cluster placement group
    only when it was created in it, which a group this stack creates cannot be; the reservation is selected."""
    spec = node_class(POOLS["efa-h100-odcr"])["spec"]
    assert "placementGroupSelector" not in spec
    assert spec["capacityReservationSelectorTerms"] == [{"id": ODCR}]


def test_capacity_block_pool_selects_its_block_and_no_placement_group():
    """Sections 4.3-4.4: a Capacity Block is selected as a reservation; it brings its own placement, and a node
    class's placement group would take in every instance it launches, the block's too."""
    spec = node_class(POOLS["capacity-block"])["spec"]
    assert spec["capacityReservationSelectorTerms"] == [{"id": BLOCK}]
    assert "placementGroupSelector" not in spec


def test_reserved_nodepool_allows_reserved_and_weighs_most():
    """Sections 4.1-4.2 and 5: the reservation is selected by id, its NodePool allows capacity type `reserved`
    and has the highest weight of the pool's NodePools, then the on-demand baseline, then spot."""
    nc, pools = objects(POOLS["efa-h100-odcr"])
    assert nc["spec"]["capacityReservationSelectorTerms"] == [{"id": ODCR}]
    by_type = {
        next(r["values"] for r in p["spec"]["template"]["spec"]["requirements"] if r["key"] == "karpenter.sh/capacity-type")[0]: p
        for p in pools
    }
    assert set(by_type) == {"reserved", "spot"}
    assert by_type["reserved"]["spec"]["weight"] == max(p["spec"]["weight"] for p in pools)
    assert by_type["reserved"]["spec"]["weight"] > by_type["spot"]["spec"]["weight"]
    assert NODEPOOL_WEIGHTS["reserved"] > NODEPOOL_WEIGHTS["on-demand"] > NODEPOOL_WEIGHTS["spot"]
    reserved_requirements = by_type["reserved"]["spec"]["template"]["spec"]["requirements"]
    assert {"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "In", "values": [ODCR]} in reserved_requirements


@pytest.mark.parametrize("name", POOLS)
def test_each_plan_becomes_a_nodepool_with_its_types_limit_labels_and_taints(name):
    """Section 5: limits.nodes caps the NodePool at the plan's max; the instance-type requirement is the plan's
    types; template labels are the node group's (node_labels, the ones Kueue flavors and pods select on) and the
    taints include nvidia.com/gpu=true:NoSchedule (section 9)."""
    p = POOLS[name]
    pools = node_pools(p, environment=ENV, maintenance_window=WINDOW)
    classes = {c["metadata"]["name"] for c in node_classes(p)}
    plans = plan_node_groups(p)
    assert [o["metadata"]["name"] for o in pools] == [f"{ENV}-{p.name}-{plan.suffix}" for plan in plans]
    for body, plan in zip(pools, plans):
        spec = body["spec"]
        template = spec["template"]["spec"]
        assert int(spec["limits"]["nodes"]) == plan.max_size
        assert {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(plan.instance_types)} in template["requirements"]
        assert spec["template"]["metadata"]["labels"] == node_labels(p, PoolHardware(p), plan.capacity_label)
        assert {"key": conventions.GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"} in template["taints"]
        assert template["nodeClassRef"]["group"] == "karpenter.k8s.aws" and template["nodeClassRef"]["kind"] == "EC2NodeClass"
        assert template["nodeClassRef"]["name"] in classes


def test_serving_pool_never_consolidates_or_expires_a_node_with_a_loaded_model():
    """Section 5: WhenEmpty never takes a node with pods on it; a 0-node budget for Drifted holds drift outside the
    maintenance window; expiry is forceful and ignores budgets, so serving nodes never expire; a
    terminationGracePeriod of the 120 s notice bounds do-not-disrupt pods on drift and interruption."""
    for body in objects(POOLS["efa-h100-odcr"])[1]:
        disruption = body["spec"]["disruption"]
        assert disruption["consolidationPolicy"] == "WhenEmpty"
        closed = [b for b in disruption["budgets"] if b["nodes"] == "0"]
        assert closed and all(b["reasons"] == ["Drifted"] and "schedule" in b for b in closed)
        assert body["spec"]["template"]["spec"]["expireAfter"] == "Never"
        assert body["spec"]["template"]["spec"]["terminationGracePeriod"] == "120s"  # planning's spot notice
    summary = disruption_summary(POOLS["efa-h100-odcr"], WINDOW)
    assert summary["consolidation_policy"] == "WhenEmpty" and summary["serving_pods_block_disruption"]


def test_batch_pool_consolidates_underutilized_nodes():
    """Section 5: WhenEmptyOrUnderutilized lets Karpenter move batch pods and remove the nodes they leave."""
    for body in objects(POOLS["batch-l40s"])[1]:
        assert body["spec"]["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
    assert disruption_summary(POOLS["batch-l40s"], WINDOW)["consolidation_policy"] == "WhenEmptyOrUnderutilized"


@pytest.mark.skipif(SHARED_SCHEMAS is None, reason="../shared/schemas is absent")
@pytest.mark.parametrize("name", ["batch-l40s"])
def test_expire_after_is_the_upstream_default_stated(name):
    """Section 5: a batch pool's expireAfter is the CRD's default, stated, so a new upstream default drifts nothing."""
    default = crd_schema("karpenter.sh", "v1", "NodePool")["properties"]["spec"]["properties"]["template"][
        "properties"]["spec"]["properties"]["expireAfter"]["default"]
    for body in objects(POOLS[name])[1]:
        assert body["spec"]["template"]["spec"]["expireAfter"] == default


def test_nvme_raid0_is_karpenters_instance_store_policy():
    """Section 3.5: RAID0 is Karpenter's only instanceStorePolicy, on AL2023 and Bottlerocket alike."""
    for name in ("efa-h100-odcr", "bottlerocket-l4"):
        spec = node_class(POOLS[name])["spec"]
        assert spec["instanceStorePolicy"] == "RAID0" and "userData" not in spec


def test_raid10_goes_through_nodeadm_on_al2023():
    """Sections 3.5 and 3.7: RAID10 is no instanceStorePolicy; AL2023 merges a NodeConfig from userData."""
    spec = node_class(POOLS["al2023-raid10"])["spec"]
    assert "instanceStorePolicy" not in spec
    assert "strategy: RAID10" in spec["userData"]


def test_kubelet_volume_is_the_families_ephemeral_device():
    """Section 3.4 (karpenter-provider-aws amifamily): the pool's disk is the kubelet volume, /dev/xvda on AL2023 and
    /dev/xvdb on Bottlerocket, which also keeps its /dev/xvda OS volume once the defaults are replaced."""
    al2023 = node_class(POOLS["spot-l40s"])["spec"]["blockDeviceMappings"]
    assert [(d["deviceName"], d.get("rootVolume", False)) for d in al2023] == [("/dev/xvda", True)]
    bottlerocket = node_class(POOLS["bottlerocket-l4"])["spec"]["blockDeviceMappings"]
    assert [(d["deviceName"], d.get("rootVolume", False)) for d in bottlerocket] == [("/dev/xvda", False), ("/dev/xvdb", True)]
    for device in al2023 + bottlerocket:
        assert device["ebs"]["encrypted"] and device["ebs"]["volumeType"] == "gp3"


def test_imds_is_v2_only_with_one_hop():
    """Section 3.6: hop limit 1 keeps pods off the node role's credentials."""
    options = node_class(POOLS["spot-l40s"])["spec"]["metadataOptions"]
    assert options["httpTokens"] == "required" and options["httpPutResponseHopLimit"] == 1


def test_efa_layout_matches_the_aws_layer():
    """The EC2NodeClass and the managed node groups' launch template attach the same EFA layout (section 4.5)."""
    p = POOLS["efa-h100-odcr"]
    interfaces = node_class(p)["spec"]["networkInterfaces"]
    assert [(i["networkCardIndex"], i["deviceIndex"], i["interfaceType"]) for i in interfaces] == efa_interface_layout(
        PoolHardware(p).efa_interfaces
    )
