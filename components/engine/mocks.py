"""Realistic engine answers for the offline plan: ids, ARNs, endpoints, kubeconfigs.

The program under mocks sees the same shapes a real `pulumi up` sees, so code that derives values
from outputs (kubeconfig from the cluster endpoint, policies from bucket ARNs) runs for real.
Every invoke the program makes is answered here; an unknown one fails loudly rather than
returning an empty dict that would hide a missing mock.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any

from pulumi.runtime import Mocks
from pulumi.runtime.mocks import MockCallArgs, MockResourceArgs

ACCOUNT_ID = "123456789012"
PARTITION = "aws"


class UnmockedInvoke(Exception):
    """The program called a provider function the embedded engine does not answer."""


def _hex(seed: str, length: int) -> str:
    return hashlib.sha1(seed.encode()).hexdigest()[:length]


class PlanMocks(Mocks):
    """Deterministic outputs: the same program gives the same ids on every run."""

    def __init__(self, region: str) -> None:
        self.region = region
        self._subnet_zones: dict[str, str] = {}  # zones of the subnets the mocks made up for existing clusters
        self._resources: dict[str, Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]] = {
            "aws:ec2/vpc:Vpc": self._vpc,
            "aws:ec2/subnet:Subnet": self._prefixed("subnet"),
            "aws:ec2/securityGroup:SecurityGroup": self._prefixed("sg"),
            "aws:ec2/internetGateway:InternetGateway": self._prefixed("igw"),
            "aws:ec2/natGateway:NatGateway": self._prefixed("nat", arn=False),
            "aws:ec2/eip:Eip": self._eip,
            "aws:ec2/routeTable:RouteTable": self._prefixed("rtb"),
            "aws:ec2/launchTemplate:LaunchTemplate": self._launch_template,
            "aws:ec2/placementGroup:PlacementGroup": self._placement_group,
            "aws:eks/cluster:Cluster": self._cluster,
            "aws:eks/nodeGroup:NodeGroup": self._node_group,
            "aws:iam/role:Role": self._iam("role", "uniqueId", "AROA"),
            "aws:iam/policy:Policy": self._iam("policy", "policyId", "ANPA"),
            "aws:iam/openIdConnectProvider:OpenIdConnectProvider": self._oidc,
            "aws:s3/bucket:Bucket": self._bucket,
            "aws:s3/bucketV2:BucketV2": self._bucket,
            "aws:ec2/vpcEndpoint:VpcEndpoint": self._prefixed("vpce"),
            "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": self._security_group_rule,
            "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": self._security_group_rule,
            "aws:eks/addon:Addon": self._addon,
            "aws:eks/accessEntry:AccessEntry": self._access_entry,
            "aws:eks/podIdentityAssociation:PodIdentityAssociation": self._pod_identity_association,
            "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": self._bucket_setting,
            "aws:s3/bucketOwnershipControls:BucketOwnershipControls": self._bucket_setting,
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": self._bucket_setting,
            "aws:s3/bucketVersioning:BucketVersioning": self._bucket_setting,
            "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": self._bucket_setting,
            "aws:sqs/queue:Queue": self._queue,
            "aws:cloudwatch/eventRule:EventRule": self._event_rule,
            "random:index/randomPassword:RandomPassword": self._random_password,
        }
        self._calls: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "aws:index/getCallerIdentity:getCallerIdentity": lambda _: {
                "accountId": ACCOUNT_ID,
                "arn": f"arn:{PARTITION}:iam::{ACCOUNT_ID}:user/inferstack-plan",
                "userId": "AIDAINFERSTACKPLAN",
                "id": ACCOUNT_ID,
            },
            "aws:index/getRegion:getRegion": lambda _: {"name": self.region, "region": self.region, "id": self.region},
            "aws:index/getPartition:getPartition": lambda _: {
                "partition": PARTITION,
                "dnsSuffix": "amazonaws.com",
                "id": PARTITION,
            },
            "aws:index/getAvailabilityZones:getAvailabilityZones": self._zones,
            "aws:eks/getCluster:getCluster": self._existing_cluster,
            "aws:ec2/getSubnet:getSubnet": self._subnet_lookup,
        }

    # ------------------------------------------------------------------------------------- resources

    @staticmethod
    def _random_password(name: str, state: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """pulumi-random's RandomPassword: id "none" and `result` of the asked length (random provider
        internal/provider/resource_password.go sets the id to "none"); deterministic here, letters and digits, with
        its bcrypt hash left a stand-in the program never reads."""
        length = int(state.get("length", 16))
        seed = "password:" + name
        result = ""
        while len(result) < length:
            result += _hex(seed + str(len(result)), 40)
        return "none", {**state, "result": result[:length], "bcryptHash": "$2a$10$" + _hex(seed, 53)}

    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
        handler = self._resources.get(args.typ)
        if handler is not None:
            return handler(args.name, dict(args.inputs))
        if args.typ.startswith("kubernetes:"):
            return self._kubernetes(args)
        return f"{args.name}-{_hex(args.typ + args.name, 8)}", dict(args.inputs)

    def _arn(self, service: str, resource: str, region: bool = True) -> str:
        where = self.region if region else ""
        return f"arn:{PARTITION}:{service}:{where}:{ACCOUNT_ID}:{resource}"

    def _queue(self, name: str, state: dict[str, Any]):
        """SQS: a queue's id is its URL; its name is the one given, else a generated one."""
        queue = state.get("name") or f"{name}-{_hex(name, 7)}"
        url = f"https://sqs.{self.region}.amazonaws.com/{ACCOUNT_ID}/{queue}"
        state.update(name=queue, url=url, arn=self._arn("sqs", queue))
        return url, state

    def _event_rule(self, name: str, state: dict[str, Any]):
        """EventBridge: a rule's id is its name (on the default event bus)."""
        rule = state.get("name") or f"{name}-{_hex(name, 7)}"
        state.update(name=rule, arn=self._arn("events", f"rule/{rule}"))
        return rule, state

    def _prefixed(self, prefix: str, arn: bool = True):
        """EC2 ids are '<prefix>-<17 hex>'; `arn` for the types whose schema has one (a NAT gateway has none)."""
        def make(name: str, state: dict[str, Any]):
            rid = f"{prefix}-{_hex(prefix + name, 17)}"
            if arn:
                state.setdefault("arn", self._arn("ec2", f"{prefix}/{rid}"))
            return rid, state

        return make

    def _vpc(self, name: str, state: dict[str, Any]):
        rid, state = self._prefixed("vpc")(name, state)
        state["defaultSecurityGroupId"] = f"sg-{_hex('default' + name, 17)}"
        state["mainRouteTableId"] = f"rtb-{_hex('main' + name, 17)}"
        return rid, state

    def _eip(self, name: str, state: dict[str, Any]):
        """A VPC address: its id is the allocation id (eipalloc-...), as EC2 reports it."""
        rid, state = self._prefixed("eipalloc")(name, state)
        state.update(
            allocationId=rid,
            arn=self._arn("ec2", f"elastic-ip/{rid}"),
            publicIp="198.51.100." + str(int(_hex(name, 2), 16) % 250 + 1),
        )
        return rid, state

    def _launch_template(self, name: str, state: dict[str, Any]):
        rid, state = self._prefixed("lt")(name, state)
        state.update(latestVersion=1, defaultVersion=1)
        return rid, state

    def _placement_group(self, name: str, state: dict[str, Any]):
        group = state.get("name") or f"{name}-{_hex(name, 7)}"
        state.update(name=group, placementGroupId=f"pg-{_hex(name, 17)}", arn=self._arn("ec2", f"placement-group/{group}"))
        return group, state

    def _cluster(self, name: str, state: dict[str, Any]):
        cluster_name = state.get("name") or name
        oidc = _hex("oidc" + cluster_name, 32).upper()
        state.update(
            name=cluster_name,
            arn=self._arn("eks", f"cluster/{cluster_name}"),
            endpoint=f"https://{oidc}.gr7.{self.region}.eks.amazonaws.com",
            certificateAuthority={"data": base64.b64encode(b"inferstack-plan-ca").decode()},
            identities=[{"oidcs": [{"issuer": f"https://oidc.eks.{self.region}.amazonaws.com/id/{oidc}"}]}],
            platformVersion="eks.1",
            status="ACTIVE",
        )
        vpc = dict(state.get("vpcConfig") or {})
        vpc.setdefault("clusterSecurityGroupId", f"sg-{_hex('cluster' + cluster_name, 17)}")
        vpc.setdefault("vpcId", f"vpc-{_hex('vpc' + cluster_name, 17)}")
        state["vpcConfig"] = vpc
        return cluster_name, state

    def _node_group(self, name: str, state: dict[str, Any]):
        group = state.get("nodeGroupName") or name
        cluster = state.get("clusterName", "cluster")
        state.update(
            nodeGroupName=group,
            arn=self._arn("eks", f"nodegroup/{cluster}/{group}/{_hex(group, 8)}"),
            status="ACTIVE",
            resources=[{"autoscalingGroups": [{"name": f"eks-{group}-{_hex(group, 8)}"}]}],
        )
        return f"{cluster}:{group}", state

    def _iam(self, kind: str, id_output: str, id_prefix: str):
        """A role's uniqueId (AROA...) or a policy's policyId (ANPA...), as IAM reports them."""
        def make(name: str, state: dict[str, Any]):
            resource_name = state.get("name") or f"{name}-{_hex(name, 7)}"
            path = state.get("path", "/")
            state.update(
                {
                    "name": resource_name,
                    "arn": f"arn:{PARTITION}:iam::{ACCOUNT_ID}:{kind}{path}{resource_name}",
                    id_output: id_prefix + _hex(name, 17).upper(),
                }
            )
            return resource_name, state

        return make

    def _oidc(self, name: str, state: dict[str, Any]):
        url = str(state.get("url", "https://oidc.example")).removeprefix("https://")
        state["arn"] = f"arn:{PARTITION}:iam::{ACCOUNT_ID}:oidc-provider/{url}"
        return state["arn"], state

    def _bucket(self, name: str, state: dict[str, Any]):
        bucket = state.get("bucket") or f"{state.get('bucketPrefix', name)}{_hex(name, 12)}"
        state.update(
            bucket=bucket,
            arn=f"arn:{PARTITION}:s3:::{bucket}",
            bucketDomainName=f"{bucket}.s3.amazonaws.com",
            bucketRegionalDomainName=f"{bucket}.s3.{self.region}.amazonaws.com",
            region=self.region,
        )
        return bucket, state

    def _kubernetes(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "kubernetes:helm.sh/v3:Release":
            release = state.get("name") or args.name
            namespace = state.get("namespace", "default")
            state["status"] = {
                "name": release,
                "namespace": namespace,
                "chart": state.get("chart"),
                "version": state.get("version"),
                "revision": 1,
                "status": "deployed",
            }
            return f"{namespace}/{release}", state
        if args.typ.startswith("pulumi:providers:"):
            return f"{args.name}-{_hex(args.name, 8)}", state
        metadata = dict(state.get("metadata") or {})
        metadata.setdefault("name", args.name)
        metadata["uid"] = "-".join(_hex(args.typ + args.name + str(i), n) for i, n in enumerate((8, 4, 4, 4, 12)))
        state["metadata"] = metadata
        namespace = metadata.get("namespace")
        return (f"{namespace}/{metadata['name']}" if namespace else metadata["name"]), state

    # --------------------------------------------------------------------------------------- invokes

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], list | None]:
        handler = self._calls.get(args.token)
        if handler is None:
            raise UnmockedInvoke(f"the embedded engine has no answer for invoke {args.token!r}")
        return handler(dict(args.args)), []  # the SDK iterates the failures list

    def _zones(self, _args: dict[str, Any]) -> dict[str, Any]:
        names = [f"{self.region}{letter}" for letter in "abcdef"]
        return {"names": names, "zoneIds": [f"use1-az{i + 1}" for i in range(len(names))], "id": self.region}

    def _existing_cluster(self, args: dict[str, Any]) -> dict[str, Any]:
        name = args["name"]
        _, state = self._cluster(name, {"name": name, "version": "1.36"})
        vpc = state["vpcConfig"]
        vpc["subnetIds"] = [f"subnet-{_hex(name + z, 17)}" for z in "abc"]
        self._subnet_zones.update({f"subnet-{_hex(name + z, 17)}": f"{self.region}{z}" for z in "abc"})
        return {
            "name": name,
            "arn": state["arn"],
            "endpoint": state["endpoint"],
            "certificateAuthorities": [state["certificateAuthority"]],
            "identities": state["identities"],
            "version": "1.36",
            "vpcConfig": vpc,
            "status": "ACTIVE",
            "id": name,
        }

    def _subnet_lookup(self, args: dict[str, Any]) -> dict[str, Any]:
        """aws:ec2/getSubnet by id: the zone the mocks gave the subnet, else a stable zone a-c from the id."""
        subnet = args["id"]
        zone = self._subnet_zones.get(subnet) or f"{self.region}{'abc'[int(_hex(subnet, 4), 16) % 3]}"
        return {
            "id": subnet,
            "availabilityZone": zone,
            "vpcId": f"vpc-{_hex('vpc' + subnet, 17)}",
            "arn": self._arn("ec2", f"subnet/{subnet}"),
            "state": "available",
        }

    def _security_group_rule(self, name: str, state: dict[str, Any]):
        rid = f"sgr-{_hex('sgr' + name, 17)}"
        state.update(securityGroupRuleId=rid, arn=self._arn("ec2", f"security-group-rule/{rid}"))
        return rid, state

    def _addon(self, name: str, state: dict[str, Any]):
        cluster, addon = state.get("clusterName", "cluster"), state.get("addonName", name)
        state["arn"] = self._arn("eks", f"addon/{cluster}/{addon}/{_hex(name, 8)}")
        return f"{cluster}:{addon}", state

    def _access_entry(self, name: str, state: dict[str, Any]):
        cluster, principal = state.get("clusterName", "cluster"), state.get("principalArn", name)
        role = principal.rsplit("/", 1)[-1]
        state["accessEntryArn"] = self._arn("eks", f"access-entry/{cluster}/role/{ACCOUNT_ID}/{role}/{_hex(name, 8)}")
        return f"{cluster}:{principal}", state

    def _pod_identity_association(self, name: str, state: dict[str, Any]):
        cluster = state.get("clusterName", "cluster")
        association = f"a-{_hex('pia' + name, 17)}"
        state.update(
            associationId=association,
            associationArn=self._arn("eks", f"podidentityassociation/{cluster}/{association}"),
        )
        return association, state

    def _bucket_setting(self, name: str, state: dict[str, Any]):
        """Bucket sub-resources (public access block, encryption, ...) are identified by their bucket."""
        return str(state.get("bucket") or name), state
