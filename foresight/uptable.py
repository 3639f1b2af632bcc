"""The live table ``foresight up`` prints: per workload, the model, the forecast's age, the last
observed demand, the value the adapter serves right now and where it comes from, and the
replicas (ready now, and wanted by an HPA on the served value).

``table_rows`` and ``render`` are pure (forecasts and a clock in, lines out); the served value
is computed by forecaster/served.py, the rule the adapter itself applies, so the table shows
what an HPA would receive. ``LiveTable`` writes them: redrawn in place on a terminal, appended
(one block per refresh) when stdout is a pipe or a file, or with ``--no-live``.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, TextIO

from forecaster.served import MetricSettings, NoData, observed_now, served_cores

log = logging.getLogger("foresight.up")

HPA_TARGET = 0.7  # the utilization target up's modelled HPA runs at (foresight.up.reactive_ready_pods)


@dataclass(frozen=True)
class Row:
    workload: str
    model: str  # "-" before the first forecast
    age_seconds: float | None
    served_cores: float | None  # None: nothing to serve (the adapter answers 503)
    observed_cores: float | None  # the last observed demand the forecast carries
    source: str  # forecast | observed (stale, fallback, ...) | no data
    ready: int | None  # ready pods, when the forecast carries them
    wanted: int | None  # replicas an HPA at HPA_TARGET asks for on the served value


def _cause(reason: str) -> str:
    """Why a value is observed demand and not a forecast, in one word."""
    for word, cause in (("stale", "stale"), ("fallback", "fallback"), ("no forecast", "missing"), ("horizon", "horizon")):
        if word in reason:
            return cause
    return "other"


def _positive(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def table_rows(series_ids: Sequence[str], forecasts: Mapping[str, object], now: float,
               settings: MetricSettings | None = None) -> list[Row]:
    """One row per series, in the order given; a series without a forecast is a row too."""
    settings = settings or MetricSettings()
    rows = []
    for sid in series_ids:
        fc = forecasts.get(sid)
        meta = dict(getattr(fc, "meta", None) or {})
        try:
            sv = served_cores(fc, now, settings)
            served, source = sv.value, sv.source if sv.source != "observed" else f"observed ({_cause(sv.reason)})"
        except NoData:
            served, source = None, "no data"
        observed = observed_now(fc)
        request = _positive(meta.get("cpu_request_cores"))
        ready = meta.get("ready_pods")
        rows.append(Row(
            workload=sid,
            model=(fc.model or "-") if fc is not None else "-",
            age_seconds=max(0.0, now - fc.generated_at) if fc is not None else None,
            served_cores=served,
            observed_cores=observed,
            source=source,
            ready=int(ready) if isinstance(ready, (int, float)) and math.isfinite(ready) else None,
            wanted=max(1, math.ceil(served / (HPA_TARGET * request))) if served is not None and request else None,
        ))
    return rows


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


COLUMNS = (f"{'WORKLOAD':<28} {'MODEL':<16} {'AGE':>5} {'OBSERVED':>8} {'SERVED':>8} {'SOURCE':<20} "
           f"{'READY':>5} {'WANT':>5}")


def render(rows: Sequence[Row], title: str) -> list[str]:
    """The table as lines: a title, the column names, a line per row ("-" where unknown)."""
    out = [title, COLUMNS]
    for r in rows:
        served = f"{r.served_cores:.3f}" if r.served_cores is not None else "-"
        observed = f"{r.observed_cores:.3f}" if r.observed_cores is not None else "-"
        out.append(f"{r.workload:<28} {r.model[:16]:<16} {_age(r.age_seconds):>5} {observed:>8} {served:>8} {r.source[:20]:<20} "
                   f"{'-' if r.ready is None else r.ready:>5} {'-' if r.wanted is None else r.wanted:>5}")
    return out


class LiveTable:
    """Writes rendered tables to ``out``: in place on a terminal (cursor up over the previous
    table, clear to the end of the screen), else appended with a blank line between."""

    def __init__(self, out: TextIO, live: bool, columns: int | None = None) -> None:
        self.out = out
        self.live = live
        self.columns = columns  # None: the terminal's width at each redraw
        self._drawn = 0  # lines of the table currently on screen

    def show(self, lines: Sequence[str]) -> None:
        if self.live:
            # a line wider than the terminal wraps, and the cursor-up count would miss it
            width = self.columns or shutil.get_terminal_size((200, 24)).columns
            lines = [line[: max(1, width - 1)] for line in lines]
            if self._drawn:
                self.out.write(f"\x1b[{self._drawn}F\x1b[J")  # to the table's first line, clear below
            self.out.write("".join(line + "\n" for line in lines))
            self._drawn = len(lines)
        else:
            self.out.write("".join(line + "\n" for line in lines) + "\n")
        self.out.flush()

    def forget(self) -> None:
        """Something else printed below the table: the next table starts below it."""
        self._drawn = 0


class Board:
    """The table of ``series_ids``, read from a forecast store at each draw."""

    def __init__(self, store, series_ids: Sequence[str], table: LiveTable, heading: Callable[[float], str],
                 settings: MetricSettings | None = None) -> None:
        self.store = store
        self.series_ids = list(series_ids)
        self.table = table
        self.heading = heading
        self.settings = settings
        self._store_error = ""  # logged once, not at every redraw

    def draw(self, now: float) -> None:
        try:
            forecasts = self.store.latest_many(self.series_ids)
            self._store_error = ""
        except Exception as exc:  # noqa: BLE001 - the store is down: rows say "no data" until it is back
            if str(exc) != self._store_error:
                log.warning("reading forecasts for the table: %s: %s", exc.__class__.__name__, exc)
                self._store_error = str(exc)
            forecasts = {}
        self.table.show(render(table_rows(self.series_ids, forecasts, now, self.settings), self.heading(now)))


def title(now: float, refresh_seconds: float, speed: float, running: bool = True) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    head = f"foresight up  {stamp}  (cores; trace speed {speed:g}x"
    return head + (f", refresh every {refresh_seconds:g} s; Ctrl-C to stop)" if running else ")")
