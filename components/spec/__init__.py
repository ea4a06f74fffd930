"""The typed stack spec, the bottom floor: its types (one module per concept), the cross-field rules that need
nothing but the spec and the catalog (checks.py, pool_checks.py, service_checks.py), and error messages.

It imports the catalog and nothing above it: the layers' own rules live beside the layers, and
`inferstack.validation` runs them all, so loading the spec loads neither Pulumi nor planning.
"""

from inferstack.spec.errors import SpecError, describe_validation_error
from inferstack.spec.architecture import SIXTEEN_BIT, CheckpointFormat, ModelArchitecture, catalog_stored_format
from inferstack.spec.autoscaling import AutoscalingSpec
from inferstack.spec.base import AUTO, DNS_LABEL, NAME_MAX_LENGTH, Model, Name, PinnedImage, S3Uri
from inferstack.spec.cluster import (
    ClusterSpec, CreateCluster, ExistingCluster, NetworkSpec, SystemNodesSpec, ZoneSubnetCidrs,
)
from inferstack.spec.model_services import (
    VLLM_ALL2ALL_BACKEND, All2AllBackend, LatencySlo, ModelServiceSpec, TrafficSpec,
)
from inferstack.spec.node_pools import (
    CapacitySpec, EfaSpec, GpuSelector, GpuSharing, MigSharing, MpsSharing, NodePoolSpec, NoSharing, NvmeCacheSpec,
    Reservation, Taint, TimeSlicing,
)
from inferstack.spec.platform import (
    BudgetSpec, GatewaySpec, MaintenanceWindowSpec, ObservabilitySpec, PlatformSpec, WeightsStoreSpec,
)
from inferstack.spec.queues import ClusterQueueSpec, PriorityClassSpec, QueuesSpec
from inferstack.spec.serving_features import (
    VLLM_LORA_RANKS, DisaggregationSpec, KvOffloadSpec, LoraAdapterSpec, PrefillSpec, SpeculativeSpec,
)
from inferstack.spec.stack import StackSpec
from inferstack.spec.workloads import BatchJobSpec, QueueWorkerSpec

__all__ = [
    "All2AllBackend",
    "AUTO",
    "AutoscalingSpec",
    "BatchJobSpec",
    "BudgetSpec",
    "CapacitySpec",
    "catalog_stored_format",
    "CheckpointFormat",
    "ClusterQueueSpec",
    "ClusterSpec",
    "CreateCluster",
    "describe_validation_error",
    "DisaggregationSpec",
    "DNS_LABEL",
    "EfaSpec",
    "ExistingCluster",
    "GatewaySpec",
    "GpuSharing",
    "KvOffloadSpec",
    "LatencySlo",
    "LoraAdapterSpec",
    "MaintenanceWindowSpec",
    "GpuSelector",
    "MigSharing",
    "Model",
    "ModelArchitecture",
    "ModelServiceSpec",
    "MpsSharing",
    "Name",
    "NAME_MAX_LENGTH",
    "NetworkSpec",
    "NodePoolSpec",
    "NoSharing",
    "NvmeCacheSpec",
    "ObservabilitySpec",
    "PinnedImage",
    "PlatformSpec",
    "PrefillSpec",
    "PriorityClassSpec",
    "QueuesSpec",
    "QueueWorkerSpec",
    "Reservation",
    "S3Uri",
    "SIXTEEN_BIT",
    "SpecError",
    "SpeculativeSpec",
    "StackSpec",
    "SystemNodesSpec",
    "Taint",
    "TimeSlicing",
    "TrafficSpec",
    "VLLM_ALL2ALL_BACKEND",
    "VLLM_LORA_RANKS",
    "WeightsStoreSpec",
    "ZoneSubnetCidrs",
]
