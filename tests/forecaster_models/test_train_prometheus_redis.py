"""`foresight train` end to end: real Prometheus (backfilled with a real CPU series) -> fit ->
forecasts published into real Redis."""

from __future__ import annotations

import math
import time

import numpy as np
import yaml

from core.store import RedisForecastStore
from foresight.cli import main


def _config(tmp_path, prom_url, redis_url, extra_workload=None):
    cfg = {
        "apiVersion": "foresight/v1alpha1",
        "kind": "WorkloadConfig",
        "source": {"url": prom_url, "step_seconds": 300, "history_days": 3},
        "store": {"url": redis_url, "ttl_seconds": 600},
        "training": {"horizon_steps": 12, "quantiles": [0.5, 0.9], "models": ["auto"]},
        "workloads": [
            {
                "namespace": "shop",
                "name": "checkout",
                "kind": "Deployment",
                "labels": {"tier": "web"},
                "demand_query": 'foresight_test_cpu{namespace="shop",workload="checkout"}',
                "capacity": {
                    "cpu_request_cores": 0.5,
                    "ready_pods_query": 'sum(foresight_test_ready{namespace="shop",workload="checkout"})',
                },
            }
        ] + ([extra_workload] if extra_workload else []),
    }
    p = tmp_path / "workloads.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_train_once_pulls_from_prometheus_and_publishes_to_redis(prometheus_factory, redis_url, slice_arrays, tmp_path, capsys):
    _, v = slice_arrays["azurev1-825849"]
    v = v[-3 * 288 :]
    now = time.time()
    end = math.floor(now / 300) * 300 - 300
    ts = end - 300.0 * np.arange(len(v))[::-1]
    samples = [(float(t), float(x)) for t, x in zip(ts, v) if np.isfinite(x)]
    ready = [(float(t), 4.0) for t in np.arange(now - 3600, now - 30, 30)]
    prom = prometheus_factory({
        "foresight_test_cpu": [({"namespace": "shop", "workload": "checkout"}, samples)],
        "foresight_test_ready": [({"namespace": "shop", "workload": "checkout"}, ready)],
    })
    missing = {"namespace": "shop", "name": "ghost", "demand_query": 'foresight_test_cpu{workload="ghost"}',
               "capacity": {"cpu_request_cores": 1.0, "ready_pods": 1}}
    cfg = _config(tmp_path, prom.url, redis_url, missing)

    rc = main(["train", "--config", str(cfg), "--once"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "shop/checkout: published" in out
    assert "shop/ghost: NOT published" in out and "no data" in out

    store = RedisForecastStore(redis_url)
    try:
        fc = store.latest("shop/checkout")
        assert store.latest("shop/ghost") is None
    finally:
        store.close()
    assert fc is not None and fc.generation == 1
    assert len(fc.mean) == 12 and all(math.isfinite(x) for x in fc.mean)
    assert all(a <= b + 1e-9 for a, b in zip(fc.quantiles["p50"], fc.quantiles["p90"]))
    assert fc.step_seconds == 300.0
    last_t, last_v = fc.observed[-1]
    # Prometheus evaluates the range on its own grid: the last point carries the last sample
    assert last_v == samples[-1][1]
    assert samples[-1][0] <= last_t <= samples[-1][0] + 300
    assert fc.meta["namespace"] == "shop" and fc.meta["workload"] == "checkout"
    assert fc.meta["kind"] == "Deployment" and fc.meta["labels"]["tier"] == "web"
    assert fc.meta["ready_pods"] == 4 and fc.meta["cpu_request_cores"] == 0.5
    assert fc.status == "ok", fc.reason
    assert fc.backtest_error is not None and fc.backtest_error > 0
