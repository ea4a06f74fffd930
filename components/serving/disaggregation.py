"""What a prefill or decode engine's pod adds: the llm-d routing sidecar in front of a decode engine, the NIXL side
channel, and the labels the endpoint picker filters roles by.

The sidecar (llm-d-router v0.10.0 deploy/components/vllm-decode/deployment.yaml, pkg/sidecar/proxy/options.go)
runs as a native sidecar (an init container with restartPolicy Always, so it starts before vLLM and lives as long
as the pod) on the service port; it reads the picker's `x-prefiller-host-port` header, has the named prefill engine
compute the prompt, then hands the request with its KV-transfer parameters to the local vLLM on
DECODE_ENGINE_PORT. Prefill engines serve on the service port themselves and need no sidecar.
NIXL's handshake listens on VLLM_NIXL_SIDE_CHANNEL_HOST:VLLM_NIXL_SIDE_CHANNEL_PORT, localhost by default
(vllm/envs.py), so each engine advertises its pod IP.
"""

from __future__ import annotations

from typing import Any

from inferstack.catalog.charts import IMAGES
from inferstack.planning.disaggregation import ROLE_LABEL, SIDE_CHANNEL_PORT
from inferstack.serving import pods
from inferstack.serving.vllm_args import DECODE_ENGINE_PORT, VLLM_PORT
from inferstack.spec import ModelServiceSpec

SIDECAR_IMAGE = IMAGES["llm-d-disagg-sidecar"]
SIDECAR_UID = 65532  # the image's user (llm-d-router v0.10.0 Dockerfile.sidecar)
# The decode sidecars keep idle connections to prefill engines for 90 s (llm-d-router v0.10.0 pkg/sidecar/proxy/
# proxy.go IdleConnTimeout) and do not retry a POST a server closed; vLLM closes idle ones after 5 s
# (vllm/envs.py VLLM_HTTP_TIMEOUT_KEEP_ALIVE), so a prefill engine keeps them longer than the sidecar does.
PREFILL_KEEP_ALIVE_SECONDS = 120
# The labels a disaggregated service's InferencePool selects: both roles' pods.
SERVICE_LABEL = "inferstack.dev/disaggregated-service"
ZONE_LABEL = "topology.kubernetes.io/zone"


def role_labels(model: ModelServiceSpec) -> dict[str, str]:
    if model.pd_role is None:
        return {}
    return {ROLE_LABEL: model.pd_role, SERVICE_LABEL: model.pd_service}


def inference_pool_selector(service: str) -> dict[str, str]:
    return {SERVICE_LABEL: service}


def engine_env(model: ModelServiceSpec) -> list[dict[str, Any]]:
    """The NIXL side channel on the pod IP; on a prefill engine, HTTP keep-alive past the sidecars' idle timeout."""
    env = [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    if model.pd_role == "prefill":
        env.append({"name": "VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "value": str(PREFILL_KEEP_ALIVE_SECONDS)})
    return env


def same_zone(model: ModelServiceSpec) -> dict[str, Any]:
    """Required pod affinity to the service's other engines' zone: the KV cache never leaves it, also where the
    spec cannot see the zones (existing subnets). The first engine matches its own selector, so it schedules
    anywhere (Kubernetes "Assigning Pods to Nodes", inter-pod affinity), and the rest follow it."""
    return {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": ZONE_LABEL, "labelSelector": {"matchLabels": inference_pool_selector(model.pd_service)}}
    ]}


def side_channel_port() -> dict[str, Any]:
    return {"name": "nixl", "containerPort": SIDE_CHANNEL_PORT, "protocol": "TCP"}


def routing_sidecar() -> dict[str, Any]:
    """The decode pod's front door on the service port, in front of vLLM."""
    return {
        "name": "routing-sidecar",
        "image": SIDECAR_IMAGE,
        "restartPolicy": "Always",
        "args": [
            f"--port={VLLM_PORT}",
            f"--model-server-port={DECODE_ENGINE_PORT}",
            "--kv-connector=nixlv2",
            # Plain HTTP inside the cluster, as between the gateway and every other model server.
            "--secure-proxy=false",
        ],
        "ports": [{"name": "http", "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "resources": pods.resources(500, 512 * 1024**2),
        "securityContext": {**pods.RESTRICTED, "runAsNonRoot": True, "runAsUser": SIDECAR_UID, "runAsGroup": SIDECAR_UID},
    }
