"""Walk-forward backtest and forecast metrics (the benchmark protocol of the public CPU traces):

- evaluation window = the last ``eval_days`` (7) of each series; forecast origins every
  ``origin_every_hours`` (12) in it; at each origin every model sees at most the previous
  ``train_days`` (14) of data and nothing after the origin (its scaler, its validation split
  and its calibration included);
- h = 1..H steps; metrics per series, model and horizon: MAE, MASE (scale: in-sample MAE of
  the one-step naive forecast on that origin's training part), pinball loss and empirical
  coverage of each quantile;
- ``auto`` = the per-series selection (``forecaster.selection``) run at every origin on that
  origin's training data only, so it is judged on forecasts it made before seeing the truth,
  served as ``foresight train`` serves it (``forecaster.backtest_live``): the fit of the
  previous origin is refreshed at every sample up to this one and scored live against
  persistence (and refitted at once when its drift check asks, as the trainer does); when
  that live check has fallen back, the new fit starts in fallback and the origin's forecast
  is persistence's.

Every model at an origin is fitted once; its forecasts feed both its own row and ``auto``
(and the rows of ``BacktestSettings.extra_rows``: a benchmark's other selections, scored on the
same fits). The metrics are in ``forecaster.backtest_metrics``.
Global models (LSTM) are trained once per run on each series' data before its first origin.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from forecaster.backtest_metrics import metrics_rows, pinball, summarize  # noqa: F401 (re-exported)
from forecaster.models import Model, ModelError, Prediction, clean_history, get_model
from forecaster.models.base import season_length
from forecaster.selection import (
    CandidateResult,
    SelectionSettings,
    build_model,
    choose,
    conformal_offsets,
    evaluate_candidates,
)
from forecaster.training import GLOBAL_MODELS

RESULT_COLUMNS = ["series_id", "model", "h", "mae", "mase", "pinball_p90", "coverage_p90"]


class ExtraRows(Protocol):
    """Rows besides ``auto`` scored at every origin on the same candidate fits: what a benchmark
    sets beside the shipped selection (bench/auto_rows.py). The product's backtest has none."""

    candidates: Sequence[str]  # fitted at every origin besides auto's candidates, each once

    def predict(self, fits: Mapping[str, CandidateResult], actual: Any, scale: Any, y: np.ndarray,
                ts: np.ndarray | None, fallback: Model, horizon: int,
                quantiles: Sequence[float]) -> dict[str, tuple[Prediction, float]]:
        """Row name -> (its forecast at this origin, the seconds it cost). ``fits``: the
        candidates evaluated on the origin's training data (``model`` None where one failed;
        empty when the data is too short: then ``fallback``, persistence fitted on it, is what
        auto serves); ``actual`` and ``scale``:
        their validation truth and MASE scale, as ``forecaster.selection.choose`` takes them."""
        ...


@dataclass(frozen=True)
class BacktestSettings:
    eval_days: float = 7.0
    origin_every_hours: float = 12.0
    train_days: float = 14.0
    horizon: int = 12
    quantiles: tuple[float, ...] = (0.5, 0.9)
    selection: SelectionSettings = field(default_factory=SelectionSettings)
    extra_rows: ExtraRows | None = None  # a benchmark's rows beside auto (``ExtraRows``)


def naive_scale(train: np.ndarray) -> float:
    """In-sample MAE of the one-step naive forecast (NaN-aware); tiny but > 0 when flat."""
    d = np.abs(np.diff(np.asarray(train, dtype="float64")))
    d = d[np.isfinite(d)]
    s = float(np.mean(d)) if len(d) else 0.0
    if not s > 0:
        fin = np.asarray(train)[np.isfinite(train)]
        s = max(float(np.mean(np.abs(fin))) * 1e-3 if len(fin) else 0.0, 1e-9)
    return s


def origin_indices(n: int, season: int, settings: BacktestSettings) -> np.ndarray:
    """Origins (index of the last point a model may see) every 12 h in the last 7 days."""
    step_pts = season / 24.0 * settings.origin_every_hours
    start = n - int(round(settings.eval_days * season)) - 1
    out = []
    k = 0
    while True:
        o = start + int(round(k * step_pts))
        if o + settings.horizon > n - 1:
            break
        if o >= 1:
            out.append(o)
        k += 1
    return np.asarray(out, dtype=int)


@dataclass
class OriginForecasts:
    origin: int
    actual: np.ndarray  # (h,) with NaN where missing
    scale: float
    forecasts: dict[str, tuple[np.ndarray, dict[str, np.ndarray]]]  # model -> (mean, quantiles)
    chosen: str = ""  # what auto picked
    recent: np.ndarray | None = None  # the last points before the origin (for plots)
    live_fallback: bool = False  # auto served persistence because of the live check
    # auto at every sample since the previous origin, this one included, as the trainer served
    # it one step ahead: rows (t, value at t + 1, forecast served at t, value observed at t)
    steps: np.ndarray | None = None
    refits: int = 0  # fits the trainer asked for since the previous origin (its drift check)


def _fit_predict_all(
    y: np.ndarray,
    ts: np.ndarray | None,
    protos: Mapping[str, str | Model],
    settings: BacktestSettings,
    auto_candidates: Sequence[str] | None,
    timings: dict[str, float] | None = None,
) -> tuple[dict[str, tuple[np.ndarray, dict]], str, AutoFit | None]:
    """Fit every model on one origin's training data; forecast; run ``auto`` from the same fits.
    Returns the forecasts per row, what ``auto`` chose and its fitted model (``AutoFit``)."""
    H, qs = settings.horizon, settings.quantiles
    out: dict[str, tuple[np.ndarray, dict]] = {}
    finite = np.isfinite(y)
    first = int(np.argmax(finite))
    yc = clean_history(y)
    tsc = None if ts is None else ts[first:]
    season = season_length(tsc)
    need = int(settings.selection.min_history_days * season)
    fallback = get_model("persistence", season=season).fit(yc, tsc)
    short = int(finite.sum()) < need or float(np.ptp(yc)) == 0.0
    results = []
    actual = scale = None
    if not short:
        try:
            results, actual, scale, _ = evaluate_candidates(yc, tsc, list(protos.values()), H, settings.selection,
                                                            observed=finite[first:])
        except ModelError:
            short = True
    by_name = {r.name: r for r in results}
    tm = timings if timings is not None else {}
    for name in protos:
        t0 = time.perf_counter()
        r = by_name.get(name)
        if r is None or r.model is None:
            p = fallback.predict(H, qs)
        else:
            m = r.model
            m.calibrate(conformal_offsets(actual - r.means, qs))
            m.update(yc, tsc)
            p = m.predict(H, qs)
        out[name] = (p.mean, dict(p.quantiles))
        tm[name] = tm.get(name, 0.0) + time.perf_counter() - t0 + (r.seconds if r is not None else 0.0)
    chosen, auto_fit = "persistence", None
    if auto_candidates is None:
        return out, chosen, auto_fit
    if settings.extra_rows is not None:
        # before auto: their rows may share fitted candidates with it, and auto's model goes on
        # to be refreshed by the live replay with its own shift and calibration
        fits = {} if short else by_name
        for name, (p, seconds) in settings.extra_rows.predict(fits, actual, scale, yc, tsc, fallback, H, qs).items():
            out[name] = (p.mean, dict(p.quantiles))
            tm[name] = tm.get(name, 0.0) + seconds
    t0 = time.perf_counter()
    sub = [by_name[c] for c in auto_candidates if c in by_name and by_name[c].model is not None]
    if short or not sub:
        p = fallback.predict(H, qs)
        auto_fit = AutoFit(fallback, None, np.full(H, np.nan), True)
    else:
        p, best, m = _auto_predict(sub, actual, scale, settings.selection, yc, tsc, H, qs)
        chosen, auto_fit = best.name, AutoFit(m, best.score, best.mase_by_h * scale, False)
    out["auto"] = (p.mean, dict(p.quantiles))
    # auto costs its candidates' fits plus the choice on top
    tm["auto"] = tm.get("auto", 0.0) + time.perf_counter() - t0 + sum(by_name[c].seconds for c in auto_candidates if c in by_name)
    return out, chosen, auto_fit


@dataclass
class AutoFit:
    """What ``auto``'s fit at one origin hands the trainer (``forecaster.backtest_live``)."""

    model: Model
    score: float | None  # weighted validation MASE (None when the fit fell back)
    mae_by_h: np.ndarray  # validation MAE per horizon, series units
    fallback: bool  # the fit itself fell back to persistence (short or flat history)


def _auto_predict(sub, actual, scale, sel, yc, tsc, H, qs):
    """``auto``'s forecast from already-evaluated candidates, as selection serves it; also
    the chosen entry and its fitted model."""
    _, best = choose(sub, actual, scale, sel)
    m = build_model(best, sub)  # standalone rows already predicted with its parts
    m.set_bias(best.shift)
    m.calibrate(conformal_offsets(actual - best.means, qs))  # means include the shift
    m.update(yc, tsc)
    return m.predict(H, qs), best, m


# --- whole-dataset runner (``foresight backtest`` and bench/forecast_accuracy.py) ----------


@dataclass
class BacktestRun:
    rows: Any  # DataFrame: series_id, model, h, mae, mase, pinball_p*, coverage_p*
    summary: Any  # DataFrame indexed by model
    forecasts: dict[str, list[OriginForecasts]]
    timings: dict[str, dict[str, float]]  # per model: fit/predict seconds summed over series
    lstm_report: dict = field(default_factory=dict)


def train_global_lstm(arrays: Sequence[tuple[str, np.ndarray, np.ndarray]], settings: BacktestSettings, progress=None, **params):
    """Train the fleet LSTM on each series' data strictly before its first origin (at most
    ``train_days`` of it), so no backtest origin is ever looked past."""
    proto = get_model("lstm", horizon=settings.horizon, **params)
    data = []
    for sid, ts, v in arrays:
        season = season_length(ts)
        origins = origin_indices(len(v), season, settings)
        if not len(origins):
            continue
        o = int(origins[0])
        lo = max(0, o + 1 - int(settings.train_days * season))
        data.append((v[lo : o + 1], ts[lo : o + 1]))
    proto.fit_fleet(data, progress=progress)
    return proto


def run_backtest(
    frame,
    models: Sequence[str],
    settings: BacktestSettings = BacktestSettings(),
    *,
    progress: bool = True,
    lstm_params: Mapping[str, Any] | None = None,
    jobs: int = 1,
    engine=None,
) -> BacktestRun:
    """Backtest every series of a long frame with ``models`` (names; "auto" adds the
    per-series selection). Times each model separately (fit + validation + predict).
    The series run on ``engine`` (``forecaster.engine``; default: local with ``jobs`` processes)."""
    import pandas as pd
    from tqdm import tqdm

    from forecaster.frames import regularize, series_arrays

    names = [m for m in models if m != "auto"]
    auto = "auto" in models
    for m in names:
        if m != "lstm":
            get_model(m)  # unknown names fail before any work
    arrays = list(series_arrays(regularize(frame, _grid_step(frame))))
    protos: list[str | Model] = [m for m in names if m != "lstm"]
    lstm_report: dict = {}
    timings: dict[str, dict[str, float]] = {}
    auto_cands = list(settings.selection.candidates)
    if "lstm" in names or (auto and "lstm" in _all_candidates(settings)):
        t0 = time.perf_counter()
        bar = tqdm(total=int((lstm_params or {}).get("epochs", 12)), desc="lstm (global) training", disable=not progress, leave=False)
        proto = train_global_lstm(arrays, settings, progress=lambda e: bar.update(1), **dict(lstm_params or {}))
        bar.close()
        lstm_report = dict(proto.train_report_)
        timings["lstm_global_training"] = {"seconds": time.perf_counter() - t0}
        protos.append(proto)
    rows: list[dict] = []
    forecasts: dict[str, list[OriginForecasts]] = {}
    per_model_time: dict[str, float] = {}
    from forecaster.engine import open_engine

    eng = engine if engine is not None else open_engine("local", jobs=jobs)
    bar = tqdm(total=len(arrays), desc="backtest", unit="series", disable=not progress)
    try:  # the trained global models travel with the context, once per batch
        results = eng.map(_backtest_item, arrays, context=(protos, settings, auto, auto_cands), progress=bar.update)
    finally:
        bar.close()
        if engine is None:
            eng.close()
    for sid, origins, tm in results:
        forecasts[sid] = origins
        rows.extend(metrics_rows(sid, origins, settings.quantiles))
        for k, v in tm.items():
            per_model_time[k] = per_model_time.get(k, 0.0) + v
    df = pd.DataFrame(rows)
    summary = summarize(df) if len(df) else pd.DataFrame()
    n = max(1, len(arrays))
    for m, s in per_model_time.items():
        timings[m] = {"seconds_total": s, "seconds_per_series": s / n}
    return BacktestRun(df, summary, forecasts, timings, lstm_report)


def _backtest_item(work, item):
    """One series' walk-forward backtest: what an engine runs per item."""
    sid, ts, v = item
    protos, settings, auto, auto_cands = work
    tm: dict[str, float] = {}
    origins = _backtest_timed(sid, ts, v, protos, settings, auto, auto_cands, tm)
    return sid, origins, tm


def _grid_step(frame) -> float:
    from forecaster.frames import infer_step_seconds, normalize

    f = normalize(frame)
    first = f[f.series_id == f.series_id.iloc[0]]
    return infer_step_seconds(first["timestamp"].astype("int64").to_numpy() / 1e9)


def _all_candidates(settings: BacktestSettings) -> list[str]:
    """The candidates of ``auto`` and of the extra rows, each once."""
    out = list(settings.selection.candidates)
    if settings.extra_rows is not None:
        out.extend(c for c in settings.extra_rows.candidates if c not in out)
    return out


def _backtest_timed(sid, ts, v, protos, settings, auto, auto_cands, per_model_time):
    """One series' walk: fits each model in its own timed call; ``auto`` reuses the
    candidates' fits (its own time is the selection on top) and is served through the live
    replay of the trainer (``forecaster.backtest_live``; its time is ``live_check_replay``)."""
    from forecaster.backtest_live import LiveReplay

    y = np.asarray(v, dtype="float64").copy()
    y[~np.isfinite(y)] = np.nan
    ts = np.asarray(ts, dtype="float64")
    season = season_length(ts)
    by_name = {(p if isinstance(p, str) else p.name): p for p in protos}
    cand_names = [c for c in auto_cands if c in by_name or c != "lstm"]
    # auto's candidates and those of the extra rows
    for c in [*cand_names, *_all_candidates(settings)] if auto else ():
        if c in by_name or c not in GLOBAL_MODELS:  # a global model is fitted once, up front
            by_name.setdefault(c, c)
    wanted = [p if isinstance(p, str) else p.name for p in protos]
    train_pts = int(round(settings.train_days * season))
    replay = None
    if auto:
        globals_ = {n: p for n, p in by_name.items() if isinstance(p, Model)}
        replay = LiveReplay(sid, cand_names, settings.selection, horizon=settings.horizon, quantiles=settings.quantiles,
                            train_points=train_pts, prototypes=globals_)
    out = []
    for o in origin_indices(len(y), season, settings):
        lo = max(0, o + 1 - train_pts)
        tr_y, tr_ts = y[lo : o + 1], ts[lo : o + 1]
        if not np.isfinite(tr_y).any():
            continue
        fc, chosen, auto_fit = _fit_predict_all(tr_y, tr_ts, by_name, settings, cand_names if auto else None, per_model_time)
        fell_back, steps, refits = False, None, 0
        if replay is not None and auto_fit is not None:
            t0 = time.perf_counter()
            before = replay.refits
            mean, qs, fell_back = replay.serve(y, ts, int(o), auto_fit.model, auto_fit.score, auto_fit.mae_by_h,
                                               fallback=auto_fit.fallback)
            fc["auto"] = (mean, qs)
            served = replay.take_steps()
            nxt = served[:, 0].astype(int) + 1
            truth = np.where(nxt < len(y), y[np.minimum(nxt, len(y) - 1)], np.nan)
            steps = np.column_stack([served[:, 0], truth, served[:, 1], served[:, 2]])
            refits = replay.refits - before
            per_model_time["live_check_replay"] = per_model_time.get("live_check_replay", 0.0) + time.perf_counter() - t0
        # a candidate's own row only when asked for; auto's and the extra rows always
        fc = {k: v for k, v in fc.items() if k in wanted or k not in by_name}
        out.append(OriginForecasts(o, y[o + 1 : o + 1 + settings.horizon], naive_scale(tr_y), fc, chosen,
                                   recent=y[max(0, o - 35) : o + 1], live_fallback=fell_back, steps=steps,
                                   refits=refits))
    return out
