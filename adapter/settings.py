"""Settings of the adapter, grouped and documented; durations carry their unit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from adapter.metrics import MetricSettings

METRIC_LOAD_RATIO = "predicted_cpu_load_ratio"
METRIC_CORES = "predicted_cpu_cores"
METRICS = (METRIC_LOAD_RATIO, METRIC_CORES)


@dataclass(frozen=True)
class CacheSettings:
    """Per-process cache over the store, so Redis stays off the HPA's hot path.

    ttl_seconds: how long a forecast read from the store is used before it is re-read
      (re-read in the background; the request is answered from the cached copy).
    max_stale_seconds: with the store unreachable, cached forecasts are served this long
      after their last successful read; after that requests get 503.
    index_refresh_seconds: how often the list of workloads (for label selectors) is rebuilt.
    """

    ttl_seconds: float = 2.0
    max_stale_seconds: float = 30.0
    index_refresh_seconds: float = 30.0


@dataclass(frozen=True)
class AuthSettings:
    """Aggregated-API authentication. Off when nothing is configured.

    requestheader_ca_file: CA that signs the aggregator's front-proxy client certificate.
      X-Remote-User/X-Remote-Group are trusted only on connections whose client certificate
      verified against it.
    allowed_names: accepted common names of that certificate (empty: any name the CA signed).
    token: an optional static bearer token (for Prometheus, curl, tools).
    anonymous_paths: answered without authentication: kubelet probes have no credentials, and
      kube-scheduler calls its extender without any (it only verifies our serving cert); the
      extender answers node scores only, never workload data. Drop the /scheduler paths here
      if you do not run the scheduler profile.
    """

    requestheader_ca_file: str | None = None
    allowed_names: tuple[str, ...] = ()
    token: str | None = None
    username_headers: tuple[str, ...] = ("x-remote-user",)
    group_headers: tuple[str, ...] = ("x-remote-group",)
    anonymous_paths: tuple[str, ...] = ("/healthz", "/readyz", "/livez", "/scheduler/filter", "/scheduler/prioritize")

    @property
    def enabled(self) -> bool:
        return bool(self.requestheader_ca_file or self.token)


@dataclass(frozen=True)
class AdapterSettings:
    metric: MetricSettings = field(default_factory=MetricSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    window_seconds: int = 300  # the ``window`` field served with each value
    # labels of configured workloads by series id ("ns/name"); forecasts' meta fills the rest
    workload_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # capacity fall-backs by series id when a forecast's meta lacks them
    workload_capacity: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    dashboard_title: str = "foresight"
    # adapter.scheduler.SchedulerSettings when that part is installed (None: its defaults)
    scheduler: Any = None
