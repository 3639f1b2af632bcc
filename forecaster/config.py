"""Workload configuration (YAML): which workloads to forecast, and how to read their demand
and capacity. Validated strictly; every problem is reported at once with its path.

```yaml
apiVersion: foresight/v1alpha1
kind: WorkloadConfig
source:
  url: prometheus://127.0.0.1:9090     # or http(s)://thanos-query:10902
  thanos: {max_source_resolution: 5m, partial_response: false, dedup: true}   # optional
  bearer_token_file: /var/run/secrets/...   # optional
  ca_file: /etc/ssl/ca.pem                  # optional
  step_seconds: 60
  history_days: 14
store:
  url: redis://127.0.0.1:6379/0     # or memory://
  ttl_seconds: 3600
training:
  retrain_interval_seconds: 86400
  refresh_interval_seconds: 60
  horizon_steps: 12
  quantiles: [0.5, 0.9]
  models: [auto]
  engine: local                       # or ray: the per-series fits run as Ray tasks (manifests/ray/)
  ray_address: ray://foresight-ray-head-svc.foresight:10001   # with engine: ray (default $RAY_ADDRESS)
serving:                              # optional: how each workload's serving policy is chosen
  violation_worth_minutes: 60         # a minute above slo_utilization is worth 60 minutes of the whole workload
  slo_minutes_per_day: 0              # > 0: an SLO each workload's policy must meet (minutes a day above it)
  cost_ceiling: 1.5                   # at most this multiple of a reactive HPA's pod-minutes (0: no ceiling)
  quantiles: [p50, p90]               # published quantiles the policy may serve
  sources: [model, persistence]
  headrooms: [1.0, 1.1, 1.2, 1.5, 2.0]  # candidate multipliers (>= 1 unless allow_below_observed)
  target_value: 0.7                   # the HPA's target Value
  slo_utilization: 0.9
  history_days: 7                     # how much history the choice scores
  holds: [1]                          # observed floor = max of the last k samples; [1, 2, 3]: k chosen per workload
  model_margin: 0                     # >0: the model must save this share of what a forecast can save
  peak_gap_states: 5                  # headroom per state of demand below its recent peak; 1: one headroom
workloads:
  - namespace: shop
    name: checkout
    kind: Deployment
    labels: {tier: web}
    demand_query: sum(rate(container_cpu_usage_seconds_total{...}[5m]))   # optional
    capacity:
      cpu_request_cores: 0.5           # static, or
      cpu_request_query: ...           # from kube-state-metrics
      ready_pods_query: ...            # optional; default from kube-state-metrics
      ready_pods: 3                    # static alternative
    metrics:                           # optional: demands besides CPU (forecaster.predicted)
      - name: rps                      # served as predicted_rps and predicted_rps_ratio
        query: sum(rate(http_requests_total{namespace="shop",service="checkout"}[2m]))
        capacity_per_replica: 40       # what one ready replica absorbs at 100 %, in the query's unit
    serving: {slo_minutes_per_day: 5}  # optional: this workload's overrides of serving:
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from core.errors import ConfigError
from core.typedconfig import read_yaml
from forecaster.configcheck import _Checker, _positive
from forecaster.serving import ServingSettings
from forecaster.workloads import (  # re-exported: the config's public names
    DEFAULT_CPU_REQUEST_QUERY,
    DEFAULT_DEMAND_QUERY,
    DEFAULT_READY_PODS_QUERY,
    WORKLOAD_KINDS,
    CapacityConfig,
    MetricSeries,
    WorkloadConfig,
    parse_serving,
    parse_workloads,
)

__all__ = [
    "Config", "SourceConfig", "StoreConfig", "TrainingConfig", "WorkloadConfig", "CapacityConfig", "MetricSeries",
    "DEFAULT_CPU_REQUEST_QUERY", "DEFAULT_DEMAND_QUERY", "DEFAULT_READY_PODS_QUERY", "WORKLOAD_KINDS",
    "parse_config", "load_config",
]


@dataclass(frozen=True)
class SourceConfig:
    url: str = "prometheus://127.0.0.1:9090"
    thanos: Mapping[str, Any] = field(default_factory=dict)
    bearer_token_file: str | None = None
    ca_file: str | None = None
    step_seconds: float = 60.0
    history_days: float = 14.0
    timeout_seconds: float = 30.0


@dataclass(frozen=True)
class StoreConfig:
    url: str = "memory://"
    ttl_seconds: int = 3600


@dataclass(frozen=True)
class TrainingConfig:
    retrain_interval_seconds: float = 86400.0
    refresh_interval_seconds: float = 60.0
    horizon_steps: int = 12
    quantiles: tuple[float, ...] = (0.5, 0.9)
    models: tuple[str, ...] = ("auto",)
    engine: str = "local"  # where the per-series fits run (forecaster.engine): local or ray
    ray_address: str | None = None  # with engine: ray, e.g. ray://foresight-ray-head-svc:10001


@dataclass(frozen=True)
class Config:
    source: SourceConfig
    store: StoreConfig
    training: TrainingConfig
    workloads: tuple[WorkloadConfig, ...]
    serving: ServingSettings = field(default_factory=ServingSettings)

    def workload(self, series_id: str) -> WorkloadConfig | None:
        for w in self.workloads:
            if w.series_id == series_id:
                return w
        return None

    def series(self) -> tuple[WorkloadConfig | MetricSeries, ...]:
        """Every forecast series the trainer pulls and fits: each workload's CPU series, then
        its declared metrics (``<ns>/<name>/<metric>``)."""
        return tuple(s for w in self.workloads for s in (w, *w.metric_series()))

    def serving_by_series(self) -> dict[str, ServingSettings]:
        """The serving settings of every series whose workload overrides ``serving:``."""
        return {s.series_id: s.serving for s in self.series() if s.serving is not None}


def _engine(c: _Checker, tr: dict) -> tuple[str, str | None]:
    from forecaster.engine import ENGINES

    engine = c.typed(tr, "engine", "training", (str,), "local")
    if engine not in ENGINES:
        c.add("training.engine", f"{engine!r} must be one of {', '.join(sorted(ENGINES))}")
        engine = "local"
    address = c.typed(tr, "ray_address", "training", (str,), None)
    if address is not None and engine != "ray":
        c.add("training.ray_address", f"{address!r} needs training.engine: ray")
    elif address is not None and not (address.startswith("ray://") or ":" in address):
        c.add("training.ray_address", f"{address!r} must be ray://HOST:10001 (Ray client) or HOST:6379")
    return engine, address


def parse_config(data: Any, source: str = "<config>") -> Config:
    c = _Checker()
    top = c.mapping(
        data,
        "",
        {"apiVersion": "", "kind": "", "source": "", "store": "", "training": "", "serving": "", "workloads": ""},
    )
    if data is not None and not isinstance(data, dict):
        raise ConfigError(source, c.problems)
    api = top.get("apiVersion", "foresight/v1alpha1")
    if api != "foresight/v1alpha1":
        c.add("apiVersion", f"{api!r} is not supported; use foresight/v1alpha1")
    kind = top.get("kind", "WorkloadConfig")
    if kind != "WorkloadConfig":
        c.add("kind", f"{kind!r} must be WorkloadConfig")

    s = c.mapping(
        top.get("source"),
        "source",
        {k: "" for k in ("url", "thanos", "bearer_token_file", "ca_file", "step_seconds", "history_days", "timeout_seconds")},
    )
    th = c.mapping(s.get("thanos"), "source.thanos", {"max_source_resolution": "", "partial_response": "", "dedup": ""})
    if "max_source_resolution" in th and str(th["max_source_resolution"]) not in ("auto", "0", "0s", "5m", "1h", "raw"):
        c.add("source.thanos.max_source_resolution", f"{th['max_source_resolution']!r} must be one of auto, 0s, 5m, 1h")
    for k in ("partial_response", "dedup"):
        if k in th and not isinstance(th[k], bool):
            c.add(f"source.thanos.{k}", f"must be true or false, got {th[k]!r}")
    url = c.typed(s, "url", "source", (str,), SourceConfig.url)
    if not url.startswith(("prometheus://", "http://", "https://", "csv://", "file://")):
        c.add("source.url", f"{url!r} must start with prometheus://, http(s):// or csv://")
    source_cfg = SourceConfig(
        url=url,
        thanos=dict(th),
        bearer_token_file=c.typed(s, "bearer_token_file", "source", (str,), None),
        ca_file=c.typed(s, "ca_file", "source", (str,), None),
        step_seconds=float(c.typed(s, "step_seconds", "source", (int, float), 60.0, check=_positive)),
        history_days=float(c.typed(s, "history_days", "source", (int, float), 14.0, check=_positive)),
        timeout_seconds=float(c.typed(s, "timeout_seconds", "source", (int, float), 30.0, check=_positive)),
    )

    st = c.mapping(top.get("store"), "store", {"url": "", "ttl_seconds": ""})
    surl = c.typed(st, "url", "store", (str,), "memory://")
    if not surl.startswith(("memory:", "redis://", "rediss://", "unix://")):
        c.add("store.url", f"{surl!r} must be memory:// or redis://HOST:PORT/DB")
    store_cfg = StoreConfig(url=surl, ttl_seconds=int(c.typed(st, "ttl_seconds", "store", (int,), 3600, check=_positive)))

    tr = c.mapping(
        top.get("training"),
        "training",
        {k: "" for k in ("retrain_interval_seconds", "refresh_interval_seconds", "horizon_steps", "quantiles", "models",
                         "engine", "ray_address")},
    )
    engine, ray_address = _engine(c, tr)
    qs = tr.get("quantiles", [0.5, 0.9])
    qlist: list[float] = []
    if not isinstance(qs, list) or not qs:
        c.add("training.quantiles", f"must be a non-empty list of numbers in (0, 1), got {qs!r}")
    else:
        for i, q in enumerate(qs):
            if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q < 1:
                c.add(f"training.quantiles[{i}]", f"{q!r} must be a number in (0, 1)")
            else:
                qlist.append(float(q))
    models = tr.get("models", ["auto"])
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models) or not models:
        c.add("training.models", f"must be a non-empty list of model names, got {models!r}")
        models = ["auto"]
    training_cfg = TrainingConfig(
        retrain_interval_seconds=float(c.typed(tr, "retrain_interval_seconds", "training", (int, float), 86400.0, check=_positive)),
        refresh_interval_seconds=float(c.typed(tr, "refresh_interval_seconds", "training", (int, float), 60.0, check=_positive)),
        horizon_steps=int(c.typed(tr, "horizon_steps", "training", (int,), 12, check=_positive)),
        quantiles=tuple(sorted(qlist)) or (0.5, 0.9),
        models=tuple(models),
        engine=engine,
        ray_address=ray_address,
    )

    serving_cfg = parse_serving(c, top.get("serving"), training_cfg.quantiles)
    workloads = parse_workloads(c, top.get("workloads"), serving_cfg, training_cfg.quantiles)
    if c.problems:
        raise ConfigError(source, c.problems)
    return Config(source=source_cfg, store=store_cfg, training=training_cfg, workloads=tuple(workloads), serving=serving_cfg)


def load_config(path: str | Path) -> Config:
    return parse_config(read_yaml(path), str(path))
