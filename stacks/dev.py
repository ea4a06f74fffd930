"""dev: small and cheap. One L4 pool on spot shared by time-slicing, one 4-bit 7B model that may
scale to zero when nobody is using it."""

from inferstack.spec import (
    AutoscalingSpec,
    CapacitySpec,
    GatewaySpec,
    ModelServiceSpec,
    NodePoolSpec,
    StackSpec,
    TimeSlicing,
)
from inferstack.spec.edge import EdgeAuthSpec, JwtIssuerSpec, TenantSpec

stack = StackSpec(
    environment="dev",
    region="us-east-1",
    tags={"team": "ml-platform", "env": "dev"},
    node_pools=[
        NodePoolSpec(
            name="l4",
            instance_types=["g6.xlarge", "g6.2xlarge", "g6.4xlarge"],
            min_nodes=0,
            max_nodes=2,
            capacity=CapacitySpec(on_demand_base=0, spot=True),
            gpu_sharing=TimeSlicing(mode="time_slicing", replicas=2),
        ),
    ],
    # HTTPS with the Secret inference-gateway-tls (cert-manager or the team keeps it); callers bring a token of the
    # company's OIDC issuer whose `tenant` claim names a tenant below, which may call only its models.
    gateway=GatewaySpec(auth=EdgeAuthSpec(
        jwt=JwtIssuerSpec(issuer="https://login.acme.example", audiences=["inference-dev"],
                          jwks_uri="https://login.acme.example/.well-known/jwks.json"),
        tenants=[TenantSpec(name="ml-platform", models=["qwen-7b"])],
    )),
    models=[
        ModelServiceSpec(
            name="qwen-7b",
            model="Qwen/Qwen2.5-7B-Instruct-AWQ",
            quantization="awq",
            pool="l4",
            max_model_len=8192,
            max_num_seqs=6,                                       # 7 full-length sequences fit half an L4
            tier="standard",
            autoscaling=AutoscalingSpec(min_replicas=0, max_replicas=2, scale_to_zero=True, cooldown_seconds=600),
        ),
    ],
    budget={"max_usd_per_hour": 5.0},
)
