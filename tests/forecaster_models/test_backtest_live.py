"""The backtest's ``auto`` is served as the trainer serves it: the live check between origins
(forecaster/backtest_live.py) falls back to persistence at an origin after the previous fit lost
to the last value live; anywhere else it changes at most how far the lead steps move from the
last value (the live move weight), never the steps after them."""

from __future__ import annotations

import numpy as np
import pytest

from bench.auto_rows import AutoRows, Row
from forecaster.backtest_live import LiveReplay
from forecaster.evaluation import BacktestSettings, origin_indices
from forecaster.models import get_model
from forecaster.selection import SelectionSettings

from .backtests import backtest

DAY = 288
CANDS = ("persistence", "moving_average", "ar")


def cycle_that_stalls(seed=4, days=9, flat_points=36):
    """A clean daily cycle that goes flat for the 3 hours before the second origin of a
    2-day evaluation window (and resumes): the model fitted at the first origin keeps
    forecasting the cycle and loses to the last value live; the 2-day validation tail of the
    next fit is mostly cycle, so selection still picks the model there."""
    rng = np.random.default_rng(seed)
    n = days * DAY
    t = np.arange(n)
    y = 40 + 25 * np.sin(2 * np.pi * t / DAY) + rng.normal(0, 0.5, n)
    o2 = n - 2 * DAY - 1 + 144
    y[o2 - flat_points : o2 + 1] = y[o2 - flat_points] + rng.normal(0, 0.2, flat_points + 1)
    return 1.7e9 + 300.0 * t, y


def settings():
    plain = Row("auto_plain", SelectionSettings(candidates=CANDS))  # the same selection, no live check
    return BacktestSettings(eval_days=2.0, train_days=6.0, extra_rows=AutoRows((plain,)))


def test_auto_serves_persistence_at_an_origin_after_the_model_lost_live_and_nowhere_else():
    ts, y = cycle_that_stalls()
    out = backtest("s", ts, y, ["persistence"], settings(), candidates=CANDS)
    assert [o.live_fallback for o in out] == [False, True, False, False]
    for o in out:
        auto, plain = o.forecasts["auto"][0], o.forecasts["auto_plain"][0]
        assert o.chosen == "ar"
        if o.live_fallback:
            assert np.allclose(auto, y[o.origin])  # persistence at every step, as the trainer serves it
            assert not np.allclose(plain, y[o.origin])
            window = y[o.origin + 1 - 6 * DAY : o.origin + 1]  # the trainer's fallback: uncalibrated persistence
            spread = get_model("persistence").fit(window, ts[o.origin + 1 - 6 * DAY : o.origin + 1]).predict(12)
            assert np.allclose(o.forecasts["auto"][1]["p90"], spread.quantiles["p90"])
        else:  # where it has not fallen back: the lead steps' moves scaled by one live weight
            last, lead = y[o.origin], SelectionSettings().lead_steps
            w = (auto[0] - last) / (plain[0] - last)
            assert 0.0 <= w <= 1.0 + 1e-9
            np.testing.assert_allclose(auto[:lead], last + w * (plain[:lead] - last))
            assert np.array_equal(auto[lead:], plain[lead:])
            band = o.forecasts["auto"][1]["p90"] - auto
            np.testing.assert_allclose(band, o.forecasts["auto_plain"][1]["p90"] - plain)


def test_without_the_stall_the_check_never_falls_back():
    ts, y = cycle_that_stalls(flat_points=0)
    out = backtest("s", ts, y, ["persistence"], settings(), candidates=CANDS)
    assert not any(o.live_fallback for o in out)


def replay_and_fit(y, ts):
    replay = LiveReplay("s", CANDS, SelectionSettings(candidates=CANDS), horizon=12, quantiles=(0.5, 0.9),
                        train_points=6 * DAY)
    return replay, lambda o: get_model("seasonal_naive").fit(y[o + 1 - 6 * DAY : o + 1], ts[o + 1 - 6 * DAY : o + 1])


def test_the_replay_scores_the_previous_fit_between_origins_and_hands_its_fallback_over():
    ts, y = cycle_that_stalls()
    o1, o2 = origin_indices(len(y), DAY, settings())[:2]
    replay, fit = replay_and_fit(y, ts)
    m1 = fit(o1)
    expected = m1.predict(12).mean
    big = np.full(12, 1e3)  # a backtest error the drift check never reaches: the live check alone
    mean, _, fell_back = replay.serve(y, ts, int(o1), m1, 0.5, big)
    assert not fell_back and mean == pytest.approx(expected)
    mean, _, fell_back = replay.serve(y, ts, int(o2), fit(o2), 0.5, big)
    assert fell_back and mean == pytest.approx(np.full(12, y[o2]))
    assert replay.refits == 0
    skill = replay.trainer.state("s").skill
    assert skill.drifted and skill.points == 0 and skill.inherited_from == "seasonal_naive"


def test_the_replay_refits_between_origins_when_the_drift_check_asks_as_the_trainer_does():
    ts, y = cycle_that_stalls()
    o1, o2 = origin_indices(len(y), DAY, settings())[:2]
    replay, fit = replay_and_fit(y, ts)
    tiny = np.full(12, 1e-3)  # live error far above this backtest error: the trainer refits at once
    replay.serve(y, ts, int(o1), fit(o1), 0.5, tiny)
    replay.serve(y, ts, int(o2), fit(o2), 0.5, tiny)
    assert replay.refits >= 1
    t = replay.take_steps()[:, 0]
    assert t[0] == o1 and t[-1] == o2 and len(t) == o2 - o1 + 1  # every sample was still served


def test_every_sample_between_origins_is_kept_as_served_one_step_ahead():
    ts, y = cycle_that_stalls()
    out = backtest("s", ts, y, ["persistence"], settings(), candidates=CANDS)
    assert len(out[0].steps) == 1 and out[0].steps[0, 0] == out[0].origin  # the first origin: its own refresh
    for prev, o in zip(out, out[1:]):
        t = o.steps[:, 0].astype(int)
        assert t.tolist() == list(range(prev.origin + 1, o.origin + 1))  # every sample, the origin included
        assert np.array_equal(o.steps[:, 1], y[t + 1]) and np.array_equal(o.steps[:, 3], y[t])
        assert o.steps[-1, 2] == o.forecasts["auto"][0][0]  # the origin's row is what the backtest scores
    stalled = out[1].steps
    on_persistence = np.isclose(stalled[:, 2], stalled[:, 3])
    first = int(np.argmax(on_persistence))
    assert stalled[first, 0] >= out[1].origin - 36 + 12  # not before min_points of the stall were scored
    assert on_persistence[first:].all()  # and from then on, between the origins too
