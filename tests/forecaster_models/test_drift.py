"""The live check at the serving horizon: model error vs persistence's on the same points."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.errors import UserError
from forecaster.drift import DriftSettings, LiveSkill


def feed(guard: LiveSkill, actual, model, last) -> list[bool]:
    return [guard.observe(a, m, p) for a, m, p in zip(actual, model, last)]


def test_a_model_that_loses_to_the_last_value_falls_back_after_min_points():
    # an on/off series sitting at its low level; the model keeps forecasting halfway up
    actual = np.full(40, 0.25)
    g = LiveSkill(DriftSettings(ratio=1.5, min_points=12), model_name="ar_log")
    states = feed(g, actual, model=np.full(40, 5.0), last=actual + 0.01)
    assert states[:11] == [False] * 11  # not before min_points
    assert states[11] and all(states[11:])
    d = g.decision()
    assert d.drifted and d.ratio > 100 and d.points == 40
    assert "ar_log" in d.reason and "persistence" in d.reason and "limit 1.5x" in d.reason


def test_a_model_that_beats_persistence_is_kept(rng):
    t = np.arange(300)
    actual = 50 + 20 * np.sin(2 * np.pi * t / 48) + rng.normal(0, 0.5, 300)
    last = np.concatenate([[actual[0]], actual[:-1]])
    model = 50 + 20 * np.sin(2 * np.pi * t / 48)  # knows the cycle; persistence lags it
    g = LiveSkill()
    assert not any(feed(g, actual, model, last))
    assert g.decision().ratio < 0.5


def test_a_burst_that_hurts_both_equally_does_not_trigger_a_fallback(rng):
    # errors 30x larger during the burst, for both; the model stays 10% worse throughout
    size = np.concatenate([np.full(100, 1.0), np.full(40, 30.0)]) * rng.uniform(0.5, 1.5, 140)
    sign = rng.choice([-1.0, 1.0], 140)
    actual = 40 + rng.normal(0, 1, 140)
    last = actual + sign * size
    model = actual - sign * 1.1 * size
    g = LiveSkill()
    assert not any(feed(g, actual, model, last))


def test_gaps_are_skipped_without_changing_the_state():
    g = LiveSkill(DriftSettings(min_points=1))
    g.observe(1.0, 1.5, 1.0)
    before = (g.model_error, g.persistence_error, g.points)
    for bad in ((math.nan, 1.0, 1.0), (1.0, math.inf, 1.0), (1.0, 1.0, math.nan)):
        g.observe(*bad)
    assert (g.model_error, g.persistence_error, g.points) == before


def test_recovery_needs_the_ratio_below_recover_ratio():
    g = LiveSkill(DriftSettings(ratio=2.0, recover_ratio=1.0, min_points=1, half_life_points=2))
    feed(g, [0.0] * 5, [4.0] * 5, [1.0] * 5)
    assert g.drifted
    # ratio falls to between recover_ratio and ratio: still drifted (hysteresis)
    feed(g, [0.0] * 6, [1.5] * 6, [1.0] * 6)
    assert g.drifted and 1.0 < g.ratio() < 2.0
    feed(g, [0.0] * 20, [0.5] * 20, [1.0] * 20)
    assert not g.drifted and g.ratio() < 1.0


def test_tolerance_ignores_errors_too_small_to_matter():
    g = LiveSkill(DriftSettings(min_points=1, tolerance=0.05))
    assert not any(feed(g, [3.0] * 20, [3.02] * 20, [3.0] * 20))
    assert g.ratio() == 1.0
    g = LiveSkill(DriftSettings(min_points=1))
    assert all(feed(g, [3.0] * 20, [3.02] * 20, [3.0] * 20))  # exact persistence, inexact model
    assert math.isinf(g.ratio()) and "inf" in g.decision().reason


def test_old_points_fade_with_the_half_life():
    g = LiveSkill(DriftSettings(half_life_points=10, min_points=1))
    feed(g, [0.0] * 200, [5.0] * 200, [1.0] * 200)  # a long bad stretch
    assert g.drifted
    feed(g, [0.0] * 100, [0.2] * 100, [1.0] * 100)
    assert g.ratio() < 0.3 and not g.drifted


def test_bad_settings_name_every_field_at_once():
    with pytest.raises(UserError) as e:
        DriftSettings(ratio=0.5, min_points=0, half_life_points=0, tolerance=-1)
    msg = str(e.value)
    for field in ("drift.ratio", "drift.min_points", "drift.half_life_points", "drift.tolerance"):
        assert field in msg


def test_a_refit_keeps_a_fallback_until_the_new_model_recovers_on_its_own_points():
    s = DriftSettings(ratio=1.5, recover_ratio=1.1, min_points=12)
    old = LiveSkill(s, model_name="ar_log")
    feed(old, [0.0] * 20, [3.0] * 20, [1.0] * 20)
    assert old.drifted
    new = old.handover("ets")
    assert new.drifted and new.points == 0 and new.model_error == 0.0  # none of the old errors
    d = new.decision()
    assert d.drifted and d.ratio is None
    assert "ar_log" in d.reason and "ets is served once" in d.reason and "below 1.1x" in d.reason
    # a new model between recover_ratio and ratio stays on persistence (hysteresis) ...
    states = feed(new, [0.0] * 12, [1.3] * 12, [1.0] * 12)
    assert all(states) and "ets" in new.decision().reason and "until it is below 1.1x" in new.decision().reason
    # ... and one that beats persistence is served again once it has min_points of its own
    recovering = old.handover("ets")
    states = feed(recovering, [0.0] * 12, [0.5] * 12, [1.0] * 12)
    assert states[:11] == [True] * 11 and not states[11]


def test_a_refit_after_no_fallback_starts_clean():
    old = LiveSkill(DriftSettings(min_points=1), model_name="ar")
    feed(old, [0.0] * 5, [1.2] * 5, [1.0] * 5)  # worse, but under the limit
    new = old.handover("ets", DriftSettings(ratio=2.0))
    assert not new.drifted and new.points == 0 and new.settings.ratio == 2.0 and new.inherited_from == ""


def test_a_fallback_handed_over_twice_still_names_the_model_that_lost():
    old = LiveSkill(DriftSettings(min_points=1), model_name="ar")
    feed(old, [0.0] * 3, [5.0] * 3, [1.0] * 3)
    twice = old.handover("ets").handover("ar_log")
    assert twice.drifted and twice.inherited_from == "ar"


def _moves(rng, n=200, factor=1.0, noise=0.0):
    """The model moves ``move`` from the last value; the series then moves ``factor * move``
    plus independent noise."""
    last = 50 + rng.normal(0, 5, n)
    move = rng.normal(0, 2, n)
    actual = last + factor * move + rng.normal(0, noise, n) if noise else last + factor * move
    return actual, last + move, last


def test_the_move_weight_keeps_a_model_whose_moves_come_true(rng):
    g = LiveSkill()
    actual, model, last = _moves(rng)
    feed(g, actual, model, last)
    assert g.move_weight() == pytest.approx(1.0)


def test_the_move_weight_halves_a_model_that_moves_twice_as_far_as_the_series(rng):
    g = LiveSkill()
    actual, model, last = _moves(rng, factor=0.5)
    feed(g, actual, model, last)
    assert g.move_weight() == pytest.approx(0.5)
    assert not g.drifted  # it beats the last value (ratio 0.5): no fallback, only a smaller move


def test_the_move_weight_drops_towards_zero_when_the_moves_are_noise(rng):
    g = LiveSkill()
    actual, model, last = _moves(rng, factor=0.0, noise=2.0)
    feed(g, actual, model, last)
    assert 0.0 <= g.move_weight() < 0.25
    g2 = LiveSkill()
    feed(g2, *_moves(rng, factor=-1.0))  # moves the wrong way every time: clipped at 0, never negative
    assert g2.move_weight() == 0.0


def test_the_move_weight_is_one_before_min_points_and_while_the_model_sits_on_the_last_value(rng):
    g = LiveSkill(DriftSettings(min_points=12))
    actual, model, last = _moves(rng, n=11, factor=0.0, noise=2.0)
    feed(g, actual, model, last)
    assert g.move_weight() == 1.0
    flat = LiveSkill(DriftSettings(min_points=1))
    feed(flat, [1.0, 2.0, 3.0], [5.0] * 3, [5.0] * 3)  # no move to weigh
    assert flat.move_weight() == 1.0


def test_a_refit_inherits_the_move_weight_and_its_own_points_take_over(rng):
    old = LiveSkill(model_name="ar")
    feed(old, *_moves(rng, factor=0.0, noise=6.0))  # moves that are noise, too small to lose by 1.5x
    assert old.move_weight() < 0.25 and not old.drifted
    new = old.handover("ets")
    assert new.points == 0 and new.move_weight() == old.move_weight()  # the series' evidence, not the model's
    feed(new, *_moves(rng, n=300, factor=1.0))  # the new model's moves come true
    assert new.move_weight() > 0.95


def test_a_check_pickled_before_the_move_weight_existed_still_loads_and_weighs_nothing():
    import pickle

    g = LiveSkill()
    feed(g, [1.0] * 20, [2.0] * 20, [1.5] * 20)
    for name in ("_move_points", "_move_gain", "_move_size"):
        del g.__dict__[name]  # what an older checkpoint holds
    back = pickle.loads(pickle.dumps(g))
    assert back.move_weight() == 1.0
    back.observe(1.0, 2.0, 1.5)
    assert back._move_points == 1
