"""Every benchmark under bench/ in its quick mode, as a user would run it: a subprocess, the
bundled data slices only, real Prometheus/Redis/wrk/crun where the benchmark uses them. A
benchmark that no longer runs, prints or saves its figures fails here, not at the next full
measurement. (bench/replay_all.py is tested with the replay.)"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PNG = b"\x89PNG\r\n\x1a\n"


def _need(*binaries: str) -> None:
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        msg = f"{', '.join(missing)} not installed; run `make deps` (Debian packages)"
        if os.environ.get("CI"):
            pytest.fail(msg)  # in CI a missing real part is a failure, not a skip
        pytest.skip(msg)


def run_quick(module: str, out: Path | None, *extra: str) -> str:
    """``python -m bench.<module> --quick [--out OUT]``; the full traces are hidden, so a quick
    run that reads ``$FORESIGHT_DATA_DIR`` fails."""
    env = {**os.environ, "FORESIGHT_DATA_DIR": str(ROOT / "no-such-data-dir"), "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "-m", f"bench.{module}", "--quick", *extra, *(["--out", str(out)] if out else [])]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    assert "quick mode: results go to" in r.stdout
    return r.stdout


def positive(*values) -> None:
    for v in values:
        assert isinstance(v, (int, float)) and math.isfinite(v) and v > 0, v


def load(path: Path) -> dict:
    assert path.is_file(), f"{path.name} was not saved"
    return json.loads(path.read_text())


def assert_png(path: Path) -> None:
    assert path.is_file(), f"{path.name} was not saved"
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5_000


def test_adapter_load_quick_measures_foresight_and_promql_per_request(tmp_path):
    _need("wrk", "redis-server", "prometheus", "promtool")
    out = run_quick("adapter_load", tmp_path)
    assert re.search(r"foresight\s+200\s+\d+", out) and re.search(r"prometheus\s+200\s+\d+", out)
    rows = load(tmp_path / "adapter_load.json")["rows"]
    assert [(r["target"], r["workloads"]) for r in rows] == [("foresight", 200), ("prometheus", 200)]
    for r in rows:
        positive(r["throughput_rps"], r["throughput_p99_ms"], r["paced_rps"], r["paced_p50_ms"], r["paced_p99_ms"], r["requests"])
        assert r["non_2xx"] == 0
    assert "throughput_rps" in (tmp_path / "adapter_load.csv").read_text().splitlines()[0]
    assert_png(tmp_path / "adapter_load.png")


def test_chaos_quick_kills_the_trainer_and_every_answer_stays_at_or_above_the_reactive_floor(tmp_path):
    _need("wrk", "redis-server", "prometheus", "promtool")
    out = run_quick("chaos", tmp_path)
    assert "[trainer] kill -9 trainer" in out and "saved" in out
    doc = load(tmp_path / "chaos.json")
    assert doc["setup"]["workloads"] == 3
    (fault,) = doc["faults"]
    assert fault["fault"] == "trainer"
    positive(fault["recovery_seconds"])
    for phase in ("during_fault", "after_restart"):
        assert fault[phase]["below_reactive_floor"] == 0
    for load_ in fault["load"].values():
        positive(load_["requests"])
        assert load_["non_2xx"] == 0  # the adapters keep serving while the trainer is down
    positive(fault["during_fault"]["probe_rows"])


def test_fleet_scale_quick_compares_ray_with_local_and_projects_the_fleet(tmp_path):
    out = run_quick("fleet_scale", tmp_path)
    assert "| engine |" in out
    doc = load(tmp_path / "fleet_scale.json")
    engines = {r["engine"]: r for r in doc["engines"]}
    assert set(engines) == {"local, 1 process", "ray, 1 worker", "local pool, 2 processes", "ray, 2 workers"}
    for r in engines.values():
        assert r["fits"] == 4
        positive(r["fits_per_second"], r["seconds_per_fit"])
    assert engines["ray, 1 worker"]["same_models_as_local"]
    positive(doc["summary"]["ray_speedup_2_vs_1"], doc["summary"]["state_pickle_bytes"])
    assert doc["summary"]["ray_defaults_overhead_vs_local_1"] is None  # not run in quick mode
    assert doc["refresh"]["published"] == 200
    positive(doc["refresh"]["ms_per_refresh"], doc["redis"]["publishes_per_second"])
    assert len(doc["projection"]) == 8
    for p in doc["projection"]:
        positive(p["daily_refit_minutes"], p["refresh_seconds_one_trainer"])
    assert "| engine |" in (tmp_path / "fleet_scale.md").read_text()


def test_forecast_accuracy_quick_writes_to_a_temporary_folder_and_leaves_the_full_results_alone():
    def committed():  # this benchmark's full results (others may be re-measured beside this test)
        return {p.name: p.stat().st_mtime_ns for p in RESULTS.glob("forecast_accuracy*")}

    before = committed()
    assert before
    out = run_quick("forecast_accuracy", None)
    folder = Path(re.search(r"quick mode: results go to (\S+)", out).group(1))
    try:
        assert RESULTS.resolve() not in folder.resolve().parents and folder.resolve() != RESULTS.resolve()
        assert committed() == before
        doc = load(folder / "forecast_accuracy.json")
        assert doc["series"] == 2 and doc["models"] == ["auto", "persistence"]
        for model in ("auto", "persistence"):
            positive(doc["summary"][model]["mean_mase_median"], doc["summary"][model]["pinball_p90_median"])
        assert doc["h1_ratio_vs_persistence"]["series"] == 2
        positive(doc["h1_ratio_vs_persistence"]["max"], doc["refresh"]["refresh_round_seconds"], doc["wall_seconds"])
        assert doc["refresh"]["published"] == 20
        for name in ("forecast_accuracy.csv", "forecast_accuracy_summary.csv", "forecast_accuracy_h1_ratio.csv"):
            assert len((folder / name).read_text().splitlines()) >= 3, name
        assert_png(folder / "forecast_accuracy.png")
        assert "mean" in out.lower() and "refresh of 20 series" in out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_scheduler_extender_quick_scores_every_node_alike_with_and_without_the_snapshot(tmp_path):
    _need("redis-server")
    out = run_quick("scheduler_extender", tmp_path)
    assert "ours   prioritize (NodeNames)" in out
    doc = load(tmp_path / "scheduler_extender.json")
    assert doc["nodes"] == 100
    for key in ("ours_prioritize_nodenames", "naive_prioritize_nodenames", "ours_filter_nodenames",
                "ours_prioritize_full_nodes", "ours_prioritize_nodenames_12Gi_pod"):
        positive(doc[key]["requests"], doc[key]["p50_ms"], doc[key]["p99_ms"], doc[key]["req_per_s_sequential"])
    assert doc["score_agreement_ours_vs_naive"]["nodes"] == 200
    assert doc["score_agreement_ours_vs_naive"]["max_abs_diff"] <= 1
    if shutil.which("wrk"):
        positive(doc["wrk_ours_prioritize"]["req_per_s"])
        assert doc["wrk_naive_prioritize"]["req_per_s"] >= 0  # ~100 ms a call: 1 s may finish few
        assert doc["wrk_ours_prioritize"]["non_2xx"] == doc["wrk_naive_prioritize"]["non_2xx"] == 0
    assert_png(tmp_path / "scheduler_extender.png")


def test_trainer_freshness_quick_keeps_every_forecast_within_the_staleness_limit_through_a_rollout(tmp_path):
    out = run_quick("trainer_freshness", tmp_path)
    assert "max forecast age (s)" in out
    doc = load(tmp_path / "trainer_freshness.json")
    assert doc["workloads"] == 40
    new, old = doc["new"], doc["old"]
    positive(new["max_age_seconds"], new["rss_per_workload_bytes"], new["fitted_state_pickle_bytes_mean"])
    assert new["max_age_seconds"] <= doc["staleness_limit_seconds"]
    assert new["cycles"] and all(c["published"] == 40 for c in new["cycles"])  # every cycle refreshes all
    assert 0 <= new["fits_done"] <= 41 and math.isfinite(new["fits_per_second"])  # beside them (the edited one twice)
    positive(old["fits_per_second"], old["projected_cycle_seconds"], old["measured_seconds"])
    lines = (tmp_path / "trainer_freshness.csv").read_text().splitlines()
    assert lines[0] == "t,new_max_age,new_p99_age" and len(lines) >= 3
    assert_png(tmp_path / "trainer_freshness.png")
    edit = new["edit_one_workload"]  # one autoscaler's serving edited in place mid-run
    assert edit["start_over"] == ["bench/w0"] and edit["others_keeping_a_fitted_model"] == edit["others"] == 39
    assert edit["of_those_on_the_placeholder_at_the_end"] == 0 and edit["others_served_fitted_before"] > 0
    assert edit["others_max_age_seconds_after"] <= doc["staleness_limit_seconds"]
    # the rollout: the old trainer SIGTERMed when its next step would start, a new one restores
    roll = load(tmp_path / "trainer_freshness_rollout.json")
    assert "trainer rollout, 40 workloads" in out
    h, k = roll["sigterm_handover"], roll["after_a_kill"]
    for r in (h, k):
        assert r["restored"] == r["workloads_published_again"] == r["first_publication_fitted"] == 40
        assert r["first_publication_placeholder"] == 0
        # stopped an interval after its last step began: every forecast at least that old, none stale
        assert roll["refresh_interval_seconds"] * 0.9 <= r["oldest_forecast_at_stop_seconds"] < r["max_age_seconds"]
        assert r["max_age_seconds"] <= doc["staleness_limit_seconds"]
        positive(r["p99_age_seconds"], r["stop_to_all_published_seconds"], r["first_step_seconds"])
    assert h["old_saved_windows"] == h["windows_taken_up"] == 40 and h["first_step_pulls"]["full"] == 0
    assert k["windows_taken_up"] == 0 and k["first_step_pulls"]["full"] == 40 and not k["windows_file_left_by_the_kill"]
    positive(roll["process_startup"]["process_seconds_median"], roll["process_startup"]["imports_seconds_median"])
    assert_png(tmp_path / "trainer_freshness_rollout.png")


def test_warmpool_crun_quick_claims_real_containers_warm_and_cold(tmp_path):
    from warmpool.backends.crun import probe

    ok, why, _ = probe("crun")
    if not ok:
        pytest.skip(f"real crun containers cannot run here: {why}")
    extra = () if probe("runc")[0] else ("--runc-n", "0")
    out = run_quick("warmpool_crun", tmp_path, *extra)
    assert "crun: warm claim p50" in out
    doc = load(tmp_path / "warmpool_crun.json")
    for runtime in ("crun", "runc") if not extra else ("crun",):
        r = doc[runtime]
        assert r["warm_claim"]["n"] == r["cold_start"]["n"] == (4 if runtime == "crun" else 2)
        positive(r["warm_claim"]["p50_ms"], r["cold_start"]["p50_ms"], r["prewarm_create_per_container_ms"])
    assert isinstance(doc["target"]["met"], bool)
    assert_png(tmp_path / "warmpool_crun.png")


def test_warmpool_trace_quick_replays_the_shipped_policy_and_fixed_keep_alive(tmp_path):
    out = run_quick("warmpool_trace", tmp_path)
    assert "target single:" in out
    doc = load(tmp_path / "warmpool_trace_limit5.json")
    assert doc["limit"] == 5 and doc["data"].endswith(os.path.join("tests", "data", "serverless"))
    rows = {(r["policy"], r["demand"]): r for r in doc["rows"]}
    assert set(rows) == {(p, d) for p in ("foresight", "fixed:10") for d in ("single", "concurrency")}
    for r in rows.values():
        positive(r["invoked_minutes"], r["wasted_gb_min"], r["wasted_pct_of_fixed10"])
        assert 0 <= r["cold_pct_invoked_minutes"] <= 100
    assert rows[("fixed:10", "single")]["wasted_pct_of_fixed10"] == 100.0
    assert len((tmp_path / "warmpool_trace_limit5.csv").read_text().splitlines()) == 5
    assert_png(tmp_path / "warmpool_trace_limit5.png")


def test_a_quick_run_refuses_to_write_into_the_full_results(capsys):
    import argparse

    from bench.common import add_quick_args, results_dir

    ap = argparse.ArgumentParser()
    add_quick_args(ap, "tiny")
    with pytest.raises(SystemExit, match="must not overwrite the full results"):
        results_dir(ap.parse_args(["--quick", "--out", str(RESULTS)]))
    assert results_dir(ap.parse_args([])) == RESULTS
