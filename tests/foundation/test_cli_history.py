"""`foresight history` reproduces a backfilled real series exactly (run as a real process)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

import numpy as np
import pandas as pd


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "foresight", *args], capture_output=True, text=True, timeout=300)


def test_history_command_writes_the_canonical_csv_with_the_exact_values(backfilled, tmp_path):
    srv, truth = backfilled
    ts, vals = truth["azurev1-737498"]
    out = tmp_path / "h.csv.gz"
    start = datetime.fromtimestamp(ts[0], timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # RFC 3339
    r = run_cli(
        "history", "--source", f"prometheus://127.0.0.1:{srv.port}",
        "--query", 'foresight_test_cpu{series="azurev1-737498"}',
        "--start", start, "--end", str(int(ts[-1])), "--step", "5m",
        "--series-id", "azurev1-737498", "--out", str(out),
    )
    assert r.returncode == 0, r.stderr
    assert "8004 points" in r.stderr
    df = pd.read_csv(out)
    assert list(df.columns) == ["series_id", "timestamp", "value"]
    assert (df["series_id"] == "azurev1-737498").all()
    np.testing.assert_array_equal(df["value"].to_numpy(), vals)
    assert df["timestamp"].iloc[0] == start


def test_history_command_shows_prometheus_error_for_bad_promql_without_a_traceback(backfilled, tmp_path):
    srv, _ = backfilled
    r = run_cli("history", "--source", srv.url, "--query", "rate(x[5m]", "--start", "0", "--end", "600",
                "--out", str(tmp_path / "x.csv"))
    assert r.returncode == 2
    assert "parse error" in r.stderr and "Traceback" not in r.stderr
