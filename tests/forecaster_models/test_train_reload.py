"""Reconfiguration without cold starts: the long-running trainer re-reads its workloads file
and takes it in place (only the workloads whose entry changed refit; the others keep their
fitted models), and a checkpoint is fingerprinted per workload, so a restart after one
workload's edit refits that workload only."""

from __future__ import annotations

import copy

import yaml

from core.store import MemoryForecastStore
from forecaster.config import parse_config
from forecaster.schedule import InlineFits, run_schedule
from tests.forecaster_models.test_checkpoint import STEP, T0, FrameSource, counting  # noqa: F401 - fixture

DOC = {
    "source": {"url": "csv://unused.csv", "step_seconds": STEP, "history_days": 3},
    "training": {"models": ["counting_for_test"], "retrain_interval_seconds": 86400, "refresh_interval_seconds": 60},
    "workloads": [{"namespace": "ns", "name": f"w{i}", "demand_query": f"q{i}",
                   "capacity": {"cpu_request_cores": 1.0, "ready_pods": 2}} for i in range(4)],
}


def run(path, store, ckpt, edits, iterations):
    """run_schedule on the file at ``path``; ``edits[k]`` rewrites it after step k."""
    t = [T0]
    steps: list[dict] = []

    def sleep(s):
        t[0] += s
        doc = edits.get(len(steps) - 1)
        if doc is not None:
            path.write_text(yaml.safe_dump(doc))

    trainer = run_schedule(parse_config(yaml.safe_load(path.read_text())), FrameSource(), store, clock=lambda: t[0],
                           sleep=sleep, iterations=iterations, on_step=steps.append,
                           fits=InlineFits(budget_seconds=1e9, clock=lambda: t[0]), pull_threads=1,
                           checkpoint_dir=ckpt, config_path=str(path))
    return trainer, steps


def edited():
    doc = copy.deepcopy(DOC)
    doc["workloads"][1]["serving"] = {"slo_minutes_per_day": 5}  # one autoscaler's spec.serving
    doc["workloads"][3]["demand_query"] = "q9"  # another's query
    doc["workloads"].append({"namespace": "ns", "name": "w4", "demand_query": "q4",
                             "capacity": {"cpu_request_cores": 1.0, "ready_pods": 2}})
    del doc["workloads"][2]  # and one leaves
    return doc


def test_an_edited_file_refits_only_the_changed_workloads_and_the_others_keep_their_models(tmp_path, counting):  # noqa: F811
    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump(DOC))
    store = MemoryForecastStore()
    trainer, steps = run(path, store, tmp_path / "ckpt", {1: edited()}, iterations=3)
    assert steps[0]["fits_done"] == 4
    fitted_at = {sid: trainer.state(sid).fitted_at for sid in ("ns/w0",)}
    assert steps[1]["fits_done"] == 0  # the file was edited after this step
    assert steps[2]["fits_done"] == 3  # w1 (serving), w3 (query), w4 (new); w0 untouched
    assert trainer.state("ns/w0").fitted_at == fitted_at["ns/w0"] == T0
    assert trainer.state("ns/w2") is None and trainer.serving_for("ns/w1").slo_minutes_per_day == 5
    assert sorted(trainer.series()) == ["ns/w0", "ns/w1", "ns/w3", "ns/w4"]
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) == 4  # w2's checkpoint pruned
    # at the step after the edit: w0 served from its fitted model, the three that start over
    # from the placeholder (then fitted after that step, as at start-up)
    assert store.latest("ns/w0").model == "counting_for_test"
    assert {store.latest(s).model for s in ("ns/w1", "ns/w3", "ns/w4")} == {"persistence"}
    assert all(trainer.state(s).fitted for s in trainer.series())


def test_a_refused_file_keeps_the_last_good_configuration(tmp_path, counting, caplog):  # noqa: F811
    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump(DOC))
    bad = copy.deepcopy(DOC)
    bad["workloads"][0]["serving"] = {"slo_minutes_per_day": -1}
    trainer, steps = run(path, MemoryForecastStore(), None, {1: bad}, iterations=3)
    assert "is refused; keeping the last configuration" in caplog.text
    assert steps[2]["fits_done"] == 0 and len(trainer.series()) == 4


def test_a_restart_after_one_workloads_edit_refits_that_workload_only(tmp_path, counting):  # noqa: F811
    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump(DOC))
    run(path, MemoryForecastStore(), tmp_path / "ckpt", {}, iterations=1)
    doc = copy.deepcopy(DOC)
    doc["workloads"][1]["serving"] = {"slo_minutes_per_day": 5}
    path.write_text(yaml.safe_dump(doc))
    fits = counting.fits
    trainer, steps = run(path, MemoryForecastStore(), tmp_path / "ckpt", {}, iterations=1)  # a new process
    assert counting.fits - fits == steps[0]["fits_done"] == 1  # w1's checkpoint has another fingerprint
    assert trainer.state("ns/w0").fitted_at == T0 and trainer.state("ns/w1").fitted_at == T0


def test_a_fleet_wide_change_builds_a_new_trainer(tmp_path, counting):  # noqa: F811
    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump(DOC))
    doc = copy.deepcopy(DOC)
    doc["training"]["horizon_steps"] = 6
    trainer, steps = run(path, MemoryForecastStore(), None, {1: doc}, iterations=3)
    assert trainer.horizon == 6 and steps[2]["fits_done"] == 4


def test_a_fit_queued_before_an_edit_fits_the_edited_entry_and_one_that_left_is_not_fitted(tmp_path, counting):  # noqa: F811
    from forecaster.schedule import TrainScheduler, trainer_from_config

    class Recording(FrameSource):
        queries: list = []

        def fetch(self, query, start, end, step_seconds, series_id=None):
            self.queries.append(query)
            return super().fetch(query, start, end, step_seconds, series_id)

    config = parse_config(copy.deepcopy(DOC))
    src = Recording()
    fits = InlineFits(budget_seconds=0.0)  # nothing runs inside the step: the fits stay queued
    sched = TrainScheduler(config, src, trainer_from_config(config, MemoryForecastStore()), fits=fits, pull_threads=1,
                           clock=lambda: T0)
    assert len(sched.step(T0)["queued"]) == 4
    doc = edited()  # w3's query becomes q9, w2 leaves
    sched.reconfigure(parse_config(doc))
    src.queries.clear()
    while fits.run_one():
        pass
    assert "q9" in src.queries and "q3" not in src.queries and "q2" not in src.queries
    assert sched.trainer.state("ns/w3").fitted and sched.trainer.state("ns/w2") is None
