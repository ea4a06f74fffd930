"""Parse PromQL and check every metric and label name it uses against what the pinned exporters write.

The facts (series per exporter, their labels, the labels each kind of scrape target adds) are data:
components/catalog/exporter_metrics.json names its upstream sources. The parser is promql-parser (Python bindings
of a Rust port of Prometheus's own PromQL parser). Label flow follows Prometheus's evaluation rules
(prometheus/prometheus promql/engine.go: aggregations keep only their `by` labels or drop their `without` labels;
one-to-one arithmetic keeps the `on` labels or drops the `ignoring` ones, group_left/right add the listed labels;
comparisons without `bool` and `and`/`unless` keep the left side's labels; histogram_quantile consumes `le`), so a
grouping or a `{{ $labels.x }}` on a label the series do not carry is caught even though PromQL itself accepts it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import promql_parser as pp

SERIES_NAME = "__name__"
# Functions whose result carries the labels of their (first) vector argument.
_LABEL_PRESERVING = frozenset(
    "abs ceil floor round exp ln log2 log10 sqrt sgn clamp clamp_min clamp_max sort sort_desc sort_by_label "
    "sort_by_label_desc rate irate increase delta idelta deriv predict_linear resets changes timestamp "
    "avg_over_time min_over_time max_over_time sum_over_time count_over_time quantile_over_time stddev_over_time "
    "stdvar_over_time last_over_time present_over_time mad_over_time double_exponential_smoothing holt_winters "
    "histogram_count histogram_sum histogram_avg histogram_stddev histogram_stdvar histogram_fraction "
    "day_of_month day_of_week day_of_year days_in_month hour minute month year deg rad sin cos tan asin acos atan "
    "sinh cosh tanh asinh acosh atanh".split()
)
_SET_OPERATORS = frozenset({"and", "or", "unless"})
_COMPARISONS = frozenset({"==", "!=", ">", "<", ">=", "<="})
_SCALAR_AGGREGATIONS = frozenset({"topk", "bottomk", "limitk", "limit_ratio"})  # keep the input's labels
_GRAFANA_INTERVALS = re.compile(r"\$__(rate_interval|interval|range)\b")
_LEGEND_LABEL = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_TEMPLATE_LABEL = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Series:
    """One series name some exporter writes, with every label it can carry once Prometheus has scraped it."""

    name: str
    exporter: str
    labels: frozenset[str]


@functools.cache
def catalog() -> dict[str, Any]:
    return json.loads(files("inferstack.catalog").joinpath("exporter_metrics.json").read_text(encoding="utf-8"))


def scraped_labels(exporter: dict[str, Any], written: Iterable[str]) -> frozenset[str]:
    """Labels on the stored series: the exporter's, renamed exported_<x> when they clash with a target label
    (honor_labels false), plus the target labels of its monitor kind."""
    target = set(catalog()["scrape_targets"][exporter["scraped_by"]])
    target |= {re.sub(r"[^a-zA-Z0-9_]", "_", label) for label in exporter.get("pod_target_labels", ())}
    if exporter.get("honor_labels", False):
        return frozenset(set(written) | target)
    return frozenset({f"exported_{label}" if label in target else label for label in written} | target)


@functools.cache
def series_index() -> dict[str, Series]:
    """Every series name the pinned exporters write, with its possible labels."""
    index = {}
    for exporter_name, exporter in catalog()["exporters"].items():
        conditional = set(exporter.get("conditional_labels", {}))
        for metric, facts in exporter["metrics"].items():
            written = set(facts.get("labels", exporter["labels"])) | conditional
            for suffix in exporter["series_suffixes"][facts["type"]]:
                labels = written | {"le"} if suffix == "_bucket" else written
                name = metric + suffix
                index[name] = Series(name, exporter_name, scraped_labels(exporter, labels))
    return index


@dataclass
class Analysis:
    """The result of checking one expression: label set of its value (None for a scalar or string) and problems."""

    labels: frozenset[str] | None
    metrics: set[str]
    problems: list[str]


def parse(expr: str) -> pp.Expr:
    """Parse PromQL, after replacing Grafana's interval variables with a duration (as Grafana does before sending)."""
    return pp.parse(_GRAFANA_INTERVALS.sub("5m", expr))


def _grouping(modifier: Any) -> tuple[str | None, list[str]]:
    if modifier is None:
        return None, []
    kind = "without" if str(modifier.type).endswith("Without") else "by"
    return kind, list(modifier.labels)


def _missing(labels: Iterable[str], available: frozenset[str] | None) -> list[str]:
    return sorted(set(labels) - (available or frozenset()))


class _Checker:
    def __init__(self, index: dict[str, Series]):
        self.index = index
        self.metrics: set[str] = set()
        self.problems: list[str] = []

    def complain(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)

    def require(self, labels: Iterable[str], available: frozenset[str] | None, where: str) -> None:
        missing = _missing(labels, available)
        if missing:
            known = ", ".join(sorted(available or ())) or "none"
            self.complain(f"{where} uses label(s) {', '.join(missing)} that its input does not carry (it has: {known})")

    def selector(self, node: pp.VectorSelector) -> frozenset[str] | None:
        name = node.name
        matchers = list(node.matchers.matchers) + [m for group in node.matchers.or_matchers for m in group]
        if not name:
            exact = [m.value for m in matchers if m.name == SERIES_NAME and str(m.op).endswith("Equal")]
            name = exact[0] if exact else None
        if not name:
            self.complain(f"selector {node} names no metric, so its labels cannot be checked")
            return None
        series = self.index.get(name)
        if series is None:
            self.complain(f"metric {name} is written by none of the pinned exporters")
            return None
        self.metrics.add(name)
        self.require([m.name for m in matchers if m.name != SERIES_NAME], series.labels, f"selector {name}")
        return series.labels

    def visit(self, node: Any) -> frozenset[str] | None:
        if isinstance(node, pp.VectorSelector):
            return self.selector(node)
        if isinstance(node, pp.MatrixSelector):
            return self.selector(node.vector_selector)
        if isinstance(node, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
            return self.visit(node.expr)
        if isinstance(node, (pp.NumberLiteral, pp.StringLiteral)):
            return None
        if isinstance(node, pp.Call):
            return self.call(node)
        if isinstance(node, pp.AggregateExpr):
            return self.aggregate(node)
        if isinstance(node, pp.BinaryExpr):
            return self.binary(node)
        self.complain(f"unhandled PromQL node {type(node).__name__}: {node}")
        return None

    def call(self, node: pp.Call) -> frozenset[str] | None:
        name = node.func.name
        args = list(node.args)
        labels = [self.visit(arg) for arg in args]
        vectors = [found for found in labels if found is not None]
        if name == "histogram_quantile":
            inner = labels[1]
            self.require(["le"], inner, "histogram_quantile")
            return frozenset((inner or frozenset()) - {"le"})
        if name in ("label_replace", "label_join"):
            strings = [arg.val for arg in args[1:] if isinstance(arg, pp.StringLiteral)]
            destination, sources = strings[0], strings[2:] if name == "label_join" else strings[2:3]
            self.require([s for s in sources if s], labels[0], name)
            return frozenset((labels[0] or frozenset()) | {destination})
        if name in ("vector", "absent", "absent_over_time"):
            return frozenset()
        if name in ("scalar", "time", "pi"):
            return None
        if name in _LABEL_PRESERVING:
            return vectors[0] if vectors else frozenset()
        self.complain(f"function {name}() is not modelled here; add its label rule to tests/promql_labels.py")
        return frozenset().union(*vectors) if vectors else None

    def aggregate(self, node: pp.AggregateExpr) -> frozenset[str]:
        op = str(node.op)
        inner = self.visit(node.expr)
        if node.param is not None:
            self.visit(node.param)
        kind, grouping = _grouping(node.modifier)
        self.require(grouping, inner, f"{op} {kind or 'by'} ({', '.join(grouping)})")
        inner = inner or frozenset()
        if op in _SCALAR_AGGREGATIONS:
            return inner
        if op == "count_values" and isinstance(node.param, pp.StringLiteral):
            extra = {node.param.val}
        else:
            extra = set()
        if kind == "without":
            return frozenset(inner - set(grouping) | extra)
        return frozenset(set(grouping) | extra)

    def binary(self, node: pp.BinaryExpr) -> frozenset[str] | None:
        left, right = self.visit(node.lhs), self.visit(node.rhs)
        op = str(node.op)
        if left is None or right is None:
            return left if right is None else right
        modifier = node.modifier
        matching = modifier.matching if modifier is not None else None
        on = matching is not None and str(matching.type).endswith("Include")
        match_labels = list(matching.labels) if matching is not None else []
        if on:
            self.require(match_labels, left, f"left side of {op} on ({', '.join(match_labels)})")
            self.require(match_labels, right, f"right side of {op} on ({', '.join(match_labels)})")
        elif match_labels:
            self.require(match_labels, left | right, f"{op} ignoring ({', '.join(match_labels)})")
        card = str(modifier.card) if modifier is not None else "OneToOne"
        group = list(modifier.group_labels) if modifier is not None and modifier.group_labels else []
        if "ManyToOne" in card:
            self.require(group, right, f"group_left ({', '.join(group)})")
            return frozenset(left | set(group))
        if "OneToMany" in card:
            self.require(group, left, f"group_right ({', '.join(group)})")
            return frozenset(right | set(group))
        if op in _SET_OPERATORS:
            return left | right if op == "or" else left
        if op in _COMPARISONS and not (modifier is not None and modifier.return_bool):
            return left
        if on:
            return frozenset(match_labels)
        return frozenset(left - set(match_labels))


def analyse(expr: str, index: dict[str, Series] | None = None) -> Analysis:
    """Parse `expr` and check its metric and label names; a parse error is a problem too."""
    checker = _Checker(index or series_index())
    try:
        tree = parse(expr)
    except ValueError as exc:
        return Analysis(None, set(), [f"does not parse: {exc}"])
    labels = checker.visit(tree)
    return Analysis(labels, checker.metrics, checker.problems)


def legend_labels(legend: str) -> list[str]:
    """Labels a Grafana legendFormat prints ({{label}})."""
    return _LEGEND_LABEL.findall(legend)


def template_labels(text: str) -> list[str]:
    """Labels a Prometheus alert template reads ($labels.x)."""
    return _TEMPLATE_LABEL.findall(text)
