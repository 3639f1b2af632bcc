"""The warm pool's HTTP API (FastAPI), built by a factory around a running controller.

  POST /api/v1/pools/{pool}/claim[?allow_cold=false]  -> {container_id, endpoint, cold_start, latency_ms}
       (429 + Retry-After once the pool's max_cold_per_minute cold starts are used up)
       a claim holds its container for the pool's lease_seconds (lease_expires_at), unless renewed
  POST /api/v1/pools/{pool}/renew    {"container_id": ...}  -> {lease_seconds, lease_expires_at}
  POST /api/v1/pools/{pool}/release  {"container_id": ...}
  GET  /api/v1/pools, /api/v1/pools/{pool}, /api/v1/coldstart
  GET  /metrics (Prometheus), /healthz

With an ``auth`` (``warmpool.auth.Authenticator``) every path but /healthz needs an identity
(``Authorization: Bearer <token>`` or a verified client certificate): 401 without a valid one,
403 for an identity not allowed, 503 when a TokenReview cannot be done right now; renew and
release then answer 403 to anyone but the identity that made the claim. With an ``authorizer``
(``warmpool.authz.PoolAuthorizer``) a SubjectAccessReview decides per pool namespace who may
claim there (403 otherwise) and which pools a caller may read: the pool list, /metrics and
/api/v1/coldstart show a caller only those pools (and the runtime classes they use). Without
``auth`` the API is open (``foresight up`` on loopback, or ``warmpool run --insecure-no-auth``);
the plain probe app (``create_probe_app``) serves the full /metrics for a port only the
cluster's monitoring reaches.

Handlers only read the controller's state or run a claim; they never query the forecast store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request  # module level: the handlers' ``request: Request`` is resolved here

if TYPE_CHECKING:
    from warmpool.controller import Controller


def create_app(controller: "Controller", auth=None, authorizer=None):
    """``auth``: a ``warmpool.auth.Authenticator`` (None: open). ``authorizer``: a
    ``warmpool.authz.PoolAuthorizer`` (needs ``auth``): SubjectAccessReviews per pool."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    from warmpool.auth import OPEN_PATHS, PEER_STATE_KEY, Forbidden, ReviewUnavailable, Unauthenticated

    if authorizer is not None and auth is None:
        raise ValueError("per-pool authorization needs authenticated callers (auth)")
    app = FastAPI(title="foresight warm pools", version="v1alpha1")

    if auth is not None:
        @app.middleware("http")
        async def authenticate(request: Request, call_next):
            if request.url.path in OPEN_PATHS:
                return await call_next(request)
            try:
                peer = request.scope.get("state", {}).get(PEER_STATE_KEY)  # warmpool.wiring (mTLS)
                who = await run_in_threadpool(auth.identify, request.headers.get("authorization"), peer)
            except Unauthenticated as exc:
                return JSONResponse({"detail": str(exc)}, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="foresight-warmpool"'})
            except Forbidden as exc:
                return JSONResponse({"detail": str(exc)}, status_code=403)
            except ReviewUnavailable as exc:
                return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "5"})
            request.state.user = who
            return await call_next(request)

    guard = Guard(controller, authorizer, owned=auth is not None)
    _add_claim_routes(app, controller, guard)
    _add_read_routes(app, controller, guard)
    _add_probes(app, controller, guard if auth is not None else None)
    return app


class Guard:
    """Per-request checks: may this caller act on this pool (a SubjectAccessReview, when an
    authorizer is given), and is this claim theirs (whenever callers are authenticated)."""

    def __init__(self, controller: "Controller", authorizer=None, owned: bool = False):
        from warmpool.authz import Holders

        self.controller = controller
        self.authorizer = authorizer
        self.holders = Holders(self._lease_seconds, controller.clock) if owned else None

    def _lease_seconds(self, pool: str) -> float:
        spec = self.controller.policy.pool(pool)
        return spec.lease_seconds if spec is not None else 0.0

    @staticmethod
    def user(request):
        return getattr(request.state, "user", None)

    async def allowed(self, request, verb: str, pool: str) -> bool:
        """False when the caller may not; 404 for an unknown pool (with an authorizer, without
        listing the pools: their names are not everyone's to read); 503 when the API server
        cannot answer the review."""
        from fastapi import HTTPException

        from core.kubeclient import KubeUnavailable

        if self.authorizer is None:
            return True
        spec = self.controller.policy.pool(pool)
        if spec is None:
            raise HTTPException(404, f"unknown pool {pool!r}")
        try:
            return (await self.authorizer.allowed(self.user(request), verb, pool, spec.namespace)).allowed
        except KubeUnavailable as exc:
            raise HTTPException(503, f"cannot check access to pool {pool!r} right now: {exc}", headers={"Retry-After": "5"}) from None

    async def require(self, request, verb: str, pool: str) -> None:
        from fastapi import HTTPException

        if not await self.allowed(request, verb, pool):
            spec = self.controller.policy.pool(pool)
            raise HTTPException(403, self.authorizer.denial(self.user(request), verb, pool, spec.namespace if spec else ""))

    async def readable(self, request) -> set[str] | None:
        """Names of the pools this caller may read (None: every pool, no authorizer)."""
        if self.authorizer is None:
            return None
        from warmpool.authz import READ_VERB

        return {p.name for p in self.controller.policy.pools if await self.allowed(request, READ_VERB, p.name)}

    def claimed(self, request, pool: str, container_id: str) -> None:
        if self.holders is not None:
            self.holders.record(pool, container_id, self.user(request).name)

    def require_own(self, request, pool: str, container_id: str) -> None:
        from fastapi import HTTPException

        from warmpool.authz import NotYours

        if self.holders is None:
            return
        try:
            self.holders.check(pool, container_id, self.user(request).name)
        except NotYours as exc:
            raise HTTPException(403, str(exc)) from None


def _container_id(body) -> str:
    from fastapi import HTTPException

    cid = body.get("container_id") if isinstance(body, dict) else None
    if not isinstance(cid, str) or not cid:
        raise HTTPException(422, 'body must be {"container_id": "<id from the claim>"}')
    return cid


def _add_claim_routes(app, controller: "Controller", guard: Guard) -> None:
    from fastapi import Body, HTTPException
    from starlette.concurrency import run_in_threadpool

    from warmpool.authz import CLAIM_VERB
    from warmpool.controller import ClaimFailed, ColdLimited, NotClaimed, NoWarmContainer, UnknownPool

    @app.post("/api/v1/pools/{pool}/claim")
    async def claim(pool: str, request: Request, allow_cold: bool = True):
        await guard.require(request, CLAIM_VERB, pool)
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
        guard.claimed(request, pool, res.container_id)
        return res.as_dict()

    @app.post("/api/v1/pools/{pool}/release")
    async def release(pool: str, request: Request, body: dict = Body(...)):
        cid = _container_id(body)
        await guard.require(request, CLAIM_VERB, pool)
        guard.require_own(request, pool, cid)
        try:
            c = await run_in_threadpool(controller.release, pool, cid)
        except UnknownPool as exc:
            raise HTTPException(404, str(exc)) from None
        except NotClaimed as exc:
            raise HTTPException(409, str(exc)) from None
        except ClaimFailed as exc:  # the backend could not release it: still the caller's
            raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None
        if guard.holders is not None:
            guard.holders.forget(pool, cid)
        return {"pool": pool, "container_id": c.id, "state": c.state, "deadline": c.deadline}

    @app.post("/api/v1/pools/{pool}/renew")
    async def renew(pool: str, request: Request, body: dict = Body(...)):
        cid = _container_id(body)
        await guard.require(request, CLAIM_VERB, pool)
        guard.require_own(request, pool, cid)
        try:
            out = await run_in_threadpool(controller.renew, pool, cid)
        except UnknownPool as exc:
            raise HTTPException(404, str(exc)) from None
        except NotClaimed as exc:
            raise HTTPException(409, str(exc)) from None
        except ClaimFailed as exc:  # the backend could not persist the lease: the old one stands
            raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None
        if guard.holders is not None:
            guard.holders.touched(pool, cid)
        return out


def _add_read_routes(app, controller: "Controller", guard: Guard) -> None:
    from fastapi import HTTPException

    from warmpool.authz import READ_VERB

    @app.get("/api/v1/pools")
    async def pools(request: Request):
        out = controller.describe()
        if guard.authorizer is not None:  # only the pools the caller may read
            out["pools"] = [p for p in out["pools"] if await guard.allowed(request, READ_VERB, p["pool"])]
        return out

    @app.get("/api/v1/pools/{pool}")
    async def pool(pool: str, request: Request):
        await guard.require(request, READ_VERB, pool)
        for p in controller.describe()["pools"]:
            if p["pool"] == pool:
                return p
        raise HTTPException(404, f"unknown pool {pool!r}")

    @app.get("/api/v1/coldstart")
    async def coldstart(request: Request):
        view = controller.coldstart_view()
        pools = await guard.readable(request)
        if pools is not None:  # only the runtime classes the caller's pools start
            used = _runtime_classes_of(controller, pools)
            view = [e for e in view if (e["start"], e["runtime_class"]) in used]
        return {"runtime_classes": view}


def _runtime_classes_of(controller: "Controller", pools: set[str]) -> set[tuple[str, str]]:
    return {(controller.start_kind(p), p.runtime_class) for p in controller.policy.pools if p.name in pools}


class _Visible:
    """The registry as one caller may see it (``generate_latest`` only calls ``collect``):
    samples of other pools, and the cold-start model of runtime classes none of the caller's
    pools use, are left out; fleet-wide figures without either label stay."""

    def __init__(self, registry, pools: set[str], classes: set[str]) -> None:
        self.registry, self.pools, self.classes = registry, pools, classes

    def _keep(self, labels) -> bool:
        if "pool" in labels:
            return labels["pool"] in self.pools
        if "runtime_class" in labels:
            return labels["runtime_class"] in self.classes
        return True

    def collect(self):
        from prometheus_client.metrics_core import Metric

        for m in self.registry.collect():
            out = Metric(m.name, m.documentation, m.type, m.unit)
            out.samples = [s for s in m.samples if self._keep(s.labels)]
            yield out


def _add_probes(app, controller: "Controller", guard: "Guard | None" = None) -> None:
    """/metrics and /healthz, on the API app and on the probe app alike; with a ``guard`` (an
    authenticated API) /metrics shows the caller only the pools it may read."""
    from fastapi import Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    @app.get("/metrics")
    async def metrics(request: Request):
        registry = controller.metrics.registry
        pools = await guard.readable(request) if guard is not None else None
        if pools is not None:
            registry = _Visible(registry, pools, {rc for _, rc in _runtime_classes_of(controller, pools)})
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

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
