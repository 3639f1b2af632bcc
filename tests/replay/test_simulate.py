"""The walk-forward replay: no look-ahead, pod life cycle, modes and the measured outputs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from replay.simulate import (
    ReplayConfig,
    StartupModel,
    make_world,
    run_mode,
    walk_forward_forecasts,
)

DAY = 86400


class LastValuePlusSpread:
    """A tiny model following the forecaster protocol: persistence with a fixed p90 spread.
    Records every history it was given so tests can check what it saw."""

    seen: list = []

    def __init__(self):
        self.last_ = None

    def fit(self, y, timestamps=None):
        y = np.asarray(y, dtype="float64")
        LastValuePlusSpread.seen.append(("fit", float(np.asarray(timestamps)[-1]), len(y)))
        self.last_ = float(y[np.isfinite(y)][-1])
        self.spread_ = float(np.nanstd(np.diff(y))) if len(y) > 2 else 0.0
        return self

    def predict(self, h, quantiles=(0.5, 0.9)):
        from forecaster.models.base import Prediction

        mean = np.full(h, self.last_)
        return Prediction(mean=mean, quantiles={f"p{int(q * 100)}": mean + (q - 0.5) * 2 * self.spread_ for q in quantiles})

    def rolling_means(self, y, origins, h):
        LastValuePlusSpread.seen.append(("roll", int(np.max(origins)), len(y)))
        return np.repeat(np.asarray(y)[origins][:, None], h, axis=1)


def _series(days=5, seed=1):
    rng = np.random.default_rng(seed)
    n = days * 288
    ts = np.arange(n, dtype="int64") * 300 + 1_600_000_000
    daily = 50 + 30 * np.sin(np.arange(n) / 288 * 2 * np.pi)
    v = np.maximum(1.0, daily + rng.normal(0, 8, n))
    v[500:503] = np.nan  # a gap
    return ts, v


CFG = ReplayConfig(train_days=3, replay_days=2, startup=StartupModel("constant", 60), cores_per_unit=0.2, refit_hours=12)


@pytest.mark.parametrize(
    "mode,over",
    [
        ("reactive", {}),
        ("predictive", {}),
        ("predictive+warm", {}),
        ("predictive", {"margin_lambda": 100.0, "margin_history_days": 1.0}),
        ("predictive", {"margin_lambda": 100.0, "margin_history_days": 1.0, "headroom": "auto", "headroom_sources": ("model", "persistence")}),
    ],
)
def test_perturbing_the_future_never_changes_earlier_decisions(mode, over):
    cfg = replace(CFG, **over)
    ts, v = _series()
    cut = ts[0] + int(4 * DAY)  # a sample inside the replay
    v2 = v.copy()
    after = ts >= cut
    v2[after] = v2[after] * 3 + 40  # a completely different future
    out = []
    for vals in (v, v2):
        w = make_world("s", ts, vals, cfg)
        fc = walk_forward_forecasts(w, cfg, model_factory=LastValuePlusSpread) if mode != "reactive" else None
        out.append((w, run_mode(w, mode, cfg, fc)))
    (w, a), (_, b) = out
    # the perturbed sample first shows in D(t - delay) for t > cut - 300 + delay
    safe = w.t <= cut - 300 + CFG.delay_seconds
    assert safe.sum() > 1000
    np.testing.assert_array_equal(a.replicas[safe], b.replicas[safe])
    np.testing.assert_array_equal(a.ready[safe], b.ready[safe])
    # and the test can fail: the decisions after the cut do change
    assert not np.array_equal(a.replicas[~safe], b.replicas[~safe])


def test_the_forecaster_only_ever_sees_samples_published_before_use():
    ts, v = _series()
    w = make_world("s", ts, v, CFG)
    LastValuePlusSpread.seen = []
    fc = walk_forward_forecasts(w, CFG, model_factory=LastValuePlusSpread)
    # every row: origin sample + delay == publication time, origin is a sample timestamp
    assert np.all(fc.published == fc.origin + CFG.delay_seconds)
    assert np.all((fc.origin - ts[0]) % 300 == 0)
    fits = [s for s in LastValuePlusSpread.seen if s[0] == "fit"]
    assert len(fits) == fc.refits >= 4  # 2 days at 12 h refits
    # each fit window ends before the first forecast it serves is published
    refit_times = w.t0 + np.arange(len(fits)) * CFG.refit_hours * 3600
    for (_, last_ts, n), T in zip(fits, refit_times):
        assert last_ts <= T - CFG.delay_seconds
        assert n <= CFG.train_days * 288 + 1
    # the mean of a persistence model is the (carried-forward) sample at its origin
    idx = (fc.origin - ts[0]) // 300
    finite = np.isfinite(v[idx])
    np.testing.assert_allclose(fc.mean[finite, 0], v[idx][finite] * CFG.cores_per_unit)


def _step_world(cfg, low=5.0, high=15.0):
    """Demand flat at `low` cores for 2 days then `high` from day 2.5 on (a 5-minute ramp)."""
    n = 4 * 288
    ts = np.arange(n, dtype="int64") * 300
    v = np.full(n, low)
    v[int(2.5 * 288):] = high
    return make_world("step", ts, v, replace(cfg, cores_per_unit=1.0, train_days=2, replay_days=2))


def test_reactive_lags_a_step_by_the_metric_delay_plus_startup_while_the_oracle_is_ready():
    cfg = replace(CFG, startup=StartupModel("constant", 60))
    w = _step_world(cfg)
    react = run_mode(w, "reactive", replace(cfg, train_days=2, replay_days=2))
    orac = run_mode(w, "oracle", replace(cfg, train_days=2, replay_days=2))
    assert react.ready[0] == 8  # ceil(5 / 0.7)
    step_t = 2.5 * DAY
    first_full = w.t[np.argmax(react.ready >= 15 / 0.9)]
    # the ramp starts at step_t - 300 (linear between samples): the reactive HPA sees it
    # delay seconds later and its pods need the start-up time on top
    assert first_full >= step_t - 300 + cfg.delay_seconds + 60
    assert react.slo_violation_minutes > 0
    assert orac.slo_violation_minutes == 0
    assert react.scale_events > 0 and orac.scale_events > 0


def test_scale_down_removes_starting_pods_first_and_replica_minutes_count_them():
    cfg = replace(CFG, startup=StartupModel("constant", 1800))  # slow pods: still starting at scale-down
    # up at day 2.5, back down 10 minutes later
    n = 4 * 288
    ts = np.arange(n, dtype="int64") * 300
    v = np.full(n, 5.0)
    v[int(2.5 * 288): int(2.5 * 288) + 2] = 30.0
    w = make_world("blip", ts, v, replace(cfg, cores_per_unit=1.0, train_days=2, replay_days=2))
    r = run_mode(w, "oracle", replace(cfg, train_days=2, replay_days=2))
    # never more ready pods than the initial 8: the new pods were removed before they started
    assert r.ready.max() == 8
    assert r.replicas.max() > 8
    step_min = cfg.step_seconds / 60
    assert r.replica_minutes == pytest.approx(r.replicas.sum() * step_min)


def test_warm_pool_serves_scale_ups_after_the_claim_latency_and_costs_its_pods():
    cfg = replace(CFG, startup=StartupModel("constant", 120), warm_pool_size=20, warm_claim_seconds=1)
    w = _step_world(cfg)
    fc = walk_forward_forecasts(w, cfg, model_factory=LastValuePlusSpread)
    cold = run_mode(w, "predictive", cfg, fc)
    warm = run_mode(w, "predictive+warm", cfg, fc)
    assert warm.slo_violation_minutes < cold.slo_violation_minutes
    # the pool (20 pods, warm or refilling) is paid for all the time
    assert warm.replicas.min() >= 20 + cfg.min_replicas
    assert warm.replica_minutes > cold.replica_minutes


def test_lognormal_startup_is_seeded_and_reproducible():
    cfg = replace(CFG, startup=StartupModel("lognormal", 60, sigma=0.5), seed=7)
    w = _step_world(cfg)
    a = run_mode(w, "reactive", cfg)
    b = run_mode(w, "reactive", cfg)
    np.testing.assert_array_equal(a.ready, b.ready)
    d = StartupModel("lognormal", 60, sigma=0.5).draw(np.random.default_rng(0), 4000)
    assert 55 < np.median(d) < 65 and d.std() > 10


def test_predictive_mode_serves_through_the_adapter_rule(monkeypatch):
    import adapter.metrics as am

    calls = []
    real = am.served_load_ratio

    def spy(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(am, "served_load_ratio", spy)
    w = _step_world(CFG)
    fc = walk_forward_forecasts(w, CFG, model_factory=LastValuePlusSpread)
    run_mode(w, "predictive", CFG, fc)
    assert len(calls) == len(w.t)


def test_too_short_series_is_a_clear_error():
    ts = np.arange(100, dtype="int64") * 300
    with pytest.raises(ValueError, match="train_days"):
        make_world("short", ts, np.ones(100), CFG)


def test_adaptive_margin_grows_on_a_series_whose_rises_the_forecast_misses():
    from replay.simulate import adaptive_margins

    cfg = replace(CFG, margin_lambda=200.0, margin_history_days=1.0, quantile="p50")
    rng = np.random.default_rng(3)
    n = 5 * 288
    ts = np.arange(n, dtype="int64") * 300
    calm = np.full(n, 50.0)
    bursty = 50 + 60 * (rng.random(n) < 0.15)  # unforeseeable bursts
    ms = []
    for v in (calm, bursty):
        w = make_world("s", ts, v, cfg)
        fc = walk_forward_forecasts(w, cfg, model_factory=LastValuePlusSpread)
        m = adaptive_margins(w, fc, cfg)
        ms.append(m[fc.published >= w.t0])
    assert ms[0].max() <= 1.0  # nothing to protect against: no margin
    assert ms[1].min() > 1.3  # bursts: a large margin pays for itself at lambda 200


def test_served_headroom_scales_what_the_adapter_serves_so_the_observed_floor_gets_headroom_too():
    """With the served shape the day's margin scales all the adapter serves from (forecast path
    and observed floor, target Value unchanged): a burst that only the
    observed floor sees (the forecast is flat) is met with proportionally more pods than with
    the quantile shape, where the margin scales the forecast alone."""
    from replay.simulate import adaptive_headroom

    rng = np.random.default_rng(5)
    n = 5 * 288
    ts = np.arange(n, dtype="int64") * 300
    v = 50 + 60 * (rng.random(n) < 0.15)
    base = replace(CFG, margin_lambda=200.0, margin_history_days=1.0, quantile="p50", margin_grid=(1.5,))
    w = make_world("s", ts, v, base)
    fc = walk_forward_forecasts(w, base, model_factory=LastValuePlusSpread)
    served = replace(base, headroom="served")
    hr = adaptive_headroom(w, fc, served)
    live = fc.published >= w.t0
    assert np.all(hr["q_scale"][live] == 1.0) and np.all(hr["target_div"][live] == 1.5)
    q = run_mode(w, "predictive", base, fc)
    s = run_mode(w, "predictive", served, fc)
    # the same x1.5 on the forecast only vs on the served value (forecast or observed floor):
    # the burst seen by the observed floor gets 1.5x the pods with the served shape
    assert s.slo_violation_minutes <= q.slo_violation_minutes
    assert s.replica_minutes > q.replica_minutes
    burst = w.observed > w.observed.min() * 1.5
    assert np.mean(s.replicas[burst] > q.replicas[burst]) > 0.5


def test_auto_headroom_picks_the_cheapest_candidate_of_the_past_days_only():
    from replay.simulate import adaptive_headroom

    ts, v = _series()
    cfg = replace(CFG, margin_lambda=100.0, margin_history_days=1.0, quantile="p50", headroom="auto",
                  headroom_sources=("model", "persistence"))
    w = make_world("s", ts, v, cfg)
    fc = walk_forward_forecasts(w, cfg, model_factory=LastValuePlusSpread)
    hr = adaptive_headroom(w, fc, cfg)
    live = fc.published >= w.t0
    assert np.all(hr["choice"][live] >= 0)
    # one choice per refit period: constant between refit times
    day = ((fc.published[live] - w.t0) // (cfg.refit_hours * 3600)).astype(int)
    for d in np.unique(day):
        assert len(np.unique(hr["choice"][live][day == d])) == 1
    # the served shape never scales the quantile, the quantile shape never the target
    assert np.all((hr["q_scale"][live] == 1.0) | (hr["target_div"][live] == 1.0))
    # the served shape never goes below its floor (m < 1 would serve less than observed)
    assert hr["target_div"][live].min() >= cfg.served_min_margin
    low = adaptive_headroom(w, fc, replace(cfg, headroom="served", served_min_margin=1.2))
    assert low["target_div"][live].min() >= 1.2
    with pytest.raises(ValueError, match="headroom"):
        adaptive_headroom(w, fc, replace(cfg, headroom="sideways"))
