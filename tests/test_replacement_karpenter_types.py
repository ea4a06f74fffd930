"""Replacement rules (components/catalog/replacement.json) for the types only the Karpenter mode registers.

Upstream, as each entry's source names it:
- hashicorp/terraform-provider-aws (which pulumi-aws bridges), `ForceNew: true` in the SDKv2 schemas:
  internal/service/sqs/queue.go at 00a35305dc1b297a6fcdecdfbba33f1e63c3da39 (fifo_queue, name, name_prefix),
  sqs/queue_policy.go at af55dfb90500e80afb9d9ba64a76024e500c948a (queue_url), events/rule.go at
  0cdab4ae09a963535e03dde0bff4784afe8e3517 (event_bus_name, name, name_prefix), events/target.go at
  0762c41e2027fcd3cb8340d3e6886c6975fc0a59 (event_bus_name, rule, target_id; five nested sets), iam/policy.go at
  01ccd9a2d118a3e81a9649759bf14303526dc9e6 (description, name, name_prefix, path).
- pulumi/pulumi-kubernetes@v4.32.0 provider/pkg/provider/diff.go: a custom resource is replaced only when its
  .metadata.name or .metadata.namespace changes; provider.go Diff turns no update the API server refuses into a
  replacement.
- aws/karpenter-provider-aws@v1.14.1 pkg/apis/crds (shared/schemas/karpenter.sh/nodepool_v1.json,
  shared/schemas/karpenter.k8s.aws/ec2nodeclass_v1.json): the NodePool's CEL transition rules refuse a changed
  nodeClassRef group or kind and a switch between static and dynamic provisioning; the EC2NodeClass has none.

The Pulumi input names are checked against the installed pulumi_aws classes, apart from the catalog's own data.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import re
from functools import cache
from pathlib import Path

import cel_rules
import pytest
from kube_validation import SHARED_SCHEMAS

from inferstack.catalog.replacement import RULES, rule_for
from inferstack.presentation import diff
from inferstack.stacks import load_stack

ROOT = Path(__file__).resolve().parents[1]

QUEUE = "aws:sqs/queue:Queue"
QUEUE_POLICY = "aws:sqs/queuePolicy:QueuePolicy"
EVENT_RULE = "aws:cloudwatch/eventRule:EventRule"
EVENT_TARGET = "aws:cloudwatch/eventTarget:EventTarget"
IAM_POLICY = "aws:iam/policy:Policy"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
KARPENTER_TYPES = {QUEUE, QUEUE_POLICY, EVENT_RULE, EVENT_TARGET, IAM_POLICY, NODE_CLASS, NODE_POOL}

# type -> (terraform-provider-aws file, its ForceNew fields as Pulumi inputs, its sets as Pulumi inputs)
TERRAFORM_SCHEMAS = {
    QUEUE: ("internal/service/sqs/queue.go", {"fifoQueue", "name", "namePrefix"}, set()),
    QUEUE_POLICY: ("internal/service/sqs/queue_policy.go", {"queueUrl"}, set()),
    EVENT_RULE: ("internal/service/events/rule.go", {"eventBusName", "name", "namePrefix"}, set()),
    EVENT_TARGET: (
        "internal/service/events/target.go",
        {"eventBusName", "rule", "targetId"},
        {
            "ecsTarget.capacityProviderStrategies",
            "ecsTarget.networkConfiguration.securityGroups",
            "ecsTarget.networkConfiguration.subnets",
            "ecsTarget.placementConstraints",
            "sagemakerPipelineTarget.pipelineParameterLists",
        },
    ),
    IAM_POLICY: ("internal/service/iam/policy.go", {"description", "name", "namePrefix", "path"}, set()),
}
IDENTITY = ("metadata.name", "metadata.namespace")


@cache
def _registered(stack: str) -> tuple[dict, ...]:
    resources, _plan = diff.run_spec(load_stack(ROOT / "stacks", stack))
    return tuple(r for r in resources if r["custom"])


def _types(stack: str) -> set[str]:
    return {r["type"] for r in _registered(stack)}


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


def _args_class(type_token: str) -> type:
    """The pulumi_aws input class of a type token: aws:<module>/<resource>:<Class> -> <module>.<Class>Args."""
    _provider, module_path, name = type_token.split(":")
    return getattr(importlib.import_module(f"pulumi_aws.{module_path.split('/')[0]}"), f"{name}Args")


def _inputs(args: type) -> dict[str, str]:
    """Pulumi input name -> the annotation's text, from the Args class's __init__ parameters."""
    parameters = inspect.signature(args.__init__).parameters
    return {_camel(p): str(parameters[p].annotation) for p in parameters if p != "__self__"}


def _accepts(args: type, path: str) -> bool:
    """Whether a dotted input path names inputs of `args` and, below the top, of the nested Args classes."""
    head, _, rest = path.partition(".")
    inputs = _inputs(args)
    if head not in inputs:
        return False
    if not rest:
        return True
    nested = re.findall(r"'(\w+Args)'", inputs[head])
    module = importlib.import_module(args.__module__.rsplit(".", 1)[0] + "._inputs")
    return bool(nested) and _accepts(getattr(module, nested[0]), rest)


def test_the_karpenter_mode_alone_registers_these_types_and_every_type_it_registers_has_a_rule():
    """The type tokens are the ones the program registers (stacks/karpenter.py), not used by dev or prod."""
    karpenter = _types("karpenter")
    assert KARPENTER_TYPES <= karpenter
    assert KARPENTER_TYPES.isdisjoint(_types("dev") | _types("prod"))
    assert karpenter - set(RULES) == set()


@pytest.mark.parametrize("type_token", sorted(TERRAFORM_SCHEMAS))
def test_aws_rules_are_the_terraform_force_new_fields_at_a_named_commit(type_token):
    file, force_new, sets = TERRAFORM_SCHEMAS[type_token]
    rule = rule_for(type_token)
    assert re.match(rf"hashicorp/terraform-provider-aws@[0-9a-f]{{40}}:{re.escape(file)}: ", rule.source)
    assert set(rule.replace_on) == force_new and len(rule.replace_on) == len(force_new)
    assert set(rule.unordered) == sets
    assert rule.rolls_on == () and not rule.new_version_on_update and not rule.stateful


@pytest.mark.parametrize("type_token", sorted(TERRAFORM_SCHEMAS))
def test_every_listed_path_is_an_input_the_pulumi_aws_class_accepts(type_token):
    """Outside check: each path resolves through pulumi_aws's Args classes (snake_case parameters in camelCase)."""
    rule = rule_for(type_token)
    args = _args_class(type_token)
    assert [p for p in rule.replace_on + rule.unordered if not _accepts(args, p)] == []


def test_the_karpenter_custom_resources_are_replaced_only_on_identity():
    """pulumi-kubernetes v4.32.0 diff.go lists neither karpenter.sh nor karpenter.k8s.aws in `forceNew`."""
    for type_token in (NODE_CLASS, NODE_POOL):
        rule = rule_for(type_token)
        assert rule.replace_on == IDENTITY
        assert rule.source.startswith("pulumi/pulumi-kubernetes@v4.32.0")
        assert "aws/karpenter-provider-aws@v1.14.1" in rule.source


def _transition_rules(schema: dict) -> dict[str, list[cel_rules.Rule]]:
    rules: dict[str, list[cel_rules.Rule]] = {}
    for path, rule in cel_rules.declared_rules(schema):
        if cel_rules.compile_rule(rule.rule).is_transition:
            rules.setdefault(path, []).append(rule)
    return rules


def _schema(relative: str) -> dict:
    return json.loads((SHARED_SCHEMAS / relative).read_text(encoding="utf-8"))


def _node_pool() -> dict:
    return next(r for r in _registered("karpenter") if r["type"] == NODE_POOL)


@pytest.mark.skipif(SHARED_SCHEMAS is None, reason="../shared/schemas is absent")
def test_the_nodepools_immutable_fields_are_refused_updates_not_replacements():
    """The API server refuses a NodePool whose nodeClassRef group changes; Pulumi plans it as an update."""
    schema = _schema("karpenter.sh/nodepool_v1.json")
    transitions = _transition_rules(schema)
    assert {path: [r.message for r in rules] for path, rules in transitions.items()} == {
        "spec": [
            "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
        ],
        "spec.template.spec.nodeClassRef": ["nodeClassRef.group is immutable", "nodeClassRef.kind is immutable"],
    }
    template_spec = schema["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    reference_schema = template_spec["properties"]["nodeClassRef"]
    before = _node_pool()
    after = copy.deepcopy(before)
    after["inputs"]["spec"]["template"]["spec"]["nodeClassRef"]["group"] = "karpenter.example.com"
    old, new = (r["inputs"]["spec"]["template"]["spec"]["nodeClassRef"] for r in (before, after))
    verdicts = {
        rule.message: bool(
            cel_rules.compile_rule(rule.rule).program.evaluate(
                {"self": cel_rules.to_cel(new, reference_schema), "oldSelf": cel_rules.to_cel(old, reference_schema)}
            )
        )
        for rule in transitions["spec.template.spec.nodeClassRef"]
    }
    assert verdicts == {"nodeClassRef.group is immutable": False, "nodeClassRef.kind is immutable": True}

    changes = diff.compare_resources([before], [after])
    assert changes["replaced"] == [] and [c["changed"] for c in changes["updated"]] == [
        ["spec.template.spec.nodeClassRef.group"]
    ]
    source = rule_for(NODE_POOL).source
    assert all(field in source for field in ("nodeClassRef.group", ".kind", "spec.replicas", "not replace_on"))


@pytest.mark.skipif(SHARED_SCHEMAS is None, reason="../shared/schemas is absent")
def test_the_ec2nodeclass_has_no_transition_rule():
    assert _transition_rules(_schema("karpenter.k8s.aws/ec2nodeclass_v1.json")) == {}


def _edited(type_token: str, field: str, value: str) -> tuple[dict, dict]:
    before = next(r for r in _registered("karpenter") if r["type"] == type_token)
    after = copy.deepcopy(before)
    after["inputs"][field] = value
    return before, after


def test_a_new_description_replaces_an_iam_policy_but_updates_an_event_rule():
    """iam/policy.go: description ForceNew; events/rule.go: description updated by PutRule."""
    before, after = _edited(IAM_POLICY, "description", "another team's policy")
    policy = diff.compare_resources([before], [after])
    assert [(c["forced_by"], c["source"]) for c in policy["replaced"]] == [
        (["description"], rule_for(IAM_POLICY).source)
    ]
    before, after = _edited(EVENT_RULE, "description", "another description")
    event_rule = diff.compare_resources([before], [after])
    assert event_rule["replaced"] == [] and [c["changed"] for c in event_rule["updated"]] == [["description"]]
