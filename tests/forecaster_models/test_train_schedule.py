"""`foresight train` schedule: a refresh every step, fits after it when due, never before it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.store import MemoryForecastStore
from forecaster.config import parse_config
from forecaster.schedule import InlineFits, run_schedule
from forecaster.sources.csv import CsvSource

DATA = "tests/data/cpu_slice.csv.gz"


def _config(retrain_seconds: float) -> object:
    return parse_config({
        "source": {"url": f"csv://{DATA}", "step_seconds": 300, "history_days": 4},
        "training": {"retrain_interval_seconds": retrain_seconds, "refresh_interval_seconds": 300,
                     "models": ["persistence", "moving_average"]},
        "workloads": [
            {"namespace": "ns", "name": "vm", "demand_query": "azurev1-825849",
             "capacity": {"cpu_request_cores": 1.0, "ready_pods": 2}},
        ],
    })


def test_schedule_refreshes_every_step_and_retrains_when_due():
    src = CsvSource(DATA)
    t_end = pd.Timestamp(src.load().query("series_id == 'azurev1-825849'")["timestamp"].max()).timestamp()
    clock_t = [t_end - 3600.0]
    sleeps: list[float] = []

    def clock():
        return clock_t[0]

    def sleep(s):
        sleeps.append(s)
        clock_t[0] += s

    store = MemoryForecastStore()
    steps: list[dict] = []
    published: list[tuple[str, str]] = []
    trainer = run_schedule(_config(retrain_seconds=900), src, store, clock=clock, sleep=sleep, iterations=5,
                           on_step=lambda out: (steps.append(out), published.append(
                               (store.latest("ns/vm").model, store.latest("ns/vm").reason))),
                           fits=InlineFits(budget_seconds=60.0, clock=clock))
    # the fit runs after the refresh of its step: at start, then every 900 s = every third step
    assert [s["fits_done"] for s in steps] == [1, 0, 0, 1, 0]
    assert "not trained yet" in published[0][1]  # the first refresh did not wait for the fit
    assert all("not trained yet" not in reason for _, reason in published[1:])
    assert sleeps == [300.0] * 4
    fc = store.latest("ns/vm")
    assert fc.generation == 5
    assert fc.origin == np.floor((t_end - 3600 + 4 * 300) / 300) * 300
    assert fc.meta["ready_pods"] == 2 and fc.meta["cpu_request_cores"] == 1.0
    assert trainer.status("ns/vm")["model"] in ("persistence", "moving_average", "persistence+moving_average")
    # one full pull at start, one per retrain; every other refresh pulled only the new samples
    assert steps[-1]["pulls"] == {"full": 3, "incremental": 4}
