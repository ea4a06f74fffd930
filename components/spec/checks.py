"""Stack-wide cross-field rules of the spec that need nothing but the spec and the catalog: unique names, the
region and its zones, S3 names, pinned images, the created cluster, workers and batch jobs, Kueue's queues.

Each failure names the field path, the value and the fix. The validation room (`inferstack.validation`) runs
these, the pools' (pool_checks.py) and the services' (service_checks.py) beside each layer's own refusals and
gathers the independent ones, so every function here either returns the refusals it found or raises the first
problem of one dependent chain.
"""

from __future__ import annotations

import ipaddress
from collections import Counter

from inferstack.catalog.offerings import ec2_instance_types, region_zones
from inferstack.spec.cluster import CreateCluster
from inferstack.spec.cluster_access import check_cluster_access
from inferstack.spec.cron import schedule_problem, time_zone_problem
from inferstack.spec.edge import implementation_refusals, tenant_refusals
from inferstack.spec.errors import SpecError, did_you_mean, quoted, refusals_of
from inferstack.spec.images import image_problem
from inferstack.spec.pools import PoolHardware
from inferstack.spec.stack import StackSpec
from inferstack.spec.workloads import BatchJobSpec


def region_known(spec: StackSpec) -> bool:
    """The region is in EC2's offering data: the rules that read its zones and offerings can run."""
    return spec.region in region_zones()


def stack_refusals(spec: StackSpec) -> list[SpecError]:
    """The stack-wide rules: the region, S3 names, pinned images, the created cluster (unique names apart:
    `unique_name_refusals`, which the rules on derived names wait for)."""
    return [
        *refusals_of(lambda: _check_region(spec)),
        *_s3_refusals(spec),
        *_image_refusals(spec),
        *refusals_of(lambda: _check_cluster(spec)),
        *tenant_refusals(spec.gateway.auth, [m.name for m in spec.models if m.pd_role != "prefill"]),
        *implementation_refusals(spec.gateway.auth, spec.gateway.implementation),
    ]


def unique_name_refusals(spec: StackSpec) -> list[SpecError]:
    groups = {
        "node_pools": [p.name for p in spec.node_pools],
        "models": [m.name for m in spec.models],
        "workers": [w.name for w in spec.workers],
        "batch_jobs": [j.name for j in spec.batch_jobs],
        "queues.cluster_queues": [q.name for q in spec.queues.cluster_queues],
        "queues.priorities": [p.name for p in spec.queues.priorities],
    }
    found = []
    for field, names in groups.items():
        for name, count in Counter(names).items():
            if count > 1:
                index = [i for i, n in enumerate(names) if n == name][1]
                found.append(SpecError(f"{field}[{index}].name", f"{name!r} is used {count} times", "give each entry its own name"))
    return found


def min_max(path: str, low_name: str, low: int, high_name: str, high: int) -> None:
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


def zone_refusals(spec: StackSpec) -> list[SpecError]:
    """Every zone the spec names in its region is one of the region's; a zone of another region is left to the
    rules that name the region it belongs to."""
    zones = region_zones()[spec.region]
    named: list[tuple[str, str]] = []
    if isinstance(spec.cluster, CreateCluster):
        network = spec.cluster.network
        named += [(f"cluster.network.availability_zones[{j}]", zone) for j, zone in enumerate(network.availability_zones)]
        named += [(f"cluster.network.subnet_cidrs.{zone}", zone) for zone in network.subnet_cidrs]
    for i, pool in enumerate(spec.node_pools):
        named += [(f"node_pools[{i}].availability_zones[{j}]", zone) for j, zone in enumerate(pool.availability_zones)]
    return [
        SpecError(path, f"{zone!r} is not an availability zone of {spec.region}{did_you_mean(zone, zones)}",
                  f"use one of {quoted(zones)}")
        for path, zone in named
        if zone.startswith(spec.region) and zone not in zones
    ]


# -------------------------------------------------------------------------------------------- images


def _image_refusals(spec: StackSpec) -> list[SpecError]:
    """An image the spec names moves with no tag or a channel tag ('latest', 'main', ...): refused here, with its
    field, by the same rule the policy pack's images-pinned applies to what is rendered (spec/images.py)."""
    named = [(f"models[{i}].image", m.image) for i, m in enumerate(spec.models) if m.image is not None]
    named += [(f"workers[{i}].image", w.image) for i, w in enumerate(spec.workers)]
    found = []
    for path, image in named:
        problem = image_problem(image)
        if problem is not None:
            found.append(SpecError(
                path,
                f"{image!r} {problem}, so a node that pulls it later may run other code than the one tested",
                "pin a release tag (e.g. vllm/vllm-openai:v0.33.0, python:3.13.1-slim) or a digest (@sha256:...)",
            ))
    return found


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


def _s3_refusals(spec: StackSpec) -> list[SpecError]:
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
    found = []
    for path, uri, key_example in uris:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        problem = _bucket_name_problem(bucket)
        if problem:
            found.append(SpecError(path, f"{uri!r} names no valid bucket: {problem}", "write s3://<bucket>/<key> with "
                                   "the bucket's real name"))
        elif key_example and not key.strip("/"):
            found.append(SpecError(path, f"{uri!r} names a bucket but no key", f"add the key: {key_example}"))
    existing = spec.weights.existing_bucket
    if existing is not None and (problem := _bucket_name_problem(existing)):
        found.append(SpecError("weights.existing_bucket", problem, "give the bucket's name alone, without s3:// or a key"))
    return found


# ---------------------------------------------------------------------------------------------- cluster


def _check_cluster(spec: StackSpec) -> None:
    cluster = spec.cluster
    if not isinstance(cluster, CreateCluster):
        return
    min_max("cluster.system_nodes", "min_nodes", cluster.system_nodes.min_nodes, "max_nodes", cluster.system_nodes.max_nodes)
    system_type = cluster.system_nodes.instance_type
    if system_type not in ec2_instance_types():
        raise SpecError(
            "cluster.system_nodes.instance_type",
            f"{system_type!r} is not an EC2 instance type{did_you_mean(system_type, ec2_instance_types())}",
            "use an EC2 type such as 'm7i.xlarge' (see `aws ec2 describe-instance-types`)",
        )
    check_cluster_access(cluster)
    for j, zone in enumerate(cluster.network.availability_zones):
        if region_known(spec) and not zone.startswith(spec.region):
            raise SpecError(
                f"cluster.network.availability_zones[{j}]",
                f"{zone!r} is not in region {spec.region}",
                f"use zones such as {spec.region}a",
            )

# ---------------------------------------------------------------------------------------------- workers


def workload_refusals(spec: StackSpec) -> list[SpecError]:
    """Workers and batch jobs name a service and a pool of the stack; a batch job's schedule is one the API
    server accepts."""
    services = [m.name for m in spec.models]
    pools = [p.name for p in spec.node_pools]
    found = []
    for i, worker in enumerate(spec.workers):
        path = f"workers[{i}]"
        found += refusals_of(
            lambda: _require_service(f"{path}.model_service", worker.model_service, services),
            lambda: min_max(path, "min_replicas", worker.min_replicas, "max_replicas", worker.max_replicas),
        )
    for i, job in enumerate(spec.batch_jobs):
        path = f"batch_jobs[{i}]"
        found += refusals_of(
            lambda: _require_service(f"{path}.model_service", job.model_service, services),
            lambda: _require_pool(f"{path}.pool", job.pool, pools),
            lambda: _check_schedule(path, job),
        )
    return found


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


def _require_service(path: str, name: str, services: list[str]) -> None:
    if name not in services:
        raise SpecError(
            path,
            f"{name!r} is not a model service{did_you_mean(name, services)}; defined: {quoted(services)}",
            "name one of the stack's models",
        )


def _require_pool(path: str, name: str, pools: list[str]) -> None:
    if name not in pools:
        raise SpecError(
            path,
            f"{name!r} is not a node pool{did_you_mean(name, pools)}; defined pools: {quoted(pools)}",
            "set pool to one of them",
        )


# ----------------------------------------------------------------------------------------------- queues


def queue_refusals(spec: StackSpec, pools: dict[str, PoolHardware]) -> list[SpecError]:
    """Kueue's queues name pools of the stack, set quotas only on pools they own and within what the pool holds,
    and every role with workloads has a queue."""
    if not spec.queues.enabled:
        return []
    found = [refusal for i in range(len(spec.queues.cluster_queues)) for refusal in refusals_of(
        lambda i=i: _check_queue(spec, i, pools))]
    roles_needed = {"serving"} if spec.models else set()
    if spec.workers or spec.batch_jobs:
        roles_needed.add("batch")
    roles = {q.role for q in spec.queues.cluster_queues}
    found += [
        SpecError(
            "queues.cluster_queues",
            f"no cluster queue has role {role!r} but the stack has {role} workloads",
            f"add a cluster queue with role {role!r} (or set queues.enabled to false)",
        )
        for role in sorted(roles_needed - roles)
    ]
    return found


def _check_queue(spec: StackSpec, index: int, pools: dict[str, PoolHardware]) -> None:
    queue = spec.queues.cluster_queues[index]
    path = f"queues.cluster_queues[{index}]"
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
