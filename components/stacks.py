"""Find and load a stack definition: `stacks/<env>.py` defining `stack = StackSpec(...)`,
or a `stacks/<env>.yaml` / `.json` document with the same fields.

Errors come back as one SpecError naming the file, line and field path, never a traceback.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback
from pathlib import Path

from pydantic import ValidationError

from inferstack.spec import SpecError, StackSpec, describe_validation_error

STACK_SUFFIXES = (".py", ".yaml", ".yml", ".json")


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
    for suffix in STACK_SUFFIXES:
        path = stacks_dir / f"{name}{suffix}"
        if path.is_file():
            return path
    known = ", ".join(available_stacks(stacks_dir)) or "none"
    raise StackNotFound(f"no stack {name!r} in {stacks_dir} (stacks: {known}); create stacks/{name}.py")


def load_stack(stacks_dir: Path, name: str) -> StackSpec:
    """Load and validate a stack, `auto` placements decided; raise SpecError (with file and line) or StackNotFound."""
    path = stack_file(stacks_dir, name)
    spec = _load_python(path) if path.suffix == ".py" else _load_document(path)
    return spec.resolved()


def _load_python(path: Path) -> StackSpec:
    module_name = f"inferstack_stack_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except ValidationError as error:
        located = describe_validation_error(error, _model_class(error))
        raise SpecError(f"{path.name}:{_line_in(path, error)} {error.title}.{located.path}", located.problem, located.fix) from None
    except SpecError as error:
        raise SpecError(f"{path.name}: {error.path}", error.problem, error.fix) from None
    except SyntaxError as error:  # also a null byte or bad encoding in the source
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
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise SpecError(path.name, f"is not valid {path.suffix[1:].upper()}: {error}", "fix the syntax") from None
    except UnicodeDecodeError as error:
        raise SpecError(path.name, f"is not UTF-8 text ({error.reason} at byte {error.start})", "save it as UTF-8") from None
    try:
        return StackSpec.model_validate(data)
    except ValidationError as error:
        located = describe_validation_error(error, StackSpec)
        raise SpecError(f"{path.name}: {located.path}", located.problem, located.fix) from None
    except SpecError as error:
        raise SpecError(f"{path.name}: {error.path}", error.problem, error.fix) from None


def _model_class(error: ValidationError):
    from inferstack import spec as spec_module

    return getattr(spec_module, error.title, None)


def _line_in(path: Path, error: BaseException) -> str:
    """The line of the stack file where the failing constructor was called."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if Path(frame.filename).resolve() == path.resolve():
            return f"line {frame.lineno}:"
    return ""
