"""PredictiveAutoscaler with ``spec.scaler: KEDA`` -> its ``keda.sh/v1alpha1`` ScaledObject (pure).

For clusters where KEDA owns ``v1beta1.external.metrics.k8s.io``: in place of the HPA
(``kubeoperator.reconcile.desired_hpa``), KEDA is given one ``external-push`` trigger per
predicted metric on foresight's KEDA scaler (adapter/keda/), authenticated by the chart's
(Cluster)TriggerAuthentication, plus the reactive CPU floor as KEDA's ``cpu`` trigger. KEDA
builds the HPA from it (``keda-hpa-<name>``) with the same metric, target type and target value
as the HPA path, and activates the target from zero when the scaler says the forecast load is
coming. Observe mode renders nothing (the reconcile step does not call this).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kubeoperator.spec import AutoscalerSpec

__all__ = ["KEDA_API_VERSION", "KedaTarget", "desired_scaled_object", "keda_hpa_name"]

KEDA_API_VERSION = "keda.sh/v1alpha1"


@dataclass(frozen=True)
class KedaTarget:
    """Where KEDA finds foresight's scaler, and how it authenticates to it (the chart's values
    ``keda.scaler`` and ``keda.triggerAuthentication``).

    scaler_address: host:port of the scaler's Service; auth_kind/auth_name: the
    (Cluster)TriggerAuthentication carrying caCert, tlsClientCert and tlsClientKey;
    polling_interval_seconds: the ScaledObject's pollingInterval (also part of the activation
    lead the scaler looks ahead); cooldown_period_seconds: KEDA's wait, after the scaler last
    said active, before it scales to zero."""

    scaler_address: str = "foresight-keda.foresight.svc:9443"
    auth_kind: str = "ClusterTriggerAuthentication"
    auth_name: str = "foresight-keda"
    polling_interval_seconds: int = 30
    cooldown_period_seconds: int = 300


def keda_hpa_name(pa: AutoscalerSpec) -> str:
    """The HPA KEDA creates for the ScaledObject (KEDA's default name)."""
    return f"keda-hpa-{pa.name}"


def desired_scaled_object(pa: AutoscalerSpec, keda: KedaTarget, target_value: str, behavior: dict,
                          managed_by: dict[str, str]) -> dict:
    """The ScaledObject. ``target_value``: the HPA path's target Value quantity (the served
    ratio's target); ``behavior``: the HPA behaviour the HPA path would use, given to KEDA's HPA.

    The scaler's own ``cooldownSeconds`` is 0 here: KEDA's ``cooldownPeriod`` already waits that
    long after the scaler's last "active" (forecast or observed demand above the threshold)
    before scaling to zero, so the one cooldown is KEDA's and is not counted twice."""
    triggers: list[dict[str, Any]] = []
    if pa.floor_enabled:
        triggers.append({"type": "cpu", "name": "reactive-cpu-floor", "metricType": "Utilization",
                         "metadata": {"value": str(pa.floor_utilization)}})
    for m in pa.metrics:
        triggers.append({
            "type": "external-push", "name": f"predicted-{m.name}".replace("_", "-").lower(), "metricType": "Value",
            "metadata": {"scalerAddress": keda.scaler_address, "enableTLS": "true", "workload": pa.target_name,
                         "metric": m.external_metric, "targetValue": _number(target_value),
                         "pollingIntervalSeconds": str(keda.polling_interval_seconds), "cooldownSeconds": "0"},
            "authenticationRef": {"name": keda.auth_name, "kind": keda.auth_kind},
        })
    return {
        "apiVersion": KEDA_API_VERSION, "kind": "ScaledObject",
        "metadata": {"name": pa.name, "namespace": pa.namespace, "labels": dict(managed_by),
                     "ownerReferences": [pa.owner_reference]},
        "spec": {
            "scaleTargetRef": {"apiVersion": pa.target_api_version, "kind": pa.target_kind, "name": pa.target_name},
            "minReplicaCount": pa.min_replicas, "maxReplicaCount": pa.max_replicas,
            "pollingInterval": keda.polling_interval_seconds, "cooldownPeriod": keda.cooldown_period_seconds,
            "advanced": {"horizontalPodAutoscalerConfig": {"name": keda_hpa_name(pa),
                                                           "behavior": copy.deepcopy(behavior)}},
            "triggers": triggers,
        },
    }


def _number(quantity: str) -> str:
    """A milli-quantity ("700m") as the plain number KEDA's trigger metadata takes ("0.7")."""
    if quantity.endswith("m"):
        return f"{int(quantity[:-1]) / 1000:g}"
    return quantity
