"""The serving layer of a stack: every model service, the inference gateway, the scalers, workers and batch jobs.

It runs after the platform layer and takes from it only what it must wait for: the namespaces, and the
releases that install the CRDs its objects use (`crd_dependencies` keys "keda", "lws", "kueue").
Nothing else is serialised: model services, the gateway and the workers are created in parallel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
from pulumi_kubernetes.core.v1 import ServiceAccount

from inferstack.conventions import BATCH_RUNNER_SERVICE_ACCOUNT, MODEL_READER_SERVICE_ACCOUNT
from inferstack.serving import pods
from inferstack.serving.autoscaling import ModelAutoscaler, ModelAutoscalerArgs, needs_scaler
from inferstack.serving.gateway import InferenceGateway, InferenceGatewayArgs
from inferstack.serving.model_service import ModelService, ModelServiceArgs
from inferstack.serving.network_policies import NetworkIsolation, NetworkIsolationArgs
from inferstack.serving.workers import BatchJob, BatchJobArgs, JobQueue, JobQueueArgs, QueueWorker, QueueWorkerArgs
from inferstack.spec import StackSpec


@dataclass(frozen=True)
class ServingArgs:
    spec: StackSpec
    weights_bucket: pulumi.Input[str]
    # Where KEDA queries serving metrics: the platform layer's Prometheus (its `prometheus_url`).
    prometheus_url: str
    crd_dependencies: Mapping[str, pulumi.Resource] = field(default_factory=dict)  # "keda", "lws", "kueue"
    namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)  # "serving", "batch" -> Namespace
    # (namespace, service account) -> its EKS Pod Identity association: a pod gets credentials only if it exists
    # when the pod starts.
    pod_identities: Mapping[tuple[str, str], pulumi.Resource] = field(default_factory=dict)


class Serving(pulumi.ComponentResource):
    """Everything that serves models, for one stack spec."""

    model_services: dict[str, ModelService]

    def __init__(self, name: str, args: ServingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving:Serving", name, None, opts)
        spec = args.spec
        crds = args.crd_dependencies

        def needs(*keys: str) -> list[pulumi.Resource]:
            return [crds[key] for key in keys if key in crds]

        def identity(namespace: str, account: str) -> list[pulumi.Resource]:
            association = args.pod_identities.get((namespace, account))
            return [association] if association is not None else []

        namespace = {role: [args.namespaces[role]] if role in args.namespaces else [] for role in ("serving", "batch")}
        readers = self._service_accounts(name, spec, namespace)
        kueue = needs("kueue") if spec.queues.enabled else []
        NetworkIsolation(
            f"{name}-network",
            NetworkIsolationArgs(
                spec=spec, namespaces={spec.serving_namespace: namespace["serving"], spec.batch_namespace: namespace["batch"]}
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.model_services = {}
        # Before the services: a decode role's routing sidecar reads an InferencePool, whose CRD the gateway installs.
        self.gateway = None
        if spec.gateway.enabled and spec.models:
            self.gateway = InferenceGateway(
                f"{name}-gateway",
                InferenceGatewayArgs(spec=spec, depends_on=namespace["serving"]),
                opts=pulumi.ResourceOptions(parent=self),
            )

        for model in spec.models:
            workload_crds = kueue + (needs("lws") if model.multi_node else [])
            service = ModelService(
                f"{name}-{model.name}",
                ModelServiceArgs(
                    spec=spec,
                    model=model,
                    weights_bucket=args.weights_bucket,
                    depends_on=namespace["serving"],
                    workload_depends_on=[
                        readers["serving"],
                        *identity(spec.serving_namespace, MODEL_READER_SERVICE_ACCOUNT),
                        *workload_crds,
                    ],
                    inference_crds=self.gateway.inference_crds if self.gateway is not None else None,
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.model_services[model.name] = service
            if needs_scaler(spec, model):
                ModelAutoscaler(
                    f"{name}-{model.name}-autoscaler",
                    ModelAutoscalerArgs(
                        spec=spec,
                        model=model,
                        target=service.target,
                        prometheus_url=args.prometheus_url,
                        depends_on=[service.workload, *needs("keda")],
                    ),
                    opts=pulumi.ResourceOptions(parent=self),
                )

        if spec.workers:
            queue = JobQueue(
                f"{name}-queue",
                JobQueueArgs(spec=spec, depends_on=namespace["batch"]),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for worker in spec.workers:
                QueueWorker(
                    f"{name}-{worker.name}",
                    QueueWorkerArgs(
                        spec=spec, worker=worker, queue=queue, keda=needs("keda"), depends_on=namespace["batch"]
                    ),
                    opts=pulumi.ResourceOptions(parent=self),
                )
        runner = self._batch_runner(name, spec, namespace["batch"]) if spec.batch_jobs else None
        for index, job in enumerate(spec.batch_jobs):
            BatchJob(
                f"{name}-{job.name}",
                BatchJobArgs(
                    spec=spec,
                    index=index,
                    weights_bucket=args.weights_bucket,
                    depends_on=namespace["batch"],
                    workload_depends_on=[runner, *identity(spec.batch_namespace, BATCH_RUNNER_SERVICE_ACCOUNT), *kueue],
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs(
            {
                "model_services": sorted(self.model_services),
                "gateway": spec.gateway.name if self.gateway is not None else None,
            }
        )

    def _service_accounts(
        self, name: str, spec: StackSpec, namespace: Mapping[str, list[pulumi.Resource]]
    ) -> dict[str, ServiceAccount]:
        """The model-reader account (EKS Pod Identity maps it to the weights role) in each role's namespace."""
        by_name: dict[str, ServiceAccount] = {}
        accounts = {}
        for role, ns in (("serving", spec.serving_namespace), ("batch", spec.batch_namespace)):
            if ns not in by_name:
                by_name[ns] = ServiceAccount(
                    f"{name}-{ns}-model-reader",
                    metadata={
                        "name": MODEL_READER_SERVICE_ACCOUNT,
                        "namespace": ns,
                        "labels": pods.object_labels(MODEL_READER_SERVICE_ACCOUNT, "identity"),
                    },
                    automount_service_account_token=False,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=namespace[role]),
                )
            accounts[role] = by_name[ns]
        return accounts

    def _batch_runner(self, name: str, spec: StackSpec, namespace: list[pulumi.Resource]) -> ServiceAccount:
        """The batch-runner account: Pod Identity maps it to the role that also reads inputs and writes results."""
        return ServiceAccount(
            f"{name}-{spec.batch_namespace}-{BATCH_RUNNER_SERVICE_ACCOUNT}",
            metadata={
                "name": BATCH_RUNNER_SERVICE_ACCOUNT,
                "namespace": spec.batch_namespace,
                "labels": pods.object_labels(BATCH_RUNNER_SERVICE_ACCOUNT, "identity"),
            },
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(parent=self, depends_on=namespace),
        )
