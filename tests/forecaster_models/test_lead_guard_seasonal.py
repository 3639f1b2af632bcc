"""Seasonal support in the lead-step guard: a daily peak the history has seen every day is served
at the lead steps, not held at the last value.

On a flat series with a short daily ramp the validation tail holds too few ramp points for the
evidence-weighted guard to trust the model (z well under ``EVIDENCE_Z``), so without support the
served first steps stay near persistence just before the peak: the predictive HPA then scales
after the load, like a reactive one. With support the model may move as far as the series moved
at the same steps a day earlier. The tail classes (test_tail_safety.py) still hold."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from forecaster.models.guard import GuardSpec, apply_guard, seasonal_moves
from forecaster.selection import DEFAULT_CANDIDATES, SelectionSettings, choose, evaluate_candidates

from .test_tail_safety import DAY, grid, on_off, walk_forward


def daily_ramp(rng, days=15, low=0.6, high=2.4, at=200, rise=4, hold=12):
    """0.6 cores with a little noise; every day a 20-minute rise to 2.4, an hour's peak, a fall."""
    y = low + rng.normal(0, 0.004, days * DAY)
    shape = np.concatenate([np.linspace(low, high, rise + 1)[1:], np.full(hold, high), np.linspace(high, low, rise + 1)[1:]])
    for d in range(days):
        s = d * DAY + at
        y[s : s + len(shape)] = shape + rng.normal(0, 0.004, len(shape))
    return y


def _rise_error(y: np.ndarray, means: np.ndarray, origins: np.ndarray) -> float:
    """h=1 error over the origins whose next point is on a rise."""
    nxt = y[origins + 1] - y[origins]
    on_rise = nxt > 0.2
    assert on_rise.sum() >= 2
    return float(np.mean(np.abs(y[origins + 1][on_rise] - means[on_rise, 0])))


def test_on_a_daily_ramp_the_first_steps_follow_the_ramp_the_days_before_had(rng):
    y = daily_ramp(rng)[: 14 * DAY]
    settings = SelectionSettings()
    res, actual, scale, origins = evaluate_candidates(y, grid(len(y)), list(DEFAULT_CANDIDATES), 12, settings)
    last = y[origins]
    _, plain = choose([replace(r, support=None) for r in res], actual, scale, settings, last=last)  # no support
    _, backed = choose(res, actual, scale, settings, last=last)
    assert plain.guard.weights[0] < 0.5  # too few ramp points on the tail for the evidence rule
    assert backed.guard.season == DAY
    pers = _rise_error(y, last[:, None], origins)
    # without support the rise is served nearly as persistence serves it; with it, nearly exactly
    assert _rise_error(y, plain.means, origins) > 0.5 * pers
    assert _rise_error(y, backed.means, origins) < 0.2 * pers


def test_on_a_daily_ramp_the_fitted_model_serves_the_rise_of_a_day_it_never_saw(rng):
    y = daily_ramp(rng)
    sel, mae_model, mae_pers = walk_forward(y)
    assert "same steps" in sel.reason, sel.reason
    assert mae_model < 0.5 * mae_pers, (sel.reason, mae_model, mae_pers)


@pytest.mark.parametrize("seed", [0, 1])
def test_on_off_series_whose_days_do_not_repeat_stay_within_persistence(seed):
    sel, mae_model, mae_pers = walk_forward(on_off(np.random.default_rng(seed)))
    assert mae_model <= 1.1 * mae_pers, (sel.reason, mae_model, mae_pers)


def test_support_lets_the_move_reach_as_far_as_the_earlier_move_in_its_direction_only():
    spec = GuardSpec(weights=(0.1, 0.1), max_move=0.5, gain_h1=0.0, z_h1=1.0, season=10)
    means = np.array([[20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [0.0, 0.0, 0.0]])
    last = np.array([10.0, 10.0, 10.0])
    support = np.array([[4.0, 30.0], [-4.0, -30.0], [4.0, 30.0]])
    out = apply_guard(means, last, spec, support)
    assert out[0].tolist() == pytest.approx([14.0, 20.0, 20.0])  # up to the earlier move, never past the model
    assert out[1, :2].tolist() == pytest.approx([10.5, 10.5])  # opposite: the plain guard
    assert out[2, :2].tolist() == pytest.approx([9.5, 9.5])  # model down, the season up: the plain guard


def test_seasonal_moves_look_one_season_back_and_leave_the_start_unknown():
    y = np.arange(30, dtype=float) ** 2
    got = seasonal_moves(y, np.array([5, 15, 29]), steps=2, season=10)
    assert np.isnan(got[0]).all()
    assert got[1].tolist() == [y[6] - y[5], y[7] - y[5]]
    assert got[2].tolist() == [y[20] - y[19], y[21] - y[19]]
