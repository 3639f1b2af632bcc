"""The would-have line is what Act mode does on the same demand: an HPA (replay.hpa, which
tests/e2e/test_hpa_fidelity.py holds to the real controller) fed by what the adapter serves
(``AdapterCore.served``, the ratio divided by the pods the HPA counts, read as the HPA reads a
quantity) scales a workload through a day-like ramp; the Observe-mode shadow, fed the same
forecasts, proposes the same replicas at every sync."""

from __future__ import annotations

import math

from adapter.core import AdapterCore
from adapter.quantity import format_quantity, parse_quantity
from adapter.settings import AdapterSettings
from core.store import Forecast, MemoryForecastStore
from forecaster.served import observed_now
from kubeoperator.observe import Capacity, hpa_spec
from kubeoperator.reconcile import SHIPPED_BEHAVIOR, reconcile_autoscaler
from kubeoperator.spec import parse_autoscaler
from replay.hpa import HPA, external_value_proposal, milli, resource_utilization_proposal

T0 = 1_700_000_000.0
SID = "shop/web"
PA = {"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
      "metadata": {"name": "web", "namespace": "shop", "uid": "u", "generation": 1},
      "spec": {"mode": "Observe", "scaleTargetRef": {"name": "web"}, "minReplicas": 2, "maxReplicas": 40,
               "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.5}]}}


def demand(t: float) -> float:  # cores: a rise to 9 cores over 20 min, a plateau, a fall
    m = (t - T0) / 60.0
    return 0.8 + 8.2 * min(1.0, max(0.0, m / 20.0)) * (1.0 if m < 45 else max(0.0, 1 - (m - 45) / 15))


def forecast(t: float) -> Forecast:
    ahead = tuple(demand(t + 60 * (i + 1)) for i in range(12))
    return Forecast(series_id=SID, generated_at=t, origin=t, step_seconds=60.0, mean=ahead,
                    quantiles={"p50": ahead, "p90": tuple(v * 1.1 for v in ahead)}, model="ets",
                    observed=((t, demand(t)),), meta={"ready_pods": 3, "cpu_request_cores": 0.5})


class Pods:
    """The pods the HPA counts: the replicas Act mode set (all ready, as a warm pool would)."""

    n = 3

    def count(self, series_id, meta=None):
        return self.n

    def cpu_request(self, series_id):
        return None  # the published request

    def warming(self):
        return False


def test_the_shadow_proposes_at_every_sync_what_an_hpa_fed_by_the_adapter_sets():
    store = MemoryForecastStore()
    core = AdapterCore(AdapterSettings(), store, clock=lambda: now)
    core.ready_pods = pods = Pods()
    pa = parse_autoscaler(PA)
    act = HPA(hpa_spec(pa, SHIPPED_BEHAVIOR))
    obj, shadows, acted, observed = PA, {}, [], []
    S = 3
    for k in range(0, 90 * 4):  # 90 minutes of 15-s syncs
        now = T0 + 15 * k
        fc = forecast(now)
        store.publish(fc)
        pods.n = S
        sv = core.served("predicted_cpu_load_ratio", SID, fc, now)
        value = float(parse_quantity(format_quantity(sv.value)))  # what the HPA reads
        props = [external_value_proposal(act.spec, S, [value], 0.7, S),
                 resource_utilization_proposal(act.spec, S, milli(observed_now(fc)), S, milli(0.5), 70)]
        S = act.sync(now, S, props).desired
        acted.append(S)
        res = reconcile_autoscaler(obj, {SID: fc}, now, shadows=shadows, capacity=Capacity(3, 3))
        obj = {**obj, "status": res.status}
        observed.append(res.status["observe"]["wouldHaveReplicas"])
    assert observed == acted
    assert max(acted) >= math.ceil(9 / (0.5 * 0.7)) and acted[-1] == math.ceil(0.8 / (0.5 * 0.7))  # up to the peak, back down
    assert len(set(acted)) > 5  # the ramp went through many counts
