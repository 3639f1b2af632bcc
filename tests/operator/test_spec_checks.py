"""The operator's own checks of PredictiveAutoscaler and WarmPool objects (kubeoperator.checks):
every field it reads is checked with its path, not trusted to the CRD schema; a WarmPool follows
only its own namespace's forecasts; pool ids cannot collide. Generated objects (hypothesis):
parsing either yields a spec that the rest of the pure pipeline takes without an exception, or
SpecError whose every problem starts with a field path near the field that was broken."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from kubeoperator.checks import INVALID_SPEC, QUERY_NOT_CONFINED, SpecError
from kubeoperator.reconcile import reconcile_autoscaler
from kubeoperator.render import render_trainer_config, render_warmpool_policy
from kubeoperator.spec import parse_autoscaler, parse_warmpool

NOW = 1_700_000_000.0
PA = {
    "apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
    "metadata": {"name": "checkout", "namespace": "shop", "uid": "u-1", "generation": 3},
    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "checkout"},
             "minReplicas": 2, "maxReplicas": 50,
             "reactiveFloor": {"enabled": True, "averageUtilization": 70},
             "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.5},
                         {"name": "rps", "type": "Demand", "query": 'sum(rate(http_requests_total{job="checkout"}[2m]))',
                          "capacityPerReplica": 40}],
             "serving": {"sloMinutesPerDay": 4, "targetValue": 0.7, "sloUtilization": 0.8},
             "mode": "Observe", "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                                       "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}},
}
WP = {"apiVersion": "foresight.dev/v1alpha1", "kind": "WarmPool",
      "metadata": {"name": "checkout", "namespace": "shop", "generation": 1},
      "spec": {"workload": "checkout", "series": "shop/checkout", "minWarm": 1, "maxWarm": 5, "backend": "sim",
               "idleTTL": {"initialSeconds": 120, "decay": 0.15, "floorSeconds": 30},
               "idleModel": {"enabled": True}, "demand": "both",
               "requestRate": {"series": "shop/checkout/rps", "concurrencyPerContainer": 20},
               "template": {"image": "busybox", "command": ["sleep", "3600"], "resources": {"memory": "64Mi"}}}}
BASE = {"apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
        "source": {"url": "prometheus://prometheus:9090"}, "store": {"url": "redis://redis:6379/0"}, "workloads": []}
PATH = re.compile(r"(<object>|metadata|spec)(\.[A-Za-z]+|\[\d+\])*: \S")


def _with(obj: dict, path: str, value) -> dict:
    out = copy.deepcopy(obj)
    node = out
    *parents, leaf = re.findall(r"[A-Za-z]+|\d+", path)
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if value is _DELETE:
        del node[int(leaf) if leaf.isdigit() else leaf]
    else:
        node[int(leaf) if leaf.isdigit() else leaf] = value
    return out


_DELETE = object()


def _problems(fn, obj) -> SpecError:
    with pytest.raises(SpecError) as e:
        fn(obj)
    for p in e.value.problems:
        assert PATH.match(p), p
    return e.value


@pytest.mark.parametrize("path, value, want", [
    ("spec.maxReplicas", _DELETE, "spec.maxReplicas: is required"),
    ("spec.maxReplicas", "ten", "spec.maxReplicas: must be an integer, got str 'ten'"),
    ("spec.maxReplicas", 1.5, "spec.maxReplicas: must be an integer"),
    ("spec.maxReplicas", True, "spec.maxReplicas: must be an integer, got bool"),
    ("spec.maxReplicas", 1, "spec.minReplicas: 2 must be <= spec.maxReplicas (1)"),
    ("spec.minReplicas", 0, "spec.minReplicas: 0 needs spec.scaler: KEDA"),
    ("spec.minReplicas", -1, "spec.minReplicas: -1 must be in [0, "),
    ("spec.scaler", "Knative", "spec.scaler: 'Knative' must be one of HPA, KEDA"),
    ("spec", _DELETE, "spec: is required"),
    ("spec", [], "spec: must be an object, got list"),
    ("spec.scaleTargetRef", _DELETE, "spec.scaleTargetRef: is required"),
    ("spec.scaleTargetRef.name", "Checkout", "spec.scaleTargetRef.name: 'Checkout' must be the name of"),
    ("spec.scaleTargetRef.kind", "Pod", "spec.scaleTargetRef.kind: 'Pod' must be one of Deployment"),
    ("spec.mode", "Sometimes", "spec.mode: 'Sometimes' must be one of Act, Observe"),
    ("spec.reactiveFloor.averageUtilization", "70%", "spec.reactiveFloor.averageUtilization: must be an integer"),
    ("spec.reactiveFloor.enabled", "yes", "spec.reactiveFloor.enabled: must be true or false"),
    ("spec.serving", "fast", "spec.serving: must be an object"),
    ("spec.serving.targetValue", "70%", "spec.serving.targetValue: must be a finite number"),
    ("spec.behavior.scaleDown.policies.0.periodSeconds", 0, "spec.behavior.scaleDown.policies[0].periodSeconds: 0 must"),
    ("spec.behavior.scaleDown.selectPolicy", "Sometimes", "spec.behavior.scaleDown.selectPolicy: 'Sometimes' must be"),
    ("spec.metrics", [], "spec.metrics: must be a list of 1 to 8 metrics"),
    ("spec.metrics.0", "cpu", "spec.metrics[0]: must be an object"),
    ("spec.metrics.0.type", "Memory", "spec.metrics[0].type: 'Memory' must be one of Resource, Demand"),
    ("spec.metrics.0.cpuRequestCores", -1, "spec.metrics[0].cpuRequestCores: -1 must be in (0, inf]"),
    ("spec.metrics.1.capacityPerReplica", float("nan"), "spec.metrics[1].capacityPerReplica: must be a finite number"),
    ("spec.metrics.1.capacityPerReplica", 10**400, "spec.metrics[1].capacityPerReplica: must be a finite number"),
    ("spec.metrics.1.query", _DELETE, "spec.metrics[1].query: is required"),
    ("spec.metrics.1.query", "  ", "spec.metrics[1].query: must not be empty"),
    ("spec.metrics.1.query", "x" * 4097, "spec.metrics[1].query: is 4097 characters; at most 4096"),
    ("spec.metrics.1.name", "cpu", "spec.metrics[1].name: 'cpu': a Demand metric's name"),
    ("spec.metrics.1.name", "rps_ratio", "spec.metrics[1].name: 'rps_ratio'"),
    ("spec.metrics.1.type", "Resource", "spec.metrics: at most one Resource metric"),
    ("metadata.namespace", _DELETE, "metadata.namespace: is required"),
    ("metadata.generation", "3", "metadata.generation: must be an integer"),
])
def test_a_bad_field_of_an_autoscaler_is_refused_with_its_path_and_what_to_do(path, value, want):
    err = _problems(parse_autoscaler, _with(PA, path, value))
    assert any(p.startswith(want) for p in err.problems), err.problems
    assert err.reason == INVALID_SPEC


def test_every_problem_is_reported_at_once():
    obj = _with(_with(_with(PA, "spec.maxReplicas", "x"), "spec.mode", "On"), "spec.metrics.1.query", 'x{namespace="a"}')
    err = _problems(parse_autoscaler, obj)
    assert [p.split(":")[0] for p in err.problems] == ["spec.mode", "spec.maxReplicas", "spec.metrics[1].query"]
    assert err.reason == QUERY_NOT_CONFINED  # a query among them: the reason says so


def test_a_query_of_another_namespace_is_refused_as_not_confined_with_the_field_path():
    err = _problems(parse_autoscaler, _with(PA, "spec.metrics.1.query", 'sum(rate(x{namespace="bank"}[5m]))'))
    (p,) = err.problems
    assert p.startswith('spec.metrics[1].query: selector x{namespace="bank"} selects namespace="bank"')
    assert 'set namespace="shop"' in p and err.reason == QUERY_NOT_CONFINED


def test_the_trainer_gets_the_confined_query_and_the_status_path_is_unchanged():
    pa = parse_autoscaler(PA)
    assert pa.metrics[1].query == 'sum(rate(http_requests_total{job="checkout",namespace="shop"}[2m]))'
    cfg = yaml.safe_load(render_trainer_config(BASE, [pa]).text)
    assert cfg["workloads"][0]["metrics"][0]["query"] == pa.metrics[1].query


@pytest.mark.parametrize("path, value, want", [
    ("spec.series", "bank/payments", "spec.series: 'bank/payments' is a forecast of namespace 'bank'"),
    ("spec.requestRate.series", "bank/payments/rps", "spec.requestRate.series: 'bank/payments/rps' is a forecast of"),
    ("spec.series", "payments", "spec.series: 'payments' must be a forecast series id like <namespace>/<workload>"),
    ("spec.series", 7, "spec.series: must be a string"),
    ("spec.workload", _DELETE, "spec.workload: is required"),
    ("spec.workload", "Web", "spec.workload: 'Web' must be a workload name"),
    ("spec.template", "busybox", "spec.template: must be an object"),
    ("spec.idleTTL", [120], "spec.idleTTL: must be an object"),
    ("spec.requestRate", "20/s", "spec.requestRate: must be an object"),
    ("metadata.name", "a" * 60, "metadata.name: the pool id 'shop."),
])
def test_a_bad_field_of_a_warm_pool_is_refused_with_its_path(path, value, want):
    err = _problems(parse_warmpool, _with(WP, path, value))
    assert any(p.startswith(want) for p in err.problems), err.problems


def test_a_warm_pool_follows_its_own_namespaces_forecasts():
    pool = parse_warmpool(WP).to_policy_pool()
    assert (pool["name"], pool["series"], pool["request_rate"]["series"]) == (
        "shop.checkout", "shop/checkout", "shop/checkout/rps")


def test_pool_ids_of_objects_whose_dashed_names_used_to_collide_are_distinct_and_both_run():
    """``a/b-c`` and ``a-b/c`` were both ``a-b-c``: the second was refused as a duplicate."""
    from warmpool.policy import parse_policy

    one = _with(_with(_with(WP, "metadata.namespace", "a"), "metadata.name", "b-c"), "spec.series", _DELETE)
    two = _with(_with(_with(WP, "metadata.namespace", "a-b"), "metadata.name", "c"), "spec.series", _DELETE)
    one["spec"]["requestRate"]["series"], two["spec"]["requestRate"]["series"] = "a/w/rps", "a-b/w/rps"
    r = render_warmpool_policy(None, [parse_warmpool(one), parse_warmpool(two)])
    assert r.problems == {}
    assert sorted(p.name for p in parse_policy(yaml.safe_load(r.text)).pools) == ["a-b.c", "a.b-c"]


def test_a_pool_id_decodes_to_exactly_one_object():
    """The first '.' ends the namespace (a DNS label has none), so decoding inverts encoding."""
    from warmpool.policy import pool_id

    for ns, name in [("a", "b-c"), ("a-b", "c"), ("a", "b.c"), ("a-b", "c.d-e")]:
        got_ns, got_name = pool_id(ns, name).split(".", 1)
        assert (got_ns, got_name) == (ns, name)


# ------------------------------------------------------------------ generated objects

junk = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats() | st.text(max_size=12)
    | st.sampled_from(["", "Act", "Demand", "Resource", "x{", 'up{namespace="bank"}', "shop/x", "bank/x", "a" * 70]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _paths(obj, prefix=""):
    """Every path into ``obj`` as _with() writes it (dots, list indices as numbers)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}" if prefix else k
            yield p
            yield from _paths(v, p)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield f"{prefix}.{i}"
            yield from _paths(v, f"{prefix}.{i}")


def _area(path: str) -> str:
    """The field a problem belongs to, down to the spec's first level (``spec.metrics``)."""
    parts = re.findall(r"[A-Za-z<>]+", path)
    return ".".join(parts[:2])


# cross-field rules: the problem is reported on the other field of the pair
RELATED = {frozenset({"spec.minReplicas", "spec.maxReplicas"}), frozenset({"metadata.name", "metadata.namespace"}),
           frozenset({"metadata.namespace", "spec.series"}), frozenset({"metadata.namespace", "spec.requestRate"})}


def _near(problem: str, broken: list[str]) -> bool:
    a = _area(problem.split(":", 1)[0])
    return any(a == _area(b) or frozenset({a, _area(b)}) in RELATED or _area(b) in ("metadata", "spec")
               for b in broken)


@st.composite
def broken(draw, obj):
    out, changed = copy.deepcopy(obj), []
    for _ in range(draw(st.integers(1, 3))):
        paths = sorted(_paths(out))
        path = draw(st.sampled_from(paths))
        try:
            out = _with(out, path, draw(junk | st.just(_DELETE)))
        except (KeyError, IndexError, TypeError):
            continue
        changed.append(path)
    return out, changed


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=broken(PA))
def test_a_generated_autoscaler_is_reconciled_or_refused_with_paths_never_a_crash(case):
    obj, changed = case
    try:
        pa = parse_autoscaler(obj)
    except SpecError as exc:
        assert exc.problems and exc.reason in (INVALID_SPEC, QUERY_NOT_CONFINED)
        for p in exc.problems:
            assert PATH.match(p), p
            assert _near(p, changed), (p, changed)
        return
    reconcile_autoscaler(obj, {}, NOW)  # what the runner does next: no exception
    render_trainer_config(BASE, [pa])  # problems, if any, are data
    for m in pa.metrics:
        if m.query is not None:
            assert 'namespace="shop"' in m.query


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=broken(WP))
def test_a_generated_warm_pool_is_rendered_or_refused_with_paths_never_a_crash(case):
    obj, changed = case
    try:
        wp = parse_warmpool(obj)
    except SpecError as exc:
        for p in exc.problems:
            assert PATH.match(p), p
            assert _near(p, changed), (p, changed)
        return
    pool = wp.to_policy_pool()
    rate = pool.get("request_rate", {}).get("series")  # None: the policy says it is required
    assert pool["series"].startswith(f"{wp.namespace}/") and (rate is None or rate.startswith(f"{wp.namespace}/"))
    render_warmpool_policy(None, [wp])  # the policy's own problems are data


LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # Kubernetes' label value syntax
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(ns=label, name=st.lists(label, min_size=1, max_size=3).map(".".join), other_ns=label,
       other_name=st.lists(label, min_size=1, max_size=3).map(".".join))
def test_a_pool_id_is_a_label_value_and_a_pod_name_prefix_and_two_objects_never_share_one(ns, name, other_ns, other_name):
    from warmpool.policy import parse_policy, pool_id

    obj = _with(_with(_with(WP, "metadata.namespace", ns), "metadata.name", name), "spec.series", _DELETE)
    obj["spec"]["requestRate"]["series"] = f"{ns}/w/rps"
    try:
        wp = parse_warmpool(obj)
    except SpecError as exc:
        assert len(pool_id(ns, name)) > 63 and exc.problems[0].startswith("metadata.name: the pool id")
        return
    pid = wp.pool_name
    assert len(pid) <= 63 and LABEL_VALUE.fullmatch(pid)  # foresight.dev/pool=<id>
    assert DNS_SUBDOMAIN.fullmatch(f"fs-{pid}-0123456789")  # the pods' names
    assert parse_policy(yaml.safe_load(render_warmpool_policy(None, [wp]).text)).pools[0].name == pid
    assert (pool_id(other_ns, other_name) == pid) == ((other_ns, other_name) == (ns, name))
