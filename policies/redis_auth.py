"""No Redis without authentication: the server requires a password held in a Secret, and KEDA's redis triggers
present one.

Redis (redis.conf, redis/redis 7.4.1) lets every client in when the default user has no password and
protected mode is off; `requirepass` gives the default user a password and `aclfile` defines the users
instead (it wins over `requirepass`). A server counts as authenticated when its command line sets
`--requirepass $(VAR)` with VAR read from a Secret (secretKeyRef) or `--aclfile` on a mounted Secret.
A KEDA redis trigger without credentials cannot read the list once the server requires them
(kedacore/keda v2.20.2 pkg/scalers/redis_scaler.go: `password` comes from trigger metadata, the
target's env or a TriggerAuthentication).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from inferstack.policies.literals import REFERENCE
from inferstack.policies.props import dig, items, mapping, text
from inferstack.policies.workloads import PodTemplate, command_tokens, image_of, kind_of, workload

REDIS_SERVER = "redis-server"
REDIS_IMAGE_NAMES = ("redis", "redis-stack-server", "valkey")  # images whose entrypoint starts the server
# What a KEDA redis trigger may present: a TriggerAuthentication, or the password from the target's env.
KEDA_CREDENTIALS = ("passwordFromEnv",)


def _image_name(image: str) -> str:
    return image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]


def runs_redis_server(container: Mapping[str, Any]) -> bool:
    tokens = command_tokens(container)
    if tokens:
        return posixpath.basename(tokens[0]) == REDIS_SERVER or (
            REDIS_SERVER in tokens and _image_name(image_of(container)) in REDIS_IMAGE_NAMES
        )
    return _image_name(image_of(container)) in REDIS_IMAGE_NAMES


def _flag_value(tokens: list[str], flag: str) -> str | None:
    for index, token in enumerate(tokens):
        if token == flag and index + 1 < len(tokens):
            return tokens[index + 1]
        if token.startswith(f"{flag}="):
            return token.split("=", 1)[1]
    return None


def _secret_variables(container: Mapping[str, Any]) -> set[str]:
    """Env vars of the container whose value comes from a Secret key."""
    return {
        text(mapping(env).get("name"))
        for env in items(container.get("env"))
        if dig(env, "valueFrom", "secretKeyRef", "key", default=None) is not None
    }


def _secret_mount_paths(template: PodTemplate, container: Mapping[str, Any]) -> list[str]:
    secret_volumes = {
        text(mapping(volume).get("name")) for volume in items(template.spec.get("volumes")) if mapping(volume).get("secret")
    }
    return [
        text(mapping(mount).get("mountPath"))
        for mount in items(container.get("volumeMounts"))
        if text(mapping(mount).get("name")) in secret_volumes
    ]


def authentication_problem(template: PodTemplate, container: Mapping[str, Any]) -> str | None:
    """Why this Redis server lets clients in without a password from a Secret, or None."""
    tokens = command_tokens(container)
    acl_file = _flag_value(tokens, "--aclfile")
    if acl_file is not None:
        mounts = _secret_mount_paths(template, container)
        if any(posixpath.normpath(acl_file).startswith(path.rstrip("/") + "/") for path in mounts if path):
            return None
        return f"reads its ACL file {acl_file} from outside a mounted Secret"
    password = _flag_value(tokens, "--requirepass")
    if password is None:
        return "sets no --requirepass (nor --aclfile): any client that reaches it is in"
    if not REFERENCE.match(password):
        return "takes its --requirepass as a literal"
    variable = password.strip("$(){}")
    if variable not in _secret_variables(container):
        return f"takes its --requirepass from env {variable}, which no secretKeyRef sets"
    return None


def _unauthenticated_servers(args: ResourceValidationArgs, report: ReportViolation) -> None:
    found = workload(args.resource_type, args.props, args.name)
    if found is None:
        return
    for template in found.templates:
        for container in template.containers(init=False):
            if not runs_redis_server(container):
                continue
            problem = authentication_problem(template, container)
            if problem:
                report(
                    f"{found} container {text(container.get('name'), '?')!r} runs Redis that {problem}. To fix: set "
                    "`--requirepass $(REDIS_PASSWORD)` with REDIS_PASSWORD from a Secret (valueFrom.secretKeyRef), "
                    "or `--aclfile` on a mounted Secret."
                )


def _keda_redis_triggers(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if kind_of(args.resource_type) != "ScaledObject":
        return
    for index, trigger in enumerate(items(dig(args.props, "spec", "triggers", default=()))):
        trigger = mapping(trigger)
        if not text(trigger.get("type")).startswith("redis"):
            continue
        metadata = mapping(trigger.get("metadata"))
        if mapping(trigger.get("authenticationRef")).get("name") or any(metadata.get(key) for key in KEDA_CREDENTIALS):
            continue
        report(
            f"ScaledObject {args.name} trigger {index} ({text(trigger.get('type'))}) presents no Redis password. "
            "To fix: set authenticationRef to a TriggerAuthentication whose secretTargetRef maps parameter "
            "'password' to the queue's Secret."
        )


no_unauthenticated_redis = ResourceValidationPolicy(
    name="no-unauthenticated-redis",
    description="Redis requires a password (or ACL file) from a Secret, and KEDA's redis triggers present one.",
    validate=[_unauthenticated_servers, _keda_redis_triggers],
    enforcement_level=EnforcementLevel.MANDATORY,
)
