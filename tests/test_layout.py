"""The package's rooms and what each may import (README "Layout"; each package's opening docstring).

- spec: the bottom floor, the types and the rules that need nothing but the spec and the catalog; it imports no
  layer, no planning, no validation (nor the catalog the spec, so the two do not form a cycle).
- validation: above the layers, it asks each of them for its refusals; no room below imports it.
- no two rooms import each other, directly or through others (function-level imports counted).
- planning: pure functions over the spec and the catalog; never Pulumi, the engine, the components or the
  presentation, so `plan`, `check` and the components read one set of figures.
- the components (aws, platform, serving, weights): never the presentation, the engine or the CLI.
- the engine runs the program offline and writes the render: never the presentation.
- the policy rules run inside Pulumi's analyzer: never the engine or the presentation (the offline runner,
  policies/runner.py, is the one module of the pack that drives the engine's recorder).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "components"
POLICIES = REPO / "policies"


def module_name(path: Path) -> str:
    if path.is_relative_to(POLICIES):
        parts = ("inferstack", "policies", *path.relative_to(POLICIES).with_suffix("").parts)
    else:
        parts = ("inferstack", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(p for p in parts if p != "__init__")


def imports(path: Path, package: str | None = None) -> set[str]:
    """Every module the file imports, at its top or inside a function, as absolute names; a relative import is
    resolved against `package` (by default the file's own)."""
    found = set()
    if package is None:
        package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def files(*rooms: Path) -> list[Path]:
    return sorted(p for room in rooms for p in room.rglob("*.py"))


def starts(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


LAYERS = ("inferstack.aws", "inferstack.platform", "inferstack.serving", "inferstack.weights")

FORBIDDEN = {
    "spec": (
        [PACKAGE / "spec"],
        ("pulumi", "pulumi_aws", "pulumi_kubernetes", "pulumi_policy", *LAYERS, "inferstack.planning",
         "inferstack.engine", "inferstack.presentation", "inferstack.policies", "inferstack.validation",
         "inferstack.program", "inferstack.stacks", "inferstack.cli", "inferstack.bench", "inferstack.helm"),
    ),
    "catalog": ([PACKAGE / "catalog"], ("inferstack.spec", "inferstack.planning", *LAYERS, "inferstack.validation")),
    "planning": (
        [PACKAGE / "planning"],
        ("pulumi", "pulumi_aws", "pulumi_kubernetes", "pulumi_policy", "inferstack.engine", "inferstack.presentation",
         "inferstack.aws", "inferstack.platform", "inferstack.serving", "inferstack.weights", "inferstack.policies",
         "inferstack.cli", "inferstack.program", "inferstack.bench", "inferstack.stacks", "inferstack.validation"),
    ),
    "components": (
        [PACKAGE / "aws", PACKAGE / "platform", PACKAGE / "serving", PACKAGE / "weights"],
        ("inferstack.presentation", "inferstack.engine", "inferstack.cli", "inferstack.bench", "inferstack.validation",
         "inferstack.stacks", "inferstack.program"),
    ),
    "engine": ([PACKAGE / "engine"], ("inferstack.presentation",)),
    "policy rules": (
        [p for p in POLICIES.glob("*.py") if p.name != "runner.py"],
        ("inferstack.engine", "inferstack.presentation", "inferstack.cli"),
    ),
}


def _room_files(paths: list[Path]) -> list[Path]:
    return sorted({f for p in paths for f in ([p] if p.is_file() else files(p))})


@pytest.mark.parametrize("room", FORBIDDEN)
def test_each_room_imports_only_what_it_may(room):
    paths, forbidden = FORBIDDEN[room]
    found = _room_files(paths)
    assert found, f"no modules in {room}"
    broken = {
        str(path.relative_to(REPO)): sorted(name for name in imports(path) if starts(name, forbidden))
        for path in found
    }
    assert {path: names for path, names in broken.items() if names} == {}


def test_the_scan_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """The rule would be hollow if a lazy or relative import slipped past it."""
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    import pulumi\n    from inferstack.engine.render import write_render\n"
                      "    from ..serving import pods\n")
    names = imports(sample, package="inferstack.planning")
    assert {"pulumi", "inferstack.engine.render", "inferstack.serving.pods"} <= names
    assert "inferstack.spec" in imports(PACKAGE / "planning" / "sizing.py")


def test_importing_all_of_planning_loads_no_pulumi_engine_or_component():
    """Transitively too: planning's imports (the spec, the catalog) must not pull Pulumi in."""
    probe = (
        "import importlib, pkgutil, sys, inferstack.planning as p\n"
        "for m in pkgutil.iter_modules(p.__path__): importlib.import_module('inferstack.planning.' + m.name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert [m for m in loaded if starts(m, FORBIDDEN["planning"][1])] == []
    assert "inferstack.planning.sizing" in loaded and "inferstack.spec" in loaded


def room_of(name: str) -> str | None:
    """The top-level room of an inferstack module name ('inferstack.spec.checks' -> 'spec')."""
    parts = name.split(".")
    return parts[1] if parts[0] == "inferstack" and len(parts) > 1 else None


def room_graph() -> dict[str, set[str]]:
    """Room -> the other rooms its modules import (at their top or inside a function)."""
    graph: dict[str, set[str]] = {}
    for path in files(PACKAGE, POLICIES):
        room = room_of(module_name(path)) or "inferstack"
        targets = {room_of(name) for name in imports(path)} - {None, room}
        # `from inferstack import conventions` names the package and the module: only the module is a room.
        graph.setdefault(room, set()).update(t for t in targets if t != "inferstack" or room == "inferstack")
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle between rooms, each as the rooms along it (depth-first, each cycle once)."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def walk(room: str, trail: list[str]) -> None:
        for target in sorted(graph.get(room, ())):
            if target in trail:
                cycle = trail[trail.index(target):]
                if frozenset(cycle) not in seen:
                    seen.add(frozenset(cycle))
                    found.append([*cycle, target])
            elif len(trail) < len(graph):
                walk(target, [*trail, target])

    for room in sorted(graph):
        walk(room, [room])
    return found


def test_no_two_rooms_import_each_other():
    """The rooms stack as floors: catalog and conventions, spec, planning, the layers, validation, the program,
    the engine, the presentation and the CLI; an import back down-to-up anywhere is a cycle."""
    graph = room_graph()
    assert cycles(graph) == []
    assert {"spec", "planning", "aws", "validation", "presentation"} <= set(graph)


def test_the_cycle_finder_sees_a_cycle_through_a_third_room():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_two_planning_modules_import_each_other():
    """Inside planning too the imports go one way (lora and sizing once imported each other)."""
    modules = {module_name(path): path for path in files(PACKAGE / "planning")}
    graph = {
        name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()
    }
    assert cycles(graph) == []
