"""karpenter: GPU nodes launched by Karpenter instead of managed node groups. H100s on EFA whose on-demand baseline
is an ODCR, L40S on spot above one on-demand node, an A100 split by MIG (strategy single, which Karpenter can
request as nvidia.com/gpu), and a 70B, an 8B and an embedding model on them. Karpenter sizes a new A100 node from
its 8 GPUs, not the 16 slices it advertises once MIG is applied, so a burst of slice pods may get a node more than
it needs, which empties and goes after 30 minutes."""

from inferstack.spec import (
    AutoscalingSpec,
    CapacitySpec,
    MigSharing,
    ModelServiceSpec,
    NodePoolSpec,
    PlatformSpec,
    Reservation,
    StackSpec,
)

stack = StackSpec(
    environment="karpenter",
    region="us-east-1",
    tags={"team": "ml-platform", "env": "karpenter"},
    platform=PlatformSpec(node_autoscaler="karpenter"),
    node_pools=[
        NodePoolSpec(
            name="h100",
            instance_types=["p5.48xlarge"],
            max_nodes=3,
            capacity=CapacitySpec(on_demand_base=2, spot=True, reservation=Reservation(kind="odcr", id="cr-0123456789abcdef0")),
            efa=True,
        ),
        NodePoolSpec(
            name="l40s",
            instance_types=["g6e.2xlarge", "g6e.4xlarge", "g6e.xlarge"],
            max_nodes=4,
            capacity=CapacitySpec(on_demand_base=1, spot=True),
        ),
        NodePoolSpec(
            name="a100-mig",
            instance_types=["p4de.24xlarge"],
            max_nodes=1,
            capacity=CapacitySpec(on_demand_base=1, spot=False),
            gpu_sharing=MigSharing(mode="mig", strategy="single", layout={"3g.40gb": 2}),
        ),
    ],
    models=[
        ModelServiceSpec(
            name="llama-70b",
            model="meta-llama/Llama-3.1-70B-Instruct",
            pool="h100",
            tensor_parallel=8,
            max_model_len=32768,
            max_num_seqs=16,
            kv_cache_dtype="fp8",
            autoscaling=AutoscalingSpec(min_replicas=1, max_replicas=2),
        ),
        ModelServiceSpec(
            name="llama-8b",
            model="meta-llama/Llama-3.1-8B-Instruct",
            pool="l40s",
            max_model_len=8192,
            autoscaling=AutoscalingSpec(min_replicas=1, max_replicas=4),
        ),
        ModelServiceSpec(
            name="embed",
            model="BAAI/bge-large-en-v1.5",
            pool="a100-mig",
            max_model_len=512,
            tier="standard",
        ),
    ],
)
