"""A node pool's own rules, from the spec and the hardware catalog: instance types the catalog knows and that
are interchangeable, node counts, reservations, EFA, the NVMe cache, GPU sharing, labels, zones and offerings."""

from __future__ import annotations

from inferstack.catalog import INSTANCE_TYPES, UnknownInstanceType, instance_type
from inferstack.catalog.offerings import region_zones, zone_names_are_shared, zones_offering
from inferstack.spec.checks import min_max, region_known
from inferstack.spec.errors import SpecError, did_you_mean, quoted, refusals_of
from inferstack.spec.node_pools import MigSharing, NodePoolSpec
from inferstack.spec.pools import PoolHardware
from inferstack.spec.stack import StackSpec

# Node labels the platform derives from gpu_sharing; a user label would fight the GPU operator.
RESERVED_LABELS = ("nvidia.com/mig.config", "nvidia.com/device-plugin.config")


def pool_refusals(spec: StackSpec, index: int) -> tuple[PoolHardware | None, list[SpecError]]:
    """A pool's own rules: its hardware (None when its instance types are unknown or not interchangeable, which
    every other rule of the pool reads) and the refusals found."""
    pool = spec.node_pools[index]
    path = f"node_pools[{index}]"
    try:
        hardware = _pool_hardware(path, pool)
    except SpecError as error:
        return None, [error]
    found = refusals_of(
        lambda: min_max(path, "min_nodes", pool.min_nodes, "max_nodes", pool.max_nodes),
        lambda: min_max(path, "capacity.on_demand_base", pool.capacity.on_demand_base, "max_nodes", pool.max_nodes),
        lambda: _check_reservation(path, hardware),
        lambda: _check_efa(path, hardware),
        lambda: _check_nvme(path, hardware),
        lambda: _check_sharing(path, hardware),
        lambda: _check_labels(path, pool),
    )
    if region_known(spec):
        found += refusals_of(lambda: _check_pool_region(spec, path, pool))
        found += _offering_refusals(spec, path, pool.instance_types)
        found += _zone_offering_refusals(spec, path, pool)
    return hardware, found


def _pool_hardware(path: str, pool: NodePoolSpec) -> PoolHardware:
    for j, name in enumerate(pool.instance_types):
        try:
            instance_type(name)
        except UnknownInstanceType:
            raise SpecError(
                f"{path}.instance_types[{j}]",
                f"{name!r} is not a GPU instance type inferstack knows{did_you_mean(name, INSTANCE_TYPES)}",
                "use one of the catalog's types (g5, g6, g6e, p4d, p4de, p5, p5e, p5en, p6-b200 sizes)",
            ) from None
    hardware = PoolHardware(pool)
    first = hardware.primary
    for j, other in enumerate(hardware.instance_types[1:], start=1):
        if (other.gpu.name, other.gpu_count) != (first.gpu.name, first.gpu_count):
            raise SpecError(
                f"{path}.instance_types[{j}]",
                f"{other.name} has {other.gpu_count}x {other.gpu.name} but {first.name} has "
                f"{first.gpu_count}x {first.gpu.name}; a pool's types must be interchangeable",
                "put instance types with a different GPU model or count in their own pool",
            )
    return hardware


def _check_reservation(path: str, hardware: PoolHardware) -> None:
    pool = hardware.spec
    if pool.capacity.reservation is None:
        return
    if pool.capacity.on_demand_base == 0:
        raise SpecError(
            f"{path}.capacity.on_demand_base",
            "a reservation backs on-demand nodes but on_demand_base is 0",
            "set on_demand_base to the number of reserved instances",
        )
    if pool.capacity.reservation.kind == "capacity_block":
        for t in hardware.instance_types:
            if "capacity-block" not in t.usage_classes:
                raise SpecError(
                    f"{path}.capacity.reservation.kind",
                    f"{t.name} is not sold as an EC2 Capacity Block",
                    "use a p-family type (p4d, p4de, p5, p5e, p5en, p6-b200) or kind 'odcr'",
                )


def _check_labels(path: str, pool: NodePoolSpec) -> None:
    for key in pool.labels:
        if key in RESERVED_LABELS or key.startswith("inferstack.dev/"):
            raise SpecError(
                f"{path}.labels",
                f"label {key!r} is set by inferstack from gpu_sharing and the pool name",
                "remove it and describe the sharing in gpu_sharing",
            )


def _check_pool_region(spec: StackSpec, path: str, pool: NodePoolSpec) -> None:
    for j, zone in enumerate(pool.availability_zones):
        if not zone.startswith(spec.region):
            raise SpecError(
                f"{path}.availability_zones[{j}]",
                f"{zone!r} is not in region {spec.region}",
                f"use zones such as {spec.region}a",
            )


def _offering_refusals(spec: StackSpec, path: str, types: list[str]) -> list[SpecError]:
    """EC2 launches no node of a type its region does not offer (each such type of the pool).

    Zone by zone the data is one account's view; `_zone_offering_refusals` refuses a zone only where that view
    holds for every account.
    """
    found = []
    for j, name in enumerate(types):
        if not zones_offering(spec.region, name):
            elsewhere = sorted(r for r in region_zones() if zones_offering(r, name))
            found.append(SpecError(
                f"{path}.instance_types[{j}]",
                f"{name} is not offered in {spec.region} (EC2 offers it in {', '.join(elsewhere) or 'no region'})",
                "pick an instance type the region offers, or a region that offers this one",
            ))
    return found


def _zones_lacking(spec: StackSpec, pool: NodePoolSpec) -> tuple[list[str], list[str], list[tuple[int, str]]]:
    """(types the region offers, the zones offering them, (index, zone) of each named zone offering none of them)
    in the catalog's zone-by-zone data."""
    offered = {name: zones_offering(spec.region, name) for name in pool.instance_types}
    offered = {name: zones for name, zones in offered.items() if zones}
    offering = sorted({zone for zones in offered.values() for zone in zones})
    known = region_zones().get(spec.region, {})
    lacking = [(j, zone) for j, zone in enumerate(pool.availability_zones) if zone in known and zone not in offering]
    return list(offered), offering, lacking if offered else []


def zone_offering_doubt(spec: StackSpec, pool: NodePoolSpec) -> str | None:
    """Where zone names map per account, what the plan says of a named zone the recorded account's offerings lack:
    it may be right or wrong in the user's account, and the command that tells."""
    if zone_names_are_shared(spec.region):
        return None
    types, offering, lacking = _zones_lacking(spec, pool)
    if not lacking:
        return None
    zones = ", ".join(zone for _, zone in lacking)
    return (f"{zones} offer{'s' if len(lacking) == 1 else ''} no {', '.join(types)} in the account EC2's offering data "
            f"was read from (it offers them in {', '.join(offering)}), and zone names map to zones per account in "
            f"{spec.region}: check yours with `aws ec2 describe-instance-type-offerings --region {spec.region} "
            f"--location-type availability-zone --filters Name=instance-type,Values={types[0]}`")


def _zone_offering_refusals(spec: StackSpec, path: str, pool: NodePoolSpec) -> list[SpecError]:
    """EC2 launches none of the pool's nodes in a zone it names that offers none of its types (the region's
    offered types only: the others are refused at instance_types). Only in regions whose zone names mean the
    same zone in every account: elsewhere the catalog's zone-by-zone data is one account's and proves nothing."""
    if not zone_names_are_shared(spec.region):
        return []   # zone_offering_doubt says so in the plan instead
    offered, offering, lacking = _zones_lacking(spec, pool)
    types = ", ".join(offered)
    return [
        SpecError(
            f"{path}.availability_zones[{j}]",
            f"EC2 offers {types} in {spec.region} only in {', '.join(offering)}, not in {zone} (zone names mean "
            f"the same zone in every account in {spec.region})",
            f"use {' or '.join(offering)} instead, or an instance type that {zone} offers",
        )
        for j, zone in lacking
    ]


def _check_efa(path: str, hardware: PoolHardware) -> None:
    if not hardware.spec.efa.enabled:
        return
    for j, t in enumerate(hardware.instance_types):
        if not t.efa_supported:
            efa_types = sorted(n for n, it in INSTANCE_TYPES.items() if it.efa_supported and it.gpu == t.gpu)
            raise SpecError(
                f"{path}.instance_types[{j}]",
                f"{t.name} does not support EFA",
                f"turn efa off for this pool or use an EFA type with the same GPU, e.g. {quoted(efa_types[:3])}",
            )
    cards = {t.name: t.network_cards for t in hardware.instance_types}
    if len(set(cards.values())) > 1:
        listing = ", ".join(f"{n} has {c}" for n, c in cards.items())
        raise SpecError(
            f"{path}.instance_types",
            f"EFA pools need one network card count for the launch template's interfaces, but {listing}",
            "split these instance types into separate pools",
        )
    efa = hardware.spec.efa
    if efa.placement_group is not None and efa.create_placement_group:
        raise SpecError(
            f"{path}.efa.placement_group",
            f"an existing placement group {efa.placement_group!r} is named and create_placement_group is true",
            "set create_placement_group to false to use the existing group, or drop placement_group",
        )
    _check_efa_placement(path, hardware.spec)


def _check_efa_placement(path: str, pool: NodePoolSpec) -> None:
    """The mandatory `efa-placement-and-security-group` policy (policies/network.py) refuses an EFA launch
    template with no placement group and no capacity reservation. A pool without a placement group (neither
    created nor named) has such a template for every node a reservation does not back: all of them without a
    reservation, and the burst above `on_demand_base` with one (aws/node_pool.py: burst groups use a template
    without the reservation target; planning/node_groups.py sizes the burst max_nodes - on_demand_base)."""
    efa = pool.efa
    if efa.create_placement_group or efa.placement_group is not None:
        return
    reservation = pool.capacity.reservation
    if reservation is None:
        raise SpecError(
            f"{path}.efa.create_placement_group",
            "false with no efa.placement_group and no capacity reservation: the pool's EFA nodes would launch "
            "in no cluster placement group, which the mandatory efa-placement-and-security-group policy refuses",
            "set create_placement_group to true, name an existing cluster placement group in efa.placement_group, "
            "or back the pool with a capacity reservation or block",
        )
    burst = pool.max_nodes - pool.capacity.on_demand_base
    if burst > 0:
        raise SpecError(
            f"{path}.efa.create_placement_group",
            f"false with no efa.placement_group: the reservation backs {pool.capacity.on_demand_base} node"
            f"{'s' if pool.capacity.on_demand_base != 1 else ''}, but the {burst} burst node{'s' if burst != 1 else ''} "
            f"above it (max_nodes {pool.max_nodes}) would launch in no cluster placement group, which the "
            "mandatory efa-placement-and-security-group policy refuses",
            f"set create_placement_group to true, name an existing cluster placement group in efa.placement_group, "
            f"or lower max_nodes to on_demand_base ({pool.capacity.on_demand_base})",
        )


def _check_nvme(path: str, hardware: PoolHardware) -> None:
    cache = hardware.spec.nvme_cache
    if not cache.enabled:
        return
    if hardware.spec.ami_type != "AL2023_x86_64_NVIDIA":
        raise SpecError(
            f"{path}.nvme_cache",
            f"the NVMe cache is assembled by AL2023's nodeadm; {hardware.spec.ami_type} is not supported",
            "use ami_type AL2023_x86_64_NVIDIA or set nvme_cache to false",
        )
    for j, t in enumerate(hardware.instance_types):
        if not t.has_instance_store:
            raise SpecError(
                f"{path}.instance_types[{j}]",
                f"{t.name} has no NVMe instance store for the model cache",
                "set nvme_cache to false for this pool or pick a type with instance store",
            )
        if cache.raid == "RAID10" and t.nvme_count < 4:
            raise SpecError(
                f"{path}.nvme_cache.raid",
                f"RAID10 needs at least 4 NVMe disks but {t.name} has {t.nvme_count}",
                "use RAID0",
            )


def _check_sharing(path: str, hardware: PoolHardware) -> None:
    sharing = hardware.spec.gpu_sharing
    gpu = hardware.gpu
    if isinstance(sharing, MigSharing):
        if not gpu.mig_capable:
            raise SpecError(
                f"{path}.gpu_sharing.mode",
                f"{gpu.name} ({hardware.primary.name}) does not support MIG",
                "use time_slicing or mps on this GPU, or an A100/H100/H200/B200 instance type for MIG",
            )
        compute = memory = 0
        for profile_name, count in sharing.layout.items():
            profile = gpu.mig_profile(profile_name)
            if profile is None:
                raise SpecError(
                    f"{path}.gpu_sharing.layout.{profile_name}",
                    f"{profile_name!r} is not a MIG profile of {gpu.name}"
                    f"{did_you_mean(profile_name, [p.name for p in gpu.mig_profiles])}",
                    f"use profiles of {gpu.name}: {quoted(p.name for p in gpu.mig_profiles)}",
                )
            if profile_name.endswith("+me"):
                raise SpecError(
                    f"{path}.gpu_sharing.layout.{profile_name}",
                    f"{profile_name!r} is a media-extension profile (video engines), which adds nothing for "
                    "model serving and has no Kubernetes resource name the device plugin can advertise",
                    f"use {profile_name.removesuffix('+me')!r}",
                )
            if count > profile.max_count:
                raise SpecError(
                    f"{path}.gpu_sharing.layout.{profile_name}",
                    f"{count} x {profile_name} but a {gpu.name} holds at most {profile.max_count}",
                    f"use at most {profile.max_count}",
                )
            compute += profile.compute_slices * count
            memory += profile.memory_slices * count
        if compute > gpu.mig_compute_slices or memory > gpu.mig_memory_slices:
            raise SpecError(
                f"{path}.gpu_sharing.layout",
                f"the layout needs {compute} compute and {memory} memory slices but a {gpu.name} has "
                f"{gpu.mig_compute_slices} and {gpu.mig_memory_slices}",
                "drop or shrink slices until they fit one GPU",
            )
        if sharing.strategy == "single" and len(sharing.layout) > 1:
            raise SpecError(
                f"{path}.gpu_sharing.strategy",
                f"strategy 'single' advertises every slice as nvidia.com/gpu, so the layout must use one profile, "
                f"not {quoted(sharing.layout)}",
                "use strategy 'mixed' or a single profile",
            )
