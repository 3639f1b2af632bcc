"""The warm pool's HTTP API (FastAPI), built by a factory around a running controller.

  POST /api/v1/pools/{pool}/claim[?allow_cold=false]  -> {container_id, endpoint, cold_start, latency_ms}
       (429 + Retry-After once the pool's max_cold_per_minute cold starts are used up)
       a claim holds its container for the pool's lease_seconds (lease_expires_at), unless renewed
  POST /api/v1/pools/{pool}/renew    {"container_id": ...}  -> {lease_seconds, lease_expires_at}
  POST /api/v1/pools/{pool}/release  {"container_id": ...}
  GET  /api/v1/pools, /api/v1/pools/{pool}, /api/v1/coldstart
  GET  /metrics (Prometheus), /healthz

With an ``auth`` (``warmpool.auth.Authenticator``) every path but /healthz and /metrics needs
``Authorization: Bearer <token>``: 401 without a valid one, 403 for an identity not allowed,
503 when a TokenReview cannot be done right now. Without one the API is open (``foresight up``
on loopback, or ``warmpool run --insecure-no-auth``).

Handlers only read the controller's state or run a claim; they never query the forecast store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from warmpool.controller import Controller


def create_app(controller: "Controller", auth=None):
    from fastapi import Body, FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    from warmpool.controller import ClaimFailed, ColdLimited, NotClaimed, NoWarmContainer, UnknownPool

    from warmpool.auth import OPEN_PATHS, Forbidden, ReviewUnavailable, Unauthenticated

    app = FastAPI(title="foresight warm pools", version="v1alpha1")

    if auth is not None:
        @app.middleware("http")
        async def authenticate(request: Request, call_next):
            if request.url.path in OPEN_PATHS:
                return await call_next(request)
            try:
                who = await run_in_threadpool(auth.authenticate, request.headers.get("authorization"))
            except Unauthenticated as exc:
                return JSONResponse({"detail": str(exc)}, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="foresight-warmpool"'})
            except Forbidden as exc:
                return JSONResponse({"detail": str(exc)}, status_code=403)
            except ReviewUnavailable as exc:
                return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "5"})
            request.state.user = who
            return await call_next(request)

    @app.post("/api/v1/pools/{pool}/claim")
    async def claim(pool: str, allow_cold: bool = True):
        try:
            res = await run_in_threadpool(controller.claim, pool, allow_cold)
        except UnknownPool as exc:
            raise HTTPException(404, str(exc)) from None
        except NoWarmContainer as exc:
            raise HTTPException(409, str(exc)) from None
        except ColdLimited as exc:
            raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after_seconds)}) from None
        except ClaimFailed as exc:
            raise HTTPException(503, str(exc)) from None
        return res.as_dict()

    @app.post("/api/v1/pools/{pool}/release")
    async def release(pool: str, body: dict = Body(...)):
        cid = body.get("container_id") if isinstance(body, dict) else None
        if not isinstance(cid, str) or not cid:
            raise HTTPException(422, 'body must be {"container_id": "<id from the claim>"}')
        try:
            c = await run_in_threadpool(controller.release, pool, cid)
        except UnknownPool as exc:
            raise HTTPException(404, str(exc)) from None
        except NotClaimed as exc:
            raise HTTPException(409, str(exc)) from None
        return {"pool": pool, "container_id": c.id, "state": c.state, "deadline": c.deadline}

    @app.post("/api/v1/pools/{pool}/renew")
    async def renew(pool: str, body: dict = Body(...)):
        cid = body.get("container_id") if isinstance(body, dict) else None
        if not isinstance(cid, str) or not cid:
            raise HTTPException(422, 'body must be {"container_id": "<id from the claim>"}')
        try:
            return await run_in_threadpool(controller.renew, pool, cid)
        except UnknownPool as exc:
            raise HTTPException(404, str(exc)) from None
        except NotClaimed as exc:
            raise HTTPException(409, str(exc)) from None
        except ClaimFailed as exc:  # the backend could not persist the lease: the old one stands
            raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None

    @app.get("/api/v1/pools")
    def pools():
        return controller.describe()

    @app.get("/api/v1/pools/{pool}")
    def pool(pool: str):
        for p in controller.describe()["pools"]:
            if p["pool"] == pool:
                return p
        raise HTTPException(404, f"unknown pool {pool!r}")

    @app.get("/api/v1/coldstart")
    def coldstart():
        return {"runtime_classes": controller.coldstart_view()}

    _add_probes(app, controller)
    return app


def _add_probes(app, controller: "Controller") -> None:
    """/metrics and /healthz, on the API app and on the probe app alike."""
    from fastapi import Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    @app.get("/metrics")
    def metrics():
        return Response(generate_latest(controller.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz():
        return {"ok": True}


def create_probe_app(controller: "Controller"):
    """Only /healthz and /metrics, for a plain-HTTP probe port next to an mTLS API (kubelet
    probes and Prometheus present no client certificate)."""
    from fastapi import FastAPI

    app = FastAPI(title="foresight warm pools (probes)", version="v1alpha1")
    _add_probes(app, controller)
    return app
