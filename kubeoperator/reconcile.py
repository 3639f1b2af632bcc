"""One PredictiveAutoscaler -> its HPA, its status and its Events (pure: no API calls, no clock).

``reconcile_autoscaler(obj, forecasts, now, ...)`` takes the object as read (its previous status
included), the latest forecast of each of its series and the time, and returns what the runner
writes. The served value is computed by forecaster/served.py, the same code that answers the HPA.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from core.store import Forecast
from forecaster.served import (
    MetricSettings,
    NoData,
    ServedValue,
    observed_now,
    served_cores,
    served_demand,
    served_demand_ratio,
    served_load_ratio,
)
from kubeoperator.checks import SpecError
from kubeoperator.observe import Capacity, Shadow, hpa_spec, observe_status, shadow_sync, slo_utilization
from kubeoperator.scaledobject import KedaTarget, desired_scaled_object, keda_hpa_name
from kubeoperator.spec import AutoscalerSpec, MetricSpec, parse_autoscaler
from replay.hpa import HPA

MANAGED_BY = {"app.kubernetes.io/managed-by": "foresight-operator"}


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class AutoscalerActions:
    hpa: dict | None  # None in Observe mode and with scaler KEDA: no HPA, and one the operator created goes
    status: dict
    events: list[Event] = field(default_factory=list)
    scaled_object: dict | None = None  # scaler KEDA in Act mode: KEDA's ScaledObject in place of the HPA
    delete_scaled_object: bool = False  # the last sync owned one (scaler KEDA, Act) and this one does not


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def quantity(v: float) -> str:
    """A Kubernetes quantity in milli-units (0.7 -> "700m")."""
    return f"{int(round(v * 1000))}m"


# The shipped HPA's behaviour (manifests/hpa-example.yaml, which the replay measures): scale up
# at once; scale down after a short stabilization, since the forecast raises the metric again
# before a returning load. An autoscaler without ``spec.behavior`` gets this, not Kubernetes'
# 5-minute default, so that what it runs is what bench/replay_all.py measured.
SHIPPED_BEHAVIOR: dict[str, Any] = {
    "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]},
    "scaleDown": {"stabilizationWindowSeconds": 30, "selectPolicy": "Max", "policies": [
        {"type": "Percent", "value": 100, "periodSeconds": 15}]},
}


def desired_hpa(pa: AutoscalerSpec) -> dict:
    """The HPA as manifests/hpa-example.yaml writes it: the reactive CPU floor, then one
    External metric per predicted series at the serving policy's target Value."""
    metrics: list[dict] = []
    if pa.floor_enabled:
        metrics.append({"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": pa.floor_utilization}}})
    for m in pa.metrics:  # the CPU load ratio, or predicted_<name>_ratio of a Demand metric
        metrics.append({"type": "External", "external": {
            "metric": {"name": m.external_metric, "selector": {"matchLabels": {"workload": pa.target_name}}},
            "target": {"type": "Value", "value": quantity(pa.target_value)}}})
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": pa.target_api_version, "kind": pa.target_kind, "name": pa.target_name},
        "minReplicas": pa.min_replicas, "maxReplicas": pa.max_replicas, "metrics": metrics,
    }
    spec["behavior"] = copy.deepcopy(dict(pa.behavior) if pa.behavior else SHIPPED_BEHAVIOR)
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": pa.name, "namespace": pa.namespace, "labels": dict(MANAGED_BY),
                         "ownerReferences": [pa.owner_reference]},
            "spec": spec}


def served_value(pa: AutoscalerSpec, m: MetricSpec, fc: Forecast | None, now: float, pods,
                 settings: MetricSettings) -> ServedValue:
    """The value the adapter serves for one metric of a workload with ``pods`` ready pods
    (None: not known, then the CPU metric shows the demand in cores). Raises NoData."""
    meta = fc.meta if fc is not None else {}
    if m.type == "Demand":  # the adapter's own rule for predicted_<name>_ratio
        cap = meta.get("capacity_per_replica", m.capacity_per_replica)
        return (served_demand_ratio(m.name, fc, now, pods, cap, settings) if pods is not None
                else served_demand(m.name, fc, now, settings))
    if pods is not None and (request := meta.get("cpu_request_cores", m.cpu_request_cores)):
        return served_load_ratio(fc, now, pods, request, settings)
    if pods is not None:
        raise NoData(f"the CPU request of {pa.workload_series_id} is unknown (spec.metrics[].cpuRequestCores)")
    return served_cores(fc, now, settings)  # no ready-pod count yet: the demand is what can be shown


def metric_status(pa: AutoscalerSpec, m: MetricSpec, fc: Forecast | None, now: float, settings: MetricSettings) -> dict:
    """What the HPA receives for one metric now, and from what."""
    out: dict[str, Any] = {"name": m.name, "series": pa.series_id(m), "externalMetric": m.external_metric}
    if fc is not None:
        out["model"] = fc.model or "unknown"
        if fc.backtest_error is not None and math.isfinite(fc.backtest_error):
            out["backtestError"] = round(float(fc.backtest_error), 4)
        out["forecastAgeSeconds"] = max(0, int(now - fc.generated_at))
    pods = (fc.meta if fc is not None else {}).get("ready_pods")
    try:
        if (m.type == "Resource" and pods is not None and fc is not None
                and not fc.meta.get("cpu_request_cores", m.cpu_request_cores)):
            pods = None  # shown in cores, as before a request is known
        sv = served_value(pa, m, fc, now, pods, settings)
    except NoData as exc:
        out.update(servedSource="none", servedReason=str(exc))
        return out
    out.update(servedValue=f"{sv.value:.3f}", servedSource=sv.source, servedReason=sv.reason)
    return out


def condition(prev: Sequence[Mapping], type_: str, status: str, reason: str, message: str, now: float,
               generation: int) -> dict:
    old = next((c for c in prev if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else iso(now)
    return {"type": type_, "status": status, "reason": reason, "message": message[:1024],
            "lastTransitionTime": since, "observedGeneration": generation}


def prev_conditions(obj: Any) -> list[dict]:
    """The conditions of the object's last status, whatever shape a stranger left it in."""
    st = obj.get("status") if isinstance(obj, Mapping) else None
    conds = st.get("conditions") if isinstance(st, Mapping) else None
    return [c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else []


def refused_object(obj: Any, err: SpecError, now: float,
                   types: Sequence[str] = ("Ready", "Degraded")) -> tuple[dict, list[Event]]:
    """The status and Events of an object whose spec is refused (it is not reconciled: no
    trainer workload or pool, and an HPA an earlier generation made stays as it was). Its
    conditions give every problem with its field path; a Warning Event tells it once per
    generation and reason."""
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    gen = md.get("generation") if isinstance(md, Mapping) else None
    gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else 0
    prev = prev_conditions(obj)
    msg = "; ".join(err.problems)
    status = {"observedGeneration": gen, "conditions": [
        condition(prev, t, "False" if t == "Ready" else "True", err.reason, msg, now, gen) for t in types]}
    return status, invalid_event(prev, err.reason, msg, gen)


def invalid_event(prev: Sequence[Mapping], reason: str, message: str, generation: int) -> list[Event]:
    """A Warning Event about an invalid object, unless its Ready condition already says the
    same for this generation (an Event per pass would flood the namespace)."""
    was = next((c for c in prev if c.get("type") == "Ready"), {})
    told = (was.get("reason") == reason and was.get("observedGeneration") == generation
            and was.get("message") == message[:1024])
    return [] if told else [Event("Warning", reason, message[:1024])]


def _conditions(pa: AutoscalerSpec, per_metric: list[dict], problems: Sequence[str], warnings: Sequence[str],
                store_error: str | None, prev: Sequence[Mapping], now: float) -> list[dict]:
    none = [s for s in per_metric if s.get("servedSource") == "none"]
    fallback = [s for s in per_metric if s.get("servedSource") == "observed"]
    if problems:
        ready = ("False", "InvalidWorkload", "; ".join(problems))
    elif store_error:
        ready = ("False", "StoreUnavailable", store_error)
    elif none:
        ready = ("False", "NoForecastYet", "; ".join(f"{s['name']}: {s['servedReason']}" for s in none))
    elif pa.mode == "Observe":
        ready = ("True", "Observing", f"no HPA: {len(per_metric)} predicted metric(s) computed, the workload's own "
                 "scaling left alone (status.observe)")
    elif pa.scaler == "KEDA":
        ready = ("True", "Serving", f"the ScaledObject {pa.name} (KEDA) receives {len(per_metric)} predicted "
                 "metric(s) from foresight's KEDA scaler")
    else:
        ready = ("True", "Serving", f"the HPA {pa.name} receives {len(per_metric)} predicted metric(s)")
    if fallback:
        degraded = ("True", "Fallback", "; ".join(f"{s['name']}: {s['servedReason']}" for s in fallback))
    elif warnings:
        degraded = ("True", "SpecNotApplied", "; ".join(warnings))
    elif ready[0] == "False":
        degraded = ("True", ready[1], ready[2])
    else:
        degraded = ("False", "ForecastServed", "every metric is served from its forecast")
    return [condition(prev, "Ready", *ready, now, pa.generation),
            condition(prev, "Degraded", *degraded, now, pa.generation)]


def _events(prev_metrics: Sequence[Mapping], per_metric: list[dict]) -> list[Event]:
    """Events on changes since the last status: the model, and fallbacks and recoveries."""
    before = {m.get("name"): m for m in prev_metrics}
    out: list[Event] = []
    for s in per_metric:
        old = before.get(s["name"])
        if old is None:
            continue
        if old.get("model") and s.get("model") and old["model"] != s["model"]:
            err = f" (backtest error {s['backtestError']:.3g})" if "backtestError" in s else ""
            out.append(Event("Normal", "ModelChanged", f"{s['name']}: model {old['model']} -> {s['model']}{err}"))
        was, now_src = old.get("servedSource"), s.get("servedSource")
        if was == "forecast" and now_src in ("observed", "none"):
            out.append(Event("Warning", "Fallback", f"{s['name']}: {s.get('servedReason', '')}"))
        elif was in ("observed", "none") and now_src == "forecast":
            out.append(Event("Normal", "ForecastServed", f"{s['name']}: served from its forecast again"))
    return out


def reconcile_autoscaler(
    obj: Mapping[str, Any],
    forecasts: Mapping[str, Forecast | None],
    now: float,
    *,
    problems: Sequence[str] = (),
    warnings: Sequence[str] = (),
    store_error: str | None = None,
    settings: MetricSettings = MetricSettings(),
    shadows: dict | None = None,
    capacity: Capacity | None = None,
    keda: KedaTarget = KedaTarget(),
) -> AutoscalerActions:
    """``shadows``: the runner's Observe-mode state (key -> Shadow), updated here;
    ``capacity``: the scale target's replicas now (Observe mode); ``keda``: where a ScaledObject
    (scaler KEDA) finds foresight's scaler."""
    pa = parse_autoscaler(obj)
    prev = obj.get("status") or {}
    fcs = {} if store_error else forecasts
    per_metric = [metric_status(pa, m, fcs.get(pa.series_id(m)), now, settings) for m in pa.metrics]
    keda_acts = pa.mode == "Act" and pa.scaler == "KEDA"
    status = _status(pa, per_metric, fcs, keda_acts)
    status["conditions"] = _conditions(pa, per_metric, problems, warnings, store_error, prev.get("conditions") or [], now)
    events = _refused_event(pa, prev, problems) + _events(prev.get("metrics") or [], per_metric) + _change_events(pa, prev)
    hpa = desired_hpa(pa)
    # the ScaledObject of an earlier sync goes when this one does not act through KEDA
    drop_keda = prev.get("scaler") == "KEDA" and prev.get("scaledObjectName") is not None and not keda_acts
    if pa.mode == "Act":
        status["observe"] = None
        if shadows is not None:  # a later switch to Observe starts from the replicas then
            shadows.pop((pa.namespace, pa.name), None)
        if keda_acts:
            so = desired_scaled_object(pa, keda, quantity(pa.target_value), hpa["spec"]["behavior"], MANAGED_BY)
            return AutoscalerActions(hpa=None, status=status, events=events, scaled_object=so)
        return AutoscalerActions(hpa=hpa, status=status, events=events, delete_scaled_object=drop_keda)
    status["observe"] = observe = _observe(pa, hpa, fcs, prev.get("observe"), shadows if shadows is not None else {},
                                           capacity or Capacity(None, None), now, settings)
    events += _would_scale_events(prev, observe)
    return AutoscalerActions(hpa=None, status=status, events=events, delete_scaled_object=drop_keda)


def _status(pa: AutoscalerSpec, per_metric: list[dict], forecasts: Mapping[str, Forecast | None],
            keda_acts: bool) -> dict[str, Any]:
    """The status without its conditions: per metric, and the first metric's at the top level."""
    status: dict[str, Any] = {"observedGeneration": pa.generation, "mode": pa.mode, "metrics": per_metric}
    # None: removed by the merge patch. With KEDA the HPA is KEDA's, named after the ScaledObject.
    status["hpaName"] = (keda_hpa_name(pa) if keda_acts else pa.name) if pa.mode == "Act" else None
    status["scaler"] = pa.scaler
    status["scaledObjectName"] = pa.name if keda_acts else None
    first = per_metric[0] if per_metric else {}
    for k in ("model", "backtestError", "servedValue", "servedSource", "servedReason", "forecastAgeSeconds"):
        if k in first:
            status[k] = first[k]
    fc = forecasts.get(pa.series_id(pa.metrics[0])) if pa.metrics else None
    if fc is not None:
        status["forecastGeneratedAt"] = iso(fc.generated_at)
    return status


def _refused_event(pa: AutoscalerSpec, prev: Mapping[str, Any], problems: Sequence[str]) -> list[Event]:
    """A refused spec, once per generation: the condition keeps saying it, an Event tells whoever applied it."""
    was: Mapping[str, Any] = next((c for c in prev.get("conditions") or [] if c.get("type") == "Ready"), {})
    if problems and (was.get("reason") != "InvalidWorkload" or was.get("observedGeneration") != pa.generation):
        return [Event("Warning", "InvalidSpec", "; ".join(problems)[:1024])]
    return []


def _change_events(pa: AutoscalerSpec, prev: Mapping[str, Any]) -> list[Event]:
    """The mode or the scaler changed since the last sync."""
    out: list[Event] = []
    if prev.get("mode") and prev.get("mode") != pa.mode:
        what = "ScaledObject" if pa.scaler == "KEDA" else "HPA"
        out.append(Event("Normal", "ModeChanged", f"mode {prev['mode']} -> {pa.mode}" + (
            f": the {what} is deleted, the workload's own scaling is left alone" if pa.mode == "Observe"
            else f": the {what} is created from the same forecasts (no retrain)")))
    if prev.get("scaler") and prev.get("scaler") != pa.scaler:
        out.append(Event("Normal", "ScalerChanged", f"scaler {prev['scaler']} -> {pa.scaler}" + (
            ": a KEDA ScaledObject replaces the HPA" if pa.scaler == "KEDA" else ": an HPA replaces the ScaledObject")))
    return out


def _would_scale_events(prev: Mapping[str, Any], observe: Mapping[str, Any]) -> list[Event]:
    """Observe mode: one Event when the replicas the predictive HPA would ask for change."""
    before = (prev.get("observe") or {}).get("wouldHaveReplicas")
    if before == observe["wouldHaveReplicas"] and prev.get("mode") == "Observe":
        return []
    actual = observe.get("actualReplicas", "unknown")
    need = f", needs {observe['neededReplicas']}" if "neededReplicas" in observe else ""
    under = observe["underCapacityMinutes"]
    return [Event("Normal", "WouldScale", f"the predictive HPA would ask for {observe['wouldHaveReplicas']} "
                  f"replicas (was {before if before is not None else 'not observing'}); the workload has "
                  f"{actual}{need}; under capacity: would-have {under['wouldHave']} min, actual {under['actual']} min")]


def _observe(pa: AutoscalerSpec, hpa: Mapping, forecasts, prev_observe, shadows: dict, cap: Capacity, now: float,
             settings: MetricSettings) -> dict:
    spec = hpa_spec(pa, hpa["spec"]["behavior"])
    key = (pa.namespace, pa.name)
    shadow = shadows.get(key)
    if shadow is None or shadow.key != spec:
        seed = (prev_observe or {}).get("wouldHaveReplicas") or cap.replicas or pa.min_replicas
        shadow = shadows[key] = Shadow(hpa=HPA(spec), replicas=int(seed), key=spec)
    would, why = shadow_sync(shadow, pa, forecasts, now,
                             lambda p, m, fc, t, pods: served_value(p, m, fc, t, pods, settings), settings)
    cpu = pa.resource_metric
    fc = forecasts.get(pa.series_id(cpu)) if cpu is not None else None
    request = ((fc.meta.get("cpu_request_cores") if fc is not None else None)
               or (cpu.cpu_request_cores if cpu is not None else None))
    return observe_status(prev_observe, would, why, cap, observed_now(fc), request, slo_utilization(pa), now, iso)
