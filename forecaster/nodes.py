"""Node-level CPU forecasts and the placement scores derived from them.

Two halves, both floor 1 so the adapter's scheduler extender and the warm pool's Kubernetes
backend (which must not import each other) compute *the same* scores:

1. Training (``train_nodes_once``): node CPU utilization (0..1) from node-exporter,

       1 - avg by (instance)(rate(node_cpu_seconds_total{mode="idle"}[5m]))

   joined to Kubernetes node names and zones, forecast per node and per zone, published to the
   forecast store as ``node/<node-name>`` and ``zone/<zone>``.

   The join (``NodeInventory.resolve``): node-exporter only knows its scrape ``instance``
   (``10.0.3.7:9100`` with a plain pod scrape, or the node name when the scrape config relabels
   ``instance`` from ``__meta_kubernetes_pod_node_name`` / ``__meta_kubernetes_node_name``, as
   kube-prometheus does). We strip the port, then match, in order,
   (a) a node name from ``kube_node_info{node=...}``, (b) ``kube_node_info{internal_ip=...}``.
   The zone comes from ``kube_node_labels{label_topology_kubernetes_io_zone=...}`` (falling back
   to the deprecated ``failure-domain.beta.kubernetes.io/zone`` label). kube-state-metrics v2
   exports node labels only when allowed:
   ``--metric-labels-allowlist=nodes=[topology.kubernetes.io/zone]``. Without kube-state-metrics
   the stripped instance host is used as the node name and the zone is left empty. Instances
   that match nothing while an inventory exists are reported (``unresolved``) and skipped,
   never guessed.

   Zones are forecast from their own history: the capacity-weighted (CPU cores, from
   ``count by (instance)(node_cpu_seconds_total{mode="idle"})``) mean utilization of the
   zone's nodes at each timestamp. A forecast of the aggregate keeps honest quantiles; an
   average of per-node p90s would overstate the zone's p90.

2. Scoring (``assess_nodes``, ``score_for_load``, ``split_hot``, ``preferred_node_affinity``):
   pure functions from published forecasts to per-node loads, 0..10 scores (the scheduler
   extender's scale, ``MaxExtenderPriority = 10``) and nodeAffinity preferences.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from forecaster.errors import UserError
from forecaster.store import Forecast, ForecastStore, make_forecast, quantile_key

log = logging.getLogger(__name__)

__all__ = [
    "NODE_CPU_QUERY",
    "NODE_CORES_QUERY",
    "NODE_INFO_QUERY",
    "NODE_LABELS_QUERY",
    "NEUTRAL_SCORE",
    "MAX_SCORE",
    "NodeForecastSettings",
    "NodeInventory",
    "NodeLoad",
    "NodeScoreSettings",
    "NodeTrainReport",
    "assess_nodes",
    "forecast_utilization",
    "node_series_id",
    "placement_affinity",
    "preferred_node_affinity",
    "run_nodes_schedule",
    "score_for_load",
    "split_hot",
    "train_nodes_once",
    "zone_series_id",
]

NODE_CPU_QUERY = '1 - avg by (instance)(rate(node_cpu_seconds_total{mode="idle"}[5m]))'
NODE_CORES_QUERY = 'count by (instance)(node_cpu_seconds_total{mode="idle"})'
NODE_INFO_QUERY = "kube_node_info"
NODE_LABELS_QUERY = "kube_node_labels"
ZONE_LABELS = ("label_topology_kubernetes_io_zone", "label_failure_domain_beta_kubernetes_io_zone")

NODE_PREFIX = "node/"
ZONE_PREFIX = "zone/"
MAX_SCORE = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
NEUTRAL_SCORE = 5  # unknown node or stale forecast: neither preferred nor avoided


def node_series_id(node: str) -> str:
    return NODE_PREFIX + node


def zone_series_id(zone: str) -> str:
    return ZONE_PREFIX + zone


# --------------------------------------------------------------------------------------------
# The instance -> node/zone join


def instance_host(instance: str) -> str:
    """``10.0.0.7:9100`` -> ``10.0.0.7``; ``[fd00::7]:9100`` -> ``fd00::7``; ``node-a`` -> ``node-a``."""
    s = instance.strip()
    if s.startswith("["):
        end = s.find("]")
        return s[1:end] if end > 0 else s
    if s.count(":") == 1:
        host, port = s.rsplit(":", 1)
        if port.isdigit():
            return host
    return s


@dataclass(frozen=True)
class NodeInventory:
    """What kube-state-metrics knows about nodes: name -> zone, internal IP -> name."""

    zones: Mapping[str, str] = field(default_factory=dict)
    ip_to_node: Mapping[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.zones and not self.ip_to_node

    @classmethod
    def from_samples(
        cls,
        node_info: Iterable[tuple[Mapping[str, str], float]],
        node_labels: Iterable[tuple[Mapping[str, str], float]],
    ) -> "NodeInventory":
        zones: dict[str, str] = {}
        ips: dict[str, str] = {}
        for labels, _ in node_info:
            node = labels.get("node")
            if not node:
                continue
            zones.setdefault(node, "")
            ip = labels.get("internal_ip")
            if ip:
                ips[ip] = node
        for labels, _ in node_labels:
            node = labels.get("node")
            if not node:
                continue
            zone = next((labels[k] for k in ZONE_LABELS if labels.get(k)), "")
            if zone or node not in zones:
                zones[node] = zone
        return cls(zones=zones, ip_to_node=ips)

    def resolve(self, instance: str) -> tuple[str, str] | None:
        """``(node, zone)`` for a node-exporter instance, or None when nothing matches."""
        host = instance_host(instance)
        if self.empty:
            return host, ""
        if host in self.zones:
            return host, self.zones[host]
        node = self.ip_to_node.get(host)
        if node is not None:
            return node, self.zones.get(node, "")
        return None


# ``series_name`` escapes values the PromQL way (\\, \", \n); parse them back exactly.
_LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}


def _unescape(v: str) -> str:
    return re.sub(r"\\(.)", lambda m: _UNESCAPE.get(m.group(1), m.group(1)), v)


def labels_from_series_name(name: str) -> dict[str, str]:
    """Inverse of ``forecaster.sources.prometheus.series_name`` for ``{a="x",b="y"}`` names."""
    brace = name.find("{")
    body = name[brace:].strip() if brace >= 0 else ""
    return {k: _unescape(v) for k, v in _LABEL_RE.findall(body)}


# --------------------------------------------------------------------------------------------
# Training: history -> forecasts


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
    """

    step_seconds: float = 60.0
    history_seconds: float = 6 * 3600.0
    horizon_seconds: float = 900.0
    quantiles: tuple[float, ...] = (0.5, 0.9)
    model: str = "ar"
    min_points: int = 12
    observed_points: int = 12
    query: str = NODE_CPU_QUERY

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
        if problems:
            raise UserError("invalid node forecast settings: " + "; ".join(problems))

    @property
    def horizon_points(self) -> int:
        return max(1, int(math.ceil(self.horizon_seconds / self.step_seconds)))


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
    status, reason, model = "ok", "", settings.model
    mean = qs = None
    if len(y) < settings.min_points:
        status, reason = "fallback", f"only {len(y)} points (< min_points {settings.min_points})"
    else:
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
            model = str(getattr(fitted, "name", None) or settings.model)
        except ImportError:
            mean = None
            model, reason = "persistence", "forecaster.models.get_model is not available"
        except Exception as exc:  # noqa: BLE001 - one bad fit must not stop the other nodes
            mean = None
            status, reason = "fallback", f"model {settings.model!r} failed: {exc.__class__.__name__}: {exc}"
    if mean is None:
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


@dataclass
class NodeTrainReport:
    nodes: list[str] = field(default_factory=list)
    zones: list[str] = field(default_factory=list)
    fallbacks: dict[str, str] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _instant_or_empty(source: Any, query: str, now: float) -> list[tuple[dict[str, str], float]]:
    try:
        return list(source.instant(query, now))
    except Exception as exc:  # noqa: BLE001 - kube-state-metrics is optional
        log.warning("node inventory query %r failed (%s); joining without it", query, exc)
        return []


def build_forecasts(
    history: Mapping[str, tuple[np.ndarray, np.ndarray]],
    inventory: NodeInventory,
    cores: Mapping[str, float],
    now: float,
    settings: NodeForecastSettings,
    report: NodeTrainReport | None = None,
) -> list[Forecast]:
    """Pure step: per-instance history ``{instance: (unix_ts, utilization)}`` (one shared grid)
    -> node and zone forecasts, ready to publish."""
    report = report if report is not None else NodeTrainReport()
    out: list[Forecast] = []
    by_node: dict[str, tuple[str, str, np.ndarray, np.ndarray, float]] = {}
    for instance in sorted(history):
        resolved = inventory.resolve(instance)
        if resolved is None:
            report.unresolved.append(instance)
            continue
        node, zone = resolved
        ts, y = history[instance]
        if node in by_node:
            report.skipped[instance] = f"node {node!r} already has instance {by_node[node][0]!r}"
            continue
        by_node[node] = (instance, zone, np.asarray(ts, dtype="float64"), np.asarray(y, dtype="float64"), float(cores.get(instance, 1.0) or 1.0))

    def one(series_id: str, ts: np.ndarray, y: np.ndarray, meta: dict[str, Any]) -> Forecast | None:
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

    zones: dict[str, list[str]] = {}
    for node in sorted(by_node):
        instance, zone, ts, y, n_cores = by_node[node]
        fc = one(node_series_id(node), ts, y, {"kind": "Node", "node": node, "zone": zone, "instance": instance, "cpu_cores": n_cores})
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
            _, _, nts, ny, w = by_node[node]
            if len(nts) != len(ts) or not np.array_equal(nts, ts):
                continue  # instances come from one range query: one grid
            ok = np.isfinite(ny)
            num[ok] += w * ny[ok]
            den[ok] += w
        with np.errstate(invalid="ignore", divide="ignore"):
            zy = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        total_cores = float(sum(by_node[n][4] for n in members))
        fc = one(zone_series_id(zone), ts, zy, {"kind": "Zone", "zone": zone, "nodes": len(members), "cpu_cores": total_cores})
        if fc is not None:
            out.append(fc)
            report.zones.append(zone)
    return out


def train_nodes_once(
    source: Any,
    store: ForecastStore,
    now: float | None = None,
    settings: NodeForecastSettings | None = None,
) -> NodeTrainReport:
    """Fetch node history and the inventory, forecast, publish. ``source`` is a
    ``PrometheusSource`` (``fetch`` for the range query, ``instant`` for the inventory)."""
    settings = settings or NodeForecastSettings()
    now = time.time() if now is None else float(now)
    step = settings.step_seconds
    end = math.floor(now / step) * step
    frame = source.fetch(settings.query, end - settings.history_seconds, end, step)
    history: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for sid, g in frame.groupby("series_id", sort=True):
        instance = labels_from_series_name(str(sid)).get("instance")
        if not instance:
            log.warning("node series %r has no instance label; is the query grouped by instance?", sid)
            continue
        ts = g["timestamp"].astype("int64").to_numpy() / 1e9
        history[instance] = (ts.astype("float64"), g["value"].to_numpy(dtype="float64"))
    inventory = NodeInventory.from_samples(
        _instant_or_empty(source, NODE_INFO_QUERY, end), _instant_or_empty(source, NODE_LABELS_QUERY, end)
    )
    cores = {labels.get("instance", ""): v for labels, v in _instant_or_empty(source, NODE_CORES_QUERY, end)}
    report = NodeTrainReport()
    for fc in build_forecasts(history, inventory, cores, now, settings, report):
        store.publish(fc)
    if report.unresolved:
        log.warning(
            "%d node-exporter instance(s) match no kube_node_info node name or internal_ip: %s",
            len(report.unresolved),
            ", ".join(report.unresolved[:10]),
        )
    return report


def run_nodes_schedule(
    source: Any,
    store: ForecastStore,
    settings: NodeForecastSettings | None = None,
    *,
    interval_seconds: float = 60.0,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    stop: Callable[[], bool] = lambda: False,
    max_cycles: int | None = None,
) -> int:
    """Thin runner: ``train_nodes_once`` every ``interval_seconds`` (aligned to the clock)
    until ``stop()``. A failing cycle (Prometheus down, store down) is logged and retried at
    the next tick; forecasts then age and the extender turns them neutral. Returns cycles run.
    (~3 ms per node per cycle on this machine: 5,000 nodes fit a 60 s interval.)"""
    cycles = 0
    while not stop() and (max_cycles is None or cycles < max_cycles):
        started = clock()
        try:
            report = train_nodes_once(source, store, now=started, settings=settings)
            log.info("node forecasts: %d nodes, %d zones, %d on fallback, %d unresolved instances",
                     len(report.nodes), len(report.zones), len(report.fallbacks), len(report.unresolved))
        except Exception as exc:  # noqa: BLE001 - a loop must survive a bad cycle
            log.warning("node forecast cycle failed: %s: %s", exc.__class__.__name__, exc)
        cycles += 1
        if max_cycles is not None and cycles >= max_cycles:
            break
        next_tick = (math.floor(started / interval_seconds) + 1) * interval_seconds
        sleep(max(0.0, next_tick - clock()))
    return cycles


# --------------------------------------------------------------------------------------------
# Scoring: published forecasts -> loads, scores, affinity


@dataclass(frozen=True)
class NodeScoreSettings:
    """How node forecasts become placement decisions (shared by extender and warm pool).

    threshold: a node whose predicted utilization exceeds this is filtered out ("hot").
    horizon_seconds: the look-ahead window [now, now + horizon] whose max is the load.
    max_forecast_age_seconds: older forecasts are stale: neutral score, never filtered.
    zone_weight: share of the zone's predicted load in the combined load (0 = node only).
    quantile: which published quantile is the load ("p90"; "mean" allowed).
    """

    threshold: float = 0.85
    horizon_seconds: float = 300.0
    max_forecast_age_seconds: float = 300.0
    zone_weight: float = 0.3
    quantile: str = "p90"

    def __post_init__(self) -> None:
        problems = []
        if not (isinstance(self.threshold, (int, float)) and 0 < self.threshold <= 1):
            problems.append(f"threshold: {self.threshold!r} must be a utilization in (0, 1]")
        for name in ("horizon_seconds", "max_forecast_age_seconds"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                problems.append(f"{name}: {v!r} must be a finite number > 0")
        if not (isinstance(self.zone_weight, (int, float)) and 0 <= self.zone_weight <= 1):
            problems.append(f"zone_weight: {self.zone_weight!r} must be in [0, 1]")
        if not isinstance(self.quantile, str) or not (self.quantile == "mean" or self.quantile.startswith("p")):
            problems.append(f"quantile: {self.quantile!r} must be 'mean' or a key like 'p90'")
        if problems:
            raise UserError("invalid node score settings: " + "; ".join(problems))


@dataclass(frozen=True)
class NodeLoad:
    """One node's placement view. ``status``: ok | stale | unknown | fallback."""

    node: str
    zone: str
    status: str
    score: int
    hot: bool = False
    load: float | None = None  # max(predicted, observed) utilization, what is compared
    predicted: float | None = None
    observed: float | None = None
    zone_load: float | None = None
    reason: str = ""


def unknown_load(node: str, zone: str = "") -> NodeLoad:
    return NodeLoad(node=node, zone=zone, status="unknown", score=NEUTRAL_SCORE, reason=f"no forecast for {node_series_id(node)}: neutral score")


def score_for_load(load: float, zone_load: float | None, zone_weight: float) -> int:
    """0..10, higher is better: 10 x (1 - combined load), rounded half up."""
    c = load if zone_load is None else (1.0 - zone_weight) * load + zone_weight * zone_load
    c = min(1.0, max(0.0, c))
    return int(math.floor(MAX_SCORE * (1.0 - c) + 0.5))


def _observed(fc: Forecast) -> float | None:
    if not fc.observed:
        return None
    v = float(fc.observed[-1][1])
    return v if math.isfinite(v) else None


def window_max(fc: Forecast, now: float, horizon_seconds: float, quantile: str) -> float | None:
    """Max of ``quantile`` over [now, now + horizon], on the piecewise-linear curve through
    (origin, last observed) and the published points; None when the forecast ends before now
    or lacks the quantile."""
    values = fc.mean if quantile == "mean" else fc.quantiles.get(quantile)
    if not values:
        return None
    pts = [(fc.origin + (i + 1) * fc.step_seconds, float(v)) for i, v in enumerate(values)]
    obs = _observed(fc)
    if obs is not None:
        pts.insert(0, (fc.origin, obs))
    end = now + horizon_seconds
    if now > pts[-1][0]:
        return None

    def at(t: float) -> float:
        if t <= pts[0][0]:
            return pts[0][1]
        for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
            if t <= t1:
                return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        return pts[-1][1]

    best = max([at(now), at(min(end, pts[-1][0]))] + [v for t, v in pts if now < t < end])
    return best if math.isfinite(best) else None


def _assess_one(fc: Forecast, now: float, s: NodeScoreSettings) -> tuple[str, float | None, float | None, float | None, str]:
    """(status, load, predicted, observed, reason) of one node or zone forecast."""
    age = now - fc.generated_at
    obs = _observed(fc)
    if age > s.max_forecast_age_seconds:
        return "stale", None, None, obs, f"forecast is stale ({age:.0f} s old > {s.max_forecast_age_seconds:g} s): neutral score"
    if fc.status == "fallback":
        if obs is None:
            return "stale", None, None, None, f"series is on the fallback ({fc.reason or 'no reason'}) and nothing is observed: neutral score"
        return "fallback", obs, None, obs, f"series is on the fallback ({fc.reason or 'no reason'}): using observed {obs:.2f}"
    pred = window_max(fc, now, s.horizon_seconds, s.quantile)
    if pred is None:
        return "stale", None, None, obs, f"forecast has no {s.quantile} over [now, now+{s.horizon_seconds:g}s]: neutral score"
    load = pred if obs is None else max(pred, obs)
    why = f"{s.quantile} max over the next {s.horizon_seconds:g} s is {pred:.2f} ({fc.model})"
    if obs is not None and obs > pred:
        why += f", below observed {obs:.2f}: using observed"
    return "ok", load, pred, obs, why


def assess_nodes(
    forecasts: Mapping[str, Forecast],
    now: float,
    settings: NodeScoreSettings | None = None,
    pause: Callable[[], None] | None = None,
    pause_every: int = 200,
) -> tuple[dict[str, NodeLoad], dict[str, float]]:
    """Published ``node/*`` and ``zone/*`` forecasts -> (per-node loads, per-zone loads).

    A zone's load is its own fresh forecast, else the capacity-weighted mean of its nodes'
    fresh loads. Stale or unknown nodes get ``NEUTRAL_SCORE`` and are never hot.
    ``pause`` (e.g. ``time.sleep(0)``) is called every ``pause_every`` nodes so a background
    caller hands the GIL to request threads often (5,000 nodes take ~0.1 s)."""
    s = settings or NodeScoreSettings()
    zone_fc: dict[str, float] = {}
    node_fcs: list[Forecast] = []
    for sid, fc in forecasts.items():
        if sid.startswith(ZONE_PREFIX):
            status, load, *_ = _assess_one(fc, now, s)
            if status in ("ok", "fallback") and load is not None:
                zone_fc[sid[len(ZONE_PREFIX) :]] = min(1.0, max(0.0, load))
        elif sid.startswith(NODE_PREFIX):
            node_fcs.append(fc)
    pre: list[tuple[str, str, str, float | None, float | None, float | None, str, float]] = []
    sums: dict[str, list[float]] = {}
    for i, fc in enumerate(node_fcs):
        if pause is not None and i and i % pause_every == 0:
            pause()
        node = str(fc.meta.get("node") or fc.series_id[len(NODE_PREFIX) :])
        zone = str(fc.meta.get("zone") or "")
        status, load, pred, obs, why = _assess_one(fc, now, s)
        try:
            w = float(fc.meta.get("cpu_cores") or 1.0)
        except (TypeError, ValueError):
            w = 1.0
        w = w if math.isfinite(w) and w > 0 else 1.0
        if load is not None:
            load = min(1.0, max(0.0, load))
            if zone:
                acc = sums.setdefault(zone, [0.0, 0.0])
                acc[0] += w * load
                acc[1] += w
        pre.append((node, zone, status, load, pred, obs, why, w))
    zones = dict(zone_fc)
    for zone, (num, den) in sums.items():
        if zone not in zones and den > 0:
            zones[zone] = num / den
    out: dict[str, NodeLoad] = {}
    for node, zone, status, load, pred, obs, why, _ in pre:
        if load is None:
            out[node] = NodeLoad(node=node, zone=zone, status=status, score=NEUTRAL_SCORE, observed=obs, zone_load=zones.get(zone), reason=why)
            continue
        zl = zones.get(zone) if zone else None
        score = score_for_load(load, zl, s.zone_weight)
        hot = load > s.threshold
        reason = why + (f"; zone {zone} load {zl:.2f}" if zl is not None else "")
        if hot:
            reason += f"; above threshold {s.threshold:g}"
        out[node] = NodeLoad(node=node, zone=zone, status=status, score=score, hot=hot, load=load, predicted=pred, observed=obs, zone_load=zl, reason=reason)
    return out, zones


def split_hot(
    names: Sequence[str], loads: Mapping[str, NodeLoad], threshold: float
) -> tuple[list[str], dict[str, str]]:
    """Filter rule: drop nodes predicted hot, keep everything else in input order.

    When *every* candidate is hot, nobody is dropped: a pod on a busy node beats a pod that
    cannot schedule (and the scheduler's own filters still apply)."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        nl = loads.get(name)
        if nl is not None and nl.hot:
            failed[name] = (
                f"foresight: predicted CPU utilization {nl.load:.2f} exceeds {threshold:g} within the horizon"
            )
        else:
            passed.append(name)
    if not passed and failed:
        return list(names), {}
    return passed, failed


def preferred_node_affinity(
    scores: Mapping[str, int] | Iterable[tuple[str, int]],
    top_n: int = 10,
    zone_scores: Mapping[str, int] | None = None,
    avoid: Iterable[str] = (),
    min_score: int = NEUTRAL_SCORE + 1,
) -> dict[str, Any]:
    """Scores -> a ``V1NodeAffinity``-shaped dict (API JSON casing) of *preferred* terms.

    - The ``top_n`` best nodes scoring at least ``min_score`` (default: better than an unknown
      node) each get a term ``weight = 10 x score`` (the API's 1..100) selecting the node by
      ``matchFields metadata.name`` (exact node names; the API allows exactly ONE value per
      In/NotIn field requirement, hence one term per node). Order: score desc, then input
      order (stable).
    - ``avoid`` (hot nodes) adds one term of weight ``10 x NEUTRAL_SCORE`` matching every node
      *except* them (ANDed ``NotIn`` requirements), so hot nodes rank below unknown ones, the
      same order the extender's filter and scores give.
    - ``zone_scores`` add ``topology.kubernetes.io/zone In [...]`` terms per distinct score.

    Preferences only: a warm pod still schedules when every preferred node is full.
    """
    if not isinstance(top_n, int) or top_n < 0:
        raise UserError(f"top_n: {top_n!r} must be an integer >= 0")
    items = list(scores.items()) if isinstance(scores, Mapping) else list(scores)
    order = sorted(range(len(items)), key=lambda i: (-int(items[i][1]), i))
    chosen = [items[i] for i in order if int(items[i][1]) >= min_score][:top_n]

    def weight(score: int) -> int:
        return max(1, min(100, MAX_SCORE * int(score)))

    terms: list[dict[str, Any]] = [
        {"weight": weight(sc), "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [str(name)]}]}}
        for name, sc in chosen
    ]
    hot = sorted({str(n) for n in avoid})
    if hot:
        terms.append({
            "weight": weight(NEUTRAL_SCORE),
            "preference": {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in hot]},
        })
    if zone_scores:
        groups: dict[int, list[str]] = {}
        for z, sc in zone_scores.items():
            if z and int(sc) >= min_score:
                groups.setdefault(int(sc), []).append(str(z))
        for sc in sorted(groups, reverse=True):
            terms.append({
                "weight": weight(sc),
                "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": sorted(groups[sc])}]},
            })
    return {"preferredDuringSchedulingIgnoredDuringExecution": terms}


def placement_affinity(
    store: ForecastStore,
    now: float | None = None,
    settings: NodeScoreSettings | None = None,
    top_n: int = 10,
) -> dict[str, Any]:
    """One call for the warm pool's Kubernetes backend: read the published node and zone
    forecasts, score them exactly as the scheduler extender does, and return the
    ``V1NodeAffinity``-shaped preferences (hot nodes avoided, cooler zones preferred).
    Reads the store: call it from a controller loop, not from a request handler."""
    s = settings or NodeScoreSettings()
    now = time.time() if now is None else float(now)
    ids = [x for x in store.list_series() if x.startswith((NODE_PREFIX, ZONE_PREFIX))]
    loads, zones = assess_nodes(store.latest_many(ids), now, s)
    ordered = sorted(loads.values(), key=lambda nl: nl.node)
    return preferred_node_affinity(
        {nl.node: nl.score for nl in ordered},
        top_n=top_n,
        zone_scores={z: score_for_load(v, None, 0.0) for z, v in zones.items()},
        avoid=[nl.node for nl in ordered if nl.hot],
    )
