"""serving: the engine features of a 2026 serving platform on one stack. A Qwen3 32B on H100s (EFA) split into
prefill and decode engines that hand the KV cache over EFA; a Llama 3.1 8B on L40S serving three LoRA adapters
routed by name; a Qwen3 14B on L40S with a host-memory KV-cache tier the endpoint picker routes to; a Llama 3.3
70B on the H100s with an EAGLE-3 draft head for latency; every adapter and the draft pre-fetched to the NVMe
cache beside the base weights."""

from inferstack.spec import (
    AutoscalingSpec,
    CapacitySpec,
    DisaggregationSpec,
    KvOffloadSpec,
    LoraAdapterSpec,
    ModelServiceSpec,
    NodePoolSpec,
    PrefillSpec,
    SpeculativeSpec,
    StackSpec,
    TrafficSpec,
)

stack = StackSpec(
    environment="serving",
    region="us-east-1",
    tags={"team": "ml-platform", "env": "serving"},
    node_pools=[
        NodePoolSpec(
            name="h100",
            instance_types=["p5.48xlarge"],
            min_nodes=1,
            max_nodes=2,
            capacity=CapacitySpec(on_demand_base=1, spot=True),
            efa=True,
        ),
        NodePoolSpec(
            name="l40s",
            instance_types=["g6e.4xlarge"],
            min_nodes=2,
            max_nodes=6,
            capacity=CapacitySpec(on_demand_base=2, spot=True),
        ),
    ],
    models=[
        ModelServiceSpec(
            name="qwen-32b-pd",
            model="Qwen/Qwen3-32B",
            kv_cache_dtype="fp8",
            pool="h100",
            tensor_parallel=2,                                    # decode: the service's own engines
            max_model_len=32768,
            max_num_seqs=16,
            disaggregation=DisaggregationSpec(
                prefill=PrefillSpec(tensor_parallel=1, autoscaling=AutoscalingSpec(min_replicas=1, max_replicas=4)),
                non_cached_tokens=256,                            # short or cached prompts prefill on the decoder
            ),
            autoscaling=AutoscalingSpec(min_replicas=1, max_replicas=2),
            traffic=TrafficSpec(requests_per_second=3, mean_input_tokens=8000, mean_output_tokens=400),
        ),
        ModelServiceSpec(
            name="llama-8b-lora",
            model="meta-llama/Llama-3.1-8B-Instruct",
            pool="l40s",
            max_model_len=8192,
            max_num_seqs=16,
            hf_token_secret="hf-token",
            lora_adapters=[
                LoraAdapterSpec(name="support-agent", weights="s3://ml-adapters/llama-8b/support-agent/v3", rank=16),
                LoraAdapterSpec(name="sql-writer", weights="s3://ml-adapters/llama-8b/sql-writer/v1", rank=32),
                LoraAdapterSpec(name="summarizer", weights="s3://ml-adapters/llama-8b/summarizer/v2", rank=8),
            ],
            autoscaling=AutoscalingSpec(min_replicas=1, max_replicas=3, metric="queue_depth", target=8),
        ),
        ModelServiceSpec(
            name="qwen-14b-tiered",
            model="Qwen/Qwen3-14B",
            quantization="fp8",
            kv_cache_dtype="fp8",
            pool="l40s",
            max_model_len=16384,
            max_num_seqs=8,
            kv_offload=KvOffloadSpec(cpu_gib=48),
            autoscaling=AutoscalingSpec(min_replicas=1, max_replicas=3, metric="kv_cache", target=0.8),
            traffic=TrafficSpec(
                requests_per_second=1.8, mean_input_tokens=6000, mean_output_tokens=300, shared_prefix_tokens=4000
            ),
        ),
        ModelServiceSpec(
            name="llama-70b-eagle",
            model="meta-llama/Llama-3.3-70B-Instruct",
            kv_cache_dtype="fp8",
            pool="h100",
            tensor_parallel=4,
            max_model_len=16384,
            max_num_seqs=16,
            hf_token_secret="hf-token",
            speculative=SpeculativeSpec(
                method="eagle3", model="yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
                weights="s3://ml-adapters/drafts/eagle3-llama3.3-70b/v1", draft_params_billion=1.6,
                num_speculative_tokens=3,
            ),
            autoscaling=AutoscalingSpec(min_replicas=1, max_replicas=2),
            traffic=TrafficSpec(requests_per_second=1, mean_input_tokens=1500, mean_output_tokens=500),
        ),
    ],
)
