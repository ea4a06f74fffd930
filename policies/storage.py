"""S3 buckets the stack creates are encrypted and closed to the public.

Encryption and the public access block are separate resources that point at their bucket, so this
is a stack policy: it joins them to the bucket by dependency (or by bucket name).
"""

from __future__ import annotations

from collections.abc import Sequence

from pulumi_policy import EnforcementLevel, PolicyResource, ReportViolation, StackValidationArgs, StackValidationPolicy

from inferstack.policies.props import leaves, text

BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
ACCOUNT_PUBLIC_ACCESS_BLOCK = "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock"
ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
BLOCK_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")


def _for_bucket(bucket: PolicyResource, resource: PolicyResource) -> bool:
    if bucket in resource.dependencies:
        return True
    name = text(bucket.props.get("bucket"))
    return bool(name) and text(resource.props.get("bucket")) == name


def _sets_algorithm(resource: PolicyResource) -> bool:
    """Any sseAlgorithm under the resource's props (inline bucket config or a separate configuration)."""
    return any(path and path[-1] == "sseAlgorithm" and text(value) for path, value in leaves(resource.props))


def _blocks_all(resource: PolicyResource) -> list[str]:
    """The public-access flags that are not true."""
    return [flag for flag in BLOCK_FLAGS if resource.props.get(flag) is not True]


def _validate(args: StackValidationArgs, report: ReportViolation) -> None:
    resources: Sequence[PolicyResource] = args.resources
    account_blocks = [r for r in resources if r.resource_type == ACCOUNT_PUBLIC_ACCESS_BLOCK and not _blocks_all(r)]
    for bucket in (r for r in resources if r.resource_type in BUCKETS):
        label = text(bucket.props.get("bucket")) or bucket.name
        encrypted = _sets_algorithm(bucket) or any(
            r.resource_type in ENCRYPTION and _for_bucket(bucket, r) and _sets_algorithm(r) for r in resources
        )
        if not encrypted:
            report(
                f"S3 bucket {label} ({bucket.name}) has no server-side encryption configuration. To fix: add "
                "aws.s3.BucketServerSideEncryptionConfiguration with sse_algorithm 'aws:kms' or 'AES256'.",
                bucket.urn,
            )
        if account_blocks:
            continue
        blocks = [r for r in resources if r.resource_type == PUBLIC_ACCESS_BLOCK and _for_bucket(bucket, r)]
        if not blocks:
            report(
                f"S3 bucket {label} ({bucket.name}) has no public access block. To fix: add "
                "aws.s3.BucketPublicAccessBlock with block_public_acls, block_public_policy, ignore_public_acls "
                "and restrict_public_buckets set to True.",
                bucket.urn,
            )
        for block in blocks:
            missing = _blocks_all(block)
            if missing:
                report(
                    f"S3 bucket {label} ({bucket.name}): public access block {block.name} leaves "
                    f"{', '.join(missing)} unset or false. To fix: set all four flags to True.",
                    block.urn,
                )


s3_buckets_private_encrypted = StackValidationPolicy(
    name="s3-buckets-private-encrypted",
    description="S3 buckets are encrypted at rest and block all public access.",
    validate=_validate,
    enforcement_level=EnforcementLevel.MANDATORY,
)
