"""Published node forecasts -> per-node loads and 0..10 placement scores (pure functions, shared
by the scheduler extender and the warm pool so both rank nodes the same way).

A node's load per resource is the max of the published quantile (``p90``) over
[now, now + horizon], never below its last observed utilization.

The score combines CPU and memory as the **minimum of the two free fractions**:

    cpu_free    = 1 - ((1 - zone_weight) x cpu_load + zone_weight x zone_cpu_load)
    memory_free = 1 - memory_load - pod_memory_request / allocatable_memory
    score       = round_half_up(10 x min(cpu_free, memory_free))        (MaxExtenderPriority 10)

Why the minimum and not kube-scheduler's weighted mean (NodeResourcesFit LeastAllocated:
``sum(w_r x free_r) / sum(w_r)``): a node is only as roomy as its scarcest resource, and the
two do not trade. Idle CPU does not make up for memory about to run out: CPU contention
throttles, a full node's memory OOM-kills or evicts. A mean would rank a node with 90% free
CPU and 5% free memory (mean 0.475) above one with 40% of both (0.40). Balance between the
two is already scored by the scheduler's own NodeResourcesBalancedAllocation plugin, which
runs beside the extender on requests; ours adds what requests do not show, predicted use.

Degrading: a node without a fresh memory forecast is scored on CPU alone (``basis: "cpu"``);
one without a fresh CPU forecast counts its CPU as neutral (free 0.5), so memory can only
lower its score. Stale or missing forecasts are never filtered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, ClassVar, Mapping

from core.errors import ConfigError
from core.store import Forecast
from forecaster.nodes.inventory import NODE_MEMORY_PREFIX, NODE_PREFIX, ZONE_PREFIX, node_series_id
from forecaster.served import demand_lag

MAX_SCORE = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
NEUTRAL_SCORE = 5  # unknown node or stale forecast: neither preferred nor avoided
GIB = float(2**30)


def finite_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class NodeScoreSettings:
    """How node forecasts become placement decisions (shared by extender and warm pool; the
    extender's ``SchedulerSettings`` extends it, so these defaults and checks are written once).

    threshold: predicted CPU utilization (0..1) above which a node is filtered out ("hot").
    memory_threshold: a node is filtered out for a pod when its predicted memory use plus the
      pod's memory request would exceed this fraction of the node's allocatable memory (0.9:
      keep 10% of allocatable as headroom for what the forecast misses; memory does not
      throttle, it OOM-kills). Nodes without a fresh memory forecast are judged on CPU only.
    horizon_seconds: look-ahead window; a node's load is the max of ``quantile`` over
      [now, now + horizon] (and never below its last observed utilization).
    max_forecast_age_seconds: older forecasts are stale: neutral score, never filtered.
    zone_weight: share of the zone's predicted CPU load in a node's score (0 = node load only).
    quantile: published quantile used as the load ("p90", or "mean").
    """

    # the settings' name in errors, and the prefix of each problem's path
    _what: ClassVar[str] = "node score settings"
    _path: ClassVar[str] = ""

    threshold: float = 0.85
    horizon_seconds: float = 300.0
    max_forecast_age_seconds: float = 300.0
    zone_weight: float = 0.3
    quantile: str = "p90"
    memory_threshold: float = 0.9

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError(self._what, problems)

    def problems(self) -> list[str]:
        """Every invalid field, each with its path, what it must be and an example."""
        p, out = self._path, []
        if not (finite_number(self.threshold) and 0 < self.threshold <= 1):
            out.append(f"{p}threshold: {self.threshold!r} must be a utilization in (0, 1], e.g. 0.85")
        if not (finite_number(self.memory_threshold) and 0 < self.memory_threshold <= 1):
            out.append(f"{p}memory_threshold: {self.memory_threshold!r} must be a fraction of allocatable "
                       "memory in (0, 1], e.g. 0.9")
        for name in ("horizon_seconds", "max_forecast_age_seconds"):
            v = getattr(self, name)
            if not (finite_number(v) and v > 0):
                out.append(f"{p}{name}: {v!r} must be a finite number > 0, e.g. 300")
        if not (finite_number(self.zone_weight) and 0 <= self.zone_weight <= 1):
            out.append(f"{p}zone_weight: {self.zone_weight!r} must be in [0, 1], e.g. 0.3")
        if not isinstance(self.quantile, str) or not (self.quantile == "mean" or self.quantile.startswith("p")):
            out.append(f"{p}quantile: {self.quantile!r} must be 'mean' or a key like 'p90'")
        return out


@dataclass(frozen=True)
class NodeLoad:
    """One node's placement view for a pod without a memory request.

    ``status`` (CPU) and ``memory_status``: ok | stale | unknown | fallback. ``hot``: filtered
    for any pod (CPU above threshold, or memory already past ``memory_threshold``).
    ``basis``: what ``score`` weighed, "cpu+memory", "cpu", "memory" or "none".
    """

    node: str
    zone: str
    status: str
    score: int
    hot: bool = False
    load: float | None = None  # CPU: max(predicted, observed) utilization, what is compared
    predicted: float | None = None
    observed: float | None = None
    zone_load: float | None = None
    reason: str = ""
    cpu_score: int = NEUTRAL_SCORE
    cpu_hot: bool = False
    memory_status: str = "unknown"
    memory_load: float | None = None  # fraction of allocatable memory, max(predicted, observed)
    memory_bytes: float | None = None  # allocatable memory
    memory_full: bool = False
    basis: str = "cpu"


def unknown_load(node: str, zone: str = "") -> NodeLoad:
    return NodeLoad(node=node, zone=zone, status="unknown", score=NEUTRAL_SCORE, basis="none",
                    reason=f"cpu: no forecast for {node_series_id(node)}: neutral score")


def _round_score(free: float) -> int:
    return int(math.floor(MAX_SCORE * min(1.0, max(0.0, free)) + 0.5))


def score_for_load(load: float, zone_load: float | None, zone_weight: float) -> int:
    """CPU score 0..10, higher is better: 10 x (1 - combined load), rounded half up."""
    c = load if zone_load is None else (1.0 - zone_weight) * load + zone_weight * zone_load
    return _round_score(1.0 - c)


def memory_score(memory_load: float, request_bytes: float, allocatable_bytes: float) -> int:
    """Memory score 0..10: 10 x the allocatable fraction left after predicted use and the request."""
    return _round_score(1.0 - memory_load - request_bytes / allocatable_bytes)


def memory_room_bytes(nl: NodeLoad, memory_threshold: float) -> float | None:
    """The largest memory request that still fits under ``memory_threshold`` (negative: none
    fits); None when the node has no fresh memory view (never filtered on memory)."""
    if nl.memory_load is None or not nl.memory_bytes:
        return None
    return (memory_threshold - nl.memory_load) * nl.memory_bytes


def score_for_pod(nl: NodeLoad, request_bytes: float) -> int:
    """The node's score for a pod requesting ``request_bytes`` of memory (min of CPU and memory)."""
    if nl.memory_load is None or not nl.memory_bytes:
        return nl.cpu_score
    return min(nl.cpu_score, memory_score(nl.memory_load, request_bytes, nl.memory_bytes))


def memory_message_parts(nl: NodeLoad, memory_threshold: float, horizon_seconds: float) -> tuple[str, str]:
    """The filter message around the request's size (which differs per pod): the extender
    precomputes these per node and only formats the request per call."""
    return (
        f"foresight: predicted memory {nl.memory_load * nl.memory_bytes / GIB:.2f} GiB + request ",
        f" GiB exceeds {memory_threshold:g} of allocatable {nl.memory_bytes / GIB:.2f} GiB within the next {horizon_seconds:g} s",
    )


def request_text(request_bytes: float) -> str:
    return f"{request_bytes / GIB:.2f}"


def memory_message(nl: NodeLoad, request_bytes: float, memory_threshold: float, horizon_seconds: float) -> str:
    head, tail = memory_message_parts(nl, memory_threshold, horizon_seconds)
    return head + request_text(request_bytes) + tail


def cpu_message(nl: NodeLoad, threshold: float, horizon_seconds: float) -> str:
    msg = f"foresight: predicted CPU utilization {nl.load:.2f} exceeds {threshold:g} within the next {horizon_seconds:g} s"
    if nl.memory_load is None:
        msg += " (no fresh memory forecast: judged on CPU only)"
    return msg


def _observed(fc: Forecast) -> float | None:
    if not fc.observed:
        return None
    v = float(fc.observed[-1][1])
    return v if math.isfinite(v) else None


def window_max(fc: Forecast, now: float, horizon_seconds: float, quantile: str) -> float | None:
    """Max of ``quantile`` over [now, now + horizon] in the node's time, on the piecewise-linear
    curve through (origin, last observed) and the published points; None when the forecast ends
    before that window starts or lacks the quantile. A series that runs behind the node (its
    meta's ``demand_lag_seconds``: a rate window) is read that much later on its own clock."""
    values = fc.mean if quantile == "mean" else fc.quantiles.get(quantile)
    if not values:
        return None
    now = now + demand_lag(fc)
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


def assess_one(fc: Forecast, now: float, s: NodeScoreSettings) -> tuple[str, float | None, float | None, float | None, str]:
    """(status, load, predicted, observed, reason) of one node, memory or zone forecast."""
    age = now - fc.generated_at
    obs = _observed(fc)
    if age > s.max_forecast_age_seconds:
        return "stale", None, None, obs, f"forecast is stale ({age:.0f} s old > {s.max_forecast_age_seconds:g} s): neutral score"
    if fc.status == "fallback":
        if obs is None:
            return ("stale", None, None, None,
                    f"series is on the fallback ({fc.reason or 'no reason'}) and nothing is observed: neutral score")
        return "fallback", obs, None, obs, f"series is on the fallback ({fc.reason or 'no reason'}): using observed {obs:.2f}"
    pred = window_max(fc, now, s.horizon_seconds, s.quantile)
    if pred is None:
        return "stale", None, None, obs, f"forecast has no {s.quantile} over [now, now+{s.horizon_seconds:g}s]: neutral score"
    load = pred if obs is None else max(pred, obs)
    why = f"{s.quantile} max over the next {s.horizon_seconds:g} s is {pred:.2f} ({fc.model})"
    if obs is not None and obs > pred:
        why += f", below observed {obs:.2f}: using observed"
    return "ok", load, pred, obs, why


def _finite_positive(v: object) -> float | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def with_memory(nl: NodeLoad, fc: Forecast | None, now: float, s: NodeScoreSettings) -> NodeLoad:
    """``nl`` (CPU view) with the node's memory forecast folded in, or the CPU-only fallback
    and the reason why."""
    cpu_basis = "cpu" if nl.status in ("ok", "fallback") else "none"
    if fc is None:
        return replace(nl, basis=cpu_basis,
                       reason=nl.reason + f"; memory: no forecast for {NODE_MEMORY_PREFIX}{nl.node}: scored on CPU only")
    alloc = _finite_positive(fc.meta.get("memory_bytes"))
    status, load, _, _, why = assess_one(fc, now, s)
    if alloc is None:
        status, load, why = "unknown", None, "the forecast carries no allocatable memory (meta.memory_bytes)"
    if load is None:
        return replace(nl, basis=cpu_basis, memory_status=status, reason=nl.reason + f"; memory: {why}; scored on CPU only")
    load = min(1.0, max(0.0, load))
    full = load > s.memory_threshold
    score = min(nl.cpu_score, memory_score(load, 0.0, alloc))
    reason = nl.reason + f"; memory: {why} of {alloc / GIB:.2f} GiB allocatable"
    if full:
        reason += f"; above memory threshold {s.memory_threshold:g}"
    return replace(nl, score=score, hot=nl.cpu_hot or full, memory_status=status, memory_load=load, memory_bytes=alloc,
                   memory_full=full, basis="cpu+memory" if cpu_basis == "cpu" else "memory", reason=reason)


def _node_weight(fc: Forecast) -> float:
    w = _finite_positive(fc.meta.get("cpu_cores") or 1.0)
    return w if w is not None else 1.0


def assess_nodes(
    forecasts: Mapping[str, Forecast],
    now: float,
    settings: NodeScoreSettings | None = None,
    pause: Callable[[], None] | None = None,
    pause_every: int = 200,
) -> tuple[dict[str, NodeLoad], dict[str, float]]:
    """Published ``node/*``, ``node-memory/*`` and ``zone/*`` forecasts -> (per-node loads,
    per-zone CPU loads).

    A zone's load is its own fresh forecast, else the capacity-weighted mean of its nodes'
    fresh loads. Stale or unknown nodes get ``NEUTRAL_SCORE`` and are never hot.
    ``pause`` (e.g. ``time.sleep(0)``) is called every ``pause_every`` nodes so a background
    caller hands the GIL to request threads often (5,000 nodes take ~0.1 s)."""
    s = settings or NodeScoreSettings()
    zone_fc: dict[str, float] = {}
    node_fcs: list[Forecast] = []
    mem_fcs: dict[str, Forecast] = {}
    for sid, fc in forecasts.items():
        if sid.startswith(ZONE_PREFIX):
            status, load, *_ = assess_one(fc, now, s)
            if status in ("ok", "fallback") and load is not None:
                zone_fc[sid[len(ZONE_PREFIX) :]] = min(1.0, max(0.0, load))
        elif sid.startswith(NODE_PREFIX):
            node_fcs.append(fc)
        elif sid.startswith(NODE_MEMORY_PREFIX):
            mem_fcs[str(fc.meta.get("node") or sid[len(NODE_MEMORY_PREFIX) :])] = fc
    pre: list[tuple[str, str, str, float | None, float | None, float | None, str]] = []
    sums: dict[str, list[float]] = {}
    for i, fc in enumerate(node_fcs):
        if pause is not None and i and i % pause_every == 0:
            pause()
        node = str(fc.meta.get("node") or fc.series_id[len(NODE_PREFIX) :])
        zone = str(fc.meta.get("zone") or "")
        status, load, pred, obs, why = assess_one(fc, now, s)
        if load is not None:
            load = min(1.0, max(0.0, load))
            if zone:
                acc = sums.setdefault(zone, [0.0, 0.0])
                w = _node_weight(fc)
                acc[0] += w * load
                acc[1] += w
        pre.append((node, zone, status, load, pred, obs, why))
    zones = dict(zone_fc)
    for zone, (num, den) in sums.items():
        if zone not in zones and den > 0:
            zones[zone] = num / den
    out: dict[str, NodeLoad] = {}
    for i, (node, zone, status, load, pred, obs, why) in enumerate(pre):
        if pause is not None and i and i % pause_every == 0:
            pause()
        out[node] = with_memory(_cpu_load(node, zone, status, load, pred, obs, why, zones, s), mem_fcs.get(node), now, s)
    for node in sorted(set(mem_fcs) - set(out)):  # memory known, CPU not: CPU counts as neutral
        fc = mem_fcs[node]
        out[node] = with_memory(unknown_load(node, str(fc.meta.get("zone") or "")), fc, now, s)
    return out, zones


def _cpu_load(node: str, zone: str, status: str, load: float | None, pred: float | None, obs: float | None, why: str,
              zones: Mapping[str, float], s: NodeScoreSettings) -> NodeLoad:
    if load is None:
        return NodeLoad(node=node, zone=zone, status=status, score=NEUTRAL_SCORE, observed=obs, zone_load=zones.get(zone),
                        reason="cpu: " + why)
    zl = zones.get(zone) if zone else None
    score = score_for_load(load, zl, s.zone_weight)
    hot = load > s.threshold
    reason = "cpu: " + why + (f"; zone {zone} load {zl:.2f}" if zl is not None else "")
    if hot:
        reason += f"; above threshold {s.threshold:g}"
    return NodeLoad(node=node, zone=zone, status=status, score=score, hot=hot, load=load, predicted=pred, observed=obs,
                    zone_load=zl, reason=reason, cpu_score=score, cpu_hot=hot)
