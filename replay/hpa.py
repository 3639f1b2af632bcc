"""The HPA v2 controller for one HorizontalPodAutoscaler, exactly enough to simulate it.

Follows kubernetes/kubernetes pkg/controller/podautoscaler (horizontal.go,
replica_calculator.go) and the autoscaling/v2 defaults, as summarised in
../shared/reference/hpa-algorithm.md. PURE: no clock (``now`` is passed in), no I/O.
The only state is what the real controller keeps per HPA: the timestamped recommendations
(for stabilization) and the timestamped scale-up / scale-down events (for rate limits).

Details that change results and are pinned by tests/replay/test_hpa.py:
- windows and policy periods are half-open: a record exactly W seconds old is OUT
  (the controller keeps records whose timestamp is ``After(now - W)``);
- the recommendation history is seeded with the current replica count at the first sync;
- the recorded recommendation is the raw desired count (before stabilization and limits);
- CPU utilization is an integer percent (floor of milli-usage * 100 / milli-request);
- external metric values are compared in milli-units, each value rounded up (MilliValue);
- the resource metric treats unready pods as 0% on a scale-up and missing pods as 0% on a
  scale-up / 100% on a scale-down, and refuses to flip direction because of them;
- a metric that cannot be computed is invalid; every metric invalid, or some invalid and
  the valid ones would scale down: no change this sync (and nothing recorded).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_SCALE_DOWN",
    "DEFAULT_SCALE_UP",
    "HPA",
    "HPASpec",
    "ScalingPolicy",
    "ScalingRules",
    "SyncResult",
    "external_value_proposal",
    "external_average_value_proposal",
    "milli",
    "resource_utilization_proposal",
]


@dataclass(frozen=True)
class ScalingPolicy:
    type: str  # "Pods" | "Percent"
    value: int
    period_seconds: int

    def __post_init__(self) -> None:
        if self.type not in ("Pods", "Percent"):
            raise ValueError(f"scaling policy type {self.type!r} must be 'Pods' or 'Percent'")
        if self.value <= 0 or self.period_seconds <= 0:
            raise ValueError("scaling policy value and period_seconds must be > 0")


@dataclass(frozen=True)
class ScalingRules:
    stabilization_window_seconds: int
    select_policy: str = "Max"  # "Max" | "Min" | "Disabled"
    policies: tuple[ScalingPolicy, ...] = ()

    def __post_init__(self) -> None:
        if self.select_policy not in ("Max", "Min", "Disabled"):
            raise ValueError(f"select_policy {self.select_policy!r} must be Max, Min or Disabled")
        if self.stabilization_window_seconds < 0:
            raise ValueError("stabilization_window_seconds must be >= 0")

    @property
    def longest_period(self) -> int:
        return max((p.period_seconds for p in self.policies), default=0)


# autoscaling/v2 defaults.go: GenerateHPAScaleUpRules / GenerateHPAScaleDownRules
DEFAULT_SCALE_UP = ScalingRules(
    0, "Max", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15))
)
DEFAULT_SCALE_DOWN = ScalingRules(300, "Max", (ScalingPolicy("Percent", 100, 15),))


@dataclass(frozen=True)
class HPASpec:
    min_replicas: int = 1
    max_replicas: int = 100
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN
    tolerance_up: float = 0.1
    tolerance_down: float = 0.1

    def __post_init__(self) -> None:
        if not (0 <= self.min_replicas <= self.max_replicas) or self.max_replicas < 1:
            raise ValueError(
                f"need 0 <= min_replicas <= max_replicas and max_replicas >= 1 "
                f"(got min {self.min_replicas}, max {self.max_replicas})"
            )

    def within_tolerance(self, ratio: float) -> bool:
        return (1.0 - self.tolerance_down) <= ratio <= (1.0 + self.tolerance_up)


def milli(value: float) -> int:
    """resource.Quantity.MilliValue(): the value in milli-units, rounded up.

    A 1e-9 guard keeps float noise (0.7 * 1000 = 700.0000000001) from adding a milli.
    """
    return int(math.ceil(value * 1000.0 - 1e-9))


# ---------------------------------------------------------------- metric proposals
# Each returns the replica proposal, or None when the metric is invalid this sync.


def resource_utilization_proposal(
    spec: HPASpec,
    current_replicas: int,
    ready_usage_milli: int,
    ready_pods: int,
    request_milli_per_pod: int,
    target_utilization_percent: int,
    unready_pods: int = 0,
    missing_pods: int = 0,
) -> int | None:
    """GetResourceReplicas for a Resource metric with a Utilization target (e.g. CPU 70%).

    ``ready_usage_milli``: total usage of the ready pods that reported metrics (milli-cores);
    ``ready_pods``: how many they are. ``unready_pods``: pods not yet ready (ignored on a
    scale-down, counted at 0% on a scale-up). ``missing_pods``: ready pods without metrics.
    All pods request ``request_milli_per_pod``.
    """
    if current_replicas + unready_pods + missing_pods + ready_pods == 0:
        return None  # "no pods returned by selector"
    if ready_pods <= 0:
        return None  # "did not receive metrics for targeted pods (pods might be unready)"
    if request_milli_per_pod <= 0 or target_utilization_percent <= 0:
        return None  # "missing request for cpu"
    utilization = (ready_usage_milli * 100) // (request_milli_per_pod * ready_pods)
    ratio = utilization / target_utilization_percent
    scale_up_with_unready = unready_pods > 0 and ratio > 1.0
    if not scale_up_with_unready and missing_pods == 0:
        if spec.within_tolerance(ratio):
            return current_replicas
        return int(math.ceil(ratio * ready_pods))
    total_usage = ready_usage_milli
    n = ready_pods
    if missing_pods > 0:
        if ratio < 1.0:
            fallback = max(100, target_utilization_percent)
            total_usage += missing_pods * request_milli_per_pod * fallback // 100
            n += missing_pods
        elif ratio > 1.0:
            n += missing_pods  # at 0%
    if scale_up_with_unready:
        n += unready_pods  # at 0%
    new_utilization = (total_usage * 100) // (request_milli_per_pod * n)
    new_ratio = new_utilization / target_utilization_percent
    if (
        spec.within_tolerance(new_ratio)
        or (ratio > 1.0 and new_ratio < 1.0)
        or (ratio < 1.0 and new_ratio > 1.0)
    ):
        return current_replicas
    new_replicas = int(math.ceil(new_ratio * n))
    if (new_ratio < 1.0 and new_replicas > current_replicas) or (
        new_ratio > 1.0 and new_replicas < current_replicas
    ):
        return current_replicas
    return new_replicas


def _usage_and_target(values, target_value: float) -> tuple[int, int] | None:
    """Summed metric values and the target, both in milli-units as the HPA reads them; None when
    the metric is invalid (no items, a non-finite value) or the target is not positive."""
    if not values:
        return None
    usage = 0
    for v in values:
        if v is None or not math.isfinite(v):
            return None
        usage += milli(v)
    target = milli(target_value)
    return (usage, target) if target > 0 else None


def external_value_proposal(
    spec: HPASpec,
    current_replicas: int,
    values: list[float] | tuple[float, ...] | None,
    target_value: float,
    ready_pods: int,
) -> int | None:
    """GetExternalMetricReplicas with a Value target: r = sum(values) / target (milli-units);
    within tolerance -> current replicas, else ceil(r * readyPods). ``values=None`` or an
    empty list is an invalid metric (the adapter failed / returned no items)."""
    um = _usage_and_target(values, target_value)
    if um is None:
        return None
    usage, target = um
    ratio = usage / target
    if current_replicas == 0:
        return int(math.ceil(ratio))
    if spec.within_tolerance(ratio):
        return current_replicas
    return int(math.ceil(ratio * ready_pods))


def external_average_value_proposal(
    spec: HPASpec,
    current_replicas: int,
    status_replicas: int,
    values: list[float] | tuple[float, ...] | None,
    target_average_value: float,
) -> int | None:
    """GetExternalPerPodMetricReplicas: r = u / (A * status.replicas); within tolerance ->
    status.replicas, else ceil(u / A)."""
    um = _usage_and_target(values, target_average_value)
    if um is None:
        return None
    usage, target = um
    replicas = int(math.ceil(usage / target))
    if status_replicas > 0:
        ratio = usage / (target * status_replicas)
        if spec.within_tolerance(ratio):
            return status_replicas
    return replicas


# ---------------------------------------------------------------- the controller


@dataclass(frozen=True)
class SyncResult:
    desired: int  # the new scale.spec.replicas (== current when nothing changes)
    raw: int | None  # max over valid proposals (None: no valid metric / not computed)
    reason: str


@dataclass
class HPA:
    """Per-HPA controller state and one ``sync``. Feed it the proposals of this sync."""

    spec: HPASpec = field(default_factory=HPASpec)
    recommendations: deque = field(default_factory=deque)  # (t, replicas), oldest first
    scale_up_events: deque = field(default_factory=deque)  # (t, +change)
    scale_down_events: deque = field(default_factory=deque)  # (t, +removed)
    _seeded: bool = False

    def sync(self, now: float, current_replicas: int, proposals) -> SyncResult:
        """One reconcile of the HPA at time ``now`` with spec replicas ``current_replicas``.

        ``proposals``: one entry per metric, an int proposal or None when invalid.
        """
        spec = self.spec
        S = current_replicas
        if S == 0 and spec.min_replicas != 0:
            return SyncResult(S, None, "scaling disabled (replicas 0)")
        if S > spec.max_replicas:
            desired, raw, reason = spec.max_replicas, None, "above max replicas"
        elif S < spec.min_replicas:
            desired, raw, reason = spec.min_replicas, None, "below min replicas"
        else:
            invalid = 0
            raw = 0
            for p in proposals:
                if p is None:
                    invalid += 1
                elif p > raw:
                    raw = p
            if invalid >= len(proposals) or (invalid > 0 and raw < S):
                return SyncResult(S, None, "invalid metrics: no change")
            desired = self._normalize(now, S, raw)
            reason = "computed"
        if desired != S:
            self._store_event(now, S, desired)
        return SyncResult(desired, raw, reason)

    # -- normalizeDesiredReplicasWithBehaviors
    def _normalize(self, now: float, S: int, raw: int) -> int:
        spec = self.spec
        recs = self.recommendations
        if not self._seeded:
            self._seeded = True
            if spec.scale_down.stabilization_window_seconds > 0:
                recs.append((now, S))
        up_cut = now - spec.scale_up.stabilization_window_seconds
        down_cut = now - spec.scale_down.stabilization_window_seconds
        old_cut = min(up_cut, down_cut)
        # the controller overwrites one record older than both windows; dropping every
        # such record is equivalent (they never count again)
        while recs and recs[0][0] < old_cut:
            recs.popleft()
        up_rec = raw
        down_rec = raw
        for t, r in recs:
            if t > up_cut and r < up_rec:
                up_rec = r
            if t > down_cut and r > down_rec:
                down_rec = r
        rec = S
        if rec < up_rec:
            rec = up_rec
        if rec > down_rec:
            rec = down_rec
        recs.append((now, raw))
        return self._rate_limit(now, S, rec)

    # -- convertDesiredReplicasWithBehaviorRate
    def _rate_limit(self, now: float, S: int, desired: int) -> int:
        spec = self.spec
        if desired > S:
            limit = self._limit(now, S, spec.scale_up, up=True)
            if limit < S:
                limit = S
            allowed = min(spec.max_replicas, limit)
            return allowed if desired > allowed else desired
        if desired < S:
            limit = self._limit(now, S, spec.scale_down, up=False)
            if limit > S:
                limit = S
            allowed = max(spec.min_replicas, limit)
            return allowed if desired < allowed else desired
        return desired

    def _limit(self, now: float, S: int, rules: ScalingRules, up: bool) -> int:
        if rules.select_policy == "Disabled":
            return S
        use_max = (rules.select_policy == "Max") == up  # Max change: largest up, smallest down
        result = None
        for pol in rules.policies:
            cut = now - pol.period_seconds
            added = sum(c for t, c in self.scale_up_events if t > cut)
            removed = sum(c for t, c in self.scale_down_events if t > cut)
            start = S - added + removed
            if up:
                proposed = start + pol.value if pol.type == "Pods" else int(math.ceil(start * (1 + pol.value / 100)))
            else:
                proposed = start - pol.value if pol.type == "Pods" else int(start * (1 - pol.value / 100))
            if result is None:
                result = proposed
            elif use_max:
                result = max(result, proposed)
            else:
                result = min(result, proposed)
        if result is None:  # no policies: unlimited in that direction
            return self.spec.max_replicas if up else self.spec.min_replicas
        return result

    def _store_event(self, now: float, S: int, new: int) -> None:
        spec = self.spec
        if new > S:
            ev, keep = self.scale_up_events, spec.scale_up.longest_period
            ev.append((now, new - S))
        else:
            ev, keep = self.scale_down_events, spec.scale_down.longest_period
            ev.append((now, S - new))
        cut = now - keep
        while ev and ev[0][0] <= cut:
            ev.popleft()
