"""The dashboard at /."""

from __future__ import annotations

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse

from adapter.core import AdapterCore
from adapter.settings import METRIC_CORES
from forecaster.served import NoData
from forecaster.store import Forecast, StoreError


def _extras(core: AdapterCore, sid: str, fc: Forecast | None, now: float) -> dict:
    """What the chart adds to the summary row: the value AdapterCore would serve at each of the
    forecast's steps ahead (the production rule, the same forecast, no newer one) and the pods
    ready now; where that value stops coming from the forecast (it would be stale)."""
    ahead, stale_at = [], None
    if fc is not None:
        for t in fc.timestamps():
            if t <= now:
                continue
            try:
                sv = core.served(METRIC_CORES, sid, fc, t)
            except NoData:
                break
            if sv.value is not None:
                if sv.source != "forecast" and stale_at is None and ahead and ahead[-1][2] == "forecast":
                    stale_at = t
                ahead.append((t, sv.value, sv.source))
    return {"served_ahead": [(t, v) for t, v, _ in ahead], "served_stale_at": stale_at, "ready_now": core.capacity(sid, fc)[0]}


def register(app: FastAPI, core: AdapterCore) -> None:
    settings = core.settings

    @app.get("/", response_class=HTMLResponse, tags=["dashboard"], summary="Dashboard")
    def dashboard(page: int = Query(1, ge=1, le=100000), namespace: str | None = Query(None, max_length=63)):
        from adapter.dashboard import render_dashboard

        try:
            core.cache.ensure_index()
        except StoreError:
            return HTMLResponse(render_dashboard([], settings, page, 0, error="the forecast store is unreachable"), status_code=503)
        now = core.clock()
        sids = [s for s in core.cache.all_series() if namespace is None or s.partition("/")[0] == namespace]
        per = 24
        chosen = sids[(page - 1) * per : page * per]
        rows = core.summaries(chosen, now)
        extras = {row["series_id"]: _extras(core, row["series_id"], fc, now) for row, fc in rows}
        return HTMLResponse(render_dashboard(rows, settings, page, len(sids), now=now, extras=extras))
