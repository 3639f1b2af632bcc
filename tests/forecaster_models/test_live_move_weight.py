"""The trainer serves only the share of the model's lead-step move that the live points support
(``LiveSkill.move_weight``): all of it on a smooth cycle the model has right, about half of it
for a model that moves twice as far as the series, and the steps past the lead ones untouched."""

from __future__ import annotations

import numpy as np
import pytest

from core.store import MemoryForecastStore
from forecaster.models import naive, register_model, unregister_model
from forecaster.training import Trainer

DAY = 288


class Momentum2x(naive.MovingAverage):
    """Extrapolates the last one-step change twice over: on a smooth series its moves are right
    in direction and twice too large."""

    name = "momentum2x"

    def _mean_from(self, y, h):
        return y[-1] + 2.0 * (y[-1] - y[-2]) * np.arange(1, h + 1)


@pytest.fixture
def momentum():
    register_model("momentum2x", Momentum2x, window=2)
    yield "momentum2x"
    unregister_model("momentum2x")


def smooth_cycle(days=4, noise=0.05, seed=3):
    t = np.arange(days * DAY)
    y = 50 + 30 * np.sin(2 * np.pi * t / DAY) + np.random.default_rng(seed).normal(0, noise, len(t))
    return 1.7e9 + 300.0 * t, y


def run(tr, ts, y, steps):
    """Fit on all but the last ``steps`` points, then refresh at each of them."""
    tr.fit("s", ts[:-steps], y[:-steps])
    for i in range(len(y) - steps, len(y) + 1):
        fc = tr.refresh("s", ts[:i], y[:i])
    return fc


def test_a_model_that_moves_twice_as_far_as_the_series_is_served_about_half_its_lead_move(momentum):
    ts, y = smooth_cycle()
    tr = Trainer(MemoryForecastStore(), models=(momentum,), drift_ratio=1e9, retrain_interval_seconds=1e9, clock=lambda: 0.0)
    fc = run(tr, ts, y, 120)
    st = tr.state("s")
    w = st.skill.move_weight()
    assert 0.4 < w < 0.6 and not st.skill.drifted and fc.model == momentum
    last, own = y[-1], st.last_forecast[2]
    lead = tr.selection.lead_steps
    np.testing.assert_allclose(fc.mean[:lead], last + w * (own[:lead] - last))
    np.testing.assert_allclose(fc.mean[lead:], own[lead:])  # past the lead steps: the model's own
    own_p90 = st.model.predict(len(own), tr.quantiles).quantiles["p90"]
    np.testing.assert_allclose(np.subtract(fc.quantiles["p90"], fc.mean), own_p90 - own)  # the band moves with the mean


def test_on_a_smooth_cycle_the_model_has_right_its_whole_move_is_served_and_beats_the_last_value():
    ts, y = smooth_cycle(days=5)
    tr = Trainer(MemoryForecastStore(), models=("seasonal_naive",), drift_ratio=1e9, retrain_interval_seconds=1e9,
                 clock=lambda: 0.0)
    served, last = [], []
    tr.fit("s", ts[:-120], y[:-120])
    for i in range(len(y) - 120, len(y)):
        fc = tr.refresh("s", ts[:i], y[:i])
        served.append(fc.mean[0])
        last.append(y[i - 1])
    assert tr.state("s").skill.move_weight() > 0.95
    truth = y[len(y) - 120 :]
    # a guard that forced persistence at h=1 would serve ``last``, about 6x the error here
    assert np.mean(np.abs(truth - served)) < 0.3 * np.mean(np.abs(truth - np.array(last)))
