"""The real kube-scheduler, configured by manifests/scheduler, calls foresight's extender and
binds pods away from the node forecast hot.

The scheduler runs manifests/scheduler/kube-scheduler-configuration.yaml with only what a
loopback cluster must change: the kubeconfig (the foresight-scheduler service account's token,
so manifests/scheduler/rbac.yaml is what authorizes it), the extender's host (``localhost``:
there is no cluster DNS; the certificate is still verified) and the CA file's path.
Leader election stays on, in the foresight namespace, as the manifest says.
"""

from __future__ import annotations

import time

import pytest
import yaml

from forecaster.store import RedisForecastStore, make_forecast
from tests.cluster.controlplane import ROOT, free_port, wait_for
from tests.e2e.conftest import NODES

pytestmark = [pytest.mark.e2e]


def publish_loads(redis_url: str, loads: dict[str, float]) -> None:
    now = time.time()
    store = RedisForecastStore(redis_url)
    try:
        zones = dict(NODES)
        for node, load in loads.items():
            store.publish(make_forecast(
                f"node/{node}", origin=now, step_seconds=60, mean=[load] * 10,
                quantiles={"p50": [load] * 10, "p90": [load] * 10}, model="e2e", generated_at=now,
                observed=((now, load),), meta={"kind": "Node", "node": node, "zone": zones[node], "cpu_cores": 16}))
    finally:
        store.close()


def _pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "placement"}},
            "spec": {"schedulerName": "foresight-scheduler",
                     "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


@pytest.fixture(scope="module")
def foresight_scheduler(control_plane, foresight_adapter, serving_pki, tmp_path_factory):
    cp = control_plane
    d = tmp_path_factory.mktemp("foresight-scheduler")
    conf = yaml.safe_load((ROOT / "manifests/scheduler/kube-scheduler-configuration.yaml").read_text())
    conf["clientConnection"] = {"kubeconfig": str(cp.service_account_kubeconfig("foresight", "foresight-scheduler"))}
    (ext,) = conf["extenders"]
    # The adapter Service's "scheduler" port (8444), where `foresight serve --scheduler-port` answers.
    assert ext["urlPrefix"] == "https://foresight-adapter.foresight.svc:8444/scheduler"
    ext["urlPrefix"] = f"https://localhost:{foresight_adapter.scheduler_port}/scheduler"
    ca = cp.kubectl("-n", "foresight", "get", "configmap", "foresight-adapter-ca", "-o", "jsonpath={.data.ca\\.crt}").stdout
    (d / "ca.crt").write_text(ca)
    ext["tlsConfig"]["caFile"] = str(d / "ca.crt")
    ext["tlsConfig"]["serverName"] = "foresight-adapter.foresight.svc"
    (d / "config.yaml").write_text(yaml.safe_dump(conf))
    kc = conf["clientConnection"]["kubeconfig"]
    proc = cp.spawn("foresight-scheduler", [
        str(cp.bin_dir / "kube-scheduler"), f"--config={d / 'config.yaml'}", "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}", "--v=2"])
    wait_for("foresight-scheduler to hold its Lease",
             lambda: proc.alive() and (cp.admin.get("/apis/coordination.k8s.io/v1/namespaces/foresight/leases/foresight-scheduler")
                                       .json().get("spec", {}).get("holderIdentity")),
             timeout=120, detail=lambda: proc.tail())
    yield proc
    proc.stop()


def _placements(cp, names):
    out = {}
    for n in names:
        p = cp.admin.json(f"/api/v1/namespaces/shop/pods/{n}")
        out[n] = p["spec"].get("nodeName")
    return out


def _place(cp, prefix: str, n: int) -> dict[str, str]:
    names = [f"{prefix}-{i}" for i in range(n)]
    for name in names:
        r = cp.admin.post("/api/v1/namespaces/shop/pods", _pod(name))
        assert r.status_code == 201, r.text
    return wait_for(f"{prefix} pods bound", lambda: (lambda m: m if all(m.values()) else None)(_placements(cp, names)),
                    timeout=120)


def test_the_real_scheduler_binds_pods_away_from_the_node_forecast_hot(control_plane, foresight_adapter, foresight_scheduler):
    cp = control_plane
    log_before = len(foresight_adapter.log.read_text())
    publish_loads(foresight_adapter.redis_url, {"node-a": 0.97, "node-b": 0.30, "node-c": 0.20})
    time.sleep(12)  # the extender re-reads the store at most every 10 s
    first = _place(cp, "round1", 6)
    assert "node-a" not in first.values(), first
    # The manifest's example pod (applied with the manifests) is placed by the same scheduler.
    demo = wait_for("placement-demo bound", lambda: cp.admin.json("/api/v1/namespaces/shop/pods/placement-demo")["spec"].get("nodeName"),
                    timeout=120)
    assert demo and demo != "node-a"

    # The forecast, not the nodes, decides: make node-b the hot one and node-a cool.
    publish_loads(foresight_adapter.redis_url, {"node-a": 0.10, "node-b": 0.96, "node-c": 0.50})
    time.sleep(12)
    second = _place(cp, "round2", 6)
    assert "node-b" not in second.values(), second
    assert "node-a" in second.values(), second  # the coolest node now wins the extender's score

    calls = foresight_adapter.log.read_text()[log_before:]
    assert "POST /scheduler/filter" in calls and "POST /scheduler/prioritize" in calls, calls[-2000:]
    events = cp.admin.json("/api/v1/namespaces/shop/events", fieldSelector="reason=Scheduled")["items"]
    by = {e["involvedObject"]["name"]: e.get("reportingComponent") or e.get("source", {}).get("component") for e in events}
    assert by.get("round1-0") == "foresight-scheduler", by
