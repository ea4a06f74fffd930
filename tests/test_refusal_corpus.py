"""The refusal corpus of issue 12: realistic mistakes, each the shipped stack (stacks/dev.py, stacks/prod.py, or the
YAML form the README documents) with one thing broken, run through the real CLI as `inferstack render <file> --out`
and `inferstack plan <file>`. Every case asserts exit 2 from both, no traceback, the field path as the user wrote it,
the problem and the fix in the one line printed, and nothing written under --out.

Classes that other tests already cover completely (exit status, no traceback, field path, nothing rendered, two
cases or more) are not repeated here; class -> test id:

    scale-to-zero on an online service     test_spec_refusals.py::test_render_refuses_with_exit_2_one_line_and_nothing_written[online service scaled to zero], [online embedding service scaled to zero]
    max replicas beyond the pool           test_spec_refusals.py::test_render_refuses_...[max replicas beyond the pool's whole GPUs], [max replicas beyond the pool's MIG slices]
    a mandatory policy failure is exit 1   test_cli_errors.py::test_a_mandatory_violation_is_exit_1_for_plan_render_and_check[dev], [prod]
    stack file syntax/import/name/raise    test_cli_errors.py::test_a_stack_file_that_does_not_run_renders_nothing[syntax], [import], [name], [raise]; test_a_syntax_error_in_a_module_the_stack_imports_names_that_module; test_a_cross_field_error_in_a_python_stack_names_file_and_line
    pool zone outside the cluster's zones  test_spec_refusals.py::test_render_refuses_...[pool zone outside the default cluster zones], [pool zone outside the named cluster zones]
    weights URIs bucket-only / bad bucket  test_spec_refusals.py::test_render_refuses_...[weights URI names only a bucket], [... with a slash], [batch input names only a bucket], [bucket with upper case and underscore], [bucket formatted as an IP address], [bucket with adjacent periods], [bucket with a reserved suffix], [bucket too short], [existing bucket given as a URI]
    --out naming a file                    test_cli_errors.py::test_render_out_naming_a_file_writes_nothing[out-is-a-file], [out-under-a-file]
    missing --stacks-dir                   test_cli_errors.py::test_a_stacks_dir_that_is_not_a_folder_is_one_line[*-missing], [*-a-file]
    closed pipe                            test_cli_errors.py::test_a_reader_that_stops_early_is_not_a_traceback[plan], [check]; here test_schema_into_a_reader_that_stops_early
    CIDRs as networks, public CIDRs        test_spec_refusals.py::test_render_refuses_...[vpc CIDR with host bits set], [subnet CIDR with host bits set], [public access given a bare address], [public access CIDR with host bits set]
    unknown system node instance types     test_spec_refusals.py::test_render_refuses_...[system node type misspelt], [system node type that does not exist]
    regions and zones that do not exist    test_spec_refusals.py::test_render_refuses_...[region that does not exist], [region misspelt], [cluster zone the region does not have], [pool zone the region does not have, on an existing cluster]; here [zone-letter-beyond-the-region]
    instance types not offered             test_spec_refusals.py::test_render_refuses_...[instance type not offered in the region], [region with no GPU instances of the catalog]
    vLLM engine rules                      test_spec_refusals.py::test_render_refuses_...[batched tokens below the context without chunked prefill], [batched tokens below max_num_seqs], [max_num_seqs above vLLM's default batched tokens]
    KV-cache target as a percentage        test_spec_refusals.py::test_render_refuses_...[kv-cache target as a percentage], [kv-cache target as a fractional percentage]
    quotas on pools a queue does not own   test_spec_refusals.py::test_render_refuses_...[a quota on a pool the queue does not own], [a quota on a pool of the other role]
    duplicate keys in YAML/JSON            test_cli_errors.py::test_a_key_given_twice_is_refused_with_its_line[yaml-top-level], [yaml-nested], [json-nested]
    Kubernetes apiVersion/kind/spec        test_cli_errors.py::test_a_kubernetes_style_wrapper_says_what_the_file_should_look_like[yaml], [json]
    YAML syntax as file:line:column        test_cli_errors.py::test_a_syntax_error_is_one_line_with_file_line_and_column[yaml-unclosed-list], [yaml-tab], [json]

Here: a budget below the cost at max, unpinned images, names colliding once derived, names that are not DNS-1035
where a Service needs them, derived AWS names beyond their limits (and every derived name within its limit at the
longest names accepted), a zone letter the region does not have, traffic longer than the context, the messages
(path as written, did-you-mean at depth, a missing field paired with its misspelling, sentences not regexes, a
wrong type or range saying what to write), an online service's minimum replicas beyond the on-demand baseline, no
node autoscaler with pools at zero (both also in test_minimum_capacity.py), a budget over a type with no price in
the stack's region, `inferstack schema` into a reader that stops early, and `cluster` without `mode` planning as a
created cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from stack_files import DEV, PROD, REPO, edited, reader_stops_after_one_line, refused_by_render_and_plan, run_cli

from inferstack.aws.foundation import AUTONAME_SUFFIX, IAM_ROLE_NAME_MAX, NODE_GROUP_NAME_MAX
from inferstack.spec import SpecError, StackSpec
from inferstack.validation import validate

# The YAML form README.md documents ("A stack may also be a YAML or JSON document"), with one model service.
YAML = """\
environment: dev
region: us-east-1
node_pools:
  - {name: l4, instance_types: [g6.xlarge], min_nodes: 0, max_nodes: 2}
models:
  - {name: qwen, model: Qwen/Qwen3-8B, pool: l4, tier: standard}
"""


def yaml_with(*replacements: tuple[str, str], append: str = "") -> str:
    return edited(YAML, *replacements) + append


def model_yaml(fields: str) -> str:
    """The YAML stack with more fields on its model service."""
    return yaml_with(("tier: standard}", f"tier: standard, {fields}}}"))


@dataclass(frozen=True)
class Mistake:
    file: str      # the stack file's name: its suffix says how it is read
    text: str
    path: str      # the field path the message names, as written in that file
    problem: str   # a fragment of the problem
    fix: str       # a fragment of the fix


CORPUS: dict[str, Mistake] = {
    # ---- budget below the cost at max scale (inferstack.planning.cost.check_budget)
    "dev-budget-below-cost-at-max": Mistake(
        "dev.py", edited(DEV, ('"max_usd_per_hour": 5.0', '"max_usd_per_hour": 0.5')),
        "budget.max_usd_per_hour", "over the budget of $0.50/h", "raise budget.max_usd_per_hour to at least"),
    "prod-budget-below-cost-at-max": Mistake(
        "prod.py", edited(PROD, ('"max_usd_per_hour": 450.0', '"max_usd_per_hour": 45.0')),
        "budget.max_usd_per_hour", "at max scale the node pools cost $", "lower max_nodes of the largest pools"),
    # ---- unpinned images: refused at spec time by the policy pack's rule (policies/pinning.py image_problem);
    # Kubernetes pulls ':latest' for an image without a tag (kubernetes.io/docs/concepts/containers/images).
    "vllm-image-latest": Mistake(
        "dev.py", edited(DEV, ('tier="standard",', 'tier="standard", image="vllm/vllm-openai:latest",')),
        "models[0].image", "uses the moving tag 'latest'", "pin a release tag"),
    "vllm-image-latest-yaml": Mistake(
        "dev.yaml", model_yaml("image: 'vllm/vllm-openai:latest'"),
        "models[0].image", "uses the moving tag 'latest'", "or a digest (@sha256:...)"),
    "vllm-image-without-tag": Mistake(
        "dev.yaml", model_yaml("image: vllm/vllm-openai"),
        "models[0].image", "is not an image reference pinned to a tag or a digest", "write the value in that form"),
    "worker-image-latest": Mistake(
        "prod.py", edited(PROD, ('image="python:3.13.1-slim"', 'image="python:latest"')),
        "workers[0].image", "'python:latest' uses the moving tag 'latest'", "python:3.13.1-slim"),
    "worker-image-channel-tag": Mistake(
        "dev.yaml", YAML + "workers: [{name: summarizer, model_service: qwen, image: 'ghcr.io/acme/worker:main'}]\n",
        "workers[0].image", "uses the moving tag 'main'", "pin a release tag"),
    "worker-image-without-tag": Mistake(
        "prod.py", edited(PROD, ('image="python:3.13.1-slim"', 'image="python"')),
        "QueueWorkerSpec.image", "'python' is not an image reference pinned to a tag", "write the value in that form"),
    # ---- names colliding once derived (serving/names.py object_names)
    "model-named-like-another-models-endpoint-picker": Mistake(
        "dev.yaml", YAML + "  - {name: qwen-epp, model: Qwen/Qwen3-8B, pool: l4, tier: standard}\n",
        "models[1].name", "the endpoint picker of model service 'qwen' would both need Deployment inference/qwen-epp",
        "rename one of them"),
    "worker-named-like-the-job-queues-redis": Mistake(
        "prod.py", edited(PROD, ('name="summarizer"', 'name="redis"')),
        "workers[0].name", "the job queue (Redis) would both need Deployment batch/redis", "rename one of them"),
    "model-named-like-redis-in-a-shared-namespace": Mistake(
        "prod.py", edited(PROD, ('name="bge-embed"', 'name="redis"'), ('"llama-8b-fp8", "bge-embed"]', '"llama-8b-fp8", "redis"]'),
                          ('region="us-east-1",', 'region="us-east-1", serving_namespace="batch",')),
        "models[3].name", "would both need Deployment batch/redis", "rename one of them"),
    "model-named-like-a-leaderworkersets-headless-service": Mistake(
        "prod.py", edited(PROD, ('name="llama-70b",', 'name="llama-70b-long-group",'),
                          ('models=["llama-70b", ', 'models=["llama-70b-long-group", ')),
        "models[1].name", "the LeaderWorkerSet controller for model service 'llama-70b-long'", "rename one of them"),
    "model-named-like-istios-gateway-deployment": Mistake(
        "dev.yaml", yaml_with(("name: qwen,", "name: inference-gateway-istio,"), append="gateway: {implementation: istio}\n"),
        "models[0].name", "Istio's gateway deployment would both need Deployment inference/inference-gateway-istio",
        "rename one of them"),
    "model-named-like-the-body-based-router": Mistake(
        "dev.yaml", yaml_with(("name: qwen,", "name: body-based-router,"), append="gateway: {implementation: istio}\n"),
        "models[0].name", "the body-based-routing chart would both need Deployment inference/body-based-router",
        "rename one of them"),
    # ---- a Service name is a DNS-1035 label (Kubernetes apimachinery validation.IsDNS1035Label): a leading letter
    "model-name-with-a-leading-digit": Mistake(
        "dev.py", edited(DEV, ('name="qwen-7b"', 'name="7b-qwen"'), ('models=["qwen-7b"]', 'models=["7b-qwen"]')),
        "models[0].name", "would need Service inference/7b-qwen, and a Service name must start with a letter",
        "start the name with a letter, e.g. 'm-7b-qwen'"),
    "model-name-with-a-leading-digit-yaml": Mistake(
        "dev.yaml", yaml_with(("name: qwen,", "name: 8b-qwen,")),
        "models[0].name", "Service inference/8b-qwen", "start the name with a letter"),
    "gateway-name-with-a-leading-digit": Mistake(
        "dev.yaml", YAML + "gateway: {name: 1gw, implementation: istio}\n",
        "gateway.name", "would need Service inference/1gw-istio", "start the name with a letter"),
    # ---- derived AWS names within their limits (aws/foundation.py check_resource_names)
    "environment-too-long-for-the-autoscaler-role": Mistake(
        "dev.yaml", yaml_with(("environment: dev", "environment: " + "e" * 33)),
        "environment", f"IAM role '{'e' * 33}-platform-autoscaler-role' plus Pulumi's 8-character suffix",
        "shorten the environment name to at most 31 characters"),
    "pool-name-too-long-for-its-node-groups": Mistake(
        "prod.py", edited(PROD, ('name="a100-mig",', 'name="a100-mig-for-embeddings-and-rerankers",'),
                          ('pool="a100-mig",', 'pool="a100-mig-for-embeddings-and-rerankers",')),
        "node_pools[1].name", "'prod-a100-mig-for-embeddings-and-rerankers-on-demand-burst' plus Pulumi's 8-character "
        "suffix is longer than EKS's 63 characters", "shorten the pool or environment name by 3 characters"),
    # ---- a zone the region does not have, named with a letter no zone has (before the fix: "has no address slot")
    "zone-letter-beyond-the-region": Mistake(
        "dev.yaml", YAML + "cluster: {network: {availability_zones: [us-east-1a, us-east-1z]}}\n",
        "cluster.network.availability_zones[1]", "'us-east-1z' is not an availability zone of us-east-1",
        "use one of 'us-east-1a'"),
    # ---- traffic longer than the context: vLLM refuses a prompt plus output beyond max_model_len
    "traffic-longer-than-the-context": Mistake(
        "prod.py", edited(PROD, ("mean_input_tokens=1024, mean_output_tokens=256",
                                 "mean_input_tokens=16000, mean_output_tokens=1024")),
        "models[2].traffic", "a mean request of 16000 + 1024 tokens is longer than max_model_len 8192",
        "raise max_model_len to 17024 or more"),
    "traffic-longer-than-the-context-yaml": Mistake(
        "dev.yaml", model_yaml("max_model_len: 4096, traffic: {requests_per_second: 1, mean_input_tokens: 4000, "
                               "mean_output_tokens: 500}"),
        "models[0].traffic", "longer than max_model_len 4096", "state the traffic's real mean lengths"),
    # ---- messages: the path as written, without the union member pydantic puts in its location
    "path-as-written-under-a-cluster-mode": Mistake(
        "dev.yaml", YAML + "cluster: {mode: create, network: {vpc_cidr: 10.0.0.0/8}}\n",
        "cluster.network.vpc_cidr", "is not an IPv4 CIDR with a prefix from /16 to /24", "write the value in that form"),
    "path-as-written-under-gpu-sharing": Mistake(
        "dev.yaml", yaml_with(("max_nodes: 2}", "max_nodes: 2, gpu_sharing: {mode: time_slicing, replicas: many}}")),
        "node_pools[0].gpu_sharing.replicas", "Input should be a valid integer", "write a whole number without quotes, e.g. 2"),
    # ---- messages: did you mean, at depth, with the fields of the object the typo sits in
    "misspelt-field-of-system-nodes": Mistake(
        "dev.yaml", YAML + "cluster: {system_nodes: {max_node: 3}}\n",
        "cluster.system_nodes.max_node", "unknown field 'max_node' (did you mean 'max_nodes'?)",
        "the fields allowed here are 'instance_type', 'min_nodes', 'max_nodes'"),
    "misspelt-field-of-autoscaling": Mistake(
        "dev.yaml", model_yaml("autoscaling: {max-replicas: 2}"),
        "models[0].autoscaling.max-replicas", "(did you mean 'max_replicas'?)", "rename it to 'max_replicas'"),
    # ---- messages: a missing required field reported with the unknown field probably meant
    "misspelt-required-field-yaml": Mistake(
        "dev.yaml", yaml_with(("instance_types:", "instance_type:")),
        "node_pools[0].instance_type", "unknown field 'instance_type', and the required field 'instance_types' is missing",
        "rename 'instance_type' to 'instance_types'"),
    "misspelt-required-field-python": Mistake(
        "dev.py", edited(DEV, ("instance_types=", "instance_type=")),
        "NodePoolSpec.instance_type", "and the required field 'instance_types' is missing",
        "rename 'instance_type' to 'instance_types'"),
    # ---- messages: a pattern said as a sentence
    "model-name-not-a-dns-label": Mistake(
        "dev.yaml", yaml_with(("name: qwen,", "name: Qwen_8B,")),
        "models[0].name", "is not a DNS label: lower-case letters, digits and '-'", "write it as 'qwen-8b'"),
    "zone-written-as-a-region": Mistake(
        "dev.yaml", YAML + "cluster: {network: {availability_zones: [us-east-1]}}\n",
        "cluster.network.availability_zones[0]", "is not an availability zone name: a region and a letter",
        "write the value in that form"),
    # ---- messages: a wrong type or range says what to write
    "max-nodes-as-a-word": Mistake(
        "dev.yaml", yaml_with(("max_nodes: 2}", "max_nodes: two}")),
        "node_pools[0].max_nodes", "Input should be a valid integer", "write a whole number without quotes"),
    "instance-types-as-one-string": Mistake(
        "dev.yaml", yaml_with(("instance_types: [g6.xlarge]", "instance_types: g6.xlarge")),
        "node_pools[0].instance_types", "Input should be a valid list", "write it as a list: [g6.xlarge]"),
    # ---- an online service's minimum replicas beyond the on-demand baseline (inferstack.spec.capacity)
    "dev-online-on-its-spot-pool": Mistake(
        "dev.py", edited(DEV, ('tier="standard"', 'tier="online"'),
                         ("min_replicas=0, max_replicas=2, scale_to_zero=True", "min_replicas=1, max_replicas=2")),
        "node_pools[0].capacity.on_demand_base", "pool 'l4' keeps 0 on-demand nodes at minimum scale",
        "raise capacity.on_demand_base to 1"),
    "prod-min-replicas-beyond-the-h100-baseline": Mistake(
        "prod.py", edited(PROD, ("min_replicas=2, max_replicas=6, metric=\"queue_depth\"",
                                 "min_replicas=5, max_replicas=6, metric=\"queue_depth\"")),
        "node_pools[0].capacity.on_demand_base", "llama-70b (5 replicas) need 3 nodes of p5.48xlarge",
        "raise capacity.on_demand_base to 3"),
    # ---- no node autoscaler and pools that start at zero nodes (inferstack.spec.capacity)
    "dev-without-a-node-autoscaler": Mistake(
        "dev.py", edited(DEV, ("budget=", 'platform={"node_autoscaler": "none"},\n    budget=')),
        "node_pools[0].min_nodes", "0 with platform.node_autoscaler 'none'", "set platform.node_autoscaler"),
    "yaml-without-a-node-autoscaler": Mistake(
        "dev.yaml", YAML + "platform: {node_autoscaler: none}\n",
        "node_pools[0].min_nodes", "nothing adds nodes to pool 'l4'", "set min_nodes"),
    # ---- a type with no price in the stack's region refuses a stated budget (inferstack.planning.cost.check_budget)
    "budget-on-a-type-never-priced": Mistake(
        "dev.yaml", yaml_with(("region: us-east-1", "region: us-east-2"),
                              ("instance_types: [g6.xlarge]", "instance_types: [p5e.48xlarge]"),
                              ("tier: standard}", "tier: standard, max_model_len: 8192}"),
                              append="budget: {max_usd_per_hour: 500}\n"),
        "node_pools[0].instance_types[0]", "'p5e.48xlarge' has no on-demand price", "remove budget.max_usd_per_hour"),
    "budget-on-a-type-unpriced-in-the-region": Mistake(
        "dev.yaml", yaml_with(("region: us-east-1", "region: ap-south-1"),
                              ("instance_types: [g6.xlarge]", "instance_types: [g6e.xlarge]"),
                              append="budget: {max_usd_per_hour: 50}\n"),
        "node_pools[0].instance_types[0]", "ap-south-1", "budget.max_usd_per_hour"),
}


@pytest.mark.parametrize("case", list(CORPUS), ids=list(CORPUS))
def test_a_mistake_is_refused_by_render_and_plan_with_its_path_and_fix(case: str, tmp_path: Path):
    mistake = CORPUS[case]
    stack = tmp_path / mistake.file
    stack.write_text(mistake.text)
    message = refused_by_render_and_plan(stack, tmp_path / "out")
    located, _, fix = message.partition(". To fix: ")
    assert located.startswith(f"inferstack: {mistake.file}"), message
    assert f": {mistake.path}: " in located, message
    assert mistake.problem in located, message
    assert mistake.fix in fix, message
    assert "should match pattern" not in message and "^" not in message


def test_every_case_breaks_one_thing_of_a_stack_that_plans():
    """The corpus means something only if the stacks it starts from are valid: dev, prod and the README's YAML."""
    import yaml as pyyaml

    StackSpec.model_validate(pyyaml.safe_load(YAML))
    for name in ("dev", "prod"):
        assert run_cli("plan", name, "--json").returncode == 0


# ------------------------------------------------------------ every derived AWS name within its limit


def _longest_accepted(document: dict, set_name, longest: int = 40) -> dict:
    """The document with the longest name `set_name` may give that the spec accepts (the checks' own limit)."""
    for length in range(longest, 0, -1):
        candidate = set_name(json.loads(json.dumps(document)), length)
        try:
            validate(StackSpec.model_validate(candidate))
        except (SpecError, ValueError):
            continue
        return candidate
    raise AssertionError("no name length is accepted")


def _environment(document: dict, length: int) -> dict:
    return {**document, "environment": "e" * length}


def _second_pool(document: dict, length: int) -> dict:
    """Rename node pool 1 (prod's MIG pool, whose on-demand-burst group has the longest suffix) and its users."""
    old, new = document["node_pools"][1]["name"], ("a100-mig-" + "p" * 40)[:length]
    document["node_pools"][1]["name"] = new
    for entry in document.get("models", []) + document.get("batch_jobs", []):
        if entry.get("pool") == old:
            entry["pool"] = new
    return document


AWS_NAME_LIMITS = {  # resource type -> (the input holding its name, AWS's limit)
    "aws:iam/role:Role": ("name", IAM_ROLE_NAME_MAX),
    "aws:eks/nodeGroup:NodeGroup": ("nodeGroupName", NODE_GROUP_NAME_MAX),
    "aws:ec2/launchTemplate:LaunchTemplate": ("name", 128),
    "aws:eks/cluster:Cluster": ("name", 100),
}


@pytest.mark.parametrize(
    ("stack", "lengthen"),
    [("dev", [_environment]), ("prod", [_environment, _second_pool])],
    ids=["dev-longest-environment", "prod-longest-environment-and-pool"],
)
def test_at_the_longest_names_accepted_every_derived_aws_name_is_within_its_limit(stack: str, lengthen: list):
    """At the longest names the spec accepts, every AWS name the program derives fits its limit (dev's is bound by
    its IAM roles, prod's by its node groups).

    Pulumi autonames a resource '<logical name>-' plus 7 random hex characters (pulumi.com/docs, "Resource names >
    Autonaming"). Limits: IAM role names 64 (pulumi/pulumi-aws@00ba5ea53c2548fd367776345b7c52f191ce1372:
    provider/resources.go, aws_iam_role AutoName("name", 64, "-"); IAM CreateRole RoleName 1-64); EKS node group
    names 63 (EKS CreateNodegroup); EC2 launch template names 128 (EC2 CreateLaunchTemplate LaunchTemplateName 3-128);
    EKS cluster names 100 (EKS CreateCluster name 1-100).
    """
    from inferstack.engine import run_stack
    from inferstack.stacks import load_stack

    document = load_stack(REPO / "stacks", stack).model_dump(mode="json", exclude_unset=True)
    for set_name in lengthen:
        document = _longest_accepted(document, set_name)
    resources = [r.as_dict() for r in run_stack(StackSpec.model_validate(document)).resources]
    seen = {kind: 0 for kind in AWS_NAME_LIMITS}
    for resource in resources:
        if resource["type"] not in AWS_NAME_LIMITS:
            continue
        field, limit = AWS_NAME_LIMITS[resource["type"]]
        given = resource["inputs"].get(field)
        name = given if isinstance(given, str) else resource["name"] + "-" + "x" * (AUTONAME_SUFFIX - 1)
        assert len(name) <= limit, f"{resource['type']} {name!r} is {len(name)} characters, over {limit}"
        seen[resource["type"]] += 1
    assert all(seen.values()), seen
    roles = {r["name"].removeprefix(document["environment"]) for r in resources if r["type"] == "aws:iam/role:Role"}
    assert "-platform-autoscaler-role" in roles, roles


# ---------------------------------------------------------------------------------- the positive cases


@pytest.mark.parametrize(
    ("file", "text"),
    [
        ("dev.yaml", YAML + "cluster: {network: {vpc_cidr: 10.8.0.0/16}}\n"),
        ("dev.py", edited(DEV, ("budget=", 'cluster={"network": {"vpc_cidr": "10.8.0.0/16"}},\n    budget='))),
    ],
    ids=["yaml", "python"],
)
def test_a_cluster_without_mode_is_created(tmp_path: Path, file: str, text: str):
    """`cluster` without `mode` is a cluster to create (its documented default): the plan exits 0 and the
    render holds an EKS cluster in a VPC of the given block."""
    stack = tmp_path / file
    stack.write_text(text)
    planned = run_cli("plan", str(stack), "--json")
    assert planned.returncode == 0 and "Traceback" not in planned.stderr, planned.stderr
    out = tmp_path / "out"
    rendered = run_cli("render", str(stack), "--out", str(out))
    assert rendered.returncode == 0 and "Traceback" not in rendered.stderr, rendered.stderr
    resources = json.loads((out / "resources.json").read_text())
    assert [r for r in resources if r["type"] == "aws:eks/cluster:Cluster"]
    assert [r["inputs"]["cidrBlock"] for r in resources if r["type"] == "aws:ec2/vpc:Vpc"] == ["10.8.0.0/16"]


def test_schema_into_a_reader_that_stops_early():
    """`inferstack schema | head -1`: the reader leaves after one line; the command is done, not a traceback."""
    first, status, stderr = reader_stops_after_one_line("schema")
    assert first.strip() == b"{"
    assert status == 0 and b"Traceback" not in stderr and b"BrokenPipeError" not in stderr
