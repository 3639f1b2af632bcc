"""Trainer checkpoints: a restarted trainer serves its fitted models from its first refresh,
without refitting; unusable checkpoints (corrupt, forged, other code or settings, another
series') are skipped with a log line and refitted, never unpickled or fatal."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pandas as pd
import pytest

from core.store import MemoryForecastStore
from forecaster import checkpoint
from forecaster.checkpoint import CheckpointDir, CheckpointError, attach, trainer_fingerprint
from forecaster.config import parse_config
from forecaster.models import naive, register_model, unregister_model
from forecaster.schedule import InlineFits, run_schedule
from forecaster.training import Trainer

STEP = 300.0
T0 = 1_790_000_000.0 - 1_790_000_000.0 % STEP


def series(days: float = 4.0, phase: float = 0.0, end: float = T0):
    ts = np.arange(end - days * 86400.0, end + 1, STEP)
    return ts, 2.0 + np.sin(2 * np.pi * ts / 86400.0 + phase) + 0.05 * np.cos(ts / 5000.0)


class CountingModel(naive.MovingAverage):
    """A moving average that counts its fits (module level: checkpoints pickle it by name)."""

    fits = 0

    def _fit(self, y):
        type(self).fits += 1
        super()._fit(y)


@pytest.fixture
def counting():
    register_model("counting_for_test", CountingModel, window=6)
    CountingModel.fits = 0
    yield CountingModel
    unregister_model("counting_for_test")


def fitted_trainer(tmp_path, **kw) -> Trainer:
    tr = Trainer(MemoryForecastStore(), models=("seasonal_naive", "moving_average"), **kw)
    attach(tr, tmp_path, [])
    ts, v = series()
    tr.fit("ns/a", ts, v, now=T0)
    return tr


def restarted(tmp_path, **kw) -> tuple[Trainer, dict]:
    tr = Trainer(MemoryForecastStore(), models=("seasonal_naive", "moving_average"), **kw)
    return tr, attach(tr, tmp_path, ["ns/a"])


def test_a_restored_state_forecasts_exactly_like_the_one_that_was_fitted(tmp_path):
    tr = fitted_trainer(tmp_path)
    tr2, counts = restarted(tmp_path)
    assert counts == {"restored": 1, "missing": 0, "skipped": 0}
    ts, v = series(end=T0 + 3600.0)
    a = tr.refresh("ns/a", ts, v, now=T0 + 3600.0)
    b = tr2.refresh("ns/a", ts, v, now=T0 + 3600.0)
    assert (b.model, b.status, b.policy) == (a.model, a.status, a.policy) and b.status == "ok"
    assert np.allclose(b.mean, a.mean) and all(np.allclose(b.quantiles[k], a.quantiles[k]) for k in a.quantiles)
    st, st2 = tr.state("ns/a"), tr2.state("ns/a")
    assert (st2.fitted_at, st2.scores, st2.backtest_error) == (st.fitted_at, st.scores, st.backtest_error)
    assert not tr2.due("ns/a", T0 + 3600.0)  # fitted an hour ago: not refitted on restart


@pytest.mark.parametrize("damage", ["flip a payload byte", "truncate", "empty", "other key", "other series"])
def test_a_damaged_or_forged_checkpoint_is_skipped_with_a_log_line(tmp_path, damage, caplog):
    fitted_trainer(tmp_path)
    f = CheckpointDir(tmp_path).file_of("ns/a")
    data = f.read_bytes()
    if damage == "flip a payload byte":
        f.write_bytes(data[:-10] + bytes([data[-10] ^ 1]) + data[-9:])
    elif damage == "truncate":
        f.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        f.write_bytes(b"")
    elif damage == "other key":
        (tmp_path / checkpoint.KEY_FILE).write_bytes(b"k" * 32)
    else:  # a valid checkpoint of another series, copied over this one's name
        other = fitted_trainer(tmp_path / "b")
        other.checkpoints.key = CheckpointDir(tmp_path).key
        other.fit("ns/b", *series(phase=1.0), now=T0)
        f.write_bytes(other.checkpoints.file_of("ns/b").read_bytes())
    with caplog.at_level(logging.WARNING, logger="forecaster.checkpoint"):
        tr2, counts = restarted(tmp_path)
    assert counts == {"restored": 0, "missing": 0, "skipped": 1}
    assert tr2.state("ns/a") is None and tr2.due("ns/a", T0)
    assert "ns/a: checkpoint" in caplog.text and "refitting" in caplog.text


def test_bytes_that_fail_authentication_are_never_unpickled(tmp_path):
    ran = []

    class Trap:
        def __reduce__(self):
            return (ran.append, ("unpickled",))

    ck = CheckpointDir(tmp_path, fingerprint="fp")
    good = ck.encode("ns/a", {"x": 1})
    head_and_tag = len(good) - len(pickle.dumps({"x": 1}, protocol=pickle.HIGHEST_PROTOCOL))
    forged = good[:head_and_tag] + pickle.dumps(Trap())
    with pytest.raises(CheckpointError, match="authentication failed"):
        ck.decode("ns/a", forged)
    assert ran == []
    ck.file_of("ns/a").write_bytes(forged)
    assert ck.load("ns/a") is None and ran == []


def test_a_checkpoint_of_another_format_or_other_settings_is_refitted_not_loaded(tmp_path, monkeypatch, caplog):
    fitted_trainer(tmp_path)
    with caplog.at_level(logging.WARNING, logger="forecaster.checkpoint"):
        tr2, counts = restarted(tmp_path, horizon=6)  # a forecast of 12 steps is no use at 6
    assert counts["skipped"] == 1 and tr2.state("ns/a") is None
    assert "fingerprint differs" in caplog.text
    monkeypatch.setattr(checkpoint, "FORMAT_VERSION", checkpoint.FORMAT_VERSION + 1)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="forecaster.checkpoint"):
        tr3, counts = restarted(tmp_path)
    assert counts["skipped"] == 1 and tr3.state("ns/a") is None
    assert f"format {checkpoint.FORMAT_VERSION - 1}, this trainer reads format {checkpoint.FORMAT_VERSION}" in caplog.text


def test_the_fingerprint_follows_the_code_and_the_settings(monkeypatch):
    a = Trainer(None, models=("auto",))
    assert trainer_fingerprint(a) == trainer_fingerprint(Trainer(None, models=("auto",)))
    assert trainer_fingerprint(a) != trainer_fingerprint(Trainer(None, models=("auto",), quantiles=(0.5, 0.95)))
    before = trainer_fingerprint(a)
    monkeypatch.setattr(checkpoint, "code_fingerprint", lambda: "another build")
    assert trainer_fingerprint(a) != before


def test_a_shared_global_network_is_stored_by_name_and_a_missing_one_refuses_the_checkpoint(tmp_path, caplog):
    net = np.arange(200_000, dtype="float64")  # stands in for the LSTM's network
    ck = CheckpointDir(tmp_path)
    assert ck.save("ns/a", {"model": {"net_": net}}, shared={id(net): "lstm"})
    assert ck.file_of("ns/a").stat().st_size < net.nbytes / 100
    again = np.ones(3)
    assert ck.load("ns/a", shared={"lstm": again})["model"]["net_"] is again
    with caplog.at_level(logging.WARNING, logger="forecaster.checkpoint"):
        assert ck.load("ns/a") is None
    assert "not loaded" in caplog.text


def test_a_state_that_cannot_be_pickled_is_logged_and_the_trainer_goes_on(tmp_path, caplog):
    tr = fitted_trainer(tmp_path)
    tr.state("ns/a").scores["bad"] = lambda: None  # a lambda does not pickle
    with caplog.at_level(logging.WARNING, logger="forecaster.checkpoint"):
        assert not tr.checkpoints.save("ns/a", tr.state("ns/a"))
    assert "checkpoint not written" in caplog.text
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


def test_a_drift_flag_is_checkpointed_so_a_restart_still_retrains(tmp_path):
    tr = fitted_trainer(tmp_path)
    saved = tr.checkpoints.saved
    ts, v = series(end=T0 + 600.0)
    tr.refresh("ns/a", ts, v, now=T0 + 600.0)
    assert tr.checkpoints.saved == saved  # nothing changed: no write on a plain refresh
    tr.state("ns/a").needs_retrain = True
    tr.refresh("ns/a", ts, v, now=T0 + 600.0)
    assert tr.checkpoints.saved == saved + 1
    tr2, _ = restarted(tmp_path)
    assert tr2.state("ns/a").needs_retrain and tr2.due("ns/a", T0 + 600.0)


def test_checkpoints_of_workloads_no_longer_configured_are_pruned(tmp_path):
    tr = fitted_trainer(tmp_path)
    tr.fit("ns/gone", *series(phase=2.0), now=T0)
    assert tr.checkpoints.file_of("ns/gone").exists()
    restarted(tmp_path)
    assert not tr.checkpoints.file_of("ns/gone").exists() and tr.checkpoints.file_of("ns/a").exists()


def test_an_unwritable_checkpoint_directory_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="--checkpoint-dir"):
        CheckpointDir(tmp_path / "file" / "sub")


# --- the restart, through the long-running schedule -----------------------------------------


class FrameSource:
    def fetch(self, query, start, end, step_seconds, series_id=None):
        ts, v = series(days=(end - start) / 86400.0, phase=float(query[-1]), end=end)
        return pd.DataFrame({"series_id": series_id or query, "timestamp": pd.to_datetime(ts, unit="s", utc=True),
                             "value": v})


def _config(n: int):
    return parse_config({
        "source": {"url": "csv://unused.csv", "step_seconds": STEP, "history_days": 3},
        "training": {"models": ["counting_for_test"], "retrain_interval_seconds": 86400, "refresh_interval_seconds": 60},
        "workloads": [{"namespace": "ns", "name": f"w{i}", "demand_query": f"q{i}",
                       "capacity": {"cpu_request_cores": 1.0, "ready_pods": 2}} for i in range(n)],
    })


def _run(config, store, now: float, ckpt, iterations: int = 1) -> list[dict]:
    t = [now]
    steps: list[dict] = []

    def sleep(s):
        t[0] += s

    run_schedule(config, FrameSource(), store, clock=lambda: t[0], sleep=sleep, iterations=iterations,
                 on_step=steps.append, fits=InlineFits(budget_seconds=1e9, clock=lambda: t[0]),
                 pull_threads=1, checkpoint_dir=ckpt)
    return steps


def test_a_restarted_trainer_publishes_fitted_forecasts_at_once_without_fitting(tmp_path, counting):
    config = _config(4)
    ids = [w.series_id for w in config.workloads]
    first = _run(config, MemoryForecastStore(), T0, tmp_path)
    assert first[0]["fits_done"] == 4  # fitted after the first refresh
    fits = counting.fits
    assert fits >= 4

    store = MemoryForecastStore()  # the restart: a new process, the same checkpoint directory
    steps = _run(config, store, T0 + 300.0, tmp_path)
    assert counting.fits == fits  # nothing refitted
    assert steps[0]["published"] == 4 and steps[0]["queued"] == []
    for sid in ids:
        fc = store.latest(sid)
        assert (fc.model, fc.status) == ("counting_for_test", "ok"), fc.reason
        assert fc.generated_at == T0 + 300.0 and fc.origin == T0 + 300.0

    # without checkpoints the same restart serves the placeholder until each workload is refitted
    store = MemoryForecastStore()
    _run(config, store, T0 + 600.0, None)
    assert all("not trained yet" in store.latest(sid).reason for sid in ids) and counting.fits == 2 * fits


def test_a_checkpoint_does_not_grow_with_the_history_window(tmp_path):
    sizes = []
    for days in (4.0, 12.0):
        tr = Trainer(None, models=("seasonal_naive", "moving_average"))
        attach(tr, tmp_path / str(days), [])
        tr.fit("ns/a", *series(days=days), now=T0)
        sizes.append(tr.checkpoints.file_of("ns/a").stat().st_size)
    assert abs(sizes[1] - sizes[0]) < 1024, sizes  # 8 more days are 2,304 points, 18 KB per copy


def test_the_global_lstm_is_checkpointed_once_and_its_series_share_the_restored_network(tmp_path, monkeypatch, caplog):
    from forecaster.models.lstm import GlobalLSTM
    from tests.forecaster_models.conftest import FAST_PARAMS

    monkeypatch.setattr(GlobalLSTM, "DEFAULTS", {**GlobalLSTM.DEFAULTS, **FAST_PARAMS["lstm"]})
    data = {f"ns/{k}": series(phase=float(k)) for k in range(3)}
    tr = Trainer(None, models=("lstm",))
    attach(tr, tmp_path, [])
    tr.fit_fleet(data, now=T0)
    assert {tr.state(s).model_name for s in data} == {"lstm"}
    glob = tr.checkpoints.file_of(checkpoint.GLOBAL_ID).stat().st_size
    assert all(tr.checkpoints.file_of(s).stat().st_size < glob / 2 for s in data)  # the network is not copied

    tr2 = Trainer(None, models=("lstm",))
    assert attach(tr2, tmp_path, list(data)) == {"restored": 3, "missing": 0, "skipped": 0}
    net = tr2.prototypes["lstm"].net_
    assert net is not None and all(tr2.state(s).model.net_ is net for s in data)
    for s, (ts, v) in data.items():
        assert np.allclose(tr.refresh(s, ts, v, now=T0).mean, tr2.refresh(s, ts, v, now=T0).mean)

    tr.checkpoints.file_of(checkpoint.GLOBAL_ID).unlink()  # without the network, its series refit
    with caplog.at_level(logging.WARNING, logger="forecaster.checkpoint"):
        assert attach(Trainer(None, models=("lstm",)), tmp_path, list(data))["skipped"] == 3
    assert "not loaded" in caplog.text


def test_the_restore_pauses_the_cyclic_gc_and_turns_it_back_on_even_when_a_load_fails(tmp_path, monkeypatch):
    import gc

    fitted_trainer(tmp_path)
    seen = []
    load = CheckpointDir.load
    monkeypatch.setattr(CheckpointDir, "load", lambda self, *a, **k: (seen.append(gc.isenabled()), load(self, *a, **k))[1])
    tr, counts = restarted(tmp_path)
    assert counts["restored"] == 1 and seen == [False] and gc.isenabled()

    def broken(self, *a, **k):
        raise OSError("disk gone")

    monkeypatch.setattr(CheckpointDir, "load", broken)
    with pytest.raises(OSError):
        restarted(tmp_path)
    assert gc.isenabled()
    gc.disable()
    try:  # a caller that had it off keeps it off
        monkeypatch.setattr(CheckpointDir, "load", load)
        restarted(tmp_path)
        assert not gc.isenabled()
    finally:
        gc.enable()
