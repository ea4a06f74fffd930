"""`inferstack plan | render | schema`: review a stack offline before `pulumi up -s <env>`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferstack", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def with_stack(name: str, help_text: str) -> argparse.ArgumentParser:
        command = commands.add_parser(name, help=help_text)
        command.add_argument("stack", help="stack name (stacks/<name>.py) or a stack file path")
        command.add_argument("--stacks-dir", type=Path, help="folder of stack files (default: <project>/stacks)")
        return command

    plan = with_stack("plan", "run the program on the embedded engine and summarise it")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    render = with_stack("render", "write resources.json, kubernetes/, helm/ and plan.json")
    render.add_argument("--out", type=Path, required=True, help="output folder")
    commands.add_parser("schema", help="print the StackSpec JSON Schema")
    return parser


def _stacks_dir(given: Path | None) -> Path:
    from inferstack.stacks import find_project_root

    return given if given is not None else find_project_root() / "stacks"


def _run(args: argparse.Namespace) -> tuple[Any, dict[str, Any], Any]:
    from inferstack.engine import run_stack
    from inferstack.engine.summary import build_plan
    from inferstack.stacks import load_stack

    spec = load_stack(_stacks_dir(args.stacks_dir), args.stack)
    started = time.perf_counter()
    recording = run_stack(spec)
    plan = build_plan(spec, recording)
    plan["engine_seconds"] = round(time.perf_counter() - started, 3)
    return spec, plan, recording


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "schema":
        from inferstack.spec import StackSpec

        print(json.dumps(StackSpec.model_json_schema(), indent=2))
        return 0

    from inferstack.spec import SpecError
    from inferstack.stacks import StackNotFound

    try:
        _spec, plan, recording = _run(args)
    except (SpecError, StackNotFound) as error:
        print(f"inferstack: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command == "render":
        from inferstack.engine.render import write_render

        counts = write_render(recording, plan, args.out)
        print(
            f"wrote {args.out}: {counts['resources']} resources, {counts['kubernetes']} Kubernetes objects, "
            f"{counts['helm']} Helm releases, plan.json"
        )
        return 0
    if args.json:
        print(json.dumps(plan, indent=2))
    else:
        from inferstack.engine.report import print_plan

        print_plan(plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
