"""The ``ray`` engine against a real local Ray cluster (head + a separate worker node): the
same backtest rows, replay results and published forecasts as ``local``, and a worker killed
mid-run costs a retry, never a series."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from forecaster.config import parse_config
from forecaster.engines.local import LocalEngine
from forecaster.evaluation import BacktestSettings, run_backtest
from forecaster.schedule import train_once
from forecaster.sources.csv import CsvSource, read_long_csv
from forecaster.store import MemoryForecastStore
from foresight.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "cpu_slice.csv.gz"
SERIES = ["azurev1-1650389", "azurev1-618849", "azurev1-737498"]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def ray_engine(ray_cluster):
    from forecaster.engines.ray_engine import RayEngine

    engine = RayEngine(address=ray_cluster.address)
    yield engine
    engine.close()


def test_the_engine_sees_both_nodes_of_the_cluster(ray_engine):
    assert ray_engine.cluster_cpus() == 2  # head and worker, one CPU each


def test_a_ray_backtest_writes_the_same_rows_and_forecasts_as_local_bit_for_bit(ray_engine):
    frame = read_long_csv(DATA)
    frame = frame[frame.series_id.isin(SERIES)]
    settings = BacktestSettings(eval_days=1.0)
    models = ["auto", "ar", "persistence"]
    local = run_backtest(frame, models, settings, progress=False, engine=LocalEngine(1))
    remote = run_backtest(frame, models, settings, progress=False, engine=ray_engine)
    assert len(local.rows) == 3 * 3 * 12  # series x models x horizons
    pd.testing.assert_frame_equal(local.rows, remote.rows, check_exact=True)
    assert list(remote.forecasts) == SERIES  # input order, each series once
    for sid in SERIES:
        for a, b in zip(local.forecasts[sid], remote.forecasts[sid], strict=True):
            assert a.chosen == b.chosen
            for m in a.forecasts:
                assert np.array_equal(a.forecasts[m][0], b.forecasts[m][0])
                assert all(np.array_equal(a.forecasts[m][1][k], b.forecasts[m][1][k]) for k in a.forecasts[m][1])
    assert ray_engine.last_stats.items == 3 and ray_engine.last_stats.workers == 2


def test_foresight_replay_on_ray_writes_the_same_files_as_local(ray_cluster, tmp_path):
    args = ["replay", "--data", str(DATA), "--series", *SERIES[:2], "--models", "ar",
            "--train-days", "4", "--replay-days", "0.5"]
    assert main([*args, "--out", str(tmp_path / "local")]) == 0
    assert main([*args, "--engine", "ray", "--ray-address", ray_cluster.address, "--out", str(tmp_path / "ray")]) == 0
    for name in ("summary.csv", "forecast_error.csv"):
        local, remote = (tmp_path / "local" / name).read_bytes(), (tmp_path / "ray" / name).read_bytes()
        assert local == remote
    assert (tmp_path / "ray" / "summary.csv").read_text().count("\n") == 1 + 2 * 4  # header + series x modes


def _config(models: list[str]):
    return parse_config({
        "source": {"url": f"csv://{DATA}", "step_seconds": 300, "history_days": 4},
        "training": {"models": models, "engine": "ray"},
        "workloads": [{"namespace": "ns", "name": sid, "demand_query": sid,
                       "capacity": {"cpu_request_cores": 1.0, "ready_pods": 2}} for sid in SERIES],
    })


def test_train_once_fits_on_ray_and_publishes_what_local_publishes(ray_engine):
    config = _config(["auto"])
    src = CsvSource(str(DATA))
    f = src.load()
    now = pd.Timestamp(f[f.series_id.isin(SERIES)]["timestamp"].max()).timestamp() - 86400.0
    local, remote = MemoryForecastStore(), MemoryForecastStore()
    out_local = train_once(config, src, local, now=now)
    out_remote = train_once(config, src, remote, now=now, engine=ray_engine)
    assert ray_engine.last_stats.items == len(SERIES)  # every fit went to the cluster
    for sid in (f"ns/{s}" for s in SERIES):
        assert out_remote["results"][sid]["published"] and out_remote["results"][sid]["retrained"]
        a, b = local.latest(sid), remote.latest(sid)
        assert (a.model, a.status, a.reason, a.origin) == (b.model, b.status, b.reason, b.origin)
        assert np.array_equal(a.mean, b.mean)
        assert all(np.array_equal(a.quantiles[k], b.quantiles[k]) for k in a.quantiles)
        assert a.policy == b.policy
        assert out_remote["trainer"].state(sid).fitted


def test_a_worker_killed_mid_run_is_retried_and_no_item_is_lost_or_counted_twice(ray_engine, tmp_path):
    items = list(range(24))
    victim = 13
    got: dict[str, object] = {}

    def run():
        try:
            got["results"] = ray_engine.map(_square, items, context=(str(tmp_path), victim), batch_size=2)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            got["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    pid_file = tmp_path / "victim.pid"
    deadline = time.monotonic() + 120
    while not pid_file.exists() and time.monotonic() < deadline and t.is_alive():
        time.sleep(0.1)
    assert pid_file.exists(), f"the victim item never started: {got}"
    (tmp_path / "killed").touch()  # its retry runs to the end
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGKILL)  # a Ray worker process of the cluster this test started
    t.join(timeout=180)
    assert not t.is_alive()
    assert "error" not in got, got.get("error")
    assert got["results"] == [x * x for x in items]
    attempts = [line.split() for line in (tmp_path / "attempts").read_text().splitlines()]
    tries = [int(pid_) for x, pid_ in attempts if int(x) == victim]
    assert len(tries) == 2 and tries[0] == pid and tries[1] != pid  # killed once, rerun by a new worker
    assert {int(x) for x, _ in attempts} == set(items)


def _square(ctx, x):
    from tests.engine.work import square_once_killed

    return square_once_killed(ctx, x)
