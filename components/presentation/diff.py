"""`inferstack diff`: what a change does before `pulumi up` — resources added, updated in place,
replaced (with the input that forces it, from the catalog's replacement rules), deleted; node groups
that roll their nodes, Karpenter NodePools whose nodes drift and GPU capacity deleted; GPUs and dollars per hour
before and after; services that go down meanwhile."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from inferstack.catalog.replacement import DriftRule, ReplacementRule, drift_rule_for, rule_for
from inferstack.conventions import POOL_LABEL

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
KARPENTER_DEFAULT_BUDGET = "10% of the NodePool's nodes at once (Karpenter's default)"
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


def _template_spec(resource: dict[str, Any]) -> dict[str, Any]:
    return ((resource["inputs"].get("spec") or {}).get("template") or {}).get("spec") or {}


def is_gpu_node_pool(resource: dict[str, Any]) -> bool:
    """A Karpenter NodePool whose nodes carry the GPU taint."""
    taints = _template_spec(resource).get("taints") or []
    return resource["type"] == NODE_POOL and any(t.get("key") == GPU_TAINT for t in taints)


def pool_of_nodes(resource: dict[str, Any]) -> str | None:
    """The pool label a node group or a NodePool puts on its nodes."""
    if resource["type"] == NODE_GROUP:
        return (resource["inputs"].get("labels") or {}).get(POOL_LABEL)
    template = (resource["inputs"].get("spec") or {}).get("template") or {}
    return ((template.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)


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


def _value_at(inputs: dict[str, Any], dotted: str) -> Any:
    value: Any = inputs
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _narrowed(old: Any, new: Any) -> bool:
    """True when a node launched under `old` may fall outside `new`: a selector term was dropped, or a requirement
    was added or allows fewer values (Karpenter drifts a node whose labels leave the requirements; widening drifts
    nothing)."""
    old_items, new_items = old or [], new or []
    if all("key" in item for item in old_items + new_items):
        before = {item["key"]: item for item in old_items}
        for item in new_items:
            was = before.get(item["key"])
            if was is None or was.get("operator") != item.get("operator"):
                return True
            if item.get("operator") == "In" and set(was.get("values") or []) - set(item.get("values") or []):
                return True
            if item.get("operator") != "In" and was != item:
                return True
        return False
    as_text = lambda items: {json.dumps(i, sort_keys=True) for i in items}  # noqa: E731
    return bool(as_text(old_items) - as_text(new_items))


def _ami_family(inputs: dict[str, Any]) -> str | None:
    """EC2NodeClass.AMIFamily(): amiFamily when set, else the alias's family."""
    spec = inputs.get("spec") or {}
    if spec.get("amiFamily"):
        return str(spec["amiFamily"]).lower()
    alias = next((t["alias"] for t in spec.get("amiSelectorTerms") or [] if t.get("alias")), None)
    return alias.split("@")[0].lower() if alias else None


def drift_fields(rule: DriftRule, old: dict[str, Any], new: dict[str, Any], paths: list[str]) -> list[str]:
    """The changed fields that make Karpenter replace nodes: hashed ones (static drift) and resolved ones whose
    change leaves nodes behind (dynamic drift); behavioral fields and hash-ignored ones that resolve alike drift none."""
    fields = {
        p for p in paths
        if _under(p, rule.hashed) and not any(_under(p, ignored) for ignored in rule.hash_ignored)
    }
    for field, how in rule.dynamic.items():
        if not any(_under(p, field) for p in paths):
            continue
        old_value, new_value = _value_at(old, field), _value_at(new, field)
        if (
            how == "any_change"
            or (how == "removed_values" and _narrowed(old_value, new_value))
            or (how == "resolved_family" and _ami_family(old) != _ami_family(new))
        ):
            fields.add(field)
    return sorted(fields)


def _budgets(resource: dict[str, Any]) -> str:
    """The NodePool's disruption budgets in words: they pace how many drifted nodes drain at once."""
    budgets = ((resource["inputs"].get("spec") or {}).get("disruption") or {}).get("budgets")
    if not budgets:
        return KARPENTER_DEFAULT_BUDGET
    words = []
    for budget in budgets:
        text = f"{budget['nodes']} node(s)"
        if budget.get("reasons"):
            text += " for " + "/".join(budget["reasons"])
        if budget.get("schedule"):
            text += f" for {budget.get('duration')} from cron '{budget['schedule']}'"
        words.append(text)
    return "; ".join(words) + " (the most restrictive active budget wins)"


def drifting_node_pools(
    changes: dict[str, Any], before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Karpenter NodePools whose nodes Karpenter replaces after the change: a drift field of the NodePool or of the
    EC2NodeClass its nodeClassRef names changes (catalog karpenter_drift), or the NodePool itself is replaced."""
    old, new = {_key(r): r for r in before}, {_key(r): r for r in after}
    touched = {(c["type"], c["name"]): c for c in changes["updated"] + changes["replaced"]}
    class_drift: dict[str, list[str]] = {}
    for key, change in touched.items():
        if key[0] == NODE_CLASS:
            fields = drift_fields(drift_rule_for(NODE_CLASS), old[key]["inputs"], new[key]["inputs"], change["changed"])
            if fields:
                class_drift[(new[key]["inputs"].get("metadata") or {}).get("name")] = fields
    pool_rule = drift_rule_for(NODE_POOL)
    drifts = []
    for key, resource in sorted(new.items()):
        if key[0] != NODE_POOL or key not in old:
            continue
        reasons, sources = [], []
        change = touched.get(key)
        if change is not None and change in changes["replaced"]:
            reasons.append(f"replaced ({', '.join(change['forced_by'])}): {pool_rule.deleted}")
            sources.append(pool_rule.source)
        elif change is not None and (fields := drift_fields(pool_rule, old[key]["inputs"], resource["inputs"], change["changed"])):
            reasons.append("NodePool " + ", ".join(fields))
            sources.append(pool_rule.source)
        node_class = (_template_spec(resource).get("nodeClassRef") or {}).get("name")
        if node_class in class_drift:
            reasons.append(f"EC2NodeClass {node_class} " + ", ".join(class_drift[node_class]))
            sources.append(drift_rule_for(NODE_CLASS).source)
        if reasons:
            drifts.append({
                "name": resource["name"],
                "node_pool": (resource["inputs"].get("metadata") or {}).get("name"),
                "pool": pool_of_nodes(resource),
                "gpu": is_gpu_node_pool(resource),
                "why": "; ".join(reasons),
                "drains": _budgets(resource),
                "sources": sources,
            })
    return drifts


def deleted_gpu_capacity(
    changes: dict[str, Any], before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """GPU node groups and GPU NodePools deleted while vLLM services still serve: their nodes are drained and
    terminated (EKS drains a deleted group; a deleted NodePool's NodeClaims go with it), so every pod on them starts
    again, model load included, on a node another group or NodePool launches. Names the services on the pool."""
    old = {_key(r): r for r in before}
    serving = [r for r in after if is_vllm_workload(r)]
    if not serving:
        return []
    deleted = []
    for change in changes["deleted"]:
        resource = old[(change["type"], change["name"])]
        if not (is_gpu_node_group(resource) or is_gpu_node_pool(resource)):
            continue
        pool = pool_of_nodes(resource)
        services = sorted(w["name"] for w in serving if _pool_of(w["inputs"].get("spec") or {}) == pool)
        deleted.append({"type": change["type"], "name": change["name"], "pool": pool, "services": services})
    return deleted


def downtime(
    changes: dict[str, Any],
    before: list[dict[str, Any]],
    rolls: list[dict[str, Any]],
    drifts: list[dict[str, Any]],
    deleted: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Services that stop serving during the change: a single-replica vLLM workload whose pod template
    changes or that is replaced, the vLLM workloads on a GPU node group that is replaced, and single-replica ones
    on a pool whose nodes Karpenter replaces for drift or whose GPU node groups or NodePools are deleted."""
    old = {_key(r): r for r in before}
    touched = {(c["type"], c["name"]): c for c in changes["updated"] + changes["replaced"]}
    replaced_gpu_pools = {
        pool_of_nodes(old[(NODE_GROUP, r["name"])])
        for r in rolls if r["gpu"] and r["why"].startswith("replaced") and (NODE_GROUP, r["name"]) in old
    }
    drifting_pools = {d["pool"] for d in drifts if d["gpu"]}
    losing_pools = {d["pool"] for d in deleted}
    services = []
    for key, resource in sorted(old.items()):
        if not is_vllm_workload(resource):
            continue
        spec = resource["inputs"].get("spec") or {}
        pool = _pool_of(spec)
        change = touched.get(key)
        one_replica = spec.get("replicas") == 1
        if change is not None and change in changes["replaced"]:
            services.append({"name": resource["name"], "why": "replaced: " + ", ".join(change["forced_by"])})
        elif change is not None and one_replica and any(
            _under(p, t) for p in change["changed"] for t in POD_TEMPLATES
        ):
            services.append({"name": resource["name"], "why": "pod template changes while it runs one replica"})
        elif pool is not None and pool in replaced_gpu_pools:
            services.append({"name": resource["name"], "why": f"its GPU node group (pool {pool}) is replaced"})
        elif pool is not None and pool in drifting_pools and one_replica:
            services.append({"name": resource["name"], "why": f"Karpenter replaces pool {pool}'s nodes for drift: its "
                             "one replica moves to a new node and loads its model again"})
        elif pool is not None and pool in losing_pools and one_replica:
            services.append({"name": resource["name"], "why": f"pool {pool}'s GPU node groups or NodePools are deleted: "
                             "its one replica moves to a new node and loads its model again"})
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
    drifts = drifting_node_pools(changes, before[0], after[0])
    deleted = deleted_gpu_capacity(changes, before[0], after[0])
    down = downtime(changes, before[0], rolls, drifts, deleted)
    new = {_key(r): r for r in after[0]}
    replaced = [
        c for c in changes["replaced"]
        if c["protected"] or is_gpu_node_group(new[(c["type"], c["name"])]) or is_vllm_workload(new[(c["type"], c["name"])])
    ]
    blocking = [{"type": c["type"], "name": c["name"]} for c in replaced]
    blocking += [
        {"type": NODE_GROUP, "name": r["name"], "why": "GPU nodes roll: " + r["why"]}
        for r in rolls if r["gpu"] and {"type": NODE_GROUP, "name": r["name"]} not in blocking
    ]
    blocking += [
        {"type": NODE_POOL, "name": d["name"], "why": f"Karpenter replaces pool {d['pool']}'s GPU nodes: {d['why']}"}
        for d in drifts if d["gpu"]
    ]
    blocking += [
        {"type": d["type"], "name": d["name"], "why": f"GPU capacity of pool {d['pool']} deleted while services serve"}
        for d in deleted
    ]
    return {
        "against": against,
        "note": note,
        **changes,
        "node_groups_rolling": rolls,
        "node_pools_drifting": drifts,
        "services_only_on_drifting_pools": services_only_on_drifting_pools(drifts, after[0]),
        "gpu_capacity_deleted": deleted,
        "downtime": down,
        "capacity": {"before": capacity(before[1]), "after": capacity(after[1])},
        "blocking_replacements": blocking,
    }


def services_only_on_drifting_pools(drifts: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """vLLM services whose pool's NodePools all drift: every one of their pods moves to a new node."""
    drifting = {d["name"] for d in drifts}
    pools_by_name: dict[str, set[str]] = {}
    for resource in after:
        if resource["type"] == NODE_POOL:
            pools_by_name.setdefault(pool_of_nodes(resource), set()).add(resource["name"])
    whole = {pool for pool, names in pools_by_name.items() if names <= drifting}
    return sorted(
        r["name"] for r in after
        if is_vllm_workload(r) and _pool_of(r["inputs"].get("spec") or {}) in whole
    )


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
    for pool in result["node_pools_drifting"]:
        lines.append(
            f"  DRIFTS    Karpenter NodePool {pool['node_pool']} (pool {pool['pool']}{', GPU' if pool['gpu'] else ''}): "
            f"Karpenter replaces every node it launched: {pool['why']}"
        )
        lines.append(f"            nodes roll and drain per its disruption budgets: {pool['drains']}")
    for source in sorted({s for pool in result["node_pools_drifting"] for s in pool["sources"]}):
        lines.append(f"            (drift: {source})")
    if result["services_only_on_drifting_pools"]:
        lines.append(
            f"  {len(result['services_only_on_drifting_pools'])} service(s) run only on drifting NodePools: "
            + ", ".join(result["services_only_on_drifting_pools"])
        )
    for group in result["gpu_capacity_deleted"]:
        losing = ", ".join(group["services"]) or "no service selects the pool"
        lines.append(
            f"  DELETES   GPU {'NodePool' if group['type'] == NODE_POOL else 'node group'} {group['name']} "
            f"(pool {group['pool']}): its nodes drain and terminate; services losing nodes: {losing}"
        )
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
        lines.append(
            f"  {len(result['blocking_replacements'])} blocking change(s): protected or GPU-serving resources replaced, "
            "GPU nodes rolled or drifted, GPU capacity deleted"
        )
    return "\n".join(lines)
