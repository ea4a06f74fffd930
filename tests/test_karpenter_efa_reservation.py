"""Issue 26 item 5c: an EFA pool's spot and on-demand nodes launch in its cluster placement group, in one zone, even
when an ODCR backs its baseline; only the reserved NodePool's EC2NodeClass selects the reservation.

Upstream (aws/karpenter-provider-aws tag v1.14.1):
- pkg/apis/v1/ec2nodeclass.go:49-60: an EC2NodeClass has one `placementGroupSelector` and its
  `capacityReservationSelectorTerms`;
- pkg/providers/launchtemplate/launchtemplate.go:157-175 resolves the class's placement group for every launch
  template it makes, whatever the capacity type, and pkg/providers/amifamily/resolver.go:338 with
  pkg/providers/launchtemplate/types.go:184-195 put it in the template's Placement.GroupId: every instance of a class
  goes into the class's group (shared/reference/karpenter.md section 4.4), so a class shared with a reservation
  that joins no group keeps spot nodes out of it.
EC2 user guide, "Capacity Reservations for cluster placement groups": an ODCR serves a cluster placement group only
when it was created in it (components/aws/node_pool.py joins_no_placement_group).
"""

from __future__ import annotations

from kube_validation import assert_valid

from inferstack.platform.karpenter_pools import ec2_node_classes, node_pools
from inferstack.spec import MaintenanceWindowSpec, NodePoolSpec

ENV = "prod"
ODCR = "cr-0123456789abcdef0"
GROUP = "prod-h100-placement"


def pool(**fields) -> NodePoolSpec:
    return NodePoolSpec.model_validate(
        {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 6, "efa": True, **fields}
    )


def rendered(p: NodePoolSpec) -> tuple[dict[str, dict], dict[str, dict]]:
    """(classes by name, NodePools by capacity type)."""
    classes = ec2_node_classes(
        p, environment=ENV, node_role_name="prod-gpu-node", subnet_ids=["subnet-0aaa1111", "subnet-0bbb2222"],
        security_group_ids=["sg-0cluster1"], placement_group_name=p.efa.placement_group or GROUP,
    )
    pools = node_pools(p, environment=ENV, maintenance_window=MaintenanceWindowSpec())
    assert_valid([*classes, *pools])
    by_type = {
        next(r["values"][0] for r in body["spec"]["template"]["spec"]["requirements"]
             if r["key"] == "karpenter.sh/capacity-type"): body
        for body in pools
    }
    return {c["metadata"]["name"]: c["spec"] for c in classes}, by_type


def class_of(classes: dict[str, dict], node_pool: dict) -> dict:
    return classes[node_pool["spec"]["template"]["spec"]["nodeClassRef"]["name"]]


ODCR_POOL = pool(capacity={"on_demand_base": 2, "spot": True, "reservation": {"kind": "odcr", "id": ODCR}})


def test_spot_nodes_of_an_odcr_pool_launch_in_its_placement_group():
    classes, by_type = rendered(ODCR_POOL)
    spot = class_of(classes, by_type["spot"])
    assert spot["placementGroupSelector"] == {"name": GROUP}
    assert "capacityReservationSelectorTerms" not in spot


def test_only_the_reserved_nodepools_class_selects_the_reservation():
    classes, by_type = rendered(ODCR_POOL)
    reserved = class_of(classes, by_type["reserved"])
    assert reserved["capacityReservationSelectorTerms"] == [{"id": ODCR}]
    assert "placementGroupSelector" not in reserved  # the stack's group cannot hold a reservation bought before it
    assert [name for name, spec in classes.items() if "capacityReservationSelectorTerms" in spec] == [
        by_type["reserved"]["spec"]["template"]["spec"]["nodeClassRef"]["name"]
    ]


def test_every_class_of_an_efa_pool_stays_in_one_zone():
    classes, _ = rendered(ODCR_POOL)
    assert len(classes) == 2
    assert {str(spec["subnetSelectorTerms"]) for spec in classes.values()} == {str([{"id": "subnet-0aaa1111"}])}


def test_an_odcr_created_in_a_named_group_launches_its_nodes_there_too():
    """The reservation was created in `efa.placement_group`: the reserved class joins that group as well."""
    named = pool(
        capacity={"on_demand_base": 2, "spot": True, "reservation": {"kind": "odcr", "id": ODCR}},
        efa={"enabled": True, "placement_group": "existing-pg", "create_placement_group": False},
    )
    classes, by_type = rendered(named)
    for node_pool in by_type.values():
        assert class_of(classes, node_pool)["placementGroupSelector"] == {"name": "existing-pg"}


def test_an_on_demand_burst_above_an_odcr_joins_the_group_and_not_the_reservation():
    classes, by_type = rendered(pool(capacity={"on_demand_base": 2, "spot": False,
                                               "reservation": {"kind": "odcr", "id": ODCR}}))
    burst = class_of(classes, by_type["on-demand"])
    assert burst["placementGroupSelector"] == {"name": GROUP} and "capacityReservationSelectorTerms" not in burst


def test_a_pool_without_a_reservation_keeps_one_class():
    classes, by_type = rendered(pool(capacity={"on_demand_base": 1, "spot": True}))
    assert list(classes) == [f"{ENV}-h100"]
    assert all(class_of(classes, p)["placementGroupSelector"] == {"name": GROUP} for p in by_type.values())
