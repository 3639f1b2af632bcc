"""What the routes need, independent of the web framework: the external metrics answers
(discovery + values, byte-exact shapes) and the REST summaries, from the forecast cache."""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import Future, wait as futures_wait
from dataclasses import replace
from typing import Any, Callable
from urllib.parse import parse_qsl, unquote_plus

from adapter.declared import DeclaredMetrics
from adapter.fallback import ObservedDirect
from adapter.observemode import observe_row
from adapter.quantity import format_quantity
from adapter.responses import DNS_LABEL, GROUP, GROUP_VERSION, PREFIX, VERSION, dumps, rfc3339, status_body
from adapter.selectors import SelectorError, parse_selector
from adapter.settings import METRIC_CORES, METRICS, AdapterSettings
from adapter.state import NAME_KEYS, ForecastCache
from adapter.telemetry import AdapterMetrics, ForecastAgeCollector
from core.receipt import ReceiptTimes
from core.store import Forecast, ForecastStore, StoreError, StoreUnavailable
from forecaster.predicted import served_names
from forecaster.served import NoData, ServedValue, served_cores, served_load_ratio


class AdapterCore:
    """Everything the routes need, independent of the web framework."""

    def __init__(
        self,
        settings: AdapterSettings,
        store: ForecastStore,
        clock: Callable[[], float] = time.time,
        observed: ObservedDirect | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.metrics = AdapterMetrics()
        # Observed demand straight from its source: the floor served while the store is out of reach.
        self.observed = observed
        self.cache = ForecastCache(
            store,
            settings.cache,
            settings.workload_labels,
            on_store_error=lambda exc: self.metrics.store_errors.inc(),
            receipts=ReceiptTimes(clock),  # ages judged on the clock that judges staleness
        )
        self.metrics.registry.register(ForecastAgeCollector(self))
        self.ready_pods: Any = None  # adapter.readypods.PodWatch when the adapter watches pods
        self.observe_view: Any = None  # adapter.observemode.ObserveView: the operator's Observe lines
        self._selectors: dict[str, Any] = {}  # HPAs repeat the same few selectors
        self._queries: dict[bytes, str] = {}  # raw query string -> its labelSelector
        self.group_list = dumps(
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
        self.group = dumps(
            {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": GROUP,
                "versions": [{"groupVersion": GROUP_VERSION, "version": VERSION}],
                "preferredVersion": {"groupVersion": GROUP_VERSION, "version": VERSION},
            }
        )
        self.declared = DeclaredMetrics(self)
        self._discovery: tuple[tuple[str, ...], bytes] | None = None

    @property
    def resource_list(self) -> bytes:
        """Discovery: the CPU metrics, then every declared metric's two names (rebuilt only
        when the set of declared metrics changes)."""
        try:
            self.cache.ensure_index()  # the store's metric series name the metrics declared since start
        except StoreError:
            pass
        names = (*METRICS, *self.declared.external_names())
        if self._discovery is None or self._discovery[0] != names:
            body = dumps({
                "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
                "resources": [{"name": m, "singularName": "", "namespaced": True,
                               "kind": "ExternalMetricValueList", "verbs": ["get"]} for m in names],
            })
            self._discovery = (names, body)
        return self._discovery[1]

    def served_names(self) -> tuple[str, ...]:
        return (*METRICS, *self.declared.external_names())

    # --- the served value of one workload -------------------------------------------
    def watched_pods(self, series_id: str, meta: Any = None) -> int | None:
        """The pods the HPA counts now, when the pod watch knows them (adapter/readypods.py)."""
        return self.ready_pods.count(series_id, meta) if self.ready_pods is not None else None

    def cpu_request(self, series_id: str, published: Any) -> Any:
        """CPU request per pod: the configured one, else the watched pods' (the Kubernetes API,
        live), else ``published`` (the trainer's or the fallback's kube-state-metrics reading)."""
        conf = self.settings.workload_capacity.get(series_id, {}).get("cpu_request_cores")
        if conf is not None:
            return conf
        watched = self.ready_pods.cpu_request(series_id) if self.ready_pods is not None else None
        return watched if watched is not None else published

    def capacity(self, series_id: str, fc: Forecast | None) -> tuple[Any, Any]:
        """(ready pods, CPU request per pod): the watched pods, else those the trainer published."""
        meta = fc.meta if fc is not None else {}
        conf = self.settings.workload_capacity.get(series_id, {})
        pods = self.watched_pods(series_id, meta)
        if pods is None:
            pods = meta.get("ready_pods", conf.get("ready_pods"))
        return pods, self.cpu_request(series_id, meta.get("cpu_request_cores"))

    def observed_now(self, series_id: str, fc: Forecast | None) -> float | None:
        """The workload's demand read directly from its source (what a reactive HPA sees now),
        when a fresh reading is at hand: the floor under forecast ``fc``. None without a demand
        source or a fresh reading (the forecast's last published sample is the floor then), and
        without a forecast (the direct path serves the reading as ``observed-direct``)."""
        if self.observed is None or fc is None:
            return None
        obs = self.observed.fresh(series_id)
        return obs.cores if obs is not None else None

    def served(self, metric: str, series_id: str, fc: Forecast | None, now: float) -> ServedValue:
        ms = self.settings.metric
        if metric == METRIC_CORES:
            return served_cores(fc, now, ms, observed=self.observed_now(series_id, fc))
        pods, req = self.capacity(series_id, fc)
        if pods is None:
            raise NoData(f"ready pod count of {series_id} is unknown (meta.ready_pods)")
        return served_load_ratio(fc, now, pods, req, ms, observed=self.observed_now(series_id, fc))

    def lookup(self, series_id: str) -> tuple[Forecast | None, bool]:
        """(cached forecast, store_down): store_down when the store is out of reach and the
        cached copy (if any) is too old to use."""
        try:
            return self.cache.get(series_id), False
        except StoreUnavailable:
            return None, True

    def served_or_direct(
        self, metric: str, series_id: str, fc: Forecast | None, store_down: bool, now: float,
        pending: list[Future] | None = None,
    ) -> ServedValue:
        """The served value, or -- when the store is down or the forecast path has nothing to
        serve -- the observed demand read directly from its source (``observed-direct``).
        Raises NoData when neither has a value."""
        declared = self.declared.parse(metric) if metric not in METRICS else None
        if declared is not None:  # predicted_<name>[_ratio]: the metric's own series
            return self.declared.served(*declared, series_id, fc, store_down, now, pending)
        if not store_down:
            try:
                return self.served(metric, series_id, fc, now)
            except NoData as exc:
                why = str(exc)
        else:
            why = "the forecast store is unreachable"
        obs = self.observed.get(series_id, pending) if self.observed is not None else None
        if obs is None:
            hint = "" if self.observed is not None else " (no demand source configured: pass --config)"
            raise NoData(f"{why}; the observed demand could not be read directly either{hint}")
        ms = self.settings.metric
        if metric == METRIC_CORES:
            sv = served_cores(None, now, ms, observed=obs.cores)
        else:
            conf = self.settings.workload_capacity.get(series_id, {})
            pods = self.watched_pods(series_id)
            if pods is None:
                pods = obs.ready_pods if obs.ready_pods is not None else conf.get("ready_pods")
            req = self.cpu_request(series_id, obs.cpu_request_cores)
            if pods is None:
                raise NoData(f"{why}; the ready pod count of {series_id} is unknown (ready_pods query)")
            sv = served_load_ratio(None, now, pods, req, ms, observed=obs.cores)
        reason = sv.reason.replace("no forecast published; serving observed demand",
                                   f"{why}; serving observed demand read directly from its source", 1)
        return replace(sv, source="observed-direct", reason=reason)

    # --- external metrics ---------------------------------------------------------------
    def answer_apis(
        self, method: str, path: str, query: bytes, pending: list[Future] | None = None, final: bool = True
    ) -> tuple[int, bytes]:
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
                return self.values(parts[1], parts[2], query, pending, final)
            if len(parts) == 1 and (parts[0] in METRICS or self.declared.parse(parts[0])):
                return 404, status_body(
                    404, f"external metric {parts[0]} is namespaced: use {PREFIX}/namespaces/<namespace>/{parts[0]}"
                )
        return 404, status_body(404, "the server could not find the requested resource")

    def values(
        self, ns: str, metric: str, query: bytes, pending: list[Future] | None = None, final: bool = True
    ) -> tuple[int, bytes]:
        """One ExternalMetricValueList (or Status). ``pending``: see ``ObservedDirect.get``;
        ``final=False`` when the caller will retry after awaiting the pending reads."""
        # Computed for every request (no response cache): real HPAs ask each workload once
        # per sync, so a response cache would only flatter synthetic benchmarks. The query
        # string is decoded once: each HPA sends the same one at every sync.
        text = self._queries.get(query)
        if text is not None:
            return self._values(ns, metric, text, self.clock(), pending, final)
        text = _label_selector(query)
        code, body = self._values(ns, metric, text, self.clock(), pending, final)
        if code == 200:  # only what matched a workload: a caller's made-up names are not kept
            if len(self._queries) > 200_000:
                self._queries.clear()
            self._queries[query] = text
        return code, body

    def _values(
        self, ns: str, metric: str, selector_text: str, now: float,
        pending: list[Future] | None = None, final: bool = True,
    ) -> tuple[int, bytes]:
        declared = self.declared.parse(metric) if metric not in METRICS else None
        if metric not in METRICS and declared is None:
            return 404, status_body(
                404, f"the server could not find the metric {metric} for namespace {ns}; served metrics: "
                f"{', '.join(self.served_names())}"
            )
        if not DNS_LABEL.match(ns):
            return 404, status_body(404, f"namespace {ns!r} is not a valid namespace name")
        selector = self._selectors.get(selector_text)
        if selector is None:
            try:
                selector = parse_selector(selector_text)
            except SelectorError as exc:
                return 400, status_body(400, f"unable to parse labelSelector: {exc}")
            matched = self.match(ns, selector)
            if matched:  # memoized once it found a workload: unknown names never grow this
                if len(self._selectors) > 200_000:
                    self._selectors.clear()
                self._selectors[selector_text] = selector
        else:
            matched = self.match(ns, selector)
        if declared is not None:  # only the workloads that declare it
            matched = [m for m in matched if self.declared.declares(m[0], declared[0])]
        if not matched:
            return 404, status_body(
                404, f"the server could not find the metric {metric} for namespace {ns} with selector "
                f"{selector_text if len(selector_text) <= 200 else selector_text[:200] + '...'}"
            )
        served = []
        for sid, fc, labels, store_down in matched:
            try:
                served.append((sid, fc, labels, self.served_or_direct(metric, sid, fc, store_down, now, pending)))
            except NoData as exc:
                if final or not pending:  # otherwise the caller retries once the reads are in
                    self.metrics.no_data.inc()
                return 503, status_body(503, f"no value for {metric} of {sid}: {exc}")
        items = []
        ts = rfc3339(now)
        for sid, fc, labels, sv in served:
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

    def match(self, ns: str, selector) -> list[tuple[str, Forecast | None, dict[str, str], bool]]:
        """Workloads of a namespace matching a selector, with their forecasts, labels and
        whether the store was out of reach for them. With the store down, the index still
        holds the configured workloads and every workload seen before."""
        names = None
        if self.cache.names_are_labels:
            for key in NAME_KEYS:
                names = selector.equality_values(key)
                if names is not None:
                    break
        if names is None:
            try:
                self.cache.ensure_index()
            except StoreError:
                pass  # the configured workloads are indexed without the store
            names = sorted(n for n, labels in self.cache.workloads(ns).items() if selector.matches(labels))
        out = []
        for name in names:
            sid = f"{ns}/{name}"
            fc, store_down = self.lookup(sid)
            if fc is None and not self.cache.is_configured(sid) and not (store_down and self.cache.is_known(sid)):
                continue
            labels = self.cache.labels(sid, fc)
            if selector.matches(labels):
                out.append((sid, fc, labels, store_down))
        return out

    def degradation(self) -> dict:
        """What is degraded, from the last reads (no round trips: probes must stay fast)."""
        now = self.clock()
        ages = [now - fc.generated_at for fc in self.cache.forecasts()]
        max_age = self.settings.metric.max_forecast_age_seconds
        return {
            "store_reachable": self.cache.store_reachable,
            "store_last_error": self.cache.last_error,
            "cached_forecasts": len(ages),
            "fresh_forecasts": sum(1 for a in ages if a <= max_age),
            "demand_source_reachable": None if self.observed is None else self.observed.source_up,
            "demand_source_last_error": None if self.observed is None else self.observed.last_error,
            # Observe-mode lines: why they are missing when the autoscalers cannot be listed
            "observe_view_error": None if self.observe_view is None else self.observe_view.last_error,
        }

    # --- REST ---------------------------------------------------------------------------
    def summaries(self, sids: list[str], now: float) -> list[tuple[dict, Forecast | None]]:
        """(summary, forecast) of many workloads. Direct reads of observed demand they need
        are started together and awaited once (at most ``wait_seconds`` in all), never one
        bounded wait per workload."""
        found = [(sid, *self.lookup(sid)) for sid in sids]
        pending: list[Future] = []
        rows = [(self.summary(sid, fc, now, down, pending), fc) for sid, fc, down in found]
        if pending and self.observed is not None:
            futures_wait(pending, timeout=self.observed.wait_seconds)
            rows = [(self.summary(sid, fc, now, down, []), fc) for sid, fc, down in found]
        return rows

    def summary(
        self, sid: str, fc: Forecast | None, now: float, store_down: bool = False, pending: list[Future] | None = None
    ) -> dict:
        ns, _, name = sid.partition("/")
        row: dict[str, Any] = {
            "namespace": ns,
            "workload": name,
            "series_id": sid,
            "labels": self.cache.labels(sid, fc),
            "status": fc.status if fc else ("store-unreachable" if store_down else "missing"),
            "model": fc.model if fc else None,
            "backtest_error": _finite_or_none(fc.backtest_error) if fc else None,
            "generated_at": rfc3339(fc.generated_at) if fc else None,
            "age_seconds": round(now - fc.generated_at, 3) if fc else None,
            "stale": (now - fc.generated_at > self.settings.metric.max_forecast_age_seconds) if fc else None,
            "fallback_reason": (fc.reason or None) if fc else (
                "the forecast store is unreachable" if store_down else "no forecast published"),
            # the serving policy the trainer chose for this workload, with why (applied by
            # forecaster/served.py to every served value below)
            "serving_policy": dict(fc.policy) if fc and fc.policy else None,
            # Observe mode: what the predictive HPA would have done beside the actual replicas
            "observe": observe_row(self.observe_view, sid, lambda: self.watched_pods(sid, fc.meta if fc else None)),
            "served": {},
        }
        for metric in (*METRICS, *(e for n in self.declared.of(sid) for e in served_names(n))):
            try:
                sv = self.served_or_direct(metric, sid, fc, store_down, now, pending)
                row["served"][metric] = {
                    "value": sv.value,
                    "quantity": format_quantity(sv.value),
                    "source": sv.source,
                    "reason": sv.reason,
                    # CPU in cores; a declared metric in its own unit
                    ("predicted_cores" if metric in METRICS else "predicted"): sv.predicted,
                    ("observed_cores" if metric in METRICS else "observed"): sv.observed,
                    "headroom": sv.headroom,
                }
            except NoData as exc:
                row["served"][metric] = {"value": None, "source": "none", "reason": str(exc)}
        return row

    def detail(self, sid: str, fc: Forecast, now: float) -> dict:
        d = self.summaries([sid], now)[0][0]
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

