"""bench/chaos_fleet.py in quick mode: real Prometheus, Redis and two `foresight serve`
replicas; Redis is killed under load and every answer after it is observed-direct and at or
above the reactive floor."""

from __future__ import annotations

from .test_quick import _need, load, positive, run_quick


def test_chaos_fleet_quick_kills_redis_and_both_replicas_answer_from_observed_demand(tmp_path):
    _need("redis-server", "prometheus", "promtool")
    out = run_quick("chaos_fleet", tmp_path)
    doc = load(tmp_path / "chaos_fleet.json")
    assert doc["workloads"] == 60 and doc["replicas"] == 2 and doc["quick"] is True
    assert [iv["interval"] for iv in doc["before"]] == [0]
    assert [iv["interval"] for iv in doc["intervals"]] == [1, 2, 3, 4]
    assert set(doc["before"][0]["sources"]) == {"forecast"}  # Redis up: the forecasts are served
    for iv in doc["before"] + doc["intervals"]:
        assert iv["asked"] == 60 and iv["below_floor"] == 0, iv
    # the quick run's cache holds 1 s of the 3-s interval: from the second interval on, every value is observed-direct
    for iv in doc["intervals"][1:]:
        assert iv["share_200"] == 1.0 and set(iv["sources"]) == {"observed-direct"}, iv
    positive(sum(iv["promql_per_second"] for iv in doc["intervals"][1:]))  # read from Prometheus, batched
    for name in ("adapter_a", "adapter_b"):
        positive(doc["memory_mb"][name]["VmRSS"], doc["memory_mb"][name]["VmHWM"])
    assert "Redis killed (kill -9)" in out and "PASS  no_value_below_the_reactive_floor" in out
