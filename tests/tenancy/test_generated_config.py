"""Generated bad input to the files and objects a tenant or the platform team writes: the
warm-pool policy YAML (warmpool/policy.py), the workloads YAML (forecaster/config.py), and
PredictiveAutoscaler and WarmPool objects through the operator's whole pure pipeline (parse,
render into the trainer's and the controller's files, reconcile). Each either parses, or is
refused with every problem naming the field it is about; nothing raises anything else.

tests/operator/test_spec_checks.py breaks the paths a sample object has; these also add every
field the parsers know but the sample leaves out (each spec.serving key, each pool key), and
follow an object that parses through to the files the trainer and the controller read."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import given, strategies as st

from core.errors import ConfigError
from forecaster.config import load_config, parse_config
from kubeoperator.checks import SpecError
from kubeoperator.reconcile import reconcile_autoscaler
from kubeoperator.render import render_trainer_config, render_warmpool_policy
from kubeoperator.spec import SERVING_FIELDS, parse_autoscaler, parse_warmpool
from tests.tenancy.generate import DELETE, GENERATED, NON_FINITE, PROBLEM, at, broken, dotted, junk, number_paths, put
from warmpool.policy import POOL_KEYS, load_policy, parse_policy

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_700_000_000.0

POLICY = yaml.safe_load((ROOT / "warmpool" / "examples" / "local.yaml").read_text())
POLICY["runtime_classes"] = {"gvisor": {"runtime_ms": [20, 30, 50], "image_ms": [40, 66, 104],
                                        "sandbox_ms": [120, 160, 230]}}
POLICY["pools"].append({"name": "shop.rps", "workload": {"namespace": "shop", "name": "rps"}, "backend": "sim",
                        "demand": "both", "request_rate": {"series": "shop/rps/rps", "concurrency_per_container": 20}})

WORKLOADS = {
    "apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
    "source": {"url": "prometheus://127.0.0.1:9090", "step_seconds": 60, "history_days": 14,
               "thanos": {"max_source_resolution": "5m", "dedup": True}},
    "store": {"url": "redis://127.0.0.1:6379/0", "ttl_seconds": 3600},
    "training": {"refresh_interval_seconds": 60, "horizon_steps": 12, "quantiles": [0.5, 0.9], "models": ["auto"]},
    "serving": {"violation_worth_minutes": 30, "quantiles": ["p50", "p90"], "headrooms": [1.0, 1.2], "holds": [1]},
    "workloads": [{"namespace": "shop", "name": "checkout", "kind": "Deployment", "labels": {"tier": "web"},
                   "capacity": {"cpu_request_cores": 0.5, "ready_pods": 3},
                   "metrics": [{"name": "rps", "query": "sum(rate(http_requests_total[2m]))", "capacity_per_replica": 40}],
                   "serving": {"slo_minutes_per_day": 5}}],
}
SERVING_KEYS = ["violation_worth_minutes", "slo_minutes_per_day", "cost_ceiling", "quantiles", "sources", "headrooms",
                "target_value", "slo_utilization", "history_days", "allow_below_observed", "holds", "model_margin",
                "peak_gap_states"]


def _named(problems: list[str], changed: list[tuple], top: set[str], doc=None) -> None:
    """Every problem is ``<path>: <what>``, its path rooted at a key of the document (or the
    document itself); and at least one names a field that was broken or its parent (a pool
    by its name once it has a readable one: ``pools[web]``)."""
    assert problems
    changed = changed + [_by_pool_name(doc, c) for c in changed if _by_pool_name(doc, c)]
    for p in problems:
        assert PROBLEM.match(p), p
        root = p.split(":", 1)[0].split(".", 1)[0].split("[", 1)[0]
        assert root in top | {"<top>", "<object>"}, p
    assert any(_about(p, dotted(c)) for p in problems for c in changed), (problems, changed)


def _about(problem: str, field: str) -> bool:
    """The problem is at ``field``, inside it, at a parent of it, or names it (a rule across
    two fields is told at one of them: ``spec.minReplicas: 3 must be <= spec.maxReplicas (2)``)."""
    at, _, msg = problem.partition(": ")
    named = [field[:i] for i, ch in enumerate(field + ".") if ch in ".[" and ("." in field[:i] or "[" in field[:i])]
    return (at == field or at.startswith((field + ".", field + "[")) or field.startswith((at + ".", at + "["))
            or any(f in msg for f in named))


def _by_pool_name(doc, path: tuple) -> tuple | None:
    if len(path) < 2 or path[0] != "pools" or not isinstance(doc, dict) or not isinstance(doc.get("pools"), list):
        return None
    pools = doc["pools"]
    if isinstance(path[1], int) and path[1] < len(pools) and isinstance(pools[path[1]], dict):
        name = pools[path[1]].get("name")
        return ("pools", name, *path[2:]) if isinstance(name, str) else None
    return None


def _finite_numbers(obj) -> None:
    """What a parser accepted holds no NaN or infinity (each would turn into a NaN replica count)."""
    for v in vars(obj).values() if hasattr(obj, "__dict__") else ():
        if isinstance(v, float):
            assert math.isfinite(v), obj
        elif hasattr(v, "__dataclass_fields__"):
            _finite_numbers(v)


POOL_EXTRA = {("pools", 0): list(POOL_KEYS), ("pools", 1): list(POOL_KEYS), (): ["memory_budget"]}


@GENERATED
@given(case=broken(POLICY, POOL_EXTRA, finite=True))
def test_a_generated_warm_pool_policy_parses_or_names_every_bad_field(case):
    doc, changed = case
    try:
        policy = parse_policy(doc, "policy.yaml")
    except ConfigError as exc:
        _named(exc.problems, changed, {"apiVersion", "kind", "runtime_classes", "memory_budget", "pools"}, doc)
        return
    for pool in policy.pools:
        _finite_numbers(pool)
        assert 0 <= pool.min_warm <= pool.max_warm


WORKLOAD_EXTRA = {("serving",): SERVING_KEYS, ("workloads", 0, "serving"): SERVING_KEYS,
                  ("training",): ["retrain_interval_seconds", "engine", "ray_address"],
                  ("source",): ["bearer_token_file", "ca_file", "timeout_seconds"]}


@GENERATED
@given(case=broken(WORKLOADS, WORKLOAD_EXTRA, finite=True))
def test_a_generated_workloads_file_parses_or_names_every_bad_field(case):
    doc, changed = case
    try:
        cfg = parse_config(doc, "workloads.yaml")
    except ConfigError as exc:
        _named(exc.problems, changed, {"apiVersion", "kind", "source", "store", "training", "serving", "workloads"})
        return
    for part in (cfg.source, cfg.store, cfg.training, *cfg.workloads):
        _finite_numbers(part)


@GENERATED
@given(text=st.one_of(
    st.text(max_size=200),
    junk.map(lambda v: yaml.safe_dump(v, allow_unicode=True)),
    st.sampled_from(["pools: [", "!!python/object:os.system {}", "a: *b", "---\n---\n", "\t- x", "{a: 1, a: 2}",
                     "pools: !!binary aGVsbG8=", "? [a, b]\n: c"]),
))
def test_any_text_as_a_policy_or_workloads_file_is_a_config_error_that_names_the_file(text):
    fd, name = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        for load in (load_policy, load_config):
            try:
                load(name)
            except ConfigError as exc:
                assert name in str(exc) and exc.problems, exc
    finally:
        os.unlink(name)


PA = {
    "apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
    "metadata": {"name": "checkout", "namespace": "shop", "uid": "u-1", "generation": 3},
    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "checkout"},
             "minReplicas": 2, "maxReplicas": 50, "reactiveFloor": {"enabled": True, "averageUtilization": 70},
             "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.5},
                         {"name": "rps", "type": "Demand", "query": "sum(rate(http_requests_total[2m]))",
                          "capacityPerReplica": 40}],
             "serving": {"targetValue": 0.7}},
}
WP = {"apiVersion": "foresight.dev/v1alpha1", "kind": "WarmPool",
      "metadata": {"name": "checkout", "namespace": "shop", "generation": 1},
      "spec": {"workload": "checkout", "minWarm": 1, "maxWarm": 5, "backend": "sim"}}
WP_KEYS = ["series", "quantile", "runtimeClass", "backend", "minWarm", "maxWarm", "capacityPerContainer", "leadSeconds",
           "template", "idleTTL", "idleModel", "demand", "requestRate"]
TRAINER_BASE = {k: v for k, v in WORKLOADS.items() if k != "workloads"} | {"workloads": []}


@GENERATED
@given(case=broken(PA, {("spec", "serving"): list(SERVING_FIELDS), ("spec",): ["mode", "scaler", "behavior"]}))
def test_a_generated_autoscaler_reaches_the_trainer_or_is_refused_on_its_own_fields(case):
    """What the operator tells the object (its Ready condition) names the object's own field,
    whether the operator's checks or the trainer's config refused it."""
    obj, changed = case
    try:
        pa = parse_autoscaler(obj)
    except SpecError as exc:
        _named(exc.problems, changed, {"metadata", "spec"})
        return
    rendered = render_trainer_config(TRAINER_BASE, [pa])
    problems = rendered.problems.get((pa.namespace, pa.name))
    if problems:
        _named(problems, changed, {"metadata", "spec"})
    else:
        cfg = parse_config(yaml.safe_load(rendered.text), "effective")
        assert [w.series_id for w in cfg.workloads] == [pa.workload_series_id]
    act = reconcile_autoscaler(obj, {}, NOW, problems=problems or ())
    assert act.status["conditions"]


@GENERATED
@given(case=broken(WP, {("spec",): WP_KEYS}))
def test_a_generated_warm_pool_reaches_the_controller_or_is_refused_on_its_own_fields(case):
    obj, changed = case
    try:
        wp = parse_warmpool(obj)
    except SpecError as exc:
        _named(exc.problems, changed, {"metadata", "spec"})
        return
    rendered = render_warmpool_policy(None, [wp])
    problems = rendered.problems.get((wp.namespace, wp.name))
    if problems:
        _named(problems, changed, {"metadata", "spec"})
        return
    (pool,) = parse_policy(yaml.safe_load(rendered.text)).pools
    assert pool.name == wp.pool_name and all(s.startswith(f"{wp.namespace}/") for s in pool.forecast_series)


# ------------------------------------------------------------------ non-finite numbers, every field
# NaN passes every range comparison (``nan < 0`` and ``nan > 10`` are both false) and an integer
# past float's range raises OverflowError where it meets a float: each numeric field of each
# document, given each of them, is refused on that field.


def _refusals(parse, doc: dict, only: str = "") -> list[str]:
    """The numeric fields of ``doc`` (those whose path has ``only`` in it) that, set to a
    non-finite number, are not refused on their own path (or their list's): accepted, refused
    elsewhere, or crashed. A whole-number field may take an integer past float's range: nothing
    compares it with a float."""
    wrong = []
    for path in number_paths(doc):
        field = dotted(path)
        if only not in field:
            continue
        named = [q for q in (path, _by_pool_name(doc, path)) if q]  # a pool by its name: pools[web]
        own = tuple(dotted(q[:n]) for q in named for n in ((len(q), len(q) - 1) if isinstance(q[-1], int) else (len(q),)))
        for bad in NON_FINITE:
            try:
                problems = parse(put(doc, path, bad))
            except Exception as exc:  # noqa: BLE001 - what is wrong is the finding
                wrong.append(f"{field}={bad!r:.12}: {type(exc).__name__}: {exc}")
                continue
            if not problems and bad == 10**400 and type(at(doc, path)) is int:
                continue
            if not any(p.startswith(tuple(f + ": " for f in own)) for p in problems):
                wrong.append(f"{field}={bad!r:.12}: {problems or 'accepted'}")
    return wrong


def _config_problems(parse):
    def run(doc):
        try:
            parse(doc, "doc.yaml")
        except ConfigError as exc:
            return exc.problems
        return []
    return run


def _pipeline_problems(parse, render, base):
    def run(obj):
        try:
            spec = parse(obj)
        except SpecError as exc:
            return exc.problems
        return render(base, [spec]).problems.get((spec.namespace, spec.name), [])
    return run


def test_a_non_finite_number_in_any_field_of_the_workloads_file_is_refused_on_that_field():
    doc = put(put(WORKLOADS, ("workloads", 0, "serving", "holds"), [1, 2]), ("source", "timeout_seconds"), 30)
    doc = put(doc, ("serving", "headrooms"), DELETE)  # below: a known bug
    assert _refusals(_config_problems(parse_config), doc) == []


def test_an_integer_past_floats_range_in_a_serving_list_is_refused_on_that_item():
    doc = put(WORKLOADS, ("workloads", 0, "serving", "headrooms"), [1.0, 1.5])
    assert _refusals(_config_problems(parse_config), doc, only="headrooms") == []


def test_a_non_finite_number_in_any_field_of_the_warm_pool_policy_is_refused_on_that_field():
    assert _refusals(_config_problems(parse_policy), POLICY) == []


def test_a_non_finite_number_in_any_field_of_an_autoscaler_is_refused_on_that_field():
    pa = put(PA, ("spec", "serving"), {"targetValue": 0.7, "sloUtilization": 0.9, "violationWorthMinutes": 30,
                                      "sloMinutesPerDay": 5, "costCeiling": 1.5, "historyDays": 7, "modelMargin": 0,
                                      "peakGapStates": 5, "headrooms": [1.0, 1.5], "holds": [1, 2]})
    assert _refusals(_pipeline_problems(parse_autoscaler, render_trainer_config, TRAINER_BASE), pa) == []


def test_a_non_finite_number_in_any_field_of_a_warm_pool_object_is_refused_on_that_field():
    wp = put(WP, ("spec",), {**WP["spec"], "capacityPerContainer": 0.5, "leadSeconds": 90, "demand": "both",
                             "idleTTL": {"initialSeconds": 120, "decay": 0.15, "floorSeconds": 0},
                             "idleModel": {"binSeconds": 60, "priorScale": 0.5, "priorPower": 1, "priorWeight": 10,
                                           "previousGapWeight": 3},
                             "requestRate": {"series": "shop/checkout/rps", "concurrencyPerContainer": 20}})
    assert _refusals(_pipeline_problems(parse_warmpool, render_warmpool_policy, None), wp) == []
