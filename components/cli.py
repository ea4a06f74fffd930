"""`inferstack plan | render | check | diff | simulate | schema | models`: review a stack offline before `pulumi up -s <env>`."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2
EXIT_POLICY_VIOLATION = 1
EXIT_BLOCKING_REPLACEMENT = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferstack", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def with_stack(name: str, help_text: str) -> argparse.ArgumentParser:
        return _stack_command(commands, name, help_text)

    plan = with_stack("plan", "run the program on the embedded engine and summarise it")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument(
        "--html", type=Path, metavar="FILE",
        help="also write the plan as one self-contained HTML page: pools and GPUs with the models in place, "
        "cost per pool, the chain of waits to serving",
    )
    render = with_stack("render", "write resources.json, kubernetes/, helm/ and plan.json")
    render.add_argument("--out", type=Path, required=True, help="output folder")
    commands.add_parser("schema", help="print the StackSpec JSON Schema")
    _add_check_command(commands)
    _add_diff_command(commands)
    _add_models_command(commands)
    _add_simulate_command(commands)
    return parser


def _stack_command(commands, name: str, help_text: str) -> argparse.ArgumentParser:
    """A command on one stack: its name or file, and the folder it is looked up in."""
    command = commands.add_parser(name, help=help_text)
    command.add_argument("stack", help="stack name (stacks/<name>.py) or a stack file path")
    command.add_argument("--stacks-dir", type=Path, help="folder of stack files (default: <project>/stacks)")
    return command


def _add_simulate_command(commands) -> None:
    simulate = _stack_command(
        commands, "simulate",
        "replay a traffic trace through what the stack deploys (KEDA and the HPA as rendered, pod starts, node "
        "provisioning, the throughput model): SLO attainment, latency, GPU hours and cost per service; compare with "
        "--set or --against and recommend the cheapest min_replicas meeting --attainment",
    )
    simulate.add_argument(
        "--trace", type=Path, required=True, metavar="FILE",
        help="CSV time_s,service,requests_per_second[,mean_input_tokens,mean_output_tokens]; each row holds until "
        "the service's next one",
    )
    simulate.add_argument("--json", action="store_true", help="print JSON")
    simulate.add_argument(
        "--set", action="append", default=[], metavar="PATH=VALUE", dest="overrides",
        help="compare with the stack changed, e.g. models[0].autoscaling.min_replicas=3 (repeatable)",
    )
    simulate.add_argument("--against", metavar="STACK", help="compare with a second stack on the same trace")
    simulate.add_argument(
        "--attainment", type=float, default=0.99,
        help="SLO attainment the recommended min_replicas must meet on the trace (default: 0.99)",
    )


def _simulate(args: argparse.Namespace) -> int:
    """Replay the trace; 2 on a bad stack, trace, --set or --attainment."""
    from inferstack.presentation import simulation_report as report
    from inferstack.spec import SpecError
    from inferstack.stacks import StackNotFound, errors_named_by, load_validated, stack_file

    if not 0 < args.attainment <= 1:
        print(f"inferstack: --attainment {args.attainment:g}: is not a share of requests. To fix: give a number "
              "above 0 and at most 1, e.g. 0.99", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.overrides and args.against:
        print("inferstack simulate: give --set or --against (one of them)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        stacks_dir = _stacks_dir(args.stacks_dir, args.stack)
        validated = load_validated(stacks_dir, args.stack)
        trace = report.read_trace(args.trace, validated)
        compared = []
        if args.overrides:
            compared = [(f"{validated.environment} --set", report.with_overrides(validated, args.overrides))]
        elif args.against:
            other = load_validated(_stacks_dir(args.stacks_dir, args.against), args.against)
            compared = [(other.environment, other)]
        with errors_named_by(stack_file(stacks_dir, args.stack)):
            for _, stack in compared:
                report.check_trace(trace, args.trace.name, stack)
            reports = [report.report(name, args.trace, report.run(stack, trace))
                       for name, stack in [(validated.environment, validated), *compared]]
            recommendations = report.recommend(validated, trace, args.attainment)
    except (SpecError, StackNotFound) as error:
        _print_refusal(error)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps({"runs": reports, "recommendations": recommendations}, indent=2))
    else:
        print(report.as_text(reports, recommendations))
    return 0


def _add_models_command(commands) -> None:
    models = commands.add_parser(
        "models",
        help="list the model catalog (kind, parameters, attention, stored formats, context); with NAME, one model's "
        "facts and sources and which GPUs it fits at its full context and at 8192; with --config, the architecture "
        "a Hugging Face config.json describes",
    )
    models.add_argument("name", nargs="?", help="a model or checkpoint id of the catalog")
    models.add_argument(
        "--config", type=Path, metavar="PATH",
        help="a config.json or a downloaded snapshot directory: print the architecture (and checkpoint_format) it "
        "describes as YAML to paste into a model service",
    )
    models.add_argument("--json", action="store_true", help="print JSON")


def _models(args: argparse.Namespace) -> int:
    """The catalog, one model of it, or a config.json read offline; 2 on an unknown name or a bad config."""
    from inferstack.presentation import models
    from inferstack.spec import SpecError
    from inferstack.spec.hf_config import service_fields_from_config

    if args.config is not None and args.name is not None:
        print("inferstack models: give a NAME or --config PATH (one of them)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if args.config is not None:
            read = service_fields_from_config(args.config)
            text = json.dumps(read, indent=2) if args.json else models.reading_as_yaml(read, args.config)
            print(text.rstrip("\n"))
        elif args.name is not None:
            report = models.model_report(args.name)
            print(json.dumps(report, indent=2) if args.json else models.report_as_text(report))
        else:
            rows = models.catalog_rows()
            print(json.dumps({"models": rows}, indent=2) if args.json else models.catalog_as_text(rows))
    except (SpecError, models.UnknownModel) as error:
        _print_refusal(error)
        return EXIT_BAD_INPUT
    return 0


def _add_check_command(commands) -> None:
    check = commands.add_parser(
        "check",
        help="run the policy pack offline over a stack or a rendered resources.json (exit 1 on a mandatory violation)",
    )
    check.add_argument("stack", nargs="?", help="stack name (stacks/<name>.py) or a stack file path")
    check.add_argument("--stacks-dir", type=Path, help="folder of stack files (default: <project>/stacks)")
    check.add_argument(
        "--resources", type=Path, help="a resources.json written by `inferstack render`, checked instead of a stack"
    )
    check.add_argument(
        "--policy-config",
        type=Path,
        help="pack config as for `pulumi preview --policy-pack-config`, merged over the default: the stack's "
        "budget, or with --resources the budget in the plan.json beside the file",
    )
    check.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    check.add_argument(
        "--write-policy-config",
        type=Path,
        help="also write the pack config used (the stack's budget) for `pulumi preview --policy-pack-config`",
    )


def _add_diff_command(commands) -> None:
    diff = _stack_command(
        commands, "diff",
        "what a change does before `pulumi up`: added, updated, replaced (and why), deleted resources, rolling "
        "node groups, GPUs and $/h, downtime (exit 3 when a protected or GPU-serving resource is replaced, GPU nodes roll or drift under "
        "Karpenter, or GPU capacity is deleted while services serve)",
    )
    diff.add_argument(
        "--against", required=True,
        help="a folder written by `inferstack render`, or a git revision whose stacks/<stack>.py is rendered "
        "with today's program code",
    )
    diff.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")


def _diff(args: argparse.Namespace) -> int:
    """Compare the stack now with a render or a revision; 3 when a protected or GPU-serving resource is
    replaced, a GPU node group rolls, Karpenter replaces a pool's nodes (drift) or GPU capacity is deleted while
    services serve; 0 otherwise, 2 on bad input."""
    from inferstack.presentation import diff
    from inferstack.spec import SpecError
    from inferstack.stacks import StackNotFound, errors_named_by, load_validated, stack_file

    try:
        stacks_dir = _stacks_dir(args.stacks_dir, args.stack)
        validated = load_validated(stacks_dir, args.stack)
        with errors_named_by(stack_file(stacks_dir, args.stack)):
            after = diff.run_spec(validated)
        folder = Path(args.against)
        if folder.is_dir():
            before, note = diff.load_render(folder), None
        else:
            stack = Path(args.stack).stem
            before = diff.run_spec(diff.stack_at_revision(stacks_dir, stack, args.against))
            note = f"the {stack} stack file at {args.against} rendered with today's program code"
    except (SpecError, StackNotFound, diff.DiffInputError, OSError) as error:
        _print_refusal(error)
        return EXIT_BAD_INPUT
    result = diff.diff(before, after, args.against, note)
    print(json.dumps(result, indent=2) if args.format == "json" else diff.as_text(result))
    return EXIT_BLOCKING_REPLACEMENT if result["blocking_replacements"] else 0


def _print_refusal(error: Exception) -> None:
    """Bad input on stderr, one line a refusal: validation reports every independent one it found."""
    for line in str(error).splitlines() or [""]:
        print(f"inferstack: {line}", file=sys.stderr)


def _stacks_dir(given: Path | None, stack: str) -> Path:
    """--stacks-dir, else the folder of a stack given as a file path (no project needed), else <project>/stacks."""
    from inferstack.stacks import STACK_SUFFIXES, find_project_root

    if given is not None:
        return given
    if Path(stack).suffix in STACK_SUFFIXES and Path(stack).is_file():
        return Path(stack).parent
    return find_project_root() / "stacks"


def _run(args: argparse.Namespace) -> tuple[dict[str, Any], Any, float, Any]:
    """The plan, the recording, the engine's seconds (kept out of the plan, so a render is the same every time)
    and the validated stack (its workers and batch jobs are printed beside the plan, not part of plan.json)."""
    from inferstack.engine import run_stack
    from inferstack.presentation.summary import build_plan
    from inferstack.stacks import errors_named_by, load_validated, stack_file

    stacks_dir = _stacks_dir(args.stacks_dir, args.stack)
    validated = load_validated(stacks_dir, args.stack)
    started = time.perf_counter()
    with errors_named_by(stack_file(stacks_dir, args.stack)):
        recording = run_stack(validated)
        plan = build_plan(validated, recording)
    return plan, recording, round(time.perf_counter() - started, 3), validated


def _check_inputs(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    """(registrations, stack name, pack config) from a stack run on the embedded engine or a resources.json."""
    from inferstack.policies import runner as policy_runner

    if args.resources is not None:
        resources = policy_runner.load_resources(args.resources)
        plan_file = args.resources.parent / "plan.json"
        plan = policy_runner.load_plan(plan_file) if plan_file.is_file() else {}
        return resources, plan.get("stack") or "stack", policy_runner.plan_policy_config(plan)
    from inferstack.engine import run_stack
    from inferstack.stacks import errors_named_by, load_validated, stack_file

    stacks_dir = _stacks_dir(args.stacks_dir, args.stack)
    validated = load_validated(stacks_dir, args.stack)
    with errors_named_by(stack_file(stacks_dir, args.stack)):
        resources = [r.as_dict() for r in run_stack(validated).resources]
    return resources, validated.environment, policy_runner.spec_policy_config(validated.stack)


def _check(args: argparse.Namespace) -> int:
    """Run every policy of the pack; 1 when a mandatory one is violated, 0 otherwise, 2 on bad input."""
    from inferstack.policies import runner as policy_runner
    from inferstack.spec import SpecError
    from inferstack.stacks import StackNotFound

    if (args.stack is None) == (args.resources is None):
        print("inferstack check: give a stack name or --resources FILE (one of them)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        resources, stack, config = _check_inputs(args)
        if args.policy_config is not None:
            config.update(policy_runner.load_policy_config(args.policy_config))
        results = policy_runner.run_policies(resources, stack, config)
        if args.write_policy_config is not None:
            args.write_policy_config.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    except (SpecError, StackNotFound, policy_runner.CheckInputError, OSError) as error:
        _print_refusal(error)
        return EXIT_BAD_INPUT
    if args.format == "json":
        print(json.dumps(policy_runner.as_json(results), indent=2))
    else:
        from inferstack.presentation.terminal import print_policy_results

        print_policy_results([r.as_dict() for r in results])
    return EXIT_POLICY_VIOLATION if policy_runner.blocking(results) else 0


def main(argv: list[str] | None = None) -> int:
    status = 0
    try:
        status = _main(argv)
        sys.stdout.flush()  # inside the try: a reader that left fails this write, not the interpreter's last one
    except BrokenPipeError:
        # The reader stopped (e.g. `| head`): what was asked is done, and a status the command already found
        # (`plan` finds its own before printing: _print_plan) stands. Point stdout at /dev/null so the
        # interpreter's final flush does not fail too.
        _stdout_to_devnull()
    return status


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check":
        return _check(args)
    if args.command == "diff":
        return _diff(args)
    if args.command == "models":
        return _models(args)
    if args.command == "simulate":
        return _simulate(args)
    if args.command == "schema":
        from inferstack.spec import StackSpec

        print(json.dumps(StackSpec.model_json_schema(), indent=2))
        return 0

    # One plan is one short run whose objects live until it ends: rescanning that growing heap for
    # cycles is wasted time, so the cyclic collector waits until the command is done.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _plan_or_render(args)
    finally:
        if collecting:
            gc.enable()


def _plan_or_render(args: argparse.Namespace) -> int:
    from inferstack.spec import SpecError
    from inferstack.stacks import StackNotFound

    try:
        plan, recording, engine_seconds, validated = _run(args)
    except (SpecError, StackNotFound) as error:
        _print_refusal(error)
        return EXIT_BAD_INPUT
    violations = _mandatory_violations(plan)
    if args.command == "render":
        from inferstack.engine.render import write_render

        if violations:
            _report_blocking(plan, f"{violations} mandatory policy violation(s): nothing written to {args.out}")
            return EXIT_POLICY_VIOLATION
        try:
            counts = write_render(recording, plan, args.out)
        except OSError as error:
            print(f"inferstack: cannot write the render to {args.out}: {error}. To fix: give --out a folder "
                  "that can be created", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(
            f"wrote {args.out}: {counts['resources']} resources, {counts['kubernetes']} Kubernetes objects, "
            f"{counts['helm']} Helm releases, plan.json"
        )
        return 0
    if args.html is not None:
        from inferstack.presentation.html import write_html

        try:
            write_html(plan, args.html)
        except OSError as error:
            print(f"inferstack: cannot write {args.html}: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"wrote {args.html}", file=sys.stderr)
    _print_plan(args, plan, engine_seconds, validated.stack)
    if violations:
        print(f"inferstack: {violations} mandatory policy violation(s) (listed under Policies): `pulumi up` would "
              "stop, so the plan exits 1 as `inferstack check` does", file=sys.stderr)
        return EXIT_POLICY_VIOLATION
    return 0


def _print_plan(args: argparse.Namespace, plan: dict[str, Any], engine_seconds: float, spec: Any) -> None:
    """The plan on stdout, as JSON or as text. A reader that stops early (`inferstack plan | head`) ends the
    printing, not the command: its status stays the plan's (1 on a mandatory violation, else 0)."""
    from inferstack.presentation.terminal import print_plan, work_beside_models

    try:
        if args.json:
            print(json.dumps(plan, indent=2))
        else:
            print_plan(plan, engine_seconds=engine_seconds, work=work_beside_models(spec))
        sys.stdout.flush()   # here: a reader that left fails this write, not a later one
    except BrokenPipeError:
        _stdout_to_devnull()


def _stdout_to_devnull() -> None:
    """The reader stopped: point stdout at /dev/null, so no later write or the interpreter's last flush fails."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _mandatory_violations(plan: dict[str, Any]) -> int:
    """Violations of mandatory policies in the plan: any one stops `pulumi up` (policy_runner.blocking)."""
    return sum(len(p["violations"]) for p in plan["policies"] if p["enforcement"] == "mandatory")


def _report_blocking(plan: dict[str, Any], outcome: str) -> None:
    from rich.console import Console

    from inferstack.presentation.terminal import print_policy_results

    print_policy_results(plan["policies"], Console(stderr=True), passing=False)
    print(f"inferstack: {outcome}. To fix: follow each violation's fix, then render again", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
