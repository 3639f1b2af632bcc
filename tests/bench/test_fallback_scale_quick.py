"""bench/fallback_scale.py in its quick mode (a subprocess, real Prometheus on loopback): both
paths measured side by side, the new one answering every request from the second interval on
with a handful of PromQL queries, never below the reactive floor."""

from __future__ import annotations

import shutil

import pytest

from tests.bench.test_quick import load, positive, run_quick


def test_fallback_scale_quick_measures_the_old_and_the_batched_path_side_by_side(tmp_path):
    missing = [b for b in ("prometheus", "promtool") if shutil.which(b) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed; run `make deps`")
    out = run_quick("fallback_scale", tmp_path)
    assert "old          50 interval 1" in out and "new-warm    200 interval 2" in out
    doc = load(tmp_path / "fallback_scale.json")
    rows = {(r["path"], r["workloads"]): r for r in doc["results"]}
    assert set(rows) == {(p, n) for p in ("old", "new", "new-warm") for n in (50, 200)}
    for r in rows.values():
        assert [i["interval"] for i in r["intervals"]] == [1, 2]
        for iv in r["intervals"]:
            assert iv["asked"] == r["workloads"] and iv["below_floor"] == 0
            positive(iv["p50_ms"], iv["p99_ms"])
    new = rows[("new", 200)]
    assert new["intervals"][1]["share_200"] == 1.0
    warm = rows[("new-warm", 200)]  # kept warm before the fault: every request from the first on
    assert [i["share_200"] for i in warm["intervals"]] == [1.0, 1.0]
    # batched: a few grouped queries per refresh, against about three per workload per refresh
    assert new["promql_queries"] * 10 < rows[("old", 200)]["promql_queries"]
