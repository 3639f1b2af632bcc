"""`foresight replay` end to end on a real trace slice (tests/data/cpu_slice.csv.gz)."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest

from foresight.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "cpu_slice.csv.gz"
SID = "azurev1-737498"


def test_replay_writes_the_summary_columns_and_a_report_with_plots(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main([
        "replay", "--data", str(DATA), "--series", SID, "--models", "moving_average",
        "--train-days", "4", "--replay-days", "1", "--startup-s", "60", "--delay-s", "90",
        "--target", "0.7", "--out", str(out),
    ])
    assert rc == 0
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [
        "series_id", "mode", "slo_violation_minutes", "underprovisioned_core_minutes", "replica_minutes", "scale_events",
        "population", "rises", "ready_in_time_share", "median_lead_seconds",
    ]
    assert {r["population"] for r in rows} <= {"daily", "bursty"}
    assert rows[0]["rises"] == ""  # the reactive HPA is the reference the others are measured at
    assert "Ready before the rise" in (out / "report.html").read_text()
    assert [r["mode"] for r in rows] == ["reactive", "predictive", "oracle"]
    assert all(r["series_id"] == SID for r in rows)
    # one day at 15 s steps with >= 1 replica: at least 1440 replica-minutes per mode
    assert all(float(r["replica_minutes"]) >= 1440 for r in rows)
    by = {r["mode"]: r for r in rows}
    assert float(by["oracle"]["slo_violation_minutes"]) <= float(by["reactive"]["slo_violation_minutes"])
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 3  # scatter + whole replay + zoom
    assert "Cost vs risk" in html
    errs = list(csv.DictReader(open(out / "forecast_error.csv")))
    assert errs[0]["series_id"] == SID and float(errs[0]["mae_h1"]) >= 0


def test_replay_rejects_unknown_modes_and_series_with_a_clear_message(tmp_path, capsys):
    rc = main(["replay", "--data", str(DATA), "--modes", "reactive,magic", "--out", str(tmp_path)])
    assert rc == 2
    assert "magic" in capsys.readouterr().err
    rc = main(["replay", "--data", str(DATA), "--series", "nope", "--modes", "reactive", "--out", str(tmp_path)])
    assert rc == 2
    assert "nope" in capsys.readouterr().err


def test_replay_says_which_flag_fixes_a_too_short_trace(tmp_path, capsys):
    rc = main(["replay", "--data", str(DATA), "--series", SID, "--modes", "reactive", "--train-days", "60", "--out", str(tmp_path)])
    assert rc == 2
    assert "--train-days" in capsys.readouterr().err


def test_replay_names_the_flag_and_the_fix_for_a_bad_override(tmp_path, capsys):
    rc = main(["replay", "--data", str(DATA), "--series", SID, "--slo-minutes-per-day", "-3", "--out", str(tmp_path)])
    assert rc == 2
    assert "--slo-minutes-per-day" in capsys.readouterr().err
    rc = main(["replay", "--data", str(DATA), "--series", SID, "--models", "crystal-ball", "--out", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--models" in err and "crystal-ball" in err


def test_replay_without_tuning_flags_runs_a_default_deployments_trainer_and_serving_settings():
    import argparse

    from forecaster.config import parse_config
    from replay import cli

    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers())
    args = p.parse_args(["replay", "--data", str(DATA), "--out", "x"])
    cfg = cli._config(args)
    deployed = parse_config({"workloads": [{"namespace": "shop", "name": "checkout"}]})
    assert cfg.pipeline.training == deployed.training
    assert cfg.pipeline.serving == deployed.serving
    assert cfg.pipeline.history_days == deployed.source.history_days
    # the adapter side: the replay serves with foresight serve's defaults
    from forecaster.served import MetricSettings

    assert cfg.lead_seconds == MetricSettings().lead_seconds


def test_replay_takes_training_and_serving_from_a_workload_config(tmp_path):
    import argparse

    from replay import cli

    conf = tmp_path / "w.yaml"
    conf.write_text("training: {models: [ar], quantiles: [0.5, 0.75]}\n"
                    "serving: {slo_minutes_per_day: 20, quantiles: [p75]}\n"
                    "workloads: [{namespace: a, name: b}]\n")
    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers())
    cfg = cli._config(p.parse_args(["replay", "--data", str(DATA), "--out", "x", "--config", str(conf)]))
    assert cfg.pipeline.training.models == ("ar",)
    assert cfg.pipeline.serving.slo_minutes_per_day == 20 and cfg.pipeline.serving.quantiles == ("p75",)
