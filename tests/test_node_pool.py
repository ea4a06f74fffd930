"""A pool's pure parts (capacity split, EFA interface layout, labels, taints, user data) and its capacity
block groups as the mock engine records them."""

from __future__ import annotations

import pytest
from aws_recording import build, run
from stack_edits import without_node_autoscaler
from pulumi_policy import StackValidationPolicy

from inferstack import conventions
from inferstack.aws.node_pool import efa_interface_layout, node_labels, node_taints, render_user_data
from inferstack.planning.node_groups import GROUP_CAPACITY_BLOCK, GROUP_SPOT, NodeGroupPlan, plan_node_groups
from inferstack.policies.runner import run_policies
from inferstack.policies.pools import LAUNCH_TEMPLATE, node_groups
from inferstack.spec import NodePoolSpec, StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.validation import validate

RESERVATION = "cr-0123456789abcdef0"


def pool(**changes) -> NodePoolSpec:
    fields = {"name": "h100", "instance_types": ["p5.48xlarge", "p5e.48xlarge"], "max_nodes": 4}
    fields.update(changes)
    return NodePoolSpec.model_validate(fields)


def sizes(plans: list[NodeGroupPlan]) -> list[tuple]:
    return [(p.suffix, p.capacity_type, p.capacity_label, p.instance_types, p.min_size, p.max_size, p.desired_size)
            for p in plans]


BOTH = ("p5.48xlarge", "p5e.48xlarge")
PRIMARY = ("p5.48xlarge",)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({}, [("spot", "SPOT", "spot", BOTH, 0, 4, 0)], id="all spot"),
        pytest.param(
            {"min_nodes": 3, "capacity": {"on_demand_base": 1}},
            [("on-demand", "ON_DEMAND", "on-demand", PRIMARY, 1, 1, 1), ("spot", "SPOT", "spot", BOTH, 2, 3, 2)],
            id="baseline plus spot; min beyond the baseline goes to spot",
        ),
        pytest.param(
            {"capacity": {"on_demand_base": 4}},
            [("on-demand", "ON_DEMAND", "on-demand", PRIMARY, 4, 4, 4)],
            id="baseline fills the pool",
        ),
        pytest.param(
            {"capacity": {"on_demand_base": 1, "spot": False}},
            [("on-demand", "ON_DEMAND", "on-demand", PRIMARY, 1, 1, 1),
             ("on-demand-burst", "ON_DEMAND", "on-demand", BOTH, 0, 3, 0)],
            id="no spot: the burst is on-demand",
        ),
        pytest.param(
            {"capacity": {"on_demand_base": 2, "reservation": {"kind": "odcr", "id": RESERVATION}}},
            [("reserved", "ON_DEMAND", "reserved", PRIMARY, 2, 2, 2), ("spot", "SPOT", "spot", BOTH, 0, 2, 0)],
            id="on-demand capacity reservation",
        ),
        pytest.param(
            {"capacity": {"on_demand_base": 2, "reservation": {"kind": "capacity_block", "id": RESERVATION}}},
            [("capacity-block", "CAPACITY_BLOCK", "reserved", PRIMARY, 0, 2, 2), ("spot", "SPOT", "spot", BOTH, 0, 2, 0)],
            id="capacity block",
        ),
    ],
)
def test_capacity_split(changes, expected):
    assert sizes(plan_node_groups(pool(**changes))) == expected


def test_node_groups_never_exceed_max_nodes():
    for base in range(0, 5):
        for low in range(0, 5):
            spec = pool(min_nodes=low, capacity={"on_demand_base": base})
            plans = plan_node_groups(spec)
            assert sum(p.max_size for p in plans) == 4
            assert sum(p.min_size for p in plans) == max(low, base)


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (1, [(0, 0, "interface"), (0, 1, "efa-only")]),
        (4, [(0, 0, "interface"), (0, 1, "efa-only"), (1, 0, "efa-only"), (2, 0, "efa-only"), (3, 0, "efa-only")]),
    ],
)
def test_efa_layout_puts_ena_first_and_one_efa_only_per_card(count, expected):
    assert efa_interface_layout(count) == expected


def test_efa_layout_needs_an_interface():
    with pytest.raises(ValueError, match="at least one EFA interface"):
        efa_interface_layout(0)


def test_efa_interfaces_follow_the_catalog():
    assert PoolHardware(pool(efa=True)).efa_interfaces == 32
    assert PoolHardware(pool(instance_types=["p5en.48xlarge"], efa=True)).efa_interfaces == 16
    assert PoolHardware(pool(efa=False)).efa_interfaces == 0


@pytest.mark.parametrize(
    ("sharing", "extra"),
    [
        ({"mode": "none"}, {}),
        ({"mode": "mig", "layout": {"3g.40gb": 2}}, {conventions.MIG_CONFIG_LABEL: "inferstack-h100"}),
        ({"mode": "time_slicing", "replicas": 4}, {conventions.DEVICE_PLUGIN_CONFIG_LABEL: "h100"}),
        ({"mode": "mps", "replicas": 2}, {conventions.DEVICE_PLUGIN_CONFIG_LABEL: "h100"}),
    ],
)
def test_labels_follow_gpu_sharing(sharing, extra):
    spec = pool(gpu_sharing=sharing, labels={"team": "search"})

    assert node_labels(spec, PoolHardware(spec), "spot") == {
        conventions.POOL_LABEL: "h100",
        conventions.GPU_LABEL: "H100",
        conventions.CAPACITY_LABEL: "spot",
        conventions.SHARING_LABEL: sharing["mode"],
        **extra,
        "team": "search",
    }


def test_taints_always_start_with_the_gpu_taint():
    taints = node_taints(pool(taints=[{"key": "tier", "value": "online", "effect": "NoExecute"}, {"key": "spot-ok"}]))

    assert [(t.key, t.value, t.effect) for t in taints] == [
        ("nvidia.com/gpu", "true", "NO_SCHEDULE"),
        ("tier", "online", "NO_EXECUTE"),
        ("spot-ok", None, "NO_SCHEDULE"),
    ]


def test_user_data_is_mime_with_a_node_config_part():
    text = render_user_data("RAID10")

    assert text.startswith("MIME-Version: 1.0\nContent-Type: multipart/mixed;")
    assert "Content-Type: application/node.eks.aws\n" in text
    assert "      strategy: RAID10\n" in text
    assert text.rstrip().endswith("--")


def test_user_data_refuses_unknown_strategies():
    with pytest.raises(ValueError, match="'Mount' is not RAID0 or RAID10"):
        render_user_data("Mount")


# ------------------------------------------------------------------------- capacity blocks, as recorded

CAPACITY_BLOCK_POOL = {
    "name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 4, "efa": True,
    "capacity": {"on_demand_base": 2, "reservation": {"kind": "capacity_block", "id": RESERVATION}},
}


@pytest.fixture(scope="module")
def block_recording():
    return run(validate(build({"node_pools": [CAPACITY_BLOCK_POOL]})).written)


def _group_and_template(recording, suffix: str):
    group = recording.named(f"prod-h100-{suffix}")
    template = next(r for r in recording.of_type(LAUNCH_TEMPLATE) if r.name in group.depends_on)
    return group, template


def test_a_capacity_block_group_names_its_instance_type_in_the_launch_template_only(block_recording):
    """EKS refuses a Capacity Block node group unless its custom launch template has the block's market
    type, reservation and instance type, and then takes no instance types on the node group itself
    (awsdocs/amazon-eks-user-guide@4d52b4d latest/ug/ml/capacity-blocks-mng.adoc, "Create a managed node
    group with Capacity Blocks for ML"; latest/ug/nodes/launch-templates.adoc: an instance type in the
    launch template excludes instance types on the node group; terraform-aws-modules/terraform-aws-eks
    v21.19.0 modules/eks-managed-node-group/main.tf sets them the same way)."""
    group, template = _group_and_template(block_recording, GROUP_CAPACITY_BLOCK)

    assert group.inputs["capacityType"] == "CAPACITY_BLOCK"
    assert "instanceTypes" not in group.inputs
    assert template.inputs["instanceType"] == "p5.48xlarge"
    assert template.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert template.inputs["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": RESERVATION}
    }


def test_a_capacity_block_group_stays_in_the_blocks_zone_and_size(block_recording):
    """The create request lists only subnets in the reservation's zone, and the group never grows past the
    block's instances (capacity-blocks-mng.adoc); the spot burst above it is a separate group. EKS scales it to 0
    before the block ends, so its minimum is 0 (tests/test_capacity_block_contract.py)."""
    group, _ = _group_and_template(block_recording, GROUP_CAPACITY_BLOCK)

    assert len(group.inputs["subnetIds"]) == 1
    assert group.inputs["scalingConfig"] == {"minSize": 0, "maxSize": 2, "desiredSize": 2}


def test_groups_off_the_block_keep_their_instance_types_on_the_node_group(block_recording):
    group, template = _group_and_template(block_recording, GROUP_SPOT)

    assert group.inputs["instanceTypes"] == ["p5.48xlarge"]
    assert "instanceType" not in template.inputs


def test_the_policy_pack_reads_a_capacity_block_groups_instance_type_from_its_launch_template(block_recording):
    seen = {}

    def probe(args, report):
        seen.update({g.name: g.instance_types for g in node_groups(args.resources)})

    run_policies([r.as_dict() for r in block_recording.resources], "prod",
                 policies=[StackValidationPolicy(name="probe", description="node groups", validate=probe)])

    assert seen["prod-h100-capacity-block"] == ("p5.48xlarge",)
    assert seen["prod-h100-spot"] == ("p5.48xlarge",)


def test_a_capacity_block_brings_its_own_placement_while_the_burst_group_keeps_the_pools(block_recording):
    """A Capacity Block's instances are co-located by AWS in an EC2 UltraCluster and launch by naming the
    block (EC2 user guide, "Capacity Blocks for ML" and "Launch instances using Capacity Blocks"): its launch
    template names no placement group of ours. The spot burst on EFA keeps the pool's cluster placement
    group (EC2 user guide, "Placement group rules and limitations"), and the policy pack accepts both."""
    _, block = _group_and_template(block_recording, GROUP_CAPACITY_BLOCK)
    _, burst = _group_and_template(block_recording, GROUP_SPOT)

    assert "placement" not in block.inputs
    assert burst.inputs["placement"]["groupName"]
    report = run_policies([r.as_dict() for r in block_recording.resources], "prod")
    efa = next(p for p in report if p.name == "efa-placement-and-security-group")
    assert efa.violations == []


# ------------------------------------------------------------------------------ what an edit rolls

LAUNCH_TEMPLATE_TYPE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP_TYPE = "aws:eks/nodeGroup:NodeGroup"


def gpu_inputs(recording, prefix: str = "prod-") -> dict[str, dict]:
    """Inputs of every GPU pool's launch templates and node groups, by resource name."""
    return {
        r.name: r.inputs
        for r in recording.resources
        if r.type in (LAUNCH_TEMPLATE_TYPE, NODE_GROUP_TYPE) and r.parent != "prod-eks" and r.name.startswith(prefix)
    }


def prod_with(**changes):
    from aws_recording import build as build_prod

    return validate(build_prod(changes)).written


def on_version(version: str):
    """prod on another Kubernetes minor; 1.31 has no cluster-autoscaler image in the catalog, so no autoscaler."""
    from aws_recording import prod_spec

    data = prod_spec()
    without_node_autoscaler(data)
    data["cluster"]["kubernetes_version"] = version
    return validate(StackSpec.model_validate(data)).written


def pools_with(edit):
    spec = prod_with().model_dump(mode="json", exclude_unset=True)
    return [edit(p) for p in spec["node_pools"]]


@pytest.fixture(scope="module")
def baseline():
    return run(prod_with())


def test_an_organisation_tag_change_rolls_no_node(baseline):
    """A launch template change makes a template version, and a new version rolls every group using it
    (terraform-provider-aws internal/service/eks/node_group.go: a launch_template version change calls
    UpdateNodegroupVersion; EKS User Guide managed-node-update-behavior). Org tags reach instances through
    their Auto Scaling group instead."""
    tagged = run(prod_with(tags={**prod_with().tags, "cost-center": "ml-42"}))
    assert gpu_inputs(tagged) == gpu_inputs(baseline)
    asg_tags = [t.inputs["tag"] for t in tagged.of_type("aws:autoscaling/tag:Tag") if t.inputs["tag"]["key"] == "cost-center"]
    assert asg_tags and all(t["propagateAtLaunch"] is True and t["value"] == "ml-42" for t in asg_tags)


def test_one_pools_change_leaves_every_other_pools_templates_and_groups_alone(baseline):
    """Each pool, and each group in it, has a template of its own, and no template names other pools."""
    first = prod_with().node_pools[0].name
    edited = run(prod_with(node_pools=pools_with(lambda p: {**p, "disk_size_gib": 500} if p["name"] == first else p)))
    before, after = gpu_inputs(baseline), gpu_inputs(edited)
    changed = {n for n in before if before[n] != after[n]}
    assert changed and all(n.startswith(f"prod-{first}-") for n in changed)


def test_reordering_instance_types_leaves_node_groups_equal():
    """instance_types is ForceNew on aws_eks_node_group (terraform-provider-aws
    internal/service/eks/node_group.go, a TypeList): a reorder that changes no priority must give the same
    list. Only the primary type (first: On-Demand is `prioritized`, EKS User Guide managed-node-groups)
    keeps its place."""
    spot = pool(instance_types=["p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"])
    reordered = pool(instance_types=["p5.48xlarge", "p5en.48xlarge", "p5e.48xlarge"])
    assert plan_node_groups(spot) == plan_node_groups(reordered)
    on_demand = {"capacity": {"on_demand_base": 1, "spot": False}}
    assert plan_node_groups(pool(instance_types=["p5.48xlarge", "p5en.48xlarge", "p5e.48xlarge"], **on_demand)) == (
        plan_node_groups(pool(instance_types=["p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"], **on_demand))
    )
    assert plan_node_groups(pool(**on_demand))[0].instance_types == ("p5.48xlarge",)  # the primary


def test_bumping_the_kubernetes_version_moves_every_node_group(baseline):
    """`version` on aws_eks_node_group is Optional+Computed (node_group.go): unset, a control plane upgrade
    leaves the nodes behind; set from the spec, every group, the system group included, follows."""
    def versions(recording):
        return {g.name: g.inputs["version"] for g in recording.of_type(NODE_GROUP_TYPE)}

    assert set(versions(baseline).values()) == {"1.36"}
    older = run(on_version("1.31"))
    assert set(versions(older)) == set(versions(baseline)) and set(versions(older).values()) == {"1.31"}


def test_gpu_groups_update_one_node_at_a_time_without_forcing_evictions(baseline):
    """EKS fails a node update whose evictions stay blocked for 15 minutes unless forced (EKS User Guide
    managed-node-update-behavior): never force past a PodDisruptionBudget; reserved capacity has no spare
    instance, so its groups update with MINIMAL."""
    for group in baseline.of_type(NODE_GROUP_TYPE):
        if group.parent == "prod-eks":
            continue
        assert group.inputs["forceUpdateVersion"] is False
        assert group.inputs["updateConfig"]["maxUnavailable"] == 1
        expected = "DEFAULT" if group.inputs["capacityType"] == "SPOT" or "reserved" not in group.name else "MINIMAL"
        assert group.inputs["updateConfig"]["updateStrategy"] == expected


def test_addon_versions_come_from_the_catalog_per_minor():
    """Pinned per minor (catalog/eks_addons.json, EKS User Guide managing-vpc-cni/managing-coredns/
    managing-kube-proxy tables): no invoke asks EKS for the newest."""
    from inferstack.catalog.charts import eks_addon_versions

    spec = on_version("1.31")
    addons = {a.inputs["addonName"]: a.inputs["addonVersion"] for a in run(spec).of_type("aws:eks/addon:Addon")}
    assert addons == eks_addon_versions()["1.31"]
    assert addons != eks_addon_versions()["1.36"]


def test_a_kubernetes_version_without_addon_pins_is_refused():
    from inferstack.catalog.charts import eks_addon_versions
    from inferstack.spec import SpecError

    with pytest.raises(SpecError) as caught:
        on_version("1.30")
    assert caught.value.path == "cluster.kubernetes_version"
    assert "pins no" in str(caught.value) and ", ".join(eks_addon_versions()) in str(caught.value)
