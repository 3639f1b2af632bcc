"""A tenant's PromQL confined to its namespace (kubeoperator.promql): every selector of a
realistic corpus gains namespace="<ns>" and nothing else changes (compared on the parsed trees,
not on a printer), a query that names another namespace or matches it by
regex is refused with the fix, and generated queries and label values never crash it."""

from __future__ import annotations

import json

import promql_parser as pp
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kubeoperator.promql import NotConfined, confine, parse, selector_groups

NS = "shop"

# (what a tenant writes, what the trainer runs: the parser's own printer, prettify)
CORPUS = [
    ("rate(http_requests_total[5m])", 'rate(http_requests_total{namespace="shop"}[5m])'),
    ('sum by (pod) (rate(container_cpu_usage_seconds_total{container!=""}[5m]))',
     'sum by (pod) (rate(container_cpu_usage_seconds_total{container!="",namespace="shop"}[5m]))'),
    ('label_replace(up{job="api"}, "foo", "$1", "instance", "(.*):.*")',
     'label_replace(up{job="api",namespace="shop"}, "foo", "$1", "instance", "(.*):.*")'),
    ("http_requests_total offset 5m", 'http_requests_total{namespace="shop"} offset 5m'),
    ("rate(http_requests_total[5m] offset -1h)", 'rate(http_requests_total{namespace="shop"}[5m] offset -1h)'),
    ("http_requests_total @ 1609746000", 'http_requests_total{namespace="shop"} @ 1609746000.000'),
    ("rate(x[5m] @ end())", 'rate(x{namespace="shop"}[5m] @ end())'),
    ("max_over_time(rate(x[1m])[30m:1m])", 'max_over_time(rate(x{namespace="shop"}[1m])[30m:1m])'),
    ("max_over_time(deriv(x[5m])[1h:] offset 5m)", 'max_over_time(deriv(x{namespace="shop"}[5m])[1h:] offset 5m)'),
    ("a / on(pod) group_left(node) b", 'a{namespace="shop"} / on (pod) group_left (node) b{namespace="shop"}'),
    ("a * ignoring(code) group_right b", 'a{namespace="shop"} * ignoring (code) group_right () b{namespace="shop"}'),
    ("errors > bool 3", 'errors{namespace="shop"} > bool 3'),
    ("sum(a) + 1.5e3", 'sum(a{namespace="shop"}) + 1500'),
    ("topk(3, sum by (pod) (rate(x[5m])))", 'topk(3, sum by (pod) (rate(x{namespace="shop"}[5m])))'),
    ("quantile(0.9, x)", 'quantile(0.9, x{namespace="shop"})'),
    ('count_values("v", x)', 'count_values("v", x{namespace="shop"})'),
    ("sum without (instance) (x)", 'sum without (instance) (x{namespace="shop"})'),
    ("-x", '-x{namespace="shop"}'),
    ("vector(1)", "vector(1)"),
    ("time() - x", 'time() - x{namespace="shop"}'),
    ('{__name__=~"queue_.*", job="a"}', '{__name__=~"queue_.*",job="a",namespace="shop"}'),
    ('histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket[5m])))',
     # longer than 100 characters: the parser's printer breaks it over lines, which PromQL allows
     'histogram_quantile(\n  0.99,\n  sum by (le) (rate(http_request_duration_seconds_bucket{namespace="shop"}[5m]))\n)'),
    ("x and on() y", 'x{namespace="shop"} and on () y{namespace="shop"}'),
    ("x unless y or z", 'x{namespace="shop"} unless y{namespace="shop"} or z{namespace="shop"}'),
    ('x{a="quote\\"d",b="new\\nline"}', 'x{a="quote\\"d",b="new\\nline",namespace="shop"}'),
    ("x{a='single'}", 'x{a="single",namespace="shop"}'),
    ("(x + y) * 2", '(x{namespace="shop"} + y{namespace="shop"}) * 2'),
    ('absent(up{job="api"})', 'absent(up{job="api",namespace="shop"})'),
    ('sum(rate(http_requests_total{namespace="shop"}[2m]))', 'sum(rate(http_requests_total{namespace="shop"}[2m]))'),
    ('x{namespace="shop",namespace="shop"}', 'x{namespace="shop"}'),
    ("scalar(sum(x)) * vector(2)", 'scalar(sum(x{namespace="shop"})) * vector(2)'),
    ("x offset 1y2w @ start()", 'x{namespace="shop"} @ start() offset 379d'),
    ("rate(x[5m] @ 1.0005 offset -1m)", 'rate(x{namespace="shop"}[5m] @ 1.001 offset -1m)'),
    ('x{a="\u00e9\x41\U0001F600"}', 'x{a="éA😀",namespace="shop"}'),
    ('"a string"', '"a string"'),
    ("42", "42"),
]

def canon(node, ns: str = NS):
    """A printer-independent form of a parsed query (nested tuples from the binding's own
    attributes) with every namespace="<ns>" matcher dropped and matchers as a set (their
    order means nothing, and the parser's printer sorts them)."""
    if isinstance(node, str):
        node = pp.parse(node)
    if node is None or isinstance(node, (int, float, str, bool)):
        return node
    t = type(node).__name__
    if isinstance(node, pp.VectorSelector):
        ms = frozenset((m.name, str(m.op), m.value) for m in node.matchers.matchers
                       if not (m.name == "namespace" and m.op == pp.MatchOp.Equal and m.value == ns))
        at = (str(node.at.type), node.at.at) if node.at is not None else None
        return t, node.name, ms, node.offset, at
    if isinstance(node, pp.MatrixSelector):
        return t, canon(node.vector_selector, ns), node.range
    if isinstance(node, pp.Call):
        return t, node.func.name, tuple(canon(a, ns) for a in node.args)
    if isinstance(node, pp.AggregateExpr):
        mod = (str(node.modifier.type), tuple(node.modifier.labels)) if node.modifier is not None else None
        return t, str(node.op), canon(node.param, ns), mod, canon(node.expr, ns)
    if isinstance(node, pp.BinaryExpr):
        m = node.modifier
        mod = None if m is None else (str(m.card), m.return_bool, tuple(m.group_labels or ()), None if m.matching is None
                                      else (str(m.matching.type), tuple(m.matching.labels)))
        return t, str(node.op), mod, canon(node.lhs, ns), canon(node.rhs, ns)
    if isinstance(node, pp.SubqueryExpr):
        at = (str(node.at.type), node.at.at) if node.at is not None else None
        return t, canon(node.expr, ns), node.range, node.step, node.offset, at
    if isinstance(node, (pp.ParenExpr, pp.UnaryExpr)):
        return t, canon(node.expr, ns)
    if isinstance(node, (pp.NumberLiteral, pp.StringLiteral)):
        return t, repr(node.val)
    raise AssertionError(f"no canonical form for {t}")


def assert_confined(text: str, ns: str = NS) -> None:
    groups = selector_groups(parse(text))
    for sel, group in groups:
        mine = [m for m in group if m.name == "namespace"]
        assert [(m.op, m.value) for m in mine] == [(pp.MatchOp.Equal, ns)], sel


@pytest.mark.parametrize("query, want", CORPUS, ids=[q for q, _ in CORPUS])
def test_every_selector_of_a_realistic_query_gains_the_namespace_and_nothing_else_changes(query, want):
    got = confine(query, NS)
    assert got == want
    assert_confined(got)
    # printer-independent: the parsed trees differ by our matchers only
    assert canon(got) == canon(query)


def test_confining_twice_changes_nothing_more():
    for query, _ in CORPUS:
        once = confine(query, NS)
        assert confine(once, NS) == once


@pytest.mark.parametrize("query, words", [
    ('x{namespace="other"}', ['namespace="other"', "another namespace", 'namespace="shop"']),
    ('rate(x{namespace="kube-system"}[5m])', ['namespace="kube-system"', "remove the matcher"]),
    ('x{namespace=~"shop|bank"}', ["=~", "remove the matcher"]),
    ('x{namespace!="shop"}', ["!="]),
    ('x{namespace!~"shop"}', ["!~"]),
    ('x{namespace=""}', ['namespace=""', "another namespace"]),
    ('sum(a) / sum(b{namespace="bank"})', ['namespace="bank"']),
    ('max_over_time(x{namespace="bank"}[1h:5m])', ['namespace="bank"']),
    ('x{a="1" or b="2"}', ["`or`", "two selectors"]),
    ("x @ -1", ["before 1970"]),  # the binding panics reading such a time: refused, not crashed
], ids=["other", "other-in-range", "regex", "not-equal", "not-regex", "empty", "one-side-of-a-binary",
        "in-a-subquery", "or-matchers", "at-before-1970"])
def test_a_query_reaching_outside_its_namespace_is_refused_with_the_fix(query, words):
    with pytest.raises(NotConfined) as e:
        confine(query, NS)
    for w in words:
        assert w in str(e.value), str(e.value)


@pytest.mark.parametrize("query", ["", "   ", "sum(", "x{", "rate(x[5m]", "x{a=`raw\\d`}", "foo(bar)", "x[5m] +"])
def test_what_the_parser_cannot_read_is_refused_not_passed_through(query):
    with pytest.raises(NotConfined) as e:
        confine(query, NS)
    assert str(e.value)


# ------------------------------------------------------------------ generated queries

namespaces = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
label_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True).filter(lambda s: s != "namespace")
label_values = st.text(max_size=12)
metric_names = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,10}", fullmatch=True).filter(
    lambda s: s not in ("bool", "on", "ignoring", "group_left", "group_right", "offset", "by", "without", "and", "or",
                        "unless", "atan2", "inf", "nan") and s.lower() not in ("inf", "nan"))
durations = st.sampled_from(["30s", "1m", "5m", "1h", "1h30m", "2d"])


def _quote(v: str) -> str:
    return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid PromQL double-quoted string


@st.composite
def selectors(draw, ns_matchers):
    name = draw(metric_names)
    ms = [f"{draw(label_names)}{draw(st.sampled_from(['=', '!=', '=~', '!~']))}{_quote(draw(label_values))}"
          for _ in range(draw(st.integers(0, 2)))]
    ms += draw(ns_matchers)
    sel = f"{name}{{{','.join(ms)}}}" if ms else name
    if draw(st.booleans()):
        sel += " @ " + draw(st.sampled_from(["start()", "end()"]) | st.integers(0, 4_000_000_000).map(str))
    if draw(st.booleans()):
        sel += f" offset {draw(st.sampled_from(['', '-']))}{draw(durations)}"
    return sel


@st.composite
def queries(draw, ns_matchers=st.just([])):
    def leaf():
        return draw(selectors(ns_matchers))

    def expr(depth):
        kind = draw(st.sampled_from(["sel", "rate", "agg", "bin", "sub", "num", "topk", "label_replace"]
                                    if depth < 3 else ["sel", "num"]))
        if kind == "sel":
            return leaf()
        if kind == "num":
            return repr(draw(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)))
        if kind == "rate":
            return f"{draw(st.sampled_from(['rate', 'increase', 'avg_over_time']))}({leaf()}[{draw(durations)}])"
        if kind == "agg":
            by = draw(st.lists(label_names, max_size=2))
            mod = f" {draw(st.sampled_from(['by', 'without']))} ({', '.join(by)})" if by else ""
            return f"{draw(st.sampled_from(['sum', 'max', 'avg', 'count']))}{mod} ({expr(depth + 1)})"
        if kind == "topk":
            return f"topk({draw(st.integers(1, 5))}, {expr(depth + 1)})"
        if kind == "label_replace":
            return f'label_replace({expr(depth + 1)}, "dst", "$1", "src", "(.*)")'
        if kind == "sub":
            return f"max_over_time(({expr(depth + 1)})[{draw(durations)}:1m])"
        op = draw(st.sampled_from(["+", "-", "*", "/", "and", "or", "unless", ">"]))
        match = draw(st.sampled_from(["", " on (pod)", " ignoring (code)"]))
        if match and op not in ("and", "or", "unless") and draw(st.booleans()):
            match += " group_left"
        return f"({expr(depth + 1)}) {op}{match} ({expr(depth + 1)})"

    return expr(0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(q=queries(), ns=namespaces)
def test_a_generated_query_comes_out_parsed_with_exactly_its_namespace_on_every_selector(q, ns):
    try:
        pp.parse(q)
    except ValueError:
        return  # a generated text the grammar refuses: covered by the refusal tests
    got = confine(q, ns)
    assert_confined(got, ns)
    assert canon(got, ns) == canon(q, ns)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), ns=namespaces, other=label_values)
def test_a_generated_query_naming_any_other_namespace_anywhere_is_refused(data, ns, other):
    op = data.draw(st.sampled_from(["=", "!=", "=~", "!~"]))
    if op == "=" and other == ns:
        other += "x"
    bad = f"namespace{op}{_quote(other)}"
    q = data.draw(queries(ns_matchers=st.sampled_from([[], [], [bad]])))
    try:
        pp.parse(q)
    except ValueError:
        return
    if bad not in q:
        assert_confined(confine(q, ns), ns)
        return
    with pytest.raises(NotConfined):
        confine(q, ns)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=80), ns=namespaces)
def test_any_text_is_confined_or_refused_never_a_crash(text, ns):
    try:
        got = confine(text, ns)
    except NotConfined as exc:
        assert str(exc)
        return
    assert_confined(got, ns)


def test_a_query_is_confined_once_while_its_text_and_namespace_stay_the_same():
    from kubeoperator import promql

    promql._confine.cache_clear()
    q = 'sum(rate(http_requests_total{job="cache-test"}[2m]))'
    first = confine(q, NS)
    assert confine(q, NS) is first and promql._confine.cache_info().hits == 1
    assert confine(q, "bank") == first.replace('"shop"', '"bank"')  # another namespace: its own entry
    with pytest.raises(NotConfined):
        confine(["not", "a", "string"], NS)  # type: ignore[arg-type]
