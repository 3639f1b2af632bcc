"""Trainer: fit (heavy) vs refresh (cheap), publishing, fallbacks and their reasons."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.store import MemoryForecastStore
from forecaster.models import naive, register_model, unregister_model
from forecaster.training import Trainer

FITS: list[int] = []


class CountingMA(naive.MovingAverage):
    def _fit(self, y):
        FITS.append(len(y))


@pytest.fixture
def counting_model():
    register_model("counting_ma", CountingMA, window=12)
    FITS.clear()
    yield "counting_ma"
    unregister_model("counting_ma")


def test_fit_then_refresh_publishes_a_finite_forecast(daily_series):
    ts, y = daily_series
    store = MemoryForecastStore()
    tr = Trainer(store, models=("auto",), horizon=12, clock=lambda: 1000.0)
    st = tr.fit("shop/web", ts, y)
    assert st.status == "ok" and st.backtest_error is not None
    fc = tr.refresh("shop/web", ts, y, meta={"namespace": "shop", "ready_pods": 3})
    got = store.latest("shop/web")
    assert got is not None and got.generation == 1
    assert len(got.mean) == 12 and set(got.quantiles) == {"p50", "p90"}
    assert all(math.isfinite(v) for v in got.mean)
    assert got.origin == ts[-1] and got.step_seconds == 300.0
    assert got.observed[-1] == (float(ts[-1]), float(y[-1]))
    assert got.meta["ready_pods"] == 3
    assert fc.model == st.model_name and fc.generated_at == 1000.0


def test_refresh_reforecasts_from_new_data_without_refitting(daily_series, counting_model):
    ts, y = daily_series
    tr = Trainer(MemoryForecastStore(), models=(counting_model,))
    tr.fit("s", ts[:-24], y[:-24])
    fits = len(FITS)
    a = tr.refresh("s", ts[:-24], y[:-24])
    b = tr.refresh("s", ts, y)
    assert len(FITS) == fits  # no refit on refresh
    assert b.origin == ts[-1] > a.origin
    shift = tr._states["s"].model.bias_
    expected = np.mean(y[-12:]) + (shift[0] if shift is not None else 0.0)
    assert b.mean[0] == pytest.approx(max(expected, 0.0))


def test_nan_tail_and_gaps_still_publish_a_finite_forecast(daily_series):
    ts, y = daily_series
    y = y.copy()
    y[-5:] = np.nan
    y[300:350] = np.inf
    store = MemoryForecastStore()
    tr = Trainer(store)
    tr.fit("s", ts, y)
    fc = tr.refresh("s", ts, y)
    assert all(math.isfinite(v) for v in fc.mean + fc.quantiles["p90"])
    assert fc.observed[-1][0] == ts[-6]  # last finite observation


def test_short_history_is_on_fallback_with_the_reason(daily_series):
    ts, y = daily_series
    store = MemoryForecastStore()
    tr = Trainer(store)
    tr.fit("s", ts[-100:], y[-100:])
    fc = tr.refresh("s", ts[-100:], y[-100:])
    assert fc.status == "fallback" and fc.model == "persistence"
    assert "history too short" in fc.reason
    assert tr.status("s")["status"] == "fallback"


def test_refresh_before_any_fit_uses_persistence_and_says_so(daily_series):
    ts, y = daily_series
    fc = Trainer(MemoryForecastStore()).refresh("new", ts, y)
    assert fc.status == "fallback" and "not trained yet" in fc.reason
    assert fc.mean[0] == pytest.approx(y[-1])


def test_all_nan_data_is_never_published(daily_series):
    ts, _ = daily_series
    store = MemoryForecastStore()
    tr = Trainer(store)
    st = tr.fit("s", ts, np.full(len(ts), np.nan))
    assert st.status == "fallback" and "no finite values" in st.reason
    with pytest.raises(Exception, match="no finite values"):
        tr.refresh("s", ts, np.full(len(ts), np.nan))
    assert store.latest("s") is None


def test_live_error_drift_switches_to_fallback_and_schedules_a_retrain(daily_series):
    ts, y = daily_series
    store = MemoryForecastStore()
    tr = Trainer(store, drift_ratio=2.0, drift_min_points=6, retrain_interval_seconds=1e9, clock=lambda: 0.0)
    tr.fit("s", ts, y)
    assert not tr.due("s", now=0.0)
    tr.refresh("s", ts, y)
    # the level jumps far away from anything the model saw: live error >> backtest error
    step = 300.0
    ts2 = np.concatenate([ts, ts[-1] + step * np.arange(1, 13)])
    y2 = np.concatenate([y, np.full(12, np.nanmax(y) * 10 + 100)])
    fc = tr.refresh("s", ts2, y2)
    assert fc.status == "fallback" and "live error" in fc.reason
    assert tr.status("s")["needs_retrain"] is True
    assert tr.due("s", now=0.0)
    tr.fit("s", ts2, y2)
    assert tr.status("s")["needs_retrain"] is False


def test_a_model_that_returns_nan_falls_back_at_refresh(daily_series):
    class NaNModel(naive.Persistence):
        def predict(self, h, quantiles=(0.5, 0.9)):
            from forecaster.models import Prediction

            return Prediction(np.full(h, np.nan), {"p50": np.full(h, np.nan), "p90": np.full(h, np.nan)})

    register_model("nan_for_test", NaNModel)
    try:
        ts, y = daily_series
        tr = Trainer(MemoryForecastStore(), models=("nan_for_test",))
        tr.fit("s", ts, y)
        fc = tr.refresh("s", ts, y)
        assert fc.status == "fallback" and fc.model == "persistence"
        assert "failed to forecast" in fc.reason
    finally:
        unregister_model("nan_for_test")


def test_unknown_model_in_trainer_is_a_clear_error():
    from forecaster.models import ModelError

    with pytest.raises(ModelError, match="unknown model 'nope'"):
        Trainer(MemoryForecastStore(), models=("nope",))


def test_a_trainer_that_would_publish_fewer_samples_than_the_peak_gap_reads_is_refused():
    from forecaster.models import ModelError
    from forecaster.servingpolicy import MAX_HOLD
    from forecaster.servingscore import OBSERVED_POINTS, PEAK_SAMPLES

    assert PEAK_SAMPLES == MAX_HOLD == OBSERVED_POINTS  # the chooser and the adapter read the same samples
    with pytest.raises(ModelError, match=f"observed_points must be >= {OBSERVED_POINTS}"):
        Trainer(MemoryForecastStore(), observed_points=OBSERVED_POINTS - 1)


def test_a_model_that_loses_to_the_last_value_live_is_replaced_by_persistence_until_it_recovers(daily_series):
    ts, y = daily_series
    store = MemoryForecastStore()
    # the backtest-ratio rule is switched off: this is the live check against persistence
    tr = Trainer(store, models=("seasonal_naive",), drift_ratio=1e9, retrain_interval_seconds=1e9, clock=lambda: 0.0)
    tr.fit("s", ts, y)
    assert tr.refresh("s", ts, y).model == "seasonal_naive"
    step = 300.0
    level = float(np.nanmedian(y))
    served = []
    for i in range(1, 40):  # the series goes flat: yesterday's shape is wrong, the last value exact
        ts = np.append(ts, ts[-1] + step)
        y = np.append(y, level)
        fc = tr.refresh("s", ts, y)
        served.append(fc.model)
    assert served[0] == "seasonal_naive" and served[-1] == "persistence"
    assert "persistence's" in fc.reason and fc.status == "fallback"
    assert tr.status("s")["live_error_vs_persistence"] > 1.5


def _lose_live(tr, ts, y, points=40):
    """Refresh while the series sits flat: yesterday's shape is wrong, the last value exact."""
    level = float(np.nanmedian(y))
    for _ in range(points):
        ts = np.append(ts, ts[-1] + 300.0)
        y = np.append(y, level)
        fc = tr.refresh("s", ts, y)
    return ts, y, fc


def test_a_refit_keeps_the_live_fallback_until_the_new_model_wins_on_its_own_points(daily_series):
    ts, y = daily_series
    tr = Trainer(MemoryForecastStore(), models=("seasonal_naive",), drift_ratio=1e9, retrain_interval_seconds=1e9,
                 clock=lambda: 0.0)
    tr.fit("s", ts, y)
    ts, y, fc = _lose_live(tr, ts, y)
    assert fc.model == "persistence"
    tr.fit("s", ts, y)  # the scheduled refit: the new model has not shown it beats the last value
    fc = tr.refresh("s", ts, y)
    assert fc.model == "persistence" and fc.status == "fallback"
    assert "before the refit" in fc.reason and "seasonal_naive is served once" in fc.reason
    assert tr.status("s")["status"] == "fallback"
    served = []
    for _ in range(14):  # the daily shape returns: the model is exact, the last value is not
        ts = np.append(ts, ts[-1] + 300.0)
        y = np.append(y, y[-288])
        served.append(tr.refresh("s", ts, y).model)
    assert served[:11] == ["persistence"] * 11  # not before min_points of its own
    assert served[-1] == "seasonal_naive"


def test_a_fit_adopted_from_an_engine_keeps_the_fallback_and_a_forgotten_series_starts_clean(daily_series):
    from forecaster.training import fit_item

    ts, y = daily_series
    tr = Trainer(MemoryForecastStore(), models=("seasonal_naive",), drift_ratio=1e9, retrain_interval_seconds=1e9,
                 clock=lambda: 0.0)
    tr.fit("s", ts, y)
    ts, y, _ = _lose_live(tr, ts, y)
    tr.adopt(fit_item(tr.detached(), ("s", ts, y, 0.0, None)))
    assert tr.refresh("s", ts, y).model == "persistence"
    tr.forget("s")  # the workload changed: nothing carries over
    tr.fit("s", ts, y)
    assert tr.refresh("s", ts, y).model == "seasonal_naive"
