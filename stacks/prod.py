"""prod: the whole platform. H100s on EFA with an on-demand baseline and spot on top, an A100 pool
split by MIG, L40S pools for serving and for batch; a 4-bit 70B, a long-context 70B across two
nodes, an FP8 8B, an embedding model on a MIG slice, a queue-fed worker and a batch job."""

from inferstack.spec import (
    AutoscalingSpec,
    BatchJobSpec,
    CapacitySpec,
    GatewaySpec,
    LatencySlo,
    MigSharing,
    ModelServiceSpec,
    NodePoolSpec,
    QueueWorkerSpec,
    StackSpec,
    TrafficSpec,
)
from inferstack.spec.edge import EdgeAuthSpec, JwtIssuerSpec, TenantSpec

stack = StackSpec(
    environment="prod",
    region="us-east-1",
    tags={"team": "ml-platform", "env": "prod"},
    node_pools=[
        NodePoolSpec(
            name="h100",
            instance_types=["p5.48xlarge"],
            min_nodes=2,
            max_nodes=7,                                          # both 70B services at max replicas
            capacity=CapacitySpec(on_demand_base=2, spot=True),
            efa=True,
        ),
        NodePoolSpec(
            name="a100-mig",
            instance_types=["p4de.24xlarge"],
            min_nodes=1,
            max_nodes=2,
            capacity=CapacitySpec(on_demand_base=1, spot=False),
            gpu_sharing=MigSharing(mode="mig", strategy="mixed", layout={"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        ),
        NodePoolSpec(
            name="l40s",
            instance_types=["g6e.2xlarge", "g6e.4xlarge", "g6e.xlarge"],
            min_nodes=2,
            max_nodes=7,                                          # one node of room: updates surge
            capacity=CapacitySpec(on_demand_base=2, spot=True),
        ),
        NodePoolSpec(
            name="l40s-batch",
            role="batch",
            instance_types=["g6e.xlarge", "g6e.2xlarge", "g6e.4xlarge"],
            min_nodes=0,
            max_nodes=8,
            capacity=CapacitySpec(on_demand_base=0, spot=True),
        ),
    ],
    # HTTPS with the Secret inference-gateway-tls (cert-manager or the team keeps it); callers bring a token of the
    # company's OIDC issuer whose `tenant` claim names a tenant below, which may call only its models, each at most
    # requests_per_minute (600 unless stated) on each gateway pod; a saturated service queues each tenant apart.
    gateway=GatewaySpec(auth=EdgeAuthSpec(
        jwt=JwtIssuerSpec(issuer="https://login.acme.example", audiences=["inference-prod"],
                          jwks_uri="https://login.acme.example/.well-known/jwks.json"),
        tenants=[
            TenantSpec(name="search", models=["llama-70b", "llama-8b-fp8", "bge-embed"]),
            TenantSpec(name="legal", models=["llama-70b-long"], requests_per_minute=120),
        ],
    )),
    models=[
        ModelServiceSpec(
            name="llama-70b",
            model="hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
            quantization="awq",
            kv_cache_dtype="fp8",
            pool="h100",
            tensor_parallel=4,
            max_model_len=24576,                                  # 64 sequences of it fit a replica's KV cache
            max_num_seqs=64,
            autoscaling=AutoscalingSpec(min_replicas=2, max_replicas=6, metric="queue_depth", target=8),
            traffic=TrafficSpec(requests_per_second=20, mean_input_tokens=2048, mean_output_tokens=400),
        ),
        ModelServiceSpec(
            name="llama-70b-long",
            model="meta-llama/Llama-3.1-70B-Instruct",
            kv_cache_dtype="fp8",
            pool="h100",
            tensor_parallel=8,
            pipeline_parallel=2,
            max_model_len=131072,
            max_num_seqs=32,
            tier="standard",
            hf_token_secret="hf-token",
            autoscaling=AutoscalingSpec(min_replicas=1, max_replicas=2, metric="kv_cache", target=0.8),
        ),
        ModelServiceSpec(
            name="llama-8b-fp8",
            model="RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
            quantization="fp8",
            kv_cache_dtype="fp8",
            pool="l40s",
            max_model_len=8192,                                   # 60 sequences of it fit a replica's KV cache
            max_num_seqs=60,
            autoscaling=AutoscalingSpec(min_replicas=2, max_replicas=6, metric="epp_queue"),  # online: never one
            # A 512-token system prompt shared by every request is served from the prefix cache; the SLO sizes
            # the replicas for chat (the plan shows how many the traffic alone would need).
            traffic=TrafficSpec(
                requests_per_second=40, mean_input_tokens=1024, mean_output_tokens=256, shared_prefix_tokens=512
            ),
            slo=LatencySlo(ttft_ms=500, itl_ms=40),
        ),
        ModelServiceSpec(
            name="bge-embed",
            model="BAAI/bge-large-en-v1.5",
            pool="a100-mig",
            mig_profile="1g.10gb",
            max_model_len=512,
            autoscaling=AutoscalingSpec(min_replicas=2, max_replicas=4),
        ),
    ],
    workers=[
        QueueWorkerSpec(
            name="summarizer",
            model_service="llama-8b-fp8",
            image="python:3.13.1-slim",
            jobs_per_replica=5,
            min_replicas=0,
            max_replicas=20,
            cooldown_seconds=300,
        ),
    ],
    batch_jobs=[
        BatchJobSpec(
            name="nightly-eval",
            model_service="llama-8b-fp8",
            pool="l40s-batch",
            input="s3://acme-ml-batch/eval/input.jsonl",
            output="s3://acme-ml-batch/eval/output/",
            parallelism=4,
            schedule="0 2 * * *",
            time_zone="UTC",
            starting_deadline_seconds=3600,
        ),
    ],
    budget={"max_usd_per_hour": 450.0},
)
