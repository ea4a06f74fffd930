"""One vLLM model service: its workload, ClusterIP Service, PodDisruptionBudget and pre-fetch script.

A replica on one node is a Deployment pod; a replica spanning nodes (pipeline stages, or data-parallel
ranks over several nodes) is a LeaderWorkerSet group of `nodes_per_replica` pods, each holding
`gpus_per_pod` GPUs of its node,
started with vLLM's multiprocessing executor and restarted as a whole when any pod fails. The
LeaderWorkerSet is named `<service>-group`, apart from the client Service `<service>`, so its
controller can create the headless Service its workers find the leader through (see `names`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.apps.v1 import Deployment
from pulumi_kubernetes.core.v1 import ConfigMap, Service
from pulumi_kubernetes.policy.v1 import PodDisruptionBudget

from inferstack.catalog.vllm_images import DEFAULT_EFA_VLLM_IMAGE, VLLM_IMAGES
from inferstack.conventions import (
    IMAGE_PROVIDES_EFA_ANNOTATION,
    KARPENTER_DO_NOT_DISRUPT,
    MODEL_CACHE_MOUNT,
    MODEL_ANNOTATION,
    MODEL_READER_SERVICE_ACCOUNT,
    TIER_LABEL,
)
from inferstack.planning import lora, speculative
from inferstack.planning.pool_capacity import pool_cache_budget_bytes
from inferstack.planning.rollout import rollout
from inferstack.planning.interruption import SERVING_BUDGET
from inferstack.serving import disaggregation, names, pods
from inferstack.serving.claims import claim_template
from inferstack.serving.inference_api import INFERENCE_POOL_API_VERSION
from inferstack.serving.rbac import granted_role
from inferstack.serving.transport import Transport, transport
from inferstack.serving.vllm_args import DECODE_ENGINE_PORT, VLLM_PORT, serve_argv
from inferstack.planning.sizing import load_seconds, startup_seconds
from inferstack.spec import ModelServiceSpec, StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.weights.prefetch import PIN_SCRIPT, render_pin_script, render_prefetch_script

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
PROBE_PERIOD_SECONDS = 10
# Pulumi would otherwise block `up` until GPU pods are Ready, which waits on node provisioning,
# Kueue admission and model load; readiness is the probes' and KEDA's business, and the plan prints
# how to wait for a rollout (inferstack.planning.rollout).
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}


@dataclass(frozen=True)
class ModelServiceArgs:
    spec: StackSpec
    model: ModelServiceSpec
    weights_bucket: pulumi.Input[str]
    depends_on: Sequence[pulumi.Resource] = ()           # every object: the namespace
    workload_depends_on: Sequence[pulumi.Resource] = ()  # the workload only: service account, Kueue/LWS releases
    inference_crds: pulumi.Resource | None = None        # what installs the InferencePool CRD (a decode role's allowlist)


@dataclass(frozen=True)
class ScaleTarget:
    """What a ScaledObject points at."""

    api_version: str
    kind: str
    name: str

    def as_ref(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}


def pool_selector(model: ModelServiceSpec) -> dict[str, str]:
    """Labels of the pods that serve HTTP: every pod of a Deployment, the leader of a multi-node group."""
    labels = pods.selector_labels(model.name)
    if model.multi_node:
        labels[pods.ROLE_LABEL] = "leader"
    return labels


def scale_target(model: ModelServiceSpec) -> ScaleTarget:
    if model.multi_node:
        return ScaleTarget(LWS_API_VERSION, "LeaderWorkerSet", names.workload(model))
    return ScaleTarget("apps/v1", "Deployment", names.workload(model))


def startup_failure_threshold(model: ModelServiceSpec) -> int:
    """Probe failures allowed before the kubelet gives up on start-up: 1.5x the estimated start."""
    return math.ceil(startup_seconds(model) * 1.5 / PROBE_PERIOD_SECONDS)


def _probes(model: ModelServiceSpec, port: str = "http") -> dict[str, Any]:
    def health(period: int, failures: int, timeout: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": "/health", "port": port},
            "periodSeconds": period,
            "timeoutSeconds": timeout,
            "failureThreshold": failures,
        }

    return {
        "startupProbe": health(PROBE_PERIOD_SECONDS, startup_failure_threshold(model), 5),
        "readinessProbe": health(PROBE_PERIOD_SECONDS, 3, 5),
        "livenessProbe": health(30, 4, 10),
    }


def _multi_node_env(route: Transport) -> list[dict[str, str]]:
    """NCCL/Gloo bootstrap on the pod's interface; over EFA, NCCL's aws-ofi-nccl net and tuner plugins
    (named even where the image sets them, so a team's own image routes the same way) on libfabric's
    EFA provider with GPUDirect RDMA."""
    env = [{"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}, {"name": "GLOO_SOCKET_IFNAME", "value": "eth0"}]
    if route.kind == "efa":
        plugin = (route.efa or VLLM_IMAGES[DEFAULT_EFA_VLLM_IMAGE].efa).env
        env += [{"name": name, "value": value} for name, value in plugin.items()]
        env += [
            {"name": "FI_PROVIDER", "value": "efa"},
            {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"},
            {"name": "FI_EFA_FORK_SAFE", "value": "1"},
        ]
    return env


def pod_annotations(spec: StackSpec, model: ModelServiceSpec, route: Transport) -> dict[str, Any]:
    """A pod's annotations: the model it serves and the spec's word that an image the catalog does not list carries
    the EFA stack (both for the policy pack), and under Karpenter `karpenter.sh/do-not-disrupt`, which keeps
    consolidation off a node while it serves a loaded model; its NodePool's terminationGracePeriod (planning's spot
    notice) still lets interruption and drift inside the maintenance window drain it (shared/reference/karpenter.md 5)."""
    annotations = {MODEL_ANNOTATION: model.model}
    if route.kind == "efa" and route.efa is None:
        annotations[IMAGE_PROVIDES_EFA_ANNOTATION] = "true"
    if spec.platform.karpenter:
        annotations[KARPENTER_DO_NOT_DISRUPT] = "true"
    return {"annotations": annotations}


def vllm_command(
    model: ModelServiceSpec, hardware: PoolHardware, role: Literal["single", "leader", "worker"],
    weights_bucket: pulumi.Input[str],
) -> tuple[list[str], list[str] | pulumi.Output[list[str]]]:
    """(command, args) of the vLLM container: `vllm serve` on the weights version the NVMe cache holds (through
    the pin script), or, for weight_loader s3_stream, on the weights' s3:// URI (the bucket may be an output)."""
    if model.weight_loader == "local":
        argv = pods.pinned_weights(serve_argv(model, hardware, pods.model_path(model), role=role))
        return argv[:2], argv[2:]
    args = pulumi.Output.from_input(weights_bucket).apply(
        lambda bucket: serve_argv(model, hardware, pods.s3_weights_uri(model, bucket), role=role)[2:]
    )
    return ["vllm", "serve"], args


def pod_spec(
    spec: StackSpec, model: ModelServiceSpec, hardware: PoolHardware, role: Literal["single", "leader", "worker"],
    weights_bucket: pulumi.Input[str],
) -> dict[str, Any]:
    """The pod of one replica (single) or of one node of a multi-node replica (leader, worker).

    Every pod keeps vLLM's compile cache on the node (pods.compile_cache_dir), so a restart on the same node
    skips torch.compile; with weight_loader local the pre-fetch init container fills the NVMe cache first,
    with s3_stream there is none and vLLM streams the weights from S3 under the same model-reader identity.
    """
    millicores, memory = pods.host_resources(model, hardware)
    devices, claims = pods.device_resources(model, hardware, millicores, memory, names.claim_template(model.name))
    route = transport(model, hardware)
    local = model.weight_loader == "local"
    env = pods.vllm_env(model, route.image, compile_cache=True, region=None if local else spec.region)
    if role != "single":
        env += _multi_node_env(route)
    command, args = vllm_command(model, hardware, role, weights_bucket)
    container: dict[str, Any] = {
        "name": "vllm",
        "image": route.image,
        "command": command,
        "args": args,
        "env": env,
        "resources": devices,
        "securityContext": pods.vllm_security_context(route.image),
        "volumeMounts": pods.vllm_mounts(
            route.image, local_weights=local, compile_cache=True, side_loads=bool(side_loads(model))
        ),
        "lifecycle": {"preStop": {"sleep": {"seconds": SERVING_BUDGET.pre_stop_seconds}}},
    }
    if model.pd_role is not None:
        container["env"] = [*env, *disaggregation.engine_env(model)]
        container["ports"] = [disaggregation.side_channel_port()]
    if model.pd_role == "decode":
        # vLLM behind the routing sidecar, which takes the service port ("http").
        container["ports"].insert(0, {"name": "engine", "containerPort": DECODE_ENGINE_PORT, "protocol": "TCP"})
        container.update(_probes(model, "engine"))
    elif role != "worker":
        container["ports"] = [{"name": "http", "containerPort": VLLM_PORT, "protocol": "TCP"}, *container.get("ports", [])]
        container.update(_probes(model))
    spread = pods.selector_labels(model.name) if role == "single" else None
    placed = pods.placement(hardware, prefer_capacity=pods.preferred_capacity(model.tier), spread_labels=spread)
    if model.pd_role is not None:
        placed["affinity"]["podAffinity"] = disaggregation.same_zone(model)
    return {
        "serviceAccountName": MODEL_READER_SERVICE_ACCOUNT,
        "automountServiceAccountToken": False,
        # Service links would inject e.g. VLLM_PORT for a Service named "vllm", which vLLM reads as its own setting.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": SERVING_BUDGET.grace_seconds,  # inside the spot notice
        "securityContext": dict(pods.POD_SECURITY),
        **placed,
        **({"resourceClaims": claims} if claims else {}),
        "initContainers": [
            *([pods.prefetch_init_container(spec.region, millicores, memory)] if local else []),
            *(
                pods.prefetch_init_container(spec.region, millicores, memory, name=container, script=script)
                for container, script, _, _ in side_loads(model)
            ),
            pods.compile_cache_init_container(route.image),
            *([disaggregation.routing_sidecar(spec.serving_namespace, model)] if model.pd_role == "decode" else []),
        ],
        "containers": [container],
        "volumes": [
            *pods.cache_volumes(
                names.prefetch_config_map(model.name) if local or side_loads(model) else None, memory,
                compile_cache=pods.compile_cache_dir(model), local_weights=local,
            ),
            *([disaggregation.sidecar_token_volume()] if model.pd_role == "decode" else []),
        ],
    }


def prefetch_script(
    model: ModelServiceSpec, hardware: PoolHardware, weights_bucket: pulumi.Input[str]
) -> pulumi.Output[str]:
    bucket, prefix = pods.weights_location(model)
    budget = pool_cache_budget_bytes(hardware)
    return pulumi.Output.from_input(bucket or weights_bucket).apply(
        lambda name: render_prefetch_script(
            bucket=name, prefix=prefix, cache_dir=MODEL_CACHE_MOUNT, model_key=pods.model_key(model),
            cache_budget_bytes=budget,
        )
    )


def side_loads(model: ModelServiceSpec) -> list[tuple[str, str, str, str]]:
    """What the pod pre-fetches beside the weights, as (init container, script, S3 URI, cache key the script
    publishes): each LoRA adapter (lora.adapter_path) and a speculative draft (speculative.draft_path)."""
    loads = [(f"prefetch-lora-{i}", lora.adapter_script(a.name), a.weights, lora.adapter_key(model, a.name))
             for i, a in enumerate(model.lora_adapters)]
    if model.speculative is not None and model.speculative.weights is not None:
        loads.append(("prefetch-draft", "prefetch-draft.sh", model.speculative.weights, speculative.draft_key(model)))
    return loads


def side_load_scripts(model: ModelServiceSpec, hardware: PoolHardware) -> dict[str, str]:
    """Per side load, a pre-fetch script publishing its S3 prefix in the node's cache, versioned by content like
    the weights and within the same cache budget."""
    budget = pool_cache_budget_bytes(hardware)
    scripts = {}
    for _, script, uri, key in side_loads(model):
        bucket, prefix = pods.s3_location(uri)
        scripts[script] = render_prefetch_script(
            bucket=bucket, prefix=prefix, cache_dir=MODEL_CACHE_MOUNT, model_key=key, cache_budget_bytes=budget,
        )
    return scripts


class ModelService(pulumi.ComponentResource):
    """A vLLM service: Deployment or LeaderWorkerSet, Service, PDB and pre-fetch ConfigMap."""

    workload: pulumi.CustomResource
    target: ScaleTarget

    def __init__(self, name: str, args: ModelServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving:ModelService", name, None, opts)
        spec, model = args.spec, args.model
        hardware = PoolHardware(spec.pool(model.pool))
        namespace = spec.serving_namespace
        labels = {**pods.object_labels(model.name), TIER_LABEL: model.tier}
        queue_labels = pods.kueue_labels(spec, "serving", model.pool, model.tier)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        # The pre-fetch and pin scripts for weights read from the NVMe cache (not s3_stream), and one pre-fetch
        # script per side load (LoRA adapters, a speculative draft).
        scripts: dict[str, Any] = {}
        if model.weight_loader == "local":
            scripts["prefetch.sh"] = prefetch_script(model, hardware, args.weights_bucket)
            scripts[PIN_SCRIPT] = render_pin_script(pods.model_path(model))
        scripts.update(side_load_scripts(model, hardware))
        prefetch = [ConfigMap(
            f"{name}-prefetch",
            metadata={"name": names.prefetch_config_map(model.name), "namespace": namespace, "labels": labels},
            data=scripts,
            opts=child,
        )] if scripts else []
        allowlist = self._prefill_allowlist(name, args) if model.pd_role == "decode" else []
        devices = claim_template(f"{name}-devices", model.name, namespace, model, hardware, labels, child)
        scaled = model.autoscaling.max_replicas > model.autoscaling.min_replicas
        workload_opts = pulumi.ResourceOptions.merge(
            child,
            # KEDA owns the replica count once the workload exists.
            pulumi.ResourceOptions(
                depends_on=[*prefetch, *allowlist, *devices, *args.workload_depends_on],
                ignore_changes=["spec.replicas"] if scaled else None,
            ),
        )
        metadata = {"name": names.workload(model), "namespace": namespace, "labels": {**labels, **queue_labels}}
        pod_labels = {**labels, **queue_labels, **disaggregation.role_labels(model)}
        self.target = scale_target(model)
        strategy = rollout(spec, model)   # surge only where a spare replica fits the pool at max size
        if model.multi_node:
            group_annotations = pod_annotations(spec, model, transport(model, hardware))
            self.workload = CustomResource(
                f"{name}-lws",
                api_version=LWS_API_VERSION,
                kind="LeaderWorkerSet",
                metadata={**metadata, "annotations": dict(SKIP_AWAIT)},
                spec={
                    "replicas": model.autoscaling.min_replicas,
                    "rolloutStrategy": strategy.lws_strategy,
                    "startupPolicy": "LeaderCreated",
                    "leaderWorkerTemplate": {
                        "size": model.nodes_per_replica,
                        "restartPolicy": "RecreateGroupOnPodRestart",
                        "leaderTemplate": {
                            "metadata": {"labels": {**pod_labels, pods.ROLE_LABEL: "leader"}, **group_annotations},
                            "spec": pod_spec(spec, model, hardware, "leader", args.weights_bucket),
                        },
                        "workerTemplate": {
                            "metadata": {"labels": {**pod_labels, pods.ROLE_LABEL: "worker"}, **group_annotations},
                            "spec": pod_spec(spec, model, hardware, "worker", args.weights_bucket),
                        },
                    },
                },
                opts=workload_opts,
            )
        else:
            self.workload = Deployment(
                f"{name}-deployment",
                metadata={**metadata, "annotations": dict(SKIP_AWAIT)},
                spec={
                    "replicas": model.autoscaling.min_replicas,
                    "revisionHistoryLimit": 3,
                    "strategy": strategy.deployment_strategy,
                    "progressDeadlineSeconds": max(600, 2 * load_seconds(model) + 600),
                    "selector": {"matchLabels": pods.selector_labels(model.name)},
                    "template": {
                        "metadata": {"labels": pod_labels, **pod_annotations(spec, model, transport(model, hardware))},
                        "spec": pod_spec(spec, model, hardware, "single", args.weights_bucket),
                    },
                },
                opts=workload_opts,
            )
        self.service = Service(
            f"{name}-service",
            metadata={"name": names.client_service(model), "namespace": namespace, "labels": labels},
            spec={
                "type": "ClusterIP",
                "selector": pool_selector(model),
                "ports": [
                    # A decode engine's "http" is its routing sidecar's port, a native sidecar's: given by number, so
                    # it never depends on how the endpoints controller resolves init containers' port names.
                    {"name": "http", "port": VLLM_PORT, "targetPort": VLLM_PORT if model.pd_role == "decode" else "http",
                     "protocol": "TCP", "appProtocol": "http"}
                ],
            },
            opts=child,
        )
        PodDisruptionBudget(
            f"{name}-pdb",
            metadata={"name": names.client_service(model), "namespace": namespace, "labels": labels},
            spec={"maxUnavailable": 1, "selector": {"matchLabels": pods.selector_labels(model.name)}},
            opts=child,
        )
        self.register_outputs({"workload": self.target.as_ref(), "service": names.client_service(model)})

    def _prefill_allowlist(self, name: str, args: ModelServiceArgs) -> list[pulumi.Resource]:
        """The InferencePool of the service's prefill pods and the Role that lets the decode pods' routing sidecars
        read it: the sidecar's SSRF protection fails to start without both (serving/disaggregation.py)."""
        spec, model = args.spec, args.model
        if args.inference_crds is None:
            raise ValueError(f"{model.name}: a decode role's sidecar needs the InferencePool CRD, which the gateway installs")
        namespace, allowlist = spec.serving_namespace, disaggregation.prefill_allowlist(model.name)
        labels = pods.object_labels(model.name)
        pool = CustomResource(
            f"{name}-prefill-allowlist",
            api_version=INFERENCE_POOL_API_VERSION,
            kind="InferencePool",
            metadata={"name": allowlist, "namespace": namespace, "labels": labels},
            spec=disaggregation.prefill_allowlist_spec(model.name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, args.inference_crds]),
        )
        binding = granted_role(
            f"{name}-routing-sidecar",
            name=allowlist,
            namespace=namespace,
            labels=labels,
            rules=disaggregation.sidecar_rules(model.name),
            service_account=MODEL_READER_SERVICE_ACCOUNT,
            parent=self,
            depends_on=args.depends_on,
        )
        return [pool, binding]   # the binding follows its Role
