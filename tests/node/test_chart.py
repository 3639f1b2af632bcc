"""charts/foresight as a user installs it, on the real node: `helm install` with the node's images
(tests/cluster/chart.py) and the warm pool on, every pod of the release Ready (Redis, the adapter
x2, the trainer, the operator, the warm-pool controller), the chart's own serving certificate trusted by the aggregator (APIService
Available), and a PredictiveAutoscaler on a real Deployment whose HPA reads
predicted_cpu_load_ratio through kube-apiserver from the adapter pods, computed by the trainer
from the node's Prometheus. Then faults under steady polling of the metric through
kube-apiserver (the HPA's path): one adapter pod deleted, Redis stopped, the trainer pod deleted
(its checkpoints on a PersistentVolume, as `trainer.checkpoints.persistence=true` puts them), the
kubelet restarted. A WarmPool hands a warm pod to a caller its namespace allows to claim, over the
chart's TLS, and refuses one it does not. No foresight process runs outside a pod here.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.cluster import chart
from tests.cluster.addons import deploy_coredns, deploy_metrics_server, deploy_prometheus
from tests.cluster.controlplane import wait_for
from warmpool.policy import pool_id

# the module's node waits for the machine's node lock, then starts, installs and trains: more than
# the suite's 600 s per test on a busy 2-core machine
pytestmark = [pytest.mark.timeout(1500)]

APP_NS = "shop"
APP = "api"
METRIC = "predicted_cpu_load_ratio"
METRIC_PATH = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{APP_NS}/{METRIC}"
CPU_REQUEST = "20m"  # the demo burns its whole limit (= request): a load ratio near 1 per pod, bounded CPU
# a static PersistentVolume on the node for the trainer's checkpoint claim (no provisioner here)
STORAGE_CLASS = "foresight-node-local"
CHECKPOINT_PV = "foresight-trainer-checkpoints-node"
NONROOT = 65532  # the chart's runAsUser/fsGroup: a hostPath volume is not chowned by the kubelet
PODS = chart.WARMPOOL_PODS  # the default chart's pods and the warm-pool controller


# What each step measured; `python -m bench.real_node chart` saves it (FORESIGHT_CHART_RESULTS).
FIGURES: dict[str, dict] = {}


def _log(msg: str) -> None:
    sys.stderr.write(f"\n[chart] {msg}\n")


def _record(step: str, **figures) -> None:
    FIGURES[step] = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in figures.items()}


def _demo_deployment(image: str) -> dict:
    c = {"name": "burn", "image": image, "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", "while :; do :; done"],
         "resources": {"requests": {"cpu": CPU_REQUEST}, "limits": {"cpu": CPU_REQUEST}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": APP, "namespace": APP_NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": APP}},
                     "template": {"metadata": {"labels": {"app": APP}},
                                  "spec": {"containers": [c], "terminationGracePeriodSeconds": 1}}}}


def _autoscaler() -> dict:
    return {"apiVersion": "foresight.dev/v1alpha1", "kind": "PredictiveAutoscaler",
            "metadata": {"name": APP, "namespace": APP_NS},
            "spec": {"scaleTargetRef": {"name": APP}, "minReplicas": 1, "maxReplicas": 2,
                     "metrics": [{"name": "cpu", "type": "Resource", "cpuRequestCores": 0.02}]}}


def _hpa(cp) -> dict:
    r = cp.admin.get(f"/apis/autoscaling/v2/namespaces/{APP_NS}/horizontalpodautoscalers/{APP}")
    return r.json() if r.status_code == 200 else {}


def _external_current(hpa: dict) -> str | None:
    for m in (hpa.get("status") or {}).get("currentMetrics") or []:
        if m.get("type") == "External" and m["external"]["metric"]["name"] == METRIC:
            return m["external"]["current"].get("value")
    return None


def _failed_external(cp) -> int:
    """How many times the HPA controller failed to get the external metric (events' counts)."""
    evs = cp.admin.json(f"/api/v1/namespaces/{APP_NS}/events", fieldSelector=f"involvedObject.name={APP}")["items"]
    return sum(e.get("count") or 1 for e in evs if e.get("reason") == "FailedGetExternalMetric")


def _qty(v: str) -> float:
    """A Kubernetes quantity as the API writes a metric value: 142m, 141973088n, 2."""
    scale = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3}
    return float(v[:-1]) * scale[v[-1]] if v[-1] in scale else float(v)


def _metric(cp):
    return cp.admin.get(METRIC_PATH, labelSelector=f"workload={APP}")


def _poll_metric(cp, until, seconds_after: float, limit: float) -> dict:
    """GET the metric through kube-apiserver twice a second until ``until()`` holds and then
    ``seconds_after`` more (at most ``limit`` s in all); counts answers by status."""
    t0 = time.monotonic()
    done_at = None
    codes: dict[int, int] = {}
    first_ok_after_done = None
    while time.monotonic() - t0 < limit:
        r = _metric(cp)
        codes[r.status_code] = codes.get(r.status_code, 0) + 1
        if done_at is None and until():
            done_at = time.monotonic()
        if done_at is not None:
            if r.status_code == 200 and first_ok_after_done is None:
                first_ok_after_done = time.monotonic() - t0
            if time.monotonic() - done_at >= seconds_after:
                break
        time.sleep(0.5)
    return {"codes": codes, "recovered_seconds": None if done_at is None else done_at - t0,
            "non_2xx": sum(n for c, n in codes.items() if not 200 <= c < 300)}


def _checkpoint_volume(node) -> "os.PathLike":
    """A hostPath PersistentVolume of the checkpoints' class, in the node's directory."""
    d = node.dir / "pv-checkpoints"
    d.mkdir(exist_ok=True)
    os.chown(d, NONROOT, NONROOT)
    d.chmod(0o770)
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": CHECKPOINT_PV},
          "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                   "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(d), "type": "Directory"}}}
    r = node.cp.admin.apply(f"/api/v1/persistentvolumes/{CHECKPOINT_PV}", pv, "chart-test")
    assert r.status_code in (200, 201), r.text
    return d


@pytest.fixture(scope="module")
def release(node):
    cp = node.cp
    deploy_coredns(node)
    deploy_metrics_server(node)
    deploy_prometheus(node)
    helm_bin = chart.helm_binary()
    checkpoints = _checkpoint_volume(node)
    # the operator and trainer react within seconds (a user's values, not a test hook); the
    # trainer's checkpoints on a claim, as a user with a storage class sets it
    seconds = chart.install(node, helm_bin, *chart.WARMPOOL_VALUES, "--set", "operator.resyncSeconds=5",
                            "--set", "trainer.config.training.refresh_interval_seconds=15",
                            "--set", "trainer.checkpoints.persistence=true",
                            "--set", f"trainer.checkpoints.storageClassName={STORAGE_CLASS}", want=PODS)
    _log(f"helm install -> every pod of the release Ready in {seconds:.1f} s: {chart.ready_by_component(cp)}")
    cp.ensure_namespace(APP_NS)
    r = cp.admin.apply(f"/apis/apps/v1/namespaces/{APP_NS}/deployments/{APP}", _demo_deployment(node.images["busybox"]["ref"]),
                       "chart-test")
    assert r.status_code in (200, 201), r.text
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(_autoscaler()))
    t0 = time.monotonic()
    value = wait_for("the HPA reads predicted_cpu_load_ratio", lambda: (node.check_alive(), _external_current(_hpa(cp)))[1],
                     timeout=240, interval=1, detail=lambda: f"hpa {(_hpa(cp).get('status'))}\nmetric {_metric(cp).text[:500]}"
                     f"\npods {chart.pods_detail(cp)}")
    first_metric = time.monotonic() - t0
    _log(f"PredictiveAutoscaler created -> the HPA's first {METRIC} ({value}) in {first_metric:.1f} s")
    # the operator restarts the adapter on the new workload (it reads its config at start)
    wait_for("the autoscaler's workload in the adapter's running config", lambda: chart.config_applied(cp),
             timeout=180, interval=1, detail=lambda: chart.pods_detail(cp))
    chart.wait_release_ready(node, PODS)
    _log(f"... and the adapter restarted on it after {time.monotonic() - t0:.1f} s")
    _record("install", ready_seconds=seconds, first_metric_seconds=first_metric)
    yield {"helm": helm_bin, "install_seconds": seconds, "checkpoints": checkpoints}
    out = os.environ.get("FORESIGHT_CHART_RESULTS")
    if out:
        import json

        Path(out).write_text(json.dumps({"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                         "load_average": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
                                         "steps": FIGURES}, indent=2) + "\n")


def test_every_pod_of_the_release_is_ready_with_the_charts_own_certificate(node, release):
    cp = node.cp
    assert chart.ready_by_component(cp) == PODS
    pods = chart.release_pods(cp)
    assert {p["spec"]["nodeName"] for p in pods} == {node.name}
    images = {c["image"] for p in pods for c in p["spec"]["containers"] + p["spec"].get("initContainers", [])}
    assert images == {node.images["app"]["ref"], node.images["redis"]["ref"]}
    svc = cp.admin.json("/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.external.metrics.k8s.io")
    assert svc["spec"]["service"] == {"name": "foresight-adapter", "namespace": chart.NAMESPACE, "port": 443}
    assert not svc["spec"].get("insecureSkipTLSVerify")
    secret = cp.admin.json(f"/api/v1/namespaces/{chart.NAMESPACE}/secrets/foresight-adapter-tls")
    assert svc["spec"]["caBundle"] == secret["data"]["ca.crt"]
    assert any(c["type"] == "Available" and c["status"] == "True" for c in svc["status"]["conditions"]), svc["status"]


def test_the_hpa_reads_the_served_value_through_kube_apiserver(node, release):
    cp = node.cp
    r = _metric(cp)
    assert r.status_code == 200, r.text
    (item,) = r.json()["items"]
    assert item["metricName"] == METRIC and _qty(item["value"]) > 0
    hpa = _hpa(cp)
    conds = {c["type"]: c for c in hpa["status"]["conditions"]}
    assert conds["ScalingActive"]["status"] == "True", conds
    assert _external_current(hpa) is not None
    # the PredictiveAutoscaler shows READY and the value (the operator reads the adapter's store)
    def pa_ready():
        pa = cp.admin.json(f"/apis/foresight.dev/v1alpha1/namespaces/{APP_NS}/predictiveautoscalers/{APP}")
        return pa if any(c["type"] == "Ready" and c["status"] == "True" for c in pa["status"]["conditions"]) else None

    pa = wait_for("the PredictiveAutoscaler Ready (the operator's next pass)", pa_ready, timeout=60, detail=lambda: str(
        cp.admin.json(f"/apis/foresight.dev/v1alpha1/namespaces/{APP_NS}/predictiveautoscalers/{APP}")["status"])[:2000])
    served = {m["name"]: m for m in pa["status"]["metrics"]}["cpu"]
    _log(f"PredictiveAutoscaler status: {served}")
    assert served["servedSource"] not in ("none", None), served


WARM_POOL = "web"  # a WarmPool of APP_NS: the controller's pool shop.web (warmpool.policy.pool_id)
WARM_PORT = 8080


def _warm_pool(image: str) -> dict:
    cmd = ["/bin/sh", "-c", f"hostname > /www/index.html && exec httpd -f -p {WARM_PORT} -h /www"]
    return {"apiVersion": "foresight.dev/v1alpha1", "kind": "WarmPool", "metadata": {"name": WARM_POOL, "namespace": APP_NS},
            "spec": {"workload": WARM_POOL, "backend": "kubernetes", "runtimeClass": "crun", "minWarm": 1, "maxWarm": 1,
                     "template": {"image": image, "command": cmd, "resources": {"cpu": "10m", "memory": "16Mi"}}}}


def _claimer_token(cp, name: str, may_claim: bool) -> str:
    """A ServiceAccount of APP_NS (bound to a Role granting claim on warmpools when ``may_claim``)."""
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + APP_NS
    objs = [(f"/api/v1/namespaces/{APP_NS}/serviceaccounts/{name}",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": APP_NS}})]
    if may_claim:
        objs += [(f"{rbac}/roles/{name}", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                           "metadata": {"name": name, "namespace": APP_NS},
                                           "rules": [{"apiGroups": ["foresight.dev"], "resources": ["warmpools"], "verbs": ["claim", "get"]}]}),
                 (f"{rbac}/rolebindings/{name}", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                                                  "metadata": {"name": name, "namespace": APP_NS},
                                                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                                                  "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": APP_NS}]})]
    for path, body in objs:
        r = cp.admin.apply(path, body, "chart-test")
        assert r.status_code in (200, 201), r.text
    return cp.service_account_token(APP_NS, name)


def _warmpool_api(cp):
    """The warm-pool API's ClusterIP URL and a TLS context trusting only the chart's CA for it."""
    import base64
    import ssl

    from tests.cluster.nodenet import SERVICE_CIDR

    svc = cp.admin.json(f"/api/v1/namespaces/{chart.NAMESPACE}/services/foresight-warmpool")["spec"]
    assert ipaddress.ip_address(svc["clusterIP"]) in ipaddress.ip_network(SERVICE_CIDR), svc
    ca = base64.b64decode(cp.admin.json(f"/api/v1/namespaces/{chart.NAMESPACE}/secrets/foresight-warmpool-tls")["data"]["ca.crt"])
    ctx = ssl.create_default_context(cadata=ca.decode())
    # the certificate names foresight-warmpool.<ns>.svc, which this host cannot resolve: the chain
    # is still checked against the chart's CA, only the name is not
    ctx.check_hostname = False
    return f"https://{svc['clusterIP']}:{svc['ports'][0]['port']}", ctx


def test_a_warm_pool_hands_its_warm_pod_to_a_caller_allowed_to_claim_and_refuses_one_who_is_not(node, release):
    import httpx

    from tests.cluster.nodenet import POD_CIDR

    cp = node.cp
    pool = pool_id(APP_NS, WARM_POOL)
    t0 = time.monotonic()
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(_warm_pool(node.images["busybox"]["ref"])))
    pods_path = f"/api/v1/namespaces/{APP_NS}/pods"

    def warm():
        pods = cp.admin.json(pods_path, labelSelector=f"foresight.dev/pool={pool},foresight.dev/state=warm")["items"]
        return [p for p in pods if p["status"].get("phase") == "Running" and p["status"].get("podIP")]

    (pod,) = wait_for("the WarmPool's warm pod Running", warm, timeout=180, interval=1,
                      detail=lambda: f"{chart.pods_detail(cp)}\n{cp.admin.json(pods_path)['items']}"[:4000])
    warm_seconds = time.monotonic() - t0
    _log(f"WarmPool created -> its warm pod Running in {warm_seconds:.1f} s")
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    assert pod["spec"]["runtimeClassName"] == "crun" and pod["spec"]["nodeName"] == node.name
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(POD_CIDR)
    url, ctx = _warmpool_api(cp)
    stranger, claimer = _claimer_token(cp, "stranger", False), _claimer_token(cp, "claimer", True)
    bearer = lambda token: {"Authorization": f"Bearer {token}"}  # noqa: E731
    with httpx.Client(verify=ctx, timeout=30) as api, httpx.Client(timeout=2) as app:
        r = api.post(f"{url}/api/v1/pools/{pool}/claim", headers=bearer(stranger))
        assert r.status_code == 403, r.text  # no claim on warmpools in this namespace
        assert api.post(f"{url}/api/v1/pools/{pool}/claim").status_code == 401  # no token at all
        t1 = time.monotonic()
        r = api.post(f"{url}/api/v1/pools/{pool}/claim", headers=bearer(claimer))
        assert r.status_code == 200, r.text
        got = r.json()
        assert (got["cold_start"], got["container_id"], got["endpoint"]) == (False, name, ip), got

        def answers():
            try:
                r = app.get(f"http://{ip}:{WARM_PORT}/")
                return r.status_code == 200 and r.text.strip()
            except httpx.HTTPError:
                return None

        assert wait_for("the claimed pod answering", answers, timeout=30, interval=0.05) == name
        serving = time.monotonic() - t1
        _log(f"warm claim (TLS, TokenReview, SubjectAccessReview) -> the pod answering in {serving:.3f} s")
        _record("warm pool", warm_pod_running_seconds=warm_seconds, warm_claim_to_serving_seconds=serving)
        labels = cp.admin.json(f"{pods_path}/{name}")["metadata"]["labels"]
        assert (labels["foresight.dev/state"], labels["app"]) == ("claimed", WARM_POOL), labels
        body = {"container_id": name}
        r = api.post(f"{url}/api/v1/pools/{pool}/release", json=body, headers=bearer(stranger))
        assert r.status_code == 403, r.text  # only the claimer releases its claim
        r = api.post(f"{url}/api/v1/pools/{pool}/release", json=body, headers=bearer(claimer))
        assert r.status_code == 200, r.text
    # the WarmPool deleted: the controller drops the pool and its pods
    r = cp.admin.delete(f"/apis/foresight.dev/v1alpha1/namespaces/{APP_NS}/warmpools/{WARM_POOL}")
    assert r.status_code == 200, r.text
    wait_for("the pool's pods gone with the WarmPool", lambda: not cp.admin.json(pods_path, labelSelector=f"foresight.dev/pool={pool}")["items"],
             timeout=120, interval=1, detail=lambda: str(cp.admin.json(pods_path, labelSelector=f"foresight.dev/pool={pool}")["items"])[:3000])


def test_the_warm_pool_under_minutes_of_the_functions_trace_as_the_simulator_counts_them(node, release):
    """bench/real_node_warmpool.py's quick run on this release: 3 held-out functions, 4 minutes."""
    from bench.common import serverless_dir
    from bench.real_node_warmpool import experiment, table

    doc = experiment(node, chart.NAMESPACE, quick=True, data_dir=serverless_dir(quick=True), progress=_log)
    _log(table(doc))
    _record("warm pool under the functions trace (quick)", node=doc["node"], simulator=doc["simulator"])
    n, s = doc["node"], doc["simulator"]
    assert n["failed"] == 0, n["errors"]
    assert not doc["left_after_delete"]  # deleting a WarmPool deletes its pods
    assert n["claims"] == s["claims"] > 0  # every invoked function-minute claimed once, on both
    assert n["warm"] + n["cold"] == n["claims"] and n["cold"] >= 1  # pools start empty: the first claim is cold
    assert n["cold_serving_s"]["n"] == n["cold"] and n["cold_serving_s"]["p50_s"] > 0
    if n["warm"]:
        assert n["warm_serving_s"]["p50_s"] < n["cold_serving_s"]["p50_s"], n  # a warm pod serves sooner than a new one


def test_deleting_an_adapter_pod_the_other_serves_and_the_deployment_restarts_it(node, release):
    cp = node.cp
    failed_before = _failed_external(cp)
    old = {p["metadata"]["name"] for p in chart.release_pods(cp) if p["metadata"]["labels"]["app.kubernetes.io/component"] == "adapter"}
    victim = sorted(old)[0]
    r = cp.admin.delete(f"/api/v1/namespaces/{chart.NAMESPACE}/pods/{victim}")
    assert r.status_code == 200, r.text

    def replaced() -> bool:
        adapters = [p for p in chart.release_pods(cp) if p["metadata"]["labels"]["app.kubernetes.io/component"] == "adapter"]
        return len([p for p in adapters if chart.is_ready(p)]) == 2 and victim not in {p["metadata"]["name"] for p in adapters}

    res = _poll_metric(cp, replaced, seconds_after=5, limit=180)
    _log(f"adapter pod {victim} deleted: replacement Ready in {res['recovered_seconds']} s; answers {res['codes']}")
    _record("adapter pod deleted", **res)
    assert res["recovered_seconds"] is not None, chart.pods_detail(cp)
    assert res["non_2xx"] == 0, res
    assert _failed_external(cp) == failed_before


def test_with_redis_stopped_the_metric_degrades_to_observed_demand_never_a_503(node, release):
    cp = node.cp
    failed_before = _failed_external(cp)
    path = f"/apis/apps/v1/namespaces/{chart.NAMESPACE}/deployments/foresight-redis/scale"

    def scale(n: int) -> None:
        r = cp.admin.patch(path, {"spec": {"replicas": n}})
        assert r.status_code == 200, r.text

    scale(0)
    try:
        def gone():
            return not [p for p in chart.release_pods(cp) if p["metadata"]["labels"]["app.kubernetes.io/component"] == "store"]

        res = _poll_metric(cp, gone, seconds_after=30, limit=120)
        _log(f"Redis stopped: gone after {res['recovered_seconds']} s, then 30 s of answers: {res['codes']}")
        _record("Redis stopped for 30 s", **res)
        assert res["recovered_seconds"] is not None
        assert res["non_2xx"] == 0, res
        assert _qty(_metric(cp).json()["items"][0]["value"]) > 0
    finally:
        scale(1)
    res = _poll_metric(cp, lambda: chart.ready_by_component(cp).get("store") == 1, seconds_after=5, limit=120)
    _log(f"Redis back: Ready after {res['recovered_seconds']} s; answers {res['codes']}")
    _record("Redis back", **res)
    assert res["non_2xx"] == 0, res
    assert _failed_external(cp) == failed_before


def _component_pods(cp, component: str) -> list[dict]:
    return [p for p in chart.release_pods(cp) if p["metadata"]["labels"]["app.kubernetes.io/component"] == component]


def _pod_log(node, pod: dict) -> str:
    """A container's log as the kubelet wrote it (its podLogsDir), "" before it has one."""
    m = pod["metadata"]
    files = sorted((node.dir / "pod-logs").glob(f"{m['namespace']}_{m['name']}_{m['uid']}/*/*.log"))
    return "".join(f.read_text(errors="replace") for f in files)


def _first_publication(log: str, series_id: str) -> str | None:
    """The first `<series>: published <model> (<status>) <reason>` line of a trainer's log."""
    m = re.search(rf"{re.escape(series_id)}: published .*", log)
    return m.group(0) if m else None


def test_deleting_the_trainer_pod_its_successor_serves_the_fitted_models_from_the_checkpoint_volume(node, release):
    cp = node.cp
    sid = f"{APP_NS}/{APP}"
    wait_for("a checkpoint of the autoscaler's workload on the volume",
             lambda: [f for f in release["checkpoints"].iterdir() if f.suffix == ".ckpt"], timeout=180,
             detail=lambda: str(sorted(release["checkpoints"].iterdir())))
    (old,) = _component_pods(cp, "trainer")
    failed_before = _failed_external(cp)
    r = cp.admin.delete(f"/api/v1/namespaces/{chart.NAMESPACE}/pods/{old['metadata']['name']}")
    assert r.status_code == 200, r.text

    def published_again():
        new = [p for p in _component_pods(cp, "trainer") if p["metadata"]["uid"] != old["metadata"]["uid"] and chart.is_ready(p)]
        return new and _first_publication(_pod_log(node, new[0]), sid) and new[0]

    res = _poll_metric(cp, published_again, seconds_after=5, limit=300)
    assert res["recovered_seconds"] is not None, chart.pods_detail(cp)
    (new,) = [p for p in _component_pods(cp, "trainer") if p["metadata"]["uid"] != old["metadata"]["uid"]]
    log = _pod_log(node, new)
    first = _first_publication(log, sid)
    restored = re.search(r"restored (\d+) fitted states from \S+ \((\d+) without a checkpoint, (\d+) unusable\)", log)
    _log(f"trainer pod deleted: the new pod published in {res['recovered_seconds']:.1f} s; answers {res['codes']}; "
         f"{restored.group(0) if restored else 'no restore line'}; first: {first}")
    _record("trainer pod deleted", **res, restored=restored.group(0) if restored else None, first_publication=first)
    assert restored and int(restored.group(1)) >= 1 and restored.group(3) == "0", log[-3000:]
    assert "not trained yet" not in first, first  # the fitted state, not the persistence placeholder
    assert res["non_2xx"] == 0, res
    assert _failed_external(cp) == failed_before


def test_restarting_the_kubelet_the_pods_keep_serving_and_the_node_comes_back(node, release):
    cp = node.cp
    failed_before = _failed_external(cp)
    before = {p["metadata"]["uid"] for p in chart.release_pods(cp)}
    seconds = {}

    def restart() -> bool:
        seconds["node"] = node.restart_kubelet()
        return True

    import threading

    t = threading.Thread(target=restart, daemon=True)
    t.start()
    # the kubelet's pods run under containerd meanwhile; the HPA's reads go kubelet-free
    res = _poll_metric(cp, lambda: not t.is_alive() and chart.ready_by_component(cp) == PODS,
                       seconds_after=10, limit=240)
    t.join(1)
    _log(f"kubelet restarted: node Ready in {seconds.get('node', float('nan')):.1f} s, every release pod Ready after "
         f"{res['recovered_seconds']} s; answers {res['codes']}")
    _record("kubelet restarted", **res, node_ready_seconds=seconds.get("node"))
    assert res["recovered_seconds"] is not None, chart.pods_detail(cp)
    assert {p["metadata"]["uid"] for p in chart.release_pods(cp)} == before  # the same pods: none restarted
    assert res["non_2xx"] == 0, res
    assert _failed_external(cp) == failed_before


def _labelled(cp, path: str) -> list[str]:
    r = cp.admin.get(path, labelSelector=f"app.kubernetes.io/instance={chart.RELEASE}")
    return [i["metadata"]["name"] for i in r.json().get("items", [])] if r.status_code == 200 else []


NAMESPACED = {"Deployment": "/apis/apps/v1/namespaces/{ns}/deployments", "Service": "/api/v1/namespaces/{ns}/services",
              "ConfigMap": "/api/v1/namespaces/{ns}/configmaps", "Secret": "/api/v1/namespaces/{ns}/secrets",
              "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
              "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
              "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
              "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
              "PersistentVolumeClaim": "/api/v1/namespaces/{ns}/persistentvolumeclaims",
              "Pod": "/api/v1/namespaces/{ns}/pods"}
CLUSTER = {"ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
           "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
           "APIService": "/apis/apiregistration.k8s.io/v1/apiservices"}


def _release_objects(cp) -> dict[str, list[str]]:
    out = {k: _labelled(cp, p.format(ns=chart.NAMESPACE)) for k, p in NAMESPACED.items()}
    out.update({k: _labelled(cp, p) for k, p in CLUSTER.items()})
    out["RoleBinding(kube-system)"] = _labelled(cp, NAMESPACED["RoleBinding"].format(ns="kube-system"))
    return {k: sorted(v) for k, v in out.items() if v}


def test_helm_upgrade_keeps_the_certificate_and_uninstall_leaves_only_what_is_kept_on_purpose(node, release):
    cp = node.cp
    ca = cp.admin.json("/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.external.metrics.k8s.io")["spec"]["caBundle"]
    t0 = time.monotonic()
    chart.helm(release["helm"], cp, "upgrade", chart.RELEASE, str(chart.CHART), "-n", chart.NAMESPACE, "--reuse-values",
               "--set", "logFormat=json")
    args = [a for d in cp.admin.json(f"/apis/apps/v1/namespaces/{chart.NAMESPACE}/deployments")["items"]
            for c in d["spec"]["template"]["spec"]["containers"] for a in c.get("args", []) if a.startswith("--log-format")]
    assert args and set(args) == {"--log-format=json"}, args
    chart.wait_release_ready(node, PODS)
    wait_for("the metric after the upgrade", lambda: _metric(cp).status_code == 200, timeout=60)
    _log(f"helm upgrade (logFormat=json) -> every pod Ready again in {time.monotonic() - t0:.1f} s")
    _record("helm upgrade", ready_seconds=time.monotonic() - t0)
    assert cp.admin.json("/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.external.metrics.k8s.io")["spec"]["caBundle"] == ca

    before = _release_objects(cp)
    assert before["APIService"] == ["v1beta1.external.metrics.k8s.io"]
    chart.helm(release["helm"], cp, "uninstall", chart.RELEASE, "-n", chart.NAMESPACE, "--wait", "--timeout", "3m")
    left = wait_for("the release's pods gone", lambda: (lambda o: o if "Pod" not in o else None)(_release_objects(cp)),
                    timeout=120, detail=lambda: str(_release_objects(cp)))
    # kept on purpose (helm.sh/resource-policy: keep): the Redis users' passwords, so a reinstall
    # keeps the ACL its clients know, the trainer's checkpoints, and the key that signs them (a
    # reinstall must still verify the kept checkpoints)
    assert left == {"Secret": ["foresight-checkpoint-key", "foresight-redis-users"],
                    "PersistentVolumeClaim": ["foresight-trainer-checkpoints"]}, left
    unlabelled = {k: sorted(i["metadata"]["name"] for i in cp.admin.json(NAMESPACED[k].format(ns=chart.NAMESPACE))["items"]
                            if i["metadata"]["name"] not in ("kube-root-ca.crt", "default")) for k in ("ConfigMap", "Secret", "ServiceAccount")}
    _log(f"helm uninstall: left in {chart.NAMESPACE}: {unlabelled}")
    _record("helm uninstall", left=left)
    assert unlabelled == {"ConfigMap": [], "Secret": ["foresight-checkpoint-key", "foresight-redis-users"],
                          "ServiceAccount": []}, unlabelled
