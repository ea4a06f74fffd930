"""Specs AWS, EC2 or vLLM would refuse are refused when the spec is read: one line naming the field path,
the value and the fix, exit 2 from the CLI, no traceback and nothing rendered (issue 12).

Each class of REFUSALS names the upstream rule it encodes; ACCEPTED holds the nearest specs that must pass.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
import yaml
from stack_files import rejection

from inferstack.cli import main
from inferstack.spec import StackSpec
from inferstack.validation import validate


def base() -> dict:
    """A small valid spec in us-east-1; each case changes one thing."""
    return {
        "environment": "refusals",
        "node_pools": [
            {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 2, "efa": True,
             "capacity": {"on_demand_base": 1}},
            {"name": "mig", "instance_types": ["p4de.24xlarge"], "max_nodes": 1,
             "gpu_sharing": {"mode": "mig", "layout": {"3g.40gb": 2}}},
            {"name": "l4", "instance_types": ["g6.xlarge", "g6.2xlarge"], "max_nodes": 2},
        ],
        "models": [
            {"name": "llama", "model": "meta-llama/Llama-3.1-8B-Instruct", "pool": "h100", "tensor_parallel": 2},
            {"name": "embed", "model": "BAAI/bge-large-en-v1.5", "pool": "mig", "mig_profile": "3g.40gb",
             "max_model_len": 512, "tier": "standard"},
        ],
        "batch_jobs": [{"name": "nightly", "model_service": "llama", "pool": "h100",
                        "input": "s3://team-batch/in/requests.jsonl", "output": "s3://team-batch/out/"}],
    }


def changed(setter) -> dict:
    spec = copy.deepcopy(base())
    setter(spec)
    return spec


def model(index: int, **fields):
    return lambda s: s["models"][index].update(fields)


def pool(index: int, **fields):
    return lambda s: s["node_pools"][index].update(fields)


def cluster(**fields):
    return lambda s: s.update(cluster=fields)


# case -> (change, field path, fragment of the problem, fragment of the fix)
REFUSALS = {
    # Kueue v1beta1 ClusterQueue: nominalQuota is set per flavor of the queue's own resourceGroups.
    "a quota on a pool the queue does not own": (
        lambda s: s.update(queues={"cluster_queues": [
            {"name": "serving", "role": "serving", "pools": ["h100"], "quota_gpus": {"l4": 1}},
            {"name": "batch", "role": "batch"}]}),
        "queues.cluster_queues[0].quota_gpus.l4", "does not own pool 'l4'", "add 'l4' to queues.cluster_queues[0].pools",
    ),
    "a quota on a pool of the other role": (
        lambda s: (s["node_pools"][2].update(role="batch"), s.update(queues={"cluster_queues": [
            {"name": "serving", "role": "serving"},
            {"name": "batch", "role": "batch", "quota_gpus": {"h100": 8}}]})),
        "queues.cluster_queues[1].quota_gpus.h100", "(it owns 'l4')", "or remove the quota",
    ),
    # Pool zones: the AWS layer places a pool in the cluster's subnets, which exist only in the cluster's zones
    # (components/aws/network.py subnet_layout; without availability_zones, the region's a, b and c). Before
    # this check a pool zone outside the default zones raised KeyError in NetworkLayout.subnets_for.
    "pool zone outside the default cluster zones": (
        pool(0, availability_zones=["us-east-1d"]),
        "node_pools[0].availability_zones[0]", "not one of the cluster's zones", "cluster.network.availability_zones",
    ),
    "pool zone outside the named cluster zones": (
        lambda s: (s.update(cluster={"network": {"availability_zones": ["us-east-1a", "us-east-1b"]}}),
                   s["node_pools"][2].update(availability_zones=["us-east-1c"])),
        "node_pools[2].availability_zones[0]", "'us-east-1c' is not one of the cluster's zones", "pick zones",
    ),
    # Regions and zones that exist: EC2 DescribeInstanceTypeOfferings as moto 5.2.5 records it
    # (moto/ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz), in catalog/ec2_offerings.json.
    "region that does not exist": (
        lambda s: s.update(region="us-east-9"),
        "region", "'us-east-9' is not an AWS region", "such as 'us-east-1'",
    ),
    "region misspelt": (
        lambda s: s.update(region="eu-westt-1"),
        "region", "did you mean 'eu-west-1'", "components/catalog/ec2_offerings.json",
    ),
    "cluster zone the region does not have": (
        cluster(network={"availability_zones": ["us-east-1a", "us-east-1g"]}),
        "cluster.network.availability_zones[1]", "'us-east-1g' is not an availability zone of us-east-1",
        "'us-east-1f'",
    ),
    "pool zone the region does not have, on an existing cluster": (
        lambda s: (s.update(cluster={"mode": "existing", "name": "shared-eks"}),
                   s["node_pools"][2].update(availability_zones=["us-east-1q"])),
        "node_pools[2].availability_zones[0]", "'us-east-1q' is not an availability zone", "use one of 'us-east-1a'",
    ),
    # Instance types the region does not offer (same moto data): EC2 launches no node of them there.
    "instance type not offered in the region": (
        pool(1, instance_types=["p5e.48xlarge"], gpu_sharing={"mode": "mig", "layout": {"3g.71gb": 2}}),
        "node_pools[1].instance_types[0]", "p5e.48xlarge is not offered in us-east-1", "a region that offers",
    ),
    "region with no GPU instances of the catalog": (  # one pool: each pool's types would be refused on its line
        lambda s: s.update(region="af-south-1", node_pools=s["node_pools"][:1], models=s["models"][:1]),
        "node_pools[0].instance_types[0]", "p5.48xlarge is not offered in af-south-1 (EC2 offers it in ",
        "pick an instance type",
    ),
    # System nodes: any EC2 type, as DescribeInstanceTypes lists them (moto/ec2/resources/instance_types.json.gz).
    "system node type misspelt": (
        cluster(system_nodes={"instance_type": "m7i.xlarg"}),
        "cluster.system_nodes.instance_type", "did you mean 'm7i.xlarge'", "describe-instance-types",
    ),
    "system node type that does not exist": (
        cluster(system_nodes={"instance_type": "m9z.huge"}),
        "cluster.system_nodes.instance_type", "'m9z.huge' is not an EC2 instance type", "'m7i.xlarge'",
    ),
    # S3 bucket names: Amazon S3 User Guide, "General purpose bucket naming rules"
    # (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html). Before this check a
    # bucket-only weights URI passed the spec and raised in serving/pods.py while rendering.
    "weights URI names only a bucket": (
        model(0, weights="s3://team-weights"),
        "models[0].weights", "names a bucket but no key", "s3://my-bucket/models/llama/",
    ),
    "weights URI names only a bucket, with a slash": (
        model(0, weights="s3://team-weights/"),
        "models[0].weights", "names a bucket but no key", "add the key",
    ),
    "batch input names only a bucket": (
        lambda s: s["batch_jobs"][0].update(input="s3://team-batch"),
        "batch_jobs[0].input", "names a bucket but no key", "the JSONL object",
    ),
    "bucket with upper case and underscore": (
        model(0, weights="s3://Team_Weights/llama/"),
        "models[0].weights", "lower-case letters, digits, '.' and '-' only", "the bucket's real name",
    ),
    "bucket formatted as an IP address": (
        model(0, weights="s3://192.168.5.4/llama/"),
        "models[0].weights", "not formatted as an IP address", "s3://<bucket>/<key>",
    ),
    "bucket with adjacent periods": (
        lambda s: s["batch_jobs"][0].update(output="s3://team..batch/out/"),
        "batch_jobs[0].output", "no two adjacent periods", "s3://<bucket>/<key>",
    ),
    "bucket with a reserved suffix": (
        model(0, weights="s3://weights-s3alias/llama/"),
        "models[0].weights", "ending '-s3alias' are reserved", "s3://<bucket>/<key>",
    ),
    "bucket too short": (
        model(0, weights="s3://ab/llama/"),
        "models[0].weights", "3 to 63 characters long, and 'ab' has 2", "s3://<bucket>/<key>",
    ),
    "existing bucket given as a URI": (
        lambda s: s.update(weights={"existing_bucket": "s3://team-weights"}),
        "weights.existing_bucket", "has '/:'", "without s3://",
    ),
    # CIDRs as networks (Python ipaddress, strict): EC2 CreateVpc/CreateSubnet take network addresses; EKS's
    # publicAccessCidrs are CIDR blocks (https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html).
    "vpc CIDR with host bits set": (
        cluster(network={"vpc_cidr": "10.0.0.1/16"}),
        "cluster.network.vpc_cidr", "has host bits set", "10.0.0.0/16",
    ),
    "subnet CIDR with host bits set": (
        cluster(network={"availability_zones": ["us-east-1a"],
                         "subnet_cidrs": {"us-east-1a": {"private": "10.0.0.7/19", "public": "10.0.224.0/22"}}}),
        "cluster.network.subnet_cidrs.us-east-1a.private", "has host bits set", "10.0.0.0/19",
    ),
    "public access given a bare address": (
        cluster(endpoint_public_access=True, public_access_cidrs=["8.8.8.8"]),
        "cluster.public_access_cidrs[0]", "'8.8.8.8' is an address, not a CIDR block", "'8.8.8.8/32'",
    ),
    "public access CIDR with host bits set": (
        cluster(endpoint_public_access=True, public_access_cidrs=["8.8.8.8/24"]),
        "cluster.public_access_cidrs[0]", "has host bits set", "'8.8.8.0/24'",
    ),
    # vLLM 0.33.0 (PyPI sdist vllm-0.33.0.tar.gz) vllm/config/scheduler.py `SchedulerConfig.verify_max_model_len`,
    # called from __post_init__: max_num_batched_tokens below max_model_len without chunked prefill, or below
    # max_num_seqs, is a ValueError; vllm/engine/arg_utils.py `_set_default_max_num_seqs_and_batched_tokens_args`
    # fills an unset max_num_batched_tokens from `get_batch_defaults` (8192 on an H100).
    "batched tokens below the context without chunked prefill": (
        model(0, max_num_batched_tokens=4096, enable_chunked_prefill=False),
        "models[0].max_num_batched_tokens", "4096 is below max_model_len 8192", "raise max_num_batched_tokens to 8192",
    ),
    "batched tokens below max_num_seqs": (
        model(0, max_num_batched_tokens=128, max_num_seqs=256),
        "models[0].max_num_batched_tokens", "128 is below max_num_seqs 256", "lower max_num_seqs to 128",
    ),
    "max_num_seqs above vLLM's default batched tokens": (
        model(0, max_num_seqs=9000),
        "models[0].max_num_seqs", "8192 (vLLM's default on this GPU) is below max_num_seqs 9000", "9000 or more",
    ),
    # vLLM 0.33.0 vllm/v1/metrics/loggers.py: vllm:kv_cache_usage_perc is documented "1 means 100 percent usage".
    "kv-cache target as a percentage": (
        model(0, autoscaling={"metric": "kv_cache", "target": 80, "max_replicas": 2}),
        "models[0].autoscaling.target", "80 is above 1", "e.g. 0.8 for 80 percent",
    ),
    "kv-cache target as a fractional percentage": (
        model(0, autoscaling={"metric": "kv_cache", "target": 92.5, "max_replicas": 2}),
        "models[0].autoscaling.target", "vllm:kv_cache_usage_perc is a fraction", "0.925",
    ),
    # Tiers (the spec's own contract, `tier` description): an online service is never scaled to zero.
    "online service scaled to zero": (
        model(0, autoscaling={"min_replicas": 0, "max_replicas": 2, "scale_to_zero": True}),
        "models[0].autoscaling.scale_to_zero", "an online service must answer at once", "tier 'standard'",
    ),
    "online embedding service scaled to zero": (
        model(1, tier="online", autoscaling={"min_replicas": 0, "max_replicas": 2, "scale_to_zero": True}),
        "models[1].autoscaling.scale_to_zero", "scaling to zero", "set scale_to_zero false",
    ),
    # Replicas the pool can hold: the device requests of serving/pods.py `gpu_requests` against what a node
    # advertises (spec/pools.py `resources_per_node`) times max_nodes.
    "max replicas beyond the pool's whole GPUs": (
        model(0, autoscaling={"min_replicas": 1, "max_replicas": 9}),
        "models[0].autoscaling.max_replicas", "pool 'h100' holds at most 8 of this service", "lower max_replicas to 8",
    ),
    "max replicas beyond the pool's MIG slices": (
        model(1, autoscaling={"min_replicas": 1, "max_replicas": 17}),
        "models[1].autoscaling.max_replicas", "holds at most 16", "raise the pool's max_nodes",
    ),
}

ACCEPTED = {
    "bucket with dots and digits": model(0, weights="s3://team.weights-2/models/llama/"),
    "existing bucket by name": lambda s: s.update(weights={"existing_bucket": "team-weights"}),
    "batched tokens below the context with chunked prefill": model(0, max_num_batched_tokens=2048),
    "batched tokens equal to max_num_seqs": model(0, max_num_batched_tokens=256, max_num_seqs=256),
    "kv-cache target as a fraction": model(0, autoscaling={"metric": "kv_cache", "target": 0.8, "max_replicas": 2}),
    "queue target above 1": model(0, autoscaling={"metric": "queue_depth", "target": 80, "max_replicas": 2}),
    "standard service scaled to zero": model(0, tier="standard",
                                             autoscaling={"min_replicas": 0, "max_replicas": 2, "scale_to_zero": True}),
    "max replicas the pool holds exactly": model(0, autoscaling={"min_replicas": 1, "max_replicas": 8}),
    "a zone the cluster names beyond the default three": lambda s: (
        s.update(cluster={"network": {"availability_zones": ["us-east-1a", "us-east-1d"]}}),
        s["node_pools"][2].update(availability_zones=["us-east-1d"])),
    "p5e in a region that offers it": lambda s: (
        s.update(region="us-west-2"),
        s["node_pools"][1].update(instance_types=["p5e.48xlarge"], gpu_sharing={"mode": "mig", "layout": {"3g.71gb": 2}}),
        s["models"][1].update(mig_profile="3g.71gb")),
    "public access to a /32": cluster(endpoint_public_access=True, public_access_cidrs=["8.8.8.8/32"]),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_refusal_names_path_problem_and_fix(case):
    change, path, problem, fix = REFUSALS[case]
    error = rejection(changed(change))
    assert error.path == path
    assert problem in error.problem
    assert fix in error.fix and str(error).count("To fix:") == 1


@pytest.mark.parametrize("case", list(ACCEPTED), ids=list(ACCEPTED))
def test_the_nearest_valid_spec_is_accepted(case):
    validate(StackSpec.model_validate(changed(ACCEPTED[case])))


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_render_refuses_with_exit_2_one_line_and_nothing_written(case, tmp_path, capsys):
    change, path, problem, _ = REFUSALS[case]
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "bad.yaml").write_text(yaml.safe_dump(changed(change)))
    out = tmp_path / "out"
    code = main(["render", "bad", "--stacks-dir", str(stacks), "--out", str(out)])
    captured = capsys.readouterr()
    message = captured.err.strip()
    assert code == 2
    assert "Traceback" not in captured.err + captured.out
    assert message.count("\n") == 0 and f"bad.yaml: {path}: " in message and problem in message
    assert not out.exists(), "nothing is rendered for a refused spec"


def test_the_offering_catalog_is_moto_s_ec2_data():
    """components/catalog/ec2_offerings.json holds, per region, every zone of moto's
    instance_type_offerings/availability-zone/<region>.json.gz with the catalog's GPU types offered there, and every
    type name of moto/ec2/resources/instance_types.json.gz (EC2 DescribeInstanceTypeOfferings/DescribeInstanceTypes)."""
    moto = pytest.importorskip("moto", reason="moto (test extra) ships EC2's offering data")
    from moto.ec2.models.instance_types import INSTANCE_TYPES as EC2_INSTANCE_TYPES

    from inferstack.catalog import INSTANCE_TYPES
    from inferstack.catalog.offerings import ec2_instance_types, region_zones

    folder = Path(moto.__file__).parent / "ec2" / "resources" / "instance_type_offerings" / "availability-zone"
    expected: dict[str, dict[str, set[str]]] = {}
    for path in folder.glob("*.json.gz"):
        zones = expected.setdefault(path.name.removesuffix(".json.gz"), {})
        for offering in json.loads(gzip.decompress(path.read_bytes())):
            types = zones.setdefault(offering["Location"], set())
            if offering["InstanceType"] in INSTANCE_TYPES:
                types.add(offering["InstanceType"])
    assert {r: {z: set(t) for z, t in zones.items()} for r, zones in region_zones().items()} == expected
    assert ec2_instance_types() == set(EC2_INSTANCE_TYPES)
