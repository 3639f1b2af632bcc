"""The dashboard at /."""

from __future__ import annotations

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse

from adapter.core import AdapterCore
from forecaster.store import StoreError


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
        return HTMLResponse(render_dashboard(rows, settings, page, len(sids), now=now))
