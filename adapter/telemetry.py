"""The adapter's own Prometheus metrics (/metrics), in a registry per app."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.store import Forecast
from forecaster.served import ServedValue

if TYPE_CHECKING:
    from adapter.core import AdapterCore


class AdapterMetrics:
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
        self.responses = Counter(
            "foresight_adapter_responses_total", "Responses by route group and status class (2xx, 4xx, 5xx)",
            ["route", "code"], registry=self.registry,
        )
        self.observed_direct_errors = Counter(
            "foresight_adapter_observed_direct_errors_total",
            "Failed direct reads of observed demand (Prometheus unreachable, 5xx, timeout)",
            registry=self.registry,
        )
        self._responses: dict[tuple, Any] = {}
        self._value_children: dict[tuple, Any] = {}
        self._children: dict[tuple, Any] = {}

    def response(self, route: str, status: int) -> None:
        key = (route, status // 100)
        child = self._responses.get(key)
        if child is None:
            child = self._responses[key] = self.responses.labels(route, f"{status // 100}xx")
        child.inc()

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
        elif sv.source == "observed-direct":
            self.fallbacks.labels(metric, "observed-direct").inc()
        key = (metric, ns, name, sv.source)
        gauge = self._value_children.get(key)
        if gauge is None and len(self._value_children) < self.MAX_VALUE_SERIES:
            gauge = self._value_children[key] = self.served.labels(metric, ns, name, sv.source)
        if gauge is not None:
            gauge.set(sv.value)


class ForecastAgeCollector:
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
        # From the last reads, not a probe: a stalled store must not stall the scrape.
        store = GaugeMetricFamily("foresight_adapter_store_up", "1 when the last read of the forecast store succeeded")
        store.add_metric([], 1.0 if self.core.cache.store_reachable else 0.0)
        yield store
        observed = self.core.observed
        if observed is not None and observed.source_up is not None:
            up = GaugeMetricFamily("foresight_adapter_demand_source_up",
                                   "1 when the last direct read of observed demand (Prometheus) succeeded")
            up.add_metric([], 1.0 if observed.source_up else 0.0)
            yield up
