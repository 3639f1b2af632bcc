"""A tenant's PromQL, confined to the tenant's namespace (pure).

The trainer runs every query of a PredictiveAutoscaler with foresight's own Prometheus access
and serves what it reads back to the object's namespace (``/api/v1/forecasts/<ns>/...``,
``predicted_<m>``, the status). So before a query leaves the operator, every vector selector
in it (those inside range selectors and subqueries included) is forced to
``namespace="<the object's namespace>"``, as prom-label-proxy does: the matcher is added when
absent, kept when it already names that namespace, and the query is refused when a selector
names another namespace or matches ``namespace`` with ``!=``, ``=~`` or ``!~`` (a regex could
match more than one namespace; prom-label-proxy would silently override it, which hides a
mistake from the author). Functions that rewrite labels afterwards (``label_replace``) only
rename what was read; they cannot widen what is read.

Parsing is promql-parser's (the Rust parser of Prometheus 2.45's grammar); the output is the
parser's own printer (``prettify``) of the transformed tree, parsed again and checked before it
is returned, so a printer bug refuses a query instead of running a wider one.
"""

from __future__ import annotations

import datetime as dt
import functools
import json

import promql_parser as pp

NAMESPACE_LABEL = "namespace"
_NOT_OURS = (KeyboardInterrupt, SystemExit, GeneratorExit)


class NotConfined(ValueError):
    """The query cannot be confined to the namespace: it does not parse, or it selects
    another namespace. The message says what to change."""


def parse(query: str) -> pp.Expr:
    """``promql_parser.parse``, every failure (a Rust panic included) as ``NotConfined``."""
    if not isinstance(query, str):
        raise NotConfined(f"must be a PromQL string, got {type(query).__name__}")
    if not query.strip():
        raise NotConfined("must not be empty")
    try:
        return pp.parse(query)
    except BaseException as exc:  # pyo3 panics derive from BaseException
        if isinstance(exc, _NOT_OURS):
            raise
        raise NotConfined(f"is not PromQL the operator can parse ({exc}); write it as Prometheus 2.45 accepts it "
                          "(raw `...` strings: use \"...\" with escapes)") from None


def selector_groups(expr: pp.Expr) -> list[tuple[str, list[pp.Matcher]]]:
    """Every vector selector of ``expr`` (range selectors' and subqueries' too) as
    (its text, the matchers of one alternative): one entry per ``or`` alternative."""
    out: list[tuple[str, list[pp.Matcher]]] = []

    def visit(node):
        if isinstance(node, pp.VectorSelector):
            out.extend((str(node), group) for group in _groups(node.matchers))

    pp.walk(expr, pre_visit=visit)
    return out


def _groups(ms: pp.Matchers) -> list[list[pp.Matcher]]:
    groups = [list(g) for g in ms.or_matchers]
    plain = list(ms.matchers)
    return groups + [plain] if plain or not groups else groups


def _confine_group(group: list[pp.Matcher], namespace: str, where: str, problems: list[str]) -> list[pp.Matcher]:
    mine = [m for m in group if m.name == NAMESPACE_LABEL]
    for m in mine:
        if m.op != pp.MatchOp.Equal:
            problems.append(f"{where} matches {m}: a selector may not match {NAMESPACE_LABEL} with !=, =~ or !~; "
                            f"remove the matcher (the operator adds {NAMESPACE_LABEL}=\"{namespace}\")")
        elif m.value != namespace:
            problems.append(f"{where} selects {m}, another namespace; a PredictiveAutoscaler in {namespace} reads only "
                            f"its own namespace: remove the matcher or set {NAMESPACE_LABEL}=\"{namespace}\"")
    rest = [m for m in group if m.name != NAMESPACE_LABEL]
    return rest + [pp.Matcher(pp.MatchOp.Equal, NAMESPACE_LABEL, namespace)]


_OPS = ((pp.MatchOp.Equal, "="), (pp.MatchOp.NotEqual, "!="), (pp.MatchOp.Re, "=~"), (pp.MatchOp.NotRe, "!~"))  # unhashable


def _op(op: pp.MatchOp) -> str:
    return next(text for o, text in _OPS if o == op)


def _selector_text(node: pp.VectorSelector, matchers: list[pp.Matcher]) -> str:
    """``node`` with ``matchers``, as PromQL. Printed here and parsed again because the binding
    neither carries a matcher list set from Python into prettify() nor escapes quotes in str()
    (``a="x\\"y"`` would come out as ``a="x"y"``)."""
    # a JSON string is a PromQL double-quoted string (Go escapes); raw UTF-8 for non-ASCII,
    # since Go's \u escapes take no surrogate pairs
    body = ",".join(f"{m.name}{_op(m.op)}{json.dumps(m.value, ensure_ascii=False)}" for m in matchers)
    text = f"{node.name or ''}{{{body}}}"
    if node.at is not None:
        at = node.at
        text += " @ " + ("start()" if at.type == pp.AtModifierType.Start else "end()" if at.type == pp.AtModifierType.End
                         else f"{_at_seconds(at):.3f}")
    if node.offset is not None:
        off = node.offset
        text += " offset " + (f"-{pp.display_duration(-off)}" if off < dt.timedelta(0) else pp.display_duration(off))
    return text


def _at_seconds(at: pp.AtModifier) -> float:
    try:
        when = at.at
        if when is None:
            raise ValueError("the @ modifier names no time")
        return when.timestamp()
    except BaseException as exc:  # the binding panics on a time before 1970
        if isinstance(exc, _NOT_OURS):
            raise
        raise NotConfined("uses @ with a time before 1970; give a Unix time after 1970, or start() or end()") from None


# Every pass parses every object (twice: the runner, then reconcile_autoscaler), and parsing,
# confining and checking one query costs about a millisecond: at 10,000 autoscalers that would be
# most of a pass. A query is confined again only when its text or namespace changes. Bounded:
# 8,192 entries of at most 4,096 characters each way (the CRD's maxLength); refusals are not kept.
CACHE_ENTRIES = 8192


def confine(query: str, namespace: str) -> str:
    """``query`` with every selector confined to ``namespace``; raises NotConfined."""
    if not isinstance(query, str) or not isinstance(namespace, str):
        raise NotConfined(f"must be a PromQL string, got {type(query).__name__}")
    return _confine(query, namespace)


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def _confine(query: str, namespace: str) -> str:
    expr = parse(query)
    problems: list[str] = []

    def visit(node):
        if not isinstance(node, pp.VectorSelector):
            return None
        where = f"selector {node}"
        groups = _groups(node.matchers)
        if len(groups) > 1:
            # the binding prints `{a="1" or b="2"}` as `{ or a="1" or b="2"}`, which does not parse
            problems.append(f"{where} uses `or` between matchers; write it as two selectors joined by the `or` "
                            "operator (x{a=\"1\"} or x{b=\"2\"})")
            return None
        try:
            text = _selector_text(node, _confine_group(groups[0], namespace, where, problems))
        except NotConfined as exc:
            problems.append(f"{where} {exc}")
            return None
        try:
            return parse(text)
        except NotConfined as exc:
            problems.append(f"{where} could not be confined ({text} {exc}); please report it with the query")
            return None

    try:
        out = pp.transform(expr, post_visit=visit)
    except BaseException as exc:  # the binding's own failure: refuse, never pass through
        if isinstance(exc, _NOT_OURS):
            raise
        raise NotConfined(f"could not be confined ({type(exc).__name__}: {exc}); please report it with the query") from None
    if problems:
        raise NotConfined("; ".join(dict.fromkeys(problems)))
    # prettify, not str(): str() drops the ':' of a subquery without a step ([1h:] -> [1h]);
    # prettify breaks a query longer than 100 characters over lines, which PromQL allows
    text = out.prettify()
    _check(text, namespace)
    return text


def _check(text: str, namespace: str) -> None:
    """The printed query parses and every selector alternative carries exactly one namespace
    matcher, ours (a defence against a printer that drops a matcher)."""
    try:
        groups = selector_groups(parse(text))
    except NotConfined as exc:
        raise NotConfined(f"could not be confined: the confined query does not parse back ({exc}); "
                          "please report it with the query") from None
    for sel, group in groups:
        ns = [m for m in group if m.name == NAMESPACE_LABEL]
        if len(ns) != 1 or ns[0].op != pp.MatchOp.Equal or ns[0].value != namespace:
            raise NotConfined(f"could not be confined: {sel} lost its {NAMESPACE_LABEL} matcher when printed; "
                              "please report it with the query")
