"""IAM documents linted by duo-labs/parliament (PyPI 1.6.x) with its community auditors, as `parliament --file`
lints each document, for the tests that lint what the program registers.

Every finding fails but the narrow ones listed here, each explained: what parliament cannot judge one statement
or one ARN format at a time, never a grant broader than its purpose.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import parliament
from parliament import analyze_policy_string, enhance_finding, is_arn_match, override_config

# Parliament findings on the upstream documents that are parliament's limits, not excess grants; each is accepted
# only in the narrow shape described.
INSTANCE_PROFILE_ACTIONS = {
    "iam:passrole", "iam:createinstanceprofile", "iam:taginstanceprofile", "iam:addroletoinstanceprofile",
    "iam:removerolefrominstanceprofile", "iam:deleteinstanceprofile",
}


def _as_set(value: str | list[str]) -> set[str]:
    return {value} if isinstance(value, str) else set(value)


def _allows(document: dict, action: str, required_format: str) -> bool:
    """Whether some statement of the document grants the action on a resource of that format."""
    return any(
        action in _as_set(statement["Action"])
        and any(is_arn_match("", required_format, resource) for resource in _as_set(statement["Resource"]))
        for statement in document["Statement"]
    )


def justified(finding: Any, document: dict) -> bool:
    """* RESOURCE_MISMATCH on ec2:RunInstances / ec2:CreateFleet: [cfn] grants their resource types over several
      statements with different tag conditions (IAM authorizes each resource of a request against every
      statement); parliament checks one statement at a time. Accepted only if the document as a whole covers each
      resource format parliament names.
    * RESOURCE_MISMATCH on ssm:GetParameter: AWS's public parameters have no account
      (arn:<partition>:ssm:<region>::parameter/aws/service/...), and parliament's is_arn_match refuses an empty
      account against the format's '*'.
    * PERMISSIONS_MANAGEMENT_ACTIONS on PassRole and instance-profile actions only: Karpenter creates and deletes the
      instance profile of each EC2NodeClass's role (section 3.3), held by tags to this cluster and region.
    * RESOURCE_STAR on arc-zonal-shift:GetManagedResource: its only resource types are load balancers; an EKS
      cluster is named by the arc-zonal-shift:ResourceIdentifier condition instead (the Service Authorization data
      parliament ships)."""
    detail = finding.detail or []
    if finding.issue == "RESOURCE_MISMATCH":
        actions = {entry["action"] for entry in detail}
        if actions <= {"ec2:RunInstances", "ec2:CreateFleet"}:
            return all(_allows(document, entry["action"], entry["required_format"]) for entry in detail)
        return detail == [{"action": "ssm:GetParameter", "required_format": "arn:*:ssm:*:*:parameter/*"}]
    if finding.issue == "PERMISSIONS_MANAGEMENT_ACTIONS":
        return set(finding.location.get("actions", ())) <= INSTANCE_PROFILE_ACTIONS
    if finding.issue == "RESOURCE_STAR":
        return detail == ["arc-zonal-shift:GetManagedResource"]
    return False


# Parliament lints identity and resource policies, and requires a Resource in each statement; a role's trust policy
# has none (duo-labs/parliament issue #229), so it is linted with the role itself as the resource it guards.
TRUST_POLICY_ROLE_ARN = "arn:aws:iam::123456789012:role/{name}"
# Allowed findings, each narrowly: CREDENTIALS_EXPOSURE (community auditor credentials_exposure.py) flags
# sts:AssumeRole because it hands out credentials - which is what a trust policy's statement exists to allow.
JUSTIFIED = {("CREDENTIALS_EXPOSURE", "trust", ("sts:assumerole",))}


@functools.cache
def with_community_auditors() -> None:
    """Load the community auditors' finding definitions, as `parliament --include-community-auditors` does."""
    override_config(str(Path(parliament.__file__).with_name("community_auditors") / "config_override.yaml"))


def parliament_findings(documents) -> list[str]:
    with_community_auditors()
    findings = []
    for found in documents:
        document = copy.deepcopy(found.document)
        kind = "permissions"
        if found.trust_policy_of is not None:
            kind = "trust"
            statements = document["Statement"]
            for statement in statements if isinstance(statements, list) else [statements]:
                statement.setdefault("Resource", TRUST_POLICY_ROLE_ARN.format(name=found.trust_policy_of))
        policy = analyze_policy_string(json.dumps(document), include_community_auditors=True)
        for finding in policy.findings:
            finding = enhance_finding(finding)
            where = finding.location if isinstance(finding.location, dict) else {}
            actions = tuple(sorted(where.get("actions", ())))
            if (finding.issue, kind, actions) in JUSTIFIED or justified(finding, found.document):
                continue
            detail = finding.detail or {k: v for k, v in where.items() if k != "filepath"}
            findings.append(f"{found.where}: {finding.issue} ({finding.severity}): {finding.title}: {detail}")
    return findings
