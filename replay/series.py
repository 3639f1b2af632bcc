"""One series' replay in every mode: the per-series work ``foresight replay`` hands to an engine
(``forecaster.engine``), so it runs the same in process, in a pool or on Ray."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from forecaster.models import Model
from replay.pipeline import fleet_globals
from replay.population import population
from replay.rises import rise_readiness, summarize_leads
from replay.simulate import ReplayConfig, make_world, production_feed, run_mode


@dataclass(frozen=True)
class ReplayWork:
    """What every series shares: the settings, the modes, how many series get plots, and the
    global models trained across the replayed series (``replay_globals``)."""

    cfg: ReplayConfig
    modes: tuple[str, ...]
    prototypes: dict[str, Model] = field(default_factory=dict)


def replay_globals(cfg: ReplayConfig, series: Sequence[tuple[str, Any, Any]]) -> dict[str, Model]:
    """The global models of ``cfg.pipeline`` (the LSTM of ``models: [auto, lstm]``), trained once
    across ``series`` on what each one's first fit sees, as a deployment trains them across its
    fleet; {} when its models name none."""
    from forecaster.training import GLOBAL_MODELS, expand_models

    if not set(expand_models(cfg.pipeline.training.models)[0]) & set(GLOBAL_MODELS):
        return {}
    history = {}
    for sid, ts, v in series:
        try:
            world = make_world(sid, np.asarray(ts).astype("int64"), v, cfg)
        except ValueError:
            continue  # too short to replay: replay_series reports it
        history[sid] = production_feed(world, cfg).first_history()
    return fleet_globals(cfg.pipeline, history) if history else {}


@dataclass
class SeriesReplay:
    series_id: str
    rows: list[dict] = field(default_factory=list)  # one summary row per mode
    error: dict | None = None  # the forecast error row (predictive modes only)
    figures: list[tuple[str, str]] = field(default_factory=list)  # (title, embedded PNG)
    problem: str | None = None  # the series cannot be replayed (too short, no data)


def replay_series(work: ReplayWork, item: tuple[str, np.ndarray, np.ndarray, bool]) -> SeriesReplay:
    """Replay ``item`` = (series_id, timestamps, values, draw plots?) in every mode of ``work``;
    one production feed serves the predictive modes. Pure: the caller writes the results."""
    from replay import report

    sid, ts, v, plots = item
    out = SeriesReplay(sid)
    cfg, modes = work.cfg, work.modes
    try:
        world = make_world(sid, np.asarray(ts).astype("int64"), v, cfg)
    except ValueError as exc:
        out.problem = str(exc)
        return out
    feed = production_feed(world, cfg, work.prototypes or None) if any(m.startswith("predictive") for m in modes) else None
    results = {}
    pop = population(np.asarray(v, dtype="float64"))
    for mode in modes:
        r = run_mode(world, mode, cfg, feed if mode.startswith("predictive") else None)
        results[mode] = r
    ref = results.get("reactive")
    for mode, r in results.items():
        row = {**r.row(), "population": pop}
        if ref is not None and mode != "reactive":  # when its pods were Ready at the reactive HPA's rises
            row.update(summarize_leads(rise_readiness(world.t, world.demand, ref.replicas, r.ready, cfg.cpu_request_cores,
                                                      cfg.slo_threshold)))
        out.rows.append(row)
    if feed is not None:
        out.error = {"series_id": sid, **feed.summary(), **feed.error(world.sample_ts, world.sample_cores, world.t0)}
    if plots:
        out.figures.append((f"{sid}: whole replay", report.series_figure(world, results)))
        out.figures.append((f"{sid}: zoom on 6 hours", report.series_figure(world, results, zoom_hours=6)))
    return out


def work_items(series: Sequence[tuple[str, Any, Any]], plotted: int = 12) -> list[tuple[str, Any, Any, bool]]:
    """The engine's items: plots for the first ``plotted`` series only."""
    return [(sid, ts, v, i < plotted) for i, (sid, ts, v) in enumerate(series)]
