"""Declared predicted metrics and per-workload serving settings in the workload config, and
the trainer forecasting each metric series with its workload's own serving settings."""

from __future__ import annotations

import pandas as pd
import pytest

from core.errors import ConfigError
from core.store import MemoryForecastStore
from forecaster.config import parse_config
from forecaster.predicted import metric_of_series, served_metric
from forecaster.schedule import train_once
from forecaster.serving import ServingSettings
from forecaster.sources.csv import CsvSource

DATA = "tests/data/cpu_slice.csv.gz"


def _cfg(workloads, serving=None, **top):
    doc = {"source": {"url": f"csv://{DATA}", "step_seconds": 300, "history_days": 4},
           "training": {"models": ["persistence", "moving_average"]}, "workloads": workloads, **top}
    if serving is not None:
        doc["serving"] = serving
    return doc


def _problems(doc) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    return exc.value.problems


def test_nothing_declared_keeps_one_cpu_series_per_workload():
    cfg = parse_config(_cfg([{"namespace": "shop", "name": "checkout"}]))
    assert [s.series_id for s in cfg.series()] == ["shop/checkout"]
    assert cfg.serving_by_series() == {}


def test_a_declared_metric_is_its_own_series_with_the_workloads_labels_and_ready_pods():
    cfg = parse_config(_cfg([{"namespace": "shop", "name": "checkout", "capacity": {"ready_pods": 3},
                              "metrics": [{"name": "rps", "query": "sum(rate(http_requests_total[2m]))",
                                           "capacity_per_replica": 40}]}]))
    cpu, rps = cfg.series()
    assert rps.series_id == "shop/checkout/rps" and metric_of_series(rps.series_id) == ("shop/checkout", "rps")
    assert metric_of_series(cpu.series_id) is None
    assert rps.demand_query == "sum(rate(http_requests_total[2m]))"
    assert rps.all_labels() == cpu.all_labels() and rps.capacity.ready_pods == 3
    assert rps.cpu_request_query() is None and rps.series_meta() == {"metric": "rps", "capacity_per_replica": 40.0}


@pytest.mark.parametrize("name, expect", [
    ("Rps", "must be 1-40 lowercase letters"),
    ("9lives", "starting with a letter"),
    ("cpu", "collides with the CPU metrics"),
    ("cpu_load", "collides with the CPU metrics"),
    ("cpu_cores", "collides with the CPU metrics"),
    ("rps_ratio", "must not end in _ratio"),
    ("a" * 41, "1-40 lowercase"),
])
def test_a_bad_metric_name_is_refused_with_its_path(name, expect):
    (p,) = _problems(_cfg([{"namespace": "shop", "name": "a", "metrics": [
        {"name": "ok", "query": "up", "capacity_per_replica": 1},
        {"name": name, "query": "up", "capacity_per_replica": 1}]}]))
    assert p.startswith("workloads[0].metrics[1].name: ") and expect in p


def test_missing_capacity_empty_query_duplicates_and_unknown_keys_are_each_reported_with_their_path():
    problems = _problems(_cfg([
        {"namespace": "shop", "name": "a"},
        {"namespace": "shop", "name": "b", "metrics": [
            {"name": "rps", "query": "up"},
            {"name": "q", "query": " ", "capacity_per_replica": 0},
            {"name": "rps", "query": "x", "capacity_per_replica": 2, "unit": "req/s"}]},
        {"namespace": "shop", "name": "c", "metrics": {"name": "rps"}},
    ]))
    text = "\n".join(problems)
    assert "workloads[1].metrics[0].capacity_per_replica: is required" in text
    assert "workloads[1].metrics[1].query: must not be empty" in text
    assert "workloads[1].metrics[1].capacity_per_replica: 0 must be > 0" in text
    assert "workloads[1].metrics[2].name: 'rps' is declared twice (also workloads[1].metrics[0])" in text
    assert "workloads[1].metrics[2].unit: unknown key" in text
    assert "workloads[2].metrics: must be a list" in text
    assert len(problems) == 6


def test_a_workload_overrides_serving_key_by_key_and_problems_name_its_path():
    cfg = parse_config(_cfg([{"namespace": "shop", "name": "a", "serving": {"slo_minutes_per_day": 5},
                              "metrics": [{"name": "rps", "query": "up", "capacity_per_replica": 5}]},
                             {"namespace": "shop", "name": "b"}],
                            serving={"slo_utilization": 0.8}))
    by = cfg.serving_by_series()
    assert set(by) == {"shop/a", "shop/a/rps"}  # b uses the top-level section
    assert by["shop/a"].slo_minutes_per_day == 5 and by["shop/a"].slo_utilization == 0.8  # inherited
    assert cfg.serving.slo_minutes_per_day == ServingSettings().slo_minutes_per_day
    problems = _problems(_cfg([{"namespace": "shop", "name": f"w{i}"} for i in range(3)] + [
        {"namespace": "shop", "name": "w3", "serving": {"slo_minutes_per_day": -1, "headrooms": [0.5],
                                                         "quantiles": ["p99"], "colour": "red"}}]))
    assert set(problems) == {
        "workloads[3].serving.slo_minutes_per_day: -1 must be a number of minutes in [0, 1440] (0: no SLO; e.g. 3)",
        "workloads[3].serving.headrooms[0]: 0.5 is below 1: it serves less than the observed demand; "
        "set allow_below_observed: true to accept that under-scale risk",
        "workloads[3].serving.quantiles[0]: 'p99' is not published; add it to training.quantiles (published: p50, p90)",
    } | {p for p in problems if p.startswith("workloads[3].serving.colour: unknown key; allowed keys: ")}
    assert len(problems) == 4 and any("colour" in p and "slo_minutes_per_day" in p for p in problems)


def test_a_problem_of_the_top_level_section_is_reported_once_not_again_per_workload():
    problems = _problems(_cfg([{"namespace": "shop", "name": "a", "serving": {"target_value": 0.6}}],
                              serving={"slo_minutes_per_day": -5}))
    assert problems == ["serving.slo_minutes_per_day: -5 must be a number of minutes in [0, 1440] (0: no SLO; e.g. 3)"]


def test_served_names_map_back_to_their_metric():
    assert served_metric("predicted_rps_ratio", {"rps"}) == ("rps", True)
    assert served_metric("predicted_rps", {"rps"}) == ("rps", False)
    assert served_metric("predicted_rps", {"qps"}) is None
    assert served_metric("predicted_cpu_cores", {"rps"}) is None


def test_the_trainer_forecasts_each_metric_series_with_its_workloads_own_serving_settings():
    src = CsvSource(DATA)
    t_end = pd.Timestamp(src.load().query("series_id == 'azurev1-825849'")["timestamp"].max()).timestamp()
    cfg = parse_config(_cfg([
        {"namespace": "ns", "name": "a", "demand_query": "azurev1-825849",
         "capacity": {"cpu_request_cores": 1.0, "ready_pods": 2},
         "serving": {"sources": ["persistence"]},
         "metrics": [{"name": "rps", "query": "azurev1-618849", "capacity_per_replica": 0.25}]},
        {"namespace": "ns", "name": "b", "demand_query": "azurev1-1650389",
         "capacity": {"cpu_request_cores": 1.0, "ready_pods": 2}, "serving": {"sources": ["model"]}},
    ]))
    store = MemoryForecastStore()
    out = train_once(cfg, src, store, now=t_end)
    assert {sid for sid, r in out["results"].items() if r["published"]} == {"ns/a", "ns/a/rps", "ns/b"}
    fc = store.latest("ns/a/rps")
    assert fc.meta["metric"] == "rps" and fc.meta["capacity_per_replica"] == 0.25 and fc.meta["ready_pods"] == 2
    assert fc.meta["workload"] == "a" and "cpu_request_cores" not in fc.meta
    assert out["results"]["ns/a/rps"]["capacity_problems"] == []
    # the metric's values are its own query's, not the CPU series'
    assert fc.observed[-1][1] != store.latest("ns/a").observed[-1][1]
    # each workload's policy was chosen with its own sources (a: persistence only; b: model only)
    assert store.latest("ns/a").policy["source"] == fc.policy["source"] == "persistence"
    assert store.latest("ns/b").policy["source"] == "model"
    # the policy counted pods of the metric's capacity: its cost table was filled from scored intervals
    assert "persistence" in fc.policy["costs"] and "over the last" in fc.policy["reason"]
