"""AR estimation, per-series selection and conformal calibration."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from forecaster.models import ModelError, get_model
from forecaster.models.ar import ols_autoreg
from forecaster.selection import SelectionSettings, conformal_offsets, select_and_fit


def autoreg_statsmodels(z: np.ndarray, lag_list: list[int]) -> np.ndarray:
    """The reference fit ols_autoreg must reproduce: statsmodels' AutoReg, conditional OLS with a constant."""
    from statsmodels.tsa.ar_model import AutoReg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # AutoReg warns about the index-free array; the estimate is what matters
        return np.asarray(AutoReg(z, lags=lag_list, trend="c").fit().params, dtype="float64")


def test_fast_ar_fit_matches_statsmodels_autoreg(slice_arrays):
    _, v = slice_arrays["azurev1-737498"]
    z = v[-2000:]
    z = np.where(np.isfinite(z), z, np.nanmean(z))
    lags = list(range(1, 13)) + [288]
    assert np.allclose(ols_autoreg(z, lags), autoreg_statsmodels(z, lags), rtol=1e-6, atol=1e-8)


def test_ar_recovers_the_coefficient_of_a_simulated_ar1(rng):
    n = 3000
    e = rng.normal(size=n)
    y = np.zeros(n)
    for t in range(1, n):
        y[t] = 2.0 + 0.7 * y[t - 1] + e[t]
    m = get_model("ar", lags=1, seasonal=False).fit(y)
    assert m.coef_[0] == pytest.approx(0.7, abs=0.05)
    assert m.const_ == pytest.approx(2.0, abs=0.3)


def test_conformal_offsets_cover_about_the_stated_quantile(rng):
    resid = rng.normal(size=(400, 12))
    offs = conformal_offsets(resid, (0.5, 0.9))
    fresh = rng.normal(size=(4000, 12))
    coverage = np.mean(fresh <= offs["p90"][None, :])
    assert 0.87 <= coverage <= 0.93
    assert np.all(np.abs(offs["p50"]) < 0.2)


def test_short_history_falls_back_to_persistence_and_says_why(daily_series):
    ts, y = daily_series
    sel = select_and_fit(y[-300:], ts[-300:], horizon=12)
    assert sel.fallback and sel.name == "persistence"
    assert "history too short" in sel.reason and "2 days" in sel.reason
    assert np.allclose(sel.model.predict(3).mean, y[-1])


def test_constant_series_uses_persistence_with_a_reason(daily_series):
    ts, _ = daily_series
    sel = select_and_fit(np.full(len(ts), 3.0), ts)
    assert sel.fallback and "constant" in sel.reason


def test_selection_beats_persistence_on_a_daily_cycle(slice_arrays):
    ts, v = slice_arrays["azure2019-cluster-cpu-cores"]
    sel = select_and_fit(v[-8 * 288 :], ts[-8 * 288 :], candidates=("persistence", "moving_average", "ar"), horizon=12)
    assert not sel.fallback
    assert sel.scores[sel.name] == min(sel.scores.values())
    assert sel.scores[sel.name] < sel.scores["persistence"]
    assert sel.name in sel.reason


def test_a_failing_candidate_is_skipped_and_reported(daily_series, monkeypatch):
    from forecaster.models import naive, register_model, unregister_model

    class Broken(naive.Persistence):
        def _fit(self, y):
            raise RuntimeError("boom")

    register_model("broken_for_test", Broken)
    try:
        ts, y = daily_series
        sel = select_and_fit(y, ts, candidates=("broken_for_test", "moving_average"))
        assert sel.name == "moving_average"
        assert "broken_for_test" in sel.reason and "boom" in sel.reason
    finally:
        unregister_model("broken_for_test")


def test_horizon_weights_change_what_counts(daily_series):
    ts, y = daily_series
    early = select_and_fit(y, ts, candidates=("persistence", "moving_average", "ar"),
                           settings=SelectionSettings(horizon_weights=(1.0,) + (0.0,) * 11, combine=False))
    assert early.scores[early.name] == min(early.scores.values())
    with pytest.raises(ModelError, match="horizon_weights"):
        SelectionSettings(horizon_weights=(-1.0, 0.0)).weights(2)


def test_ets_filter_reproduces_statsmodels_holt_winters(slice_arrays):
    import warnings

    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    _, v = slice_arrays["azure2019-cluster-cpu-cores"]
    y = v[-1600:]
    y = np.where(np.isfinite(y), y, np.nanmean(y))
    m = get_model("ets", fit_days=3).fit(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ExponentialSmoothing(y[-3 * 288 :], trend="add", damped_trend=True, seasonal="add",
                                   seasonal_periods=288, initialization_method="heuristic").fit(use_brute=False)
    assert np.allclose(m.predict(12).mean, ref.forecast(12), rtol=1e-6)
