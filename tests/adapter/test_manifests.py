"""The adapter manifests and the example HPA validate against the kubernetes client's models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from adapter.cli import parse_allowed_names

ROOT = Path(__file__).resolve().parents[2]
FILES = (sorted((ROOT / "manifests" / "adapter").glob("*.yaml")) + [ROOT / "manifests" / "hpa-example.yaml"]
         + [ROOT / "manifests" / "forecaster" / "trainer.yaml"])
TYPES = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("apiregistration.k8s.io/v1", "APIService"): "V1APIService",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
}


def documents():
    out = []
    for f in FILES:
        for i, doc in enumerate(yaml.safe_load_all(f.read_text())):
            if doc is not None:
                out.append((f"{f.relative_to(ROOT)}#{i}", doc))
    return out


DOCS = documents()
BY_KIND = {}
for _id, _doc in DOCS:
    BY_KIND.setdefault(_doc["kind"], []).append(_doc)


def _normalise(x):
    """Quantities and int-or-string values come back as strings; compare loosely there."""
    if isinstance(x, dict):
        return {k: _normalise(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_normalise(v) for v in x]
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return str(x)
    return x


@pytest.mark.parametrize("where, doc", DOCS, ids=[d[0] for d in DOCS])
def test_every_document_deserialises_into_its_model_without_losing_a_field(where, doc):
    api = k8s.ApiClient()
    kind = TYPES.get((doc.get("apiVersion"), doc.get("kind")))
    assert kind, f"{where}: unexpected {doc.get('apiVersion')}/{doc.get('kind')}"
    obj = api.deserialize(json.dumps(doc), kind, "application/json")
    assert obj.metadata.name
    back = api.sanitize_for_serialization(obj)
    # an unknown or misspelled field is dropped by the model: the round trip shows it
    assert _normalise(back) == _normalise(doc), where


def test_the_adapter_deployment_has_two_replicas_probes_and_resources():
    (dep,) = [d for d in BY_KIND["Deployment"] if d["metadata"]["name"] == "foresight-adapter"]
    assert dep["spec"]["replicas"] == 2
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][0] == "serve"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    # every option the manifest passes is one `foresight serve` accepts
    from foresight.cli import build_parser

    opts = build_parser().parse_args(c["args"])
    assert opts.workers == 2 and opts.port == 8443
    assert opts.requestheader_ca and opts.allowed_names.startswith("@")


def test_the_service_pdb_and_apiservice_point_at_the_adapter_pods():
    (svc,) = [s for s in BY_KIND["Service"] if s["metadata"]["name"] == "foresight-adapter"]
    (dep,) = [d for d in BY_KIND["Deployment"] if d["metadata"]["name"] == "foresight-adapter"]
    (pdb,) = BY_KIND["PodDisruptionBudget"]
    (apisvc,) = BY_KIND["APIService"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["minAvailable"] == 1
    assert apisvc["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"
    assert apisvc["spec"]["group"] == "external.metrics.k8s.io" and apisvc["spec"]["version"] == "v1beta1"
    assert apisvc["spec"]["service"] == {"name": "foresight-adapter", "namespace": "foresight", "port": 443}
    assert svc["spec"]["ports"][0]["port"] == 443


def test_rbac_grants_auth_delegation_the_auth_reader_and_hpa_access():
    refs = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in BY_KIND["ClusterRoleBinding"] + BY_KIND["RoleBinding"]}
    assert ("ClusterRole", "system:auth-delegator") in refs
    assert ("Role", "extension-apiserver-authentication-reader") in refs
    (reader,) = [b for b in BY_KIND["RoleBinding"] if b["roleRef"]["name"] == "extension-apiserver-authentication-reader"]
    assert reader["metadata"]["namespace"] == "kube-system"
    hpa = [b for b in BY_KIND["ClusterRoleBinding"] if any(s["name"] == "horizontal-pod-autoscaler" for s in b["subjects"])]
    assert hpa and hpa[0]["roleRef"]["name"] in {r["metadata"]["name"] for r in BY_KIND["ClusterRole"]}


def test_the_example_hpa_keeps_a_reactive_cpu_floor_beside_the_prediction():
    (hpa,) = BY_KIND["HorizontalPodAutoscaler"]
    (cpu,) = [m for m in hpa["spec"]["metrics"] if m["type"] == "Resource"]
    assert cpu["resource"] == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}


def test_the_example_hpa_uses_the_predicted_ratio_at_0_7_with_a_30_s_scale_down_window():
    (hpa,) = BY_KIND["HorizontalPodAutoscaler"]
    (m,) = [m for m in hpa["spec"]["metrics"] if m["type"] == "External"]
    assert m["type"] == "External"
    assert m["external"]["metric"]["name"] == "predicted_cpu_load_ratio"
    assert m["external"]["target"] == {"type": "Value", "value": "700m"}
    # the replay measures this window (replay.simulate.PREDICTIVE_SCALE_DOWN_WINDOW_SECONDS)
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 30
    # the selector matches the labels the adapter serves for that Deployment
    from adapter.selectors import parse_selector
    from adapter.state import labels_of

    sel = ",".join(f"{k}={v}" for k, v in m["external"]["metric"]["selector"]["matchLabels"].items())
    target = hpa["spec"]["scaleTargetRef"]["name"]
    assert parse_selector(sel).matches(labels_of(f"{hpa['metadata']['namespace']}/{target}", None))


def test_allowed_names_are_read_from_the_configmap_json(tmp_path):
    f = tmp_path / "names.json"
    f.write_text('["front-proxy-client","aggregator"]')
    assert parse_allowed_names(f"@{f}") == ["front-proxy-client", "aggregator"]
    assert parse_allowed_names("a, b") == ["a", "b"]


def test_the_check_catches_a_misspelled_field_and_a_missing_required_one():
    api = k8s.ApiClient()
    typo = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"selectr": {"a": "b"}}}
    obj = api.deserialize(json.dumps(typo), "V1Service", "application/json")
    assert _normalise(api.sanitize_for_serialization(obj)) != _normalise(typo)
    with pytest.raises(Exception, match="selector"):
        api.deserialize(json.dumps({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                                    "spec": {"template": {}}}), "V1Deployment", "application/json")


def _pod_specs():
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in BY_KIND["Deployment"]]


@pytest.mark.parametrize("name, pod", _pod_specs(), ids=[n for n, _ in _pod_specs()])
def test_every_workload_meets_the_restricted_pod_security_standard(name, pod):
    """The checks of Pod Security Admission's "restricted" profile that a manifest decides."""
    psc = pod.get("securityContext") or {}
    assert psc.get("runAsNonRoot") is True, f"{name}: runAsNonRoot"
    assert (psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault", f"{name}: seccompProfile"
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    assert not any("hostPath" in v for v in pod.get("volumes", []))
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext") or {}
        where = f"{name}/{c['name']}"
        assert sc.get("allowPrivilegeEscalation") is False, where
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
        assert not sc.get("capabilities", {}).get("add"), where
        assert not sc.get("privileged"), where
        assert sc.get("runAsUser", psc.get("runAsUser", 1)) != 0, where
        assert sc.get("readOnlyRootFilesystem") is True, where  # beyond restricted: nothing writes the image


def test_network_policies_admit_only_foresight_to_redis_and_select_the_right_pods():
    pols = {p["metadata"]["name"]: p for p in BY_KIND["NetworkPolicy"]}
    (redis,) = [d for d in BY_KIND["Deployment"] if d["metadata"]["name"] == "foresight-redis"]
    (adapter,) = [d for d in BY_KIND["Deployment"] if d["metadata"]["name"] == "foresight-adapter"]
    assert pols["foresight-redis"]["spec"]["podSelector"]["matchLabels"].items() <= redis["spec"]["template"]["metadata"]["labels"].items()
    assert pols["foresight-adapter"]["spec"]["podSelector"]["matchLabels"].items() <= adapter["spec"]["template"]["metadata"]["labels"].items()
    (rule,) = pols["foresight-redis"]["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6379}]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # same namespace only, no ipBlock, no other namespace
    exprs = {e["key"]: set(e["values"]) for e in peer["podSelector"]["matchExpressions"]}
    assert exprs == {"app.kubernetes.io/name": {"foresight"},
                     "app.kubernetes.io/component": {"adapter", "trainer", "warmpool"}}
    ports = {p["port"] for r in pols["foresight-adapter"]["spec"]["ingress"] for p in r["ports"]}
    assert ports == {8443, 8444}


def test_the_redis_acl_the_manifest_renders_lets_the_trainer_write_and_readers_only_read(tmp_path):
    """The init container's script, run by a real shell, feeds a real redis-server started with
    the manifest's arguments: TLS only, verified against the CA, as the clients' URLs say."""
    import subprocess

    from adapter.tls import write_ca, write_signed
    from core.store import StorePermissionError, make_forecast, open_store
    from tests import stack

    if not stack.have("redis-server"):
        pytest.skip("redis-server is not installed; run `make deps`")
    (redis,) = [d for d in BY_KIND["Deployment"] if d["metadata"]["name"] == "foresight-redis"]
    (init,) = redis["spec"]["template"]["spec"]["initContainers"]
    script = init["command"][2].replace("/users/", f"{tmp_path}/users/").replace("/acl/", f"{tmp_path}/acl/")
    for d in ("users", "acl", "tls"):
        (tmp_path / d).mkdir()
    for user in ("trainer", "adapter", "warmpool"):
        (tmp_path / "users" / user).write_text(f"{user}-pw-42")
    subprocess.run(["/bin/sh", "-c", script], check=True)
    ca_crt, _, ca_cert, ca_key = write_ca(tmp_path / "tls")
    crt, key = write_signed(tmp_path / "tls", "redis", ca_cert, ca_key, cn="foresight-redis", client=False,
                            sans=("127.0.0.1",))
    (tmp_path / "tls" / "tls.crt").write_bytes(crt.read_bytes())
    (tmp_path / "tls" / "tls.key").write_bytes(key.read_bytes())
    (tmp_path / "tls" / "ca.crt").write_bytes(ca_crt.read_bytes())
    port = stack.free_port()
    (main,) = redis["spec"]["template"]["spec"]["containers"]
    args = [a.replace("/acl/", f"{tmp_path}/acl/").replace("/tls/", f"{tmp_path}/tls/") for a in main["args"]]
    assert args[args.index("--port") + 1] == "0" and args[args.index("--tls-port") + 1] == "6379"  # no plaintext port
    args[args.index("--tls-port") + 1] = str(port)
    proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        stack._wait_port(port, "redis-server")
        fc = make_forecast("shop/checkout", origin=0, step_seconds=60, mean=[1.0], model="naive")
        url = "rediss://{u}@127.0.0.1:%d/0?password_file=%s/users/{u}&ca_file=%s" % (port, tmp_path, tmp_path / "tls" / "ca.crt")
        open_store(url.format(u="trainer")).publish(fc)
        assert open_store(url.format(u="adapter")).latest("shop/checkout").generation == 1
        for reader in ("adapter", "warmpool"):
            with pytest.raises(StorePermissionError):
                open_store(url.format(u=reader)).publish(fc)
        with pytest.raises(Exception):
            open_store(f"rediss://127.0.0.1:{port}/0?ca_file={ca_crt}").latest("shop/checkout")  # the default user is off
        with pytest.raises(Exception):  # plain TCP on the TLS port: refused
            open_store(f"redis://trainer@127.0.0.1:{port}/0?password_file={tmp_path}/users/trainer").latest("shop/checkout")
        other_ca, _, _, _ = write_ca(tmp_path / "other", cn="someone-else")
        with pytest.raises(Exception):  # a server the client's CA did not sign: refused
            open_store(f"rediss://trainer@127.0.0.1:{port}/0?password_file={tmp_path}/users/trainer&ca_file={other_ca}").latest("shop/checkout")
    finally:
        proc.terminate()
        proc.wait(5)


def test_every_redis_client_of_the_manifests_verifies_redis_with_the_mounted_ca():
    urls = {}
    warmpool = [d for d in yaml.safe_load_all((ROOT / "manifests" / "warmpool" / "deployment.yaml").read_text())
                if d and d["kind"] == "Deployment"]
    for d in BY_KIND["Deployment"] + warmpool:
        pod = d["spec"]["template"]["spec"]
        for c in pod["containers"]:
            for a in c.get("args") or []:
                if "--store=" in a:
                    urls[d["metadata"]["name"]] = (a.split("--store=", 1)[1], pod)
    (cm,) = [c for c in BY_KIND["ConfigMap"] if c["metadata"]["name"] == "foresight-workloads"]
    (trainer,) = [d for d in BY_KIND["Deployment"] if d["metadata"]["name"] == "foresight-trainer"]
    urls["foresight-trainer"] = (yaml.safe_load(cm["data"]["workloads.yaml"])["store"]["url"], trainer["spec"]["template"]["spec"])
    assert set(urls) >= {"foresight-adapter", "foresight-warmpool", "foresight-trainer"}
    for name, (url, pod) in urls.items():
        assert url.startswith("rediss://") and "ca_file=/var/run/secrets/redis/ca.crt" in url, name
        (vol,) = [v for v in pod["volumes"] if v["name"] == "redis-password"]
        srcs = {s["secret"]["name"]: s["secret"]["items"] for s in vol["projected"]["sources"]}
        assert srcs["foresight-redis-tls"] == [{"key": "ca.crt", "path": "ca.crt"}], name


def test_the_trainer_config_names_its_redis_user_and_password_file():
    (cm,) = [c for c in BY_KIND["ConfigMap"] if c["metadata"]["name"] == "foresight-workloads"]
    cfg = yaml.safe_load(cm["data"]["workloads.yaml"])
    assert cfg["store"]["url"].startswith("rediss://trainer@")
    assert "password_file=/var/run/secrets/redis/password" in cfg["store"]["url"]
    (trainer,) = [d for d in BY_KIND["Deployment"] if d["metadata"]["name"] == "foresight-trainer"]
    mounts = {m["mountPath"] for m in trainer["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert "/var/run/secrets/redis" in mounts


def test_namespace_viewers_may_read_foresights_view_of_their_namespace():
    (viewer,) = [r for r in BY_KIND["ClusterRole"] if r["metadata"]["name"] == "foresight-forecast-viewer"]
    assert viewer["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    from adapter.authz import FORECASTS_RESOURCE
    from adapter.settings import METRICS

    (rule,) = viewer["rules"]
    assert set(rule["resources"]) == {FORECASTS_RESOURCE, *METRICS} and set(rule["verbs"]) == {"get", "list"}
