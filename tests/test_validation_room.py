"""The validation room (issue 24): one `validate(spec)` above the layers, every independent refusal in one run,
each figure decided once and handed on. (The move itself was checked byte for byte against 9de22c0's renders
when it landed, in 5d51c1a.)
"""

from __future__ import annotations


import pytest
from stack_files import PROD, REPO, edited, run_cli

from inferstack.cli import EXIT_BAD_INPUT, main
from inferstack.spec import SpecError, StackSpec
from inferstack.spec.errors import SpecErrors
from inferstack.stacks import load_stack, load_validated
from inferstack.validation import MAX_REFUSALS, ValidatedStack, validate

STACKS = REPO / "stacks"


def test_validate_hands_on_the_stack_as_it_deploys():
    """The serving stack has a disaggregated service: its prefill engines follow it in the deployed stack, the
    written spec keeps the service alone, and each pool's hardware is read once."""
    validated = load_validated(STACKS, "serving")
    assert isinstance(validated, ValidatedStack)
    written = [m.name for m in validated.written.models]
    deployed = [m.name for m in validated.stack.models]
    prefill = [m.name for m in validated.stack.models if m.pd_role == "prefill"]
    assert prefill and set(deployed) == set(written) | set(prefill)
    assert set(validated.pools) == {p.name for p in validated.stack.node_pools}
    for model in validated.stack.models:
        assert validated.pools[model.pool].spec.name == model.pool


def test_an_auto_placed_service_is_named_once_decided():
    spec = load_stack(STACKS, "dev")
    auto = spec.model_copy(update={"models": [spec.models[0].model_copy(update={"pool": "auto"}), *spec.models[1:]]})
    validated = validate(auto)
    assert validated.auto_placed == (spec.models[0].name,)
    assert validated.stack.models[0].pool != "auto"
    assert validate(spec).auto_placed == ()


def test_a_plan_validates_the_stack_once(monkeypatch, capsys):
    """The plan, the program and the policy run read the stack validation handed on: nothing validates again."""
    import inferstack.validation.stack as room

    calls = []
    real = room.resolve_models
    monkeypatch.setattr(room, "resolve_models", lambda *args: calls.append(args) or real(*args))
    assert main(["plan", "prod", "--stacks-dir", str(STACKS)]) == 0
    assert len(calls) == 1


# ---------------------------------------------------------------------------------------- every refusal at once


def refusal_lines(stderr: str) -> list[str]:
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr
    assert all(line.startswith("inferstack: ") for line in lines), stderr
    return [line.removeprefix("inferstack: ") for line in lines]


def test_moving_prod_to_karpenter_shows_every_problem_in_one_run(tmp_path):
    """Karpenter keeps no idle nodes (three pools set min_nodes) and cannot see MIG slices advertised under the
    mixed strategy: four refusals, each on its line with its field path and fix, in one run."""
    text = edited(PROD, ("    region=\"us-east-1\",\n", "    region=\"us-east-1\",\n"
                         "    platform=PlatformSpec(node_autoscaler=\"karpenter\"),\n"),
                  ("    NodePoolSpec,\n", "    NodePoolSpec,\n    PlatformSpec,\n"))
    (tmp_path / "moved.py").write_text(text)
    result = run_cli("plan", str(tmp_path / "moved.py"))
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stdout == ""
    lines = refusal_lines(result.stderr)
    paths = [line.split(" ", 2)[2].split(":")[0] for line in lines]
    assert {"node_pools[0].min_nodes", "node_pools[1].min_nodes", "node_pools[2].min_nodes",
            "node_pools[1].gpu_sharing"} <= set(paths), lines
    assert len(paths) == len(set(paths))
    stack_line = next(n for n, text_line in enumerate(text.splitlines(), 1) if "StackSpec(" in text_line)
    assert all(line.startswith(f"moved.py:line {stack_line}: ") and ". To fix: " in line for line in lines)


def test_moving_prod_to_another_region_shows_every_problem_in_one_run(tmp_path):
    """In a region that offers none of the pools' types, each pool is refused on its own line."""
    text = edited(PROD, ("    region=\"us-east-1\",\n", "    region=\"ca-west-1\",\n"))
    (tmp_path / "moved.py").write_text(text)
    result = run_cli("plan", str(tmp_path / "moved.py"))
    assert result.returncode == EXIT_BAD_INPUT
    lines = refusal_lines(result.stderr)
    pools = {line.split(" ", 2)[2].split(".")[0] for line in lines if "is not offered in ca-west-1" in line}
    assert len(pools) >= 3, lines


def stack_with_workers(count: int, image: str) -> StackSpec:
    spec = load_stack(STACKS, "prod")
    worker = spec.workers[0]
    workers = [worker.model_copy(update={"name": f"w{i}", "image": image}) for i in range(count)]
    return spec.model_copy(update={"workers": workers})


def test_refusals_stop_at_the_limit_and_say_how_many_more():
    with pytest.raises(SpecErrors) as caught:
        validate(stack_with_workers(MAX_REFUSALS + 5, "python:latest"))
    error = caught.value
    assert len(error.refusals) == MAX_REFUSALS and error.hidden == 5
    assert [r.path for r in error.refusals] == [f"workers[{i}].image" for i in range(MAX_REFUSALS)]
    lines = str(error).splitlines()
    assert len(lines) == MAX_REFUSALS + 1
    assert lines[-1] == "5 more problems not shown. To fix: mend these and run again"


def test_one_refusal_is_reported_as_itself():
    """A stack with one problem reads exactly as it did when the first problem stopped validation."""
    with pytest.raises(SpecError) as caught:
        validate(stack_with_workers(1, "python:latest"))
    assert not isinstance(caught.value, SpecErrors)
    assert str(caught.value).startswith("workers[0].image: 'python:latest' uses the moving tag 'latest'")


def test_a_check_that_reads_a_refused_field_is_skipped():
    """A made-up region refuses the region alone: the pools' offerings and zones, the network layout and the
    budget read the region, and would only echo it."""
    spec = load_stack(STACKS, "prod").model_copy(update={"region": "us-east-9"})
    with pytest.raises(SpecError) as caught:
        validate(spec)
    assert [r.path for r in caught.value.refusals] == ["region"]


def test_a_service_on_a_refused_pool_waits_for_the_pool(tmp_path):
    """An unknown instance type refuses its pool; the services on that pool are not checked against hardware that
    does not exist, while the other pools' services still are."""
    spec = load_stack(STACKS, "prod")
    pools = list(spec.node_pools)
    pools[2] = pools[2].model_copy(update={"instance_types": ["g6e.mega"]})
    models = list(spec.models)
    models[0] = models[0].model_copy(update={"max_model_len": 10**6})  # on h100: its own refusal
    with pytest.raises(SpecErrors) as caught:
        validate(spec.model_copy(update={"node_pools": pools, "models": models}))
    assert [r.path for r in caught.value.refusals] == ["node_pools[2].instance_types[0]", "models[0].max_model_len"]
