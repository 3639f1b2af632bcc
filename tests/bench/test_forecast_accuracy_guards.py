"""bench/forecast_accuracy.py's guard comparison in quick mode: the shipped ``auto`` (with the
trainer's live check) and the four benchmark-only rows (the shipped guard without the live
check, the guard without its seasonal support, no guard, the first guard) from one run, on one half of the tune/holdout split that
bench/replay_all.py uses."""

from __future__ import annotations

import math

import pandas as pd

from bench.replay_all import in_part

from .test_quick import load, run_quick

ROWS = ("auto", "auto_no_live_check", "auto_guard_no_season", "auto_before_guard", "auto_guard_e4b3f37")


def test_quick_guard_table_compares_the_guard_rows_on_the_tune_half_only(tmp_path):
    out = run_quick("forecast_accuracy", tmp_path, "--part", "tune")
    doc = load(tmp_path / "forecast_accuracy.json")
    assert doc["part"] == "tune" and doc["series"] == 2
    rows = pd.read_csv(tmp_path / "forecast_accuracy.csv")
    ids = set(rows["series_id"])
    assert len(ids) == 2 and all(in_part(s, "tune") for s in ids)
    assert set(rows["model"]) == {"persistence", *ROWS}
    table = doc["guard_comparison"]
    assert list(table) == list(ROWS)
    for name in ROWS:
        d = table[name]
        for h in (1, 2, 3, 6, 12):
            assert math.isfinite(d[f"mase_h{h}_median"]) and d[f"mase_h{h}_median"] > 0, (name, h)
        assert d["h1_ratio_series"] == 2 and d["h1_ratio_max"] > 0
        assert 0 <= d["h1_ratio_share_above_1.1"] <= 1
    # beyond the guarded steps the rows without the live check are the same forecasts from the same fits
    for h in (3, 6, 12):
        assert len({round(table[n][f"mase_h{h}_median"], 9) for n in ROWS[1:]}) == 1
    live = doc["live_check_fallbacks"]
    assert live["origins"] == 4 and 0 <= live["fallbacks"] <= 4 and len(live["at"]) == live["fallbacks"]
    if live["fallbacks"] == 0:  # the live check changes auto only where it fell back
        assert table["auto"] == table["auto_no_live_check"]
    assert "live check: auto served persistence at" in out
    assert "lead-step guard: median MASE per horizon" in out
    for name in ROWS:
        assert f"  {name} " in out
    assert "h1_median_within_10%_of_before_guard" in out


def test_quick_guard_grid_scores_every_point_on_the_same_fits_and_the_shipped_point_matches_auto(tmp_path):
    from bench.forecast_rows import GUARD_GRID, grid_name
    from forecaster.selection import SelectionSettings

    run_quick("forecast_accuracy", tmp_path, "--part", "tune", "--guard-grid")
    table = load(tmp_path / "forecast_accuracy.json")["guard_comparison"]
    names = [grid_name(z, m) for z, m in GUARD_GRID]
    assert set(names) <= set(table)
    shipped = SelectionSettings()
    assert (shipped.lead_evidence_z, shipped.lead_max_move) in GUARD_GRID  # the default is a point of its grid
    same = table[grid_name(shipped.lead_evidence_z, shipped.lead_max_move)]
    for k in ("mase_h1_median", "mase_h2_median", "mean_mase_median", "h1_ratio_max"):
        assert same[k] == table["auto_no_live_check"][k], k  # the grid rows have no live check
    for n in names:  # the grid changes the guarded steps only
        assert round(table[n]["mase_h6_median"], 9) == round(table["auto_no_live_check"]["mase_h6_median"], 9)


def test_quick_with_lstm_and_prophet_scores_auto_with_them_as_candidates_beside_auto(tmp_path):
    """``models: [auto, lstm, prophet]`` as a row of its own: auto's default candidates plus the
    global LSTM and Prophet, from the same fits, with both candidate sets' fit cost."""
    from bench.forecast_rows import WITH_GLOBAL

    out = run_quick("forecast_accuracy", tmp_path, "--part", "tune", "--models", "auto,persistence,lstm,prophet",
                    "--lstm-epochs", "1", "--no-refresh")
    doc = load(tmp_path / "forecast_accuracy.json")
    rows = pd.read_csv(tmp_path / "forecast_accuracy.csv")
    # the shipped guard without the live check is scored beside the row with the global candidates
    assert {"auto", "auto_no_live_check", WITH_GLOBAL, "lstm", "prophet"} <= set(rows["model"])
    assert rows[rows.model == WITH_GLOBAL].series_id.nunique() == 2
    d = doc["guard_comparison"][WITH_GLOBAL]
    assert all(math.isfinite(d[f"mase_h{h}_median"]) for h in (1, 2, 3, 6, 12)) and d["h1_ratio_series"] == 2
    sets = doc["candidate_sets"]
    # the larger set costs auto's fits plus the LSTM's and Prophet's, and the fleet training
    assert sets[WITH_GLOBAL]["seconds_per_fit"] > sets["auto"]["seconds_per_fit"] > 0
    assert sets[WITH_GLOBAL]["global_training_seconds"] > 0 == sets["auto"]["global_training_seconds"]
    assert f"  {WITH_GLOBAL} " in out and "auto's candidate sets" in out
