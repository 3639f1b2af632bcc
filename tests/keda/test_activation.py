"""adapter/keda/activation.py: the activation decision on an injected clock and state."""

from __future__ import annotations

from adapter.keda.activation import ActivationState, decide


def test_an_idle_workload_with_nothing_forecast_stays_inactive():
    act = decide(ActivationState(), 1000.0, forecast=0.0, observed=0.0, threshold=0.0, cooldown_seconds=300)
    assert not act.active
    assert act.state.last_above is None


def test_a_forecast_above_the_threshold_activates_before_anything_is_observed():
    act = decide(ActivationState(), 1000.0, forecast=0.4, observed=0.0, threshold=0.0, cooldown_seconds=300)
    assert act.active
    assert act.state.last_above == 1000.0
    assert "forecast 0.4" in act.reason


def test_observed_demand_alone_activates_when_no_forecast_is_served():
    act = decide(ActivationState(), 1000.0, forecast=None, observed=2.0, threshold=1.0, cooldown_seconds=300)
    assert act.active
    assert "observed 2" in act.reason


def test_demand_equal_to_the_threshold_does_not_activate_as_in_keda():
    act = decide(ActivationState(), 1000.0, forecast=1.0, observed=1.0, threshold=1.0, cooldown_seconds=300)
    assert not act.active


def test_deactivation_waits_for_the_whole_cooldown_below_the_threshold():
    state = decide(ActivationState(), 1000.0, 3.0, 3.0, 0.5, 300).state
    mid = decide(state, 1299.0, forecast=0.0, observed=0.0, threshold=0.5, cooldown_seconds=300)
    assert mid.active and "cooling down 1 s more" in mid.reason
    assert mid.state == state  # a poll below the threshold does not move the last time above
    end = decide(mid.state, 1300.0, forecast=0.0, observed=0.0, threshold=0.5, cooldown_seconds=300)
    assert not end.active


def test_a_forecast_above_during_the_cooldown_restarts_it():
    state = decide(ActivationState(), 1000.0, 3.0, 0.0, 0.5, 300).state
    state = decide(state, 1200.0, forecast=0.9, observed=0.0, threshold=0.5, cooldown_seconds=300).state
    assert state.last_above == 1200.0
    assert decide(state, 1450.0, 0.0, 0.0, 0.5, 300).active
    assert not decide(state, 1500.0, 0.0, 0.0, 0.5, 300).active


def test_observed_demand_above_keeps_it_active_whatever_the_forecast_says():
    state = decide(ActivationState(), 0.0, 3.0, 3.0, 0.5, 300).state
    act = decide(state, 10_000.0, forecast=0.0, observed=0.7, threshold=0.5, cooldown_seconds=300)
    assert act.active and act.state.last_above == 10_000.0


def test_a_zero_cooldown_deactivates_at_the_first_poll_below():
    state = decide(ActivationState(), 0.0, 3.0, 3.0, 0.5, 0).state
    assert not decide(state, 1.0, 0.0, 0.0, 0.5, 0).active
