"""Cross-field rules of the stack spec: each failure names the field path, the value and the fix.

They run inside `StackSpec` validation, so an invalid spec never reaches the Pulumi program.
"""

from __future__ import annotations

import ipaddress
import math
from collections import Counter
from collections.abc import Iterable

from inferstack.catalog import INSTANCE_TYPES, UnknownInstanceType, instance_type
from inferstack.aws.node_template import GPU_TAINT
from inferstack.catalog.all2all_backends import ALL2ALL_BACKENDS
from inferstack.catalog.karpenter import NEWEST_KUBERNETES
from inferstack.catalog.charts import cluster_autoscaler_image_tags, eks_addon_versions
from inferstack.catalog.models import MODELS, known_model_ids, model_facts
from inferstack.catalog.offerings import ec2_instance_types, region_zones, zones_offering
from inferstack.spec.capacity import check_minimum_capacity
from inferstack.spec.cluster_access import check_cluster_access
from inferstack.spec.cron import schedule_problem, time_zone_problem
from inferstack.spec.errors import SpecError, did_you_mean, quoted
from inferstack.spec.models import (
    NAME_MAX_LENGTH,
    AUTO,
    SIXTEEN_BIT,
    BatchJobSpec,
    catalog_stored_format,
    ModelServiceSpec,
    CreateCluster,
    MigSharing,
    MpsSharing,
    NodePoolSpec,
    StackSpec,
    TimeSlicing,
)
from inferstack.spec.pools import WHOLE_GPU, PoolHardware

# Node labels the platform derives from gpu_sharing; a user label would fight the GPU operator.
RESERVED_LABELS = ("nvidia.com/mig.config", "nvidia.com/device-plugin.config")


def check_stack(spec: StackSpec) -> tuple[ModelServiceSpec, ...]:
    """Check the whole stack; return its model services with any `auto` placement decided."""
    from inferstack.planning.auto_placement import resolve_models  # it sizes with the spec package loaded

    _unique_names(spec)
    _check_object_names(spec)
    _check_region(spec)
    _check_s3_uris(spec)
    _check_images(spec)
    pools = {p.name: _check_pool(spec, i) for i, p in enumerate(spec.node_pools)}
    _check_gpu_operator(spec)
    _check_karpenter_repair(spec)
    _check_cluster(spec)
    for i in range(len(spec.models)):
        _check_auto_fields(spec, i, pools)
        _check_quantization(spec, i)
    from inferstack.planning.disaggregation import expand as expand_engines, prefill_engine

    models = resolve_models(spec, pools)
    for i, model in enumerate(models):
        _check_model(spec, f"models[{i}]", model, pools)
        if model.disaggregation is not None:
            _check_disaggregation(spec, f"models[{i}]", model, pools)
            _check_prefill_engine(spec, f"models[{i}]", prefill_engine(model), pools)
    models = expand_engines(models)
    _check_workers(spec, models)
    _check_queues(spec, pools)
    check_minimum_capacity(spec, models, pools)
    _check_zones_exist(spec)  # before the network layout, which would only say a made-up zone has no address slot
    _check_aws_names(spec)
    from inferstack.planning.cost import check_budget  # cost reads the spec package

    check_budget(spec.model_copy(update={"models": list(models)}))  # its min scale sizes the resolved engines
    return models


def _check_aws_names(spec: StackSpec) -> None:
    """The AWS layer's naming and subnet rules, checked here so a bad spec stops before anything is created."""
    from inferstack.aws.foundation import check_resource_names
    from inferstack.aws.network import check_network

    check_resource_names(spec)
    if isinstance(spec.cluster, CreateCluster):
        check_network(spec.cluster.network, spec.region)


def _check_object_names(spec: StackSpec) -> None:
    """Kubernetes names derived from the spec's names, ours and those controllers derive, never clash."""
    from inferstack.serving.names import check_object_names

    check_object_names(spec)


def _check_auto_fields(spec: StackSpec, index: int, pools: dict[str, PoolHardware]) -> None:
    """What auto placement needs before it runs: a named pool exists, an `auto` MIG profile has a MIG pool."""
    model = spec.models[index]
    if model.disaggregation is not None and AUTO in (model.pool, model.tensor_parallel):
        field = "pool" if model.pool == AUTO else "tensor_parallel"
        raise SpecError(
            f"models[{index}].{field}",
            "'auto' places one engine, but a disaggregated service's decode role is sized against its prefill "
            "role's EFA pool and tensor parallelism",
            f"name the decode role's {field} (an EFA pool, a tensor_parallel the prefill role's divides)",
        )
    if model.pool != AUTO and model.pool not in pools:
        raise SpecError(
            f"models[{index}].pool",
            f"{model.pool!r} is not a node pool{did_you_mean(model.pool, pools)}; defined pools: {quoted(pools)}",
            "set pool to one of them, to 'auto', or add a node pool with that name",
        )
    if model.architecture is None and model_facts(model.model) is None:
        raise SpecError(
            f"models[{index}].model",
            f"{model.model!r} is not in the model catalog{did_you_mean(model.model, known_model_ids())}",
            "add `architecture` (params_billion, layers, hidden_size, attention_heads, kv_heads, head_dim, "
            "max_context) to the service, or use a catalog model",
        )


def _check_quantization(spec: StackSpec, index: int) -> None:
    """The checkpoint's stored format is a fact; the service's quantization must be one vLLM can serve from it."""
    from inferstack.planning.quantization import describe, refusal

    model = spec.models[index]
    catalog = catalog_stored_format(model.model) or (SIXTEEN_BIT if model.model in MODELS else None)
    if model.checkpoint_format is not None and catalog is not None and model.checkpoint_format != catalog:
        raise SpecError(
            f"models[{index}].checkpoint_format",
            f"{model.model} is in the model catalog as a {describe(catalog)} checkpoint, not "
            f"{describe(model.checkpoint_format)}",
            "drop checkpoint_format: the catalog states how this checkpoint is stored",
        )
    found = refusal(model)
    if found is not None:
        raise SpecError(f"models[{index}].quantization", f"{model.quantization!r}: {found.problem}", found.fix)


def _unique_names(spec: StackSpec) -> None:
    groups = {
        "node_pools": [p.name for p in spec.node_pools],
        "models": [m.name for m in spec.models],
        "workers": [w.name for w in spec.workers],
        "batch_jobs": [j.name for j in spec.batch_jobs],
        "queues.cluster_queues": [q.name for q in spec.queues.cluster_queues],
        "queues.priorities": [p.name for p in spec.queues.priorities],
    }
    for field, names in groups.items():
        for name, count in Counter(names).items():
            if count > 1:
                index = [i for i, n in enumerate(names) if n == name][1]
                raise SpecError(f"{field}[{index}].name", f"{name!r} is used {count} times", "give each entry its own name")


def _min_max(path: str, low_name: str, low: int, high_name: str, high: int) -> None:
    if low > high:
        raise SpecError(
            f"{path}.{low_name}",
            f"{low_name} {low} can't be greater than {high_name} {high}",
            f"lower {low_name} or raise {high_name}",
        )


# ------------------------------------------------------------------------------------ region and zones


def _check_region(spec: StackSpec) -> None:
    """The region exists in EC2's offering data (catalog/ec2_offerings.json)."""
    regions = region_zones()
    if spec.region not in regions:
        raise SpecError(
            "region",
            f"{spec.region!r} is not an AWS region the EC2 offering catalog knows{did_you_mean(spec.region, regions)}",
            "use a commercial AWS region such as 'us-east-1', or add the region's offerings to "
            "components/catalog/ec2_offerings.json",
        )


def _check_zones_exist(spec: StackSpec) -> None:
    """Every zone the spec names in its region is one of the region's; a zone of another region is left to the
    network check, which names the region it belongs to."""
    zones = region_zones()[spec.region]
    named: list[tuple[str, str]] = []
    if isinstance(spec.cluster, CreateCluster):
        network = spec.cluster.network
        named += [(f"cluster.network.availability_zones[{j}]", zone) for j, zone in enumerate(network.availability_zones)]
        named += [(f"cluster.network.subnet_cidrs.{zone}", zone) for zone in network.subnet_cidrs]
    for i, pool in enumerate(spec.node_pools):
        named += [(f"node_pools[{i}].availability_zones[{j}]", zone) for j, zone in enumerate(pool.availability_zones)]
    for path, zone in named:
        if zone.startswith(spec.region) and zone not in zones:
            raise SpecError(
                path,
                f"{zone!r} is not an availability zone of {spec.region}{did_you_mean(zone, zones)}",
                f"use one of {quoted(zones)}",
            )


# -------------------------------------------------------------------------------------------- images


def _check_images(spec: StackSpec) -> None:
    """An image the spec names moves with no tag or a channel tag ('latest', 'main', ...): refused here, with its
    field, by the same rule the policy pack's images-pinned applies to what is rendered (policies/pinning.py)."""
    from inferstack.policies.pinning import image_problem

    named = [(f"models[{i}].image", m.image) for i, m in enumerate(spec.models) if m.image is not None]
    named += [(f"workers[{i}].image", w.image) for i, w in enumerate(spec.workers)]
    for path, image in named:
        problem = image_problem(image)
        if problem is not None:
            raise SpecError(
                path,
                f"{image!r} {problem}, so a node that pulls it later may run other code than the one tested",
                "pin a release tag (e.g. vllm/vllm-openai:v0.33.0, python:3.13.1-slim) or a digest (@sha256:...)",
            )


# ------------------------------------------------------------------------------------------ S3 names

# Amazon S3 User Guide, "General purpose bucket naming rules"
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")
_RESERVED_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3")


def _bucket_name_problem(name: str) -> str | None:
    """Why S3 would refuse `name` as a general purpose bucket, or None."""
    if not 3 <= len(name) <= 63:
        return f"a bucket name is 3 to 63 characters long, and {name!r} has {len(name)}"
    if not set(name) <= _BUCKET_CHARS:
        bad = "".join(sorted(set(name) - _BUCKET_CHARS))
        return f"a bucket name has lower-case letters, digits, '.' and '-' only, and {name!r} has {bad!r}"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return f"a bucket name begins and ends with a letter or digit, and {name!r} does not"
    if ".." in name:
        return f"a bucket name has no two adjacent periods, and {name!r} has '..'"
    try:
        ipaddress.IPv4Address(name)
        return f"a bucket name is not formatted as an IP address, and {name!r} is one"
    except ValueError:
        pass
    for prefix in _RESERVED_BUCKET_PREFIXES:
        if name.startswith(prefix):
            return f"bucket names starting {prefix!r} are reserved by S3"
    for suffix in _RESERVED_BUCKET_SUFFIXES:
        if name.endswith(suffix):
            return f"bucket names ending {suffix!r} are reserved by S3 for access point and other aliases"
    return None


def _check_s3_uris(spec: StackSpec) -> None:
    """Every S3 URI names a bucket S3 allows; weights and batch input also name the key (prefix) under it."""
    uris = [(f"models[{i}].weights", m.weights, "the prefix holding the model's files, e.g. s3://my-bucket/models/"
             f"{m.name}/") for i, m in enumerate(spec.models) if m.weights is not None]
    for i, model in enumerate(spec.models):
        uris += [(f"models[{i}].lora_adapters[{j}].weights", adapter.weights, "the prefix holding the adapter's "
                  f"adapter_config.json, e.g. s3://my-bucket/adapters/{adapter.name}/")
                 for j, adapter in enumerate(model.lora_adapters)]
        if model.speculative is not None and model.speculative.weights is not None:
            uris.append((f"models[{i}].speculative.weights", model.speculative.weights,
                         "the prefix holding the draft's config.json, e.g. s3://my-bucket/drafts/eagle3/"))
    for i, job in enumerate(spec.batch_jobs):
        uris.append((f"batch_jobs[{i}].input", job.input, "the JSONL object, e.g. s3://my-bucket/batch/input.jsonl"))
        uris.append((f"batch_jobs[{i}].output", job.output, None))
    for path, uri, key_example in uris:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        problem = _bucket_name_problem(bucket)
        if problem:
            raise SpecError(path, f"{uri!r} names no valid bucket: {problem}", "write s3://<bucket>/<key> with the "
                            "bucket's real name")
        if key_example and not key.strip("/"):
            raise SpecError(path, f"{uri!r} names a bucket but no key", f"add the key: {key_example}")
    existing = spec.weights.existing_bucket
    if existing is not None and (problem := _bucket_name_problem(existing)):
        raise SpecError("weights.existing_bucket", problem, "give the bucket's name alone, without s3:// or a key")


# ----------------------------------------------------------------------------------------------- pools


def _check_pool(spec: StackSpec, index: int) -> PoolHardware:
    pool = spec.node_pools[index]
    path = f"node_pools[{index}]"
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
    _min_max(path, "min_nodes", pool.min_nodes, "max_nodes", pool.max_nodes)
    _min_max(path, "capacity.on_demand_base", pool.capacity.on_demand_base, "max_nodes", pool.max_nodes)
    if pool.capacity.reservation is not None:
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
    _check_reservation_zone(spec, path, pool)
    _check_efa(path, hardware)
    _check_nvme(path, hardware)
    if spec.platform.karpenter:
        _check_karpenter_pool(path, hardware)
    _check_sharing(path, hardware)
    for key in pool.labels:
        if key in RESERVED_LABELS or key.startswith("inferstack.dev/"):
            raise SpecError(
                f"{path}.labels",
                f"label {key!r} is set by inferstack from gpu_sharing and the pool name",
                "remove it and describe the sharing in gpu_sharing",
            )
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
    for j, zone in enumerate(pool.availability_zones):
        if not zone.startswith(spec.region):
            raise SpecError(
                f"{path}.availability_zones[{j}]",
                f"{zone!r} is not in region {spec.region}",
                f"use zones such as {spec.region}a",
            )
    zones = _cluster_zones(spec)
    if zones is not None:
        for j, zone in enumerate(pool.availability_zones):
            if zone not in zones:
                raise SpecError(
                    f"{path}.availability_zones[{j}]",
                    f"{zone!r} is not one of the cluster's zones {quoted(zones)}"
                    + ("" if spec.cluster.network.availability_zones else " (the region's first three, by default)"),
                    "pick zones from cluster.network.availability_zones, or add the zone there",
                )
    _check_offerings(spec, path, pool.instance_types)
    return hardware


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _check_karpenter_pool(path: str, hardware: PoolHardware) -> None:
    """What Karpenter can launch for: it sizes a node from the instance type's own resources (nvidia.com/gpu),
    so a pod asking for a MIG profile or a renamed GPU share never gets a node (the resources exist only once the
    GPU operator runs there; Karpenter's NodeOverlay, which would declare them, is alpha: shared/reference/
    karpenter.md sections 2 and 5). MIG strategy single advertises its slices as nvidia.com/gpu, which Karpenter
    sees, though it counts the instance's GPUs, not the slices: it may launch a node too many for a burst, which
    consolidates once empty."""
    pool = hardware.spec
    hidden = sorted(set(hardware.resources_per_node) - {WHOLE_GPU})
    if hidden:
        raise SpecError(
            f"{path}.gpu_sharing",
            f"pool {pool.name!r} advertises {', '.join(hidden)}, which Karpenter cannot see on an instance type "
            "before the node exists, so pods asking for it would never get a node",
            "use MIG strategy 'single' (slices advertised as nvidia.com/gpu), whole GPUs (gpu_sharing mode 'none'), "
            "or platform.node_autoscaler 'cluster-autoscaler'",
        )


def _cluster_zones(spec: StackSpec) -> list[str] | None:
    """The zones a created cluster's subnets are in (None when subnets exist already: the AWS layer checks those)."""
    from inferstack.aws.network import default_zones

    cluster = spec.cluster
    if not isinstance(cluster, CreateCluster) or cluster.network.existing_subnet_ids:
        return None
    return cluster.network.availability_zones or default_zones(spec.region)


def _check_offerings(spec: StackSpec, path: str, types: list[str]) -> None:
    """EC2 launches no node of a type its region does not offer.

    Zone by zone the data is one account's view: zone names map to physical zones per account in the older
    regions, so a type missing from a zone name there is not refused.
    """
    for j, name in enumerate(types):
        if not zones_offering(spec.region, name):
            elsewhere = sorted(r for r in region_zones() if zones_offering(r, name))
            raise SpecError(
                f"{path}.instance_types[{j}]",
                f"{name} is not offered in {spec.region} (EC2 offers it in {', '.join(elsewhere) or 'no region'})",
                "pick an instance type the region offers, or a region that offers this one",
            )


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


def _check_gpu_operator(spec: StackSpec) -> None:
    """The GPU operator sets one MIG strategy for every node, and its device plugin refuses MPS under 'mixed'."""
    mig = [(i, p) for i, p in enumerate(spec.node_pools) if isinstance(p.gpu_sharing, MigSharing)]
    if not mig:
        return
    _, first = mig[0]
    strategy = first.gpu_sharing.strategy
    for i, pool in mig[1:]:
        if pool.gpu_sharing.strategy != strategy:
            raise SpecError(
                f"node_pools[{i}].gpu_sharing.strategy",
                f"the GPU operator applies one MIG strategy to the whole cluster, but pool {first.name!r} uses "
                f"{strategy!r} and pool {pool.name!r} uses {pool.gpu_sharing.strategy!r}",
                f"use the same strategy on every MIG pool, e.g. {strategy!r}",
            )
    if strategy == "mixed":
        for i, pool in enumerate(spec.node_pools):
            if isinstance(pool.gpu_sharing, MpsSharing):
                raise SpecError(
                    f"node_pools[{i}].gpu_sharing.mode",
                    f"the NVIDIA device plugin refuses MPS when the cluster's MIG strategy is 'mixed' "
                    f"(set by pool {first.name!r})",
                    "use time_slicing on this pool, or strategy 'single' on the MIG pools",
                )


# ---------------------------------------------------------------------------------------------- cluster


def _check_cluster(spec: StackSpec) -> None:
    cluster = spec.cluster
    if not isinstance(cluster, CreateCluster):
        return
    _min_max("cluster.system_nodes", "min_nodes", cluster.system_nodes.min_nodes, "max_nodes", cluster.system_nodes.max_nodes)
    system_type = cluster.system_nodes.instance_type
    if system_type not in ec2_instance_types():
        raise SpecError(
            "cluster.system_nodes.instance_type",
            f"{system_type!r} is not an EC2 instance type{did_you_mean(system_type, ec2_instance_types())}",
            "use an EC2 type such as 'm7i.xlarge' (see `aws ec2 describe-instance-types`)",
        )
    check_cluster_access(cluster)
    pinned = eks_addon_versions()
    if cluster.kubernetes_version not in pinned:
        raise SpecError(
            "cluster.kubernetes_version",
            f"the add-on catalog pins no vpc-cni, CoreDNS, kube-proxy or Pod Identity agent versions for Kubernetes "
            f"{cluster.kubernetes_version} (it has {', '.join(pinned)})",
            "use one of those versions, or add the minor's pins to components/catalog/eks_addons.json",
        )
    tags = cluster_autoscaler_image_tags()
    if spec.platform.node_autoscaler == "cluster-autoscaler" and cluster.kubernetes_version not in tags:
        raise SpecError(
            "cluster.kubernetes_version",
            f"the chart catalog has no cluster-autoscaler image for Kubernetes {cluster.kubernetes_version} "
            f"(it has {', '.join(tags)})",
            "use one of those versions, add the image to components/catalog/charts.json, "
            "or set platform.node_autoscaler to 'none'",
        )
    if spec.platform.karpenter and _minor(cluster.kubernetes_version) > _minor(NEWEST_KUBERNETES):
        raise SpecError(
            "cluster.kubernetes_version",
            f"the pinned Karpenter supports Kubernetes up to {NEWEST_KUBERNETES} (its compatibility table, "
            "shared/reference/karpenter.md section 1)",
            f"use {NEWEST_KUBERNETES} or older, or pin a newer Karpenter in components/catalog/charts.json",
        )
    for j, zone in enumerate(cluster.network.availability_zones):
        if not zone.startswith(spec.region):
            raise SpecError(
                f"cluster.network.availability_zones[{j}]",
                f"{zone!r} is not in region {spec.region}",
                f"use zones such as {spec.region}a",
            )


# ----------------------------------------------------------------------------------------------- models


def _check_model(spec: StackSpec, path: str, model: ModelServiceSpec, pools: dict[str, PoolHardware]) -> None:
    hardware = pools[model.pool]
    max_context = model.resolved_architecture.max_context
    if model.max_model_len > max_context:
        raise SpecError(
            f"{path}.max_model_len",
            f"{model.max_model_len} is longer than {model.model}'s context of {max_context} tokens",
            f"set max_model_len to {max_context} or less",
        )
    if model.slo is not None and model.traffic is None:
        raise SpecError(
            f"{path}.slo",
            "an slo is measured at a load, but the service states no traffic",
            "add traffic (requests_per_second and mean token counts) or remove the slo",
        )
    if model.traffic is not None and (
        model.traffic.mean_input_tokens + model.traffic.mean_output_tokens > model.max_model_len
    ):
        traffic = model.traffic
        raise SpecError(
            f"{path}.traffic",
            f"a mean request of {traffic.mean_input_tokens} + {traffic.mean_output_tokens} tokens is longer than "
            f"max_model_len {model.max_model_len}, which vLLM refuses",
            f"raise max_model_len to {traffic.mean_input_tokens + traffic.mean_output_tokens} or more, or state the "
            "traffic's real mean lengths",
        )
    if model.traffic is not None and model.traffic.shared_prefix_tokens and not model.enable_prefix_caching:
        raise SpecError(
            f"{path}.traffic.shared_prefix_tokens",
            f"{model.traffic.shared_prefix_tokens} shared tokens are recomputed for every request with "
            "enable_prefix_caching false",
            "set enable_prefix_caching to true, or shared_prefix_tokens to 0",
        )
    _check_placement(spec, path, model, hardware)
    _check_experts_layout(path, model, hardware)
    _check_serving_features(path, model, hardware)
    _check_engine_limits(path, model, hardware)
    _check_efa_image(path, model, hardware)
    from inferstack.planning.fit_refusal import check_fit  # it imports the spec package; import once that is loaded

    check_fit(path, model, hardware)
    _check_cache_budget(path, model, hardware)
    scaling = model.autoscaling
    _min_max(f"{path}.autoscaling", "min_replicas", scaling.min_replicas, "max_replicas", scaling.max_replicas)
    if scaling.min_replicas == 0 and not scaling.scale_to_zero:
        raise SpecError(
            f"{path}.autoscaling.min_replicas",
            "min_replicas is 0 but scale_to_zero is false",
            "set min_replicas to 1 or more, or set scale_to_zero to true",
        )
    if scaling.scale_to_zero and scaling.min_replicas > 0:
        raise SpecError(
            f"{path}.autoscaling.scale_to_zero",
            f"scale_to_zero is true but min_replicas is {scaling.min_replicas}",
            "set min_replicas to 0, or scale_to_zero to false",
        )
    _check_scaling_room(path, model, hardware)
    if scaling.metric == "kv_cache" and scaling.target is not None and scaling.target > 1:
        raise SpecError(
            f"{path}.autoscaling.target",
            f"{scaling.target:g} is above 1, but vllm:kv_cache_usage_perc is a fraction (1 means 100 percent), so the "
            "service would never scale out",
            f"give the target as a fraction, e.g. {min(scaling.target / 100, 1):g} for {scaling.target:g} percent",
        )
    if scaling.max_replicas > scaling.min_replicas and not spec.platform.keda:
        raise SpecError(
            f"{path}.autoscaling",
            "autoscaling needs KEDA but platform.keda is false",
            "set platform.keda to true or min_replicas equal to max_replicas",
        )
    if scaling.metric == "epp_queue" and not spec.gateway.enabled:
        raise SpecError(
            f"{path}.autoscaling.metric",
            "'epp_queue' reads the endpoint picker's queue but the gateway is disabled",
            "use metric 'queue_depth' or enable the gateway",
        )
    if model.tier not in {p.name for p in spec.queues.priorities} and spec.queues.enabled:
        raise SpecError(
            f"{path}.tier",
            f"tier {model.tier!r} has no WorkloadPriorityClass of that name in queues.priorities",
            f"add a priority named {model.tier!r} to queues.priorities",
        )


def _check_disaggregation(spec: StackSpec, path: str, model: ModelServiceSpec, pools: dict[str, PoolHardware]) -> None:
    """A disaggregated service: a prefill pool that exists, a name its prefill engines can take, the gateway's
    picker to split requests, and none of the layouts under which NIXL fails or falls back to TCP
    (planning/disaggregation.py names the upstream rules); both roles in one zone, where EFA reaches."""
    from inferstack.planning.disaggregation import prefill_engine, problem as problem_of_disaggregation
    from inferstack.serving.transport import image_carries_efa

    role = model.disaggregation.prefill
    if role.pool is not None and role.pool not in pools:
        raise SpecError(f"{path}.disaggregation.prefill.pool", f"no node pool is named {role.pool!r}",
                        f"use one of {quoted(sorted(pools))}")
    engine = prefill_engine(model)
    if len(engine.name) > NAME_MAX_LENGTH or engine.name in {m.name for m in spec.models}:
        raise SpecError(f"{path}.name", f"its prefill engines would be named {engine.name!r}, which is "
                        f"{'taken' if len(engine.name) <= NAME_MAX_LENGTH else f'over {NAME_MAX_LENGTH} characters'}",
                        "give the service a shorter name of its own")
    if not spec.gateway.enabled:
        raise SpecError(f"{path}.disaggregation", "prefill/decode needs the gateway's endpoint picker to send "
                        "prompts to prefill engines, and the gateway is disabled", "enable the gateway")
    if role.autoscaling.metric == "epp_queue":
        raise SpecError(f"{path}.disaggregation.prefill.autoscaling.metric", "'epp_queue' is the service's picker "
                        "queue, which the decode role scales on; prefill engines have none of their own",
                        "scale the prefill role on 'queue_depth' or 'kv_cache'")
    decode, prefill = pools[model.pool], pools[engine.pool]
    found = problem_of_disaggregation(model, decode, prefill, image_carries_efa(model, decode))
    if found is not None:
        field, what, fix = found
        raise SpecError(f"{path}.{field}", what, fix)
    zones = {hardware.spec.name: _pool_zones(spec, hardware.spec) for hardware in (decode, prefill)}
    if all(zones.values()) and zones[decode.spec.name][0] != zones[prefill.spec.name][0]:
        raise SpecError(
            f"{path}.disaggregation.prefill.pool",
            f"the prefill role's EFA pool {prefill.spec.name!r} is in {zones[prefill.spec.name][0]} and the decode "
            f"role's {decode.spec.name!r} in {zones[decode.spec.name][0]}: EFA does not cross zones, so the KV cache "
            "would move over TCP",
            "give both pools the same first availability zone, or put both roles on one pool",
        )


def _check_karpenter_repair(spec: StackSpec) -> None:
    """Karpenter's node repair is one feature gate for the whole controller (settings.featureGates.nodeRepair,
    shared/reference/karpenter.md section 8), so under Karpenter every pool is repaired or none is."""
    if not spec.platform.karpenter or len({pool.auto_repair for pool in spec.node_pools}) < 2:
        return
    repaired = next(pool.name for pool in spec.node_pools if pool.auto_repair)
    index, pool = next((i, p) for i, p in enumerate(spec.node_pools) if not p.auto_repair)
    raise SpecError(
        f"node_pools[{index}].auto_repair",
        f"false, but Karpenter's node repair is one switch for the controller: with {repaired!r} repaired, the "
        f"nodes of {pool.name!r} would be replaced too",
        "set auto_repair the same on every pool, or use platform.node_autoscaler 'cluster-autoscaler', whose node "
        "groups are repaired one by one",
    )


def _check_reservation_zone(spec: StackSpec, path: str, pool: NodePoolSpec) -> None:
    """A reservation is zonal and the pool's reserved nodes launch in its first zone (aws/node_pool.py: reserved
    and EFA groups use one zone); EC2 starts no instance against a reservation in another zone (EC2 User Guide,
    "Capacity Reservations": a reservation is for one instance type in one Availability Zone)."""
    reservation = pool.capacity.reservation
    if reservation is None or reservation.availability_zone is None:
        return
    zones = _pool_zones(spec, pool)
    if zones and zones[0] != reservation.availability_zone:
        raise SpecError(
            f"{path}.capacity.reservation.availability_zone",
            f"{reservation.id} is in {reservation.availability_zone}, but the pool's reserved nodes launch in its "
            f"first zone, {zones[0]}",
            f"list {reservation.availability_zone} first in {path}.availability_zones",
        )


def _check_prefill_engine(spec: StackSpec, path: str, engine: ModelServiceSpec, pools: dict[str, PoolHardware]) -> None:
    """The prefill engine's own checks, reported where the spec holds the field: the role's shape under
    disaggregation.prefill, everything it shares with the service on the service."""
    from inferstack.spec.models import PrefillSpec

    role = f"{path}.disaggregation.prefill"
    try:
        _check_model(spec, role, engine, pools)
    except SpecError as error:
        field = error.path.removeprefix(f"{role}.")
        if field.split(".")[0].split("[")[0] in PrefillSpec.model_fields:
            raise
        raise SpecError(f"{path}.{field}", f"its prefill engine: {error.problem}", error.fix) from None


def _pool_zones(spec: StackSpec, pool: NodePoolSpec) -> list[str] | None:
    """A pool's zones, its first one first (the one an EFA pool uses); None when the subnets exist already."""
    return list(pool.availability_zones) or _cluster_zones(spec)


def _check_serving_features(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """Speculative decoding, LoRA adapters and the host KV tier: what vLLM 0.33 would refuse at start, and what
    would not fit (planning/speculative.py, lora.py, kv_offload.py name the upstream rules)."""
    from inferstack.planning import kv_offload, lora, speculative
    from inferstack.planning.sizing import scheduler_defaults
    from inferstack.serving.pods import host_resources, shm_bytes

    _, memory = host_resources(model, hardware)
    found = (
        ("speculative", speculative.problem(model)),
        ("", lora.problem(model)),
        ("", kv_offload.problem(model, memory, shm_bytes(memory))),
    )
    for prefix, problem in found:
        if problem is not None:
            field, what, fix = problem
            raise SpecError(f"{path}.{prefix + '.' if prefix else ''}{field}", what, fix)
    if model.lora_adapters and model.speculative is not None:
        batched, seqs = scheduler_defaults(model, hardware)
        needed = seqs * (model.speculative.num_speculative_tokens + 1)
        if batched < needed:
            raise SpecError(
                f"{path}.max_num_batched_tokens",
                f"{batched} batched tokens are fewer than max_num_seqs {seqs} x (num_speculative_tokens "
                f"{model.speculative.num_speculative_tokens} + 1) = {needed}, which vLLM refuses with LoRA on",
                f"set max_num_batched_tokens to {needed} or more, or lower max_num_seqs",
            )


def _check_experts_layout(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """Data and expert parallelism only mean something for MoE layers, and expert parallelism's token exchange
    must reach every GPU of the replica (all2all_backends.json says which backend reaches how far)."""
    experts = model.resolved_architecture.experts
    if not experts and model.data_parallel > 1:
        raise SpecError(
            f"{path}.data_parallel",
            f"{model.model} is a dense model: data-parallel ranks of one replica share only MoE layers, so they "
            "would be separate engines that scale together",
            "set data_parallel to 1 and raise autoscaling replicas instead",
        )
    if not model.expert_parallel:
        return
    if not experts:
        raise SpecError(
            f"{path}.expert_parallel", f"{model.model} is a dense model with no experts to split", "set expert_parallel to false"
        )
    group = model.tensor_parallel * model.data_parallel
    if group == 1:
        raise SpecError(
            f"{path}.expert_parallel",
            "expert parallelism splits the experts over a replica's GPUs, and this replica has one",
            "raise tensor_parallel or data_parallel, or set expert_parallel to false",
        )
    if group > experts:
        raise SpecError(
            f"{path}.expert_parallel",
            f"{group} GPUs (tensor_parallel x data_parallel) share {experts} experts, so some would hold none",
            f"keep tensor_parallel x data_parallel at {experts} or less",
        )
    backend = model.all2all_exchange
    reach = ALL2ALL_BACKENDS[backend]
    if model.multi_node and not (reach.crosses_nodes and reach.crosses_efa):
        where = (
            "exchanges tokens over one node's NVLink" if not reach.crosses_nodes
            else "is not known to run between nodes over EFA"
        )
        raise SpecError(
            f"{path}.all2all_backend",
            f"{backend} {where}, but a replica spans {model.nodes_per_replica} nodes",
            "use 'deepep_v2' or 'allgather_reducescatter' (both cross nodes over EFA), or fit the replica on one node",
        )


def _check_engine_limits(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """vLLM 0.33 `SchedulerConfig.verify_max_model_len` (vllm/config/scheduler.py) refuses to start with these."""
    from inferstack.planning.sizing import scheduler_defaults

    tokens = model.max_num_batched_tokens
    generates = model.resolved_architecture.task == "generate"  # pooling models leave chunked prefill to vLLM
    if tokens is not None and generates and not model.enable_chunked_prefill and tokens < model.max_model_len:
        raise SpecError(
            f"{path}.max_num_batched_tokens",
            f"{tokens} is below max_model_len {model.max_model_len} with enable_chunked_prefill false, so a whole "
            "prompt cannot fit one scheduler step and vLLM refuses to start",
            f"raise max_num_batched_tokens to {model.max_model_len}, lower max_model_len, or enable chunked prefill",
        )
    if model.max_num_seqs is None:
        return  # vLLM lowers its default max_num_seqs to max_num_batched_tokens
    tokens, _ = scheduler_defaults(model, hardware)
    if tokens < model.max_num_seqs:
        stated = "" if model.max_num_batched_tokens is not None else " (vLLM's default on this GPU)"
        raise SpecError(
            f"{path}.max_num_batched_tokens" if model.max_num_batched_tokens is not None else f"{path}.max_num_seqs",
            f"max_num_batched_tokens {tokens}{stated} is below max_num_seqs {model.max_num_seqs}: every running "
            "sequence needs a token of each step, and vLLM refuses to start",
            f"raise max_num_batched_tokens to {model.max_num_seqs} or more, or lower max_num_seqs to {tokens}",
        )


def _replicas_held(model: ModelServiceSpec, hardware: PoolHardware, nodes: int) -> int:
    """The most replicas `nodes` of the pool hold with nothing else on them (a replica is nodes_per_replica pods)."""
    from inferstack.planning.pool_capacity import gpu_requests, replicas_held

    return replicas_held([(nodes, hardware.resources_per_node)], gpu_requests(model, hardware), model.nodes_per_replica)


def _check_scaling_room(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """Replicas the service asks for must fit the pool; an online service never scales to zero."""
    scaling, pool = model.autoscaling, hardware.spec
    most = _replicas_held(model, hardware, pool.max_nodes)
    if scaling.max_replicas > most:
        raise SpecError(
            f"{path}.autoscaling.max_replicas",
            f"{scaling.max_replicas} replicas, but pool {pool.name!r} holds at most {most} of this service "
            f"({pool.max_nodes} nodes of {hardware.primary.name}), so the rest would stay pending",
            f"lower max_replicas to {most}, or raise the pool's max_nodes",
        )
    if model.tier != "online":
        return
    if scaling.scale_to_zero:
        raise SpecError(
            f"{path}.autoscaling.scale_to_zero",
            "an online service must answer at once, but scaling to zero makes the first request wait for a node "
            "and a model load",
            "set scale_to_zero false with min_replicas 1 or more, or make the service's tier 'standard' or 'batch'",
        )


def _check_cache_budget(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """What a pod pre-fetches must fit the node's weights cache, or every pre-fetch on the pool fails at start:
    the checkpoint (unless vLLM streams it from S3), its LoRA adapters and a speculative draft."""
    from inferstack.planning.sizing import GIB, prefetched_bytes
    from inferstack.planning.pool_capacity import pool_cache_budget_bytes

    stored, budget = prefetched_bytes(model), pool_cache_budget_bytes(hardware)
    if stored <= budget:
        return
    pool = hardware.spec
    volume = "NVMe array" if pool.nvme_cache.enabled else f"{pool.disk_size_gib} GiB root volume"
    raise SpecError(
        f"{path}.pool",
        f"{model.name} pre-fetches {stored / GIB:.1f} GiB (weights, adapters, draft) but pool {pool.name!r} may cache "
        f"{budget / GIB:.1f} GiB per node ({pool.nvme_cache.budget_percent}% of the {volume} of a "
        f"{min(hardware.instance_types, key=lambda t: t.nvme_total_gb).name}), so every pre-fetch would fail",
        "raise the pool's nvme_cache.budget_percent, use instance types with more instance storage (or a larger "
        "disk_size_gib without the NVMe cache), or a smaller checkpoint",
    )


def _check_efa_image(path: str, model: ModelServiceSpec, hardware: PoolHardware) -> None:
    """A replica across EFA nodes needs an image with libfabric and aws-ofi-nccl, or NCCL silently uses TCP."""
    from inferstack.catalog.vllm_images import efa_images, vllm_image
    from inferstack.serving.transport import crosses_efa, image_carries_efa

    known = vllm_image(model.image) if model.image is not None else None
    if model.image_provides_efa and known is not None and known.efa is None:
        raise SpecError(
            f"{path}.image_provides_efa",
            f"image {model.image!r} is in the catalog, which knows it carries no libfabric or aws-ofi-nccl plugin",
            f"use {quoted(efa_images())} (vLLM's EFA build), or drop image_provides_efa",
        )
    if crosses_efa(model, hardware) and not image_carries_efa(model, hardware):
        raise SpecError(
            f"{path}.image",
            f"{model.image!r} is not known to carry libfabric and the aws-ofi-nccl plugin, so NCCL between the "
            f"{model.nodes_per_replica} nodes of a replica would fall back to TCP sockets on EFA pool "
            f"{hardware.spec.name!r}",
            f"use {quoted(efa_images())} (vLLM's EFA build; or leave image unset), or set image_provides_efa "
            "true if your image has them",
        )


def _check_placement(spec: StackSpec, path: str, model, hardware: PoolHardware) -> None:
    sharing = hardware.spec.gpu_sharing
    pool_name = hardware.spec.name
    if model.mig_profile is not None:
        if not isinstance(sharing, MigSharing):
            raise SpecError(
                f"{path}.mig_profile",
                f"pool {pool_name!r} is not partitioned with MIG (gpu_sharing is {sharing.mode!r})",
                "drop mig_profile, or place the model on a pool with gpu_sharing mode 'mig'",
            )
        if hardware.gpu.mig_profile(model.mig_profile) is None:
            raise SpecError(
                f"{path}.mig_profile",
                f"{model.mig_profile!r} is not a MIG profile of {hardware.gpu.name}"
                f"{did_you_mean(model.mig_profile, [p.name for p in hardware.gpu.mig_profiles])}",
                f"use one of {quoted(sharing.layout)} (the pool's layout)",
            )
        if model.mig_profile not in sharing.layout:
            raise SpecError(
                f"{path}.mig_profile",
                f"pool {pool_name!r} has no {model.mig_profile} slices; its layout is {quoted(sharing.layout)}",
                f"use one of {quoted(sharing.layout)} or add {model.mig_profile} to the pool's layout",
            )
        if model.gpus_per_replica > 1:
            raise SpecError(
                f"{path}.tensor_parallel",
                "a MIG slice cannot be combined with tensor, pipeline or data parallelism",
                "set tensor_parallel, pipeline_parallel and data_parallel to 1, or use whole GPUs",
            )
        return
    if isinstance(sharing, MigSharing) and sharing.strategy == "mixed":
        raise SpecError(
            f"{path}.mig_profile",
            f"pool {pool_name!r} only offers MIG slices {quoted(sharing.layout)}",
            "set mig_profile to one of them",
        )
    if isinstance(sharing, (TimeSlicing, MpsSharing)) and model.gpus_per_replica > 1:
        raise SpecError(
            f"{path}.tensor_parallel",
            f"pool {pool_name!r} shares GPUs ({sharing.mode}); a shared GPU cannot be tensor/pipeline/data parallel",
            "use a pool without gpu_sharing for parallel models",
        )
    per_node = hardware.gpus_per_node
    if model.tensor_parallel > per_node:
        raise SpecError(
            f"{path}.tensor_parallel",
            f"tensor_parallel {model.tensor_parallel} exceeds the {per_node} GPUs of a {hardware.primary.name} node",
            f"use tensor_parallel <= {per_node} and pipeline_parallel for more GPUs, or a larger instance type",
        )
    if per_node % model.tensor_parallel:
        raise SpecError(
            f"{path}.tensor_parallel",
            f"tensor_parallel {model.tensor_parallel} does not divide the {per_node} GPUs of a node",
            f"use a divisor of {per_node}",
        )
    if model.gpus_per_pod > per_node:
        ranks = per_node // model.tensor_parallel
        raise SpecError(
            f"{path}.data_parallel_local",
            f"{model.data_parallel_per_node} data-parallel ranks of tensor_parallel {model.tensor_parallel} on one node "
            f"need {model.gpus_per_pod} GPUs, but a {hardware.primary.name} node has {per_node}",
            f"set data_parallel_local to {ranks} ({ranks} ranks per node, "
            f"{math.ceil(model.data_parallel / ranks)} nodes per replica) with data_parallel a multiple of it",
        )
    if model.multi_node:
        field = "pipeline_parallel" if model.pipeline_parallel > 1 else "data_parallel_local"
        nodes = model.nodes_per_replica
        if nodes > hardware.spec.max_nodes:
            raise SpecError(
                f"{path}.{field}",
                f"a replica takes {nodes} nodes but pool {pool_name!r} has max_nodes {hardware.spec.max_nodes}",
                f"raise the pool's max_nodes to {nodes} or more, or lower {field.removesuffix('_local')}",
            )
        if not spec.platform.leaderworkerset:
            raise SpecError(
                f"{path}.{field}",
                "multi-node models run as LeaderWorkerSets but platform.leaderworkerset is false",
                "set platform.leaderworkerset to true",
            )


# ---------------------------------------------------------------------------------------------- workers


def _check_workers(spec: StackSpec, models: tuple[ModelServiceSpec, ...]) -> None:
    services = [m.name for m in spec.models]
    for i, worker in enumerate(spec.workers):
        path = f"workers[{i}]"
        _require_service(f"{path}.model_service", worker.model_service, services)
        _min_max(path, "min_replicas", worker.min_replicas, "max_replicas", worker.max_replicas)
        if not spec.platform.keda:
            raise SpecError(path, "queue-fed workers scale with KEDA but platform.keda is false", "set platform.keda to true")
    pools = [p.name for p in spec.node_pools]
    for i, job in enumerate(spec.batch_jobs):
        path = f"batch_jobs[{i}]"
        _require_service(f"{path}.model_service", job.model_service, services)
        if job.pool not in pools:
            raise SpecError(
                f"{path}.pool",
                f"{job.pool!r} is not a node pool{did_you_mean(job.pool, pools)}; defined pools: {quoted(pools)}",
                "set pool to one of them",
            )
        _check_schedule(path, job)
        from inferstack.serving.batch_model import batch_model  # sizes with the spec package loaded

        model, hardware = batch_model(spec.model_copy(update={"models": list(models)}), i)  # the service as placed
        _check_cache_budget(path, model, hardware)


def _check_schedule(path: str, job: BatchJobSpec) -> None:
    """The schedule and time zone the API server would accept; schedule-only settings need a schedule."""
    if job.schedule is None:
        for field in ("time_zone", "starting_deadline_seconds"):
            if getattr(job, field) is not None:
                raise SpecError(f"{path}.{field}", "only a scheduled batch job uses it, and this one has no schedule",
                                f"set {path}.schedule or remove {field}")
        return
    problem = schedule_problem(job.schedule)
    if problem:
        raise SpecError(f"{path}.schedule", f"{job.schedule!r}: {problem}",
                        "write five fields (minute hour day-of-month month day-of-week), e.g. '0 2 * * *', or a macro "
                        "such as @daily; put the zone in time_zone")
    if job.time_zone is not None and (problem := time_zone_problem(job.time_zone)):
        raise SpecError(f"{path}.time_zone", problem, "name an IANA zone such as 'UTC' or 'Europe/Paris'")


def _require_service(path: str, name: str, services: Iterable[str]) -> None:
    services = list(services)
    if name not in services:
        raise SpecError(
            path,
            f"{name!r} is not a model service{did_you_mean(name, services)}; defined: {quoted(services)}",
            "name one of the stack's models",
        )


# ----------------------------------------------------------------------------------------------- queues


def _check_queues(spec: StackSpec, pools: dict[str, PoolHardware]) -> None:
    if not spec.queues.enabled:
        return
    for i, queue in enumerate(spec.queues.cluster_queues):
        path = f"queues.cluster_queues[{i}]"
        for j, name in enumerate(queue.pools or []):
            if name not in pools:
                raise SpecError(
                    f"{path}.pools[{j}]",
                    f"{name!r} is not a node pool{did_you_mean(name, pools)}",
                    f"use one of {quoted(pools)}",
                )
        owned = queue.pools if queue.pools is not None else [p.name for p in spec.node_pools if p.role == queue.role]
        for name, quota in queue.quota_gpus.items():
            if name not in pools:
                raise SpecError(
                    f"{path}.quota_gpus.{name}",
                    f"{name!r} is not a node pool{did_you_mean(name, pools)}",
                    f"use one of {quoted(pools)}",
                )
            if name not in owned:
                # A ClusterQueue's nominal quota is per flavor of its own resource groups: a pool the queue
                # does not own has no flavor there, so the quota would never apply.
                raise SpecError(
                    f"{path}.quota_gpus.{name}",
                    f"queue {queue.name!r} does not own pool {name!r} (it owns {quoted(owned) or 'no pool'}), so a "
                    "quota on it would never apply",
                    f"add {name!r} to {path}.pools, or remove the quota",
                )
            capacity = sum(pools[name].max_resources.values())
            if quota > capacity:
                hardware = pools[name]
                raise SpecError(
                    f"{path}.quota_gpus.{name}",
                    f"quota {quota} is more than pool {name!r} can ever hold: {hardware.spec.max_nodes} nodes x "
                    f"{capacity // hardware.spec.max_nodes} devices = {capacity}",
                    f"lower the quota to {capacity} or raise the pool's max_nodes",
                )
    roles_needed = {"serving"} if spec.models else set()
    if spec.workers or spec.batch_jobs:
        roles_needed.add("batch")
    roles = {q.role for q in spec.queues.cluster_queues}
    for role in sorted(roles_needed - roles):
        raise SpecError(
            "queues.cluster_queues",
            f"no cluster queue has role {role!r} but the stack has {role} workloads",
            f"add a cluster queue with role {role!r} (or set queues.enabled to false)",
        )
