"""Time to serving: from an empty account to each model's first ready replica, along the resource graph.

The engine creates a resource once everything it waits for is done, and creates independent resources
in parallel, so the time to a model's first ready replica is the longest chain of waits ending at its
workload. A resource waits for its parent (a child is registered with its parent's URN, which a custom
resource only has once created), for every resource in its depends_on (or, when one is a component,
for all that component's descendants), and for its provider when one is recorded. Some waits happen
outside the engine (a pod pends until a GPU node and its device plugin exist): the caller adds them
as runtime edges, kept in both graphs. The lower bound is the same graph keeping only the edges a
callback calls required (`DependencyRule` is this project's rule): the difference is time lost to
needless ordering.

Typical creation times are data (CREATION_TIMES), each with its source; figures nobody has published
are marked as estimates.
"""

from __future__ import annotations

from dataclasses import dataclass
import re
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence

# A resources.json entry ({type, name, custom, parent, depends_on, inputs}), optionally with the
# recording's `provider` and `input_dependencies` (the part of depends_on its inputs imply).
Resource = Mapping[str, Any]
EdgeKind = Literal["parent", "depends_on", "provider", "runtime"]
Required = Callable[[Resource, Resource, EdgeKind], bool]

PEER_SYSTEMS = "shared/reference/peer-systems.md section D"


@dataclass(frozen=True)
class CreationTime:
    """A typical duration, where it comes from, and whether anyone measured it."""

    key: str
    seconds: float
    source: str
    measured: bool


def _table(*entries: CreationTime) -> Mapping[str, CreationTime]:
    return {e.key: e for e in entries}


CREATION_TIMES: Mapping[str, CreationTime] = _table(
    CreationTime(
        "eks_cluster", 870,
        f"EKS control plane create, 13 m 13 s to ~16 m across 21 regions (easontechtalk.com blog, unofficial; "
        f"{PEER_SYSTEMS}): the midpoint, 14.5 min", True,
    ),
    CreationTime(
        "node_group", 180,
        "Managed node group create: EC2 launch to node registration ~70-80 s (amazon-eks-ami #1099) plus the "
        "node group's own workflow, which AWS does not publish: estimate", False,
    ),
    CreationTime(
        "gpu_node", 240,
        "A GPU node for the first replica: autoscaler scale-up, EC2 launch and registration (~70-80 s, "
        "amazon-eks-ami #1099; 'GPU types boot longer', karpenter-provider-aws #6165) and the GPU device "
        "plugin's start: estimate", False,
    ),
    CreationTime(
        "image_pull", 334,
        f"Pulling a 9.5 GB PyTorch image, uncached: 334 s (eks-blueprints patterns/ml-container-cache; "
        f"{PEER_SYSTEMS}); the vLLM image is of that size", True,
    ),
    CreationTime(
        "engine_start", 75,
        f"vLLM start with weights on local disk: 85.3 s mean warm start for Qwen3-32B on H100 (llm-d PR #2492; "
        f"{PEER_SYSTEMS}) less ~10 s to read its 65 GB at NVMe speed", True,
    ),
    CreationTime(
        "weights_s3_gb_per_s", 0.58,
        f"Weights streamed from S3: 3.3 GiB in 6.1 s with the Run:ai streamer (run-ai/runai-model-streamer #67; "
        f"{PEER_SYSTEMS}), in GB/s", True,
    ),
    CreationTime(
        "weights_nvme_gb_per_s", 7.0,
        f"Weights read from the NVMe cache: ~7 GB/s, '180 GB in about 25 s' (vllm #15862; {PEER_SYSTEMS}), in GB/s",
        False,
    ),
    CreationTime(
        "gpu_operator", 180,
        f"Helm install of the NVIDIA GPU operator (several DaemonSets and a validator): no published figure "
        f"({PEER_SYSTEMS}: 'Helm install time ... not found'): estimate", False,
    ),
    CreationTime(
        "helm_release", 90,
        f"Helm install of an operator chart waiting for its pods: no published figure ({PEER_SYSTEMS}): estimate",
        False,
    ),
    CreationTime("eks_addon", 60, "EKS managed add-on create: no published figure: estimate", False),
    CreationTime("nat_gateway", 120, "NAT gateway create (pending to available): no published figure: estimate", False),
    CreationTime("aws_resource", 5, "Other AWS API resources (IAM, VPC pieces, S3, security groups): estimate", False),
    CreationTime("kubernetes_object", 2, "Applying one Kubernetes object: estimate", False),
    CreationTime("none", 0, "Components and providers create nothing", True),
)

# Type tokens with their own entry; other aws:/kubernetes: types fall back to the generic ones.
TYPE_KEYS: Mapping[str, str] = {
    "aws:eks/cluster:Cluster": "eks_cluster",
    "aws:eks/nodeGroup:NodeGroup": "node_group",
    "aws:eks/addon:Addon": "eks_addon",
    "aws:ec2/natGateway:NatGateway": "nat_gateway",
    "kubernetes:helm.sh/v3:Release": "helm_release",
    "kubernetes:helm.sh/v4:Chart": "helm_release",
}


def creation_key(resource: Resource) -> str:
    """The CREATION_TIMES entry a resource takes (its model's first replica aside: see replica_ready_seconds)."""
    kind = str(resource["type"])
    # A Kubernetes component (yaml/v2 ConfigFile, helm/v4 Chart) is a remote component: the recording
    # holds it without the objects it creates, so its own entry stands for them.
    if kind.startswith("pulumi:providers:") or (resource.get("custom") is False and not kind.startswith("kubernetes:")):
        return "none"
    key = TYPE_KEYS.get(kind)
    if key == "helm_release" and "gpu-operator" in str((resource.get("inputs") or {}).get("chart", "")):
        return "gpu_operator"
    if key:
        return key
    if kind.startswith("aws:"):
        return "aws_resource"
    return "kubernetes_object"


def typical_seconds(resource: Resource) -> float:
    return CREATION_TIMES[creation_key(resource)].seconds


def replica_parts(
    weights_bytes: int, weights_from: Literal["s3", "nvme"], *, new_node: bool = True
) -> tuple[tuple[str, float], ...]:
    """What a replica's start takes, as (CREATION_TIMES key, seconds) in order: a GPU node when one must be
    added, the image, the weights (copied from S3 onto a cold node, or read from its NVMe cache), the engine."""
    rate = CREATION_TIMES[f"weights_{weights_from}_gb_per_s"].seconds * 1e9
    parts = [("gpu_node", CREATION_TIMES["gpu_node"].seconds)] if new_node else []
    parts.append(("image_pull", CREATION_TIMES["image_pull"].seconds))
    parts.append((f"weights_{weights_from}_gb_per_s", weights_bytes / rate))
    parts.append(("engine_start", CREATION_TIMES["engine_start"].seconds))
    return tuple(parts)


def replica_ready_seconds(weights_bytes: int, weights_from: Literal["s3", "nvme"], *, new_node: bool = True) -> float:
    """A model's replica: a GPU node, the image, the weights (from S3 or the NVMe cache), the engine."""
    return sum(seconds for _, seconds in replica_parts(weights_bytes, weights_from, new_node=new_node))


# ---------------------------------------------------------------------------------------------- graph


@dataclass(frozen=True)
class Edge:
    """`dependent` waits for `dependency`."""

    dependent: str
    dependency: str
    kind: EdgeKind


@dataclass(frozen=True)
class Step:
    name: str
    type: str
    seconds: float
    finish: float


@dataclass(frozen=True)
class Chain:
    """The longest chain of waits ending at a resource: its length and the resources on it, in order."""

    seconds: float
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class ModelServingTime:
    model: str
    target: str          # the resource whose creation is the first ready replica
    program: Chain       # with every edge of the program
    lower_bound: Chain   # with the required edges only


@dataclass(frozen=True)
class ServingTimes:
    models: tuple[ModelServingTime, ...]
    needless: tuple[Edge, ...]   # edges of the program the callback does not call required


def edges(resources: Sequence[Resource]) -> list[Edge]:
    """Every wait the engine imposes: parent, depends_on and (when recorded) provider."""
    found = []
    for r in resources:
        name = str(r["name"])
        if r.get("parent"):
            found.append(Edge(name, str(r["parent"]), "parent"))
        found += [Edge(name, str(d), "depends_on") for d in r.get("depends_on") or ()]
        if r.get("provider"):
            found.append(Edge(name, str(r["provider"]), "provider"))
    return found


class _Graph:
    """Finish time of every resource, and the wait that set it, for one set of edges.

    F(r) = seconds(r) + the latest of its waits, where waiting on a parent means its F and waiting on a
    dependency means its D; D(r) = F(r) for a custom resource, and for a component the latest D of
    itself and its children (depending on a component waits for everything under it).
    """

    def __init__(self, resources: Mapping[str, Resource], kept: Iterable[Edge], seconds: Callable[[Resource], float]):
        self.resources = resources
        self.seconds = {name: float(seconds(r)) for name, r in resources.items()}
        self.waits: dict[str, list[tuple[str, str]]] = {name: [] for name in resources}
        self.children: dict[str, list[str]] = {name: [] for name in resources}
        for r in resources.values():
            if r.get("parent"):
                self.children[str(r["parent"])].append(str(r["name"]))
        for e in kept:
            self.waits[e.dependent].append(("F" if e.kind == "parent" else "D", e.dependency))
        self.value: dict[tuple[str, str], float] = {}
        self.cause: dict[tuple[str, str], tuple[str, str] | None] = {}

    def _inputs(self, node: tuple[str, str]) -> list[tuple[str, str]]:
        kind, name = node
        if kind == "F":
            return self.waits[name]
        if self.resources[name].get("custom") is False:
            return [("F", name)] + [("D", c) for c in self.children[name]]
        return [("F", name)]

    def finish(self, name: str) -> float:
        """F(name), computed depth-first without recursion; a cycle of waits is an error."""
        root = ("F", name)
        stack, visiting = [root], set()
        while stack:
            node = stack[-1]
            if node in self.value:
                stack.pop()
                continue
            pending = [i for i in self._inputs(node) if i not in self.value]
            if pending:
                if node in visiting:
                    raise ValueError(f"the resource graph has a cycle through {node[1]!r}")
                visiting.add(node)
                stack += pending
                continue
            stack.pop()
            visiting.discard(node)
            inputs = self._inputs(node)
            cause = max(inputs, key=lambda i: self.value[i], default=None)
            latest = self.value[cause] if cause is not None else 0.0
            self.value[node] = latest + (self.seconds[node[1]] if node[0] == "F" else 0.0)
            self.cause[node] = cause
        return self.value[root]

    def chain(self, name: str) -> Chain:
        total = self.finish(name)
        steps: list[Step] = []
        node: tuple[str, str] | None = ("F", name)
        while node is not None:
            kind, resource = node
            if kind == "F" and self.seconds[resource] > 0:
                steps.append(Step(resource, str(self.resources[resource]["type"]), self.seconds[resource],
                                  self.value[node]))
            node = self.cause[node]
        return Chain(total, tuple(reversed(steps)))


def time_to_serving(
    resources: Sequence[Resource],
    targets: Mapping[str, str],
    *,
    required: Required,
    seconds: Callable[[Resource], float] = typical_seconds,
    runtime: Sequence[Edge] = (),
) -> ServingTimes:
    """Per model (targets: model -> the resource that is its first ready replica), the longest chain with
    every edge of the program and with only the required ones; plus the edges that are not required.
    Runtime edges (waits outside the engine) are in both graphs and never judged."""
    by_name: dict[str, Resource] = {}
    for r in resources:
        name = str(r["name"])
        if name in by_name:
            raise ValueError(f"two resources are named {name!r}: names must be unique for the graph to be unambiguous")
        by_name[name] = r
    every = edges(resources)
    for e in [*every, *runtime]:
        if e.dependency not in by_name or e.dependent not in by_name:
            raise ValueError(f"{e.dependent!r} waits for {e.dependency!r} ({e.kind}), which is not a resource")
    needless = [e for e in every if not required(by_name[e.dependent], by_name[e.dependency], e.kind)]
    program = _Graph(by_name, [*every, *runtime], seconds)
    dropped = set(needless)
    bound = _Graph(by_name, [e for e in [*every, *runtime] if e not in dropped], seconds)
    models = []
    for model, target in targets.items():
        if target not in by_name:
            raise ValueError(f"model {model!r}: its first replica {target!r} is not a resource")
        models.append(ModelServingTime(model, target, program.chain(target), bound.chain(target)))
    return ServingTimes(tuple(models), tuple(needless))


# ----------------------------------------------------------------------------------------------- the rule

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The endpoint picker's flag naming the InferencePool it serves (llm-d/llm-d-router v0.10.0 cmd/epp/runner);
# its health is that pool having synced (cmd/epp/runner/health.go).
POOL_NAME_FLAG = "--pool-name"
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
}
# Releases that need other installers first: a gateway controller watches Istio's and the Gateway API's
# kinds from its start, and Istio config (body-based routing's EnvoyFilter) passes istiod's webhook.
RELEASE_NEEDS: Mapping[str, frozenset[str]] = {
    "istiod": frozenset({"base", "gateway-api", "gateway-api-inference-extension"}),
    "agentgateway": frozenset({"agentgateway-crds", "gateway-api", "gateway-api-inference-extension"}),
    "body-based-routing": frozenset({"istiod"}),
}
# GatewayClass -> the release whose controller creates it.
GATEWAY_CLASS_CONTROLLERS: Mapping[str, str] = {"istio": "istiod", "agentgateway": "agentgateway"}
# Charts whose pods are DaemonSets for the GPU nodes: the node groups are the nodes those pods need.
NODE_AGENT_CHARTS = frozenset({"gpu-operator", "aws-efa-k8s-device-plugin"})
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
    """Values given to a command-line flag in any container's args of the object."""
    found: set[str] = set()
    for key, value in _walk(inputs):
        if key == "args" and isinstance(value, list):
            found.update(str(b) for a, b in zip(value, value[1:]) if a == flag)
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
        if dependency["type"] == "aws:eks/podIdentityAssociation:PodIdentityAssociation" and self._identity(
            dependent, dependency.get("inputs") or {}
        ):
            return "its pods get AWS credentials from this association, injected only at pod creation"
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
