"""The EKS cluster: one the stack creates (its VPC, system nodes and API access) or one that exists."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Discriminator, Field, StringConstraints, Tag

from inferstack.spec.base import Model, Name

ZoneName = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")]
Ipv4Cidr = Annotated[str, StringConstraints(pattern=r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$")]


class ZoneSubnetCidrs(Model):
    """One zone's subnet CIDRs, chosen by hand instead of the zone's slot (e.g. addresses a VPC already has)."""

    private: Ipv4Cidr = Field(description="CIDR of the zone's private (node) subnet, inside vpc_cidr. Required.")
    public: Ipv4Cidr = Field(
        description="CIDR of the zone's public (NAT, load balancer) subnet, inside vpc_cidr. Required."
    )


class NetworkSpec(Model):
    """The VPC the platform creates, or existing subnets to place it in."""

    vpc_cidr: str = Field(
        "10.0.0.0/16",
        pattern=r"^\d{1,3}(\.\d{1,3}){3}/(1[6-9]|2[0-4])$",
        description="CIDR of the VPC to create (/16 to /24). Each zone letter a-g has fixed slots: its private "
        "subnet is one eighth of the VPC (a /19 of a /16), its public subnet one sixty-fourth (a /22); slots need a "
        "/22 or larger VPC, a smaller one needs subnet_cidrs for every zone. Defaults to 10.0.0.0/16.",
    )
    availability_zones: list[ZoneName] = Field(
        default_factory=list,
        description="Zones for private subnets, e.g. ['us-east-1a', 'us-east-1b']; adding or removing one leaves "
        "the other zones' subnets as they are. Defaults to the first three zones of the region (a, b, c).",
    )
    subnet_cidrs: dict[ZoneName, ZoneSubnetCidrs] = Field(
        default_factory=dict,
        description="Explicit subnet CIDRs per zone, in place of the zone's slot, e.g. to keep the addresses of "
        "subnets created before zone slots. Defaults to none: every zone uses its slot.",
    )
    existing_subnet_ids: list[Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list,
        description="Private subnet ids to use instead of creating a VPC. Defaults to none: a VPC is created.",
    )


class SystemNodesSpec(Model):
    """CPU nodes for operators and controllers, so GPU nodes only run GPU work."""

    instance_type: str = Field("m7i.xlarge", description="Instance type of the system node group. Defaults to m7i.xlarge.")
    min_nodes: int = Field(2, ge=1, description="Minimum system nodes. Defaults to 2.")
    max_nodes: int = Field(4, ge=1, description="Maximum system nodes. Defaults to 4.")


RoleArn = Annotated[str, StringConstraints(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")]


class CreateCluster(Model):
    """An EKS cluster the stack creates and owns."""

    mode: Literal["create"] = Field("create", description="Create a new EKS cluster. Defaults to create.")
    name: Name | None = Field(None, description="Cluster name. Defaults to '<environment>-inference'.")
    kubernetes_version: str = Field(
        "1.36", pattern=r"^1\.\d{2}$",
        description="EKS Kubernetes minor version: one EKS supports and components/catalog/eks_addons.json pins "
        "add-ons for (its calendar records each minor's end of standard and extended support). Defaults to 1.36.",
    )
    endpoint_public_access: bool = Field(
        False,
        description="Also expose the API endpoint on the internet, to public_access_cidrs only. Defaults to false: the "
        "endpoint is private, reachable from the VPC and the networks routed into it (VPN, peering, Direct Connect).",
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list,
        description="Public IPv4 CIDRs that may reach the public endpoint (required with endpoint_public_access). "
        "Defaults to none. 0.0.0.0/0 is refused unless public_access_from_anywhere acknowledges it.",
    )
    public_access_from_anywhere: bool = Field(
        False,
        description="Acknowledge that 0.0.0.0/0 in public_access_cidrs opens the API endpoint to the whole internet "
        "(requests still need an access entry), e.g. for hosted CI runners without fixed addresses. Defaults to false.",
    )
    admin_role_arns: list[RoleArn] = Field(
        default_factory=list,
        description="IAM roles granted cluster-admin through EKS access entries. Defaults to none (only the creator).",
    )
    ci_role_arns: list[RoleArn] = Field(
        default_factory=list,
        description="IAM roles CI runs `pulumi preview` with: each gets an access entry with the read-only "
        "AmazonEKSViewPolicy at cluster scope. Defaults to none.",
    )
    network: NetworkSpec = Field(default_factory=NetworkSpec, description="The VPC. Defaults to a new /16 VPC in three zones.")
    system_nodes: SystemNodesSpec = Field(
        default_factory=SystemNodesSpec, description="CPU node group for add-ons. Defaults to 2-4 m7i.xlarge."
    )


class ExistingCluster(Model):
    """An EKS cluster that already exists: nothing of the cluster itself is created."""

    mode: Literal["existing"] = Field(description="Use an existing EKS cluster.")
    name: Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")] = Field(
        description="Name of the existing EKS cluster. Required."
    )
    kubeconfig: str | None = Field(
        None,
        description="Kubeconfig to reach the cluster (kept as a Pulumi secret). "
        "Defaults to one built from the cluster's endpoint that authenticates with `aws eks get-token`.",
    )


def mode(value: object) -> str:
    """`mode` picks the cluster kind; without one it is `create`, the documented default."""
    if isinstance(value, dict):
        return str(value.get("mode", "create"))
    return str(getattr(value, "mode", "create"))


ClusterSpec = Annotated[
    Union[Annotated[CreateCluster, Tag("create")], Annotated[ExistingCluster, Tag("existing")]],
    Discriminator(mode),
]
