"""A demand series read through a range window runs half that window behind the load it measures
(rate(x[2m]) at 12:00 is the load of 11:59). The served lead window is in the load's time, so
the adapter reads the forecast that much later on the series' clock; without it the default
query's 60-s lag ate most of the 75-s lead and a forecast rise was served about when the load
itself rose (the node's short run raised after the rise in one CI run of three)."""

from __future__ import annotations

import pytest

from core.store import make_forecast
from forecaster.schedule import workload_meta
from forecaster.served import MetricSettings, demand_lag, predicted_demand
from forecaster.timing import demand_lag_seconds
from forecaster.workloads import DEFAULT_DEMAND_QUERY, WorkloadConfig, default_query

T0 = 1_800_000_000.0


@pytest.mark.parametrize("query, lag", [
    ('sum(rate(container_cpu_usage_seconds_total{pod=~"api-.*"}[5m]))', 150.0),
    ("sum(increase(requests_total[90s])) / 90", 45.0),
    ("rate(x[1h30m])", 2700.0),
    ("sum(irate(x[5m]))", 0.0),  # the last two samples, not the window's mean
    ("max(rate(a[1m])) + sum(idelta(b[10m]))", 30.0),
    ("sum(last_over_time(demand[1h]))", 0.0),  # the window's last sample
    ("max_over_time(cpu[10m])", 0.0),
    ("avg_over_time(cpu[4m])", 120.0),
    ("avg_over_time(rate(x[2m])[10m:1m])", 300.0),  # the longest window read as a mean
    ('sum(cpu{pod=~"w[5m]"})', 0.0),  # a bracket inside a label regex is not a range
    ("namespace_pod:cpu:rate2m", 0.0),  # a recording rule hides its window
    ("", 0.0),
])
def test_a_querys_lag_is_half_its_longest_range_window_read_as_a_mean(query, lag):
    assert demand_lag_seconds(query) == lag


def test_the_default_demand_query_runs_a_minute_behind_and_the_trainer_publishes_it():
    q = default_query(DEFAULT_DEMAND_QUERY, "shop", "api", "Deployment")  # what the config parser fills in
    w = WorkloadConfig("shop", "api", demand_query=q)
    assert demand_lag_seconds(q) == 60.0  # its 2m rate window
    assert workload_meta(w, {})["demand_lag_seconds"] == 60.0
    plain = WorkloadConfig("shop", "db", demand_query="namespace_pod:cpu:sum")
    assert "demand_lag_seconds" not in workload_meta(plain, {})


def _ramp(meta):
    # flat at 1 core until origin + 120 s, then 1 core more a minute (points every 60 s)
    pts = [1.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    return make_forecast("shop/api", origin=T0, step_seconds=60.0, mean=pts, quantiles={"p50": pts},
                         model="ets", generated_at=T0 + 5, observed=((T0, 1.0),), meta=meta)


def test_the_served_window_reads_the_series_a_lag_later():
    s = MetricSettings(quantile="p50")  # lead 75 s
    plain, lagged = _ramp({}), _ramp({"demand_lag_seconds": 60.0})
    now = T0 + 30
    # without a lag the window ends at origin + 105 s, before the rise; a minute later on the
    # series' clock it ends at origin + 165 s, 45 s into it
    assert predicted_demand(plain, now, s) == pytest.approx(1.0)
    assert predicted_demand(lagged, now, s) == pytest.approx(1.75)
    assert predicted_demand(lagged, now, s) == pytest.approx(predicted_demand(plain, now + 60, s))
    # the horizon ends a lag earlier on the load's clock
    assert predicted_demand(plain, T0 + 330, s) is not None and predicted_demand(lagged, T0 + 330, s) is None


@pytest.mark.parametrize("bad", [-5.0, float("nan"), "soon", None])
def test_an_invalid_published_lag_counts_as_none(bad):
    assert demand_lag(_ramp({"demand_lag_seconds": bad})) == 0.0


def test_a_lag_past_the_horizon_serves_observed_demand_and_says_why():
    from forecaster.served import served_cores
    fc = _ramp({"demand_lag_seconds": 1800.0})  # avg_over_time(...[1h]) on a 6-minute horizon
    sv = served_cores(fc, T0 + 30, MetricSettings(quantile="p50"))
    assert sv.source == "observed" and sv.value == 1.0
    assert "the demand query's lag (1800 s" in sv.reason
