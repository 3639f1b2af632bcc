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

from core.store import MemoryForecastStore
from forecaster.config import parse_config
from forecaster.engines.local import LocalEngine
from forecaster.evaluation import BacktestSettings, run_backtest
from forecaster.schedule import train_once
from forecaster.sources.csv import CsvSource, read_long_csv
from foresight.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "cpu_slice.csv.gz"
SERIES = ["azurev1-1650389", "azurev1-618849", "azurev1-737498"]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def ray_engine(ray_cluster):
    return ray_cluster.engine


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
    rows = (tmp_path / "ray" / "summary.csv").read_text().splitlines()[1:]
    assert sorted({r.split(",")[0] for r in rows}) == sorted(SERIES[:2])
    assert len(rows) == 2 * len({r.split(",")[1] for r in rows}) >= 2 * 3  # every series in every mode


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
    train_once(config, src, local, now=now)
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


def test_the_trainer_schedule_sends_its_due_fits_to_ray_in_one_batch_and_adopts_them(ray_engine):
    from forecaster.engines.fits import EngineFits
    from forecaster.schedule import TrainScheduler, trainer_from_config

    config = _config(["auto"])
    src = CsvSource(str(DATA))
    f = src.load()
    now = pd.Timestamp(f[f.series_id.isin(SERIES)]["timestamp"].max()).timestamp() - 86400.0
    reference = train_once(config, src, MemoryForecastStore(), now=now)["trainer"]
    trainer = trainer_from_config(config, MemoryForecastStore(), clock=lambda: now)
    fits = EngineFits(ray_engine, start=False)  # run_one by hand: no thread, no timing
    sched = TrainScheduler(config, src, trainer, fits=fits, clock=lambda: now)
    report = sched.step(now)
    sids = [f"ns/{s}" for s in SERIES]
    assert report["published"] == 3 and sorted(report["queued"]) == sorted(sids)
    assert all(not trainer.state(sid).fitted for sid in sids)  # placeholders until the fits land
    assert fits.run_one()
    assert ray_engine.last_stats.items == 3 and fits.pending() == 0 and fits.done == 3
    for sid in sids:
        got, want = trainer.state(sid), reference.state(sid)
        assert got.fitted and got.model_name == want.model_name and got.backtest_error == want.backtest_error
        assert got.policy == want.policy
    assert not sched.queue_due(now, list(config.workloads))  # fitted: nothing is due again


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


def test_a_worker_node_killed_mid_run_loses_no_item(ray_cluster, tmp_path):
    from tests.engine.conftest import _wait_cpus

    doomed = "doomed"
    ray_cluster.start_worker(doomed, {**ray_cluster.env, "FORESIGHT_TEST_NODE": doomed})
    engine = ray_cluster.engine
    _wait_cpus(engine, 3)
    items = list(range(18))
    got: dict[str, object] = {}
    t = threading.Thread(target=lambda: got.update(results=engine.map(_slow, items, context=(str(tmp_path), 1.0),
                                                                      batch_size=1)))
    t.start()
    log = tmp_path / "attempts"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and f" {doomed}\n" in log.read_text()):
        time.sleep(0.05)
    assert log.exists() and f" {doomed}\n" in log.read_text(), "no task started on the doomed node"
    ray_cluster.kill(doomed)  # mid-task: its item started there and cannot end there
    t.join(timeout=240)
    assert not t.is_alive()
    assert got["results"] == [x * x for x in items]
    lines = [line.split() for line in (tmp_path / "attempts").read_text().splitlines()]
    on_doomed = {int(x) for what, x, g in lines if what == "start" and g == doomed}
    ended_there = {int(x) for what, x, g in lines if what == "end" and g == doomed}
    interrupted = on_doomed - ended_there
    assert interrupted, "the kill came after the doomed node's work had ended"
    ended = [int(x) for what, x, g in lines if what == "end"]
    assert set(ended) == set(items)  # every interrupted item ran again on a node that lived
    assert all(any(int(x) == i and g != doomed for w, x, g in lines if w == "end") for i in interrupted)


def _slow(ctx, x):
    from tests.engine.work import slow_square

    return slow_square(ctx, x)
