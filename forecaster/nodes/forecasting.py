"""Node history -> node forecasts (pure: arrays in, ``Forecast`` objects out).

Two resources, both published as utilization, a fraction 0..1 of the node's capacity, so one
forecasting rule (``forecast_utilization``) and one scoring rule serve both:

- CPU (``node/<node>``, ``zone/<zone>``): node-exporter's busy fraction. Zones are forecast
  from their own history, the capacity-weighted (CPU cores) mean utilization of the zone's
  nodes at each timestamp: a forecast of the aggregate keeps honest quantiles, an average of
  per-node p90s would overstate the zone's p90.
- Memory (``node-memory/<node>``): memory in use divided by the node's *allocatable* memory
  (``meta.memory_bytes``), so "predicted use + a pod's request > allocatable" is one
  multiplication away for the scheduler extender. Per node only: a pod's memory must fit on
  one node, so a zone aggregate would not decide anything.

Gaps (NaN) in the history are carried over, never published; a series without one finite
point is skipped with a reason; a failing model falls back to persistence with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from core.errors import UserError
from core.store import Forecast, make_forecast, quantile_key
from forecaster.nodes.inventory import (
    NODE_ALLOCATABLE_MEMORY_QUERY,
    NODE_CPU_QUERY,
    NODE_MEMORY_QUERY,
    NodeInventory,
    memory_series_id,
    node_series_id,
    zone_series_id,
)
from forecaster.timing import demand_lag_seconds

History = Mapping[str, tuple[np.ndarray, np.ndarray]]  # key (instance or node) -> (unix ts, values)


@dataclass(frozen=True)
class NodeForecastSettings:
    """How node forecasts are trained.

    step_seconds: grid of the history and of the forecast points.
    history_seconds: how much history each fit sees.
    horizon_seconds: how far ahead forecasts reach (at least the extender's horizon).
    quantiles: published quantile levels (``p90`` drives filtering and scores).
    model: name for ``forecaster.models.get_model`` ("ar": cheap enough for thousands of
      nodes); persistence when the models package is unavailable.
    min_points: fewer non-missing points than this -> persistence (status "fallback").
    observed_points: how much observed tail is stored with each forecast.
    query: PromQL of node CPU utilization (0..1), grouped by ``instance`` (or ``node``).
    memory_query: PromQL of node memory in use, bytes, grouped by ``instance`` (or ``node``);
      empty turns memory forecasts off.
    memory_allocatable_query: PromQL of allocatable memory bytes by ``node`` (kube-state-
      metrics); ``node_memory_MemTotal_bytes`` is the capacity where it has no answer.
    """

    step_seconds: float = 60.0
    history_seconds: float = 6 * 3600.0
    horizon_seconds: float = 900.0
    quantiles: tuple[float, ...] = (0.5, 0.9)
    model: str = "ar"
    min_points: int = 12
    observed_points: int = 12
    query: str = NODE_CPU_QUERY
    memory_query: str = NODE_MEMORY_QUERY
    memory_allocatable_query: str = NODE_ALLOCATABLE_MEMORY_QUERY

    def __post_init__(self) -> None:
        problems = []
        for name in ("step_seconds", "history_seconds", "horizon_seconds"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                problems.append(f"{name}: {v!r} must be a finite number > 0")
        if not self.quantiles or any(not (0 < q < 1) for q in self.quantiles):
            problems.append(f"quantiles: {self.quantiles!r} must be levels in (0, 1), e.g. (0.5, 0.9)")
        if not isinstance(self.min_points, int) or self.min_points < 2:
            problems.append(f"min_points: {self.min_points!r} must be an integer >= 2")
        if not isinstance(self.query, str) or not self.query.strip():
            problems.append(f"query: {self.query!r} must be a PromQL expression of CPU utilization by instance")
        for name in ("memory_query", "memory_allocatable_query"):
            if not isinstance(getattr(self, name), str):
                problems.append(f"{name}: {getattr(self, name)!r} must be a PromQL string ('' turns memory forecasts off)")
        if problems:
            raise UserError("invalid node forecast settings: " + "; ".join(problems))

    @property
    def horizon_points(self) -> int:
        return max(1, int(math.ceil(self.horizon_seconds / self.step_seconds)))


@dataclass
class NodeTrainReport:
    nodes: list[str] = field(default_factory=list)
    zones: list[str] = field(default_factory=list)
    memory_nodes: list[str] = field(default_factory=list)
    fallbacks: dict[str, str] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    memory_error: str = ""  # why no memory forecasts were made this cycle, if none could be


def _persistence(y: np.ndarray, h: int, quantiles: Sequence[float]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Last value forward; quantile k = last + empirical quantile of the k-step changes."""
    last = float(y[-1])
    mean = np.full(h, last)
    qs: dict[str, np.ndarray] = {}
    for q in quantiles:
        vals = np.empty(h)
        for k in range(1, h + 1):
            d = y[k:] - y[:-k] if len(y) > k else np.zeros(1)
            vals[k - 1] = last + float(np.quantile(d, q))
        qs[quantile_key(q)] = vals
    return mean, qs


def _fill_gaps(y: np.ndarray) -> np.ndarray:
    """Drop leading NaNs, carry the last value over inner gaps (node load is sticky)."""
    ok = np.isfinite(y)
    if not ok.any():
        return y[:0]
    y = y[int(np.argmax(ok)) :].copy()
    for i in range(1, len(y)):
        if not math.isfinite(y[i]):
            y[i] = y[i - 1]
    return y


def _fit_model(y: np.ndarray, timestamps: np.ndarray | None, settings: NodeForecastSettings):
    """(mean, quantiles, model, status, reason) from the configured model; mean None = use persistence."""
    h = settings.horizon_points
    status, reason = "ok", ""
    try:
        from forecaster.models import get_model  # the models package may not have landed

        fitted = get_model(settings.model).fit(y, timestamps)
        pred = fitted.predict(h, quantiles=tuple(settings.quantiles))
        degraded = str(getattr(fitted, "degraded_", "") or "")
        if degraded:
            status, reason = "fallback", degraded
        mean = np.asarray(pred.mean, dtype="float64")[:h]
        qs = {}
        for q in settings.quantiles:
            key = quantile_key(q)
            raw = (getattr(pred, "quantiles", None) or {}).get(key)
            qs[key] = mean.copy() if raw is None else np.asarray(raw, dtype="float64")[:h]
        if len(mean) != h or not all(np.isfinite(v).all() and len(v) == h for v in [mean, *qs.values()]):
            raise ValueError("model returned a short or non-finite forecast")
        return mean, qs, str(getattr(fitted, "name", None) or settings.model), status, reason
    except ImportError:
        return None, None, "persistence", "ok", "forecaster.models.get_model is not available"
    except Exception as exc:  # noqa: BLE001 - one bad fit must not stop the other nodes
        return None, None, "persistence", "fallback", f"model {settings.model!r} failed: {exc.__class__.__name__}: {exc}"


def forecast_utilization(
    y: np.ndarray, settings: NodeForecastSettings, timestamps: np.ndarray | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray], str, str, str]:
    """Forecast a utilization series: ``(mean, quantiles, model, status, reason)``, clipped to
    [0, 1] and monotone across quantile levels. Never NaN: a failing model falls back to
    persistence with status "fallback" and the reason."""
    h = settings.horizon_points
    y = np.asarray(y, dtype="float64")
    if timestamps is not None:
        ok = np.isfinite(y)
        timestamps = np.asarray(timestamps, dtype="float64")[int(np.argmax(ok)) :] if ok.any() else None
    y = _fill_gaps(y)
    if len(y) == 0:
        raise ValueError("no observations")
    if len(y) < settings.min_points:
        mean = qs = None
        model, status, reason = "persistence", "fallback", f"only {len(y)} points (< min_points {settings.min_points})"
    else:
        mean, qs, model, status, reason = _fit_model(y, timestamps, settings)
    if mean is None or qs is None:
        mean, qs = _persistence(y, h, settings.quantiles)
        model = "persistence"
    mean = np.clip(mean, 0.0, 1.0)
    prev = None
    for q in sorted(settings.quantiles):
        key = quantile_key(q)
        v = np.clip(qs[key], 0.0, 1.0)
        if prev is not None:
            v = np.maximum(v, prev)  # p90 >= p50 even if a model crosses them
        qs[key] = v
        prev = v
    return mean, qs, model, status, reason


def forecast_series(
    series_id: str,
    ts: np.ndarray,
    y: np.ndarray,
    meta: dict[str, Any],
    now: float,
    settings: NodeForecastSettings,
    report: NodeTrainReport,
) -> Forecast | None:
    """One utilization history -> one publishable forecast, or None (reason in ``report.skipped``)."""
    ok = np.isfinite(y)
    if not ok.any():
        report.skipped[series_id] = "no observations in the history window"
        return None
    try:
        mean, qs, model, status, reason = forecast_utilization(y, settings, ts)
    except ValueError as exc:
        report.skipped[series_id] = str(exc)
        return None
    if status != "ok":
        report.fallbacks[series_id] = reason
    last = int(np.flatnonzero(ok)[-1])
    idx = np.flatnonzero(ok)[-settings.observed_points :]
    observed = tuple((float(ts[i]), float(np.clip(y[i], 0.0, 1.0))) for i in idx)
    return make_forecast(
        series_id,
        origin=float(ts[last]),
        step_seconds=settings.step_seconds,
        mean=mean,
        quantiles=qs,
        model=model,
        generated_at=now,
        status=status,
        reason=reason,
        observed=observed,
        meta=meta,
    )


def _by_node(history: History, inventory: NodeInventory, report: NodeTrainReport, what: str) -> dict[str, tuple[str, str, np.ndarray, np.ndarray]]:
    """``{node: (key, zone, ts, values)}``: the join, one history per node (first key wins)."""
    out: dict[str, tuple[str, str, np.ndarray, np.ndarray]] = {}
    for key in sorted(history):
        resolved = inventory.resolve(key)
        if resolved is None:
            if key not in report.unresolved:
                report.unresolved.append(key)
            continue
        node, zone = resolved
        if node in out:
            report.skipped[f"{what}:{key}"] = f"node {node!r} already has {what} series {out[node][0]!r}"
            continue
        ts, y = history[key]
        out[node] = (key, zone, np.asarray(ts, dtype="float64"), np.asarray(y, dtype="float64"))
    return out


def build_forecasts(
    history: History,
    inventory: NodeInventory,
    cores: Mapping[str, float],
    now: float,
    settings: NodeForecastSettings,
    report: NodeTrainReport | None = None,
) -> list[Forecast]:
    """CPU: per-instance history ``{instance: (unix_ts, utilization)}`` (one shared grid)
    -> node and zone forecasts, ready to publish."""
    report = report if report is not None else NodeTrainReport()
    out: list[Forecast] = []
    by_node = _by_node(history, inventory, report, "cpu")
    weight = {n: float(cores.get(v[0], 1.0) or 1.0) for n, v in by_node.items()}
    zones: dict[str, list[str]] = {}
    for node in sorted(by_node):
        instance, zone, ts, y = by_node[node]
        meta = _with_lag({"kind": "Node", "node": node, "zone": zone, "instance": instance, "cpu_cores": weight[node]},
                         settings.query)
        fc = forecast_series(node_series_id(node), ts, y, meta, now, settings, report)
        if fc is not None:
            out.append(fc)
            report.nodes.append(node)
            if zone:
                zones.setdefault(zone, []).append(node)
    for zone in sorted(zones):
        members = zones[zone]
        ts = by_node[members[0]][2]
        num = np.zeros(len(ts))
        den = np.zeros(len(ts))
        for node in members:
            _, _, nts, ny = by_node[node]
            if len(nts) != len(ts) or not np.array_equal(nts, ts):
                continue  # instances come from one range query: one grid
            ok = np.isfinite(ny)
            num[ok] += weight[node] * ny[ok]
            den[ok] += weight[node]
        with np.errstate(invalid="ignore", divide="ignore"):
            zy = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        meta = _with_lag({"kind": "Zone", "zone": zone, "nodes": len(members),
                          "cpu_cores": float(sum(weight[n] for n in members))}, settings.query)
        fc = forecast_series(zone_series_id(zone), ts, zy, meta, now, settings, report)
        if fc is not None:
            out.append(fc)
            report.zones.append(zone)
    return out


def _with_lag(meta: dict[str, Any], query: str) -> dict[str, Any]:
    """``meta`` with the query's demand lag (``demand_lag_seconds``) when it has one: a
    utilization read as ``rate(...[5m])`` runs half its window behind the node, and the
    scheduler extender reads the curve that much later (``scoring.window_max``)."""
    lag = demand_lag_seconds(query)
    return {**meta, "demand_lag_seconds": lag} if lag > 0 else meta


def memory_capacities(
    allocatable: Mapping[str, float], memtotal: Mapping[str, float], inventory: NodeInventory
) -> dict[str, tuple[float, str]]:
    """``{node: (bytes, source)}``: allocatable memory by node name, else the instance's
    MemTotal (joined like the history). Non-finite or non-positive values are no capacity."""
    out: dict[str, tuple[float, str]] = {}
    for instance, v in sorted(memtotal.items()):
        resolved = inventory.resolve(instance)
        if resolved is not None and math.isfinite(v) and v > 0:
            out.setdefault(resolved[0], (float(v), "node_memory_MemTotal_bytes"))
    for node, v in allocatable.items():
        if math.isfinite(v) and v > 0:
            out[node] = (float(v), "allocatable")
    return out


def build_memory_forecasts(
    history: History,
    inventory: NodeInventory,
    capacities: Mapping[str, tuple[float, str]],
    now: float,
    settings: NodeForecastSettings,
    report: NodeTrainReport | None = None,
) -> list[Forecast]:
    """Memory: ``{instance or node: (unix_ts, bytes in use)}`` -> ``node-memory/<node>``
    forecasts of the fraction of allocatable memory in use. A node without a known capacity
    is skipped with the reason (a fraction of an unknown is not a forecast)."""
    report = report if report is not None else NodeTrainReport()
    out: list[Forecast] = []
    for node, (key, zone, ts, used) in sorted(_by_node(history, inventory, report, "memory").items()):
        sid = memory_series_id(node)
        cap = capacities.get(node)
        if cap is None:
            report.skipped[sid] = (f"no memory capacity for node {node!r}: neither kube_node_status_allocatable "
                                   "nor node_memory_MemTotal_bytes answered for it")
            continue
        with np.errstate(invalid="ignore"):
            frac = np.where(np.isfinite(used), used / cap[0], np.nan)
        meta = _with_lag({"kind": "NodeMemory", "node": node, "zone": zone, "instance": key,
                          "memory_bytes": cap[0], "capacity": cap[1]}, settings.memory_query)
        fc = forecast_series(sid, ts, frac, meta, now, settings, report)
        if fc is not None:
            out.append(fc)
            report.memory_nodes.append(node)
    return out
