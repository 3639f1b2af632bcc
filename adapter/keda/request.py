"""A ScaledObject's trigger, read from KEDA's ``ScaledObjectRef``: which workload and metric it
asks for, its target and its activation settings. Every problem is reported at once, each naming
its ``scalerMetadata`` key and the fix (KEDA writes the message into the ScaledObject's events).

The namespace is ALWAYS ``ScaledObjectRef.namespace``, the ScaledObject's own: no metadata key
can name another, so a ScaledObject never reads another namespace's forecast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from adapter.responses import DNS_LABEL
from adapter.settings import METRIC_CORES
from forecaster.timing import TIMING

__all__ = ["KEDA_POLLING_SECONDS", "KEDA_COOLDOWN_SECONDS", "ScalerRequest", "ScalerRequestError", "parse_ref"]

KEDA_POLLING_SECONDS = 30.0  # a ScaledObject's default pollingInterval
KEDA_COOLDOWN_SECONDS = 300.0  # a ScaledObject's default cooldownPeriod
# KEDA passes the whole trigger metadata through, its own keys included: these are not ours
# to judge (``*FromEnv`` keys arrive resolved under their own name)
KEDA_KEYS = frozenset({"scalerAddress", "enableTLS", "unsafeSsl"})
# a DNS-1123 subdomain: Deployment and StatefulSet names
_NAME_MAX = 253


class ScalerRequestError(ValueError):
    """The trigger's metadata cannot be served; the message names every bad key and its fix."""


@dataclass(frozen=True)
class ScalerRequest:
    """One trigger of one ScaledObject. ``activation_lead_seconds``: how far ahead activation
    looks (pod start-up plus KEDA's polling interval)."""

    scaled_object: str
    namespace: str
    workload: str
    metric: str
    target_value: float
    activation_threshold: float
    cooldown_seconds: float
    activation_lead_seconds: float

    @property
    def series_id(self) -> str:
        return f"{self.namespace}/{self.workload}"

    @property
    def metric_name(self) -> str:
        """The name KEDA gives the HPA's external metric (after its ``sN-`` prefix)."""
        return f"{self.metric}-{self.workload}"

    @property
    def key(self) -> tuple[str, str, str, str]:
        """One activation state per ScaledObject trigger."""
        return self.namespace, self.scaled_object, self.workload, self.metric


KNOWN_KEYS = ("workload", "metric", "targetValue", "activationThreshold", "cooldownSeconds",
              "podStartupSeconds", "pollingIntervalSeconds")


def _number(meta: Mapping[str, str], key: str, default: float | None, problems: list[str], *,
            positive: bool = False) -> float:
    raw = meta.get(key)
    if raw is None or raw == "":
        if default is None:
            problems.append(f"scalerMetadata.{key}: missing; set it to a number > 0 in the trigger's metadata")
            return math.nan
        return default
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        bound = "> 0" if positive else ">= 0"
        problems.append(f"scalerMetadata.{key}: {raw!r} must be a finite number {bound}")
        return math.nan
    return v


def parse_ref(name: str, namespace: str, metadata: Mapping[str, str]) -> ScalerRequest:
    """The request of ScaledObject ``name`` in ``namespace`` with trigger ``metadata``, or
    ScalerRequestError naming every problem."""
    problems: list[str] = []
    if not DNS_LABEL.match(namespace or ""):
        problems.append(f"ScaledObjectRef.namespace: {namespace!r} is not a namespace name")
    if "namespace" in metadata:
        problems.append("scalerMetadata.namespace: not allowed; the namespace is always the ScaledObject's own "
                        "(remove the key and create the ScaledObject in the workload's namespace)")
    workload = metadata.get("workload", "")
    if not workload:
        problems.append("scalerMetadata.workload: missing; set it to the name of the workload foresight forecasts "
                        "(its Deployment or StatefulSet)")
    elif len(workload) > _NAME_MAX or "/" in workload or not all(DNS_LABEL.match(p) for p in workload.split(".")):
        problems.append(f"scalerMetadata.workload: {workload!r} is not a workload name (lower-case DNS name, no '/': "
                        "the namespace comes from the ScaledObject)")
    metric = metadata.get("metric") or METRIC_CORES
    if not metric.startswith("predicted_"):
        problems.append(f"scalerMetadata.metric: {metric!r} is not a served metric; use predicted_cpu_cores, "
                        "predicted_cpu_load_ratio or predicted_<declared metric>[_ratio]")
    target = _number(metadata, "targetValue", None, problems, positive=True)
    threshold = _number(metadata, "activationThreshold", 0.0, problems)
    cooldown = _number(metadata, "cooldownSeconds", KEDA_COOLDOWN_SECONDS, problems)
    startup = _number(metadata, "podStartupSeconds", TIMING.pod_startup_seconds, problems)
    polling = _number(metadata, "pollingIntervalSeconds", KEDA_POLLING_SECONDS, problems)
    unknown = sorted(k for k in metadata if k not in KNOWN_KEYS and k not in KEDA_KEYS and k != "namespace")
    if unknown:
        problems.append(f"scalerMetadata: unknown key(s) {', '.join(unknown)}; known: {', '.join(KNOWN_KEYS)}")
    if problems:
        raise ScalerRequestError(f"ScaledObject {namespace}/{name}: " + "; ".join(problems))
    return ScalerRequest(
        scaled_object=name, namespace=namespace, workload=workload, metric=metric, target_value=target,
        activation_threshold=threshold, cooldown_seconds=cooldown, activation_lead_seconds=startup + polling,
    )
