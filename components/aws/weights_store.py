"""Where model weights live: a private, encrypted, versioned S3 bucket and the role serving pods read it with.

Serving and batch pods get the role through EKS Pod Identity on the `model-reader` service account.
The role may list the bucket only under `models/` (plus any prefix a model service names explicitly)
and get only the objects below those prefixes: nothing else, in no other bucket.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import pulumi
from pulumi_aws import eks, iam, s3

from inferstack.aws import iam as policies
from inferstack.conventions import BATCH_RUNNER_SERVICE_ACCOUNT, MODEL_READER_SERVICE_ACCOUNT
from inferstack.spec import StackSpec

MODELS_PREFIX = "models/"
NONCURRENT_VERSION_DAYS = 30  # an overwritten checkpoint is kept this long, then its storage is freed
ABORT_MULTIPART_DAYS = 7
READER_ROLE = "model-reader"
BATCH_ROLE = "batch-runner"
_S3_URI = re.compile(r"^s3://(?P<bucket>[^/]+)/?(?P<prefix>.*)$")


def split_s3_uri(uri: str) -> tuple[str, str]:
    """'s3://b/models/llama' -> ('b', 'models/llama/'): the prefix always ends with '/' (or is '')."""
    match = _S3_URI.match(uri)
    if match is None:
        raise ValueError(f"{uri!r} is not an s3://bucket/prefix URI")
    prefix = match["prefix"].strip("/")
    return match["bucket"], f"{prefix}/" if prefix else ""


def read_grants(spec: StackSpec, bucket_name: str | None, bucket_arn: str, partition: str) -> list[policies.S3ReadGrant]:
    """`models/` of the weights bucket, plus the prefix of every model service that names its own weights URI, of
    every LoRA adapter and of every speculative draft."""
    grants = [policies.S3ReadGrant(bucket_arn, MODELS_PREFIX)]
    for model in spec.models:
        uris = [model.weights] if model.weights is not None else []
        uris += [adapter.weights for adapter in model.lora_adapters]
        if model.speculative is not None and model.speculative.weights is not None:
            uris.append(model.speculative.weights)
        for uri in uris:
            bucket, prefix = split_s3_uri(uri)
            arn = bucket_arn if bucket == bucket_name else f"arn:{partition}:s3:::{bucket}"
            grants.append(policies.S3ReadGrant(arn, prefix))
    return grants


def batch_objects(spec: StackSpec, partition: str) -> tuple[list[str], list[str]]:
    """(input object ARNs, output prefix ARNs ending in '/') of the stack's batch jobs."""
    inputs, outputs = [], []
    for job in spec.batch_jobs:
        bucket, key = split_s3_uri(job.input)
        inputs.append(f"arn:{partition}:s3:::{bucket}/{key.rstrip('/')}")
        bucket, prefix = split_s3_uri(job.output)
        outputs.append(f"arn:{partition}:s3:::{bucket}/{prefix}")
    return inputs, outputs


@dataclass(frozen=True)
class BucketLifecycle:
    protect: bool  # no deletion or replacement while set (Pulumi's `protect`)
    retain_on_delete: bool  # a deletion leaves the bucket in AWS and only drops it from the stack


def bucket_lifecycle(teardown: bool) -> BucketLifecycle:
    """The weights may be the only copy of a team's fine-tuned checkpoints and take hours to upload again:
    unless the stack is marked for teardown, the bucket is protected and, should it ever be deleted
    from the stack (after `pulumi state unprotect`), retained. With teardown it is neither, and
    `force_destroy` lets the provider empty it, every object version included, before DeleteBucket,
    which S3 refuses on a non-empty bucket."""
    return BucketLifecycle(protect=not teardown, retain_on_delete=not teardown)


@dataclass(frozen=True)
class WeightsStoreArgs:
    spec: StackSpec
    cluster_name: pulumi.Input[str]
    partition: str


class WeightsStore(pulumi.ComponentResource):
    """The weights bucket (or an existing one) and the least-privilege reader role bound to serving pods."""

    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    reader_role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: WeightsStoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws:WeightsStore", name, None, opts)
        spec = args.spec
        existing = spec.weights.existing_bucket

        if existing is not None:
            self.bucket_name = pulumi.Output.from_input(existing)
            self.bucket_arn = pulumi.Output.from_input(f"arn:{args.partition}:s3:::{existing}")
        else:
            kept = bucket_lifecycle(spec.teardown)
            bucket = s3.Bucket(
                f"{name}-bucket",
                force_destroy=spec.teardown,
                opts=pulumi.ResourceOptions(parent=self, protect=kept.protect, retain_on_delete=kept.retain_on_delete),
            )
            # A retained bucket keeps its settings: deleting these would leave it without its public access
            # block, default encryption, versioning and expiry of replaced weights.
            bucket_child = pulumi.ResourceOptions(parent=self, depends_on=[bucket], retain_on_delete=kept.retain_on_delete)
            s3.BucketPublicAccessBlock(
                f"{name}-public-access-block",
                bucket=bucket.id,
                block_public_acls=True,
                block_public_policy=True,
                ignore_public_acls=True,
                restrict_public_buckets=True,
                opts=bucket_child,
            )
            s3.BucketOwnershipControls(
                f"{name}-ownership",
                bucket=bucket.id,
                rule=s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
                opts=bucket_child,
            )
            s3.BucketServerSideEncryptionConfiguration(
                f"{name}-encryption",
                bucket=bucket.id,
                rules=[
                    s3.BucketServerSideEncryptionConfigurationRuleArgs(
                        apply_server_side_encryption_by_default=s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                            sse_algorithm="aws:kms"
                        ),
                        bucket_key_enabled=True,
                    )
                ],
                opts=bucket_child,
            )
            versioning = s3.BucketVersioning(
                f"{name}-versioning",
                bucket=bucket.id,
                versioning_configuration=s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
                opts=bucket_child,
            )
            s3.BucketLifecycleConfiguration(
                f"{name}-lifecycle",
                bucket=bucket.id,
                rules=[
                    s3.BucketLifecycleConfigurationRuleArgs(
                        id="expire-replaced-weights",
                        status="Enabled",
                        filter=s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                        noncurrent_version_expiration=s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                            noncurrent_days=NONCURRENT_VERSION_DAYS
                        ),
                        abort_incomplete_multipart_upload=s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                            days_after_initiation=ABORT_MULTIPART_DAYS
                        ),
                    )
                ],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning], retain_on_delete=kept.retain_on_delete),
            )
            self.bucket_name = bucket.bucket
            self.bucket_arn = bucket.arn

        # Pods get credentials only if their association exists when they start: workloads wait for these.
        self.identities: dict[tuple[str, str], pulumi.Resource] = {}  # (namespace, service account) -> association
        self.reader_role_arn = self._pod_role(
            name,
            READER_ROLE,
            args,
            description=f"Serving pods of {spec.environment}: read model weights",
            namespaces=sorted({spec.serving_namespace, spec.batch_namespace}),
            service_account=MODEL_READER_SERVICE_ACCOUNT,
            policy=lambda arn: policies.s3_read_policy(read_grants(spec, existing, arn, args.partition)),
        )
        if spec.batch_jobs:
            inputs, outputs = batch_objects(spec, args.partition)
            self._pod_role(
                name,
                BATCH_ROLE,
                args,
                description=f"Batch jobs of {spec.environment}: read weights and inputs, write results",
                namespaces=[spec.batch_namespace],
                service_account=BATCH_RUNNER_SERVICE_ACCOUNT,
                policy=lambda arn: policies.s3_batch_policy(
                    read_grants(spec, existing, arn, args.partition), inputs, outputs
                ),
            )
        self.register_outputs(
            {"bucket_name": self.bucket_name, "bucket_arn": self.bucket_arn, "reader_role_arn": self.reader_role_arn}
        )

    def _pod_role(
        self,
        name: str,
        role_name: str,
        args: WeightsStoreArgs,
        *,
        description: str,
        namespaces: list[str],
        service_account: str,
        policy: Callable[[str], dict],
    ) -> pulumi.Output[str]:
        """A role for one service account in these namespaces (EKS Pod Identity), with an S3 policy of the bucket ARN."""
        child = pulumi.ResourceOptions(parent=self)
        role = iam.Role(
            f"{name}-{role_name}",
            description=description,
            assume_role_policy=pulumi.Output.from_input(args.cluster_name).apply(
                lambda cluster: json.dumps(policies.pod_identity_trust_policy(cluster, namespaces, service_account))
            ),
            opts=child,
        )
        iam.RolePolicy(
            f"{name}-{role_name}-s3", role=role.id, policy=self.bucket_arn.apply(lambda arn: json.dumps(policy(arn))), opts=child
        )
        for namespace in namespaces:
            self.identities[namespace, service_account] = eks.PodIdentityAssociation(
                f"{name}-{namespace}-{role_name}",
                cluster_name=args.cluster_name,
                namespace=namespace,
                service_account=service_account,
                role_arn=role.arn,
                opts=child,
            )
        return role.arn
