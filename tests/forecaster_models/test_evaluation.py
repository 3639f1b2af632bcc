"""Walk-forward protocol: origins, no look-ahead (spy model), metrics by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.evaluation import (
    BacktestSettings,
    metrics_rows,
    naive_scale,
    origin_indices,
    summarize,
)
from forecaster.models import naive, register_model, unregister_model

from .backtests import backtest

SEEN: list[float] = []
MIN_SEEN: list[float] = []


class Spy(naive.Persistence):
    """Records the largest value it was ever shown (the series is its own index)."""

    def fit(self, y, timestamps=None):
        SEEN.append(float(np.nanmax(y)))
        MIN_SEEN.append(float(np.nanmin(y)))
        return super().fit(y, timestamps)

    def update(self, y, timestamps=None):
        SEEN.append(float(np.nanmax(y)))
        return super().update(y, timestamps)

    def rolling_means(self, y, origins, h):
        SEEN.append(float(np.nanmax(y[: int(np.max(origins)) + 1])))
        return super().rolling_means(y, origins, h)


def test_fourteen_origins_twelve_hours_apart_in_the_last_seven_days():
    n = 21 * 288
    o = origin_indices(n, 288, BacktestSettings())
    assert len(o) == 14
    assert np.all(np.diff(o) == 144)
    assert o[0] == n - 7 * 288 - 1
    assert o[-1] + 12 <= n - 1


def test_forecasts_at_an_origin_do_not_change_when_later_data_changes(slice_arrays):
    """No look-ahead, for every model and for auto: garbage after origin k leaves the
    forecasts made at origins <= k untouched."""
    ts, v = slice_arrays["azurev1-1985204"]
    ts, v = ts[-10 * 288 :], v[-10 * 288 :]
    models = ["persistence", "seasonal_naive", "moving_average", "ar", "ar_log"]
    base = backtest("s", ts, v, models, candidates=("persistence", "moving_average", "ar"))
    k = base[5].origin
    v2 = v.copy()
    v2[k + 1 :] = np.random.default_rng(1).uniform(0, 500, size=len(v2) - k - 1)
    other = backtest("s", ts, v2, models, candidates=("persistence", "moving_average", "ar"))
    for a, b in zip(base, other):
        for m in models + ["auto"]:
            same = np.allclose(a.forecasts[m][0], b.forecasts[m][0]) and np.allclose(
                a.forecasts[m][1]["p90"], b.forecasts[m][1]["p90"])
            if a.origin <= k:
                assert same, (m, a.origin)
    assert any(not np.allclose(a.forecasts["ar"][0], b.forecasts["ar"][0]) for a, b in zip(base, other) if a.origin > k)


def test_training_window_is_capped_at_fourteen_days():
    register_model("spy_for_test", Spy)
    try:
        n = 25 * 288
        y = np.arange(n, dtype=float)
        ts = 1.7e9 + 300.0 * np.arange(n)
        SEEN.clear()
        MIN_SEEN.clear()
        backtest("s", ts, y, ["spy_for_test"], auto=False)
        first_origin = origin_indices(n, 288, BacktestSettings())[0]
        assert min(MIN_SEEN) >= first_origin + 1 - 14 * 288
        assert min(MIN_SEEN) == first_origin + 1 - 14 * 288
    finally:
        unregister_model("spy_for_test")


def test_metrics_match_a_hand_computation():
    n = 10 * 288
    rng = np.random.default_rng(3)
    y = np.cumsum(rng.normal(size=n)) + 100
    ts = 1.7e9 + 300.0 * np.arange(n)
    origins = backtest("s", ts, y, ["persistence"], auto=False)
    rows = pd.DataFrame(metrics_rows("s", origins))
    o = origins[0]
    err1 = [abs(y[x.origin + 1] - y[x.origin]) for x in origins]
    r1 = rows[(rows.model == "persistence") & (rows.h == 1)].iloc[0]
    assert r1.mae == pytest.approx(np.mean(err1))
    lo = max(0, o.origin + 1 - 14 * 288)
    assert o.scale == pytest.approx(np.mean(np.abs(np.diff(y[lo : o.origin + 1]))))
    assert 0.0 <= r1.coverage_p90 <= 1.0
    assert set(rows.columns) >= {"series_id", "model", "h", "mae", "mase", "pinball_p90", "coverage_p90"}


def test_naive_scale_ignores_gaps_and_is_positive_on_flat_data():
    assert naive_scale(np.array([1.0, np.nan, 2.0, 4.0])) == pytest.approx(2.0)
    assert naive_scale(np.array([5.0, 5.0, 5.0])) > 0


def test_auto_and_skill_appear_in_the_summary(slice_arrays):
    ts, v = slice_arrays["azurev1-825849"]
    ts, v = ts[-10 * 288 :], v[-10 * 288 :]
    origins = backtest("x", ts, v, ["persistence", "moving_average"], candidates=("persistence", "moving_average"))
    rows = pd.DataFrame(metrics_rows("x", origins))
    s = summarize(rows)
    assert {"auto", "persistence", "moving_average"} <= set(s.index)
    assert s.loc["persistence", "skill_median"] == pytest.approx(0.0)
    assert all(o.chosen for o in origins)


def test_a_row_with_its_own_candidates_chooses_among_them_from_fits_made_once(slice_arrays):
    """An extra row with other candidates (as the benchmark scores ``models: [auto, lstm,
    prophet]``): seasonal_naive is neither a model of the run nor a default candidate, so that
    row alone uses it; with one candidate and no bias shift it serves exactly that forecast."""
    from bench.auto_rows import AutoRows, Row
    from forecaster.evaluation import _all_candidates, _fit_predict_all
    from forecaster.selection import SelectionSettings

    ts, v = slice_arrays["azurev1-618849"]
    ts, v = ts[-10 * 288 :], v[-10 * 288 :]
    own = SelectionSettings(candidates=("seasonal_naive",), bias_correct=False)
    settings = BacktestSettings(selection=SelectionSettings(candidates=("persistence", "ar")),
                                extra_rows=AutoRows((Row("auto_sn", own),)))
    assert _all_candidates(settings) == ["persistence", "ar", "seasonal_naive"]
    origins = backtest("s", ts, v, ["persistence"], settings)
    for o in origins:
        season = 288
        expect = v[o.origin + 1 - season : o.origin + 1 - season + 12]
        assert np.allclose(o.forecasts["auto_sn"][0], expect), o.origin
        assert not np.allclose(o.forecasts["auto"][0], expect)
    # every row of auto is timed (its candidates' fits plus its choice), not only auto
    tm: dict[str, float] = {}
    y = v[-6 * 288 :]
    _fit_predict_all(y, ts[-6 * 288 :], {"persistence": "persistence", "ar": "ar", "seasonal_naive": "seasonal_naive"},
                     settings, ["persistence", "ar"], tm)
    assert set(tm) == {"persistence", "ar", "seasonal_naive", "auto", "auto_sn"} and min(tm.values()) > 0
