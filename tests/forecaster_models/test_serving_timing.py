"""The chooser scores a policy at the deployment's timing: every HPA sync that reads an origin's
forecast, with the prediction the adapter serves at that sync (the same lead-window function)
and the demand that sync's pods carry once they are ready."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.store import make_forecast
from forecaster.served import MetricSettings, predicted_demand, served_cores
from forecaster.serving import ServingSettings, choose_policy
from forecaster.servingscore import lead_bases, sync_exposure, sync_observed, sync_offsets
from forecaster.timing import TIMING

T0 = 1_800_000_000.0


def test_each_sync_of_an_interval_reads_the_forecast_from_its_publication_on():
    # published a metric delay (90 s) after the sample, read every 15 s until the next one's
    assert sync_offsets(300.0).tolist() == [90.0 + 15.0 * j for j in range(20)]
    assert sync_offsets(60.0).tolist() == [90.0, 105.0, 120.0, 135.0]


def test_the_chooser_scores_each_sync_with_what_the_adapter_serves_then():
    # the chooser holds one-step forecasts: its curve is flat after the first point, as this one is
    fc = make_forecast("shop/checkout", origin=T0, step_seconds=300.0, mean=[20.0, 20.0], quantiles={"p90": [20.0, 20.0]},
                       model="ets", generated_at=T0 + 90, observed=((T0, 10.0),))
    scored = lead_bases(np.array([10.0]), np.array([20.0]), 300.0)[0]
    served = [predicted_demand(fc, T0 + tau, MetricSettings(quantile="p90")) for tau in sync_offsets(300.0)]
    assert scored.tolist() == pytest.approx(served)
    # the first sync serves the curve at 90 + 75 s of its 300-s rise from 10 to 20, not the point itself
    assert scored[0] == pytest.approx(10.0 + 10.0 * 165.0 / 300.0)
    assert scored[-1] == 20.0


def test_a_syncs_pods_carry_the_demand_from_a_start_up_after_it_to_the_next_syncs_pods():
    raw = np.array([10.0, 20.0, 40.0])
    path = sync_exposure(raw, np.array([0]), 300.0)[0]
    a = TIMING.metric_delay_seconds + TIMING.pod_startup_seconds  # 150 s after the sample
    assert path[0].tolist() == pytest.approx([10.0 + 10.0 * a / 300.0, 10.0 + 10.0 * (a + 15.0) / 300.0])
    # the last sync (375 s) carries 435-450 s: on the rise to the sample after next
    assert path[-1].tolist() == pytest.approx([20.0 + 20.0 * 135.0 / 300.0, 20.0 + 20.0 * 150.0 / 300.0])
    # past the data: not scored
    assert np.isnan(sync_exposure(raw, np.array([1]), 300.0)[0, -1]).all()


def test_a_rise_is_scored_with_the_pods_the_adapter_asks_for_as_its_curve_climbs_not_the_point():
    # a sawtooth rising by 3 pods' worth an interval, from 1 to 28, with a perfect one-step
    # forecast: the adapter serves the curve from the last sample up towards the point (the
    # lead window ahead of each sync), so the early syncs of an interval ask for fewer pods
    # than the point would; a chooser scoring the point would over-count what the model costs
    n = 400
    raw = 0.7 * (1.0 + 3.0 * (np.arange(n) % 10))
    o = np.arange(n - 2)
    perfect = raw[o + 1]
    settings = ServingSettings(quantiles=("p50",), sources=("model",), headrooms=(1.0,), slo_minutes_per_day=1440)
    at_syncs = choose_policy(sync_exposure(raw, o, 300.0), raw[o], {"p50": lead_bases(raw[o], perfect, 300.0)}, 1.0, settings)
    as_points = choose_policy(sync_exposure(raw, o, 300.0), raw[o], {"p50": perfect}, 1.0, settings)
    assert at_syncs.costs["p50"] < as_points.costs["p50"]


def test_the_adapters_one_forecast_path_gives_the_same_floats_as_the_choosers_vector_path():
    # window_max_one (the adapter, per request) and window_max (the chooser, every origin at
    # once) must serve the same number, and headroom_at the state gap_state gives, exactly
    from forecaster.leadwindow import window_max, window_max_one
    from forecaster.servingpolicy import ServingPolicy
    from forecaster.servingscore import gap_state

    rng = np.random.default_rng(7)
    for _ in range(3000):
        h = int(rng.integers(1, 14))
        knots = rng.choice([rng.normal(size=h) * 5, np.round(rng.uniform(0, 3, size=h), 1)])
        first = [math.nan, None, float(rng.normal() * 5), float(knots[0])][int(rng.integers(0, 4))]
        step = float(rng.choice([15.0, 60.0, 300.0, 37.5]))
        start = float(rng.choice([rng.uniform(-2 * step, (h + 2) * step), step * int(rng.integers(0, h + 2))]))
        lead = float(rng.choice([0.0, 75.0, 165.0, step, rng.uniform(0, 3 * step)]))
        want = window_max(np.array([math.nan if first is None else first]), knots[None, :], np.array([start]), lead, step)[0, 0]
        assert window_max_one(first, tuple(knots.tolist()), start, lead, step) == want, (first, knots, start, lead, step)
    edges = (0.05, 0.1, 0.25, 0.5)
    pol = ServingPolicy(gap_edges=edges, headrooms=(1.0, 1.1, 1.2, 1.3, 1.4), fallback_headrooms=(1.5, 1.6, 1.7, 1.8, 1.9))
    for gap in [*edges, 0.0, 1.0, math.nan, *rng.uniform(0, 1, size=200)]:
        assert pol.headroom_at(gap) == pol.headrooms[int(gap_state([gap], edges)[0])]
        assert pol.headroom_at(gap, fallback=True) == pol.fallback_headrooms[int(gap_state([gap], edges)[0])]
    # peak_gap in plain floats reads samples as numpy did (NaN and None skipped, the last 12)
    from forecaster.servingscore import PEAK_SAMPLES, peak_gap

    for _ in range(500):
        x = rng.uniform(0, 4, size=int(rng.integers(0, 20)))
        x[rng.uniform(size=len(x)) < 0.2] = math.nan
        tail = x[-PEAK_SAMPLES:][np.isfinite(x[-PEAK_SAMPLES:])]
        want = float(min(1.0, max(0.0, 1.0 - tail[-1] / tail.max()))) if len(tail) and tail.max() > 0 else 0.0
        assert peak_gap(x) == peak_gap(list(x)) == peak_gap([None if math.isnan(v) else v for v in x]) == want


def test_each_sync_floors_at_the_demand_the_adapter_reads_then():
    # the adapter's direct reading is a metric delay old, as a reactive HPA's CPU metric is, and
    # up to one re-read older: at a sync 90 + 15 j s after the sample it may hold the demand of
    # 15 j - r s after it (r: the re-read interval); before the sample, linear from the one before
    r = TIMING.observed_read_seconds
    assert 0 < r < TIMING.hpa_sync_seconds  # a fresh reading for every HPA sync
    raw = np.array([10.0, 20.0, 40.0])
    read = sync_observed(raw, np.array([0, 1]), 300.0)
    assert read[0].tolist() == pytest.approx([10.0] + [10.0 + 10.0 * (15.0 * j - r) / 300.0 for j in range(1, 20)])
    assert read[1].tolist() == pytest.approx([20.0 - 10.0 * r / 300.0] + [20.0 + 20.0 * (15.0 * j - r) / 300.0 for j in range(1, 20)])


def test_the_chooser_floors_each_sync_where_the_adapter_does():
    # a forecast far below demand: every sync serves the floor. With the adapter's reading the
    # floor climbs with the demand through the interval; on the published sample alone it would
    # stay at the sample until the next one, and every sync of a rise would be short of pods
    n = 300
    raw = 0.7 * (1.0 + 3.0 * (np.arange(n) % 10))
    o = np.arange(n - 2)
    low = np.full(len(o), 0.1)
    settings = ServingSettings(quantiles=("p50",), sources=("model",), headrooms=(1.0,), peak_gap_states=1)
    bases = {"p50": lead_bases(raw[o], low, 300.0)}
    read = sync_observed(raw, o, 300.0)
    with_reading = choose_policy(sync_exposure(raw, o, 300.0), raw[o], bases, 1.0, settings, observed=read)
    published = choose_policy(sync_exposure(raw, o, 300.0), raw[o], bases, 1.0, settings)
    assert with_reading.costs["p50"] < published.costs["p50"]
    # and what it scores is what forecaster.served serves with that reading
    fc = make_forecast("shop/checkout", origin=T0, step_seconds=300.0, mean=[0.1, 0.1], quantiles={"p50": [0.1, 0.1]},
                       model="ets", generated_at=T0 + 90, observed=((T0, float(raw[0])),))
    for j, tau in enumerate(sync_offsets(300.0)):
        sv = served_cores(fc, T0 + tau, MetricSettings(quantile="p50"), observed=float(read[0, j]))
        assert sv.value == pytest.approx(max(read[0, j], bases["p50"][0, j]))


def test_a_forecast_that_cannot_be_served_is_not_floored_at_the_reading():
    # its samples stopped: no value from the forecast path (the adapter serves its reading
    # directly then, as observed-direct); a stale one serves its own last sample
    from forecaster.served import NoData

    fc = make_forecast("shop/checkout", origin=T0, step_seconds=300.0, mean=[50.0] * 12, quantiles={"p90": [50.0] * 12},
                       model="ets", generated_at=T0 + 2000, observed=((T0, 10.0),))
    with pytest.raises(NoData, match="stopped delivering"):
        served_cores(fc, T0 + 2000, MetricSettings(), observed=12.0)
    stale = make_forecast("shop/checkout", origin=T0, step_seconds=300.0, mean=[50.0] * 12, quantiles={"p90": [50.0] * 12},
                          model="ets", generated_at=T0, observed=((T0, 10.0),))
    sv = served_cores(stale, T0 + 600, MetricSettings(), observed=12.0)
    assert sv.source == "observed" and sv.value == 10.0 and "stale" in sv.reason


def test_persistence_and_the_fallback_serve_the_reading_with_their_headroom():
    policy = {"version": 3, "source": "persistence", "quantile": "p90", "headroom": 1.2, "fallback_headroom": 1.5}
    fc = make_forecast("shop/checkout", origin=T0, step_seconds=300.0, mean=[50.0] * 12, quantiles={"p90": [50.0] * 12},
                       model="ets", generated_at=T0 + 90, observed=((T0, 10.0),), policy=policy)
    assert served_cores(fc, T0 + 120, MetricSettings(), observed=8.0).value == pytest.approx(1.2 * 8.0)
    drifted = make_forecast("shop/checkout", origin=T0, step_seconds=300.0, mean=[50.0] * 12, quantiles={"p90": [50.0] * 12},
                            model="ets", generated_at=T0 + 90, observed=((T0, 10.0),), policy=policy, status="fallback")
    assert served_cores(drifted, T0 + 120, MetricSettings(), observed=8.0).value == pytest.approx(1.5 * 8.0)
    assert served_cores(drifted, T0 + 120, MetricSettings()).value == pytest.approx(1.5 * 10.0)
