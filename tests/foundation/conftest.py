from __future__ import annotations

import time

import pytest

SERIES = ["azure2019-cluster-cpu-cores", "azurev1-737498", "nab-ec2_cpu_utilization_825cc2"]


@pytest.fixture(scope="session")
def backfilled(prometheus_factory, trace_slice):
    """Real Prometheus holding three real series (shifted to end one day ago, 5-min grid),
    as the gauge ``foresight_test_cpu{series=...}``. Returns (server, {series: (ts, values)})."""
    end = (int(time.time()) // 86400 - 1) * 86400
    truth = {}
    fam = []
    for sid in SERIES:
        g = trace_slice[trace_slice.series_id == sid]
        ts = g["timestamp"].astype("int64").to_numpy() // 10**9
        ts = ts - ts[-1] + end
        vals = g["value"].to_numpy(dtype=float)
        truth[sid] = (ts.astype(float), vals)
        fam.append(({"series": sid}, list(zip(ts.tolist(), vals.tolist()))))
    srv = prometheus_factory({"foresight_test_cpu": fam})
    return srv, truth
