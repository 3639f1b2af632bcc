"""Measured as shipped: the same history through `foresight train` (real Prometheus, real
Redis) and through the replay's pipeline publishes identical forecasts and serves identical
values at the same instants, each side from its own inputs: the adapter reads its observed
floor from Prometheus (its direct demand reading), the replay from its world's D(t - delay)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from adapter.core import AdapterCore
from adapter.fallback import ObservedDirect, PrometheusDemandReader
from forecaster.served import MetricSettings
from adapter.settings import AdapterSettings
from forecaster.config import TrainingConfig, load_config
from forecaster.sources.prometheus import open_source
from core.store import RedisForecastStore
from forecaster.schedule import train_once, trainer_from_config
from foresight.cli import main
from replay.pipeline import PipelineConfig, ProductionFeed
from replay.simulate import served_as_deployed

SID = "azurev1-618849"
DAYS = 3
STEP = 300.0
DELAY = 90.0
SYNC = 15.0


@pytest.fixture(scope="module")
def backfilled(trace_slice, prometheus_factory):
    from forecaster.frames import regularize, series_arrays

    arrays = {sid: (t, x) for sid, t, x in series_arrays(regularize(trace_slice, 300))}
    _, v = arrays[SID]
    v = np.asarray(v[-(DAYS + 1) * 288:], dtype="float64")
    assert np.isfinite(v).all()  # a gap would be bridged by Prometheus' lookback, not by us
    ts = 1_790_000_100 - STEP * np.arange(len(v))[::-1]
    ts = ts - ts % STEP
    # the demand every SYNC seconds, linear between the samples (the replay's D): the trainer's
    # 300-s range query reads the samples themselves, the adapter's instant reads D between them
    fine = np.arange(ts[0], ts[-1] + 1, SYNC)
    prom = prometheus_factory({"foresight_parity_cpu": [({"workload": "w"}, list(zip(fine.tolist(), np.interp(fine, ts, v).tolist())))]})
    return prom, ts, v


class _ReadAt:
    """The Prometheus source read as of ``at`` (the simulated clock): the adapter's direct
    demand reading is ``DELAY`` old, as the metric pipeline's is in the replay."""

    def __init__(self, source):
        self.source, self.at = source, 0.0

    def instant(self, query, time_s=None):
        return self.source.instant(query, time_s=self.at - DELAY)


def _config(tmp_path, prom_url, redis_url):
    cfg = {
        "source": {"url": prom_url, "step_seconds": STEP, "history_days": DAYS},
        "store": {"url": redis_url},
        "training": {"models": ["auto"], "retrain_interval_seconds": 3600},
        "workloads": [{"namespace": "shop", "name": "w", "demand_query": 'foresight_parity_cpu{workload="w"}',
                       "capacity": {"cpu_request_cores": 1.0, "ready_pods": 4}}],
    }
    p = tmp_path / "w.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _same(a, b):
    assert a.origin == b.origin and a.model == b.model and a.status == b.status
    np.testing.assert_array_equal(a.mean, b.mean)
    assert a.quantiles.keys() == b.quantiles.keys()
    for k in a.quantiles:
        np.testing.assert_array_equal(a.quantiles[k], b.quantiles[k])
    assert a.observed == b.observed
    assert {k: v for k, v in a.policy.items()} == {k: v for k, v in b.policy.items()}


def test_train_on_prometheus_and_redis_and_the_replay_publish_and_serve_the_same(backfilled, redis_url, tmp_path):
    prom, ts, v = backfilled
    config = load_config(_config(tmp_path, prom.url, redis_url))
    source = open_source(prom.url)
    store = RedisForecastStore(redis_url)
    trainer = trainer_from_config(config, store)
    pipeline = PipelineConfig(training=TrainingConfig(models=("auto",), retrain_interval_seconds=3600), history_days=DAYS)
    assert pipeline.training == config.training and pipeline.serving == config.serving
    # the replay publishes from the sample after DAYS days on, like train_once at s + delay
    start = float(ts[DAYS * 288] + DELAY)
    feed = ProductionFeed("shop/w", ts, v, delay_seconds=DELAY, start=start, end=start + 20 * STEP,
                          capacity_per_pod=1.0, pipeline=pipeline, step_seconds=STEP)
    settings = MetricSettings()
    reading = _ReadAt(source)
    clock = lambda: reading.at  # noqa: E731
    observed = ObservedDirect(PrometheusDemandReader(reading, config.series(), clock=clock), clock=clock, wait_seconds=10,
                              max_age_seconds=15)  # get() waits for a new reading at every instant
    adapter = AdapterCore(AdapterSettings(metric=settings, workload_capacity={"shop/w": {"ready_pods": 4, "cpu_request_cores": 1.0}}),
                          store, observed=observed)
    instants = feed.ts[feed.origins] + feed.delay  # when the replay's trainer publishes
    assert len(instants) >= 20
    served, floors = [], []
    try:
        for now in instants[:20]:  # 100 minutes: a retrain (hourly here) and many refreshes
            out = train_once(config, source, store, now=float(now), trainer=trainer)
            assert out["results"]["shop/w"]["published"], out["results"]
            live = store.latest("shop/w")
            replayed = feed.at(float(now))
            _same(live, replayed)
            for dt in (0.0, 60.0, 240.0):  # HPA syncs while this forecast is the latest
                t = reading.at = float(now + dt)
                # each side from its own inputs: the adapter from the forecast it read from Redis,
                # its own reading of the demand from Prometheus (taken by its reader thread,
                # waited for here) and the workload's configured capacity; the replay from its
                # feed, its world's D(t - delay) and its pods
                assert observed.get("shop/w") is not None
                a = adapter.served("predicted_cpu_load_ratio", "shop/w", live, t)
                d = float(np.interp(t - DELAY, ts, v))
                b = served_as_deployed(replayed, t, 4, 1.0, settings, d)
                assert a.observed == pytest.approx(d, rel=1e-9)  # the floor is the direct reading
                assert (a.source, a.headroom) == (b.source, b.headroom) and a.value == pytest.approx(b.value, rel=1e-9)
                served.append(a.value)
                floors.append(a.observed != float(live.observed[-1][1]))
    finally:
        observed.close()
        store.close()
    assert sum(floors) >= 20  # between samples the reading is not the published sample: the floor is the adapter's own
    assert feed.fits >= 2  # the hourly retrain happened inside the window, in both
    assert len(set(np.round(served, 6))) > 5  # the values moved: the comparison has teeth


def test_foresight_train_once_now_publishes_what_the_replay_publishes_at_that_instant(backfilled, redis_url, tmp_path, capsys):
    prom, ts, v = backfilled
    cfg = _config(tmp_path, prom.url, redis_url)
    now = float(ts[DAYS * 288 + 5] + DELAY)
    assert main(["train", "--config", str(cfg), "--once", "--now", str(now)]) == 0
    assert "shop/w: published" in capsys.readouterr().out
    pipeline = PipelineConfig(training=TrainingConfig(models=("auto",), retrain_interval_seconds=3600), history_days=DAYS)
    feed = ProductionFeed("shop/w", ts, v, delay_seconds=DELAY, start=now + STEP, end=now + 1,
                          capacity_per_pod=1.0, pipeline=pipeline, step_seconds=STEP)
    store = RedisForecastStore(redis_url)
    try:
        published = feed.ts[feed.origins] + feed.delay
        assert len(published) == 1 and published[0] == now
        _same(store.latest("shop/w"), feed.at(now))
    finally:
        store.close()
    assert main(["train", "--config", str(cfg), "--now", str(now)]) == 2  # --now needs --once
