"""charts/foresight on a real control plane: the rendered chart passes the API server's own
validation (server-side dry-run apply), and after `helm install` a PredictiveAutoscaler shows
READY and its served value in `kubectl get` within one refresh interval.

There is no kubelet or container runtime here, so the chart's pods never run. What runs for
real: helm, kube-apiserver (CRDs, CEL, RBAC), the controller manager, `foresight operator` as
the chart's operator service account (its token, its RBAC), and Redis. The trainer's part is
played by publishing a forecast to Redis the way the trainer does (Forecast + store.publish).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml

from core.store import Forecast, open_store
from tests.chart.conftest import CHART, KUBE_VERSION, run_helm
from tests.cluster.controlplane import ROOT, wait_for

pytestmark = [pytest.mark.e2e]

REFRESH_SECONDS = 60  # trainer.config.training.refresh_interval_seconds in values.yaml


def test_the_rendered_chart_passes_the_api_servers_validation(helm, control_plane):
    cp = control_plane
    out = run_helm(helm, "template", "foresight", str(CHART), "-n", "foresight", "--kube-version", KUBE_VERSION,
                   "--set", "warmpool.enabled=true", "--set", "scheduler.enabled=true").stdout
    cp.kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/predictiveautoscalers.foresight.dev")
    cp.ensure_namespace("foresight")
    r = cp.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=out, check=False)
    assert r.returncode == 0, r.stderr
    applied = [line for line in r.stdout.splitlines() if "serverside-applied (server dry run)" in line]
    assert len(applied) == len([d for d in yaml.safe_load_all(out) if d])


def test_helm_install_then_kubectl_get_shows_ready_and_the_served_value_within_one_refresh(helm, control_plane,
                                                                                           redis_server, tmp_path):
    cp = control_plane
    cp.ensure_namespace("shop")
    run_helm(helm, "install", "foresight", str(CHART), "-n", "foresight", "--create-namespace",
             f"--kubeconfig={cp.admin_kubeconfig}")
    status = run_helm(helm, "status", "foresight", "-n", "foresight", f"--kubeconfig={cp.admin_kubeconfig}").stdout
    assert "STATUS: deployed" in status
    # the operator as the chart runs it, under the chart's service account and RBAC
    kubeconfig = cp.service_account_kubeconfig("foresight", "foresight-operator")
    log = tmp_path / "operator.log"
    with open(log, "w") as f:
        op = subprocess.Popen([sys.executable, "-m", "foresight", "operator", f"--store={redis_server.url}",
                               f"--kubeconfig={kubeconfig}", "--namespace=foresight", "--resync-seconds=5",
                               "--warmpool-config-map="], stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        start = time.time()
        pa = {"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
              "metadata": {"name": "api", "namespace": "shop"},
              "spec": {"scaleTargetRef": {"name": "api"}, "minReplicas": 2, "maxReplicas": 10,
                       "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.25}]}}
        cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(pa))
        # the trainer picks the workload up from the operator's config and publishes
        cm = wait_for("the operator's trainer config with shop/api", lambda: "name: api" in cp.admin.json(
            "/api/v1/namespaces/foresight/configmaps/foresight-trainer-config")["data"]["workloads.yaml"] and True,
            timeout=REFRESH_SECONDS, detail=lambda: log.read_text()[-2000:])
        assert cm
        now = time.time()
        open_store(redis_server.url).publish(Forecast(
            series_id="shop/api", generated_at=now, origin=now, step_seconds=60.0, mean=(0.6,) * 12,
            quantiles={"p50": (0.6,) * 12, "p90": (0.8,) * 12}, model="ets", backtest_error=0.7,
            observed=((now, 0.5),), meta={"ready_pods": 2, "cpu_request_cores": 0.25}))

        def row():
            out = cp.kubectl("get", "predictiveautoscalers", "-n", "shop").stdout.splitlines()
            cols = dict(zip(out[0].split(), out[1].split()))
            return cols if cols.get("READY") == "True" else None

        cols = wait_for("kubectl get predictiveautoscalers READY", row, timeout=REFRESH_SECONDS, interval=1,
                        detail=lambda: log.read_text()[-3000:])
        assert time.time() - start < REFRESH_SECONDS
        # p90 0.8 cores x headroom 1 over 2 ready pods x 0.25 cores = 1.6
        assert cols["SERVED"] == "1.600" and cols["SOURCE"] == "forecast" and cols["MODEL"] == "ets"
        hpa = cp.admin.json("/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/api")
        assert hpa["metadata"]["ownerReferences"][0]["name"] == "api"
    finally:
        op.terminate()
        op.wait(15)
    assert "Traceback" not in log.read_text()
