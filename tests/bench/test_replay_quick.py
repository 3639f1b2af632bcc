"""bench/replay_all.py in its quick mode: one bundled series through the production trainer and
the HPA simulator, the reactive frontier over targets x both scale-down windows, and the tune
half's selection by a stable hash."""

from __future__ import annotations

import math

from tests.bench.test_quick import load, run_quick


def test_replay_all_quick_replays_ours_against_the_frontier_with_the_same_behaviour(tmp_path):
    out = run_quick("replay_all", tmp_path, "--part", "tune")
    assert "TOTALS over 1 series" in out
    res = load(tmp_path / "replay_all_tune_quick.json")
    assert res["part"] == "tune" and res["quick"] and res["series"] == 1
    tot = res["totals"]
    for name in ("ours", "oracle", "reactive t0.70", "reactive t0.70 sd30", "reactive t0.40 sd30"):
        assert name in tot, sorted(tot)
    # cost ratios against both reactive baselines (SLO ratios are undefined on a calm series)
    for k in ("cost_x", "cost_x_same_behaviour"):
        assert math.isfinite(tot["ours"][k]) and tot["ours"][k] > 0, (k, tot["ours"])
    for name in ("ours", "reactive t0.70"):
        assert tot[name]["slo_violation_minutes"] >= 0 and tot[name]["replica_minutes"] > 0
    assert tot["reactive t0.70 sd30"]["cost_x_same_behaviour"] == 1.0
    assert (tmp_path / "replay_frontier_tune_quick.png").is_file()


def test_the_tune_and_holdout_halves_split_the_series_by_a_stable_hash():
    from bench.replay_all import in_part

    ids = [f"series-{i}" for i in range(200)]
    tune = {s for s in ids if in_part(s, "tune")}
    hold = {s for s in ids if in_part(s, "holdout")}
    assert tune.isdisjoint(hold) and tune | hold == set(ids)
    assert 60 < len(tune) < 140  # about half
    assert in_part("azurev1-618849", "tune") == in_part("azurev1-618849", "tune")
