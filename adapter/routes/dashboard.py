"""The dashboard at /."""

from __future__ import annotations

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse

from adapter.core import AdapterCore
from adapter.settings import METRIC_CORES, METRIC_LOAD_RATIO
from core.store import Forecast, StoreError
from forecaster.served import NoData
from forecaster.timing import TIMING
from replay.hpa import HPASpec, external_value_proposal


def _extras(core: AdapterCore, row: dict, fc: Forecast | None, now: float) -> dict:
    """What the chart adds to the summary row: the value AdapterCore would serve at each of the
    forecast's steps ahead (the production rule, the same forecast, no newer one) and the pods
    ready now; where that value stops coming from the forecast (it would be stale); the replicas
    the HPA is heading for."""
    sid = row["series_id"]
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
    ready = core.capacity(sid, fc)[0]
    ratio_now = (row["served"].get(METRIC_LOAD_RATIO) or {}).get("value")
    return {"served_ahead": [(t, v) for t, v, _ in ahead], "served_stale_at": stale_at, "ready_now": ready,
            "desired": _desired(core, sid, fc, ratio_now, now, [t for t, _, _ in ahead], ready)}


def _desired(core: AdapterCore, sid: str, fc: Forecast | None, ratio_now, now: float, ahead: list[float], ready) -> list:
    """[(t, replicas)]: what the HPA's External-metric rule (replay.hpa, tolerance 0.1) proposes
    from the load ratio served now (``ratio_now``, as the card shows it) and at each step ahead
    (the same rule on the same forecast), counted from the pods ready now, at
    the autoscaler's target Value and clamped to its min/max (the example HPA's 0.7 when no
    PredictiveAutoscaler names the workload). Its scale-up and scale-down rate limits are not
    applied: the line is where the HPA heads, not its path. Empty while the ready pods or the
    CPU request are unknown."""
    if not isinstance(ready, (int, float)) or ready <= 0:
        return []
    view = core.observe_view.of(sid) if core.observe_view is not None else None
    hpa = (view or {}).get("hpa") or {}
    target = float(hpa.get("target_value") or TIMING.hpa_target)
    lo, hi = int(hpa.get("min_replicas") or 1), hpa.get("max_replicas")
    out = []
    for t in [now] + ahead:
        try:
            value = ratio_now if t == now else core.served(METRIC_LOAD_RATIO, sid, fc, t).value
        except NoData:
            break
        n = None if value is None else external_value_proposal(HPASpec(), int(ready), [value], target, int(ready))
        if n is None:
            break
        out.append((t, max(lo, min(int(hi), n) if hi else n)))
    return out


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
        extras = {row["series_id"]: _extras(core, row, fc, now) for row, fc in rows}
        return HTMLResponse(render_dashboard(rows, settings, page, len(sids), now=now, extras=extras))
