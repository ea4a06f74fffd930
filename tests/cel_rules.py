"""Evaluate a CRD schema's CEL rules (``x-kubernetes-validations``) on an object, as the API server does on create.

Upstream semantics followed here (kubernetes/kubernetes, staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
schema/cel/validation.go and staging/src/k8s.io/apiserver/pkg/cel/escaping.go; the user-facing rules are in
https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules):

* a rule runs at the schema node that declares it, with ``self`` bound to that node's value, for every value the
  node applies to (each item of a list, each value of a map); a node whose value is absent runs no rules;
* a rule that mentions ``oldSelf`` is a transition rule: on create there is no old object, so it does not run
  (unless ``optionalOldSelf`` is set, which binds ``oldSelf`` to an empty optional - not supported here, reported);
* a rule that is false fails with ``messageExpression``'s value, else ``message``, else "failed rule: <rule>";
  a rule that errors (e.g. "no such key") fails too: the API server rejects the object either way;
* declared property names are escaped for CEL: reserved words become ``__word__`` (``self.__namespace__``),
  and ``__``, ``.``, ``-``, ``/`` become ``__underscores__``, ``__dot__``, ``__dash__``, ``__slash__``;
* strings with ``format: date-time`` / ``duration`` are timestamps / durations.

cel-python implements standard CEL; the Kubernetes and cel-go extension functions these schemas call are added
below (``EXTENSIONS``). A rule that calls any other function cannot be evaluated: it is reported, never skipped.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Iterator
from urllib.parse import urlsplit
from dataclasses import dataclass, field
from typing import Any

import celpy
import lark
import re2
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions

# Reserved words of the CEL lexer, escaped as __word__ when they name a property (escaping.go).
_CEL_RESERVED = frozenset(
    "true false null in as break const continue else for function if import let loop package namespace return "
    "var void while".split()
)
_ESCAPES = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
_ESCAPABLE = re.compile(r"[a-zA-Z_.\-/][a-zA-Z0-9_.\-/]*")
# CEL macros the parser expands (cel-spec langdef "Macros"); cel-python evaluates them itself.
_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})
# cel-python extras that are not CEL and not Kubernetes: a rule relying on them would not run on a cluster.
_NOT_KUBERNETES = frozenset({"reduce", "min"})


def _find(text: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.StringType:
    """Kubernetes regex library: the first RE2 match, or '' (k8s.io/apiserver/pkg/cel/library/regex.go)."""
    match = re2.search(str(pattern), str(text))
    return celtypes.StringType(match.group(0) if match else "")


def _find_all(text: celtypes.StringType, pattern: celtypes.StringType, limit: Any = None) -> celtypes.ListType:
    """Kubernetes regex library: every match, or the first `limit` of them when limit >= 0."""
    matches = [celtypes.StringType(m.group(0)) for m in re2.finditer(str(pattern), str(text))]
    if limit is not None and int(limit) >= 0:
        matches = matches[: int(limit)]
    return celtypes.ListType(matches)


def _split(text: celtypes.StringType, separator: celtypes.StringType, limit: Any = None) -> celtypes.ListType:
    """cel-go ext/strings split: Go strings.SplitN semantics (limit < 0: all; 0: none; n: at most n parts)."""
    if limit is not None and int(limit) == 0:
        return celtypes.ListType([])
    if str(separator) == "":
        parts = list(str(text))
    else:
        parts = str(text).split(str(separator))
    if limit is not None and int(limit) > 0 and len(parts) > int(limit):
        n = int(limit)
        parts = [*parts[: n - 1], str(separator).join(parts[n - 1 :])]
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _lower_ascii(text: celtypes.StringType) -> celtypes.StringType:
    return celtypes.StringType("".join(c.lower() if c.isascii() else c for c in str(text)))


def _upper_ascii(text: celtypes.StringType) -> celtypes.StringType:
    return celtypes.StringType("".join(c.upper() if c.isascii() else c for c in str(text)))


class _Url(celtypes.StringType):
    """A Kubernetes URL value: the string url() was given, known to parse."""


def _url(text: celtypes.StringType) -> _Url:
    """Kubernetes URL library (k8s.io/apiserver/pkg/cel/library/urls.go): url() accepts an absolute URI or an
    absolute path and errors on anything else."""
    parts = urlsplit(str(text))
    if not ((parts.scheme and parts.netloc) or str(text).startswith("/")):
        raise ValueError(f"URL parse error during conversion from string: {text!r}")
    return _Url(str(text))


def _get_scheme(value: celtypes.StringType) -> celtypes.StringType:
    """URL.getScheme(): the scheme, '' for an absolute path."""
    return celtypes.StringType(urlsplit(str(value)).scheme)


# The extension functions provided, by CEL name (method or global call).
EXTENSIONS = {
    "url": _url,
    "getScheme": _get_scheme,
    "find": _find,
    "findAll": _find_all,
    "split": _split,
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
}
SUPPORTED_FUNCTIONS = frozenset(
    {name for name in base_functions if name[:1].isalpha()} - _NOT_KUBERNETES | _MACROS | set(EXTENSIONS)
)


@dataclass(frozen=True)
class Rule:
    """One x-kubernetes-validations entry."""

    rule: str
    message: str | None = None
    message_expression: str | None = None
    field_path: str | None = None
    optional_old_self: bool = False

    @classmethod
    def from_schema(cls, entry: dict[str, Any]) -> Rule:
        return cls(
            rule=entry["rule"],
            message=entry.get("message"),
            message_expression=entry.get("messageExpression"),
            field_path=entry.get("fieldPath"),
            optional_old_self=bool(entry.get("optionalOldSelf", False)),
        )


@dataclass(frozen=True)
class Compiled:
    program: Any | None  # None when the rule cannot be evaluated
    is_transition: bool
    unsupported: frozenset[str]  # functions the rule calls that no library here provides
    compile_error: str | None = None

    @property
    def evaluable(self) -> bool:
        return self.program is not None


def _called_functions(tree: lark.Tree) -> Iterator[str]:
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg":
            yield str(node.children[1])
        elif node.data == "ident_arg":
            yield str(node.children[0])


def _identifiers(tree: lark.Tree) -> Iterator[str]:
    for node in tree.iter_subtrees():
        if node.data in ("ident", "ident_arg") and node.children:
            yield str(node.children[0])


@functools.cache
def _environment() -> celpy.Environment:
    return celpy.Environment()


@functools.cache
def compile_rule(text: str) -> Compiled:
    """Compile once per rule text; say why not when the rule cannot run here."""
    env = _environment()
    try:
        tree = env.compile(text)
    except celpy.CELParseError as exc:
        return Compiled(None, False, frozenset(), compile_error=str(exc).splitlines()[0])
    is_transition = "oldSelf" in set(_identifiers(tree))
    unsupported = frozenset(set(_called_functions(tree)) - SUPPORTED_FUNCTIONS)
    if unsupported:
        return Compiled(None, is_transition, unsupported)
    return Compiled(env.program(tree, functions=EXTENSIONS), is_transition, unsupported)


def escape_property(name: str) -> str | None:
    """The CEL field name Kubernetes gives a declared property, or None when CEL cannot reach it."""
    if not name or name[0].isdigit():
        return None
    if name in _CEL_RESERVED:
        return f"__{name}__"
    if not _ESCAPABLE.fullmatch(name):
        return None
    return re.sub(r"__|[./-]", lambda m: _ESCAPES[m.group(0)], name)


def _parse_timestamp(text: str) -> celtypes.TimestampType:
    return celtypes.TimestampType(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")))


def to_cel(value: Any, schema: dict[str, Any]) -> Any:
    """A JSON value as CEL sees it under `schema`: escaped property names, typed date-time/duration strings."""
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        if schema.get("format") == "date-time":
            return _parse_timestamp(value)
        if schema.get("format") == "duration":
            return celtypes.DurationType(value)
        return celtypes.StringType(value)
    if isinstance(value, list):
        item_schema = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        return celtypes.ListType([to_cel(item, item_schema) for item in value])
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else {}
        converted = {}
        for key, item in value.items():
            if key in properties:
                escaped = escape_property(key)
                if escaped is not None:
                    converted[celtypes.StringType(escaped)] = to_cel(item, properties[key])
            else:
                converted[celtypes.StringType(key)] = to_cel(item, extra)
        return celtypes.MapType(converted)
    raise TypeError(f"not a JSON value: {value!r}")


@dataclass(frozen=True)
class Violation:
    path: str
    message: str


@dataclass
class Outcome:
    """What evaluating one object did: rules run, transition rules left out (create), rules broken."""

    evaluated: int = 0
    transition_rules_skipped: int = 0
    violations: list[Violation] = field(default_factory=list)


def _message(rule: Rule, activation: dict[str, Any]) -> str:
    if rule.message_expression:
        compiled = compile_rule(rule.message_expression)
        if compiled.evaluable:
            try:
                text = compiled.program.evaluate(activation)
                if isinstance(text, str) and text.strip():
                    return str(text)
            except CELEvalError:
                pass  # the API server falls back to message, then to the rule, when messageExpression fails
    return rule.message or f"failed rule: {rule.rule}"


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


def _check(rule: Rule, value: Any, schema: dict[str, Any], path: str, outcome: Outcome) -> None:
    compiled = compile_rule(rule.rule)
    if compiled.is_transition and not rule.optional_old_self:
        outcome.transition_rules_skipped += 1  # there is no old object on create
        return
    where = path + (rule.field_path or "") or "(root)"
    if compiled.compile_error:
        outcome.violations.append(Violation(where, f"rule does not compile ({compiled.compile_error}): {rule.rule}"))
        return
    if compiled.unsupported or rule.optional_old_self:
        missing = ", ".join(sorted(compiled.unsupported)) or "optionalOldSelf"
        message = f"rule cannot be evaluated here (no implementation of {missing}): {rule.rule}"
        outcome.violations.append(Violation(where, message))
        return
    outcome.evaluated += 1
    activation = {"self": to_cel(value, schema)}
    try:
        result = compiled.program.evaluate(activation)
    except CELEvalError as exc:
        outcome.violations.append(Violation(where, f"error evaluating rule ({exc.args[0]}): {rule.rule}"))
        return
    if not isinstance(result, (bool, celtypes.BoolType)):
        outcome.violations.append(Violation(where, f"rule evaluated to {result!r}, not a bool: {rule.rule}"))
    elif not result:
        outcome.violations.append(Violation(where, _message(rule, activation)))


def evaluate(schema: dict[str, Any], value: Any) -> Outcome:
    """Run every CEL rule of `schema` on `value`, an object about to be created with its defaults applied."""
    outcome = Outcome()
    _walk(schema, value, "", outcome)
    return outcome


def _walk(schema: Any, value: Any, path: str, outcome: Outcome) -> None:
    if value is None or not isinstance(schema, dict):
        return
    for entry in schema.get("x-kubernetes-validations", ()):
        _check(Rule.from_schema(entry), value, schema, path, outcome)
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, item in value.items():
            if key in properties:
                _walk(properties[key], item, _join(path, key), outcome)
            elif isinstance(schema.get("additionalProperties"), dict):
                _walk(schema["additionalProperties"], item, _join(path, key), outcome)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _walk(schema["items"], item, _join(path, index), outcome)


def declared_rules(schema: Any, path: str = "") -> Iterator[tuple[str, Rule]]:
    """Every rule in a schema with the schema path that declares it (properties, items, additionalProperties)."""
    if not isinstance(schema, dict):
        return
    for entry in schema.get("x-kubernetes-validations", ()):
        yield path or "(root)", Rule.from_schema(entry)
    for key, sub in (schema.get("properties") or {}).items():
        yield from declared_rules(sub, _join(path, key))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from declared_rules(schema[key], f"{path}.{key}" if path else key)


def rules_under_combinators(schema: Any, inside: bool = False) -> int:
    """How many rules sit under allOf/anyOf/oneOf/not, where `evaluate` does not look (structural schemas forbid it)."""
    if isinstance(schema, list):
        return sum(rules_under_combinators(item, inside) for item in schema)
    if not isinstance(schema, dict):
        return 0
    count = len(schema.get("x-kubernetes-validations", ())) if inside else 0
    for key, sub in schema.items():
        if key != "x-kubernetes-validations":
            count += rules_under_combinators(sub, inside or key in ("allOf", "anyOf", "oneOf", "not"))
    return count
