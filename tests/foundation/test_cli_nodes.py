"""`foresight nodes --once` publishes node and zone forecasts from a real Prometheus into Redis."""

from __future__ import annotations

import subprocess
import sys
import time

from core.store import RedisForecastStore
from tests.scheduler.cluster import build_families


def test_nodes_command_publishes_node_and_zone_forecasts_into_redis(prometheus_factory, trace_slice, redis_url):
    end = int(time.time()) - 60  # recent enough for instant queries (5 m lookback)
    families, truth = build_families(trace_slice, end, hours=8)
    srv = prometheus_factory(families)
    r = subprocess.run([sys.executable, "-m", "foresight", "nodes", "--source", srv.url, "--store", redis_url, "--once"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "node and" in r.stdout
    series = RedisForecastStore(redis_url).list_series()
    nodes = [s for s in series if s.startswith("node/")]
    zones = [s for s in series if s.startswith("zone/")]
    assert nodes and zones
    assert set(s.split("/", 1)[1] for s in nodes) <= set(truth)
