"""REST for people and tools: /api/v1/forecasts."""

from __future__ import annotations

from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse, Response

from adapter.core import AdapterCore
from adapter.responses import status_response
from core.store import StoreError


def register(app: FastAPI, core: AdapterCore) -> None:
    @app.get("/api/v1/forecasts", tags=["forecasts"], summary="Every workload with its forecast status")
    def list_forecasts(
        namespace: str | None = Query(None, max_length=63),
        limit: int = Query(500, ge=1, le=5000),
        offset: int = Query(0, ge=0),
    ):
        try:
            core.cache.ensure_index()
        except StoreError:
            pass  # list what is indexed (configured workloads at least), served observed-direct
        now = core.clock()
        sids = [s for s in core.cache.all_series() if namespace is None or s.partition("/")[0] == namespace]
        page = sids[offset : offset + limit]
        items = [row for row, _ in core.summaries(page, now)]
        return JSONResponse({"count": len(sids), "offset": offset, "limit": limit, "items": items})

    @app.get("/api/v1/forecasts/{namespace}/{workload}", tags=["forecasts"], summary="One forecast in full")
    def get_forecast(namespace: str, workload: str, format: str = Query("json", pattern="^(json|png)$")):  # noqa: A002
        for field, value, limit in (("namespace", namespace, 63), ("workload", workload, 253)):
            if len(value) > limit:  # no Kubernetes object has such a name: don't look it up
                return status_response(400, f"{field}: {len(value)} characters; a Kubernetes {field} name "
                                       f"has at most {limit}")
        sid = f"{namespace}/{workload}"
        fc, store_down = core.lookup(sid)
        if store_down:
            return status_response(503, f"the forecast store is unreachable; the served value of {sid} "
                                   "is in /api/v1/forecasts (observed-direct)")
        if fc is None:
            return status_response(404, f"no forecast for workload {sid}")
        now = core.clock()
        if format == "png":
            from adapter.plot import forecast_png

            return Response(forecast_png(fc, core.summary(sid, fc, now)), media_type="image/png")
        return JSONResponse(core.detail(sid, fc, now))
