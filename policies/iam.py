"""IAM least privilege: statements name their actions and, for data actions, their resources."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from fnmatch import fnmatchcase
from typing import Any

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from inferstack.policies.props import items, mapping, text

# Where a policy document sits on each IAM resource type (inline role policies are a list).
POLICY_DOCUMENTS = {
    "aws:iam/policy:Policy": ("policy",),
    "aws:iam/rolePolicy:RolePolicy": ("policy",),
    "aws:iam/userPolicy:UserPolicy": ("policy",),
    "aws:iam/groupPolicy:GroupPolicy": ("policy",),
    "aws:iam/role:Role": ("assumeRolePolicy",),
}
INLINE_POLICIES = "inlinePolicies"
ATTACHMENTS = {
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": "policyArn",
    "aws:iam/policyAttachment:PolicyAttachment": "policyArn",
    "aws:iam/userPolicyAttachment:UserPolicyAttachment": "policyArn",
    "aws:iam/groupPolicyAttachment:GroupPolicyAttachment": "policyArn",
}
# AWS-managed policies that grant `*` or `s3:*`.
BROAD_MANAGED_POLICIES = ("AdministratorAccess", "PowerUserAccess", "IAMFullAccess", "AmazonS3FullAccess")
# Actions that read or write data; on these a `*` resource hands over every bucket, key or secret.
DATA_ACTIONS = (
    "s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion",
    "s3:ListBucket", "s3:ListBucketVersions", "s3:RestoreObject", "s3:AbortMultipartUpload",
    "kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom",
    "secretsmanager:GetSecretValue", "ssm:GetParameter", "ssm:GetParameters",
    "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:Scan",
    "sqs:ReceiveMessage", "sqs:SendMessage",
)


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in items(value) if isinstance(v, str)]


def _document(value: Any) -> Mapping[str, Any] | None:
    """A policy document given as JSON text (what the provider takes) or as a mapping."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str) and value.strip():
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return None
        return parsed if isinstance(parsed, Mapping) else None
    return None


def _statements(document: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    statements = document.get("Statement")
    listed = [statements] if isinstance(statements, Mapping) else items(statements)
    for index, statement in enumerate(listed):
        statement = mapping(statement)
        yield text(statement.get("Sid")) or f"#{index}", statement


def is_data_action(action: str) -> bool:
    """Whether the action (wildcards allowed, e.g. s3:Get*) covers an action that reads or writes data."""
    action = action.lower()
    return any(fnmatchcase(data.lower(), action) for data in DATA_ACTIONS)


def statement_problems(statement: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(what is too broad, the fix) for one Allow statement; Deny statements only narrow."""
    if text(statement.get("Effect"), "Allow") != "Allow":
        return []
    problems = []
    actions = _as_list(statement.get("Action"))
    if "NotAction" in statement:
        problems.append(("allows NotAction, i.e. every action but a few", "list the actions it needs in Action"))
    for action in actions:
        if action == "*":
            problems.append(("allows Action '*'", "list the actions it needs"))
        elif action.lower() == "s3:*":
            problems.append(("allows 's3:*'", "list the S3 actions it needs (e.g. s3:GetObject, s3:ListBucket)"))
    resources = _as_list(statement.get("Resource"))
    if "*" in resources or "NotResource" in statement:
        data = sorted({a for a in actions if a != "*" and a.lower() != "s3:*" and is_data_action(a)})
        if data:
            problems.append(
                (f"allows data actions {', '.join(data)} on Resource '*'", "name the bucket, key or secret ARNs instead")
            )
    return problems


def _documents(args: ResourceValidationArgs) -> Iterator[tuple[str, Any]]:
    for key in POLICY_DOCUMENTS.get(args.resource_type, ()):
        if key in args.props:
            yield key, args.props[key]
    if args.resource_type == "aws:iam/role:Role":
        for index, inline in enumerate(items(args.props.get(INLINE_POLICIES))):
            inline = mapping(inline)
            yield f"{INLINE_POLICIES}[{index}] ({text(inline.get('name'), '?')})", inline.get("policy")


def _validate_documents(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for where, raw in _documents(args):
        document = _document(raw)
        if document is None:
            continue
        for sid, statement in _statements(document):
            for problem, fix in statement_problems(statement):
                report(f"{args.resource_type.rsplit(':', 1)[-1]} {args.name} {where} statement {sid} {problem}. To fix: {fix}.")


def _managed_arns(args: ResourceValidationArgs) -> list[tuple[str, str]]:
    if args.resource_type in ATTACHMENTS:
        key = ATTACHMENTS[args.resource_type]
        return [(key, arn) for arn in _as_list(args.props.get(key))]
    if args.resource_type == "aws:iam/role:Role":
        return [("managedPolicyArns", arn) for arn in _as_list(args.props.get("managedPolicyArns"))]
    return []


def _validate_attachments(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for key, arn in _managed_arns(args):
        policy = arn.rsplit("/", 1)[-1]
        if ":iam::aws:policy/" in arn and policy in BROAD_MANAGED_POLICIES:
            report(
                f"{args.resource_type.rsplit(':', 1)[-1]} {args.name} {key} attaches {arn}, which grants '*' or 's3:*'. "
                "To fix: attach a policy that lists the actions and resources the role needs."
            )


iam_least_privilege = ResourceValidationPolicy(
    name="iam-least-privilege",
    description="IAM grants no '*' action, no 's3:*' and no '*' resource on data actions.",
    validate=[_validate_documents, _validate_attachments],
    enforcement_level=EnforcementLevel.MANDATORY,
)
