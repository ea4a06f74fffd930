"""Time to serving: from an empty account to each model's first ready replica, along the resource graph.

The engine creates a resource once everything it waits for is done, and creates independent resources
in parallel, so the time to a model's first ready replica is the longest chain of waits ending at its
workload. A resource waits for its parent (a child is registered with its parent's URN, which a custom
resource only has once created), for every resource in its depends_on (or, when one is a component,
for all that component's descendants), and for its provider when one is recorded. Some waits happen
outside the engine (a pod pends until a GPU node and its device plugin exist): the caller adds them
as runtime edges, kept in both graphs. The lower bound is the same graph keeping only the edges a
callback calls required (`dependency_rule.DependencyRule` is this project's rule): the difference is
time lost to needless ordering. The seconds each resource takes come from creation_times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from inferstack.planning.creation_times import typical_seconds

# A resources.json entry ({type, name, custom, parent, depends_on, inputs}), optionally with the
# recording's `provider` and `input_dependencies` (the part of depends_on its inputs imply).
Resource = Mapping[str, Any]
EdgeKind = Literal["parent", "depends_on", "provider", "runtime"]
Required = Callable[[Resource, Resource, EdgeKind], bool]


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

