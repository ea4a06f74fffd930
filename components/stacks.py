"""Find and load a stack definition: `stacks/<env>.py` defining `stack = StackSpec(...)`,
or a `stacks/<env>.yaml` / `.json` document with the same fields.

Errors come back as one SpecError naming the file, line and field path, never a traceback.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from inferstack.spec import SpecError, StackSpec, describe_validation_error
from inferstack.validation import ValidatedStack, validate

STACK_SUFFIXES = (".py", ".yaml", ".yml", ".json")
KUBERNETES_WRAPPER_KEYS = ("apiVersion", "kind", "metadata", "spec")


class StackNotFound(Exception):
    pass


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` holding Pulumi.yaml (the project root)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "Pulumi.yaml").is_file():
            return folder
    raise StackNotFound(f"no Pulumi.yaml in {here} or above; run inferstack inside the project or pass --stacks-dir")


def available_stacks(stacks_dir: Path) -> list[str]:
    return sorted(
        p.stem for p in stacks_dir.iterdir() if p.suffix in STACK_SUFFIXES and not p.name.startswith("_")
    )


def stack_file(stacks_dir: Path, name: str) -> Path:
    candidate = Path(name)
    if candidate.suffix in STACK_SUFFIXES and candidate.is_file():
        return candidate
    if not stacks_dir.is_dir():
        raise StackNotFound(
            f"the stacks folder {stacks_dir} does not exist or is not a folder. To fix: pass --stacks-dir the folder "
            f"holding {name}.py (or .yaml/.json), or give the stack file's path"
        )
    for suffix in STACK_SUFFIXES:
        path = stacks_dir / f"{name}{suffix}"
        if path.is_file():
            return path
    known = ", ".join(available_stacks(stacks_dir)) or "none"
    raise StackNotFound(f"no stack {name!r} in {stacks_dir} (stacks: {known}); create stacks/{name}.py")


def load_stack(stacks_dir: Path, name: str) -> StackSpec:
    """Load a stack and validate it; the spec as written. Raise SpecError (with file and line) or StackNotFound."""
    return load_validated(stacks_dir, name).written


def load_validated(stacks_dir: Path, name: str) -> ValidatedStack:
    """Load and validate a stack: the stack as it deploys, `auto` placements decided. Raise SpecError (with file
    and line, one line a refusal) or StackNotFound."""
    path = stack_file(stacks_dir, name)
    spec = _load_python(path) if path.suffix == ".py" else _load_document(path)
    try:
        return validate(spec)
    except SpecError as error:
        if path.suffix != ".py":
            raise error.relocated(lambda at: f"{path.name}: {at}") from None
        line = _stack_line(path)
        raise error.relocated(lambda at: f"{path.name}:{f'line {line}:' if line else ''} {at}") from None


@contextmanager
def errors_named_by(path: Path) -> Iterator[None]:
    """A SpecError raised once the stack is validated (the program's own checks) still names the file the user
    has to edit."""
    try:
        yield
    except SpecError as error:
        if error.path.startswith(path.name):
            raise
        raise error.relocated(lambda at: f"{path.name}: {at}") from None


def _stack_line(path: Path) -> int | None:
    """The line of the stack file that assigns `stack`, where a refusal of the whole stack points."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (SyntaxError, ValueError):
        return None
    lines = [
        node.lineno for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(isinstance(t, ast.Name) and t.id == "stack" for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
    ]
    return lines[-1] if lines else None


def _load_python(path: Path) -> StackSpec:
    module_name = f"inferstack_stack_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except ValidationError as error:
        located = describe_validation_error(error, _model_class(error))
        raise SpecError(f"{path.name}:{_line_in(path, error)} {error.title}.{located.path}", located.problem, located.fix) from None
    except SpecError as error:  # a rule a constructor ran: the line is that call
        line = _line_in(path, error) or ""
        raise error.relocated(lambda at: f"{path.name}:{line} {at}") from None
    except SyntaxError as error:  # also a null byte or bad encoding in the source
        if error.filename and Path(error.filename).resolve() != path.resolve():  # a module the stack imports
            raise SpecError(
                f"{path.name}:{_line_in(path, error) or 'its code'}".rstrip(":"),
                f"imports {error.filename}, which is not valid Python at line {error.lineno}: {error.msg}",
                "fix that module's syntax (python -m py_compile shows it)",
            ) from None
        where = f"line {error.lineno}" if error.lineno else "its source"
        raise SpecError(
            f"{path.name}:{where}", f"is not valid Python: {error.msg}", "fix the syntax (python -m py_compile shows it)"
        ) from None
    except Exception as error:  # the stack file's own code failed: an import, a name, a raise
        raise SpecError(
            f"{path.name}:{_line_in(path, error) or 'its code'}".rstrip(":"),
            f"raised {type(error).__name__}: {error}",
            "fix the stack file so that running it assigns `stack = StackSpec(...)`",
        ) from None
    finally:
        sys.modules.pop(module_name, None)
    stack = getattr(module, "stack", None)
    if not isinstance(stack, StackSpec):
        raise SpecError(path.name, "defines no `stack = StackSpec(...)`", "assign the stack's StackSpec to a variable named `stack`")
    return stack


def _load_document(path: Path) -> StackSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(path.name, f"is not UTF-8 text ({error.reason} at byte {error.start})", "save it as UTF-8") from None
    data = _parse_json(path, text) if path.suffix == ".json" else _parse_yaml(path, text)
    _refuse_kubernetes_wrapper(path, data)
    try:
        _read_architecture_from(path, data)
        return StackSpec.model_validate(data)
    except ValidationError as error:
        located = describe_validation_error(error, StackSpec)
        raise SpecError(f"{path.name}: {located.path}", located.problem, located.fix) from None
    except SpecError as error:
        raise error.relocated(lambda at: f"{path.name}: {at}") from None


def _read_architecture_from(path: Path, data: Any) -> None:
    """A model service's `architecture_from: <config.json or snapshot folder>` (relative to the stack file's
    folder) becomes the `architecture` it describes, and its `checkpoint_format` unless the service states one."""
    from inferstack.spec.hf_config import service_fields_from_config

    services = data.get("models") if isinstance(data, dict) else None
    for index, service in enumerate(services if isinstance(services, list) else []):
        if not isinstance(service, dict) or "architecture_from" not in service:
            continue
        at = f"models[{index}].architecture_from"
        if "architecture" in service:
            raise SpecError(at, "is given beside `architecture`", "keep one of them")
        config = path.parent / str(service.pop("architecture_from"))
        try:
            read = service_fields_from_config(config)
        except SpecError as error:
            raise SpecError(at, f"{error.path}: {error.problem}", error.fix) from None
        service.update({field: value for field, value in read.items() if field not in service})


def _parse_yaml(path: Path, text: str) -> Any:
    """The document's data; a syntax error is file:line:column, and a key given twice in one mapping is refused
    (PyYAML would keep the last one silently)."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(path, node, "")
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path.name}:{mark.line + 1}:{mark.column + 1}" if mark else path.name
        context = f" ({error.context} at line {error.context_mark.line + 1})" if error.context and error.context_mark else ""
        raise SpecError(where, f"is not valid YAML: {error.problem}{context}", "fix the syntax at that position") from None
    except yaml.YAMLError as error:
        raise SpecError(path.name, f"is not valid YAML: {error}", "fix the syntax") from None
    finally:
        loader.dispose()


def _parse_json(path: Path, text: str) -> Any:
    """The document's data; a syntax error is file:line:column, and a key given twice in one object is refused
    (json.loads would keep the last one silently)."""
    duplicated: list[str] = []

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        duplicated.extend(key for i, key in enumerate(keys) if key in keys[:i])
        return dict(pairs)

    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as error:
        raise SpecError(
            f"{path.name}:{error.lineno}:{error.colno}", f"is not valid JSON: {error.msg}", "fix the syntax at that position"
        ) from None
    if duplicated:
        _locate_json_duplicate(path, text, duplicated[0])
    return data


def _locate_json_duplicate(path: Path, text: str, key: str) -> None:
    """JSON is YAML's flow style: YAML's nodes carry the line of the repeated key."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:  # a JSON text PyYAML does not read: name the key without its line
        node = None
    if node is not None:
        _refuse_duplicate_keys(path, node, "")
    raise SpecError(path.name, f"gives the key {key!r} twice in one object", "keep one of them")


def _refuse_duplicate_keys(path: Path, node: Any, at: str) -> None:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _refuse_duplicate_keys(path, item, f"{at}[{index}]")
    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[str, int] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key, line = key_node.value, key_node.start_mark.line + 1
        field = f"{at}.{key}" if at else key
        if key in first_line:
            raise SpecError(
                f"{path.name}:{line}:{key_node.start_mark.column + 1}: {field}",
                f"is given twice in one mapping (first on line {first_line[key]}); only one value can count",
                "keep one of them",
            )
        first_line[key] = line
        _refuse_duplicate_keys(path, value_node, field)


def _refuse_kubernetes_wrapper(path: Path, data: Any) -> None:
    """`apiVersion: ..., kind: ..., spec: {...}` is how a Kubernetes object looks, not a stack file."""
    if not isinstance(data, dict) or not {"apiVersion", "kind"} & set(data) or set(data) & set(StackSpec.model_fields):
        return
    given = ", ".join(key for key in KUBERNETES_WRAPPER_KEYS if key in data)
    raise SpecError(
        path.name,
        f"is written as a Kubernetes object ({given}), but a stack file is not a Kubernetes resource: it holds the "
        "StackSpec's fields at the top level (environment, region, node_pools, models, ...)",
        "move the fields under spec: to the top of the file and drop apiVersion, kind and metadata "
        "(`inferstack schema` lists the fields)",
    )


def _model_class(error: ValidationError):
    from inferstack import spec as spec_module

    return getattr(spec_module, error.title, None)


def _line_in(path: Path, error: BaseException) -> str:
    """The line of the stack file where the failing constructor was called."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if Path(frame.filename).resolve() == path.resolve():
            return f"line {frame.lineno}:"
    return ""
