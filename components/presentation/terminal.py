"""Print a plan for people: tables for pools and placements, one line per layer, the totals, one Warnings section.

Every line fits the console's width (rich's Console: the terminal's, COLUMNS, or 80 when piped). A table is laid
out at its natural width when it fits, with its prose columns wrapped between words when that is enough;
otherwise each row becomes a block of `key: value` fields. Notes wrap between words with a hanging indent.
Either way a value (a name, an instance type, a figure, a duration, a capacity) is never cut, hidden or split
across lines: its spaces are glued (`keep`), and a column never disappears.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from inferstack.spec import StackSpec


class PlanConsole(Console):
    """A Console whose reader leaving (`inferstack plan | head`) raises BrokenPipeError for the CLI to handle,
    instead of rich's default, which exits 1: the status `plan` gives a mandatory policy violation."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


# ----------------------------------------------------------------------------- lines and tables that fit

NBSP = "\u00a0"   # a space inside a value: never a place to break a line (printed as a space)
# Spaces that belong to a figure: "90 s", "37.1 GiB", "4m 00s", "1h 02m 03s", "20 req/s", "3 nodes".
_GLUED = re.compile(
    r"(?<=\d) (?=(?:s|ms|min|h|KiB|MiB|GiB|TiB|GB|GB/s|tok|tok/s|req/s|seqs|nodes?|node\(s\)|GPUs?|replicas?|pods?)\b)"
    r"|(?<=\d[hm]) (?=\d\d[ms]\b)"
)


def keep(value: Any) -> str:
    """A value printed whole: its spaces never break a line."""
    return str(value).replace(" ", NBSP)


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def _text(content: str | Text, markup: bool = True) -> Text:
    if isinstance(content, Text):
        return content.copy()
    return Text.from_markup(content, emoji=False) if markup else Text(content)


def _hard_lines(content: str | Text, markup: bool = True, whole: bool = False) -> list[list[Text]]:
    """The lines of a cell or note ("\\n" breaks), each as the pieces a line may break between: its words, a
    value's spaces glued. `whole`: each line is one piece."""
    text = _text(content, markup)
    text.plain = _GLUED.sub(NBSP, text.plain)   # same length: the styles' spans still hold
    lines = []
    for line in text.split("\n", allow_blank=True):
        pieces = [line] if whole else list(line.split(" ", allow_blank=True))
        pieces = [piece for piece in pieces if piece.plain.strip(" ")]
        for piece in pieces:
            piece.plain = piece.plain.replace(NBSP, " ")
        lines.append(pieces)
    return lines


def _fold(piece: Text, width: int) -> list[Text]:
    """A piece wider than the line (a very long name): split at the width, the only way it can be shown whole."""
    if piece.cell_len <= width:
        return [piece]
    return list(piece.divide(range(width, len(piece.plain), width)))


def _wrap(pieces: list[Text], width: int, rest: int | None = None) -> list[Text]:
    """Pieces packed into lines of `width` (then `rest`) cells, one space between pieces."""
    width, rest = max(width, 1), max(rest if rest is not None else width, 1)
    lines: list[Text] = []
    current: Text | None = None
    for piece in pieces:
        limit = rest if lines else width
        if current is not None:
            if current.cell_len + 1 + piece.cell_len <= limit:
                current.append(" ")
                current.append_text(piece)
                continue
            lines.append(current)
            limit = rest
        *done, last = _fold(piece, limit)
        lines.extend(done)
        current = last.copy()
    if current is not None:
        lines.append(current)
    return lines or [Text("")]


def say(console: Console, content: str | Text, indent: int = 0, hang: int = 2, markup: bool = True,
        style: str | None = None, command: bool = False) -> None:
    """Print a note to the console's width, wrapped between words: continuation lines `hang` further in. A
    `command` wraps between its arguments with a shell continuation (` \\`), so it still pastes as one."""
    width = console.width
    for pieces in _hard_lines(content, markup):
        room = width - indent - (2 if command else 0)
        lines = _wrap(pieces, room, room - hang)
        for number, line in enumerate(lines):
            out = Text(" " * (indent + (hang if number else 0)))
            out.append_text(line)
            if command and number < len(lines) - 1:
                out.append(" \\")
            console.print(out, style=style, no_wrap=True, overflow="fold", highlight=False)


@dataclass(frozen=True)
class Column:
    """A table column. kind: 'name' or 'text' (a line of a cell is one value, never broken), 'figure' (the
    same, right-aligned), 'prose' (may break between words, values glued). `key` names the field in the block
    layout (default: the header); `joiner` ends each line of a multi-line cell there (e.g. ';')."""

    header: str
    kind: str = "text"
    key: str | None = None
    joiner: str = ";"


# The narrowest a prose column is squeezed to before the table turns into blocks.
PROSE_MIN_WIDTH = 16


@dataclass
class Grid:
    """A table printed to the console's width: a table when its columns fit, otherwise one block per row."""

    title: str
    columns: tuple[Column, ...]
    rows: list[tuple[tuple[str | Text, ...], str | None]] = field(default_factory=list)

    def add_row(self, *cells: str | Text, heading: str | None = None) -> None:
        """A row; `heading` is its first line in the block layout (default: its first cell)."""
        assert len(cells) == len(self.columns), (self.title, cells)
        self.rows.append((cells, heading))

    def _cells(self) -> list[list[list[list[Text]]]]:
        return [
            [_hard_lines(cell, whole=column.kind != "prose") for column, cell in zip(self.columns, cells)]
            for cells, _ in self.rows
        ]

    def widths(self, available: int) -> list[int] | None:
        """Column widths that fit `available` cells with every value whole, or None."""
        cells = self._cells()
        natural, least = [], []
        for index, column in enumerate(self.columns):
            lines = [line for row in cells for line in row[index] if line]
            full = max([sum(p.cell_len for p in line) + len(line) - 1 for line in lines] + [len(column.header)])
            longest = max([p.cell_len for line in lines for p in line] + [_header_least(column.header)])
            natural.append(full)
            least.append(max(longest, min(full, PROSE_MIN_WIDTH)) if column.kind == "prose" else longest)
        room = available - 2 - 2 * (len(self.columns) - 1)   # edges, and a gap between columns
        widths = list(natural)
        while sum(widths) > room:
            shrinkable = [i for i in range(len(widths)) if widths[i] > least[i]]
            if not shrinkable:
                return None
            widest = max(shrinkable, key=lambda i: widths[i] - least[i] // 2)
            widths[widest] -= 1
        return widths

    def print(self, console: Console) -> None:
        say(console, self.title, style="bold")
        widths = self.widths(console.width)
        if widths is None:
            self._print_blocks(console)
            return
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for column, width in zip(self.columns, widths):
            header = Text("\n").join(_header_lines(column.header, width))
            table.add_column(header, width=width, no_wrap=True, justify="right" if column.kind == "figure" else "left")
        for row in self._cells():
            table.add_row(*(
                Text("\n").join(line for pieces in cell for line in _wrap(pieces, width))
                for cell, width in zip(row, widths)
            ))
        console.print(table)

    def _print_blocks(self, console: Console) -> None:
        """Per row: its heading, then `key: value` fields packed into lines, each field whole on its line when
        it fits one."""
        width = console.width
        for (_, heading), row in zip(self.rows, self._cells()):
            title = heading if heading is not None else Text(" ").join(p for line in row[0] for p in line)
            say(console, title, indent=1, hang=2)
            fields = []
            for column, cell in zip(self.columns[1:], row[1:]):
                pieces = [p for line in cell for p in _joined(line, column.joiner, line is not cell[-1])]
                if not pieces:
                    continue
                key = [Text(word) for word in f"{column.key or column.header}:".split(" ")]
                for p in key:
                    p.stylize("dim")
                first = key[-1]
                first.append(" ")
                first.append_text(pieces[0])
                fields.append([*key[:-1], first, *pieces[1:]])
            _pack(console, fields, indent=3, hang=2, width=width)
        console.print()


def _header_lines(header: str, width: int) -> list[Text]:
    """A header wrapped between words; a word wider than the column breaks after a '/' (maxSurge/ maxUnavailable)."""
    lines: list[Text] = []
    broken = False   # the last line ends inside a word, after its '/'
    for word in header.split():
        parts = re.split(r"(?<=/)(?=.)", word) if len(word) > width else [word]
        for number, part in enumerate(parts):
            if lines and not broken and lines[-1].cell_len + 1 + len(part) <= width:
                lines[-1].append(" " + part)
            else:
                lines.append(Text(part))
            broken = number < len(parts) - 1
    return lines


def _header_least(header: str) -> int:
    """The narrowest a header goes: its longest word, or a word's longest part between '/'s."""
    return max(max(len(part) for part in re.split(r"(?<=/)(?=.)", word)) for word in header.split())


def _joined(line: list[Text], joiner: str, more: bool) -> list[Text]:
    if not line or not more or not joiner:
        return line
    last = line[-1].copy()
    last.append(joiner)
    return [*line[:-1], last]


def _pack(console: Console, fields: list[list[Text]], indent: int, hang: int, width: int, gap: int = 3) -> None:
    """Fields side by side, `gap` apart, while they fit the line; a field wider than a line wraps on its own."""
    room = width - indent
    current: Text | None = None

    def flush() -> None:
        nonlocal current
        if current is not None:
            console.print(Text(" " * indent) + current, no_wrap=True, overflow="fold")
            current = None

    for pieces in fields:
        whole = Text(" ").join(pieces)
        if current is not None and current.cell_len + gap + whole.cell_len <= room:
            current.append(" " * gap)
            current.append_text(whole)
            continue
        flush()
        if whole.cell_len <= room:
            current = whole
            continue
        lines = _wrap(pieces, room, room - hang)
        for number, line in enumerate(lines):
            console.print(Text(" " * (indent + (hang if number else 0))) + line, no_wrap=True, overflow="fold")
    flush()


@dataclass
class Warnings:
    """The plan's warnings, gathered for one section: each names what it is about."""

    items: list[tuple[str, str | Text]] = field(default_factory=list)

    def add(self, subject: str, message: str | Text) -> None:
        self.items.append((subject, message))

    def print(self, console: Console) -> None:
        if not self.items:
            say(console, "[bold]Warnings[/bold]: none")
            return
        say(console, f"[bold]Warnings[/bold] ({len(self.items)})")
        for subject, message in self.items:
            line = Text()
            line.append(f"- {subject}: ", style="yellow")
            line.append_text(_text(message))
            say(console, line, indent=2, hang=2)


def _own_warnings(warnings: Warnings | None) -> tuple[Warnings, bool]:
    """The plan's section when given; else a section of this part's own, printed at its end."""
    return (warnings, False) if warnings is not None else (Warnings(), True)


# ----------------------------------------------------------------------------- the plan


# How a replica's GPUs talk (inferstack.serving.transport), short enough for a table column.
TRANSPORT_LABELS = {"in-node": "node", "efa": "EFA", "tcp": "TCP"}


def _capacity(pool: dict[str, Any]) -> str:
    """'on-demand', 'spot, 60% off' or '2 on-demand + spot, 60% off' ('2 Capacity Block + ...'): how the pool's
    nodes are bought (the discount is the dearest spot type's; 'no spot price' where nothing prices it)."""
    base = pool["nodes"]["on_demand_base"]
    if pool["spot"] is None:
        return "on-demand"
    discount = pool["spot"]["assumed_discount"]
    spot = "spot, no spot price" if pool["spot"]["usd_per_node_hour"] is None else (
        "spot, stated price" if discount is None else f"spot, {discount:.0%} off")
    baseline = "Capacity Block" if pool.get("outside_capacity_block") is not None else "on-demand"
    return spot if base == 0 else f"{base} {baseline} + {spot}"


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


def work_beside_models(spec: StackSpec) -> dict[str, list[dict[str, Any]]]:
    """The spec's queue workers and batch jobs as the text plan names them: each one's name, the model service
    it calls and, for a batch job, its pool and when it runs. They are not part of the plan dict (plan.json
    keeps its shape), so the CLI hands them to print_plan beside it."""
    return {
        "workers": [
            {
                "name": worker.name, "model_service": worker.model_service, "list": worker.list_name or worker.name,
                "jobs_per_replica": worker.jobs_per_replica,
                "replicas": {"min": worker.min_replicas, "max": worker.max_replicas},
                "polling_interval_seconds": worker.polling_interval_seconds,
                "cooldown_seconds": worker.cooldown_seconds,
            }
            for worker in spec.workers
        ],
        "batch_jobs": [
            {
                "name": job.name, "model_service": job.model_service, "pool": job.pool,
                "runs": "once (one Job)" if job.schedule is None
                else f"{job.schedule} ({job.time_zone or 'the controller time zone'})",
                "parallelism": job.parallelism, "input": job.input, "output": job.output,
            }
            for job in spec.batch_jobs
        ],
    }


def print_plan(plan: dict[str, Any], console: Console | None = None, engine_seconds: float | None = None,
               work: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """The plan as people read it; `work` (work_beside_models) adds the queue workers and batch jobs."""
    console = console or PlanConsole()
    warnings = Warnings()
    resources = plan["resources"]
    engine = "" if engine_seconds is None else f", engine {engine_seconds} s"
    say(console,
        f"[bold]Stack {plan['stack']}[/bold] ({plan['region']}): {resources['total']} resources in "
        f"{resources['components']} components{engine}")
    for layer, kinds in resources["by_layer"].items():
        counts = ", ".join(keep(f"{n} {t.split(':')[-1]}") for t, n in kinds.items())
        say(console, f"{layer}: {sum(kinds.values())} ({counts})", indent=2, markup=False)
    if resources["unanswered_outputs"]:
        warnings.add(
            "the embedded engine",
            Text(f"left {len(resources['unanswered_outputs'])} outputs the program reads unanswered (a mock to fix "
                 f"in components/engine/mocks.py): {', '.join(resources['unanswered_outputs'])}"),
        )

    print_node_pools(plan["node_pools"], console, warnings)
    if plan.get("karpenter"):
        print_karpenter(plan["karpenter"], console, warnings)
    if plan["placements"]:
        print_placements(plan["placements"], console, warnings)
    if work:
        print_work(work, console)
    print_totals(plan, console, warnings)
    if plan.get("edge"):
        print_edge(plan["edge"], console, warnings)
    if plan.get("throughput", {}).get("models"):
        print_throughput(plan["throughput"], console, warnings)
    if plan.get("scalers"):
        print_scalers(plan["scalers"], console)
    if plan.get("rollouts", {}).get("models"):
        print_rollouts(plan["rollouts"], console, warnings)
    if plan.get("interruption"):
        print_interruption(plan["interruption"], console, warnings)
    if plan.get("node_health"):
        print_node_health(plan["node_health"], console)
    if plan.get("time_to_serving", {}).get("models"):
        print_time_to_serving(plan["time_to_serving"], console, warnings)
    if plan.get("policies"):
        print_policy_results(plan["policies"], console, passing=False)
        failed = [v for p in plan["policies"] for v in p["violations"]]
        if failed:
            mandatory = sum(len(p["violations"]) for p in plan["policies"] if p["enforcement"] == "mandatory")
            warnings.add("policies", f"{mandatory} mandatory and {len(failed) - mandatory} advisory violations "
                         "(listed under Policies)")
    warnings.print(console)


def _price_line(pool: dict[str, Any], sources: dict[str, int]) -> str:
    """Every price a pool's nodes are bought at, each with its source's number in the price sources below."""
    return "; ".join(
        f"{p['instance_type']} {p['purchase'].replace('_', '-')} {_usd(p['usd_per_node_hour'])}/h"
        + ("" if p.get("spot_discount") is None else f" ({p['spot_discount']:.0%} off)")
        + f" [{sources.setdefault(p['source'], len(sources) + 1)}]"
        for p in pool["prices"]
    )


def _devices_line(pool: dict[str, Any]) -> str:
    """Which mechanism hands out the pool's devices: the resources pods request, or the classes their claims name."""
    devices = pool["devices"]
    releases = ", ".join(devices["releases"])
    if devices["mode"] == "device_plugin":
        return f"device plugin ({releases}): pods request {', '.join(sorted(pool['advertises_per_node']))}"
    line = f"DRA ({releases}): pods claim {', '.join(devices['device_classes'])}"
    if devices["gpu_selector"]:
        line += " for GPUs with " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in devices["gpu_selector"].items())
    return line


def print_node_pools(pools: list[dict[str, Any]], console: Console, warnings: Warnings | None = None) -> None:
    """The pools table, Karpenter's disruption settings per pool; what a pool cannot hold goes to the warnings."""
    warnings, own = _own_warnings(warnings)
    table = Grid("Node pools", (
        Column("pool", "name"), Column("instances", joiner=""), Column("GPUs/node", joiner=","), Column("nodes"),
        Column("capacity"), Column("EFA"), Column("$/h min", "figure"), Column("$/h max", "figure"),
    ))
    for pool in pools:
        nodes = pool["nodes"]
        sharing = "" if pool["gpu_sharing"] == "none" else f"\n{pool['gpu_sharing']}"
        table.add_row(
            f"{pool['name']}\n[dim]{pool['role']}[/dim]",
            "\n".join(pool["instance_types"]),
            f"{pool['gpus_per_node']}x {pool['gpu']}{sharing}",
            f"{nodes['min']}-{nodes['max']}",
            _capacity(pool),
            str(pool["efa_interfaces"] or "-"),
            _usd(pool["usd_per_hour"]["min"]),
            _usd(pool["usd_per_hour"]["max"]),
            heading=f"[bold]{pool['name']}[/bold] [dim]({pool['role']} pool)[/dim]",
        )
    table.print(console)
    sources: dict[str, int] = {}  # each price source once, numbered as the price lines cite it
    for pool in pools:
        if (disruption := pool.get("karpenter_disruption")) is not None:
            budgets = disruption["budgets"]
            limits = budgets if isinstance(budgets, str) else "; ".join(
                keep(f"{b['nodes']} node(s)") + (f" for {', '.join(b['reasons'])}" if b.get("reasons") else "")
                + (f" from {keep(b['schedule'])} for {keep(b['duration'])}" if b.get("schedule") else "")
                for b in budgets
            )
            drain = (
                f"serving pods keep consolidation off their node; interruption and drift drain them within "
                f"{keep(disruption['termination_grace_period'])}" if disruption["serving_pods_block_disruption"]
                else f"a drain waits up to {keep(disruption['termination_grace_period'])}"
            )
            say(console,
                f"{pool['name']}: Karpenter consolidates {disruption['consolidation_policy']} after "
                f"{keep(disruption['consolidate_after'])}, disruption budgets {limits}; nodes expire after "
                f"{keep(disruption['expire_after'])}; {drain}",
                indent=2, markup=False)
        if pool.get("capacity_block"):
            say(console, f"{pool['name']}: {pool['capacity_block']}", indent=2, markup=False)
        if (outside := pool.get("outside_capacity_block")) is not None:
            say(console, f"{pool['name']}: $/h above is inside the Capacity Block's window (its nodes prepaid at the "
                f"block's rate); outside it the block's nodes are gone and the pool costs {_usd(outside['min'])}-"
                f"{_usd(outside['max'])}/h", indent=2, markup=False)
        if pool["prices"]:
            say(console, f"{pool['name']} prices: {_price_line(pool, sources)}", indent=2, markup=False)
        say(console, f"{pool['name']} devices: {_devices_line(pool)}", indent=2, markup=False)
    for source, number in sources.items():
        say(console, f"[{number}] {source}", indent=2, markup=False)
    for pool in pools:
        if pool.get("zone_doubt"):
            warnings.add(f"node pool {pool['name']}", pool["zone_doubt"])
        at_min = pool["at_scale"]["min"]["on_demand_nodes"] + pool["at_scale"]["min"]["spot_nodes"]
        if pool["nodes_for_min_replicas"] > at_min:
            warnings.add(
                f"node pool {pool['name']}",
                f"its models' min replicas need {pool['nodes_for_min_replicas']} nodes, min scale is "
                f"{at_min}: the autoscaler adds the rest, which $/h min does not count",
            )
        if pool["nodes_for_max_replicas"] > pool["nodes"]["max"]:
            warnings.add(
                f"node pool {pool['name']}",
                f"its models at max replicas need {pool['nodes_for_max_replicas']} nodes, max_nodes "
                f"is {pool['nodes']['max']}: they cannot all scale to max at once (the rest stay pending). To fix: "
                "raise max_nodes or lower max_replicas",
            )
        for missing in pool["unpriced"]:
            warnings.add(f"node pool {pool['name']}", f"{missing['instance_type']} has {missing['reason']}: the "
                         "totals leave the pool out (they read 'at least'). To fix: state its price in budget.prices "
                         f"(purchase {missing['purchase']})")
    if own:
        warnings.print(console)


def print_placements(rows: list[dict[str, Any]], console: Console, warnings: Warnings | None = None) -> None:
    """Per model: the replica's devices, memory and fit, then its weights, links and serving features."""
    warnings, own = _own_warnings(warnings)
    table = Grid("Model placements (per replica)", (
        Column("model", "name"), Column("pool", "name"), Column("devices"), Column("replicas"),
        Column("GiB: weights, KV cache, memory", key="GiB weights, KV cache, memory"),
        Column("context x seqs"), Column("links"), Column("fits"),
    ))
    for row in rows:
        table.add_row(
            row["model"],
            row["pool"],
            f"{row['devices_per_replica']}x {row['device']}",
            f"{row['replicas']['min']}-{row['replicas']['max']}",
            f"{row['weights_gib']:.1f}, {row['kv_cache_gib']:.1f}, {row['memory_gib']:.1f}",
            f"{row['max_model_len']} x {row['max_concurrency_at_full_length']}",
            TRANSPORT_LABELS[row["transport"]],
            _fits(row),
            heading=f"[bold]{row['model']}[/bold]",
        )
    table.print(console)
    for row in rows:
        if not row["fits"]:
            warnings.add(
                f"model {row['model']}",
                f"only {row['max_concurrency_at_full_length']} of its {row['sequences_stated']} "
                f"sequences (max_num_seqs) fit the KV cache at {row['max_model_len']} tokens each: longer traffic "
                "queues or is preempted. To fix: lower max_num_seqs or max_model_len, or give the replica more memory",
            )
    for row in rows:
        weights = row["weights"]
        held = "as stored" if weights["held"] == weights["stored"] else f"as {weights['held']}"
        say(console,
            f"{row['model']}: {weights['stored']} checkpoint ({keep(format(weights['download_gib'], '.1f'))} GiB to "
            f"download), held {held}: {weights['kernel']}; KV cache per token: {row['kv_formula']}; "
            f"{row['layout']}, {row['weights_gib_per_device']:.1f} GiB of weights per GPU",
            indent=2, markup=False)
    for row in rows:
        if row.get("auto_reason"):
            say(console, f"{row['model']}: {row['auto_reason']}", indent=2, markup=False)
    for row in rows:
        if row["transport"] != "in-node":
            say(console, f"{row['model']}: between its nodes, {row['transport_detail']}", indent=2, markup=False)
    for row in rows:
        if (claims := row.get("claims")) is not None:
            say(console, f"{row['model']}: each pod claims its devices through DRA: {claims['describe']} "
                f"(ResourceClaimTemplate {claims['template']})", indent=2, markup=False)
    for row in rows:
        for line in row.get("features", []):
            say(console, f"{row['model']}: {line}", indent=2, markup=False)
    if own:
        warnings.print(console)


def print_work(work: dict[str, list[dict[str, Any]]], console: Console) -> None:
    """The queue workers and batch jobs: what each calls, and where and when a batch job runs."""
    if work.get("workers"):
        table = Grid("Queue workers (KEDA scales each on its Redis list)", (
            Column("worker", "name"), Column("calls", "name", key="calls model service"), Column("replicas"),
            Column("Redis list", "name"), Column("jobs per replica"), Column("polling, cooldown"),
        ))
        for worker in work["workers"]:
            table.add_row(
                worker["name"], worker["model_service"],
                f"{worker['replicas']['min']}-{worker['replicas']['max']}", worker["list"],
                str(worker["jobs_per_replica"]),
                f"{worker['polling_interval_seconds']} s, {worker['cooldown_seconds']} s",
                heading=f"[bold]{worker['name']}[/bold] [dim](queue worker)[/dim]",
            )
        table.print(console)
    if work.get("batch_jobs"):
        table = Grid("Batch jobs (vLLM run-batch, admitted by Kueue)", (
            Column("batch job", "name"), Column("calls", "name", key="model service"), Column("pool", "name"),
            Column("runs"), Column("pods"), Column("input", "name"), Column("output", "name"),
        ))
        for job in work["batch_jobs"]:
            table.add_row(
                job["name"], job["model_service"], job["pool"], job["runs"], str(job["parallelism"]), job["input"],
                job["output"], heading=f"[bold]{job['name']}[/bold] [dim](batch job)[/dim]",
            )
        table.print(console)


def print_totals(plan: dict[str, Any], console: Console, warnings: Warnings | None = None) -> None:
    warnings, own = _own_warnings(warnings)
    totals = plan["totals"]
    floor = "at least " if totals["unpriced_pools"] else ""  # unpriced pools cost something, not $0
    say(console,
        f"[bold]Total[/bold]: up to {totals['gpus_max']} GPUs, {floor}{_usd(totals['usd_per_hour_min'])}/h at min "
        f"scale, {floor}{_usd(totals['usd_per_hour_max'])}/h at max scale ({totals['prices']}; "
        f"{totals['min_scale']}, spot fills the rest up to max)")
    if totals["unpriced_pools"]:
        say(console, f"unpriced (no price in {plan['region']}): {', '.join(totals['unpriced_pools'])}",
            indent=2)
    if totals["budget_usd_per_hour"] is not None:
        within = (totals["usd_per_hour_max"] or 0) <= totals["budget_usd_per_hour"]
        say(console, f"budget {_usd(totals['budget_usd_per_hour'])}/h: {'within' if within else '[red]OVER[/red]'}",
            indent=2)
        if not within:
            warnings.add("budget", f"{floor}{_usd(totals['usd_per_hour_max'])}/h at max scale is over the budget of "
                         f"{_usd(totals['budget_usd_per_hour'])}/h")
    if own:
        warnings.print(console)


def print_edge(edge: dict[str, Any], console: Console, warnings: Warnings) -> None:
    """The gateway's listener and who gets through it; plain HTTP or an open door is a warning."""
    say(console, "[bold]Endpoint[/bold]")
    say(console, f"listener: {edge['transport']}", indent=2, markup=False)
    say(console, f"authentication: {edge['authentication']}", indent=2, markup=False)
    if edge["tls_mode"] == "none":
        warnings.add("gateway", "clients reach the endpoint over plain HTTP (gateway.tls.mode 'none')")
    if edge["authentication"].startswith("none"):
        warnings.add("gateway", Text(f"authentication {edge['authentication']}"))
    say(console, f"fairness: {edge['fairness']}", indent=2, markup=False)
    if not edge["limits"]:
        return
    table = Grid("Tenant limits (per model service, per gateway pod) beside what its max replicas carry within the SLO",
                 (Column("tenant", "name"), Column("model", "name"), Column("requests/min", "figure"),
                  Column("tokens/min", "figure"), Column("capacity requests/min", "figure")))
    for limit in edge["limits"]:
        capacity = limit["capacity_requests_per_minute"]
        tokens = limit["tokens_per_minute"]
        table.add_row(limit["tenant"], limit["model"], f"{limit['requests_per_minute']:,}",
                  "-" if tokens is None else f"{tokens:,}",
                  "unknown (no traffic stated)" if capacity is None else f"{capacity:,.0f}")
    table.print(console)
    for service in edge["services"]:
        if service["exceeds_capacity"]:
            warnings.add("gateway", f"the tenants may send {service['model']} {service['admitted_requests_per_minute']:,} "
                         f"requests/min together ({service['gateway_pods']} gateway pod), more than its max replicas "
                         f"carry within the SLO ({service['capacity_requests_per_minute']:,.0f}/min): lower "
                         "requests_per_minute or raise max_replicas")


def _ms(value: float | None, missing: str = "unbounded") -> str:
    return missing if value is None else f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def print_throughput(estimates: dict[str, Any], console: Console, warnings: Warnings | None = None) -> None:
    """Per model at its stated traffic: replicas, latency, $/h and $/1M output tokens with the model's
    stated accuracy, then every assumption of the model."""
    warnings, own = _own_warnings(warnings)
    accuracy = estimates["accuracy"]
    table = Grid(
        f"Throughput and cost at the stated traffic (vLLM engine step model, {accuracy['stated']}; on-demand prices)",
        (Column("model", "name"), Column("traffic", "prose"), Column("replicas", "prose"),
         Column("per replica at traffic", "prose"), Column("at full load", "prose"), Column("$/h", "figure"),
         Column("$/1M out", "prose")),
    )
    for row in estimates["models"]:
        traffic = row["traffic"]
        asked = (
            f"{traffic['requests_per_second']:g} req/s x {traffic['mean_input_tokens']}->"
            f"{traffic['mean_output_tokens']} tok"
        )
        if traffic["shared_prefix_tokens"]:
            asked += f" ({traffic['shared_prefix_tokens']} shared)"
        heading = f"[bold]{row['model']}[/bold]"
        if "error" in row:
            table.add_row(row["model"], asked, f"[red]{_escape(row['error'])}[/red]", *[""] * 4, heading=heading)
            warnings.add(f"model {row['model']}", Text(f"no throughput estimate: {row['error']}"))
            continue
        replicas = keep(f"{row['replicas_needed']} (max {row['max_replicas']})")
        if row["replicas_for_slo"] is not None and row["replicas_for_slo"] > row["replicas_for_traffic"]:
            replicas += f"; {row['replicas_for_traffic']} without the SLO (sized on latency: see the accuracy above)"
        if row["slo_unreachable"]:
            replicas += f"\n[red]SLO unreachable: {_escape(row['slo_unreachable'])}[/red]"
            warnings.add(f"model {row['model']}", Text(f"SLO unreachable: {row['slo_unreachable']}"))
        if row["replicas_needed"] > row["max_replicas"]:
            replicas += "\n[red]raise max_replicas[/red]"
            warnings.add(f"model {row['model']}", f"its stated traffic needs {row['replicas_needed']} replicas, "
                         f"max_replicas is {row['max_replicas']}: raise max_replicas")
        at, full = row["at_traffic"], row["full_load"]
        at_full_load = row["usd_per_million_output_tokens_at_full_load"]
        table.add_row(
            row["model"], asked, replicas,
            f"{keep(format(at['tokens_per_second'], ',.0f') + ' tok/s')}, {keep('TTFT ' + _ms(at['ttft_ms']))}, "
            f"{keep('ITL ' + _ms(at['itl_ms'], 'n/a (one token)'))}",
            f"{keep(format(full['tokens_per_second'], ',.0f') + ' tok/s')} "
            f"({keep(format(full['running'], '.0f') + ' seqs')}, {full['limit']})",
            _usd(row["usd_per_hour"]),
            f"${row['usd_per_million_output_tokens']:.4f} {keep(f'(${at_full_load:.4f} at full load)')}"
            f"\n[dim]model: {_escape(row['confidence']['text'])}[/dim]",
            heading=heading,
        )
    table.print(console)
    say(console, f"in sample (on the points it was fitted to, never stated alone): {accuracy['in_sample']['short']}; "
        f"other engines ({accuracy['other_engines']['what']}): {accuracy['other_engines']['short']}", indent=2,
        markup=False)
    say(console, "assumptions of the throughput model:", indent=2)
    for assumption in estimates["assumptions"]:
        say(console, f"- {assumption['name']} = {assumption['value']}: {assumption['why']}", indent=4, markup=False)
    if own:
        warnings.print(console)


def print_scalers(scalers: list[dict[str, Any]], console: Console) -> None:
    """Each engine's KEDA trigger and threshold as the ScaledObject states it, and how it was derived."""
    say(console, "[bold]Scalers[/bold] (KEDA trigger per replica; derived from the throughput model with an slo and "
        "no stated metric or target)")
    for row in scalers:
        role = "" if row["engine"] == row["service"] else f" (of {row['service']})"
        say(console, f"{row['engine']}{role}: {row['trigger']} > {row['threshold']}: {row['derivation']}", indent=2,
            markup=False)


def _escape(value: Any) -> str:
    from rich.markup import escape

    return escape(str(value))


ROLLOUT_LABELS = {
    "surge": "surge 1 (a spare replica fits at max)",
    "one-at-a-time": "one at a time (no room at max)",
    "downtime": "[red]one at a time: downtime[/red]",
}


def print_rollouts(rollouts: dict[str, Any], console: Console, warnings: Warnings | None = None) -> None:
    """Per service: how an update replaces replicas, what it costs in serving, and how to wait for it."""
    warnings, own = _own_warnings(warnings)
    table = Grid(
        "Rollouts on update (from each pool's room at max size)",
        (Column("model", "name"), Column("workload", "name"), Column("strategy", "prose"),
         Column("maxSurge/maxUnavailable"), Column("pool free at max", "prose", joiner=","),
         Column("during an update", "prose")),
    )
    for row in rollouts["models"]:
        if row["downtime_seconds"] is not None:
            down = keep(f"down ~{duration(row['downtime_seconds'])}")
            effect = f"[red]{down}[/red] (one load time) while one replica runs"
            warnings.add(f"model {row['model']}", f"an update replaces its replicas one at a time with downtime: "
                         f"{down} (one load time) while one replica runs")
        elif row["strategy"] == "one-at-a-time":
            effect = f"one replica fewer for {keep('~' + duration(row['load_seconds']))} per replica"
        else:
            effect = "no capacity lost"
        free = ", ".join(keep(f"{count} {name.removeprefix('nvidia.com/')}")
                         for name, count in row["pool_free_at_max"].items())
        table.add_row(
            row["model"], row["workload"],
            keep(ROLLOUT_LABELS[row["strategy"]]) if row["strategy"] == "downtime" else ROLLOUT_LABELS[row["strategy"]],
            f"{row['max_surge']}/{row['max_unavailable']}", free, effect, heading=f"[bold]{row['model']}[/bold]",
        )
    table.print(console)
    say(console, f"pulumi up does not wait for rollouts: {rollouts['why']}", indent=2, markup=False)
    for row in rollouts["models"]:
        say(console, row["check"], indent=4, hang=4, markup=False, command=True)
    if own:
        warnings.print(console)


def print_interruption(interruption: dict[str, Any], console: Console, warnings: Warnings | None = None) -> None:
    """Spot interruptions: which services can get the two-minute notice, and whether their pods stop inside it."""
    if not interruption["spot_pools"]:
        return
    warnings, own = _own_warnings(warnings)
    services = ", ".join(interruption["services_on_spot"]) or "no model service"
    verdict = (
        f"{interruption['spare_seconds']} s to spare" if interruption["fits"]
        else "[red]longer than the notice[/red]"
    )
    say(console,
        f"Spot interruptions on {', '.join(interruption['spot_pools'])} ({services}): "
        f"{_escape(interruption['handled_by'])}; serving pods stop within their {interruption['grace_seconds']} s "
        f"grace period ({interruption['pre_stop_seconds']} s preStop included) of the "
        f"{interruption['notice_seconds']} s notice, {verdict}")
    if not interruption["fits"]:
        warnings.add("spot interruptions", f"serving pods on {', '.join(interruption['spot_pools'])} take up to "
                     f"{interruption['grace_seconds']} s to stop, longer than the {interruption['notice_seconds']} s "
                     "notice")
    if own:
        warnings.print(console)


def print_karpenter(karpenter: dict[str, Any], console: Console, warnings: Warnings) -> None:
    """Where system pods run under Karpenter; the account's spot role, a warning until the stack creates it."""
    say(console, f"System capacity: {karpenter['system_capacity']}", markup=False)
    if (role := karpenter["spot_service_linked_role"]) is not None:
        if karpenter["spot_service_linked_role_created"]:
            say(console, f"Spot: {role}", markup=False)
        else:
            warnings.add("spot NodePools", role)


def print_node_health(health: dict[str, Any], console: Console) -> None:
    """GPU node health: the agent that watches the GPUs, and per pool what happens when one of its nodes fails."""
    agent = health["agent"]
    say(console, f"GPU node health: {agent['addon']} {agent['version']} add-on" if agent
        else "GPU node health: no agent installed", markup=False)
    for pool in health["pools"]:
        say(console, f"{pool['pool']}: {pool['why']}; one node fails: {pool['one_node_fails']}", indent=2, markup=False)


def _steps(steps: Iterable[str]) -> str:
    """A chain of waits: it breaks after an arrow, never inside a step."""
    return f"{NBSP}-> ".join(steps)


def print_time_to_serving(times: dict[str, Any], console: Console, warnings: Warnings | None = None) -> None:
    """Per model: the longest chain of waits from an empty account, its lower bound, and the chain itself."""
    warnings, own = _own_warnings(warnings)
    table = Grid(
        "Time to serving from an empty account (first ready replica)",
        (Column("model", "name"), Column("program"), Column("lower bound"), Column("weights S3 / NVMe"),
         Column("first replica", "prose")),
    )
    for model in times["models"]:
        bound = duration(model["lower_bound_seconds"])
        if model["lower_bound_seconds"] < model["seconds"]:
            bound = f"[yellow]{bound}[/yellow]"
        note = "on its first request (scales from zero)" if model["scale_from_zero"] else "at deploy"
        table.add_row(
            model["model"], duration(model["seconds"]), bound,
            f"{duration(model['weights_load_seconds']['s3'])} / {duration(model['weights_load_seconds']['nvme'])}",
            note + ("; on a new GPU node" if model["new_node"] else ""), heading=f"[bold]{model['model']}[/bold]",
        )
    table.print(console)
    paths = [[step["name"] for step in model["critical_path"][:-1]] for model in times["models"]]
    shared = 0
    while all(len(path) > shared and path[shared] == paths[0][shared] for path in paths):
        shared += 1
    if len(paths) > 1 and shared:
        steps = [keep(f"{step['name']} {duration(step['seconds'])}")
                 for step in times["models"][0]["critical_path"][:shared]]
        say(console, f"critical path shared by every model: {_steps(steps)}", indent=2, markup=False)
    for model in times["models"]:
        own_steps = model["critical_path"][shared if len(paths) > 1 else 0:-1]
        steps = ["..."] if len(paths) > 1 and shared else []
        steps += [keep(f"{step['name']} {duration(step['seconds'])}") for step in own_steps]
        parts = ", ".join(keep(f"{REPLICA_PARTS[p['part']]} {duration(p['seconds'])}") for p in model["first_replica"])
        steps.append(f"{keep('first ready replica ' + duration(model['critical_path'][-1]['seconds']))} ({parts})")
        say(console, f"critical path to {model['model']}: " + _steps(steps), indent=2, markup=False)
    print_start_split(times["models"], console)
    if times["needless_edges"]:
        say(console, f"[yellow]{len(times['needless_edges'])} needless waits[/yellow] "
            "(not required by dependency_rule.DependencyRule):", indent=2)
        for edge in times["needless_edges"]:
            say(console, f"{edge['dependent']} waits for {edge['dependency']} ({edge['kind']})", indent=4,
                markup=False)
        warnings.add("time to serving", f"{len(times['needless_edges'])} needless waits (not required by "
                     "dependency_rule.DependencyRule), listed under the critical paths")
    else:
        say(console, "every wait in the program is required: its longest chains are the lower bound", indent=2)
    used = ", ".join(
        keep(f"{t['key']} {t['seconds']:g}{' GB/s' if t['key'].endswith('_gb_per_s') else ' s'} "
             f"({'measured' if t['measured'] else 'estimate'})")
        for t in times["creation_times"]
    )
    say(console, f"typical times (sources in components/planning/creation_times.py and plan.json): {used}",
        indent=2, markup=False)
    if own:
        warnings.print(console)


def print_start_split(models: list[dict[str, Any]], console: Console) -> None:
    """Per model: a replica's start on a new node and restarted on the node it ran on, phase by phase; the
    sources are the creation-time entries the plan lists."""
    table = Grid(
        "Replica start: cold (new node) / warm restart (node kept: image, weights, compile cache on NVMe)",
        (Column("model", "name"), Column("loader"), Column("start"), Column("total"),
         Column("node boot, image pull, weight copy, load, warm-up", "prose", key="phases", joiner=",")),
    )
    for model in models:
        for label, key in (("cold", "cold_start"), ("warm", "warm_restart")):
            parts = model[key]
            table.add_row(
                model["model"], model["weight_loader"], label, duration(sum(p["seconds"] for p in parts)),
                ", ".join(keep(f"{p['phase']} {duration(p['seconds'])}") for p in parts),
                heading=f"[bold]{model['model']}[/bold] [dim]({label} start)[/dim]",
            )
    table.print(console)


def print_policy_results(policies: list[dict[str, Any]], console: Console | None = None, passing: bool = True) -> None:
    """A summary line, one line per policy (passing ones only when `passing`), each violation under its policy."""
    console = console or PlanConsole()
    failed = [p for p in policies if p["violations"]]
    mandatory = sum(len(p["violations"]) for p in failed if p["enforcement"] == "mandatory")
    say(console,
        f"[bold]Policies[/bold] ({len(policies)}): {len(policies) - len(failed)} pass, "
        f"{mandatory} mandatory and {sum(len(p['violations']) for p in failed) - mandatory} advisory violations")
    for policy in policies:
        if not passing and not policy["violations"] and not policy.get("notes"):
            continue
        if policy["enforcement"] == "disabled":
            mark = "[dim]-[/dim]"
        elif not policy["violations"]:
            mark = "[green]ok[/green]"
        else:
            mark = "[red]FAIL[/red]" if policy["enforcement"] == "mandatory" else "[yellow]warn[/yellow]"
        say(console, f"{mark} {policy['name']} ({policy['enforcement']})", indent=2)
        for violation in policy["violations"]:
            where = f"{violation['resource']}: " if violation["resource"] else ""
            say(console, f"{where}{violation['message']}", indent=6, markup=False)
        for note in policy.get("notes", []):
            say(console, f"note: {note}", indent=6, markup=False, style="dim")
