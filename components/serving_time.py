"""Time to serving: from an empty account to each model's first ready replica, along the resource graph.

The engine creates a resource once everything it waits for is done, and creates independent resources
in parallel, so the time to a model's first ready replica is the longest chain of waits ending at its
workload. A resource waits for its parent (a child is registered with its parent's URN, which a custom
resource only has once created), for every resource in its depends_on (or, when one is a component,
for all that component's descendants), and for its provider when one is recorded. The lower bound is
the same graph keeping only the edges a callback calls required: the difference is time lost to
needless ordering.

Typical creation times are data (CREATION_TIMES), each with its source; figures nobody has published
are marked as estimates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Literal, Mapping, Sequence

Resource = Mapping[str, object]   # a resources.json entry: {type, name, custom, parent, depends_on, inputs}
EdgeKind = Literal["parent", "depends_on", "provider"]
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
    if resource.get("custom") is False or kind.startswith("pulumi:providers:"):
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


def replica_ready_seconds(weights_bytes: int, weights_from: Literal["s3", "nvme"]) -> float:
    """A model's first replica: a GPU node, the image, the weights (from S3 or the NVMe cache), the engine."""
    rate = CREATION_TIMES[f"weights_{weights_from}_gb_per_s"].seconds * 1e9
    parts = ("gpu_node", "image_pull", "engine_start")
    return sum(CREATION_TIMES[p].seconds for p in parts) + weights_bytes / rate


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
) -> ServingTimes:
    """Per model (targets: model -> the resource that is its first ready replica), the longest chain with
    every edge of the program and with only the required ones; plus the edges that are not required."""
    by_name: dict[str, Resource] = {}
    for r in resources:
        name = str(r["name"])
        if name in by_name:
            raise ValueError(f"two resources are named {name!r}: names must be unique for the graph to be unambiguous")
        by_name[name] = r
    every = edges(resources)
    for e in every:
        if e.dependency not in by_name:
            raise ValueError(f"{e.dependent!r} waits for {e.dependency!r} ({e.kind}), which is not a resource")
    needless = [e for e in every if not required(by_name[e.dependent], by_name[e.dependency], e.kind)]
    program = _Graph(by_name, every, seconds)
    dropped = set(needless)
    bound = _Graph(by_name, [e for e in every if e not in dropped], seconds)
    models = []
    for model, target in targets.items():
        if target not in by_name:
            raise ValueError(f"model {model!r}: its first replica {target!r} is not a resource")
        models.append(ModelServingTime(model, target, program.chain(target), bound.chain(target)))
    return ServingTimes(tuple(models), tuple(needless))
