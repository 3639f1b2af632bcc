"""A real KEDA beside foresight: KEDA v2.20.2's operator and metrics API server (built by
tests/cluster/build_keda.sh, run as processes out of cluster) against the real control plane of
tests/cluster, KEDA owning ``v1beta1.external.metrics.k8s.io``, and foresight's KEDA scaler as
``foresight serve --keda-port`` runs it: mutual TLS on loopback, reading forecasts from Redis.

The objects are docs/tasks/beside-keda.md's: its ClusterTriggerAuthentication as written, its
PredictiveAutoscaler (the operator writes the ScaledObject) and its hand-written ScaledObject,
with the scaler's address on loopback. No kubelet: replicas are read from the Deployments' scale
subresource, which is what KEDA and the HPA write.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import math
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import redis
import yaml

from adapter.keda import externalscaler_pb2_grpc as pb_grpc
from core.store import open_store
from kubeoperator.kube import KubeApi
from kubeoperator.runner import Operator, OperatorSettings
from kubeoperator.scaledobject import KedaTarget
from tests.adapter.helpers import ServeProcess, sample_forecast
from tests.cluster import keda
from tests.cluster.controlplane import COLD_BUILD_TIMEOUT_SECONDS, ROOT, ControlPlane, build_binaries, wait_for
from tests.e2e.conftest import apiservice_available, apiservice_detail, point_service_at_localhost, wire_apiservice
from tests.keda.conftest import Certs, channel, ref
from tests.keda.test_docs_recipe import doc_of
from tests.stack import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(COLD_BUILD_TIMEOUT_SECONDS)]

NS = "shop"
# KEDA's pollingInterval on the ScaledObjects the operator writes here: KEDA asks IsActive once
# when it starts a ScaledObject and then only this often, so a scale from zero sooner than this
# after that first poll came through StreamIsActive (the push), not a poll.
POLL_SECONDS = 300
STEP = 60.0
FOUNDATION_CRDS = sorted((ROOT / "manifests" / "crds").glob("*.yaml"))


@dataclass
class Env:
    cp: ControlPlane
    store: object
    serve: ServeProcess
    keda_port: int
    certs: Certs
    operator: keda.KedaOperator
    metrics: keda.KedaMetricsServer


def _apply(cp: ControlPlane, *docs: dict) -> None:
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs))


def _secret(ns: str, name: str, files: dict[str, Path]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
            "data": {k: base64.b64encode(Path(p).read_bytes()).decode() for k, p in files.items()}}


def _deployment(name: str, replicas: int) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1",
                                                           "resources": {"requests": {"cpu": "500m"}}}]}}}}


@pytest.fixture(scope="module")
def env(request, tmp_path_factory, certs, redis_server):
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman:  # a cold build prints its progress through pytest's capture
        with capman.global_and_fixture_disabled():
            bin_dir, keda_dir = build_binaries(), keda.build_keda()
    else:
        bin_dir, keda_dir = build_binaries(), keda.build_keda()
    d = tmp_path_factory.mktemp("keda-e2e")
    cp = ControlPlane(bin_dir=bin_dir, dir=tmp_path_factory.mktemp("keda-k8s"))
    serve, stop = None, threading.Event()
    thread = None
    try:
        cp.start()
        crds = FOUNDATION_CRDS + keda.crd_files(keda_dir)
        cp.kubectl("apply", "--server-side", *[a for p in crds for a in ("-f", str(p))])
        wait_for("CRDs Established", lambda: cp.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                                                         "crd", "--all", check=False).returncode == 0, timeout=90)
        for ns in (keda.NAMESPACE, "foresight", NS):
            cp.ensure_namespace(ns)
        # the chart's part: KEDA's client pair and the scaler's CA, in KEDA's namespace, and the
        # recipe's ClusterTriggerAuthentication handing them to KEDA
        _apply(cp, _secret(keda.NAMESPACE, "foresight-keda-client",
                           {"ca.crt": certs.server_ca, "tls.crt": certs.keda_crt, "tls.key": certs.keda_key}),
               doc_of("ClusterTriggerAuthentication"))
        # a clean store: forecasts earlier tests left under the same names would be served (and
        # pushed) for a moment before the scaler's cache re-reads them
        r = redis.Redis.from_url(redis_server.url)
        r.flushall()
        r.close()
        keda_port, port = free_port(), free_port()
        serve = ServeProcess(["--store", redis_server.url, "--cert-dir", str(d / "https"), "--cache-ttl", "0.5",
                              "--keda-port", str(keda_port), "--keda-cert", str(certs.server_crt),
                              "--keda-key", str(certs.server_key), "--keda-client-ca", str(certs.client_ca),
                              "--keda-allowed-names", "keda-operator"], port, d / "serve.log")
        serve.wait_ready()
        pki = keda.write_pki(d / "keda-pki")
        operator = keda.start_operator(cp, keda_dir, pki)
        metrics = keda.start_metrics_server(cp, keda_dir, pki, operator)
        point_service_at_localhost(cp, keda.NAMESPACE, keda.METRICS_SERVICE)
        wire_apiservice(cp, keda.EXTERNAL_METRICS_APISERVICE, metrics.port,
                        base64.b64encode(pki.serving_ca.read_bytes()).decode(),
                        service=(keda.NAMESPACE, keda.METRICS_SERVICE), group="external.metrics.k8s.io", version="v1beta1")
        wait_for("KEDA's APIService Available", lambda: apiservice_available(cp, keda.EXTERNAL_METRICS_APISERVICE),
                 timeout=120, detail=lambda: apiservice_detail(cp, keda.EXTERNAL_METRICS_APISERVICE) + metrics.proc.tail())
        # foresight's operator, as `foresight operator` runs it, with the scaler's loopback address
        _apply(cp, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foresight-workloads",
                                                                           "namespace": "foresight"},
                    "data": {"workloads.yaml": yaml.safe_dump({
                        "apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
                        "source": {"url": "prometheus://prometheus:9090"}, "store": {"url": "redis://redis:6379/0"},
                        "workloads": []})}})
        store = open_store(redis_server.url)
        op = Operator(KubeApi(str(cp.admin_kubeconfig)), store, OperatorSettings(
            resync_seconds=1.0, warmpool_configmap=None,
            keda=KedaTarget(scaler_address=f"127.0.0.1:{keda_port}", polling_interval_seconds=POLL_SECONDS)))
        thread = threading.Thread(target=op.run, args=(stop,), daemon=True)
        thread.start()
        sys.stderr.write(f"\n[keda] control plane, KEDA and foresight up (logs in {cp.dir}, {d})\n")
        yield Env(cp, store, serve, keda_port, certs, operator, metrics)
    finally:
        stop.set()
        if thread is not None:
            op.wake()
            thread.join(10)
        if serve is not None:
            serve.stop()
        cp.stop()  # KEDA's processes were spawned on it


# ---------------------------------------------------------------- reading the cluster


def replicas(cp: ControlPlane, name: str) -> int:
    return int(cp.admin.json(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}/scale")["spec"].get("replicas", 0))


def scaled_object(cp: ControlPlane, name: str) -> dict:
    return cp.admin.json(f"/apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects/{name}")


def condition(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), {})


def polled_inactive(so: dict) -> bool:
    """KEDA has asked the ScaledObject's foresight trigger and found it inactive. (Read from
    status.triggersActivity, which KEDA's scale loop writes: its Active condition can be left
    Unknown by a reconcile that ran beside that first poll.)"""
    activity = (so.get("status") or {}).get("triggersActivity") or {}
    return any(k.endswith(tuple(f"-{t['metadata']['workload']}" for t in so["spec"]["triggers"] if t["type"] == "external-push"))
               and v.get("isActive") is False for k, v in activity.items())


def so_detail(cp: ControlPlane, name: str) -> str:
    try:
        return f"ScaledObject status: {scaled_object(cp, name).get('status')}; keda-operator log:\n"
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        pa = cp.admin.get(f"/apis/foresight.dev/v1alpha1/namespaces/{NS}/predictiveautoscalers/{name}")
        return f"{exc!r}; PredictiveAutoscaler: {pa.status_code} {pa.text[-1500:]}\n"


def publish(store, workload: str, p90: tuple[float, ...], observed: float, age: float = 0.0) -> None:
    store.publish(sample_forecast(NS, workload, p90=p90, observed=observed, ready_pods=0, step=STEP, age=age))


def _ts(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()


# ---------------------------------------------------------------- the tests


def test_a_forecast_wakes_a_deployment_at_zero_by_push_before_any_demand(env):
    """The recipe's PredictiveAutoscaler (spec.scaler KEDA, minReplicas 0): the operator writes
    the ScaledObject, KEDA starts it, and while the forecast rises only beyond the activation
    lead (pod start-up + pollingInterval) the Deployment stays at 0. A new forecast whose rise
    falls inside the lead, with nothing observed, is pushed through StreamIsActive and KEDA
    scales the Deployment from zero before its next poll."""
    cp, store = env.cp, env.store
    lead = 60 + POLL_SECONDS  # the trigger's podStartupSeconds default + pollingIntervalSeconds
    quiet = int(lead // STEP) + 3  # zero forecast well past the lead: a rise after it must not wake anyone
    publish(store, "checkout", (0.0,) * quiet + (0.4,) * 6, observed=0.0)
    _apply(cp, _deployment("checkout", 0))
    pa = doc_of("PredictiveAutoscaler")
    assert pa["spec"]["scaler"] == "KEDA" and pa["spec"]["minReplicas"] == 0
    _apply(cp, pa)
    tail = env.operator.proc.tail
    so = wait_for("KEDA's first poll of the operator's ScaledObject: not active",
                  lambda: polled_inactive(o := scaled_object(cp, "checkout")) and o,
                  timeout=120, detail=lambda: so_detail(cp, "checkout") + tail())
    assert condition(so, "Ready").get("status") == "True", so.get("status")
    trigger = next(t for t in so["spec"]["triggers"] if t["type"] == "external-push")
    assert trigger["metadata"]["scalerAddress"] == f"127.0.0.1:{env.keda_port}"
    assert so["spec"]["minReplicaCount"] == 0 and so["spec"]["pollingInterval"] == POLL_SECONDS
    assert replicas(cp, "checkout") == 0
    started = _ts(so["metadata"]["creationTimestamp"])

    # the morning: the forecast rises within the lead; observed demand is still 0
    publish(store, "checkout", (0.4,) * 12, observed=0.0)
    published = time.time()
    wait_for("KEDA scaled shop/checkout from zero", lambda: replicas(cp, "checkout") >= 1, timeout=120,
             interval=0.2, detail=lambda: so_detail(cp, "checkout") + tail())
    woke = time.time()
    # KEDA's next poll is POLL_SECONDS after its first: only the push can have woken it this soon
    assert woke - started < POLL_SECONDS - 10, (woke - started, woke - published)
    sys.stderr.write(f"\n[keda] scaled from zero {woke - published:.1f} s after the forecast was published\n")
    status = cp.admin.json(f"/apis/foresight.dev/v1alpha1/namespaces/{NS}/predictiveautoscalers/checkout")["status"]
    assert status["scaledObjectName"] == "checkout" and status["hpaName"] == "keda-hpa-checkout"


def test_keda_with_a_client_certificate_the_chart_did_not_issue_is_refused(env):
    """A ScaledObject whose TriggerAuthentication carries a client pair from another CA gets no
    answer from the scaler: KEDA reports its trigger failing and leaves the Deployment at 0,
    although the same forecast read with the chart's pair would activate it."""
    cp, certs = env.cp, env.certs
    publish(env.store, "intruder", (0.4,) * 12, observed=0.0)
    _apply(cp, _deployment("intruder", 0),
           _secret(NS, "intruder-tls", {"ca.crt": certs.server_ca, "tls.crt": certs.other_crt, "tls.key": certs.other_key}),
           {"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
            "metadata": {"name": "intruder", "namespace": NS},
            "spec": {"secretTargetRef": [{"parameter": p, "name": "intruder-tls", "key": k} for p, k in
                                         (("caCert", "ca.crt"), ("tlsClientCert", "tls.crt"), ("tlsClientKey", "tls.key"))]}},
           recipe_scaled_object(env, "intruder", auth={"name": "intruder", "kind": "TriggerAuthentication"},
                                pollingInterval=2))
    so = wait_for("KEDA reports the trigger failing (Ready False)",
                  lambda: condition(o := scaled_object(cp, "intruder"), "Ready").get("status") == "False" and o,
                  timeout=120, detail=lambda: so_detail(cp, "intruder") + env.operator.proc.tail())
    # the scaler closes the connection once it has seen the client certificate
    refused = env.operator.scaler_errors(NS, "intruder")
    assert refused and all("code = Unavailable" in line for line in refused), refused
    assert replicas(cp, "intruder") == 0, so.get("status")
    assert env.operator.scaler_errors(NS, "checkout") == []  # KEDA with the chart's pair: never refused
    # the forecast alone would have woken it: the chart's pair gets "active" for the same trigger
    chart = channel(env.keda_port, certs, (certs.keda_crt, certs.keda_key))
    meta = recipe_scaled_object(env, "intruder")["spec"]["triggers"][0]["metadata"]
    wait_for("the scaler answering the chart's pair 'active' for the intruder's trigger",  # the cache re-reads in the background
             lambda: pb_grpc.ExternalScalerStub(chart).IsActive(ref(NS, "intruder", **meta), timeout=10).result, timeout=30)
    chart.close()
    anonymous = channel(env.keda_port, certs, None)  # and no certificate at all is refused in the handshake
    with pytest.raises(grpc.RpcError) as exc:
        pb_grpc.ExternalScalerStub(anonymous).IsActive(ref(NS, "intruder", **meta), timeout=10)
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    anonymous.close()


def recipe_scaled_object(env: Env, workload: str, auth: dict | None = None, **spec) -> dict:
    """docs/tasks/beside-keda.md's hand-written ScaledObject for ``workload``, the scaler on loopback."""
    so = copy.deepcopy(doc_of("ScaledObject"))
    so["metadata"]["name"] = workload
    so["spec"]["scaleTargetRef"]["name"] = workload
    so["spec"].update(spec)
    trig = so["spec"]["triggers"][0]
    trig["metadata"].update(scalerAddress=f"127.0.0.1:{env.keda_port}", workload=workload)
    if auth:
        trig["authenticationRef"] = auth
    return so


def hpa(cp: ControlPlane, name: str) -> dict:
    return cp.admin.json(f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/keda-hpa-{name}")


def running(env: Env, workload: str, level: float, **spec) -> dict:
    """A Deployment at 1 replica under the recipe's ScaledObject, foresight serving ``level``
    cores for it, once KEDA's HPA reads that value through KEDA's APIService."""
    cp = env.cp
    so = recipe_scaled_object(env, workload, **{"minReplicaCount": 1, "maxReplicaCount": 10, "pollingInterval": 2, **spec})
    publish(env.store, workload, (level,) * 12, observed=level)
    _apply(cp, _deployment(workload, 1), so)
    wait_for(f"keda-hpa-{workload} reading the served value through KEDA's APIService",
             lambda: condition(hpa(cp, workload), "ScalingActive").get("status") == "True", timeout=120,
             detail=lambda: str(hpa(cp, workload).get("status")) + env.metrics.proc.tail())
    return so


def test_keda_scales_a_running_deployment_on_the_served_value_through_its_own_apiservice(env):
    """1 -> N: the HPA KEDA made reads foresight's served value through KEDA's metrics API server
    and the operator's metrics service, and sizes the Deployment by the recipe's target."""
    cp = env.cp
    so = running(env, "report", 0.3)  # below one pod's target: 1 replica
    assert replicas(cp, "report") == 1
    target = float(so["spec"]["triggers"][0]["metadata"]["targetValue"])  # cores per pod (AverageValue)
    publish(env.store, "report", (1.0,) * 12, observed=0.3)
    want = math.ceil(1.0 / target)
    wait_for(f"the HPA scales shop/report to {want}", lambda: replicas(cp, "report") == want, timeout=120,
             detail=lambda: str(hpa(cp, "report").get("status")))


def test_a_scaler_with_nothing_to_serve_gets_kedas_fallback_replicas(env):
    """The scaler is up but has no value (the forecast stale and its observation too old, nothing
    observed directly): GetMetricSpec still answers, GetMetrics answers UNAVAILABLE, and after
    fallback.failureThreshold such reads KEDA serves the HPA its fallback replicas."""
    cp = env.cp
    running(env, "lapse", 0.3, fallback={"failureThreshold": 3, "replicas": 4})
    publish(env.store, "lapse", (0.3,) * 12, observed=0.3, age=2000.0)  # stale, its last sample 2000 s old
    lapsed = time.time()
    wait_for("KEDA's fallback replicas", lambda: replicas(cp, "lapse") == 4, timeout=120,
             detail=lambda: so_detail(cp, "lapse") + str(hpa(cp, "lapse").get("status")))
    sys.stderr.write(f"\n[keda] fallback replicas {time.time() - lapsed:.1f} s after the scaler lost its value\n")
    assert condition(scaled_object(cp, "lapse"), "Fallback").get("status") == "True"


def test_when_the_scaler_is_unreachable_keda_holds_the_replicas_and_its_fallback_does_not_apply(env):
    """foresight's scaler stops. KEDA 2.20 asks an external scaler for the metric spec before it
    reads a metric or applies ``fallback``, so with the scaler gone neither happens: the HPA of a
    running Deployment cannot read its metric and holds its replicas, with fallback or without;
    KEDA does not scale it to zero while the trigger fails, also past its cooldownPeriod; and one
    at zero stays at zero. Runs last: it stops the scaler."""
    cp, op = env.cp, env.operator
    fallback = {"failureThreshold": 3, "replicas": 4}
    running(env, "held", 0.3, fallback=fallback)
    running(env, "steady", 0.3, minReplicaCount=0, cooldownPeriod=5)
    publish(env.store, "nightly", (0.0,) * 12, observed=0.0)
    _apply(cp, _deployment("nightly", 0), recipe_scaled_object(env, "nightly", pollingInterval=2, fallback=fallback))
    wait_for("KEDA polled shop/nightly: not active", lambda: polled_inactive(scaled_object(cp, "nightly")), timeout=120,
             detail=lambda: so_detail(cp, "nightly") + op.proc.tail())
    watched = ("held", "steady", "nightly")
    assert [replicas(cp, w) for w in watched] == [1, 1, 0]
    checkout_before = replicas(cp, "checkout")
    before = {w: op.scaled_object_errors(NS, w) for w in watched}

    env.serve.stop()  # the scaler becomes unreachable
    # polled every 2 s: more than 5 failed polls of each is past steady's 5 s cooldownPeriod and
    # past the fallback's failureThreshold of 3
    for w in watched:
        wait_for(f"KEDA counting failed polls of shop/{w}", lambda w=w: op.scaled_object_errors(NS, w) > before[w] + 5,
                 timeout=120, detail=lambda w=w: so_detail(cp, w) + op.proc.tail())
    for w in ("held", "checkout"):
        wait_for(f"keda-hpa-{w} reports the failed read", lambda w=w: condition(hpa(cp, w), "ScalingActive").get(
            "status") == "False", timeout=120, detail=lambda w=w: str(hpa(cp, w).get("status")))
    assert [replicas(cp, w) for w in watched] == [1, 1, 0]
    assert replicas(cp, "checkout") == checkout_before
    assert condition(scaled_object(cp, "held"), "Fallback").get("status") != "True"
