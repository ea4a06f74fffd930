"""The Gateway API Inference Extension's API group and the InferencePool's version (GAIE v1.6.0
config/crd/bases/inference.networking.k8s.io_inferencepools.yaml), shared by the gateway and the decode pods'
routing sidecar, which both read InferencePools."""

INFERENCE_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_GROUP}/v1"
