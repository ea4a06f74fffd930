"""Print a plan for people: tables for pools and placements, one line per layer, the totals."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from inferstack.catalog import prices_source


# How a replica's GPUs talk (inferstack.serving.transport), short enough for a table column.
TRANSPORT_LABELS = {"in-node": "node", "efa": "EFA", "tcp": "TCP"}


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def _table(title: str, columns: tuple[str, ...], figures: tuple[str, ...] = (), names: tuple[str, ...] = ()) -> Table:
    """A table that reads in an 80-column terminal and in CI logs: light rules, long cells wrap at spaces (never
    cut to an ellipsis), names and figures (money) never break, headers break only between words."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for column in columns:
        if column in figures or column in names:
            table.add_column(column, no_wrap=True, justify="right" if column in figures else "left")
        else:
            table.add_column(column, overflow="fold", min_width=max(len(word) for word in column.split()))
    return table


def _capacity(pool: dict[str, Any]) -> str:
    """'on-demand', 'spot, 60% off' or '2 on-demand + spot, 60% off': how the pool's nodes are bought."""
    base = pool["nodes"]["on_demand_base"]
    if pool["spot"] is None:
        return "on-demand"
    spot = f"spot, {pool['spot']['assumed_discount']:.0%} off"
    return spot if base == 0 else f"{base} on-demand + {spot}"


def duration(seconds: float) -> str:
    """1837.6 -> '30m 38s': minutes are what people plan with."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m {rest:02d}s" if minutes < 60 else f"{minutes // 60}h {minutes % 60:02d}m {rest:02d}s"


REPLICA_PARTS = {
    "gpu_node": "GPU node", "image_pull": "image pull", "weights_s3_gb_per_s": "weights from S3",
    "weights_nvme_gb_per_s": "load from NVMe", "engine_warmup_cold": "warm-up, no compile cache",
    "engine_warmup_warm": "warm-up, compile cache hit",
}


def _fits(row: dict[str, Any]) -> str:
    """"yes" only when the stated context x sequences fit, as auto placement means it; else how many do."""
    if row["fits"]:
        return "yes"
    return f"[yellow]{row['max_concurrency_at_full_length']} of {row['sequences_stated']}[/yellow]"


def print_plan(plan: dict[str, Any], console: Console | None = None, engine_seconds: float | None = None) -> None:
    console = console or Console()
    resources = plan["resources"]
    engine = "" if engine_seconds is None else f", engine {engine_seconds} s"
    console.print(
        f"[bold]Stack {plan['stack']}[/bold] ({plan['region']}): {resources['total']} resources in "
        f"{resources['components']} components{engine}"
    )
    for layer, kinds in resources["by_layer"].items():
        counts = ", ".join(f"{n} {t.split(':')[-1]}" for t, n in kinds.items())
        console.print(f"  {layer}: {sum(kinds.values())} ({counts})")
    if resources["unanswered_outputs"]:
        console.print(
            f"  [yellow]the embedded engine left {len(resources['unanswered_outputs'])} outputs the program reads "
            f"unanswered[/yellow] (a mock to fix in components/engine/mocks.py): {', '.join(resources['unanswered_outputs'])}"
        )

    pools = _table(
        "Node pools", ("pool", "instances", "GPUs/node", "nodes", "capacity", "EFA", "$/h min", "$/h max"),
        figures=("$/h min", "$/h max"), names=("pool",),
    )
    for pool in plan["node_pools"]:
        nodes = pool["nodes"]
        sharing = "" if pool["gpu_sharing"] == "none" else f"\n{pool['gpu_sharing']}"
        pools.add_row(
            f"{pool['name']}\n[dim]{pool['role']}[/dim]",
            " ".join(pool["instance_types"]),
            f"{pool['gpus_per_node']}x {pool['gpu']}{sharing}",
            f"{nodes['min']}-{nodes['max']}",
            _capacity(pool),
            str(pool["efa_interfaces"] or "-"),
            _usd(pool["usd_per_hour"]["min"]),
            _usd(pool["usd_per_hour"]["max"]),
        )
    console.print(pools)
    for pool in plan["node_pools"]:
        if (disruption := pool.get("karpenter_disruption")) is not None:
            budgets = disruption["budgets"]
            limits = budgets if isinstance(budgets, str) else "; ".join(
                f"{b['nodes']} node(s)" + (f" for {', '.join(b['reasons'])}" if b.get("reasons") else "")
                + (f" from {b['schedule']} for {b['duration']}" if b.get("schedule") else "") for b in budgets
            )
            drain = (
                "serving pods keep Karpenter off their node" if disruption["serving_pods_block_disruption"]
                else f"a drain waits up to {disruption['termination_grace_period']}"
            )
            console.print(
                f"  {pool['name']}: Karpenter consolidates {disruption['consolidation_policy']} after "
                f"{disruption['consolidate_after']}, disruption budgets {limits}; nodes expire after "
                f"{disruption['expire_after']}; {drain}",
                highlight=False, soft_wrap=True,
            )
    for pool in plan["node_pools"]:
        at_min = pool["at_scale"]["min"]["on_demand_nodes"] + pool["at_scale"]["min"]["spot_nodes"]
        if pool["nodes_for_min_replicas"] > at_min:
            console.print(
                f"  [yellow]{pool['name']}[/yellow]: its models' min replicas need {pool['nodes_for_min_replicas']} "
                f"nodes, min scale is {at_min}: the autoscaler adds the rest, which $/h min does not count"
            )
        if pool["nodes_for_max_replicas"] > pool["nodes"]["max"]:
            console.print(
                f"  [yellow]{pool['name']}[/yellow]: its models at max replicas need {pool['nodes_for_max_replicas']} "
                f"nodes, max_nodes is {pool['nodes']['max']}: they cannot all scale to max at once (the rest stay "
                "pending). To fix: raise max_nodes or lower max_replicas"
            )

    if plan["placements"]:
        placements = _table(
            "Model placements (per replica)",
            ("model", "pool", "devices", "replicas", "GiB: weights, KV cache, memory", "context x seqs", "links",
             "fits"),
            names=("model",),
        )
        for row in plan["placements"]:
            placements.add_row(
                row["model"],
                row["pool"],
                f"{row['devices_per_replica']}x {row['device']}",
                f"{row['replicas']['min']}-{row['replicas']['max']}",
                f"{row['weights_gib']:.1f}, {row['kv_cache_gib']:.1f}, {row['memory_gib']:.1f}",
                f"{row['max_model_len']} x {row['max_concurrency_at_full_length']}",
                TRANSPORT_LABELS[row["transport"]],
                _fits(row),
            )
        console.print(placements)
        for row in plan["placements"]:
            if not row["fits"]:
                console.print(
                    f"  [yellow]{row['model']}[/yellow]: only {row['max_concurrency_at_full_length']} of its "
                    f"{row['sequences_stated']} sequences (max_num_seqs) fit the KV cache at {row['max_model_len']} "
                    "tokens each: longer traffic queues or is preempted. To fix: lower max_num_seqs or "
                    "max_model_len, or give the replica more memory"
                )
        for row in plan["placements"]:
            weights = row["weights"]
            held = "as stored" if weights["held"] == weights["stored"] else f"as {weights['held']}"
            console.print(
                f"  {row['model']}: {weights['stored']} checkpoint ({weights['download_gib']:.1f} GiB to download), "
                f"held {held}: {weights['kernel']}; KV cache per token: {row['kv_formula']}; "
                f"{row['layout']}, {row['weights_gib_per_device']:.1f} GiB of weights per GPU"
            )
        for row in plan["placements"]:
            if row["transport"] != "in-node":
                console.print(f"  {row['model']}: between its nodes, {row['transport_detail']}")
        for row in plan["placements"]:
            for line in row.get("features", []):
                console.print(f"  {row['model']}: {line}", markup=False, highlight=False, soft_wrap=True)

    totals = plan["totals"]
    spot = plan["node_pools"][0]["spot_discount"] if plan["node_pools"] else 0
    floor = "at least " if totals["unpriced_pools"] else ""  # unpriced pools cost something, not $0
    prices = f"{plan['region']} on-demand prices from {prices_source(plan['region'])}"
    console.print(
        f"[bold]Total[/bold]: up to {totals['gpus_max']} GPUs, {floor}{_usd(totals['usd_per_hour_min'])}/h at min "
        f"scale, {floor}{_usd(totals['usd_per_hour_max'])}/h at max scale ({prices}; spot assumed "
        f"{spot:.0%} off on-demand; {totals['min_scale']}, spot fills the rest up to max)"
    )
    if totals["unpriced_pools"]:
        console.print(f"  unpriced (no catalog price in {plan['region']}): {', '.join(totals['unpriced_pools'])}")
    if totals["budget_usd_per_hour"] is not None:
        within = (totals["usd_per_hour_max"] or 0) <= totals["budget_usd_per_hour"]
        console.print(f"  budget {_usd(totals['budget_usd_per_hour'])}/h: {'within' if within else '[red]OVER[/red]'}")
    if plan.get("throughput", {}).get("models"):
        print_throughput(plan["throughput"], console)
    if plan.get("rollouts", {}).get("models"):
        print_rollouts(plan["rollouts"], console)
    if plan.get("interruption"):
        print_interruption(plan["interruption"], console)
    if plan.get("node_health"):
        print_node_health(plan["node_health"], console)
    if plan.get("time_to_serving", {}).get("models"):
        print_time_to_serving(plan["time_to_serving"], console)
    if plan.get("policies"):
        print_policy_results(plan["policies"], console, passing=False)


def _ms(value: float | None, missing: str = "unbounded") -> str:
    return missing if value is None else f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def print_throughput(estimates: dict[str, Any], console: Console) -> None:
    """Per model at its stated traffic: replicas, latency, $/h and $/1M output tokens with the model's
    stated accuracy, then every assumption of the model."""
    accuracy = estimates["accuracy"]
    table = _table(
        f"Throughput and cost at the stated traffic (engine step model: {accuracy['stated']}; on-demand prices)",
        ("model", "traffic", "replicas", "per replica at traffic", "at full load", "$/h", "$/1M out"),
        figures=("$/h",), names=("model",),
    )
    for row in estimates["models"]:
        traffic = row["traffic"]
        asked = (
            f"{traffic['requests_per_second']:g} req/s x {traffic['mean_input_tokens']}->"
            f"{traffic['mean_output_tokens']} tok"
        )
        if traffic["shared_prefix_tokens"]:
            asked += f" ({traffic['shared_prefix_tokens']} shared)"
        if "error" in row:
            table.add_row(row["model"], asked, f"[red]{row['error']}[/red]", *[""] * 4)
            continue
        replicas = f"{row['replicas_needed']} (max {row['max_replicas']})"
        if row["replicas_for_slo"] is not None and row["replicas_for_slo"] > row["replicas_for_traffic"]:
            replicas += f"; {row['replicas_for_traffic']} without the SLO (sized on latency: see the accuracy above)"
        if row["slo_unreachable"]:
            replicas += f"\n[red]SLO unreachable: {row['slo_unreachable']}[/red]"
        if row["replicas_needed"] > row["max_replicas"]:
            replicas += "\n[red]raise max_replicas[/red]"
        at, full = row["at_traffic"], row["full_load"]
        table.add_row(
            row["model"], asked, replicas,
            f"{at['tokens_per_second']:,.0f} tok/s, TTFT {_ms(at['ttft_ms'])}, ITL {_ms(at['itl_ms'], 'n/a (one token)')}",
            f"{full['tokens_per_second']:,.0f} tok/s ({full['running']:.0f} seqs, {full['limit']})",
            _usd(row["usd_per_hour"]),
            f"${row['usd_per_million_output_tokens']:.4f} (${row['usd_per_million_output_tokens_at_full_load']:.4f} "
            f"at full load)\n[dim]model: {accuracy['short']}[/dim]",
        )
    console.print(table)
    console.print("  assumptions of the throughput model:")
    for assumption in estimates["assumptions"]:
        console.print(f"    - {assumption['name']} = {assumption['value']}: {assumption['why']}",
                      markup=False, highlight=False, soft_wrap=True)


ROLLOUT_LABELS = {
    "surge": "surge 1 (a spare replica fits at max)",
    "one-at-a-time": "one at a time (no room at max)",
    "downtime": "[red]one at a time: downtime[/red]",
}


def print_rollouts(rollouts: dict[str, Any], console: Console) -> None:
    """Per service: how an update replaces replicas, what it costs in serving, and how to wait for it."""
    table = _table(
        "Rollouts on update (from each pool's room at max size)",
        ("model", "workload", "strategy", "maxSurge/maxUnavailable", "pool free at max", "during an update"),
        names=("model",),
    )
    for row in rollouts["models"]:
        if row["downtime_seconds"] is not None:
            effect = f"[red]down ~{duration(row['downtime_seconds'])}[/red] (one load time) while one replica runs"
        elif row["strategy"] == "one-at-a-time":
            effect = f"one replica fewer for ~{duration(row['load_seconds'])} per replica"
        else:
            effect = "no capacity lost"
        free = ", ".join(f"{count} {name.removeprefix('nvidia.com/')}" for name, count in row["pool_free_at_max"].items())
        table.add_row(
            row["model"], row["workload"], ROLLOUT_LABELS[row["strategy"]],
            f"{row['max_surge']}/{row['max_unavailable']}", free, effect,
        )
    console.print(table)
    console.print(f"  pulumi up does not wait for rollouts: {rollouts['why']}", markup=False, highlight=False,
                  soft_wrap=True)
    for row in rollouts["models"]:
        console.print(f"    {row['check']}", markup=False, highlight=False, soft_wrap=True)


def print_interruption(interruption: dict[str, Any], console: Console) -> None:
    """Spot interruptions: which services can get the two-minute notice, and whether their pods stop inside it."""
    if not interruption["spot_pools"]:
        return
    services = ", ".join(interruption["services_on_spot"]) or "no model service"
    verdict = (
        f"{interruption['spare_seconds']} s to spare" if interruption["fits"]
        else "[red]longer than the notice[/red]"
    )
    console.print(
        f"Spot interruptions on {', '.join(interruption['spot_pools'])} ({services}): {interruption['handled_by']}; "
        f"serving pods stop within their {interruption['grace_seconds']} s grace period ({interruption['pre_stop_seconds']} s "
        f"preStop included) of the {interruption['notice_seconds']} s notice, {verdict}",
        highlight=False, soft_wrap=True,
    )


def print_node_health(health: dict[str, Any], console: Console) -> None:
    """GPU node health: the agent that watches the GPUs, and per pool what replaces a sick node."""
    agent = health["agent"]
    console.print(
        f"GPU node health: {agent['addon']} {agent['version']} add-on" if agent else "GPU node health: no agent installed",
        markup=False, highlight=False, soft_wrap=True,
    )
    for pool in health["pools"]:
        console.print(f"  {pool['pool']}: {pool['why']}; repair: {pool['repair']}", markup=False, highlight=False,
                      soft_wrap=True)


def print_time_to_serving(times: dict[str, Any], console: Console) -> None:
    """Per model: the longest chain of waits from an empty account, its lower bound, and the chain itself."""
    table = _table(
        "Time to serving from an empty account (first ready replica)",
        ("model", "program", "lower bound", "weights S3 / NVMe", "first replica"),
        names=("model",),
    )
    for model in times["models"]:
        bound = duration(model["lower_bound_seconds"])
        if model["lower_bound_seconds"] < model["seconds"]:
            bound = f"[yellow]{bound}[/yellow]"
        note = "on its first request (scales from zero)" if model["scale_from_zero"] else "at deploy"
        table.add_row(
            model["model"], duration(model["seconds"]), bound,
            f"{duration(model['weights_load_seconds']['s3'])} / {duration(model['weights_load_seconds']['nvme'])}",
            note + ("; on a new GPU node" if model["new_node"] else ""),
        )
    console.print(table)
    paths = [[step["name"] for step in model["critical_path"][:-1]] for model in times["models"]]
    shared = 0
    while all(len(path) > shared and path[shared] == paths[0][shared] for path in paths):
        shared += 1
    if len(paths) > 1 and shared:
        steps = [f"{step['name']} {duration(step['seconds'])}" for step in times["models"][0]["critical_path"][:shared]]
        console.print(f"  critical path shared by every model: {' -> '.join(steps)}",
                      markup=False, highlight=False, soft_wrap=True)
    for model in times["models"]:
        own = model["critical_path"][shared if len(paths) > 1 else 0:-1]
        steps = ["..."] if len(paths) > 1 and shared else []
        steps += [f"{step['name']} {duration(step['seconds'])}" for step in own]
        parts = ", ".join(f"{REPLICA_PARTS[p['part']]} {duration(p['seconds'])}" for p in model["first_replica"])
        steps.append(f"first ready replica {duration(model['critical_path'][-1]['seconds'])} ({parts})")
        console.print(f"  critical path to {model['model']}: " + " -> ".join(steps),
                      markup=False, highlight=False, soft_wrap=True)
    print_start_split(times["models"], console)
    if times["needless_edges"]:
        console.print(
            f"  [yellow]{len(times['needless_edges'])} needless waits[/yellow] "
            "(not required by dependency_rule.DependencyRule):"
        )
        for edge in times["needless_edges"]:
            line = f"    {edge['dependent']} waits for {edge['dependency']} ({edge['kind']})"
            console.print(line, markup=False, highlight=False)
    else:
        console.print("  every wait in the program is required: its longest chains are the lower bound")
    used = ", ".join(
        f"{t['key']} {t['seconds']:g}{' GB/s' if t['key'].endswith('_gb_per_s') else ' s'} "
        f"({'measured' if t['measured'] else 'estimate'})"
        for t in times["creation_times"]
    )
    console.print(f"  typical times (sources in components/planning/creation_times.py and plan.json): {used}",
                  markup=False, highlight=False, soft_wrap=True)


def print_start_split(models: list[dict[str, Any]], console: Console) -> None:
    """Per model: a replica's start on a new node and restarted on the node it ran on, phase by phase; the
    sources are the creation-time entries the plan lists."""
    table = _table(
        "Replica start: cold (new node) / warm restart (node kept: image, weights, compile cache on NVMe)",
        ("model", "loader", "start", "total", "node boot, image pull, weight copy, load, warm-up"),
        names=("model",),
    )
    for model in models:
        for label, key in (("cold", "cold_start"), ("warm", "warm_restart")):
            parts = model[key]
            table.add_row(
                model["model"], model["weight_loader"], label, duration(sum(p["seconds"] for p in parts)),
                ", ".join(f"{p['phase']} {duration(p['seconds'])}" for p in parts),
            )
    console.print(table)


def print_policy_results(policies: list[dict[str, Any]], console: Console | None = None, passing: bool = True) -> None:
    """A summary line, one line per policy (passing ones only when `passing`), each violation under its policy."""
    console = console or Console()
    failed = [p for p in policies if p["violations"]]
    mandatory = sum(len(p["violations"]) for p in failed if p["enforcement"] == "mandatory")
    console.print(
        f"[bold]Policies[/bold] ({len(policies)}): {len(policies) - len(failed)} pass, "
        f"{mandatory} mandatory and {sum(len(p['violations']) for p in failed) - mandatory} advisory violations"
    )
    for policy in policies:
        if not passing and not policy["violations"] and not policy.get("notes"):
            continue
        if policy["enforcement"] == "disabled":
            mark = "[dim]-[/dim]"
        elif not policy["violations"]:
            mark = "[green]ok[/green]"
        else:
            mark = "[red]FAIL[/red]" if policy["enforcement"] == "mandatory" else "[yellow]warn[/yellow]"
        console.print(f"  {mark} {policy['name']} ({policy['enforcement']})", highlight=False)
        for violation in policy["violations"]:
            where = f"{violation['resource']}: " if violation["resource"] else ""
            console.print(f"      {where}{violation['message']}", markup=False, highlight=False, soft_wrap=True)
        for note in policy.get("notes", []):
            console.print(f"      note: {note}", markup=False, highlight=False, soft_wrap=True, style="dim")
