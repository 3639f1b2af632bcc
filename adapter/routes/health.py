"""Probes and the adapter's own metrics: /healthz, /livez, /readyz, /metrics."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from adapter.core import AdapterCore
from adapter.responses import PREFIX


def register(app: FastAPI, core: AdapterCore) -> None:
    @app.get("/healthz", tags=["health"], response_class=PlainTextResponse)
    def healthz():
        return "ok"

    @app.get("/livez", tags=["health"], response_class=PlainTextResponse)
    def livez():
        return "ok"

    @app.get("/readyz", tags=["health"])
    def readyz():
        """Ready when discovery can be answered, whatever the data: a replica that is not
        ready leaves the Service, the aggregator then fails discovery, and EVERY
        external-metric HPA in the cluster stops scaling -- far worse than serving observed
        demand. Data freshness is reported here and alerted on from /metrics instead. The one
        wait: the pod watch's first list, for at most FIRST_LIST_GRACE_SECONDS."""
        code, _ = core.answer_apis("GET", PREFIX, b"")
        info = core.degradation()
        if code != 200:
            return JSONResponse({"ready": False, "why": "discovery cannot be answered", **info}, status_code=503)
        if core.ready_pods is not None and core.ready_pods.warming():
            # bounded (readypods.FIRST_LIST_GRACE_SECONDS): until then the ratio's divisor is unknown
            return JSONResponse({"ready": False, "why": "the pod watch has not listed pods yet", **info}, status_code=503)
        return {"ready": True, **info}

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(core.metrics.registry), media_type=CONTENT_TYPE_LATEST)
