"""The plan as people read it (`inferstack plan STACK`), at 80 and 120 columns and wide.

Every line fits the width; no value is cut to an ellipsis, hidden or split across lines (a table that does not
fit turns into one block of `key: value` fields per row); no column is dropped (the rollouts' downtime
included); the warnings are one section, each naming what it is about; the queue workers and batch jobs are
named; and a reader that stops early (`| head`) leaves the command's status alone.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console

from stack_files import REPO, reader_stops_after_one_line

from inferstack import cli
from inferstack.presentation.terminal import _capacity, _usd, duration, print_plan, work_beside_models

STACKS = sorted(path.stem for path in (REPO / "stacks").glob("*.py") if not path.name.startswith("_"))
WIDTHS = (80, 120, 200)


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[dict, dict]]:
    """(plan, workers and batch jobs) of every example stack, as `inferstack plan` computes them."""
    found = {}
    for name in STACKS:
        plan, _, _, validated = cli._run(argparse.Namespace(stack=name, stacks_dir=None))
        found[name] = (plan, work_beside_models(validated.stack))
    return found


def text_of(plan: dict, work: dict, width: int) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    print_plan(plan, console, engine_seconds=1.0, work=work)
    return console.export_text()


def commands_joined(lines: list[str]) -> list[str]:
    """Lines with a shell continuation (` \\`) joined to the next, as a shell reads them."""
    joined, carry = [], ""
    for line in lines:
        if line.endswith(" \\"):
            carry += line[:-2].strip() + " "
            continue
        joined.append(carry + line.strip() if carry else line)
        carry = ""
    return joined


def whole_values(plan: dict, work: dict) -> list[str]:
    """Values the plan's tables hold, each of which must sit whole on one line."""
    values = []
    for pool in plan["node_pools"]:
        values += [pool["name"], *pool["instance_types"], _capacity(pool), f"{pool['gpus_per_node']}x {pool['gpu']}",
                   _usd(pool["usd_per_hour"]["min"]), _usd(pool["usd_per_hour"]["max"]),
                   f"{pool['nodes']['min']}-{pool['nodes']['max']}"]
    for row in plan["placements"]:
        values += [row["model"], f"{row['devices_per_replica']}x {row['device']}",
                   f"{row['weights_gib']:.1f}, {row['kv_cache_gib']:.1f}, {row['memory_gib']:.1f}",
                   f"{row['max_model_len']} x {row['max_concurrency_at_full_length']}",
                   f"{row['weights']['download_gib']:.1f} GiB"]
    totals = plan["totals"]
    values += [f"{_usd(totals['usd_per_hour_min'])}/h", f"{_usd(totals['usd_per_hour_max'])}/h",
               f"{totals['gpus_max']} GPUs"]
    for row in plan["throughput"]["models"]:
        values += [row["model"], f"{row['traffic']['requests_per_second']:g} req/s"]
        if "error" not in row:
            values += [_usd(row["usd_per_hour"]), f"${row['usd_per_million_output_tokens']:.4f}",
                       f"(${row['usd_per_million_output_tokens_at_full_load']:.4f} at full load)",
                       f"{row['at_traffic']['tokens_per_second']:,.0f} tok/s",
                       f"{row['replicas_needed']} (max {row['max_replicas']})"]
    for row in plan["rollouts"]["models"]:
        values += [row["model"], row["workload"], f"{row['max_surge']}/{row['max_unavailable']}"]
        values += [f"{count} {name.removeprefix('nvidia.com/')}" for name, count in row["pool_free_at_max"].items()]
        if row["downtime_seconds"] is not None:
            values += [f"down ~{duration(row['downtime_seconds'])}", "one at a time: downtime"]
        elif row["strategy"] == "one-at-a-time":
            values.append(f"~{duration(row['load_seconds'])}")
    for model in plan["time_to_serving"]["models"]:
        values += [model["model"], duration(model["seconds"]), duration(model["lower_bound_seconds"])]
        values += [f"{step['name']} {duration(step['seconds'])}" for step in model["critical_path"][:-1]]
        for key in ("cold_start", "warm_restart"):
            values += [f"{part['phase']} {duration(part['seconds'])}" for part in model[key]]
    for worker in work["workers"]:
        values += [worker["name"], worker["model_service"], worker["list"]]
    for job in work["batch_jobs"]:
        values += [job["name"], job["model_service"], job["pool"], job["runs"], job["input"], job["output"]]
    return values


def expected_warnings(plan: dict) -> list[str]:
    """The start of each warning the plan has, with the subject it names."""
    found = []
    for pool in plan["node_pools"]:
        at_min = pool["at_scale"]["min"]["on_demand_nodes"] + pool["at_scale"]["min"]["spot_nodes"]
        if pool["nodes_for_min_replicas"] > at_min:
            found.append(f"node pool {pool['name']}: its models' min replicas need "
                         f"{pool['nodes_for_min_replicas']} nodes")
        if pool["nodes_for_max_replicas"] > pool["nodes"]["max"]:
            found.append(f"node pool {pool['name']}: its models at max replicas need")
        if pool.get("zone_doubt"):
            found.append(f"node pool {pool['name']}: {pool['zone_doubt'][:40]}")
    karpenter = plan.get("karpenter")
    if karpenter and karpenter["spot_service_linked_role"] and not karpenter["spot_service_linked_role_created"]:
        found.append("spot NodePools: Karpenter's spot NodePools need the account's EC2 Spot service-linked role")
    for row in plan["placements"]:
        if not row["fits"]:
            found.append(f"model {row['model']}: only {row['max_concurrency_at_full_length']} of its")
    for row in plan["rollouts"]["models"]:
        if row["downtime_seconds"] is not None:
            found.append(f"model {row['model']}: an update replaces its replicas one at a time with downtime: "
                         f"down ~{duration(row['downtime_seconds'])}")
    for row in plan["throughput"]["models"]:
        if "error" in row:
            found.append(f"model {row['model']}: no throughput estimate")
        elif row["replicas_needed"] > row["max_replicas"]:
            found.append(f"model {row['model']}: its stated traffic needs {row['replicas_needed']} replicas")
    return found


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", STACKS)
def test_every_line_fits_and_every_value_is_whole_on_one_line(runs, name, width):
    plan, work = runs[name]
    text = text_of(plan, work, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, [line for line in lines if len(line) > width]
    assert "…" not in text, "nothing is cut to an ellipsis"
    missing = [value for value in whole_values(plan, work) if not any(value in line for line in lines)]
    assert not missing, f"not whole on one line at {width} columns: {missing}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", STACKS)
def test_no_column_disappears_and_commands_paste_whole(runs, name, width):
    """Each table's every column is there (by its header or its block key), the rollouts' downtime column too,
    and a check command wrapped with ` \\` reads back as the command."""
    plan, work = runs[name]
    text = text_of(plan, work, width)
    # A header may wrap between its words, beside the next column's; in a block it is a key ("instances:").
    words = {word.removesuffix(":") for word in text.split()}
    headings = ["instances", "GPUs/node", "capacity", "EFA", "$/h min", "$/h max", "context x seqs", "links", "fits",
                "maxSurge/maxUnavailable", "during an update", "pool free at max", "first replica"]
    if plan["throughput"]["models"]:
        headings += ["$/1M out", "per replica at traffic", "at full load"]
    for heading in headings:
        assert set(heading.split()) <= words or heading.split("/")[-1] in words, heading
    joined = commands_joined(text.splitlines())
    for row in plan["rollouts"]["models"]:
        assert any(line.strip() == row["check"] for line in joined), row["check"]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", STACKS)
def test_warnings_are_one_section_each_naming_its_subject(runs, name, width):
    plan, work = runs[name]
    lines = text_of(plan, work, width).splitlines()
    headers = [number for number, line in enumerate(lines) if re.match(r"Warnings\b", line)]
    assert len(headers) == 1, headers
    before = " ".join(" ".join(lines[:headers[0]]).split())
    section = " ".join(" ".join(lines[headers[0]:]).split())
    expected = expected_warnings(plan)
    assert section.startswith(f"Warnings ({len(expected)})" if expected else "Warnings: none"), section[:80]
    for warning in expected:
        assert f"- {warning}" in section, warning
    for scattered in ("its models' min replicas need", "its models at max replicas need", "fit the KV cache at",
                      "an update replaces its replicas"):
        assert scattered not in before, f"a warning outside the Warnings section: {scattered}"


def test_prod_names_its_queue_worker_and_batch_job(runs):
    plan, work = runs["prod"]
    assert [w["name"] for w in work["workers"]] == ["summarizer"]
    (job,) = work["batch_jobs"]
    assert (job["name"], job["model_service"], job["pool"], job["runs"]) == (
        "nightly-eval", "llama-8b-fp8", "l40s-batch", "0 2 * * * (UTC)")
    for width in WIDTHS:
        lines = text_of(plan, work, width).splitlines()
        assert any("summarizer" in line and "llama-8b-fp8" in line for line in lines) or all(
            any(value in line for line in lines) for value in ("summarizer", "llama-8b-fp8"))
        assert any(line.startswith("Queue workers") for line in lines)
        assert any(line.startswith("Batch jobs") for line in lines)


def test_a_one_off_batch_job_says_so():
    from types import SimpleNamespace

    job = SimpleNamespace(name="once", model_service="m", pool="p", schedule=None, time_zone=None, parallelism=1,
                          input="s3://b/in.jsonl", output="s3://b/out/")
    (listed,) = work_beside_models(SimpleNamespace(workers=[], batch_jobs=[job]))["batch_jobs"]
    assert listed["runs"] == "once (one Job)"


def test_the_text_is_what_the_cli_prints_at_the_terminals_width():
    """COLUMNS sets the width rich lays the plan out to, piped or not."""
    for width in (80, 120):
        result = subprocess.run([sys.executable, "-m", "inferstack.cli", "plan", "prod"], cwd=REPO, capture_output=True,
                                text=True, timeout=300, env={**os.environ, "COLUMNS": str(width)})
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= width
        assert any("down ~" in line for line in lines) and "nightly-eval" in result.stdout


def test_a_reader_that_stops_after_the_first_line_of_the_text_plan_leaves_status_0():
    """`inferstack plan prod | head -1`: the pipe is full long before the plan is printed."""
    first, status, stderr = reader_stops_after_one_line("plan", "prod")
    assert first.startswith(b"Stack prod")
    assert status == 0 and b"Traceback" not in stderr and b"BrokenPipeError" not in stderr


class GoneReader(io.TextIOBase):
    """stdout whose reader has left: every write fails as a closed pipe does."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, text: str) -> int:
        raise BrokenPipeError

    def flush(self) -> None:
        raise BrokenPipeError

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_a_reader_that_leaves_does_not_hide_a_mandatory_violation(tmp_path, monkeypatch, json_output):
    """The status is the plan's, however early the reader leaves: 1 on a mandatory violation, else 0."""
    sink = os.open(tmp_path / "stdout", os.O_WRONLY | os.O_CREAT)
    try:
        monkeypatch.setattr(sys, "stdout", GoneReader(sink))
        args = ["plan", "dev", *(["--json"] if json_output else [])]
        assert cli.main(args) == 0
        monkeypatch.setattr(cli, "_mandatory_violations", lambda plan: 1)
        assert cli.main(args) == cli.EXIT_POLICY_VIOLATION
    finally:
        os.close(sink)
