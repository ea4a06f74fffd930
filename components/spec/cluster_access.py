"""Who may reach a created cluster's API: the public endpoint's CIDRs and the roles given access entries.

Sources (Amazon EKS User Guide): "Control network access to cluster API server endpoint"
(https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html) and "Configure network access
to cluster API server endpoint" (config-cluster-endpoint.html): a public endpoint given no CIDR
blocks accepts requests from every address (0.0.0.0/0); the blocks may not include reserved
addresses; an IPv4 cluster takes no IPv6 blocks. "Create access entries" (access-entries.html):
one access entry per IAM principal and cluster.
"""

from __future__ import annotations

import ipaddress
from inferstack.spec.errors import SpecError
from inferstack.spec.cluster import CreateCluster

PATH = "cluster"


def check_cluster_access(cluster: CreateCluster) -> None:
    """Private by default; public only to named, routable IPv4 CIDRs, 0.0.0.0/0 only when acknowledged."""
    cidrs = cluster.public_access_cidrs
    if cluster.endpoint_public_access and not cidrs:
        raise SpecError(
            f"{PATH}.public_access_cidrs",
            "is empty while endpoint_public_access is true, and EKS opens a public endpoint given no CIDRs to every "
            "address (0.0.0.0/0)",
            "name the CIDRs that may reach the API (office or VPN egress, CI runners), "
            "or set endpoint_public_access: false to keep the endpoint private",
        )
    if cidrs and not cluster.endpoint_public_access:
        raise SpecError(
            f"{PATH}.public_access_cidrs",
            f"names {', '.join(cidrs)} but endpoint_public_access is false, so no public endpoint would use them",
            "set endpoint_public_access: true, or remove public_access_cidrs",
        )
    for index, cidr in enumerate(cidrs):
        _check_cidr(f"{PATH}.public_access_cidrs[{index}]", cidr, cluster.public_access_from_anywhere)
    _check_principals(cluster)


def _check_cidr(path: str, cidr: str, from_anywhere: bool) -> None:
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise SpecError(path, f"{cidr!r} is not a CIDR block", "write an IPv4 block, e.g. '<egress address>/32'") from None
    if network.version != 4:
        raise SpecError(path, f"{cidr!r} is IPv6 and the cluster is IPv4, which takes IPv4 blocks only",
                        "use the IPv4 egress addresses")
    if "/" not in cidr:
        raise SpecError(path, f"{cidr!r} is an address, not a CIDR block", f"write the block as {str(network)!r}")
    if str(network) != cidr:
        raise SpecError(path, f"{cidr!r} has host bits set", f"write the block as {str(network)!r}")
    if network.prefixlen == 0:
        if not from_anywhere:
            raise SpecError(
                path,
                "'0.0.0.0/0' opens the cluster's API endpoint to the whole internet",
                "name the addresses that need it, keep the endpoint private, or set "
                "cluster.public_access_from_anywhere: true to accept an endpoint open to every address",
            )
        return
    if not (network.network_address.is_global and network.broadcast_address.is_global):
        raise SpecError(
            path,
            f"{cidr!r} includes reserved or private addresses, which EKS refuses for the public endpoint",
            "name public addresses; private networks reach the private endpoint through the VPC",
        )


def _check_principals(cluster: CreateCluster) -> None:
    """Every role gets exactly one access entry: a role named twice would be created twice, which EKS refuses."""
    seen: dict[str, str] = {}
    for field, arns in (("admin_role_arns", cluster.admin_role_arns), ("ci_role_arns", cluster.ci_role_arns)):
        for index, arn in enumerate(arns):
            path = f"{PATH}.{field}[{index}]"
            if arn in seen:
                raise SpecError(
                    path,
                    f"{arn} is already given access in {seen[arn]}, and EKS has one access entry per role",
                    "name each role once (an admin role can already do what a CI role can)",
                )
            seen[arn] = path
