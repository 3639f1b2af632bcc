"""The real HPA controller scales on foresight's forecast, ahead of a reactive HPA.

Demand of shop/checkout follows a daily pattern: flat 0.6 cores, then every day at the same time
a ramp of 0.6 cores per minute (up to 3 cores). Three days of it are backfilled into a real Prometheus; the
ramp's next occurrence is anchored to the published forecast: ``foresight train`` (the real CLI)
reads the history and publishes a forecast into real Redis, and the ramp must come at least a
lead plus a few HPA syncs after that (a slow machine gets a fresh, later ramp, at most
``ATTEMPTS`` times), so the test measures the product and not the machine's load; ``foresight serve`` serves it
through the aggregator; manifests/hpa-example.yaml (applied as is) makes the real HPA scale
Deployment shop/checkout on ``predicted_cpu_load_ratio`` (beside its CPU-utilization floor).

Beside it, a reactive HPA on CPU utilization (70%) scales shop/checkout-reactive on the same
demand, reported as it happens by the metrics-server stand-in (with no scrape or rate-window
delay at all, which flatters the reactive side). The predictive HPA must raise
desiredReplicas first. Its first decision is also recomputed by replay/hpa.py from the value
the controller recorded (External Value path, ready pods).
"""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest
import yaml

from replay.hpa import HPA, HPASpec, ScalingPolicy, ScalingRules, external_value_proposal, resource_utilization_proposal
from tests.cluster.controlplane import ROOT, wait_for
from tests.cluster.metrics_standin import Script

pytestmark = [pytest.mark.e2e]

STEP = 60
BASE, SLOPE_PER_MIN, PEAK = 0.6, 0.6, 3.0
DAY = 86400
RAMP_AFTER_S = 150  # the ramp is planned this long after the history ends...
READY_BEFORE_S = 75 + 15  # ...and needs the forecast published a lead (75 s) + a few syncs ahead of it
ATTEMPTS = 3


def demand(t: float, ramp_tod: float) -> float:
    into = (t - ramp_tod) % DAY
    if into < 20 * 60:
        return min(BASE + SLOPE_PER_MIN * into / 60.0, PEAK)
    return BASE


def _quantity(s: str) -> float:
    for suffix, f in (("n", 1e-9), ("u", 1e-6), ("m", 1e-3), ("k", 1e3)):
        if s.endswith(suffix):
            return float(s[:-1]) * f
    return float(s)


def _deployment(name: str) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                                           "resources": {"requests": {"cpu": "500m"}}}]}}}}


def _publish(prometheus_factory, redis_url: str, tmp_path) -> tuple[float, float]:
    """Backfill three days with a daily ramp planned RAMP_AFTER_S ahead, run `foresight train
    --once` on them; returns (ramp time, publish time)."""
    t_begin = time.time()
    ramp_at = t_begin + RAMP_AFTER_S
    ramp_tod = ramp_at % DAY
    last = math.floor(t_begin / STEP) * STEP - STEP
    grid = [last - STEP * i for i in range(3 * DAY // STEP)][::-1]
    labels = {"namespace": "shop", "workload": "checkout"}
    prom = prometheus_factory({"foresight_e2e_cpu": [(labels, [(t, demand(t, ramp_tod)) for t in grid])]})

    cfg = {
        "apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
        "source": {"url": prom.url, "step_seconds": STEP, "history_days": 3},
        "store": {"url": redis_url, "ttl_seconds": 3600},
        "training": {"horizon_steps": 12, "quantiles": [0.5, 0.9], "models": ["seasonal_naive"]},
        "workloads": [{"namespace": "shop", "name": "checkout",
                       "demand_query": 'foresight_e2e_cpu{namespace="shop",workload="checkout"}',
                       "capacity": {"cpu_request_cores": 0.5, "ready_pods": 2}}],
    }
    cfg_path = tmp_path / "workloads.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "foresight", "train", "--config", str(cfg_path), "--once"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and "shop/checkout: published" in r.stdout, r.stdout + r.stderr
    return ramp_at, time.time()


def test_the_real_hpa_scales_on_the_forecast_before_a_reactive_hpa(control_plane, foresight_adapter, metrics_server,
                                                                  prometheus_factory, tmp_path):
    from core.store import open_store

    cp = control_plane
    for attempt in range(1, ATTEMPTS + 1):
        ramp_at, published_at = _publish(prometheus_factory, foresight_adapter.redis_url, tmp_path)
        if published_at <= ramp_at - READY_BEFORE_S:
            break
        print(f"\nattempt {attempt}: the forecast was published {ramp_at - published_at:.0f} s before the ramp "
              f"(< {READY_BEFORE_S} s): planning a later ramp")
    else:
        pytest.fail(f"`foresight train --once` took more than {RAMP_AFTER_S - READY_BEFORE_S} s in {ATTEMPTS} attempts")
    ramp_tod = ramp_at % DAY
    # The chooser serves the forecast that saw the ramp coming, not persistence (a margin on the
    # total cost, which the flat hours dominate, threw it away).
    fc = open_store(foresight_adapter.redis_url).latest("shop/checkout")
    assert fc is not None and fc.policy and fc.policy["source"] == "model", fc and fc.policy

    # Both workloads see the same demand; the example HPA's CPU metric (its reactive floor) reads it too.
    for name in ("checkout", "checkout-reactive"):
        metrics_server.scripts[("shop", name)] = Script(demand_fn=lambda t: demand(t, ramp_tod))
    for name in ("checkout", "checkout-reactive"):
        r = cp.admin.post("/apis/apps/v1/namespaces/shop/deployments", _deployment(name))
        assert r.status_code == 201, r.text
    example = yaml.safe_load((ROOT / "manifests/hpa-example.yaml").read_text())
    reactive = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "checkout-reactive", "namespace": "shop"},
                "spec": {**example["spec"],
                         "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "checkout-reactive"},
                         "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                             "type": "Utilization", "averageUtilization": 70}}}]}}
    r = cp.admin.post("/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers", reactive)
    assert r.status_code == 201, r.text

    first: dict[str, tuple[float, dict]] = {}

    def poll():
        for name in ("checkout", "checkout-reactive"):
            if name in first:
                continue
            h = cp.admin.json(f"/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/{name}")
            if (h.get("status") or {}).get("desiredReplicas", 0) > 2:
                first[name] = (time.time(), h)
        return len(first) == 2

    wait_for("both HPAs to raise desiredReplicas", poll, timeout=ramp_at - time.time() + 300, interval=0.5,
             detail=lambda: f"first={ {k: v[0] - ramp_at for k, v in first.items()} } log: "
                            + foresight_adapter.log.read_text()[-1500:])
    t_pred, hpa_pred = first["checkout"]
    t_react, hpa_react = first["checkout-reactive"]
    print(f"\npredictive HPA raised desiredReplicas at ramp{t_pred - ramp_at:+.0f} s, reactive at ramp{t_react - ramp_at:+.0f} s")
    assert t_pred < t_react - 20, (t_pred - ramp_at, t_react - ramp_at)

    # The predictive HPA's decision, recomputed by replay/hpa.py from what the controller recorded.
    st = hpa_pred["status"]
    cur = {m["type"]: m for m in st["currentMetrics"]}
    assert cur["External"]["external"]["metric"]["name"] == "predicted_cpu_load_ratio"
    value = _quantity(cur["External"]["external"]["current"]["value"])
    cpu_percent = cur["Resource"]["resource"]["current"]["averageUtilization"]
    b = example["spec"]["behavior"]
    spec = HPASpec(example["spec"]["minReplicas"], example["spec"]["maxReplicas"],
                   scale_up=ScalingRules(b["scaleUp"]["stabilizationWindowSeconds"], b["scaleUp"]["selectPolicy"],
                                         tuple(ScalingPolicy(p["type"], p["value"], p["periodSeconds"]) for p in b["scaleUp"]["policies"])),
                   scale_down=ScalingRules(b["scaleDown"]["stabilizationWindowSeconds"], b["scaleDown"]["selectPolicy"],
                                           tuple(ScalingPolicy(p["type"], p["value"], p["periodSeconds"]) for p in b["scaleDown"]["policies"])))
    proposals = [resource_utilization_proposal(spec, 2, cpu_percent * 500 * 2 // 100, 2, 500, 70),
                 external_value_proposal(spec, 2, [value], 0.7, ready_pods=2)]
    assert HPA(spec=spec).sync(t_pred, 2, proposals).desired == st["desiredReplicas"], (value, cpu_percent, st)
    # It was the forecast that moved it: the CPU floor alone would have kept 2 replicas.
    assert proposals[0] <= 2 < proposals[1], proposals

    # ... and the controller acted on it: the Deployment was scaled.
    wait_for("shop/checkout scaled up by the HPA",
             lambda: cp.admin.json("/apis/apps/v1/namespaces/shop/deployments/checkout")["spec"]["replicas"] > 2, timeout=60)
    cond = {c["type"]: c for c in st.get("conditions", [])}
    assert cond["ScalingActive"]["status"] == "True", cond
