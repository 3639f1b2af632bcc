"""PredictiveAutoscaler and WarmPool objects (plain dicts from the API server) -> frozen specs.

The CRD schema refuses most invalid objects; parsing checks every field it reads again
(kubeoperator.checks: SpecError with field paths), confines each Demand query to the object's
namespace, and fills defaults, so an object written before a schema change still reconciles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from forecaster.predicted import metric_series_id, served_names
from forecaster.timing import TIMING
from kubeoperator.checks import check_autoscaler, check_warmpool
from warmpool.policy import pool_id

GROUP = "foresight.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
LOAD_RATIO_METRIC = "predicted_cpu_load_ratio"

# spec.serving (camelCase, the CRD) -> forecaster.serving.ServingSettings field names
SERVING_FIELDS = {
    "violationWorthMinutes": "violation_worth_minutes", "sloMinutesPerDay": "slo_minutes_per_day",
    "costCeiling": "cost_ceiling", "quantiles": "quantiles", "sources": "sources",
    "headrooms": "headrooms", "targetValue": "target_value", "sloUtilization": "slo_utilization",
    "historyDays": "history_days", "allowBelowObserved": "allow_below_observed", "holds": "holds",
    "modelMargin": "model_margin", "peakGapStates": "peak_gap_states",
}


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: str  # Resource (CPU cores) | Demand (any PromQL)
    cpu_request_cores: float | None = None
    query: str | None = None
    capacity_per_replica: float | None = None

    @property
    def external_metric(self) -> str:
        """What the HPA asks the adapter for: the CPU load ratio, or ``predicted_<name>_ratio``."""
        return LOAD_RATIO_METRIC if self.type == "Resource" else served_names(self.name)[1]


@dataclass(frozen=True)
class AutoscalerSpec:
    namespace: str
    name: str
    uid: str
    generation: int
    target_api_version: str
    target_kind: str
    target_name: str
    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricSpec, ...]
    floor_enabled: bool = True
    floor_utilization: int = 70
    serving: Mapping[str, Any] = field(default_factory=dict)  # ServingSettings field names
    behavior: Mapping[str, Any] | None = None
    mode: str = "Act"  # Act | Observe; never part of what the trainer reads (a switch needs no retrain)
    scaler: str = "HPA"  # HPA | KEDA: what the operator owns in Act mode (kubeoperator/scaledobject.py for KEDA)

    @property
    def workload_series_id(self) -> str:
        """The trainer's workload: the target itself (its CPU series; Demand metrics are
        declared metrics of it)."""
        return f"{self.namespace}/{self.target_name}"

    def series_id(self, metric: MetricSpec) -> str:
        """The forecast series of one metric: the target's CPU series for Resource, and
        ``<ns>/<target>/<metric>`` for a Demand (forecaster.predicted)."""
        if metric.type == "Resource":
            return self.workload_series_id
        return metric_series_id(self.workload_series_id, metric.name)

    @property
    def resource_metric(self) -> MetricSpec | None:
        return next((m for m in self.metrics if m.type == "Resource"), None)

    @property
    def target_value(self) -> float:
        return float(self.serving.get("target_value", TIMING.hpa_target))

    @property
    def owner_reference(self) -> dict:
        return {"apiVersion": API_VERSION, "kind": "PredictiveAutoscaler", "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}


def parse_autoscaler(obj: Mapping[str, Any]) -> AutoscalerSpec:
    """Raises kubeoperator.checks.SpecError. A Demand metric's query is the confined one: only
    that reaches the trainer."""
    queries = check_autoscaler(obj)
    md, spec = obj["metadata"], obj.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    floor = spec.get("reactiveFloor") or {}
    metrics = tuple(
        MetricSpec(name=m["name"], type=_or(m, "type", "Resource"), cpu_request_cores=m.get("cpuRequestCores"),
                   query=queries.get(i), capacity_per_replica=m.get("capacityPerReplica"))
        for i, m in enumerate(spec.get("metrics") or ())
    )
    serving = {SERVING_FIELDS[k]: (tuple(v) if isinstance(v, list) else v)
               for k, v in (spec.get("serving") or {}).items() if k in SERVING_FIELDS and v is not None}
    return AutoscalerSpec(
        namespace=md["namespace"], name=md["name"], uid=_or(md, "uid", ""), generation=int(_or(md, "generation", 0)),
        target_api_version=_or(ref, "apiVersion", "apps/v1"), target_kind=_or(ref, "kind", "Deployment"),
        target_name=_or(ref, "name", ""), min_replicas=int(_or(spec, "minReplicas", 1)),
        max_replicas=int(spec["maxReplicas"]), metrics=metrics,
        floor_enabled=bool(_or(floor, "enabled", True)), floor_utilization=int(_or(floor, "averageUtilization", 70)),
        serving=serving, behavior=_no_nulls(spec.get("behavior")), mode=spec.get("mode") or "Act",
        scaler=_or(spec, "scaler", "HPA"),
    )


def _no_nulls(v: Any) -> Any:
    """``v`` without null members: a null is an absent field (the HPA's default applies)."""
    if isinstance(v, Mapping):
        return {k: _no_nulls(x) for k, x in v.items() if x is not None}
    return [_no_nulls(x) for x in v] if isinstance(v, list) else v


def _or(d: Mapping[str, Any], key: str, default: Any) -> Any:
    """``d[key]``, or ``default`` when absent or null (a merge patch's null removes a field)."""
    v = d.get(key)
    return default if v is None else v


@dataclass(frozen=True)
class WarmPoolSpec:
    namespace: str
    name: str
    generation: int
    body: Mapping[str, Any]  # spec as written (camelCase)

    @property
    def pool_name(self) -> str:
        """The pool's name in the controller's policy (pool names are one namespace there):
        ``<namespace>.<name>``, which no other object's can equal (warmpool.policy.pool_id)."""
        return pool_id(self.namespace, self.name)

    def to_policy_pool(self) -> dict:
        """The pool as warmpool.policy reads it (snake_case keys)."""
        s = self.body
        out: dict[str, Any] = {
            "name": self.pool_name,
            "workload": {"namespace": self.namespace, "name": s["workload"]},
            "series": s.get("series") or f"{self.namespace}/{s['workload']}",
        }
        plain = {"quantile": "quantile", "runtimeClass": "runtime_class", "backend": "backend", "minWarm": "min_warm",
                 "maxWarm": "max_warm", "capacityPerContainer": "capacity_per_container", "leadSeconds": "lead_seconds"}
        out.update({snake: s[camel] for camel, snake in plain.items() if camel in s})
        if s.get("template") is not None:
            out["template"] = dict(s["template"])
        if s.get("idleTTL") is not None:
            t = s["idleTTL"]
            out["idle_ttl"] = {k2: t[k1] for k1, k2 in (("initialSeconds", "initial_seconds"), ("decay", "decay"),
                                                       ("floorSeconds", "floor_seconds")) if k1 in t}
        if s.get("idleModel") is not None:
            m = s["idleModel"]
            keys = (("enabled", "enabled"), ("binSeconds", "bin_seconds"), ("priorScale", "prior_scale"),
                    ("priorPower", "prior_power"), ("priorWeight", "prior_weight"),
                    ("previousGapWeight", "previous_gap_weight"), ("holdOnTTL", "hold_on_ttl"))
            out["idle_model"] = {k2: m[k1] for k1, k2 in keys if k1 in m}
        if s.get("demand") is not None:
            out["demand"] = s["demand"]
        if s.get("requestRate") is not None:
            r = s["requestRate"]
            out["request_rate"] = {k2: r[k1] for k1, k2 in (("series", "series"),
                                                            ("concurrencyPerContainer", "concurrency_per_container")) if k1 in r}
        return out


def parse_warmpool(obj: Mapping[str, Any]) -> WarmPoolSpec:
    """Raises kubeoperator.checks.SpecError (a series of another namespace among its reasons)."""
    check_warmpool(obj)
    md = obj["metadata"]
    return WarmPoolSpec(namespace=md["namespace"], name=md["name"], generation=int(_or(md, "generation", 0)),
                        body=obj.get("spec") or {})
