"""The adapter's web app: ``create_app(settings, store)``.

Serves, from precomputed state only (the forecast store through a per-process cache):
- the Kubernetes external metrics API (discovery + values, byte-exact shapes, metav1.Status
  errors) -- answered by a small ASGI layer in front of FastAPI because it is the HPA's hot
  path; the same functions back the documented FastAPI routes;
- REST for people and tools (/api/v1/forecasts...), the dashboard at /, /healthz, /readyz,
  /metrics, OpenAPI docs at /docs.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
import time
from contextlib import asynccontextmanager
from typing import Any, Callable
from urllib.parse import parse_qsl, unquote_plus

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from adapter.metrics import NoData, ServedValue, served_cores, served_load_ratio
from adapter.quantity import format_quantity
from adapter.selectors import SelectorError, parse_selector
from adapter.settings import METRIC_CORES, METRIC_LOAD_RATIO, METRICS, AdapterSettings
from adapter.state import NAME_KEYS, ForecastCache
from forecaster.store import Forecast, ForecastStore, StoreError, StoreUnavailable

log = logging.getLogger("foresight.adapter")

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
PREFIX = f"/apis/{GROUP_VERSION}"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}
JSON_HEADERS = [(b"content-type", b"application/json")]


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def status_body(code: int, message: str) -> bytes:
    """A metav1.Status failure, as the API server writes it."""
    return _dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": _REASONS.get(code, "Unknown"),
            "code": code,
        }
    )


def status_response(code: int, message: str, headers: dict | None = None) -> Response:
    return Response(status_body(code, message), status_code=code, media_type="application/json", headers=headers)


_LAST_TS: list = [None, ""]


def rfc3339(ts: float) -> str:
    sec = int(ts)
    if _LAST_TS[0] != sec:  # one format per second on the hot path
        _LAST_TS[1] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sec))
        _LAST_TS[0] = sec
    return _LAST_TS[1]


class _Metrics:
    """Prometheus metrics in a registry of this app (no module-level singletons)."""

    MAX_VALUE_SERIES = 2000

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "foresight_adapter_request_duration_seconds",
            "Request latency by route group",
            ["route"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5),
        )
        self.served = Gauge(
            "foresight_adapter_served_value",
            f"Last value served to an HPA (first {self.MAX_VALUE_SERIES} workloads)",
            ["metric", "namespace", "workload", "source"],
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "foresight_adapter_fallbacks_total",
            "Values served from observed demand instead of a forecast, by cause",
            ["metric", "cause"],
            registry=self.registry,
        )
        self.served_total = Counter(
            "foresight_adapter_values_total", "Values served, by metric and source", ["metric", "source"],
            registry=self.registry,
        )
        self.no_data = Counter(
            "foresight_adapter_no_data_total", "Requests answered 503 because nothing could be served",
            registry=self.registry,
        )
        self.store_errors = Counter(
            "foresight_adapter_store_errors_total", "Failed reads of the forecast store", registry=self.registry
        )
        self._value_children: dict[tuple, Any] = {}
        self._children: dict[tuple, Any] = {}

    def record(self, metric: str, ns: str, name: str, sv: ServedValue, fc: Forecast | None, now: float) -> None:
        child = self._children.get((metric, sv.source))
        if child is None:
            child = self._children[(metric, sv.source)] = self.served_total.labels(metric, sv.source)
        child.inc()
        if sv.source == "observed":
            r = sv.reason
            cause = (
                "stale" if "stale" in r else "fallback" if "fallback" in r else
                "missing" if "no forecast" in r else "horizon" if "horizon" in r else "other"
            )
            self.fallbacks.labels(metric, cause).inc()
        key = (metric, ns, name, sv.source)
        gauge = self._value_children.get(key)
        if gauge is None and len(self._value_children) < self.MAX_VALUE_SERIES:
            gauge = self._value_children[key] = self.served.labels(metric, ns, name, sv.source)
        if gauge is not None:
            gauge.set(sv.value)


class _ForecastAgeCollector:
    """Forecast ages computed when /metrics is scraped (nothing on the request path)."""

    def __init__(self, core: "AdapterCore") -> None:
        self.core = core

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        now = self.core.clock()
        limit = self.core.settings.metric.max_forecast_age_seconds
        ages = [now - fc.generated_at for fc in self.core.cache.forecasts()]
        oldest = GaugeMetricFamily("foresight_adapter_forecast_age_seconds",
                                   "Age of the cached forecasts (max and min over workloads)", labels=["stat"])
        oldest.add_metric(["max"], max(ages) if ages else 0.0)
        oldest.add_metric(["min"], min(ages) if ages else 0.0)
        yield oldest
        stale = GaugeMetricFamily("foresight_adapter_stale_forecasts",
                                  f"Cached forecasts older than {limit:g} s (served as observed)")
        stale.add_metric([], sum(1 for a in ages if a > limit))
        yield stale
        fallback = GaugeMetricFamily("foresight_adapter_fallback_series", "Cached series with status fallback")
        fallback.add_metric([], sum(1 for fc in self.core.cache.forecasts() if fc.status == "fallback"))
        yield fallback


class AdapterCore:
    """Everything the routes need, independent of the web framework."""

    def __init__(self, settings: AdapterSettings, store: ForecastStore, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.metrics = _Metrics()
        self.cache = ForecastCache(
            store,
            settings.cache,
            settings.workload_labels,
            on_store_error=lambda exc: self.metrics.store_errors.inc(),
        )
        self.metrics.registry.register(_ForecastAgeCollector(self))
        self._selectors: dict[str, Any] = {}  # HPAs repeat the same few selectors
        self.group_list = _dumps(
            {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": GROUP,
                        "versions": [{"groupVersion": GROUP_VERSION, "version": VERSION}],
                        "preferredVersion": {"groupVersion": GROUP_VERSION, "version": VERSION},
                    }
                ],
            }
        )
        self.group = _dumps(
            {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": GROUP,
                "versions": [{"groupVersion": GROUP_VERSION, "version": VERSION}],
                "preferredVersion": {"groupVersion": GROUP_VERSION, "version": VERSION},
            }
        )
        self.resource_list = _dumps(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": GROUP_VERSION,
                "resources": [
                    {
                        "name": m,
                        "singularName": "",
                        "namespaced": True,
                        "kind": "ExternalMetricValueList",
                        "verbs": ["get"],
                    }
                    for m in METRICS
                ],
            }
        )

    # --- the served value of one workload -------------------------------------------
    def capacity(self, series_id: str, fc: Forecast | None) -> tuple[Any, Any]:
        meta = fc.meta if fc is not None else {}
        conf = self.settings.workload_capacity.get(series_id, {})
        pods = meta.get("ready_pods", conf.get("ready_pods"))
        req = meta.get("cpu_request_cores", conf.get("cpu_request_cores"))
        return pods, req

    def served(self, metric: str, series_id: str, fc: Forecast | None, now: float) -> ServedValue:
        ms = self.settings.metric
        if metric == METRIC_CORES:
            return served_cores(fc, now, ms)
        pods, req = self.capacity(series_id, fc)
        if pods is None:
            raise NoData(f"ready pod count of {series_id} is unknown (meta.ready_pods)")
        return served_load_ratio(fc, now, pods, req, ms)

    # --- external metrics ---------------------------------------------------------------
    def answer_apis(self, method: str, path: str, query: bytes) -> tuple[int, bytes]:
        """Status code and JSON body of any request under /apis."""
        if method not in ("GET", "HEAD"):
            return 405, status_body(405, f"the server does not allow this method on the requested resource ({method})")
        p = path.rstrip("/") if path != "/" else path
        if p == "/apis":
            return 200, self.group_list
        if p == f"/apis/{GROUP}":
            return 200, self.group
        if p == PREFIX:
            return 200, self.resource_list
        if p.startswith(PREFIX + "/"):
            parts = path[len(PREFIX) + 1 :].split("/")
            if len(parts) == 3 and parts[0] == "namespaces":
                return self.values(parts[1], parts[2], query)
            if len(parts) == 1 and parts[0] in METRICS:
                return 404, status_body(
                    404, f"external metric {parts[0]} is namespaced: use {PREFIX}/namespaces/<namespace>/{parts[0]}"
                )
        return 404, status_body(404, "the server could not find the requested resource")

    def values(self, ns: str, metric: str, query: bytes) -> tuple[int, bytes]:
        # Computed for every request (no response cache): real HPAs ask each workload once
        # per sync, so a response cache would only flatter synthetic benchmarks.
        return self._values(ns, metric, _label_selector(query), self.clock())

    def _values(self, ns: str, metric: str, selector_text: str, now: float) -> tuple[int, bytes]:
        if metric not in METRICS:
            return 404, status_body(
                404, f"the server could not find the metric {metric} for namespace {ns}; served metrics: {', '.join(METRICS)}"
            )
        if not _DNS_LABEL.match(ns):
            return 404, status_body(404, f"namespace {ns!r} is not a valid namespace name")
        selector = self._selectors.get(selector_text)
        if selector is None:
            try:
                selector = parse_selector(selector_text)
            except SelectorError as exc:
                return 400, status_body(400, f"unable to parse labelSelector: {exc}")
            if len(self._selectors) > 200_000:
                self._selectors.clear()
            self._selectors[selector_text] = selector
        try:
            matched = self.match(ns, selector)
        except StoreUnavailable:
            self.metrics.no_data.inc()
            return 503, status_body(503, "the forecast store is unavailable and the cached forecasts are too old")
        if not matched:
            return 404, status_body(
                404, f"the server could not find the metric {metric} for namespace {ns} with selector "
                f"{selector_text if len(selector_text) <= 200 else selector_text[:200] + '...'}"
            )
        items = []
        ts = rfc3339(now)
        for sid, fc, labels in matched:
            try:
                sv = self.served(metric, sid, fc, now)
            except NoData as exc:
                self.metrics.no_data.inc()
                return 503, status_body(503, f"no value for {metric} of {sid}: {exc}")
            self.metrics.record(metric, ns, sid.partition("/")[2], sv, fc, now)
            # Same bytes json.dumps would write (tested); labels JSON is cached per label set.
            items.append(
                f'{{"metricName":"{metric}","metricLabels":{_labels_json(labels)},"timestamp":"{ts}",'
                f'"window":{self.settings.window_seconds},"value":"{format_quantity(sv.value)}"}}'
            )
        body = (
            '{"kind":"ExternalMetricValueList","apiVersion":"' + GROUP_VERSION + '","metadata":{},"items":['
            + ",".join(items) + "]}"
        ).encode()
        return 200, body

    def match(self, ns: str, selector) -> list[tuple[str, Forecast | None, dict[str, str]]]:
        """Workloads of a namespace matching a selector, with their forecasts and labels."""
        names = None
        if self.cache.names_are_labels:
            for key in NAME_KEYS:
                names = selector.equality_values(key)
                if names is not None:
                    break
        if names is None:
            self.cache.ensure_index()
            names = sorted(n for n, labels in self.cache.workloads(ns).items() if selector.matches(labels))
        out = []
        for name in names:
            sid = f"{ns}/{name}"
            fc = self.cache.get(sid)
            if fc is None and not self.cache.is_configured(sid):
                continue
            labels = self.cache.labels(sid, fc)
            if selector.matches(labels):
                out.append((sid, fc, labels))
        return out

    # --- REST ---------------------------------------------------------------------------
    def summary(self, sid: str, fc: Forecast | None, now: float) -> dict:
        ns, _, name = sid.partition("/")
        row: dict[str, Any] = {
            "namespace": ns,
            "workload": name,
            "series_id": sid,
            "labels": self.cache.labels(sid, fc),
            "status": fc.status if fc else "missing",
            "model": fc.model if fc else None,
            "backtest_error": _finite_or_none(fc.backtest_error) if fc else None,
            "generated_at": rfc3339(fc.generated_at) if fc else None,
            "age_seconds": round(now - fc.generated_at, 3) if fc else None,
            "stale": (now - fc.generated_at > self.settings.metric.max_forecast_age_seconds) if fc else None,
            "fallback_reason": (fc.reason or None) if fc else "no forecast published",
            "served": {},
        }
        for metric in METRICS:
            try:
                sv = self.served(metric, sid, fc, now)
                row["served"][metric] = {
                    "value": sv.value,
                    "quantity": format_quantity(sv.value),
                    "source": sv.source,
                    "reason": sv.reason,
                    "predicted_cores": sv.predicted,
                    "observed_cores": sv.observed,
                }
            except NoData as exc:
                row["served"][metric] = {"value": None, "source": "none", "reason": str(exc)}
        return row

    def detail(self, sid: str, fc: Forecast, now: float) -> dict:
        d = self.summary(sid, fc, now)
        d.update(
            {
                "origin": rfc3339(fc.origin),
                "step_seconds": fc.step_seconds,
                "generation": fc.generation,
                "points": [
                    {"timestamp": rfc3339(t), "mean": fc.mean[i], **{k: v[i] for k, v in fc.quantiles.items()}}
                    for i, t in enumerate(fc.timestamps())
                ],
                "observed": [{"timestamp": rfc3339(t), "value": v} for t, v in fc.observed],
                "meta": {k: v for k, v in fc.meta.items() if _jsonable(v)},
            }
        )
        return d


_LABELS_JSON: dict[int, tuple[dict, str]] = {}


def _labels_json(labels: dict[str, str]) -> str:
    """metricLabels as Go writes a map (sorted keys, compact; null when empty), cached by
    the identity of the (long-lived) label dict of each workload."""
    hit = _LABELS_JSON.get(id(labels))
    if hit is not None and hit[0] is labels:
        return hit[1]
    text = json.dumps(dict(sorted(labels.items())) or None, separators=(",", ":"))
    if len(_LABELS_JSON) > 500_000:
        _LABELS_JSON.clear()
    _LABELS_JSON[id(labels)] = (labels, text)
    return text


def _label_selector(query: bytes) -> str:
    """The labelSelector parameter (first one wins, as in Kubernetes); fast path for the
    HPA's only parameter."""
    if not query:
        return ""
    text = query.decode("latin-1")
    if text.startswith("labelSelector=") and "&" not in text:
        value = text[14:]
        if "%" not in value and "+" not in value:
            return value
        return unquote_plus(value, encoding="utf-8", errors="replace")
    for k, v in parse_qsl(text, keep_blank_values=True):
        if k == "labelSelector":
            return v
    return ""


def _finite_or_none(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def _jsonable(v) -> bool:
    try:
        json.dumps(v, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


class HotPath:
    """Pure ASGI layer in front of FastAPI: authentication, latency metrics, and /apis.

    The external metrics API is the HPA's hot path (every HPA, every 15 s); answering it
    here skips FastAPI's per-request machinery.
    """

    def __init__(self, app, core: AdapterCore) -> None:
        self.app = app
        self.core = core
        self.auth = core.settings.auth
        self.latency = {r: core.metrics.latency.labels(r) for r in ("apis", "rest", "other")}
        self._token = self.auth.token.encode() if self.auth.token else None

    def authenticate(self, scope) -> str | None:
        """The user name, or None when the request is not authenticated."""
        headers = scope["headers"]
        if self.auth.requestheader_ca_file:
            tls = (scope.get("extensions") or {}).get("tls") or {}
            cn = tls.get("client_cert_cn")
            if tls.get("client_cert_verified") and cn is not None:
                if not self.auth.allowed_names or cn in self.auth.allowed_names:
                    for k, v in headers:
                        if k.decode("latin-1").lower() in self.auth.username_headers and v:
                            return v.decode("latin-1")
        if self._token:
            for k, v in headers:
                if k == b"authorization" and v[:7].lower() == b"bearer ":
                    if hmac.compare_digest(v[7:].strip(), self._token):
                        return "token-user"
        return None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        path = scope["path"]
        route = "apis" if path.startswith("/apis") else "rest" if path.startswith("/api/") else "other"
        try:
            if self.auth.enabled and path not in self.auth.anonymous_paths and self.authenticate(scope) is None:
                await _send(send, 401, status_body(401, "Unauthorized"), scope["method"] == "HEAD",
                            [(b"www-authenticate", b'Bearer realm="foresight"')])
                return
            if route == "apis" and (path == "/apis" or path.startswith("/apis/")):
                try:
                    code, body = self.core.answer_apis(scope["method"], path, scope.get("query_string", b""))
                except StoreError:
                    log.exception("store error while answering %s", path)
                    code, body = 503, status_body(503, "the forecast store could not be read; try again shortly")
                except Exception:  # noqa: BLE001 - the HPA gets a Status, never a bare 500
                    log.exception("unhandled error while answering %s", path)
                    code, body = 500, status_body(500, "internal error; see the adapter's log")
                extra = [(b"allow", b"GET")] if code == 405 else []
                await _send(send, code, body, scope["method"] == "HEAD", extra)
                return
            await self.app(scope, receive, send)
        finally:
            self.latency[route].observe(time.perf_counter() - start)


async def _send(send, code: int, body: bytes, head: bool = False, extra=()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [*JSON_HEADERS, (b"content-length", str(len(body)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else body})


def create_app(settings: AdapterSettings | None = None, store: ForecastStore | None = None, *, clock=time.time) -> FastAPI:
    """Build the adapter app over a forecast store (no module-level state)."""
    from forecaster.store import MemoryForecastStore

    settings = settings or AdapterSettings()
    store = store if store is not None else MemoryForecastStore()
    core = AdapterCore(settings, store, clock)

    @asynccontextmanager
    async def lifespan(_app):
        core.cache.start()
        try:
            yield
        finally:
            core.cache.stop()

    app = FastAPI(
        title="foresight adapter",
        description="Kubernetes external metrics API (predicted_cpu_load_ratio, predicted_cpu_cores), "
        "forecast REST API and dashboard.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.core = core
    app.state.settings = settings

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

    @app.exception_handler(StoreUnavailable)
    async def _down(_req: Request, exc: StoreUnavailable):
        return status_response(503, "the forecast store is unavailable; try again shortly")

    @app.exception_handler(Exception)
    async def _boom(_req: Request, exc: Exception):
        log.exception("unhandled error")
        # Never leak internals (prometheus-adapter does the same).
        return status_response(500, "internal error; see the adapter's log")

    # --- external metrics (answered by HotPath; declared here for the docs) ---------------
    def _apis(request: Request) -> Response:
        code, body = core.answer_apis(request.method, request.url.path, request.scope.get("query_string", b""))
        return Response(body, status_code=code, media_type="application/json")

    app.add_api_route("/apis", _apis, methods=["GET"], tags=["external metrics"], summary="API group list")
    app.add_api_route(PREFIX, _apis, methods=["GET"], tags=["external metrics"], summary="Discovery: served metrics")

    @app.get(PREFIX + "/namespaces/{namespace}/{metric}", tags=["external metrics"], summary="Metric values")
    def external_metric(
        request: Request,
        namespace: str,
        metric: str,
        labelSelector: str | None = Query(None, description="Kubernetes label selector"),  # noqa: N803
    ) -> Response:
        return _apis(request)

    # --- REST ---------------------------------------------------------------------------
    @app.get("/api/v1/forecasts", tags=["forecasts"], summary="Every workload with its forecast status")
    def list_forecasts(
        namespace: str | None = Query(None, max_length=63),
        limit: int = Query(500, ge=1, le=5000),
        offset: int = Query(0, ge=0),
    ):
        core.cache.ensure_index()
        now = clock()
        sids = [s for s in core.cache.all_series() if namespace is None or s.partition("/")[0] == namespace]
        page = sids[offset : offset + limit]
        items = [core.summary(s, core.cache.get(s), now) for s in page]
        return JSONResponse({"count": len(sids), "offset": offset, "limit": limit, "items": items})

    @app.get("/api/v1/forecasts/{namespace}/{workload}", tags=["forecasts"], summary="One forecast in full")
    def get_forecast(namespace: str, workload: str, format: str = Query("json", pattern="^(json|png)$")):  # noqa: A002
        sid = f"{namespace}/{workload}"
        fc = core.cache.get(sid)
        if fc is None:
            return status_response(404, f"no forecast for workload {sid}")
        now = clock()
        if format == "png":
            from adapter.plot import forecast_png

            return Response(forecast_png(fc, core.summary(sid, fc, now)), media_type="image/png")
        return JSONResponse(core.detail(sid, fc, now))

    # --- health and metrics -----------------------------------------------------------
    @app.get("/healthz", tags=["health"], response_class=PlainTextResponse)
    def healthz():
        return "ok"

    @app.get("/livez", tags=["health"], response_class=PlainTextResponse)
    def livez():
        return "ok"

    @app.get("/readyz", tags=["health"])
    def readyz():
        h = core.cache.health()
        now = clock()
        ages = []
        if h["store_reachable"]:
            try:
                core.cache.ensure_index()
                ages = [now - fc.generated_at for fc in core.cache.forecasts()]
            except StoreError:
                pass
        max_age = core.settings.metric.max_forecast_age_seconds
        fresh = sum(1 for a in ages if a <= max_age)
        h.update({"forecasts": len(ages), "fresh_forecasts": fresh})
        if not h["store_reachable"]:
            since = h["seconds_since_last_good_read"]
            if since is None or since > core.settings.cache.max_stale_seconds:
                return JSONResponse({"ready": False, "why": "forecast store unreachable", **h}, status_code=503)
            # A short Redis blip must not take every replica out of the Service: the
            # aggregator would then fail discovery and stop ALL external-metric HPAs.
            h["serving_from_cache"] = True
        if ages and fresh == 0:
            return JSONResponse(
                {"ready": False, "why": f"every forecast is older than {max_age:g} s: is the trainer running?", **h},
                status_code=503,
            )
        return {"ready": True, **h}

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(core.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # --- dashboard ----------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse, tags=["dashboard"], summary="Dashboard")
    def dashboard(page: int = Query(1, ge=1, le=100000), namespace: str | None = Query(None, max_length=63)):
        from adapter.dashboard import render_dashboard

        try:
            core.cache.ensure_index()
        except StoreError:
            return HTMLResponse(render_dashboard([], settings, page, 0, error="the forecast store is unreachable"), status_code=503)
        now = clock()
        sids = [s for s in core.cache.all_series() if namespace is None or s.partition("/")[0] == namespace]
        per = 24
        chosen = sids[(page - 1) * per : page * per]
        rows = []
        for s in chosen:
            fc = core.cache.get(s)
            rows.append((core.summary(s, fc, now), fc))
        return HTMLResponse(render_dashboard(rows, settings, page, len(sids), now=now))

    # --- the scheduler extender, when that part is installed --------------------------
    try:
        import adapter.scheduler as scheduler
    except ModuleNotFoundError as exc:
        if exc.name != "adapter.scheduler":
            raise
        scheduler = None
    if scheduler is not None:
        scheduler.register_scheduler_routes(app, store, settings.scheduler)

    app.add_middleware(HotPath, core=core)
    return app
