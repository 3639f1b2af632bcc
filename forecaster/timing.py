"""The timing and targets of the served value, written once.

The adapter serves, the trainer's policy chooser scores, and the replay simulates one rule; these
are the numbers that rule assumes about a deployment. Each default here is the one every reader
uses (``forecaster.served.MetricSettings``, ``foresight serve``'s flags, ``forecaster.serving.
ServingSettings``, ``replay.simulate.ReplayConfig`` and ``foresight replay``'s flags), so a
changed default cannot leave a copy behind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DURATION_UNITS", "ServingTiming", "TIMING", "demand_lag_seconds"]


@dataclass(frozen=True)
class ServingTiming:
    """pod_startup_seconds: a new pod's create -> Ready; hpa_sync_seconds: the HPA controller's
    sync period (Kubernetes' default); lead_seconds: how far ahead the served value looks (a pod
    asked for now is ready a start-up later, and the HPA acts at its next sync);
    metric_delay_seconds: how old the newest CPU sample is when it reaches an HPA (scrape interval
    plus rate window); observed_read_seconds: how often the adapter re-reads each workload's
    demand itself (its floor: a reading up to this much older than the reactive HPA's CPU
    metric); max_forecast_age_seconds: an older forecast is stale (the trainer is not
    keeping up); max_observed_age_seconds: an older observed sample is no floor; hpa_target: the
    HPA's target (utilization or Value) the pods are sized at; slo_utilization: above this
    utilization of ready capacity a minute counts as an SLO violation."""

    pod_startup_seconds: float = 60.0
    hpa_sync_seconds: float = 15.0
    metric_delay_seconds: float = 90.0
    observed_read_seconds: float = 5.0
    max_forecast_age_seconds: float = 300.0
    max_observed_age_seconds: float = 900.0
    hpa_target: float = 0.7
    slo_utilization: float = 0.9

    @property
    def lead_seconds(self) -> float:
        return self.pod_startup_seconds + self.hpa_sync_seconds


TIMING = ServingTiming()


# A demand series is timed by its samples, but a range function reads a window that ends at the
# sample: rate(x[2m]) at 12:00 is the mean load of 11:58-12:00, the load of 11:59. The served
# window (now .. now + lead) is in the load's time, so it reads the series a half window later.
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_RANGE = re.compile(r"\[\s*((?:\d+(?:ms|s|m|h|d|w|y))+)\s*(?::[^\]]*)?\]")
# Prometheus duration units in seconds (also what source settings like 5m are read with)
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
# the range functions that read their window's mean (deriv: its least-squares slope, centred
# there too); irate, idelta, last/max/min/quantile_over_time and the rest read its end or an
# extreme, not its middle
_MEAN_OF_WINDOW = ("rate", "increase", "delta", "deriv", "avg_over_time", "sum_over_time")


def _range_seconds(text: str) -> float:
    return sum(float(n) * DURATION_UNITS[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text))


def _enclosing_function(query: str, pos: int) -> str:
    """The name of the function whose parentheses enclose ``pos`` ('' at the top level)."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        if query[i] == ")":
            depth += 1
        elif query[i] == "(":
            if depth == 0:
                m = re.search(r"([A-Za-z_]\w*)\s*$", query[:i])
                return m.group(1) if m else ""
            depth -= 1
    return ""


def demand_lag_seconds(query: str) -> float:
    """How far a demand query's values run behind the load they measure: half its longest range
    window read as a mean (``rate(...[2m])``: 60 s); 0 for ranges of ``irate``,
    ``last_over_time``, ``max_over_time`` and the like, and for a query without a range (a
    recording rule's name hides its window: that lag is not seen)."""
    q = _QUOTED.sub('""', query or "")  # a label regex like "w[0-9]m" is not a range
    lag = 0.0
    for m in _RANGE.finditer(q):
        if _enclosing_function(q, m.start()) in _MEAN_OF_WINDOW:
            lag = max(lag, _range_seconds(m.group(1)) / 2.0)
    return lag
