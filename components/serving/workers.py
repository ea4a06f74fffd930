"""Queue-fed workers and batch inference Jobs.

* `JobQueue`: one Redis (Deployment + Service) holding the job lists, in the batch namespace. It requires a
  password the stack generates (pulumi_random) into the Secret `redis-auth`; its NetworkPolicy admits only
  the queue workers, producers (pods labelled `inferstack.io/queue-producer: "true"` in the batch namespace)
  and the KEDA operator.
* `QueueWorker`: per worker spec, a Deployment running a small stdlib-only Python worker (rendered from
  `templates/serving-worker.py.j2`, mounted from a ConfigMap) that pops jobs with the password from that
  Secret and calls its model service's OpenAI endpoint; KEDA scales it on the list's length, reading the
  password through the worker's TriggerAuthentication.
* `BatchJob`: per batch job spec, an Indexed Job admitted by Kueue (created suspended, in the batch
  LocalQueue at batch priority) on the job's pool, preferring spot: each index pre-fetches the
  weights, takes its shard of the input, runs `vllm run-batch` and uploads its part of the results.
  Spot reclaims (pod disruptions) do not count against the per-index retry budget. With a schedule
  the Job is a CronJob's job template; without one it is a single Job.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

import jinja2
import pulumi
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.apps.v1 import Deployment
from pulumi_kubernetes.batch.v1 import CronJob, Job
from pulumi_kubernetes.core.v1 import ConfigMap, Secret, Service
from pulumi_kubernetes.networking.v1 import NetworkPolicy
from pulumi_random import RandomPassword

from inferstack.catalog.charts import IMAGES, chart
from inferstack.conventions import BATCH_RUNNER_SERVICE_ACCOUNT, KARPENTER_DO_NOT_DISRUPT
from inferstack.serving import names, pods
from inferstack.serving.claims import claim_template
from inferstack.serving.autoscaling import KEDA_API_VERSION
from inferstack.serving.batch_model import batch_model
from inferstack.serving.model_service import SKIP_AWAIT, prefetch_script
from inferstack.serving.transport import serving_image
from inferstack.serving.vllm_args import VLLM_PORT, run_batch_argv
from inferstack.weights.prefetch import PIN_SCRIPT, render_pin_script
from inferstack.spec import BatchJobSpec, QueueWorkerSpec, StackSpec

REDIS_NAME = names.REDIS
REDIS_PORT = 6379
REDIS_UID = 999  # the redis user of the official image
REDIS_AUTH = names.REDIS_AUTH    # the Secret holding the password
REDIS_PASSWORD_KEY = "password"  # its key; also the KEDA redis scaler's auth parameter of that name
REDIS_PASSWORD_ENV = "REDIS_PASSWORD"
REDIS_PASSWORD_LENGTH = 40       # letters and digits: ~238 bits, and nothing a redis:// URL must escape
QUEUE_PRODUCER_LABEL = "inferstack.io/queue-producer"  # "true" on a batch-namespace pod that may push jobs
KEDA_OPERATOR_LABELS = {"app": "keda-operator"}        # the chart's operator pods (values operator.name)
WORKER_UID = 65534
WORKER_REQUEST_TIMEOUT_SECONDS = 300
WORKER_MAX_ATTEMPTS = 3
WORKER_POLL_SECONDS = 5
WORK_DIR = "/work"
RUN_CONTAINER_ARGS = '"$@"'  # a batch pod's run stage: its vllm container's args, `vllm run-batch` behind pin-weights


@cache
def _template(name: str) -> jinja2.Template:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["q"] = lambda value: shlex.quote(str(value))
    return env.from_string(files("inferstack.templates").joinpath(name).read_text(encoding="utf-8"))


def redis_address(spec: StackSpec) -> str:
    return f"{REDIS_NAME}.{spec.batch_namespace}.svc.cluster.local:{REDIS_PORT}"


def redis_password_from_secret(variable: str = REDIS_PASSWORD_ENV) -> dict[str, Any]:
    """A container env entry holding the queue's password, read from its Secret."""
    return {"name": variable, "valueFrom": {"secretKeyRef": {"name": REDIS_AUTH, "key": REDIS_PASSWORD_KEY}}}


def redis_server_command() -> list[str]:
    """redis-server with the password of the default user from the container's env (kubelet expands
    `$(VAR)` in command; Redis shows no arguments in its process title). Protected mode stays on: should
    the password ever be missing, Redis refuses every client that is not local."""
    return [
        "redis-server", "--dir", "/data", "--appendonly", "yes", "--save", "",
        "--requirepass", f"$({REDIS_PASSWORD_ENV})",
        "--maxmemory", "384mb", "--maxmemory-policy", "noeviction",
    ]


def redis_network_policy_spec() -> dict[str, Any]:
    """Ingress to Redis: its port, from the queue workers, labelled producers and the KEDA operator only."""
    return {
        "podSelector": {"matchLabels": pods.selector_labels(REDIS_NAME, "queue")},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [
                    {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "queue-worker", **pods.PART_OF}}},
                    {"podSelector": {"matchLabels": {QUEUE_PRODUCER_LABEL: "true"}}},
                    {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": chart("keda").namespace}},
                        "podSelector": {"matchLabels": dict(KEDA_OPERATOR_LABELS)},
                    },
                ],
                "ports": [{"protocol": "TCP", "port": REDIS_PORT}],
            }
        ],
    }


def trigger_authentication_spec() -> dict[str, Any]:
    """The KEDA redis scaler's `password` auth parameter, from the queue's Secret."""
    return {"secretTargetRef": [{"parameter": REDIS_PASSWORD_KEY, "name": REDIS_AUTH, "key": REDIS_PASSWORD_KEY}]}


def model_url(spec: StackSpec, service: str) -> str:
    """The client Service of a model service (its own name, whether one node or several serve a replica)."""
    return f"http://{names.client_service(spec.model_service(service))}.{spec.serving_namespace}.svc.cluster.local:{VLLM_PORT}"


def list_names(worker: QueueWorkerSpec) -> tuple[str, str, str]:
    """(jobs, results, failed) Redis lists of a worker."""
    jobs = worker.list_name or worker.name
    return jobs, f"{jobs}:results", f"{jobs}:failed"


def render_worker(spec: StackSpec, worker: QueueWorkerSpec, *, redis_host: str | None = None, redis_port: int = REDIS_PORT,
                  url: str | None = None) -> str:
    """The worker program; host, port and URL default to the in-cluster Redis and model Service."""
    jobs, results, failed = list_names(worker)
    return _template("serving-worker.py.j2").render(
        redis_host=redis_host or f"{REDIS_NAME}.{spec.batch_namespace}.svc.cluster.local",
        redis_port=redis_port,
        list_name=jobs,
        results_list=results,
        failed_list=failed,
        password_env=REDIS_PASSWORD_ENV,
        model_url=url or model_url(spec, worker.model_service),
        served_model=worker.model_service,
        request_timeout_seconds=WORKER_REQUEST_TIMEOUT_SECONDS,
        max_attempts=WORKER_MAX_ATTEMPTS,
        poll_seconds=WORKER_POLL_SECONDS,
    )


def render_batch_stage(
    stage: str, job: BatchJobSpec, run_batch_command: str = RUN_CONTAINER_ARGS, work_dir: str = WORK_DIR
) -> str:
    """One stage (fetch, run, upload) of a batch pod; `run_batch_command` is already shell-quoted (by default the
    run stage's container args)."""
    return _template("serving-batch.sh.j2").render(
        stage=stage,
        input_uri=job.input,
        output_uri=job.output,
        shards=job.parallelism,
        work_dir=work_dir,
        run_batch_command=run_batch_command,
    )


# ------------------------------------------------------------------------------------------------ Redis


@dataclass(frozen=True)
class JobQueueArgs:
    spec: StackSpec
    depends_on: Sequence[pulumi.Resource] = ()


class JobQueue(pulumi.ComponentResource):
    """Redis for the job lists. Append-only persistence on an emptyDir survives container restarts,
    not a rescheduled pod; `noeviction` makes pushes fail rather than drop queued jobs when full.
    Every client authenticates with the generated password; the network admits only the queue's clients."""

    def __init__(self, name: str, args: JobQueueArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving:JobQueue", name, None, opts)
        namespace = args.spec.batch_namespace
        labels = pods.object_labels(REDIS_NAME, "queue")
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        def probe(delay: int) -> dict[str, Any]:
            """redis-cli authenticates with REDISCLI_AUTH from the container's env."""
            return {"exec": {"command": ["redis-cli", "ping"]}, "initialDelaySeconds": delay, "periodSeconds": 10}

        password = RandomPassword(
            f"{name}-redis-password", length=REDIS_PASSWORD_LENGTH, special=False, opts=pulumi.ResourceOptions(parent=self)
        )
        self.secret = Secret(
            f"{name}-redis-auth",
            metadata={"name": REDIS_AUTH, "namespace": namespace, "labels": labels},
            type="Opaque",
            string_data={REDIS_PASSWORD_KEY: password.result},
            opts=child,
        )
        self.network_policy = NetworkPolicy(
            f"{name}-redis-network-policy",
            metadata={"name": REDIS_NAME, "namespace": namespace, "labels": labels},
            spec=redis_network_policy_spec(),
            opts=child,
        )
        self.deployment = Deployment(
            f"{name}-redis",
            metadata={"name": REDIS_NAME, "namespace": namespace, "labels": labels},
            spec={
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": pods.selector_labels(REDIS_NAME, "queue")},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "enableServiceLinks": False,
                        "securityContext": {
                            **pods.POD_SECURITY, "runAsNonRoot": True, "runAsUser": REDIS_UID, "runAsGroup": REDIS_UID,
                            "fsGroup": REDIS_UID,
                        },
                        "containers": [
                            {
                                "name": "redis",
                                "image": IMAGES["redis"],
                                "command": redis_server_command(),
                                "env": [redis_password_from_secret(), redis_password_from_secret("REDISCLI_AUTH")],
                                "ports": [{"name": "redis", "containerPort": REDIS_PORT, "protocol": "TCP"}],
                                "readinessProbe": probe(5),
                                "livenessProbe": probe(15),
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "512Mi"},
                                    "limits": {"cpu": "1", "memory": "512Mi"},
                                },
                                "securityContext": {**pods.RESTRICTED, "readOnlyRootFilesystem": True},
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            }
                        ],
                        "volumes": [{"name": "data", "emptyDir": {}}],
                    },
                },
            },
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.secret])),
        )
        self.service = Service(
            f"{name}-redis-service",
            metadata={"name": REDIS_NAME, "namespace": namespace, "labels": labels},
            spec={
                "type": "ClusterIP",
                "selector": pods.selector_labels(REDIS_NAME, "queue"),
                "ports": [{"name": "redis", "port": REDIS_PORT, "targetPort": "redis", "protocol": "TCP"}],
            },
            opts=child,
        )
        self.register_outputs({"address": redis_address(args.spec)})


# ------------------------------------------------------------------------------------ queue workers


@dataclass(frozen=True)
class QueueWorkerArgs:
    spec: StackSpec
    worker: QueueWorkerSpec
    queue: JobQueue
    keda: Sequence[pulumi.Resource] = ()  # the KEDA release (ScaledObject CRD); empty without KEDA
    depends_on: Sequence[pulumi.Resource] = ()


def worker_scaled_object_spec(spec: StackSpec, worker: QueueWorkerSpec) -> dict[str, Any]:
    jobs, _, _ = list_names(worker)
    return {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": worker.name},
        "pollingInterval": worker.polling_interval_seconds,
        "cooldownPeriod": worker.cooldown_seconds,
        "minReplicaCount": worker.min_replicas,
        "maxReplicaCount": worker.max_replicas,
        "triggers": [
            {
                "type": "redis",
                "name": "queue-length",
                "metadata": {
                    "address": redis_address(spec),
                    "listName": jobs,
                    "listLength": str(worker.jobs_per_replica),
                    "activationListLength": "0",
                    "databaseIndex": "0",
                },
                "authenticationRef": {"name": worker.name},
            }
        ],
    }


class QueueWorker(pulumi.ComponentResource):
    """A worker Deployment fed from Redis and its KEDA ScaledObject on the list length (KEDA reads the queue's
    password through the worker's TriggerAuthentication)."""

    def __init__(self, name: str, args: QueueWorkerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving:QueueWorker", name, None, opts)
        spec, worker = args.spec, args.worker
        namespace = spec.batch_namespace
        labels = pods.object_labels(worker.name, "queue-worker")
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        program = ConfigMap(
            f"{name}-program",
            metadata={"name": names.worker_program(worker), "namespace": namespace, "labels": labels},
            data={"worker.py": render_worker(spec, worker)},
            opts=child,
        )
        self.deployment = Deployment(
            f"{name}-deployment",
            metadata={"name": worker.name, "namespace": namespace, "labels": labels},
            spec={
                "replicas": worker.min_replicas,
                "selector": {"matchLabels": pods.selector_labels(worker.name, "queue-worker")},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "enableServiceLinks": False,
                        # The job in hand finishes (one model request at most) before the pod goes.
                        "terminationGracePeriodSeconds": WORKER_REQUEST_TIMEOUT_SECONDS + 30,
                        "securityContext": {
                            **pods.POD_SECURITY, "runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
                        },
                        "containers": [
                            {
                                "name": "worker",
                                "image": worker.image,
                                "command": ["python3", "/app/worker.py"],
                                "env": [
                                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                                    redis_password_from_secret(),
                                ],
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "128Mi"},
                                    "limits": {"cpu": "500m", "memory": "256Mi"},
                                },
                                "securityContext": {**pods.RESTRICTED, "readOnlyRootFilesystem": True},
                                "volumeMounts": [{"name": "program", "mountPath": "/app", "readOnly": True}],
                            }
                        ],
                        "volumes": [{"name": "program", "configMap": {"name": names.worker_program(worker)}}],
                    },
                },
            },
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=[program, args.queue.service, args.queue.secret], ignore_changes=["spec.replicas"]
                ),
            ),
        )
        self.trigger_authentication = CustomResource(
            f"{name}-trigger-authentication",
            api_version=KEDA_API_VERSION,
            kind="TriggerAuthentication",
            metadata={"name": worker.name, "namespace": namespace, "labels": labels},
            spec=trigger_authentication_spec(),
            # KEDA resolves the Secret and this object when it scales (its webhook checks neither): no wait for them.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *args.keda]),
        )
        self.scaled_object = CustomResource(
            f"{name}-scaledobject",
            api_version=KEDA_API_VERSION,
            kind="ScaledObject",
            metadata={"name": worker.name, "namespace": namespace, "labels": labels},
            spec=worker_scaled_object_spec(spec, worker),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *args.keda, self.deployment]),
        )
        self.register_outputs({"list": list_names(worker)[0], "model_service": worker.model_service})


# --------------------------------------------------------------------------------------- batch jobs


@dataclass(frozen=True)
class BatchJobArgs:
    spec: StackSpec
    index: int                                    # position in spec.batch_jobs
    weights_bucket: pulumi.Input[str]
    depends_on: Sequence[pulumi.Resource] = ()           # every object: the batch namespace
    workload_depends_on: Sequence[pulumi.Resource] = ()  # the Job only: service account, Kueue release


def content_digest(content: dict[str, Any]) -> str:
    """Eight hex digits of what a batch run's pods get (job spec and scripts): the revision its objects are named by."""
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:8]


def cron_job_spec(job: BatchJobSpec, template_labels: dict[str, str], job_spec: pulumi.Input[dict[str, Any]]) -> dict[str, Any]:
    """A CronJob running the batch Job on its schedule. Kueue admits each run through the queue label of the
    job template's metadata (which the CronJob controller copies to every Job it creates)."""
    optional = {"timeZone": job.time_zone, "startingDeadlineSeconds": job.starting_deadline_seconds}
    return {
        "schedule": job.schedule,
        **{key: value for key, value in optional.items() if value is not None},
        "concurrencyPolicy": job.concurrency_policy,
        "successfulJobsHistoryLimit": job.successful_jobs_history_limit,
        "failedJobsHistoryLimit": job.failed_jobs_history_limit,
        "jobTemplate": {"metadata": {"labels": template_labels}, "spec": job_spec},
    }


class BatchJob(pulumi.ComponentResource):
    """An Indexed `vllm run-batch` Job, created suspended for Kueue to admit: a CronJob's template when the
    spec has a schedule, else one Job.

    A Job's pod template is immutable (pulumi-kubernetes replaces a Job whose spec.template changes), so an
    edit of the model service would delete a running Job. A CronJob's template is updated in place and only
    Jobs created after the edit use it; the one-off Job instead is named by its content's revision and
    retained on delete, so a replacement starts a new Job and leaves the running one to finish. The script
    ConfigMaps are named by the same revision, immutable and retained, so pods a running Job starts after an
    edit (a retry, a spot replacement) still get that run's scripts.
    """

    def __init__(self, name: str, args: BatchJobArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:serving:BatchJob", name, None, opts)
        spec = args.spec
        job = spec.batch_jobs[args.index]
        model, hardware = batch_model(spec, args.index)
        namespace = spec.batch_namespace
        labels = pods.object_labels(job.name, "batch-inference")
        queue_labels = pods.kueue_labels(spec, "batch", job.pool, "batch")
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        millicores, memory = pods.host_resources(model, hardware)
        argv = run_batch_argv(
            model, hardware, pods.model_path(model),
            input_path=f"{WORK_DIR}/input.jsonl", output_path=f"{WORK_DIR}/output.jsonl",
        )
        pin_script = render_pin_script(pods.model_path(model))
        # The run stage runs its container's args: the vLLM flags sit on the pod spec, where the policies (the
        # parallel layout against the GPU request) and `kubectl describe` read them, as on a serving pod.
        stage_scripts = {stage: render_batch_stage(stage, job) for stage in ("fetch", "run", "upload")}
        work_mount = {"name": "work", "mountPath": WORK_DIR}
        script_mount = {"name": "scripts", "mountPath": "/scripts", "readOnly": True}
        aws_env = [{"name": "AWS_REGION", "value": spec.region}, {"name": "HOME", "value": "/tmp"}]
        tmp_mount = {"name": "tmp", "mountPath": "/tmp"}
        small = pods.resources(250, 512 * 1024**2)

        def s3_stage(container: str, script: str) -> dict[str, Any]:
            """An AWS CLI container running one stage script of the job (input fetch or result upload)."""
            return {
                "name": container,
                "image": IMAGES["aws-cli"],
                "command": ["/bin/bash", f"/scripts/{script}"],
                "env": aws_env,
                "resources": small,
                "securityContext": pods.root_init_security_context(),
                "volumeMounts": [work_mount, script_mount, tmp_mount],
            }
        image = serving_image(model, hardware)
        devices, claims = pods.device_resources(model, hardware, millicores, memory, names.claim_template(job.name))
        claim_templates = claim_template(f"{name}-devices", job.name, namespace, model, hardware, labels, child)
        gpu_container = {
            "name": "vllm",
            "image": image,
            "command": ["/bin/bash", "/scripts/run"],
            "args": pods.pinned_weights(argv),
            "env": pods.vllm_env(model, image),
            "resources": devices,
            "securityContext": pods.vllm_security_context(image),
            "volumeMounts": [*pods.vllm_mounts(image), work_mount, script_mount],
        }
        pod_spec = {
            "restartPolicy": "Never",
            "serviceAccountName": BATCH_RUNNER_SERVICE_ACCOUNT,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": dict(pods.POD_SECURITY),
            **pods.placement(hardware, prefer_capacity=["spot"], spread_labels=None),
            **({"resourceClaims": claims} if claims else {}),
            "initContainers": [
                pods.prefetch_init_container(spec.region, millicores, memory),
                s3_stage("fetch-input", "fetch"),
            ],
            "containers": [
                gpu_container,
                s3_stage("upload", "upload"),
            ],
        }

        def job_spec(revision: str) -> dict[str, Any]:
            volumes = [
                *pods.cache_volumes(f"{names.prefetch_config_map(job.name)}-{revision}", memory),
                {"name": "work", "emptyDir": {}},
                {"name": "scripts", "configMap": {"name": f"{names.batch_scripts(job)}-{revision}", "defaultMode": 0o555}},
            ]
            return {
                # Kueue unsuspends the Job once it admits it; without Kueue it starts at once.
                "suspend": bool(queue_labels),
                "completionMode": "Indexed",
                "completions": job.parallelism,
                "parallelism": job.parallelism,
                "backoffLimitPerIndex": 2,
                "podFailurePolicy": {
                    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
                },
                # Under Karpenter consolidation must not evict a running index; the pool's terminationGracePeriod bounds it.
                "template": {
                    "metadata": {"labels": {**labels, **queue_labels},
                                 **({"annotations": {KARPENTER_DO_NOT_DISRUPT: "true"}} if spec.platform.karpenter else {})},
                    "spec": {**pod_spec, "volumes": volumes},
                },
            }

        prefetch_text = prefetch_script(model, hardware, args.weights_bucket)
        revision = prefetch_text.apply(
            lambda text: content_digest({"prefetch.sh": text, PIN_SCRIPT: pin_script, "stages": stage_scripts, "job": job_spec("")})
        )
        retained = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=True))
        prefetch = ConfigMap(
            f"{name}-prefetch",
            metadata={
                "name": revision.apply(lambda r: f"{names.prefetch_config_map(job.name)}-{r}"),
                "namespace": namespace,
                "labels": labels,
            },
            data={"prefetch.sh": prefetch_text, PIN_SCRIPT: pin_script},
            immutable=True,
            opts=retained,
        )
        scripts = ConfigMap(
            f"{name}-scripts",
            metadata={"name": revision.apply(lambda r: f"{names.batch_scripts(job)}-{r}"), "namespace": namespace, "labels": labels},
            data=stage_scripts,
            immutable=True,
            opts=retained,
        )
        workload_opts = pulumi.ResourceOptions.merge(
            child, pulumi.ResourceOptions(depends_on=[prefetch, scripts, *claim_templates, *args.workload_depends_on])
        )
        if job.schedule is not None:
            self.workload: pulumi.CustomResource = CronJob(
                f"{name}-cronjob",
                metadata={"name": job.name, "namespace": namespace, "labels": labels},
                spec=cron_job_spec(job, {**labels, **queue_labels}, revision.apply(job_spec)),
                opts=workload_opts,
            )
            object_name: pulumi.Input[str] = job.name
        else:
            object_name = revision.apply(lambda r: f"{job.name}-{r}")
            self.workload = Job(
                f"{name}-job",
                metadata={
                    "name": object_name,
                    "namespace": namespace,
                    "labels": {**labels, **queue_labels},
                    "annotations": dict(SKIP_AWAIT),
                },
                spec=revision.apply(job_spec),
                opts=pulumi.ResourceOptions.merge(workload_opts, pulumi.ResourceOptions(retain_on_delete=True)),
            )
        self.register_outputs({"workload": object_name, "shards": job.parallelism, "schedule": job.schedule})
