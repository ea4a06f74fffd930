"""The ResourceClaimTemplate a service's or batch job's pods claim their devices from on a DRA pool.

Its spec is immutable (kubernetes pkg/apis/resource/validation ValidateResourceClaimTemplateUpdate), and
pulumi-kubernetes would try to update it in place, so a changed spec replaces it under the same name: deleted
first, then created. Claims already generated from it stay with their pods; new pods claim from the new one.
"""

from __future__ import annotations

import pulumi
from pulumi_kubernetes.resource.v1 import ResourceClaimTemplate

from inferstack.planning.device_claims import pod_claims, uses_dra
from inferstack.serving import names
from inferstack.spec import ModelServiceSpec
from inferstack.spec.pools import PoolHardware


def claim_template(
    resource_name: str, owner: str, namespace: str, model: ModelServiceSpec, hardware: PoolHardware,
    labels: dict[str, str], opts: pulumi.ResourceOptions,
) -> list[ResourceClaimTemplate]:
    """The owner's template on a DRA pool (as a list its workload can depend on), none on a device-plugin pool."""
    if not uses_dra(hardware):
        return []
    return [ResourceClaimTemplate(
        resource_name,
        metadata={"name": names.claim_template(owner), "namespace": namespace, "labels": labels},
        spec={"spec": pod_claims(model, hardware).claim.claim_spec()},
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(replace_on_changes=["spec"], delete_before_replace=True)
        ),
    )]
