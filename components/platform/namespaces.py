"""The namespaces model services (serving) and workers and batch jobs (batch) run in."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_kubernetes.core.v1 import Namespace

from inferstack.conventions import MANAGED_BY
from inferstack.spec import StackSpec


@dataclass(frozen=True)
class NamespacesArgs:
    spec: StackSpec


class Namespaces(pulumi.ComponentResource):
    """One Namespace per distinct name; `by_role` maps 'serving' and 'batch' to theirs (the same one if the
    spec gives both roles one namespace)."""

    by_role: dict[str, Namespace]

    def __init__(self, name: str, args: NamespacesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:platform:Namespaces", name, None, opts)
        spec = args.spec
        wanted = {"serving": spec.serving_namespace, "batch": spec.batch_namespace}
        created: dict[str, Namespace] = {}
        for namespace in dict.fromkeys(wanted.values()):
            created[namespace] = Namespace(
                f"{name}-{namespace}",
                metadata={"name": namespace, "labels": dict(MANAGED_BY)},
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.by_role = {role: created[namespace] for role, namespace in wanted.items()}
        self.register_outputs({"namespaces": list(created)})
