"""Batch jobs are scheduled work, and an edit of the model service they run never deletes a running Job.

Upstream rules encoded here:
* Kubernetes CronJob concept doc (kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/) and the
  batch/v1 CronJob API: a changed CronJob applies to Jobs created after the change; Jobs already running keep
  their own template. kubernetes/kubernetes pkg/apis/batch/validation/validation.go (validateScheduleFormat,
  validateTimeZone, ValidateJobTemplateSpec: no selector in a job template) and robfig/cron v3 parser.go /
  spec.go (vendored in kubernetes-sigs/kueue v0.19.2) for the schedule syntax.
* Kueue CronJob integration, kubernetes-sigs/kueue v0.19.2 site/content/en/docs/tasks/run/run_cronjobs.md:
  the `kueue.x-k8s.io/queue-name` label goes on `jobTemplate.metadata`.
* pulumi/pulumi-kubernetes provider/pkg/provider/diff.go (v4.32.0 and main at 94977969), as the catalog's
  replacement rules (components/catalog/replacement.json) hold it: a batch/v1 Job is replaced when
  .spec.template, .spec.completions, .spec.parallelism or .spec.selector changes; a CronJob is not in the
  table, so only .metadata.name or .metadata.namespace would replace it.
* Pulumi `retainOnDelete` (pulumi.com/docs/iac/concepts/resources/options/retainondelete/): the provider's
  Delete is not called when the resource is deleted or replaced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kube_validation import assert_valid
from pydantic import ValidationError

from inferstack.catalog.replacement import rule_for
from inferstack.cli import main
from inferstack.presentation.diff import compare_resources
from inferstack.engine import run_stack
from inferstack.engine.recorder import Recording
from inferstack.engine.render import kubernetes_objects
from inferstack.spec import SpecError, StackSpec, describe_validation_error
from inferstack.stacks import load_stack
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CRON_JOB, JOB = "kubernetes:batch/v1:CronJob", "kubernetes:batch/v1:Job"
BATCH_TYPES = (CRON_JOB, JOB)


@pytest.fixture(scope="module")
def prod() -> StackSpec:
    return load_stack(STACKS, "prod")


@pytest.fixture(scope="module")
def prod_run(prod) -> Recording:
    return run_stack(prod)


def with_changes(spec: StackSpec, job: dict[str, Any] | None = None, model: dict[str, Any] | None = None) -> StackSpec:
    data = spec.model_dump()
    data["batch_jobs"][0].update(job or {})
    service = next(m for m in data["models"] if m["name"] == data["batch_jobs"][0]["model_service"])
    service.update(model or {})
    return validate(StackSpec.model_validate(data)).stack


def batch_workloads(recording: Recording) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r.type, r.logical_name): r.inputs for r in recording.resources if r.type in BATCH_TYPES}


def batch_changes(before: Recording, after: Recording) -> dict[str, list[dict[str, Any]]]:
    """What `inferstack diff` (the catalog's replacement rules) says happens to the batch workloads."""
    result = compare_resources([r.as_dict() for r in before.resources], [r.as_dict() for r in after.resources])
    return {kind: [c for c in result[kind] if c["type"] in BATCH_TYPES] for kind in ("added", "updated", "replaced", "deleted")}


# ------------------------------------------------------------------------------------------ the CronJob


def test_a_scheduled_batch_job_renders_a_valid_cron_job_whose_template_is_the_batch_job(prod, prod_run):
    objects = kubernetes_objects(prod_run)
    assert_valid([o for o in objects if o["kind"] in ("CronJob", "ConfigMap")], prod.cluster.kubernetes_version)
    assert not [o for o in objects if o["kind"] == "Job"]
    cron = next(o for o in objects if o["kind"] == "CronJob")
    job = prod.batch_jobs[0]
    assert cron["metadata"] == {"name": "nightly-eval", "namespace": "batch", "labels": cron["metadata"]["labels"]}
    spec = cron["spec"]
    assert (spec["schedule"], spec["timeZone"], spec["startingDeadlineSeconds"]) == ("0 2 * * *", "UTC", 3600)
    assert spec["concurrencyPolicy"] == "Forbid"  # a run still queued or running skips the next one
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (3, 1)
    template = spec["jobTemplate"]
    assert "selector" not in template["spec"]  # the API server generates a job template's selector
    assert template["spec"]["completionMode"] == "Indexed"
    assert template["spec"]["completions"] == template["spec"]["parallelism"] == job.parallelism
    pod = template["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "batch-runner"
    assert [c["name"] for c in pod["initContainers"]] == ["prefetch-weights", "fetch-input"]


def test_kueue_admits_each_run_by_the_labels_on_the_job_template(prod_run):
    cron = next(o for o in kubernetes_objects(prod_run) if o["kind"] == "CronJob")
    labels = cron["spec"]["jobTemplate"]["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == "batch"
    assert labels["kueue.x-k8s.io/priority-class"] == "batch"
    assert QUEUE_LABEL not in cron["metadata"]["labels"]  # Kueue manages the Jobs, not the CronJob
    assert cron["spec"]["jobTemplate"]["spec"]["suspend"] is True  # created suspended; Kueue starts it


def test_the_cron_job_waits_for_the_batch_identity_and_kueue(prod_run):
    cron = next(r for r in prod_run.resources if r.type == CRON_JOB)
    assert "prod-weights-batch-batch-runner" in cron.depends_on  # Pod Identity exists before any pod
    assert any("kueue" in name for name in cron.depends_on)


@pytest.mark.parametrize(
    "edit",
    [
        {"max_model_len": 4096},
        {"image": "vllm/vllm-openai:v0.33.0-efa"},
        {"gpu_memory_utilization": 0.85},
    ],
    ids=lambda edit: next(iter(edit)),
)
def test_editing_the_model_service_updates_the_cron_job_in_place(prod, prod_run, edit):
    """The CronJob keeps its name and namespace (nothing else replaces one), so Pulumi updates it; Jobs it has
    created are separate objects the update does not touch."""
    after = run_stack(with_changes(prod, model=edit))
    changes = batch_changes(prod_run, after)
    assert (changes["added"], changes["replaced"], changes["deleted"]) == ([], [], [])
    assert list(batch_workloads(after)) == [(CRON_JOB, "prod-serving-nightly-eval-cronjob")]
    assert [c["name"] for c in changes["updated"]] == ["prod-serving-nightly-eval-cronjob"]  # the next run gets the edit


def test_a_running_jobs_scripts_outlive_an_edit(prod, prod_run):
    """A pod a running Job starts after an edit (a retry, a spot replacement) mounts the ConfigMaps its template
    names: those are named by the run's revision, immutable, and retained when the edit replaces them."""
    after = run_stack(with_changes(prod, model={"max_model_len": 4096}))
    result = compare_resources([r.as_dict() for r in prod_run.resources], [r.as_dict() for r in after.resources])
    replaced = {c["name"]: c for c in result["replaced"] if c["type"] == "kubernetes:core/v1:ConfigMap"}
    assert set(replaced) == {"prod-serving-nightly-eval-prefetch", "prod-serving-nightly-eval-scripts"}
    assert all("metadata.name" in c["forced_by"] for c in replaced.values())
    for recording in (prod_run, after):
        template = batch_workloads(recording)[(CRON_JOB, "prod-serving-nightly-eval-cronjob")]["spec"]["jobTemplate"]
        mounted = {v["configMap"]["name"] for v in template["spec"]["template"]["spec"]["volumes"] if "configMap" in v}
        config_maps = {r.inputs["metadata"]["name"]: r for r in recording.resources if r.name in replaced}
        assert mounted == set(config_maps)
        assert all(r.inputs["immutable"] is True and r.options["retain_on_delete"] is True for r in config_maps.values())
    assert run_stack(prod).resources == prod_run.resources  # no edit, same revision: nothing to replace


def test_an_image_edit_reaches_the_job_template_which_would_replace_a_plain_job(prod, prod_run):
    """Why the template cannot live in a Job under a fixed name: the same edit there forces replacement."""
    after = run_stack(with_changes(prod, model={"image": "vllm/vllm-openai:v0.33.0-efa"}))
    (updated,) = batch_changes(prod_run, after)["updated"]
    assert updated["changed"] and all(p.startswith("spec.jobTemplate.spec.template.") for p in updated["changed"])
    rule = rule_for(JOB)
    as_job_paths = [p.removeprefix("spec.jobTemplate.") for p in updated["changed"]]
    assert any(p == f or p.startswith(f + ".") for p in as_job_paths for f in rule.replace_on)


# ------------------------------------------------------------------------------------ the one-off Job


@pytest.fixture(scope="module")
def one_off(prod) -> StackSpec:
    return with_changes(prod, job={"schedule": None, "time_zone": None, "starting_deadline_seconds": None})


def test_without_a_schedule_one_job_runs_retained_on_delete(one_off):
    recording = run_stack(one_off)
    objects = kubernetes_objects(recording)
    assert not [o for o in objects if o["kind"] == "CronJob"]
    job = next(o for o in objects if o["kind"] == "Job")
    assert_valid([job], one_off.cluster.kubernetes_version)
    assert job["metadata"]["name"].startswith("nightly-eval-") and len(job["metadata"]["name"]) == len("nightly-eval-") + 8
    assert job["metadata"]["labels"][QUEUE_LABEL] == "batch"
    assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"  # `pulumi up` does not wait for the run
    registered = next(r for r in recording.resources if r.type == JOB)
    assert registered.options["retain_on_delete"] is True  # Pulumi drops it from state, the run goes on


def test_an_unchanged_one_off_job_keeps_its_name_and_an_edit_makes_a_new_job(one_off):
    """Same spec, same Job: nothing to replace. An edit gives the Job a new name, so Pulumi creates the new Job
    first (create-before-delete, no name clash) and, the old one being retained, never deletes the running run."""
    first, second = run_stack(one_off), run_stack(one_off)
    edited = run_stack(with_changes(one_off, model={"image": "vllm/vllm-openai:v0.33.0-efa"}))
    assert batch_changes(first, second) == {"added": [], "updated": [], "replaced": [], "deleted": []}
    (replaced,) = batch_changes(first, edited)["replaced"]
    assert "metadata.name" in replaced["forced_by"]  # a new Job of a new name, created before the old is dropped
    key = (JOB, "prod-serving-nightly-eval-job")
    assert batch_workloads(edited)[key]["metadata"]["name"] != batch_workloads(first)[key]["metadata"]["name"]


# ------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "schedule",
    ["0 2 * * *", "*/15 * * * *", "0 1-5/2 ? JAN-Mar mon-fri", "30 4 1,15 * 0", "@daily", "@midnight", "@hourly",
     "@weekly", "@monthly", "@yearly", "@annually"],
)
def test_kubernetes_cron_syntax_is_accepted(prod, schedule):
    assert with_changes(prod, job={"schedule": schedule}).batch_jobs[0].schedule == schedule


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ("0 2 * *", "has 4"),
        ("0 0 2 * * *", "has 6"),
        ("61 * * * *", "61 is outside 0-59"),
        ("0 24 * * *", "24 is outside 0-23"),
        ("0 0 0 * *", "0 is outside 1-31"),
        ("0 0 * 13 *", "13 is outside 1-12"),
        ("0 0 * * 7", "7 is outside 0-6"),
        ("0 0 * * fun", "'fun' is not a number or a name"),
        ("5-1 * * * *", "runs backwards"),
        ("*/0 * * * *", "not a positive number"),
        ("*/99999999999999999999 * * * *", "not a positive number"),  # beyond strconv.Atoi's int64
        ("\u0661 2 * * *", "is not a number"),  # an Arabic-Indic digit: Go's Atoi reads ASCII digits only
        ("@every 1h", "not one of the macros"),
        ("@nightly", "not one of the macros"),
        ("CRON_TZ=UTC 0 2 * * *", "TZ"),
        ("", "empty"),
    ],
)
def test_a_bad_schedule_is_refused_at_spec_time(prod, schedule, problem):
    with pytest.raises(SpecError) as refused:
        with_changes(prod, job={"schedule": schedule})
    assert refused.value.path == "batch_jobs[0].schedule"
    assert problem in refused.value.problem


@pytest.mark.parametrize(
    ("zone", "problem"),
    [("Local", "explicit"), ("Europe/Pariss", "not an IANA time zone"), ("Europe", "not an IANA time zone"),
     ("x" * 300, "not an IANA time zone")],
    ids=["local", "misspelt", "a-region-folder", "too-long"],
)
def test_a_bad_time_zone_is_refused(prod, zone, problem):
    with pytest.raises(SpecError) as refused:
        with_changes(prod, job={"time_zone": zone})
    assert refused.value.path == "batch_jobs[0].time_zone"
    assert problem in refused.value.problem


@pytest.mark.parametrize("field", ["time_zone", "starting_deadline_seconds"])
def test_schedule_settings_without_a_schedule_are_refused(one_off, field):
    value = {"time_zone": "UTC", "starting_deadline_seconds": 600}[field]
    with pytest.raises(SpecError) as refused:
        with_changes(one_off, job={field: value})
    assert refused.value.path == f"batch_jobs[0].{field}"


def test_a_starting_deadline_under_the_controllers_ten_second_check_is_refused(prod):
    """The CronJob controller checks every 10 seconds: a shorter deadline may never start a run (CronJob doc)."""
    with pytest.raises(ValidationError) as refused:
        with_changes(prod, job={"starting_deadline_seconds": 5})
    error = describe_validation_error(refused.value, StackSpec)
    assert error.path == "batch_jobs[0].starting_deadline_seconds" and "10" in error.problem


# ------------------------------------------------------------------------------------------- policies


def test_the_policies_read_the_cron_jobs_pod_template(prod_run, tmp_path, capsys):
    """policies/workloads.py finds a CronJob's pods at spec.jobTemplate.spec.template: a privileged container
    or a moving image tag there fails the pack as it would in a Deployment."""
    resources = [r.as_dict() for r in prod_run.resources]
    cron = next(r for r in resources if r["type"] == CRON_JOB)
    vllm = next(c for c in cron["inputs"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    vllm["securityContext"] = {**vllm["securityContext"], "privileged": True}
    vllm["image"] = "vllm/vllm-openai:latest"
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(resources), encoding="utf-8")
    assert main(["check", "--resources", str(path), "--format", "json"]) == 1
    report = {p["name"]: p for p in json.loads(capsys.readouterr().out)["policies"]}
    for policy in ("no-privileged-workloads", "images-pinned"):
        assert any(v["message"].startswith("CronJob batch/nightly-eval") for v in report[policy]["violations"]), policy
