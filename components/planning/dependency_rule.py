"""Which waits of the program are required: this project's rule for the resource graph's edges.

A wait the rule does not call required is time lost to needless ordering (serving_time's lower bound
drops it); the platform and the serving components express only the waits it requires.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping, Sequence

from inferstack.planning.serving_time import EdgeKind, Resource

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The endpoint picker's flag naming the InferencePool it serves (llm-d/llm-d-router v0.10.0 cmd/epp/runner);
# its health is that pool having synced (cmd/epp/runner/health.go).
POOL_NAME_FLAG = "--pool-name"
# The routing sidecar's SSRF allowlist: the InferencePool it names must sync before it serves (llm-d-router v0.10.0
# pkg/sidecar/proxy/allowlist.go Start: WaitForCacheSync, an error otherwise); given as `--inference-pool=ns/name`.
SIDECAR_POOL_FLAG = "--inference-pool"
# EKS add-ons that are DaemonSets every node needs from its first boot (the rest run as Deployments).
NODE_ADDONS = frozenset({"vpc-cni", "kube-proxy", "eks-pod-identity-agent"})
# API group -> what installs its CRDs: a Helm chart, or the repository of a released manifest.
CRD_INSTALLERS: Mapping[str, str] = {
    "gateway.networking.k8s.io": "gateway-api",
    "inference.networking.k8s.io": "gateway-api-inference-extension",
    "llm-d.ai": "llm-d-router",
    "kueue.x-k8s.io": "kueue",
    "keda.sh": "keda",
    "leaderworkerset.x-k8s.io": "lws",
    "monitoring.coreos.com": "kube-prometheus-stack",
    "nvidia.com": "gpu-operator",
    "agentgateway.dev": "agentgateway-crds",
    "networking.istio.io": "base",
    "karpenter.sh": "karpenter-crd",
    "karpenter.k8s.aws": "karpenter-crd",
}
# Releases that need other installers first: a gateway controller watches Istio's and the Gateway API's
# kinds from its start, and Istio config (body-based routing's EnvoyFilter) passes istiod's webhook.
RELEASE_NEEDS: Mapping[str, frozenset[str]] = {
    "istiod": frozenset({"base", "gateway-api", "gateway-api-inference-extension"}),
    "agentgateway": frozenset({"agentgateway-crds", "gateway-api", "gateway-api-inference-extension"}),
    "body-based-routing": frozenset({"istiod"}),
    # The controller chart installs its CRDs only on a first install; the CRD chart keeps them current.
    "karpenter": frozenset({"karpenter-crd"}),
}
# API group -> the release whose admission webhook must answer before its objects are accepted: Istio config
# passes istiod's validating webhook (as body-based routing's EnvoyFilter does, RELEASE_NEEDS).
WEBHOOK_SERVERS: Mapping[str, str] = {"networking.istio.io": "istiod"}
# GatewayClass -> the release whose controller creates it.
GATEWAY_CLASS_CONTROLLERS: Mapping[str, str] = {"istio": "istiod", "agentgateway": "agentgateway"}
# Karpenter's node objects (EC2NodeClass, NodePool): the nodes they launch need their role's access entry.
KARPENTER_NODE_GROUPS = frozenset({"karpenter.sh", "karpenter.k8s.aws"})
# Teardown waits: Pulumi deletes a resource before what it depends on (pulumi.com/docs/iac/concepts/resources/options/
# dependson: dependsOn orders creation, update and deletion), so these edges make `pulumi destroy` remove Karpenter's
# node objects while its controller runs, and the controller before its credentials. The controller's finalizers on
# NodePools, EC2NodeClasses and NodeClaims terminate the instances; once it is gone they hang and the instances keep
# running (Karpenter's troubleshooting guide on uninstalling; terraform-aws-eks's karpenter example removes the
# node objects before the controller and its IAM and Pod Identity).
TEARDOWN_KARPENTER_OBJECTS = (
    "teardown ordering: deleted while the Karpenter controller runs, whose finalizers terminate its instances"
)
TEARDOWN_POLICIES = (
    "teardown ordering: the controller reached through this association keeps its policies until it is deleted"
)
# Charts whose pods are DaemonSets for the GPU nodes: the node groups are the nodes those pods need.
NODE_AGENT_CHARTS = frozenset({"gpu-operator", "aws-efa-k8s-device-plugin", "dra-driver-nvidia-gpu", "aws-dranet"})
# Reference fields of Kubernetes objects: key -> the kind it names when the reference does not say.
_REFERENCE_KEYS: Mapping[str, str] = {
    "configMap": "ConfigMap", "configMapRef": "ConfigMap", "configMapKeyRef": "ConfigMap",
    "secret": "Secret", "secretRef": "Secret", "secretKeyRef": "Secret",
    "persistentVolumeClaim": "PersistentVolumeClaim", "roleRef": "Role", "subjects": "ServiceAccount",
    "parentRefs": "Gateway", "backendRefs": "Service", "poolRef": "InferencePool",
    "scaleTargetRef": "Deployment", "targetRefs": "Gateway", "targetRef": "Gateway",
    "inferenceGateway": "Gateway",
}
_NAME_KEYS = ("name", "secretName", "claimName")
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SERVICE_HOST = re.compile(rf"(?<![\w.-])({_LABEL})\.({_LABEL})\.svc\b")   # <service>.<namespace>.svc
_HELM_TYPES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart")
Ref = tuple[str, str, str | None]   # (kind, name, namespace)


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair of nested dicts and lists (iterative: pod specs nest deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                yield key, child
                if isinstance(child, (dict, list)):
                    stack.append(child)
        elif isinstance(item, list):
            stack.extend(child for child in item if isinstance(child, (dict, list)))


def _strings(value: Any) -> Iterator[str]:
    """Every string in nested dicts and lists."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def kubernetes_identity(resource: Resource) -> tuple[str, str, str | None, str | None] | None:
    """(API group, kind, namespace, name) of a Kubernetes object or release; None for anything else."""
    token = str(resource["type"])
    if not token.startswith("kubernetes:"):
        return None
    _, module, kind = token.split(":")
    group = module.rsplit("/", 1)[0]
    inputs = resource.get("inputs") or {}
    if token in _HELM_TYPES:
        return group, kind, inputs.get("namespace"), inputs.get("name")
    metadata = inputs.get("metadata") or {}
    return ("" if group == "core" else group), kind, metadata.get("namespace"), metadata.get("name")


def installer(resource: Resource) -> str | None:
    """What a resource installs, as CRD_INSTALLERS names it: its chart, or the repository of its manifest."""
    inputs = resource.get("inputs") or {}
    if resource["type"] in _HELM_TYPES:
        return str(inputs.get("chart") or "").rstrip("/").rsplit("/", 1)[-1] or None
    if resource["type"] == "kubernetes:yaml/v2:ConfigFile":
        parts = str(inputs.get("file") or "").split("/")
        return parts[parts.index("releases") - 1] if "releases" in parts[1:] else None
    return None


def references(inputs: Any, namespace: str | None) -> set[Ref]:
    """The objects a Kubernetes object names: volumes, service account, role, routes' parents and backends..."""
    found: set[Ref] = set()
    for key, value in _walk(inputs):
        if key == "serviceAccountName" and isinstance(value, str):
            found.add(("ServiceAccount", value, namespace))
        if key == "resourceClaimTemplateName" and isinstance(value, str):   # a pod's DRA claims
            found.add(("ResourceClaimTemplate", value, namespace))
        if key not in _REFERENCE_KEYS:
            continue
        for ref in value if isinstance(value, list) else [value]:
            if not isinstance(ref, dict):
                continue
            name = next((ref[k] for k in _NAME_KEYS if isinstance(ref.get(k), str)), None)
            if name is not None:
                found.add((ref.get("kind") or _REFERENCE_KEYS[key], name, ref.get("namespace") or namespace))
    return found


def _flag_values(inputs: Any, flag: str) -> set[str]:
    """Values given to a command-line flag (`--flag value` or `--flag=value`) in any container's args of the object."""
    found: set[str] = set()
    for key, value in _walk(inputs):
        if key == "args" and isinstance(value, list):
            found.update(str(b) for a, b in zip(value, value[1:]) if a == flag)
            found.update(str(a).removeprefix(f"{flag}=") for a in value if str(a).startswith(f"{flag}="))
    return found


def _taints(resource: Resource) -> list[Any]:
    return list((resource.get("inputs") or {}).get("taints") or [])


class DependencyRule:
    """Which waits of the program are required: `why` names the reason, or None for a needless wait.

    A wait is required when the dependent cannot be created correctly before the dependency exists:
    it is registered under it (parent) or created through it (provider); its inputs carry the
    dependency's outputs; it lives in its namespace; its kind's CRD comes from it; Kueue's webhook must
    see it; it names it (a pod's ConfigMaps, Secrets, claims and service account, a binding's role and
    subjects, a route's gateway and pool, a scaler's target, a Service it connects to, the InferencePool
    an endpoint picker watches); its pods run as a service account the dependency (a RoleBinding) grants
    to, since they call the API from start-up; its pods get
    AWS credentials from a Pod Identity association (injected only into pods created after it); it is
    a node group and the dependency is its cluster, role, policies, launch template, subnets or node
    add-ons; or the dependency gives its pods the nodes they run on. Anything else is needless.
    """

    def __init__(self, resources: Sequence[Resource]) -> None:
        self._config_maps = {
            (ident[3], ident[2]): r for r in resources
            if (ident := kubernetes_identity(r)) is not None and ident[1] == "ConfigMap"
        }
        self._named: dict[str, set[Ref]] = {}          # per dependent, computed once: its edges share it
        self._hosts: dict[str, set[tuple[str, str]]] = {}
        self._labelled: dict[str, bool] = {}

    def __call__(self, dependent: Resource, dependency: Resource, kind: EdgeKind) -> bool:
        return self.why(dependent, dependency, kind) is not None

    def why(self, dependent: Resource, dependency: Resource, kind: EdgeKind) -> str | None:
        if kind == "parent":
            return "registered under its parent"
        if kind == "provider":
            return "created through its provider"
        if dependency["name"] in (dependent.get("input_dependencies") or ()):
            return "its inputs carry the dependency's outputs"
        if str(dependent["type"]).startswith("kubernetes:"):
            return self._kubernetes(dependent, dependency)
        return _aws(dependent, dependency)

    def _kubernetes(self, dependent: Resource, dependency: Resource) -> str | None:
        group, kind, namespace, _ = kubernetes_identity(dependent)
        target = kubernetes_identity(dependency)
        inputs = dependent.get("inputs") or {}
        made = installer(dependency)
        if target is not None and target[1] == "Namespace" and target[3] == namespace:
            return "lives in this namespace"
        if made is not None and CRD_INSTALLERS.get(group) == made:
            return f"installs the CRD of {kind}"
        if made is not None and WEBHOOK_SERVERS.get(group) == made:
            return f"its admission webhook validates {kind}"
        if made == "kueue" and self._queued(dependent):
            return "Kueue's webhook must see objects labelled for a queue"
        if made is not None and made in RELEASE_NEEDS.get(installer(dependent) or "", ()):
            return f"{installer(dependent)} needs {made} at its start"
        gateway_class = str((inputs.get("spec") or {}).get("gatewayClassName"))
        if kind == "Gateway" and made is not None and made == GATEWAY_CLASS_CONTROLLERS.get(gateway_class):
            return "its controller creates the GatewayClass it names"
        if target is not None and target[3] is not None and self._names(dependent, target):
            return f"names this {target[1]}"
        if target is not None and target[1] == "RoleBinding" and self._bound(dependent, dependency, namespace):
            return "its pods call the Kubernetes API with this binding's permissions from start-up"
        if target is not None and target[1] == "InferencePool" and target[3] in _flag_values(inputs, POOL_NAME_FLAG):
            return "the endpoint picker is live only once the InferencePool it watches has synced"
        if target is not None and target[1] == "InferencePool" and f"{target[2]}/{target[3]}" in _flag_values(
            inputs, SIDECAR_POOL_FLAG
        ):
            return "the routing sidecar starts only once the InferencePool of its SSRF allowlist has synced"
        if dependency["type"] == "aws:eks/podIdentityAssociation:PodIdentityAssociation" and self._identity(
            dependent, dependency.get("inputs") or {}
        ):
            return "its pods get AWS credentials from this association, injected only at pod creation"
        if group in KARPENTER_NODE_GROUPS and dependency["type"] == "aws:eks/accessEntry:AccessEntry" and (
            (dependency.get("inputs") or {}).get("type") == "EC2_LINUX"
        ):
            return "the nodes Karpenter launches for it join the cluster through this access entry"
        if group in KARPENTER_NODE_GROUPS and installer(dependency) == "karpenter":
            return TEARDOWN_KARPENTER_OBJECTS
        if installer(dependent) in NODE_AGENT_CHARTS and dependency["type"] == "aws:eks/nodeGroup:NodeGroup" and (
            _taints(dependency)
        ):
            return "its DaemonSets run on these GPU nodes"
        return None

    def _identity(self, dependent: Resource, association: Mapping[str, Any]) -> bool:
        """Whether the association is for the dependent's pods: its service account, or (a release, whose
        chart names the account) its namespace."""
        _, kind, namespace, _ = kubernetes_identity(dependent)
        if association.get("namespace") != namespace:
            return False
        return kind in ("Release", "Chart") or ("ServiceAccount", association.get("serviceAccount"), namespace) in (
            references(dependent.get("inputs") or {}, namespace)
        )

    def _bound(self, dependent: Resource, binding: Resource, namespace: str | None) -> bool:
        """Whether a RoleBinding grants to the service account the dependent's pods run as."""
        accounts = {(n, ns) for kind, n, ns in references(dependent.get("inputs") or {}, namespace) if kind == "ServiceAccount"}
        subjects = (binding.get("inputs") or {}).get("subjects") or []
        return any(
            isinstance(s, dict) and s.get("kind") == "ServiceAccount" and (s.get("name"), s.get("namespace") or namespace) in accounts
            for s in subjects
        )

    def _queued(self, dependent: Resource) -> bool:
        """Whether the object or its pod template carries a Kueue queue label."""
        name = str(dependent["name"])
        if name not in self._labelled:
            self._labelled[name] = any(
                key == "labels" and isinstance(value, dict) and KUEUE_QUEUE_LABEL in value
                for key, value in _walk(dependent.get("inputs") or {})
            )
        return self._labelled[name]

    def _names(self, dependent: Resource, target: tuple[str, str, str | None, str | None]) -> bool:
        """Whether the dependent names the target object, or connects to it as a Service by DNS name."""
        name = str(dependent["name"])
        namespace = kubernetes_identity(dependent)[2]
        if name not in self._named:
            self._named[name] = references(dependent.get("inputs") or {}, namespace)
        named = self._named[name]
        if (target[1], target[3], target[2] or namespace) in named:  # a cluster-scoped target is named without one
            return True
        if target[1] != "Service":
            return False
        if name not in self._hosts:
            mounted = [self._config_maps.get((n, ns)) for kind, n, ns in named if kind == "ConfigMap"]
            texts = [*_strings(dependent.get("inputs")), *(t for cm in mounted if cm for t in _strings(cm["inputs"]))]
            self._hosts[name] = {(m.group(1), m.group(2)) for text in texts for m in _SERVICE_HOST.finditer(text)}
        return (target[3], target[2]) in self._hosts[name]


def _aws(dependent: Resource, dependency: Resource) -> str | None:
    """The AWS and provider clauses of DependencyRule."""
    kind, needed = str(dependent["type"]), str(dependency["type"])
    inputs = dependency.get("inputs") or {}
    if kind == "aws:eks/nodeGroup:NodeGroup":
        if needed == "aws:eks/addon:Addon":
            if inputs.get("addonName") not in NODE_ADDONS:
                return None
            return "node add-on: nodes are NotReady without the CNI and kube-proxy, Pod Identity needs its agent"
        if needed in (
            "aws:eks/cluster:Cluster", "aws:iam/role:Role", "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            "aws:ec2/launchTemplate:LaunchTemplate", "aws:ec2/subnet:Subnet",
        ):
            return "a node group joins its cluster with its role, policies, launch template and subnets"
    if kind == "aws:eks/cluster:Cluster" and needed in (
        "aws:iam/role:Role", "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "aws:ec2/subnet:Subnet"
    ):
        return "EKS assumes the cluster role, with its policy, when it creates the cluster"
    if kind == "aws:eks/addon:Addon" and needed == "aws:eks/nodeGroup:NodeGroup" and not _taints(dependency):
        return "the add-on runs pods: it turns active once nodes run them"
    if kind == "aws:eks/podIdentityAssociation:PodIdentityAssociation" and (
        needed == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
    ):
        return TEARDOWN_POLICIES
    if kind == "aws:ec2/natGateway:NatGateway" and needed == "aws:ec2/internetGateway:InternetGateway":
        return "a public NAT gateway needs the VPC's internet gateway"
    if kind == "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration" and (
        needed == "aws:s3/bucketVersioning:BucketVersioning"
    ):
        return "its noncurrent-version rules need versioning on"
    if kind == "pulumi:providers:kubernetes" and (
        needed in ("aws:eks/cluster:Cluster", "aws:eks/addon:Addon")
        or (needed == "aws:eks/nodeGroup:NodeGroup" and not _taints(dependency))
    ):
        return (
            "the Kubernetes provider is the gate for objects whose pods run on the system nodes: the cluster, its "
            "untainted nodes and the add-ons pods need (CNI, kube-proxy, CoreDNS, Pod Identity agent)"
        )
    return None
