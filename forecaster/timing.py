"""The timing and targets of the served value, written once.

The adapter serves, the trainer's policy chooser scores, and the replay simulates one rule; these
are the numbers that rule assumes about a deployment. Each default here is the one every reader
uses (``forecaster.served.MetricSettings``, ``foresight serve``'s flags, ``forecaster.serving.
ServingSettings``, ``replay.simulate.ReplayConfig`` and ``foresight replay``'s flags), so a
changed default cannot leave a copy behind.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ServingTiming", "TIMING"]


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
    observed_read_seconds: float = 15.0
    max_forecast_age_seconds: float = 300.0
    max_observed_age_seconds: float = 900.0
    hpa_target: float = 0.7
    slo_utilization: float = 0.9

    @property
    def lead_seconds(self) -> float:
        return self.pod_startup_seconds + self.hpa_sync_seconds


TIMING = ServingTiming()
