"""dra: GPUs and EFA devices through Dynamic Resource Allocation beside a device-plugin pool. H100s on EFA whose
pods claim each GPU with the 4 EFA devices on its PCIe root (a 70B across two nodes and a 4-bit 70B on half a
node), L40S claimed by compute capability for an FP8 8B, and an L40S batch pool that keeps the device plugin.
Kubernetes 1.36 (DRA needs 1.34, AWS's EFA driver 1.35), node groups with cluster-autoscaler, and a standing
node in every node group of a DRA pool: the autoscaler learns a group's devices from a running node."""

from inferstack.spec import (
    AutoscalingSpec,
    BatchJobSpec,
    CapacitySpec,
    GatewaySpec,
    GpuSelector,
    ModelServiceSpec,
    NodePoolSpec,
    StackSpec,
)
from inferstack.spec.cluster import CreateCluster
from inferstack.spec.edge import EdgeAuthSpec, JwtIssuerSpec, TenantSpec

stack = StackSpec(
    environment="dra",
    region="us-east-1",
    tags={"team": "ml-platform", "env": "dra"},
    cluster=CreateCluster(kubernetes_version="1.36"),
    node_pools=[
        NodePoolSpec(
            name="h100",
            instance_types=["p5.48xlarge"],
            device_mode="dra",
            min_nodes=3,                                           # the 70B's two nodes and the 4-bit 70B's half
            max_nodes=3,                                           # node, twice: one fixed group, nothing to grow
            capacity=CapacitySpec(on_demand_base=3, spot=False),
            efa=True,
        ),
        NodePoolSpec(
            name="l40s",
            instance_types=["g6e.2xlarge", "g6e.4xlarge"],
            device_mode="dra",
            gpu_selector=GpuSelector(min_compute_capability="8.9"),
            min_nodes=3,                                           # a standing spot node above the baseline shows
            max_nodes=5,                                           # cluster-autoscaler the devices a new one brings
            capacity=CapacitySpec(on_demand_base=2, spot=True),
        ),
        NodePoolSpec(
            name="l40s-batch",
            role="batch",
            instance_types=["g6e.xlarge", "g6e.2xlarge"],
            min_nodes=0,
            max_nodes=4,
        ),
    ],
    gateway=GatewaySpec(auth=EdgeAuthSpec(
        jwt=JwtIssuerSpec(issuer="https://login.acme.example", audiences=["inference-dra"],
                          jwks_uri="https://login.acme.example/.well-known/jwks.json"),
        tenants=[TenantSpec(name="search", models=["llama-70b-long", "llama-70b", "llama-8b-fp8"])],
    )),
    models=[
        ModelServiceSpec(
            name="llama-70b-long",
            model="meta-llama/Llama-3.1-70B-Instruct",
            kv_cache_dtype="fp8",
            pool="h100",
            tensor_parallel=8,
            pipeline_parallel=2,                                   # two pods of 8 claims, one per GPU and its EFAs
            max_model_len=131072,
            max_num_seqs=32,
            tier="standard",
            hf_token_secret="hf-token",
        ),
        ModelServiceSpec(
            name="llama-70b",
            model="hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
            quantization="awq",
            kv_cache_dtype="fp8",
            pool="h100",
            tensor_parallel=4,                                     # 4 GPU claims, no EFA: it talks over NVLink
            max_model_len=24576,
            max_num_seqs=64,
            autoscaling=AutoscalingSpec(min_replicas=1, max_replicas=2, metric="queue_depth", target=8),
        ),
        ModelServiceSpec(
            name="llama-8b-fp8",
            model="RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
            quantization="fp8",
            kv_cache_dtype="fp8",
            pool="l40s",
            max_model_len=8192,
            max_num_seqs=60,
            autoscaling=AutoscalingSpec(min_replicas=2, max_replicas=4, metric="epp_queue"),
        ),
    ],
    batch_jobs=[
        BatchJobSpec(
            name="nightly-eval",
            model_service="llama-8b-fp8",
            pool="l40s-batch",
            input="s3://acme-ml-batch/eval/input.jsonl",
            output="s3://acme-ml-batch/eval/output/",
            parallelism=2,
            schedule="0 2 * * *",
            time_zone="UTC",
        ),
    ],
    budget={"max_usd_per_hour": 300.0},
)
