"""The replay's scaling forecaster plug-in (replay/models.py) on hand-made series."""

from __future__ import annotations

import numpy as np

from forecaster.models import get_model
from replay.models import Recurrence, register


def _hourly_spikes(n=12 * 24 * 4):
    y = np.ones(n)
    y[5::12] = 10.0  # a spike at the same minute of every hour
    return y


def test_recurrence_predicts_a_spike_that_repeats_every_hour():
    y = _hourly_spikes()
    m = Recurrence(periods=(12,), lookback=3).fit(y[:600])
    o = np.array([12 * 60 + 4])  # the step before a spike
    f = m.rolling_means(y, o, 3)
    assert f[0, 0] == 10.0  # 1 + median(10 - 1, 10 - 1, 10 - 1)
    assert f[0, 1] < 5.0  # after the spike the hourly rise is negative: the base forecast


def test_recurrence_uses_nothing_after_the_origin():
    y = _hourly_spikes()
    m = Recurrence().fit(y[:700])
    o = np.arange(800, 900)
    a = m.rolling_means(y, o, 4)
    z = y.copy()
    for i, oi in enumerate(o):
        z2 = z.copy()
        z2[oi + 1 :] = 1e6
        np.testing.assert_allclose(m.rolling_means(z2, np.array([oi]), 4)[0], a[i], rtol=1e-9, atol=1e-9)


def test_recurrence_is_never_below_its_base_model():
    rng = np.random.default_rng(0)
    y = 50 + rng.normal(0, 5, 3000)
    m = Recurrence(agg="median").fit(y[:2500])
    o = np.arange(2600, 2990)
    base = m.base_.rolling_means(y, o, 4)
    assert np.all(m.rolling_means(y, o, 4) >= base)


def test_recurrence_is_available_through_the_model_registry():
    register()
    m = get_model("recurrence", agg="max")
    assert isinstance(m, Recurrence) and m.agg == "max"
    p = m.fit(_hourly_spikes()[:800]).predict(4, quantiles=(0.5, 0.9))
    assert len(p.mean) == 4 and np.all(p.quantiles["p90"] >= p.quantiles["p50"])
