"""`foresight history` and `foresight train` read 28+ days through a real Thanos Query (built from
github.com/thanos-io/thanos, see conftest.py), and each Thanos parameter the source passes
(``max_source_resolution``, ``dedup``, ``partial_response``) changes what comes back the way
Thanos documents it. Every expected value is computed from ``demand(t)``, the backfilled series.
"""

from __future__ import annotations

import numpy as np
import yaml

from tests.thanos.conftest import DAY, GAP_B, HOUR, SELECTOR, demand, foresight, history, series, window_mean

LABELS = 'cluster="e2e",namespace="shop",workload="checkout"'


def assert_penalty_deduplicated(T: int, ts: np.ndarray, got: np.ndarray) -> None:
    """Thanos' default (penalty) deduplication drops a sample or two where it switches from one
    replica to the other (measured here: at replica b's gap and 30 minutes later), so at most one
    hourly point in the hour after the switch carries the sample one minute earlier. Everything
    else is the backfilled series bit for bit, and nothing is missing."""
    assert not np.isnan(got).any()
    off = got != demand(ts)
    switch = (ts >= T + GAP_B[0]) & (ts <= T + GAP_B[0] + HOUR)
    assert not (off & ~switch).any(), list(zip(ts[off], got[off], demand(ts[off])))
    assert off.sum() <= 1
    np.testing.assert_array_equal(got[off], demand(ts[off] - 60))


def test_history_reads_30_days_through_the_store_gateway_and_the_sidecars_exactly(thanos, tmp_path):
    T = thanos.T
    r, frame = history(thanos, tmp_path, T - 30 * DAY, T, "--max-source-resolution=0s", "--dedup=true",
                       "--partial-response=false")
    assert r.returncode == 0, r.stderr
    assert "721 points (1 series, 0 gaps)" in r.stderr, r.stderr
    ts, got = series(frame)
    # deduplicated: one series, the replica label gone, the external cluster label kept
    assert frame["series_id"].iloc[0] == f"foresight_e2e_cpu{{{LABELS}}}"
    np.testing.assert_array_equal(ts, T - 30 * DAY + HOUR * np.arange(721))
    # raw blocks (27 days from the store gateway) and the sidecars (3 days): the backfilled
    # samples themselves, bit for bit (up to the penalty dedup's switch point)
    assert_penalty_deduplicated(T, ts, got)
    assert (ts < T - 3 * DAY).sum() == 27 * 24  # read from the store gateway's bucket


def test_max_source_resolution_reads_the_downsampled_blocks(thanos, tmp_path):
    T = thanos.T
    # ten days well inside the bucket's single block, which exists at all three resolutions
    start, end = T - 25 * DAY, T - 15 * DAY
    hours = start + HOUR * np.arange(10 * 24 + 1)
    values, counts = {}, {}
    for res in ("0s", "5m", "1h"):
        r, frame = history(thanos, tmp_path, start, end, f"--max-source-resolution={res}", "--dedup=true",
                           "--partial-response=false", name=f"v{res}")
        assert r.returncode == 0, r.stderr
        ts, values[res] = series(frame)
        np.testing.assert_array_equal(ts, hours)
        r, frame = history(thanos, tmp_path, start, end, f"--max-source-resolution={res}",
                           query=f"count_over_time({SELECTOR}[1h])", name=f"c{res}")
        assert r.returncode == 0, r.stderr
        counts[res] = series(frame)[1]

    # raw: the sample on the hour; 5m: the mean of the 5 minutes before it; 1h: the mean of the hour
    np.testing.assert_array_equal(values["0s"], demand(hours))
    np.testing.assert_allclose(values["5m"], window_mean(hours, 300), rtol=0, atol=1e-9)
    # 1h: the mean of the hour. Thanos makes 1h aggregates from the 5m chunks "only along chunk
    # boundaries" (pkg/compact/downsample, downsampleAggrLoop), so where a 5m chunk ends inside
    # an hour that hour has two aggregates, and the later one is the mean of the hour's tail
    # [H - k*5m, H). Those hours are few, and exactly the ones with two samples in the hour.
    full = np.abs(values["1h"] - window_mean(hours, 3600)) < 1e-9
    split = ~full
    assert split.sum() <= 0.05 * len(hours), hours[split] - T
    for h, v in zip(hours[split], values["1h"][split]):
        tails = np.array([window_mean(h, k * 300)[0] for k in range(1, 12)])
        assert np.abs(tails - v).min() < 1e-9, (h - T, v, tails)
    # and they really differ at every hour (the sawtooth is 0 on the hour and 0.35 over the last
    # 5 minutes; the hour's mean also carries the sine's drift over the hour)
    assert np.abs(values["5m"] - values["0s"]).min() > 0.3
    assert np.abs(values["1h"] - values["0s"]).min() > 0.05
    # samples per hour: 60 raw, 12 five-minute aggregates, 1 hourly aggregate (2 in a split hour)
    assert set(counts["0s"]) == {60.0}, counts["0s"]
    assert set(counts["5m"]) == {12.0}, counts["5m"]
    np.testing.assert_array_equal(counts["1h"], np.where(split, 2.0, 1.0))


def test_dedup_merges_the_two_replicas_and_fills_one_replicas_gap(thanos, tmp_path):
    T = thanos.T
    start, end = T - 2 * DAY, T
    r, both = history(thanos, tmp_path, start, end, "--dedup=false", name="nodedup")
    assert r.returncode == 0, r.stderr
    lab = 'cluster="e2e",namespace="shop",replica="{}",workload="checkout"'
    assert sorted(both["series_id"].unique()) == [
        f"foresight_e2e_cpu{{{lab.format('a')}}}", f"foresight_e2e_cpu{{{lab.format('b')}}}"]
    ts, a = series(both, 'replica="a"')
    _, b = series(both, 'replica="b"')
    np.testing.assert_array_equal(a, demand(ts))
    lost = (ts >= T + GAP_B[0]) & (ts < T + GAP_B[1])
    assert lost.sum() == 5
    assert np.isnan(b[lost]).all()  # replica b's hole, 5 hourly points
    np.testing.assert_array_equal(b[~lost], demand(ts[~lost]))

    # dedup=true: one series, replica b's hole filled from replica a
    r, one = history(thanos, tmp_path, start, end, "--dedup=true", name="dedup")
    assert r.returncode == 0, r.stderr
    assert list(one["series_id"].unique()) == [f"foresight_e2e_cpu{{{LABELS}}}"]
    ts1, v = series(one)
    np.testing.assert_array_equal(ts1, ts)
    assert_penalty_deduplicated(T, ts, v)

    # the same at 1-minute steps across the switch: the penalty algorithm (the default) loses
    # samples there, 1:1 "chain" deduplication loses none
    s0, s1 = T + GAP_B[0] - HOUR, T + GAP_B[0] + HOUR
    minutes = s0 + 60 * np.arange(121)
    r, pen = history(thanos, tmp_path, s0, s1, "--dedup=true", step="60s", name="pen")
    assert r.returncode == 0, r.stderr
    r, chain = history(thanos, tmp_path, s0, s1, "--dedup=true", step="60s", name="chain", url=thanos.url_chain)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(series(chain)[1], demand(minutes))
    pen_off = series(pen)[1] != demand(minutes)
    assert 1 <= pen_off.sum() <= 4, minutes[pen_off] - T


def test_partial_response_with_the_store_gateway_down(thanos, tmp_path):
    T = thanos.T
    start, end = T - 10 * DAY, T
    with thanos.store_down():
        # partial_response=false: Thanos refuses, foresight says so plainly and exits non-zero
        r, _ = history(thanos, tmp_path, start, end, "--partial-response=false", "--dedup=true", name="strict")
        assert r.returncode != 0
        assert "Traceback" not in r.stderr
        err = r.stderr.lower()
        assert "127.0.0.1:" in r.stderr and ("unavailable" in err or "error" in err), r.stderr

        # partial_response=true: the sidecars' 3 days come back, with Thanos' warning logged
        r, frame = history(thanos, tmp_path, start, end, "--partial-response=true", "--dedup=true", name="partial")
        assert r.returncode == 0, r.stderr
        assert "warning" in r.stderr.lower(), r.stderr
        ts, v = series(frame)
        have = ~np.isnan(v)
        assert have.any()
        assert ts[have].min() >= T - 3 * DAY  # nothing older: that lives in the store gateway
        assert have.sum() == 3 * 24 + 1
        assert_penalty_deduplicated(T, ts[have], v[have])

    # and with the store gateway back, the old days are there again
    r, frame = history(thanos, tmp_path, start, end, "--partial-response=false", "--dedup=true", name="back")
    assert r.returncode == 0, r.stderr
    ts, v = series(frame)
    assert_penalty_deduplicated(T, ts, v)


def _train(thanos, tmp_path, redis_url, name: str, **thanos_params):
    cfg = {"apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
           "source": {"url": thanos.url, "step_seconds": 300, "history_days": 28, "thanos": thanos_params},
           "store": {"url": redis_url, "ttl_seconds": 3600},
           "training": {"horizon_steps": 12, "quantiles": [0.5, 0.9], "models": ["seasonal_naive"]},
           "workloads": [{"namespace": "shop", "name": "checkout", "demand_query": SELECTOR,
                          "capacity": {"cpu_request_cores": 0.5, "ready_pods": 2}}]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # --now one step before the sidecars' first sample: the 28 days read are all in the bucket
    return foresight("train", "--config", str(path), "--once", "--now", str(thanos.T - 3 * DAY - 300))


def _latest(redis_url):
    from core.store import RedisForecastStore

    store = RedisForecastStore(redis_url)
    try:
        return store.latest("shop/checkout")
    finally:
        store.close()


def test_train_reads_28_days_through_thanos_at_the_resolution_it_asks_for(thanos, tmp_path, redis_url):
    T = thanos.T
    end = T - 3 * DAY - 300
    r = _train(thanos, tmp_path, redis_url, "t5m", max_source_resolution="5m", partial_response=False, dedup=True)
    assert r.returncode == 0 and "shop/checkout: published seasonal_naive" in r.stdout, r.stdout + r.stderr
    fc = _latest(redis_url)
    assert fc is not None and len(fc.mean) == 12 and fc.step_seconds == 300.0
    obs_t = np.array([t for t, _ in fc.observed], dtype=np.int64)
    obs_v = np.array([v for _, v in fc.observed])
    assert obs_t[-1] == end and len(obs_t) == 12
    # what train read is the 5-minute downsampled data, not the raw samples
    np.testing.assert_allclose(obs_v, window_mean(obs_t, 300), rtol=0, atol=1e-9)
    assert np.abs(obs_v - demand(obs_t)).min() > 0.1
    # seasonal naive (daily season) forecasts the same 5-minute means one day earlier
    future = end + 300 * np.arange(1, 13)
    np.testing.assert_allclose(fc.mean, window_mean(future - DAY, 300), rtol=0, atol=1e-9)

    r = _train(thanos, tmp_path, redis_url, "traw", max_source_resolution="0s", partial_response=False, dedup=True)
    assert r.returncode == 0 and "shop/checkout: published" in r.stdout, r.stdout + r.stderr
    fc = _latest(redis_url)
    obs_t = np.array([t for t, _ in fc.observed], dtype=np.int64)
    np.testing.assert_array_equal([v for _, v in fc.observed], demand(obs_t))  # raw, bit for bit
    np.testing.assert_array_equal(fc.mean, demand(future - DAY))


def test_train_with_the_store_gateway_down_fails_without_partial_response(thanos, tmp_path, redis_url):
    with thanos.store_down():
        r = _train(thanos, tmp_path, redis_url, "down", max_source_resolution="5m", partial_response=False, dedup=True)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "shop/checkout: NOT published" in r.stdout, r.stdout + r.stderr
        assert _latest(redis_url) is None
        assert "127.0.0.1:" in r.stdout and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
        # with partial responses the querier answers from the sidecars alone (with a warning):
        # they hold nothing in those 28 days
        r = _train(thanos, tmp_path, redis_url, "partial", max_source_resolution="5m", partial_response=True, dedup=True)
        assert r.returncode == 1 and "no data" in r.stdout, r.stdout + r.stderr
        assert "prometheus warning" in r.stderr and "connection refused" in r.stderr, r.stderr
