"""KEDA's ``externalscaler.ExternalScaler`` in front of the adapter's served value: a thin front
door like the external metrics route. Each call parses the ScaledObjectRef
(``adapter.keda.request``), checks the caller, and asks ``AdapterCore.served_or_direct`` -- the
same call the external metrics API makes, so both doors serve one value (forecaster/served.py).
Activation is that value asked over the activation lead, decided by ``adapter.keda.activation``.

Only precomputed state is read: the adapter's forecast cache over the store, and its
observed-demand reader.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Sequence

import grpc

from adapter.keda import externalscaler_pb2 as pb, externalscaler_pb2_grpc as pb_grpc
from adapter.keda.activation import Activation, ActivationState, decide
from adapter.keda.request import ScalerRequest, ScalerRequestError, parse_ref
from adapter.settings import METRICS
from core.store import StoreError
from forecaster.served import NoData, ServedValue

log = logging.getLogger("foresight.keda")

STREAM_POLL_SECONDS = 1.0  # how often an open StreamIsActive re-reads the cache (a new forecast is pushed this fast)
MAX_STREAMS = 2000  # one per ScaledObject using external-push; beyond it a stream is refused, not queued
MAX_STATES = 100_000  # activation states kept (one per trigger); the oldest are dropped past it


class Refused(Exception):
    """A call answered with a gRPC error: (status code, message for the caller)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def split_served(sv: ServedValue) -> tuple[float | None, float | None]:
    """(forecast part, observed part) of a served value, each in the served value's own unit.

    The served value is headroom x max(predicted, observed floor), in cores, then divided by
    capacity for a ratio metric; its unit factor is read back from the value itself rather than
    recomputed here. A series served from observation alone has no forecast part. With a hold
    (the floor is the max of several recent samples) both parts come out a little high: that
    errs toward staying active, never toward a cold start."""
    if sv.source != "forecast":
        return None, sv.value
    base = sv.headroom * max(sv.predicted or 0.0, sv.observed or 0.0)
    unit = sv.value / base if base > 0 else 1.0
    forecast = sv.headroom * sv.predicted * unit if sv.predicted is not None else None
    observed = sv.headroom * sv.observed * unit if sv.observed is not None else None
    return forecast, observed


class KedaScaler:
    """The answers, framework-free apart from the status codes: ``ExternalScalerService`` adapts
    them to grpc.aio. ``core``: the adapter's ``AdapterCore``; ``allowed_names``: client
    certificate common names allowed to call (empty: any the CA signed)."""

    def __init__(self, core: Any, clock: Callable[[], float] = time.time, allowed_names: Sequence[str] = ()) -> None:
        self.core = core
        self.clock = clock
        self.allowed_names = frozenset(allowed_names)
        self._states: dict[tuple, ActivationState] = {}
        self._views: dict[float, Any] = {}
        self._lock = threading.Lock()

    # --- the front door -----------------------------------------------------------------
    def authorize(self, common_name: str | None) -> None:
        """The TLS handshake already refused a caller without a certificate the CA signed;
        here the certificate's name is checked against ``allowed_names``."""
        if self.allowed_names and common_name not in self.allowed_names:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                          f"client certificate {common_name!r} is not among the allowed names of the KEDA scaler")

    def parse(self, ref: Any) -> ScalerRequest:
        try:
            req = parse_ref(ref.name, ref.namespace, dict(ref.scalerMetadata))
        except ScalerRequestError as exc:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        if req.metric not in METRICS and self.core.declared.parse(req.metric) is None:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                          f"ScaledObject {req.namespace}/{req.scaled_object}: scalerMetadata.metric: {req.metric!r} "
                          f"is not served; served metrics: {', '.join(self.core.served_names())}")
        return req

    # --- values -------------------------------------------------------------------------
    def served(self, req: ScalerRequest, now: float, core: Any = None) -> ServedValue:
        """The served value of the request's workload and metric (``core``: a view with another
        lead, for activation)."""
        core = core or self.core
        try:
            fc, store_down = core.lookup(req.series_id)
            return core.served_or_direct(req.metric, req.series_id, fc, store_down, now)
        except NoData as exc:
            raise Refused(grpc.StatusCode.UNAVAILABLE, f"no value for {req.metric} of {req.series_id}: {exc}") from None
        except StoreError:
            log.exception("store error while serving %s", req.series_id)
            raise Refused(grpc.StatusCode.UNAVAILABLE, "the forecast store could not be read; try again shortly") from None

    def metric_spec(self, req: ScalerRequest) -> pb.GetMetricSpecResponse:
        return pb.GetMetricSpecResponse(metricSpecs=[pb.MetricSpec(
            metricName=req.metric_name, targetSize=max(1, round(req.target_value)), targetSizeFloat=req.target_value)])

    def metrics(self, req: ScalerRequest, metric_name: str) -> pb.GetMetricsResponse:
        if metric_name and metric_name != req.metric_name:
            raise Refused(grpc.StatusCode.NOT_FOUND, f"metric {metric_name!r} is not this trigger's; "
                          f"GetMetricSpec names it {req.metric_name!r}")
        now = self.clock()
        sv = self.served(req, now)
        self.core.metrics.record(req.metric, req.namespace, req.workload, sv, None, now)
        return pb.GetMetricsResponse(metricValues=[pb.MetricValue(
            metricName=req.metric_name, metricValue=round(sv.value), metricValueFloat=sv.value)])

    def _view(self, lead_seconds: float) -> Any:
        """The adapter's core with the activation lead in place of the HPA's: the same cache,
        readers and served-value call, asked over a longer window. Kept per lead."""
        view = self._views.get(lead_seconds)
        if view is None:
            view = copy.copy(self.core)
            view.settings = replace(self.core.settings, metric=replace(self.core.settings.metric,
                                                                       lead_seconds=lead_seconds))
            view.declared = copy.copy(self.core.declared)  # declared metrics read their settings through it
            view.declared.core = view
            if len(self._views) > 64:
                self._views.clear()
            self._views[lead_seconds] = view
        return view

    def activation(self, req: ScalerRequest) -> Activation:
        """Ask ``decide`` with this trigger's remembered state, and remember the answer's."""
        now = self.clock()
        forecast, observed = split_served(self.served(req, now, self._view(req.activation_lead_seconds)))
        with self._lock:
            state = self._states.get(req.key, ActivationState())
            act = decide(state, now, forecast, observed, req.activation_threshold, req.cooldown_seconds)
            if len(self._states) >= MAX_STATES and req.key not in self._states:
                self._states.pop(next(iter(self._states)))
            self._states[req.key] = act.state
        return act


def _common_name(context: Any) -> str | None:
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode() if names else None


class ExternalScalerService(pb_grpc.ExternalScalerServicer):
    """grpc.aio glue. Reads of the cache run on a small thread pool (a store read past its TTL
    may block for a moment), never on the event loop that carries every open stream."""

    def __init__(self, scaler: KedaScaler, executor: ThreadPoolExecutor,
                 stream_poll_seconds: float = STREAM_POLL_SECONDS, max_streams: int = MAX_STREAMS) -> None:
        self.scaler = scaler
        self.executor = executor
        self.stream_poll_seconds = stream_poll_seconds
        self.max_streams = max_streams
        self.streams = 0
        self.stopping = asyncio.Event()

    async def _run(self, context: Any, fn: Callable, *args: Any) -> Any:
        try:
            self.scaler.authorize(_common_name(context))
            return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        except Refused as exc:
            await context.abort(exc.code, str(exc))
        except Exception:  # KEDA gets a status, never a stack trace
            log.exception("unhandled error in the KEDA scaler")
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the adapter's log")

    def _active(self, ref: Any) -> Activation:
        req = self.scaler.parse(ref)
        act = self.scaler.activation(req)
        log.debug("%s/%s active=%s: %s", req.namespace, req.scaled_object, act.active, act.reason)
        return act

    async def IsActive(self, request, context):  # the proto's names
        act = await self._run(context, self._active, request)
        return pb.IsActiveResponse(result=act.active)

    async def GetMetricSpec(self, request, context):
        return await self._run(context, lambda: self.scaler.metric_spec(self.scaler.parse(request)))

    async def GetMetrics(self, request, context):
        return await self._run(context, lambda: self.scaler.metrics(
            self.scaler.parse(request.scaledObjectRef), request.metricName))

    async def StreamIsActive(self, request, context):
        """The activation at once, then each change as soon as a poll of the cache sees it, until
        the client goes away (grpc.aio cancels this coroutine) or the server stops. A poll that
        finds no value keeps the last answer: a store outage is not a reason to scale to zero."""
        if self.streams >= self.max_streams:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"the KEDA scaler already serves {self.max_streams} streams; try again later")
        self.streams += 1  # counted before the first await: two streams cannot both take the last place
        last: bool | None = None
        try:
            await self._run(context, self.scaler.parse, request)  # a bad trigger is refused before streaming
            while not self.stopping.is_set():
                try:
                    act = await asyncio.get_running_loop().run_in_executor(self.executor, self._active, request)
                except Refused as exc:
                    if last is None:
                        await context.abort(exc.code, str(exc))
                    log.warning("StreamIsActive %s/%s: %s (keeping %s)", request.namespace, request.name, exc, last)
                else:
                    if act.active != last:
                        last = act.active
                        yield pb.IsActiveResponse(result=last)
                try:
                    await asyncio.wait_for(self.stopping.wait(), self.stream_poll_seconds)
                except asyncio.TimeoutError:
                    pass
        finally:
            self.streams -= 1
