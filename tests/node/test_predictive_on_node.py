"""Predictive against reactive on the real node, as a user runs the bench: ``python -m
bench.real_node autoscale --quick`` in a subprocess (its own control plane and node).

Three copies of the demo app get the same open-loop demand (the held-out trace's daily rise,
in real time); the PredictiveAutoscaler with the shipped defaults (operator + adapter + trainer
on history backfilled into the node's Prometheus) must have Ready pods added before the reactive
CPU HPA with the same behaviour, and fewer requests over the latency SLO. Orderings only: the
bench itself refuses a run whose first forecast came less than a lead + an HPA sync before the
rise (a loaded machine), so what is compared is the product, not the machine's speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cluster import nodenet
from tests.node.conftest import _need_root

ROOT = Path(__file__).resolve().parents[2]


def test_the_predictive_copy_has_pods_ready_before_the_reactive_one_and_fewer_slo_breaches(tmp_path):
    _need_root()
    r = subprocess.run([sys.executable, "-m", "bench.real_node", "autoscale", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=5400)  # a node lock wait (<= 30 min) + about 30 min
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    doc = json.loads((tmp_path / "real_node_autoscale.json").read_text())
    pred, react = doc["copies"]["predictive"], doc["copies"]["reactive"]
    detail = f"{r.stdout[-2500:]}\nforecasts: {doc['forecasts'][:6]}"
    # every copy got the same demand, and it was a real rise: the reactive copy had to scale
    assert pred["requests"] == react["requests"] == doc["copies"]["reactive-default"]["requests"] > 1000, detail
    assert react["first_added_ready_after_rise_s"] is not None and react["max_replicas"] >= 2, detail
    assert doc["first_forecast_before_rise_s"] >= doc["lead_seconds"] + doc["hpa_sync_seconds"], detail
    # the product's claims
    assert pred["first_added_ready_after_rise_s"] is not None, detail
    assert pred["first_added_ready_after_rise_s"] < react["first_added_ready_after_rise_s"], detail
    assert pred["over_slo"] < react["over_slo"], detail
    for name in ("real_node_autoscale.csv", "real_node_autoscale_timeline.csv", "real_node_autoscale.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert doc["cleanup_errors"] == [] and nodenet.leftovers() == []
