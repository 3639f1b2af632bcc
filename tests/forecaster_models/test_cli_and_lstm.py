"""`foresight backtest` end to end on a real slice; the global LSTM's checkpoint."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.models import ModelError, get_model
from forecaster.models.lstm import GlobalLSTM
from foresight.cli import main
from tests.forecaster_models.conftest import FAST_PARAMS

DATA = "tests/data/cpu_slice.csv.gz"


def test_backtest_writes_the_exact_columns_a_summary_and_plots(tmp_path, capsys):
    out = tmp_path / "r.csv"
    plots = tmp_path / "plots"
    rc = main([
        "backtest", "--data", DATA, "--series", "azurev1-825849", "azurev1-1985204",
        "--models", "auto,persistence,moving_average,ar", "--out", str(out), "--plot", str(plots), "--no-progress",
    ])
    text = capsys.readouterr().out
    assert rc == 0
    df = pd.read_csv(out)
    assert list(df.columns) == ["series_id", "model", "h", "mae", "mase", "pinball_p90", "coverage_p90"]
    assert set(df.model) == {"auto", "persistence", "moving_average", "ar"}
    assert set(df.series_id) == {"azurev1-825849", "azurev1-1985204"}
    assert sorted(df.h.unique()) == list(range(1, 13))
    assert df[["mae", "mase", "pinball_p90"]].notna().all().all()
    assert df.coverage_p90.between(0, 1).all()
    for m in ("auto", "persistence", "moving_average", "ar"):
        assert m in text
    assert "MASE 1-12" in text and "skill" in text
    assert sorted(p.name for p in plots.iterdir()) == ["azurev1-1985204.png", "azurev1-825849.png"]


def test_backtest_rejects_unknown_models_and_series(tmp_path, capsys):
    assert main(["backtest", "--data", DATA, "--models", "auto,magic", "--out", str(tmp_path / "x.csv")]) == 2
    assert "unknown model(s) ['magic']" in capsys.readouterr().err
    assert main(["backtest", "--data", DATA, "--series", "nope", "--out", str(tmp_path / "x.csv")]) == 2
    assert "--series: ['nope'] not in" in capsys.readouterr().err


def test_global_lstm_trains_across_series_and_its_checkpoint_round_trips(slice_arrays, tmp_path):
    fleet = [(v[-1500:], ts[-1500:]) for ts, v in slice_arrays.values()]
    proto = get_model("lstm", **{**FAST_PARAMS["lstm"], "epochs": 2})
    proto.fit_fleet(fleet)
    rep = proto.train_report_
    assert rep["windows"] > 0 and 1 <= len(rep["epochs"]) <= 2
    assert all(np.isfinite(e["val_loss"]) for e in rep["epochs"])
    ts, v = slice_arrays["azurev1-737498"]
    a = proto.new().fit(v[-600:], ts[-600:])
    assert a.net_ is proto.net_  # one network for the fleet, shared by every series' clone
    p = a.predict(12)
    path = tmp_path / "lstm.pt"
    proto.save(path)
    loaded = GlobalLSTM.load(path)
    b = loaded.new().fit(v[-600:], ts[-600:])
    assert np.allclose(b.predict(12).mean, p.mean, atol=1e-5)
    import torch

    ck = torch.load(path, weights_only=True)
    assert ck["version"] == 1 and ck["scaler"]["kind"] == "recent_window" and ck["config"]["window"] == 24


def test_lstm_is_scale_free_a_level_shift_moves_the_forecast_with_it(slice_arrays):
    fleet = [(v[-1500:], ts[-1500:]) for ts, v in slice_arrays.values()]
    proto = get_model("lstm", **FAST_PARAMS["lstm"]).fit_fleet(fleet)
    ts, v = slice_arrays["azurev1-825849"]
    v = np.nan_to_num(v[-600:], nan=float(np.nanmean(v)))
    base = proto.new().fit(v, ts[-600:]).predict(6).mean
    shifted = proto.new().fit(v * 10 + 500, ts[-600:]).predict(6).mean
    assert np.allclose(shifted, base * 10 + 500, rtol=1e-3, atol=1e-2)


def test_loading_a_checkpoint_of_another_version_is_refused(tmp_path, slice_arrays):
    import torch

    fleet = [(v[-800:], ts[-800:]) for ts, v in list(slice_arrays.values())[:2]]
    proto = get_model("lstm", **FAST_PARAMS["lstm"]).fit_fleet(fleet)
    path = tmp_path / "old.pt"
    proto.save(path)
    ck = torch.load(path, weights_only=True)
    ck["version"] = 99
    torch.save(ck, path)
    with pytest.raises(ModelError, match="version 99"):
        GlobalLSTM.load(path)


class _RunsCodeWhenUnpickled:
    """What a writer of the checkpoint storage could plant: unpickling it calls a function."""

    def __reduce__(self):
        return (print, ("unpickled: this could have been any code",))


def test_a_checkpoint_carrying_a_pickled_object_is_refused_without_unpickling_it(tmp_path, slice_arrays, capsys):
    import torch

    fleet = [(v[-800:], ts[-800:]) for ts, v in list(slice_arrays.values())[:2]]
    proto = get_model("lstm", **FAST_PARAMS["lstm"]).fit_fleet(fleet)
    path = tmp_path / "planted.pt"
    proto.save(path)
    ck = torch.load(path, weights_only=True)  # what save writes loads without unpickling objects
    assert isinstance(ck["config"]["train_quantiles"], list) and isinstance(ck["train_report"], dict)
    ck["train_report"]["note"] = _RunsCodeWhenUnpickled()
    torch.save(ck, path)
    with pytest.raises(ModelError, match=r"planted\.pt holds more than tensors and plain data.*weights_only=True"):
        GlobalLSTM.load(path)
    assert "unpickled" not in capsys.readouterr().out
