"""Issue 12 at the CLI: the exit status means what it says, and nothing a user writes or types ends in a traceback.

Every case asserts the exit status, that no traceback is printed, where the message points (file, line, field),
and that nothing was rendered.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from stack_files import DEV, dev_with, one_line_refusal, reader_stops_after_one_line, refused_stack_file, run_cli

from inferstack.cli import EXIT_BAD_INPUT, EXIT_POLICY_VIOLATION, main
from inferstack.policies import runner as policy_runner
from inferstack.policies.budget import MAX_USD_PER_HOUR, budget_at_max_scale


@pytest.fixture
def stacks(tmp_path: Path) -> Path:
    folder = tmp_path / "stacks"
    folder.mkdir()
    return folder


# ------------------------------------------------------------------- 1. exit status means what it says


@pytest.mark.parametrize(
    "source",
    [
        dev_with('tier="standard"', 'tier="online"').replace(
            "min_replicas=0, max_replicas=2, scale_to_zero=True", "min_replicas=1, max_replicas=2, scale_to_zero=False"
        ),
        dev_with("max_replicas=2", "max_replicas=9"),
    ],
    ids=["online-service-on-spot-only", "max-replicas-beyond-the-pool"],
)
def test_plan_and_render_exit_as_check_does_and_render_writes_nothing(stacks: Path, tmp_path: Path, capsys, source):
    """Whether the policy pack or the spec refuses these stacks, `plan` and `render` agree with `check`."""
    (stacks / "bad.py").write_text(source)
    status = main(["check", "bad", "--stacks-dir", str(stacks)])
    checked = capsys.readouterr()
    assert status in (EXIT_POLICY_VIOLATION, EXIT_BAD_INPUT)
    assert main(["plan", "bad", "--stacks-dir", str(stacks)]) == status
    planned = capsys.readouterr()
    out = tmp_path / "out"
    assert main(["render", "bad", "--stacks-dir", str(stacks), "--out", str(out)]) == status
    rendered = capsys.readouterr()
    assert not out.exists(), "a stack `pulumi up` would stop on renders nothing"
    for output in (checked, planned, rendered):
        assert "Traceback" not in output.out + output.err
    if status == EXIT_POLICY_VIOLATION:
        failing = [line.split()[1] for line in checked.out.splitlines() if line.strip().startswith("FAIL")]
        assert failing and all(name in planned.out and name in rendered.err for name in failing)
        assert "nothing written to" in rendered.err and "mandatory policy violation" in planned.err
    else:
        assert one_line_refusal(planned.err) == one_line_refusal(rendered.err)


@pytest.fixture
def strict_budget(monkeypatch):
    """A pack config with a budget no stack meets, as `pulumi preview --policy-pack-config` could give: the real
    budget policy then fails on a stack the spec accepts."""
    config = {budget_at_max_scale.name: {MAX_USD_PER_HOUR: 0.001}}
    monkeypatch.setattr(policy_runner, "spec_policy_config", lambda spec: config)
    return config


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_mandatory_violation_is_exit_1_for_plan_render_and_check(strict_budget, tmp_path: Path, capsys, stack):
    assert main(["check", stack]) == EXIT_POLICY_VIOLATION
    assert "FAIL budget-at-max-scale" in capsys.readouterr().out
    assert main(["plan", stack, "--json"]) == EXIT_POLICY_VIOLATION
    planned = capsys.readouterr()
    plan = json.loads(planned.out)  # the plan is still printed in full, for the reviewer
    assert [p["name"] for p in plan["policies"] if p["violations"]] == ["budget-at-max-scale"]
    assert "mandatory policy violation" in planned.err and "Traceback" not in planned.err
    out = tmp_path / "out"
    assert main(["render", stack, "--out", str(out)]) == EXIT_POLICY_VIOLATION
    rendered = capsys.readouterr()
    assert "FAIL budget-at-max-scale" in rendered.err and f"nothing written to {out}" in rendered.err
    assert not out.exists() and rendered.out == ""


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_shipped_stacks_plan_with_exit_0(capsys, stack):
    assert main(["plan", stack, "--json"]) == 0
    assert not [p for p in json.loads(capsys.readouterr().out)["policies"] if p["violations"]]


# ------------------------------------------------------------------------------- 2. no traceback, ever


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from inferstack.spec import StackSpec\nstack = StackSpec(\n", "bad.py:line 2: is not valid Python"),
        ("import inferstack.no_such_module\n", "bad.py:line 1: raised ModuleNotFoundError"),
        ("stack = StackSpek()\n", "bad.py:line 1: raised NameError"),
        ('raise ValueError("no stack today")\n', "bad.py:line 1: raised ValueError: no stack today"),
    ],
    ids=["syntax", "import", "name", "raise"],
)
def test_a_stack_file_that_does_not_run_renders_nothing(stacks: Path, tmp_path: Path, source: str, expected: str):
    (stacks / "bad.py").write_text(source)
    out = tmp_path / "out"
    result = run_cli("render", "bad", "--stacks-dir", str(stacks), "--out", str(out))
    assert result.returncode == EXIT_BAD_INPUT
    assert expected in one_line_refusal(result.stderr)
    assert not out.exists()


def test_a_syntax_error_in_a_module_the_stack_imports_names_that_module(stacks: Path, tmp_path: Path):
    """The stack file is fine: the message must not send the user to a line of it that has no error."""
    (stacks / "helpers.py").write_text("POOLS = [\n")
    (stacks / "bad.py").write_text("import sys\nsys.path.insert(0, __file__.rsplit('/', 1)[0])\nimport helpers\n")
    out = tmp_path / "out"
    result = run_cli("render", "bad", "--stacks-dir", str(stacks), "--out", str(out))
    assert result.returncode == EXIT_BAD_INPUT
    message = one_line_refusal(result.stderr)
    assert f"bad.py:line 3: imports {stacks / 'helpers.py'}, which is not valid Python at line 1" in message
    assert not out.exists()


def test_a_cross_field_error_in_a_python_stack_names_file_and_line(stacks: Path, tmp_path: Path, capsys):
    (stacks / "bad.py").write_text(dev_with('pool="l4"', 'pool="l4s"'))
    line = next(n for n, text in enumerate(DEV.splitlines(), 1) if text.startswith("stack = StackSpec("))
    out = tmp_path / "out"
    assert main(["render", "bad", "--stacks-dir", str(stacks), "--out", str(out)]) == EXIT_BAD_INPUT
    message = one_line_refusal(capsys.readouterr().err)
    assert message.startswith(f"inferstack: bad.py:line {line}: models[0].pool: 'l4s' is not a node pool")
    assert not out.exists()


@pytest.mark.parametrize("command", ["plan", "render", "check"])
def test_an_error_the_program_raises_after_loading_names_the_stack_file(monkeypatch, tmp_path, capsys, command):
    """Checks that run with the program (not in the spec's validators) still point at the file to edit."""
    import inferstack.engine as engine
    from inferstack.spec import SpecError

    def refuse(spec):
        raise SpecError("node_pools[0].name", "is refused by the program", "rename it")

    monkeypatch.setattr(engine, "run_stack", refuse)
    out = tmp_path / "out"
    extra = ["--out", str(out)] if command == "render" else []
    assert main([command, "dev", *extra]) == EXIT_BAD_INPUT
    message = one_line_refusal(capsys.readouterr().err)
    assert message.startswith("inferstack: dev.py: node_pools[0].name: is refused by the program")
    assert not out.exists()


@pytest.mark.parametrize("inside", [False, True], ids=["out-is-a-file", "out-under-a-file"])
def test_render_out_naming_a_file_writes_nothing(tmp_path: Path, inside: bool):
    existing = tmp_path / "notes.txt"
    existing.write_text("keep me\n")
    out = existing / "render" if inside else existing
    result = run_cli("render", "dev", "--out", str(out))
    assert result.returncode == EXIT_BAD_INPUT
    assert f"cannot write the render to {out}" in one_line_refusal(result.stderr)
    assert existing.read_text() == "keep me\n" and result.stdout == ""


@pytest.mark.parametrize("kind", ["missing", "a-file"])
@pytest.mark.parametrize("command", ["plan", "render", "check", "diff"])
def test_a_stacks_dir_that_is_not_a_folder_is_one_line(tmp_path: Path, capsys, kind: str, command: str):
    folder = tmp_path / "no-such-folder"
    if kind == "a-file":
        folder.write_text("")
    extra = {"render": ["--out", str(tmp_path / "out")], "diff": ["--against", "HEAD"]}.get(command, [])
    assert main([command, "dev", "--stacks-dir", str(folder), *extra]) == EXIT_BAD_INPUT
    message = one_line_refusal(capsys.readouterr().err)
    assert f"the stacks folder {folder} does not exist or is not a folder" in message
    assert not (tmp_path / "out").exists()


def test_a_stack_file_path_needs_no_project_around_it(tmp_path: Path):
    """`inferstack plan path/to/x.yaml` outside the project reads that file instead of looking for Pulumi.yaml."""
    (tmp_path / "bad.yaml").write_text("environment: [x\n")
    result = run_cli("plan", str(tmp_path / "bad.yaml"), cwd=tmp_path)
    assert result.returncode == EXIT_BAD_INPUT
    assert "bad.yaml:2:1: is not valid YAML" in one_line_refusal(result.stderr)


@pytest.mark.parametrize("args", [["plan", "dev", "--json"], ["check", "dev", "--format", "json"]], ids=["plan", "check"])
def test_a_reader_that_stops_early_is_not_a_traceback(args):
    first, status, stderr = reader_stops_after_one_line(*args)
    assert first.strip() == b"{"
    assert status == 0 and b"Traceback" not in stderr and b"BrokenPipeError" not in stderr


# ----------------------------------------------------------------------------- 3. YAML and JSON stacks


POOL = "{name: gpu, instance_types: [g6.xlarge], max_nodes: 2}"


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("dup.yaml", f"environment: a\nenvironment: b\nnode_pools: [{POOL}]\n",
         "dup.yaml:2:1: environment: is given twice in one mapping (first on line 1)"),
        ("dup.yaml", "environment: a\nnode_pools:\n  - name: gpu\n    instance_types: [g6.xlarge]\n    max_nodes: 2\n"
         "    max_nodes: 3\n", "dup.yaml:6:5: node_pools[0].max_nodes: is given twice in one mapping (first on line 5)"),
        ("dup.json", '{"environment": "a",\n "node_pools": [{"name": "gpu", "instance_types": ["g6.xlarge"],\n'
         '   "max_nodes": 2, "name": "gpu2"}]}\n', "dup.json:3:20: node_pools[0].name: is given twice in one mapping "
         "(first on line 2)"),
    ],
    ids=["yaml-top-level", "yaml-nested", "json-nested"],
)
def test_a_key_given_twice_is_refused_with_its_line(stacks: Path, tmp_path: Path, name, text, expected):
    assert expected in refused_stack_file(stacks, tmp_path / "out", name, text)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("bad.yaml", f"environment: [a\nnode_pools: [{POOL}]\n", "bad.yaml:2:11: is not valid YAML: expected ',' or ']'"),
        ("bad.yaml", "environment: a\n\tregion: us-east-1\n", "bad.yaml:2:1: is not valid YAML: found character '\\t'"),
        ("bad.json", '{"environment": "a",\n "node_pools": [}\n', "bad.json:2:17: is not valid JSON: Expecting value"),
    ],
    ids=["yaml-unclosed-list", "yaml-tab", "json"],
)
def test_a_syntax_error_is_one_line_with_file_line_and_column(stacks: Path, tmp_path: Path, name, text, expected):
    assert expected in refused_stack_file(stacks, tmp_path / "out", name, text)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("k8s.yaml", textwrap.dedent(f"""\
            apiVersion: inferstack.io/v1
            kind: Stack
            metadata: {{name: dev}}
            spec:
              environment: dev
              node_pools: [{POOL}]
            """)),
        ("k8s.json", json.dumps({"apiVersion": "v1", "kind": "StackSpec", "spec": {"environment": "dev"}})),
    ],
    ids=["yaml", "json"],
)
def test_a_kubernetes_style_wrapper_says_what_the_file_should_look_like(stacks: Path, tmp_path: Path, name, text):
    message = refused_stack_file(stacks, tmp_path / "out", name, text)
    assert message.startswith(f"inferstack: {name}: is written as a Kubernetes object (apiVersion, kind")
    assert "StackSpec's fields at the top level" in message and "move the fields under spec: to the top" in message


def test_a_yaml_merge_key_is_not_a_duplicate(stacks: Path, capsys):
    """A YAML merge (`<<`) repeats another mapping's keys on purpose; the keys written beside it win."""
    (stacks / "ok.yaml").write_text(textwrap.dedent("""\
        environment: ok
        node_pools:
          - &pool {name: base, instance_types: [g6.xlarge], max_nodes: 2, min_nodes: 0}
          - <<: *pool
            name: more
        """))
    assert main(["plan", "ok", "--stacks-dir", str(stacks), "--json"]) == 0
    assert [p["name"] for p in json.loads(capsys.readouterr().out)["node_pools"]] == ["base", "more"]
