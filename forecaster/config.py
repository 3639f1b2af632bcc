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
  violation_cost_pods: 90             # one SLO-violation interval is worth this many pod-intervals
  quantiles: [p50, p90]               # published quantiles the policy may serve
  sources: [model, persistence]
  headrooms: [1.0, 1.1, 1.2, 1.5, 2.0]  # candidate multipliers (>= 1 unless allow_below_observed)
  target_value: 0.7                   # the HPA's target Value
  slo_utilization: 0.9
  history_days: 2
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
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from forecaster.errors import ConfigError
from forecaster.serving import ServingSettings

DEFAULT_DEMAND_QUERY = (
    'sum(rate(container_cpu_usage_seconds_total{{namespace="{namespace}",'
    'pod=~"{name}-.*",container!=""}}[5m]))'
)
DEFAULT_READY_PODS_QUERY = (
    'sum(kube_pod_status_ready{{namespace="{namespace}",pod=~"{name}-.*",condition="true"}})'
)
DEFAULT_CPU_REQUEST_QUERY = (
    'avg(kube_pod_container_resource_requests{{namespace="{namespace}",pod=~"{name}-.*",'
    'resource="cpu"}})'
)
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "Function", "Node")


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
class CapacityConfig:
    cpu_request_cores: float | None = None
    cpu_request_query: str | None = None
    ready_pods: int | None = None
    ready_pods_query: str | None = None


@dataclass(frozen=True)
class WorkloadConfig:
    namespace: str
    name: str
    kind: str = "Deployment"
    labels: Mapping[str, str] = field(default_factory=dict)
    demand_query: str = ""
    capacity: CapacityConfig = field(default_factory=CapacityConfig)

    @property
    def series_id(self) -> str:
        return f"{self.namespace}/{self.name}"

    def all_labels(self) -> dict[str, str]:
        """Labels a selector can match: workload=<name>, deployment=<name> for Deployments,
        plus the configured ones."""
        out = {"workload": self.name}
        if self.kind == "Deployment":
            out["deployment"] = self.name
        elif self.kind == "StatefulSet":
            out["statefulset"] = self.name
        out.update(self.labels)
        return out

    def ready_pods_query(self) -> str | None:
        if self.capacity.ready_pods is not None:
            return None
        return self.capacity.ready_pods_query or DEFAULT_READY_PODS_QUERY.format(
            namespace=self.namespace, name=self.name
        )

    def cpu_request_query(self) -> str | None:
        if self.capacity.cpu_request_cores is not None:
            return None
        return self.capacity.cpu_request_query or DEFAULT_CPU_REQUEST_QUERY.format(
            namespace=self.namespace, name=self.name
        )


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


# --- strict validation -------------------------------------------------------------------


class _Checker:
    """Collects every problem with its path instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.problems.append(f"{path}: {msg}")

    def mapping(self, value: Any, path: str, allowed: Mapping[str, str]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.add(path, f"must be a mapping, got {type(value).__name__}")
            return {}
        for k in value:
            if k not in allowed:
                self.add(
                    f"{path}.{k}" if path else str(k),
                    f"unknown key; allowed keys: {', '.join(sorted(allowed))}",
                )
        return value

    def typed(self, d: dict, key: str, path: str, kinds: tuple, default: Any, *, required=False, check=None, hint=""):
        p = f"{path}.{key}" if path else key
        if key not in d or d[key] is None:
            if required:
                self.add(p, f"is required{hint}")
            return default
        v = d[key]
        ok = isinstance(v, kinds) and not (isinstance(v, bool) and bool not in kinds)
        if not ok:
            names = "/".join(k.__name__ for k in kinds)
            self.add(p, f"must be {names}, got {type(v).__name__} {v!r}")
            return default
        if check is not None:
            msg = check(v)
            if msg:
                self.add(p, f"{v!r} {msg}")
                return default
        return v


def _positive(v) -> str | None:
    return None if v > 0 else "must be > 0"


def _non_negative(v) -> str | None:
    return None if v >= 0 else "must be >= 0"


def _dns_label(v: str) -> str | None:
    import re

    if re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", v):
        return None
    return "must be a lowercase DNS name (a-z, 0-9, '-', '.')"


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

    serving_cfg = _serving(c, top.get("serving"), training_cfg.quantiles)

    wl_raw = top.get("workloads")
    workloads: list[WorkloadConfig] = []
    if wl_raw is None:
        c.add("workloads", "is required: a list of workloads (namespace, name)")
    elif not isinstance(wl_raw, list):
        c.add("workloads", f"must be a list, got {type(wl_raw).__name__}")
    else:
        seen: set[str] = set()
        for i, w in enumerate(wl_raw):
            p = f"workloads[{i}]"
            wd = c.mapping(w, p, {k: "" for k in ("namespace", "name", "kind", "labels", "demand_query", "capacity")})
            if w is not None and not isinstance(w, dict):
                continue
            ns = c.typed(wd, "namespace", p, (str,), "", required=True, check=_dns_label)
            name = c.typed(wd, "name", p, (str,), "", required=True, check=_dns_label)
            kind = c.typed(wd, "kind", p, (str,), "Deployment")
            if kind not in WORKLOAD_KINDS:
                c.add(f"{p}.kind", f"{kind!r} must be one of {', '.join(WORKLOAD_KINDS)}")
            labels = wd.get("labels") or {}
            if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
                c.add(f"{p}.labels", f"must map label names to string values, got {labels!r}")
                labels = {}
            dq = c.typed(wd, "demand_query", p, (str,), "")
            cap = c.mapping(
                wd.get("capacity"),
                f"{p}.capacity",
                {k: "" for k in ("cpu_request_cores", "cpu_request_query", "ready_pods", "ready_pods_query")},
            )
            cp = f"{p}.capacity"
            capacity = CapacityConfig(
                cpu_request_cores=(
                    float(v) if (v := c.typed(cap, "cpu_request_cores", cp, (int, float), None, check=_positive)) is not None else None
                ),
                cpu_request_query=c.typed(cap, "cpu_request_query", cp, (str,), None),
                ready_pods=c.typed(cap, "ready_pods", cp, (int,), None, check=_non_negative),
                ready_pods_query=c.typed(cap, "ready_pods_query", cp, (str,), None),
            )
            if capacity.cpu_request_cores is not None and capacity.cpu_request_query:
                c.add(cp, "give cpu_request_cores or cpu_request_query, not both")
            if capacity.ready_pods is not None and capacity.ready_pods_query:
                c.add(cp, "give ready_pods or ready_pods_query, not both")
            sid = f"{ns}/{name}"
            if ns and name:
                if sid in seen:
                    c.add(p, f"workload {sid} is listed twice")
                seen.add(sid)
            workloads.append(
                WorkloadConfig(
                    namespace=ns,
                    name=name,
                    kind=kind,
                    labels=dict(labels),
                    demand_query=dq or DEFAULT_DEMAND_QUERY.format(namespace=ns, name=name),
                    capacity=capacity,
                )
            )
    if c.problems:
        raise ConfigError(source, c.problems)
    return Config(source=source_cfg, store=store_cfg, training=training_cfg, workloads=tuple(workloads), serving=serving_cfg)


def _serving(c: _Checker, raw: Any, quantiles: tuple[float, ...]) -> ServingSettings:
    """The ``serving:`` section; types checked here, ranges by ServingSettings.problems."""
    from dataclasses import fields

    keys = {f.name: f for f in fields(ServingSettings)}
    d = c.mapping(raw, "serving", {k: "" for k in keys})
    kw: dict[str, Any] = {}
    for k in ("violation_cost_pods", "target_value", "slo_utilization", "history_days"):
        if k in d:
            kw[k] = c.typed(d, k, "serving", (int, float), getattr(ServingSettings, k))
    if "allow_below_observed" in d:
        kw["allow_below_observed"] = c.typed(d, "allow_below_observed", "serving", (bool,), False)
    for k, kind in (("quantiles", str), ("sources", str), ("headrooms", (int, float))):
        if k in d:
            v = d[k]
            if not isinstance(v, list) or not all(isinstance(x, kind) and not isinstance(x, bool) for x in v):
                c.add(f"serving.{k}", f"must be a list of {'strings' if kind is str else 'numbers'}, got {v!r}")
            else:
                kw[k] = tuple(v)
    settings = ServingSettings(**kw)
    from forecaster.store import quantile_key

    for p in settings.problems("serving", published=[quantile_key(q) for q in quantiles]):
        path, _, msg = p.partition(": ")
        c.add(path, msg)
    return settings


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file for a config parser; unreadable or non-YAML files are a ConfigError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file: {exc.strerror}"]) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"not valid YAML: {exc}"]) from exc


def load_config(path: str | Path) -> Config:
    return parse_config(read_yaml(path), str(path))
