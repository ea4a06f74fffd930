"""The AWS layer's refusals: names AWS would refuse or that would collide, a network layout that does not fit,
add-on versions the catalog does not pin, and pool settings its node groups and launch templates cannot carry
(taints, zones, reservations)."""

from __future__ import annotations

from datetime import date

from inferstack.aws.foundation import check_resource_names
from inferstack.aws.network import check_network, cluster_zones, pool_zones
from inferstack.aws.node_template import GPU_TAINT
from inferstack.catalog.charts import eks_addon_versions, eks_support_calendar
from inferstack.catalog.offerings import region_zones
from inferstack.spec import CreateCluster, NodePoolSpec, StackSpec
from inferstack.spec.checks import region_known
from inferstack.spec.errors import SpecError, quoted, refusals_of


def cluster_refusals(spec: StackSpec) -> list[SpecError]:
    """A created cluster's add-ons are pinned for its Kubernetes minor (catalog/eks_addons.json)."""
    return refusals_of(lambda: _check_addon_pins(spec))


def pool_refusals(spec: StackSpec, index: int) -> list[SpecError]:
    """A pool's taints, zones and reservation as its node groups and launch templates carry them."""
    pool, path = spec.node_pools[index], f"node_pools[{index}]"
    found = refusals_of(lambda: _check_taints(path, pool))
    if region_known(spec):  # the zones below are the region's
        found = refusals_of(lambda: _check_reservation_zone(spec, path, pool)) + found
        found += refusals_of(lambda: _check_cluster_zones(spec, path, pool))
    return found


def name_refusals(spec: StackSpec) -> list[SpecError]:
    """Resource names within AWS's limits and apart from each other."""
    return refusals_of(lambda: check_resource_names(spec))


def network_refusals(spec: StackSpec) -> list[SpecError]:
    """A created VPC's subnets fit it and each other."""
    if not isinstance(spec.cluster, CreateCluster):
        return []
    return refusals_of(lambda: check_network(spec.cluster.network, spec.region))


def _check_addon_pins(spec: StackSpec) -> None:
    """Every add-on is pinned for the cluster's minor; the refusal says where the minor stands in the EKS release
    calendar (eks_addons.json "calendar"), so a minor past its end of extended support is not pinned anew."""
    cluster = spec.cluster
    if not isinstance(cluster, CreateCluster):
        return
    pinned = eks_addon_versions()
    version = cluster.kubernetes_version
    if version in pinned:
        return
    window = eks_support_calendar().get(version)
    if window is None:
        standing = "the EKS release calendar in the catalog has no row for it"
    elif window.end_of_extended_support is None:
        standing = "EKS supports it, with no end date in the calendar yet"
    elif window.supported_on(date.today()):
        standing = f"EKS supports it until {window.end_of_extended_support.isoformat()}"
    else:
        standing = f"{version} left EKS extended support on {window.end_of_extended_support.isoformat()}"
    raise SpecError(
        "cluster.kubernetes_version",
        f"the add-on catalog pins no vpc-cni, CoreDNS, kube-proxy or Pod Identity agent versions for Kubernetes "
        f"{version} (it has {', '.join(pinned)}); {standing}",
        "use one of those versions, or add the minor's pins to components/catalog/eks_addons.json "
        "(from `aws eks describe-addon-versions --kubernetes-version <minor> --addon-name <name>`)",
    )


def _check_reservation_zone(spec: StackSpec, path: str, pool: NodePoolSpec) -> None:
    """A reservation is zonal and the pool's reserved nodes launch in its first zone (aws/node_pool.py: reserved
    and EFA groups use one zone); EC2 starts no instance against a reservation in another zone (EC2 User Guide,
    "Capacity Reservations": a reservation is for one instance type in one Availability Zone). A reservation is
    also regional: one in another region's zone backs nothing in this stack, whichever zone the pool lists first."""
    reservation = pool.capacity.reservation
    if reservation is None or reservation.availability_zone is None:
        return
    if reservation.availability_zone[:-1] != spec.region:
        raise SpecError(
            f"{path}.capacity.reservation.availability_zone",
            f"{reservation.id} is in {reservation.availability_zone}, outside the stack's region {spec.region}: "
            "EC2 launches no instance against a reservation in another region",
            f"use a reservation in {spec.region} (in one of its zones, such as {spec.region}a), or set region to "
            "the reservation's region",
        )
    if reservation.availability_zone not in region_zones()[spec.region]:
        raise SpecError(
            f"{path}.capacity.reservation.availability_zone",
            f"{reservation.availability_zone!r} is not an availability zone of {spec.region}",
            f"use the zone `aws ec2 describe-capacity-reservations --capacity-reservation-ids {reservation.id}` "
            f"reports, one of {quoted(region_zones()[spec.region])}",
        )
    zones = pool_zones(spec, pool)
    if zones and zones[0] != reservation.availability_zone:
        raise SpecError(
            f"{path}.capacity.reservation.availability_zone",
            f"{reservation.id} is in {reservation.availability_zone}, but the pool's reserved nodes launch in its "
            f"first zone, {zones[0]}",
            f"list {reservation.availability_zone} first in {path}.availability_zones",
        )


def _check_taints(path: str, pool: NodePoolSpec) -> None:
    seen_taints: set[tuple[str, str]] = set()
    for j, taint in enumerate(pool.taints):
        # A node's taints are unique by key and effect (k8s.io/kubernetes pkg/apis/core/validation
        # validateNodeTaints); every GPU pool already carries nvidia.com/gpu=true:NoSchedule.
        if (taint.key, taint.effect) in seen_taints or (taint.key, taint.effect) == (GPU_TAINT.key, GPU_TAINT.effect):
            raise SpecError(
                f"{path}.taints[{j}]",
                f"taint {taint.key}:{taint.effect} is already on the pool's nodes"
                + (f" (inferstack taints every GPU node {GPU_TAINT.key}={GPU_TAINT.value}:{GPU_TAINT.effect})"
                   if taint.key == GPU_TAINT.key else ""),
                "remove it, or give it another key or effect",
            )
        seen_taints.add((taint.key, taint.effect))


def _check_cluster_zones(spec: StackSpec, path: str, pool: NodePoolSpec) -> None:
    """A pool's zones are zones the cluster has subnets in."""
    zones = cluster_zones(spec)
    if zones is None:
        return
    for j, zone in enumerate(pool.availability_zones):
        if zone.startswith(spec.region) and zone not in zones:
            raise SpecError(
                f"{path}.availability_zones[{j}]",
                f"{zone!r} is not one of the cluster's zones {quoted(zones)}"
                + ("" if spec.cluster.network.availability_zones else " (the region's first three, by default)"),
                "pick zones from cluster.network.availability_zones, or add the zone there",
            )
