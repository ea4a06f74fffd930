"""Print a plan for people: tables for pools and placements, one line per layer, the totals."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def print_plan(plan: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    resources = plan["resources"]
    console.print(
        f"[bold]Stack {plan['stack']}[/bold] ({plan['region']}): {resources['total']} resources in "
        f"{resources['components']} components, engine {plan['engine_seconds']} s"
    )
    for layer, kinds in resources["by_layer"].items():
        counts = ", ".join(f"{n} {t.split(':')[-1]}" for t, n in kinds.items())
        console.print(f"  {layer}: {sum(kinds.values())} ({counts})")

    pools = Table(title="Node pools", title_justify="left")
    for column in ("pool", "role", "instances", "GPUs/node", "nodes", "capacity", "EFA", "sharing", "$/h min", "$/h max"):
        pools.add_column(column)
    for pool in plan["node_pools"]:
        nodes = pool["nodes"]
        pools.add_row(
            pool["name"],
            pool["role"],
            ", ".join(pool["instance_types"]),
            f"{pool['gpus_per_node']}x {pool['gpu']}",
            f"{nodes['min']}-{nodes['max']} (on-demand {nodes['on_demand_base']})",
            pool["capacity"],
            str(pool["efa_interfaces"] or "-"),
            pool["gpu_sharing"],
            _usd(pool["usd_per_hour"]["min"]),
            _usd(pool["usd_per_hour"]["max"]),
        )
    console.print(pools)

    if plan["placements"]:
        placements = Table(title="Model placements (per replica)", title_justify="left")
        for column in ("model", "pool", "devices", "replicas", "weights GiB", "KV cache GiB", "memory GiB", "context x seqs", "fits"):
            placements.add_column(column)
        for row in plan["placements"]:
            placements.add_row(
                row["model"],
                row["pool"],
                f"{row['devices_per_replica']}x {row['device']}",
                f"{row['replicas']['min']}-{row['replicas']['max']}",
                f"{row['weights_gib']:.1f}",
                f"{row['kv_cache_gib']:.1f}",
                f"{row['memory_gib']:.1f}",
                f"{row['max_model_len']} x {row['max_concurrency_at_full_length']}",
                "yes" if row["fits"] else "[red]NO[/red]",
            )
        console.print(placements)

    totals = plan["totals"]
    spot = plan["node_pools"][0]["spot_discount"] if plan["node_pools"] else 0
    console.print(
        f"[bold]Total[/bold]: up to {totals['gpus_max']} GPUs, {_usd(totals['usd_per_hour_min'])}/h at min scale, "
        f"{_usd(totals['usd_per_hour_max'])}/h at max scale (us-east-1 on-demand prices; spot assumed "
        f"{spot:.0%} off on-demand)"
    )
    if totals["unpriced_pools"]:
        console.print(f"  not priced (no catalog price): {', '.join(totals['unpriced_pools'])}")
    if totals["budget_usd_per_hour"] is not None:
        within = (totals["usd_per_hour_max"] or 0) <= totals["budget_usd_per_hour"]
        console.print(f"  budget {_usd(totals['budget_usd_per_hour'])}/h: {'within' if within else '[red]OVER[/red]'}")
    if plan.get("policies"):
        print_policy_results(plan["policies"], console, passing=False)


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
