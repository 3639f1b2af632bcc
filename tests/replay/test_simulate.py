"""The replay: the production trainer on a simulated clock, no look-ahead, pod life cycle,
modes and the measured outputs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from forecaster.config import TrainingConfig
from forecaster.serving import POLICY_VERSION
from replay.pipeline import PipelineConfig
from replay.simulate import ReplayConfig, StartupModel, make_world, production_feed, run_mode

DAY = 86400


def _series(days=5, seed=1):
    rng = np.random.default_rng(seed)
    n = days * 288
    ts = np.arange(n, dtype="int64") * 300 + 1_600_000_200  # on the 300 s grid train_once queries
    daily = 50 + 30 * np.sin(np.arange(n) / 288 * 2 * np.pi)
    v = np.maximum(1.0, daily + rng.normal(0, 8, n))
    v[500:503] = np.nan  # a gap
    return ts, v


# a small, fast production pipeline: AR only (auto is exercised by the CLI and parity tests)
FAST = PipelineConfig(training=TrainingConfig(models=("ar",), retrain_interval_seconds=12 * 3600), history_days=3)
CFG = ReplayConfig(train_days=3, replay_days=2, startup=StartupModel("constant", 60), cores_per_unit=0.2, pipeline=FAST)


@pytest.mark.parametrize(
    "mode,over",
    [
        ("reactive", {}),
        ("predictive", {}),
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
        out.append((w, run_mode(w, mode, cfg)))
    (w, a), (_, b) = out
    # the perturbed sample first shows in D(t - delay) for t > cut - 300 + delay
    safe = w.t <= cut - 300 + CFG.delay_seconds
    assert safe.sum() > 1000
    np.testing.assert_array_equal(a.replicas[safe], b.replicas[safe])
    np.testing.assert_array_equal(a.ready[safe], b.ready[safe])
    # and the test can fail: the decisions after the cut do change
    assert not np.array_equal(a.replicas[~safe], b.replicas[~safe])


def test_the_production_trainer_only_ever_sees_samples_published_before_use(monkeypatch):
    import replay.pipeline as rp

    seen = []
    real = rp.step_workload

    def spy(trainer, sid, ts, vals, now, meta, fit=None):
        seen.append((now, float(ts[0]), float(ts[-1]), len(ts), trainer.due(sid, now)))
        return real(trainer, sid, ts, vals, now, meta, fit)

    monkeypatch.setattr(rp, "step_workload", spy)
    ts, v = _series()
    w = make_world("s", ts, v, CFG)
    feed = production_feed(w, CFG)
    run_mode(w, "predictive", CFG, feed)
    assert len(seen) >= 2 * 288  # one trainer step per 5-minute sample of the replay
    for now, first, last, n, _ in seen:
        assert last <= now - CFG.delay_seconds  # the metric pipeline's lag: nothing newer
        assert last == (now // 300) * 300  # exactly the window train_once pulls at `now`
        assert now - first <= FAST.history_days * DAY + CFG.delay_seconds
    fits = [s for s in seen if s[4]]
    assert 4 <= len(fits) <= 6  # 2 days at a 12 h retrain interval, plus the first fit
    assert feed.fits == len(fits)
    # every publication carries the serving policy the trainer chose at its last fit
    assert all(fc.policy and fc.policy["version"] == POLICY_VERSION for fc in feed.published)


def test_a_global_model_trains_once_across_the_replayed_fleet_or_else_on_its_own_series(monkeypatch):
    """``models: [ar, lstm]``: the global LSTM trains across the replayed series on what their
    first fits see (``replay_globals``, as ``foresight replay`` does) and every feed's trainer
    chooses with that network, not a new one; a feed given none trains it on its own series at
    its first fit. (Before, the replay's trainers skipped the LSTM: no fleet ever trained it.)"""
    from forecaster.models.lstm import GlobalLSTM
    from replay.series import replay_globals

    monkeypatch.setattr(GlobalLSTM, "DEFAULTS", {**GlobalLSTM.DEFAULTS, "epochs": 1, "hidden": 8, "window": 24,
                                                 "max_windows_per_series": 40, "threads": 1})
    trained = []
    real = GlobalLSTM.fit_fleet

    def counted(self, series, progress=None):
        trained.append([len(v) for v, _ in series])
        return real(self, series, progress)

    monkeypatch.setattr(GlobalLSTM, "fit_fleet", counted)
    cfg = replace(CFG, pipeline=replace(FAST, training=replace(FAST.training, models=("ar", "lstm"))))
    fleet = [(f"s{seed}", *_series(seed=seed)) for seed in (1, 2)]
    assert replay_globals(CFG, fleet) == {} and trained == []  # no global model among AR's
    protos = replay_globals(cfg, fleet)
    assert set(protos) == {"lstm"} and len(trained) == 1
    w = make_world("s1", *fleet[0][1:], cfg)
    first = production_feed(w, cfg).first_history()[1]
    assert trained[0] == [len(first)] * 2  # each series' first-fit history, nothing later
    feed = production_feed(w, cfg, protos)
    feed.advance(float(w.t0 + 3600))
    assert feed.fits == 1 and len(trained) == 1
    assert feed.trainer.prototypes["lstm"] is protos["lstm"]
    assert "lstm" in feed.trainer.status("s1")["scores"]
    alone = production_feed(w, cfg)
    alone.advance(float(w.t0 + 3600))
    assert len(trained) == 2 and trained[1] == [len(first)]  # a fleet of one, at the first fit
    assert "lstm" in alone.trainer.status("s1")["scores"]


def test_a_second_mode_reads_the_same_publications_as_the_store_held_them():
    ts, v = _series()
    w = make_world("s", ts, v, CFG)
    feed = production_feed(w, CFG)
    for t in w.t[:: 97]:
        fc = feed.at(float(t))
        assert fc is feed.latest()  # while advancing, at(t) is exactly store.latest
    again = [feed.at(float(t)) for t in w.t[:: 97]]
    assert again[-1] is feed.latest() and again[0] is not again[-1]


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


def test_lognormal_startup_is_seeded_and_reproducible():
    cfg = replace(CFG, startup=StartupModel("lognormal", 60, sigma=0.5), seed=7)
    w = _step_world(cfg)
    a = run_mode(w, "reactive", cfg)
    b = run_mode(w, "reactive", cfg)
    np.testing.assert_array_equal(a.ready, b.ready)
    d = StartupModel("lognormal", 60, sigma=0.5).draw(np.random.default_rng(0), 4000)
    assert 55 < np.median(d) < 65 and d.std() > 10


def test_predictive_mode_serves_through_the_adapter_rule(monkeypatch):
    import forecaster.served as am

    calls = []
    real = am.served_load_ratio

    def spy(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(am, "served_load_ratio", spy)
    w = _step_world(CFG)
    r = run_mode(w, "predictive", CFG)
    assert len(calls) == len(w.t)
    assert r.extra["served_sources"].get("forecast", 0) > 0


def test_too_short_series_is_a_clear_error():
    ts = np.arange(100, dtype="int64") * 300
    with pytest.raises(ValueError, match="train_days"):
        make_world("short", ts, np.ones(100), CFG)
