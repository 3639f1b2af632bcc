"""Observe mode: what the predictive HPA would do, beside what the workload does.

A shadow HPA per autoscaler runs the HPA v2 algorithm the replay models (``replay.hpa``: the
same proposals, stabilization and rate limits, seeded the way the controller seeds itself) on
the values the adapter would serve (``forecaster.served``, the production rule) *if the workload
had the shadow's replicas*: the served ratio is divided by the pods the HPA counts, so a
shadow at 6 replicas gets the ratio the adapter would serve to a workload at 6. Its replicas
are what Act mode would have set; nothing is written to the workload.

Under capacity: a sync counts as under capacity when the observed demand exceeds
``replicas x CPU request x sloUtilization`` (forecaster.timing's SLO utilization unless the
autoscaler's serving overrides it); the minutes between syncs are summed for the would-have
and the actual replicas separately.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from forecaster.served import MetricSettings, NoData, observed_now
from core.store import Forecast
from forecaster.timing import TIMING
from kubeoperator.spec import AutoscalerSpec
from replay.hpa import (HPA, HPASpec, ScalingPolicy, ScalingRules, external_value_proposal, milli,
                        resource_utilization_proposal)

RECENT_POINTS = 240  # the status' line: an hour at a 15-s resync
# A gap longer than this between two syncs (the operator was down) is not counted as minutes
# of either line: nothing was observed meanwhile.
MAX_SYNC_GAP_SECONDS = 120.0


def _rules(d: Mapping[str, Any] | None, default: ScalingRules) -> ScalingRules:
    if not d:
        return default
    pols = d.get("policies")
    return ScalingRules(
        stabilization_window_seconds=int(d.get("stabilizationWindowSeconds", default.stabilization_window_seconds)),
        select_policy=d.get("selectPolicy", default.select_policy),
        policies=default.policies if pols is None else tuple(
            ScalingPolicy(p["type"], int(p["value"]), int(p["periodSeconds"])) for p in pols))


def hpa_spec(pa: AutoscalerSpec, behavior: Mapping[str, Any]) -> HPASpec:
    """The HPASpec of the HPA Act mode writes (``behavior``: the one desired_hpa writes)."""
    base = HPASpec()
    return HPASpec(min_replicas=pa.min_replicas, max_replicas=pa.max_replicas,
                   scale_up=_rules(behavior.get("scaleUp"), base.scale_up),
                   scale_down=_rules(behavior.get("scaleDown"), base.scale_down))


@dataclass
class Shadow:
    """One autoscaler's shadow HPA (in the operator's memory; reseeded from the status)."""

    hpa: HPA
    replicas: int
    key: object = ()  # the HPASpec it was built from: rebuilt when the spec changes
    last: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Capacity:
    """What the workload has now (read from its scale target)."""

    replicas: int | None  # spec.replicas
    ready: int | None  # status.readyReplicas


def needed_replicas(cores: float | None, request: float | None, slo_utilization: float) -> int | None:
    if cores is None or not request or request <= 0:
        return None
    return max(1, math.ceil(cores / (request * slo_utilization) - 1e-9))


def shadow_sync(
    shadow: Shadow,
    pa: AutoscalerSpec,
    forecasts: Mapping[str, Forecast | None],
    now: float,
    served_at,  # (pa, metric, fc, now, pods) -> ServedValue (kubeoperator.reconcile.served_value)
    settings: MetricSettings,
) -> tuple[int, str]:
    """One sync of the shadow HPA; returns (its replicas now, why)."""
    S = shadow.replicas
    proposals: list[int | None] = []
    notes: list[str] = []
    for m in pa.metrics:
        fc = forecasts.get(pa.series_id(m))
        try:
            sv = served_at(pa, m, fc, now, max(S, 1))
        except NoData as exc:
            proposals.append(None)
            notes.append(f"{m.name}: {exc}")
            continue
        proposals.append(external_value_proposal(shadow.hpa.spec, S, [sv.value], pa.target_value, max(S, 1)))
        notes.append(f"{m.name} {sv.value:.3f} ({sv.source})")
    cpu = pa.resource_metric
    if pa.floor_enabled and cpu is not None:  # the reactive CPU floor of the same HPA
        fc = forecasts.get(pa.series_id(cpu))
        cores = observed_now(fc)
        req = (fc.meta.get("cpu_request_cores") if fc is not None else None) or cpu.cpu_request_cores
        proposals.append(None if cores is None or not req else resource_utilization_proposal(
            shadow.hpa.spec, S, milli(cores), max(S, 1), milli(float(req)), pa.floor_utilization))
    res = shadow.hpa.sync(now, S, proposals or [None])
    shadow.replicas = res.desired
    return res.desired, "; ".join(notes) + f" -> {res.reason}"


def observe_status(
    prev: Mapping[str, Any] | None,
    would: int,
    why: str,
    actual: Capacity,
    cores: float | None,
    request: float | None,
    slo_utilization: float,
    now: float,
    iso,
) -> dict:
    """status.observe: this sync's counts and the minutes summed since observing started."""
    prev = dict(prev or {})
    under = dict(prev.get("underCapacityMinutes") or {"wouldHave": 0.0, "actual": 0.0})
    recent = list(prev.get("recent") or [])
    need = needed_replicas(cores, request, slo_utilization)
    last_t = recent[-1][0] if recent else None
    if need is not None and last_t is not None and 0 < now - last_t <= MAX_SYNC_GAP_SECONDS:
        minutes = (now - last_t) / 60.0
        if would < need:
            under["wouldHave"] = round(float(under.get("wouldHave", 0.0)) + minutes, 3)
        if actual.replicas is not None and actual.replicas < need:
            under["actual"] = round(float(under.get("actual", 0.0)) + minutes, 3)
    recent.append([round(now, 1), would, -1 if actual.replicas is None else actual.replicas])
    out: dict[str, Any] = {
        "wouldHaveReplicas": would, "reason": why[:1024], "since": prev.get("since") or iso(now),
        "lastSyncAt": iso(now), "underCapacityMinutes": under, "recent": recent[-RECENT_POINTS:],
    }
    if actual.replicas is not None:
        out["actualReplicas"] = actual.replicas
    if actual.ready is not None:
        out["readyReplicas"] = actual.ready
    if need is not None:
        out["neededReplicas"] = need
    if cores is not None:
        out["observedCores"] = round(cores, 4)
    return out


def slo_utilization(pa: AutoscalerSpec) -> float:
    return float(pa.serving.get("slo_utilization", TIMING.slo_utilization))
