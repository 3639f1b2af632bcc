"""`foresight up --once` on the bundled real traces: fits, publishes, never NaN, no cluster."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np

from forecaster.sources.csv import read_long_csv
from foresight.up import Clock, demo_workloads, reactive_ready_pods


def test_up_once_publishes_a_forecast_per_bundled_trace():
    r = subprocess.run([sys.executable, "-m", "foresight", "up", "--once", "--models", "persistence,ar"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if line.strip().startswith("demo/")]
    assert len(lines) == 4
    for line in lines:
        assert "nan" not in line.lower()


def test_demo_workloads_scale_each_trace_so_its_p99_needs_the_requested_pods():
    import importlib.resources as res

    frame = read_long_csv(str(res.files("foresight") / "data" / "traces.csv.gz"))
    ws = demo_workloads(frame, pods_at_p99=10, cpu_request=0.5)
    assert len(ws) == 4
    for w in ws:
        p99 = np.nanpercentile(w.cores, 99)
        assert math.isclose(p99 / (0.7 * 0.5), 10, rel_tol=1e-9)
        assert w.series_id.startswith("demo/")


def test_clock_maps_trace_time_onto_wall_time_both_ways():
    c = Clock(trace0=1000.0, wall0=5000.0, speed=60.0)
    assert c.trace_now(5001.0) == 1060.0
    assert c.to_wall(1060.0) == 5001.0
    assert reactive_ready_pods(1.0, 0.5) == 3 and reactive_ready_pods(float("nan"), 0.5) == 1


def test_up_serves_the_external_metrics_api_over_https_right_away(tmp_path):
    """The README's promise: after `foresight up`, `curl -k` the endpoint and get a value."""
    import re
    import time

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "foresight", "up", "--port", "0", "--duration", "120", "--no-warmpool",
         "--models", "persistence,moving_average", "--cert-dir", str(tmp_path / "certs")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        base, out = None, []
        deadline = time.time() + 120
        while time.time() < deadline and base is None:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line)
            m = re.search(r"dashboard:\s+(https://\S+?)/\s*$", line)
            if m:
                base = m.group(1)
        assert base, "".join(out)
        assert (tmp_path / "certs").exists()
        r = httpx.get(f"{base}/apis/external.metrics.k8s.io/v1beta1/namespaces/demo/predicted_cpu_load_ratio",
                      params={"labelSelector": "trace=azurev1-618849"}, verify=False, timeout=10)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["kind"] == "ExternalMetricValueList"
        (item,) = body["items"]
        assert item["metricLabels"]["workload"] == "vm-618849"
        assert re.fullmatch(r"\d+[num]?", item["value"])
        r2 = httpx.get(f"{base}/api/v1/forecasts", verify=False, timeout=10)
        assert r2.status_code == 200 and r2.json()["count"] == 4
    finally:
        proc.terminate()
        proc.wait(30)
