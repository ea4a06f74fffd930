"""The worker queue's Redis requires a password from a Secret, its clients present it, and the network
admits only them; the mandatory policy "no-unauthenticated-redis" fails a stack that drops any of it.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from inferstack.engine import run_stack
from inferstack.engine.recorder import SECRET_SIG, SIG_KEY
from inferstack.policies.runner import run_policies, spec_policy_config
from inferstack.serving.workers import (
    KEDA_OPERATOR_LABELS,
    QUEUE_PRODUCER_LABEL,
    REDIS_AUTH,
    REDIS_PASSWORD_ENV,
    REDIS_PASSWORD_KEY,
    render_worker,
)
from inferstack.stacks import load_stack
from kube_validation import assert_valid
from test_serving_worker import REDIS_PASSWORD, FakeRedis, serve

STACKS = Path(__file__).resolve().parents[1] / "stacks"
SECRET_FROM_QUEUE = {"secretKeyRef": {"name": REDIS_AUTH, "key": REDIS_PASSWORD_KEY}}


@functools.cache
def _rendered(stack_name: str) -> str:
    return json.dumps([r.as_dict() for r in run_stack(load_stack(STACKS, stack_name)).resources])


def rendered(stack_name: str = "prod") -> list[dict[str, Any]]:
    return json.loads(_rendered(stack_name))


def of_kind(resources: list[dict[str, Any]], kind: str, namespace: str = "batch") -> list[dict[str, Any]]:
    return [
        r for r in resources
        if r["type"].endswith(f":{kind}") and (r["inputs"].get("metadata") or {}).get("namespace") == namespace
    ]


def named(resources: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in of_kind(resources, kind) if r["inputs"]["metadata"]["name"] == name]
    return found


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["inputs"]["spec"]["template"]["spec"]["containers"]
    return only


def env_of(container_spec: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("valueFrom", e.get("value")) for e in container_spec.get("env", [])}


def blocking(resources: list[dict[str, Any]], policy: str) -> list[str]:
    spec = load_stack(STACKS, "prod")
    (result,) = [r for r in run_policies(resources, "prod", spec_policy_config(spec)) if r.name == policy]
    return [v.message for v in result.violations]


# --------------------------------------------------------------------------------------- the server


def test_redis_requires_the_password_from_its_secret_and_keeps_protected_mode():
    """Upstream: redis/redis 7.4.1 (74b289a0e12f) redis.conf lines 103-112 (protected mode: with no password on the
    default user only local clients get in; on by default) and 1041-1049 (`requirepass` sets the default user's
    password, clients AUTH with it); src/redis-cli.c line 62 (redis-cli takes its password from REDISCLI_AUTH, which
    the exec probes use). Kubernetes core/v1 Container.command: `$(VAR)` is expanded from the container's env."""
    resources = rendered()
    redis = container(named(resources, "Deployment", "redis"))
    command = redis["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--requirepass") + 1] == f"$({REDIS_PASSWORD_ENV})"
    assert "--protected-mode" not in command  # stays "yes": no password, no remote client
    assert env_of(redis) == {REDIS_PASSWORD_ENV: SECRET_FROM_QUEUE, "REDISCLI_AUTH": SECRET_FROM_QUEUE}
    assert redis["readinessProbe"]["exec"]["command"] == ["redis-cli", "ping"]


def test_the_password_is_generated_by_the_stack_into_the_secret():
    """The password is a pulumi_random RandomPassword (never a literal in the program), stored in the Secret the
    server, the workers and KEDA read; the recording keeps the Secret's data as a Pulumi secret."""
    resources = rendered()
    (password,) = [r for r in resources if r["type"] == "random:index/randomPassword:RandomPassword"]
    assert password["inputs"]["length"] >= 32 and password["inputs"]["special"] is False
    secret = named(resources, "Secret", REDIS_AUTH)
    assert secret["inputs"]["type"] == "Opaque" and secret["inputs"]["stringData"][SIG_KEY] == SECRET_SIG


# -------------------------------------------------------------------------------------- the clients


def test_workers_and_keda_present_the_password_from_the_secret():
    """Upstream: kedacore/keda v2.20.2 (68a5b5028f35) pkg/scalers/redis_scaler.go line 51 (the redis scaler's
    `password`, resolved from trigger metadata, the target's env or a TriggerAuthentication's parameters) and
    lines 122-140 (it counts the list with EVAL, so the default user keeps every command: no restrictive ACL).
    TriggerAuthentication and ScaledObject validate against kedacore/charts v2.20.2 CRDs (../shared/schemas/keda.sh)."""
    resources = rendered()
    spec = load_stack(STACKS, "prod")
    for worker in spec.workers:
        assert env_of(container(named(resources, "Deployment", worker.name)))[REDIS_PASSWORD_ENV] == SECRET_FROM_QUEUE
        authentication = named(resources, "TriggerAuthentication", worker.name)
        assert authentication["inputs"]["spec"] == {
            "secretTargetRef": [{"parameter": "password", "name": REDIS_AUTH, "key": REDIS_PASSWORD_KEY}]
        }
        scaled = named(resources, "ScaledObject", worker.name)
        (trigger,) = scaled["inputs"]["spec"]["triggers"]
        assert trigger["type"] == "redis" and trigger["authenticationRef"] == {"name": worker.name}
        assert_valid([authentication["inputs"], scaled["inputs"]])
    assert_valid([named(resources, kind, "redis")["inputs"] for kind in ("Deployment", "NetworkPolicy")])


def _run_worker(redis: FakeRedis, env: dict[str, str]) -> subprocess.Popen:
    """prod's first worker program against the in-test Redis (no model: it never gets a job to send)."""
    spec = load_stack(STACKS, "prod")
    script = render_worker(spec, spec.workers[0], redis_host="127.0.0.1", redis_port=redis.server_address[1],
                           url="http://127.0.0.1:9")
    return subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True, env=env)


def test_a_worker_with_the_wrong_password_takes_no_job():
    """Redis answers WRONGPASS to a wrong AUTH and NOAUTH to anything before a good one (redis/redis 7.4.1
    src/acl.c line 1469, src/server.c lines 3970-3976): the job stays queued."""
    redis = FakeRedis({"jobs": [b'{"id": "1", "body": {}}']})
    serve(redis)
    worker = _run_worker(redis, {**os.environ, REDIS_PASSWORD_ENV: "not-" + REDIS_PASSWORD})
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            worker.wait(timeout=2)
    finally:
        worker.kill()
        _, stderr = worker.communicate()
        redis.shutdown()
    assert "WRONGPASS" in stderr and "AUTH" in redis.refused
    assert redis.lists["jobs"] == [b'{"id": "1", "body": {}}']


def test_a_worker_without_the_password_stops_with_a_message():
    redis = FakeRedis({"jobs": []})
    serve(redis)
    env = {key: value for key, value in os.environ.items() if key != REDIS_PASSWORD_ENV}
    worker = _run_worker(redis, env)
    _, stderr = worker.communicate(timeout=10)
    redis.shutdown()
    assert worker.returncode == 2 and f"{REDIS_PASSWORD_ENV} is not set" in stderr


# -------------------------------------------------------------------------------------- the network


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector with matchLabels only (what the rendered policies use); {} selects everything."""
    assert set(selector or {}) <= {"matchLabels"}, selector
    return all(labels.get(key) == value for key, value in (selector or {}).get("matchLabels", {}).items())


def _admits(policy: dict[str, Any], source_namespace: str, source_labels: dict[str, str], port: int) -> bool:
    """Whether one ingress NetworkPolicy lets this pod in (Kubernetes networking/v1 semantics: a peer with only
    podSelector means the policy's namespace; with namespaceSelector too, pods matching both)."""
    spec, namespace = policy["spec"], policy["metadata"]["namespace"]
    namespace_labels = {"kubernetes.io/metadata.name": source_namespace}
    for rule in spec.get("ingress", []):
        if rule.get("ports") and not any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in rule["ports"]):
            continue
        for peer in rule.get("from") or [{}]:
            in_namespace = (
                _selects(peer["namespaceSelector"], namespace_labels) if "namespaceSelector" in peer
                else source_namespace == namespace
            )
            if in_namespace and _selects(peer.get("podSelector"), source_labels):
                return True
    return False


def reaches_redis(resources: list[dict[str, Any]], source_namespace: str, source_labels: dict[str, str]) -> bool:
    """Every ingress policy of the batch namespace that selects the Redis pod: allowed when any admits the source,
    denied when some select it and none admits (Kubernetes: policies are additive allow lists)."""
    redis_labels = named(resources, "Deployment", "redis")["inputs"]["spec"]["template"]["metadata"]["labels"]
    selecting = [p["inputs"] for p in of_kind(resources, "NetworkPolicy")
                 if "Ingress" in p["inputs"]["spec"]["policyTypes"] and _selects(p["inputs"]["spec"]["podSelector"], redis_labels)]
    assert selecting, "no NetworkPolicy selects the Redis pod"
    return any(_admits(policy, source_namespace, source_labels, 6379) for policy in selecting)


def test_only_the_queue_clients_reach_redis():
    """Kubernetes networking/v1 NetworkPolicy (concepts/services-networking/network-policies: isolation by any
    selecting policy, peers `podSelector` / `namespaceSelector`). The KEDA operator's pods carry `app: keda-operator`
    in namespace keda (kedacore/charts v2.20.2, cbb9bb8ce080, keda/templates/manager/deployment.yaml lines 27-30,
    values.yaml operator.name line 88)."""
    resources = rendered()
    worker = named(resources, "Deployment", load_stack(STACKS, "prod").workers[0].name)
    worker_pod = worker["inputs"]["spec"]["template"]["metadata"]["labels"]
    assert reaches_redis(resources, "batch", worker_pod)
    assert reaches_redis(resources, "batch", {QUEUE_PRODUCER_LABEL: "true", "app": "producer"})
    assert reaches_redis(resources, "keda", {**KEDA_OPERATOR_LABELS, "app.kubernetes.io/name": "keda-operator"})
    assert not reaches_redis(resources, "batch", {"app": "batch-run"})
    assert not reaches_redis(resources, "inference", {"app.kubernetes.io/component": "queue-worker",
                                                      "app.kubernetes.io/part-of": "inferstack"})
    assert not reaches_redis(resources, "default", {QUEUE_PRODUCER_LABEL: "true"})
    assert not reaches_redis(resources, "monitoring", KEDA_OPERATOR_LABELS)


# ------------------------------------------------------------------------------------------ policies


def _mutated(edit) -> list[dict[str, Any]]:
    resources = rendered()
    edit(resources)
    return resources


def _redis_container(resources: list[dict[str, Any]]) -> dict[str, Any]:
    return container(named(resources, "Deployment", "redis"))


def _without_password(resources):
    command = _redis_container(resources)["command"]
    at = command.index("--requirepass")
    del command[at:at + 2]


def _literal_password(resources):
    command = _redis_container(resources)["command"]
    command[command.index("--requirepass") + 1] = "hunter2-queue"


def _password_from_plain_env(resources):
    redis = _redis_container(resources)
    redis["env"] = [{"name": REDIS_PASSWORD_ENV, "value": "hunter2-queue"}]


def _image_default_command(resources):
    del _redis_container(resources)["command"]


def _keda_without_credentials(resources):
    for scaled in of_kind(resources, "ScaledObject"):
        for trigger in scaled["inputs"]["spec"]["triggers"]:
            trigger.pop("authenticationRef", None)


@pytest.mark.parametrize("edit, expected", [
    (_without_password, "sets no --requirepass"),
    (_literal_password, "takes its --requirepass as a literal"),
    (_password_from_plain_env, "which no secretKeyRef sets"),
    (_image_default_command, "sets no --requirepass"),
    (_keda_without_credentials, "presents no Redis password"),
])
def test_no_unauthenticated_redis_fails_each_way_of_dropping_the_password(edit, expected):
    assert blocking(rendered(), "no-unauthenticated-redis") == []
    found = blocking(_mutated(edit), "no-unauthenticated-redis")
    assert found and all(expected in message for message in found), found


def test_an_acl_file_from_a_mounted_secret_counts_as_authentication():
    """redis.conf (7.4.1) lines 1036-1049: `aclfile` defines the users instead of `requirepass`."""
    def acl_from_secret(resources):
        deployment = named(resources, "Deployment", "redis")
        pod = deployment["inputs"]["spec"]["template"]["spec"]
        redis = _redis_container(resources)
        _without_password(resources)
        redis["command"] += ["--aclfile", "/etc/redis/users.acl"]
        redis["volumeMounts"].append({"name": "acl", "mountPath": "/etc/redis", "readOnly": True})
        pod["volumes"].append({"name": "acl", "secret": {"secretName": "redis-acl"}})

    assert blocking(_mutated(acl_from_secret), "no-unauthenticated-redis") == []

    def acl_from_config_map(resources):
        acl_from_secret(resources)
        pod = named(resources, "Deployment", "redis")["inputs"]["spec"]["template"]["spec"]
        pod["volumes"][-1] = {"name": "acl", "configMap": {"name": "redis-acl"}}

    (message,) = blocking(_mutated(acl_from_config_map), "no-unauthenticated-redis")
    assert "outside a mounted Secret" in message


def test_literal_secrets_policy_covers_the_queue_password_env():
    """The workers' REDIS_PASSWORD (a secret's name) set as a literal is a no-literal-secrets violation."""
    def literal_worker_password(resources):
        worker = load_stack(STACKS, "prod").workers[0].name
        for entry in container(named(resources, "Deployment", worker))["env"]:
            if entry["name"] == REDIS_PASSWORD_ENV:
                entry.pop("valueFrom")
                entry["value"] = "hunter2-queue"

    assert blocking(rendered(), "no-literal-secrets") == []
    (message,) = blocking(_mutated(literal_worker_password), "no-literal-secrets")
    assert REDIS_PASSWORD_ENV in message



def test_literal_secrets_policy_covers_a_literal_requirepass():
    """redis.conf 1036-1049: `--requirepass <password>` sets the password itself, so a literal after it is secret
    material in the clear (no-literal-secrets), besides an unauthenticated-Redis risk."""
    def literal_requirepass(resources):
        command = container(named(resources, "Deployment", "redis"))["command"]
        command[command.index("--requirepass") + 1] = "hunter2-queue"

    (message,) = blocking(_mutated(literal_requirepass), "no-literal-secrets")
    assert "--requirepass" in message
