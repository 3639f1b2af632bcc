"""The adapter's web app: ``create_app(settings, store)``.

Serves, from precomputed state only (the forecast store through a per-process cache):
- the Kubernetes external metrics API (discovery + values, byte-exact shapes, metav1.Status
  errors) -- answered by a small ASGI layer in front of FastAPI (adapter/hotpath.py) because
  it is the HPA's hot path; the same functions (adapter/core.py) back the documented routes;
- REST for people and tools (/api/v1/forecasts...), the dashboard at /, /healthz, /readyz,
  /metrics, OpenAPI docs at /docs (adapter/routes/).
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from adapter import openapi
from adapter.authz import Authenticator, Authorizer
from adapter.core import AdapterCore
from adapter.fallback import DemandReader, ObservedDirect
from adapter.hotpath import HotPath
from adapter.responses import status_body, status_response  # noqa: F401 - re-exported for callers
from adapter.routes import dashboard, external_metrics, forecasts, health
from adapter.settings import AdapterSettings, ObservedDirectSettings
from core.store import ForecastStore, StoreError

log = logging.getLogger("foresight.adapter")


def _exception_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http_exc(_req: Request, exc: StarletteHTTPException):
        msg = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404:
            msg = "the server could not find the requested resource"
        headers = getattr(exc, "headers", None)
        return status_response(exc.status_code, msg, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()
        )
        return status_response(400, f"invalid request: {problems}")

    @app.exception_handler(StoreError)
    async def _down(_req: Request, exc: StoreError):
        log.warning("store error: %s", exc)
        return status_response(503, "the forecast store could not be read; try again shortly")

    @app.exception_handler(Exception)
    async def _boom(_req: Request, exc: Exception):
        log.exception("unhandled error")
        # Never leak internals (prometheus-adapter does the same).
        return status_response(500, "internal error; see the adapter's log")


def create_app(
    settings: AdapterSettings | None = None,
    store: ForecastStore | None = None,
    *,
    clock=time.time,
    demand: DemandReader | None = None,
    observed_direct: ObservedDirectSettings | None = None,
    authenticator: Authenticator | None = None,
    authorizer: Authorizer | None = None,
    scheduler_routes: bool = True,
    pod_watch: tuple | None = None,
    observe_view: bool = True,
) -> FastAPI:
    """Build the adapter app over a forecast store (no module-level state).

    ``demand``: where observed demand is read directly while the store is out of reach
    (served as ``observed-direct``); without it, a store outage is a 503 once the cache is
    too old. ``authenticator``/``authorizer``: TokenReview and SubjectAccessReview (delegated
    to the API server; adapter/authz.py). ``scheduler_routes=False`` when the scheduler
    extender is served on its own port instead (``create_scheduler_app``). ``pod_watch``:
    (core.kubeclient.KubeClient, configured workloads[, directory shared by the replica's
    workers: one of them watches, adapter/podshare.py]) to divide the ratio by the ready pods the HPA counts now
    (adapter/readypods.py) instead of the trainer's published count; with it, ``observe_view``
    also lists the PredictiveAutoscalers for their Observe-mode lines (adapter/observemode.py)."""
    from core.store import MemoryForecastStore

    settings = settings or AdapterSettings()
    store = store if store is not None else MemoryForecastStore()
    observed = _observed_direct(demand, observed_direct)
    core = AdapterCore(settings, store, clock, observed)
    if observed is not None:
        observed._on_error = lambda exc: core.metrics.observed_direct_errors.inc()
    watch = _ready_pods(core, pod_watch)
    view = None
    if pod_watch is not None and observe_view:
        from adapter.observemode import ObserveView

        view = core.observe_view = ObserveView(pod_watch[0])
    lifespan = _lifespan(core, observed, watch, view)

    app = AdapterApp(
        title="foresight adapter",
        description="Kubernetes external metrics API (predicted_cpu_load_ratio, predicted_cpu_cores), "
        "forecast REST API and dashboard.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.core = core
    app.state.settings = settings
    _exception_handlers(app)
    for routes in (external_metrics, forecasts, health, dashboard):
        routes.register(app, core)

    if scheduler_routes:
        _scheduler_routes(app, store, settings)
    openapi.install(app)
    app.hot = HotPath(partial(FastAPI.__call__, app), core=core, authenticator=authenticator, authorizer=authorizer)
    return app


def _observed_direct(demand: DemandReader | None, settings: ObservedDirectSettings | None) -> ObservedDirect | None:
    """Observed demand read straight from Prometheus, kept warm for the whole fleet (None: none)."""
    if demand is None:
        return None
    od = settings or ObservedDirectSettings()
    return ObservedDirect(demand, ttl_seconds=od.ttl_seconds, wait_seconds=od.wait_seconds,
                          max_age_seconds=od.max_age_seconds, keep_warm=True)


def _ready_pods(core: AdapterCore, pod_watch: tuple | None) -> Any:
    """The pod watch the ratio is divided by (None: the trainer's published count)."""
    if pod_watch is None:
        return None
    from adapter.readypods import PodWatch, workloads_of

    watch: Any = PodWatch(pod_watch[0], workloads_of(pod_watch[1], core.cache))
    if len(pod_watch) > 2 and pod_watch[2]:
        from adapter.podshare import SharedPodWatch

        # one of the replica's workers watches pods, the others read its counts
        watch = SharedPodWatch(watch, pod_watch[2])
    core.ready_pods = watch
    return watch


def _lifespan(core: AdapterCore, observed: ObservedDirect | None, watch: Any, view: Any):
    """Start the app's background parts with it and stop them in reverse order."""

    @asynccontextmanager
    async def lifespan(_app):
        core.cache.start()
        if observed is not None:
            observed.start()  # keeps the fleet's observed demand warm (adapter/fallback.py)
        if watch is not None:
            watch.start()
        if view is not None:
            view.start()
        try:
            yield
        finally:
            if view is not None:
                view.stop()
            if watch is not None:
                watch.stop()
            core.cache.stop()
            if observed is not None:
                observed.close()

    return lifespan


class AdapterApp(FastAPI):
    """FastAPI behind the hot path: every HTTP request meets ``HotPath`` first (authentication,
    latency, /apis), which hands the others to FastAPI. In front of FastAPI rather than one of
    its middlewares, the HPA's requests skip FastAPI's per-request work (its telemetry checks
    read the environment three times a request, its error middleware wraps ``send``)."""

    hot: HotPath | None = None

    async def __call__(self, scope, receive, send) -> None:
        if self.hot is not None and scope["type"] == "http":
            await self.hot(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def _scheduler_routes(app: FastAPI, store: ForecastStore, settings: AdapterSettings) -> bool:
    """The scheduler extender, when that part is installed."""
    try:
        import adapter.scheduler as scheduler
    except ModuleNotFoundError as exc:
        if exc.name != "adapter.scheduler":
            raise
        return False
    scheduler.register_scheduler_routes(app, store, settings.scheduler)
    return True


def create_scheduler_app(settings: AdapterSettings, store: ForecastStore) -> FastAPI:
    """The scheduler extender alone, for its own port: kube-scheduler calls its extenders
    without credentials, so these paths are kept off the port that serves workload data
    (and, with a client CA, answer only the scheduler's certificate)."""
    app = FastAPI(title="foresight scheduler extender", version="0.1.0")
    _exception_handlers(app)

    @app.get("/healthz", tags=["health"])
    def healthz():
        return "ok"

    if not _scheduler_routes(app, store, settings):
        raise RuntimeError("the scheduler extender (adapter.scheduler) is not installed")
    openapi.install(app)
    return app
