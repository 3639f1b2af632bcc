"""Settings of the adapter, grouped and documented; durations carry their unit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from forecaster.served import MetricSettings
from forecaster.timing import TIMING

METRIC_LOAD_RATIO = "predicted_cpu_load_ratio"
METRIC_CORES = "predicted_cpu_cores"
METRICS = (METRIC_LOAD_RATIO, METRIC_CORES)  # always served; declared metrics add to them (adapter.declared)


@dataclass(frozen=True)
class CacheSettings:
    """Per-process cache over the store, so Redis stays off the HPA's hot path.

    ttl_seconds: how long a forecast read from the store is used before it is re-read
      (re-read in the background; the request is answered from the cached copy).
    max_stale_seconds: with the store unreachable, cached forecasts are served this long
      after their last successful read; after that requests get 503.
    index_refresh_seconds: how often the list of workloads (for label selectors) is rebuilt.
    negative_max_entries: at most this many names the store did not have are remembered
      (least recently read dropped first), each for ttl_seconds, so a caller asking for
      unknown names neither grows the process nor makes it re-read them in the background.
    """

    ttl_seconds: float = 2.0
    max_stale_seconds: float = 30.0
    index_refresh_seconds: float = 30.0
    negative_max_entries: int = 10_000


@dataclass(frozen=True)
class ObservedDirectSettings:
    """Observed demand read straight from Prometheus: the served floor, and what is served while
    the store is out of reach.

    ttl_seconds: a reading is reused this long (one query per workload per TTL, never one
      per request); older ones are re-read in the background while still being served.
    wait_seconds: the longest a request waits for a reading it has none of.
    max_age_seconds: an older reading is never served (the source is down too: 503).
    timeout_seconds: per query to Prometheus (no retries: the next request retries).
    """

    ttl_seconds: float = TIMING.observed_read_seconds
    wait_seconds: float = 1.0
    max_age_seconds: float = 120.0
    timeout_seconds: float = 3.0


@dataclass(frozen=True)
class AuthSettings:
    """Aggregated-API authentication. Off when nothing is configured.

    requestheader_ca_file: CA that signs the aggregator's front-proxy client certificate.
      X-Remote-User/X-Remote-Group are trusted only on connections whose client certificate
      verified against it.
    allowed_names: accepted common names of that certificate (empty: any name the CA signed).
    token: an optional static bearer token (for Prometheus, curl, tools).
    anonymous_paths: answered without authentication: kubelet probes have no credentials.
      kube-scheduler calls its extender without any, so the extender belongs on its own port
      (``foresight serve --scheduler-port``, optionally requiring the scheduler's client
      certificate); on this port its paths need credentials like everything else.
    """

    requestheader_ca_file: str | None = None
    allowed_names: tuple[str, ...] = ()
    token: str | None = None
    username_headers: tuple[str, ...] = ("x-remote-user",)
    group_headers: tuple[str, ...] = ("x-remote-group",)
    extra_header_prefix: str = "x-remote-extra-"  # user "extra" (scopes, ...) passed on to the access review
    anonymous_paths: tuple[str, ...] = ("/healthz", "/readyz", "/livez")

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
    # declared metrics by series id: {metric: capacity_per_replica} (adapter.declared); the
    # store's metric series add the ones declared after this process started
    workload_metrics: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    dashboard_title: str = "foresight"
    # adapter.scheduler.SchedulerSettings when that part is installed (None: its defaults)
    scheduler: Any = None
