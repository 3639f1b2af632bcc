"""One series' replay in every mode: the per-series work ``foresight replay`` hands to an engine
(``forecaster.engine``), so it runs the same in process, in a pool or on Ray."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from replay.simulate import ReplayConfig, make_world, production_feed, run_mode


@dataclass(frozen=True)
class ReplayWork:
    """What every series shares: the settings, the modes, and how many series get plots."""

    cfg: ReplayConfig
    modes: tuple[str, ...]


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
    feed = production_feed(world, cfg) if any(m.startswith("predictive") for m in modes) else None
    results = {}
    for mode in modes:
        r = run_mode(world, mode, cfg, feed if mode.startswith("predictive") else None)
        results[mode] = r
        out.rows.append(r.row())
    if feed is not None:
        out.error = {"series_id": sid, **feed.summary(), **feed.error(world.sample_ts, world.sample_cores, world.t0)}
    if plots:
        out.figures.append((f"{sid}: whole replay", report.series_figure(world, results)))
        out.figures.append((f"{sid}: zoom on 6 hours", report.series_figure(world, results, zoom_hours=6)))
    return out


def work_items(series: Sequence[tuple[str, Any, Any]], plotted: int = 12) -> list[tuple[str, Any, Any, bool]]:
    """The engine's items: plots for the first ``plotted`` series only."""
    return [(sid, ts, v, i < plotted) for i, (sid, ts, v) in enumerate(series)]
