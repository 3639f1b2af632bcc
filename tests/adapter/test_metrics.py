"""The forecast -> served value rule (forecaster/served.py), exactly."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from core.store import make_forecast
from forecaster.served import (
    MetricSettings,
    NoData,
    predicted_demand,
    served_cores,
    served_load_ratio,
)

T0 = 1_800_000_000.0


def fc_of(p90, *, observed=2.0, step=60.0, generated_at=T0, status="ok", mean=None, **kw):
    return make_forecast(
        "shop/checkout",
        origin=T0,
        step_seconds=step,
        mean=mean if mean is not None else [v * 0.8 for v in p90],
        quantiles={"p90": p90, "p50": [v * 0.8 for v in p90]},
        model="ets",
        generated_at=generated_at,
        status=status,
        observed=((T0 - 60, 1.0), (T0, observed)) if observed is not None else (),
        meta={"namespace": "shop", "workload": "checkout"},
        **kw,
    )


S = MetricSettings(lead_seconds=75.0, quantile="p90", max_forecast_age_seconds=300.0)


def test_predicted_demand_is_the_max_of_the_quantile_over_the_lead_window():
    fc = fc_of([3.0, 5.0, 4.0, 10.0])  # points at T0+60, +120, +180, +240
    # window [T0, T0+75]: knot at +60 (3.0) and the interpolation at +75 (3 + 2*15/60 = 3.5)
    assert predicted_demand(fc, T0, S) == pytest.approx(3.5)
    # window [T0+60, T0+135] contains the knot at +120 (5.0)
    assert predicted_demand(fc, T0 + 60, S) == pytest.approx(5.0)


def test_the_curve_starts_from_the_last_observed_value_at_the_origin():
    fc = fc_of([10.0], observed=2.0)
    # halfway to the first point: 2 + (10 - 2) * 30/60 = 6
    short = MetricSettings(lead_seconds=0.0)
    assert predicted_demand(fc, T0 + 30, short) == pytest.approx(6.0)


def test_a_window_past_the_horizon_is_clipped_and_a_late_now_gives_none():
    fc = fc_of([3.0, 4.0])
    assert predicted_demand(fc, T0 + 100, S) == pytest.approx(4.0)
    assert predicted_demand(fc, T0 + 121, S) is None


def test_mean_can_be_used_instead_of_a_quantile_and_a_missing_quantile_gives_none():
    fc = fc_of([4.0, 4.0], mean=[1.0, 1.0], observed=None)
    assert predicted_demand(fc, T0, MetricSettings(quantile="mean")) == pytest.approx(1.0)
    assert predicted_demand(fc, T0, MetricSettings(quantile="p99")) is None


def test_served_cores_is_floored_at_the_observed_demand():
    fc = fc_of([1.0, 1.0], observed=3.0)
    sv = served_cores(fc, T0 + 60, S)
    assert sv.value == pytest.approx(3.0)
    assert sv.source == "forecast"
    assert sv.predicted < sv.value
    assert "floored" in sv.reason


def test_without_the_floor_a_low_forecast_is_served_as_is():
    fc = fc_of([1.0, 1.0], observed=3.0)
    sv = served_cores(fc, T0 + 60, MetricSettings(observed_floor=False))
    assert sv.value == pytest.approx(1.0)


def test_a_stale_forecast_is_never_served():
    fc = fc_of([50.0, 50.0], observed=2.0, generated_at=T0 - 301)
    sv = served_cores(fc, T0, S)
    assert sv.source == "observed"
    assert sv.value == pytest.approx(2.0)
    assert "stale" in sv.reason


def test_a_series_on_the_fallback_serves_observed_with_its_reason():
    fc = fc_of([50.0, 50.0], observed=2.5, status="fallback", reason="backtest error too high")
    sv = served_cores(fc, T0, S)
    assert (sv.source, sv.value) == ("observed", 2.5)
    assert "backtest error too high" in sv.reason


def test_an_explicit_observed_value_overrides_the_forecast_tail():
    fc = fc_of([1.0, 1.0], observed=0.5)
    assert served_cores(fc, T0, S, observed=7.0).value == pytest.approx(7.0)


def test_no_forecast_serves_observed_and_nothing_at_all_raises_no_data():
    assert served_cores(None, T0, S, observed=1.25).value == 1.25
    with pytest.raises(NoData):
        served_cores(None, T0, S)
    stale_no_obs = fc_of([5.0], observed=None, generated_at=T0 - 1000)
    with pytest.raises(NoData):
        served_cores(stale_no_obs, T0, S)


def test_load_ratio_divides_by_ready_pods_times_request():
    fc = fc_of([3.0, 6.0], observed=1.0)
    sv = served_load_ratio(fc, T0 + 60, ready_pods=4, cpu_request_cores=0.5, settings=S)
    # window [T0+60, T0+135] -> 6.0 at +120; 6 / (4 * 0.5) = 3
    assert sv.value == pytest.approx(3.0)
    assert sv.predicted == pytest.approx(6.0)


def test_load_ratio_with_zero_ready_pods_counts_one_and_says_so():
    fc = fc_of([2.0, 2.0], observed=1.0)
    sv = served_load_ratio(fc, T0 + 60, ready_pods=0, cpu_request_cores=0.5, settings=S)
    assert sv.value == pytest.approx(4.0)
    assert "counted as 1" in sv.reason


@pytest.mark.parametrize("req", [0, -1, float("nan"), None])
def test_load_ratio_without_a_positive_request_is_no_data(req):
    with pytest.raises(NoData, match="cpu_request_cores"):
        served_load_ratio(fc_of([1.0]), T0, 2, req, S)


def test_a_target_of_0_7_on_the_ratio_gives_the_right_pod_count_while_pods_start():
    # demand 7 cores, request 1 core, only 2 pods ready: the HPA asks ceil(r/0.7 * ready).
    fc = fc_of([7.0, 7.0], observed=1.0)
    sv = served_load_ratio(fc, T0 + 60, ready_pods=2, cpu_request_cores=1.0, settings=S)
    assert math.ceil(sv.value / 0.7 * 2 - 1e-9) == math.ceil(7.0 / 0.7)


def test_settings_reject_nonsense_naming_every_field():
    with pytest.raises(ValueError) as e:
        MetricSettings(lead_seconds=-1, quantile="x", max_forecast_age_seconds=0)
    for field in ("lead_seconds", "quantile", "max_forecast_age_seconds"):
        assert field in str(e.value)


finite = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@hsettings(max_examples=200, deadline=None)
@given(
    values=st.lists(finite, min_size=1, max_size=24),
    observed=st.one_of(st.none(), finite),
    offset=st.floats(min_value=-100, max_value=2000),
    lead=st.floats(min_value=0, max_value=900),
    pods=st.integers(min_value=-3, max_value=500),
    age=st.floats(min_value=0, max_value=1000),
)
def test_served_values_are_always_finite_non_negative_and_floored(values, observed, offset, lead, pods, age):
    fc = fc_of(values, observed=observed, generated_at=T0 - age)
    s = MetricSettings(lead_seconds=lead)
    try:
        sv = served_load_ratio(fc, T0 + offset, pods, 0.25, s)
    except NoData:
        assert observed is None or offset > s.max_observed_age_seconds  # nothing recent to fall back on
        return
    assert math.isfinite(sv.value) and sv.value >= 0
    if sv.observed is not None:
        assert sv.value * max(pods, 1) * 0.25 >= sv.observed - 1e-9
    if sv.source == "forecast":
        assert sv.predicted is not None and sv.predicted <= max(values + ([observed] if observed is not None else [])) + 1e-9


def _reference_predicted(fc, now, lead, quantile="p90"):
    """Straightforward reference: build every knot, interpolate at the ends, take the max."""
    values = fc.quantiles[quantile]
    pts = [(fc.origin + (i + 1) * fc.step_seconds, v) for i, v in enumerate(values)]
    if fc.observed:
        pts.insert(0, (fc.origin, fc.observed[-1][1]))

    def at(t):
        if t <= pts[0][0]:
            return pts[0][1]
        if t >= pts[-1][0]:
            return pts[-1][1]
        for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
            if t0 <= t <= t1:
                return v0 + (v1 - v0) * (t - t0) / (t1 - t0)

    if now > pts[-1][0]:
        return None
    end = min(now + lead, pts[-1][0])
    return max([at(now), at(end)] + [v for t, v in pts if now < t < end])


@hsettings(max_examples=300, deadline=None)
@given(
    values=st.lists(finite, min_size=1, max_size=24),
    observed=st.one_of(st.none(), finite),
    offset=st.floats(min_value=-200, max_value=1600),
    lead=st.floats(min_value=0, max_value=900),
    step=st.sampled_from([15.0, 60.0, 300.0]),
)
def test_the_fast_window_max_equals_the_straightforward_reference(values, observed, offset, lead, step):
    fc = fc_of(values, observed=observed, step=step)
    got = predicted_demand(fc, T0 + offset, MetricSettings(lead_seconds=lead))
    want = _reference_predicted(fc, T0 + offset, lead)
    if want is None:
        assert got is None
    else:
        # the reference works on absolute timestamps, which near 1.8e9 s are 2.4e-7 s apart in floats
        # (a lead shorter than that vanishes there): its error is up to the steepest slope x that spacing
        knots = ([] if observed is None else [observed]) + list(values)
        slope = max((abs(b - a) for a, b in itertools.pairwise(knots)), default=0.0) / step
        assert got == pytest.approx(want, rel=1e-7, abs=1e-7 + 2 * 2.4e-7 * slope)


def test_an_old_observation_is_not_served_as_the_fallback():
    fc = fc_of([5.0, 5.0], observed=2.0, generated_at=T0 - 3600)
    with pytest.raises(NoData):
        served_cores(fc, T0 + 3600, S)
    # the same observation is fine while recent
    assert served_cores(fc, T0 + 600, S).value == 2.0
