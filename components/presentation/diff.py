"""`inferstack diff`: what a change does before `pulumi up` — resources added, updated in place,
replaced (with the input that forces it, from the catalog's replacement rules), deleted; node groups
that roll their nodes; GPUs and dollars per hour before and after; services that go down meanwhile."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from inferstack.catalog.replacement import ReplacementRule, rule_for
from inferstack.conventions import POOL_LABEL

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
SERVING_WORKLOADS = ("kubernetes:apps/v1:Deployment", "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
POD_TEMPLATES = ("spec.template", "spec.leaderWorkerTemplate")
GPU_TAINT = "nvidia.com/gpu"
VLLM_COMPONENT = "vllm"


class DiffInputError(Exception):
    """What to compare against cannot be read: a missing render, an unknown revision."""


# ----------------------------------------------------------------------------------------- sides


def load_render(folder: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(resources, plan) of a folder written by `inferstack render`."""
    resources_file, plan_file = folder / "resources.json", folder / "plan.json"
    if not resources_file.is_file():
        raise DiffInputError(f"{folder} holds no resources.json: write one with `inferstack render <stack> --out {folder}`")
    from inferstack.policies.runner import CheckInputError, load_plan, load_resources

    try:  # the readers `inferstack check --resources` uses: the same shapes refused the same way
        resources = load_resources(resources_file)
        plan = load_plan(plan_file) if plan_file.is_file() else {}
        if not resources:
            raise CheckInputError(f"{resources_file} lists no resources")
        missing = next((i for i, r in enumerate(resources) if not isinstance(r.get("custom"), bool)), None)
        if missing is not None:
            raise CheckInputError(f"{resources_file} entry {missing} has no boolean 'custom'")
    except CheckInputError as error:
        raise DiffInputError(f"{error}. To fix: render the folder again with `inferstack render <stack> --out {folder}`") from None
    return resources, plan


STACK_SUFFIXES = (".py", ".yaml", ".yml", ".json")  # what `inferstack.stacks.load_stack` reads


def stack_file_at(stacks_dir: Path, stack: str, revision: str, into: Path) -> Path:
    """Write the stack's file as it was at `revision` (in the git repository holding `stacks_dir`) into
    `into`; the program code stays today's."""
    problem = "git show failed"
    for suffix in STACK_SUFFIXES:
        completed = subprocess.run(
            ["git", "-C", str(stacks_dir), "show", f"{revision}:./{stack}{suffix}"], capture_output=True, text=True
        )
        if completed.returncode == 0:
            (into / f"{stack}{suffix}").write_text(completed.stdout, encoding="utf-8")
            return into
        problem = completed.stderr.strip().splitlines()[-1] if completed.stderr.strip() else problem
    raise DiffInputError(
        f"no {stack}{'/'.join(STACK_SUFFIXES)} in {stacks_dir} at revision {revision!r} ({problem}). To fix: name "
        "a revision (or branch) where the stack exists, or --against a folder written by `inferstack render`"
    )


def run_spec(validated) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(resources, plan) of a validated stack run on the embedded engine, as `inferstack render` writes them."""
    from inferstack.engine import run_stack
    from inferstack.presentation.summary import build_plan
    from inferstack.validation import as_validated

    validated = as_validated(validated)
    recording = run_stack(validated)
    return [r.as_dict() for r in recording.resources], build_plan(validated, recording)


def stack_at_revision(stacks_dir: Path, stack: str, revision: str):
    """The stack as its file stood at `revision`, loaded and validated with today's code."""
    from inferstack.stacks import load_validated

    with tempfile.TemporaryDirectory(prefix="inferstack-diff-") as folder:
        return load_validated(stack_file_at(stacks_dir, stack, revision, Path(folder)), stack)


# ------------------------------------------------------------------------------------- comparing


def changed_paths(old: Any, new: Any, unordered: tuple[str, ...] = (), path: str = "") -> list[str]:
    """Dotted input paths whose values differ; lists the provider holds as sets compare unordered."""
    if isinstance(old, dict) and isinstance(new, dict):
        paths: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            child = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                paths.append(child)
            else:
                paths.extend(changed_paths(old[key], new[key], unordered, child))
        return paths
    if isinstance(old, list) and isinstance(new, list) and path in unordered:
        as_text = lambda items: sorted(json.dumps(i, sort_keys=True) for i in items)  # noqa: E731
        return [] if as_text(old) == as_text(new) else [path]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        paths = []
        for index, (a, b) in enumerate(zip(old, new)):
            paths.extend(changed_paths(a, b, unordered, f"{path}[{index}]"))
        return paths
    return [] if old == new else [path]


def _under(path: str, field: str) -> bool:
    """True when a change at `path` touches `field`: the field itself, inside it, or a whole parent."""
    return path == field or path.startswith((field + ".", field + "[")) or field.startswith(path + ".")


def forcing_fields(paths: list[str], fields: tuple[str, ...]) -> list[str]:
    return sorted({f for f in fields for p in paths if _under(p, f)})


def _labels(resource: dict[str, Any]) -> dict[str, Any]:
    return (resource["inputs"].get("metadata") or {}).get("labels") or {}


def is_gpu_node_group(resource: dict[str, Any]) -> bool:
    taints = resource["inputs"].get("taints") or []
    return resource["type"] == NODE_GROUP and any(t.get("key") == GPU_TAINT for t in taints)


def is_vllm_workload(resource: dict[str, Any]) -> bool:
    return resource["type"] in SERVING_WORKLOADS and _labels(resource).get("app.kubernetes.io/component") == VLLM_COMPONENT


def _protected(resource: dict[str, Any], rule: ReplacementRule | None) -> bool:
    options = resource.get("options") or {}
    return bool(options.get("protect")) or bool(rule and rule.stateful)


def _key(resource: dict[str, Any]) -> tuple[str, str]:
    return resource["type"], resource["name"]


def compare_resources(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    """Every custom resource matched by (type, name): added, updated (with paths), replaced (with the
    forcing fields and their source), deleted; types the catalog does not know are listed apart."""
    old = {_key(r): r for r in before if r["custom"]}
    new = {_key(r): r for r in after if r["custom"]}
    result: dict[str, Any] = {"added": [], "updated": [], "replaced": [], "deleted": [], "unknown_types": []}
    for key in sorted(set(old) | set(new)):
        type_, name = key
        rule = rule_for(type_)
        if rule is None:
            result["unknown_types"].append(type_)
        if key not in old:
            result["added"].append({"type": type_, "name": name})
            continue
        if key not in new:
            result["deleted"].append({"type": type_, "name": name})
            continue
        paths = changed_paths(old[key]["inputs"], new[key]["inputs"], rule.unordered if rule else ())
        if not paths:
            continue
        entry = {"type": type_, "name": name, "changed": paths}
        forced = forcing_fields(paths, rule.replace_on) if rule else []
        if forced:
            entry.update(forced_by=forced, source=rule.source, protected=_protected(new[key], rule))
            result["replaced"].append(entry)
        else:
            result["updated"].append(entry)
    result["unknown_types"] = sorted(set(result["unknown_types"]))
    return result


def rolling_node_groups(changes: dict[str, Any], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Node groups whose nodes are replaced: the group is replaced, a `rolls_on` input changes, or a launch
    template it uses gets a new version (its content changed)."""
    rule = rule_for(NODE_GROUP)
    new_versions = {
        c["name"] for c in changes["updated"]
        if (r := rule_for(c["type"])) is not None and r.new_version_on_update
    }
    replaced = {c["name"]: c for c in changes["replaced"] if c["type"] == NODE_GROUP}
    updated = {c["name"]: c for c in changes["updated"] if c["type"] == NODE_GROUP}
    rolls = []
    for resource in after:
        if resource["type"] != NODE_GROUP:
            continue
        name, why = resource["name"], None
        if name in replaced:
            why = "replaced: " + ", ".join(replaced[name]["forced_by"])
        elif name in updated and (fields := forcing_fields(updated[name]["changed"], rule.rolls_on)):
            why = "new " + ", ".join(fields)
        elif templates := sorted(new_versions & set(resource.get("depends_on") or [])):
            why = "new launch template version: " + ", ".join(templates)
        if why:
            rolls.append({"name": name, "gpu": is_gpu_node_group(resource), "why": why})
    return rolls


def _removed_gpu_pools(
    changes: dict[str, Any], old: dict[tuple[str, str], dict[str, Any]], after: list[dict[str, Any]]
) -> set[str]:
    """Pools whose GPU node groups are all deleted (moving the pool to Karpenter): EKS drains their nodes, and each
    pod starts again, model load included, on a node the new provider launches."""
    remaining = {(r["inputs"].get("labels") or {}).get(POOL_LABEL) for r in after if r["type"] == NODE_GROUP}
    deleted = {
        (old[(c["type"], c["name"])]["inputs"].get("labels") or {}).get(POOL_LABEL)
        for c in changes["deleted"] if c["type"] == NODE_GROUP and is_gpu_node_group(old[(c["type"], c["name"])])
    }
    return deleted - remaining - {None}


def downtime(
    changes: dict[str, Any], before: list[dict[str, Any]], rolls: list[dict[str, Any]], after: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Services that stop serving during the change: a single-replica vLLM workload whose pod template
    changes or that is replaced, the vLLM workloads on a GPU node group that is replaced, and single-replica ones
    on a pool whose node groups are deleted."""
    old = {_key(r): r for r in before}
    moved_pools = _removed_gpu_pools(changes, old, after)
    touched = {(c["type"], c["name"]): c for c in changes["updated"] + changes["replaced"]}
    replaced_gpu_pools = {
        (old[(NODE_GROUP, r["name"])]["inputs"].get("labels") or {}).get(POOL_LABEL)
        for r in rolls if r["gpu"] and r["why"].startswith("replaced") and (NODE_GROUP, r["name"]) in old
    }
    services = []
    for key, resource in sorted(old.items()):
        if not is_vllm_workload(resource):
            continue
        spec = resource["inputs"].get("spec") or {}
        pool = _pool_of(spec)
        change = touched.get(key)
        if change is not None and change in changes["replaced"]:
            services.append({"name": resource["name"], "why": "replaced: " + ", ".join(change["forced_by"])})
        elif change is not None and spec.get("replicas") == 1 and any(
            _under(p, t) for p in change["changed"] for t in POD_TEMPLATES
        ):
            services.append({"name": resource["name"], "why": "pod template changes while it runs one replica"})
        elif pool is not None and pool in replaced_gpu_pools:
            services.append({"name": resource["name"], "why": f"its GPU node group (pool {pool}) is replaced"})
        elif pool is not None and pool in moved_pools and spec.get("replicas") == 1:
            services.append({"name": resource["name"], "why": f"pool {pool}'s node groups are deleted: its one replica "
                             "moves to a new node and loads its model again"})
    return services


def _pool_of(spec: dict[str, Any]) -> str | None:
    """The pool a workload's pods select (nodeSelector or the leader template's)."""
    templates = [spec.get("template") or {}, (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate") or {}]
    for template in templates:
        selector = (template.get("spec") or {}).get("nodeSelector") or {}
        if POOL_LABEL in selector:
            return selector[POOL_LABEL]
    return None


def capacity(plan: dict[str, Any]) -> dict[str, Any]:
    """GPUs and $/h at min and max scale, from the plan's own pool rows and totals (no new arithmetic on prices)."""
    totals = plan.get("totals") or {}
    pools = plan.get("node_pools") or []
    gpus_min = sum(p["gpus_per_node"] * sum(p["at_scale"]["min"].values()) for p in pools)
    return {
        "gpus": {"min": gpus_min, "max": totals.get("gpus_max")},
        "usd_per_hour": {"min": totals.get("usd_per_hour_min"), "max": totals.get("usd_per_hour_max")},
    }


def diff(
    before: tuple[list[dict[str, Any]], dict[str, Any]],
    after: tuple[list[dict[str, Any]], dict[str, Any]],
    against: str,
    note: str | None = None,
) -> dict[str, Any]:
    changes = compare_resources(before[0], after[0])
    rolls = rolling_node_groups(changes, after[0])
    down = downtime(changes, before[0], rolls, after[0])
    new = {_key(r): r for r in after[0]}
    blocking = [
        c for c in changes["replaced"]
        if c["protected"] or is_gpu_node_group(new[(c["type"], c["name"])]) or is_vllm_workload(new[(c["type"], c["name"])])
    ]
    return {
        "against": against,
        "note": note,
        **changes,
        "node_groups_rolling": rolls,
        "downtime": down,
        "capacity": {"before": capacity(before[1]), "after": capacity(after[1])},
        "blocking_replacements": [{"type": c["type"], "name": c["name"]} for c in blocking],
    }


def as_text(result: dict[str, Any]) -> str:
    """The diff for a pull-request comment or a terminal."""
    lines = [f"inferstack diff against {result['against']}"]
    if result["note"]:
        lines.append(f"  note: {result['note']}")
    for title, key in (("added", "added"), ("deleted", "deleted")):
        for item in result[key]:
            lines.append(f"  {title:9} {item['type']} {item['name']}")
    for item in result["updated"]:
        lines.append(f"  updated   {item['type']} {item['name']}: {', '.join(item['changed'])}")
    for item in result["replaced"]:
        flag = " [protected]" if item["protected"] else ""
        lines.append(f"  REPLACED  {item['type']} {item['name']}{flag}: forced by {', '.join(item['forced_by'])}")
        lines.append(f"            ({item['source']})")
    for group in result["node_groups_rolling"]:
        lines.append(f"  rolls     node group {group['name']}{' (GPU)' if group['gpu'] else ''}: {group['why']}")
    for service in result["downtime"]:
        lines.append(f"  DOWNTIME  {service['name']}: {service['why']}")
    before, after = result["capacity"]["before"], result["capacity"]["after"]
    for measure, unit in (("gpus", "GPUs"), ("usd_per_hour", "$/h")):
        lines.append(
            f"  {unit:5} min {before[measure]['min']} -> {after[measure]['min']}, "
            f"max {before[measure]['max']} -> {after[measure]['max']}"
        )
    if result["unknown_types"]:
        lines.append("  types without a replacement rule (judged as updates): " + ", ".join(result["unknown_types"]))
    counts = {k: len(result[k]) for k in ("added", "updated", "replaced", "deleted")}
    lines.append("  " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    if result["blocking_replacements"]:
        lines.append(f"  {len(result['blocking_replacements'])} protected or GPU-serving resource(s) replaced")
    return "\n".join(lines)
