"""The inferstack policy pack: every rule, in the order reports list them.

`policies/__main__.py` serves this list to the Pulumi CLI; `inferstack check` runs the very same
objects offline (inferstack.policies.runner), so the two cannot disagree.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, Policy

from inferstack.policies.autoscaler_templates import autoscaler_node_templates
from inferstack.policies.budget import budget_at_max_scale
from inferstack.policies.capacity import batch_on_spot, serving_on_demand_baseline
from inferstack.policies.controller_names import controller_created_names
from inferstack.policies.edge import authenticated_routes, https_listener
from inferstack.policies.efa_image import efa_capable_image
from inferstack.policies.gpu_requests import gpu_requests_advertised
from inferstack.policies.iam import iam_least_privilege
from inferstack.policies.interruption import spot_interruption_budget
from inferstack.policies.kueue_quotas import kueue_quotas_within_pools
from inferstack.policies.literals import no_literal_secrets
from inferstack.policies.network import efa_placement_and_security_group, serving_pods_network_policy
from inferstack.policies.pinning import helm_releases_pinned, images_pinned
from inferstack.policies.privilege import no_privileged_workloads
from inferstack.policies.redis_auth import no_unauthenticated_redis
from inferstack.policies.scaling import keda_scaling_bounds
from inferstack.policies.slo_capacity import slo_capacity
from inferstack.policies.storage import s3_buckets_private_encrypted
from inferstack.policies.vllm_serving import (
    vllm_disruption_budget,
    vllm_fp8_kv_cache,
    vllm_parallel_layout,
    vllm_prefix_caching,
    vllm_probes_and_requests,
)

PACK_NAME = "inferstack"
# What a policy without its own level gets (every rule here sets one); pulumi_policy's default too.
PACK_ENFORCEMENT = EnforcementLevel.ADVISORY

POLICIES: list[Policy] = [
    images_pinned,
    helm_releases_pinned,
    serving_on_demand_baseline,
    spot_interruption_budget,
    gpu_requests_advertised,
    autoscaler_node_templates,
    efa_placement_and_security_group,
    serving_pods_network_policy,
    efa_capable_image,
    iam_least_privilege,
    s3_buckets_private_encrypted,
    no_literal_secrets,
    no_unauthenticated_redis,
    no_privileged_workloads,
    keda_scaling_bounds,
    slo_capacity,
    vllm_probes_and_requests,
    vllm_disruption_budget,
    vllm_parallel_layout,
    controller_created_names,
    kueue_quotas_within_pools,
    budget_at_max_scale,
    vllm_prefix_caching,
    vllm_fp8_kv_cache,
    batch_on_spot,
    https_listener,
    authenticated_routes,
]
