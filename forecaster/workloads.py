"""The ``workloads:`` list of the workload config: each workload's CPU series, its declared
predicted metrics (``forecaster.predicted``) and its own ``serving:`` overrides, validated with
the path of every problem (``workloads[3].serving.slo_minutes_per_day``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from forecaster.configcheck import _Checker, _dns_label, _non_negative, _positive
from forecaster.predicted import PredictedMetric, metric_name_problem, metric_series_id
from forecaster.serving import ServingSettings

# Kubernetes names generated pods from the alphabet of k8s.io/apimachinery's rand package:
# a ReplicaSet's pods are <rs>-<5 chars>, a Deployment's ReplicaSet is <deployment>-<pod-template-
# hash> (SafeEncodeString of a uint32: 1..10 chars), a StatefulSet's pods are <name>-<ordinal>.
# Prometheus anchors regexes, so `api` no longer matches a sibling `api-gateway`'s pods
# (api-gateway-<hash>-<5>: one segment too many) the way a `api-.*` prefix did.
POD_NAME_ALPHABET = "[bcdfghjklmnpqrstvwxz2456789]"
POD_SUFFIX = {  # what Kubernetes appends to the workload's name
    "Deployment": "-" + POD_NAME_ALPHABET + "{1,10}-" + POD_NAME_ALPHABET + "{5}",
    "ReplicaSet": "-" + POD_NAME_ALPHABET + "{5}",
    "StatefulSet": "-[0-9]+",
}
PREFIX_POD_SUFFIX = "-.*"  # kinds whose pod names Kubernetes does not generate (Function)
_OWNER = {kind: re.compile("(.+)" + suffix) for kind, suffix in POD_SUFFIX.items()}


def pod_regex(kind: str, name: str) -> str:
    """The anchored regex of exactly the pod names a workload of this kind gets."""
    return name + POD_SUFFIX.get(kind, PREFIX_POD_SUFFIX)


def owner_name(kind: str, pod: str) -> str | None:
    """The name of the workload of ``kind`` whose pod_regex matches ``pod`` (one at most: the
    suffix fixes the segments after the name), or None."""
    rx = _OWNER.get(kind)
    m = rx.fullmatch(pod) if rx is not None else None
    return m.group(1) if m else None


# The demand: cAdvisor only (the kubelet's /metrics/cadvisor), no kube-state-metrics.
# rate() over a window reads the window's mean, half a window behind the CPU in use: at 5m that
# is 150 s, twice the served lead, so the "forecast" of a rise would arrive after the reactive
# HPA's metrics-server value. 2m keeps four scrapes at a 30-s scrape interval (Prometheus'
# rule of thumb for rate) and lags 60 s.
DEMAND_RATE_WINDOW = "2m"
DEFAULT_DEMAND_QUERY = (
    'sum(rate(container_cpu_usage_seconds_total{{namespace="{namespace}",'
    'pod=~"{pods}",container!=""}}[' + DEMAND_RATE_WINDOW + ']))'
)
# Ready pods and CPU requests need kube-state-metrics: cAdvisor knows running containers, not
# the Ready condition, and its cpu shares are the request only on cgroup v1 (on cgroup v2 the
# kubelet's weight conversion loses up to a fifth of a 100m request). Without kube-state-metrics
# these return nothing, the trainer reports it with READINGS_HINT, and the adapter counts ready
# pods from the Kubernetes API (its pod watch); the request then has to be configured.
DEFAULT_READY_PODS_QUERY = (
    'sum(kube_pod_status_ready{{namespace="{namespace}",pod=~"{pods}",condition="true"}})'
)
# Per pod first: a pod's request is its containers' summed (a sidecar's too), as the HPA sums them.
DEFAULT_CPU_REQUEST_QUERY = (
    'avg(sum by (pod) (kube_pod_container_resource_requests{{namespace="{namespace}",pod=~"{pods}",'
    'resource="cpu"}}))'
)
READINGS_HINT = {
    "ready_pods": " (kube-state-metrics' kube_pod_status_ready is not scraped? The adapter then counts ready pods "
                  "from the Kubernetes API (foresight serve --ready-pods watch); or set capacity.ready_pods_query)",
    "cpu_request": " (kube-state-metrics' kube_pod_container_resource_requests is not scraped? The adapter then "
                   "reads the pods' requests from the Kubernetes API (foresight serve --ready-pods watch); the serving "
                   "policy is chosen without a pod count until capacity.cpu_request_cores, or "
                   "spec.metrics[].cpuRequestCores of the PredictiveAutoscaler, is set)",
}


def default_query(template: str, namespace: str, name: str, kind: str) -> str:
    return template.format(namespace=namespace, pods=pod_regex(kind, name))


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "Function", "Node")
WORKLOAD_KEYS = ("namespace", "name", "kind", "labels", "demand_query", "capacity", "metrics", "serving")


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
    metrics: tuple[PredictedMetric, ...] = ()  # declared demands besides CPU
    serving: ServingSettings | None = None  # None: the config's top-level serving section

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
        return self.capacity.ready_pods_query or default_query(
            DEFAULT_READY_PODS_QUERY, self.namespace, self.name, self.kind)

    def cpu_request_query(self) -> str | None:
        if self.capacity.cpu_request_cores is not None:
            return None
        return self.capacity.cpu_request_query or default_query(
            DEFAULT_CPU_REQUEST_QUERY, self.namespace, self.name, self.kind)

    def series_meta(self) -> dict[str, Any]:
        """Static meta published with this series' forecasts besides the capacity readings."""
        return {}

    def metric_series(self) -> tuple["MetricSeries", ...]:
        return tuple(MetricSeries(self, m) for m in self.metrics)


@dataclass(frozen=True)
class MetricSeries:
    """One declared metric of a workload as the trainer pulls and fits it: the same interface
    as a WorkloadConfig (series id, query, capacity readings, labels), with the metric's own
    query and capacity. Its ready pods are the workload's."""

    workload: WorkloadConfig
    metric: PredictedMetric

    @property
    def series_id(self) -> str:
        return metric_series_id(self.workload.series_id, self.metric.name)

    @property
    def namespace(self) -> str:
        return self.workload.namespace

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def kind(self) -> str:
        return self.workload.kind

    @property
    def labels(self) -> Mapping[str, str]:
        return self.workload.labels

    @property
    def demand_query(self) -> str:
        return self.metric.query

    @property
    def capacity(self) -> CapacityConfig:
        c = self.workload.capacity
        return CapacityConfig(ready_pods=c.ready_pods, ready_pods_query=c.ready_pods_query)

    @property
    def serving(self) -> ServingSettings | None:
        return self.workload.serving

    def all_labels(self) -> dict[str, str]:
        return self.workload.all_labels()

    def ready_pods_query(self) -> str | None:
        return self.workload.ready_pods_query()

    def cpu_request_query(self) -> str | None:
        return None  # the capacity is the declared capacity_per_replica

    def series_meta(self) -> dict[str, Any]:
        return {"metric": self.metric.name, "capacity_per_replica": self.metric.capacity_per_replica}


# --- parsing -------------------------------------------------------------------------------


def parse_serving(c: _Checker, raw: Any, quantiles: tuple[float, ...], path: str = "serving",
                  base: ServingSettings | None = None) -> ServingSettings:
    """A ``serving:`` section; keys it does not give come from ``base`` (a workload's override
    of the top-level section), else the defaults. Types are checked here, ranges by
    ServingSettings.problems, every problem under ``path``."""
    from dataclasses import replace

    from core.store import quantile_key

    keys = {f.name for f in fields(ServingSettings)}
    if isinstance(raw, Mapping) and "violation_cost_pods" in raw:
        c.add(f"{path}.violation_cost_pods", "was replaced by violation_worth_minutes, the same trade-off in minutes of "
              "the whole workload (pod-minutes / your workload's typical pods; e.g. 300 at 10 pods is 30), or state an "
              "SLO with slo_minutes_per_day; remove this key")
        raw = {k: v for k, v in raw.items() if k != "violation_cost_pods"}
    d = c.mapping(raw, path, {k: "" for k in keys})
    kw: dict[str, Any] = {}
    for k in ("violation_worth_minutes", "slo_minutes_per_day", "cost_ceiling", "target_value", "slo_utilization",
              "history_days", "model_margin"):
        if k in d:
            kw[k] = c.typed(d, k, path, (int, float), getattr(base or ServingSettings, k))
    if "peak_gap_states" in d:
        kw["peak_gap_states"] = c.typed(d, "peak_gap_states", path, (int,), getattr(base or ServingSettings, "peak_gap_states"))
    if "allow_below_observed" in d:
        kw["allow_below_observed"] = c.typed(d, "allow_below_observed", path, (bool,), False)
    for k, kind in (("quantiles", str), ("sources", str), ("headrooms", (int, float)), ("holds", int)):
        if k in d:
            v = d[k]
            if not isinstance(v, list) or not all(isinstance(x, kind) and not isinstance(x, bool) for x in v):
                what = {str: "strings", int: "whole numbers of samples"}.get(kind, "numbers")
                c.add(f"{path}.{k}", f"must be a list of {what}, got {v!r}")
            else:
                kw[k] = tuple(v)
    settings = replace(base or ServingSettings(), **kw)
    published = [quantile_key(q) for q in quantiles]
    # a problem the inherited section already has is reported once, at that section's path
    inherited = {p.partition(".")[2] for p in base.problems("serving", published)} if base is not None else set()
    for p in settings.problems(path, published=published):
        if p[len(path) + 1:] in inherited:
            continue
        at, _, msg = p.partition(": ")
        c.add(at, msg)
    return settings


def _metrics(c: _Checker, raw: Any, p: str) -> tuple[PredictedMetric, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        c.add(f"{p}.metrics", f"must be a list of predicted metrics (name, query, capacity_per_replica), got {raw!r}")
        return ()
    out: list[PredictedMetric] = []
    seen: dict[str, int] = {}
    for j, m in enumerate(raw):
        mp = f"{p}.metrics[{j}]"
        md = c.mapping(m, mp, {"name": "", "query": "", "capacity_per_replica": ""})
        if m is not None and not isinstance(m, dict):
            continue
        name = c.typed(md, "name", mp, (str,), "", required=True, hint=" (e.g. rps: served as predicted_rps_ratio)",
                       check=metric_name_problem)
        query = c.typed(md, "query", mp, (str,), "", required=True, hint=": the PromQL of the demand now")
        if isinstance(md.get("query"), str) and not md["query"].strip():
            c.add(f"{mp}.query", "must not be empty")
        cap = c.typed(md, "capacity_per_replica", mp, (int, float), None, required=True, check=_positive,
                      hint=": the demand one ready replica absorbs at 100 % (same unit as the query)")
        if name and name in seen:
            c.add(f"{mp}.name", f"{name!r} is declared twice (also {p}.metrics[{seen[name]}])")
        elif name:
            seen[name] = j
        if name and query and cap is not None:
            out.append(PredictedMetric(name, query, float(cap)))
    return tuple(out)


def parse_workloads(c: _Checker, raw: Any, serving: ServingSettings, quantiles: tuple[float, ...]) -> list[WorkloadConfig]:
    workloads: list[WorkloadConfig] = []
    if raw is None:
        c.add("workloads", "is required: a list of workloads (namespace, name)")
        return workloads
    if not isinstance(raw, list):
        c.add("workloads", f"must be a list, got {type(raw).__name__}")
        return workloads
    seen: set[str] = set()
    for i, w in enumerate(raw):
        p = f"workloads[{i}]"
        wd = c.mapping(w, p, {k: "" for k in WORKLOAD_KEYS})
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
        capacity = _capacity(c, wd.get("capacity"), f"{p}.capacity")
        own = parse_serving(c, wd["serving"], quantiles, f"{p}.serving", serving) if wd.get("serving") is not None else None
        sid = f"{ns}/{name}"
        if ns and name:
            if sid in seen:
                c.add(p, f"workload {sid} is listed twice")
            seen.add(sid)
        workloads.append(WorkloadConfig(
            namespace=ns, name=name, kind=kind, labels=dict(labels),
            demand_query=dq or default_query(DEFAULT_DEMAND_QUERY, ns, name, kind),
            capacity=capacity, metrics=_metrics(c, wd.get("metrics"), p), serving=own,
        ))
    return workloads


def _capacity(c: _Checker, raw: Any, cp: str) -> CapacityConfig:
    cap = c.mapping(raw, cp, {k: "" for k in ("cpu_request_cores", "cpu_request_query", "ready_pods", "ready_pods_query")})
    cores = c.typed(cap, "cpu_request_cores", cp, (int, float), None, check=_positive)
    capacity = CapacityConfig(
        cpu_request_cores=float(cores) if cores is not None else None,
        cpu_request_query=c.typed(cap, "cpu_request_query", cp, (str,), None),
        ready_pods=c.typed(cap, "ready_pods", cp, (int,), None, check=_non_negative),
        ready_pods_query=c.typed(cap, "ready_pods_query", cp, (str,), None),
    )
    if capacity.cpu_request_cores is not None and capacity.cpu_request_query:
        c.add(cp, "give cpu_request_cores or cpu_request_query, not both")
    if capacity.ready_pods is not None and capacity.ready_pods_query:
        c.add(cp, "give ready_pods or ready_pods_query, not both")
    return capacity
