"""Helm releases from the pinned chart catalog, so every release names a chart, repository and version."""

from __future__ import annotations

from typing import Any, Mapping

import pulumi

from inferstack.catalog.charts import chart

# Operators such as the GPU operator take several minutes to become ready; Helm waits this long.
DEFAULT_TIMEOUT_SECONDS = 900


def helm_release(
    resource_name: str,
    chart_key: str,
    *,
    namespace: str,
    values: Mapping[str, Any],
    opts: pulumi.ResourceOptions,
    release_name: str | None = None,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
):
    """A `helm.v3.Release` of a catalog chart, waiting for its workloads (Helm's --wait) up to the timeout."""
    from pulumi_kubernetes.helm.v3 import Release, RepositoryOptsArgs

    pinned = chart(chart_key)
    return Release(
        resource_name,
        name=release_name or chart_key,
        chart=pinned.chart,
        version=pinned.version,
        repository_opts=RepositoryOptsArgs(repo=pinned.repository) if pinned.repository else None,
        namespace=namespace,
        create_namespace=True,
        values=dict(values),
        timeout=timeout_seconds,
        atomic=False,
        cleanup_on_fail=True,
        opts=opts,
    )
