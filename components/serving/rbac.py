"""A namespaced Role granted to one service account: the endpoint picker's read of its pods and pools, the routing
sidecar's read of its prefill pool. One shape, so both grant what they grant the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
from pulumi_kubernetes.rbac.v1 import Role, RoleBinding


def granted_role(
    prefix: str,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    rules: Sequence[Mapping[str, Any]],
    service_account: str,
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource],
    binding_waits_for: Sequence[pulumi.Resource] = (),
) -> RoleBinding:
    """Role `name` and the RoleBinding that grants it to `service_account`. The binding waits for its Role (and
    `binding_waits_for`), so whatever waits for the binding starts with the permission in place."""
    metadata = {"name": name, "namespace": namespace, "labels": dict(labels)}
    role = Role(
        f"{prefix}-role",
        metadata=metadata,
        rules=[dict(rule) for rule in rules],
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )
    return RoleBinding(
        f"{prefix}-rolebinding",
        metadata=metadata,
        subjects=[{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[*depends_on, role, *binding_waits_for]),
    )
