"""The mandatory rule `serving-pods-network-policy`: it fails on a rendered stack whose NetworkPolicies are removed or
opened, naming the workload and the fix.

Kubernetes semantics the rule relies on (kubernetes/website content/en/docs/concepts/services-networking/
network-policies.md): a pod is isolated for ingress only once a policy whose policyTypes hold Ingress (unset: Ingress)
selects it; an ingress rule without `from` admits every source.
"""

from __future__ import annotations

from test_policies import check, failing, messages, rendered

RULE = "serving-pods-network-policy"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def network_policies(resources):
    return [r for r in resources if r["type"] == NETWORK_POLICY]


def test_the_example_stacks_pass(tmp_path, capsys):
    for stack in ("dev", "prod"):
        code, report = check(rendered(stack), tmp_path, capsys)
        assert RULE not in failing(report), messages(report, RULE)


def test_a_stack_without_network_policies_fails(tmp_path, capsys):
    resources = [r for r in rendered() if r["type"] != NETWORK_POLICY]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and RULE in failing(report)
    text = messages(report, RULE)
    assert "LeaderWorkerSet inference/llama-70b-long-group (worker pods)" in text
    assert "Deployment batch/redis" in text and "Deployment inference/llama-70b-epp" in text
    assert "To fix:" in text


def test_a_namespace_without_its_default_deny_fails_for_the_pods_nothing_else_selects(tmp_path, capsys):
    def batch_default_deny(resource) -> bool:
        metadata = resource["inputs"].get("metadata") or {}
        return resource["type"] == NETWORK_POLICY and (metadata["namespace"], metadata["name"]) == (
            "batch", "default-deny-ingress")

    resources = [r for r in rendered() if not batch_default_deny(r)]
    assert len(resources) == len(rendered()) - 1
    code, report = check(resources, tmp_path, capsys)
    text = messages(report, RULE)
    assert "Deployment batch/summarizer" in text and "CronJob batch/nightly-eval" in text
    assert "batch/redis" not in text   # the queue's own policy still selects it


def test_a_rule_open_to_every_source_on_a_vllm_pod_fails(tmp_path, capsys):
    resources = rendered()
    (policy,) = [r for r in network_policies(resources) if r["inputs"]["metadata"]["name"] == "llama-8b-fp8"]
    policy["inputs"]["spec"]["ingress"].append({"ports": [{"protocol": "TCP", "port": 8000}]})
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and RULE in failing(report)
    text = messages(report, RULE)
    assert "Deployment inference/llama-8b-fp8 (its pods) run vLLM" in text and "admits every source" in text


def test_an_ip_block_of_every_address_counts_as_open(tmp_path, capsys):
    resources = rendered()
    (policy,) = [r for r in network_policies(resources) if r["inputs"]["metadata"]["name"] == "bge-embed"]
    policy["inputs"]["spec"]["ingress"][0]["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}})
    code, report = check(resources, tmp_path, capsys)
    assert "Deployment inference/bge-embed (its pods) run vLLM" in messages(report, RULE)


def test_an_egress_only_policy_does_not_isolate_ingress(tmp_path, capsys):
    resources = rendered()
    for policy in network_policies(resources):
        policy["inputs"]["spec"]["policyTypes"] = ["Egress"]
    code, report = check(resources, tmp_path, capsys)
    assert "Deployment inference/llama-70b (its pods) is selected by no NetworkPolicy" in messages(report, RULE)
