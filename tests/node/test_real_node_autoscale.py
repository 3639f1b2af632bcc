"""bench.real_node autoscale in its short mode (``--ramp``), as a user runs it: a subprocess that
starts its own control plane and node, three copies of the demo app under real load, a
PredictiveAutoscaler at the shipped defaults against a reactive CPU HPA with the same behaviour
and one with Kubernetes' default, on a daily step the trainer has 14 days of history of (the
chart's trainer config).

It asserts orderings, not wall-clock limits: the predictive HPA raises before the demand rises, its
added pod is Ready before the reactive copies', fewer of its minutes and a smaller share of its
requests miss the latency SLO. The forecast's first steps carry the step because ``auto``'s lead
guard lets them move as far as the series moved at the same steps a day earlier (seasonal
support, forecaster/models/guard.py); without it they were held at the last value and the three
copies raised together. The run stops with an error (not a result) when the first forecast came
too late to be a lead ahead of the step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cluster import nodenet
from tests.node.conftest import _need_root

ROOT = Path(__file__).resolve().parents[2]


def test_on_the_node_the_predictive_copy_has_pods_ready_before_the_reactive_ones_and_fewer_requests_over_the_slo(tmp_path):
    _need_root()
    r = subprocess.run([sys.executable, "-m", "bench.real_node", "autoscale", "--ramp", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=2400)
    print(r.stdout[-4000:])  # the table and the run's progress, in the CI log
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    doc = json.loads((tmp_path / "real_node_autoscale.json").read_text())
    c = doc["copies"]
    pred, react, default = c["predictive"], c["reactive"], c["reactive-default"]
    for copy in c.values():
        assert copy["requests"] > 10_000 and copy["first_added_ready_after_rise_s"] is not None, copy
    assert pred["first_added_ready_after_rise_s"] < react["first_added_ready_after_rise_s"], (pred, react)
    assert pred["first_added_ready_after_rise_s"] < default["first_added_ready_after_rise_s"], (pred, default)
    assert react["breach_minutes"] >= 1  # the step is steep enough to break a reactive HPA's SLO
    assert pred["first_raise_after_rise_s"] < 0, pred  # on the forecast, ahead of the load
    assert pred["breach_minutes"] < react["breach_minutes"], (pred["per_minute"], react["per_minute"])
    assert pred["breach_minutes"] < default["breach_minutes"], (pred["per_minute"], default["per_minute"])
    assert pred["over_slo_share"] < react["over_slo_share"], (pred["over_slo_share"], react["over_slo_share"])
    assert pred["over_slo_share"] < default["over_slo_share"], (pred["over_slo_share"], default["over_slo_share"])
    assert doc["first_forecast"]["source"] == "model", doc["first_forecast"]
    assert (tmp_path / "real_node_autoscale.png").stat().st_size > 10_000
    assert "predictive" in r.stdout and "replica-min" in r.stdout
    assert nodenet.leftovers() == []
