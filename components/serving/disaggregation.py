"""What a prefill or decode engine's pod adds: the llm-d routing sidecar in front of a decode engine, the NIXL side
channel, and the labels the endpoint picker filters roles by.

The sidecar (llm-d-router v0.10.0 deploy/components/vllm-decode/deployment.yaml, pkg/sidecar/proxy/options.go)
runs as a native sidecar (an init container with restartPolicy Always, so it starts before vLLM and lives as long
as the pod) on the service port; it reads the picker's `x-prefiller-host-port` header, has the named prefill engine
compute the prompt, then hands the request with its KV-transfer parameters to the local vLLM on
DECODE_ENGINE_PORT. Prefill engines serve on the service port themselves and need no sidecar.
NIXL's handshake listens on VLLM_NIXL_SIDE_CHANNEL_HOST:VLLM_NIXL_SIDE_CHANNEL_PORT, localhost by default
(vllm/envs.py), so each engine advertises its pod IP.

The sidecar POSTs the prompt to whatever host:port `x-prefiller-host-port` names (pkg/sidecar/proxy/
chat_completions.go:86-132). The picker writes that header only when it splits a request and never removes a
client's (pkg/epp/handlers/request.go:106-150 only sets headers), so the gateway strips it on every route and the
sidecar runs `--enable-ssrf-protection` (options.go:67, :668-671: it then needs `--inference-pool`): it forwards
only to pods of the InferencePool it names (allowlist.go:196-214, 360-395: pod IPs and names of the pods its
selector matches), here one that selects the service's own prefill pods and no route uses. The allowlist watches
that InferencePool (a field selector on its name) and its pods through the Kubernetes API, so the sidecar alone
mounts a projected service-account token; the pod keeps automountServiceAccountToken off for vLLM.
"""

from __future__ import annotations

from typing import Any

from inferstack.catalog.charts import IMAGES
from inferstack.planning.disaggregation import ROLE_LABEL, SIDE_CHANNEL_PORT, prefill_name
from inferstack.serving import pods
from inferstack.serving.inference_api import INFERENCE_GROUP
from inferstack.serving.vllm_args import DECODE_ENGINE_PORT, VLLM_PORT
from inferstack.spec import ModelServiceSpec

SIDECAR_IMAGE = IMAGES["llm-d-disagg-sidecar"]
SIDECAR_UID = 65532  # the image's user (llm-d-router v0.10.0 Dockerfile.sidecar)
# The decode sidecar keeps idle connections, to prefill engines and to its own vLLM alike, for 90 s (llm-d-router
# v0.10.0 pkg/sidecar/proxy/proxy.go:541-551 newProxyTransport, used by proxy_helpers.go:140-142 for the decoder)
# and does not retry a POST a server closed; vLLM closes idle ones after 5 s (vllm/envs.py:110
# VLLM_HTTP_TIMEOUT_KEEP_ALIVE), so every engine behind a sidecar keeps them longer than the sidecar does.
SIDECAR_KEEP_ALIVE_SECONDS = 120
# Headers the routing sidecar takes as where to send a request (pkg/common/routing/common.go:12-26): only the
# picker may set them, so the gateway removes them from every request it receives.
SIDECAR_ROUTING_HEADERS = (
    "x-prefiller-host-port", "x-encoder-hosts-ports", "x-data-parallel-host-port", "x-kv-cache-source-host-port",
)
SIDECAR_TOKEN_VOLUME = "routing-sidecar-token"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where client-go's in-cluster config reads
TOKEN_SECONDS = 3607  # the kubelet's own projected token lifetime (rotated at 80 percent)
# The labels a disaggregated service's InferencePool selects: both roles' pods.
SERVICE_LABEL = "inferstack.dev/disaggregated-service"
ZONE_LABEL = "topology.kubernetes.io/zone"


def role_labels(model: ModelServiceSpec) -> dict[str, str]:
    if model.pd_role is None:
        return {}
    return {ROLE_LABEL: model.pd_role, SERVICE_LABEL: model.pd_service}


def inference_pool_selector(service: str) -> dict[str, str]:
    return {SERVICE_LABEL: service}


def prefill_allowlist(service: str) -> str:
    """The InferencePool the decode sidecars of `service` may send prompts to: its prefill pods only (reserved in
    names.object_names)."""
    return prefill_name(service)


def prefill_allowlist_spec(service: str) -> dict[str, Any]:
    """Selects the service's prefill pods; no route names it, so it carries no traffic and needs no picker."""
    return {"selector": {"matchLabels": {SERVICE_LABEL: service, ROLE_LABEL: "prefill"}},
            "targetPorts": [{"number": VLLM_PORT}]}


def sidecar_rules(service: str) -> list[dict[str, Any]]:
    """What the SSRF allowlist reads: its InferencePool by name (a list or watch with a metadata.name field selector
    is authorized by resourceNames) and the pods it selects."""
    return [
        {"apiGroups": [INFERENCE_GROUP], "resources": ["inferencepools"],
         "resourceNames": [prefill_allowlist(service)], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    ]


def engine_env(model: ModelServiceSpec) -> list[dict[str, Any]]:
    """The NIXL side channel on the pod IP; HTTP keep-alive past the sidecars' idle timeout (every engine of a
    disaggregated service sits behind one: prefill engines behind the decode pods', decode engines behind their own)."""
    return [
        {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "value": str(SIDECAR_KEEP_ALIVE_SECONDS)},
    ]


def same_zone(model: ModelServiceSpec) -> dict[str, Any]:
    """Required pod affinity to the service's other engines' zone: the KV cache never leaves it, also where the
    spec cannot see the zones (existing subnets). The first engine matches its own selector, so it schedules
    anywhere (Kubernetes "Assigning Pods to Nodes", inter-pod affinity), and the rest follow it."""
    return {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": ZONE_LABEL, "labelSelector": {"matchLabels": inference_pool_selector(model.pd_service)}}
    ]}


def side_channel_port() -> dict[str, Any]:
    return {"name": "nixl", "containerPort": SIDE_CHANNEL_PORT, "protocol": "TCP"}


def sidecar_token_volume() -> dict[str, Any]:
    """A service-account token, the cluster CA and the namespace where client-go looks for them, for the sidecar."""
    return {"name": SIDECAR_TOKEN_VOLUME, "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]}}


def routing_sidecar(namespace: str, model: ModelServiceSpec) -> dict[str, Any]:
    """The decode pod's front door on the service port, in front of vLLM, sending prompts only to its prefill pods."""
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
            "--enable-ssrf-protection=true",
            f"--inference-pool={namespace}/{prefill_allowlist(model.pd_service)}",
            f"--pool-group={INFERENCE_GROUP}",
        ],
        "ports": [{"name": "http", "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "resources": pods.resources(500, 512 * 1024**2),
        "securityContext": {**pods.RESTRICTED, "runAsNonRoot": True, "runAsUser": SIDECAR_UID, "runAsGroup": SIDECAR_UID},
        "volumeMounts": [{"name": SIDECAR_TOKEN_VOLUME, "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}],
    }
