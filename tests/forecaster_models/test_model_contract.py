"""One contract over every registered model (statsforecast-style): horizon length, quantile
ordering, clones independent, bad input never yields NaN, rolling forecasts agree with
fit+predict."""

from __future__ import annotations

import numpy as np
import pytest

from core.store import quantile_key
from forecaster.models import ModelError, available_models, get_model
from tests.forecaster_models.conftest import FAST_PARAMS

MODELS = available_models()


def make(name: str):
    return get_model(name, **FAST_PARAMS.get(name, {}))


def test_registry_lists_the_models_the_issue_asks_for():
    for name in ("persistence", "seasonal_naive", "moving_average", "ets", "ar", "prophet", "lstm"):
        assert name in MODELS


def test_unknown_model_error_names_the_known_ones():
    with pytest.raises(ModelError) as e:
        get_model("arima-9000")
    assert "unknown model 'arima-9000'" in str(e.value)
    assert "persistence" in str(e.value) and "known:" in str(e.value)


@pytest.mark.parametrize("name", MODELS)
def test_predict_returns_h_points_and_ordered_quantiles(name, daily_series):
    ts, y = daily_series
    m = make(name).fit(y, ts)
    for h in (1, 12):
        p = m.predict(h, quantiles=(0.5, 0.9))
        assert len(p.mean) == h
        assert set(p.quantiles) == {quantile_key(0.5), quantile_key(0.9)}
        assert all(len(v) == h for v in p.quantiles.values())
        assert np.all(p.quantiles["p50"] <= p.quantiles["p90"])
        assert np.all(np.isfinite(p.mean))


@pytest.mark.parametrize("name", MODELS)
def test_clones_are_independent(name, daily_series):
    ts, y = daily_series
    a = make(name).fit(y, ts)
    before = a.predict(6).mean.copy()
    b = a.new()
    assert b is not a and b.name == a.name
    b.fit(y * 3.0 + 50.0, ts)
    assert np.allclose(a.predict(6).mean, before)
    assert not np.allclose(b.predict(6).mean, before)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(
    "case",
    ["gaps_and_inf", "constant", "short", "negative", "level_shift", "leading_nan"],
)
def test_bad_input_never_yields_nan(name, case, daily_series):
    ts, y = daily_series
    y = y.copy()
    if case == "gaps_and_inf":
        y[100:130] = np.nan
        y[500] = np.inf
        y[-3:] = np.nan
    elif case == "constant":
        y = np.full_like(y, 4.2)
    elif case == "short":
        y, ts = y[-7:], ts[-7:]
    elif case == "negative":
        y = y - 100.0
    elif case == "level_shift":
        y[len(y) // 2 :] += 60.0
    elif case == "leading_nan":
        y[:200] = np.nan
    m = make(name).fit(y, ts)
    p = m.predict(12, quantiles=(0.1, 0.5, 0.9))
    for arr in [p.mean, *p.quantiles.values()]:
        assert np.all(np.isfinite(arr)), (name, case)
    assert np.all(p.quantiles["p10"] <= p.quantiles["p50"])
    assert np.all(p.quantiles["p50"] <= p.quantiles["p90"])
    if case == "constant" and name != "lstm":
        assert np.allclose(p.mean, 4.2, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_all_nan_input_is_a_clear_model_error(name):
    with pytest.raises(ModelError, match="no finite values"):
        make(name).fit(np.full(50, np.nan))


@pytest.mark.parametrize("name", MODELS)
def test_rolling_forecast_equals_update_then_predict(name, daily_series):
    """The cheap pseudo-backtest and the refresh path give the same numbers."""
    ts, y = daily_series
    cut = len(y) - 100
    m = make(name).fit(y[:cut], ts[:cut])
    origin = cut + 40
    rolled = m.rolling_means(y, np.array([origin]), 12)[0]
    m.update(y[: origin + 1], ts[: origin + 1])
    assert np.allclose(m.predict(12).mean, rolled, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_forecast_uses_no_data_after_the_origin(name, daily_series):
    """Changing values after the origin cannot change the forecast made at the origin."""
    ts, y = daily_series
    cut = len(y) - 100
    m = make(name).fit(y[:cut], ts[:cut])
    origins = np.array([cut + 10, cut + 50])
    a = m.rolling_means(y, origins, 12)
    y2 = y.copy()
    y2[cut + 51 :] = 999.0
    b = m.rolling_means(y2, origins, 12)
    assert np.allclose(a, b)


def test_calibrated_offsets_replace_the_default_spread(daily_series):
    ts, y = daily_series
    m = get_model("moving_average").fit(y, ts)
    m.calibrate({"p50": np.zeros(3), "p90": np.array([1.0, 2.0, 3.0])})
    p = m.predict(3)
    assert np.allclose(p.quantiles["p90"] - p.mean, [1.0, 2.0, 3.0])
