"""Forecast -> the value the HPA receives. PURE: no web, no store, no clock.

This is the one place that decides what we publish: the adapter answers the HPA with it, the
warm pool sizes its pools by it (over its own, longer window), the operator's Observe mode and
the replay (replay/) run it, and the trainer's policy chooser scores with its lead-window
function (``forecaster.leadwindow``) at the same timing (``forecaster.timing``):

1. predicted demand = max of the configured quantile over the lead window
   [now, now + lead] (lead = pod start-up + one HPA sync): scaling must be decided a lead
   time before the demand arrives, and the max keeps the peak of the window from being
   averaged away. The forecast curve is piecewise linear through (origin, last observed)
   and the published points. The window is in the load's time: a series whose query reads a
   range window runs half that window behind the load (``demand_lag_seconds`` in the
   forecast's meta, ``forecaster.timing.demand_lag_seconds``), so the window is read that much
   later on the series' clock.
2. served = m x max(predicted, observed floor), with the workload's serving policy (chosen by
   the trainer, published with the forecast: ``forecaster.serving``): which quantile (or a flat
   persistence path) is the prediction, the hold k (the floor is the max of the observed
   demand now and the last k published samples; observed now is the adapter's direct reading
   of the workload's demand when it has a fresh one, what a reactive HPA sees, else the last
   published sample) and the headroom m >= 1: the policy's one
   headroom, or the headroom of the state the forecast's observed samples are in (how far the
   latest sits below their peak, ``forecaster.servingscore.peak_gap``). A bad forecast may delay a
   scale-down, it never causes an under-scale (the floor Crane and PredictKube use as well).
   A forecast without a policy is served with ``MetricSettings.quantile`` and m = 1.
3. A series on the fallback serves m_fallback x its observed floor (the policy's persistence
   headroom and hold):
   a reactive HPA with this workload's own headroom. A stale forecast (older than
   ``max_forecast_age_seconds``: the trainer is not keeping up) serves the plain observed
   value: the HPA does not check timestamps, and an old policy is no better than an old
   forecast. No forecast and nothing observed: ``NoData`` (the adapter answers 503; an
   empty list would be an error for the HPA anyway).

Every served value is finite and >= 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.store import Forecast
from forecaster.leadwindow import window_max_one
from forecaster.serving import ServingPolicy
from forecaster.servingpolicy import BelowObserved
from forecaster.servingscore import peak_gap
from forecaster.timing import TIMING

__all__ = [
    "MetricSettings",
    "NoData",
    "ServedValue",
    "observed_now",
    "demand_lag",
    "predicted_demand",
    "served_cores",
    "served_load_ratio",
]


class NoData(LookupError):
    """Nothing can be served for this workload (no forecast, nothing observed, no capacity)."""


@dataclass(frozen=True)
class MetricSettings:
    """How a forecast becomes a served value.

    lead_seconds: how far ahead the HPA must act: pod start-up plus one HPA sync (15 s).
    quantile: which published quantile to use (``"p90"``, ``"p50"``, ... or ``"mean"``).
    max_forecast_age_seconds: older forecasts are stale and never served.
    observed_floor: serve max(predicted, observed) rather than the prediction alone.
    """

    lead_seconds: float = TIMING.lead_seconds
    quantile: str = "p90"
    max_forecast_age_seconds: float = TIMING.max_forecast_age_seconds
    observed_floor: bool = True
    # the fallback value must itself be recent: an observation older than this is not served
    max_observed_age_seconds: float = TIMING.max_observed_age_seconds

    def __post_init__(self) -> None:
        problems = []
        if not (isinstance(self.lead_seconds, (int, float)) and math.isfinite(self.lead_seconds) and self.lead_seconds >= 0):
            problems.append(f"lead_seconds: {self.lead_seconds!r} must be a finite number >= 0")
        if not (
            isinstance(self.max_forecast_age_seconds, (int, float))
            and math.isfinite(self.max_forecast_age_seconds)
            and self.max_forecast_age_seconds > 0
        ):
            problems.append(
                f"max_forecast_age_seconds: {self.max_forecast_age_seconds!r} must be a finite number > 0"
            )
        if not (
            isinstance(self.max_observed_age_seconds, (int, float))
            and self.max_observed_age_seconds > 0
        ):
            problems.append(f"max_observed_age_seconds: {self.max_observed_age_seconds!r} must be a number > 0")
        if not isinstance(self.quantile, str) or not (self.quantile == "mean" or self.quantile.startswith("p")):
            problems.append(f"quantile: {self.quantile!r} must be 'mean' or a key like 'p90'")
        if problems:
            raise ValueError("invalid metric settings: " + "; ".join(problems))


@dataclass(frozen=True)
class ServedValue:
    value: float  # finite, >= 0, what the HPA receives
    source: str  # "forecast" | "observed"
    reason: str  # why, for people (dashboard, REST, logs)
    predicted: float | None  # predicted demand (cores) over the lead window
    observed: float | None  # observed demand (cores)
    headroom: float = 1.0  # the policy's multiplier applied to max(predicted, observed)


def _finite_non_negative(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f) or f < 0:
        return None
    return f


def observed_now(fc: Forecast | None) -> float | None:
    """The last observed demand carried by a forecast (None when absent or invalid)."""
    if fc is None or not fc.observed:
        return None
    return _finite_non_negative(fc.observed[-1][1])


def demand_lag(fc: Forecast) -> float:
    """Seconds the forecast's series runs behind the load it measures (its meta's
    ``demand_lag_seconds``, published by the trainer from the query; 0 when absent or invalid)."""
    v = _finite_non_negative((fc.meta or {}).get("demand_lag_seconds", 0.0))
    return v or 0.0


def predicted_demand(fc: Forecast, now: float, settings: MetricSettings, quantile: str | None = None) -> float | None:
    """Max of the configured quantile over [now, now + lead] on the forecast curve
    (``forecaster.leadwindow``: linear from the last observed value at the origin through the
    points, point i at origin + (i+1) x step); the chooser scores the same function. A window
    reaching past the horizon is clipped to it. None when the forecast cannot say anything
    about the window: no points, the quantile was not published, or ``now`` is past the last
    point.
    """
    quantile = settings.quantile if quantile is None else quantile
    values = fc.mean if quantile == "mean" else fc.quantiles.get(quantile)
    if not values:
        return None
    start = float(now) + demand_lag(fc) - fc.origin  # on the series' clock
    if start > len(values) * fc.step_seconds:
        return None
    best = window_max_one(observed_now(fc), values, start, float(settings.lead_seconds), fc.step_seconds)
    if not math.isfinite(best):
        return None
    return max(0.0, best)


def held_observed(fc: Forecast | None, observed: float | None, hold: int) -> float | None:
    """The observed floor of hold k: max(observed now, the last k published samples); None
    when nothing current is observed (an old tail is no floor for a stale observation)."""
    if observed is None or fc is None or hold <= 1 or not fc.observed:
        return observed
    tail = [_finite_non_negative(v) for _, v in fc.observed[-int(hold):]]
    return max([observed] + [v for v in tail if v is not None])


def _fallback(observed: float | None, why: str, headroom: float = 1.0, held: float | None = None,
              hold: int = 1) -> ServedValue:
    if observed is None:
        raise NoData(f"{why}, and no observed demand to fall back on")
    if headroom != 1.0 or hold > 1:
        base = observed if held is None else held
        what = f"the max of the last {hold} observed samples {base:.4g}" if hold > 1 else "observed demand"
        return ServedValue(value=headroom * base, source="observed", headroom=headroom, predicted=None, observed=observed,
                           reason=f"{why}; serving {what} x{headroom:g} (the policy's persistence headroom and hold)")
    return ServedValue(value=observed, source="observed", reason=f"{why}; serving observed demand", predicted=None, observed=observed)


def gap_of(fc: Forecast) -> float:
    """How far the forecast's latest observed sample sits below the peak of the samples it
    carries (``forecaster.servingscore.peak_gap``): the state that picks the policy's headroom."""
    return peak_gap([v for _, v in fc.observed])


def _read_once(fc: Forecast) -> tuple:
    """What the forecast's serving policy says for it, worked out once and kept on the
    forecast itself: (source or None without a policy, quantile or None, headroom, hold,
    fallback headroom, fallback hold, peak gap or None when the policy has no states, note,
    refused). The adapter serves each cached forecast many times, and validating the policy
    record (its costs, its headroom states) and the gap cost more than the rest of a served
    value; the gap, and so the headroom of its state, is the forecast's own. Plain values
    only, so the garbage collector does not track the memo of every cached forecast. Kept as
    ``functools.cached_property`` keeps a value, in the instance's ``__dict__`` outside its
    fields (equality, ``asdict`` and ``to_json`` do not see it): it lives and dies with the
    forecast, which is frozen, and whose policy record is never edited after publishing."""
    memo = fc.__dict__.get("_served_memo")
    if memo is None:
        policy, note, refused = _read_policy(fc.policy) if fc.policy else (None, "", False)
        if policy is None:
            memo = (None, None, 1.0, 1, 1.0, 1, None, note, refused)
        else:
            gap = gap_of(fc) if policy.gap_edges else None  # only a policy with states reads it
            memo = (policy.source, policy.quantile, policy.headroom_at(gap or 0.0), policy.hold,
                    policy.headroom_at(gap or 0.0, fallback=True), policy.fallback_hold, gap, note, refused)
        fc.__dict__["_served_memo"] = memo
    return memo


def prepare(fc: Forecast) -> None:
    """Work out once what the forecast's serving policy says for it (``_read_once``), now. A
    reader that caches forecasts calls this as it stores one, in its background refresher: the
    first request that serves a newly read forecast then costs what every later one costs. Its
    work (validating the policy record, the peak gap) is about a hundred microseconds, three
    times a served value's; left to the request path it made a request's CPU grow with the
    fleet (at 100,000 workloads nearly every request was some forecast's first)."""
    _read_once(fc)


def _read_policy(d: Mapping[str, Any]) -> tuple[ServingPolicy | None, str, bool]:
    try:
        return ServingPolicy.from_dict(d), "", False
    except BelowObserved as exc:
        return None, f"published policy refused: {exc}", True
    except ValueError as exc:
        return None, f"; published policy ignored ({exc})", False


def served_cores(
    fc: Forecast | None,
    now: float,
    settings: MetricSettings,
    observed: float | None = None,
) -> ServedValue:
    """Predicted CPU demand in cores (``predicted_cpu_cores``, HPA target type AverageValue).

    ``observed``: the demand read now, directly from the workload's source (the adapter's
    reading, what a reactive HPA sees; the replay's D(t - delay)). Under a servable forecast
    (and a series on its fallback) it is the floor in place of the forecast's last published
    sample; without a forecast it is what is served. A forecast that cannot be served (stale,
    its samples stopped, its policy refused) falls back to its own published sample, so the
    reader's degradation path (``observed``, then ``observed-direct``) stays what it was."""
    old = None
    obs = observed_now(fc)
    if obs is not None and now - fc.observed[-1][0] > settings.max_observed_age_seconds:
        old, obs = now - fc.observed[-1][0], None  # an hour-old observation is no better than a stale forecast
    read = _finite_non_negative(observed) if observed is not None else None
    if fc is None:
        return _fallback(read, "no forecast published")
    age = now - fc.generated_at
    if age > settings.max_forecast_age_seconds:
        return _fallback(
            obs, f"forecast is stale ({age:.0f} s old > {settings.max_forecast_age_seconds:.0f} s)"
        )
    if old is not None:  # a forecast carried forward from samples that stopped is no fresher than they are
        return _fallback(obs, f"the forecast's newest observed sample is {old:.0f} s old "
                              f"(> {settings.max_observed_age_seconds:.0f} s): its demand source stopped delivering")
    source, quantile, m, k, m_fallback, k_fallback, gap, note, refused = _read_once(fc)
    if refused:
        return _fallback(obs, note)
    obs = read if read is not None else obs
    where = " (read directly now)" if read is not None else ""
    if fc.status == "fallback":
        return _fallback(obs, f"series is on the fallback ({fc.reason or 'no reason given'}){note}", headroom=m_fallback,
                         held=held_observed(fc, obs, k_fallback), hold=k_fallback)
    if source == "persistence":
        pred = held_observed(fc, obs, k)  # the hold is part of the persistence path
        what = ("persistence (observed demand read directly now)" if read is not None else
                f"persistence (last observed {fc.observed[-1][0] if fc.observed else 0:.0f})")
        if pred is None:
            return _fallback(obs, "policy serves persistence but the forecast carries no observation")
    else:
        quantile = quantile if source is not None else settings.quantile
        pred = predicted_demand(fc, now, settings, quantile)
        if pred is None:
            values = fc.mean if quantile == "mean" else fc.quantiles.get(quantile)
            lag = demand_lag(fc)
            why = (f"forecast has no {quantile!r} values" if not values else "forecast horizon ends before now" +
                   (f" + the demand query's lag ({lag:g} s: half its range window)" if lag else ""))
            return _fallback(obs, why + note)
        what = f"{quantile} forecast max over the next {settings.lead_seconds:g} s ({model_name(fc)})"
    base, floored = pred, False
    floor = held_observed(fc, obs, k) if settings.observed_floor else None
    if floor is not None and floor > pred:
        base, floored = floor, True
    value = m * base
    reason = f"{what} is {pred:.4g} cores"
    if floored:
        reason += f", below observed {floor:.4g}{where}: floored at observed" if k <= 1 else \
            f", below {floor:.4g}, the max of observed now and the last {k} samples (hold {k}): floored there"
    if gap is not None:
        reason += f"; x{m:g} headroom from the serving policy for demand {gap:.0%} below its recent peak"
    elif m != 1.0:
        reason += f"; x{m:g} headroom from the serving policy"
    return ServedValue(value=value, source="forecast", reason=reason + note, predicted=pred, observed=obs, headroom=m)


def model_name(fc: Forecast) -> str:
    return fc.model or "unknown model"


def served_load_ratio(
    fc: Forecast | None,
    now: float,
    ready_pods: int,
    cpu_request_cores: float,
    settings: MetricSettings,
    observed: float | None = None,
) -> ServedValue:
    """demand / (READY pods x CPU request per pod) (``predicted_cpu_load_ratio``, target Value).

    The HPA multiplies the Value ratio by its ready-pod count, so the ratio must be computed
    against ready pods too: then ceil(ratio / target * ready) = ceil(demand / (target * request)),
    the right pod count even while new pods are still starting.
    """
    request = _finite_non_negative(cpu_request_cores)
    if request is None or request == 0:
        raise NoData(
            f"cpu_request_cores is {cpu_request_cores!r}; a load ratio needs a CPU request > 0 "
            "(set capacity.cpu_request_cores in the workload config)"
        )
    cores = served_cores(fc, now, settings, observed)
    try:
        pods = int(ready_pods)
    except (TypeError, ValueError):
        pods = 0
    note = ""
    if pods < 1:
        note = f"; ready_pods was {ready_pods!r}, counted as 1"
        pods = 1
    value = cores.value / (pods * request)
    if not math.isfinite(value) or value < 0:  # pragma: no cover - guarded above
        raise NoData(f"load ratio is not a finite number ({value!r})")
    return ServedValue(
        value=value,
        source=cores.source,
        reason=f"{cores.reason}; / ({pods} ready pods x {request:g} cores){note}",
        predicted=cores.predicted,
        observed=cores.observed,
        headroom=cores.headroom,
    )


# --- declared metrics besides CPU (forecaster.predicted; served by adapter/declared.py) -------
# The same rule in the metric's own unit: served_cores for predicted_<name>, served_load_ratio
# with capacity_per_replica in place of the CPU request for predicted_<name>_ratio.


def _in_unit(sv: ServedValue, unit: str) -> ServedValue:
    from dataclasses import replace

    return replace(sv, reason=sv.reason.replace(" cores", f" {unit}"))  # the arithmetic is unit-free


def served_demand(metric: str, fc: Forecast | None, now: float, settings: MetricSettings,
                  observed: float | None = None) -> ServedValue:
    """``predicted_<metric>``: the served demand of a declared metric, in its own unit."""
    return _in_unit(served_cores(fc, now, settings, observed), metric)


def served_demand_ratio(metric: str, fc: Forecast | None, now: float, ready_pods, capacity_per_replica,
                        settings: MetricSettings, observed: float | None = None) -> ServedValue:
    """``predicted_<metric>_ratio``: demand / (READY pods x capacity per replica), computed
    exactly as ``predicted_cpu_load_ratio`` is from cores and the CPU request."""
    if _finite_non_negative(capacity_per_replica) in (None, 0.0):
        raise NoData(f"capacity_per_replica of {metric} is {capacity_per_replica!r}; a ratio needs a capacity > 0 "
                     "(set metrics[].capacity_per_replica in the workload config)")
    return _in_unit(served_load_ratio(fc, now, ready_pods, capacity_per_replica, settings, observed), metric)
